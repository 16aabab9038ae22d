/*
 * ibv_resize_cq, ibv_rereg_mr and the CQ cleaning of a move to RESET, through the plain
 * libibverbs API on rdma-emu's shim (two UD QPs of one process sharing one CQ, sending to
 * themselves over the device's GID):
 *
 *   resize: completions not yet polled survive a resize, in order, none twice; a size
 *           below them, 0 or negative is EINVAL and leaves the CQ working; cq->cqe is
 *           the new size.
 *   rereg:  libibverbs' input checks return IBV_REREG_MR_ERR_INPUT (-1), errno EINVAL;
 *           a change of translation IBV_REREG_MR_ERR_CMD (-4), errno EOPNOTSUPP (rxe);
 *           a PD change moves mr->pd and keeps both keys; the old PD is then free.
 *   reset:  a QP moved to RESET loses its unpolled completions; the other QP's stay.
 *
 * Prints one "ok <check>" line per check; exits 0 only when all hold.
 */
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define QKEY 0x11111111

static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static struct ibv_ah *ah;
static char buf[8192];

static struct ibv_qp *ud_qp(void)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		FAIL("UD QP to INIT");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		FAIL("UD QP to RTR");
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		FAIL("UD QP to RTS");
	return qp;
}

static void post_recv(struct ibv_qp *qp, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)buf + 4096, 1024, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &wr, &bad))
		FAIL("post_recv");
}

static void send_to(struct ibv_qp *qp, struct ibv_qp *to, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.ud = { .ah = ah, .remote_qpn = to->qp_num, .remote_qkey = QKEY },
	}, *bad;
	if (ibv_post_send(qp, &wr, &bad))
		FAIL("post_send");
}

/* Polls exactly `n` completions (10 s at most) into `ids`. */
static void poll_n(int n, uint64_t *ids)
{
	struct ibv_wc wc;
	for (int got = 0, tries = 0; got < n; tries++) {
		int r = ibv_poll_cq(cq, 1, &wc);
		if (r < 0 || tries > 1000000)
			FAIL("poll: %d of %d", got, n);
		if (r == 0) {
			usleep(10);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS)
			FAIL("completion %llu: %s", (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
		ids[got++] = wc.wr_id;
	}
}

static int empty_for_a_while(void)
{
	struct ibv_wc wc;
	for (int i = 0; i < 100; i++) {
		if (ibv_poll_cq(cq, 1, &wc) != 0)
			return 0;
		usleep(1000);
	}
	return 1;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *dev = list && list[0] ? ibv_open_device(list[0]) : NULL;
	if (!dev)
		FAIL("no device");
	pd = ibv_alloc_pd(dev);
	cq = ibv_create_cq(dev, 16, NULL, NULL, 0);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!cq || !mr)
		FAIL("pd, cq, mr");
	union ibv_gid gid;
	int idx = -1;
	for (int i = 0; i < 16 && idx < 0; i++) {
		static const union ibv_gid zero;
		if (!ibv_query_gid(dev, 1, i, &gid) && memcmp(&gid, &zero, sizeof(gid)))
			idx = i;
	}
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
		.grh = { .dgid = gid, .sgid_index = idx, .hop_limit = 1 } };
	ah = idx >= 0 ? ibv_create_ah(pd, &aa) : NULL;
	if (!ah)
		FAIL("AH to our own GID");
	struct ibv_qp *a = ud_qp(), *b = ud_qp();

	/* resize: 6 sends, 6 receives (12 completions), 2 polled, 10 left in the ring. */
	uint64_t ids[32];
	for (int i = 0; i < 6; i++) {
		post_recv(b, 100 + i);
		send_to(a, b, i);
	}
	poll_n(2, ids);
	usleep(200000); /* every completion in the ring */
	if (ibv_resize_cq(cq, 5) != EINVAL || ibv_resize_cq(cq, 0) != EINVAL ||
	    ibv_resize_cq(cq, -1) != EINVAL)
		FAIL("resize below the unpolled completions, to 0, to -1: EINVAL");
	if (ibv_resize_cq(cq, 100) || cq->cqe != 100)
		FAIL("resize to 100: cqe %d", cq->cqe);
	poll_n(10, ids + 2);
	for (int i = 0; i < 2; i++) {
		post_recv(b, 200 + i);
		send_to(a, b, 10 + i);
	}
	poll_n(4, ids + 12);
	int seen[256] = { 0 }, sends = 0;
	for (int i = 0; i < 16; i++) {
		if (ids[i] >= 256 || seen[ids[i]]++)
			FAIL("completion %llu twice or unknown", (unsigned long long)ids[i]);
		if (ids[i] < 100 && ids[i] != (uint64_t)(sends < 6 ? sends : sends + 4))
			FAIL("send completions out of order at %d", i);
		sends += ids[i] < 100;
	}
	if (sends != 8 || !empty_for_a_while())
		FAIL("8 send completions, then nothing: %d", sends);
	printf("ok resize_keeps_unpolled_completions\n");

	/* rereg */
	struct ibv_pd *pd2 = ibv_alloc_pd(dev);
	uint32_t lkey = mr->lkey, rkey = mr->rkey;
	errno = 0;
	if (ibv_rereg_mr(mr, 1 << 3, NULL, NULL, 0, 0) != IBV_REREG_MR_ERR_INPUT || errno != EINVAL)
		FAIL("unknown flag: ERR_INPUT/EINVAL");
	if (ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, IBV_ACCESS_LOCAL_WRITE) !=
	    IBV_REREG_MR_ERR_INPUT)
		FAIL("access without CHANGE_ACCESS: ERR_INPUT");
	if (ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0) != IBV_REREG_MR_ERR_INPUT)
		FAIL("translation without address: ERR_INPUT");
	errno = 0;
	if (ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf, 64, 0) != IBV_REREG_MR_ERR_CMD ||
	    errno != EOPNOTSUPP)
		FAIL("translation: ERR_CMD/EOPNOTSUPP");
	errno = 0;
	if (ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE) !=
	    IBV_REREG_MR_ERR_CMD || errno != EINVAL)
		FAIL("remote write without local write: ERR_CMD/EINVAL");
	if (ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) || mr->pd != pd2 ||
	    mr->lkey != lkey || mr->rkey != rkey)
		FAIL("PD change: mr->pd moved, keys kept");
	if (ibv_dealloc_pd(pd2) != EBUSY)
		FAIL("the MR's new PD is busy");
	if (ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd, NULL, 0,
			 IBV_ACCESS_LOCAL_WRITE) || mr->pd != pd || ibv_dealloc_pd(pd2))
		FAIL("PD back, then the second PD is free");
	printf("ok rereg_as_rxe\n");

	/* reset: A's flushed receive goes with A's reset; B's send completion stays. */
	post_recv(a, 300);
	struct ibv_qp_attr e = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(a, &e, IBV_QP_STATE))
		FAIL("A to ERR");
	post_recv(a, 301); /* flushed too */
	send_to(b, a, 302); /* to A in ERR: the UD send completes, the datagram is dropped */
	usleep(200000);
	e.qp_state = IBV_QPS_RESET;
	if (ibv_modify_qp(a, &e, IBV_QP_STATE))
		FAIL("A to RESET");
	poll_n(1, ids);
	if (ids[0] != 302 || !empty_for_a_while())
		FAIL("after A's reset: only B's send (got %llu)", (unsigned long long)ids[0]);
	printf("ok reset_cleans_the_qps_completions\n");

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_ah(ah);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(dev);
	ibv_free_device_list(list);
	printf("all checks passed\n");
	return 0;
}
