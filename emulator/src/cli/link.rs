//! `rdma-emu link`: the devices as iproute2's `rdma link` shows them, and `link add` /
//! `link del`, with the words of `link add` checked here before the daemon sees them and
//! the daemon's refusals explained (which capability a backend needs, which address
//! clash a smoltcp device hit).

use super::control::call;
use crate::daemon::link::backend::Backend;
use clap::Subcommand;
use std::path::Path;
use wire::client::{LinkInfo, ReplyBody, RequestBody};

#[derive(Subcommand, Debug)]
pub(super) enum LinkAction {
    Show,
    /// `link add NAME type rxe|siw netdev IFACE [crc on|off] [markers on|off]` (crc and
    /// markers: what a siw device asks for in MPA; off by default, as Linux siw)
    Add {
        name: String,
        #[arg(num_args = 4.., value_name = "KEY VALUE")]
        rest: Vec<String>,
    },
    /// `link del NAME`
    Del {
        name: String,
    },
}

/// `rdma-emu link [ACTION]`.
pub(super) fn link(socket: Option<&Path>, action: &LinkAction) -> Result<(), String> {
    match action {
        LinkAction::Show => call(socket, RequestBody::LinkShow).and_then(|b| match b {
            ReplyBody::Links(l) => {
                print_links(&l);
                Ok(())
            }
            other => Err(format!("unexpected reply {other:?}")),
        }),
        LinkAction::Add { name, rest } => link_add_request(name, rest).and_then(|body| {
            let raw = match &body {
                RequestBody::LinkAdd {
                    backend: Some(b), ..
                } => b.clone(),
                _ => String::new(),
            };
            call(socket, body).map(|_| ()).map_err(|e| {
                let is = |errno| e == std::io::Error::from_raw_os_error(errno).to_string();
                let eperm = is(libc::EPERM);
                match raw.as_str() {
                    "packet" | "smoltcp" if eperm => format!(
                        "{e}: backend {raw} needs CAP_NET_RAW in rdma-emud (root, or \
                             setcap cap_net_raw+ep); backend {} needs none",
                        if raw == "packet" { "udp" } else { "tcp" }
                    ),
                    "smoltcp" if is(libc::EADDRINUSE) => format!(
                        "{e}: the kernel has that address too, and its TCP would answer the \
                             device's peers with RST; give the device an address of its own"
                    ),
                    "xdp" if eperm => format!(
                        "{e}: backend xdp needs CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW in \
                             rdma-emud (root, or setcap); use backend udp or packet"
                    ),
                    "xdp" if is(libc::EBUSY) => format!(
                        "{e}: the interface already has an XDP program or AF_XDP socket \
                             (ip -d link show); use backend packet or udp"
                    ),
                    "xdp" if is(libc::EINVAL) => format!(
                        "{e}: backend xdp takes an interface MTU of at most {} (rdma-emud's \
                             log says why this one was refused)",
                        crate::daemon::link::xdp::MAX_NETDEV_MTU
                    ),
                    _ => e,
                }
            })
        }),
        LinkAction::Del { name } => {
            call(socket, RequestBody::LinkDel { name: name.clone() }).map(|_| ())
        }
    }
}

fn gid_text(gid: &[u8; 16]) -> String {
    let ip = std::net::Ipv6Addr::from(*gid);
    match ip.to_ipv4_mapped() {
        Some(v4) => format!("::ffff:{v4}"),
        None => ip.to_string(),
    }
}

const LINK_ADD_USAGE: &str = "usage: rdma-emu link add NAME type rxe|siw netdev IFACE \
     [backend udp|packet|xdp (rxe), tcp|smoltcp (siw)] [addr IP (repeatable; required with \
     smoltcp)] [crc on|off] [markers on|off] [tos 0..=255, ECN bits 0 (rxe)] \
     [cnp_dscp 0..=63 (rxe)]";

