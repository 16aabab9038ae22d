//! Control requests: every verb a client asks for, validated, then done by the core.
//!
//! Every handle in a request must name an object of the requesting session
//! (another session's handle is ENOENT, as if it did not exist) of the right kind (else
//! EINVAL); sizes are bounded by the device limits; descriptors must be what the message
//! says.

use crate::daemon::control::queues;
use crate::daemon::devices::nic::Rereg;
use crate::daemon::served::{self, Served};
use crate::daemon::sessions::answer::{ok, Answer};
use crate::daemon::sessions::clients as sessions;
use crate::daemon::sessions::objects::{Channel, Ctx, Kind, Object, SessionId};
use crate::daemon::sys::{self, Mapping};
use crate::daemon::{config, devices::device::ServedDevice};
use std::cell::Cell;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;
use wire::client::proto::Handle;
use wire::client::ring::SESSION_PAGE_LEN;
use wire::client::verbs::{access as acc, rereg_flags};
use wire::client::xrc::XrcRequest;
use wire::client::{QpInitAttr, ReplyBody, RequestBody, MAX_SHARED_PAGES, PROTOCOL_VERSION};

/// Rights that let the device write a region (the kernel's `ib_access_writable`).
const WRITE_RIGHTS: u32 = acc::LOCAL_WRITE | acc::REMOTE_WRITE | acc::REMOTE_ATOMIC;

/// `/proc` filesystem magic (statfs f_type).
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// Checks the descriptor is a `/proc/<pid>/mem` file opened for reading and writing
/// (EINVAL otherwise), of the peer itself (`peer_pid`, EPERM otherwise) when it comes from
/// the daemon's own `/proc`. The kernel checked the client's right to open it; the pid
/// check keeps a client from handing over another process's memory (a child's, say) as
/// its own. A client in another PID namespace opens its own `/proc`, whose numbers are
/// not the daemon's: there the kernel's check stands alone.
fn check_proc_mem(fd: &OwnedFd, peer_pid: u32) -> Result<(), i32> {
    use std::os::unix::fs::MetadataExt;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default();
    if link.file_name().is_none_or(|n| n != "mem") {
        return Err(libc::EINVAL);
    }
    // SAFETY: statfs/fstat/fcntl on a descriptor we own, with zeroed out-parameters.
    let (is_proc_rw, dev) = unsafe {
        let mut sf: libc::statfs = std::mem::zeroed();
        let mut st: libc::stat = std::mem::zeroed();
        let ok = libc::fstatfs(fd.as_raw_fd(), &mut sf) == 0
            && sf.f_type as i64 == PROC_SUPER_MAGIC
            && libc::fstat(fd.as_raw_fd(), &mut st) == 0
            && libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) & libc::O_ACCMODE == libc::O_RDWR;
        (ok, st.st_dev)
    };
    if !is_proc_rw {
        return Err(libc::EINVAL);
    }
    let ours = std::fs::metadata("/proc/self").is_ok_and(|m| m.dev() == dev);
    let pid = link
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse::<u32>().ok());
    if ours && pid != Some(peer_pid) {
        return Err(libc::EPERM);
    }
    Ok(())
}

/// An object of the session, or ENOENT.
pub(in crate::daemon) fn lookup(
    st: &Served,
    session: SessionId,
    h: Handle,
) -> Result<&Object, i32> {
    sessions::lookup(&st.objects, session, h)
}

pub(in crate::daemon) fn device_of(
    st: &mut Served,
    session: SessionId,
    ctx: Handle,
) -> Result<&mut ServedDevice, i32> {
    let dev = sessions::ctx_device(&st.objects, session, ctx)?;
    st.devices
        .get_mut(dev)
        .and_then(Option::as_mut)
        .ok_or(libc::ENODEV)
}

/// (ctx, core PD id) of a PD handle.
pub(in crate::daemon) fn pd_of(
    st: &Served,
    session: SessionId,
    pd: Handle,
) -> Result<(Handle, u32), i32> {
    sessions::pd_of(&st.objects, session, pd)
}

