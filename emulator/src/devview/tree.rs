//! The files a host with the kernel's rxe/siw shows for its RDMA devices, generated from
//! what the daemon says about its devices. Pure: paths and contents, no I/O.
//!
//! The layout follows the kernel's `drivers/infiniband/core/sysfs.c` (device and port
//! attributes, `gids/`, `gid_attrs/{types,ndevs}/`, `pkeys/`), rxe's `parent` attribute,
//! and `drivers/infiniband/core/uverbs_main.c` (`/sys/class/infiniband_verbs/abi_version`,
//! `uverbsN/{ibdev,abi_version,dev}`, `/dev/infiniband/uverbsN`, `rdma_cm`).

use wire::client::{DeviceAttr, GidEntry, PortAttr};

/// One device as the view shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewDevice {
    pub name: String,
    /// `enum ibv_node_type` (1 = CA for rxe, 4 = RNIC for siw).
    pub node_type: u32,
    pub attr: DeviceAttr,
    /// Port 1 first.
    pub ports: Vec<PortAttr>,
    /// The occupied GID entries, any port.
    pub gids: Vec<GidEntry>,
    /// The network interface the device sits on.
    pub netdev: String,
}

/// One node of the generated tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    File(String),
    /// A character device programs stat and open (`/dev/infiniband/uverbsN`): bound to
    /// an existing read-write character device, since none can be created unprivileged.
    CharDev,
}

/// `IB_USER_VERBS_ABI_VERSION`, what `/sys/class/infiniband_verbs/abi_version` holds.
const UVERBS_CLASS_ABI: u32 = 6;
/// The uverbs character devices' major and first minor (`IB_UVERBS_MAJOR`,
/// `IB_UVERBS_BASE_MINOR`).
const UVERBS_MAJOR: u32 = 231;
const UVERBS_BASE_MINOR: u32 = 192;
const NODE_RNIC: u32 = 4;

/// Every path (relative to `/`, parents before children) and what it holds. Device `i`
/// gets `uverbs{i}`, the index the verbs shim gives it (the daemon's device order).
pub fn tree(devices: &[ViewDevice]) -> Vec<(String, Node)> {
    let mut t = Vec::new();
    let file = |t: &mut Vec<(String, Node)>, p: String, v: String| t.push((p, Node::File(v)));
    t.push(("sys/class/infiniband".into(), Node::Dir));
    t.push(("sys/class/infiniband_verbs".into(), Node::Dir));
    file(
        &mut t,
        "sys/class/infiniband_verbs/abi_version".into(),
        format!("{UVERBS_CLASS_ABI}\n"),
    );
    t.push(("dev/infiniband".into(), Node::Dir));
    t.push(("dev/infiniband/rdma_cm".into(), Node::CharDev));
    for (i, d) in devices.iter().enumerate() {
        let uv = format!("sys/class/infiniband_verbs/uverbs{i}");
        t.push((uv.clone(), Node::Dir));
        file(&mut t, format!("{uv}/ibdev"), format!("{}\n", d.name));
        // The provider's ABI: rxe's RXE_UVERBS_ABI_VERSION is 2, siw's SIW_ABI_VERSION 1.
        let abi = if d.node_type == NODE_RNIC { 1 } else { 2 };
        file(&mut t, format!("{uv}/abi_version"), format!("{abi}\n"));
        let minor = UVERBS_BASE_MINOR + i as u32;
        file(
            &mut t,
            format!("{uv}/dev"),
            format!("{UVERBS_MAJOR}:{minor}\n"),
        );
        t.push((format!("dev/infiniband/uverbs{i}"), Node::CharDev));
        device(&mut t, d);
    }
    t
}

fn device(t: &mut Vec<(String, Node)>, d: &ViewDevice) {
    let base = format!("sys/class/infiniband/{}", d.name);
    let kind = match d.node_type {
        1 => "CA",
        2 => "switch",
        3 => "router",
        NODE_RNIC => "RNIC",
        _ => "unknown",
    };
    t.push((base.clone(), Node::Dir));
    let mut file = |p: &str, v: String| t.push((format!("{base}/{p}"), Node::File(v)));
    file("node_type", format!("{}: {kind}\n", d.node_type));
    file("node_guid", format!("{}\n", guid_text(d.attr.node_guid)));
    file(
        "sys_image_guid",
        format!("{}\n", guid_text(d.attr.sys_image_guid)),
    );
    file("fw_ver", format!("{}\n", d.attr.fw_ver));
    file("node_desc", format!("{}\n", d.name));
    if d.node_type != NODE_RNIC {
        // rxe's own attribute: the netdev it is bound to.
        file("parent", format!("{}\n", d.netdev));
    }
    if !d.netdev.is_empty() {
        // Where a NIC's PCI function shows its interfaces; rdma-core's pyverbs tests and
        // topology tools list `device/net/` to find the device's netdev and its address.
        t.push((format!("{base}/device"), Node::Dir));
        t.push((format!("{base}/device/net"), Node::Dir));
        t.push((format!("{base}/device/net/{}", d.netdev), Node::Dir));
    }
    t.push((format!("{base}/ports"), Node::Dir));
    for (i, p) in d.ports.iter().enumerate() {
        let num = i + 1;
        port(t, &base, num, p, d);
    }
}

