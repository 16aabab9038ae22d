/* Stand-in for rdma-core's libefa.so.1 (AWS EFA direct verbs); see common.h.
 * perftest, pyverbs and libfabric's efa provider link it and call it only for
 * EFA devices. efadv_*_from_ibv_*_ex are casts in the real library; here they
 * answer NULL, since no object they could convert exists. */
#include "common.h"

STUB_PTR(efadv_create_driver_qp)
STUB_PTR(efadv_create_qp_ex)
STUB_ERR(efadv_query_ah)
STUB_ERR(efadv_query_device)
STUB_PTR(efadv_cq_from_ibv_cq_ex)
STUB_PTR(efadv_create_cq)
STUB_ERR(efadv_query_mr)
STUB_ERR(efadv_query_qp_wqs)
STUB_ERR(efadv_query_cq)
STUB_NEG(efadv_get_max_sq_depth)
STUB_NEG(efadv_get_max_rq_depth)
STUB_PTR(efadv_qp_from_ibv_qp_ex)
