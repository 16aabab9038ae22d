//! The engine: one thread that serves the control socket, every device's transport core,
//! the shared-memory rings and the network, with adaptive polling. It is the driver
//! loop; what it serves is [`Served`] (`served/`), and control requests are
//! `control/dispatch.rs`'s functions over that.

use crate::daemon::config::{Config, PollMode};
use crate::daemon::devices::device::NicFactory;
use crate::daemon::engine::shutdown::Shutdown;
use crate::daemon::served::reload::{self, ConfigSource, Reload};
use crate::daemon::served::{self, Served};
use crate::daemon::sessions::clients::Session;
use crate::daemon::sessions::objects::{Kind, Object, SessionId};
use crate::daemon::sys::{self, Epoll};
use crate::daemon::tokens::{
    T_DOORBELL, T_KIND, T_LISTENER, T_NETLINK, T_RELOAD, T_SESSION, T_STREAM, T_TIMER, T_UDP,
    T_WAKE,
};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};
use wire::client::proto::Handle;
use wire::client::{Reply, Request, MAX_MESSAGE_LEN};

/// Whether the engine yields its core while spinning without work
/// (`RDMA_EMU_DAEMON_YIELD=0` turns it off, for measurements).
fn yield_when_idle() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("RDMA_EMU_DAEMON_YIELD").map_or(true, |v| v != "0"))
}

/// The driver: one thread that waits on every descriptor, hands what is ready to the
/// state it serves ([`Served`]) and to the control requests (`control/dispatch.rs`), and decides
/// when to spin and when to sleep. What it owns itself is only what the loop needs: the
/// control socket, the timer, the shutdown and reload signals, the receive batch.
pub struct Engine {
    st: Served,
    listener: OwnedFd,
    timer: OwnedFd,
    shutdown: Shutdown,
    next_session: SessionId,
    /// Datagrams received in batches (recvmmsg).
    rx: crate::daemon::link::mmsg::RecvBatch,
    /// What one receive brought up a device's link stack (reused).
    arrivals: crate::daemon::link::stack::Arrivals,
    msg_buf: Vec<u8>,
    /// SIGHUP's eventfd and where a new configuration comes from (`served/reload.rs`).
    reload: Option<Reload>,
    /// rtnetlink address notifications (None: the kernel refused the socket).
    netlink: Option<OwnedFd>,
}

