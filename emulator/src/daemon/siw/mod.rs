//! `siw` devices: iWARP (RDMAP/DDP/MPA over TCP, `emu_core::iwarp`) served the way the
//! kernel's siw driver serves it.
//!
//! - [`SiwNic`] (`nic.rs`) is the device's [`crate::daemon::devices::nic::Nic`]: PDs, MRs (STags) and CQs
//!   live in an `emu_core::Device` (the same key table and checks as RoCE), QPs are RC
//!   only and become `iwarp::Connection`s once the RDMA CM connected them.
//! - The connections (`tcp.rs`): each TCP connection's bytes fed to its
//!   `iwarp::Connection`, whatever TCP carries them (`net.rs`): the kernel's
//!   (`backend tcp`, nonblocking sockets in an epoll set of their own) or smoltcp's on
//!   an AF_PACKET socket (`backend smoltcp`, `smol.rs` and `link.rs`). The engine
//!   watches one descriptor per device ([`crate::daemon::devices::nic::Nic::stream_fd`]).
//! - Shared receive queues (`srq.rs`): the core's SRQs with siw's checks; a QP created
//!   with one takes its receives from it.
//! - The API the RDMA CM driver calls (`cm.rs`): listen, connect, accept, reject,
//!   disconnect, and [`SiwCmEvent`]s. The RDMA CM port of an iWARP id is the TCP port.
//! - What `ibv_query_device` / `ibv_query_port` / `ibv_query_gid` report (this file), as
//!   Linux siw's `siw_query_device`, `siw_query_port` and `siw_query_gid` fill them.
//! - MPA CRC and markers per device (`mpa_crc`, `mpa_markers`; off by default, as siw):
//!   what the device asks for in every MPA Request and Reply it sends
//!   ([`super::config::MpaOptions`]); each connection uses what the two ends negotiate.
//!
//! See `docs/iwarp.md` ("Daemon") and `docs/daemon.md`.

mod cm;
pub mod limits;
mod link;
mod local;
mod net;
mod nic;
mod qp;
mod smol;
mod sock;
mod srq;
#[cfg(test)]
mod srq_tests;
mod tcp;

pub use cm::{ConnId, ConnParams, ListenerId, SiwCmEvent};
pub use nic::SiwNic;
pub(in crate::daemon) use sock::tcp_port_free;

use super::config::DeviceSpec;
use super::link::backend::{check_smoltcp_addrs, Backend};
use crate::daemon::devices::device::ServedDevice;
use crate::daemon::devices::netdev::{self, Netdev};
use crate::daemon::devices::nic::Identity;
use std::io;
use std::net::IpAddr;
use wire::client::verbs::{atomic_cap, gid_type, link_layer, mtu, node, port_state};
use wire::client::{DeviceAttr, DeviceSummary, GidEntry, PortAttr};

/// `SIW_VENDOR_ID` (ASCII "bmt").
pub const VENDOR_ID: u32 = 0x0062_6d74;

/// `IB_DEVICE_MEM_MGT_EXTENSIONS`, the only capability siw reports.
const DEVICE_CAP_FLAGS: u32 = 1 << 21;

/// `IB_PORT_CM_SUP | IB_PORT_DEVICE_MGMT_SUP`.
const PORT_CAP_FLAGS: u32 = (1 << 16) | (1 << 19);

/// `ib_mtu_int_to_enum` in bytes: the largest IB MTU not above the netdev MTU (siw uses
/// the whole netdev MTU, unlike rxe which subtracts its headers).
pub fn port_mtu(netdev_mtu: u32) -> u32 {
    [4096, 2048, 1024, 512]
        .into_iter()
        .find(|&m| netdev_mtu >= m)
        .unwrap_or(256)
}

