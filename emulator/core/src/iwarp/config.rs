//! The public types of an iWARP connection: configuration, negotiation results, events
//! and completions.

use std::time::Duration;

use wire::iwarp::mpa::IrdOrd;
use wire::iwarp::{Error as WireError, TerminateError};
use wire::roce::Qpn;

use crate::attr::WorkCompletion;
use crate::types::{CqHandle, PdHandle, SrqHandle};

/// Which zero-length message serves as the RFC 6581 RTR (ready to receive) message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RtrKind {
    /// Zero-length Send (B bit; siw's ZERO_LENGTH_RTR / cxgb4's SEND0).
    Send,
    /// Zero-length RDMA Write (C bit).
    Write,
    /// Zero-length RDMA Read (D bit).
    Read,
}

/// The RTR kinds a side supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RtrOffer {
    /// Zero-length Send.
    pub send: bool,
    /// Zero-length RDMA Write.
    pub write: bool,
    /// Zero-length RDMA Read.
    pub read: bool,
}

impl RtrOffer {
    /// Every kind.
    pub const ALL: RtrOffer = RtrOffer {
        send: true,
        write: true,
        read: true,
    };

    /// The kind a responder picks among `self` (what the initiator offered) and `ours`,
    /// in siw's order of preference: Write, then Read, then Send.
    pub fn pick(self, ours: RtrOffer) -> Option<RtrKind> {
        if self.write && ours.write {
            Some(RtrKind::Write)
        } else if self.read && ours.read {
            Some(RtrKind::Read)
        } else if self.send && ours.send {
            Some(RtrKind::Send)
        } else {
            None
        }
    }
}

/// How a connection is set up. The defaults are Linux siw's: MPA revision 2,
/// peer-to-peer, CRC and markers off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IwarpConfig {
    /// The local QP number (reported in completions).
    pub qpn: Qpn,
    /// The QP's protection domain.
    pub pd: PdHandle,
    /// Where send completions go.
    pub send_cq: CqHandle,
    /// Where receive completions go.
    pub recv_cq: CqHandle,
    /// Every send WR is signaled.
    pub sq_sig_all: bool,
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// The shared receive queue the QP takes its receives from (`ibv_qp_init_attr.srq`),
    /// reached through the [`super::Stags`] table's device, in posting order; `None`: the
    /// QP's own receive queue.
    pub srq: Option<SrqHandle>,
    /// Largest inline data.
    pub max_inline_data: u32,
    /// Whose memory `IBV_SEND_INLINE` SGEs name when the WR has no `inline_data` copy
    /// (the QP owner's, as the RoCE core reads `AddrSpace(owner.0)`).
    pub inline_space: crate::types::AddrSpace,
    /// MPA revision to request (1 or 2); a responder answers a revision 2 request with 2
    /// only when this is 2.
    pub revision: u8,
    /// Ask for CRCs (C flag). CRCs are used in both directions when either side asks
    /// (RFC 5044 §7.1): a responder without it still answers a Request with C set with C
    /// set, and an initiator without it uses CRCs when the Reply has C set.
    pub crc: bool,
    /// Ask the peer to insert markers in its stream to us (M flag). Per direction: we
    /// insert markers into our stream only when the peer's frame had M set.
    pub markers: bool,
    /// Offer / accept the RFC 6581 peer-to-peer mode (revision 2 only).
    pub peer_to_peer: bool,
    /// RTR kinds offered (initiator) or accepted (responder).
    pub rtr: RtrOffer,
    /// Inbound RDMA Read queue depth (Read Requests served at once).
    pub ird: u16,
    /// Outbound RDMA Read queue depth (Read Requests outstanding at once).
    pub ord: u16,
    /// The path's effective MSS, from which the MULPDU is derived.
    pub mss: u32,
    /// Private data of the MPA Request (initiator).
    pub private_data: Vec<u8>,
    /// Offer the rdma-emu extensions (RFC 7306 atomics and immediate data).
    pub extensions: bool,
    /// How long the MPA exchange may take.
    pub mpa_timeout: Duration,
}

