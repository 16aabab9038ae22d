//! Executing an in-sequence request at the responder (IBA 9.7.5.1): SEND
//! into a receive WQE, RDMA WRITE and READ after the R_Key checks, atomics.

use wire::roce::{NakCode, Qpn, Request, SendSeg, WriteSeg};

use crate::attr::*;
use crate::dma::{scatter, wants_runs};
use crate::memory::Memory;
use crate::objects::Objects;
use crate::outcome::Outcome;
use crate::qp::*;
use crate::types::*;
use wire::roce::Header;

/// Most payload bytes of a SEND or RDMA WRITE accepted and not yet placed: the middle
/// packets of a message are placed in runs of up to this many bytes, one memory access
/// each (on the daemon's descriptor path a `pwrite` costs a page walk and a bounce page
/// per call, whatever its length). A run is placed before anything acknowledges its
/// packets ([`place_held`]), so an ACK never covers bytes that are not in memory, and a
/// fault is met before the ACK of the packet that holds it. Only where the memory asks for
/// runs ([`Memory::prefers_runs`]): into mapped memory each packet is placed as it comes.
pub(crate) const HOLD: usize = 64 * 1024;

/// Whether the payload of a middle packet is held rather than placed now: nothing asks
/// for an ACK, and the run stays under [`HOLD`].
fn holds(last: bool, h: &Header, held: usize, payload: usize) -> bool {
    !last && !h.ack_req && held + payload < HOLD
}

/// Adds `payload` to the held run, reserving the whole run at its first packet.
pub(crate) fn hold(held: &mut Vec<u8>, payload: &[u8]) {
    if held.capacity() == 0 {
        held.reserve_exact(HOLD);
    }
    held.extend_from_slice(payload);
}

/// Places the payload the SEND or RDMA WRITE in progress holds (see [`HOLD`]). Called
/// before the responder answers anything but the next packet of that message: an ACK or
/// NAK covers the packets before it. A SEND whose run cannot be placed completes its
/// receive WQE in error; the outcome to NAK is returned.
pub(crate) fn place_held(
    qp: &mut Qp,
    o: &mut Objects,
    mem: &mut dyn Memory,
) -> Result<(), Outcome> {
    let (pd, qpn, recv_cq) = (qp.init.pd, qp.qpn, qp.init.recv_cq);
    let Some(conn) = qp.conn.as_mut() else {
        return Ok(());
    };
    match conn.resp.cur.as_mut() {
        Some(InProgress::Write {
            space, host, held, ..
        }) if !held.is_empty() => {
            let at = *host - held.len() as u64;
            let r = mem.write(*space, at, held);
            held.clear();
            r.map_err(|_| Outcome::Fatal(NakCode::RemoteOperationalError, None))
        }
        Some(InProgress::Send {
            rwqe, offset, held, ..
        }) if !held.is_empty() => {
            let at = *offset - held.len() as u32;
            let r = scatter(&o.keys, pd, &rwqe.sg_list, at, held, mem);
            held.clear();
            r.map_err(|status| recv_failed(o, qpn, recv_cq, rwqe.wr_id, status))
        }
        _ => Ok(()),
    }
}

/// A SEND's payload could not be placed in its receive WQE: the WQE completes with
/// `status`, and the request is NAKed (invalid request when it was too long for the WQE).
fn recv_failed(
    o: &mut Objects,
    qpn: Qpn,
    recv_cq: CqHandle,
    wr_id: WrId,
    status: WcStatus,
) -> Outcome {
    let wc = WorkCompletion {
        wr_id,
        status,
        opcode: WcOpcode::Recv,
        qp_num: qpn,
        ..Default::default()
    };
    o.push_wc(recv_cq, wc);
    if status == WcStatus::LocLenErr {
        Outcome::Fatal(NakCode::InvalidRequest, Some(AsyncEvent::QpReqErr(qpn)))
    } else {
        Outcome::Fatal(NakCode::RemoteOperationalError, None)
    }
}

