//! The socket table of one siw device: its listeners (a closed one lingers, still bound,
//! for [`LISTEN_LINGER`]), its connections with the phase each is in (connecting,
//! awaiting or holding an MPA Request, running an engine) and the output each socket has
//! not taken yet. It opens, closes and watches sockets through the [`StreamNet`]; moving
//! bytes between the sockets and the engines is `service.rs`'s.

use crate::daemon::devices::nic::Errno;
use crate::daemon::siw::cm::{ConnId, ListenerId};
use crate::daemon::siw::local::LocalNet;
use crate::daemon::siw::net::{Ready, StreamNet, DEFAULT_MSS};
use emu_core::iwarp::{Connection, IwarpConfig};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

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
pub(in crate::daemon::siw) enum ConnPhase {
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
pub(super) enum Outcome {
    Pending,
    Established,
    Failed,
}

/// One TCP connection.
#[derive(Debug)]
pub(in crate::daemon::siw) struct Conn {
    pub local: SocketAddr,
    pub peer: SocketAddr,
    pub(super) listener: Option<ListenerId>,
    pub phase: ConnPhase,
    /// The QP bound by `connect` / `accept` (cleared when the QP is destroyed).
    pub qpn: Option<u32>,
    pub(super) origin: Origin,
    pub(super) mss: u32,
    /// Output the socket has not taken yet: `tx[tx_at..]`.
    pub(super) tx: Vec<u8>,
    pub(super) tx_at: usize,
    pub(super) want_out: bool,
    pub(super) interest: (bool, bool),
    /// The peer's FIN (or RST) arrived.
    pub eof: bool,
    /// Our writing half is shut down.
    pub(super) shut: bool,
    pub(super) linger_until: Option<Instant>,
    pub(super) outcome: Outcome,
    pub(super) disconnected: bool,
    /// To be closed and forgotten at the end of the pass.
    pub(super) dead: bool,
    /// Octets a read into the running stream's deframer offers: [`RX_SPACE_MIN`] at
    /// first, doubled (up to the device's read buffer) each time a read fills it. The
    /// deframer's buffer grows to what is offered, so a quiet connection keeps a small
    /// one and a busy one reads in large pieces.
    pub(super) rx_space: usize,
}

/// What a connection's first read into its deframer offers (see [`Conn::rx_space`]).
pub(super) const RX_SPACE_MIN: usize = 16 * 1024;

#[derive(Debug)]
pub(super) struct Listener {
    /// The listener's name in the [`StreamNet`] (kept when a lingering listener is
    /// taken back under a new [`ListenerId`]).
    pub(super) net_id: u32,
    pub(super) local: SocketAddr,
}

/// How long a closed listener's socket stays bound (and keeps completing handshakes
/// into its accept queue) in case the same address and port are listened on again.
/// perftest's `-R` closes its first listener, sleeps about a second, and listens anew
/// while its client, after the same second, connects again; a connect refused in that
/// gap would be final (the RoCE CM holds an unmatched REQ for the same reason,
/// `devices::parked::LISTEN_GRACE`). The cost: for this long nobody else can bind the port.
const LISTEN_LINGER: Duration = Duration::from_secs(2);

/// The sockets of one siw device.
#[derive(Debug)]
pub(in crate::daemon::siw) struct Streams {
    /// The device's TCP behind the local path.
    pub(super) net: LocalNet,
    pub(super) listeners: HashMap<ListenerId, Listener>,
    /// Closed listeners kept bound until the deadline ([`LISTEN_LINGER`]).
    pub(super) lingering: Vec<(Instant, Listener)>,
    pub conns: BTreeMap<ConnId, Conn>,
    pub(super) next_id: u32,
    pub(super) ready: Vec<Ready>,
    pub(super) rx_buf: Vec<u8>,
}

impl Streams {
    /// The sockets of a device with addresses `addrs` on the TCP `net`.
    pub fn new(net: Box<dyn StreamNet>, addrs: &[IpAddr]) -> Streams {
        Streams {
            net: LocalNet::new(net, addrs),
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

    pub(super) fn alloc_id(&mut self) -> u32 {
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

    /// Opens a connection for QP `qpn`; `local_path`: over the local path when this
    /// device listens on `dst` (`local.rs`).
    pub fn connect(
        &mut self,
        qpn: u32,
        src: SocketAddr,
        dst: SocketAddr,
        cfg: IwarpConfig,
        local_path: bool,
    ) -> Result<(ConnId, SocketAddr), Errno> {
        let id = self.alloc_id();
        let local = match local_path
            .then(|| self.net.connect_local(id, src, dst))
            .flatten()
        {
            Some(made) => made?,
            None => self.net.connect(id, src, dst)?,
        };
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
    /// Running connections whose input waits for a receive WR (`rdma-emu stat`:
    /// `recv_waiting`).
    pub fn waiting_for_recv(&self) -> u64 {
        self.conns
            .values()
            .filter(|c| matches!(&c.phase, ConnPhase::Running(e) if e.is_waiting_for_recv()))
            .count() as u64
    }

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
    pub(super) fn new(
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
            rx_space: RX_SPACE_MIN,
        }
    }
}
