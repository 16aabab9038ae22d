/* Stand-in for rdma-core's libmlx5.so.1 (the mlx5 direct-verbs library).
 *
 * perftest links libmlx5 and calls it only for mlx5-specific modes. rdma-emu
 * devices are never mlx5 devices, so every function answers as the real library
 * does for a device that is not mlx5: "not supported". Built by `cargo xtask shim`. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#define NULL_UNSUPPORTED(name, ...) \
	void *name(__VA_ARGS__) { errno = EOPNOTSUPP; return NULL; }
#define INT_UNSUPPORTED(name, ...) \
	int name(__VA_ARGS__) { return EOPNOTSUPP; }

bool mlx5dv_is_supported(void *device) { (void)device; return false; }
INT_UNSUPPORTED(mlx5dv_query_device, void *ctx, void *attrs)
INT_UNSUPPORTED(mlx5dv_init_obj, void *obj, unsigned long type)
NULL_UNSUPPORTED(mlx5dv_open_device, void *device, void *attr)
NULL_UNSUPPORTED(mlx5dv_create_qp, void *ctx, void *attr, void *mlx5_attr)
NULL_UNSUPPORTED(mlx5dv_qp_ex_from_ibv_qp_ex, void *qp)
NULL_UNSUPPORTED(mlx5dv_create_mkey, void *attr)
INT_UNSUPPORTED(mlx5dv_destroy_mkey, void *mkey)
INT_UNSUPPORTED(mlx5dv_devx_general_cmd, void *ctx, const void *in, size_t inlen, void *out, size_t outlen)
INT_UNSUPPORTED(mlx5dv_crypto_login, void *ctx, void *attr)
INT_UNSUPPORTED(mlx5dv_crypto_login_query_state, void *ctx, void *state)
NULL_UNSUPPORTED(mlx5dv_dek_create, void *ctx, void *attr)
INT_UNSUPPORTED(mlx5dv_dek_destroy, void *dek)
INT_UNSUPPORTED(mlx5dv_dek_query, void *dek, void *attr)
