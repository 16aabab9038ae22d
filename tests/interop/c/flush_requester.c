/*
 * flush_requester.c - rdma-emu's side of the "atomic_write+flush" interop pair: posts
 * ATOMIC_WRITE and FLUSH (ibv_wr_atomic_write, ibv_wr_flush) to the guest kernel's rxe0,
 * which serves them (flush_responder.c).
 *
 *   flush_requester DEVICE GID_INDEX GUEST_IP TCP_PORT PHASE
 *
 * Built against rdma-core v57+ headers (ibv_wr_flush and the FLUSH names came with v57;
 * Debian 12's v44 lacks them) and run on the shim. One TCP connection, one RC QP: the
 * exchange of QP numbers, PSNs, GIDs and the guest's rkey/address (PHASE goes along), then
 * each work request signalled and its completion checked (status, opcode):
 *   PHASE atomic_write
 *     atomic_write   ATOMIC_WRITE of 8 bytes to the region's offset 64
 *     read_back      RDMA READ of offset 64: the 8 bytes ATOMIC_WRITE put there
 *     atomic_write2  ATOMIC_WRITE to offset 136 and read_back2 of it, posted together
 *   PHASE flush
 *     flush_range    FLUSH, placement type GLOBAL, selectivity level range: offset 0, 128 bytes
 *     flush_mr       FLUSH GLOBAL of the whole region (level MR: no address, no length)
 *     flush_range2   FLUSH GLOBAL of [128, 256)
 *     persistent     FLUSH with placement type PERSISTENT of [0, 128): it must succeed when
 *                    the guest registered its region with FLUSH_PERSISTENT; otherwise rxe
 *                    must refuse it (the region lacks that right: IBV_WC_REM_ACCESS_ERR
 *                    here); it comes last since that error ends the connection
 *   PHASE flush-unanswered
 *     flush_range only, which must end in IBV_WC_RETRY_EXC_ERR: for a responder that drops
 *     every FLUSH (docs/interop.md, "Findings": Linux 6.12's rxe checks a FLUSH's ICRC over
 *     the wrong bytes)
 * Each prints `ok NAME ...`; then `done` goes to the guest and its `bye` is awaited, and
 * `all checks passed` ends the output. Exit status 0 only when every check passed.
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
#include <time.h>
#include <unistd.h>

static struct ibv_cq_ex *cq;

/* One completion, waited for up to 60 s (the guest runs under TCG). */
static void complete(uint64_t wr_id, enum ibv_wc_opcode opcode, enum ibv_wc_status want,
		     const char *what)
{
	struct ibv_poll_cq_attr attr = { 0 };
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int rc = ibv_start_poll(cq, &attr);
		if (rc == 0) {
			uint64_t id = cq->wr_id;
			enum ibv_wc_status st = cq->status;
			enum ibv_wc_opcode op = ibv_wc_read_opcode(cq);
			ibv_end_poll(cq);
			if (id != wr_id || st != want || (want == IBV_WC_SUCCESS && op != opcode))
				FAIL("%s: wr_id %" PRIu64 " status %s opcode %d; want wr_id %" PRIu64
				     " status %s opcode %d", what, id, ibv_wc_status_str(st), op, wr_id,
				     ibv_wc_status_str(want), opcode);
			printf("ok %s (%s)\n", what, ibv_wc_status_str(st));
			return;
		}
		if (rc != ENOENT)
			FAIL("ibv_start_poll: %d", rc);
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 60)
			FAIL("%s: no completion in 60 s", what);
		usleep(200);
	}
}

