//! The words of the API the RDMA CM driver calls to set up iWARP connections on a siw
//! device: ids, parameters and events. The calls are `SiwNic`'s (`nic.rs`), carried out by
//! the TCP service (`tcp/service.rs`), so this file names nothing of the device.
//!
//! iWARP connects through TCP, and the RDMA CM port of an iWARP id is the TCP port (as
//! the kernel's iw_cm with siw: `IW_F_NO_PORT_MAP`): `rdma_listen` on port P listens on
//! TCP port P of the device's address, `rdma_connect` opens a TCP connection from the
//! id's source address (its port, or an ephemeral one when 0) to the destination.
//!
//! ```text
//! active                                   passive
//! connect(qpn, src, dst, params) ─TCP─▶    listen(addr) ── accepted, MPA Request read ──▶
//!   └─ MPA Request (private data, IRD/ORD)     SiwCmEvent::ConnectRequest { conn, .. }
//!                                          accept(conn, qpn, params) / reject(conn, pd)
//! SiwCmEvent::Established { .. }  ◀── MPA Reply ──  SiwCmEvent::Established (at accept)
//!   or Rejected { private_data } / ConnectError { errno }
//! disconnect(conn) or modify_qp(SQD/ERR) ─── FIN ──▶ SiwCmEvent::Disconnected
//! every ConnId ends with SiwCmEvent::Closed (the socket is gone; the id is never reused
//! before that)
//! ```
//!
//! The QP goes to RTS by itself when the connection is established (as siw moves it in
//! `siw_proc_mpareply` / `siw_accept`), and to ERROR when the stream ends.

use crate::daemon::devices::nic::Errno;
use std::net::SocketAddr;

/// A listening TCP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenerId(pub u32);

/// One TCP connection (and, once a QP is bound, that QP's iWARP stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

/// `struct rdma_conn_param`'s part iWARP uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnParams {
    /// Private data of the MPA Request (connect) or Reply (accept): at most 508 octets
    /// (512 less the RFC 6581 IRD/ORD word).
    pub private_data: Vec<u8>,
    /// `responder_resources`: Read Requests served at once (IRD), at most 128.
    pub ird: u16,
    /// `initiator_depth`: Read Requests outstanding at once (ORD), at most 128.
    pub ord: u16,
}

/// What the RDMA CM driver hears from the siw device (`SiwNic::poll_cm_event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SiwCmEvent {
    /// Passive side: a TCP connection on `listener` delivered an MPA Request. Answer
    /// with `accept` or `reject` (`RDMA_CM_EVENT_CONNECT_REQUEST`). `ird`/`ord` are the
    /// initiator's (0 for MPA revision 1, which carries none).
    ConnectRequest {
        listener: ListenerId,
        conn: ConnId,
        local: SocketAddr,
        peer: SocketAddr,
        private_data: Vec<u8>,
        ird: u16,
        ord: u16,
    },
    /// Full operation; the QP is in RTS (`RDMA_CM_EVENT_ESTABLISHED`). `private_data` is
    /// the peer's (the Reply's at the initiator, the Request's at the responder);
    /// `ird`/`ord` the negotiated values.
    Established {
        conn: ConnId,
        private_data: Vec<u8>,
        ird: u16,
        ord: u16,
    },
    /// Active side: the peer rejected with an MPA Reply with the R bit
    /// (`RDMA_CM_EVENT_REJECTED`, status ECONNREFUSED, as iw_cm reports it).
    Rejected { conn: ConnId, private_data: Vec<u8> },
    /// Active side: the connection could not be set up. `errno` as the kernel's iw_cm
    /// reports it to `cma_iw_handler`: ECONNREFUSED (TCP refused → `REJECTED`),
    /// ETIMEDOUT (TCP or MPA timeout → `UNREACHABLE`), ECONNRESET (the stream closed or
    /// the Reply was malformed → `REJECTED`), others (`CONNECT_ERROR`).
    ConnectError { conn: ConnId, errno: Errno },
    /// An established connection ended: peer FIN/RST, a Terminate, `disconnect`
    /// (`RDMA_CM_EVENT_DISCONNECTED`). Outstanding WRs were flushed.
    Disconnected { conn: ConnId },
    /// The socket is closed and `conn` is forgotten.
    Closed { conn: ConnId },
}
