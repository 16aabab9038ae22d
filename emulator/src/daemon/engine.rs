//! The engine: one thread that serves the control socket, every device's transport core,
//! the shared-memory rings and the network, with adaptive polling.

use super::config::{Config, PollMode};
use super::datapath::DataPath;
use super::device::{NicFactory, ServedDevice};
use super::memory::ProcMem;
use super::objects::{Kind, Object, SessionId};
use super::reload::{self, ConfigSource, Reload};
use super::sessions::{Clients, DaemonCounters, Session};
use super::shutdown::Shutdown;
use super::sys::{self, Epoll};
use super::tokens::{
    udp_token, T_DOORBELL, T_KIND, T_LISTENER, T_NETLINK, T_RELOAD, T_SESSION, T_STREAM, T_TIMER,
    T_UDP, T_WAKE,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};
use wire::client::proto::Handle;
use wire::client::{Reply, Request, MAX_MESSAGE_LEN};

/// Packets staged per sendmmsg.
pub(super) const TX_STAGE: usize = 32;

/// Whether the engine yields its core while spinning without work
/// (`RDMA_EMU_DAEMON_YIELD=0` turns it off, for measurements).
fn yield_when_idle() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("RDMA_EMU_DAEMON_YIELD").map_or(true, |v| v != "0"))
}

pub struct Engine {
    pub(super) cfg: Config,
    pub(super) epoll: Epoll,
    listener: OwnedFd,
    timer: OwnedFd,
    shutdown: Shutdown,
    pub(super) factory: NicFactory,
    pub(super) devices: Vec<Option<ServedDevice>>,
    pub(super) sessions: HashMap<SessionId, Session>,
    pub(super) objects: BTreeMap<Handle, Object>,
    /// QPs and SRQs whose rings the engine drains.
    pub(super) rings: BTreeSet<Handle>,
    pub(super) mem: ProcMem,
    pub(super) counters: DaemonCounters,
    /// What each user holds, against `cfg.user_limits`.
    pub(super) users: super::users::Users,
    next_handle: u32,
    next_session: SessionId,
    /// Packets the cores produced, sent in batches (sendmmsg).
    pub(super) tx_bufs: Vec<Vec<u8>>,
    pub(super) tx_meta: Vec<super::nic::TxMeta>,
    /// Datagrams received in batches (recvmmsg).
    rx: super::link::mmsg::RecvBatch,
    /// What one receive brought up a device's link stack (reused).
    arrivals: super::link::stack::Arrivals,
    msg_buf: Vec<u8>,
    /// RDMA CM channels, ids, port spaces.
    pub(super) cm: super::cm::CmTables,
    /// SIGHUP's eventfd and where a new configuration comes from (`reload.rs`).
    pub(super) reload: Option<Reload>,
    /// rtnetlink address notifications (None: the kernel refused the socket).
    pub(super) netlink: Option<OwnedFd>,
    /// The ids of fault rules (`rdma-emu fault add`).
    fault_ids: super::fault_control::FaultIds,
}

