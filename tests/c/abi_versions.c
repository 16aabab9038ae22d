/*
 * One program, compiled against the headers of several rdma-core releases (the system's
 * v44 and the trees in pyverbs' source distributions), run on rdma-emu's shim. What
 * differs between releases is what a program bakes in at compile time: struct sizes
 * passed to the library (ibv_device_attr_ex, ibv_port_attr), the layout of structs the
 * library fills and the program reads through inline functions (ibv_context's ops,
 * verbs_context, ibv_cq_ex, ibv_qp_ex), and the version nodes of the symbols it links.
 *
 * Two RC QPs of one process are connected to each other over the device's IPv4 RoCE v2
 * GID. Checks, one "ok <check>" line each:
 *   device_ex   ibv_query_device_ex with this release's struct size
 *   port        ibv_query_port (an inline over verbs_context in every release)
 *   wr_api      WRITE and SEND through ibv_wr_* on an ibv_qp_ex, completions read through
 *               ibv_start_poll and the ibv_wc_read_* inlines of an ibv_cq_ex
 *   post        ibv_post_recv / ibv_post_send / ibv_poll_cq through ibv_context's ops
 *   in_order    ibv_query_qp_data_in_order (IBVERBS_1.14)
 *   placement   ibv_wr_atomic_write (every release) and, with v57+ headers, ibv_wr_flush
 *               (ibv_qp_ex's member after v44's) of the range and of the whole region
 *   reg_mr_ex   (v59 headers) ibv_reg_mr_ex with an IOVA, used as a WRITE's target;
 *               a dma-buf registration and ibv_alloc_dmah refused with EOPNOTSUPP
 * and "all checks passed" at the end; exit status 0 only then.
 *
 * Build with -DRDMA_CORE_RELEASE=N, the release whose headers are on the include path
 * (the headers define no version macro, and v59's additions are enums).
 */
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef RDMA_CORE_RELEASE
#error "build with -DRDMA_CORE_RELEASE=<the headers' rdma-core release>"
#endif

#define SIZE 8192
#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static struct ibv_context *dev;
static struct ibv_pd *pd;
static struct ibv_cq_ex *cq;
static union ibv_gid gid;
static int gid_index = -1;
static enum ibv_mtu mtu;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One completion through the ibv_start_poll API: its wr_id, status, opcode, length. */
struct done { uint64_t wr_id; enum ibv_wc_status status; enum ibv_wc_opcode opcode; uint32_t len; };

static struct done poll_ex(void)
{
	struct ibv_poll_cq_attr attr = { 0 };
	double end = now() + 30;
	for (;;) {
		int rc = ibv_start_poll(cq, &attr);
		if (rc == 0) {
			struct done d = { cq->wr_id, cq->status, ibv_wc_read_opcode(cq), ibv_wc_read_byte_len(cq) };
			ibv_end_poll(cq);
			return d;
		}
		if (rc != ENOENT)
			FAIL("ibv_start_poll: %d", rc);
		if (now() > end)
			FAIL("no completion within 30 s");
	}
}

static void expect(struct done d, uint64_t wr_id, enum ibv_wc_opcode opcode, const char *what)
{
	if (d.wr_id != wr_id || d.status != IBV_WC_SUCCESS || d.opcode != opcode)
		FAIL("%s: wr_id %llu status %s opcode %d, want wr_id %llu success opcode %d", what,
		     (unsigned long long)d.wr_id, ibv_wc_status_str(d.status), d.opcode,
		     (unsigned long long)wr_id, opcode);
}

static struct ibv_qp *make_qp(void)
{
	struct ibv_qp_init_attr_ex init = {
		.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2, .max_recv_sge = 2 },
		.qp_type = IBV_QPT_RC, .sq_sig_all = 1,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND |
				  IBV_QP_EX_WITH_ATOMIC_WRITE
#if RDMA_CORE_RELEASE >= 57
				  | IBV_QP_EX_WITH_FLUSH
#endif
		,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(dev, &init);
	if (!qp)
		FAIL("ibv_create_qp_ex: %s", strerror(errno));
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE
#if RDMA_CORE_RELEASE >= 57
				   | IBV_ACCESS_FLUSH_GLOBAL
#endif
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		FAIL("modify to INIT: %s", strerror(errno));
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest_qpn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = mtu, .dest_qp_num = dest_qpn, .rq_psn = 7,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = gid, .sgid_index = gid_index, .hop_limit = 64 } },
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		FAIL("modify to RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		FAIL("modify to RTS: %s", strerror(errno));
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

static void open_device(const char *want)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), want))
			dev = ibv_open_device(list[i]);
	if (!dev)
		FAIL("device %s not found or not opened (%d devices)", want, n);
	ibv_free_device_list(list);
}