fn port(t: &mut Vec<(String, Node)>, base: &str, num: usize, p: &PortAttr, d: &ViewDevice) {
    let dir = format!("{base}/ports/{num}");
    t.push((dir.clone(), Node::Dir));
    let file = |t: &mut Vec<(String, Node)>, f: &str, v: String| {
        t.push((format!("{dir}/{f}"), Node::File(v)))
    };
    file(
        t,
        "state",
        format!("{}: {}\n", p.state, state_name(p.state)),
    );
    file(
        t,
        "phys_state",
        format!("{}: {}\n", p.phys_state, phys_state_name(p.phys_state)),
    );
    let ll = if p.link_layer == 1 {
        "InfiniBand"
    } else {
        "Ethernet"
    };
    file(t, "link_layer", format!("{ll}\n"));
    file(t, "rate", rate_text(p.active_speed, p.active_width));
    file(t, "lid", format!("0x{:x}\n", p.lid));
    file(t, "sm_lid", format!("0x{:x}\n", p.sm_lid));
    file(t, "lid_mask_count", format!("{}\n", p.lmc));
    file(t, "sm_sl", format!("{}\n", p.sm_sl));
    file(t, "cap_mask", format!("0x{:08x}\n", p.port_cap_flags));
    t.push((format!("{dir}/pkeys"), Node::Dir));
    for k in 0..p.pkey_tbl_len {
        file(t, &format!("pkeys/{k}"), "0xffff\n".into());
    }
    t.push((format!("{dir}/gids"), Node::Dir));
    t.push((format!("{dir}/gid_attrs"), Node::Dir));
    t.push((format!("{dir}/gid_attrs/types"), Node::Dir));
    t.push((format!("{dir}/gid_attrs/ndevs"), Node::Dir));
    let len = u32::try_from(p.gid_tbl_len).unwrap_or(0);
    for idx in 0..len {
        let entry = d
            .gids
            .iter()
            .find(|g| usize::from(g.port_num) == num && g.index == idx);
        let gid = entry.map_or([0; 16], |g| g.gid);
        file(t, &format!("gids/{idx}"), format!("{}\n", gid_text(&gid)));
        // The kernel answers EINVAL for the attributes of an empty slot; absent here.
        if let Some(g) = entry {
            let ty = if g.gid_type == 2 {
                "RoCE v2"
            } else {
                "IB/RoCE v1"
            };
            file(t, &format!("gid_attrs/types/{idx}"), format!("{ty}\n"));
            file(
                t,
                &format!("gid_attrs/ndevs/{idx}"),
                format!("{}\n", d.netdev),
            );
        }
    }
}

/// A GUID as sysfs prints it: four groups of four hex digits.
fn guid_text(guid: u64) -> String {
    let g = guid.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]
    )
}

/// A GID as sysfs prints it (`%pI6`: eight groups of four hex digits, uncompressed).
fn gid_text(gid: &[u8; 16]) -> String {
    let groups: Vec<String> = gid
        .chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect();
    groups.join(":")
}

fn state_name(s: u32) -> &'static str {
    match s {
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "NOP",
    }
}

fn phys_state_name(s: u8) -> &'static str {
    match s {
        1 => "Sleep",
        2 => "Polling",
        3 => "Disabled",
        4 => "PortConfigurationTraining",
        5 => "LinkUp",
        6 => "LinkErrorRecovery",
        7 => "Phy Test",
        _ => "<unknown>",
    }
}

