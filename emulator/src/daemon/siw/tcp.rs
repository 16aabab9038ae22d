//! The TCP connections of siw devices, whatever TCP carries them (`net.rs`: the kernel's,
//! or smoltcp's on AF_PACKET; the engine watches one descriptor per device,
//! `Nic::stream_fd`): each connection's bytes fed to its `iwarp::Connection`
//! (`handle_stream`) and its output written with large writes (`poll_stream_transmit`
//! gathered up to 1 MiB per write; what the TCP does not take is kept and output interest
//! set). The engine's MSS is the connection's (the kernel's `TCP_MAXSEG`, or what smoltcp
//! and the peer's SYN allow) so FPDUs stay segment-sized (RFC 5044 §4.1). When the engine
//! is over (`wants_close`) the writing half is shut down (FIN after the last byte, a
//! Terminate included) and the connection closed once the peer's FIN arrived or after
//! [`LINGER`]. A FIN or RST from the peer is `handle_stream_closed`.
//!
//! While a connection's engine holds a Send for a receive WR the application posted but
//! the daemon has not taken from its ring yet (`is_waiting_for_recv`), its socket is not
//! read (TCP's window holds the peer back); each pass retries it after the rings were
//! drained. The engines' deadlines (MPA exchange, that wait, a partial FPDU's stall
//! timeout) are part of `poll_timeout` and served by `stream_timeouts`.

use super::cm::{ConnId, ConnParams, ListenerId, SiwCmEvent};
use super::net::{Ready, StreamNet, DEFAULT_MSS, TOKEN_CONN, TOKEN_KIND, TOKEN_LISTENER};
use super::nic::SiwNic;
use crate::daemon::core_nic::{cqe_out, Bridge};
use crate::daemon::nic::{AppMemory, Errno, EventElement};
use emu_core::iwarp::{Connection, IwarpConfig, IwarpEvent};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};
use wire::client::verbs::{event_type, qp_state};
use wire::iwarp::terminate::{TermLayer, TerminateError};

/// How long a closed connection waits for the peer's FIN before the socket is closed.
pub const LINGER: Duration = Duration::from_secs(2);
/// Most octets kept from a passive connection before its MPA Request was answered
/// (a Request is at most 532 octets; the initiator sends nothing more until the Reply).
const RAW_MAX: usize = 64 * 1024;
/// Output gathered per `write`.
const TX_CHUNK: usize = 1 << 20;
/// Octets read or written per connection and pass (fairness between connections).
const IO_BUDGET: usize = 8 << 20;

/// Who asked for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// `connect`: we send the MPA Request.
    Connect,
    /// Accepted on a listener: we answer it.
    Accept,
}

/// Where a connection stands.
#[derive(Debug)]
pub(super) enum ConnPhase {
    /// Active: TCP connect in progress; the engine is built when it completes.
    Connecting { qpn: u32, cfg: Box<IwarpConfig> },
    /// Passive: waiting for the MPA Request. `probe` (an engine with no QP) parses it;
    /// `raw` keeps every octet, replayed into the real engine at `accept`.
    AwaitRequest {
        probe: Box<Connection>,
        raw: Vec<u8>,
    },
    /// Passive: `ConnectRequest` was reported; waiting for `accept` / `reject`.
    RequestPending { raw: Vec<u8> },
    /// The engine runs (also a rejecting engine with no QP, until its Reply left).
    Running(Box<Connection>),
}

/// What the active side's RDMA CM was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pending,
    Established,
    Failed,
}

/// One TCP connection.
#[derive(Debug)]
pub(super) struct Conn {
    pub local: SocketAddr,
    pub peer: SocketAddr,
    listener: Option<ListenerId>,
    pub phase: ConnPhase,
    /// The QP bound by `connect` / `accept` (cleared when the QP is destroyed).
    pub qpn: Option<u32>,
    origin: Origin,
    mss: u32,
    /// Output the socket has not taken yet: `tx[tx_at..]`.
    tx: Vec<u8>,
    tx_at: usize,
    want_out: bool,
    interest: (bool, bool),
    /// The peer's FIN (or RST) arrived.
    pub eof: bool,
    /// Our writing half is shut down.
    shut: bool,
    linger_until: Option<Instant>,
    outcome: Outcome,
    disconnected: bool,
    /// To be closed and forgotten at the end of the pass.
    dead: bool,
}

