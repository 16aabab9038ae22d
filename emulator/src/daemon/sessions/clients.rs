//! The clients connected to the control socket, and what a request that makes or finds
//! their objects touches ([`Clients`]).
//!
//! Every handle in a request must name an object of the requesting session (another
//! session's handle is ENOENT, as if it did not exist) of the right kind (else EINVAL).

use crate::daemon::devices::device::ServedDevice;
use crate::daemon::devices::memory::ProcMem;
use crate::daemon::sessions::objects::{Kind, Object, SessionId};
use crate::daemon::sessions::users::{Resource, UserLimits, Users};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::OwnedFd;
use wire::client::proto::Handle;

/// Most objects one session may hold.
pub const MAX_OBJECTS_PER_SESSION: usize = 1 << 18;

/// A connected client, named by the kernel's credentials of its connection
/// (`SO_PEERCRED`, `SO_PEERGROUPS`) as they were when it connected (`users.rs`).
pub struct Session {
    pub sock: OwnedFd,
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub hello: bool,
    pub objects: usize,
}

/// Counters of hostile or broken input that never reaches a core.
#[derive(Debug, Default, Clone, Copy)]
pub struct DaemonCounters {
    pub bad_requests: u64,
    pub sessions_closed_for_garbage: u64,
    pub bad_wqes: u64,
    pub broken_rings: u64,
    /// Privileged requests refused to clients that are not administrators (`users.rs`).
    pub refused_privileged: u64,
    /// Requests refused because the client claimed another process's pid or memory.
    pub refused_credentials: u64,
}

/// The parts of the engine a request that creates, finds or forgets objects touches,
/// lent for one request: the sessions, their objects, the rings the engine drains, the
/// per-user accounts, the devices the objects live on and the clients' memory.
pub(in crate::daemon) struct Clients<'a> {
    pub(in crate::daemon) sessions: &'a mut HashMap<SessionId, Session>,
    pub(in crate::daemon) objects: &'a mut BTreeMap<Handle, Object>,
    pub(in crate::daemon) rings: &'a mut BTreeSet<Handle>,
    pub(in crate::daemon) users: &'a mut Users,
    pub(in crate::daemon) limits: &'a UserLimits,
    pub(in crate::daemon) next_handle: &'a mut u32,
    pub(in crate::daemon) devices: &'a mut [Option<ServedDevice>],
    pub(in crate::daemon) mem: &'a mut ProcMem,
}

