/*
 * exchange.h - what both sides of the "atomic_write+flush" interop pair share
 * (flush_requester.c on the host, flush_responder.c in the guest): the failure macro, one
 * line at a time over the TCP connection that carries the QP parameters, GIDs as 32 hex
 * digits, the device by name, and the RC QP's moves to RTR and RTS.
 *
 * Header-only (static functions) so that the guest compiles its program from the share
 * with no build system: gcc finds this file beside the source.
 */
#ifndef RDMA_EMU_INTEROP_EXCHANGE_H
#define RDMA_EMU_INTEROP_EXCHANGE_H

#include <infiniband/verbs.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); putchar('\n'); fflush(stdout); exit(1); } while (0)

/* One line from fd, without its newline; -1 when the peer closed first. */
static int read_line(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	while (n + 1 < cap) {
		ssize_t r = read(fd, buf + n, 1);
		if (r <= 0)
			return -1;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = 0;
	return 0;
}

static void send_line(int fd, const char *s)
{
	size_t len = strlen(s);
	if (write(fd, s, len) != (ssize_t)len)
		FAIL("write to the peer: %s", strerror(errno));
}

static void gid_hex(const union ibv_gid *gid, char out[33])
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", gid->raw[i]);
}

/* 0 when hex holds exactly 32 hex digits. */
static int gid_parse(const char *hex, union ibv_gid *gid)
{
	if (strlen(hex) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned b;
		if (sscanf(hex + 2 * i, "%2x", &b) != 1)
			return -1;
		gid->raw[i] = b;
	}
	return 0;
}

/* The device called name, opened; its port 1 and the GID at gid_index. */
static struct ibv_context *open_named(const char *name, int gid_index, struct ibv_port_attr *port,
				      union ibv_gid *gid)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && list[i] && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!ctx)
		FAIL("device %s not found", name);
	if (ibv_query_port(ctx, 1, port) || ibv_query_gid(ctx, 1, gid_index, gid))
		FAIL("query port/gid: %s", strerror(errno));
	return ctx;
}

/*
 * INIT -> RTR -> RTS towards the peer's QP dqpn at dgid. timeout 18 (1.07 s): the guest's
 * rxe runs under TCG (docs/interop.md); retry_cnt and rnr_retry 7.
 */
static void connect_rc(struct ibv_qp *qp, enum ibv_mtu mtu, uint32_t dqpn, uint32_t rq_psn,
		       uint32_t sq_psn, const union ibv_gid *dgid, int sgid_index,
		       uint8_t max_dest_rd_atomic, uint8_t max_rd_atomic)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = max_dest_rd_atomic;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = sgid_index;
	a.ah_attr.grh.hop_limit = 64;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		FAIL("modify to RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 18;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = sq_psn;
	a.max_rd_atomic = max_rd_atomic;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		FAIL("modify to RTS: %s", strerror(errno));
}

#endif