/// Executes an in-sequence request packet.
pub(crate) fn execute(
    qp: &mut Qp,
    o: &mut Objects,
    h: &Header,
    r: &Request,
    payload: &[u8],
    mem: &mut dyn Memory,
) -> Outcome {
    let pd = qp.init.pd;
    let qpn = qp.qpn;
    let access = qp.attr.qp_access_flags;
    let max_dest = usize::from(qp.attr.max_dest_rd_atomic);
    let Some(conn) = qp.conn.as_mut() else {
        return Outcome::Done(1);
    };
    let mtu = conn.mtu;
    let access_err = Outcome::Fatal(
        NakCode::RemoteAccessError,
        Some(AsyncEvent::QpAccessErr(qpn)),
    );
    let inv_req = Outcome::Fatal(NakCode::InvalidRequest, Some(AsyncEvent::QpReqErr(qpn)));
    match r {
        Request::Send(seg) => {
            let first = matches!(
                seg,
                SendSeg::First | SendSeg::Only | SendSeg::OnlyImm(_) | SendSeg::OnlyInv(_)
            );
            let last = !matches!(seg, SendSeg::First | SendSeg::Middle);
            if payload.len() as u32 > mtu || (!last && payload.len() as u32 != mtu) {
                return inv_req;
            }
            let (rwqe, offset, mut held, mut runs) = match (first, conn.resp.cur.take()) {
                (true, None) => match take_rwqe(qp, o) {
                    Some(w) => (w, 0, Vec::new(), None),
                    None => return Outcome::Rnr,
                },
                (
                    false,
                    Some(InProgress::Send {
                        rwqe,
                        offset,
                        held,
                        runs,
                    }),
                ) => (rwqe, offset, held, runs),
                (_, other) => {
                    if let Some(c) = qp.conn.as_mut() {
                        c.resp.cur = other;
                    }
                    return inv_req;
                }
            };
            let Some(conn) = qp.conn.as_mut() else {
                return Outcome::Done(1);
            };
            // Held only while it fits the WQE: a message too long for it fails at the
            // packet that overflows, as placed packet by packet.
            let room: u64 = rwqe.sg_list.iter().map(|s| u64::from(s.length)).sum();
            let fits = u64::from(offset) + payload.len() as u64 <= room;
            let placed = if fits
                && holds(last, h, held.len(), payload.len())
                && *runs.get_or_insert_with(|| wants_runs(&o.keys, pd, &rwqe.sg_list, offset, mem))
            {
                hold(&mut held, payload);
                Ok(())
            } else if held.is_empty() {
                scatter(&o.keys, pd, &rwqe.sg_list, offset, payload, mem)
            } else {
                let at = offset - held.len() as u32;
                held.extend_from_slice(payload);
                let r = scatter(&o.keys, pd, &rwqe.sg_list, at, &held, mem);
                held.clear();
                r
            };
            if let Err(status) = placed {
                return recv_failed(o, qpn, qp.init.recv_cq, rwqe.wr_id, status);
            }
            let offset = offset + payload.len() as u32;
            if !last {
                conn.resp.cur = Some(InProgress::Send {
                    rwqe,
                    offset,
                    held,
                    runs,
                });
                return Outcome::Done(1);
            }
            conn.resp.msn = conn.resp.msn.wrapping_add(1);
            // rxe sets IBV_WC_GRH on every receive completion it gives a user CQ, RC
            // and UC included (rxe_resp.c do_complete); programs compare wc_flags to it.
            let (imm, flags) = match seg {
                SendSeg::LastImm(i) | SendSeg::OnlyImm(i) => (imm_to_wc(*i), WcFlags::WITH_IMM),
                SendSeg::LastInv(k) | SendSeg::OnlyInv(k) => {
                    if let Some(w) = o.keys.by_index.get_mut(&(k.0 >> 8)) {
                        if w.key == k.0 && w.pd == pd && w.mw_type2 {
                            w.valid = false;
                        }
                    }
                    (k.0, WcFlags::WITH_INV)
                }
                _ => (0, WcFlags::EMPTY),
            };
            let wc = WorkCompletion {
                wr_id: rwqe.wr_id,
                status: WcStatus::Success,
                opcode: WcOpcode::Recv,
                byte_len: offset,
                imm_data: imm,
                qp_num: qpn,
                wc_flags: flags | WcFlags::GRH,
                ..Default::default()
            };
            o.push_wc(qp.init.recv_cq, wc);
            Outcome::Done(1)
        }
        Request::Write(seg) => {
            let (reth, last, imm) = match seg {
                WriteSeg::First(r) => (Some(r), false, None),
                WriteSeg::Middle => (None, false, None),
                WriteSeg::Last => (None, true, None),
                WriteSeg::LastImm(i) => (None, true, Some(*i)),
                WriteSeg::Only(r) => (Some(r), true, None),
                WriteSeg::OnlyImm(r, i) => (Some(r), true, Some(*i)),
            };
            if payload.len() as u32 > mtu || (!last && payload.len() as u32 != mtu) {
                return inv_req;
            }
            // A WRITE with immediate needs a receive WQE: check before touching memory.
            if imm.is_some() && qp.init.srq.is_none() && qp.rq.is_empty() {
                return Outcome::Rnr;
            }
            if imm.is_some()
                && qp
                    .init
                    .srq
                    .is_some_and(|s| o.srqs.get(&s.0).is_none_or(|s| s.wqes.is_empty()))
            {
                return Outcome::Rnr;
            }
            let Some(conn) = qp.conn.as_mut() else {
                return Outcome::Done(1);
            };
            let (space, mut host, mut left, total, mut held, mut runs) =
                match (reth, conn.resp.cur.take()) {
                    (Some(r), None) => {
                        if !access.contains(AccessFlags::REMOTE_WRITE) {
                            return access_err;
                        }
                        if r.dma_len == 0 {
                            (AddrSpace(0), 0, 0, 0, Vec::new(), None)
                        } else {
                            match o.keys.resolve(
                                r.rkey.0,
                                pd,
                                r.va,
                                u64::from(r.dma_len),
                                AccessFlags::REMOTE_WRITE,
                                true,
                                qpn.0,
                            ) {
                                Ok((s, h)) => (s, h, r.dma_len, r.dma_len, Vec::new(), None),
                                Err(e) => {
                                    let _ = e;
                                    return access_err;
                                }
                            }
                        }
                    }
                    (
                        None,
                        Some(InProgress::Write {
                            space,
                            host,
                            left,
                            total,
                            held,
                            runs,
                        }),
                    ) => (space, host, left, total, held, runs),
                    (_, other) => {
                        conn.resp.cur = other;
                        return inv_req;
                    }
                };
            if payload.len() as u32 > left || (last && payload.len() as u32 != left) {
                return inv_req;
            }
            let placed = if holds(last, h, held.len(), payload.len())
                && *runs.get_or_insert_with(|| mem.prefers_runs(space, host))
            {
                hold(&mut held, payload);
                Ok(())
            } else if held.is_empty() {
                if payload.is_empty() {
                    Ok(())
                } else {
                    mem.write(space, host, payload)
                }
            } else {
                held.extend_from_slice(payload);
                let at = host + payload.len() as u64 - held.len() as u64;
                let r = mem.write(space, at, &held);
                held.clear();
                r
            };
            if placed.is_err() {
                return Outcome::Fatal(NakCode::RemoteOperationalError, None);
            }
            host += payload.len() as u64;
            left -= payload.len() as u32;
            if !last {
                conn.resp.cur = Some(InProgress::Write {
                    space,
                    host,
                    left,
                    total,
                    held,
                    runs,
                });
                return Outcome::Done(1);
            }
            conn.resp.msn = conn.resp.msn.wrapping_add(1);
            if let Some(i) = imm {
                let Some(rwqe) = take_rwqe(qp, o) else {
                    return Outcome::Rnr;
                };
                let wc = WorkCompletion {
                    wr_id: rwqe.wr_id,
                    status: WcStatus::Success,
                    opcode: WcOpcode::RecvRdmaWithImm,
                    byte_len: total,
                    imm_data: imm_to_wc(i),
                    qp_num: qpn,
                    wc_flags: WcFlags::WITH_IMM | WcFlags::GRH,
                    ..Default::default()
                };
                o.push_wc(qp.init.recv_cq, wc);
            }
            Outcome::Done(1)
        }
        Request::Read(reth) => {
            if conn.resp.cur.is_some() || max_dest == 0 {
                return inv_req;
            }
            if !access.contains(AccessFlags::REMOTE_READ) {
                return access_err;
            }
            let (space, host) = if reth.dma_len == 0 {
                (AddrSpace(0), 0)
            } else {
                match o.keys.resolve(
                    reth.rkey.0,
                    pd,
                    reth.va,
                    u64::from(reth.dma_len),
                    AccessFlags::REMOTE_READ,
                    true,
                    qpn.0,
                ) {
                    Ok(x) => x,
                    Err(_) => return access_err,
                }
            };
            let npkts = packets_for(reth.dma_len, mtu);
            conn.resp.msn = conn.resp.msn.wrapping_add(1);
            if conn.resp.resources.len() >= max_dest {
                conn.resp.resources.pop_front();
            }
            conn.resp.resources.push_back(RdAtomicRes {
                psn: h.psn,
                npkts,
                kind: ResKind::Read,
            });
            let msn = conn.resp.msn;
            conn.resp.out.push_back(RespOut::Read {
                first_psn: h.psn,
                next_pkt: 0,
                npkts,
                space,
                host,
                len: reth.dma_len,
                msn,
            });
            Outcome::Done(npkts)
        }
        Request::Flush(f, reth) => crate::mpe::flush(qp, o, h.psn, f, reth),
        Request::AtomicWrite(reth) => crate::mpe::atomic_write(qp, o, h.psn, reth, payload, mem),
        Request::CompareSwap(a) | Request::FetchAdd(a) => {
            if conn.resp.cur.is_some() || max_dest == 0 {
                return inv_req;
            }
            if a.va & 7 != 0 {
                return inv_req;
            }
            if !access.contains(AccessFlags::REMOTE_ATOMIC) {
                return access_err;
            }
            let Ok((space, host)) = o.keys.resolve(
                a.rkey.0,
                pd,
                a.va,
                8,
                AccessFlags::REMOTE_ATOMIC,
                true,
                qpn.0,
            ) else {
                return access_err;
            };
            // IBA 9.4.5: the atomic is executed once; the device serializes atomics
            // (the whole device is one `&mut`), IBV_ATOMIC_HCA.
            let mut cur = [0u8; 8];
            if mem.read(space, host, &mut cur).is_err() {
                return Outcome::Fatal(NakCode::RemoteOperationalError, None);
            }
            let orig = u64::from_le_bytes(cur);
            let new = match r {
                Request::CompareSwap(_) => {
                    if orig == a.compare {
                        a.swap_add
                    } else {
                        orig
                    }
                }
                _ => orig.wrapping_add(a.swap_add),
            };
            if mem.write(space, host, &new.to_le_bytes()).is_err() {
                return Outcome::Fatal(NakCode::RemoteOperationalError, None);
            }
            conn.resp.msn = conn.resp.msn.wrapping_add(1);
            if conn.resp.resources.len() >= max_dest {
                conn.resp.resources.pop_front();
            }
            conn.resp.resources.push_back(RdAtomicRes {
                psn: h.psn,
                npkts: 1,
                kind: ResKind::Atomic(orig),
            });
            let msn = conn.resp.msn;
            conn.resp.out.push_back(RespOut::AtomicAck {
                psn: h.psn,
                orig,
                msn,
            });
            Outcome::Done(1)
        }
    }
}

/// `ibv_wc.imm_data` from the wire value: in-memory bytes equal the wire bytes.
pub(crate) fn imm_to_wc(i: wire::roce::ImmDt) -> u32 {
    u32::from_le_bytes(i.0.to_be_bytes())
}

/// Takes a receive WQE from the SRQ or the RQ; raises the SRQ limit event.
pub(crate) fn take_rwqe(qp: &mut Qp, o: &mut Objects) -> Option<RecvWr> {
    match qp.init.srq {
        None => qp.rq.pop_front(),
        Some(h) => crate::srq::take(o, h),
    }
}
