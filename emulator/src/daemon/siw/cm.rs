//! The API the RDMA CM driver calls to set up iWARP connections on a siw device.
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

use super::nic::SiwNic;
use super::tcp::ConnPhase;
use crate::daemon::nic::{AppMemory, Errno};
use std::net::SocketAddr;
use std::time::Instant;

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

impl SiwNic {
    /// `rdma_listen`: listens on TCP `local` (port 0: an ephemeral port). Returns the
    /// listener and the bound address. Errors: EADDRINUSE, EADDRNOTAVAIL, EACCES (the
    /// kernel's errors for the bind).
    pub fn listen(
        &mut self,
        local: SocketAddr,
        backlog: u32,
    ) -> Result<(ListenerId, SocketAddr), Errno> {
        self.io.listen(local, backlog)
    }

    /// Stops listening (`rdma_destroy_id` of a listening id). Connections it accepted
    /// stay until accepted, rejected or disconnected. Errors: ENOENT.
    pub fn unlisten(&mut self, listener: ListenerId) -> Result<(), Errno> {
        self.io.unlisten(listener)
    }

    /// `rdma_connect`: binds QP `qpn` to a new TCP connection from `src` (port 0: an
    /// ephemeral port) to `dst`; the MPA Request (with `params`) leaves once TCP is up.
    /// Returns the connection and its local address. Errors: EINVAL (no such QP, not
    /// RC, in ERROR, or private data too long), EISCONN (the QP has a connection),
    /// and the socket's errors (EADDRINUSE, EADDRNOTAVAIL, ENETUNREACH...).
    pub fn connect(
        &mut self,
        qpn: u32,
        src: SocketAddr,
        dst: SocketAddr,
        params: &ConnParams,
    ) -> Result<(ConnId, SocketAddr), Errno> {
        self.check_bindable(qpn, params)?;
        let (conn, local) = self.open_connection(qpn, src, dst, params)?;
        if let Some(qp) = self.qps.get_mut(&qpn) {
            qp.conn = Some(conn);
        }
        Ok((conn, local))
    }

    /// `rdma_accept`: answers the MPA Request of `conn` with a Reply carrying `params`
    /// and binds QP `qpn` to it; the QP is in RTS on return (`Established` follows).
    /// Errors: ENOENT (no such connection), EINVAL (no Request pending, bad QP, private
    /// data too long), EISCONN (the QP has a connection).
    pub fn accept(
        &mut self,
        now: Instant,
        conn: ConnId,
        qpn: u32,
        params: &ConnParams,
        mem: &mut dyn AppMemory,
    ) -> Result<(), Errno> {
        self.check_bindable(qpn, params)?;
        if !matches!(
            self.io.conns.get(&conn).map(|c| &c.phase),
            Some(ConnPhase::RequestPending { .. })
        ) {
            return Err(if self.io.conns.contains_key(&conn) {
                libc::EINVAL
            } else {
                libc::ENOENT
            });
        }
        let cfg = self.iwarp_config(qpn, params, self.io.mss_of(conn));
        self.start_connection(now, conn, qpn, cfg, Some(&params.private_data), mem)?;
        Ok(())
    }

    /// `rdma_reject`: answers the MPA Request of `conn` with a Reply with the R bit and
    /// `private_data`, then closes. Errors: ENOENT, EINVAL (no Request pending, private
    /// data too long).
    pub fn reject(
        &mut self,
        now: Instant,
        conn: ConnId,
        private_data: &[u8],
        mem: &mut dyn AppMemory,
    ) -> Result<(), Errno> {
        self.reject_request(now, conn, private_data, mem)
    }

    /// `rdma_disconnect`: closes the connection (iWARP has no disconnect message: the
    /// TCP stream is closed after what is queued left); its QP's outstanding WRs are
    /// flushed. Any phase; a connection not yet established fails with `ConnectError`
    /// (ECONNRESET) at the active side. Errors: ENOENT.
    pub fn disconnect(&mut self, conn: ConnId) -> Result<(), Errno> {
        self.io.disconnect(conn)?;
        self.pump_all();
        Ok(())
    }

    /// The next event for the RDMA CM driver.
    pub fn poll_cm_event(&mut self) -> Option<SiwCmEvent> {
        self.cm_events.pop_front()
    }

    /// (local, peer) addresses of a connection.
    pub fn conn_addrs(&self, conn: ConnId) -> Option<(SocketAddr, SocketAddr)> {
        self.io.conns.get(&conn).map(|c| (c.local, c.peer))
    }

    /// The QP bound to a connection, if any.
    pub fn conn_qpn(&self, conn: ConnId) -> Option<u32> {
        self.io.conns.get(&conn).and_then(|c| c.qpn)
    }
}
