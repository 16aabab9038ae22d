//! [`SiwNic`]: the [`Nic`] of a siw device. PDs, MRs and CQs are an `emu_core::Device`'s
//! (its key table is the STag table, `iwarp::Stags`); QPs are RC only, kept here, and
//! drive an `iwarp::Connection` once the RDMA CM bound them to a TCP connection.
//!
//! QP states are the core's iWARP state machine (`emu_core::siw_state`): while Idle
//! receives may be posted and are kept for the connection, sends fail with ENOTCONN; RTS
//! is reached only through the connection; SQD closes the stream gracefully and the QP
//! returns to Idle (read RESET); ERROR closes it and flushes. This file carries out the
//! connection actions the machine returns.
//!
//! A QP created with an SRQ (`siw/srq.rs`) takes its receives from the core's SRQ, which
//! several QPs share, in posting order; its own receive queue is empty (siw reports
//! `max_recv_wr` 0 for it).

use super::cm::{ConnId, ConnParams, ListenerId, SiwCmEvent};
use super::limits;
use super::net::{KernelNet, StreamNet};
use super::qp::{SiwCounters, SiwQp};
use super::srq;
use super::tcp::{ConnPhase, Service, Streams};
use crate::daemon::config::MpaOptions;
use crate::daemon::devices::core_nic::{event_out, refused, send_wr, sges};
use crate::daemon::devices::nic::{
    AppMemory, Errno, EventElement, Identity, Limits, Nic, Owner, QpCreate,
};
use emu_core as core;
use emu_core::siw_state::{SiwAction, SiwQpState};
use emu_core::U32Map;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::time::Instant;
use wire::client::slot::{CqeRepr, SendWqeRepr, SgeList};
use wire::client::verbs::{access, mtu, qp_attr_mask, qp_type, wc_opcode, wc_status};
use wire::client::{self as proto};

/// The siw device's engine.
pub struct SiwNic {
    pub(super) dev: core::Device,
    pub(super) qps: U32Map<SiwQp>,
    next_qpn: u32,
    pub(super) io: Streams,
    pub(super) completions: VecDeque<(u32, CqeRepr)>,
    pub(super) events: VecDeque<(Owner, u32, EventElement)>,
    pub(super) cm_events: VecDeque<SiwCmEvent>,
    pub(super) counters: SiwCounters,
    mtu: u32,
    /// What the device asks for in MPA (every connection's `IwarpConfig`).
    mpa: MpaOptions,
}

fn e(err: core::Errno) -> Errno {
    err.0
}

impl SiwNic {
    /// A device with no objects on the kernel's TCP; `addrs` are its addresses, `mtu` its
    /// port MTU in bytes.
    pub fn new(name: &str, addrs: &[IpAddr], mtu_bytes: u32, seed: u64) -> io::Result<SiwNic> {
        let net = Box::new(KernelNet::new()?);
        Ok(SiwNic::on(net, name, addrs, mtu_bytes, seed))
    }

    /// [`SiwNic::new`] on the TCP `net`.
    pub(super) fn on(
        net: Box<dyn StreamNet>,
        name: &str,
        addrs: &[IpAddr],
        mtu_bytes: u32,
        seed: u64,
    ) -> SiwNic {
        let l = limits::siw_limits();
        let cfg = core::DeviceConfig {
            name: name.to_string(),
            gids: addrs.iter().map(|ip| core::Gid::from_ip(*ip)).collect(),
            active_mtu: mtu::from_bytes(mtu_bytes)
                .and_then(core::Mtu::from_raw)
                .unwrap_or(core::Mtu::Mtu1024),
            udp_src_port: None,
            limits: core::DeviceLimits {
                max_qp: l.max_qp,
                max_qp_wr: l.max_qp_wr,
                max_sge: l.max_sge,
                max_cq: l.max_cq,
                max_cqe: l.max_cqe,
                max_mr: l.max_mr,
                max_pd: l.max_pd,
                max_srq: l.max_srq,
                // siw rounds an SRQ's depth up to a power of two after checking it
                // against `max_srq_wr`, which is not one.
                max_srq_wr: l.max_srq_wr.next_power_of_two(),
                max_srq_sge: l.max_srq_sge,
                max_inline_data: l.max_inline,
                ..core::DeviceLimits::default()
            },
            seed,
        };
        SiwNic {
            dev: core::Device::new(cfg),
            qps: U32Map::default(),
            next_qpn: 2,
            io: Streams::new(net, addrs),
            completions: VecDeque::new(),
            events: VecDeque::new(),
            cm_events: VecDeque::new(),
            counters: SiwCounters::default(),
            mtu: mtu_bytes,
            mpa: MpaOptions::default(),
        }
    }

