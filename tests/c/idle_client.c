/*
 * An idle RDMA client: opens the device, creates a PD, a CQ and N RC QPs (taken to INIT),
 * prints "ready" and sleeps until killed. Used to measure what idle clients cost the
 * daemon (CPU, memory per QP).  Usage: idle_client [NUM_QPS] [DEVICE]
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int nqp = argc > 1 ? atoi(argv[1]) : 1;
	const char *want = argc > 2 ? argv[2] : "rxe0";
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), want))
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		fprintf(stderr, "cannot open %s\n", want);
		return 1;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!pd || !cq) {
		perror("pd/cq");
		return 1;
	}
	for (int i = 0; i < nqp; i++) {
		struct ibv_qp_init_attr init = {
			.send_cq = cq, .recv_cq = cq,
			.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};
		struct ibv_qp *qp = ibv_create_qp(pd, &init);
		if (!qp) {
			perror("ibv_create_qp");
			return 1;
		}
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
					 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
			perror("ibv_modify_qp");
			return 1;
		}
	}
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