pub(in crate::daemon) fn insert(
    st: &mut Served,
    session: SessionId,
    ctx: Option<Handle>,
    kind: Kind,
) -> Result<Handle, i32> {
    st.clients().insert(session, ctx, kind)
}

pub(in crate::daemon) fn dispatch(
    st: &mut Served,
    session: SessionId,
    body: RequestBody,
    mut fds: Vec<OwnedFd>,
) -> Answer {
    let hello = st.sessions.get(&session).is_some_and(|s| s.hello);
    let fds_wanted = match &body {
        RequestBody::OpenDevice { .. }
        | RequestBody::CreateCompChannel { .. }
        | RequestBody::Capture { .. }
        | RequestBody::Cm(wire::client::cm::CmRequest::CreateChannel)
        | RequestBody::Xrc(XrcRequest::Open { file: true, .. }) => 1,
        RequestBody::RegMr { shared, .. } if shared.len() <= MAX_SHARED_PAGES => shared.len(),
        RequestBody::RegMr { .. } => return Err(libc::EINVAL),
        _ => 0,
    };
    if fds.len() != fds_wanted {
        return Err(libc::EINVAL);
    }
    if !hello && !matches!(body, RequestBody::Hello { .. }) {
        return Err(libc::EPROTO);
    }
    // Changing devices, faults or watching every client's traffic is for
    // administrators, not for everyone the socket lets in (users.rs).
    if crate::daemon::sessions::users::is_privileged(&body) {
        let admin = st.sessions.get(&session).is_some_and(|s| {
            crate::daemon::sessions::users::is_admin(
                s.uid,
                s.gid,
                &s.groups,
                sys::euid(),
                st.cfg.admin_group,
            )
        });
        if !admin {
            st.counters.refused_privileged += 1;
            tracing::info!(session, "privileged request refused");
            return Err(libc::EACCES);
        }
    }
    let now = Instant::now();
    use RequestBody as R;
    match body {
        R::Hello { version, pid } => {
            if version != PROTOCOL_VERSION {
                return Err(libc::EPROTONOSUPPORT);
            }
            // The pid a client names must be its own (the kernel's SO_PEERCRED).
            let peer = st.sessions.get(&session).map_or(0, |s| s.pid);
            if !crate::daemon::sessions::users::is_own_pid(peer, pid) {
                st.counters.refused_credentials += 1;
                tracing::info!(session, peer, claimed = pid, "Hello with another pid");
                return Err(libc::EPERM);
            }
            if let Some(s) = st.sessions.get_mut(&session) {
                s.hello = true;
            }
            let devices = st
                .devices
                .iter()
                .flatten()
                .map(ServedDevice::summary)
                .collect();
            ok(ReplyBody::Hello {
                version: PROTOCOL_VERSION,
                devices,
            })
        }
        R::OpenDevice { name } => open_device(st, session, &name, fds.pop().ok_or(libc::EINVAL)?),
        R::CloseDevice { ctx } => {
            if !matches!(lookup(st, session, ctx)?.kind, Kind::Ctx(_)) {
                return Err(libc::EINVAL);
            }
            st.release_ctx(ctx);
            ok(ReplyBody::Ok)
        }
        R::QueryDevice { ctx } => ok(ReplyBody::DeviceAttr(
            device_of(st, session, ctx)?.device_attr(),
        )),
        R::QueryPort { ctx, port } => {
            let d = device_of(st, session, ctx)?;
            if port != 1 {
                return Err(libc::EINVAL);
            }
            ok(ReplyBody::PortAttr(d.port_attr()))
        }
        R::QueryGid { ctx, port, index } => {
            let d = device_of(st, session, ctx)?;
            if port != 1 || index as usize >= crate::daemon::devices::gid_table::GID_TBL_LEN {
                return Err(libc::EINVAL);
            }
            // An empty slot (its address went away, or never was) is the zero GID.
            ok(ReplyBody::Gid(d.gid_entry(index)))
        }
        R::AllocPd { ctx } => {
            let d = device_of(st, session, ctx)?;
            let id = d.nic.alloc_pd(ctx.0)?;
            let handle = insert(st, session, Some(ctx), Kind::Pd { id })?;
            ok(ReplyBody::Pd { handle })
        }
        R::DeallocPd { pd } => {
            let (ctx, id) = pd_of(st, session, pd)?;
            device_of(st, session, ctx)?.nic.dealloc_pd(id)?;
            st.forget(pd);
            ok(ReplyBody::Ok)
        }
        R::RegMr {
            pd,
            addr,
            length,
            iova,
            access,
            shared,
        } => {
            let (ctx, pd_id) = pd_of(st, session, pd)?;
            // ODP (docs/compatibility.md): EOPNOTSUPP where the device has none; an ODP
            // region's pages need not be mapped yet and are never shared.
            let odp = access & wire::client::verbs::access::ON_DEMAND != 0;
            if odp
                && device_of(st, session, ctx)?
                    .device_attr()
                    .odp_caps
                    .general_caps
                    == 0
            {
                return Err(libc::EOPNOTSUPP);
            }
            if odp && !shared.is_empty() {
                return Err(libc::EINVAL);
            }
            // Shared pages must lie inside the region they are offered for.
            let inside = |p: &wire::client::SharedPages| {
                p.addr >= addr
                    && p.addr.checked_add(p.len).is_some_and(|end| {
                        addr.checked_add(length).is_some_and(|mr_end| end <= mr_end)
                    })
            };
            if !shared.iter().all(inside) {
                return Err(libc::EINVAL);
            }
            if !odp && !st.mem.probe(ctx.0, addr, length) {
                return Err(libc::EFAULT);
            }
            let (lkey, rkey) = device_of(st, session, ctx)?
                .nic
                .reg_mr(ctx.0, pd_id, addr, length, iova, access)?;
            let mut attached = Vec::new();
            for (p, fd) in shared.into_iter().zip(fds) {
                if st.mem.attach_shared(ctx.0, p, fd) {
                    attached.push((p.addr, p.len));
                }
            }
            let mr = Kind::Mr {
                lkey,
                // An ODP region pins nothing: the kernel charges it nothing against
                // RLIMIT_MEMLOCK, so it counts no bytes toward `max_mr_bytes`.
                length: if odp { 0 } else { length },
                shared: attached.clone(),
                writable: access & WRITE_RIGHTS != 0,
            };
            let handle = match insert(st, session, Some(ctx), mr) {
                Ok(h) => h,
                Err(e) => {
                    // The MR never became an object: undo the registration.
                    for (a, len) in attached {
                        st.mem.detach_shared(ctx.0, a, len);
                    }
                    let _ = device_of(st, session, ctx)?.nic.dereg_mr(lkey);
                    return Err(e);
                }
            };
            ok(ReplyBody::Mr { handle, lkey, rkey })
        }
        R::DeregMr { mr } => {
            let (ctx, lkey) = match lookup(st, session, mr)? {
                Object {
                    kind: Kind::Mr { lkey, .. },
                    ctx,
                    ..
                } => (*ctx, *lkey),
                _ => return Err(libc::EINVAL),
            };
            device_of(st, session, ctx)?.nic.dereg_mr(lkey)?;
            st.forget(mr);
            ok(ReplyBody::Ok)
        }
        R::ReregMr {
            mr,
            flags,
            pd,
            access,
            ..
        } => {
            let (ctx, lkey, writable) = match lookup(st, session, mr)? {
                Object {
                    kind: Kind::Mr { lkey, writable, .. },
                    ctx,
                    ..
                } => (*ctx, *lkey, *writable),
                _ => return Err(libc::EINVAL),
            };
            // The new PD: one of this context's (EINVAL otherwise, as uverbs' lookup).
            let pd = match pd.filter(|_| flags & rereg_flags::CHANGE_PD != 0) {
                Some(h) => match pd_of(st, session, h) {
                    Ok((c, id)) if c == ctx => id,
                    _ => return Err(libc::EINVAL),
                },
                None if flags & rereg_flags::CHANGE_PD != 0 => return Err(libc::EINVAL),
                None => 0,
            };
            let r = Rereg {
                flags,
                pd,
                access,
                pinned_writable: writable,
            };
            let d = device_of(st, session, ctx)?;
            let (lkey, rkey) = d.nic.rereg_mr(lkey, &r)?;
            ok(ReplyBody::Mr {
                handle: mr,
                lkey,
                rkey,
            })
        }
        R::AdviseMr {
            pd,
            advice,
            flags,
            sg_list,
        } => {
            let (ctx, pd_id) = pd_of(st, session, pd)?;
            let dev = sessions::ctx_device(&st.objects, session, ctx)?;
            let d = st.devices.get(dev).and_then(Option::as_ref);
            let nic = &*d.ok_or(libc::ENODEV)?.nic;
            crate::daemon::devices::odp::advise_mr(
                nic,
                &mut st.mem,
                pd_id,
                advice,
                flags,
                &sg_list,
            )?;
            ok(ReplyBody::Ok)
        }
        R::AllocMw { pd, mw_type } => {
            let (ctx, pd_id) = pd_of(st, session, pd)?;
            let (id, rkey) = device_of(st, session, ctx)?
                .nic
                .alloc_mw(ctx.0, pd_id, mw_type)?;
            let mw = Kind::Mw {
                id,
                index: rkey >> 8,
                mw_type,
            };
            let handle = insert(st, session, Some(ctx), mw)?;
            ok(ReplyBody::Mw { handle, rkey })
        }
        R::DeallocMw { mw } => {
            let (ctx, id) = match lookup(st, session, mw)? {
                Object {
                    kind: Kind::Mw { id, .. },
                    ctx,
                    ..
                } => (*ctx, *id),
                _ => return Err(libc::EINVAL),
            };
            device_of(st, session, ctx)?.nic.dealloc_mw(id)?;
            st.forget(mw);
            ok(ReplyBody::Ok)
        }
        R::CreateCompChannel { ctx } => {
            device_of(st, session, ctx)?;
            let write = fds.pop().ok_or(libc::EINVAL)?;
            if !sys::is_pipe_write_end(&write) {
                return Err(libc::EINVAL);
            }
            let handle = insert(
                st,
                session,
                Some(ctx),
                Kind::Channel(Channel {
                    write,
                    users: Cell::new(0),
                }),
            )?;
            ok(ReplyBody::CompChannel { handle })
        }
        R::DestroyCompChannel { channel } => match &lookup(st, session, channel)?.kind {
            Kind::Channel(ch) if ch.users.get() > 0 => Err(libc::EBUSY),
            Kind::Channel(_) => {
                st.forget(channel);
                ok(ReplyBody::Ok)
            }
            _ => Err(libc::EINVAL),
        },
        R::CreateCq {
            ctx,
            cqe,
            channel,
            comp_vector,
            timestamps,
        } => {
            emu_core::check_comp_vector(comp_vector).map_err(|e| e.0)?;
            queues::create_cq(&mut st.clients(), session, ctx, cqe, channel, timestamps)
        }
        R::DestroyCq { cq } => {
            let (ctx, id) = match lookup(st, session, cq)? {
                Object {
                    kind: Kind::Cq(c),
                    ctx,
                    ..
                } => (*ctx, c.id),
                _ => return Err(libc::EINVAL),
            };
            device_of(st, session, ctx)?.nic.destroy_cq(id)?;
            st.forget(cq);
            ok(ReplyBody::Ok)
        }
        R::ResizeCq { cq, cqe } => queues::resize_cq(&mut st.clients(), session, cq, cqe),
        R::CreateSrq { pd, attr } => queues::create_srq(&mut st.clients(), session, pd, attr),
        R::ModifySrq { srq, attr, mask } => {
            let (ctx, id) = srq_of(st, session, srq)?;
            device_of(st, session, ctx)?
                .nic
                .modify_srq(id, &attr, mask)?;
            ok(ReplyBody::Ok)
        }
        R::QuerySrq { srq } => {
            let (ctx, id) = srq_of(st, session, srq)?;
            ok(ReplyBody::SrqAttr(
                device_of(st, session, ctx)?.nic.query_srq(id)?,
            ))
        }
        R::DestroySrq { srq } => {
            let (ctx, id) = srq_of(st, session, srq)?;
            device_of(st, session, ctx)?.nic.destroy_srq(id)?;
            st.forget(srq);
            ok(ReplyBody::Ok)
        }
        R::CreateQp { pd, init } => queues::create_qp(&mut st.clients(), session, pd, init),
        R::ModifyQp { qp, attr, mask } => {
            let (ctx, qpn) = qp_of(st, session, qp)?;
            device_of(st, session, ctx)?
                .nic
                .modify_qp(now, qpn, &attr, mask)?;
            // A reset drops the queued receives without completions.
            crate::daemon::datapath::rings::release_recv_slots_of(&st.objects, &st.devices, qp);
            ok(ReplyBody::Ok)
        }
        R::QueryQp { qp, mask: _ } => {
            let (ctx, qpn) = qp_of(st, session, qp)?;
            let init = match &lookup(st, session, qp)?.kind {
                Kind::Qp(q) => QpInitAttr {
                    send_cq: q.send_cq,
                    recv_cq: q.recv_cq,
                    srq: q.srq,
                    cap: q.cap,
                    qp_type: q.qp_type,
                    sq_sig_all: q.sq_sig_all,
                },
                _ => return Err(libc::EINVAL),
            };
            let mut attr = device_of(st, session, ctx)?.nic.query_qp(qpn)?;
            attr.cap = init.cap;
            ok(ReplyBody::QpAttrs { attr, init })
        }
        R::DestroyQp { qp } => {
            let (ctx, qpn) = qp_of(st, session, qp)?;
            device_of(st, session, ctx)?.nic.destroy_qp(qpn)?;
            st.forget(qp);
            ok(ReplyBody::Ok)
        }
        R::CreateAh { pd, attr } => {
            let (ctx, pd_id) = pd_of(st, session, pd)?;
            let id = device_of(st, session, ctx)?.nic.create_ah(pd_id, &attr)?;
            let handle = insert(st, session, Some(ctx), Kind::Ah { id })?;
            ok(ReplyBody::Ah { handle })
        }
        R::DestroyAh { ah } => {
            let (ctx, id) = match lookup(st, session, ah)? {
                Object {
                    kind: Kind::Ah { id },
                    ctx,
                    ..
                } => (*ctx, *id),
                _ => return Err(libc::EINVAL),
            };
            device_of(st, session, ctx)?.nic.destroy_ah(id)?;
            st.forget(ah);
            ok(ReplyBody::Ok)
        }
        R::Stat { device, qpn } => {
            queues::stat(&st.devices, &st.counters, &st.users, &st.mem, device, qpn)
        }
        R::Xrc(req) => {
            let closed = match req {
                XrcRequest::Close { xrcd } => Some(xrcd),
                _ => None,
            };
            let answer = crate::daemon::control::xrc::handle(&mut st.clients(), session, req, fds)?;
            if let Some(h) = closed {
                st.forget(h);
            }
            Ok(answer)
        }
        R::Cm(req) => {
            if let wire::client::cm::CmRequest::Connect { id, param }
            | wire::client::cm::CmRequest::Accept { id, param } = &req
            {
                cm_qp_not_foreign(st, session, *id, param.qp_num, now)?;
            }
            crate::daemon::cm::cm_request(&mut st.cm(), session, req, fds, now)
        }
        R::LinkShow => ok(ReplyBody::Links(
            st.devices
                .iter()
                .flatten()
                .map(ServedDevice::link_info)
                .collect(),
        )),
        R::LinkAdd {
            name,
            link_type,
            netdev,
            mpa_crc,
            mpa_markers,
            backend,
            default_tos,
            cnp_dscp,
            addrs,
        } => {
            let backend =
                crate::daemon::link::backend::Backend::choose(&link_type, backend.as_deref())
                    .map_err(|e| {
                        tracing::info!(error = %e, "link add refused");
                        e.errno()
                    })?;
            let spec = config::DeviceSpec {
                mpa_crc,
                mpa_markers,
                default_tos,
                cnp_dscp,
                addrs,
                backend: Some(backend.name().to_string()),
                ..config::DeviceSpec::new(&name, &link_type, &netdev)
            };
            spec.validate().map_err(|e| {
                tracing::info!(error = %e, "link add refused");
                // A type this daemon does not serve is EOPNOTSUPP, a bad request EINVAL.
                if matches!(link_type.as_str(), "rxe" | "siw") {
                    libc::EINVAL
                } else {
                    libc::EOPNOTSUPP
                }
            })?;
            if st.device_index(&name).is_some() {
                return Err(libc::EEXIST);
            }
            let dev = served::open(
                &spec,
                Some(backend),
                st.factory,
                st.cfg.seed,
                st.cfg.udp_src_port,
            )
            .map_err(|e| {
                tracing::info!(error = %e, "link add refused");
                e.raw_os_error().unwrap_or(match e.kind() {
                    std::io::ErrorKind::NotFound => libc::ENODEV,
                    std::io::ErrorKind::Unsupported => libc::EOPNOTSUPP,
                    std::io::ErrorKind::PermissionDenied => libc::EPERM,
                    std::io::ErrorKind::AddrNotAvailable => libc::EADDRNOTAVAIL,
                    std::io::ErrorKind::ResourceBusy => libc::EBUSY,
                    std::io::ErrorKind::AddrInUse => libc::EADDRINUSE,
                    _ => libc::EINVAL,
                })
            })?;
            st.add_device(dev)
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
            ok(ReplyBody::Ok)
        }
        R::Capture { device } => {
            let i = st.device_index(&device).ok_or(libc::ENODEV)?;
            let w = fds.pop().ok_or(libc::EINVAL)?;
            if !sys::is_pipe_write_end(&w) {
                return Err(libc::EINVAL);
            }
            let d = st.devices[i].as_mut().ok_or(libc::ENODEV)?;
            let cap = crate::daemon::link::capture::Capture::new(w, d.netdev.mac)
                .map_err(|_| libc::EINVAL)?;
            d.port_mut().add_capture(cap);
            ok(ReplyBody::Ok)
        }
        R::LinkDel { name } => {
            st.remove_device(&name)?;
            ok(ReplyBody::Ok)
        }
        R::Fault(req) => st.faults().request(now, req),
        R::QpList { device } => queues::qp_list(&st.devices, &st.objects, &st.sessions, device),
        R::AttachMcast { qp, gid, lid } => {
            let (ctx, qpn) = qp_of(st, session, qp)?;
            mcast_of(st, session, ctx, qpn, gid, lid, true)
        }
        R::DetachMcast { qp, gid, lid } => {
            let (ctx, qpn) = qp_of(st, session, qp)?;
            mcast_of(st, session, ctx, qpn, gid, lid, false)
        }
    }
}

