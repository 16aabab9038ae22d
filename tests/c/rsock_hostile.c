/* A hostile rsocket peer, with raw librdmacm/verbs, against an rsocket server:
 *   rsock_hostile ADDR PORT outside|oversized
 * 1-3: connection private data that is short, of another version, or with a target SGL
 *      longer than the protocol's: each must be rejected.
 * 4:   a well-formed connection, then an RDMA WRITE into memory past the receive buffer
 *      the server granted (`outside`: must fail at the NIC, remote access error), or an
 *      RDMA WRITE WITH IMMEDIATE announcing 0x1fffffff bytes, far more than granted
 *      (`oversized`). Prints one line per step. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

struct conn_data {
	uint8_t version, flags;
	uint16_t credits;
	uint8_t reserved[3], iomap;
	uint64_t sgl_addr;
	uint32_t sgl_key, sgl_len;
	uint64_t buf_addr;
	uint32_t buf_key, buf_len;
} __attribute__((packed));

static struct rdma_addrinfo *res;
static uint8_t target[64], rbuf[1 << 16];

static struct rdma_cm_id *connect_with(const void *pd, uint8_t len, struct ibv_mr **tmr,
				       struct ibv_mr **rmr, struct conn_data *peer)
{
	struct ibv_qp_init_attr attr = { .cap = { 16, 16, 2, 1, 64 }, .sq_sig_all = 1 };
	struct rdma_conn_param param = { .private_data = pd, .private_data_len = len,
					 .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_id *id;

	if (rdma_create_ep(&id, res, NULL, &attr)) {
		perror("rdma_create_ep");
		exit(1);
	}
	if (tmr) {
		struct conn_data *c = (struct conn_data *)pd;

		*tmr = ibv_reg_mr(id->pd, target, sizeof(target),
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		*rmr = ibv_reg_mr(id->pd, rbuf, sizeof(rbuf),
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		c->sgl_addr = htobe64((uintptr_t)target);
		c->sgl_key = htobe32((*tmr)->rkey);
		c->buf_addr = htobe64((uintptr_t)rbuf);
		c->buf_key = htobe32((*rmr)->rkey);
	}
	if (rdma_connect(id, &param)) {
		if (tmr)
			perror("rdma_connect");
		rdma_destroy_ep(id);
		return NULL;
	}
	if (peer && id->event && id->event->param.conn.private_data_len >= sizeof(*peer))
		memcpy(peer, id->event->param.conn.private_data, sizeof(*peer));
	return id;
}

static int write_imm(struct rdma_cm_id *id, uint64_t addr, uint32_t rkey, uint32_t len,
		     int imm, uint32_t imm_data)
{
	static uint8_t src[4096];
	struct ibv_sge sge = { (uintptr_t)src, len, 0 };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .send_flags = IBV_SEND_INLINE },
			   *bad;
	struct ibv_wc wc;
	int n;

	wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
	wr.imm_data = htonl(imm_data);
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	if (len > 64) {
		struct ibv_mr *mr = ibv_reg_mr(id->pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
		sge.lkey = mr->lkey;
		wr.send_flags = 0;
	}
	if (ibv_post_send(id->qp, &wr, &bad))
		return -1;
	while ((n = rdma_get_send_comp(id, &wc)) == 0)
		;
	return n < 0 ? -1 : (int)wc.status;
}

int main(int argc, char **argv)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP };
	struct conn_data good = { .version = 1, .credits = htobe16(16),
				  .sgl_len = htobe32(2), .buf_len = htobe32(1 << 15) };
	struct conn_data bad, peer;
	struct ibv_mr *tmr, *rmr;
	struct rdma_cm_id *id;
	int st;

	if (argc != 4 || rdma_getaddrinfo(argv[1], argv[2], &hints, &res)) {
		fprintf(stderr, "usage: %s ADDR PORT outside|oversized\n", argv[0]);
		return 2;
	}
	id = connect_with(&good, 10, NULL, NULL, NULL);
	printf("short private data: %s\n", id ? "accepted" : "refused");
	bad = good;
	bad.version = 2;
	id = connect_with(&bad, sizeof(bad), NULL, NULL, NULL);
	printf("version 2: %s\n", id ? "accepted" : "refused");
	bad = good;
	bad.sgl_len = htobe32(1000);
	id = connect_with(&bad, sizeof(bad), NULL, NULL, NULL);
	printf("target sgl of 1000 entries: %s\n", id ? "accepted" : "refused");

	bad = good;
	id = connect_with(&bad, sizeof(bad), &tmr, &rmr, &peer);
	if (!id) {
		printf("well-formed: refused\n");
		return 1;
	}
	printf("well-formed: accepted\n");
	if (!strcmp(argv[3], "outside")) {
		/* Past the end of the whole receive buffer (two halves of buf_len). */
		st = write_imm(id, be64toh(peer.buf_addr) + 2ULL * be32toh(peer.buf_len) + 4096,
			       be32toh(peer.buf_key), 16, 0, 0);
		printf("write outside the buffer: status %d\n", st);
	} else {
		st = write_imm(id, be64toh(peer.buf_addr), be32toh(peer.buf_key), 16, 1,
			       0x1fffffff);
		printf("oversized announcement: status %d\n", st);
	}
	fflush(stdout);
	sleep(2);
	rdma_disconnect(id);
	rdma_destroy_ep(id);
	return 0;
}
