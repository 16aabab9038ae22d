//! Driving the agents and turning their events into `RDMA_CM_EVENT_*` records
//! (`docs/cm.md`, table "Events"), connect requests on listeners, and the end of ids,
//! sessions and devices.

use super::addr::unbind;
use super::ctx::Cm;
use super::tables::{CmId, IdState};
use crate::daemon::devices::io::transmit;
use crate::daemon::devices::netdev::canonical;
use crate::daemon::sessions::objects::{Kind, SessionId};
use emu_core::cm::{reason, CmEvent, ConnId, PeerInfo, ServiceId};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;
use wire::client::cm::event;
use wire::client::cm::{CmConnParam, CmEventParam, CmEventRecord, CmPath};
use wire::client::proto::{AhAttr, GlobalRoute, Handle};

/// Rounds of (timers, transmits, events) per engine pass: a locally delivered MAD can
/// answer at once, and that answer can raise another event.
const ROUNDS: usize = 8;

/// `param.conn` of CONNECT_REQUEST / CONNECT_RESPONSE: the peer's resources swapped as
/// the IB CM reports them (its initiator depth is what we must answer, and vice versa).
fn conn_param(peer: &PeerInfo, private_data: Vec<u8>) -> CmConnParam {
    CmConnParam {
        private_data,
        responder_resources: peer.initiator_depth,
        initiator_depth: peer.responder_resources,
        flow_control: u8::from(peer.flow_control),
        retry_count: peer.retry_count,
        rnr_retry_count: peer.rnr_retry_count,
        srq: u8::from(peer.srq),
        qp_num: peer.qpn.0,
        qkey: 0,
    }
}

/// An address handle to `peer` over `path` (`param.ud.ah_attr`).
fn ah_to(peer: IpAddr, sgid_index: u8, path: Option<&CmPath>) -> AhAttr {
    AhAttr {
        grh: GlobalRoute {
            dgid: crate::daemon::devices::netdev::gid_of(canonical(peer)),
            flow_label: path.map_or(0, |p| p.flow_label),
            sgid_index,
            hop_limit: path.map_or(64, |p| p.hop_limit),
            traffic_class: path.map_or(0, |p| p.traffic_class),
        },
        is_global: 1,
        port_num: 1,
        ..AhAttr::default()
    }
}

/// Timers, MADs out and events of every device's agent. Whether anything happened.
pub(in crate::daemon) fn drive_cm(cm: &mut Cm<'_>, now: Instant) -> bool {
    let mut worked = false;
    let mut events = Vec::new();
    for _ in 0..ROUNDS {
        let mut sent = cm_send_rerequests(cm, now);
        for (i, slot) in cm.clients.devices.iter_mut().enumerate() {
            let Some(d) = slot.as_mut() else {
                continue;
            };
            sent |= d.release_parked_reqs(now);
            if d.cm.poll_timeout().is_some_and(|t| t <= now) {
                d.cm.handle_timeout(now);
            }
            loop {
                let staged = super::gsi::stage_gsi_transmits(
                    &mut d.cm,
                    &mut d.gsi_psn,
                    cm.tx_bufs,
                    cm.tx_meta,
                );
                if staged == 0 {
                    break;
                }
                sent = true;
                let bufs = &mut cm.tx_bufs[..staged];
                transmit(d, bufs, cm.tx_meta, cm.cfg.local_path, now, cm.clients.mem);
            }
            while let Some((conn, _, ev)) = d.cm.poll_event() {
                events.push((i, conn, ev));
            }
        }
        let siw = super::iwarp::drive_siw_cm(cm, now);
        if events.is_empty() && !sent && !siw {
            break;
        }
        worked = true;
        for (dev, conn, ev) in events.drain(..) {
            cm_event(cm, now, dev, conn, ev);
        }
    }
    cm.tables.flush_tokens();
    worked
}

