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
//!
//! # Example: an RDMA WRITE Only packet, emitted, sealed and parsed back
//!
//! ```
//! use std::net::Ipv4Addr;
//! use wire::roce::{
//!     icrc, Body, Header, Packet, PacketRepr, Psn, Qpn, Request, RethRepr, Rkey, WriteSeg,
//! };
//!
//! let repr = PacketRepr {
//!     header: Header::new(Qpn(0x11), Psn::new(0x00ff_fffe)),
//!     body: Body::RcRequest(Request::Write(WriteSeg::Only(RethRepr {
//!         va: 0x7f00_0000_1000,
//!         rkey: Rkey(0x1234),
//!         dma_len: 5,
//!     }))),
//!     payload: b"hello",
//! };
//! // BTH (12) + RETH (16) + 5 octets + 3 of pad + ICRC (4).
//! assert_eq!(repr.buffer_len(), 40);
//! let mut buf = vec![0u8; repr.buffer_len()];
//! let mut out = Packet::new_unchecked(&mut buf[..]);
//! repr.emit(&mut out);
//!
//! // The ICRC covers the packet and the IP/UDP headers it travels in.
//! let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
//! let crc = icrc::for_udp4(src, dst, 0xc000, 4791, out.icrc_covered());
//! out.set_icrc(crc);
//!
//! // Receive side: check the length once, then parse; no accessor panics after that.
//! let packet = Packet::new_checked(&buf[..])?;
//! assert_eq!(packet.opcode().0, 0x0a); // RC RDMA WRITE Only
//! assert_eq!(PacketRepr::parse(&packet)?, repr);
//! let covered = buf.len() - 4; // the ICRC does not cover itself
//! let ip = icrc::udp4_ip_header(src, dst, 0, covered);
//! let udp = icrc::udp_header(0xc000, 4791, covered);
//! assert!(icrc::verify_ipv4(&ip, &udp, &buf));
//!
//! // A truncated packet is an error, not a panic.
//! assert!(Packet::new_checked(&buf[..20]).is_err());
//! # Ok::<(), wire::roce::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(missing_debug_implementations)]

pub mod client;
pub mod cm;
pub mod frame;
pub mod iwarp;
pub mod mac_control;
pub mod roce;
