//! RDMA CM in the daemon: what the kernel's `rdma_ucm` + CMA + IB CM do for librdmacm.
//!
//! The shim (librdmacm) keeps the `rdma_cm_id` objects and moves QPs itself; the daemon
//! keeps, per session, event channels and CM ids (named by protocol handles), the port
//! spaces' bindings, address and route resolution through the kernel's routing, and one
//! sans-IO [`emu_core::cm::CmAgent`] per RoCE device speaking the IB CM protocol on QP1.
//!
//! - [`CmRequest`]s arrive through [`Engine::cm_request`] (this file): every handle must
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
mod events;
pub(in crate::daemon) mod gsi;
mod iwarp;
mod mcast;
mod rerequest;
mod tables;
mod view;

use super::answer::{ok, Answer};
use super::engine::Engine;
use super::objects::{Kind, SessionId};
use emu_core::cm::{self as core_cm, reason};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::time::Instant;
use wire::client::cm::{event, CmIdSummary, CmReply, CmRequest};
use wire::client::proto::Handle;
use wire::client::verbs::event_type;
use wire::client::ReplyBody;

pub(super) use gsi::stage_gsi_transmits;

use addr::Addressing;
pub(super) use tables::CmTables;
use tables::{id_qp_type, CmId, EventChannel, IdState};
use view::CmView;