static void query(void)
{
	struct ibv_device_attr_ex ex;
	memset(&ex, 0xa5, sizeof(ex));
	if (ibv_query_device_ex(dev, NULL, &ex))
		FAIL("ibv_query_device_ex: %s", strerror(errno));
	if (ex.orig_attr.max_qp <= 0 || ex.orig_attr.max_cqe <= 0 || ex.orig_attr.phys_port_cnt != 1)
		FAIL("ibv_query_device_ex: max_qp %d max_cqe %d ports %d", ex.orig_attr.max_qp,
		     ex.orig_attr.max_cqe, ex.orig_attr.phys_port_cnt);
	printf("ok device_ex (%zu-byte struct)\n", sizeof(ex));

	struct ibv_port_attr port;
	memset(&port, 0xa5, sizeof(port));
	if (ibv_query_port(dev, 1, &port))
		FAIL("ibv_query_port: %s", strerror(errno));
	if (port.state != IBV_PORT_ACTIVE || port.active_mtu < IBV_MTU_256 || port.active_mtu > IBV_MTU_4096 ||
	    port.gid_tbl_len <= 0)
		FAIL("ibv_query_port: state %d mtu %d gids %d", port.state, port.active_mtu, port.gid_tbl_len);
	mtu = port.active_mtu;
	for (int i = 0; i < port.gid_tbl_len && gid_index < 0; i++) {
		union ibv_gid g;
		static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
		if (!ibv_query_gid(dev, 1, i, &g) && !memcmp(g.raw, v4mapped, 12)) {
			gid_index = i;
			gid = g;
		}
	}
	if (gid_index < 0)
		FAIL("no IPv4-mapped GID");
	printf("ok port (%zu-byte struct)\n", sizeof(port));
}

