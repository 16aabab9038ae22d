//! iWARP ids: the RDMA CM on siw devices, as the kernel's CMA drives its iw_cm
//! (`cma_iw_listen`, `cma_connect_iw`, `cma_accept_iw`, `cma_iw_handler`,
//! `iw_conn_req_handler`; `docs/cm.md`, "iWARP").
//!
//! An id is an iWARP id when the device its address belongs to is a siw device. Its
//! connection is a TCP connection of that device (`siw::SiwNic`): the RDMA CM port is
//! the TCP port, there is no route to resolve and no IB CM on QP1. The QP is moved to
//! RTS by the device when the MPA exchange ends, so `rdma_init_qp_attr` gives librdmacm
//! nothing to do beyond INIT (as `iw_cm_init_qp_attr`), and the active side hears
//! ESTABLISHED directly (no CONNECT_RESPONSE).

use super::ctx::Cm;
use super::tables::{CmId, IdState};
use crate::daemon::devices::device::ServedDevice;
use crate::daemon::devices::netdev::canonical;
use crate::daemon::sessions::objects::{Kind, SessionId};
use crate::daemon::siw::{ConnId, ConnParams, ListenerId, SiwCmEvent, SiwNic};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use wire::client::cm::event;

/// How long an iWARP connection request whose listener is gone waits for a new one
/// (as long as a closed listener lingers, `siw::tcp::LISTEN_LINGER`).
const LISTEN_GRACE: Duration = Duration::from_secs(2);

/// Most requests held at once.
const MAX_PARKED: usize = 64;
use wire::client::cm::{CmConnParam, CmEventParam, CmEventRecord};
use wire::client::proto::Handle;
use wire::client::verbs::{access, qp_attr_mask, qp_state};

/// The most Read Requests a siw QP serves or issues at once (`SIW_MAX_IRD_QP`,
/// `SIW_MAX_ORD_QP`): larger `responder_resources` / `initiator_depth` are clamped.
const MAX_IRD_ORD: u8 = 128;

/// The MPA parameters of `rdma_connect` / `rdma_accept` (`cma_connect_iw`:
/// `ord = initiator_depth`, `ird = responder_resources`).
fn mpa_params(p: CmConnParam) -> ConnParams {
    ConnParams {
        ird: u16::from(p.responder_resources.min(MAX_IRD_ORD)),
        ord: u16::from(p.initiator_depth.min(MAX_IRD_ORD)),
        private_data: p.private_data,
    }
}

/// `param.conn` of an iWARP event: `cma_iw_handler` reports `initiator_depth = ird`,
/// `responder_resources = ord` of the iw_cm event.
fn conn_param(private_data: Vec<u8>, ird: u16, ord: u16) -> CmEventParam {
    CmEventParam::Conn(CmConnParam {
        private_data,
        initiator_depth: u8::try_from(ird).unwrap_or(u8::MAX),
        responder_resources: u8::try_from(ord).unwrap_or(u8::MAX),
        ..CmConnParam::default()
    })
}

/// Whether device `dev` is a siw device.
pub(super) fn cm_dev_is_siw(cm: &Cm<'_>, dev: usize) -> bool {
    cm.clients
        .devices
        .get(dev)
        .and_then(Option::as_ref)
        .is_some_and(ServedDevice::is_siw)
}

/// The siw device of an iWARP id of `session` (`None`: the id is not bound to one).
pub(super) fn cm_siw_dev(cm: &Cm<'_>, session: SessionId, h: Handle) -> Result<Option<usize>, i32> {
    let id = cm.cm_view().id(session, h)?;
    Ok(id.dev.filter(|&d| cm_dev_is_siw(cm, d)))
}

fn siw_nic<'c>(cm: &'c mut Cm<'_>, dev: usize) -> Result<&'c mut SiwNic, i32> {
    cm.clients
        .devices
        .get_mut(dev)
        .and_then(Option::as_mut)
        .and_then(|d| SiwNic::of(d.nic.as_mut()))
        .ok_or(libc::ENODEV)
}

