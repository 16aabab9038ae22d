//! What the daemon serves: the devices, the clients' sessions and objects, the rings it
//! drains, the CM tables and the fault rules ([`Served`]), and the views it lends to the
//! parts that work on them for one call ([`DataPath`], [`Cm`], [`Clients`],
//! [`FaultCtx`]). The engine's loop drives it; control requests (`control/dispatch.rs`) are
//! functions over it.

pub(in crate::daemon) mod reload;

use crate::daemon::cm::{Cm, CmTables};
use crate::daemon::config::{Config, DeviceSpec};
use crate::daemon::datapath::rings::DataPath;
use crate::daemon::devices::device::{NicFactory, ServedDevice};
use crate::daemon::devices::memory::ProcMem;
use crate::daemon::devices::nic::TxMeta;
use crate::daemon::faults::{FaultCtx, FaultIds};
use crate::daemon::link::backend::Backend;
use crate::daemon::sessions::clients::{Clients, DaemonCounters, Session};
use crate::daemon::sessions::objects::{Kind, Object, SessionId};
use crate::daemon::sessions::users::Users;
use crate::daemon::siw;
use crate::daemon::sys::Epoll;
use crate::daemon::tokens::{udp_token, T_STREAM};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::os::fd::AsRawFd;
use std::time::Instant;
use wire::client::proto::Handle;

/// Packets staged per sendmmsg. A message's First packet carries a RETH and so cannot
/// share a GSO run with its Middles: at 32, a 64 KiB WRITE at path MTU 1024 left in three
/// runs (21 packets a run); at 64 it leaves in two (two namespaces, ib_write_bw 64 KiB,
/// perftest niced: 0.91-1.19 -> 0.94-1.33 GB/s, daemons' CPU 4.2-5.4 -> 3.8-4.2 s).
const TX_STAGE: usize = 64;

/// Opens the device `spec` describes, by its type: rxe through
/// [`ServedDevice::open_rxe`], siw through [`siw::serve`]. `backend`: the one
/// `link add … backend B` chose, or `None` for the spec's own.
pub(in crate::daemon) fn open(
    spec: &DeviceSpec,
    backend: Option<Backend>,
    factory: NicFactory,
    seed: u64,
    udp_src_port: Option<u16>,
) -> io::Result<ServedDevice> {
    let backend = match backend {
        Some(b) => b,
        None => spec
            .backend()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
    };
    match spec.link_type.as_str() {
        "rxe" => ServedDevice::open_rxe(spec, backend, factory, seed, udp_src_port),
        "siw" => siw::serve(spec, backend, seed),
        other => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("device {}: type {other} is not served yet", spec.name),
        )),
    }
}

/// The daemon's state, owned in one place and lent out in parts.
pub(in crate::daemon) struct Served {
    pub(in crate::daemon) cfg: Config,
    pub(in crate::daemon) epoll: Epoll,
    pub(in crate::daemon) factory: NicFactory,
    pub(in crate::daemon) devices: Vec<Option<ServedDevice>>,
    pub(in crate::daemon) sessions: HashMap<SessionId, Session>,
    pub(in crate::daemon) objects: BTreeMap<Handle, Object>,
    /// QPs and SRQs whose rings the engine drains.
    pub(in crate::daemon) rings: BTreeSet<Handle>,
    pub(in crate::daemon) mem: ProcMem,
    pub(in crate::daemon) counters: DaemonCounters,
    /// What each user holds, against `cfg.user_limits`.
    pub(in crate::daemon) users: Users,
    next_handle: u32,
    /// Packets the cores produced, sent in batches (sendmmsg).
    tx_bufs: Vec<Vec<u8>>,
    tx_meta: Vec<TxMeta>,
    /// Where each send ring stood when a ring pass began (reused).
    ring_ends: Vec<(Handle, u64)>,
    /// RDMA CM channels, ids, port spaces.
    pub(in crate::daemon) cm_tables: CmTables,
    /// The ids of fault rules (`rdma-emu fault add`).
    fault_ids: FaultIds,
}

impl Served {
    /// Nothing served yet: devices come through [`Served::add_device`].
    pub(in crate::daemon) fn new(cfg: Config, epoll: Epoll, factory: NicFactory) -> Served {
        let seed = cfg.seed;
        Served {
            cfg,
            epoll,
            factory,
            devices: Vec::new(),
            sessions: HashMap::new(),
            objects: BTreeMap::new(),
            rings: BTreeSet::new(),
            mem: ProcMem::default(),
            counters: DaemonCounters::default(),
            users: Users::default(),
            next_handle: 1,
            tx_bufs: (0..TX_STAGE).map(|_| Vec::with_capacity(4352)).collect(),
            tx_meta: Vec::with_capacity(TX_STAGE),
            ring_ends: Vec::new(),
            cm_tables: CmTables::new(seed),
            fault_ids: FaultIds::new(),
        }
    }

    /// Registers a device's sockets and makes it visible to clients.
    pub(in crate::daemon) fn add_device(&mut self, mut dev: ServedDevice) -> io::Result<usize> {
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
            self.epoll.add(
                p.fd(),
                udp_token(index, crate::daemon::link::pause::PAUSE_SOCKET),
            )?;
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
        crate::daemon::cm::cm_device_added(&mut self.cm(), index);
        Ok(index)
    }

    pub(in crate::daemon) fn device_index(&self, name: &str) -> Option<usize> {
        crate::daemon::devices::device::index_of(&self.devices, name)
    }

