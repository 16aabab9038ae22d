//! One served device: its interface, GID table, UDP sockets, transport engine, and what
//! `ibv_query_device` / `ibv_query_port` / `rdma link show` report about it.

use crate::daemon::config::DeviceSpec;
use crate::daemon::devices::gid_table::{GidTable, GID_TBL_LEN};
use crate::daemon::devices::netdev::{self, Netdev};
use crate::daemon::devices::nic::{AppMemory, Limits, Nic};
use crate::daemon::devices::parked::ParkedReqs;
use crate::daemon::link::backend::Backend;
use crate::daemon::link::datagram::{BoundSocket, ROCE_V2_PORT};
use crate::daemon::link::fault::Faults;
use crate::daemon::link::faulty::Faulty;
use crate::daemon::link::local::Local;
use crate::daemon::link::packet::PacketLink;
use crate::daemon::link::stack::LoopScratch;
use crate::daemon::link::udp::UdpBackend;
use crate::daemon::link::xdp::XdpLink;
use emu_core::cm::gsi_route::{self, Rx};
use emu_core::cm::{CmAgent, CmConfig};
use emu_core::U32Map;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;
use wire::client::proto::Handle;
use wire::client::verbs::{atomic_cap, gid_type, link_layer, mtu, node, port_state};
use wire::client::{DeviceAttr, DeviceSummary, GidEntry, LinkInfo, PortAttr};

/// `IBV_DEVICE_*` capability bits rxe reports that we honour.
mod cap {
    pub const RESIZE_MAX_WR: u32 = 1 << 0;
    pub const BAD_PKEY_CNTR: u32 = 1 << 1;
    pub const PORT_ACTIVE_EVENT: u32 = 1 << 9;
    pub const SYS_IMAGE_GUID: u32 = 1 << 10;
    pub const RC_RNR_NAK_GEN: u32 = 1 << 11;
    pub const SRQ_RESIZE: u32 = 1 << 13;
    pub const MEM_WINDOW: u32 = 1 << 17;
    pub const XRC: u32 = 1 << 20;
    pub const MEM_MGT_EXTENSIONS: u32 = 1 << 21;
    pub const MEM_WINDOW_TYPE_2B: u32 = 1 << 24;
}

/// `IBV_PORT_*` capability bits of a RoCE port (what rxe reports).
const PORT_CAP_FLAGS: u32 = (1 << 16) | (1 << 26); // CM_SUP | IP_BASED_GIDS

/// Vendor id rxe reports (no vendor-specific code path of perftest matches it).
const VENDOR_ID: u32 = 0x00ff_ffff;

/// A device the daemon serves (`rxe0`, `siw0`) and everything the engine keeps about it:
/// its interface, GID table, backend sockets and transport engine (a [`Nic`] that wraps
/// an `emu_core::Device`). Named apart from the core's `Device`, which is only the
/// transport.
pub struct ServedDevice {
    pub spec: DeviceSpec,
    pub netdev: Netdev,
    /// GID table: index → address (all RoCE v2), indices stable while addresses come and
    /// go; the 4791 socket of each address sits at the same index in `port()`.
    pub gids: GidTable,
    /// IB MTU in bytes.
    pub mtu: u32,
    pub node_guid: u64,
    /// The link stack: fault rules over the local path over the sockets and the backend.
    pub link: Stack,
    pub nic: Box<dyn Nic + Send>,
    /// Core identifiers → protocol handles, to route completions and events.
    pub cq_by_id: U32Map<Handle>,
    pub qp_by_qpn: U32Map<Handle>,
    pub srq_by_id: U32Map<Handle>,
    /// XRC domains tied to a file (its device and inode) → the engine's domain: every
    /// `ibv_open_xrcd` of the file on this device shares it.
    pub xrcd_by_file: HashMap<(u64, u64), u32>,
    /// Open device contexts on this device.
    pub open_ctxs: usize,
    /// Datagrams received / dropped before the core (socket errors, oversize).
    pub rx_datagrams: u64,
    pub tx_datagrams: u64,
    pub tx_errors: u64,
    /// Datagrams too large for a receive buffer (dropped).
    pub rx_truncated: u64,
    /// The connection manager of the port (QP1 traffic, RDMA CM).
    pub cm: CmAgent,
    /// PSN of the next packet QP1 sends.
    pub gsi_psn: u32,
    /// Packets to QP1 dropped before the agent (bad ICRC, not a GSI MAD).
    pub gsi_rx_dropped: u64,
    /// REQs and SIDR_REQs for a service nobody listens on yet, held for a moment
    /// (`devices::parked::LISTEN_GRACE`) before the agent rejects them.
    pub(in crate::daemon) parked_reqs: ParkedReqs,
    /// With `backend packet`: the socket 802.3 PAUSE / 802.1Qbb PFC frames arrive on.
    pub pause: Option<crate::daemon::link::pause::PauseReceiver>,
    /// Reused by every delivery of what the local path looped back (taken while in use).
    pub loop_scratch: Option<Box<LoopScratch>>,
}