/// The device and TCP connection of an iWARP id (EINVAL: none).
fn cm_siw_conn(cm: &Cm<'_>, session: SessionId, h: Handle) -> Result<(usize, ConnId), i32> {
    let id = cm.cm_view().id(session, h)?;
    match (id.dev, id.siw_conn) {
        (Some(d), Some(c)) if cm_dev_is_siw(cm, d) => Ok((d, c)),
        _ => Err(libc::EINVAL),
    }
}

/// `cma_resolve_iw_route`: nothing to resolve, ROUTE_RESOLVED at once.
pub(super) fn cm_siw_resolve_route(
    cm: &mut Cm<'_>,
    session: SessionId,
    h: Handle,
) -> Result<(), i32> {
    let id = cm.cm_id_mut(session, h)?;
    id.path = None;
    id.state = IdState::RouteResolved;
    cm.tables.simple_event(h, event::ROUTE_RESOLVED, 0);
    Ok(())
}

/// `cma_iw_listen`: a TCP listener on the id's address and port on its siw device,
/// or, for a wildcard id (`siw_dev` `None`), on every address of the id's family of
/// every siw device (addresses whose port is taken are skipped, as a wildcard
/// listener serves the devices it can).
pub(super) fn cm_siw_listen(
    cm: &mut Cm<'_>,
    h: Handle,
    src: SocketAddr,
    siw_dev: Option<usize>,
    backlog: u32,
) -> Result<(), i32> {
    if let Some(dev) = siw_dev {
        let (l, _) = siw_nic(cm, dev)?.listen(src, backlog)?;
        cm_siw_add_listener(cm, h, dev, l);
        return Ok(());
    }
    for dev in 0..cm.clients.devices.len() {
        cm_siw_listen_wildcard(cm, h, dev, src, backlog);
    }
    Ok(())
}

/// A wildcard listener's TCP listeners on siw device `dev` (nothing on other devices).
pub(super) fn cm_siw_listen_wildcard(
    cm: &mut Cm<'_>,
    h: Handle,
    dev: usize,
    src: SocketAddr,
    backlog: u32,
) {
    if !cm_dev_is_siw(cm, dev) {
        return;
    }
    let afonly = cm.tables.ids.get(&h).is_some_and(|id| id.afonly);
    let Some(d) = cm.clients.devices.get(dev).and_then(Option::as_ref) else {
        return;
    };
    let scope = d.netdev.index;
    let addrs: Vec<SocketAddr> = d
        .gids
        .addrs()
        .into_iter()
        .map(canonical)
        .filter(|ip| src.is_ipv4() == ip.is_ipv4() || (src.is_ipv6() && !afonly))
        .map(|ip| match ip {
            std::net::IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => {
                SocketAddr::V6(std::net::SocketAddrV6::new(v6, src.port(), 0, scope))
            }
            ip => SocketAddr::new(ip, src.port()),
        })
        .collect();
    for a in addrs {
        let Ok(nic) = siw_nic(cm, dev) else {
            return;
        };
        match nic.listen(a, backlog) {
            Ok((l, _)) => cm_siw_add_listener(cm, h, dev, l),
            Err(e) => tracing::debug!(id = h.0, addr = %a, errno = e, "siw listen skipped"),
        }
    }
}

fn cm_siw_add_listener(cm: &mut Cm<'_>, h: Handle, dev: usize, l: ListenerId) {
    cm.tables.siw_listeners.insert((dev, l), h);
    if let Some(id) = cm.tables.ids.get_mut(&h) {
        id.siw_listeners.push((dev, l));
    }
}

/// `cma_connect_iw`: a TCP connection from the id's address to the destination, the
/// MPA Request with the private data and IRD/ORD; the QP is `param.qp_num`.
pub(super) fn cm_siw_connect(
    cm: &mut Cm<'_>,
    session: SessionId,
    h: Handle,
    dev: usize,
    p: CmConnParam,
) -> Result<(), i32> {
    let id = cm.cm_view().id(session, h)?;
    if id.state != IdState::RouteResolved || id.siw_conn.is_some() {
        return Err(libc::EINVAL);
    }
    let (Some(src), Some(dst)) = (id.src, id.dst) else {
        return Err(libc::EINVAL);
    };
    let qpn = p.qp_num & 0xff_ffff;
    let params = mpa_params(p);
    let local_path = cm.cfg.local_path;
    let (conn, local) = siw_nic(cm, dev)?.connect(qpn, src, dst, &params, local_path)?;
    cm.tables.siw_conns.insert((dev, conn), h);
    if let Some(id) = cm.tables.ids.get_mut(&h) {
        id.siw_conn = Some(conn);
        id.src = Some(local);
        id.state = IdState::Connect;
    }
    tracing::debug!(id = h.0, conn = conn.0, %local, %dst, qpn, "cm iwarp connect");
    Ok(())
}

