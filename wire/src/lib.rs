//! Every byte layout that crosses a boundary in rdma-emu, and nothing else.
//!
//! - [`roce`]: the InfiniBand transport headers as RoCE v2 carries them (IBA vol. 1
//!   ch. 9, Annex A17): BTH and its extension headers, the ICRC, CNP.
//! - [`iwarp`]: MPA (RFC 5044, RFC 6581), DDP (RFC 5041) and RDMAP (RFC 5040).
//! - [`cm`]: IB connection-management MADs as RDMA CM uses them over QP1.
//! - [`frame`]: whole frames (Ethernet / IPv4 or IPv6 / UDP or TCP) around them, as
//!   captures and raw backends see them.
//! - [`mac_control`]: 802.3 PAUSE and 802.1Qbb PFC frames (raw backends honour them).
//! - [`client`]: the protocol between an application (the verbs shim) and the daemon:
//!   control requests and replies, and the shared-memory ring slot layouts.
//!
//! # The contract of every view type
//!
//! Views follow smoltcp's `wire` module. `Packet<T: AsRef<[u8]>>` wraps a buffer;
//! `Packet::new_checked` validates the length once (`check_len`), and after it
//! succeeds no getter panics, whatever the bytes hold. `Packet::new_unchecked`
//! skips that check and leaves the caller responsible. A `Repr` is the parsed,
//! validated value: `Repr::parse` checks semantics as well as lengths, `Repr::emit`
//! writes into a buffer of at least `Repr::buffer_len` bytes.
//!
//! Nothing here does I/O, and nothing here is `unsafe`.
#![forbid(unsafe_code)]

pub mod client;
pub mod cm;
pub mod frame;
pub mod iwarp;
pub mod mac_control;
pub mod roce;