/// One agent event → the record librdmacm reports.
fn cm_event(cm: &mut Cm<'_>, now: Instant, dev: usize, conn: ConnId, ev: CmEvent) {
    let Some(&h) = cm.tables.conns.get(&(dev, conn)) else {
        match ev {
            CmEvent::ConnectRequest { .. } | CmEvent::SidrRequest { .. } => {
                cm_connect_request(cm, now, dev, conn, ev);
            }
            _ => tracing::trace!(comm_id = conn.0, ?ev, "cm event of a destroyed id"),
        }
        return;
    };
    let (peer_ip, sgid_index, path) = {
        let info = cm.cm_view().info(h);
        let peer = cm
            .tables
            .ids
            .get(&h)
            .and_then(|id| id.dst)
            .map_or(IpAddr::from([0u8; 4]), |a| a.ip());
        (peer, info.sgid_index, info.path)
    };
    if let CmEvent::Rejected { reason, .. } = ev {
        if cm_rerequest_later(cm, now, h, reason) {
            return;
        }
    }
    if let Some(id) = cm.tables.ids.get_mut(&h) {
        // The attempt was answered: no more REQs of its own.
        id.rerequest = None;
    }
    let (ev_type, status, param) = match ev {
        CmEvent::ConnectRequest { .. } | CmEvent::SidrRequest { .. } => return,
        // librdmacm moves the QP to RTR/RTS, sends Establish (the RTU) and reports
        // ESTABLISHED itself (ucma_process_conn_resp).
        CmEvent::ConnectResponse { peer, private_data } => (
            event::CONNECT_RESPONSE,
            0,
            CmEventParam::Conn(conn_param(&peer, private_data)),
        ),
        CmEvent::Established => (event::ESTABLISHED, 0, CmEventParam::None),
        CmEvent::SidrResolved {
            qpn,
            qkey,
            private_data,
        } => (
            event::ESTABLISHED,
            0,
            CmEventParam::Ud {
                private_data,
                ah_attr: ah_to(peer_ip, sgid_index, path.as_ref()),
                qp_num: qpn.0,
                qkey: qkey.0,
            },
        ),
        CmEvent::Rejected {
            reason,
            private_data,
            ari: _,
        } => (
            event::REJECTED,
            i32::from(reason),
            CmEventParam::Conn(CmConnParam {
                private_data,
                ..CmConnParam::default()
            }),
        ),
        CmEvent::SidrRejected {
            status,
            private_data,
        } => (
            event::UNREACHABLE,
            i32::from(status),
            CmEventParam::Ud {
                private_data,
                ah_attr: AhAttr::default(),
                qp_num: 0,
                qkey: 0,
            },
        ),
        CmEvent::Unreachable => (event::UNREACHABLE, -libc::ETIMEDOUT, CmEventParam::None),
        CmEvent::Disconnected {
            timed_out,
            private_data,
        } => (
            event::DISCONNECTED,
            if timed_out { -libc::ETIMEDOUT } else { 0 },
            CmEventParam::Conn(CmConnParam {
                private_data,
                ..CmConnParam::default()
            }),
        ),
        CmEvent::TimewaitExit => (event::TIMEWAIT_EXIT, 0, CmEventParam::None),
    };
    cm.tables.push_event(CmEventRecord {
        id: h,
        listen_id: None,
        event: ev_type,
        status,
        new_id: None,
        param,
    });
    cm.cm_sync_conn(h);
}

/// A REJ with `reason` answered the REQ of active id `h`: whether a new REQ goes out
/// later instead of REJECTED now (`rerequest.rs`; the rejected connection is then
/// forgotten here, as `cm_event` does after reporting it).
fn cm_rerequest_later(cm: &mut Cm<'_>, now: Instant, h: Handle, reason: u16) -> bool {
    let Some(id) = cm.tables.ids.get_mut(&h) else {
        return false;
    };
    if id.state != IdState::Connect {
        return false;
    }
    let Some(r) = id.rerequest.as_mut() else {
        return false;
    };
    let Some(at) = r.rejected(now, reason) else {
        return false;
    };
    let (repeats, in_ms) = (r.repeats(), at.saturating_duration_since(now).as_millis());
    cm.cm_sync_conn(h);
    let Some(id) = cm.tables.ids.get_mut(&h) else {
        return false;
    };
    if id.conn.is_some() {
        // The agent still holds the rejected connection: no second one beside it.
        id.rerequest = None;
        return false;
    }
    tracing::debug!(
        id = h.0,
        repeats,
        in_ms = in_ms as u64,
        "cm REJ: nobody listens yet, REQ again"
    );
    true
}