#[derive(Debug)]
struct Listener {
    /// The listener's name in the [`StreamNet`] (kept when a lingering listener is
    /// taken back under a new [`ListenerId`]).
    net_id: u32,
    local: SocketAddr,
}

/// How long a closed listener's socket stays bound (and keeps completing handshakes
/// into its accept queue) in case the same address and port are listened on again.
/// perftest's `-R` closes its first listener, sleeps about a second, and listens anew
/// while its client, after the same second, connects again; a connect refused in that
/// gap would be final (the RoCE CM holds an unmatched REQ for the same reason,
/// `cm::gsi::LISTEN_GRACE`). The cost: for this long nobody else can bind the port.
const LISTEN_LINGER: Duration = Duration::from_secs(2);

/// The sockets of one siw device.
#[derive(Debug)]
pub(super) struct Streams {
    net: Box<dyn StreamNet>,
    listeners: HashMap<ListenerId, Listener>,
    /// Closed listeners kept bound until the deadline ([`LISTEN_LINGER`]).
    lingering: Vec<(Instant, Listener)>,
    pub conns: BTreeMap<ConnId, Conn>,
    next_id: u32,
    ready: Vec<Ready>,
    rx_buf: Vec<u8>,
}

fn is_would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// The async event a Terminate becomes: received → `QP_FATAL`; sent for the peer's
/// protection error → `QP_ACCESS_ERR`, for its operation / untagged-buffer error →
/// `QP_REQ_ERR`; otherwise `QP_FATAL`.
pub(super) fn terminate_event(error: TerminateError, local: bool) -> u32 {
    if !local {
        return event_type::QP_FATAL;
    }
    match error.fields() {
        (TermLayer::Rdmap, 1, _) | (TermLayer::Ddp, 1, _) => event_type::QP_ACCESS_ERR,
        (TermLayer::Rdmap, 2, _) | (TermLayer::Ddp, 2, _) => event_type::QP_REQ_ERR,
        _ => event_type::QP_FATAL,
    }
}

impl Streams {
    pub fn new(net: Box<dyn StreamNet>) -> Streams {
        Streams {
            net,
            listeners: HashMap::new(),
            lingering: Vec::new(),
            conns: BTreeMap::new(),
            next_id: 1,
            ready: Vec::with_capacity(64),
            rx_buf: vec![0u8; 256 * 1024],
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.net.fd()
    }

    pub fn net_counters(&self) -> Vec<(&'static str, u64)> {
        self.net.counters()
    }

    fn alloc_id(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            let net_ids = self
                .listeners
                .values()
                .chain(self.lingering.iter().map(|l| &l.1));
            if !self.conns.contains_key(&ConnId(id))
                && !self.listeners.contains_key(&ListenerId(id))
                && !net_ids.into_iter().any(|l| l.net_id == id)
            {
                return id;
            }
        }
    }

    pub fn listen(
        &mut self,
        local: SocketAddr,
        _backlog: u32,
    ) -> Result<(ListenerId, SocketAddr), Errno> {
        // A listener closed on this very address moments ago is taken back with the
        // connections its accept queue holds.
        let kept = (local.port() != 0)
            .then(|| self.lingering.iter().position(|(_, l)| l.local == local))
            .flatten()
            .map(|i| self.lingering.swap_remove(i).1);
        let listener = match kept {
            Some(l) => {
                self.net.watch_listener(l.net_id, true);
                l
            }
            None => {
                let net_id = self.alloc_id();
                let local = self.net.listen(net_id, local)?;
                Listener { net_id, local }
            }
        };
        let bound = listener.local;
        let id = self.alloc_id();
        self.listeners.insert(ListenerId(id), listener);
        tracing::debug!(listener = id, %bound, "siw: listening");
        Ok((ListenerId(id), bound))
    }

    pub fn unlisten(&mut self, id: ListenerId) -> Result<(), Errno> {
        let l = self.listeners.remove(&id).ok_or(libc::ENOENT)?;
        self.net.watch_listener(l.net_id, false);
        tracing::debug!(listener = id.0, local = %l.local, "siw: listener closed");
        self.lingering.push((Instant::now() + LISTEN_LINGER, l));
        Ok(())
    }