/// The `LinkAdd` request for `link add NAME WORDS...`, where WORDS are key/value pairs as
/// iproute2 takes them: `type` and `netdev` (required), `backend` (`udp`, the default,
/// `packet` or `xdp` for rxe; `tcp`, the default, or `smoltcp` for siw), `addr` (an
/// address the device serves instead of the interface's; may be repeated; a smoltcp
/// device needs one of its own), and for siw devices `crc` and `markers` (`on`|`off`), for
/// rxe devices `tos` (the RDMA CM default traffic class) and `cnp_dscp`. Errors say what
/// is wrong, then the usage.
fn link_add_request(name: &str, words: &[String]) -> Result<RequestBody, String> {
    let mut link_type = None;
    let mut netdev = None;
    let mut mpa_crc = None;
    let mut mpa_markers = None;
    let mut backend = None;
    let mut default_tos = None;
    let mut cnp_dscp = None;
    let mut addrs: Vec<std::net::IpAddr> = Vec::new();
    for pair in words.chunks(2) {
        let [key, value] = pair else {
            return Err(format!("{:?} has no value\n{LINK_ADD_USAGE}", pair[0]));
        };
        let on_off = |v: &str| match v {
            "on" => Ok(true),
            "off" => Ok(false),
            _ => Err(format!(
                "{key} takes on or off, not {v:?}\n{LINK_ADD_USAGE}"
            )),
        };
        let byte = |v: &str, max: u8| match v.parse::<u8>() {
            Ok(b) if b <= max => Ok(b),
            _ => Err(format!(
                "{key} takes 0..={max}, not {v:?}\n{LINK_ADD_USAGE}"
            )),
        };
        let (slot_taken, what) = match key.as_str() {
            "type" => (link_type.replace(value.clone()).is_some(), "type"),
            "netdev" => (netdev.replace(value.clone()).is_some(), "netdev"),
            "crc" => (mpa_crc.replace(on_off(value)?).is_some(), "crc"),
            "markers" => (mpa_markers.replace(on_off(value)?).is_some(), "markers"),
            "backend" => (backend.replace(value.clone()).is_some(), "backend"),
            "tos" => (default_tos.replace(byte(value, 255)?).is_some(), "tos"),
            "cnp_dscp" => (cnp_dscp.replace(byte(value, 63)?).is_some(), "cnp_dscp"),
            "addr" => {
                let a = value.parse().map_err(|_| {
                    format!("addr takes an IP address, not {value:?}\n{LINK_ADD_USAGE}")
                })?;
                (addrs.contains(&a), "this addr")
            }
            other => return Err(format!("unknown key {other:?}\n{LINK_ADD_USAGE}")),
        };
        if slot_taken {
            return Err(format!("{what} given twice\n{LINK_ADD_USAGE}"));
        }
        if key == "addr" {
            addrs.extend(value.parse::<std::net::IpAddr>());
        }
    }
    let (Some(link_type), Some(netdev)) = (link_type, netdev) else {
        return Err(LINK_ADD_USAGE.into());
    };
    if link_type != "siw" && (mpa_crc.is_some() || mpa_markers.is_some()) {
        return Err(format!(
            "crc and markers are MPA (iWARP) options of siw devices; {link_type} devices have none"
        ));
    }
    if link_type == "siw" && (default_tos.is_some() || cnp_dscp.is_some()) {
        return Err(
            "tos and cnp_dscp are RoCE options of rxe devices; siw devices have none".into(),
        );
    }
    if default_tos.is_some_and(|t| t & 0b11 != 0) {
        return Err(format!(
            "tos carries the DSCP (DSCP << 2); its ECN bits must be 0\n{LINK_ADD_USAGE}"
        ));
    }
    if matches!(link_type.as_str(), "rxe" | "siw") {
        let b = Backend::choose(&link_type, backend.as_deref()).map_err(|e| e.to_string())?;
        if b == Backend::Smoltcp && addrs.is_empty() {
            return Err(format!(
                "backend smoltcp needs an address of its own, one the kernel does not have \
                 on {netdev}: add addr IP\n{LINK_ADD_USAGE}"
            ));
        }
    }
    Ok(RequestBody::LinkAdd {
        name: name.to_string(),
        link_type,
        netdev,
        mpa_crc,
        mpa_markers,
        backend,
        default_tos,
        cnp_dscp,
        addrs: (!addrs.is_empty()).then_some(addrs),
    })
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn print_links(links: &[LinkInfo]) {
    for l in links {
        // As iproute2 prints them: a port taken down (`fault add DEV link down`) is
        // DISABLED physically too.
        let (state, phys) = if l.state == 4 {
            ("ACTIVE", "LINK_UP")
        } else {
            ("DOWN", "DISABLED")
        };
        let mtu = wire::client::verbs::mtu::to_bytes(l.active_mtu).unwrap_or(0);
        let mut mpa = String::new();
        if let Some(crc) = l.mpa_crc {
            mpa += &format!(" crc {}", on_off(crc));
        }
        if let Some(markers) = l.mpa_markers {
            mpa += &format!(" markers {}", on_off(markers));
        }
        println!("link {}/1 state {state} physical_state {phys} netdev {} type {} backend {} mtu {mtu} netdev_mtu {}{mpa}", l.name, l.netdev, l.link_type, l.backend, l.netdev_mtu);
        for g in &l.gids {
            let kind = match g.gid_type {
                wire::client::verbs::gid_type::ROCE_V2 => " RoCE v2",
                wire::client::verbs::gid_type::ROCE_V1 => " RoCE v1",
                _ => "", // siw: the MAC as GID, no RoCE type
            };
            println!("    gid {} {}{kind}", g.index, gid_text(&g.gid));
        }
        if let (Some(tos), Some(cnp)) = (l.default_tos, l.cnp_dscp) {
            // RoCE v2 has no SL on the wire: it would map to a VLAN's 802.1p priority,
            // which a UDP socket cannot set (docs/congestion.md). PFC frames (packet
            // backend) pause the priority DSCP >> 3.
            println!(
                "    tos default {tos}, DSCP = traffic class >> 2, ECN ECT(0), CNP DSCP {cnp}, SL unmapped, PFC priority = DSCP >> 3"
            );
        }
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