/// The `rate` attribute: per-lane speed times lanes, as the kernel formats it.
fn rate_text(speed: u8, width: u8) -> String {
    // Tenths of Gb/s per lane.
    let (tenths, name) = match speed {
        2 => (50, " DDR"),
        4 => (100, " QDR"),
        8 => (100, " FDR10"),
        16 => (140, " FDR"),
        32 => (250, " EDR"),
        64 => (500, " HDR"),
        128 => (1000, " NDR"),
        _ => (25, " SDR"),
    };
    let lanes = match width {
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 1,
    };
    let rate = tenths * lanes;
    let half = if rate % 10 != 0 { ".5" } else { "" };
    format!("{}{half} Gb/sec ({lanes}X{name})\n", rate / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rxe0() -> ViewDevice {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 0, 0, 1]);
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        ll[15] = 1;
        ViewDevice {
            name: "rxe0".into(),
            node_type: 1,
            attr: DeviceAttr {
                fw_ver: "0.0.0".into(),
                node_guid: 0x0211_22ff_fe33_4455,
                sys_image_guid: 0x0211_22ff_fe33_4455,
                ..Default::default()
            },
            ports: vec![PortAttr {
                state: 4,
                gid_tbl_len: 4,
                pkey_tbl_len: 1,
                active_width: 2,
                active_speed: 32,
                phys_state: 5,
                link_layer: 2,
                port_cap_flags: 0x0001_0000,
                ..Default::default()
            }],
            gids: vec![
                GidEntry {
                    index: 0,
                    port_num: 1,
                    gid: ll,
                    gid_type: 2,
                },
                GidEntry {
                    index: 1,
                    port_num: 1,
                    gid,
                    gid_type: 2,
                },
            ],
            netdev: "veth0".into(),
        }
    }

    fn get<'a>(t: &'a [(String, Node)], p: &str) -> Option<&'a Node> {
        t.iter().find(|(q, _)| q == p).map(|(_, n)| n)
    }

    fn text(t: &[(String, Node)], p: &str) -> String {
        match get(t, p) {
            Some(Node::File(s)) => s.clone(),
            other => panic!("{p}: {other:?}"),
        }
    }

    #[test]
    fn rxe_device_files_read_like_the_kernels() {
        let t = tree(&[rxe0()]);
        let d = "sys/class/infiniband/rxe0";
        assert_eq!(text(&t, &format!("{d}/node_type")), "1: CA\n");
        assert_eq!(text(&t, &format!("{d}/node_guid")), "0211:22ff:fe33:4455\n");
        assert_eq!(text(&t, &format!("{d}/parent")), "veth0\n");
        assert_eq!(
            get(&t, &format!("{d}/device/net/veth0")),
            Some(&Node::Dir),
            "the netdev under device/net/"
        );
        let p = format!("{d}/ports/1");
        assert_eq!(text(&t, &format!("{p}/state")), "4: ACTIVE\n");
        assert_eq!(text(&t, &format!("{p}/phys_state")), "5: LinkUp\n");
        assert_eq!(text(&t, &format!("{p}/link_layer")), "Ethernet\n");
        assert_eq!(text(&t, &format!("{p}/rate")), "100 Gb/sec (4X EDR)\n");
        assert_eq!(
            text(&t, &format!("{p}/gids/0")),
            "fe80:0000:0000:0000:0000:0000:0000:0001\n"
        );
        assert_eq!(
            text(&t, &format!("{p}/gids/1")),
            "0000:0000:0000:0000:0000:ffff:0a00:0001\n"
        );
        assert_eq!(
            text(&t, &format!("{p}/gids/3")),
            "0000:0000:0000:0000:0000:0000:0000:0000\n"
        );
        assert_eq!(text(&t, &format!("{p}/gid_attrs/types/1")), "RoCE v2\n");
        assert_eq!(text(&t, &format!("{p}/gid_attrs/ndevs/1")), "veth0\n");
        // An empty slot has no attributes (the kernel answers EINVAL).
        assert!(get(&t, &format!("{p}/gid_attrs/types/2")).is_none());
        assert_eq!(text(&t, &format!("{p}/pkeys/0")), "0xffff\n");
    }

    #[test]
    fn uverbs_nodes_follow_the_shims_device_order() {
        let mut siw = rxe0();
        siw.name = "siw0".into();
        siw.node_type = 4;
        let t = tree(&[rxe0(), siw]);
        let v = "sys/class/infiniband_verbs";
        assert_eq!(text(&t, &format!("{v}/abi_version")), "6\n");
        assert_eq!(text(&t, &format!("{v}/uverbs0/ibdev")), "rxe0\n");
        assert_eq!(text(&t, &format!("{v}/uverbs1/ibdev")), "siw0\n");
        assert_eq!(text(&t, &format!("{v}/uverbs1/dev")), "231:193\n");
        assert_eq!(text(&t, &format!("{v}/uverbs1/abi_version")), "1\n");
        assert_eq!(get(&t, "dev/infiniband/uverbs1"), Some(&Node::CharDev));
        assert_eq!(get(&t, "dev/infiniband/rdma_cm"), Some(&Node::CharDev));
        assert_eq!(text(&t, "sys/class/infiniband/siw0/node_type"), "4: RNIC\n");
        assert!(get(&t, "sys/class/infiniband/siw0/parent").is_none());
    }

    #[test]
    fn parents_come_before_children() {
        let t = tree(&[rxe0()]);
        for (i, (p, _)) in t.iter().enumerate() {
            let parent = p.rsplit_once('/').map_or("", |(a, _)| a);
            if parent.matches('/').count() >= 2 {
                let at = t.iter().position(|(q, n)| q == parent && *n == Node::Dir);
                assert!(at.is_some_and(|a| a < i), "{p} before its parent");
            }
        }
    }

    #[test]
    fn rates_match_the_kernels_strings() {
        assert_eq!(rate_text(1, 1), "2.5 Gb/sec (1X SDR)\n");
        assert_eq!(rate_text(16, 2), "56 Gb/sec (4X FDR)\n");
        assert_eq!(rate_text(64, 8), "600 Gb/sec (12X HDR)\n");
    }
}
