//! The transmit side: segmentation of send WRs and owed responses into FPDUs
//! (RFC 5040 §5, RFC 5041 §5: segments no larger than the MULPDU).

use wire::iwarp::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use wire::iwarp::rdmap::{RdmapMessage, ReadRequest};
use wire::iwarp::{Stag, TerminateError};

use super::conn::{Connection, IrqEntry, OrqEntry, Phase};
use super::ext::{AtomicOp, ExtMessage};
use super::Stags;
use crate::attr::SendWr;
use crate::memory::Memory;
use crate::types::{AccessFlags, SendFlags, WcStatus, WrOpcode};

/// Octets generated per `poll_stream_transmit` call, at most (plus one FPDU).
const TX_BUDGET: usize = 256 * 1024;

/// Reads `len` octets at message offset `off` of the WR's data into `out`.
#[allow(clippy::too_many_arguments)]
fn gather<K: Stags + ?Sized, M: Memory + ?Sized>(
    keys: &K,
    mem: &mut M,
    (pd, qpn, inline_space): (crate::types::PdHandle, u32, crate::types::AddrSpace),
    wr: &SendWr,
    mut off: u64,
    len: usize,
    out: &mut Vec<u8>,
) -> Result<(), WcStatus> {
    out.clear();
    if let Some(d) = &wr.inline_data {
        let s = off as usize;
        out.extend_from_slice(d.get(s..s + len).ok_or(WcStatus::LocLenErr)?);
        return Ok(());
    }
    // IBV_SEND_INLINE not yet copied: the SGEs name the owner's memory, no lkey.
    let inline = wr.send_flags.contains(SendFlags::INLINE);
    let mut left = len;
    for s in &wr.sg_list {
        if left == 0 {
            break;
        }
        let sl = u64::from(s.length);
        if off >= sl {
            off -= sl;
            continue;
        }
        let n = ((sl - off) as usize).min(left);
        if inline {
            let at = out.len();
            out.resize(at + n, 0);
            mem.read(inline_space, s.addr.wrapping_add(off), &mut out[at..])
                .map_err(|_| WcStatus::LocProtErr)?;
            left -= n;
            off = 0;
            continue;
        }
        let (space, host) = keys
            .resolve(
                s.lkey.0,
                pd,
                qpn,
                s.addr.wrapping_add(off),
                n as u64,
                AccessFlags::EMPTY,
                false,
            )
            .map_err(|_| WcStatus::LocProtErr)?;
        let at = out.len();
        out.resize(at + n, 0);
        mem.read(space, host, &mut out[at..])
            .map_err(|_| WcStatus::LocProtErr)?;
        left -= n;
        off = 0;
    }
    if left == 0 {
        Ok(())
    } else {
        Err(WcStatus::LocLenErr)
    }
}

/// Checks every SGE of a WR names memory with `need` (before anything is sent).
fn check_sges<K: Stags + ?Sized>(
    keys: &K,
    pd: crate::types::PdHandle,
    qpn: u32,
    wr: &SendWr,
    need: AccessFlags,
) -> Result<(), WcStatus> {
    if wr.inline_data.is_some() || wr.send_flags.contains(SendFlags::INLINE) {
        return Ok(());
    }
    for s in &wr.sg_list {
        keys.resolve(s.lkey.0, pd, qpn, s.addr, u64::from(s.length), need, false)
            .map_err(|_| WcStatus::LocProtErr)?;
    }
    Ok(())
}

