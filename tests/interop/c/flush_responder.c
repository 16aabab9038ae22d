/*
 * flush_responder.c - the guest's side of the "atomic_write+flush" interop pair: the
 * kernel's rxe0 as the responder of rdma-emu's ATOMIC_WRITE and FLUSH.
 *
 *   flush_responder DEVICE GID_INDEX TCP_PORT CONNECTIONS
 *
 * Compiled in the guest (Debian 12: rdma-core v44 headers, which lack the FLUSH access
 * flags; their values, 1 << 8 and 1 << 9, are those of rdma-core v57's verbs.h and the
 * kernel's ib_uverbs_access_flags). It
 *   1. tries to register a region with IBV_ACCESS_FLUSH_PERSISTENT and prints the result
 *      (`persistent_mr ok` or `persistent_mr errno N`): rxe allows it only on persistent
 *      memory pages;
 *   2. registers a 4 KiB region, filled with 0xa5, with local write, remote read/write/
 *      atomic and FLUSH_GLOBAL (plus FLUSH_PERSISTENT when step 1 worked);
 *   3. serves CONNECTIONS TCP connections one after the other, each with a new RC QP on
 *      that region (QP access: the same rights, FLUSH_PERSISTENT too unless rxe refuses it:
 *      `qp_access 0x...`; max_dest_rd_atomic 4, as rxe needs a responder resource for
 *      ATOMIC_WRITE and FLUSH): sends `qpn psn gid rkey addr len persistent(0|1)`, reads
 *      the host's `qpn psn gid PHASE`, moves the QP to RTR and RTS, sends `ready`, waits
 *      for `done`, prints `[PHASE] mr[OFF]=HEX` for each 8-byte word of the region's first
 *      256 bytes that is no longer 0xa5 filler, `[PHASE] mr_unchanged N` (words still
 *      filler) and `[PHASE] qp_state S`, sends `bye` and destroys the QP.
 * Exit status 0 when all of that worked.
 */
#include "exchange.h"
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define REGION 4096
#define ACC_FLUSH_GLOBAL (1 << 8)
#define ACC_FLUSH_PERSISTENT (1 << 9)

/* One connection: a new QP on the region, the exchange, the host's operations, the report. */
static void serve(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_mr *mr, uint8_t *buf, int base,
		  int persistent, struct ibv_port_attr *pattr, union ibv_gid *gid, int gid_index,
		  int ls)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	if (!qp)
		FAIL("ibv_create_qp: %s", strerror(errno));
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = base | ACC_FLUSH_PERSISTENT };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	if (ibv_modify_qp(qp, &a, mask)) {
		a.qp_access_flags = base;
		if (ibv_modify_qp(qp, &a, mask))
			FAIL("modify to INIT: %s", strerror(errno));
	}
	printf("qp_access 0x%x\n", a.qp_access_flags);

	int fd = accept(ls, NULL, NULL);
	if (fd < 0)
		FAIL("accept: %s", strerror(errno));

	uint32_t psn = 0x2a2a2a;
	char line[256], hex[33];
	gid_hex(gid, hex);
	snprintf(line, sizeof(line), "%u %u %s %u %" PRIu64 " %u %d\n", qp->qp_num, psn, hex,
		 mr->rkey, (uint64_t)(uintptr_t)buf, REGION, persistent);
	send_line(fd, line);
	unsigned rqpn, rpsn;
	char rgid[64], phase[32];
	union ibv_gid dgid;
	if (read_line(fd, line, sizeof(line)) ||
	    sscanf(line, "%u %u %63s %31s", &rqpn, &rpsn, rgid, phase) != 4 || gid_parse(rgid, &dgid))
		FAIL("the host's parameters: '%s'", line);
	connect_rc(qp, pattr->active_mtu, rqpn, rpsn, psn, &dgid, gid_index, 4, 1);
	printf("[%s] connected: local qpn %u, remote qpn %u psn %u\n", phase, qp->qp_num, rqpn, rpsn);
	send_line(fd, "ready\n");

	if (read_line(fd, line, sizeof(line)))
		FAIL("[%s] the host closed the connection before its done", phase);
	if (strcmp(line, "done"))
		FAIL("waiting for the host's done: '%s'", line);
	int unchanged = 0;
	for (int off = 0; off < 256; off += 8) {
		static const uint8_t filler[8] = { 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5 };
		if (!memcmp(buf + off, filler, 8)) {
			unchanged++;
			continue;
		}
		printf("[%s] mr[%d]=", phase, off);
		for (int i = 0; i < 8; i++)
			printf("%02x", buf[off + i]);
		putchar('\n');
	}
	printf("[%s] mr_unchanged %d\n", phase, unchanged);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	if (!ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi))
		printf("[%s] qp_state %d\n", phase, qa.qp_state);
	send_line(fd, "bye\n");
	close(fd);
	if (ibv_destroy_qp(qp))
		FAIL("ibv_destroy_qp: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	if (argc != 5)
		FAIL("usage: flush_responder DEVICE GID_INDEX TCP_PORT CONNECTIONS");
	int gid_index = atoi(argv[2]), port = atoi(argv[3]), connections = atoi(argv[4]);
	setvbuf(stdout, NULL, _IOLBF, 0);

	struct ibv_port_attr pattr;
	union ibv_gid gid;
	struct ibv_context *ctx = open_named(argv[1], gid_index, &pattr, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq)
		FAIL("pd/cq: %s", strerror(errno));

	uint8_t *buf = aligned_alloc(4096, REGION);
	if (!buf)
		FAIL("aligned_alloc");
	memset(buf, 0xa5, REGION);
	int base = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		   IBV_ACCESS_REMOTE_ATOMIC | ACC_FLUSH_GLOBAL;
	int persistent = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, REGION, base | ACC_FLUSH_PERSISTENT);
	if (mr) {
		persistent = 1;
		printf("persistent_mr ok\n");
	} else {
		printf("persistent_mr errno %d (%s)\n", errno, strerror(errno));
		mr = ibv_reg_mr(pd, buf, REGION, base);
		if (!mr)
			FAIL("ibv_reg_mr with FLUSH_GLOBAL: %s", strerror(errno));
	}
	printf("mr_access 0x%x\n", base | (persistent ? ACC_FLUSH_PERSISTENT : 0));

	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (bind(ls, (struct sockaddr *)&sin, sizeof(sin)) || listen(ls, 1))
		FAIL("listen on %d: %s", port, strerror(errno));
	for (int c = 0; c < connections; c++)
		serve(pd, cq, mr, buf, base, persistent, &pattr, &gid, gid_index, ls);
	close(ls);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return 0;
}
