/* Stand-in for rdma-core's libefa.so.1 (AWS EFA direct verbs).
 *
 * perftest links libefa and calls it only for EFA devices. rdma-emu devices are
 * never EFA devices, so every function answers as the real library does for a
 * non-EFA device: "not supported". Built by `cargo xtask shim`. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

void *efadv_create_driver_qp(void *pd, void *attr, uint32_t driver_qp_type)
{ (void)pd; (void)attr; (void)driver_qp_type; errno = EOPNOTSUPP; return NULL; }
void *efadv_create_qp_ex(void *ctx, void *attr, void *efa_attr, uint32_t inlen)
{ (void)ctx; (void)attr; (void)efa_attr; (void)inlen; errno = EOPNOTSUPP; return NULL; }
int efadv_query_device(void *ctx, void *attr, uint32_t inlen)
{ (void)ctx; (void)attr; (void)inlen; return EOPNOTSUPP; }
int efadv_query_ah(void *ah, void *attr, uint32_t inlen)
{ (void)ah; (void)attr; (void)inlen; return EOPNOTSUPP; }
void *efadv_create_cq(void *ctx, void *attr, void *efa_attr, uint32_t inlen)
{ (void)ctx; (void)attr; (void)efa_attr; (void)inlen; errno = EOPNOTSUPP; return NULL; }
void *efadv_cq_from_ibv_cq_ex(void *cq)
{ (void)cq; errno = EOPNOTSUPP; return NULL; }
