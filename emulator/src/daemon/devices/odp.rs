//! On-demand paging in the daemon: what a device reports (`odp_caps`) and
//! `ibv_advise_mr`'s prefetch.
//!
//! The daemon never pins an MR: it reaches a client's memory with pread/pwrite on the
//! client's `/proc/PID/mem`, and the kernel faults each page in when it is touched, the
//! way an ODP NIC's page-fault handler does. So every RoCE device can honestly report ODP
//! for every operation of every transport it has, implicit regions included (the core
//! checks their keys against the owner's address space, [`emu_core`]'s `mr` module). An
//! ODP region's pages are never moved onto a memfd (`RDMA_EMU_SHARED_MR`): an implicit
//! region covers the whole address space, and an explicit one may cover memory mapped
//! only later. siw devices report none, as the kernel's siw.
//!
//! Prefetch is honest rather than a no-op: with `IBV_ADVISE_MR_ADVICE_PREFETCH` or
//! `PREFETCH_WRITE` one byte of each page is read through the descriptor, which faults the
//! page in (for reading: a write fault would need a write, and writing back what was
//! read would race with the application's own stores). With `IBV_ADVISE_MR_FLAG_FLUSH` a
//! page that cannot be faulted in is EFAULT, as the kernel's rxe answers; without it the
//! prefetch is best effort. `PREFETCH_NO_FAULT` faults nothing in: the daemon keeps no
//! page table of its own to fill, so it only checks the keys.

use crate::daemon::devices::memory::ProcMem;
use crate::daemon::devices::nic::Nic;
use wire::client::verbs::{advise, odp};
use wire::client::{AdviseRange, OdpCaps};

/// What an rdma-emu RoCE device reports: ODP with implicit regions; RC every operation,
/// FLUSH and ATOMIC WRITE and receives through an SRQ included; UC sends, receives and
/// WRITEs; UD sends and receives; XRC sends, receives (through its SRQs), WRITEs, READs
/// and atomics, which reach memory as RC's do. The kernel's rxe reports the same RC and UD
/// bits, no UC, no XRC (it has no XRC), and no implicit ODP: its implicit regions need the
/// page tables of a real MMU notifier per chunk, ours need nothing.
pub fn roce_caps() -> OdpCaps {
    let rc = odp::SEND
        | odp::RECV
        | odp::WRITE
        | odp::READ
        | odp::ATOMIC
        | odp::SRQ_RECV
        | odp::FLUSH
        | odp::ATOMIC_WRITE;
    OdpCaps {
        general_caps: odp::SUPPORT | odp::SUPPORT_IMPLICIT,
        rc_odp_caps: rc,
        uc_odp_caps: odp::SEND | odp::RECV | odp::WRITE | odp::SRQ_RECV,
        ud_odp_caps: odp::SEND | odp::RECV | odp::SRQ_RECV,
        xrc_odp_caps: odp::SEND | odp::RECV | odp::WRITE | odp::READ | odp::ATOMIC | odp::SRQ_RECV,
    }
}

/// `ibv_advise_mr` on `nic` for ranges of `pd`'s MRs, with the errnos of the kernel's
/// uverbs and rxe: an unknown flag or no range EINVAL, an unknown advice EOPNOTSUPP, a key
/// that names no ODP MR of the PD with local write EINVAL, a range outside its MR EFAULT
/// (only with FLUSH: without, the kernel checks nothing past the keys), a page that
/// cannot be faulted in EFAULT (with FLUSH).
pub fn advise_mr(
    nic: &dyn Nic,
    mem: &mut ProcMem,
    pd: u32,
    advice: u32,
    flags: u32,
    sg_list: &[AdviseRange],
) -> Result<(), i32> {
    if flags & !advise::FLAG_FLUSH != 0 || sg_list.is_empty() {
        return Err(libc::EINVAL);
    }
    if !matches!(
        advice,
        advise::PREFETCH | advise::PREFETCH_WRITE | advise::PREFETCH_NO_FAULT
    ) {
        return Err(libc::EOPNOTSUPP);
    }
    let sync = flags & advise::FLAG_FLUSH != 0;
    for r in sg_list {
        let (owner, host) = match nic.advise_mr(pd, r.lkey, r.addr, u64::from(r.length)) {
            Ok(t) => t,
            Err(libc::EFAULT) if !sync => continue,
            Err(e) => return Err(e),
        };
        if advice != advise::PREFETCH_NO_FAULT
            && !mem.touch(owner, host, u64::from(r.length))
            && sync
        {
            return Err(libc::EFAULT);
        }
    }
    Ok(())
}