int main(int argc, char **argv)
{
	open_device(argc > 1 ? argv[1] : "rxe0");
	query();
	pd = ibv_alloc_pd(dev);
	struct ibv_cq_init_attr_ex cq_attr = { .cqe = 64, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN };
	cq = ibv_create_cq_ex(dev, &cq_attr);
	if (!pd || !cq)
		FAIL("pd/cq_ex: %s", strerror(errno));
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	uint8_t *src = calloc(1, SIZE), *dst = calloc(1, SIZE), *rbuf = calloc(1, SIZE);
	struct ibv_mr *msrc = ibv_reg_mr(pd, src, SIZE, access);
	int dst_access = access;
#if RDMA_CORE_RELEASE >= 57
	dst_access |= IBV_ACCESS_FLUSH_GLOBAL;
#endif
	struct ibv_mr *mdst = ibv_reg_mr(pd, dst, SIZE, dst_access);
	struct ibv_mr *mrbuf = ibv_reg_mr(pd, rbuf, SIZE, access);
	if (!msrc || !mdst || !mrbuf)
		FAIL("ibv_reg_mr: %s", strerror(errno));
	struct ibv_qp *a = make_qp(), *b = make_qp();
	connect_qp(a, b->qp_num);
	connect_qp(b, a->qp_num);

	/* WRITE then SEND through the ibv_wr_* API (function pointers in ibv_qp_ex). */
	fill(src, SIZE, 44);
	struct ibv_sge rsg = { (uintptr_t)rbuf, SIZE, mrbuf->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 3, .sg_list = &rsg, .num_sge = 1 }, *rbad;
	if (ibv_post_recv(b, &rwr, &rbad))
		FAIL("ibv_post_recv");
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(a);
	if (!qx)
		FAIL("ibv_qp_to_qp_ex");
	ibv_wr_start(qx);
	qx->wr_id = 1;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, mdst->rkey, (uintptr_t)dst);
	ibv_wr_set_sge(qx, msrc->lkey, (uintptr_t)src, SIZE);
	qx->wr_id = 2;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, msrc->lkey, (uintptr_t)src, 1000);
	if (ibv_wr_complete(qx))
		FAIL("ibv_wr_complete: %s", strerror(errno));
	/* The receive's completion may come before or after the sends'. */
	struct done sends[2], recv = { 0 };
	int ns = 0;
	for (int i = 0; i < 3; i++) {
		struct done d = poll_ex();
		if (d.wr_id == 3)
			recv = d;
		else if (ns < 2)
			sends[ns++] = d;
	}
	if (ns != 2)
		FAIL("%d send completions, want 2", ns);
	expect(sends[0], 1, IBV_WC_RDMA_WRITE, "WRITE");
	expect(sends[1], 2, IBV_WC_SEND, "SEND");
	expect(recv, 3, IBV_WC_RECV, "RECV");
	if (recv.len != 1000)
		FAIL("RECV byte_len %u, want 1000", recv.len);
	if (memcmp(src, dst, SIZE) || memcmp(src, rbuf, 1000))
		FAIL("the bytes that arrived differ from those sent");
	printf("ok wr_api\n");

	/* The same through ibv_post_send and ibv_poll_cq (ibv_context's ops). */
	fill(src, SIZE, 57);
	struct ibv_sge ssg = { (uintptr_t)src, SIZE, msrc->lkey };
	struct ibv_send_wr swr = { .wr_id = 4, .sg_list = &ssg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				   .send_flags = IBV_SEND_SIGNALED,
				   .wr.rdma = { .remote_addr = (uintptr_t)dst, .rkey = mdst->rkey } }, *sbad;
	if (ibv_post_send(a, &swr, &sbad))
		FAIL("ibv_post_send");
	struct ibv_wc wc;
	double end = now() + 30;
	int n;
	while ((n = ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc)) == 0 && now() < end)
		;
	if (n != 1 || wc.wr_id != 4 || wc.status != IBV_WC_SUCCESS)
		FAIL("post_send WRITE: n %d wr_id %llu status %s", n, (unsigned long long)wc.wr_id,
		     ibv_wc_status_str(wc.status));
	if (memcmp(src, dst, SIZE))
		FAIL("post_send WRITE: the bytes differ");
	printf("ok post\n");

	int in_order = ibv_query_qp_data_in_order(a, IBV_WR_RDMA_WRITE, 0);
	if (in_order != 0 && in_order != 1)
		FAIL("ibv_query_qp_data_in_order: %d", in_order);
	printf("ok in_order\n");

	/* ATOMIC WRITE of 8 bytes, then (v57+) FLUSH of a range and of the region. */
	const uint8_t eight[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	ibv_wr_start(qx);
	qx->wr_id = 6;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(qx, mdst->rkey, (uintptr_t)dst + 64, eight);
#if RDMA_CORE_RELEASE >= 57
	qx->wr_id = 7;
	ibv_wr_flush(qx, mdst->rkey, (uintptr_t)dst, 128, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE);
	qx->wr_id = 8;
	ibv_wr_flush(qx, mdst->rkey, 0, 0, IBV_FLUSH_GLOBAL, IBV_FLUSH_MR);
#endif
	if (ibv_wr_complete(qx))
		FAIL("ibv_wr_complete (placement): %s", strerror(errno));
	expect(poll_ex(), 6, IBV_WC_ATOMIC_WRITE, "ATOMIC_WRITE");
#if RDMA_CORE_RELEASE >= 57
	expect(poll_ex(), 7, IBV_WC_FLUSH, "FLUSH of a range");
	expect(poll_ex(), 8, IBV_WC_FLUSH, "FLUSH of the region");
#endif
	if (memcmp(dst + 64, eight, 8))
		FAIL("ATOMIC_WRITE: the 8 bytes did not land");
	printf("ok placement\n");

#if RDMA_CORE_RELEASE >= 59
	/* rdma-core v59: a region registered at an IOVA of our choosing is written through it. */
	uint8_t *ibuf = calloc(1, SIZE);
	struct ibv_mr_init_attr mi = { .length = SIZE, .access = access,
		.comp_mask = IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_IOVA, .iova = 0x100000, .addr = ibuf };
	struct ibv_mr *miova = ibv_reg_mr_ex(pd, &mi);
	if (!miova)
		FAIL("ibv_reg_mr_ex: %s", strerror(errno));
	fill(src, SIZE, 59);
	swr.wr_id = 5;
	swr.wr.rdma.remote_addr = 0x100000 + 100;
	swr.wr.rdma.rkey = miova->rkey;
	ssg.length = SIZE - 100;
	if (ibv_post_send(a, &swr, &sbad))
		FAIL("ibv_post_send to the IOVA region");
	end = now() + 30;
	while ((n = ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc)) == 0 && now() < end)
		;
	if (n != 1 || wc.wr_id != 5 || wc.status != IBV_WC_SUCCESS)
		FAIL("WRITE to the IOVA region: n %d status %s", n, ibv_wc_status_str(wc.status));
	if (memcmp(src, ibuf + 100, SIZE - 100))
		FAIL("WRITE to the IOVA region: the bytes differ");
	struct ibv_mr_init_attr mfd = { .length = SIZE, .access = access,
		.comp_mask = IBV_REG_MR_MASK_FD | IBV_REG_MR_MASK_FD_OFFSET, .fd = 0 };
	errno = 0;
	if (ibv_reg_mr_ex(pd, &mfd) || errno != EOPNOTSUPP)
		FAIL("ibv_reg_mr_ex with a dma-buf: errno %d, want EOPNOTSUPP", errno);
	struct ibv_dmah_init_attr dh = { 0 };
	errno = 0;
	if (ibv_alloc_dmah(dev, &dh) || errno != EOPNOTSUPP)
		FAIL("ibv_alloc_dmah: errno %d, want EOPNOTSUPP", errno);
	ibv_dereg_mr(miova);
	printf("ok reg_mr_ex\n");
#endif

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(msrc);
	ibv_dereg_mr(mdst);
	ibv_dereg_mr(mrbuf);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	ibv_dealloc_pd(pd);
	ibv_close_device(dev);
	printf("all checks passed\n");
	return 0;
}
