//! The verbs of an id: options, listening, connecting, accepting, and
//! `rdma_init_qp_attr`.

use super::addr::check_port;
use super::ctx::Cm;
use super::rerequest::ReRequest;
use super::tables::{option, port_space, IdState, MAX_BACKLOG};
use crate::daemon::sessions::objects::SessionId;
use emu_core::cm::{self as core_cm, ConnParams, Route, RDMA_UDP_QKEY};
use emu_core::{ClientId, Psn, QpState, QpType};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;
use wire::client::cm::CmConnParam;
use wire::client::proto::Handle;
use wire::roce::{Qkey, Qpn};

/// `rdma_set_option` as the ucma/CMA check it.
pub(super) fn cm_set_option(
    cm: &mut Cm<'_>,
    session: SessionId,
    h: Handle,
    level: i32,
    optname: i32,
    value: &[u8],
) -> Result<(), i32> {
    let id = cm.cm_id_mut(session, h)?;
    let int = || -> Result<i32, i32> {
        <[u8; 4]>::try_from(value)
            .map(i32::from_ne_bytes)
            .map_err(|_| libc::EINVAL)
    };
    let byte = || -> Result<u8, i32> {
        match value {
            [b] => Ok(*b),
            _ => Err(libc::EINVAL),
        }
    };
    match (level, optname) {
        (option::LEVEL_ID, option::ID_TOS) => id.tos = Some(byte()?),
        (option::LEVEL_ID, option::ID_REUSEADDR) => {
            let reuse = int()? != 0;
            // rdma_set_reuseaddr: only before listening, or to turn it off while idle.
            if (reuse && id.state != IdState::Listen) || id.state == IdState::Idle {
                id.reuseaddr = reuse;
            } else {
                return Err(libc::EINVAL);
            }
        }
        (option::LEVEL_ID, option::ID_AFONLY) => {
            let only = int()? != 0;
            if !matches!(id.state, IdState::Idle | IdState::AddrBound) {
                return Err(libc::EINVAL);
            }
            id.afonly = only;
        }
        (option::LEVEL_ID, option::ID_ACK_TIMEOUT) => {
            let t = byte()?;
            // rdma_set_ack_timeout: RC and XRC initiators only.
            if !matches!(id.qp_type, QpType::Rc | QpType::XrcSend) {
                return Err(libc::EINVAL);
            }
            id.ack_timeout = Some(t.min(31));
        }
        (option::LEVEL_ID, _) | (option::LEVEL_IB, _) => return Err(libc::ENOSYS),
        _ => return Err(libc::ENOSYS),
    }
    Ok(())
}

/// `rdma_listen`: an unbound id binds to the IPv4 wildcard first (as the CMA does);
/// a wildcard listener listens on every device's agent.
pub(super) fn cm_listen(
    cm: &mut Cm<'_>,
    session: SessionId,
    h: Handle,
    backlog: i32,
) -> Result<(), i32> {
    let id = cm.cm_view().id(session, h)?;
    if id.state == IdState::Idle {
        // Port 0: an ephemeral port, which needs no privilege.
        cm.cm_addressing()
            .bind(session, h, SocketAddr::from(([0, 0, 0, 0], 0)), false)?;
    }
    let id = cm.cm_view().id(session, h)?;
    if id.state != IdState::AddrBound {
        return Err(libc::EINVAL);
    }
    let src = id.src.ok_or(libc::EINVAL)?;
    if id.reuseaddr {
        // A listener needs its port to itself after all.
        check_port(cm.tables, h, id.ps, src, false, id.afonly)?;
    }
    let sid = core_cm::ServiceId::rdma_ip(port_space(id.ps), src.port());
    let backlog = match usize::try_from(backlog) {
        Ok(b) if b > 0 && b < MAX_BACKLOG => b,
        _ => MAX_BACKLOG,
    };
    let specific = id.dev.filter(|_| !src.ip().is_unspecified());
    let devs: Vec<usize> = match specific {
        // iWARP: a TCP listener on the siw device instead of the IB CM.
        Some(d) if super::iwarp::cm_dev_is_siw(cm, d) => {
            super::iwarp::cm_siw_listen(cm, h, src, Some(d), backlog as u32)?;
            Vec::new()
        }
        Some(d) => vec![d],
        // A loopback address bound without a device (`Addressing::bind`): every device serving
        // it listens, each as if the id were bound to it.
        None if !src.ip().is_unspecified() => {
            for d in cm_devices_serving(cm, src.ip(), true) {
                super::iwarp::cm_siw_listen(cm, h, src, Some(d), backlog as u32)?;
            }
            cm_devices_serving(cm, src.ip(), false)
        }
        None => {
            super::iwarp::cm_siw_listen(cm, h, src, None, backlog as u32)?;
            (0..cm.clients.devices.len())
                .filter(|&i| cm.clients.devices[i].is_some())
                .collect()
        }
    };
    for d in devs {
        cm_listen_on(cm, d, sid);
    }
    let id = cm.cm_id_mut(session, h)?;
    id.backlog = backlog;
    id.state = IdState::Listen;
    tracing::debug!(id = h.0, %src, backlog = id.backlog, "cm listen");
    Ok(())
}