/// Sends the REQs that are due again (`rerequest.rs`), each as a new connection of
/// the agent. One that cannot go out (the device is gone) ends in the REJECTED the
/// application was spared. Whether any went.
fn cm_send_rerequests(cm: &mut Cm<'_>, now: Instant) -> bool {
    let due: Vec<Handle> = cm
        .tables
        .ids
        .iter()
        .filter(|(_, id)| {
            id.conn.is_none()
                && id
                    .rerequest
                    .as_ref()
                    .and_then(|r| r.due())
                    .is_some_and(|t| t <= now)
        })
        .map(|(&h, _)| h)
        .collect();
    let mut sent = false;
    for h in due {
        let Some(id) = cm.tables.ids.get_mut(&h) else {
            continue;
        };
        let Some(dev) = id.dev else {
            // The device went (DEVICE_REMOVAL was reported).
            id.rerequest = None;
            continue;
        };
        let Some(r) = id.rerequest.as_mut() else {
            continue;
        };
        r.sent();
        let (params, route, repeats) = (r.params.clone(), r.route, r.repeats());
        let owner = emu_core::ClientId(h.0);
        match cm.with_agent(dev, |a| a.connect(now, owner, params, route)) {
            Ok(conn) => {
                cm.tables.conns.insert((dev, conn), h);
                if let Some(id) = cm.tables.ids.get_mut(&h) {
                    id.conn = Some(conn);
                }
                tracing::debug!(id = h.0, comm_id = conn.0, repeats, "cm connect again");
                sent = true;
            }
            Err(errno) => {
                tracing::debug!(id = h.0, errno, "cm connect again failed");
                if let Some(id) = cm.tables.ids.get_mut(&h) {
                    id.rerequest = None;
                }
                cm.tables.push_event(CmEventRecord {
                    id: h,
                    listen_id: None,
                    event: event::REJECTED,
                    status: i32::from(reason::INVALID_SERVICE_ID),
                    new_id: None,
                    param: CmEventParam::Conn(CmConnParam::default()),
                });
            }
        }
    }
    sent
}

/// The listener a request for `(ps, port)` to `local` belongs to: one bound to that
/// address before a wildcard one.
fn cm_find_listener(cm: &Cm<'_>, dev: usize, sid: ServiceId, local: IpAddr) -> Option<Handle> {
    let (space, port) = sid.as_rdma_ip()?;
    let mut wildcard = None;
    for (&h, id) in &cm.tables.ids {
        let Some(src) = id.src else {
            continue;
        };
        if id.state != IdState::Listen
            || src.port() != port
            || super::tables::port_space(id.ps) != space
        {
            continue;
        }
        if src.ip().is_unspecified() {
            let family_ok = !id.afonly || src.is_ipv4() == local.is_ipv4();
            if family_ok && wildcard.is_none_or(|w: Handle| h < w) {
                wildcard = Some(h);
            }
        } else if id.dev.is_none_or(|d| d == dev) && canonical(src.ip()) == local {
            return Some(h);
        }
    }
    wildcard
}

