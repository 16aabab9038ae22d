/* Shared by the vendor stand-ins (libmlx5.so.1, libefa.so.1).
 *
 * rdma-emu devices are never devices of these vendors, so every function of the
 * stand-ins answers as the real library answers for a device of another vendor.
 * rdma-core's direct-verbs entry points follow a few conventions, one per return
 * type; each stand-in function is declared with the macro of its convention:
 *
 *   STUB_PTR   object constructors:        NULL, errno = EOPNOTSUPP
 *   STUB_ERR   int verbs ("0 or errno"):    EOPNOTSUPP (positive)
 *   STUB_NEG   int verbs ("0 or -errno"):   -EOPNOTSUPP
 *   STUB_M1    descriptors and byte counts: -1, errno = EOPNOTSUPP
 *   STUB_VOID  destructors of objects that cannot exist here: nothing
 *   STUB_FALSE predicates (mlx5dv_is_supported): false
 *
 * The functions are defined without a parameter list: on the C ABIs rdma-core
 * supports the caller owns its arguments, so a callee that ignores them may leave
 * them undeclared, and one definition serves every prototype.
 *
 * The set of names and their version nodes is the real libraries' (see *.map, made
 * by `cargo xtask stub-maps` from rdma-core's own version scripts); the link uses
 * --no-undefined-version, so a name of the map without a definition here fails the
 * build. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#define STUB_PTR(name) \
	void *name() { errno = EOPNOTSUPP; return NULL; }
#define STUB_ERR(name) \
	int name() { return EOPNOTSUPP; }
#define STUB_NEG(name) \
	int name() { return -EOPNOTSUPP; }
#define STUB_M1(name) \
	long name() { errno = EOPNOTSUPP; return -1; }
#define STUB_VOID(name) \
	void name() { }
#define STUB_FALSE(name) \
	bool name() { return false; }