impl Clients<'_> {
    /// An object of the session, or ENOENT.
    pub(in crate::daemon) fn lookup(&self, session: SessionId, h: Handle) -> Result<&Object, i32> {
        lookup(self.objects, session, h)
    }

    /// (ctx, core PD id) of a PD handle.
    pub(in crate::daemon) fn pd(
        &self,
        session: SessionId,
        pd: Handle,
    ) -> Result<(Handle, u32), i32> {
        pd_of(self.objects, session, pd)
    }

    /// The core id of a CQ, which must be under `ctx`.
    pub(in crate::daemon) fn cq_in(
        &self,
        session: SessionId,
        h: Handle,
        ctx: Handle,
    ) -> Result<u32, i32> {
        cq_in(self.objects, session, h, ctx)
    }

    /// The device the session's context `ctx` is open on.
    pub(in crate::daemon) fn device_of(
        &mut self,
        session: SessionId,
        ctx: Handle,
    ) -> Result<&mut ServedDevice, i32> {
        let dev = ctx_device(self.objects, session, ctx)?;
        self.devices
            .get_mut(dev)
            .and_then(Option::as_mut)
            .ok_or(libc::ENODEV)
    }

    /// Records a new object of the session, charged to its user: ENOMEM past the
    /// session's or the user's limit.
    pub(in crate::daemon) fn insert(
        &mut self,
        session: SessionId,
        ctx: Option<Handle>,
        kind: Kind,
    ) -> Result<Handle, i32> {
        let s = self.sessions.get_mut(&session).ok_or(libc::ENOENT)?;
        if s.objects >= MAX_OBJECTS_PER_SESSION {
            return Err(libc::ENOMEM);
        }
        let uid = s.uid;
        if let Some(r) = Resource::of(&kind) {
            self.users.charge(self.limits, uid, r)?;
        }
        s.objects += 1;
        let h = self.alloc_handle();
        self.objects.insert(
            h,
            Object {
                session,
                uid,
                ctx: ctx.unwrap_or(h),
                kind,
            },
        );
        Ok(h)
    }

    /// Removes an object from the tables (the core already destroyed or released it).
    pub(in crate::daemon) fn forget(&mut self, h: Handle) {
        let Some(obj) = self.objects.remove(&h) else {
            return;
        };
        self.rings.remove(&h);
        if let Kind::Mr { shared, .. } = &obj.kind {
            for &(addr, len) in shared {
                self.mem.detach_shared(obj.ctx.0, addr, len);
            }
        }
        if let Some(s) = self.sessions.get_mut(&obj.session) {
            s.objects = s.objects.saturating_sub(1);
        }
        if let Some(r) = Resource::of(&obj.kind) {
            self.users.release(obj.uid, r);
        }
        let dev = match self.objects.get(&obj.ctx) {
            Some(Object {
                kind: Kind::Ctx(c), ..
            }) => Some(c.dev),
            _ => None,
        };
        let d = dev
            .and_then(|i| self.devices.get_mut(i))
            .and_then(Option::as_mut);
        match (&obj.kind, d) {
            (Kind::Cq(cq), Some(d)) => {
                d.cq_by_id.remove(&cq.id);
                if let Some(Object {
                    kind: Kind::Channel(ch),
                    ..
                }) = cq.channel.and_then(|c| self.objects.get(&c))
                {
                    ch.users.set(ch.users.get().saturating_sub(1));
                }
            }
            (Kind::Qp(qp), Some(d)) => {
                d.qp_by_qpn.remove(&qp.qpn);
            }
            (Kind::Srq(srq), Some(d)) => {
                d.srq_by_id.remove(&srq.id);
            }
            _ => {}
        }
    }

    /// [`Clients::insert`] of an object the engine of `ctx`'s device already made; when
    /// it fails, `undo` removes the engine's object.
    pub(in crate::daemon) fn insert_or_undo(
        &mut self,
        session: SessionId,
        ctx: Handle,
        kind: Kind,
        undo: impl FnOnce(&mut ServedDevice),
    ) -> Result<Handle, i32> {
        let r = self.insert(session, Some(ctx), kind);
        if r.is_err() {
            if let Ok(d) = self.device_of(session, ctx) {
                undo(d);
            }
        }
        r
    }

    /// A fresh handle, never 0, never one in use.
    pub(in crate::daemon) fn alloc_handle(&mut self) -> Handle {
        loop {
            let h = Handle(*self.next_handle);
            *self.next_handle = self.next_handle.wrapping_add(1).max(1);
            if !self.objects.contains_key(&h) {
                return h;
            }
        }
    }
}

/// An object of the session, or ENOENT.
pub(in crate::daemon) fn lookup(
    objects: &BTreeMap<Handle, Object>,
    session: SessionId,
    h: Handle,
) -> Result<&Object, i32> {
    match objects.get(&h) {
        Some(o) if o.session == session => Ok(o),
        _ => Err(libc::ENOENT),
    }
}

/// The index of the device the session's context `ctx` is open on.
pub(in crate::daemon) fn ctx_device(
    objects: &BTreeMap<Handle, Object>,
    session: SessionId,
    ctx: Handle,
) -> Result<usize, i32> {
    match &lookup(objects, session, ctx)?.kind {
        Kind::Ctx(c) => Ok(c.dev),
        _ => Err(libc::EINVAL),
    }
}

/// (ctx, core PD id) of a PD handle.
pub(in crate::daemon) fn pd_of(
    objects: &BTreeMap<Handle, Object>,
    session: SessionId,
    pd: Handle,
) -> Result<(Handle, u32), i32> {
    match lookup(objects, session, pd)? {
        Object {
            kind: Kind::Pd { id },
            ctx,
            ..
        } => Ok((*ctx, *id)),
        _ => Err(libc::EINVAL),
    }
}

/// The core id of a CQ, which must be under `ctx`.
pub(in crate::daemon) fn cq_in(
    objects: &BTreeMap<Handle, Object>,
    session: SessionId,
    h: Handle,
    ctx: Handle,
) -> Result<u32, i32> {
    match lookup(objects, session, h)? {
        Object {
            kind: Kind::Cq(c),
            ctx: c_ctx,
            ..
        } if *c_ctx == ctx => Ok(c.id),
        _ => Err(libc::EINVAL),
    }
}
