/*
 * Async events against object lifetimes, through the plain libibverbs API.
 *
 * rdma-core promises: ibv_get_async_event never reports an event for a destroyed object,
 * and the element of a reported event stays valid until ibv_ack_async_event; destroying a
 * QP, CQ or SRQ waits for the acks of its reported events.
 *
 * Each round creates a CQ with one entry, an SRQ with its limit armed and an RC QP on that
 * SRQ connected to itself over the device's IPv4 RoCE v2 GID, then raises three events:
 *   IBV_EVENT_SRQ_LIMIT_REACHED  a SEND consumes an SRQ receive below the limit
 *   IBV_EVENT_CQ_ERR             more completions than the CQ holds
 *   IBV_EVENT_QP_LAST_WQE_REACHED the QP (on an SRQ) is moved to ERR
 * A reader thread takes events and holds each for a while before acking it, checking that
 * its object is one the program created and has not destroyed, both when it arrives and
 * just before the ack. Even rounds destroy the objects at once, while the events are still
 * queued ("race" rounds); odd rounds wait until all three events arrived, and the reader
 * keeps the QP's event until the QP's destroy has begun and then some ("hold" rounds), so
 * destroy has to wait for its ack.
 *
 * `async_events DEVICE ROUNDS` prints counts and "all checks passed"; exits 0 only then.
 */
#include <infiniband/verbs.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define MAX_OBJ 4096
#define HOLD_US 20000

enum kind { K_CQ, K_QP, K_SRQ, K_N };
static const char *kind_name[K_N] = { "cq", "qp", "srq" };

/* Every object the program created, in creation order; never reused. */
struct tracked {
	enum kind kind;
	void *ptr;
	uint32_t handle;
	int round;
	int destroyed;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static struct tracked objs[MAX_OBJ];
static int nobjs;
static int held = -1;            /* index of the object whose event the reader holds */
static int destroying = -1;      /* index of the object being destroyed */
static int seen[K_N];            /* events of the current round's objects */
static long delivered[K_N];      /* all events delivered, per kind */
static long held_at_destroy;     /* destroys that started while their object's event was held */
static int round_now;
static volatile int stop;
static struct ibv_context *dev;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int track(enum kind k, void *p, uint32_t handle)
{
	pthread_mutex_lock(&lock);
	if (nobjs == MAX_OBJ)
		FAIL("too many objects");
	int i = nobjs++;
	objs[i] = (struct tracked){ k, p, handle, round_now, 0 };
	pthread_mutex_unlock(&lock);
	return i;
}

/* The live object an element points at, or -1. Caller holds `lock`. */
static int find_live(enum kind k, void *p)
{
	for (int i = nobjs - 1; i >= 0; i--)
		if (objs[i].ptr == p && objs[i].kind == k && !objs[i].destroyed)
			return i;
	return -1;
}

static int kind_of(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_CQ_ERR:
		return K_CQ;
	case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR: case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST: case IBV_EVENT_SQ_DRAINED: case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR: case IBV_EVENT_QP_LAST_WQE_REACHED:
		return K_QP;
	case IBV_EVENT_SRQ_ERR: case IBV_EVENT_SRQ_LIMIT_REACHED:
		return K_SRQ;
	default:
		return -1;
	}
}

static uint32_t handle_of(enum kind k, void *p)
{
	switch (k) {
	case K_CQ: return ((struct ibv_cq *)p)->handle;
	case K_QP: return ((struct ibv_qp *)p)->handle;
	default: return ((struct ibv_srq *)p)->handle;
	}
}

