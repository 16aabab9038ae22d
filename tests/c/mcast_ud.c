/* UD multicast through ibv_attach_mcast / ibv_detach_mcast, as an application built for
 * real hardware does it. Processes coordinate through files in a shared directory.
 *
 *   mcast_ud recv GROUP DIR NAME   attach a UD QP to ::ffff:GROUP, write DIR/NAME.ready,
 *                                  receive message 1 (checked byte for byte, GRH included),
 *                                  detach, write DIR/NAME.detached, then see that
 *                                  message 2 does not arrive.
 *   mcast_ud send GROUP DIR N      wait for N *.ready files, send message 1 to the group
 *                                  (QPN 0xFFFFFF), wait for N *.detached, send message 2.
 *   mcast_ud errors GROUP          the errnos of the verbs (no traffic).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QKEY 0x11111111u
#define LEN 1000
#define SLOT (LEN + 40)

static void die(const char *what) {
    fprintf(stderr, "FAIL %s (errno %d: %s)\n", what, errno, strerror(errno));
    exit(1);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static unsigned char pattern(int msg, int i) { return (unsigned char)(i * 7 + msg * 31 + (i >> 8)); }

struct ctx {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    unsigned char *buf;
    int sgid_index;
};

static void setup(struct ctx *c, enum ibv_qp_type type) {
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n < 1) die("ibv_get_device_list");
    c->ctx = ibv_open_device(list[0]);
    if (!c->ctx) die("ibv_open_device");
    ibv_free_device_list(list);
    c->sgid_index = -1;
    for (int i = 0; i < 16 && c->sgid_index < 0; i++) {
        union ibv_gid g;
        static const unsigned char v4prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (ibv_query_gid(c->ctx, 1, i, &g)) break;
        if (!memcmp(g.raw, v4prefix, 12) && g.raw[12] != 127) c->sgid_index = i;
        else if (!memcmp(g.raw, v4prefix, 12) && c->sgid_index < 0) c->sgid_index = i;
    }
    if (c->sgid_index < 0) die("no IPv4 GID");
    c->pd = ibv_alloc_pd(c->ctx);
    c->cq = ibv_create_cq(c->ctx, 64, NULL, NULL, 0);
    c->buf = calloc(16, SLOT);
    c->mr = ibv_reg_mr(c->pd, c->buf, 16 * SLOT, IBV_ACCESS_LOCAL_WRITE);
    if (!c->pd || !c->cq || !c->mr) die("pd/cq/mr");
    struct ibv_qp_init_attr ia = {
        .send_cq = c->cq, .recv_cq = c->cq, .qp_type = type,
        .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
    };
    c->qp = ibv_create_qp(c->pd, &ia);
    if (!c->qp) die("ibv_create_qp");
    if (type != IBV_QPT_UD) return;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = QKEY};
    if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
        die("INIT");
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE)) die("RTR");
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) die("RTS");
}

static union ibv_gid mgid_of(const char *group) {
    union ibv_gid g;
    memset(&g, 0, sizeof g);
    g.raw[10] = g.raw[11] = 0xff;
    if (inet_pton(AF_INET, group, &g.raw[12]) != 1) die("group address");
    return g;
}

static void touch(const char *dir, const char *name, const char *ext) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s.%s", dir, name, ext);
    FILE *f = fopen(p, "w");
    if (!f) die("create marker");
    fclose(f);
}

static int count(const char *dir, const char *ext) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    if (!d) die("opendir");
    while ((e = readdir(d))) {
        const char *dot = strrchr(e->d_name, '.');
        if (dot && !strcmp(dot + 1, ext)) n++;
    }
    closedir(d);
    return n;
}

static void wait_for(const char *dir, const char *ext, int n) {
    double end = now_s() + 60;
    while (count(dir, ext) < n) {
        if (now_s() > end) die("waiting for markers");
        usleep(10000);
    }
}

static void post_recv(struct ctx *c, int i) {
    struct ibv_sge s = {.addr = (uintptr_t)(c->buf + i * SLOT), .length = SLOT, .lkey = c->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &s, .num_sge = 1}, *bad;
    if (ibv_post_recv(c->qp, &wr, &bad)) die("ibv_post_recv");
}

/* Polls for one completion for at most `secs`; 1 when one came. */
static int poll_one(struct ctx *c, struct ibv_wc *wc, double secs) {
    double end = now_s() + secs;
    while (now_s() < end) {
        int n = ibv_poll_cq(c->cq, 1, wc);
        if (n < 0) die("ibv_poll_cq");
        if (n == 1) return 1;
        usleep(100);
    }
    return 0;
}

