//! `rdma_join_multicast` / `rdma_leave_multicast` on RoCE: what the kernel's CMA does in
//! `cma_iboe_join_multicast` (drivers/infiniband/core/cma.c).
//!
//! RoCE has no subnet administrator to ask, so a join needs no traffic: the daemon checks
//! the id and the group, then queues a MULTICAST_JOIN event at once, whose `param.ud`
//! says how to send to the group (AH to the group's MGID, QPN 0xFFFFFF, the UDP port
//! space's Q_Key). librdmacm (the shim) then attaches the id's QP to the MGID with
//! `ibv_attach_mcast`, which makes the device's interface join the IP group
//! (`daemon/mcast.rs`); `rdma_leave_multicast` detaches before it tells the daemon.
//!
//! The daemon keeps no membership of its own: a join leaves nothing behind but the
//! event, and a leave only drops that event if nobody fetched it yet (the ucma's
//! `ucma_cleanup_mc_events`). Joining one group twice on an id is allowed, as in the
//! kernel (each join reports its own event).

use super::tables::{EventChannel, IdState};
use super::view::CmView;
use crate::daemon::sessions::objects::SessionId;
use emu_core::cm::RDMA_UDP_QKEY;
use emu_core::QpType;
use std::net::{IpAddr, SocketAddr};
use wire::client::cm::{event, CmEventParam, CmEventRecord};
use wire::client::proto::{AhAttr, GlobalRoute, Handle};

/// `RDMA_MC_JOIN_FLAG_*` (`<rdma/rdma_cma.h>`): the join states the ucma accepts.
mod join_flag {
    pub const FULLMEMBER: u32 = 0;
    pub const SENDONLY_FULLMEMBER: u32 = 1;
}

/// The QPN that makes a UD send go to a multicast group (IBA 10.5.1.1: the multicast
/// QPN, `0xFFFFFF`), which the CMA reports as the group's `qp_num`.
const MULTICAST_QPN: u32 = 0x00ff_ffff;

/// Hop limit of the group's AH: the CMA sets `IPV6_DEFAULT_HOPLIMIT` for a RoCE v2
/// (UDP-encapsulated) group.
const MCAST_HOP_LIMIT: u8 = 64;

/// The MGID of group `group` on RoCE v2 (`cma_iboe_set_mgid` for
/// `IB_GID_TYPE_ROCE_UDP_ENCAP`): an IPv4 group's IPv4-mapped address
/// (`::ffff:239.1.2.3`), an IPv6 group's own address.
pub(super) fn mgid_of(group: IpAddr) -> [u8; 16] {
    crate::daemon::devices::netdev::gid_of(crate::daemon::devices::netdev::canonical(group))
}

/// Whether `group` names an IP multicast group (IPv4-mapped IPv6 addresses included).
fn is_multicast(group: IpAddr) -> bool {
    crate::daemon::devices::netdev::canonical(group).is_multicast()
}

/// `rdma_join_multicast`: EINVAL for an unknown join state, an id without a device
/// (`ucma_get_ctx_dev`), an id past ADDR_BOUND/ADDR_RESOLVED or not UD
/// (`rdma_join_multicast`), or a group that is no multicast address; ENOSYS on an iWARP
/// device (no multicast there); ENODEV when the device went away. Else the
/// MULTICAST_JOIN event to queue for the id.
pub(super) fn join(
    cm: CmView<'_>,
    session: SessionId,
    h: Handle,
    group: SocketAddr,
    join_flags: u32,
) -> Result<CmEventRecord, i32> {
    if !matches!(
        join_flags,
        join_flag::FULLMEMBER | join_flag::SENDONLY_FULLMEMBER
    ) {
        return Err(libc::EINVAL);
    }
    let id = cm.id(session, h)?;
    let dev = id.dev.ok_or(libc::EINVAL)?;
    if !matches!(id.state, IdState::AddrBound | IdState::AddrResolved) || id.qp_type != QpType::Ud {
        return Err(libc::EINVAL);
    }
    let d = cm
        .devices
        .get(dev)
        .and_then(Option::as_ref)
        .ok_or(libc::ENODEV)?;
    if d.is_siw() {
        return Err(libc::ENOSYS);
    }
    if !is_multicast(group.ip()) {
        return Err(libc::EINVAL);
    }
    let mgid = mgid_of(group.ip());
    let sgid_index = cm.info(h).sgid_index;
    tracing::debug!(id = h.0, group = %group.ip(), join_flags, "cm multicast join");
    Ok(CmEventRecord {
        id: h,
        listen_id: None,
        event: event::MULTICAST_JOIN,
        status: 0,
        new_id: None,
        param: CmEventParam::Ud {
            private_data: Vec::new(),
            ah_attr: AhAttr {
                grh: GlobalRoute {
                    dgid: mgid,
                    flow_label: 0,
                    sgid_index,
                    hop_limit: MCAST_HOP_LIMIT,
                    traffic_class: 0,
                },
                is_global: 1,
                port_num: 1,
                ..AhAttr::default()
            },
            qp_num: MULTICAST_QPN,
            qkey: RDMA_UDP_QKEY.0,
        },
    })
}

/// `rdma_leave_multicast` of id `h` on `group`, whose events queue on `channel`: the shim
/// has detached the QP already; a MULTICAST_JOIN of the group still queued for the id
/// goes away (the oldest one, as the ucma drops the events of the membership it frees).
pub(super) fn leave(channel: &mut EventChannel, h: Handle, group: SocketAddr) {
    let mgid = mgid_of(group.ip());
    let mut dropped = false;
    channel.remove_where(|e| {
        let this = !dropped
            && e.id == h
            && e.event == event::MULTICAST_JOIN
            && matches!(&e.param, CmEventParam::Ud { ah_attr, .. } if ah_attr.grh.dgid == mgid);
        dropped |= this;
        this
    });
    tracing::debug!(id = h.0, group = %group.ip(), "cm multicast leave");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mgid_of_ipv4_group_is_ipv4_mapped() {
        let mgid = mgid_of("239.1.2.3".parse().unwrap());
        assert_eq!(
            mgid,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3]
        );
    }

    #[test]
    fn mgid_of_ipv6_group_is_the_group() {
        let g: IpAddr = "ff0e::1:2".parse().unwrap();
        assert_eq!(
            mgid_of(g),
            match g {
                IpAddr::V6(v6) => v6.octets(),
                IpAddr::V4(_) => unreachable!(),
            }
        );
    }

    #[test]
    fn only_multicast_groups_are_groups() {
        for g in ["239.1.2.3", "224.0.0.1", "ff02::1", "::ffff:239.0.0.1"] {
            assert!(is_multicast(g.parse().unwrap()), "{g}");
        }
        for g in ["10.0.0.1", "0.0.0.0", "::", "fe80::1", "::ffff:10.0.0.1"] {
            assert!(!is_multicast(g.parse().unwrap()), "{g}");
        }
    }
}