impl Connection {
    /// Bytes for TCP to send, appended to `buf`; returns how many. Reads the data of
    /// send WRs and Read Responses from memory as it segments them. Call until it
    /// returns 0.
    pub fn poll_stream_transmit<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        buf: &mut Vec<u8>,
        keys: &mut K,
        mem: &mut M,
    ) -> usize {
        let start = buf.len();
        buf.append(&mut self.out);
        while buf.len() - start < TX_BUDGET && self.tx_segment(keys, mem) {
            buf.append(&mut self.out);
        }
        buf.append(&mut self.out);
        buf.len() - start
    }

    fn max_payload(&self, tagged: bool) -> usize {
        let h = if tagged {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        self.mulpdu - h
    }

    fn emit_msg(&mut self, msg: &RdmapMessage<'_>) {
        let mut u = vec![0u8; msg.buffer_len()];
        msg.emit(&mut u);
        self.emit_fpdu(&u);
    }

    fn emit_ext(&mut self, msg: &ExtMessage<'_>) {
        let mut u = Vec::new();
        msg.emit(&mut u);
        self.emit_fpdu(&u);
    }

    /// A send WR failed locally: complete it with `status`, terminate, flush the rest.
    fn local_error(&mut self, idx: usize, status: WcStatus) {
        if let Some(e) = self.sq.get_mut(idx) {
            e.status = Some(status);
        }
        let err = if status == WcStatus::LocQpOpErr {
            TerminateError::RdmapOperationUnspecified
        } else {
            TerminateError::RdmapCatastrophic
        };
        self.send_terminate(err, None);
    }

    /// Generates one FPDU (or finishes one WR); false when nothing can be sent now.
    fn tx_segment<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        keys: &mut K,
        mem: &mut M,
    ) -> bool {
        if self.phase != Phase::Rts || !self.tx_ready {
            return false;
        }
        if self.tx_response(mem) {
            return true;
        }
        let idx = self.sq_cur;
        let Some(e) = self.sq.get(idx) else {
            return false;
        };
        let (pd, qpn) = (self.cfg.pd, self.cfg.qpn.0);
        let opcode = e.wr.opcode;
        match opcode {
            WrOpcode::Send
            | WrOpcode::SendWithInv
            | WrOpcode::SendWithImm
            | WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm => {
                let imm_op = matches!(opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm);
                if imm_op && !self.ext {
                    self.local_error(idx, WcStatus::LocQpOpErr);
                    return true;
                }
                let tagged = matches!(opcode, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm);
                if !e.started {
                    if let Err(s) = check_sges(keys, pd, qpn, &e.wr, AccessFlags::EMPTY) {
                        self.local_error(idx, s);
                        return true;
                    }
                    let msn = if tagged {
                        0
                    } else {
                        let m = self.tx_msn[0];
                        self.tx_msn[0] = m.wrapping_add(1);
                        m
                    };
                    let e = &mut self.sq[idx];
                    e.started = true;
                    e.msn = msn;
                }
                let e = &self.sq[idx];
                let chunk = ((e.total - e.sent) as usize).min(self.max_payload(tagged));
                let mut payload = Vec::with_capacity(chunk);
                if let Err(s) = gather(
                    keys,
                    mem,
                    (pd, qpn, self.cfg.inline_space),
                    &e.wr,
                    e.sent,
                    chunk,
                    &mut payload,
                ) {
                    self.local_error(idx, s);
                    return true;
                }
                let last = e.sent + chunk as u64 == e.total;
                let solicited = e.wr.send_flags.contains(SendFlags::SOLICITED);
                let msg_off = e.sent;
                let msn = e.msn;
                let wr = &e.wr;
                if tagged {
                    let msg = RdmapMessage::Write {
                        last,
                        stag: Stag(wr.rdma.rkey.0),
                        offset: wr.rdma.remote_addr.wrapping_add(msg_off),
                        payload: &payload,
                    };
                    self.emit_msg(&msg);
                } else if opcode == WrOpcode::SendWithImm {
                    let msg = ExtMessage::SendImm {
                        last,
                        solicited,
                        msn,
                        mo: msg_off as u32,
                        imm: wr.imm_data,
                        payload: &payload,
                    };
                    self.emit_ext(&msg);
                } else {
                    let invalidate =
                        (opcode == WrOpcode::SendWithInv).then_some(Stag(wr.invalidate_rkey.0));
                    let msg = RdmapMessage::Send {
                        last,
                        solicited,
                        invalidate,
                        msn,
                        mo: msg_off as u32,
                        payload: &payload,
                    };
                    self.emit_msg(&msg);
                }
                let imm = self.sq[idx].wr.imm_data;
                let e = &mut self.sq[idx];
                e.sent += chunk as u64;
                if last {
                    e.byte_len = e.total as u32;
                    e.status = Some(WcStatus::Success);
                    self.sq_cur += 1;
                    if opcode == WrOpcode::RdmaWriteWithImm {
                        let msn = self.tx_msn[0];
                        self.tx_msn[0] = msn.wrapping_add(1);
                        self.emit_ext(&ExtMessage::Immediate {
                            solicited,
                            msn,
                            imm,
                        });
                    }
                    // Like siw: a Send or Write is complete once handed to the stream.
                    self.retire();
                }
                true
            }
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                let atomic = opcode != WrOpcode::RdmaRead;
                if atomic && !self.ext {
                    self.local_error(idx, WcStatus::LocQpOpErr);
                    return true;
                }
                // RFC 5040 §6.4: at most ORD outstanding; a fenced WR waits for them all.
                if self.orq.len() >= usize::from(self.ord.max(1))
                    || (e.wr.send_flags.contains(SendFlags::FENCE) && !self.orq.is_empty())
                {
                    return false;
                }
                let need = AccessFlags::LOCAL_WRITE;
                if let Err(s) = check_sges(keys, pd, qpn, &e.wr, need) {
                    self.local_error(idx, s);
                    return true;
                }
                if atomic && e.total < 8 {
                    self.local_error(idx, WcStatus::LocLenErr);
                    return true;
                }
                let (sink_stag, sink_to) =
                    e.wr.sg_list.first().map_or((0, 0), |s| (s.lkey.0, s.addr));
                let seq = e.seq;
                let msn = self.tx_msn[1];
                self.tx_msn[1] = msn.wrapping_add(1);
                if atomic {
                    let req_id = self.next_req_id;
                    self.next_req_id = req_id.wrapping_add(1);
                    let a = self.sq[idx].wr.atomic;
                    let (op, data, compare) = if opcode == WrOpcode::AtomicFetchAndAdd {
                        (AtomicOp::FetchAdd, a.compare_add, 0)
                    } else {
                        (AtomicOp::CmpSwap, a.swap, a.compare_add)
                    };
                    self.orq.push_back(OrqEntry {
                        seq: Some(seq),
                        sink_stag,
                        sink_to,
                        size: 8,
                        atomic: Some(req_id),
                    });
                    self.emit_ext(&ExtMessage::AtomicRequest {
                        msn,
                        op,
                        req_id,
                        stag: a.rkey.0,
                        to: a.remote_addr,
                        data,
                        compare,
                    });
                } else {
                    let e = &self.sq[idx];
                    let size = e.total;
                    let req = ReadRequest {
                        sink_stag: Stag(sink_stag),
                        sink_offset: sink_to,
                        size: size as u32,
                        src_stag: Stag(e.wr.rdma.rkey.0),
                        src_offset: e.wr.rdma.remote_addr,
                    };
                    self.orq.push_back(OrqEntry {
                        seq: Some(seq),
                        sink_stag,
                        sink_to,
                        size,
                        atomic: None,
                    });
                    self.emit_msg(&RdmapMessage::ReadRequest { msn, request: req });
                }
                self.sq[idx].started = true;
                self.sq_cur += 1;
                true
            }
            WrOpcode::LocalInv => {
                let rkey = e.wr.invalidate_rkey.0;
                let status = match keys.invalidate(rkey, pd) {
                    Ok(()) => WcStatus::Success,
                    Err(_) => WcStatus::LocProtErr,
                };
                if status != WcStatus::Success {
                    self.local_error(idx, status);
                    return true;
                }
                let e = &mut self.sq[idx];
                e.status = Some(status);
                self.sq_cur += 1;
                self.retire();
                true
            }
            WrOpcode::BindMw => {
                self.local_error(idx, WcStatus::LocQpOpErr);
                true
            }
        }
    }

    /// One segment of the oldest owed Read or Atomic Response.
    fn tx_response<M: Memory + ?Sized>(&mut self, mem: &mut M) -> bool {
        let max = self.max_payload(true);
        let Some(front) = self.irq.front_mut() else {
            return false;
        };
        match *front {
            IrqEntry::Atomic { req_id, original } => {
                self.irq.pop_front();
                let msn = self.tx_msn[3];
                self.tx_msn[3] = msn.wrapping_add(1);
                self.emit_ext(&ExtMessage::AtomicResponse {
                    msn,
                    req_id,
                    original,
                });
                true
            }
            IrqEntry::Read {
                sink_stag,
                sink_to,
                space,
                host,
                size,
                ref mut sent,
            } => {
                let chunk = ((size - *sent) as usize).min(max);
                let off = *sent;
                *sent += chunk as u64;
                let last = *sent == size;
                let mut payload = vec![0u8; chunk];
                if chunk > 0 && mem.read(space, host + off, &mut payload).is_err() {
                    self.send_terminate(TerminateError::RdmapCatastrophic, None);
                    return true;
                }
                if last {
                    self.irq.pop_front();
                }
                self.emit_msg(&RdmapMessage::ReadResponse {
                    last,
                    stag: Stag(sink_stag),
                    offset: sink_to.wrapping_add(off),
                    payload: &payload,
                });
                true
            }
        }
    }
}