impl Engine {
    /// Opens the devices and the control socket. Errors say which and why.
    pub fn new(cfg: Config, factory: NicFactory, shutdown: Shutdown) -> io::Result<Engine> {
        cfg.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut devices = Vec::new();
        for spec in &cfg.devices {
            devices.push(Some(served::open(
                spec,
                None,
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
        let mut st = Served::new(cfg, epoll, factory);
        for dev in devices {
            st.add_device(dev.expect("just opened"))?;
        }
        let configured = std::mem::take(&mut st.cfg.faults);
        st.faults().initial(configured)?;
        let engine = Engine {
            st,
            listener,
            timer,
            shutdown,
            next_session: 1,
            rx: crate::daemon::link::mmsg::RecvBatch::new(32, 9216),
            arrivals: Default::default(),
            msg_buf: vec![0u8; MAX_MESSAGE_LEN + 1],
            reload: None,
            netlink,
        };
        Ok(engine)
    }

    /// Makes the engine reload from `source` whenever the returned eventfd is written
    /// (`sys::forward_sighup` points SIGHUP at it).
    pub fn enable_reload(&mut self, source: ConfigSource) -> io::Result<RawFd> {
        let r = Reload::new(source)?;
        let fd = r.fd();
        self.st.epoll.add(fd, T_RELOAD)?;
        self.reload = Some(r);
        Ok(fd)
    }

    /// SIGHUP: the new configuration, if one was read, goes to [`Served::reload`].
    fn reload(&mut self) {
        let Some(new) = self.reload.as_mut().and_then(Reload::take) else {
            return;
        };
        self.st.reload(new);
    }

    /// Runs until shutdown is requested, then stops cleanly.
    pub fn run(mut self) -> io::Result<()> {
        let mut slice = crate::daemon::engine::slice::SliceControl::new();
        let mut ready = Vec::new();
        let mut last_work = Instant::now();
        loop {
            if self.shutdown.requested() {
                self.st.stop();
                return Ok(());
            }
            let worked = self.process(&ready)?;
            let now = Instant::now();
            if worked {
                last_work = now;
            }
            let spin = match self.st.cfg.poll {
                PollMode::Busy => true,
                PollMode::Adaptive => worked || now.duration_since(last_work) < self.st.cfg.spin,
                PollMode::Sleep => worked,
            };
            if spin {
                if !worked && yield_when_idle() {
                    // Spinning on nothing: let a client thread that polls its CQ (and
                    // waits for us) run first on a machine with fewer cores than spinners.
                    std::thread::yield_now();
                    slice.after_yield(now.elapsed(), Instant::now());
                }
                self.st.epoll.wait(&mut ready, Some(Duration::ZERO))?;
                continue;
            }
            // Sleep: tell clients to ring the doorbell, then look once more (no lost wake-up).
            self.st.set_sleeping(true);
            if crate::daemon::datapath::rings::rings_pending(&self.st.objects, &self.st.rings) {
                self.st.set_sleeping(false);
                self.st.epoll.wait(&mut ready, Some(Duration::ZERO))?;
                continue;
            }
            // Pipes owed CM event tokens are retried soon (they drain when read).
            let token_retry = self
                .st
                .cm_tables
                .tokens_owed()
                .then(|| Instant::now() + Duration::from_millis(10));
            let deadline = self
                .st
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
            self.st.epoll.wait(&mut ready, None)?;
            self.st.set_sleeping(false);
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
                        reload::follow_addresses(
                            &mut self.st.devices,
                            &self.st.epoll,
                            &self.st.objects,
                        );
                    }
                    _ => {}
                },
                T_SESSION => self.serve_session(token & !T_KIND),
                T_DOORBELL => {
                    if let Some(Object {
                        kind: Kind::Ctx(c), ..
                    }) = self.st.objects.get(&Handle((token & 0xffff_ffff) as u32))
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
                    if let Some(Some(d)) = self.st.devices.get_mut((token & 0xffff) as usize) {
                        d.nic.handle_streams(now, true, &mut self.st.mem);
                    }
                }
                _ => {}
            }
            worked = true;
        }
        worked |= self.st.datapath().drain_rings(now);
        for d in self.st.devices.iter_mut().flatten() {
            if d.faults().next_release().is_some_and(|t| t <= now) {
                worked |= crate::daemon::devices::io::release_held(
                    d,
                    self.st.cfg.local_path,
                    now,
                    &mut self.st.mem,
                );
            }
        }
        worked |= self.st.datapath().drive_cores(now);
        worked |= crate::daemon::cm::drive_cm(&mut self.st.cm(), now);
        Ok(worked)
    }

    fn receive(&mut self, now: Instant, dev: usize, sock: usize) {
        let Some(Some(d)) = self.st.devices.get_mut(dev) else {
            return;
        };
        if sock == crate::daemon::link::pause::PAUSE_SOCKET {
            if let Some(p) = &mut d.pause {
                for (priority, until) in p.receive(now) {
                    d.nic.pause_priority(now, priority, until);
                }
            }
            return;
        }
        crate::daemon::devices::io::receive(
            d,
            now,
            sock,
            &mut self.rx,
            &mut self.arrivals,
            &mut self.st.mem,
        );
    }

    fn accept_all(&mut self) -> io::Result<()> {
        while let Some(sock) = sys::accept(self.listener.as_raw_fd())? {
            // A peer the kernel cannot name is nobody (it always can on a unix socket).
            let (pid, uid, gid) =
                sys::peer_cred(sock.as_raw_fd()).unwrap_or((0, u32::MAX, u32::MAX));
            let groups = sys::peer_groups(sock.as_raw_fd()).unwrap_or_default();
            let id = self.next_session;
            self.next_session += 1;
            self.st.epoll.add(sock.as_raw_fd(), T_SESSION | id)?;
            tracing::debug!(session = id, pid, uid, "client connected");
            self.st.sessions.insert(
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
            let Some(session) = self.st.sessions.get(&id) else {
                return;
            };
            let got = match sys::recv_msg(session.sock.as_raw_fd(), &mut self.msg_buf) {
                Ok(Some(got)) => got,
                Ok(None) => return,
                Err(_) => return self.st.close_session(id),
            };
            if got.len == 0 && got.fds.is_empty() {
                return self.st.close_session(id);
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
                        self.st.catch_up_rings();
                    }
                    (
                        req.seq,
                        crate::daemon::control::dispatch::dispatch(
                            &mut self.st,
                            id,
                            req.body,
                            got.fds,
                        ),
                    )
                }
                Err(_) => {
                    self.st.counters.bad_requests += 1;
                    match Request::decode_seq(&bytes) {
                        Some(seq) => (seq, Err(libc::EINVAL)),
                        None => {
                            self.st.counters.sessions_closed_for_garbage += 1;
                            return self.st.close_session(id);
                        }
                    }
                }
            };
            if !self.reply(id, seq, result) {
                return self.st.close_session(id);
            }
        }
    }

    /// Sends a reply; false if the session must be closed.
    fn reply(
        &mut self,
        id: SessionId,
        seq: u64,
        result: Result<(wire::client::ReplyBody, Vec<OwnedFd>), i32>,
    ) -> bool {
        let Some(session) = self.st.sessions.get(&id) else {
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