/// `AttachMcast` / `DetachMcast` of QP `qpn` on the device of `ctx` (`devices/mcast.rs`).
fn mcast_of(
    st: &mut Served,
    session: SessionId,
    ctx: Handle,
    qpn: u32,
    gid: [u8; 16],
    lid: u16,
    attach: bool,
) -> Answer {
    let dev = sessions::ctx_device(&st.objects, session, ctx)?;
    let d = st
        .devices
        .get_mut(dev)
        .and_then(Option::as_mut)
        .ok_or(libc::ENODEV)?;
    let token = |slot| crate::daemon::tokens::udp_token(dev, slot);
    crate::daemon::devices::mcast::mcast_verb(d, &st.epoll, token, qpn, gid, lid, attach)?;
    ok(ReplyBody::Ok)
}

fn srq_of(st: &Served, session: SessionId, h: Handle) -> Result<(Handle, u32), i32> {
    match lookup(st, session, h)? {
        Object {
            kind: Kind::Srq(s),
            ctx,
            ..
        } => Ok((*ctx, s.id)),
        _ => Err(libc::EINVAL),
    }
}

fn qp_of(st: &Served, session: SessionId, h: Handle) -> Result<(Handle, u32), i32> {
    match lookup(st, session, h)? {
        Object {
            kind: Kind::Qp(q),
            ctx,
            ..
        } => Ok((*ctx, q.qpn)),
        _ => Err(libc::EINVAL),
    }
}

