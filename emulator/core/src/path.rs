//! The path a QP's packets take: the address checks of an AH and the addresses and
//! traffic class packets leave with.

use std::net::{IpAddr, SocketAddr};

use wire::roce::{Qpn, ROCE_V2_UDP_PORT};

use crate::attr::*;
use crate::qp::Path;
use crate::types::*;

/// Whether `a` is an address RoCE can send to from this device: a GRH with a DGID, port 1,
/// a source GID in the table, both of one IP family.
pub(crate) fn check_ah(cfg: &DeviceConfig, a: &AhAttr) -> Result<(), Errno> {
    // RoCE has no LIDs: the GRH is mandatory (IBA Annex A17.3).
    if !a.is_global || a.grh.dgid.is_zero() || a.port_num > 1 {
        return Err(Errno::EINVAL);
    }
    match cfg.gids.get(usize::from(a.grh.sgid_index)) {
        Some(g) if !g.is_zero() => {}
        _ => return Err(Errno::EINVAL),
    }
    let (s, d) = (
        cfg.gids[usize::from(a.grh.sgid_index)].to_ip(),
        a.grh.dgid.to_ip(),
    );
    if s.is_ipv4() != d.is_ipv4() {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The UDP source port for packets between `a` and `b` (rxe hashes the QP pair into
/// 0xC000..=0xFFFF), unless the backend fixes it.
pub(crate) fn src_port(cfg: &DeviceConfig, a: Qpn, b: Qpn) -> u16 {
    cfg.udp_src_port.unwrap_or_else(|| {
        let mut h = (u64::from(a.0) << 24 | u64::from(b.0)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
        0xc000 | (h as u16 & 0x3fff)
    })
}

/// Where packets from `qpn` to `dest` at `ah` go, and what they leave with.
pub(crate) fn path_of(cfg: &DeviceConfig, qpn: Qpn, ah: &AhAttr, dest: Qpn) -> Result<Path, Errno> {
    check_ah(cfg, ah)?;
    let src_ip: IpAddr = cfg.gids[usize::from(ah.grh.sgid_index)].to_ip();
    Ok(Path {
        src: SocketAddr::new(src_ip, src_port(cfg, qpn, dest)),
        dst: SocketAddr::new(ah.grh.dgid.to_ip(), ROCE_V2_UDP_PORT),
        traffic_class: ah.grh.traffic_class & !ECN_MASK,
    })
}