impl Engine {
    /// Opens the devices and the control socket. Errors say which and why.
    pub fn new(cfg: Config, factory: NicFactory, shutdown: Shutdown) -> io::Result<Engine> {
        cfg.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut devices = Vec::new();
        for spec in &cfg.devices {
            devices.push(Some(ServedDevice::open(
                spec,
                factory,
                cfg.seed,
                cfg.udp_src_port,
            )?));
        }
        if let Some(dir) = cfg.socket.parent() {
            socket_dir(dir, cfg.socket_mode)?;
        }
        let listener = sys::seqpacket_listen(&cfg.socket, cfg.socket_mode).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("control socket {}: {e}", cfg.socket.display()),
            )
        })?;
        let epoll = Epoll::new()?;
        let timer = sys::timerfd()?;
        let cfg_seed = cfg.seed;
        epoll.add(listener.as_raw_fd(), T_LISTENER)?;
        epoll.add(timer.as_raw_fd(), T_TIMER)?;
        epoll.add(shutdown.wake_fd(), T_WAKE)?;
        let netlink = match sys::netlink_addr_watch() {
            Ok(fd) => {
                epoll.add(fd.as_raw_fd(), T_NETLINK)?;
                Some(fd)
            }
            Err(e) => {
                tracing::warn!("rtnetlink: {e}; GID tables will not follow address changes");
                None
            }
        };
        let mut engine = Engine {
            cfg,
            epoll,
            listener,
            timer,
            shutdown,
            factory,
            devices: Vec::new(),
            sessions: HashMap::new(),
            objects: BTreeMap::new(),
            rings: BTreeSet::new(),
            mem: ProcMem::default(),
            counters: DaemonCounters::default(),
            users: super::users::Users::default(),
            next_handle: 1,
            next_session: 1,
            tx_bufs: (0..TX_STAGE).map(|_| Vec::with_capacity(4352)).collect(),
            tx_meta: Vec::with_capacity(TX_STAGE),
            rx: super::link::mmsg::RecvBatch::new(32, 9216),
            arrivals: Default::default(),
            msg_buf: vec![0u8; MAX_MESSAGE_LEN + 1],
            cm: super::cm::CmTables::new(cfg_seed),
            reload: None,
            netlink,
            fault_ids: super::fault_control::FaultIds::new(),
        };
        for dev in devices {
            engine.add_device(dev.expect("just opened"))?;
        }
        let configured = std::mem::take(&mut engine.cfg.faults);
        engine.faults().initial(configured)?;
        Ok(engine)
    }

    /// Registers a device's sockets and makes it visible to clients.
    pub(super) fn add_device(&mut self, mut dev: ServedDevice) -> io::Result<usize> {
        dev.set_cm_timers(self.cfg.cm_response_timeout, self.cfg.cm_max_retries);
        let index = self
            .devices
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.devices.len());
        for (slot, fd) in dev.port().fds() {
            self.epoll.add(fd, udp_token(index, slot))?;
        }
        if let Some(p) = &dev.pause {
            self.epoll
                .add(p.fd(), udp_token(index, super::link::pause::PAUSE_SOCKET))?;
        }
        if let Some(fd) = dev.nic.stream_fd() {
            self.epoll.add(fd, T_STREAM | index as u64)?;
        }
        tracing::info!(device = dev.name(), netdev = %dev.netdev.name, mtu = dev.mtu, gids = ?dev.gids.addrs(), "device up");
        if index == self.devices.len() {
            self.devices.push(Some(dev));
        } else {
            self.devices[index] = Some(dev);
        }
        self.cm_device_added(index);
        Ok(index)
    }

    pub(super) fn device_index(&self, name: &str) -> Option<usize> {
        super::device::index_of(&self.devices, name)
    }

    /// Makes the engine reload from `source` whenever the returned eventfd is written
    /// (`sys::forward_sighup` points SIGHUP at it).
    pub fn enable_reload(&mut self, source: ConfigSource) -> io::Result<RawFd> {
        let r = Reload::new(source)?;
        let fd = r.fd();
        self.epoll.add(fd, T_RELOAD)?;
        self.reload = Some(r);
        Ok(fd)
    }

    /// SIGHUP: the settings of the new configuration at once (`reload::apply`), its
    /// device list through [`Engine::remove_device`] and [`Engine::add_device`].
    fn reload(&mut self) {
        let Some(new) = self.reload.as_mut().and_then(Reload::take) else {
            return;
        };
        let plan = reload::apply(&mut self.cfg, new, &self.devices);
        let mut kept = Vec::new();
        for old in plan.remove {
            match self.remove_device(&old.name) {
                Ok(()) | Err(libc::ENODEV) => {}
                Err(_) => {
                    tracing::warn!(device = %old.name, "config reload: device in use, kept");
                    kept.push(old);
                }
            }
        }
        for (spec, open) in plan.wanted {
            if !open {
                kept.push(spec);
                continue;
            }
            match ServedDevice::open(&spec, self.factory, self.cfg.seed, self.cfg.udp_src_port)
                .and_then(|d| self.add_device(d))
            {
                Ok(_) => kept.push(spec),
                Err(e) => {
                    tracing::error!(device = %spec.name, "config reload: device not added: {e}")
                }
            }
        }
        self.cfg.devices = kept;
        tracing::info!(poll = ?self.cfg.poll, devices = self.cfg.devices.len(), "config reloaded");
    }

    /// Removes a device no client has open (`link del`, reload): ENODEV, EBUSY.
    pub(super) fn remove_device(&mut self, name: &str) -> Result<(), i32> {
        let i = self.device_index(name).ok_or(libc::ENODEV)?;
        let d = self.devices[i].as_ref().ok_or(libc::ENODEV)?;
        if d.open_ctxs > 0 {
            return Err(libc::EBUSY);
        }
        for (_, fd) in d.port().fds() {
            self.epoll.remove(fd);
        }
        self.cm_device_removed(i);
        tracing::info!(device = %name, "device removed");
        self.devices[i] = None;
        Ok(())
    }

    /// The parts of the engine a fault request touches.
    pub(super) fn faults(&mut self) -> super::fault_control::FaultCtx<'_> {
        super::fault_control::FaultCtx {
            devices: &mut self.devices,
            objects: &self.objects,
            ids: &mut self.fault_ids,
            seed: self.cfg.seed,
        }
    }

    /// The parts of the engine a request that creates or finds objects touches.
    /// The data path's parts, lent for one call.
    pub(super) fn datapath(&mut self) -> DataPath<'_> {
        DataPath {
            objects: &self.objects,
            rings: &self.rings,
            devices: &mut self.devices,
            mem: &mut self.mem,
            counters: &mut self.counters,
            tx_bufs: &mut self.tx_bufs,
            tx_meta: &mut self.tx_meta,
            local_path: self.cfg.local_path,
        }
    }

    pub(super) fn clients(&mut self) -> Clients<'_> {
        Clients {
            sessions: &mut self.sessions,
            objects: &mut self.objects,
            rings: &mut self.rings,
            users: &mut self.users,
            limits: &self.cfg.user_limits,
            next_handle: &mut self.next_handle,
            devices: &mut self.devices,
        }
    }

    /// Runs until shutdown is requested, then stops cleanly.
    pub fn run(mut self) -> io::Result<()> {
        let mut slice = super::slice::SliceControl::new();
        let mut ready = Vec::new();
        let mut last_work = Instant::now();
        loop {
            if self.shutdown.requested() {
                self.stop();
                return Ok(());
            }
            let worked = self.process(&ready)?;
            let now = Instant::now();
            if worked {
                last_work = now;
            }
            let spin = match self.cfg.poll {
                PollMode::Busy => true,
                PollMode::Adaptive => worked || now.duration_since(last_work) < self.cfg.spin,
                PollMode::Sleep => worked,
            };
            if spin {
                if !worked && yield_when_idle() {
                    // Spinning on nothing: let a client thread that polls its CQ (and
                    // waits for us) run first on a machine with fewer cores than spinners.
                    std::thread::yield_now();
                    slice.after_yield(now.elapsed(), Instant::now());
                }
                self.epoll.wait(&mut ready, Some(Duration::ZERO))?;
                continue;
            }
            // Sleep: tell clients to ring the doorbell, then look once more (no lost wake-up).
            self.set_sleeping(true);
            if super::datapath::rings_pending(&self.objects, &self.rings) {
                self.set_sleeping(false);
                self.epoll.wait(&mut ready, Some(Duration::ZERO))?;
                continue;
            }
            // Pipes owed CM event tokens are retried soon (they drain when read).
            let token_retry = self
                .cm
                .tokens_owed()
                .then(|| Instant::now() + Duration::from_millis(10));
            let deadline = self
                .devices
                .iter()
                .flatten()
                .flat_map(|d| {
                    [
                        d.nic.poll_timeout(),
                        d.cm.poll_timeout(),
                        d.parked_deadline(),
                        d.faults().next_release(),
                    ]
                })
                .flatten()
                .chain(token_retry)
                .min();
            sys::timerfd_set(
                self.timer.as_raw_fd(),
                deadline.map(|d| d.saturating_duration_since(Instant::now())),
            )?;
            self.epoll.wait(&mut ready, None)?;
            self.set_sleeping(false);
        }
    }

    /// One pass: ready descriptors, rings, timers, output. Whether anything happened.
    fn process(&mut self, ready: &[u64]) -> io::Result<bool> {
        let mut worked = false;
        let now = Instant::now();
        for &token in ready {
            match token & T_KIND {
                0 => match token {
                    T_LISTENER => self.accept_all()?,
                    T_TIMER => sys::drain_counter(self.timer.as_raw_fd()),
                    T_WAKE => {
                        self.shutdown.woken();
                    }
                    T_RELOAD => self.reload(),
                    T_NETLINK => {
                        if let Some(fd) = &self.netlink {
                            sys::drain_socket(fd.as_raw_fd());
                        }
                        reload::follow_addresses(&mut self.devices, &self.epoll, &self.objects);
                    }
                    _ => {}
                },
                T_SESSION => self.serve_session(token & !T_KIND),
                T_DOORBELL => {
                    if let Some(Object {
                        kind: Kind::Ctx(c), ..
                    }) = self.objects.get(&Handle((token & 0xffff_ffff) as u32))
                    {
                        sys::drain_counter(c.doorbell.as_raw_fd());
                    }
                }
                T_UDP => {
                    self.receive(
                        now,
                        ((token >> 16) & 0xffff) as usize,
                        (token & 0xffff) as usize,
                    );
                }
                T_STREAM => {
                    if let Some(Some(d)) = self.devices.get_mut((token & 0xffff) as usize) {
                        d.nic.handle_streams(now, true, &mut self.mem);
                    }
                }
                _ => {}
            }
            worked = true;
        }
        worked |= self.datapath().drain_rings(now);
        for d in self.devices.iter_mut().flatten() {
            if d.faults().next_release().is_some_and(|t| t <= now) {
                worked |=
                    super::device_io::release_held(d, self.cfg.local_path, now, &mut self.mem);
            }
        }
        worked |= self.datapath().drive_cores(now);
        worked |= self.drive_cm(now);
        Ok(worked)
    }

    fn receive(&mut self, now: Instant, dev: usize, sock: usize) {
        let Some(Some(d)) = self.devices.get_mut(dev) else {
            return;
        };
        if sock == super::link::pause::PAUSE_SOCKET {
            if let Some(p) = &mut d.pause {
                for (priority, until) in p.receive(now) {
                    d.nic.pause_priority(now, priority, until);
                }
            }
            return;
        }
        super::device_io::receive(
            d,
            now,
            sock,
            &mut self.rx,
            &mut self.arrivals,
            &mut self.mem,
        );
    }

    fn set_sleeping(&self, sleeping: bool) {
        for obj in self.objects.values() {
            if let Kind::Ctx(c) = &obj.kind {
                if let Some(page) = wire::client::SessionPage::new(c.page.words()) {
                    page.set_sleeping(sleeping);
                }
            }
        }
    }

    fn accept_all(&mut self) -> io::Result<()> {
        while let Some(sock) = sys::accept(self.listener.as_raw_fd())? {
            // A peer the kernel cannot name is nobody (it always can on a unix socket).
            let (pid, uid, gid) =
                sys::peer_cred(sock.as_raw_fd()).unwrap_or((0, u32::MAX, u32::MAX));
            let groups = sys::peer_groups(sock.as_raw_fd()).unwrap_or_default();
            let id = self.next_session;
            self.next_session += 1;
            self.epoll.add(sock.as_raw_fd(), T_SESSION | id)?;
            tracing::debug!(session = id, pid, uid, "client connected");
            self.sessions.insert(
                id,
                Session {
                    sock,
                    pid,
                    uid,
                    gid,
                    groups,
                    hello: false,
                    objects: 0,
                },
            );
        }
        Ok(())
    }

    fn serve_session(&mut self, id: SessionId) {
        for _ in 0..64 {
            let Some(session) = self.sessions.get(&id) else {
                return;
            };
            let got = match sys::recv_msg(session.sock.as_raw_fd(), &mut self.msg_buf) {
                Ok(Some(got)) => got,
                Ok(None) => return,
                Err(_) => return self.close_session(id),
            };
            if got.len == 0 && got.fds.is_empty() {
                return self.close_session(id);
            }
            let bytes = self.msg_buf[..got.len.min(MAX_MESSAGE_LEN)].to_vec();
            let decoded = if got.truncated || got.len > MAX_MESSAGE_LEN {
                Err(wire::client::proto::DecodeError)
            } else {
                Request::decode(&bytes)
            };
            let (seq, result) = match decoded {
                Ok(req) => {
                    if takes_away_posted_work(&req.body) {
                        self.catch_up_rings();
                    }
                    (req.seq, self.dispatch(id, req.body, got.fds))
                }
                Err(_) => {
                    self.counters.bad_requests += 1;
                    match Request::decode_seq(&bytes) {
                        Some(seq) => (seq, Err(libc::EINVAL)),
                        None => {
                            self.counters.sessions_closed_for_garbage += 1;
                            return self.close_session(id);
                        }
                    }
                }
            };
            if !self.reply(id, seq, result) {
                return self.close_session(id);
            }
        }
    }

    /// Takes what the rings hold and sends what it makes, before a request that could
    /// take away what that work needs.
    fn catch_up_rings(&mut self) {
        let now = Instant::now();
        if self.datapath().drain_rings(now) {
            self.datapath().drive_cores(now);
        }
    }

    /// Sends a reply; false if the session must be closed.
    fn reply(
        &mut self,
        id: SessionId,
        seq: u64,
        result: Result<(wire::client::ReplyBody, Vec<OwnedFd>), i32>,
    ) -> bool {
        let Some(session) = self.sessions.get(&id) else {
            return false;
        };
        let (result, fds) = match result {
            Ok((body, fds)) => (Ok(body), fds),
            Err(e) => (Err(e), Vec::new()),
        };
        let bytes = match (Reply { seq, result }).encode() {
            Ok(b) => b,
            Err(_) => match (Reply {
                seq,
                result: Err(libc::EMSGSIZE),
            })
            .encode()
            {
                Ok(b) => b,
                Err(_) => return false,
            },
        };
        let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
        sys::send_msg(session.sock.as_raw_fd(), &bytes, &raw).is_ok()
    }

    /// A client went away: everything it held is released.
    pub(super) fn close_session(&mut self, id: SessionId) {
        let Some(session) = self.sessions.remove(&id) else {
            return;
        };
        self.epoll.remove(session.sock.as_raw_fd());
        let ctxs: Vec<Handle> = self
            .objects
            .iter()
            .filter(|(_, o)| o.session == id && matches!(o.kind, Kind::Ctx(_)))
            .map(|(h, _)| *h)
            .collect();
        for ctx in ctxs {
            self.release_ctx(ctx);
        }
        self.cm_release_session(id);
        tracing::debug!(
            session = id,
            pid = session.pid,
            uid = session.uid,
            "client gone, resources released"
        );
    }

    /// Closes one device context: the core forgets its owner, every object under it goes.
    pub(super) fn release_ctx(&mut self, ctx: Handle) {
        let now = Instant::now();
        let Some(Object {
            kind: Kind::Ctx(c),
            session,
            ..
        }) = self.objects.get(&ctx)
        else {
            return;
        };
        let (dev, session) = (c.dev, *session);
        self.epoll.remove(c.doorbell.as_raw_fd());
        if let Some(Some(d)) = self.devices.get_mut(dev) {
            d.nic.release_client(now, ctx.0);
            // Domains the context held the last open of went with it.
            let nic = &d.nic;
            d.xrcd_by_file.retain(|_, id| nic.xrcd_exists(*id));
            d.open_ctxs = d.open_ctxs.saturating_sub(1);
        }
        if let Some(Some(d)) = self.devices.get_mut(dev) {
            let _ = super::mcast::sync_mcast(d, &self.epoll, |slot| udp_token(dev, slot));
        }
        let children: Vec<Handle> = self
            .objects
            .iter()
            .filter(|(h, o)| o.ctx == ctx && **h != ctx)
            .map(|(h, _)| *h)
            .collect();
        for h in children {
            self.forget(h);
        }
        self.forget(ctx);
        self.mem.remove(ctx.0);
        // The core may have completions or events for objects now gone: they are dropped.
        self.datapath().drive_cores(now);
        tracing::debug!(session, ctx = ctx.0, "device context closed");
    }

    /// Removes an object from the tables (the core already destroyed or released it).
    pub(super) fn forget(&mut self, h: Handle) {
        let Some(obj) = self.objects.remove(&h) else {
            return;
        };
        self.rings.remove(&h);
        if let Kind::Mr { shared, .. } = &obj.kind {
            for &(addr, len) in shared {
                self.mem.detach_shared(obj.ctx.0, addr, len);
            }
        }
        if let Some(s) = self.sessions.get_mut(&obj.session) {
            s.objects = s.objects.saturating_sub(1);
        }
        if let Some(r) = super::users::Resource::of(&obj.kind) {
            self.users.release(obj.uid, r);
        }
        let dev = match self.objects.get(&obj.ctx) {
            Some(Object {
                kind: Kind::Ctx(c), ..
            }) => Some(c.dev),
            _ => None,
        };
        let d = dev
            .and_then(|i| self.devices.get_mut(i))
            .and_then(Option::as_mut);
        match (&obj.kind, d) {
            (Kind::Cq(cq), Some(d)) => {
                d.cq_by_id.remove(&cq.id);
                if let Some(Object {
                    kind: Kind::Channel(ch),
                    ..
                }) = cq.channel.and_then(|c| self.objects.get(&c))
                {
                    ch.users.set(ch.users.get().saturating_sub(1));
                }
            }
            (Kind::Qp(qp), Some(d)) => {
                d.qp_by_qpn.remove(&qp.qpn);
            }
            (Kind::Srq(srq), Some(d)) => {
                d.srq_by_id.remove(&srq.id);
            }
            _ => {}
        }
    }

    /// SIGTERM: QPs to error, completions flushed into the rings, DEVICE_FATAL to every
    /// client, socket removed.
    fn stop(&mut self) {
        let now = Instant::now();
        tracing::info!("shutting down");
        let qps: Vec<(usize, u32)> = self
            .objects
            .values()
            .filter_map(|o| match (&o.kind, self.objects.get(&o.ctx)) {
                (
                    Kind::Qp(qp),
                    Some(Object {
                        kind: Kind::Ctx(c), ..
                    }),
                ) => Some((c.dev, qp.qpn)),
                _ => None,
            })
            .collect();
        for (dev, qpn) in qps {
            if let Some(Some(d)) = self.devices.get_mut(dev) {
                d.nic.qp_to_error(now, qpn);
            }
        }
        self.datapath().drain_rings(now);
        for _ in 0..4 {
            self.datapath().drive_cores(now);
        }
        // Connections end as the CM ends them for a consumer that is gone: peers hear a
        // DREQ (or REJ) now instead of timing out.
        let ids: Vec<Handle> = self.cm_ids();
        for h in ids {
            self.cm_destroy_id(now, h);
        }
        self.drive_cm(now);
        let ctxs: Vec<Handle> = self
            .objects
            .iter()
            .filter(|(_, o)| matches!(o.kind, Kind::Ctx(_)))
            .map(|(h, _)| *h)
            .collect();
        for ctx in ctxs {
            super::notify::send_event(
                &self.objects,
                ctx,
                wire::client::verbs::event_type::DEVICE_FATAL,
                0,
            );
        }
        let _ = std::fs::remove_file(&self.cfg.socket);
    }
}