    /// The siw engine behind `nic`, for the RDMA CM driver's iWARP calls (`None` on RoCE
    /// devices).
    pub fn of(nic: &mut (dyn Nic + Send)) -> Option<&mut SiwNic> {
        (nic as &mut dyn std::any::Any).downcast_mut()
    }

    /// The device with MPA options `mpa` for the connections it makes or accepts from now
    /// on (default: CRC and markers off).
    pub fn with_mpa(mut self, mpa: MpaOptions) -> SiwNic {
        self.mpa = mpa;
        self
    }

    /// The MPA options of the device.
    pub fn mpa(&self) -> MpaOptions {
        self.mpa
    }

    /// The TCP service (`tcp/service.rs`) over the device's parts: the RDMA CM's calls
    /// (listen, connect, accept…) and the streams' work.
    pub fn service(&mut self) -> Service<'_> {
        Service {
            dev: &mut self.dev,
            qps: &mut self.qps,
            io: &mut self.io,
            completions: &mut self.completions,
            events: &mut self.events,
            cm_events: &mut self.cm_events,
            counters: &mut self.counters,
            mpa: self.mpa,
        }
    }

    /// A receive completion with `status` for a WR the engine never saw.
    fn flush_recv(&mut self, qpn: u32, cq: u32, wr_id: u64) {
        self.completions.push_back((
            cq,
            CqeRepr {
                wr_id,
                status: wc_status::WR_FLUSH_ERR,
                opcode: wc_opcode::RECV,
                qp_num: qpn,
                ..CqeRepr::default()
            },
        ));
    }

    /// The QP leaves the connection: ERROR (flush) or, after SQD, RESET.
    fn qp_error(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        // Error is reachable from every state.
        let _ = qp.state.modify(core::QpState::Err, qp.conn.is_some());
        let recvs: Vec<u64> = qp.pending_recvs.drain(..).map(|w| w.wr_id.0).collect();
        let (cq, conn) = (qp.recv_cq, qp.conn);
        for wr_id in recvs {
            self.flush_recv(qpn, cq, wr_id);
        }
        if let Some(conn) = conn {
            let _ = self.io.disconnect(conn);
        }
        self.service().pump_all();
    }

    /// A send WQE for QP `qpn`: to its connection, flushed in ERROR, refused before the
    /// connection is up.
    fn take_send(&mut self, qpn: u32, wqe: &SendWqeRepr<'_>) -> Result<(), Errno> {
        let qp = self.qps.get(&qpn).ok_or(libc::EINVAL)?;
        let running = qp.conn.and_then(|id| match self.io.conns.get_mut(&id) {
            Some(c) => match &mut c.phase {
                ConnPhase::Running(c) => Some(c),
                _ => None,
            },
            None => None,
        });
        let error = qp.state.is_error();
        match (qp.state.ibv_state() == core::QpState::Rts || error, running) {
            (true, Some(c)) => {
                c.post_send(send_wr(wqe, None)?).map_err(e)?;
            }
            // siw: an ERROR QP flushes at once.
            (true, None) if error => {
                let cq = qp.send_cq;
                let opcode = send_wr(wqe, None)?.opcode.wc_opcode() as u32;
                self.completions.push_back((
                    cq,
                    CqeRepr {
                        wr_id: wqe.wr_id,
                        status: wc_status::WR_FLUSH_ERR,
                        opcode,
                        qp_num: qpn,
                        ..CqeRepr::default()
                    },
                ));
            }
            // siw: "QP out of state" before the connection is up.
            _ => return Err(libc::ENOTCONN),
        }
        self.service().pump_qp(qpn);
        Ok(())
    }
}

