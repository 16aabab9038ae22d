//! Reaching application memory for a QP: gather, scatter, and the ICRC of a built packet.

use std::net::SocketAddr;

use wire::roce::{icrc, ICRC_LEN};

use crate::attr::*;
use crate::memory::{Ahead, Memory, AHEAD};
use crate::mr::Keys;
use crate::qp::*;
use crate::types::*;

/// Checks the SGEs of a WR before its first packet (IBA 10.6.3: lkey, PD, bounds; local
/// write access where the HCA writes into them).
pub(crate) fn check_local_sges(keys: &Keys, pd: PdHandle, w: &SendWqe) -> Result<(), WcStatus> {
    if w.wr.inline_data.is_some() {
        return Ok(());
    }
    let need = match w.wr.opcode {
        WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            AccessFlags::LOCAL_WRITE
        }
        _ => AccessFlags::EMPTY,
    };
    for s in &w.wr.sg_list {
        keys.resolve(s.lkey.0, pd, s.addr, u64::from(s.length), need, false, 0)
            .map_err(|_| WcStatus::LocProtErr)?;
    }
    Ok(())
}

/// Copies `out.len()` bytes of the WR's message starting at `off` into `out`.
pub(crate) fn gather(
    keys: &Keys,
    pd: PdHandle,
    w: &SendWqe,
    off: u32,
    out: &mut [u8],
    mem: &mut dyn Memory,
) -> Result<(), WcStatus> {
    if out.is_empty() {
        return Ok(());
    }
    if let Some(d) = &w.wr.inline_data {
        let o = off as usize;
        out.copy_from_slice(d.get(o..o + out.len()).ok_or(WcStatus::LocLenErr)?);
        return Ok(());
    }
    let mut skip = u64::from(off);
    let mut done = 0usize;
    for s in &w.wr.sg_list {
        let len = u64::from(s.length);
        if skip >= len {
            skip -= len;
            continue;
        }
        let n = ((len - skip) as usize).min(out.len() - done);
        let (space, host) = keys
            .resolve(
                s.lkey.0,
                pd,
                s.addr + skip,
                n as u64,
                AccessFlags::EMPTY,
                false,
                0,
            )
            .map_err(|_| WcStatus::LocProtErr)?;
        mem.read(space, host, &mut out[done..done + n])
            .map_err(|_| WcStatus::LocProtErr)?;
        done += n;
        skip = 0;
        if done == out.len() {
            return Ok(());
        }
    }
    Err(WcStatus::LocLenErr)
}

/// [`gather`] through `ahead` ([`Ahead::serve`]): an RC or UC message's payload read in
/// runs of up to [`AHEAD`] bytes where the memory asks for runs, kept for that WR alone.
pub(crate) fn gather_ahead(
    keys: &Keys,
    pd: PdHandle,
    w: &SendWqe,
    ahead: &mut Ahead,
    off: u32,
    out: &mut [u8],
    mem: &mut dyn Memory,
) -> Result<(), WcStatus> {
    if out.is_empty() || w.wr.inline_data.is_some() {
        return gather(keys, pd, w, off, out, mem);
    }
    ahead.serve(
        mem,
        (w.seq, u64::from(off), u64::from(w.len)),
        out,
        |m| wants_runs(keys, pd, &w.wr.sg_list, off, m),
        |m, at, buf| gather(keys, pd, w, at as u32, buf, m),
    )
}

