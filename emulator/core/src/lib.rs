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

pub mod attr;
pub mod cm;
mod completer;
mod dcqcn;
mod device;
mod dma;
mod execute;
mod input;
pub mod iwarp;
mod mcast;
mod memory;
mod mr;
mod mw;
mod pfc;
mod qp;
mod qp_verbs;
mod requester;
mod responder;
pub mod sim;
pub mod state;
mod timers;
pub mod types;

pub use attr::*;
pub use dcqcn::DcqcnParams;
pub use device::{Device, ForcedResponse, QpStatus, CNP_INTERVAL};
pub use memory::{Memory, MemoryFault, VecMemory};
pub use pfc::{priority_of, PRIORITIES};
pub use types::*;
pub use wire::roce::{Lkey, Psn, Qkey, Qpn, Rkey};
