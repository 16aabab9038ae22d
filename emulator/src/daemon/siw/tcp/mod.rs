//! The TCP connections of siw devices, whatever TCP carries them (`net.rs`: the kernel's,
//! or smoltcp's on AF_PACKET; the engine watches one descriptor per device,
//! `Nic::stream_fd`): each connection's bytes fed to its `iwarp::Connection`
//! (`handle_stream`) and its output written with large writes (`poll_stream_transmit`
//! gathered up to 1 MiB per write; what the TCP does not take is kept and output interest
//! set). The engine's MSS is the connection's (the kernel's `TCP_MAXSEG`, or what smoltcp
//! and the peer's SYN allow) so FPDUs stay segment-sized (RFC 5044 §4.1). When the engine
//! is over (`wants_close`) the writing half is shut down (FIN after the last byte, a
//! Terminate included) and the connection closed once the peer's FIN arrived or after
//! `LINGER` (`service.rs`). A FIN or RST from the peer is `handle_stream_closed`.
//!
//! While a connection's engine holds a Send for a receive WR the application posted but
//! the daemon has not taken from its ring yet (`is_waiting_for_recv`), its socket is not
//! read (TCP's window holds the peer back); each pass retries it after the rings were
//! drained. The engines' deadlines (MPA exchange, that wait, a partial FPDU's stall
//! timeout) are part of `poll_timeout` and served by `stream_timeouts`.
//!
//! `streams.rs` owns the socket table; `service.rs` is the per-pass work that moves bytes
//! between the sockets and the engines, and the connections' setup: its `Service` takes
//! the parts of the device it touches (the core, the QPs of `qp.rs`, the streams, the
//! completion and event queues), lent by `SiwNic::service`, and names no `SiwNic`.

mod service;
mod streams;

pub(super) use service::Service;
pub(super) use streams::{ConnPhase, Streams};
