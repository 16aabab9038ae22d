//! The responder's side of the Memory Placement Extensions (IBA vol. 1 annex A19):
//! FLUSH and ATOMIC WRITE, executed in PSN order like every other request.
//!
//! Both are answered with a plain ACK, take a responder resource (as READs and atomics
//! do: a QP with `max_dest_rd_atomic` 0 NAKs them as invalid requests) and are executed
//! once: a duplicate is re-ACKed, never executed again (`responder::duplicate`).
//!
//! What a FLUSH guarantees here. The target is ordinary memory of the application's
//! process, written by the daemon through the kernel (`Memory`). The responder executes
//! requests in order, and every earlier WRITE or ATOMIC WRITE of the QP was stored before
//! the FLUSH is looked at: once stored, a write is visible to every reader of that
//! memory, so global visibility holds when the FLUSH is acknowledged (a fence orders the
//! daemon's own stores, as rxe's `wmb()`). Persistence would need persistent memory,
//! which process memory is not: as rxe refuses an MR with `IBV_ACCESS_FLUSH_PERSISTENT`
//! on pages that are not pmem, the device refuses every such MR (`Device::reg_mr`), so
//! a persistent FLUSH never finds an MR that grants it and is NAKed with a remote access
//! error, exactly as on rxe without pmem.

use wire::roce::{FethRepr, NakCode, PlacementType, Psn, RethRepr, Selectivity};

use crate::memory::Memory;
use crate::objects::Objects;
use crate::outcome::Outcome;
use crate::qp::*;
use crate::types::*;

/// The QP's rights and limits a placement request is checked against.
struct Checks {
    pd: PdHandle,
    qpn: wire::roce::Qpn,
    access: AccessFlags,
    max_dest: usize,
}

impl Checks {
    /// The QP's checks and its connection, or the outcome when the request cannot start:
    /// in the middle of a multi-packet message, or with no responder resource at all.
    fn begin(qp: &mut Qp) -> Result<(Checks, &mut Conn), Outcome> {
        let c = Checks {
            pd: qp.init.pd,
            qpn: qp.qpn,
            access: qp.attr.qp_access_flags,
            max_dest: usize::from(qp.attr.max_dest_rd_atomic),
        };
        let Some(conn) = qp.conn.as_deref_mut() else {
            return Err(Outcome::Done(1));
        };
        if conn.resp.cur.is_some() || c.max_dest == 0 {
            return Err(c.inv_req());
        }
        Ok((c, conn))
    }
    fn inv_req(&self) -> Outcome {
        Outcome::Fatal(
            NakCode::InvalidRequest,
            Some(AsyncEvent::QpReqErr(self.qpn)),
        )
    }
    fn access_err(&self) -> Outcome {
        Outcome::Fatal(
            NakCode::RemoteAccessError,
            Some(AsyncEvent::QpAccessErr(self.qpn)),
        )
    }
}

/// The access a FLUSH of placement type `p` needs, of the QP and of the MR; `None` for a
/// placement type naming neither guarantee (reserved bits only).
pub(crate) fn flush_access(p: PlacementType) -> Option<AccessFlags> {
    let mut need = AccessFlags::EMPTY;
    if p.contains(PlacementType::GLOBAL) {
        need |= AccessFlags::FLUSH_GLOBAL;
    }
    if p.contains(PlacementType::PERSISTENT) {
        need |= AccessFlags::FLUSH_PERSISTENT;
    }
    (need != AccessFlags::EMPTY).then_some(need)
}

/// Takes a responder resource for an executed placement request at `psn`.
fn take_resource(conn: &mut Conn, max_dest: usize, psn: Psn) {
    if conn.resp.resources.len() >= max_dest {
        conn.resp.resources.pop_front();
    }
    conn.resp.resources.push_back(RdAtomicRes {
        psn,
        npkts: 1,
        kind: ResKind::Placement,
    });
    conn.resp.msn = conn.resp.msn.wrapping_add(1);
}

/// Executes an in-sequence FLUSH (annex A19): the QP and the MR must grant the placement
/// type and, for a range, the MR cover it, else a remote access error (as this responder
/// answers a WRITE to a QP without remote write; rxe NAKs a QP's missing right as an
/// invalid request); a reserved placement type or selectivity level is an invalid
/// request.
pub(crate) fn flush(
    qp: &mut Qp,
    o: &mut Objects,
    psn: Psn,
    feth: &FethRepr,
    reth: &RethRepr,
) -> Outcome {
    let (c, conn) = match Checks::begin(qp) {
        Ok(x) => x,
        Err(o) => return o,
    };
    let Some(need) = flush_access(feth.placement) else {
        return c.inv_req();
    };
    let len = match feth.selectivity {
        Selectivity::MemoryRange => u64::from(reth.dma_len),
        // The whole region: the key's rights count, not a range.
        Selectivity::MemoryRegion => 0,
        Selectivity::Unknown(_) => return c.inv_req(),
    };
    if !c.access.contains(need) {
        return c.access_err();
    }
    if o.keys
        .resolve(reth.rkey.0, c.pd, reth.va, len, need, true, c.qpn.0)
        .is_err()
    {
        return c.access_err();
    }
    // Every earlier request of the QP was stored before this one is executed; the fence
    // orders this thread's stores before the ACK that follows (rxe: `wmb()`).
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    take_resource(conn, c.max_dest, psn);
    Outcome::Done(1)
}

/// Executes an in-sequence ATOMIC WRITE: 8 bytes at an 8-byte aligned address under an
/// R_Key with remote write rights, the QP granting remote write (else a remote access
/// error); the RETH's length must be 8 and match the payload and the address be aligned
/// (oA19-28), else an invalid request, as rxe answers.
pub(crate) fn atomic_write(
    qp: &mut Qp,
    o: &mut Objects,
    psn: Psn,
    reth: &RethRepr,
    payload: &[u8],
    mem: &mut dyn Memory,
) -> Outcome {
    let (c, conn) = match Checks::begin(qp) {
        Ok(x) => x,
        Err(o) => return o,
    };
    if !c.access.contains(AccessFlags::REMOTE_WRITE) {
        return c.access_err();
    }
    let Ok((space, host)) = o.keys.resolve(
        reth.rkey.0,
        c.pd,
        reth.va,
        8,
        AccessFlags::REMOTE_WRITE,
        true,
        c.qpn.0,
    ) else {
        return c.access_err();
    };
    if reth.dma_len != 8 || payload.len() != 8 || host & 7 != 0 {
        return c.inv_req();
    }
    // One aligned 8-byte store into the application's memory.
    if mem.write(space, host, payload).is_err() {
        return Outcome::Fatal(NakCode::RemoteOperationalError, None);
    }
    take_resource(conn, c.max_dest, psn);
    Outcome::Done(1)
}