/// Makes the socket's directory if it is missing: private (0700) but searchable by those
/// the socket's mode lets in (a system daemon's `--socket-mode 666` makes it 0711). An
/// existing directory is left as it is, with a warning when it keeps out whom the socket
/// lets in (its owner, systemd's `RuntimeDirectoryMode`, decides).
fn socket_dir(dir: &std::path::Path, socket_mode: u32) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if dir.as_os_str().is_empty() {
        return Ok(());
    }
    let group = if socket_mode & 0o060 != 0 { 0o010 } else { 0 };
    let others = if socket_mode & 0o006 != 0 { 0o001 } else { 0 };
    let search = group | others;
    match std::fs::metadata(dir) {
        Ok(m) => {
            let missing = search & !m.permissions().mode();
            if missing != 0 {
                tracing::warn!(
                    dir = %dir.display(),
                    mode = format!("{:o}", m.permissions().mode() & 0o7777),
                    "the socket's directory keeps out users its mode lets in"
                );
            }
            Ok(())
        }
        Err(_) => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700 | search)
                .create(dir)?;
            // The umask may have taken the search bits: set them as asked.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700 | search))
        }
    }
}

/// Whether `body` can take away something posted work needs (its QP, AH, memory, CQ),
/// or must see what it produced (`ibv_resize_cq` counts the completions not yet polled).
/// The client posted that work before it asked, and on rxe `ibv_post_send` returns after
/// the requester ran: `mckey -s` posts its sends unsignaled, then destroys the AH and QP
/// at once. The daemon catches up on the rings before serving such a request.
fn takes_away_posted_work(body: &wire::client::RequestBody) -> bool {
    use wire::client::RequestBody as R;
    matches!(
        body,
        R::ModifyQp { .. }
            | R::DestroyQp { .. }
            | R::DestroyAh { .. }
            | R::DeregMr { .. }
            | R::ReregMr { .. }
            | R::DestroyCq { .. }
            | R::ResizeCq { .. }
            | R::DeallocMw { .. }
            | R::CloseDevice { .. }
    )
}
