//! One served device: its interface, GID table, UDP sockets, transport engine, and what
//! `ibv_query_device` / `ibv_query_port` / `rdma link show` report about it.

use super::config::DeviceSpec;
use super::netdev::{self, Netdev};
use super::nic::{Limits, Nic};
use super::udp::{UdpBackend, ROCE_V2_PORT};
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
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
    pub const MEM_MGT_EXTENSIONS: u32 = 1 << 21;
    pub const MEM_WINDOW_TYPE_2B: u32 = 1 << 24;
}

/// `IBV_PORT_*` capability bits of a RoCE port (what rxe reports).
const PORT_CAP_FLAGS: u32 = (1 << 16) | (1 << 26); // CM_SUP | IP_BASED_GIDS

/// Vendor id rxe reports (no vendor-specific code path of perftest matches it).
const VENDOR_ID: u32 = 0x00ff_ffff;

/// A device and everything the engine keeps about it.
pub struct Device {
    pub spec: DeviceSpec,
    pub netdev: Netdev,
    /// GID table: index → address (all RoCE v2).
    pub gids: Vec<IpAddr>,
    /// IB MTU in bytes.
    pub mtu: u32,
    pub node_guid: u64,
    pub udp: UdpBackend,
    pub nic: Box<dyn Nic + Send>,
    /// Core identifiers → protocol handles, to route completions and events.
    pub cq_by_id: HashMap<u32, Handle>,
    pub qp_by_qpn: HashMap<u32, Handle>,
    pub srq_by_id: HashMap<u32, Handle>,
    /// Open device contexts on this device.
    pub open_ctxs: usize,
    /// Datagrams received / dropped before the core (socket errors, oversize).
    pub rx_datagrams: u64,
    pub tx_datagrams: u64,
    pub tx_errors: u64,
    /// Datagrams too large for a receive buffer (dropped).
    pub rx_truncated: u64,
    /// Running `rdma-emu capture` streams.
    pub captures: Vec<super::capture::Capture>,
}

/// Builds the transport engine of a device from its parameters.
pub type NicFactory = fn(
    name: &str,
    gids: &[IpAddr],
    mtu: u32,
    udp_src_port: u16,
    limits: Limits,
    seed: u64,
) -> Box<dyn Nic + Send>;

impl Device {
    /// Looks up the interface, builds the GID table and binds the sockets.
    pub fn open(spec: &DeviceSpec, factory: NicFactory, seed: u64) -> io::Result<Device> {
        if spec.link_type == "siw" {
            return super::siw::open_device(spec, seed); // siw hook
        }
        if spec.link_type != "rxe" {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "device {}: type {} is not served yet",
                    spec.name, spec.link_type
                ),
            ));
        }
        let netdev = netdev::lookup(&spec.netdev)?;
        let addrs = spec.addrs.clone().unwrap_or_else(|| netdev.addrs.clone());
        let gids = netdev::gid_table(&addrs);
        if gids.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("interface {} has no IP address", spec.netdev),
            ));
        }
        let udp = UdpBackend::bind(&gids, ROCE_V2_PORT, netdev.index)?;
        // The GID table holds the addresses actually served.
        let gids: Vec<IpAddr> = udp.sockets.iter().map(|s| s.local.ip()).collect();
        let mtu = netdev::ib_mtu_for(netdev.mtu);
        let nic = factory(
            &spec.name,
            &gids,
            mtu,
            ROCE_V2_PORT,
            Limits::default(),
            seed,
        );
        Ok(Device {
            spec: spec.clone(),
            node_guid: netdev::node_guid(netdev.mac, &spec.name),
            netdev,
            gids,
            mtu,
            udp,
            nic,
            cq_by_id: HashMap::new(),
            qp_by_qpn: HashMap::new(),
            srq_by_id: HashMap::new(),
            open_ctxs: 0,
            rx_datagrams: 0,
            tx_datagrams: 0,
            tx_errors: 0,
            rx_truncated: 0,
            captures: Vec::new(),
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn summary(&self) -> DeviceSummary {
        if super::siw::is_siw(self) {
            return super::siw::summary(self); // siw hook
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
        if super::siw::is_siw(self) {
            return super::siw::device_attr(self); // siw hook
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
                | cap::MEM_WINDOW_TYPE_2B,
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
        }
    }

    /// `ibv_query_port` for port 1.
    pub fn port_attr(&self) -> PortAttr {
        if super::siw::is_siw(self) {
            return super::siw::port_attr(self); // siw hook
        }
        PortAttr {
            state: port_state::ACTIVE,
            max_mtu: mtu::MTU_4096,
            active_mtu: mtu::from_bytes(self.mtu).unwrap_or(mtu::MTU_1024),
            gid_tbl_len: 1024,
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

    pub fn gid_entries(&self) -> Vec<GidEntry> {
        if super::siw::is_siw(self) {
            return super::siw::gid_entries(self); // siw hook
        }
        self.gids
            .iter()
            .enumerate()
            .map(|(i, a)| GidEntry {
                index: i as u32,
                port_num: 1,
                gid: netdev::gid_of(*a),
                gid_type: gid_type::ROCE_V2,
            })
            .collect()
    }

    pub fn link_info(&self) -> LinkInfo {
        LinkInfo {
            name: self.spec.name.clone(),
            link_type: self.spec.link_type.clone(),
            netdev: self.netdev.name.clone(),
            state: port_state::ACTIVE,
            active_mtu: mtu::from_bytes(self.mtu).unwrap_or(mtu::MTU_1024),
            netdev_mtu: self.netdev.mtu,
            gids: self.gid_entries(),
        }
    }
}
