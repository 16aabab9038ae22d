//! The TCP half of one siw engine pass: ready listeners accepted, each connection's
//! socket read into its engine and the engine's output written back (both within a
//! per-pass budget), engine events turned into CM events, completions and async events,
//! and closed connections reaped. The sockets themselves are the table's
//! (`streams.rs`); this file owns only the constants that pace the I/O.

use super::streams::{Conn, ConnPhase, Origin, Outcome, Streams};
use crate::daemon::config::MpaOptions;
use crate::daemon::devices::core_nic::{cqe_out, Bridge};
use crate::daemon::devices::nic::Owner;
use crate::daemon::devices::nic::{AppMemory, Errno, EventElement};
use crate::daemon::siw::cm::{ConnId, ConnParams, ListenerId, SiwCmEvent};
use crate::daemon::siw::limits;
use crate::daemon::siw::net::{
    Ready, StreamNet, DEFAULT_MSS, TOKEN_CONN, TOKEN_KIND, TOKEN_LISTENER,
};
use crate::daemon::siw::qp::{SiwCounters, SiwQp};
use emu_core as core;
use emu_core::iwarp::{Connection, IwarpConfig, IwarpEvent};
use emu_core::siw_state::LlpEvent;
use emu_core::U32Map;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use wire::client::slot::CqeRepr;
use wire::client::verbs::event_type;
use wire::iwarp::terminate::{TermLayer, TerminateError};
use wire::roce::Qpn;

/// How long a closed connection waits for the peer's FIN before the socket is closed.
const LINGER: Duration = Duration::from_secs(2);
/// Most octets kept from a passive connection before its MPA Request was answered
/// (a Request is at most 532 octets; the initiator sends nothing more until the Reply).
const RAW_MAX: usize = 64 * 1024;
/// Output gathered per `write`.
const TX_CHUNK: usize = 1 << 20;
/// Octets read or written per connection and pass (fairness between connections).
const IO_BUDGET: usize = 8 << 20;

/// Rounds of one pass while the local path moves octets between this device's own
/// connections (`LocalNet::take_moved`).
const LOCAL_ROUNDS: usize = 3;

fn is_would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// The async event a Terminate becomes: received → `QP_FATAL`; sent for the peer's
/// protection error → `QP_ACCESS_ERR`, for its operation / untagged-buffer error →
/// `QP_REQ_ERR`; otherwise `QP_FATAL`.
fn terminate_event(error: TerminateError, local: bool) -> u32 {
    if !local {
        return event_type::QP_FATAL;
    }
    match error.fields() {
        (TermLayer::Rdmap, 1, _) | (TermLayer::Ddp, 1, _) => event_type::QP_ACCESS_ERR,
        (TermLayer::Rdmap, 2, _) | (TermLayer::Ddp, 2, _) => event_type::QP_REQ_ERR,
        _ => event_type::QP_FATAL,
    }
}

/// The TCP service of a siw device over the parts of its `SiwNic` it touches, lent for
/// one call: connections in and out, their streams, and the RDMA CM's calls.
pub struct Service<'a> {
    pub(in crate::daemon::siw) dev: &'a mut core::Device,
    pub(in crate::daemon::siw) qps: &'a mut U32Map<SiwQp>,
    pub(in crate::daemon::siw) io: &'a mut Streams,
    pub(in crate::daemon::siw) completions: &'a mut VecDeque<(u32, CqeRepr)>,
    pub(in crate::daemon::siw) events: &'a mut VecDeque<(Owner, u32, EventElement)>,
    pub(in crate::daemon::siw) cm_events: &'a mut VecDeque<SiwCmEvent>,
    pub(in crate::daemon::siw) counters: &'a mut SiwCounters,
    /// What the device asks for in MPA (every connection's `IwarpConfig`).
    pub(in crate::daemon::siw) mpa: MpaOptions,
}