/// `cma_accept_iw`: the MPA Reply; the QP (`param.qp_num`, which must exist) is in
/// RTS when this returns and ESTABLISHED follows.
pub(super) fn cm_siw_accept(
    cm: &mut Cm<'_>,
    now: Instant,
    session: SessionId,
    h: Handle,
    p: CmConnParam,
) -> Result<(), i32> {
    let (dev, conn) = cm_siw_conn(cm, session, h)?;
    if cm.cm_view().id(session, h)?.state != IdState::Passive {
        return Err(libc::EINVAL);
    }
    let qpn = p.qp_num & 0xff_ffff;
    let params = mpa_params(p);
    let Some(d) = cm.clients.devices.get_mut(dev).and_then(Option::as_mut) else {
        return Err(libc::ENODEV);
    };
    let nic = SiwNic::of(d.nic.as_mut()).ok_or(libc::ENODEV)?;
    nic.accept(now, conn, qpn, &params, cm.clients.mem)?;
    tracing::debug!(id = h.0, conn = conn.0, qpn, "cm iwarp accept");
    Ok(())
}

/// `rdma_reject` on an iWARP id: an MPA Reply with the R bit and the private data.
pub(super) fn cm_siw_reject(
    cm: &mut Cm<'_>,
    now: Instant,
    session: SessionId,
    h: Handle,
    private_data: &[u8],
) -> Result<(), i32> {
    let (dev, conn) = cm_siw_conn(cm, session, h)?;
    let Some(d) = cm.clients.devices.get_mut(dev).and_then(Option::as_mut) else {
        return Err(libc::ENODEV);
    };
    let nic = SiwNic::of(d.nic.as_mut()).ok_or(libc::ENODEV)?;
    nic.reject(now, conn, private_data, cm.clients.mem)
}

/// `rdma_disconnect` on an iWARP id (`iw_cm_disconnect`): the stream closes; a
/// connection that already ended is no error, an id that never had one is EINVAL.
pub(super) fn cm_siw_disconnect(cm: &mut Cm<'_>, session: SessionId, h: Handle) -> Result<(), i32> {
    let id = cm.cm_view().id(session, h)?;
    let had_conn = matches!(id.state, IdState::Connect | IdState::Passive);
    match cm_siw_conn(cm, session, h) {
        Ok((dev, conn)) => match siw_nic(cm, dev)?.disconnect(conn) {
            Ok(()) | Err(libc::ENOENT) => Ok(()),
            Err(e) => Err(e),
        },
        Err(_) if had_conn => Ok(()),
        Err(e) => Err(e),
    }
}

/// `rdma_init_qp_attr` on an iWARP id, as `rdma_init_qp_attr` → `iw_cm_init_qp_attr`
/// answer it: INIT and RTR give the state and the access flags (remote write and
/// read once the id has an iw_cm id, none before), RTS nothing but the port (the
/// device moves the QP to RTS itself); the port is always in the mask.
pub(super) fn cm_siw_init_qp_attr(
    cm: &Cm<'_>,
    session: SessionId,
    h: Handle,
    state: u32,
) -> Result<(wire::client::QpAttr, u32), i32> {
    let id = cm.cm_view().id(session, h)?;
    // The CMA creates the iw_cm id at listen, connect and for a connect request.
    let has_iw = matches!(
        id.state,
        IdState::Listen | IdState::Connect | IdState::Passive
    );
    let mut attr = wire::client::QpAttr {
        qp_state: state,
        port_num: 1,
        ..wire::client::QpAttr::default()
    };
    let mask = if !has_iw {
        qp_attr_mask::STATE | qp_attr_mask::ACCESS_FLAGS
    } else {
        match state {
            qp_state::INIT | qp_state::RTR => {
                attr.qp_access_flags = access::REMOTE_WRITE | access::REMOTE_READ;
                qp_attr_mask::STATE | qp_attr_mask::ACCESS_FLAGS
            }
            qp_state::RTS => 0,
            _ => return Err(libc::EINVAL),
        }
    };
    Ok((attr, mask | qp_attr_mask::PORT))
}