/// The siw devices (`siw`), or the others, whose GID tables hold `ip`: where a listener
/// bound to `ip` without a device listens.
pub(super) fn cm_devices_serving(cm: &Cm<'_>, ip: IpAddr, siw: bool) -> Vec<usize> {
    let ip = crate::daemon::devices::netdev::canonical(ip);
    (0..cm.clients.devices.len())
        .filter(|&i| {
            cm.clients.devices[i]
                .as_ref()
                .is_some_and(|d| d.gids.contains(ip))
                && super::iwarp::cm_dev_is_siw(cm, i) == siw
        })
        .collect()
}

/// Makes device `dev`'s agent listen on `sid` (shared by listeners on several
/// addresses of one port).
pub(super) fn cm_listen_on(cm: &mut Cm<'_>, dev: usize, sid: core_cm::ServiceId) {
    let n = cm.tables.listens.entry((dev, sid.0)).or_insert(0);
    *n += 1;
    if *n == 1 {
        if let Some(Some(d)) = cm.clients.devices.get_mut(dev) {
            let _ = d.cm.listen(sid, ClientId(0));
        }
    }
}

pub(super) fn cm_unlisten_on(cm: &mut Cm<'_>, dev: usize, sid: core_cm::ServiceId) {
    if let Some(n) = cm.tables.listens.get_mut(&(dev, sid.0)) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            cm.tables.listens.remove(&(dev, sid.0));
            if let Some(Some(d)) = cm.clients.devices.get_mut(dev) {
                let _ = d.cm.unlisten(sid);
            }
        }
    }
}

/// `rdma_connect`: REQ (RC/UC) or SIDR_REQ (UD) on a resolved route.
pub(super) fn cm_connect(
    cm: &mut Cm<'_>,
    now: Instant,
    session: SessionId,
    h: Handle,
    p: CmConnParam,
) -> Result<(), i32> {
    if let Some(dev) = super::iwarp::cm_siw_dev(cm, session, h)? {
        return super::iwarp::cm_siw_connect(cm, session, h, dev, p);
    }
    let id = cm.cm_view().id(session, h)?;
    if id.state != IdState::RouteResolved || id.conn.is_some() {
        return Err(libc::EINVAL);
    }
    let (Some(dev), Some(src), Some(dst)) = (id.dev, id.src, id.dst) else {
        return Err(libc::EINVAL);
    };
    let route = Route {
        local: crate::daemon::devices::netdev::canonical(src.ip()),
        remote: crate::daemon::devices::netdev::canonical(dst.ip()),
        port_space: port_space(id.ps),
        src_port: src.port(),
        dst_port: dst.port(),
        hop_limit: 64,
        traffic_class: cm.cm_view().tos(id),
        flow_label: None,
    };
    let qp_type = id.qp_type;
    let owner = ClientId(h.0);
    let mut rerequest = None;
    let conn = if qp_type == QpType::Ud {
        cm.with_agent(dev, |a| a.resolve_sidr(now, owner, route, &p.private_data))?
    } else {
        let path_mtu = cm
            .clients
            .devices
            .get(dev)
            .and_then(Option::as_ref)
            .ok_or(libc::ENODEV)?
            .cm
            .config()
            .active_mtu;
        let params = ConnParams {
            qp_type,
            qpn: Qpn(p.qp_num & 0xff_ffff),
            starting_psn: None,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            retry_count: p.retry_count.min(7),
            rnr_retry_count: p.rnr_retry_count.min(7),
            path_mtu,
            srq: p.srq != 0,
            flow_control: p.flow_control != 0,
            private_data: p.private_data,
        };
        rerequest = Some(ReRequest::new(params.clone(), route, now));
        cm.with_agent(dev, |a| a.connect(now, owner, params, route))?
    };
    cm.tables.conns.insert((dev, conn), h);
    if let Some(id) = cm.tables.ids.get_mut(&h) {
        id.conn = Some(conn);
        id.state = IdState::Connect;
        id.rerequest = rerequest;
    }
    tracing::debug!(id = h.0, comm_id = conn.0, %src, %dst, "cm connect");
    Ok(())
}