impl Service<'_> {
    /// The QP may be bound to a new connection with `params`.
    pub(in crate::daemon::siw) fn check_bindable(
        &self,
        qpn: u32,
        params: &ConnParams,
    ) -> Result<(), Errno> {
        let qp = self.qps.get(&qpn).ok_or(libc::EINVAL)?;
        if qp.conn.is_some() {
            return Err(libc::EISCONN);
        }
        if !qp.state.bindable() {
            return Err(libc::EINVAL);
        }
        // RFC 5044 §7.1 / RFC 6581: 512 octets with the 4-octet IRD/ORD word.
        if params.private_data.len() > 508 {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    /// The engine configuration of QP `qpn` for a connection with `params`: the device's
    /// MPA options are what it asks for; the engine adds whatever the peer asks for
    /// (RFC 5044 §7.1).
    pub(in crate::daemon::siw) fn iwarp_config(
        &self,
        qpn: u32,
        params: &ConnParams,
        mss: u32,
    ) -> IwarpConfig {
        let max = limits::MAX_IRD as u16;
        let mut cfg = IwarpConfig {
            qpn: Qpn(qpn),
            ird: params.ird.min(max),
            ord: params.ord.min(max),
            mss,
            private_data: params.private_data.clone(),
            crc: self.mpa.crc,
            markers: self.mpa.markers,
            ..IwarpConfig::default()
        };
        if let Some(qp) = self.qps.get(&qpn) {
            cfg.pd = core::PdHandle(qp.pd);
            cfg.send_cq = core::CqHandle(qp.send_cq);
            cfg.recv_cq = core::CqHandle(qp.recv_cq);
            cfg.sq_sig_all = qp.sq_sig_all;
            cfg.max_send_wr = qp.cap.max_send_wr.max(1);
            cfg.max_recv_wr = qp.cap.max_recv_wr;
            cfg.srq = qp.srq.map(core::SrqHandle);
            cfg.max_inline_data = qp.cap.max_inline_data;
            cfg.inline_space = core::AddrSpace(qp.owner);
        }
        cfg
    }

    /// Builds the engine of connection `id` for QP `qpn` (TCP is up: the active side's
    /// connect finished, or the passive side accepts) and hands it the QP's receives.
    pub(in crate::daemon::siw) fn start_connection(
        &mut self,
        now: Instant,
        id: ConnId,
        qpn: u32,
        cfg: IwarpConfig,
        // `Some(private data of the Reply)` when accepting, `None` when connecting.
        accept: Option<&[u8]>,
        mem: &mut dyn AppMemory,
    ) -> Result<(), Errno> {
        let Service { io, dev, qps, .. } = self;
        let Some(conn) = io.conns.get_mut(&id) else {
            return Err(libc::ENOENT);
        };
        let mut c = match accept {
            None => Connection::initiator(now, cfg),
            Some(reply_private_data) => {
                let ConnPhase::RequestPending { raw } = &conn.phase else {
                    return Err(libc::EINVAL);
                };
                let mut c = Connection::responder(now, cfg);
                c.handle_stream(now, raw, &mut **dev, &mut Bridge(mem));
                while c.poll_event().is_some() {}
                c.accept(reply_private_data).map_err(|e| e.0)?;
                c
            }
        };
        if let Some(qp) = qps.get_mut(&qpn) {
            for wr in qp.pending_recvs.drain(..) {
                let _ = c.post_recv(wr);
            }
            qp.conn = Some(id);
        }
        // Bytes that arrived after the Request, and a FIN seen while it was pending.
        c.handle_stream(now, &[], &mut **dev, &mut Bridge(mem));
        if conn.eof {
            c.handle_stream_closed(now);
        }
        conn.qpn = Some(qpn);
        conn.phase = ConnPhase::Running(Box::new(c));
        io.set_interest(id);
        self.counters.connections += 1;
        self.pump(id);
        Ok(())
    }

    /// The TCP backend's work of one engine pass: ready sockets (`readable`: the
    /// engine saw the epoll set ready), then every connection's output, engine events
    /// and completions, then closed connections. Whether anything happened.
    pub(in crate::daemon::siw) fn service_streams(
        &mut self,
        now: Instant,
        readable: bool,
        mem: &mut dyn AppMemory,
    ) -> bool {
        let mut worked = self.io.expire_listeners(now);
        // What the local path moved to a connection of this device is served in the
        // same pass, a bounded number of times (a request and its response).
        for round in 0..LOCAL_ROUNDS {
            worked |= self.serve_ready(now, readable && round == 0, mem);
            let ids: Vec<ConnId> = self.io.conns.keys().copied().collect();
            for id in ids {
                worked |= self.resume_input(now, id, mem);
                worked |= self.flush(now, id, mem);
                worked |= self.pump(id);
            }
            if !self.io.net.take_moved() {
                break;
            }
        }
        worked |= self.reap();
        worked |= self.io.net.transmit(now);
        worked
    }

    /// Takes what the sockets report ready (`readable`: the epoll set is) to the
    /// listeners and connections. Whether any was.
    fn serve_ready(&mut self, now: Instant, readable: bool, mem: &mut dyn AppMemory) -> bool {
        let mut worked = false;
        let mut ready = std::mem::take(&mut self.io.ready);
        self.io.net.poll(now, readable, &mut ready);
        for r in &ready {
            worked = true;
            let id = (r.token & 0xffff_ffff) as u32;
            match r.token & TOKEN_KIND {
                TOKEN_LISTENER => {
                    let lid = self.io.listeners.iter().find(|(_, l)| l.net_id == id);
                    if let Some((&lid, _)) = lid {
                        self.accept_all(now, lid);
                    }
                }
                TOKEN_CONN => self.conn_ready(now, ConnId(id), *r, mem),
                _ => {}
            }
        }
        self.io.ready = ready;
        worked
    }

    /// A connection whose input waits for a receive WR (`is_waiting_for_recv`) goes on
    /// once one was posted: the held Send and the octets buffered behind it are
    /// processed and the socket is read again. Whether it went on.
    fn resume_input(&mut self, now: Instant, id: ConnId, mem: &mut dyn AppMemory) -> bool {
        let Service { io, dev, .. } = self;
        let Some(ConnPhase::Running(engine)) = io.conns.get_mut(&id).map(|c| &mut c.phase) else {
            return false;
        };
        if !engine.is_waiting_for_recv() {
            return false;
        }
        engine.handle_stream(now, &[], &mut **dev, &mut Bridge(mem));
        let resumed = !engine.is_waiting_for_recv();
        if resumed {
            tracing::debug!(conn = id.0, "siw: receive WR posted, input resumed");
            io.set_interest(id);
        }
        resumed
    }

    /// The engines' timeouts and lingering closes (`Nic::handle_timeout`).
    pub(in crate::daemon::siw) fn stream_timeouts(
        &mut self,
        now: Instant,
        mem: &mut dyn AppMemory,
    ) {
        let ids: Vec<ConnId> = self.io.conns.keys().copied().collect();
        for id in ids {
            if let Some(c) = self.io.conns.get_mut(&id) {
                match &mut c.phase {
                    ConnPhase::Running(e) => e.handle_timeout(now),
                    ConnPhase::AwaitRequest { probe, .. } => {
                        probe.handle_timeout(now);
                        if probe.is_closed() {
                            self.counters.mpa_failures += 1;
                            c.dead = true;
                        }
                    }
                    _ => {}
                }
                if c.linger_until.is_some_and(|t| t <= now) {
                    c.dead = true;
                }
            }
            self.flush(now, id, mem);
            self.pump(id);
        }
        self.reap();
        self.io.net.transmit(now);
    }

    fn accept_all(&mut self, now: Instant, lid: ListenerId) {
        for _ in 0..64 {
            let Some(net_id) = self.io.listeners.get(&lid).map(|l| l.net_id) else {
                return;
            };
            let id = self.io.alloc_id();
            let Some(a) = self.io.net.accept(net_id, id) else {
                return;
            };
            tracing::debug!(conn = id, local = %a.local, peer = %a.peer, "siw: TCP connection accepted");
            let mut conn = Conn::new(
                a.local,
                a.peer,
                Some(lid),
                ConnPhase::AwaitRequest {
                    probe: Box::new(Connection::responder(now, IwarpConfig::default())),
                    raw: Vec::new(),
                },
                Origin::Accept,
                (true, false),
            );
            conn.mss = a.mss;
            self.io.conns.insert(ConnId(id), conn);
        }
    }

    fn conn_ready(&mut self, now: Instant, id: ConnId, r: Ready, mem: &mut dyn AppMemory) {
        let Streams { conns, net, .. } = &mut self.io;
        let Some(c) = conns.get_mut(&id) else {
            return;
        };
        if r.output {
            c.want_out = false;
        }
        if let ConnPhase::Connecting { .. } = c.phase {
            if !(r.output || r.hup) {
                return;
            }
            let mss = match net.connected(id.0) {
                Ok(mss) => mss,
                Err(errno) => {
                    tracing::debug!(conn = id.0, errno, "siw: TCP connect failed");
                    c.outcome = Outcome::Failed;
                    c.dead = true;
                    self.cm_events
                        .push_back(SiwCmEvent::ConnectError { conn: id, errno });
                    return;
                }
            };
            c.mss = mss;
            let phase =
                std::mem::replace(&mut c.phase, ConnPhase::RequestPending { raw: Vec::new() });
            let ConnPhase::Connecting { qpn, mut cfg } = phase else {
                return;
            };
            cfg.mss = mss;
            tracing::debug!(conn = id.0, qpn, mss, "siw: TCP connected, MPA Request out");
            if self
                .start_connection(now, id, qpn, *cfg, None, mem)
                .is_err()
            {
                if let Some(c) = self.io.conns.get_mut(&id) {
                    c.dead = true;
                }
            }
            return;
        }
        if r.input || r.hup {
            self.read(now, id, mem);
        }
    }

    fn read(&mut self, now: Instant, id: ConnId, mem: &mut dyn AppMemory) {
        let Service {
            io,
            dev,
            cm_events,
            counters,
            ..
        } = self;
        let Streams {
            conns, rx_buf, net, ..
        } = io;
        let Some(conn) = conns.get_mut(&id) else {
            return;
        };
        let mut budget = IO_BUDGET;
        while !conn.eof && !conn.dead && budget > 0 {
            match &conn.phase {
                ConnPhase::Connecting { .. } => break,
                ConnPhase::Running(e) if e.is_waiting_for_recv() => break,
                _ => {}
            }
            // A running engine's octets go straight into its deframer.
            let direct = match &mut conn.phase {
                ConnPhase::Running(engine) => engine.stream_space(conn.rx_space),
                _ => None,
            };
            let (placed, offered) = (direct.is_some(), direct.as_ref().map_or(0, |s| s.len()));
            let n = match net.read(id.0, direct.unwrap_or(rx_buf)) {
                Ok(n) => n,
                Err(e) if is_would_block(&e) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ECONNRESET and the like: the stream is over.
                Err(_) => 0,
            };
            counters.rx_bytes += n as u64;
            if placed && n > 0 {
                if n == offered {
                    conn.rx_space = (conn.rx_space * 2).min(rx_buf.len());
                }
                budget = budget.saturating_sub(n);
                if let ConnPhase::Running(engine) = &mut conn.phase {
                    engine.handle_stream_filled(now, n, &mut **dev, &mut Bridge(mem));
                }
                continue;
            }
            if n == 0 {
                conn.eof = true;
                match &mut conn.phase {
                    ConnPhase::Running(engine) => engine.handle_stream_closed(now),
                    ConnPhase::AwaitRequest { .. } => conn.dead = true,
                    _ => {}
                }
                if conn.shut {
                    conn.dead = true;
                }
                break;
            }
            budget = budget.saturating_sub(n);
            let data = &rx_buf[..n];
            match &mut conn.phase {
                ConnPhase::Running(engine) => {
                    engine.handle_stream(now, data, &mut **dev, &mut Bridge(mem));
                }
                ConnPhase::AwaitRequest { probe, raw } => {
                    raw.extend_from_slice(data);
                    probe.handle_stream(now, data, &mut **dev, &mut Bridge(mem));
                    let mut offer = None;
                    let mut failed = false;
                    while let Some(ev) = probe.poll_event() {
                        match ev {
                            IwarpEvent::ConnectRequest(o) => offer = Some(o),
                            _ => failed = true,
                        }
                    }
                    if let (Some(o), false) = (offer, failed) {
                        let raw = std::mem::take(raw);
                        let (ird, ord) = o.ird_ord.map_or((0, 0), |w| (w.ird, w.ord));
                        tracing::debug!(conn = id.0, ird, ord, "siw: MPA Request received");
                        conn.phase = ConnPhase::RequestPending { raw };
                        cm_events.push_back(SiwCmEvent::ConnectRequest {
                            listener: conn.listener.unwrap_or(ListenerId(0)),
                            conn: id,
                            local: conn.local,
                            peer: conn.peer,
                            private_data: o.private_data,
                            ird,
                            ord,
                        });
                    } else if failed || probe.is_closed() || raw.len() > RAW_MAX {
                        tracing::debug!(conn = id.0, "siw: bad MPA Request, connection closed");
                        counters.mpa_failures += 1;
                        conn.dead = true;
                    }
                }
                ConnPhase::RequestPending { raw } => {
                    raw.extend_from_slice(data);
                    if raw.len() > RAW_MAX {
                        conn.dead = true;
                    }
                }
                ConnPhase::Connecting { .. } => {}
            }
        }
        io.set_interest(id);
    }

    /// Writes what the connection's engine produced; shuts the writing half down when
    /// the engine is over. Whether any octet left.
    fn flush(&mut self, now: Instant, id: ConnId, mem: &mut dyn AppMemory) -> bool {
        let Service {
            io, dev, counters, ..
        } = self;
        let Some(conn) = io.conns.get_mut(&id) else {
            return false;
        };
        let ConnPhase::Running(engine) = &mut conn.phase else {
            return false;
        };
        if conn.dead {
            return false;
        }
        let mut wrote = 0usize;
        loop {
            if conn.tx_at >= conn.tx.len() {
                conn.tx.clear();
                conn.tx_at = 0;
                if conn.shut || wrote >= IO_BUDGET {
                    break;
                }
                while conn.tx.len() < TX_CHUNK
                    && engine.poll_stream_transmit(&mut conn.tx, &mut **dev, &mut Bridge(mem)) > 0
                {
                }
                if conn.tx.is_empty() {
                    break;
                }
            }
            match io.net.write(id.0, &conn.tx[conn.tx_at..]) {
                Ok(n) => {
                    conn.tx_at += n;
                    wrote += n;
                }
                Err(e) if is_would_block(&e) => {
                    conn.want_out = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // EPIPE / ECONNRESET: the peer is gone.
                    conn.tx.clear();
                    conn.tx_at = 0;
                    conn.eof = true;
                    engine.handle_stream_closed(now);
                }
            }
        }
        counters.tx_bytes += wrote as u64;
        if conn.tx_at >= conn.tx.len() {
            conn.want_out = false;
        }
        if !conn.shut && engine.wants_close() && conn.tx_at >= conn.tx.len() {
            io.net.shutdown_write(id.0);
            conn.shut = true;
            conn.linger_until = Some(now + LINGER);
            if conn.eof {
                conn.dead = true;
            }
        }
        io.set_interest(id);
        wrote > 0
    }

    /// Moves the engine's completions and events of connection `id` out: completions
    /// to the device's queue, QP state changes, async events, RDMA CM events.
    pub(in crate::daemon::siw) fn pump(&mut self, id: ConnId) -> bool {
        let Service {
            io,
            qps,
            completions,
            events,
            cm_events,
            counters,
            ..
        } = self;
        let Some(conn) = io.conns.get_mut(&id) else {
            return false;
        };
        let ConnPhase::Running(engine) = &mut conn.phase else {
            return false;
        };
        let qpn = conn.qpn.filter(|q| qps.contains_key(q));
        let mut any = false;
        while let Some(c) = engine.poll_completion() {
            any = true;
            if qpn.is_some() {
                completions.push_back((c.cq.0, cqe_out(&c.wc)));
            }
        }
        while let Some(ev) = engine.poll_event() {
            any = true;
            let qp = qpn.and_then(|q| qps.get_mut(&q));
            match ev {
                IwarpEvent::Established(neg) => {
                    conn.outcome = Outcome::Established;
                    if let Some(qp) = qp {
                        qp.state.handle_llp(LlpEvent::Established);
                    }
                    tracing::debug!(conn = id.0, qpn, "siw: established");
                    cm_events.push_back(SiwCmEvent::Established {
                        conn: id,
                        private_data: neg.private_data,
                        ird: neg.ird,
                        ord: neg.ord,
                    });
                }
                IwarpEvent::Rejected { private_data } => {
                    if let Some(qp) = qp {
                        qp.state.handle_llp(LlpEvent::Failed);
                    }
                    if conn.outcome == Outcome::Pending {
                        conn.outcome = Outcome::Failed;
                        cm_events.push_back(SiwCmEvent::Rejected {
                            conn: id,
                            private_data,
                        });
                    }
                }
                IwarpEvent::Terminated { error, local } => {
                    if local {
                        counters.terminates_sent += 1;
                    } else {
                        counters.terminates_rcvd += 1;
                    }
                    tracing::debug!(conn = id.0, qpn, ?error, local, "siw: terminated");
                    if let (Some(qp), Some(q)) = (qp, qpn) {
                        qp.state.handle_llp(LlpEvent::Terminated);
                        events.push_back((
                            qp.owner,
                            terminate_event(error, local),
                            EventElement::Qp(q),
                        ));
                    }
                }
                IwarpEvent::MpaFailed(_) | IwarpEvent::MpaTimeout => {
                    counters.mpa_failures += 1;
                    if let Some(qp) = qp {
                        qp.state.handle_llp(LlpEvent::Failed);
                    }
                    if conn.origin == Origin::Connect && conn.outcome == Outcome::Pending {
                        conn.outcome = Outcome::Failed;
                        let errno = if ev == IwarpEvent::MpaTimeout {
                            libc::ETIMEDOUT
                        } else {
                            libc::ECONNRESET
                        };
                        cm_events.push_back(SiwCmEvent::ConnectError { conn: id, errno });
                    }
                }
                IwarpEvent::Closed => {
                    if let Some(qp) = qp {
                        qp.state.handle_llp(LlpEvent::Closed);
                    }
                    if conn.outcome == Outcome::Established && !conn.disconnected {
                        conn.disconnected = true;
                        cm_events.push_back(SiwCmEvent::Disconnected { conn: id });
                    }
                }
                IwarpEvent::ConnectRequest(_) => {}
            }
        }
        any
    }

    pub(in crate::daemon::siw) fn pump_qp(&mut self, qpn: u32) {
        if let Some(id) = self.qps.get(&qpn).and_then(|q| q.conn) {
            self.pump(id);
        }
    }

    pub(in crate::daemon::siw) fn pump_all(&mut self) {
        let ids: Vec<ConnId> = self.io.conns.keys().copied().collect();
        for id in ids {
            self.pump(id);
        }
    }

    /// Closes and forgets dead connections, telling the RDMA CM.
    fn reap(&mut self) -> bool {
        let dead: Vec<ConnId> = self
            .io
            .conns
            .iter()
            .filter(|(_, c)| c.dead)
            .map(|(id, _)| *id)
            .collect();
        for id in &dead {
            self.pump(*id);
            let Some(c) = self.io.conns.remove(id) else {
                continue;
            };
            self.io.net.close(id.0);
            for qp in self.qps.values_mut() {
                if qp.conn == Some(*id) {
                    qp.conn = None;
                    qp.state.handle_llp(LlpEvent::Lost);
                }
            }
            match (c.origin, c.outcome) {
                (_, Outcome::Established) if !c.disconnected => {
                    self.cm_events
                        .push_back(SiwCmEvent::Disconnected { conn: *id });
                }
                (Origin::Connect, Outcome::Pending) => {
                    self.cm_events.push_back(SiwCmEvent::ConnectError {
                        conn: *id,
                        errno: libc::ECONNRESET,
                    });
                }
                _ => {}
            }
            // A passive connection the CM never heard of needs no Closed.
            let reported =
                c.origin == Origin::Connect || !matches!(c.phase, ConnPhase::AwaitRequest { .. });
            if reported {
                self.cm_events.push_back(SiwCmEvent::Closed { conn: *id });
            }
            tracing::debug!(conn = id.0, "siw: connection closed");
        }
        !dead.is_empty()
    }
}

impl Service<'_> {
    /// `reject`'s socket half: the held MPA Request is replayed into an engine with no
    /// QP, which answers it with a rejecting Reply carrying `private_data`.
    pub(in crate::daemon::siw) fn reject_request(
        &mut self,
        now: Instant,
        id: ConnId,
        private_data: &[u8],
        mem: &mut dyn AppMemory,
    ) -> Result<(), Errno> {
        let c = self.io.conns.get_mut(&id).ok_or(libc::ENOENT)?;
        let ConnPhase::RequestPending { raw } = &c.phase else {
            return Err(libc::EINVAL);
        };
        let mut probe = Connection::responder(now, IwarpConfig::default());
        probe.handle_stream(now, raw, self.dev, &mut Bridge(mem));
        while probe.poll_event().is_some() {}
        probe.reject(private_data).map_err(|e| e.0)?;
        tracing::debug!(conn = id.0, "siw: MPA Request rejected");
        c.phase = ConnPhase::Running(Box::new(probe));
        Ok(())
    }

    /// `connect`'s socket half (the QP checks are done by the caller).
    pub(in crate::daemon::siw) fn open_connection(
        &mut self,
        qpn: u32,
        src: SocketAddr,
        dst: SocketAddr,
        params: &ConnParams,
        local_path: bool,
    ) -> Result<(ConnId, SocketAddr), Errno> {
        let cfg = self.iwarp_config(qpn, params, DEFAULT_MSS);
        let (id, local) = self.io.connect(qpn, src, dst, cfg, local_path)?;
        if let Some(c) = self.io.conns.get_mut(&id) {
            c.qpn = Some(qpn);
        }
        Ok((id, local))
    }
}
