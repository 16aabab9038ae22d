//! XRC (IBA annex A14): XRC domains, and what an XRC target QP does per request. An XRC
//! initiator is an RC requester whose requests carry an XRCETH (`requester.rs`); an XRC
//! target is an RC responder without an RQ, PD or CQ of its own: each new request's
//! XRCETH names an XRC SRQ of the target's domain, and the target takes that SRQ's PD
//! (for memory access checks), receive WQEs and CQ for the request. The responder then
//! runs as for RC, reading them from the QP's creation attributes, which [`admit`] sets.

use wire::roce::{NakCode, Psn, Qpn, Syndrome};

use crate::attr::*;
use crate::objects::{Objects, Xrcd};
use crate::qp::{InProgress, Qp, RespOut};
use crate::types::*;

/// The creation attributes of an XRC target QP: no PD, CQs, SRQ or queues until a
/// request names its SRQ.
pub(crate) const TGT_INIT: QpInitAttr = QpInitAttr {
    pd: PdHandle(0),
    send_cq: CqHandle(0),
    recv_cq: CqHandle(0),
    srq: None,
    cap: QpCap {
        max_send_wr: 0,
        max_recv_wr: 0,
        max_send_sge: 0,
        max_recv_sge: 0,
        max_inline_data: 0,
    },
    qp_type: QpType::XrcRecv,
    sq_sig_all: false,
};

/// A new XRC domain, opened once by `owner`.
pub(crate) fn open(o: &mut Objects, owner: ClientId) -> XrcdHandle {
    let h = o.handle();
    o.xrcds.insert(
        h,
        Xrcd {
            openers: vec![owner],
            refs: 0,
        },
    );
    XrcdHandle(h)
}

/// One more open of an existing domain (the same file opened again); EINVAL if gone.
pub(crate) fn share(o: &mut Objects, xrcd: XrcdHandle, owner: ClientId) -> Result<(), Errno> {
    let d = o.xrcds.get_mut(&xrcd.0).ok_or(Errno::EINVAL)?;
    d.openers.push(owner);
    Ok(())
}

/// `ibv_close_xrcd` by `owner`: true when that was the last open and the domain is gone.
/// The last close of a domain still holding SRQs or target QPs is EBUSY.
pub(crate) fn close(o: &mut Objects, xrcd: XrcdHandle, owner: ClientId) -> Result<bool, Errno> {
    let d = o.xrcds.get_mut(&xrcd.0).ok_or(Errno::EINVAL)?;
    let i = d
        .openers
        .iter()
        .position(|c| *c == owner)
        .ok_or(Errno::EINVAL)?;
    if d.openers.len() == 1 && d.refs > 0 {
        return Err(Errno::EBUSY);
    }
    d.openers.swap_remove(i);
    if d.openers.is_empty() {
        o.xrcds.remove(&xrcd.0);
        return Ok(true);
    }
    Ok(false)
}

/// `owner` has the domain open (EINVAL otherwise): it may put SRQs and QPs in it.
pub(crate) fn check_opener(o: &Objects, xrcd: XrcdHandle, owner: ClientId) -> Result<(), Errno> {
    match o.xrcds.get(&xrcd.0) {
        Some(d) if d.openers.contains(&owner) => Ok(()),
        _ => Err(Errno::EINVAL),
    }
}

/// A client went away: its opens close; domains nobody has open any more go.
pub(crate) fn release_client(o: &mut Objects, owner: ClientId) {
    for d in o.xrcds.values_mut() {
        d.openers.retain(|c| *c != owner);
    }
    o.xrcds.retain(|_, d| !d.openers.is_empty());
}

/// Makes the new QP `qpn` (created with [`TGT_INIT`]) a target in `xrcd`.
pub(crate) fn attach_tgt(o: &mut Objects, qps: &mut U32Map<Qp>, qpn: Qpn, xrcd: XrcdHandle) {
    if let (Some(q), Some(d)) = (qps.get_mut(&qpn.0), o.xrcds.get_mut(&xrcd.0)) {
        q.xrcd = Some(xrcd);
        d.refs += 1;
    }
}

/// An XRC request arrived at target `qp` naming SRQ `srqn`. For the expected PSN (a new
/// request) the SRQ must be an XRC SRQ of the target's domain, and a Send being placed
/// must keep its SRQ; then the target takes the SRQ's PD, WQEs and CQ. Otherwise the
/// request is answered with NAK Invalid Request, a fatal error (the XRC SRQ checks of
/// annex A14, as 9.7.5.1.x's for RC), counted in `xrc_srq_errors`, and false returned.
/// Duplicates and out-of-sequence requests pass to the RC checks unbound.
pub(crate) fn admit(qp: &mut Qp, o: &mut Objects, psn: Psn, srqn: u32) -> bool {
    let Some(conn) = qp.conn.as_mut() else {
        return false;
    };
    if psn != conn.resp.epsn {
        return true;
    }
    let placing = matches!(conn.resp.cur, Some(InProgress::Send { .. }));
    let named = o
        .srqs
        .get(&srqn)
        .and_then(|s| s.xrc.map(|x| (x, s.pd)))
        .filter(|(x, _)| Some(x.xrcd) == qp.xrcd)
        .filter(|_| !placing || qp.init.srq == Some(SrqHandle(srqn)));
    if let Some((x, pd)) = named {
        qp.init.srq = Some(SrqHandle(srqn));
        qp.init.recv_cq = x.cq;
        qp.init.pd = pd;
        return true;
    }
    o.counters.xrc_srq_errors += 1;
    qp.counters.xrc_srq_errors += 1;
    let msn = conn.resp.msn;
    conn.resp.out.push_back(RespOut::Ack {
        psn,
        syndrome: Syndrome::Nak(NakCode::InvalidRequest),
        msn,
    });
    conn.resp.cur = None;
    conn.resp.fatal = true;
    o.events.push_back((qp.owner, AsyncEvent::QpReqErr(qp.qpn)));
    false
}