/// `rdma_accept` on a passive id: REP (RC/UC) or SIDR_REP (UD).
pub(super) fn cm_accept(
    cm: &mut Cm<'_>,
    now: Instant,
    session: SessionId,
    h: Handle,
    p: CmConnParam,
) -> Result<(), i32> {
    if super::iwarp::cm_siw_dev(cm, session, h)?.is_some() {
        return super::iwarp::cm_siw_accept(cm, now, session, h, p);
    }
    let (dev, conn) = cm.cm_view().conn(session, h)?;
    let id = cm.cm_view().id(session, h)?;
    if id.state != IdState::Passive {
        return Err(libc::EINVAL);
    }
    if id.qp_type == QpType::Ud {
        let qkey = if p.qkey == 0 {
            RDMA_UDP_QKEY
        } else {
            Qkey(p.qkey)
        };
        let qpn = Qpn(p.qp_num & 0xff_ffff);
        cm.with_agent(dev, |a| {
            a.accept_sidr(now, conn, qpn, qkey, &p.private_data)
        })?;
    } else {
        cm.with_agent(dev, |a| {
            let peer = a.peer(conn).ok_or(emu_core::Errno::EINVAL)?;
            let path = a.path(conn).ok_or(emu_core::Errno::EINVAL)?;
            let params = ConnParams {
                qp_type: peer.qp_type,
                qpn: Qpn(p.qp_num & 0xff_ffff),
                starting_psn: None,
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
                retry_count: p.retry_count.min(7),
                rnr_retry_count: p.rnr_retry_count.min(7),
                path_mtu: path.mtu,
                srq: p.srq != 0,
                flow_control: p.flow_control != 0,
                private_data: p.private_data,
            };
            a.accept(now, conn, params)
        })?;
    }
    tracing::debug!(id = h.0, comm_id = conn.0, "cm accept");
    cm.cm_sync_conn(h);
    Ok(())
}

/// `rdma_init_qp_attr`: the attributes the connection implies, or those of a QP
/// created before the id connected (INIT), or a UD QP's.
pub(super) fn cm_init_qp_attr(
    cm: &mut Cm<'_>,
    session: SessionId,
    h: Handle,
    qp_state: u32,
) -> Result<(wire::client::QpAttr, u32), i32> {
    let state = QpState::from_raw(qp_state).ok_or(libc::EINVAL)?;
    if super::iwarp::cm_siw_dev(cm, session, h)?.is_some() {
        return super::iwarp::cm_siw_init_qp_attr(cm, session, h, qp_state);
    }
    let id = cm.cm_view().id(session, h)?;
    let (qp_type, conn, dev, ack_timeout) = (id.qp_type, id.conn, id.dev, id.ack_timeout);
    let connected = match (dev, conn) {
        (Some(d), Some(c)) => cm
            .clients
            .devices
            .get(d)
            .and_then(Option::as_ref)
            .is_some_and(|d| d.cm.state(c).is_some())
            .then_some((d, c)),
        _ => None,
    };
    let (mut attr, mask) = if qp_type == QpType::Ud {
        core_cm::ud_qp_attr(state, RDMA_UDP_QKEY, Psn::new(0)).map_err(|e| e.0)?
    } else if let Some((d, c)) = connected {
        cm.with_agent(d, |a| a.init_qp_attr(c, state))?
    } else if state == QpState::Init {
        core_cm::unconnected_init_attr(qp_type, Qkey(0))
    } else {
        return Err(libc::EINVAL);
    };
    if let Some(t) = ack_timeout {
        if mask.0 & wire::client::verbs::qp_attr_mask::TIMEOUT != 0 {
            attr.timeout = t;
        }
    }
    Ok((crate::daemon::devices::core_nic::qp_attr_out(&attr), mask.0))
}