int main(int argc, char **argv)
{
	if (argc != 6)
		FAIL("usage: flush_requester DEVICE GID_INDEX GUEST_IP TCP_PORT PHASE");
	const char *phase = argv[5];
	if (strcmp(phase, "atomic_write") && strcmp(phase, "flush") && strcmp(phase, "flush-unanswered"))
		FAIL("PHASE: atomic_write, flush or flush-unanswered");
	setvbuf(stdout, NULL, _IOLBF, 0);
	int gid_index = atoi(argv[2]);

	struct ibv_port_attr pattr;
	union ibv_gid gid;
	struct ibv_context *ctx = open_named(argv[1], gid_index, &pattr, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq_init_attr_ex cattr = { .cqe = 16 };
	cq = ibv_create_cq_ex(ctx, &cattr);
	if (!pd || !cq)
		FAIL("pd/cq: %s", strerror(errno));
	uint8_t *local = aligned_alloc(4096, 4096);
	memset(local, 0, 4096);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!lmr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
	struct ibv_qp_init_attr_ex init = {
		.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq), .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_FLUSH |
				  IBV_QP_EX_WITH_RDMA_READ,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &init);
	if (!qp)
		FAIL("ibv_create_qp_ex: %s", strerror(errno));
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		FAIL("modify to INIT: %s", strerror(errno));

	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[4])) };
	if (inet_pton(AF_INET, argv[3], &sin.sin_addr) != 1)
		FAIL("bad address %s", argv[3]);
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)))
		FAIL("connect to %s:%s: %s", argv[3], argv[4], strerror(errno));
	char line[256], rgid[64];
	unsigned rqpn, rpsn, rkey, rlen;
	uint64_t raddr;
	int persistent;
	union ibv_gid dgid;
	if (read_line(fd, line, sizeof(line)) ||
	    sscanf(line, "%u %u %63s %u %" SCNu64 " %u %d", &rqpn, &rpsn, rgid, &rkey, &raddr, &rlen,
		   &persistent) != 7 || gid_parse(rgid, &dgid))
		FAIL("the guest's parameters: '%s'", line);
	printf("guest: qpn %u psn %u rkey 0x%x addr 0x%" PRIx64 " len %u persistent %d\n", rqpn, rpsn,
	       rkey, raddr, rlen, persistent);
	printf("host qpn %u\n", qp->qp_num);
	uint32_t psn = 0x151515;
	char hex[33];
	gid_hex(&gid, hex);
	snprintf(line, sizeof(line), "%u %u %s %s\n", qp->qp_num, psn, hex, phase);
	send_line(fd, line);
	connect_rc(qp, pattr.active_mtu, rqpn, rpsn, psn, &dgid, gid_index, 1, 4);
	if (read_line(fd, line, sizeof(line)) || strcmp(line, "ready"))
		FAIL("waiting for the guest's ready: '%s'", line);

	static const uint8_t v1[8] = { 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88 };
	static const uint8_t v2[8] = { 0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67 };
	qx->wr_flags = IBV_SEND_SIGNALED;

	if (!strcmp(phase, "atomic_write")) {
		ibv_wr_start(qx);
		qx->wr_id = 1;
		ibv_wr_atomic_write(qx, rkey, raddr + 64, v1);
		if (ibv_wr_complete(qx))
			FAIL("post atomic_write: %s", strerror(errno));
		complete(1, IBV_WC_ATOMIC_WRITE, IBV_WC_SUCCESS, "atomic_write");

		ibv_wr_start(qx);
		qx->wr_id = 2;
		ibv_wr_rdma_read(qx, rkey, raddr + 64);
		ibv_wr_set_sge(qx, lmr->lkey, (uintptr_t)local, 8);
		if (ibv_wr_complete(qx))
			FAIL("post read_back: %s", strerror(errno));
		complete(2, IBV_WC_RDMA_READ, IBV_WC_SUCCESS, "read_back");
		if (memcmp(local, v1, 8))
			FAIL("read_back: the 8 bytes at offset 64 are not the ATOMIC_WRITE's");
		printf("ok read_back matches\n");

		/* Posted together: the READ must see the ATOMIC_WRITE before it. */
		ibv_wr_start(qx);
		qx->wr_id = 3;
		ibv_wr_atomic_write(qx, rkey, raddr + 136, v2);
		qx->wr_id = 4;
		ibv_wr_rdma_read(qx, rkey, raddr + 136);
		ibv_wr_set_sge(qx, lmr->lkey, (uintptr_t)local + 8, 8);
		if (ibv_wr_complete(qx))
			FAIL("post atomic_write2+read_back2: %s", strerror(errno));
		complete(3, IBV_WC_ATOMIC_WRITE, IBV_WC_SUCCESS, "atomic_write2");
		complete(4, IBV_WC_RDMA_READ, IBV_WC_SUCCESS, "read_back2");
		if (memcmp(local + 8, v2, 8))
			FAIL("read_back2: the 8 bytes at offset 136 are not the ATOMIC_WRITE's");
		printf("ok read_back2 matches\n");
	} else if (!strcmp(phase, "flush")) {
		ibv_wr_start(qx);
		qx->wr_id = 5;
		ibv_wr_flush(qx, rkey, raddr, 128, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE);
		if (ibv_wr_complete(qx))
			FAIL("post flush_range: %s", strerror(errno));
		complete(5, IBV_WC_FLUSH, IBV_WC_SUCCESS, "flush_range global");

		ibv_wr_start(qx);
		qx->wr_id = 6;
		ibv_wr_flush(qx, rkey, 0, 0, IBV_FLUSH_GLOBAL, IBV_FLUSH_MR);
		qx->wr_id = 7;
		ibv_wr_flush(qx, rkey, raddr + 128, 128, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE);
		if (ibv_wr_complete(qx))
			FAIL("post flush_mr+flush_range2: %s", strerror(errno));
		complete(6, IBV_WC_FLUSH, IBV_WC_SUCCESS, "flush_mr global");
		complete(7, IBV_WC_FLUSH, IBV_WC_SUCCESS, "flush_range2 global");

		ibv_wr_start(qx);
		qx->wr_id = 8;
		ibv_wr_flush(qx, rkey, raddr, 128, IBV_FLUSH_PERSISTENT, IBV_FLUSH_RANGE);
		if (ibv_wr_complete(qx))
			FAIL("post flush persistent: %s", strerror(errno));
		complete(8, IBV_WC_FLUSH, persistent ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR,
			 persistent ? "flush_range persistent" : "flush_range persistent refused");
	} else {
		ibv_wr_start(qx);
		qx->wr_id = 5;
		ibv_wr_flush(qx, rkey, raddr, 128, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE);
		if (ibv_wr_complete(qx))
			FAIL("post flush_range: %s", strerror(errno));
		complete(5, IBV_WC_FLUSH, IBV_WC_RETRY_EXC_ERR, "flush_range global unanswered");
	}

	send_line(fd, "done\n");
	if (read_line(fd, line, sizeof(line)) || strcmp(line, "bye"))
		FAIL("waiting for the guest's bye: '%s'", line);
	printf("all checks passed\n");
	close(fd);
	return 0;
}
