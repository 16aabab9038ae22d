//! RDMA CM in the daemon: what the kernel's `rdma_ucm` + CMA + IB CM do for librdmacm.
//!
//! The shim (librdmacm) keeps the `rdma_cm_id` objects and moves QPs itself; the daemon
//! keeps, per session, event channels and CM ids (named by protocol handles), the port
//! spaces' bindings, address and route resolution through the kernel's routing, and one
//! sans-IO [`emu_core::cm::CmAgent`] per RoCE device speaking the IB CM protocol on QP1.
//!
//! - [`CmRequest`]s arrive through [`cm_request`] (this file): every handle must
//!   name an object of the calling session (ENOENT otherwise, EINVAL for an object of
//!   another kind), errnos are the ones the kernel's ucma/CMA return.
//! - `addr.rs`: `rdma_bind_addr` (port spaces, ephemeral ports, EADDRINUSE),
//!   `rdma_resolve_addr` (the source address the kernel's routing picks, the device whose
//!   GID table holds it), `rdma_resolve_route`.
//! - `events.rs`: driving the agents (timers, MADs out, events in), the `CmEvent` →
//!   `RDMA_CM_EVENT_*` mapping (`docs/cm.md`), connect requests on listeners (backlog),
//!   session death, devices added and removed.
//! - `iwarp.rs`: ids on siw devices (iWARP): TCP listeners and connections of
//!   [`crate::daemon::siw::SiwNic`] instead of the IB CM, as the kernel's CMA drives iw_cm.
//! - `gsi.rs`: QP1 packets: received datagrams to QP1 go to the device's agent after the
//!   ICRC check, the agent's MADs leave as GSI packets like every other packet.
//!
//! Events of a channel queue here until `GetEvent` takes them; one
//! [`CmEventToken`] per queued event goes into the channel's pipe (written later when the
//! pipe is full, never dropped).

mod addr;
mod conn;
mod ctx;
mod events;
pub(in crate::daemon) mod gsi;
mod iwarp;
mod mcast;
mod rerequest;
mod tables;
mod view;

use crate::daemon::sessions::answer::{ok, Answer};
use crate::daemon::sessions::objects::{Kind, SessionId};
use emu_core::cm::{self as core_cm, reason};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::time::Instant;
use wire::client::cm::{event, CmIdSummary, CmReply, CmRequest};
use wire::client::verbs::event_type;
use wire::client::ReplyBody;

pub(super) use ctx::Cm;
pub(super) use events::{
    cm_destroy_id, cm_device_added, cm_device_removed, cm_ids, cm_release_session, drive_cm,
};
pub(super) use tables::CmTables;
use tables::{id_qp_type, CmId, EventChannel, IdState};

