/*
 * CQE timestamps through ibv_create_cq_ex on rdma-emu's shim, on the device that serves
 * the address given as argv[1] (the RDMA CM chooses it, so the same program runs RC
 * traffic on an rxe device and on a siw device, which reaches RTS only through the CM):
 *
 *   clock:       ibv_query_device_ex reports a 64-bit completion_timestamp_mask and
 *                hca_core_clock 1 000 000 kHz (one tick a nanosecond);
 *                ibv_query_rt_values_ex answers IBV_VALUES_MASK_RAW_CLOCK with the
 *                count in tv_nsec (tv_sec 0, as mlx4/mlx5), between two CLOCK_MONOTONIC
 *                reads; an unknown comp_mask bit is EINVAL.
 *   flags:       CVLAN, flow tag and TM info are EOPNOTSUPP; the timestamp readers are
 *                set only on a CQ that asked for them.
 *   traffic:     every completion of both sides (sends, receives, RDMA WRITEs, and an
 *                error completion) carries a raw stamp that is non-zero, never goes back
 *                within its CQ, and lies between a CLOCK_MONOTONIC read before posting and
 *                one after polling; its wall-clock stamp lies between CLOCK_REALTIME reads
 *                taken alongside, and differs from the raw stamp by the offset between
 *                the two clocks (within 50 ms).
 *
 * Prints "device NAME", one "ok <check>" line per check; exits 0 only when all hold.
 */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define ITERS 64
#define MSG 64
#define TS_FLAGS (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
/* The NTP slew allowed between the clocks' offset at stamping time and at checking time. */
#define OFFSET_SLACK_NS 50000000LL

static uint64_t now(clockid_t c)
{
	struct timespec t;
	if (clock_gettime(c, &t))
		FAIL("clock_gettime");
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static struct rdma_cm_id *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		FAIL("rdma_get_cm_event: %s", strerror(errno));
	if (ev->event != type)
		FAIL("event %s, expected %s (status %d)", rdma_event_str(ev->event),
		     rdma_event_str(type), ev->status);
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	return id;
}

static struct ibv_cq_ex *cq_ex(struct ibv_context *ctx, uint64_t wc_flags)
{
	struct ibv_cq_init_attr_ex a = { .cqe = 4 * ITERS, .wc_flags = wc_flags };
	return ibv_create_cq_ex(ctx, &a);
}

/* One side of the connection: its PD, timestamped CQ, buffer and MR. */
struct side {
	struct ibv_pd *pd;
	struct ibv_cq_ex *cq;
	struct ibv_mr *mr;
	char buf[ITERS * MSG];
};

