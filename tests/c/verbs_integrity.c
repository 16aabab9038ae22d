/*
 * End-to-end checks through the plain libibverbs API, compiled against the system's
 * <infiniband/verbs.h> and run on rdma-emu's shim. Two RC QPs of one process are
 * connected to each other over the device's IPv4 RoCE v2 GID (a loopback, through the
 * daemon and the UDP wire path).
 *
 *   data:   RDMA WRITE gathered from 3 SGEs, an inline SEND, an RDMA READ back into a
 *           fresh buffer; every byte compared with the pattern that was written.
 *   errors: WRITE with a wrong rkey       -> IBV_WC_REM_ACCESS_ERR, then WR_FLUSH_ERR
 *           SEND to a QP number nobody has -> IBV_WC_RETRY_EXC_ERR
 *           receives on a QP moved to ERR -> IBV_WC_WR_FLUSH_ERR, each exactly once
 *
 * Prints one "ok <check>" line per check; exits 0 only when all hold.
 *
 * `verbs_integrity DEVICE mmap` runs the same checks on buffers from mmap(2), each 100 bytes
 * into its mapping (so a region has partial first and last pages and whole pages between),
 * the memory rdma-emu moves onto memfds unless RDMA_EMU_SHARED_MR=0; it also checks that a
 * fork() child gets the registered pages as private memory (what they held at the fork; its
 * writes do not reach the parent) and that the parent's region still works after the fork.
 *
 * `verbs_integrity DEVICE send-once RETRY_CNT RNR_RETRY` instead sends one SEND into a
 * posted receive with those retry budgets (timeout 1 ms, min RNR timer 0.01 ms) and prints
 * the send's completion status: what an application sees under `rdma-emu fault`.
 */
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SIZE 65536
#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

struct ctx {
	struct ibv_context *dev;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	int gid_index;
	union ibv_gid gid;
	enum ibv_mtu mtu;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Polls one completion for at most `seconds`. */
static struct ibv_wc poll_one(struct ibv_cq *cq, double seconds)
{
	struct ibv_wc wc;
	double end = now() + seconds;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			FAIL("ibv_poll_cq returned %d", n);
		if (n == 1)
			return wc;
		if (now() > end)
			FAIL("no completion within %.1f s", seconds);
	}
}

static void expect(struct ibv_wc wc, uint64_t wr_id, enum ibv_wc_status status, const char *what)
{
	if (wc.wr_id != wr_id || wc.status != status)
		FAIL("%s: got wr_id %llu status %s (%d), want wr_id %llu status %s", what,
		     (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.status,
		     (unsigned long long)wr_id, ibv_wc_status_str(status));
}

static struct ibv_qp *make_qp(struct ctx *c)
{
	struct ibv_qp_init_attr init = {
		.send_cq = c->cq, .recv_cq = c->cq,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 4,
			 .max_recv_sge = 4, .max_inline_data = 256 },
		.qp_type = IBV_QPT_RC, .sq_sig_all = 1,
	};
	struct ibv_qp *qp = ibv_create_qp(c->pd, &init);
	if (!qp)
		FAIL("ibv_create_qp: %s", strerror(errno));
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		FAIL("modify to INIT");
	return qp;
}

/* RESET..INIT done; take `qp` to RTS talking to `dest_qpn` on our own GID. */
static void connect_qp(struct ctx *c, struct ibv_qp *qp, uint32_t dest_qpn, uint8_t timeout, uint8_t retry,
		       uint8_t rnr_retry)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = c->mtu, .dest_qp_num = dest_qpn, .rq_psn = 100,
		.max_dest_rd_atomic = 4, .min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = c->gid, .sgid_index = c->gid_index, .hop_limit = 64 } },
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		FAIL("modify to RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = rnr_retry;
	a.sq_psn = 100;
	a.max_rd_atomic = 4;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		FAIL("modify to RTS: %s", strerror(errno));
}