/// siw's raw GID: the interface's MAC, or for an interface without one (loopback, tun:
/// all zero) a fabricated one, so that the GID is never zero ([`netdev::fabricated_mac`]).
///
/// Linux's siw has fabricated it (`eth_random_addr`) since "RDMA/siw: Fabricate a GID on
/// tun and loopback devices", but tests `netdev->addr_len`, which is 6 on loopback, so a
/// siw device on `lo` there still has the zero GID: `ibv_query_gid_ex` fails with ENODATA
/// and `ibv_query_gid_table` lists nothing. We follow the patch's stated intent
/// (docs/compatibility.md).
pub fn raw_gid(mac: [u8; 6], name: &str, seed: u64) -> [u8; 6] {
    if mac == [0; 6] {
        netdev::fabricated_mac(seed, name)
    } else {
        mac
    }
}

/// siw's node GUID and `sys_image_guid`: the EUI-64 of the raw GID (`siw_device_create`,
/// `siw_query_device`). The raw GID is recovered from it ([`gid_entries`]).
pub fn node_guid(raw_gid: [u8; 6]) -> u64 {
    netdev::eui48(raw_gid)
}

/// `ib_get_eth_speed` → (active_width, active_speed) for a netdev speed in Mb/s (1000
/// when unknown, as for `lo`).
fn width_speed(mbps: u32) -> (u8, u8) {
    // IB_WIDTH_1X = 1, 2X = 16, 4X = 2; IB_SPEED_SDR = 1, DDR = 2, FDR10 = 8, EDR = 32,
    // HDR = 64, NDR = 128.
    match mbps {
        0..=1000 => (1, 1),
        1001..=10_000 => (1, 8),
        10_001..=20_000 => (2, 2),
        20_001..=25_000 => (1, 32),
        25_001..=40_000 => (2, 8),
        40_001..=50_000 => (16, 32),
        50_001..=100_000 => (2, 32),
        100_001..=200_000 => (2, 64),
        _ => (2, 128),
    }
}

fn netdev_speed(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|&s| s > 0)
        .map_or(1000, |s| u32::try_from(s).unwrap_or(u32::MAX))
}

/// Whether the kernel has `ip` (a socket can be bound to it), on interface `scope` for
/// a link-local IPv6 address.
fn kernel_has(ip: IpAddr, scope: u32) -> bool {
    let addr = match ip {
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => {
            std::net::SocketAddr::V6(std::net::SocketAddrV6::new(v6, 0, 0, scope))
        }
        ip => std::net::SocketAddr::new(ip, 0),
    };
    std::net::UdpSocket::bind(addr).is_ok()
}

/// A siw device's parts as [`open_device`] found and built them; `device.rs` serves them.
pub struct Opened {
    pub netdev: Netdev,
    /// The addresses the device serves, in `netdev::gid_table` order.
    pub gids: Vec<IpAddr>,
    /// IB MTU in bytes ([`port_mtu`]).
    pub mtu: u32,
    pub node_guid: u64,
    pub nic: SiwNic,
}

/// Opens a `siw` device on its interface over `backend`. No socket is opened until the
/// RDMA CM listens or connects; [`Opened::gids`] are the addresses the device serves
/// (the CM maps addresses to devices with it), the GID table shows the MAC as siw does.
/// On smoltcp the addresses are the device's own (`spec.addrs`, checked by
/// [`check_smoltcp_addrs`]) and the interface must be Ethernet.
pub fn open_device(spec: &DeviceSpec, backend: Backend, seed: u64) -> io::Result<Opened> {
    let netdev = netdev::lookup(&spec.netdev)?;
    let addrs = match backend {
        Backend::Smoltcp => {
            let own = spec.addrs.clone().unwrap_or_default();
            check_smoltcp_addrs(&spec.name, &netdev.name, &own, |a| {
                netdev.addrs.contains(&a) || kernel_has(a, netdev.index)
            })?;
            // smoltcp answers ARP with it: a unicast MAC (loopback's is all zero).
            if netdev.mac == [0; 6] || !smoltcp::wire::EthernetAddress(netdev.mac).is_unicast() {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "device {}: backend smoltcp needs an Ethernet interface; {} has no \
                         unicast MAC (loopback?): use backend tcp there",
                        spec.name, netdev.name
                    ),
                ));
            }
            own
        }
        _ => spec.addrs.clone().unwrap_or_else(|| netdev.addrs.clone()),
    };
    let gids = netdev::gid_table(&addrs);
    if gids.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("interface {} has no IP address", spec.netdev),
        ));
    }
    let mtu = port_mtu(netdev.mtu);
    let nic = match backend {
        Backend::Smoltcp => {
            let net = smol::SmolNet::open(
                &netdev.name,
                netdev.index,
                netdev.mac,
                netdev.mtu,
                &gids,
                seed,
            )?;
            SiwNic::on(Box::new(net), &spec.name, &gids, mtu, seed)
        }
        _ => SiwNic::new(&spec.name, &gids, mtu, seed)?,
    }
    .with_mpa(spec.mpa());
    Ok(Opened {
        node_guid: node_guid(raw_gid(netdev.mac, &spec.name, seed)),
        netdev,
        gids,
        mtu,
        nic,
    })
}