/// An iWARP id goes: its connection closes (a request never answered is refused),
/// its listeners stop.
pub(super) fn cm_siw_release(cm: &mut Cm<'_>, now: Instant, h: Handle) {
    let Some(id) = cm.tables.ids.get_mut(&h) else {
        return;
    };
    let conn = id.dev.zip(id.siw_conn.take());
    let listeners = std::mem::take(&mut id.siw_listeners);
    for (dev, l) in listeners {
        cm.tables.siw_listeners.remove(&(dev, l));
        if let Ok(nic) = siw_nic(cm, dev) {
            let _ = nic.unlisten(l);
        }
    }
    let Some((dev, conn)) = conn else {
        return;
    };
    if cm.tables.siw_conns.get(&(dev, conn)) == Some(&h) {
        cm.tables.siw_conns.remove(&(dev, conn));
    }
    let Some(d) = cm.clients.devices.get_mut(dev).and_then(Option::as_mut) else {
        return;
    };
    let Some(nic) = SiwNic::of(d.nic.as_mut()) else {
        return;
    };
    // iw_destroy_cm_id: a pending request is rejected, anything else closed.
    if nic.reject(now, conn, &[], cm.clients.mem).is_err() {
        let _ = nic.disconnect(conn);
    }
}

/// A device goes: its TCP listeners and connections are forgotten.
pub(super) fn cm_siw_device_removed(cm: &mut Cm<'_>, dev: usize) {
    cm.tables.siw_listeners.retain(|(d, _), _| *d != dev);
    cm.tables.siw_conns.retain(|(d, _), _| *d != dev);
    for id in cm.tables.ids.values_mut() {
        id.siw_listeners.retain(|(d, _)| *d != dev);
        if id.dev == Some(dev) {
            id.siw_conn = None;
        }
    }
}

/// The connection-setup events of every siw device. Whether there were any.
pub(super) fn drive_siw_cm(cm: &mut Cm<'_>, now: Instant) -> bool {
    let mut events = Vec::new();
    // Held requests whose listener is back (or whose time is up) go first.
    for (until, dev, mut ev) in std::mem::take(&mut cm.tables.siw_parked) {
        if let Some(l) = siw_listener_for(cm, dev, &ev) {
            if let SiwCmEvent::ConnectRequest { listener, .. } = &mut ev {
                *listener = l;
            }
            events.push((dev, ev, false));
        } else if until <= now {
            events.push((dev, ev, false));
        } else {
            cm.tables.siw_parked.push((until, dev, ev));
        }
    }
    for (i, slot) in cm.clients.devices.iter_mut().enumerate() {
        let Some(nic) = slot.as_mut().and_then(|d| SiwNic::of(d.nic.as_mut())) else {
            continue;
        };
        while let Some(ev) = nic.poll_cm_event() {
            events.push((i, ev, true));
        }
    }
    let worked = !events.is_empty();
    for (dev, ev, may_park) in events {
        if may_park && cm_siw_park(cm, now, dev, &ev) {
            continue;
        }
        cm_siw_event(cm, now, dev, ev);
    }
    worked
}

/// Holds a connection request that arrived on a listener its id has just closed
/// (accepted by the kernel before the close) for up to [`LISTEN_GRACE`], in case the
/// address and port are listened on again, as the RoCE CM holds a REQ
/// (`devices::parked::LISTEN_GRACE`): perftest's `-R` reconnects while it re-listens.
fn cm_siw_park(cm: &mut Cm<'_>, now: Instant, dev: usize, ev: &SiwCmEvent) -> bool {
    let SiwCmEvent::ConnectRequest { listener, .. } = ev else {
        return false;
    };
    let listening = cm
        .tables
        .siw_listeners
        .get(&(dev, *listener))
        .and_then(|h| cm.tables.ids.get(h))
        .is_some_and(|id| id.state == IdState::Listen);
    if listening || cm.tables.siw_parked.len() >= MAX_PARKED {
        return false;
    }
    tracing::debug!(dev, "siw connect request held: its listener is gone");
    cm.tables
        .siw_parked
        .push((now + LISTEN_GRACE, dev, ev.clone()));
    true
}