impl Default for IwarpConfig {
    fn default() -> IwarpConfig {
        IwarpConfig {
            qpn: Qpn(0),
            pd: PdHandle(0),
            send_cq: CqHandle(0),
            recv_cq: CqHandle(0),
            sq_sig_all: false,
            max_send_wr: 1024,
            max_recv_wr: 1024,
            srq: None,
            max_inline_data: 512,
            inline_space: crate::types::AddrSpace(0),
            revision: 2,
            crc: false,
            markers: false,
            peer_to_peer: true,
            rtr: RtrOffer::ALL,
            ird: 32,
            ord: 32,
            mss: 1460,
            private_data: Vec::new(),
            extensions: true,
            mpa_timeout: Duration::from_secs(10),
        }
    }
}

/// Which end of the MPA exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Sends the MPA Request.
    Initiator,
    /// Answers with the MPA Reply.
    Responder,
}

/// What an MPA Request offered (shown to the responder's consumer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpaOffer {
    /// Revision.
    pub revision: u8,
    /// C flag.
    pub crc: bool,
    /// M flag.
    pub markers: bool,
    /// RFC 6581 IRD/ORD word (revision 2).
    pub ird_ord: Option<IrdOrd>,
    /// Reserved flag bits as received.
    pub reserved_flags: u8,
    /// Private data (after the IRD/ORD word).
    pub private_data: Vec<u8>,
}

/// What the MPA exchange decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Revision in use.
    pub revision: u8,
    /// CRCs in both directions.
    pub crc: bool,
    /// Markers in the stream we send.
    pub markers_tx: bool,
    /// Markers in the stream we receive.
    pub markers_rx: bool,
    /// Effective IRD (Read Requests we serve at once).
    pub ird: u16,
    /// Effective ORD (Read Requests we issue at once).
    pub ord: u16,
    /// The RTR message, in peer-to-peer mode.
    pub rtr: Option<RtrKind>,
    /// Both ends are rdma-emu: atomics and immediate data available.
    pub extensions: bool,
    /// The peer's private data.
    pub private_data: Vec<u8>,
}

/// Something the driver or consumer must know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IwarpEvent {
    /// Responder: an MPA Request arrived; answer with `accept` or `reject`.
    ConnectRequest(MpaOffer),
    /// Full operation (initiator: after the Reply; responder: after `accept`).
    Established(Negotiated),
    /// Initiator: the responder rejected (R bit), with its private data.
    Rejected {
        /// The Reply's private data.
        private_data: Vec<u8>,
    },
    /// A Terminate was sent (`local`) or received; the QP is in error.
    Terminated {
        /// Layer, type and code.
        error: TerminateError,
        /// Sent by us.
        local: bool,
    },
    /// The MPA exchange failed: a bad Request/Reply or stream (no Terminate possible).
    MpaFailed(WireError),
    /// The MPA exchange did not finish in time.
    MpaTimeout,
    /// The connection is over: transmit what is pending, then close the TCP stream.
    Closed,
}

/// A completion with its CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// Send or receive CQ of the QP.
    pub cq: CqHandle,
    /// The work completion.
    pub wc: WorkCompletion,
    /// A receive completion of a message with the Solicited Event bit.
    pub solicited: bool,
}

/// Counters of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IwarpCounters {
    /// FPDUs sent.
    pub tx_fpdus: u64,
    /// FPDUs received.
    pub rx_fpdus: u64,
    /// FPDUs with a bad CRC.
    pub crc_errors: u64,
    /// Terminates sent.
    pub terminates_sent: u64,
    /// Terminates received.
    pub terminates_rcvd: u64,
    /// Sends that found no receive WR and waited for one (input held, `RECV_WAIT`).
    pub recv_waits: u64,
}