/// Refuses (EINVAL, as the kernel's iw_cm for a QP it cannot use) an RDMA CM
/// connect or accept of `id` that names QP `qpn` of another session on the id's
/// device: the connection would be bound to (siw) or advertise (RoCE) someone else's
/// QP. A number no QP has is left to the CM to refuse.
fn cm_qp_not_foreign(
    st: &mut Served,
    session: SessionId,
    id: Handle,
    qpn: u32,
    now: Instant,
) -> Result<(), i32> {
    use wire::client::cm::{CmReply, CmRequest};
    let info = match crate::daemon::cm::cm_request(
        &mut st.cm(),
        session,
        CmRequest::Query { id },
        Vec::new(),
        now,
    )? {
        (ReplyBody::Cm(CmReply::Info(info)), _) => info,
        _ => return Err(libc::EINVAL),
    };
    let Some(dev) = info.device.and_then(|name| st.device_index(&name)) else {
        return Ok(());
    };
    let owner = st.devices[dev]
        .as_ref()
        .and_then(|d| d.qp_by_qpn.get(&(qpn & 0xff_ffff)))
        .and_then(|h| st.objects.get(h))
        .map(|o| o.session);
    match owner {
        Some(s) if s != session => {
            st.counters.refused_credentials += 1;
            tracing::info!(session, qpn, "RDMA CM named another session's QP");
            Err(libc::EINVAL)
        }
        _ => Ok(()),
    }
}