/// A RoCE device's link stack (`link/stack.rs`): fault injection (`rdma-emu fault`)
/// over the local path over the device's sockets and backend.
pub type Stack = Faulty<Local<UdpBackend>>;

/// What following the interface's addresses changed: sockets to deregister and drop, and
/// GID indices whose new 4791 socket must be registered.
#[derive(Debug, Default)]
pub struct AddrChange {
    pub closed: Vec<BoundSocket>,
    pub opened: Vec<usize>,
}

impl AddrChange {
    /// Whether the GID table changed.
    pub fn changed(&self) -> bool {
        !self.closed.is_empty() || !self.opened.is_empty()
    }
}

/// Builds the transport engine of a device from its parameters.
pub type NicFactory = fn(
    name: &str,
    gids: &[IpAddr],
    mtu: u32,
    udp_src_port: Option<u16>,
    limits: Limits,
    seed: u64,
) -> Box<dyn Nic + Send>;

/// The index of the device named `name` among the served ones (removed ones are `None`).
pub(in crate::daemon) fn index_of(devices: &[Option<ServedDevice>], name: &str) -> Option<usize> {
    devices
        .iter()
        .position(|d| d.as_ref().is_some_and(|d| d.name() == name))
}

impl ServedDevice {
    /// Opens an rxe device on `backend` (its spec's, or the one `link add … backend B`
    /// chose; one that fits the type, see [`Backend::choose`]): looks up the interface,
    /// builds the GID table and binds the sockets. The packet backend fails, saying why
    /// and what to use instead, without CAP_NET_RAW. Packets leave from `udp_src_port`
    /// (`Some(4791)`: `--udp-src-port fixed`), or, with `None`, from the port the core
    /// hashes from the QP pair (RoCE v2 entropy; see `UdpBackend::send_socket`). The
    /// daemon opens devices of every type with `served::open_device`.
    pub fn open_rxe(
        spec: &DeviceSpec,
        backend: Backend,
        factory: NicFactory,
        seed: u64,
        udp_src_port: Option<u16>,
    ) -> io::Result<ServedDevice> {
        let netdev = netdev::lookup(&spec.netdev)?;
        let addrs = spec.addrs.clone().unwrap_or_else(|| netdev.addrs.clone());
        let gids = netdev::gid_table(&addrs);
        if gids.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("interface {} has no IP address", spec.netdev),
            ));
        }
        // The capability first: that is what a packet device most likely lacks.
        let link = match backend {
            Backend::Packet => Some(PacketLink::open(&netdev)?),
            _ => None,
        };
        let xdp = match backend {
            Backend::Xdp => Some(XdpLink::open(&netdev)?),
            _ => None,
        };
        let mut udp = UdpBackend::bind(&gids, ROCE_V2_PORT, netdev.index)?;
        if let Some(link) = link {
            udp.use_packet(link)?;
        }
        if let Some(link) = xdp {
            udp.use_xdp(link)?;
        }
        // The GID table holds the addresses actually served, at their sockets' indices.
        let gids = GidTable::new(&udp.bound().map(|(_, s)| s.local.ip()).collect::<Vec<_>>());
        debug_assert!(udp.bound().all(|(i, s)| gids.get(i) == Some(s.local.ip())));
        let mtu = netdev::ib_mtu_for(netdev.mtu);
        let node_guid = netdev::node_guid(netdev.mac, &spec.name);
        let active_mtu = mtu::from_bytes(mtu)
            .and_then(emu_core::Mtu::from_raw)
            .unwrap_or(emu_core::Mtu::Mtu1024);
        // Communication IDs and starting PSNs differ from one run to the next, as the
        // kernel's random ones do: a restarted daemon's REQs must not look like
        // duplicates of its previous life's to a peer still in time wait.
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let cm = CmAgent::new(CmConfig::new(
            node_guid,
            cm_gids(gids.slots()),
            active_mtu,
            seed ^ node_guid ^ started,
        ));
        let mut nic = factory(
            &spec.name,
            &gids.addrs(),
            mtu,
            udp_src_port,
            Limits::default(),
            seed,
        );
        let (dcqcn, cnp_interval) = spec.congestion();
        nic.set_congestion(dcqcn, cnp_interval);
        nic.set_cnp_dscp(spec.cnp_dscp());
        let pause = match backend {
            // The xdp backend's program passes MAC Control frames on to the kernel, where
            // the pause socket reads them as on `packet`.
            Backend::Packet | Backend::Xdp => {
                // Quanta are timed at the interface's speed (veth: 10 Gbit/s; a link that
                // is down, tun, lo: none, then the configured line rate or 10 Gbit/s).
                let rate = crate::daemon::link::pause::link_speed_bps(&netdev.name)
                    .or((dcqcn.max_rate_mbps > 0)
                        .then(|| u64::from(dcqcn.max_rate_mbps) * 1_000_000))
                    .unwrap_or(crate::daemon::link::pause::DEFAULT_LINK_BPS);
                Some(crate::daemon::link::pause::PauseReceiver::open(
                    netdev.index,
                    rate,
                )?)
            }
            _ => None,
        };
        Ok(ServedDevice {
            spec: spec.clone(),
            node_guid,
            netdev,
            gids,
            mtu,
            link: Faulty::new(Local::new(udp)),
            nic,
            cq_by_id: U32Map::default(),
            qp_by_qpn: U32Map::default(),
            srq_by_id: U32Map::default(),
            xrcd_by_file: HashMap::new(),
            open_ctxs: 0,
            rx_datagrams: 0,
            tx_datagrams: 0,
            tx_errors: 0,
            rx_truncated: 0,
            cm,
            gsi_psn: 0,
            gsi_rx_dropped: 0,
            parked_reqs: ParkedReqs::default(),
            pause,
            loop_scratch: None,
        })
    }

    /// Sets the CM's response timeout exponent and retry count (the daemon's options);
    /// only before the agent has any connection.
    pub fn set_cm_timers(&mut self, response_timeout: u8, max_retries: u8) {
        let mut cfg = self.cm.config().clone();
        if (cfg.cm_response_timeout, cfg.max_cm_retries) == (response_timeout, max_retries) {
            return;
        }
        cfg.cm_response_timeout = response_timeout;
        cfg.max_cm_retries = max_retries;
        self.cm = CmAgent::new(cfg);
    }

    /// The GID table the interface's addresses call for now, when this device follows its
    /// interface (no configured `addrs`) and the interface still exists.
    pub fn wanted_gids(&self) -> Option<Vec<IpAddr>> {
        if self.spec.addrs.is_some() {
            return None;
        }
        let addrs = netdev::lookup(&self.netdev.name).ok()?.addrs;
        Some(netdev::gid_table(&addrs))
    }

    /// Serves `present` (the interface's addresses, `netdev::gid_table` order) instead of
    /// the current addresses, keeping indices stable (`gid_table.rs`): a removed address
    /// empties its GID slot and closes its sockets, a new one is bound and takes the first
    /// free slot (an address that cannot be bound yet, IPv6 still in duplicate address
    /// detection, is left out until a later notification). The core gets the new table.
    pub fn follow_addrs(&mut self, present: &[IpAddr]) -> AddrChange {
        let before = self.gids.clone();
        let mut change = AddrChange::default();
        if self.is_siw() {
            // No UDP sockets: the addresses only say where the RDMA CM may listen.
            self.gids.follow(present);
            return change;
        }
        for (i, a) in before.iter() {
            if !present.contains(&a) {
                self.gids.remove(a);
                change.closed.extend(self.port_mut().close_slot(i));
            }
        }
        for &a in present {
            if self.gids.contains(a) {
                continue;
            }
            let Some(slot) = self.gids.slot_for(a) else {
                tracing::warn!(device = self.name(), addr = %a, "GID table full ({GID_TBL_LEN}), address not served");
                continue;
            };
            match self.port_mut().open_slot(slot, a) {
                Ok(()) => {
                    self.gids.insert(a);
                    change.opened.push(slot);
                }
                Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
                    tracing::debug!(device = self.name(), addr = %a, "address not available yet");
                }
                Err(e) => {
                    tracing::warn!(device = self.name(), addr = %a, "address not served: {e}")
                }
            }
        }
        if self.gids != before {
            tracing::info!(device = self.name(), old = ?before.slots(), new = ?self.gids.slots(), "GID table changed");
            self.nic.set_gids(self.gids.slots());
            self.cm.set_gids(cm_gids(self.gids.slots()));
        }
        change
    }

    /// Serves a device whose engine reaches the network by itself (a siw device over
    /// TCP, `siw::serve`): no UDP socket and no IB CM on QP1. `gids`: the addresses it
    /// serves, in `netdev::gid_table` order.
    pub fn without_datagrams(
        spec: &DeviceSpec,
        node_guid: u64,
        netdev: Netdev,
        gids: &[IpAddr],
        mtu: u32,
        nic: Box<dyn Nic + Send>,
        seed: u64,
    ) -> ServedDevice {
        ServedDevice {
            spec: spec.clone(),
            node_guid,
            netdev,
            gids: GidTable::new(gids),
            cm: CmAgent::new(CmConfig::new(
                node_guid,
                Vec::new(),
                emu_core::Mtu::Mtu1024,
                seed,
            )),
            gsi_psn: 0,
            gsi_rx_dropped: 0,
            parked_reqs: ParkedReqs::default(),
            pause: None,
            loop_scratch: None,
            mtu,
            link: Stack::default(),
            nic,
            cq_by_id: U32Map::default(),
            qp_by_qpn: U32Map::default(),
            srq_by_id: U32Map::default(),
            xrcd_by_file: HashMap::new(),
            open_ctxs: 0,
            rx_datagrams: 0,
            tx_datagrams: 0,
            tx_errors: 0,
            rx_truncated: 0,
        }
    }

    /// Whether this is a siw (iWARP) device.
    pub fn is_siw(&self) -> bool {
        self.spec.link_type == "siw"
    }

    /// A received RoCE v2 datagram: QP1 traffic to the CM agent (held back while its
    /// service is not listened on, `devices::parked::LISTEN_GRACE`), the rest to the core
    /// (`sealed`: with its ICRC; without, a packet of the device's own that never left).
    pub(in crate::daemon) fn deliver(
        &mut self,
        now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        payload: &[u8],
        sealed: bool,
        mem: &mut dyn AppMemory,
    ) {
        match gsi_route::route(src, dst, payload) {
            Rx::Transport => self
                .nic
                .handle_datagram(now, src, dst, payload, sealed, mem),
            Rx::Gsi { src, dst, mad } => {
                self.parked_reqs
                    .handle_mad(&mut self.cm, now, src, dst, mad)
            }
            Rx::Dropped(why) => {
                self.gsi_rx_dropped += 1;
                tracing::trace!(%src, ?why, "QP1 packet dropped");
            }
        }
    }

    /// Hands held-back REQs to the CM agent once their service is listened on or their
    /// grace is over. Whether any went.
    pub(in crate::daemon) fn release_parked_reqs(&mut self, now: Instant) -> bool {
        self.parked_reqs.release(&mut self.cm, now)
    }

    /// When the oldest held-back REQ's grace ends.
    pub(in crate::daemon) fn parked_deadline(&self) -> Option<Instant> {
        self.parked_reqs.deadline()
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The device's sockets and backend, at the bottom of its link stack.
    pub fn port(&self) -> &UdpBackend {
        self.link.inner().inner()
    }

    /// The device's sockets and backend, at the bottom of its link stack.
    pub fn port_mut(&mut self) -> &mut UdpBackend {
        self.link.inner_mut().inner_mut()
    }

    /// The fault rules, held packets and link state (`rdma-emu fault`).
    pub fn faults(&self) -> &Faults {
        self.link.faults()
    }

    /// The fault rules, held packets and link state (`rdma-emu fault`).
    pub fn faults_mut(&mut self) -> &mut Faults {
        self.link.faults_mut()
    }

    pub fn summary(&self) -> DeviceSummary {
        if let Some(id) = self.nic.identity() {
            return id.summary(&self.spec.name, self.node_guid);
        }
        DeviceSummary {
            name: self.spec.name.clone(),
            node_guid: self.node_guid,
            transport: node::TRANSPORT_IB,
            node_type: node::NODE_CA,
        }
    }

    /// `ibv_query_device`, as rxe fills it.
    pub fn device_attr(&self) -> DeviceAttr {
        if let Some(id) = self.nic.identity() {
            return id.device_attr(self.node_guid);
        }
        let l = self.nic.limits();
        let i = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        DeviceAttr {
            fw_ver: "0.0.0".into(),
            node_guid: self.node_guid,
            sys_image_guid: self.node_guid,
            max_mr_size: u64::MAX,
            page_size_cap: 0xffff_f000,
            vendor_id: VENDOR_ID,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: i(l.max_qp),
            max_qp_wr: i(l.max_qp_wr),
            device_cap_flags: cap::RESIZE_MAX_WR
                | cap::BAD_PKEY_CNTR
                | cap::PORT_ACTIVE_EVENT
                | cap::SYS_IMAGE_GUID
                | cap::RC_RNR_NAK_GEN
                | cap::SRQ_RESIZE
                | cap::MEM_WINDOW
                | cap::MEM_MGT_EXTENSIONS
                | cap::MEM_WINDOW_TYPE_2B
                | cap::XRC,
            max_sge: i(l.max_sge),
            max_sge_rd: i(l.max_sge),
            max_cq: i(l.max_cq),
            max_cqe: i(l.max_cqe),
            max_mr: i(l.max_mr),
            max_pd: i(l.max_pd),
            max_qp_rd_atom: i(l.max_qp_rd_atom),
            max_ee_rd_atom: 0,
            max_res_rd_atom: i(l.max_res_rd_atom),
            max_qp_init_rd_atom: i(l.max_qp_rd_atom),
            max_ee_init_rd_atom: 0,
            atomic_cap: atomic_cap::HCA,
            max_ee: 0,
            max_rdd: 0,
            max_mw: i(l.max_mw),
            max_raw_ipv6_qp: 0,
            max_raw_ethy_qp: 0,
            max_mcast_grp: 8192,
            max_mcast_qp_attach: 56,
            max_total_mcast_qp_attach: 458_752,
            max_ah: i(l.max_ah),
            max_fmr: 0,
            max_map_per_fmr: 0,
            max_srq: i(l.max_srq),
            max_srq_wr: i(l.max_srq_wr),
            max_srq_sge: i(l.max_srq_sge),
            max_pkeys: 64,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
            odp_caps: crate::daemon::devices::odp::roce_caps(),
        }
    }

    /// `ibv_query_port` for port 1.
    pub fn port_attr(&self) -> PortAttr {
        let mut attr = self.port_attr_up();
        if self.faults().link_down {
            attr.state = port_state::DOWN;
            attr.phys_state = 3; // Disabled
        }
        attr
    }

    fn port_attr_up(&self) -> PortAttr {
        if let Some(id) = self.nic.identity() {
            return id.port_attr(self.mtu, &self.netdev);
        }
        PortAttr {
            state: port_state::ACTIVE,
            max_mtu: mtu::MTU_4096,
            active_mtu: mtu::from_bytes(self.mtu).unwrap_or(mtu::MTU_1024),
            gid_tbl_len: GID_TBL_LEN as i32,
            port_cap_flags: PORT_CAP_FLAGS,
            max_msg_sz: self.nic.limits().max_msg_sz,
            bad_pkey_cntr: 0,
            qkey_viol_cntr: 0,
            pkey_tbl_len: 1,
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            max_vl_num: 1,
            sm_sl: 0,
            subnet_timeout: 0,
            init_type_reply: 0,
            active_width: 2,  // 4X
            active_speed: 32, // EDR (25 Gb/s per lane), like rxe over a fast netdev
            phys_state: 5,    // LinkUp
            link_layer: link_layer::ETHERNET,
            flags: 0,
            port_cap_flags2: 0,
            active_speed_ex: 0,
        }
    }

    /// The occupied GID entries (what `rdma link show` and a device's opening list).
    pub fn gid_entries(&self) -> Vec<GidEntry> {
        if let Some(id) = self.nic.identity() {
            return id.gid_entries(self.node_guid);
        }
        self.gids
            .iter()
            .map(|(i, a)| Self::gid_entry_of(i, Some(a)))
            .collect()
    }

    /// The entry at `index` (`ibv_query_gid`): an empty slot is the zero GID.
    pub fn gid_entry(&self, index: u32) -> GidEntry {
        if let Some(id) = self.nic.identity() {
            // The kind's own table (siw: one GID, the MAC in the first octets, as
            // `siw_query_gid` answers); an index it lacks is empty.
            return id
                .gid_entries(self.node_guid)
                .into_iter()
                .find(|e| e.index == index)
                .unwrap_or(GidEntry {
                    index,
                    port_num: 1,
                    gid: [0; 16],
                    gid_type: 0,
                });
        }
        Self::gid_entry_of(index as usize, self.gids.get(index as usize))
    }

    fn gid_entry_of(index: usize, addr: Option<IpAddr>) -> GidEntry {
        GidEntry {
            index: index as u32,
            port_num: 1,
            gid: addr.map_or([0; 16], netdev::gid_of),
            gid_type: if addr.is_some() { gid_type::ROCE_V2 } else { 0 },
        }
    }

    pub fn link_info(&self) -> LinkInfo {
        LinkInfo {
            name: self.spec.name.clone(),
            link_type: self.spec.link_type.clone(),
            netdev: self.netdev.name.clone(),
            state: self.port_attr().state,
            active_mtu: mtu::from_bytes(self.mtu).unwrap_or(mtu::MTU_1024),
            netdev_mtu: self.netdev.mtu,
            gids: self.gid_entries(),
            mpa_crc: self.is_siw().then(|| self.spec.mpa().crc),
            mpa_markers: self.is_siw().then(|| self.spec.mpa().markers),
            backend: match self.port().xdp_mode() {
                _ if self.is_siw() => self.spec.backend().unwrap_or(Backend::Tcp).to_string(),
                // How the program runs, as `ip link` tells it apart (xdp / xdpgeneric).
                Some(mode) => format!("xdp mode {}", mode.name()),
                None => self.port().backend().to_string(),
            },
            default_tos: (!self.is_siw()).then(|| self.spec.default_tos()),
            cnp_dscp: (!self.is_siw()).then(|| self.spec.cnp_dscp()),
        }
    }
}

/// The CM agent's view of a GID table: index for index, an empty slot as the zero GID.
fn cm_gids(slots: &[Option<IpAddr>]) -> Vec<emu_core::Gid> {
    slots
        .iter()
        .map(|ip| ip.map_or(emu_core::Gid::default(), emu_core::Gid::from_ip))
        .collect()
}