impl Engine {
    /// The CM's state and what it names, lent read-only ([`CmView`]).
    fn cm_view(&self) -> CmView<'_> {
        CmView {
            tables: &self.cm,
            objects: &self.objects,
            devices: &self.devices,
        }
    }

    /// What binding and resolving ids touch ([`Addressing`]).
    fn cm_addressing(&mut self) -> Addressing<'_> {
        Addressing {
            tables: &mut self.cm,
            objects: &self.objects,
            devices: &self.devices,
        }
    }

    /// Whether the session may bind a port below 1024: its user is root or the daemon's.
    fn cm_privileged(&self, session: SessionId) -> bool {
        self.sessions
            .get(&session)
            .is_some_and(|s| s.uid == 0 || s.uid == super::sys::euid())
    }

    fn cm_id_mut(&mut self, session: SessionId, h: Handle) -> Result<&mut CmId, i32> {
        view::id_mut(&mut self.cm, &self.objects, session, h)
    }

    /// Runs `f` on the agent of device `dev`.
    fn with_agent<T>(
        &mut self,
        dev: usize,
        f: impl FnOnce(&mut core_cm::CmAgent) -> Result<T, emu_core::Errno>,
    ) -> Result<T, i32> {
        let d = self
            .devices
            .get_mut(dev)
            .and_then(Option::as_mut)
            .ok_or(libc::ENODEV)?;
        f(&mut d.cm).map_err(|e| e.0)
    }

    /// One CM request of `session`.
    pub(super) fn cm_request(
        &mut self,
        session: SessionId,
        req: CmRequest,
        mut fds: Vec<OwnedFd>,
        now: Instant,
    ) -> Answer {
        use CmRequest as C;
        let cm = |r: CmReply| ok(ReplyBody::Cm(r));
        match req {
            C::CreateChannel => {
                let write = fds.pop().ok_or(libc::EINVAL)?;
                if !super::sys::is_pipe_write_end(&write) {
                    return Err(libc::EINVAL);
                }
                let handle = self.insert(session, None, Kind::CmChannel)?;
                self.cm.channels.insert(
                    handle,
                    EventChannel {
                        session,
                        write,
                        events: VecDeque::new(),
                        unwritten: 0,
                        users: 0,
                    },
                );
                cm(CmReply::Channel { handle })
            }
            C::DestroyChannel { channel } => {
                if self.cm_view().channel(session, channel)?.users > 0 {
                    return Err(libc::EBUSY);
                }
                self.cm.channels.remove(&channel);
                self.forget(channel);
                ok(ReplyBody::Ok)
            }
            C::CreateId {
                channel,
                ps,
                qp_type,
            } => {
                self.cm_view().channel(session, channel)?;
                let qp_type = id_qp_type(ps, qp_type)?;
                let handle = self.insert(session, None, Kind::CmId)?;
                self.cm
                    .ids
                    .insert(handle, CmId::new(session, channel, ps, qp_type));
                if let Some(ch) = self.cm.channels.get_mut(&channel) {
                    ch.users += 1;
                }
                tracing::debug!(session, id = handle.0, ps, ?qp_type, "cm id created");
                cm(CmReply::Id { handle })
            }
            C::DestroyId { id } => {
                self.cm_view().id(session, id)?;
                self.cm_destroy_id(now, id);
                ok(ReplyBody::Ok)
            }
            C::MigrateId { id, channel } => {
                let old = self.cm_view().id(session, id)?.channel;
                self.cm_view().channel(session, channel)?;
                if old != channel {
                    let moved = match self.cm.channels.get_mut(&old) {
                        Some(ch) => {
                            ch.users = ch.users.saturating_sub(1);
                            ch.remove_where(|e| e.id == id)
                        }
                        None => Vec::new(),
                    };
                    if let Some(ch) = self.cm.channels.get_mut(&channel) {
                        ch.users += 1;
                    }
                    self.cm_id_mut(session, id)?.channel = channel;
                    for ev in moved {
                        self.cm.push_event(ev);
                    }
                }
                ok(ReplyBody::Ok)
            }
            C::BindAddr { id, addr } => {
                if self.cm_view().id(session, id)?.state != IdState::Idle {
                    return Err(libc::EINVAL);
                }
                let privileged = self.cm_privileged(session);
                self.cm_addressing().bind(session, id, addr, privileged)?;
                cm(CmReply::Info(self.cm_view().info(id)))
            }
            C::ResolveAddr {
                id,
                src,
                dst,
                timeout_ms: _,
            } => {
                let privileged = self.cm_privileged(session);
                self.cm_addressing()
                    .resolve_addr(session, id, src, dst, privileged)?;
                ok(ReplyBody::Ok)
            }
            C::ResolveRoute { id, timeout_ms: _ } => {
                if self.cm_view().id(session, id)?.state != IdState::AddrResolved {
                    return Err(libc::EINVAL);
                }
                if self.cm_siw_dev(session, id)?.is_some() {
                    self.cm_siw_resolve_route(session, id)?;
                } else {
                    self.cm_addressing().resolve_route(session, id)?;
                }
                ok(ReplyBody::Ok)
            }
            C::Listen { id, backlog } => {
                self.cm_listen(session, id, backlog)?;
                ok(ReplyBody::Ok)
            }
            C::Connect { id, param } => {
                self.cm_connect(now, session, id, param)?;
                ok(ReplyBody::Ok)
            }
            C::Accept { id, param } => {
                self.cm_accept(now, session, id, param)?;
                ok(ReplyBody::Ok)
            }
            C::Reject { id, private_data } => {
                if self.cm_siw_dev(session, id)?.is_some() {
                    self.cm_siw_reject(now, session, id, &private_data)?;
                    return ok(ReplyBody::Ok);
                }
                let (dev, conn) = self.cm_view().conn(session, id)?;
                self.with_agent(dev, |a| {
                    a.reject(now, conn, reason::CONSUMER_DEFINED, &private_data)
                })?;
                self.cm_sync_conn(id);
                ok(ReplyBody::Ok)
            }
            C::Establish { id } => {
                // iWARP: the device established the connection (the CMA's rdma_establish
                // is an IB CM call).
                if self.cm_siw_dev(session, id)?.is_some() {
                    return ok(ReplyBody::Ok);
                }
                let (dev, conn) = self.cm_view().conn(session, id)?;
                self.with_agent(dev, |a| a.establish(now, conn))?;
                ok(ReplyBody::Ok)
            }
            C::Notify { id, event } => {
                // rdma_notify is an IB CM call; the CMA answers 0 on iWARP.
                if self.cm_siw_dev(session, id)?.is_some() {
                    return ok(ReplyBody::Ok);
                }
                let (dev, conn) = self.cm_view().conn(session, id)?;
                if event != event_type::COMM_EST {
                    return Err(libc::EINVAL);
                }
                self.with_agent(dev, |a| {
                    if a.state(conn) == Some(core_cm::CmState::Established) {
                        Err(emu_core::Errno(libc::EISCONN))
                    } else {
                        a.establish(now, conn)
                    }
                })?;
                ok(ReplyBody::Ok)
            }
            C::Disconnect { id } => {
                if self.cm_siw_dev(session, id)?.is_some() {
                    self.cm_siw_disconnect(session, id)?;
                    return ok(ReplyBody::Ok);
                }
                let (dev, conn) = self.cm_view().conn(session, id)?;
                self.with_agent(dev, |a| a.disconnect(now, conn, &[]))?;
                ok(ReplyBody::Ok)
            }
            C::InitQpAttr { id, qp_state } => {
                let (attr, mask) = self.cm_init_qp_attr(session, id, qp_state)?;
                cm(CmReply::QpAttr { attr, mask })
            }
            C::Query { id } => {
                self.cm_view().id(session, id)?;
                cm(CmReply::Info(self.cm_view().info(id)))
            }
            C::GetEvent { channel } => {
                self.cm_view().channel(session, channel)?;
                let ev = self
                    .cm
                    .channels
                    .get_mut(&channel)
                    .and_then(EventChannel::pop)
                    .ok_or(libc::EAGAIN)?;
                if ev.event == event::CONNECT_REQUEST {
                    // The ucma gives the listener its backlog slot back when the request
                    // is fetched.
                    if let Some(l) = ev.listen_id.and_then(|l| self.cm.ids.get_mut(&l)) {
                        l.pending = l.pending.saturating_sub(1);
                    }
                }
                cm(CmReply::Event(ev))
            }
            C::JoinMulticast {
                id,
                addr,
                join_flags,
            } => {
                let joined = mcast::join(self.cm_view(), session, id, addr, join_flags)?;
                self.cm.push_event(joined);
                ok(ReplyBody::Ok)
            }
            C::LeaveMulticast { id, addr } => {
                let channel = self.cm_view().id(session, id)?.channel;
                if let Some(ch) = self.cm.channels.get_mut(&channel) {
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
                self.cm_set_option(session, id, level, optname, &value)?;
                ok(ReplyBody::Ok)
            }
            C::ListIds => cm(CmReply::Ids(self.cm_list_ids(session))),
        }
    }

    /// `rdma-emu res cm_id`: the ids of every session of the caller's user (all of them
    /// for root), like `rdma resource show cm_id`.
    fn cm_list_ids(&self, caller: SessionId) -> Vec<CmIdSummary> {
        let uid_of = |s: SessionId| self.sessions.get(&s).map(|s| s.uid);
        let caller_uid = uid_of(caller);
        let mut out: Vec<CmIdSummary> = self
            .cm
            .ids
            .iter()
            .filter(|(_, id)| caller_uid == Some(0) || uid_of(id.session) == caller_uid)
            .map(|(&h, id)| {
                let info = self.cm_view().info(h);
                CmIdSummary {
                    id: h,
                    pid: self.sessions.get(&id.session).map_or(0, |s| s.pid),
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

    /// Forgets the connection of an id once the agent has dropped it (rejected,
    /// unreachable, time wait over), so the agent may reuse its communication ID.
    fn cm_sync_conn(&mut self, h: Handle) {
        let Some(id) = self.cm.ids.get(&h) else {
            return;
        };
        let (Some(dev), Some(conn)) = (id.dev, id.conn) else {
            return;
        };
        let alive = self
            .devices
            .get(dev)
            .and_then(Option::as_ref)
            .is_some_and(|d| d.cm.state(conn).is_some());
        if !alive {
            if self.cm.conns.get(&(dev, conn)) == Some(&h) {
                self.cm.conns.remove(&(dev, conn));
            }
            if let Some(id) = self.cm.ids.get_mut(&h) {
                id.conn = None;
            }
        }
    }
}
