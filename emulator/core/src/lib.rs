//! The sans-IO device model and InfiniBand transport (RC, UC, UD) of rdma-emu.
//!
//! One [`Device`] per RDMA device (`rxe0`). It reads no clock (time is an
//! [`std::time::Instant`] passed in), opens no socket, spawns no thread and draws no random
//! number of its own: the daemon, the deterministic simulator ([`sim`]) and the fuzzers
//! drive the same code.
//!
//! - Verbs from clients, named as in libibverbs: [`Device::alloc_pd`], [`Device::reg_mr`],
//!   [`Device::create_cq`], [`Device::create_qp`], [`Device::modify_qp`],
//!   [`Device::post_send`], [`Device::post_recv`], ...; errors are [`Errno`] values as
//!   rdma-core returns them.
//! - Multicast (UD): [`Device::attach_mcast`], [`Device::detach_mcast`]; the driver joins
//!   the IP groups [`Device::mcast_groups`] lists on its sockets.
//! - Congestion control: [`Device::congestion_experienced`] (notification point),
//!   [`Device::set_dcqcn`] (the DCQCN reaction point and its pacing, [`DcqcnParams`]).
//! - Input: [`Device::handle_datagram`] (a RoCE v2 UDP payload), [`Device::handle_timeout`].
//! - Output: [`Device::poll_transmit`], [`Device::poll_timeout`],
//!   [`Device::poll_completion`], [`Device::poll_event`].
//! - Application memory is reached through the [`Memory`] trait, only inside registered
//!   ranges, after the key, PD, bounds and access checks.
//!
//! The driver calls the pollers until they are empty, then sleeps until the deadline.
//!
//! # Conventions the driver relies on
//!
//! - Numbering is libibverbs': [`WcStatus`], [`WcOpcode`], [`WrOpcode`], [`QpState`],
//!   [`QpType`] and the flag types convert with `as u32` / `from_raw`; [`QpAttr::path_mtu`]
//!   is the raw `enum ibv_mtu` value (an invalid one fails `modify_qp` with EINVAL).
//! - Immediate data crosses as the `__be32` field's raw value: `SendWr::imm_data` and
//!   `WorkCompletion::imm_data` are `u32`s whose little-endian bytes are the wire bytes,
//!   so WQE and CQE slots copy them unchanged.
//! - [`AddrSpace`] is whose memory an MR covers; inline data not yet copied
//!   (`IBV_SEND_INLINE` without `inline_data`) is read from `AddrSpace(owner.0)`.
//! - [`Datagram::dst`] should be the local address the packet arrived on (the ICRC covers
//!   it); when unspecified every local GID is tried.
//! - Packets leave with `src` = the GID at the path's `sgid_index` and a UDP source port
//!   hashed from the QP pair into `0xC000..=0xFFFF` (or `DeviceConfig::udp_src_port`),
//!   `dst` = dgid:4791, and an ICRC computed as a kernel UDP socket with DF sends them
//!   (IPv4 ID 0).
//!
//! # Example: a device, a PD, a CQ and an RC QP
//!
//! ```
//! use emu_core::sim::node_config;
//! use emu_core::*;
//!
//! let mut dev = Device::new(node_config(0, Mtu::Mtu1024, 7));
//! let client = ClientId(1);
//! let pd = dev.alloc_pd(client)?;
//! let (cq, cqe) = dev.create_cq(client, 16)?;
//! assert!(cqe >= 16);
//! let init = QpInitAttr {
//!     pd,
//!     send_cq: cq,
//!     recv_cq: cq,
//!     srq: None,
//!     cap: QpCap {
//!         max_send_wr: 8,
//!         max_recv_wr: 8,
//!         max_send_sge: 1,
//!         max_recv_sge: 1,
//!         max_inline_data: 0,
//!     },
//!     qp_type: QpType::Rc,
//!     sq_sig_all: false,
//! };
//! let (qpn, _cap) = dev.create_qp(client, &init)?;
//! let (attr, _) = dev.query_qp(qpn)?;
//! assert_eq!(attr.qp_state, QpState::Reset);
//! // A QP that does not exist is EINVAL, as rdma-core says.
//! assert_eq!(dev.query_qp(Qpn(0xdead)).unwrap_err(), Errno::EINVAL);
//! # Ok::<(), Errno>(())
//! ```
//!
//! Two devices that exchange packets are easiest to drive through the simulator; see the
//! example in [`sim`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(missing_debug_implementations)]

pub mod addr;
pub mod attr;
pub mod cm;
mod completer;
mod cq;
mod dcqcn;
mod device;
mod dma;
mod execute;
mod input;
pub mod iwarp;
mod mcast;
mod memory;
mod mpe;
mod mr;
mod mw;
mod np;
mod objects;
mod outcome;
mod path;
mod pfc;
mod qp;
mod qp_verbs;
mod reaction;
mod requester;
mod rereg;
mod responder;
pub mod sim;
pub mod siw_state;
mod srq;
pub mod state;
mod submit;
mod timers;
pub mod types;
mod xrc;

pub use attr::*;
pub use dcqcn::DcqcnParams;
pub use device::Device;
pub use dma::seal_icrc;
pub use memory::{Memory, MemoryFault, VecMemory};
pub use np::CNP_INTERVAL;
pub use pfc::{priority_of, PRIORITIES};
pub use qp::QpStatus;
pub use rereg::{ReregMr, REREG_ACCESS, REREG_PD, REREG_TRANSLATION};
pub use responder::ForcedResponse;
pub use submit::SendRefused;
pub use types::*;
pub use wire::roce::{Lkey, Psn, Qkey, Qpn, Rkey};