/// Places a READ response packet's `payload` at message offset `off` of `w`'s scatter list.
/// Where the memory asks for runs, the middle packets of a long READ are held in `held`
/// and placed together, one access per up to [`AHEAD`] bytes; the last packet places what
/// is held before the WR can complete. Packets come in order (the completer takes only
/// the expected PSN), so held bytes always end where the next packet starts.
#[allow(clippy::too_many_arguments)]
pub(crate) fn place_read(
    keys: &Keys,
    pd: PdHandle,
    w: &SendWqe,
    held: &mut ReadHeld,
    off: u32,
    payload: &[u8],
    last: bool,
    mem: &mut dyn Memory,
) -> Result<(), WcStatus> {
    let sges = &w.wr.sg_list;
    if held.seq != w.seq {
        // Left by a READ that ended in error or was flushed: its buffer is undefined.
        *held = ReadHeld {
            seq: w.seq,
            ..ReadHeld::default()
        };
    }
    if !held.bytes.is_empty() && held.at as usize + held.bytes.len() != off as usize {
        let r = scatter(keys, pd, sges, held.at, &held.bytes, mem);
        held.bytes.clear();
        r?;
    }
    let fits = held.bytes.len() + payload.len() <= AHEAD as usize;
    if !last
        && fits
        && *held
            .runs
            .get_or_insert_with(|| wants_runs(keys, pd, sges, off, mem))
    {
        if held.bytes.is_empty() {
            held.at = off;
            held.bytes.reserve_exact(AHEAD as usize);
        }
        held.bytes.extend_from_slice(payload);
        return Ok(());
    }
    if held.bytes.is_empty() {
        return scatter(keys, pd, sges, off, payload, mem);
    }
    held.bytes.extend_from_slice(payload);
    let r = scatter(keys, pd, sges, held.at, &held.bytes, mem);
    if last {
        held.bytes = Vec::new();
    } else {
        held.bytes.clear();
    }
    r
}

/// Whether the memory under message offset `off` of `sges` wants its bytes moved in runs
/// ([`Memory::prefers_runs`]); `false` when no SGE holds `off` or its key does not
/// resolve (the access that follows reports that).
pub(crate) fn wants_runs(
    keys: &Keys,
    pd: PdHandle,
    sges: &[Sge],
    off: u32,
    mem: &dyn Memory,
) -> bool {
    let mut skip = u64::from(off);
    for s in sges {
        let len = u64::from(s.length);
        if skip >= len {
            skip -= len;
            continue;
        }
        return keys
            .resolve(s.lkey.0, pd, s.addr + skip, 1, AccessFlags::EMPTY, false, 0)
            .is_ok_and(|(space, host)| mem.prefers_runs(space, host));
    }
    false
}

/// Writes `data` into the scatter list at message offset `off` (LOCAL_WRITE required).
pub(crate) fn scatter(
    keys: &Keys,
    pd: PdHandle,
    sges: &[Sge],
    off: u32,
    data: &[u8],
    mem: &mut dyn Memory,
) -> Result<(), WcStatus> {
    if data.is_empty() {
        return Ok(());
    }
    let mut skip = u64::from(off);
    let mut done = 0usize;
    for s in sges {
        let len = u64::from(s.length);
        if skip >= len {
            skip -= len;
            continue;
        }
        let n = ((len - skip) as usize).min(data.len() - done);
        let (space, host) = keys
            .resolve(
                s.lkey.0,
                pd,
                s.addr + skip,
                n as u64,
                AccessFlags::LOCAL_WRITE,
                false,
                0,
            )
            .map_err(|_| WcStatus::LocProtErr)?;
        mem.write(space, host, &data[done..done + n])
            .map_err(|_| WcStatus::LocProtErr)?;
        done += n;
        skip = 0;
        if done == data.len() {
            return Ok(());
        }
    }
    Err(WcStatus::LocLenErr)
}

/// Computes and stores the ICRC of `packet` (BTH through ICRC, as
/// [`Device::poll_transmit`](crate::Device::poll_transmit) wrote it) for a datagram from
/// `src` to `dst`, as a kernel UDP socket sends it. Addresses of two families leave it
/// zero (no such datagram exists).
pub fn seal_icrc(packet: &mut [u8], src: SocketAddr, dst: SocketAddr) {
    let Some(n) = packet.len().checked_sub(ICRC_LEN) else {
        return;
    };
    let c = match (src, dst) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            icrc::for_udp4(*s.ip(), *d.ip(), s.port(), d.port(), &packet[..n])
        }
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            icrc::for_udp6(*s.ip(), *d.ip(), s.port(), d.port(), &packet[..n])
        }
        _ => 0,
    };
    packet[n..].copy_from_slice(&c.to_le_bytes());
}
