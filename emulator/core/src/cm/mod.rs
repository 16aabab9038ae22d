//! The InfiniBand connection manager (IBA vol. 1 ch. 12) as RDMA CM uses it over RoCE:
//! a sans-IO state machine, one [`CmAgent`] per device.
//!
//! CM messages are 256-octet MADs (management class 0x07, base version 1, class version 2,
//! method Send) carried in UD SEND_ONLY packets between the QP1s (GSI) of two ports, Q_Key
//! 0x80010000; on RoCE the GRH (the IP header) says who the peer is. The agent neither
//! builds nor parses those packets: the driver hands it the MAD and the two IP addresses
//! ([`CmAgent::handle_mad`]) and sends what [`CmAgent::poll_transmit`] returns to the
//! peer's QP1 ([`gsi`] has the helpers to wrap and unwrap a MAD the way rxe does).
//!
//! Shape (quinn-style, like [`crate::Device`]): no clock, no socket, no randomness of its
//! own (communication IDs, transaction IDs and starting PSNs come from the seed in
//! [`CmConfig`]).
//! - Verbs (librdmacm names): [`CmAgent::listen`], [`CmAgent::connect`],
//!   [`CmAgent::resolve_sidr`], [`CmAgent::accept`], [`CmAgent::accept_sidr`],
//!   [`CmAgent::reject`], [`CmAgent::establish`], [`CmAgent::disconnect`],
//!   [`CmAgent::destroy`]; [`CmAgent::init_qp_attr`] as `rdma_init_qp_attr`.
//! - Input: [`CmAgent::handle_mad`], [`CmAgent::handle_timeout`].
//! - Output: [`CmAgent::poll_transmit`], [`CmAgent::poll_event`],
//!   [`CmAgent::poll_timeout`].
//!
//! The state machine is one table ([`table::step`]); `docs/cm.md` shows it with the
//! timers and the librdmacm event of every transition.

mod agent;
mod conn;
mod format;
pub mod gsi;
pub mod gsi_route;
mod input;
mod machine;
mod qp_attr;
pub mod table;
mod types;

pub use agent::CmAgent;
pub use qp_attr::{ud_qp_attr, unconnected_init_attr, RDMA_UDP_QKEY};
pub use table::CmState;
pub use types::{
    iba_time, reason, sidr_status, CmConfig, CmCounters, CmEvent, CmTransmit, ConnId, ConnParams,
    ConnPath, Owner, PeerInfo, Route,
};
pub use wire::cm::{CmaHeader, PortSpace, ServiceId};