/// A REQ or SIDR_REQ for a listened service: a new id on the listener's channel and
/// CONNECT_REQUEST, unless the listener's backlog is full (then the request is
/// rejected, as the CM answers a request its consumer refused).
fn cm_connect_request(cm: &mut Cm<'_>, now: Instant, dev: usize, conn: ConnId, ev: CmEvent) {
    let Some(d) = cm.clients.devices.get_mut(dev).and_then(Option::as_mut) else {
        return;
    };
    let Some(path) = d.cm.path(conn) else {
        return;
    };
    let (service_id, peer_addr, cma, private_data, peer) = match ev {
        CmEvent::ConnectRequest {
            service_id,
            peer,
            cma,
            private_data,
        } => (service_id, peer.addr, cma, private_data, Some(peer)),
        CmEvent::SidrRequest {
            service_id,
            addr,
            cma,
            private_data,
        } => (service_id, addr, cma, private_data, None),
        _ => return,
    };
    let local = canonical(path.local);
    let listen_addr = cma.map_or(local, |c| canonical(c.dst));
    let listener = cm_find_listener(cm, dev, service_id, listen_addr)
        .or_else(|| cm_find_listener(cm, dev, service_id, local));
    let Some(lh) = listener else {
        tracing::debug!(comm_id = conn.0, "cm request without a listener: rejected");
        if let Some(Some(d)) = cm.clients.devices.get_mut(dev) {
            let _ = d.cm.reject(now, conn, reason::INVALID_SERVICE_ID, &[]);
        }
        return;
    };
    let Some(l) = cm.tables.ids.get(&lh) else {
        return;
    };
    // Linux (cma_check_req_qp_type): a REQ whose QP type is not the listener's (an XRC
    // REQ at an RC listener, an RC REQ at an XRC one) is refused by the CMA, which the
    // CM answers with a consumer REJ.
    if let Some(p) = &peer {
        if p.qp_type != l.qp_type {
            tracing::debug!(
                comm_id = conn.0,
                listener = ?l.qp_type,
                req = ?p.qp_type,
                "cm request of another QP type than the listener's: rejected"
            );
            if let Some(Some(d)) = cm.clients.devices.get_mut(dev) {
                let _ = d.cm.reject_qp_type_mismatch(now, conn);
            }
            return;
        }
    }
    let (session, channel, ps, lport, tos, ack, afonly) = (
        l.session,
        l.channel,
        l.ps,
        l.src.map_or(0, |s| s.port()),
        l.tos,
        l.ack_timeout,
        l.afonly,
    );
    let full = l.pending >= l.backlog;
    let new = if full {
        Err(libc::ENOMEM)
    } else {
        cm.clients.insert(session, None, Kind::CmId)
    };
    let Ok(nh) = new else {
        tracing::debug!(
            listener = lh.0,
            comm_id = conn.0,
            "cm listener backlog full: request refused"
        );
        if let Some(Some(d)) = cm.clients.devices.get_mut(dev) {
            let _ = d.cm.destroy(now, conn);
        }
        return;
    };
    let ifindex = cm
        .clients
        .devices
        .get(dev)
        .and_then(Option::as_ref)
        .map_or(0, |d| d.netdev.index);
    let scoped = |ip: IpAddr, port: u16| match ip {
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => {
            SocketAddr::V6(std::net::SocketAddrV6::new(v6, port, 0, ifindex))
        }
        ip => SocketAddr::new(ip, port),
    };
    let qp_type = match &peer {
        Some(p) => p.qp_type,
        None => emu_core::QpType::Ud,
    };
    let mut id = CmId::new(session, channel, ps, qp_type);
    id.state = IdState::Passive;
    id.src = Some(scoped(local, lport));
    id.dst = Some(scoped(canonical(peer_addr), cma.map_or(0, |c| c.src_port)));
    id.dev = Some(dev);
    id.conn = Some(conn);
    id.tos = tos;
    id.ack_timeout = ack;
    id.afonly = afonly;
    id.path = Some(CmPath {
        flow_label: path.flow_label,
        hop_limit: path.hop_limit,
        traffic_class: path.traffic_class,
        sl: 0,
        mtu: path.mtu as u32,
        rate: 0,
        packet_life_time: 16,
    });
    cm.tables.ids.insert(nh, id);
    cm.tables.conns.insert((dev, conn), nh);
    if let Some(ch) = cm.tables.channels.get_mut(&channel) {
        ch.users += 1;
    }
    if let Some(l) = cm.tables.ids.get_mut(&lh) {
        l.pending += 1;
    }
    let info = cm.cm_view().info(nh);
    let param = match peer {
        Some(p) => CmEventParam::Conn(conn_param(&p, private_data)),
        None => CmEventParam::Ud {
            private_data,
            ah_attr: ah_to(peer_addr, info.sgid_index, info.path.as_ref()),
            qp_num: 0,
            qkey: 0,
        },
    };
    tracing::debug!(
        listener = lh.0,
        id = nh.0,
        comm_id = conn.0,
        peer = %peer_addr,
        "cm connect request"
    );
    cm.tables.push_event(CmEventRecord {
        id: nh,
        listen_id: Some(lh),
        event: event::CONNECT_REQUEST,
        status: 0,
        new_id: Some(info),
        param,
    });
}

