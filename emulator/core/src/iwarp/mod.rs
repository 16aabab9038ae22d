//! The iWARP transport (RDMAP over DDP over MPA over TCP) of one RC QP, sans-IO.
//!
//! A [`Connection`] is the engine of one iWARP QP over one reliable byte stream. Like the
//! RoCE core it reads no clock, opens no socket and draws no random number; the driver
//! (the daemon's TCP backend, the tests' simulated stream, the fuzzers) moves bytes:
//!
//! - construct with [`Connection::initiator`] (the side that called `connect`: it sends
//!   the MPA Request) or [`Connection::responder`] (the side that accepted the TCP
//!   connection); the responder sees [`IwarpEvent::ConnectRequest`] and answers with
//!   [`Connection::accept`] or [`Connection::reject`];
//! - verbs: [`Connection::post_send`], [`Connection::post_recv`],
//!   [`Connection::close`], [`Connection::terminate`];
//! - input: [`Connection::handle_stream`] (bytes as TCP delivered them, any chunking),
//!   [`Connection::handle_stream_closed`], [`Connection::handle_timeout`];
//! - output: [`Connection::poll_stream_transmit`] (bytes for TCP to send),
//!   [`Connection::poll_completion`], [`Connection::poll_event`],
//!   [`Connection::poll_timeout`], [`Connection::wants_close`].
//!
//! Memory is reached through [`crate::Memory`] after the STag checks of a [`Stags`]
//! table ([`crate::Device`] is one: STag = the MR's key, same PD/bounds/access checks as
//! RoCE). Work requests and completions are the core's [`crate::SendWr`],
//! [`crate::RecvWr`] and [`crate::WorkCompletion`] in libibverbs numbering.
//!
//! See `docs/iwarp.md` for the protocol choices and the Terminate table.

mod config;
mod conn;
pub mod ext;
mod held;
mod mpa;
mod outbox;
mod placement;
mod rx;
mod stags;
mod tx;

pub use config::{
    Completion, IwarpConfig, IwarpCounters, IwarpEvent, MpaOffer, Negotiated, Role, RtrKind,
    RtrOffer,
};
pub use conn::{Connection, RECV_WAIT, RX_STALL_TIMEOUT};
pub use mpa::mulpdu;
pub use stags::{MrEntry, MrTable, StagError, Stags};