fn open_device(st: &mut Served, session: SessionId, name: &str, mem: OwnedFd) -> Answer {
    let dev = st.device_index(name).ok_or(libc::ENODEV)?;
    let peer = st.sessions.get(&session).map_or(0, |s| s.pid);
    if let Err(e) = check_proc_mem(&mem, peer) {
        if e == libc::EPERM {
            st.counters.refused_credentials += 1;
            tracing::info!(session, peer, "memory of another process offered");
        }
        return Err(e);
    }
    let (async_r, async_w) = sys::pipe().map_err(|_| libc::EMFILE)?;
    let doorbell = sys::eventfd().map_err(|_| libc::EMFILE)?;
    let doorbell_copy = doorbell.try_clone().map_err(|_| libc::EMFILE)?;
    let page_fd =
        sys::sealed_memfd("rdma-emu-session", SESSION_PAGE_LEN).map_err(|_| libc::ENOMEM)?;
    let page = Mapping::new(&page_fd, SESSION_PAGE_LEN).map_err(|_| libc::ENOMEM)?;
    let ctx_obj = Ctx {
        dev,
        doorbell,
        page,
        async_w,
        events_dropped: Cell::new(0),
    };
    let db_fd = ctx_obj.doorbell.as_raw_fd();
    let ctx = insert(st, session, None, Kind::Ctx(ctx_obj))?;
    if st
        .epoll
        .add(db_fd, crate::daemon::tokens::T_DOORBELL | u64::from(ctx.0))
        .is_err()
    {
        st.forget(ctx);
        return Err(libc::EMFILE);
    }
    st.mem.insert(ctx.0, mem);
    let d = st.devices[dev].as_mut().ok_or(libc::ENODEV)?;
    d.open_ctxs += 1;
    tracing::debug!(session, ctx = ctx.0, device = name, "device opened");
    let body = ReplyBody::DeviceOpened {
        ctx,
        device_attr: d.device_attr(),
        ports: vec![d.port_attr()],
        gids: d.gid_entries(),
    };
    Ok((body, vec![async_r, doorbell_copy, page_fd]))
}