/* A zeroed buffer of `n` bytes: from malloc, or 100 bytes into a private anonymous mapping. */
static uint8_t *buffer(int from_mmap, size_t n)
{
	if (!from_mmap)
		return calloc(1, n);
	uint8_t *p = mmap(NULL, n + 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		FAIL("mmap: %s", strerror(errno));
	return p + 100;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

int main(int argc, char **argv)
{
	const char *want = argc > 1 ? argv[1] : "rxe0";
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ctx c = { 0 };
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), want))
			c.dev = ibv_open_device(list[i]);
	if (!c.dev)
		FAIL("device %s not found or not opened (%d devices)", want, n);
	ibv_free_device_list(list);

	struct ibv_port_attr port;
	if (ibv_query_port(c.dev, 1, &port))
		FAIL("ibv_query_port");
	c.mtu = port.active_mtu;
	c.gid_index = -1;
	for (int i = 0; i < port.gid_tbl_len && c.gid_index < 0; i++) {
		union ibv_gid g;
		if (ibv_query_gid(c.dev, 1, i, &g))
			continue;
		static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
		if (!memcmp(g.raw, v4mapped, 12)) {
			c.gid_index = i;
			c.gid = g;
		}
	}
	if (c.gid_index < 0)
		FAIL("no IPv4-mapped GID");
	c.pd = ibv_alloc_pd(c.dev);
	c.cq = ibv_create_cq(c.dev, 256, NULL, NULL, 0);
	if (!c.pd || !c.cq)
		FAIL("pd/cq");

	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	int from_mmap = argc == 3 && !strcmp(argv[2], "mmap");
	uint8_t *src = buffer(from_mmap, SIZE), *dst = buffer(from_mmap, SIZE), *back = buffer(from_mmap, SIZE),
		*rbuf = buffer(from_mmap, SIZE);
	struct ibv_mr *msrc = ibv_reg_mr(c.pd, src, SIZE, access);
	struct ibv_mr *mdst = ibv_reg_mr(c.pd, dst, SIZE, access);
	struct ibv_mr *mback = ibv_reg_mr(c.pd, back, SIZE, access);
	struct ibv_mr *mrbuf = ibv_reg_mr(c.pd, rbuf, SIZE, access);
	if (!msrc || !mdst || !mback || !mrbuf)
		FAIL("ibv_reg_mr: %s", strerror(errno));

	struct ibv_qp *a = make_qp(&c), *b = make_qp(&c);
	if (argc == 5 && !strcmp(argv[2], "send-once")) {
		uint8_t retry = (uint8_t)atoi(argv[3]), rnr_retry = (uint8_t)atoi(argv[4]);
		connect_qp(&c, a, b->qp_num, 8 /* 1 ms */, retry, rnr_retry);
		connect_qp(&c, b, a->qp_num, 8, retry, rnr_retry);
		struct ibv_sge rsg = { (uintptr_t)dst, SIZE, mdst->lkey };
		struct ibv_recv_wr rwr = { .wr_id = 20, .sg_list = &rsg, .num_sge = 1 }, *rbad;
		if (ibv_post_recv(b, &rwr, &rbad))
			FAIL("post RECV");
		struct ibv_sge ssg = { (uintptr_t)src, 4096, msrc->lkey };
		struct ibv_send_wr swr = { .wr_id = 21, .sg_list = &ssg, .num_sge = 1, .opcode = IBV_WR_SEND,
					   .send_flags = IBV_SEND_SIGNALED }, *sbad;
		if (ibv_post_send(a, &swr, &sbad))
			FAIL("post SEND");
		for (;;) {
			struct ibv_wc wc = poll_one(c.cq, 60);
			if (wc.wr_id == 21) {
				printf("send status %s (%d)\n", ibv_wc_status_str(wc.status), wc.status);
				return 0;
			}
		}
	}
	connect_qp(&c, a, b->qp_num, 14, 7, 7);
	connect_qp(&c, b, a->qp_num, 14, 7, 7);

	/* 1. WRITE gathered from three SGEs of different sizes and offsets. */
	fill(src, SIZE, 1);
	struct ibv_sge sg[3] = {
		{ (uintptr_t)src + 7, 1000, msrc->lkey },
		{ (uintptr_t)src + 5000, 20000, msrc->lkey },
		{ (uintptr_t)src + 40000, 12345, msrc->lkey },
	};
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = sg, .num_sge = 3, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = (uintptr_t)dst + 3, .rkey = mdst->rkey } };
	struct ibv_send_wr *bad;
	if (ibv_post_send(a, &wr, &bad))
		FAIL("post WRITE");
	expect(poll_one(c.cq, 10), 1, IBV_WC_SUCCESS, "WRITE");
	size_t off = 3;
	for (int i = 0; i < 3; i++) {
		if (memcmp(dst + off, (void *)(uintptr_t)sg[i].addr, sg[i].length))
			FAIL("WRITE data differs in SGE %d", i);
		off += sg[i].length;
	}
	if (dst[0] || dst[1] || dst[2] || dst[off])
		FAIL("WRITE touched bytes outside its target range");
	printf("ok write_three_sges %zu bytes\n", off - 3);

	/* 2. Inline SEND into a posted receive. */
	struct ibv_sge rsg = { (uintptr_t)rbuf, SIZE, mrbuf->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &rsg, .num_sge = 1 }, *rbad;
	if (ibv_post_recv(b, &rwr, &rbad))
		FAIL("post RECV");
	char msg[200];
	for (int i = 0; i < (int)sizeof(msg); i++)
		msg[i] = (char)(i * 7 + 3);
	struct ibv_sge isg = { (uintptr_t)msg, sizeof(msg), 0 };
	struct ibv_send_wr swr = { .wr_id = 3, .sg_list = &isg, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				   .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE, .imm_data = htonl(0xC0FFEE) };
	if (ibv_post_send(a, &swr, &bad))
		FAIL("post inline SEND");
	memset(msg, 0, sizeof(msg)); /* inline: the data was copied at post time */
	int got_send = 0, got_recv = 0;
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc = poll_one(c.cq, 10);
		if (wc.wr_id == 3) {
			expect(wc, 3, IBV_WC_SUCCESS, "inline SEND");
			got_send = 1;
		} else {
			expect(wc, 2, IBV_WC_SUCCESS, "RECV");
			if (wc.opcode != IBV_WC_RECV || wc.byte_len != sizeof(msg) || !(wc.wc_flags & IBV_WC_WITH_IMM) ||
			    ntohl(wc.imm_data) != 0xC0FFEE || wc.qp_num != b->qp_num)
				FAIL("RECV completion fields: opcode %d len %u flags %x imm %x qp %u", wc.opcode,
				     wc.byte_len, wc.wc_flags, ntohl(wc.imm_data), wc.qp_num);
			got_recv = 1;
		}
	}
	for (int i = 0; i < (int)sizeof(msg); i++)
		if (rbuf[i] != (uint8_t)(i * 7 + 3))
			FAIL("inline SEND data differs at %d", i);
	if (!got_send || !got_recv)
		FAIL("missing SEND/RECV completion");
	printf("ok inline_send_with_imm %zu bytes\n", sizeof(msg));

	/* 3. READ the written range back and compare with the source pattern. */
	struct ibv_sge bsg = { (uintptr_t)back, (uint32_t)(off - 3), mback->lkey };
	struct ibv_send_wr rd = { .wr_id = 4, .sg_list = &bsg, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				  .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = (uintptr_t)dst + 3, .rkey = mdst->rkey } };
	if (ibv_post_send(a, &rd, &bad))
		FAIL("post READ");
	expect(poll_one(c.cq, 10), 4, IBV_WC_SUCCESS, "READ");
	if (memcmp(back, dst + 3, off - 3))
		FAIL("READ data differs from what was written");
	printf("ok read_back %zu bytes\n", off - 3);

	/* 3b. A fork() child gets the registered pages as a private copy; the parent keeps its
	 * region. Some rdma-core programs fork with memory registered (rdma-core's own tests do). */
	if (from_mmap) {
		uint8_t *page = (uint8_t *)(((uintptr_t)dst + 4095) & ~(uintptr_t)4095);
		uint8_t snap[4096];
		memcpy(snap, page, sizeof(snap));
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0)
			FAIL("fork: %s", strerror(errno));
		if (pid == 0) {
			int same = !memcmp(page, snap, sizeof(snap));
			page[0] ^= 0xff;
			_exit(same ? 0 : 1);
		}
		int st = 0;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			FAIL("the fork() child did not see the registered pages as they were (status %#x)", st);
		if (memcmp(page, snap, sizeof(snap)))
			FAIL("the fork() child's write reached the parent's registered pages");
		fill(src, SIZE, 2);
		struct ibv_send_wr again = wr;
		again.wr_id = 8;
		if (ibv_post_send(a, &again, &bad))
			FAIL("post WRITE after fork");
		expect(poll_one(c.cq, 10), 8, IBV_WC_SUCCESS, "WRITE after fork");
		off = 3;
		for (int i = 0; i < 3; i++) {
			if (memcmp(dst + off, (void *)(uintptr_t)sg[i].addr, sg[i].length))
				FAIL("WRITE after fork: data differs in SGE %d", i);
			off += sg[i].length;
		}
		printf("ok fork_child_gets_a_private_copy\n");
	}

	/* 4. A wrong rkey: REM_ACCESS_ERR, the QP goes to error, what follows is flushed. */
	struct ibv_send_wr w2 = wr;
	w2.wr_id = 5;
	w2.wr.rdma.rkey = mdst->rkey ^ 0x5a5a00;
	struct ibv_send_wr w3 = wr;
	w3.wr_id = 6;
	w2.next = &w3;
	if (ibv_post_send(a, &w2, &bad))
		FAIL("post bad-rkey WRITE");
	expect(poll_one(c.cq, 10), 5, IBV_WC_REM_ACCESS_ERR, "WRITE with a wrong rkey");
	expect(poll_one(c.cq, 10), 6, IBV_WC_WR_FLUSH_ERR, "WRITE after the error");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	if (ibv_query_qp(a, &qa, IBV_QP_STATE, &qi) || qa.qp_state != IBV_QPS_ERR)
		FAIL("QP after REM_ACCESS_ERR is in state %d, want ERR", qa.qp_state);
	printf("ok remote_access_error\n");

	/* 5. Nobody answers: RETRY_EXC_ERR after retry_cnt retransmissions. */
	struct ibv_qp *lonely = make_qp(&c);
	connect_qp(&c, lonely, 0xabcdef, 8 /* 1 ms */, 2, 7);
	struct ibv_send_wr s5 = { .wr_id = 7, .sg_list = &isg, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE };
	if (ibv_post_send(lonely, &s5, &bad))
		FAIL("post SEND to nobody");
	expect(poll_one(c.cq, 20), 7, IBV_WC_RETRY_EXC_ERR, "SEND to a QP that does not exist");
	printf("ok retry_exceeded\n");

	/* 6. Receives posted on a QP moved to ERR are flushed, each exactly once. */
	for (int i = 0; i < 3; i++) {
		struct ibv_recv_wr r = { .wr_id = 100 + i, .sg_list = &rsg, .num_sge = 1 };
		if (ibv_post_recv(b, &r, &rbad))
			FAIL("post RECV %d", i);
	}
	qa.qp_state = IBV_QPS_ERR;
	if (ibv_modify_qp(b, &qa, IBV_QP_STATE))
		FAIL("modify to ERR");
	for (int i = 0; i < 3; i++)
		expect(poll_one(c.cq, 10), 100 + i, IBV_WC_WR_FLUSH_ERR, "flushed RECV");
	struct ibv_wc extra;
	double end = now() + 0.2;
	while (now() < end)
		if (ibv_poll_cq(c.cq, 1, &extra) != 0)
			FAIL("an extra completion (wr_id %llu, status %d) after the flush",
			     (unsigned long long)extra.wr_id, extra.status);
	printf("ok flush\n");

	ibv_destroy_qp(lonely);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(msrc);
	ibv_dereg_mr(mdst);
	ibv_dereg_mr(mback);
	ibv_dereg_mr(mrbuf);
	ibv_destroy_cq(c.cq);
	ibv_dealloc_pd(c.pd);
	ibv_close_device(c.dev);
	printf("all checks passed\n");
	return 0;
}