/// Opens a siw device ([`open_device`]) and serves it.
pub fn serve(spec: &DeviceSpec, backend: Backend, seed: u64) -> io::Result<ServedDevice> {
    let o = open_device(spec, backend, seed)?;
    Ok(ServedDevice::without_datagrams(
        spec,
        o.node_guid,
        o.netdev,
        &o.gids,
        o.mtu,
        Box::new(o.nic),
        seed,
    ))
}

/// What a siw device says of itself, as the kernel's siw (the functions below).
impl Identity for SiwNic {
    fn summary(&self, name: &str, node_guid: u64) -> DeviceSummary {
        summary(name, node_guid)
    }
    fn device_attr(&self, node_guid: u64) -> DeviceAttr {
        device_attr(node_guid)
    }
    fn port_attr(&self, mtu: u32, netdev: &Netdev) -> PortAttr {
        port_attr(mtu, netdev)
    }
    fn gid_entries(&self, node_guid: u64) -> Vec<GidEntry> {
        gid_entries(node_guid)
    }
}

/// `ibv_get_device_list` entry: an RNIC with the iWARP transport.
pub fn summary(name: &str, node_guid: u64) -> DeviceSummary {
    DeviceSummary {
        name: name.to_owned(),
        node_guid,
        transport: node::TRANSPORT_IWARP,
        node_type: node::NODE_RNIC,
    }
}

/// `ibv_query_device`, as `siw_query_device` fills it.
pub fn device_attr(node_guid: u64) -> DeviceAttr {
    let l = limits::siw_limits();
    let i = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
    DeviceAttr {
        fw_ver: "0.0.0".into(),
        node_guid,
        sys_image_guid: node_guid,
        max_mr_size: u64::MAX,
        page_size_cap: 4096,
        vendor_id: VENDOR_ID,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: i(l.max_qp),
        max_qp_wr: i(l.max_qp_wr),
        device_cap_flags: DEVICE_CAP_FLAGS,
        max_sge: i(l.max_sge),
        max_sge_rd: i(limits::MAX_SGE_RD),
        max_cq: i(l.max_cq),
        max_cqe: i(l.max_cqe),
        max_mr: i(l.max_mr),
        max_pd: i(l.max_pd),
        max_qp_rd_atom: i(limits::MAX_ORD),
        max_ee_rd_atom: 0,
        max_res_rd_atom: i(l.max_res_rd_atom),
        max_qp_init_rd_atom: i(limits::MAX_IRD),
        max_ee_init_rd_atom: 0,
        atomic_cap: atomic_cap::NONE,
        max_ee: 0,
        max_rdd: 0,
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_ah: 0,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: i(l.max_srq),
        max_srq_wr: i(l.max_srq_wr),
        max_srq_sge: i(l.max_srq_sge),
        max_pkeys: 0,
        local_ca_ack_delay: 0,
        phys_port_cnt: 1,
        // No ODP, as the kernel's siw (docs/compatibility.md).
        odp_caps: wire::client::OdpCaps::default(),
    }
}