    /// Removes a device no client has open (`link del`, reload): ENODEV, EBUSY.
    pub(in crate::daemon) fn remove_device(&mut self, name: &str) -> Result<(), i32> {
        let i = self.device_index(name).ok_or(libc::ENODEV)?;
        let d = self.devices[i].as_ref().ok_or(libc::ENODEV)?;
        if d.open_ctxs > 0 {
            return Err(libc::EBUSY);
        }
        for (_, fd) in d.port().fds() {
            self.epoll.remove(fd);
        }
        crate::daemon::cm::cm_device_removed(&mut self.cm(), i);
        tracing::info!(device = %name, "device removed");
        self.devices[i] = None;
        Ok(())
    }

    /// The parts of the engine a fault request touches.
    pub(in crate::daemon) fn faults(&mut self) -> FaultCtx<'_> {
        FaultCtx {
            devices: &mut self.devices,
            objects: &self.objects,
            ids: &mut self.fault_ids,
            seed: self.cfg.seed,
        }
    }

    /// The parts of the engine a request that creates or finds objects touches.
    /// The data path's parts, lent for one call.
    pub(in crate::daemon) fn datapath(&mut self) -> DataPath<'_> {
        DataPath {
            objects: &self.objects,
            rings: &self.rings,
            devices: &mut self.devices,
            mem: &mut self.mem,
            counters: &mut self.counters,
            tx_bufs: &mut self.tx_bufs,
            tx_meta: &mut self.tx_meta,
            ring_ends: &mut self.ring_ends,
            local_path: self.cfg.local_path,
        }
    }

    /// The RDMA CM with what it touches ([`Cm`]).
    pub(in crate::daemon) fn cm(&mut self) -> Cm<'_> {
        let (clients, rest) = self.split_clients();
        Cm {
            tables: rest.cm_tables,
            clients,
            cfg: rest.cfg,
            tx_bufs: rest.tx_bufs,
            tx_meta: rest.tx_meta,
        }
    }

    /// What a request that creates, finds or forgets objects touches ([`Clients`]).
    pub(in crate::daemon) fn clients(&mut self) -> Clients<'_> {
        self.split_clients().0
    }

    /// The [`Clients`] view and, apart, the fields it does not borrow mutably.
    fn split_clients(&mut self) -> (Clients<'_>, Rest<'_>) {
        let clients = Clients {
            sessions: &mut self.sessions,
            objects: &mut self.objects,
            rings: &mut self.rings,
            users: &mut self.users,
            limits: &self.cfg.user_limits,
            next_handle: &mut self.next_handle,
            devices: &mut self.devices,
            mem: &mut self.mem,
        };
        let rest = Rest {
            cfg: &self.cfg,
            cm_tables: &mut self.cm_tables,
            tx_bufs: &mut self.tx_bufs,
            tx_meta: &mut self.tx_meta,
        };
        (clients, rest)
    }

    pub(in crate::daemon) fn set_sleeping(&self, sleeping: bool) {
        for obj in self.objects.values() {
            if let Kind::Ctx(c) = &obj.kind {
                if let Some(page) = wire::client::SessionPage::new(c.page.words()) {
                    page.set_sleeping(sleeping);
                }
            }
        }
    }

    /// Takes what the rings hold and sends what it makes, before a request that could
    /// take away what that work needs.
    pub(in crate::daemon) fn catch_up_rings(&mut self) {
        let now = Instant::now();
        if self.datapath().drain_rings(now) {
            self.datapath().drive_cores(now);
        }
    }

    /// A client went away: everything it held is released.
    pub(in crate::daemon) fn close_session(&mut self, id: SessionId) {
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
        crate::daemon::cm::cm_release_session(&mut self.cm(), id);
        tracing::debug!(
            session = id,
            pid = session.pid,
            uid = session.uid,
            "client gone, resources released"
        );
    }

    /// Closes one device context: the core forgets its owner, every object under it goes.
    pub(in crate::daemon) fn release_ctx(&mut self, ctx: Handle) {
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
            let _ = crate::daemon::devices::mcast::sync_mcast(d, &self.epoll, |slot| {
                udp_token(dev, slot)
            });
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
    pub(in crate::daemon) fn forget(&mut self, h: Handle) {
        self.clients().forget(h);
    }

    /// SIGTERM: QPs to error, completions flushed into the rings, DEVICE_FATAL to every
    /// client, socket removed.
    pub(in crate::daemon) fn stop(&mut self) {
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
        let ids: Vec<Handle> = crate::daemon::cm::cm_ids(&self.cm());
        for h in ids {
            crate::daemon::cm::cm_destroy_id(&mut self.cm(), now, h);
        }
        crate::daemon::cm::drive_cm(&mut self.cm(), now);
        let ctxs: Vec<Handle> = self
            .objects
            .iter()
            .filter(|(_, o)| matches!(o.kind, Kind::Ctx(_)))
            .map(|(h, _)| *h)
            .collect();
        for ctx in ctxs {
            crate::daemon::datapath::notify::send_event(
                &self.objects,
                ctx,
                wire::client::verbs::event_type::DEVICE_FATAL,
                0,
            );
        }
        let _ = std::fs::remove_file(&self.cfg.socket);
    }

    /// A new configuration: its settings at once (`reload::apply`), its device list
    /// through [`Served::remove_device`] and [`Served::add_device`].
    pub(in crate::daemon) fn reload(&mut self, new: Config) {
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
            match self::open(
                &spec,
                None,
                self.factory,
                self.cfg.seed,
                self.cfg.udp_src_port,
            )
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
}

/// The fields of [`Served`] beside a [`Clients`] view (`Served::split_clients`).
struct Rest<'a> {
    cfg: &'a Config,
    cm_tables: &'a mut CmTables,
    tx_bufs: &'a mut [Vec<u8>],
    tx_meta: &'a mut Vec<TxMeta>,
}
