//! Completion queue depth rules shared by `ibv_create_cq` and `ibv_resize_cq`.
//!
//! The core only keeps a CQ's depth and the completions it has queued but not yet handed
//! to the driver (`poll_completion`); the ring the application polls is the driver's.
//! So a resize takes, from the driver, how many completions its ring still holds.

use crate::attr::DeviceLimits;
use crate::objects::Objects;
use crate::types::{CqHandle, Errno};

/// A CQ depth must be 1..=`max_cqe` (rxe's `rxe_cq_chk_attr`: EINVAL otherwise).
pub(crate) fn check_cqe(limits: &DeviceLimits, cqe: u32) -> Result<(), Errno> {
    if cqe == 0 || cqe > limits.max_cqe {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// `ibv_resize_cq`: the new depth, or EINVAL when `cqe` is out of range, the CQ unknown,
/// or `cqe` below the completions not yet polled (`queued` in the driver's ring plus
/// those the core still holds), as `rxe_cq_chk_attr` refuses to drop completions.
pub(crate) fn resize_cq(
    o: &mut Objects,
    limits: &DeviceLimits,
    cq: CqHandle,
    cqe: u32,
    queued: u32,
) -> Result<u32, Errno> {
    check_cqe(limits, cqe)?;
    let c = o.cqs.get_mut(&cq.0).ok_or(Errno::EINVAL)?;
    if u64::from(cqe) < u64::from(queued) + u64::from(c.pending) {
        return Err(Errno::EINVAL);
    }
    c.depth = cqe;
    Ok(cqe)
}
