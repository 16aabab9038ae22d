//! libibverbs' private ABI, one version node per rdma-core release.
//!
//! libibverbs exports a few functions for its own tools and pyverbs under
//! `IBVERBS_PRIVATE_<N>`, where N changes with each release's private ABI (v44: 34, v57:
//! 57, v59: 59). A pyverbs built from release N binds `ibv_query_gid_type@IBVERBS_PRIVATE_N`
//! and does not load without it. The function is the same in every release, so the
//! shim exports one implementation under each release's node: `ibv_query_gid_type` has
//! the default (`@@IBVERBS_PRIVATE_34`, from `exports.txt`); the aliases here carry the
//! other nodes through `.symver`, as rdma-core binds a symbol to an older node.

use crate::abi::ibv_context;
use core::ffi::c_int;

macro_rules! query_gid_type_at {
    ($alias:ident, $node:literal) => {
        /// `ibv_query_gid_type` under another release's private node.
        #[no_mangle]
        pub extern "C" fn $alias(
            context: *mut ibv_context,
            port_num: u8,
            index: u32,
            type_: *mut c_int,
        ) -> c_int {
            crate::device::ibv_query_gid_type(context, port_num, index, type_)
        }
        core::arch::global_asm!(concat!(
            ".symver ",
            stringify!($alias),
            ", ibv_query_gid_type@",
            $node
        ));
    };
}

query_gid_type_at!(ibv_query_gid_type_pabi_57, "IBVERBS_PRIVATE_57");
query_gid_type_at!(ibv_query_gid_type_pabi_59, "IBVERBS_PRIVATE_59");