/// One CM request of `session`.
pub(super) fn cm_request(
    cm: &mut Cm<'_>,
    session: SessionId,
    req: CmRequest,
    mut fds: Vec<OwnedFd>,
    now: Instant,
) -> Answer {
    use CmRequest as C;
    let reply = |r: CmReply| ok(ReplyBody::Cm(r));
    match req {
        C::CreateChannel => {
            let write = fds.pop().ok_or(libc::EINVAL)?;
            if !super::sys::is_pipe_write_end(&write) {
                return Err(libc::EINVAL);
            }
            let handle = cm.clients.insert(session, None, Kind::CmChannel)?;
            cm.tables.channels.insert(
                handle,
                EventChannel {
                    session,
                    write,
                    events: VecDeque::new(),
                    unwritten: 0,
                    users: 0,
                },
            );
            reply(CmReply::Channel { handle })
        }
        C::DestroyChannel { channel } => {
            if cm.cm_view().channel(session, channel)?.users > 0 {
                return Err(libc::EBUSY);
            }
            cm.tables.channels.remove(&channel);
            cm.clients.forget(channel);
            ok(ReplyBody::Ok)
        }
        C::CreateId {
            channel,
            ps,
            qp_type,
        } => {
            cm.cm_view().channel(session, channel)?;
            let qp_type = id_qp_type(ps, qp_type)?;
            let handle = cm.clients.insert(session, None, Kind::CmId)?;
            cm.tables
                .ids
                .insert(handle, CmId::new(session, channel, ps, qp_type));
            if let Some(ch) = cm.tables.channels.get_mut(&channel) {
                ch.users += 1;
            }
            tracing::debug!(session, id = handle.0, ps, ?qp_type, "cm id created");
            reply(CmReply::Id { handle })
        }
        C::DestroyId { id } => {
            cm.cm_view().id(session, id)?;
            events::cm_destroy_id(cm, now, id);
            ok(ReplyBody::Ok)
        }
        C::MigrateId { id, channel } => {
            let old = cm.cm_view().id(session, id)?.channel;
            cm.cm_view().channel(session, channel)?;
            if old != channel {
                let moved = match cm.tables.channels.get_mut(&old) {
                    Some(ch) => {
                        ch.users = ch.users.saturating_sub(1);
                        ch.remove_where(|e| e.id == id)
                    }
                    None => Vec::new(),
                };
                if let Some(ch) = cm.tables.channels.get_mut(&channel) {
                    ch.users += 1;
                }
                cm.cm_id_mut(session, id)?.channel = channel;
                for ev in moved {
                    cm.tables.push_event(ev);
                }
            }
            ok(ReplyBody::Ok)
        }
        C::BindAddr { id, addr } => {
            if cm.cm_view().id(session, id)?.state != IdState::Idle {
                return Err(libc::EINVAL);
            }
            let privileged = cm.cm_privileged(session);
            cm.cm_addressing().bind(session, id, addr, privileged)?;
            reply(CmReply::Info(cm.cm_view().info(id)))
        }
        C::ResolveAddr {
            id,
            src,
            dst,
            timeout_ms: _,
        } => {
            let privileged = cm.cm_privileged(session);
            cm.cm_addressing()
                .resolve_addr(session, id, src, dst, privileged)?;
            ok(ReplyBody::Ok)
        }
        C::ResolveRoute { id, timeout_ms: _ } => {
            if cm.cm_view().id(session, id)?.state != IdState::AddrResolved {
                return Err(libc::EINVAL);
            }
            if iwarp::cm_siw_dev(cm, session, id)?.is_some() {
                iwarp::cm_siw_resolve_route(cm, session, id)?;
            } else {
                cm.cm_addressing().resolve_route(session, id)?;
            }
            ok(ReplyBody::Ok)
        }
        C::Listen { id, backlog } => {
            conn::cm_listen(cm, session, id, backlog)?;
            ok(ReplyBody::Ok)
        }
        C::Connect { id, param } => {
            conn::cm_connect(cm, now, session, id, param)?;
            ok(ReplyBody::Ok)
        }
        C::Accept { id, param } => {
            conn::cm_accept(cm, now, session, id, param)?;
            ok(ReplyBody::Ok)
        }
        C::Reject { id, private_data } => {
            if iwarp::cm_siw_dev(cm, session, id)?.is_some() {
                iwarp::cm_siw_reject(cm, now, session, id, &private_data)?;
                return ok(ReplyBody::Ok);
            }
            let (dev, conn) = cm.cm_view().conn(session, id)?;
            cm.with_agent(dev, |a| {
                a.reject(now, conn, reason::CONSUMER_DEFINED, &private_data)
            })?;
            cm.cm_sync_conn(id);
            ok(ReplyBody::Ok)
        }
        C::Establish { id } => {
            // iWARP: the device established the connection (the CMA's rdma_establish
            // is an IB CM call).
            if iwarp::cm_siw_dev(cm, session, id)?.is_some() {
                return ok(ReplyBody::Ok);
            }
            let (dev, conn) = cm.cm_view().conn(session, id)?;
            cm.with_agent(dev, |a| a.establish(now, conn))?;
            ok(ReplyBody::Ok)
        }
        C::Notify { id, event } => {
            // rdma_notify is an IB CM call; the CMA answers 0 on iWARP.
            if iwarp::cm_siw_dev(cm, session, id)?.is_some() {
                return ok(ReplyBody::Ok);
            }
            let (dev, conn) = cm.cm_view().conn(session, id)?;
            if event != event_type::COMM_EST {
                return Err(libc::EINVAL);
            }
            cm.with_agent(dev, |a| {
                if a.state(conn) == Some(core_cm::CmState::Established) {
                    Err(emu_core::Errno(libc::EISCONN))
                } else {
                    a.establish(now, conn)
                }
            })?;
            ok(ReplyBody::Ok)
        }
        C::Disconnect { id } => {
            if iwarp::cm_siw_dev(cm, session, id)?.is_some() {
                iwarp::cm_siw_disconnect(cm, session, id)?;
                return ok(ReplyBody::Ok);
            }
            let (dev, conn) = cm.cm_view().conn(session, id)?;
            cm.with_agent(dev, |a| a.disconnect(now, conn, &[]))?;
            ok(ReplyBody::Ok)
        }
        C::InitQpAttr { id, qp_state } => {
            let (attr, mask) = conn::cm_init_qp_attr(cm, session, id, qp_state)?;
            reply(CmReply::QpAttr { attr, mask })
        }
        C::Query { id } => {
            cm.cm_view().id(session, id)?;
            reply(CmReply::Info(cm.cm_view().info(id)))
        }
        C::GetEvent { channel } => {
            cm.cm_view().channel(session, channel)?;
            let ev = cm
                .tables
                .channels
                .get_mut(&channel)
                .and_then(EventChannel::pop)
                .ok_or(libc::EAGAIN)?;
            if ev.event == event::CONNECT_REQUEST {
                // The ucma gives the listener its backlog slot back when the request
                // is fetched.
                if let Some(l) = ev.listen_id.and_then(|l| cm.tables.ids.get_mut(&l)) {
                    l.pending = l.pending.saturating_sub(1);
                }
            }
            reply(CmReply::Event(ev))
        }
        C::JoinMulticast {
            id,
            addr,
            join_flags,
        } => {
            let joined = mcast::join(cm.cm_view(), session, id, addr, join_flags)?;
            cm.tables.push_event(joined);
            ok(ReplyBody::Ok)
        }
        C::LeaveMulticast { id, addr } => {
            let channel = cm.cm_view().id(session, id)?.channel;
            if let Some(ch) = cm.tables.channels.get_mut(&channel) {
                mcast::leave(ch, id, addr);
            }
            ok(ReplyBody::Ok)
        }
        C::SetOption {
            id,
            level,
            optname,
            value,
        } => {
            conn::cm_set_option(cm, session, id, level, optname, &value)?;
            ok(ReplyBody::Ok)
        }
        C::ListIds => reply(CmReply::Ids(cm_list_ids(cm, session))),
    }
}

