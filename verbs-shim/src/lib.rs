//! Drop-in libibverbs.so.1 and librdmacm.so.1 for rdma-emu.
//!
//! Unmodified RDMA programs load this library instead of rdma-core's (through
//! `LD_LIBRARY_PATH`, see `cargo xtask shim`) and reach the daemon `rdma-emud`, which
//! is the NIC. The crate is a thin ABI adapter:
//!
//! - [`abi`]: `#[repr(C)]` mirrors of rdma-core v44's structs, checked against the
//!   system's `verbs.h` by `tests/abi_layout.rs`;
//! - [`ffi`]: the one shape of every export (panics caught, errors converted once);
//! - [`client`]: the control connection (wire::client protocol, SCM_RIGHTS);
//! - [`context`]: the shim's state behind an `ibv_context`;
//! - [`objects`]: the objects the verbs create (PD, AH, MW, CQ, QP, SRQ), owning their
//!   state;
//! - [`device`], [`verbs`], [`cq`], [`qp`]: the control-path verbs;
//! - [`async_event`]: async events and the destroy-side wait for their acks;
//! - [`datapath`], [`wr_api`], [`cq_ex`]: the `ibv_context.ops` hot path, the `ibv_wr_*`
//!   API and the `ibv_start_poll` API, ring operations on shared memory;
//! - [`misc`]: helpers and the operations rdma-emu does not implement;
//! - [`mr_ex`]: rdma-core v59's `ibv_reg_mr_ex` and DMA handles;
//! - [`private_abi`]: `ibv_query_gid_type` under each release's private node;
//! - [`shared_mr`]: opt-in shared memory regions (`RDMA_EMU_SHARED_MR=1`);
//! - [`cm`]: librdmacm's RDMA CM over the daemon;
//! - [`rsocket`]: librdmacm's rsockets (stream sockets over RC, rdma-core's protocol);
//! - [`rdmacm`]: re-exports of the rsocket functions.
//!
//! `exports.txt` lists every exported symbol with its version node.
//!
//! # Pointer contract
//!
//! The exported functions are C entry points: like rdma-core's, they trust that every
//! pointer argument is NULL or points to what the verbs API says (an object this
//! library returned, or caller memory of the documented size). That contract cannot be
//! expressed in their Rust signatures without making every C caller's call `unsafe` in
//! name only, so clippy's `not_unsafe_ptr_arg_deref` is allowed crate-wide; each
//! dereference still carries its `// SAFETY:` comment.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod abi;
pub mod async_event;
pub mod backoff;
pub mod client;
pub mod cm;
pub mod context;
pub mod cq;
pub mod cq_ex;
pub mod datapath;
pub mod device;
pub mod ffi;
pub mod log;
pub mod misc;
pub mod mmap;
pub mod mr_ex;
pub mod mr_rereg;
pub mod objects;
pub mod private_abi;
pub mod qp;
pub mod rdmacm;
pub mod rsocket;
pub mod shared_mr;
pub mod verbs;
pub mod wr_api;
pub mod xrc;
