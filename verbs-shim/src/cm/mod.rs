//! librdmacm.so.1 (RDMACM_1.0 … 1.3): RDMA CM over the daemon.
//!
//! The split is rdma-core's: the daemon plays the kernel's `rdma_ucm` + CMA + IB CM
//! (`wire::client::cm`), this module plays librdmacm's `cma.c`. It owns the
//! `rdma_cm_id` objects, turns the daemon's events into `rdma_cm_event`s (creating the
//! new id of a CONNECT_REQUEST, finishing the active side's handshake on
//! CONNECT_RESPONSE), and moves QPs itself with `ibv_modify_qp` using the attributes
//! the daemon computes (`CmRequest::InitQpAttr`), as librdmacm does with the kernel's
//! `ucma_init_qp_attr`.
//!
//! - [`abi`]: `#[repr(C)]` mirrors of `<rdma/rdma_cma.h>`;
//! - [`addr`]: socket addresses between C and Rust;
//! - [`request`]: one CM request to the daemon, and reading the shim's own `ibv_*` results;
//! - [`device`]: one shared `ibv_context` and default PD per device (`rdma_get_devices`);
//! - [`state`]: what librdmacm keeps per id, channel and event (`CmId`, `Channel`,
//!   `CmEvent`), with the acknowledgement count `rdma_destroy_id` waits on;
//! - [`id`]: event channels and ids (create, destroy, migrate), the id registry events
//!   are looked up in, options, ports and ECE;
//! - [`qp`]: `rdma_create_qp`/`srq`, `rdma_init_qp_attr` and the QP transitions;
//! - [`event`]: `rdma_get_cm_event` / `rdma_ack_cm_event`, per-event processing and the
//!   wait of a synchronous id;
//! - [`route`]: bind, address and route resolution, listen;
//! - [`ep`]: `rdma_create_ep` / `rdma_destroy_ep`;
//! - [`conn`]: connect, `rdma_get_request`, accept, reject, disconnect, multicast;
//! - [`addrinfo`]: `rdma_getaddrinfo` through the system resolver (no ib_acm).
//!
//! A file names only the files listed above it.
//!
//! Every export returns what librdmacm returns: 0, or -1 with `errno` set (`ERR(e)` in
//! cma.c), NULL with `errno` for the pointer functions.
pub mod abi;
pub mod addr;
pub mod addrinfo;
pub mod conn;
pub mod device;
pub mod ep;
pub mod event;
pub mod id;
pub mod qp;
pub mod request;
pub mod route;
pub mod state;