    /// Closes the lingering listeners whose time is up (the connections still in their
    /// accept queues are reset). Whether any closed.
    pub fn expire_listeners(&mut self, now: Instant) -> bool {
        let before = self.lingering.len();
        let net = &mut self.net;
        self.lingering.retain(|(until, l)| {
            let keep = *until > now;
            if !keep {
                net.close_listener(l.net_id);
            }
            keep
        });
        before != self.lingering.len()
    }

    pub fn connect(
        &mut self,
        qpn: u32,
        src: SocketAddr,
        dst: SocketAddr,
        cfg: IwarpConfig,
    ) -> Result<(ConnId, SocketAddr), Errno> {
        let id = self.alloc_id();
        let local = self.net.connect(id, src, dst)?;
        tracing::debug!(conn = id, qpn, %local, %dst, "siw: connecting");
        self.conns.insert(
            ConnId(id),
            Conn::new(
                local,
                dst,
                None,
                ConnPhase::Connecting {
                    qpn,
                    cfg: Box::new(cfg),
                },
                Origin::Connect,
                (false, true),
            ),
        );
        Ok((ConnId(id), local))
    }

    pub fn mss_of(&self, id: ConnId) -> u32 {
        self.conns.get(&id).map_or(DEFAULT_MSS, |c| c.mss)
    }

    /// Sets the epoll interest a connection needs now.
    pub fn set_interest(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let want = match &c.phase {
            ConnPhase::Connecting { .. } => (false, true),
            // A Send waiting for a receive WR stops input: TCP's window holds the rest.
            ConnPhase::Running(e) if e.is_waiting_for_recv() => (false, c.want_out && !c.dead),
            _ => (!c.eof && !c.dead, c.want_out && !c.dead),
        };
        if want != c.interest && self.net.set_interest(id.0, want.0, want.1) {
            c.interest = want;
        }
    }

    pub fn reject(
        &mut self,
        now: Instant,
        id: ConnId,
        private_data: &[u8],
        dev: &mut emu_core::Device,
        mem: &mut dyn AppMemory,
    ) -> Result<(), Errno> {
        let c = self.conns.get_mut(&id).ok_or(libc::ENOENT)?;
        let ConnPhase::RequestPending { raw } = &c.phase else {
            return Err(libc::EINVAL);
        };
        let mut probe = Connection::responder(now, IwarpConfig::default());
        probe.handle_stream(now, raw, dev, &mut Bridge(mem));
        while probe.poll_event().is_some() {}
        probe.reject(private_data).map_err(|e| e.0)?;
        tracing::debug!(conn = id.0, "siw: MPA Request rejected");
        c.phase = ConnPhase::Running(Box::new(probe));
        Ok(())
    }

    pub fn disconnect(&mut self, id: ConnId) -> Result<(), Errno> {
        let c = self.conns.get_mut(&id).ok_or(libc::ENOENT)?;
        match &mut c.phase {
            ConnPhase::Running(engine) => engine.close(),
            _ => c.dead = true,
        }
        Ok(())
    }