static void *reader(void *arg)
{
	(void)arg;
	int fl = fcntl(dev->async_fd, F_GETFL);
	if (fl < 0 || fcntl(dev->async_fd, F_SETFL, fl | O_NONBLOCK) < 0)
		FAIL("fcntl async_fd: %s", strerror(errno));
	while (!stop) {
		struct pollfd pfd = { .fd = dev->async_fd, .events = POLLIN };
		if (poll(&pfd, 1, 50) <= 0)
			continue;
		struct ibv_async_event ev;
		if (ibv_get_async_event(dev, &ev)) {
			/* Only stale records of destroyed objects were queued. */
			if (errno == EAGAIN)
				continue;
			FAIL("ibv_get_async_event: %s", strerror(errno));
		}
		int k = kind_of(ev.event_type);
		if (k < 0) {
			ibv_ack_async_event(&ev);
			continue;
		}
		void *p = k == K_CQ ? (void *)ev.element.cq
			: k == K_QP ? (void *)ev.element.qp : (void *)ev.element.srq;
		pthread_mutex_lock(&lock);
		int i = find_live(k, p);
		if (i < 0)
			FAIL("%s for a %s that is destroyed or unknown (element %p)",
			     ibv_event_type_str(ev.event_type), kind_name[k], p);
		if (handle_of(k, p) != objs[i].handle)
			FAIL("%s element %p has handle %u, created with %u",
			     ibv_event_type_str(ev.event_type), p, handle_of(k, p), objs[i].handle);
		held = i;
		delivered[k]++;
		if (objs[i].round == round_now)
			seen[k] = 1;
		pthread_cond_broadcast(&changed);
		/* In a hold round keep the QP's event until its destroy has begun. */
		double end = now() + 30;
		while (k == K_QP && objs[i].round % 2 && destroying != i && now() < end) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&changed, &lock, &ts);
		}
		pthread_mutex_unlock(&lock);

		usleep(HOLD_US);

		pthread_mutex_lock(&lock);
		if (objs[i].destroyed)
			FAIL("%s: its %s was destroyed before the event was acked",
			     ibv_event_type_str(ev.event_type), kind_name[k]);
		held = -1;
		pthread_mutex_unlock(&lock);
		ibv_ack_async_event(&ev);
	}
	return NULL;
}

static void destroy(int i)
{
	pthread_mutex_lock(&lock);
	if (held == i)
		held_at_destroy++;
	destroying = i;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
	int rc;
	switch (objs[i].kind) {
	case K_CQ: rc = ibv_destroy_cq(objs[i].ptr); break;
	case K_QP: rc = ibv_destroy_qp(objs[i].ptr); break;
	default: rc = ibv_destroy_srq(objs[i].ptr); break;
	}
	if (rc)
		FAIL("destroy %s: %s", kind_name[objs[i].kind], strerror(rc));
	pthread_mutex_lock(&lock);
	objs[i].destroyed = 1;
	pthread_mutex_unlock(&lock);
}