/// A listener of device `dev` now serving the address and port a held request came
/// to.
fn siw_listener_for(cm: &Cm<'_>, dev: usize, ev: &SiwCmEvent) -> Option<ListenerId> {
    let SiwCmEvent::ConnectRequest { local, .. } = ev else {
        return None;
    };
    cm.tables.siw_listeners.iter().find_map(|(&(d, l), h)| {
        let id = cm.tables.ids.get(h)?;
        let src = id.src?;
        let addr_ok = src.ip().is_unspecified() || canonical(src.ip()) == canonical(local.ip());
        (d == dev && id.state == IdState::Listen && src.port() == local.port() && addr_ok)
            .then_some(l)
    })
}

/// One siw event → the record librdmacm reports (`cma_iw_handler`).
fn cm_siw_event(cm: &mut Cm<'_>, now: Instant, dev: usize, ev: SiwCmEvent) {
    let conn = match &ev {
        SiwCmEvent::ConnectRequest { .. } => {
            cm_siw_request(cm, now, dev, ev);
            return;
        }
        SiwCmEvent::Established { conn, .. }
        | SiwCmEvent::Rejected { conn, .. }
        | SiwCmEvent::ConnectError { conn, .. }
        | SiwCmEvent::Disconnected { conn }
        | SiwCmEvent::Closed { conn } => *conn,
    };
    let Some(&h) = cm.tables.siw_conns.get(&(dev, conn)) else {
        tracing::trace!(conn = conn.0, ?ev, "siw cm event of a destroyed id");
        return;
    };
    let passive = cm
        .tables
        .ids
        .get(&h)
        .is_some_and(|id| id.state == IdState::Passive);
    let (ev_type, status, param) = match ev {
        SiwCmEvent::ConnectRequest { .. } => return,
        SiwCmEvent::Established {
            private_data,
            ird,
            ord,
            ..
        } => {
            // IW_CM_EVENT_CONNECT_REPLY carries the Reply's private data; the
            // passive side's IW_CM_EVENT_ESTABLISHED carries none.
            let pd = if passive { Vec::new() } else { private_data };
            let addrs = siw_nic(cm, dev).ok().and_then(|n| n.conn_addrs(conn));
            if let (Some((local, peer)), Some(id)) = (addrs, cm.tables.ids.get_mut(&h)) {
                id.src = Some(local);
                id.dst = Some(peer);
            }
            (event::ESTABLISHED, 0, conn_param(pd, ird, ord))
        }
        SiwCmEvent::Rejected { private_data, .. } => {
            cm_siw_forget_conn(cm, h);
            (
                event::REJECTED,
                -libc::ECONNREFUSED,
                conn_param(private_data, 0, 0),
            )
        }
        SiwCmEvent::ConnectError { errno, .. } => {
            cm_siw_forget_conn(cm, h);
            let ev = match errno {
                libc::ECONNREFUSED | libc::ECONNRESET => event::REJECTED,
                libc::ETIMEDOUT => event::UNREACHABLE,
                _ => event::CONNECT_ERROR,
            };
            (ev, -errno, conn_param(Vec::new(), 0, 0))
        }
        SiwCmEvent::Disconnected { .. } => (event::DISCONNECTED, 0, conn_param(Vec::new(), 0, 0)),
        // iw_cm has no time wait: nothing to report (no TIMEWAIT_EXIT on iWARP).
        SiwCmEvent::Closed { .. } => {
            cm.tables.siw_conns.remove(&(dev, conn));
            cm_siw_forget_conn(cm, h);
            return;
        }
    };
    cm.tables.push_event(CmEventRecord {
        id: h,
        listen_id: None,
        event: ev_type,
        status,
        new_id: None,
        param,
    });
}