static void side_init(struct side *s, struct rdma_cm_id *id)
{
	s->pd = ibv_alloc_pd(id->verbs);
	s->cq = cq_ex(id->verbs, IBV_WC_STANDARD_FLAGS | TS_FLAGS);
	s->mr = s->pd ? ibv_reg_mr(s->pd, s->buf, sizeof(s->buf),
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	if (!s->cq)
		FAIL("ibv_create_cq_ex with both timestamps: %s", strerror(errno));
	if (!s->mr)
		FAIL("pd, mr");
	struct ibv_qp_init_attr init = {
		.send_cq = ibv_cq_ex_to_cq(s->cq), .recv_cq = ibv_cq_ex_to_cq(s->cq),
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 2 * ITERS, .max_recv_wr = ITERS, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	if (rdma_create_qp(id, s->pd, &init))
		FAIL("rdma_create_qp: %s", strerror(errno));
}

struct stamp { uint64_t wr_id; int status; uint64_t ts, wall; };

/* Polls exactly n completions (10 s at most) with the ibv_start_poll API. */
static void poll_ex(struct ibv_cq_ex *cq, int n, struct stamp *out)
{
	struct ibv_poll_cq_attr attr = { 0 };
	uint64_t give_up = now(CLOCK_MONOTONIC) + 10000000000ull;
	int got = 0;
	while (got < n) {
		int r = ibv_start_poll(cq, &attr);
		if (r == ENOENT) {
			if (now(CLOCK_MONOTONIC) > give_up)
				FAIL("poll: %d of %d completions", got, n);
			usleep(10);
			continue;
		}
		if (r)
			FAIL("ibv_start_poll: %d", r);
		do {
			out[got].wr_id = cq->wr_id;
			out[got].status = cq->status;
			out[got].ts = ibv_wc_read_completion_ts(cq);
			out[got].wall = ibv_wc_read_completion_wallclock_ns(cq);
			got++;
		} while (got < n && (r = ibv_next_poll(cq)) == 0);
		ibv_end_poll(cq);
		if (r && r != ENOENT)
			FAIL("ibv_next_poll: %d", r);
	}
}

/* Checks the stamps of n completions polled between (mono0, real0) and (mono1, real1). */
static void check_stamps(const char *what, const struct stamp *s, int n, uint64_t mono0,
			 uint64_t real0, uint64_t mono1, uint64_t real1)
{
	long long offset = (long long)(real1 - mono1);
	for (int i = 0; i < n; i++) {
		if (s[i].ts == 0 || s[i].wall == 0)
			FAIL("%s %d: zero stamp (%llu, %llu)", what, i, (unsigned long long)s[i].ts,
			     (unsigned long long)s[i].wall);
		if (i > 0 && s[i].ts < s[i - 1].ts)
			FAIL("%s %d: raw stamp %llu before the previous %llu", what, i,
			     (unsigned long long)s[i].ts, (unsigned long long)s[i - 1].ts);
		if (s[i].ts < mono0 || s[i].ts > mono1)
			FAIL("%s %d: raw stamp %llu outside [%llu, %llu]", what, i,
			     (unsigned long long)s[i].ts, (unsigned long long)mono0,
			     (unsigned long long)mono1);
		if (s[i].wall < real0 || s[i].wall > real1)
			FAIL("%s %d: wall-clock stamp %llu outside [%llu, %llu]", what, i,
			     (unsigned long long)s[i].wall, (unsigned long long)real0,
			     (unsigned long long)real1);
		long long skew = (long long)(s[i].wall - s[i].ts) - offset;
		if (skew > OFFSET_SLACK_NS || skew < -OFFSET_SLACK_NS)
			FAIL("%s %d: wall clock minus raw is %lld ns off CLOCK_REALTIME - CLOCK_MONOTONIC",
			     what, i, skew);
	}
}

static void check_clock(struct ibv_context *ctx)
{
	struct ibv_device_attr_ex ex;
	if (ibv_query_device_ex(ctx, NULL, &ex))
		FAIL("ibv_query_device_ex");
	if (ex.completion_timestamp_mask != UINT64_MAX || ex.hca_core_clock != 1000000)
		FAIL("completion_timestamp_mask %#llx, hca_core_clock %llu kHz",
		     (unsigned long long)ex.completion_timestamp_mask,
		     (unsigned long long)ex.hca_core_clock);
	printf("ok query_device_ex_clock\n");

	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	uint64_t before = now(CLOCK_MONOTONIC);
	int r = ibv_query_rt_values_ex(ctx, &v);
	uint64_t after = now(CLOCK_MONOTONIC);
	if (r)
		FAIL("ibv_query_rt_values_ex: %d", r);
	if (v.comp_mask != IBV_VALUES_MASK_RAW_CLOCK || v.raw_clock.tv_sec != 0 ||
	    (uint64_t)v.raw_clock.tv_nsec < before || (uint64_t)v.raw_clock.tv_nsec > after)
		FAIL("raw clock: comp_mask %u, %lld s %lld ns, not within [%llu, %llu]",
		     v.comp_mask, (long long)v.raw_clock.tv_sec, (long long)v.raw_clock.tv_nsec,
		     (unsigned long long)before, (unsigned long long)after);
	struct ibv_values_ex bad = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK << 1 };
	if (ibv_query_rt_values_ex(ctx, &bad) != EINVAL)
		FAIL("ibv_query_rt_values_ex with an unknown comp_mask bit is not EINVAL");
	printf("ok query_rt_values\n");
}

static void check_flags(struct ibv_context *ctx)
{
	const uint64_t unsupported[] = { IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_FLOW_TAG,
					 IBV_WC_EX_WITH_TM_INFO };
	for (unsigned i = 0; i < sizeof(unsupported) / sizeof(*unsupported); i++) {
		errno = 0;
		struct ibv_cq_ex *cq = cq_ex(ctx, IBV_WC_STANDARD_FLAGS | TS_FLAGS | unsupported[i]);
		if (cq || errno != EOPNOTSUPP)
			FAIL("wc_flags %#llx: %s, errno %d", (unsigned long long)unsupported[i],
			     cq ? "created" : "refused", errno);
	}
	struct ibv_cq_ex *plain = cq_ex(ctx, IBV_WC_STANDARD_FLAGS);
	struct ibv_cq_ex *raw = cq_ex(ctx, IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP);
	if (!plain || !raw)
		FAIL("ibv_create_cq_ex");
	if (plain->read_completion_ts || plain->read_completion_wallclock_ns ||
	    !raw->read_completion_ts || raw->read_completion_wallclock_ns)
		FAIL("timestamp readers do not follow the wc_flags asked");
	if (ibv_destroy_cq(ibv_cq_ex_to_cq(plain)) || ibv_destroy_cq(ibv_cq_ex_to_cq(raw)))
		FAIL("ibv_destroy_cq");
	printf("ok unsupported_flags\n");
}

static struct side srv, cli;

int main(int argc, char **argv)
{
	if (argc != 2)
		FAIL("usage: cq_timestamps ADDRESS");
	struct sockaddr_in addr = { .sin_family = AF_INET };
	if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1)
		FAIL("bad address %s", argv[1]);

	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *listen, *client;
	if (!sch || !cch || rdma_create_id(sch, &listen, NULL, RDMA_PS_TCP) ||
	    rdma_create_id(cch, &client, NULL, RDMA_PS_TCP))
		FAIL("event channels and ids: %s", strerror(errno));
	if (rdma_bind_addr(listen, (struct sockaddr *)&addr) || rdma_listen(listen, 4))
		FAIL("bind and listen on %s: %s", argv[1], strerror(errno));
	if (!listen->verbs)
		FAIL("%s is no RDMA device's address", argv[1]);
	printf("device %s\n", ibv_get_device_name(listen->verbs->device));
	check_clock(listen->verbs);
	check_flags(listen->verbs);

	addr.sin_port = rdma_get_src_port(listen);
	if (rdma_resolve_addr(client, NULL, (struct sockaddr *)&addr, 2000))
		FAIL("rdma_resolve_addr: %s", strerror(errno));
	expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED);
	if (rdma_resolve_route(client, 2000))
		FAIL("rdma_resolve_route: %s", strerror(errno));
	expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	side_init(&cli, client);
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 7, .rnr_retry_count = 7 };
	if (rdma_connect(client, &param))
		FAIL("rdma_connect: %s", strerror(errno));
	struct rdma_cm_id *child = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	side_init(&srv, child);
	for (int i = 0; i < ITERS; i++) {
		struct ibv_sge sge = { (uintptr_t)srv.buf + i * MSG, MSG, srv.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1000 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(child->qp, &wr, &bad))
			FAIL("post_recv");
	}
	if (rdma_accept(child, &param))
		FAIL("rdma_accept: %s", strerror(errno));
	expect(cch, RDMA_CM_EVENT_ESTABLISHED);
	expect(sch, RDMA_CM_EVENT_ESTABLISHED);

	/* Sends and RDMA WRITEs from the client, receives on the server. */
	uint64_t mono0 = now(CLOCK_MONOTONIC), real0 = now(CLOCK_REALTIME);
	for (int i = 0; i < ITERS; i++) {
		memset(cli.buf + i * MSG, i, MSG);
		struct ibv_sge sge = { (uintptr_t)cli.buf + i * MSG, MSG, cli.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
		if (ibv_post_send(client->qp, &wr, &bad))
			FAIL("post_send %d", i);
		if (i % 8 == 7) {
			wr.wr_id = 500 + i;
			wr.opcode = IBV_WR_RDMA_WRITE;
			wr.wr.rdma.remote_addr = (uintptr_t)srv.buf + i * MSG;
			wr.wr.rdma.rkey = srv.mr->rkey;
			if (ibv_post_send(client->qp, &wr, &bad))
				FAIL("post RDMA WRITE %d", i);
		}
	}
	static struct stamp sent[ITERS + ITERS / 8], received[ITERS];
	poll_ex(cli.cq, ITERS + ITERS / 8, sent);
	poll_ex(srv.cq, ITERS, received);
	uint64_t mono1 = now(CLOCK_MONOTONIC), real1 = now(CLOCK_REALTIME);
	for (int i = 0; i < ITERS + ITERS / 8; i++)
		if (sent[i].status != IBV_WC_SUCCESS)
			FAIL("send completion %llu: %s", (unsigned long long)sent[i].wr_id,
			     ibv_wc_status_str(sent[i].status));
	for (int i = 0; i < ITERS; i++)
		if (received[i].status != IBV_WC_SUCCESS || received[i].wr_id != 1000u + i)
			FAIL("receive completion %d: wr_id %llu, %s", i,
			     (unsigned long long)received[i].wr_id,
			     ibv_wc_status_str(received[i].status));
	check_stamps("send", sent, ITERS + ITERS / 8, mono0, real0, mono1, real1);
	check_stamps("receive", received, ITERS, mono0, real0, mono1, real1);
	printf("ok traffic_stamps (%d completions)\n", 2 * ITERS + ITERS / 8);

	/* An error completion: a send whose lkey is not the MR's. */
	uint64_t mono2 = now(CLOCK_MONOTONIC), real2 = now(CLOCK_REALTIME);
	struct ibv_sge sge = { (uintptr_t)cli.buf, MSG, cli.mr->lkey ^ 0xff00 };
	struct ibv_send_wr wr = { .wr_id = 77, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(client->qp, &wr, &bad))
		FAIL("post_send with a bad lkey");
	struct stamp err;
	poll_ex(cli.cq, 1, &err);
	uint64_t mono3 = now(CLOCK_MONOTONIC), real3 = now(CLOCK_REALTIME);
	if (err.wr_id != 77 || err.status == IBV_WC_SUCCESS)
		FAIL("bad lkey: wr_id %llu, %s", (unsigned long long)err.wr_id,
		     ibv_wc_status_str(err.status));
	if (err.ts < sent[ITERS + ITERS / 8 - 1].ts)
		FAIL("error completion stamped before the last send's");
	check_stamps("error", &err, 1, mono2, real2, mono3, real3);
	printf("ok error_stamps (%s)\n", ibv_wc_status_str(err.status));

	rdma_disconnect(client);
	printf("all checks passed\n");
	return 0;
}