/// `rdma-emu res cm_id`: the ids of every session of the caller's user (all of them
/// for root), like `rdma resource show cm_id`.
fn cm_list_ids(cm: &Cm<'_>, caller: SessionId) -> Vec<CmIdSummary> {
    let uid_of = |s: SessionId| cm.clients.sessions.get(&s).map(|s| s.uid);
    let caller_uid = uid_of(caller);
    let mut out: Vec<CmIdSummary> = cm
        .tables
        .ids
        .iter()
        .filter(|(_, id)| caller_uid == Some(0) || uid_of(id.session) == caller_uid)
        .map(|(&h, id)| {
            let info = cm.cm_view().info(h);
            CmIdSummary {
                id: h,
                pid: cm.clients.sessions.get(&id.session).map_or(0, |s| s.pid),
                device: info.device,
                port_num: info.port_num,
                ps: id.ps,
                qp_type: id.qp_type as u32,
                state: match id.state {
                    IdState::Idle => "IDLE",
                    IdState::AddrBound => "ADDR_BOUND",
                    IdState::AddrResolved => "ADDR_RESOLVED",
                    IdState::RouteResolved => "ROUTE_RESOLVED",
                    IdState::Listen => "LISTEN",
                    IdState::Connect | IdState::Passive => "CONNECT",
                }
                .to_string(),
                src: id.src,
                dst: id.dst,
                qpn: None,
            }
        })
        .collect();
    out.sort_by_key(|s| s.id);
    out
}