    /// The earliest deadline: the engines' (MPA timeouts, a Send waiting for a receive WR,
    /// a partial FPDU's stall timeout), lingering closes, lingering listeners.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let listeners = self
            .lingering
            .iter()
            .map(|(until, _)| *until)
            .chain(self.net.poll_timeout())
            .min();
        let conns = self
            .conns
            .values()
            .filter_map(|c| {
                let engine = match &c.phase {
                    ConnPhase::Running(e) => e.poll_timeout(),
                    ConnPhase::AwaitRequest { probe, .. } => probe.poll_timeout(),
                    _ => None,
                };
                match (engine, c.linger_until) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            })
            .min();
        match (listeners, conns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl Conn {
    fn new(
        local: SocketAddr,
        peer: SocketAddr,
        listener: Option<ListenerId>,
        phase: ConnPhase,
        origin: Origin,
        interest: (bool, bool),
    ) -> Conn {
        Conn {
            local,
            peer,
            listener,
            phase,
            qpn: None,
            origin,
            mss: DEFAULT_MSS,
            tx: Vec::new(),
            tx_at: 0,
            want_out: false,
            interest,
            eof: false,
            shut: false,
            linger_until: None,
            outcome: Outcome::Pending,
            disconnected: false,
            dead: false,
        }
    }
}

impl SiwNic {
    /// The TCP backend's work of one engine pass: ready sockets (`readable`: the
    /// engine saw the epoll set ready), then every connection's output, engine events
    /// and completions, then closed connections. Whether anything happened.
    pub(super) fn service_streams(
        &mut self,
        now: Instant,
        readable: bool,
        mem: &mut dyn AppMemory,
    ) -> bool {
        let mut worked = self.io.expire_listeners(now);
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
        let ids: Vec<ConnId> = self.io.conns.keys().copied().collect();
        for id in ids {
            worked |= self.resume_input(now, id, mem);
            worked |= self.flush(now, id, mem);
            worked |= self.pump(id);
        }
        worked |= self.reap();
        worked |= self.io.net.transmit(now);
        worked
    }

    /// A connection whose input waits for a receive WR (`is_waiting_for_recv`) goes on
    /// once one was posted: the held Send and the octets buffered behind it are
    /// processed and the socket is read again. Whether it went on.
    fn resume_input(&mut self, now: Instant, id: ConnId, mem: &mut dyn AppMemory) -> bool {
        let SiwNic { io, dev, .. } = self;
        let Some(ConnPhase::Running(engine)) = io.conns.get_mut(&id).map(|c| &mut c.phase) else {
            return false;
        };
        if !engine.is_waiting_for_recv() {
            return false;
        }
        engine.handle_stream(now, &[], dev, &mut Bridge(mem));
        let resumed = !engine.is_waiting_for_recv();
        if resumed {
            tracing::debug!(conn = id.0, "siw: receive WR posted, input resumed");
            io.set_interest(id);
        }
        resumed
    }

    /// The engines' timeouts and lingering closes (`Nic::handle_timeout`).
    pub(super) fn stream_timeouts(&mut self, now: Instant, mem: &mut dyn AppMemory) {
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
        let SiwNic {
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
            let n = match net.read(id.0, rx_buf) {
                Ok(n) => n,
                Err(e) if is_would_block(&e) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ECONNRESET and the like: the stream is over.
                Err(_) => 0,
            };
            counters.rx_bytes += n as u64;
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
                    engine.handle_stream(now, data, dev, &mut Bridge(mem));
                }
                ConnPhase::AwaitRequest { probe, raw } => {
                    raw.extend_from_slice(data);
                    probe.handle_stream(now, data, dev, &mut Bridge(mem));
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
        let SiwNic {
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
                    && engine.poll_stream_transmit(&mut conn.tx, dev, &mut Bridge(mem)) > 0
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
    pub(super) fn pump(&mut self, id: ConnId) -> bool {
        let SiwNic {
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
                        qp.state = qp_state::RTS;
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
                        qp.state = qp_state::ERR;
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
                        qp.state = qp_state::ERR;
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
                        qp.state = qp_state::ERR;
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
                        // siw: CLOSING → IDLE after a graceful close, else ERROR.
                        qp.state = if qp.state == qp_state::SQD {
                            qp_state::RESET
                        } else {
                            qp_state::ERR
                        };
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

    pub(super) fn pump_qp(&mut self, qpn: u32) {
        if let Some(id) = self.qps.get(&qpn).and_then(|q| q.conn) {
            self.pump(id);
        }
    }

    pub(super) fn pump_all(&mut self) {
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
                    if qp.state == qp_state::RTS {
                        qp.state = qp_state::ERR;
                    }
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

impl SiwNic {
    /// `connect`'s socket half (the QP checks are done by the caller).
    pub(super) fn open_connection(
        &mut self,
        qpn: u32,
        src: SocketAddr,
        dst: SocketAddr,
        params: &ConnParams,
    ) -> Result<(ConnId, SocketAddr), Errno> {
        let cfg = self.iwarp_config(qpn, params, DEFAULT_MSS);
        let (id, local) = self.io.connect(qpn, src, dst, cfg)?;
        if let Some(c) = self.io.conns.get_mut(&id) {
            c.qpn = Some(qpn);
        }
        Ok((id, local))
    }
}
