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
//! - Input: [`Device::handle_datagram`] (a RoCE v2 UDP payload), [`Device::handle_timeout`].
//! - Output: [`Device::poll_transmit`], [`Device::poll_timeout`],
//!   [`Device::poll_completion`], [`Device::poll_event`].
//! - Application memory is reached through the [`Memory`] trait, only inside registered
//!   ranges, after the key, PD, bounds and access checks.
//!
//! The driver calls the pollers until they are empty, then sleeps until the deadline.

pub mod attr;
mod completer;
mod device;
mod dma;
mod input;
mod memory;
mod mr;
mod mw;
mod qp;
mod qp_verbs;
mod requester;
mod responder;
pub mod sim;
pub mod state;
mod timers;
pub mod types;

pub use attr::*;
pub use device::Device;
pub use memory::{Memory, MemoryFault, VecMemory};
pub use types::*;
pub use wire::roce::{Lkey, Psn, Qkey, Qpn, Rkey};