/// `rdma_destroy_id`: the connection ends quietly (the agent finishes the protocol),
/// a listener stops listening and takes its unfetched requests with it, queued
/// events go, the port is freed.
pub(in crate::daemon) fn cm_destroy_id(cm: &mut Cm<'_>, now: Instant, h: Handle) {
    let Some(id) = cm.tables.ids.get(&h) else {
        return;
    };
    let (dev, conn, state, channel, src, ps) =
        (id.dev, id.conn, id.state, id.channel, id.src, id.ps);
    super::iwarp::cm_siw_release(cm, now, h);
    if let (Some(d), Some(c)) = (dev, conn) {
        if cm.tables.conns.get(&(d, c)) == Some(&h) {
            cm.tables.conns.remove(&(d, c));
        }
        if let Some(Some(dv)) = cm.clients.devices.get_mut(d) {
            let _ = dv.cm.destroy(now, c);
        }
    }
    let mut children = Vec::new();
    if state == IdState::Listen {
        if let Some(src) = src {
            let sid = ServiceId::rdma_ip(super::tables::port_space(ps), src.port());
            let devs: Vec<usize> = cm
                .tables
                .listens
                .keys()
                .filter(|(_, s)| *s == sid.0)
                .map(|(d, _)| *d)
                .collect();
            // A specific address bound without a device listened where it is served.
            let serving = match dev {
                None if !src.ip().is_unspecified() => {
                    super::conn::cm_devices_serving(cm, src.ip(), false)
                }
                _ => Vec::new(),
            };
            for d in devs {
                if src.ip().is_unspecified() || dev == Some(d) || serving.contains(&d) {
                    super::conn::cm_unlisten_on(cm, d, sid);
                }
            }
        }
        // Requests nobody fetched die with their listener (the ucma destroys them).
        for ch in cm.tables.channels.values_mut() {
            let gone =
                ch.remove_where(|e| e.event == event::CONNECT_REQUEST && e.listen_id == Some(h));
            children.extend(gone.into_iter().map(|e| e.id));
        }
    }
    if let Some(ch) = cm.tables.channels.get_mut(&channel) {
        let gone = ch.remove_where(|e| e.id == h);
        ch.users = ch.users.saturating_sub(1);
        for e in gone {
            // A request fetched never: give the listener its backlog slot back.
            if let Some(l) = e.listen_id.and_then(|l| cm.tables.ids.get_mut(&l)) {
                l.pending = l.pending.saturating_sub(1);
            }
        }
    }
    unbind(cm.tables, h);
    cm.tables.ids.remove(&h);
    cm.clients.forget(h);
    tracing::debug!(id = h.0, "cm id destroyed");
    for c in children {
        // iWARP: the TCP connection waits a moment for a new listener.
        super::iwarp::cm_siw_hand_on(cm, now, c);
        cm_destroy_id(cm, now, c);
    }
}

/// Every CM id, in creation order.
pub(in crate::daemon) fn cm_ids(cm: &Cm<'_>) -> Vec<Handle> {
    let mut ids: Vec<Handle> = cm.tables.ids.keys().copied().collect();
    ids.sort_unstable();
    ids
}

/// A session ended: its ids and channels go as if destroyed.
pub(in crate::daemon) fn cm_release_session(cm: &mut Cm<'_>, session: SessionId) {
    let now = Instant::now();
    let mut ids: Vec<Handle> = cm
        .tables
        .ids
        .iter()
        .filter(|(_, id)| id.session == session)
        .map(|(h, _)| *h)
        .collect();
    ids.sort_unstable();
    for h in ids {
        cm_destroy_id(cm, now, h);
    }
    let channels: Vec<Handle> = cm
        .tables
        .channels
        .iter()
        .filter(|(_, c)| c.session == session)
        .map(|(h, _)| *h)
        .collect();
    for h in channels {
        cm.tables.channels.remove(&h);
        cm.clients.forget(h);
    }
    drive_cm(cm, now);
}

/// A device was added: wildcard listeners listen on it too.
pub(in crate::daemon) fn cm_device_added(cm: &mut Cm<'_>, dev: usize) {
    let sids: Vec<ServiceId> = cm
        .tables
        .ids
        .values()
        .filter(|id| id.state == IdState::Listen)
        .filter_map(|id| {
            let src = id.src?;
            src.ip()
                .is_unspecified()
                .then(|| ServiceId::rdma_ip(super::tables::port_space(id.ps), src.port()))
        })
        .collect();
    for sid in sids {
        super::conn::cm_listen_on(cm, dev, sid);
    }
    let wildcards: Vec<(Handle, SocketAddr, usize)> = cm
        .tables
        .ids
        .iter()
        .filter(|(_, id)| id.state == IdState::Listen)
        .filter_map(|(h, id)| {
            let src = id.src?;
            src.ip().is_unspecified().then_some((*h, src, id.backlog))
        })
        .collect();
    for (h, src, backlog) in wildcards {
        super::iwarp::cm_siw_listen_wildcard(cm, h, dev, src, backlog as u32);
    }
}

/// A device is being removed: ids bound to it get DEVICE_REMOVAL and lose their
/// connection (the agent goes with the device).
pub(in crate::daemon) fn cm_device_removed(cm: &mut Cm<'_>, dev: usize) {
    cm.tables.listens.retain(|(d, _), _| *d != dev);
    cm.tables.conns.retain(|(d, _), _| *d != dev);
    super::iwarp::cm_siw_device_removed(cm, dev);
    let mut hit: Vec<Handle> = cm
        .tables
        .ids
        .iter()
        .filter(|(_, id)| id.dev == Some(dev))
        .map(|(h, _)| *h)
        .collect();
    hit.sort_unstable();
    for h in hit {
        if let Some(id) = cm.tables.ids.get_mut(&h) {
            id.conn = None;
            id.dev = None;
        }
        cm.tables.simple_event(h, event::DEVICE_REMOVAL, 0);
    }
}