static int do_recv(const char *group, const char *dir, const char *name) {
    struct ctx c;
    setup(&c, IBV_QPT_UD);
    union ibv_gid mgid = mgid_of(group);
    for (int i = 0; i < 8; i++) post_recv(&c, i);
    int rc = ibv_attach_mcast(c.qp, &mgid, 0);
    if (rc) { errno = rc; die("ibv_attach_mcast"); }
    printf("attached qpn %u\n", c.qp->qp_num);
    fflush(stdout);
    touch(dir, name, "ready");
    struct ibv_wc wc;
    if (!poll_one(&c, &wc, 30)) die("no multicast message");
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV) die("bad completion");
    if (!(wc.wc_flags & IBV_WC_GRH) || wc.byte_len != 40 + LEN) die("bad GRH flag or length");
    const unsigned char *p = c.buf + wc.wr_id * SLOT;
    unsigned char grp[4];
    inet_pton(AF_INET, group, grp);
    if (memcmp(p + 36, grp, 4)) die("GRH destination is not the group");
    for (int i = 0; i < LEN; i++)
        if (p[40 + i] != pattern(1, i)) { fprintf(stderr, "byte %d differs\n", i); die("payload"); }
    printf("ok received byte for byte from qpn %u\n", wc.src_qp);
    rc = ibv_detach_mcast(c.qp, &mgid, 0);
    if (rc) { errno = rc; die("ibv_detach_mcast"); }
    rc = ibv_detach_mcast(c.qp, &mgid, 0);
    if (rc != EINVAL) { errno = rc; die("second detach is not EINVAL"); }
    touch(dir, name, "detached");
    if (poll_one(&c, &wc, 2.0)) die("a message arrived after detach");
    printf("ok nothing after detach\n");
    if (ibv_destroy_qp(c.qp)) die("ibv_destroy_qp");
    return 0;
}

static void send_msg(struct ctx *c, struct ibv_ah *ah, int msg) {
    unsigned char *p = c->buf + 15 * SLOT;
    for (int i = 0; i < LEN; i++) p[i] = pattern(msg, i);
    struct ibv_sge s = {.addr = (uintptr_t)p, .length = LEN, .lkey = c->mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = msg, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.ud = {.ah = ah, .remote_qpn = 0xffffff, .remote_qkey = QKEY},
    }, *bad;
    if (ibv_post_send(c->qp, &wr, &bad)) die("ibv_post_send");
    struct ibv_wc wc;
    if (!poll_one(c, &wc, 10) || wc.status != IBV_WC_SUCCESS) die("send completion");
    printf("sent message %d\n", msg);
    fflush(stdout);
}

static int do_send(const char *group, const char *dir, int n) {
    struct ctx c;
    setup(&c, IBV_QPT_UD);
    struct ibv_ah_attr aa = {
        .is_global = 1, .port_num = 1,
        .grh = {.dgid = mgid_of(group), .sgid_index = c.sgid_index, .hop_limit = 1},
    };
    struct ibv_ah *ah = ibv_create_ah(c.pd, &aa);
    if (!ah) die("ibv_create_ah");
    wait_for(dir, "ready", n);
    send_msg(&c, ah, 1);
    wait_for(dir, "detached", n);
    send_msg(&c, ah, 2);
    return 0;
}

static int do_errors(const char *group) {
    struct ctx ud, rc;
    setup(&ud, IBV_QPT_UD);
    setup(&rc, IBV_QPT_RC);
    union ibv_gid mgid = mgid_of(group), uni = mgid_of("10.1.2.3");
    union ibv_gid v6 = {.raw = {0xff, 0x0e, [15] = 1}};
#define EXPECT(call, want)                                                               \
    do {                                                                                 \
        int r_ = (call);                                                                 \
        if (r_ != (want)) { fprintf(stderr, "%s = %d, want %d\n", #call, r_, want); exit(1); } \
    } while (0)
    EXPECT(ibv_attach_mcast(rc.qp, &mgid, 0), EINVAL);
    EXPECT(ibv_attach_mcast(ud.qp, &uni, 0), EINVAL);
    EXPECT(ibv_detach_mcast(ud.qp, &mgid, 0), EINVAL);
    EXPECT(ibv_attach_mcast(ud.qp, &mgid, 0), 0);
    EXPECT(ibv_attach_mcast(ud.qp, &mgid, 0), 0);
    EXPECT(ibv_attach_mcast(ud.qp, &v6, 0), 0);
    EXPECT(ibv_destroy_qp(ud.qp), EBUSY);
    EXPECT(ibv_detach_mcast(ud.qp, &v6, 0), 0);
    EXPECT(ibv_detach_mcast(ud.qp, &mgid, 0), 0);
    EXPECT(ibv_destroy_qp(ud.qp), 0);
    struct ibv_device_attr da;
    EXPECT(ibv_query_device(ud.ctx, &da), 0);
    printf("max_mcast_grp %d max_mcast_qp_attach %d max_total_mcast_qp_attach %d\n",
           da.max_mcast_grp, da.max_mcast_qp_attach, da.max_total_mcast_qp_attach);
    printf("ok errors\n");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 5 && !strcmp(argv[1], "recv")) return do_recv(argv[2], argv[3], argv[4]);
    if (argc == 5 && !strcmp(argv[1], "send")) return do_send(argv[2], argv[3], atoi(argv[4]));
    if (argc == 3 && !strcmp(argv[1], "errors")) return do_errors(argv[2]);
    fprintf(stderr, "usage: mcast_ud recv GROUP DIR NAME | send GROUP DIR N | errors GROUP\n");
    return 2;
}
