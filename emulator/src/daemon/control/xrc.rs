//! XRC requests (`wire::client::xrc`): XRC domains, shared by file between the clients
//! of one device as the kernel's uverbs shares them by inode, XRC SRQs and XRC target
//! QPs. The engine (`Nic`) keeps the objects; siw devices refuse them (EOPNOTSUPP).

use crate::daemon::control::queues::{record_srq, ring_memfd};
use crate::daemon::devices::nic::XrcSrqIds;
use crate::daemon::sessions::answer::Answer;
use crate::daemon::sessions::clients::Clients;
use crate::daemon::sessions::objects::{Kind, Object, Qp, Ring, SessionId};
use crate::daemon::sys;
use std::os::fd::OwnedFd;
use wire::client::proto::Handle;
use wire::client::slot::send_slot_size;
use wire::client::verbs::qp_type;
use wire::client::xrc::{XrcReply, XrcRequest};
use wire::client::{QpCap, ReplyBody, RingLayout, SrqAttr};

/// Carries out one XRC request of `session`; `fds` as the request's table says.
pub(in crate::daemon) fn handle(
    clients: &mut Clients<'_>,
    session: SessionId,
    req: XrcRequest,
    fds: Vec<OwnedFd>,
) -> Answer {
    match req {
        XrcRequest::Open { ctx, file, oflags } => {
            let file = match (file, fds.first()) {
                (true, Some(fd)) => Some(file_id(fd)?),
                (true, None) => return Err(libc::EINVAL),
                (false, _) => None,
            };
            open(clients, session, ctx, file, oflags)
        }
        XrcRequest::Close { xrcd } => close(clients, session, xrcd),
        XrcRequest::CreateSrq { pd, xrcd, cq, attr } => {
            create_srq(clients, session, pd, xrcd, cq, attr)
        }
        XrcRequest::CreateTgtQp { xrcd } => create_tgt_qp(clients, session, xrcd),
    }
}

/// (device, inode) of an open file.
fn file_id(fd: &OwnedFd) -> Result<(u64, u64), i32> {
    let st = sys::fstat(fd).map_err(|_| libc::EBADF)?;
    Ok((st.st_dev, st.st_ino))
}

/// (ctx, engine domain id) of an XRCD handle of the session.
fn xrcd_of(clients: &Clients<'_>, session: SessionId, h: Handle) -> Result<(Handle, u32), i32> {
    match clients.lookup(session, h)? {
        Object {
            kind: Kind::Xrcd { id, .. },
            ctx,
            ..
        } => Ok((*ctx, *id)),
        _ => Err(libc::EINVAL),
    }
}

fn open(
    clients: &mut Clients<'_>,
    session: SessionId,
    ctx: Handle,
    file: Option<(u64, u64)>,
    oflags: u32,
) -> Answer {
    let d = clients.device_of(session, ctx)?;
    let existing = file.and_then(|f| d.xrcd_by_file.get(&f).copied());
    // The kernel's ib_uverbs_open_xrcd: a file with no domain needs O_CREAT, O_EXCL
    // refuses one that has a domain.
    if file.is_some() && existing.is_none() && oflags & libc::O_CREAT as u32 == 0 {
        return Err(libc::EAGAIN);
    }
    if existing.is_some() && oflags & libc::O_EXCL as u32 != 0 {
        return Err(libc::EINVAL);
    }
    let id = d.nic.open_xrcd(ctx.0, existing)?;
    if let Some(f) = file {
        d.xrcd_by_file.insert(f, id);
    }
    match clients.insert(session, Some(ctx), Kind::Xrcd { id, file }) {
        Ok(handle) => Ok((ReplyBody::Xrc(XrcReply::Xrcd { handle }), vec![])),
        Err(err) => {
            let d = clients.device_of(session, ctx)?;
            if d.nic.close_xrcd(id, ctx.0) == Ok(true) {
                d.xrcd_by_file.retain(|_, v| *v != id);
            }
            Err(err)
        }
    }
}

/// The engine's close; the caller forgets the handle when it succeeds.
fn close(clients: &mut Clients<'_>, session: SessionId, xrcd: Handle) -> Answer {
    let (ctx, id) = xrcd_of(clients, session, xrcd)?;
    let d = clients.device_of(session, ctx)?;
    if d.nic.close_xrcd(id, ctx.0)? {
        d.xrcd_by_file.retain(|_, v| *v != id);
    }
    Ok((ReplyBody::Ok, vec![]))
}

fn create_srq(
    clients: &mut Clients<'_>,
    session: SessionId,
    pd: Handle,
    xrcd: Handle,
    cq: Handle,
    attr: SrqAttr,
) -> Answer {
    let (ctx, pd_id) = clients.pd(session, pd)?;
    let (x_ctx, xrcd_id) = xrcd_of(clients, session, xrcd)?;
    let cq_id = clients.cq_in(session, cq, ctx)?;
    if x_ctx != ctx {
        return Err(libc::EINVAL);
    }
    let d = clients.device_of(session, ctx)?;
    let l = d.nic.limits();
    if attr.max_wr == 0 || attr.max_wr > l.max_srq_wr || attr.max_sge > l.max_srq_sge {
        return Err(libc::EINVAL);
    }
    let ids = XrcSrqIds {
        pd: pd_id,
        xrcd: xrcd_id,
        cq: cq_id,
    };
    let (id, actual) = d.nic.create_xrc_srq(ctx.0, ids, &attr)?;
    let (handle, layout, fd) =
        record_srq(clients, session, ctx, id, actual.max_sge, actual.max_wr)?;
    let reply = XrcReply::Srq {
        handle,
        attr: actual,
        ring: layout,
        srqn: id,
    };
    Ok((ReplyBody::Xrc(reply), vec![fd]))
}

/// A target QP: a `Qp` object with an empty one-slot send ring the engine never drains
/// (it is not among the rings) and no receive queue.
fn create_tgt_qp(clients: &mut Clients<'_>, session: SessionId, xrcd: Handle) -> Answer {
    let (ctx, xrcd_id) = xrcd_of(clients, session, xrcd)?;
    let d = clients.device_of(session, ctx)?;
    let qpn = d.nic.create_xrc_tgt_qp(ctx.0, xrcd_id)?;
    let sq = RingLayout {
        offset: 0,
        entries: 1,
        slot_size: send_slot_size(0, 0).ok_or(libc::EINVAL)?,
    };
    let (fd, map) = match ring_memfd("rdma-emu-xrc-tgt", sq.end()) {
        Ok(x) => x,
        Err(err) => {
            let _ = d.nic.destroy_qp(qpn);
            return Err(err);
        }
    };
    let cap = QpCap::default();
    let qp = Qp {
        qpn,
        qp_type: qp_type::XRC_RECV,
        cap,
        map,
        sq: Ring::new(sq),
        rq: None,
        send_cq: xrcd,
        recv_cq: xrcd,
        srq: None,
        sq_sig_all: false,
    };
    let handle = clients.insert_or_undo(session, ctx, Kind::Qp(qp), |d| {
        let _ = d.nic.destroy_qp(qpn);
    })?;
    clients
        .device_of(session, ctx)?
        .qp_by_qpn
        .insert(qpn, handle);
    Ok((
        ReplyBody::Qp {
            handle,
            qpn,
            cap,
            sq,
            rq: None,
        },
        vec![fd],
    ))
}