static void to_rts(struct ibv_qp *qp, int gid_index, union ibv_gid gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		FAIL("INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num;
	a.rq_psn = 7;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 64;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		FAIL("RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 7;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		FAIL("RTS");
}

int main(int argc, char **argv)
{
	if (argc != 3)
		FAIL("usage: async_events DEVICE ROUNDS");
	int rounds = atoi(argv[2]);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n && !dev; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			dev = ibv_open_device(list[i]);
	if (!dev)
		FAIL("no device %s", argv[1]);
	struct ibv_port_attr port;
	if (ibv_query_port(dev, 1, &port))
		FAIL("query_port");
	int gid_index = -1;
	union ibv_gid gid;
	for (int i = 0; i < port.gid_tbl_len && gid_index < 0; i++) {
		union ibv_gid g;
		static const uint8_t v4[12] = { [10] = 0xff, [11] = 0xff };
		if (!ibv_query_gid(dev, 1, i, &g) && !memcmp(g.raw, v4, 12)) {
			gid_index = i;
			gid = g;
		}
	}
	if (gid_index < 0)
		FAIL("no IPv4 GID on %s", argv[1]);
	struct ibv_pd *pd = ibv_alloc_pd(dev);
	static char buf[64];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr)
		FAIL("pd/mr");
	pthread_t th;
	if (pthread_create(&th, NULL, reader, NULL))
		FAIL("pthread_create");

	for (int r = 0; r < rounds; r++) {
		pthread_mutex_lock(&lock);
		round_now = r;
		memset(seen, 0, sizeof seen);
		pthread_mutex_unlock(&lock);

		struct ibv_cq *cq = ibv_create_cq(dev, 1, NULL, NULL, 0);
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
		struct ibv_srq *srq = cq ? ibv_create_srq(pd, &sa) : NULL;
		struct ibv_qp_init_attr qa = {
			.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 64, .max_send_sge = 1 },
		};
		struct ibv_qp *qp = srq ? ibv_create_qp(pd, &qa) : NULL;
		if (!qp)
			FAIL("create cq/srq/qp: %s", strerror(errno));
		int icq = track(K_CQ, cq, cq->handle);
		int isrq = track(K_SRQ, srq, srq->handle);
		int iqp = track(K_QP, qp, qp->handle);

		struct ibv_sge sge = { (uintptr_t)buf, sizeof buf, mr->lkey };
		for (int i = 0; i < 4; i++) {
			struct ibv_recv_wr rw = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
			if (ibv_post_srq_recv(srq, &rw, &bad))
				FAIL("post_srq_recv");
		}
		struct ibv_srq_attr limit = { .srq_limit = 4 };
		if (ibv_modify_srq(srq, &limit, IBV_SRQ_LIMIT))
			FAIL("arm SRQ limit");
		to_rts(qp, gid_index, gid);
		/* One SEND lands in the SRQ (below the limit); with its own completion and
		 * the receive's the CQ of one entry overflows. */
		for (int i = 0; i < 3; i++) {
			struct ibv_send_wr sw = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
			struct ibv_send_wr *bad;
			if (ibv_post_send(qp, &sw, &bad))
				FAIL("post_send");
		}
		if (r % 2) {
			/* Hold round: the QP goes to ERR once SRQ and CQ events arrived. */
			double end = now() + 30;
			pthread_mutex_lock(&lock);
			while (!(seen[K_SRQ] && seen[K_CQ]) && now() < end) {
				struct timespec ts = { 0, 0 };
				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_nsec += 10000000;
				if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
				pthread_cond_timedwait(&changed, &lock, &ts);
			}
			pthread_mutex_unlock(&lock);
		}
		struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
		if (ibv_modify_qp(qp, &err, IBV_QP_STATE))
			FAIL("ERR");
		if (r % 2) {
			double end = now() + 30;
			pthread_mutex_lock(&lock);
			while (!(seen[K_SRQ] && seen[K_CQ] && seen[K_QP]) && now() < end) {
				struct timespec ts = { 0, 0 };
				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_nsec += 1000000;
				if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
				pthread_cond_timedwait(&changed, &lock, &ts);
			}
			int got = seen[K_SRQ] && seen[K_CQ] && seen[K_QP];
			pthread_mutex_unlock(&lock);
			if (!got)
				FAIL("round %d: events missing within 30 s: srq %d cq %d qp %d",
				     r, seen[K_SRQ], seen[K_CQ], seen[K_QP]);
		}
		destroy(iqp);
		destroy(isrq);
		destroy(icq);
	}
	/* Let queued records of the last race round be read (and skipped). */
	usleep(200000);
	stop = 1;
	pthread_join(th, NULL);
	printf("rounds %d delivered cq %ld qp %ld srq %ld held_at_destroy %ld\n", rounds,
	       delivered[K_CQ], delivered[K_QP], delivered[K_SRQ], held_at_destroy);
	if (held_at_destroy < rounds / 2)
		FAIL("%ld destroys met a held event, expected at least one per hold round (%d)",
		     held_at_destroy, rounds / 2);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(dev);
	ibv_free_device_list(list);
	printf("all checks passed\n");
	return 0;
}
