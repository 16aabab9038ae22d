//! Shared receive queues of a siw device, as the kernel's siw has them (`siw_create_srq`,
//! `siw_modify_srq`, `siw_query_srq`, `siw_post_srq_recv`; `siw_rqe_get` takes from them).
//!
//! The SRQs are the device core's (`emu_core::Device`, the same objects, limit event and
//! posting order as on RoCE); what differs on siw is checked here before the core is
//! asked: the limit may be armed at creation, the depth is rounded up to a power of two,
//! and an SRQ cannot be resized. The QPs that use an SRQ are the device's own siw QPs (the
//! core keeps no reference for them), so destroying an SRQ one of them names is EBUSY
//! here, as the kernel's `ib_destroy_srq` answers while `usecnt` is not zero. A
//! connection takes a Send's receive from the SRQ through the core's `Stags` table
//! (`emu_core::iwarp::Stags::take_srq_recv`).

use super::qp::SiwQp;
use crate::daemon::devices::core_nic::{srq_in, srq_out};
use crate::daemon::devices::nic::{Errno, Owner};
use emu_core as core;
use emu_core::U32Map;
use wire::client::verbs::srq_attr_mask;
use wire::client::{self as proto};

/// `siw_create_srq`: a limit above `max_wr` is EINVAL (the device's limits were checked
/// by the caller); the depth rounds up to a power of two; a non-zero limit is armed at
/// once. Returns (SRQ, actual attributes).
pub(super) fn create(
    dev: &mut core::Device,
    owner: Owner,
    pd: u32,
    attr: &proto::SrqAttr,
) -> Result<(u32, proto::SrqAttr), Errno> {
    if attr.srq_limit > attr.max_wr {
        return Err(libc::EINVAL);
    }
    let asked = proto::SrqAttr {
        max_wr: attr.max_wr.next_power_of_two(),
        ..*attr
    };
    let h = dev
        .create_srq(core::ClientId(owner), core::PdHandle(pd), srq_in(&asked))
        .map_err(|e| e.0)?;
    if attr.srq_limit > 0 {
        let armed = dev.modify_srq(h, &srq_in(&asked), core::SrqAttrMask::LIMIT);
        if let Err(err) = armed {
            let _ = dev.destroy_srq(h);
            return Err(err.0);
        }
    }
    let actual = dev.query_srq(h).map_err(|e| e.0)?;
    Ok((h.0, srq_out(&actual)))
}

/// `siw_modify_srq`: no resize (EOPNOTSUPP); `LIMIT` arms the limit event (0 disarms),
/// EINVAL above the SRQ's depth.
pub(super) fn modify(
    dev: &mut core::Device,
    srq: u32,
    attr: &proto::SrqAttr,
    mask: u32,
) -> Result<(), Errno> {
    if mask & srq_attr_mask::MAX_WR != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    dev.modify_srq(core::SrqHandle(srq), &srq_in(attr), core::SrqAttrMask(mask))
        .map_err(|e| e.0)
}

/// `siw_query_srq`: depth, SGEs, the limit (0 once the event fired).
pub(super) fn query(dev: &core::Device, srq: u32) -> Result<proto::SrqAttr, Errno> {
    dev.query_srq(core::SrqHandle(srq))
        .map(|a| srq_out(&a))
        .map_err(|e| e.0)
}

/// `ibv_destroy_srq`: EBUSY while a QP of the device takes its receives from it.
pub(super) fn destroy(dev: &mut core::Device, qps: &U32Map<SiwQp>, srq: u32) -> Result<(), Errno> {
    if qps.values().any(|q| q.srq == Some(srq)) {
        return Err(libc::EBUSY);
    }
    dev.destroy_srq(core::SrqHandle(srq)).map_err(|e| e.0)
}

/// A QP may be created on SRQ `srq`: it exists (EINVAL otherwise).
pub(super) fn check_usable(dev: &core::Device, srq: u32) -> Result<(), Errno> {
    dev.query_srq(core::SrqHandle(srq))
        .map(|_| ())
        .map_err(|_| libc::EINVAL)
}