/// A listener is destroyed with the CONNECT_REQUEST of passive id `h` never fetched:
/// the request is held for a new listener on the same address and port
/// ([`LISTEN_GRACE`]) instead of refused with the id. Whether it was.
pub(super) fn cm_siw_hand_on(cm: &mut Cm<'_>, now: Instant, h: Handle) -> bool {
    let Some(id) = cm.tables.ids.get_mut(&h) else {
        return false;
    };
    let (Some(dev), Some(conn), Some(request)) = (id.dev, id.siw_conn, id.siw_request.take())
    else {
        return false;
    };
    if cm.tables.siw_parked.len() >= MAX_PARKED {
        return false;
    }
    id.siw_conn = None;
    cm.tables.siw_conns.remove(&(dev, conn));
    tracing::debug!(
        id = h.0,
        conn = conn.0,
        "siw connect request held for a new listener"
    );
    cm.tables
        .siw_parked
        .push((now + LISTEN_GRACE, dev, request));
    true
}

/// The id's connection failed or closed: it may connect again.
fn cm_siw_forget_conn(cm: &mut Cm<'_>, h: Handle) {
    if let Some(id) = cm.tables.ids.get_mut(&h) {
        id.siw_conn = None;
    }
}

/// `iw_conn_req_handler`: a new id on the listener's channel and CONNECT_REQUEST,
/// unless the listener is gone or its backlog is full (the request is rejected).
fn cm_siw_request(cm: &mut Cm<'_>, now: Instant, dev: usize, ev: SiwCmEvent) {
    let request = ev.clone();
    let SiwCmEvent::ConnectRequest {
        listener,
        conn,
        local,
        peer,
        private_data,
        ird,
        ord,
    } = ev
    else {
        return;
    };
    let lh = cm.tables.siw_listeners.get(&(dev, listener)).copied();
    let new = lh.and_then(|lh| {
        let l = cm.tables.ids.get(&lh)?;
        (l.state == IdState::Listen && l.pending < l.backlog).then_some(lh)
    });
    let Some(lh) = new else {
        tracing::debug!(
            conn = conn.0,
            "siw connect request refused: no listener or backlog full"
        );
        if let Some(d) = cm.clients.devices.get_mut(dev).and_then(Option::as_mut) {
            if let Some(nic) = SiwNic::of(d.nic.as_mut()) {
                let _ = nic.reject(now, conn, &[], cm.clients.mem);
            }
        }
        return;
    };
    let Some(l) = cm.tables.ids.get(&lh) else {
        return;
    };
    let (session, channel, ps, tos, ack, afonly) =
        (l.session, l.channel, l.ps, l.tos, l.ack_timeout, l.afonly);
    let Ok(nh) = cm.clients.insert(session, None, Kind::CmId) else {
        if let Some(d) = cm.clients.devices.get_mut(dev).and_then(Option::as_mut) {
            if let Some(nic) = SiwNic::of(d.nic.as_mut()) {
                let _ = nic.reject(now, conn, &[], cm.clients.mem);
            }
        }
        return;
    };
    let mut id = CmId::new(session, channel, ps, emu_core::QpType::Rc);
    id.state = IdState::Passive;
    id.src = Some(local);
    id.dst = Some(peer);
    id.dev = Some(dev);
    id.siw_conn = Some(conn);
    id.siw_request = Some(request);
    id.tos = tos;
    id.ack_timeout = ack;
    id.afonly = afonly;
    cm.tables.ids.insert(nh, id);
    cm.tables.siw_conns.insert((dev, conn), nh);
    if let Some(ch) = cm.tables.channels.get_mut(&channel) {
        ch.users += 1;
    }
    if let Some(l) = cm.tables.ids.get_mut(&lh) {
        l.pending += 1;
    }
    let info = cm.cm_view().info(nh);
    tracing::debug!(listener = lh.0, id = nh.0, conn = conn.0, %peer, "cm iwarp connect request");
    // The initiator's IRD is what we may issue, its ORD what we must serve.
    cm.tables.push_event(CmEventRecord {
        id: nh,
        listen_id: Some(lh),
        event: event::CONNECT_REQUEST,
        status: 0,
        new_id: Some(info),
        param: conn_param(private_data, ird, ord),
    });
}