/// The RDMA CM's calls (`siw::cm` has the protocol and the words they use), carried out
/// by the TCP service.
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
    /// and the socket's errors (EADDRINUSE, EADDRNOTAVAIL, ENETUNREACH...). With
    /// `local_path`, a connection to one of this device's own listeners runs in memory
    /// (`local.rs`).
    pub fn connect(
        &mut self,
        qpn: u32,
        src: SocketAddr,
        dst: SocketAddr,
        params: &ConnParams,
        local_path: bool,
    ) -> Result<(ConnId, SocketAddr), Errno> {
        self.service().check_bindable(qpn, params)?;
        let (conn, local) = self
            .service()
            .open_connection(qpn, src, dst, params, local_path)?;
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
        self.service().check_bindable(qpn, params)?;
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
        let mss = self.io.mss_of(conn);
        let cfg = self.service().iwarp_config(qpn, params, mss);
        self.service()
            .start_connection(now, conn, qpn, cfg, Some(&params.private_data), mem)?;
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
        self.service().reject_request(now, conn, private_data, mem)
    }

    /// `rdma_disconnect`: closes the connection (iWARP has no disconnect message: the
    /// TCP stream is closed after what is queued left); its QP's outstanding WRs are
    /// flushed. Any phase; a connection not yet established fails with `ConnectError`
    /// (ECONNRESET) at the active side. Errors: ENOENT.
    pub fn disconnect(&mut self, conn: ConnId) -> Result<(), Errno> {
        self.io.disconnect(conn)?;
        self.service().pump_all();
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

impl Nic for SiwNic {
    /// siw's answers (`siw/mod.rs`).
    fn identity(&self) -> Option<&dyn Identity> {
        Some(self)
    }
    fn limits(&self) -> Limits {
        limits::siw_limits()
    }
    fn alloc_pd(&mut self, owner: Owner) -> Result<u32, Errno> {
        self.dev
            .alloc_pd(core::ClientId(owner))
            .map(|p| p.0)
            .map_err(e)
    }
    fn dealloc_pd(&mut self, pd: u32) -> Result<(), Errno> {
        if self.qps.values().any(|q| q.pd == pd) {
            return Err(libc::EBUSY);
        }
        self.dev.dealloc_pd(core::PdHandle(pd)).map_err(e)
    }
    fn reg_mr(
        &mut self,
        owner: Owner,
        pd: u32,
        addr: u64,
        length: u64,
        iova: u64,
        access: u32,
    ) -> Result<(u32, u32), Errno> {
        // siw has no FLUSH: an MR may not grant it. EINVAL, as Debian 12's kernel (6.1,
        // before FLUSH) answers for every device; rdma-core's suite skips on it.
        let flush = core::AccessFlags::FLUSH_GLOBAL.0 | core::AccessFlags::FLUSH_PERSISTENT.0;
        if access & flush != 0 {
            return Err(libc::EINVAL);
        }
        crate::daemon::devices::core_nic::reg_mr_on(
            &mut self.dev,
            owner,
            pd,
            addr,
            length,
            iova,
            access,
        )
    }
    fn dereg_mr(&mut self, lkey: u32) -> Result<(), Errno> {
        self.dev.dereg_mr(core::Lkey(lkey)).map_err(e)
    }
    /// siw has no memory windows (`SIW_MAX_MW` 0).
    fn alloc_mw(&mut self, _owner: Owner, _pd: u32, _mw_type: u32) -> Result<(u32, u32), Errno> {
        Err(libc::EOPNOTSUPP)
    }
    fn dealloc_mw(&mut self, _mw: u32) -> Result<(), Errno> {
        Err(libc::EINVAL)
    }
    fn create_cq(&mut self, owner: Owner, cqe: u32) -> Result<(u32, u32), Errno> {
        let (h, depth) = self.dev.create_cq(core::ClientId(owner), cqe).map_err(e)?;
        Ok((h.0, depth))
    }
    fn destroy_cq(&mut self, cq: u32) -> Result<(), Errno> {
        if self
            .qps
            .values()
            .any(|q| q.send_cq == cq || q.recv_cq == cq)
        {
            return Err(libc::EBUSY);
        }
        self.dev.destroy_cq(core::CqHandle(cq)).map_err(e)
    }
    fn create_srq(
        &mut self,
        owner: Owner,
        pd: u32,
        attr: &proto::SrqAttr,
    ) -> Result<(u32, proto::SrqAttr), Errno> {
        srq::create(&mut self.dev, owner, pd, attr)
    }
    fn modify_srq(&mut self, srq: u32, attr: &proto::SrqAttr, mask: u32) -> Result<(), Errno> {
        srq::modify(&mut self.dev, srq, attr, mask)
    }
    fn query_srq(&self, srq: u32) -> Result<proto::SrqAttr, Errno> {
        srq::query(&self.dev, srq)
    }
    fn destroy_srq(&mut self, srq: u32) -> Result<(), Errno> {
        srq::destroy(&mut self.dev, &self.qps, srq)
    }
    /// Queues the receive on the SRQ; a connection waiting for a receive WR takes it on
    /// the engine's next pass (`Service::resume_input`).
    fn post_srq_recv(&mut self, srq: u32, wr_id: u64, list: SgeList<'_>) -> Result<(), Errno> {
        let wr = core::RecvWr {
            wr_id: core::WrId(wr_id),
            sg_list: sges(list),
        };
        self.dev.post_srq_recv(core::SrqHandle(srq), wr).map_err(e)
    }
    /// The SRQ's ring slots stay taken until a connection takes their receives, so the
    /// SRQ holds no more than its `max_wr` (siw's SRQ ring is full then: ENOMEM).
    fn srq_outstanding(&self, srq: u32) -> Option<usize> {
        self.dev.srq_outstanding(core::SrqHandle(srq))
    }
    /// iWARP has no address handles (siw has no `create_ah`).
    fn create_ah(&mut self, _pd: u32, _attr: &proto::AhAttr) -> Result<u32, Errno> {
        Err(libc::EOPNOTSUPP)
    }
    fn destroy_ah(&mut self, _ah: u32) -> Result<(), Errno> {
        Err(libc::EINVAL)
    }
    /// `siw_create_qp`: RC only (EOPNOTSUPP), queue sizes up to 32768 and SGEs up to 6
    /// (EINVAL), a send queue of at least one WR (EINVAL); depths round up to powers of
    /// two.
    fn create_qp(&mut self, owner: Owner, init: &QpCreate) -> Result<(u32, proto::QpCap), Errno> {
        if init.qp_type != qp_type::RC {
            return Err(libc::EOPNOTSUPP);
        }
        if let Some(s) = init.srq {
            srq::check_usable(&self.dev, s)?;
        }
        let c = init.cap;
        if c.max_send_wr > limits::MAX_QP_WR
            || c.max_recv_wr > limits::MAX_QP_WR
            || c.max_send_sge > limits::MAX_SGE
            || c.max_recv_sge > limits::MAX_SGE
            || c.max_inline_data > limits::MAX_INLINE
            || c.max_send_wr == 0
        {
            return Err(libc::EINVAL);
        }
        if self.qps.len() >= limits::MAX_QP as usize {
            return Err(libc::ENOMEM);
        }
        let mut qpn = self.next_qpn;
        while self.qps.contains_key(&qpn) || qpn < 2 {
            qpn = (qpn + 1) & 0xff_ffff;
        }
        self.next_qpn = (qpn + 1) & 0xff_ffff;
        let cap = proto::QpCap {
            max_send_wr: c.max_send_wr.next_power_of_two(),
            // Verbs 6.3.7, as siw: the RQ size is ignored when an SRQ is present.
            max_recv_wr: if c.max_recv_wr == 0 || init.srq.is_some() {
                0
            } else {
                c.max_recv_wr.next_power_of_two()
            },
            ..c
        };
        self.qps.insert(
            qpn,
            SiwQp {
                owner,
                pd: init.pd,
                send_cq: init.send_cq,
                recv_cq: init.recv_cq,
                cap,
                sq_sig_all: init.sq_sig_all,
                // An iWARP QP starts Idle (RDMAC verbs have no Reset), which reads as
                // INIT, as rdma-core's suite expects of RNICs (see compatibility.md).
                state: SiwQpState::new(),
                access: 0,
                conn: None,
                pending_recvs: Vec::new(),
                srq: init.srq,
            },
        );
        tracing::debug!(qpn, "siw: QP created");
        Ok((qpn, cap))
    }
    fn modify_qp(
        &mut self,
        _now: Instant,
        qpn: u32,
        attr: &proto::QpAttr,
        mask: u32,
    ) -> Result<(), Errno> {
        let qp = self.qps.get_mut(&qpn).ok_or(libc::EINVAL)?;
        if mask & qp_attr_mask::ACCESS_FLAGS != 0 {
            qp.access = attr.qp_access_flags;
        }
        if mask & qp_attr_mask::STATE == 0 {
            return Ok(());
        }
        let to = core::QpState::from_raw(attr.qp_state).ok_or(libc::EINVAL)?;
        match qp.state.modify(to, qp.conn.is_some()).map_err(e)? {
            SiwAction::None => {}
            SiwAction::Forget => qp.conn = None,
            SiwAction::Close => {
                if let Some(conn) = qp.conn {
                    let _ = self.io.disconnect(conn);
                }
                self.service().pump_all();
            }
            SiwAction::FlushAndDrop => self.qp_error(qpn),
        }
        Ok(())
    }
    /// As `siw_query_qp`: sizes, the negotiated IRD/ORD, the port MTU, siw's access
    /// flags; plus the state (which siw leaves out).
    fn query_qp(&self, qpn: u32) -> Result<proto::QpAttr, Errno> {
        let qp = self.qps.get(&qpn).ok_or(libc::EINVAL)?;
        let neg = qp
            .conn
            .and_then(|c| self.io.conns.get(&c))
            .and_then(|c| match &c.phase {
                ConnPhase::Running(c) => c.negotiated().map(|n| (n.ird, n.ord)),
                _ => None,
            });
        let (ird, ord) = neg.unwrap_or((0, 0));
        Ok(proto::QpAttr {
            qp_state: qp.state.ibv_state() as u32,
            cur_qp_state: qp.state.ibv_state() as u32,
            path_mtu: mtu::from_bytes(self.mtu).unwrap_or(mtu::MTU_1024),
            cap: qp.cap,
            max_rd_atomic: ord.min(255) as u8,
            max_dest_rd_atomic: ird.min(255) as u8,
            qp_access_flags: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
            port_num: 1,
            ..proto::QpAttr::default()
        })
    }
    fn destroy_qp(&mut self, qpn: u32) -> Result<(), Errno> {
        let qp = self.qps.remove(&qpn).ok_or(libc::EINVAL)?;
        if let Some(id) = qp.conn {
            if let Some(c) = self.io.conns.get_mut(&id) {
                c.qpn = None;
            }
            let _ = self.io.disconnect(id);
        }
        self.completions.retain(|(_, c)| c.qp_num != qpn);
        self.events
            .retain(|(_, _, el)| !matches!(el, EventElement::Qp(q) if *q == qpn));
        Ok(())
    }
    fn post_send(
        &mut self,
        _now: Instant,
        qpn: u32,
        wqe: &SendWqeRepr<'_>,
        _ah: Option<u32>,
        _mem: &mut dyn AppMemory,
    ) -> Result<(), core::SendRefused> {
        self.take_send(qpn, wqe).map_err(refused)
    }
    fn post_recv(&mut self, qpn: u32, wr_id: u64, list: SgeList<'_>) -> Result<(), Errno> {
        let qp = self.qps.get_mut(&qpn).ok_or(libc::EINVAL)?;
        let wr = core::RecvWr {
            wr_id: core::WrId(wr_id),
            sg_list: sges(list),
        };
        let running = qp.conn.and_then(|id| match self.io.conns.get_mut(&id) {
            Some(c) => match &mut c.phase {
                ConnPhase::Running(c) => Some(c),
                _ => None,
            },
            None => None,
        });
        match running {
            Some(c) => c.post_recv(wr).map_err(e)?,
            None if qp.state.is_error() => {
                let cq = qp.recv_cq;
                self.flush_recv(qpn, cq, wr_id);
            }
            None => {
                if qp.pending_recvs.len() >= qp.cap.max_recv_wr as usize {
                    return Err(libc::ENOMEM);
                }
                qp.pending_recvs.push(wr);
            }
        }
        self.service().pump_qp(qpn);
        Ok(())
    }
    fn qp_to_error(&mut self, _now: Instant, qpn: u32) {
        self.qp_error(qpn);
    }
    fn release_client(&mut self, now: Instant, owner: Owner) {
        let qpns: Vec<u32> = self
            .qps
            .iter()
            .filter(|(_, q)| q.owner == owner)
            .map(|(n, _)| *n)
            .collect();
        for qpn in qpns {
            let _ = self.destroy_qp(qpn);
        }
        self.dev.release_client(now, core::ClientId(owner));
    }
    /// siw has no datagrams.
    fn handle_datagram(
        &mut self,
        _now: Instant,
        _src: SocketAddr,
        _dst: SocketAddr,
        _payload: &[u8],
        _sealed: bool,
        _mem: &mut dyn AppMemory,
    ) {
    }
    fn handle_timeout(&mut self, now: Instant, mem: &mut dyn AppMemory) {
        self.service().stream_timeouts(now, mem);
    }
    fn poll_transmit(
        &mut self,
        _now: Instant,
        _mem: &mut dyn AppMemory,
        _buf: &mut Vec<u8>,
    ) -> Option<crate::daemon::devices::nic::TxMeta> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.io.poll_timeout()
    }
    fn poll_completion(&mut self) -> Option<(u32, CqeRepr)> {
        self.completions.pop_front()
    }
    /// The connections' events, then the core's (an SRQ's limit event).
    fn poll_event(&mut self) -> Option<(Owner, u32, EventElement)> {
        self.events
            .pop_front()
            .or_else(|| self.dev.poll_event().map(event_out))
    }
    fn counters(&self) -> Vec<(String, u64)> {
        let c = self.counters;
        [
            ("connections", c.connections),
            ("rx_bytes", c.rx_bytes),
            ("tx_bytes", c.tx_bytes),
            ("terminates_sent", c.terminates_sent),
            ("terminates_rcvd", c.terminates_rcvd),
            ("mpa_failures", c.mpa_failures),
            // A gauge: connections whose input waits for a receive WR right now.
            ("recv_waiting", self.io.waiting_for_recv()),
        ]
        .into_iter()
        .chain(self.io.net_counters())
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
    fn qp_counters(&self, qpn: u32) -> Option<Vec<(String, u64)>> {
        let qp = self.qps.get(&qpn)?;
        let (c, waiting) = qp
            .conn
            .and_then(|id| self.io.conns.get(&id))
            .and_then(|c| match &c.phase {
                ConnPhase::Running(c) => Some((c.counters(), c.is_waiting_for_recv())),
                _ => None,
            })
            .unwrap_or_default();
        Some(
            [
                ("tx_fpdus", c.tx_fpdus),
                ("rx_fpdus", c.rx_fpdus),
                ("crc_errors", c.crc_errors),
                ("terminates_sent", c.terminates_sent),
                ("terminates_rcvd", c.terminates_rcvd),
                ("recv_waits", c.recv_waits),
                ("recv_waiting", u64::from(waiting)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        )
    }
    fn stream_fd(&self) -> Option<RawFd> {
        Some(self.io.raw_fd())
    }
    fn handle_streams(&mut self, now: Instant, readable: bool, mem: &mut dyn AppMemory) -> bool {
        self.service().service_streams(now, readable, mem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::roce::Qpn;

    fn params() -> ConnParams {
        ConnParams {
            private_data: vec![1, 2, 3],
            ird: 4,
            ord: 200,
        }
    }

    #[test]
    fn connections_ask_for_the_devices_mpa_options() {
        let lo = [IpAddr::from([127, 0, 0, 1])];
        let mut plain = SiwNic::new("siw0", &lo, 4096, 1).expect("siw device");
        let cfg = plain.service().iwarp_config(7, &params(), 1460);
        assert_eq!((cfg.crc, cfg.markers), (false, false), "off, as Linux siw");
        for (crc, markers) in [(true, false), (false, true), (true, true)] {
            let mut nic = SiwNic::new("siw0", &lo, 4096, 1)
                .expect("siw device")
                .with_mpa(MpaOptions { crc, markers });
            let cfg = nic.service().iwarp_config(7, &params(), 1460);
            assert_eq!((cfg.crc, cfg.markers), (crc, markers));
            // The rest is the connection's, whatever the options.
            assert_eq!((cfg.qpn, cfg.ird, cfg.ord), (Qpn(7), 4, 128));
            assert_eq!(cfg.private_data, vec![1, 2, 3]);
        }
    }
}