/// `ibv_query_port` for port 1, as `siw_query_port` fills it (`mtu`: the IB MTU in bytes).
pub fn port_attr(mtu: u32, netdev: &Netdev) -> PortAttr {
    let m = mtu::from_bytes(mtu).unwrap_or(mtu::MTU_1024);
    let (active_width, active_speed) = width_speed(netdev_speed(&netdev.name));
    PortAttr {
        state: port_state::ACTIVE,
        max_mtu: m,
        active_mtu: m,
        gid_tbl_len: 1,
        port_cap_flags: PORT_CAP_FLAGS,
        max_msg_sz: u32::MAX,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        // siw leaves it 0; one entry keeps programs that query P_Key index 0 working.
        pkey_tbl_len: 1,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 0,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width,
        active_speed,
        phys_state: 5, // LinkUp
        link_layer: link_layer::ETHERNET,
        flags: 0,
        port_cap_flags2: 0,
        active_speed_ex: 0,
    }
}

/// The GID table: one entry, the raw GID (the MAC) in the first six octets
/// (`siw_query_gid`), recovered from the node GUID ([`node_guid`]).
pub fn gid_entries(node_guid: u64) -> Vec<GidEntry> {
    let mut gid = [0u8; 16];
    gid[..6].copy_from_slice(&netdev::mac_of_eui48(node_guid));
    vec![GidEntry {
        index: 0,
        port_num: 1,
        gid,
        gid_type: gid_type::IB,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gid_is_the_mac_or_a_fabricated_one_and_the_guid_its_eui64() {
        let mac = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
        assert_eq!(raw_gid(mac, "siw0", 7), mac);
        assert_eq!(node_guid(mac), 0x5054_00ff_fe12_3456);
        assert_eq!(gid_entries(node_guid(mac))[0].gid[..6], mac);
        assert_eq!(gid_entries(node_guid(mac))[0].gid[6..], [0; 10]);
        // Loopback: never the zero GID, locally administered unicast, one per device.
        let lo = raw_gid([0; 6], "siw0", 7);
        assert_ne!(lo, [0; 6]);
        assert_eq!(lo[0] & 0x03, 0x02);
        assert_ne!(lo, raw_gid([0; 6], "siw1", 7));
        assert_eq!(lo, raw_gid([0; 6], "siw0", 7));
        assert_eq!(gid_entries(node_guid(lo))[0].gid[..6], lo);
    }

    #[test]
    fn a_smoltcp_device_needs_addresses_of_its_own() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let kernel = |a: IpAddr| a == ip("10.0.0.1");
        let ok = check_smoltcp_addrs("siw1", "veth0", &[ip("10.0.0.11")], kernel);
        assert!(ok.is_ok(), "{ok:?}");
        let none = check_smoltcp_addrs("siw1", "veth0", &[], kernel).unwrap_err();
        assert_eq!(none.kind(), io::ErrorKind::InvalidInput);
        assert!(none.to_string().contains("addr IP"), "{none}");
        let taken = check_smoltcp_addrs("siw1", "veth0", &[ip("10.0.0.1")], kernel).unwrap_err();
        assert_eq!(taken.kind(), io::ErrorKind::AddrInUse);
        assert!(taken.to_string().contains("RST"), "{taken}");
        for bad in ["0.0.0.0", "224.0.0.1", "127.0.0.2", "ff02::1"] {
            let e = check_smoltcp_addrs("siw1", "veth0", &[ip(bad)], kernel).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
        let three = [ip("10.0.0.11"), ip("10.0.0.12"), ip("fd00::11")];
        assert!(check_smoltcp_addrs("siw1", "veth0", &three, kernel).is_err());
    }

    #[test]
    fn port_mtu_and_speed_follow_the_kernel() {
        assert_eq!(port_mtu(65536), 4096);
        assert_eq!(port_mtu(1500), 1024);
        assert_eq!(port_mtu(9000), 4096);
        assert_eq!(port_mtu(2100), 2048);
        assert_eq!(width_speed(1000), (1, 1));
        assert_eq!(width_speed(10_000), (1, 8));
        assert_eq!(width_speed(100_000), (2, 32));
    }
}
