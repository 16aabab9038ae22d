//! The requester (IBA 9.7.4): the transmit scheduler, segmentation to the path MTU,
//! packet building straight from application memory.

use std::time::Instant;

use wire::roce::{
    packet, AtomicEthRepr, Body, DethRepr, FethRepr, Header, ImmDt, PlacementType, Request,
    Selectivity, SendSeg, UcRequest, UcSendSeg, WriteSeg, XrcEthRepr, ICRC_LEN,
};

use crate::attr::*;
use crate::completer::Completer;
use crate::dcqcn::DcqcnParams;
use crate::dma::{check_local_sges, gather_ahead};
use crate::memory::Memory;
use crate::mw::bind_window;
use crate::objects::{Objects, RECOUNT};
use crate::path::path_of;
use crate::pfc::TxPause;
use crate::qp::*;
use crate::reaction;
use crate::responder::transmit_response;
use crate::timers::TimerKind;
use crate::types::*;
use wire::roce::Qpn;

/// Most PSNs a requester has in flight (go-back-N window).
const WINDOW: i32 = 512;

/// Most request packets a device has in flight over all its RC QPs before it starts no
/// new message. Each QP's own window keeps one QP's queue short, but a thousand QPs with
/// 512 each put half a million packets between two daemons: the receiving one drains
/// them more slowly than the sender sends them (a software NIC has no line rate), so the
/// first QPs' ACKs come back after their ACK timeout (perftest's 67 ms) and the retries
/// run out with nothing lost. 4096 packets are 4–16 MiB at the path MTU, tens of
/// milliseconds of a software receiver's work at most, and more than one QP needs for
/// its bandwidth.
pub(crate) const DEVICE_WINDOW: u32 = 4096;

/// What the requester touches: the QPs and objects, the configuration (GIDs of UD
/// sources), the link's pauses and the reaction point's pacing.
#[derive(Debug)]
pub(crate) struct RequesterParts<'a> {
    pub cfg: &'a DeviceConfig,
    pub o: &'a mut Objects,
    pub qps: &'a mut U32Map<Qp>,
    pub pfc: &'a mut TxPause,
    pub dcqcn: &'a DcqcnParams,
}

impl RequesterParts<'_> {
    fn completer(&mut self) -> Completer<'_> {
        Completer {
            o: self.o,
            qps: self.qps,
        }
    }

    /// Writes the next request or response packet of the scheduled QPs into `buf` (BTH
    /// through ICRC) and says where it goes; `None` when none is ready.
    pub(crate) fn poll_transmit(
        &mut self,
        now: Instant,
        mem: &mut dyn Memory,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        while let Some(qpn) = self.o.sched.pop_front() {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            qp.scheduled = false;
            if self.pfc.held(now, qpn, qp, &mut self.o.counters)
                || reaction::paced_out(now, qpn, qp, self.o)
            {
                continue;
            }
            let t = self.transmit_one(now, qpn, mem, buf);
            if let Some(t) = t {
                if let Some(qp) = self.qps.get_mut(&qpn) {
                    qp.counters.sent_pkts += 1;
                    self.o.schedule(qp);
                }
                self.o.counters.sent_pkts += 1;
                return Some(t);
            }
        }
        None
    }

    /// Whether the device may start another RC message ([`DEVICE_WINDOW`]).
    fn device_window_open(&mut self, now: Instant) -> bool {
        let f = &mut self.o.inflight;
        if f.counted_at
            .is_none_or(|t| now.saturating_duration_since(t) >= RECOUNT)
        {
            f.packets = self
                .qps
                .values()
                .filter(|q| q.qp_type.is_reliable())
                .filter_map(|q| q.conn.as_ref()?.req.as_ref())
                .map(|r| r.next_psn.distance(r.una).max(0) as u32)
                .sum();
            f.counted_at = Some(now);
        }
        f.packets < DEVICE_WINDOW
    }

    fn transmit_one(
        &mut self,
        now: Instant,
        qpn: u32,
        mem: &mut dyn Memory,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let window_open = self.device_window_open(now);
        let qp = self.qps.get(&qpn)?;
        if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Err) {
            return None;
        }
        let conn = qp.conn.as_ref()?;
        if !conn.resp.out.is_empty() {
            return transmit_response(self.qps, self.o, qpn, mem, buf);
        }
        loop {
            let qp = self.qps.get_mut(&qpn)?;
            if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
                return None;
            }
            let conn = qp.conn.as_mut()?;
            let mtu = conn.mtu;
            let req = conn.req.as_mut()?;
            if req.rnr_waiting {
                return None;
            }
            let (i, pkt) = req.cursor;
            let wqe = qp.sq.get(i)?;
            if wqe.first_psn.is_none() && wqe.done.is_none() {
                // Starting a new WR.
                if qp.state == QpState::Sqd {
                    return None;
                }
                // READs and atomics in flight ahead of this WR, counted only for a WR
                // they can hold back (a scan of the queue, too dear for every SEND).
                let fence = wqe.wr.send_flags.contains(SendFlags::FENCE);
                if fence || wqe.takes_resource() {
                    let outstanding_rd = qp
                        .sq
                        .iter()
                        .take(i)
                        .filter(|w| w.takes_resource() && w.done.is_none())
                        .count();
                    if fence && outstanding_rd > 0 {
                        return None;
                    }
                    if wqe.takes_resource()
                        && outstanding_rd >= usize::from(qp.attr.max_rd_atomic.max(1))
                    {
                        return None;
                    }
                }
                if qp.qp_type.is_reliable() && req.next_psn.distance(req.una) >= WINDOW {
                    return None;
                }
                if qp.qp_type.is_reliable() && !window_open {
                    self.o.counters.device_window_waits += 1;
                    self.o.timers.set(qpn, TimerKind::Window, now + RECOUNT);
                    return None;
                }
                match wqe.wr.opcode {
                    WrOpcode::LocalInv | WrOpcode::BindMw => {
                        let pd = qp.init.pd;
                        let wr = wqe.wr.clone();
                        let status = self.local_op(pd, Qpn(qpn), &wr);
                        let qp = self.qps.get_mut(&qpn)?;
                        qp.sq[i].done = Some(status);
                        if let Some(r) = qp.conn.as_mut().and_then(|c| c.req.as_mut()) {
                            r.cursor = (i + 1, 0);
                        }
                        self.completer().retire(qpn);
                        continue;
                    }
                    _ => {}
                }
                // A UD WR's source is the GID at its AH's sgid_index, looked up now: an
                // empty slot (the address went away) sends nothing and completes the WR in
                // error, as rxe does for a WR without a usable address vector
                // (IB_WC_LOC_QP_OP_ERR).
                let ud_source_gone = qp.qp_type == QpType::Ud
                    && self
                        .o
                        .ahs
                        .get(&wqe.wr.ud.ah.0)
                        .and_then(|ah| self.cfg.gids.get(usize::from(ah.attr.grh.sgid_index)))
                        .is_none_or(|g| g.is_zero());
                if ud_source_gone {
                    qp.sq[i].done = Some(WcStatus::LocQpOpErr);
                    req.cursor = (i + 1, 0);
                    self.completer().retire(qpn);
                    return None;
                }
                if let Err(status) = check_local_sges(&self.o.keys, qp.init.pd, wqe) {
                    qp.sq[i].done = Some(status);
                    req.cursor = (i + 1, 0);
                    self.completer().retire(qpn);
                    return None;
                }
                let npkts = match wqe.wr.opcode {
                    WrOpcode::AtomicCmpAndSwp
                    | WrOpcode::AtomicFetchAndAdd
                    | WrOpcode::Flush
                    | WrOpcode::AtomicWrite => 1,
                    _ => packets_for(wqe.len, mtu),
                };
                let first = req.next_psn;
                req.next_psn = first.wrapping_add(npkts);
                if qp.qp_type.is_reliable() {
                    self.o.inflight.packets = self.o.inflight.packets.saturating_add(npkts);
                }
                let w = &mut qp.sq[i];
                w.first_psn = Some(first);
                w.npkts = npkts;
            }
            let qp = self.qps.get(&qpn)?;
            let wqe = &qp.sq[i];
            if wqe.done.is_some() || wqe.first_psn.is_none() {
                // Already finished (e.g. READ completed while rewinding): skip.
                let qp = self.qps.get_mut(&qpn)?;
                let r = qp.conn.as_mut()?.req.as_mut()?;
                r.cursor = (i + 1, 0);
                continue;
            }
            return self.transmit_request(now, qpn, i, pkt, mem, buf);
        }
    }

    /// Executes LOCAL_INV / BIND_MW at their turn in the send queue.
    fn local_op(&mut self, pd: PdHandle, qpn: Qpn, wr: &SendWr) -> WcStatus {
        match wr.opcode {
            WrOpcode::BindMw => match bind_window(&mut self.o.keys, pd, Some(qpn), &wr.bind_mw) {
                Ok(_) => WcStatus::Success,
                Err(s) => s,
            },
            _ => {
                let key = wr.invalidate_rkey.0;
                match self.o.keys.by_index.get_mut(&(key >> 8)) {
                    Some(r) if r.key == key && r.pd == pd && r.window_of.is_some() => {
                        r.valid = false;
                        WcStatus::Success
                    }
                    _ => WcStatus::LocProtErr,
                }
            }
        }
    }

    fn transmit_request(
        &mut self,
        now: Instant,
        qpn: u32,
        i: usize,
        pkt: u32,
        mem: &mut dyn Memory,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let (path, dest_qpn, header, body, range, wqe_len) = {
            let qp = self.qps.get(&qpn)?;
            let conn = qp.conn.as_ref()?;
            let wqe = &qp.sq[i];
            let mtu = conn.mtu;
            let first = wqe.first_psn?;
            let psn = first.wrapping_add(pkt);
            let last = pkt + 1 == wqe.npkts;
            let off = pkt * mtu;
            let n = wqe.len.saturating_sub(off).min(mtu);
            let imm = ImmDt(u32::from_be_bytes(wqe.wr.imm_data.to_le_bytes()));
            let seg = |first_pkt: bool| (first_pkt, last);
            let mut range = (off, n);
            let (path, dest) = if qp.qp_type == QpType::Ud {
                let ah = self.o.ahs.get(&wqe.wr.ud.ah.0)?;
                (
                    path_of(self.cfg, qp.qpn, &ah.attr, wqe.wr.ud.remote_qpn).ok()?,
                    wqe.wr.ud.remote_qpn,
                )
            } else {
                (conn.path?, conn.dest_qpn)
            };
            let body = match (qp.qp_type, wqe.wr.opcode) {
                (QpType::Ud, op) => Body::Ud {
                    deth: DethRepr {
                        qkey: if wqe.wr.ud.remote_qkey.is_controlled() {
                            qp.attr.qkey
                        } else {
                            wqe.wr.ud.remote_qkey
                        },
                        src_qp: qp.qpn,
                    },
                    imm: (op == WrOpcode::SendWithImm).then_some(imm),
                },
                (t, WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv) => {
                    let s = match (seg(pkt == 0), wqe.wr.opcode) {
                        ((true, true), WrOpcode::Send) => SendSeg::Only,
                        ((true, true), WrOpcode::SendWithImm) => SendSeg::OnlyImm(imm),
                        ((true, true), _) => SendSeg::OnlyInv(wqe.wr.invalidate_rkey),
                        ((true, false), _) => SendSeg::First,
                        ((false, false), _) => SendSeg::Middle,
                        ((false, true), WrOpcode::Send) => SendSeg::Last,
                        ((false, true), WrOpcode::SendWithImm) => SendSeg::LastImm(imm),
                        ((false, true), _) => SendSeg::LastInv(wqe.wr.invalidate_rkey),
                    };
                    if t == QpType::Uc {
                        Body::Uc(UcRequest::Send(match s {
                            SendSeg::First => UcSendSeg::First,
                            SendSeg::Middle => UcSendSeg::Middle,
                            SendSeg::Last | SendSeg::LastInv(_) => UcSendSeg::Last,
                            SendSeg::LastImm(i) => UcSendSeg::LastImm(i),
                            SendSeg::Only | SendSeg::OnlyInv(_) => UcSendSeg::Only,
                            SendSeg::OnlyImm(i) => UcSendSeg::OnlyImm(i),
                        }))
                    } else {
                        Body::RcRequest(Request::Send(s))
                    }
                }
                (t, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm) => {
                    let reth = wire::roce::RethRepr {
                        va: wqe.wr.rdma.remote_addr,
                        rkey: wqe.wr.rdma.rkey,
                        dma_len: wqe.len,
                    };
                    let with_imm = wqe.wr.opcode == WrOpcode::RdmaWriteWithImm;
                    let w = match (seg(pkt == 0), with_imm) {
                        ((true, true), false) => WriteSeg::Only(reth),
                        ((true, true), true) => WriteSeg::OnlyImm(reth, imm),
                        ((true, false), _) => WriteSeg::First(reth),
                        ((false, false), _) => WriteSeg::Middle,
                        ((false, true), false) => WriteSeg::Last,
                        ((false, true), true) => WriteSeg::LastImm(imm),
                    };
                    if t == QpType::Uc {
                        Body::Uc(UcRequest::Write(w))
                    } else {
                        Body::RcRequest(Request::Write(w))
                    }
                }
                (_, WrOpcode::RdmaRead) => {
                    range = (0, 0);
                    Body::RcRequest(Request::Read(read_reth(wqe, pkt, mtu)))
                }
                (_, op @ (WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)) => {
                    range = (0, 0);
                    let a = AtomicEthRepr {
                        va: wqe.wr.atomic.remote_addr,
                        rkey: wqe.wr.atomic.rkey,
                        swap_add: if op == WrOpcode::AtomicCmpAndSwp {
                            wqe.wr.atomic.swap
                        } else {
                            wqe.wr.atomic.compare_add
                        },
                        compare: if op == WrOpcode::AtomicCmpAndSwp {
                            wqe.wr.atomic.compare_add
                        } else {
                            0
                        },
                    };
                    if op == WrOpcode::AtomicCmpAndSwp {
                        Body::RcRequest(Request::CompareSwap(a))
                    } else {
                        Body::RcRequest(Request::FetchAdd(a))
                    }
                }
                (_, WrOpcode::Flush) => {
                    range = (0, 0);
                    let f = &wqe.wr.flush;
                    Body::RcRequest(Request::Flush(
                        FethRepr {
                            placement: PlacementType(f.placement),
                            selectivity: Selectivity::from_bits(f.selectivity),
                        },
                        wire::roce::RethRepr {
                            va: wqe.wr.rdma.remote_addr,
                            rkey: wqe.wr.rdma.rkey,
                            dma_len: wqe.len,
                        },
                    ))
                }
                // The 8 bytes are the WQE's inline data (`enqueue_send`), gathered as
                // a one-packet message's payload.
                (_, WrOpcode::AtomicWrite) => {
                    Body::RcRequest(Request::AtomicWrite(wire::roce::RethRepr {
                        va: wqe.wr.rdma.remote_addr,
                        rkey: wqe.wr.rdma.rkey,
                        dma_len: 8,
                    }))
                }
                (_, WrOpcode::LocalInv | WrOpcode::BindMw) => return None,
            };
            // XRC initiator: the RC request with the XRCETH naming the remote XRC SRQ
            // (`ibv_send_wr.qp_type.xrc.remote_srqn`, carried in `ud.remote_qpn`).
            let body = match (qp.qp_type, body) {
                (QpType::XrcSend, Body::RcRequest(request)) => Body::XrcRequest {
                    xrceth: XrcEthRepr {
                        xrc_srq: wqe.wr.ud.remote_qpn.0 & 0xff_ffff,
                    },
                    request,
                },
                (_, b) => b,
            };
            let mut header = Header::new(dest, psn);
            header.ack_req = qp.qp_type.is_reliable() && last;
            header.solicited = last && wqe.wr.send_flags.contains(SendFlags::SOLICITED);
            (path, dest, header, body, range, wqe.len)
        };
        let _ = (dest_qpn, wqe_len);
        // Build the packet: headers, then the payload straight from memory.
        let (off, n) = range;
        let hlen = body.header_len();
        let pad = usize::from(packet::pad_count(n as usize));
        let total = hlen + n as usize + pad + ICRC_LEN;
        // Reuse the buffer without zero-filling it: headers and payload overwrite it, the
        // pad is cleared below and the ICRC written last.
        if buf.len() < total {
            buf.resize(total, 0);
        }
        buf.truncate(total);
        buf[total - ICRC_LEN - pad..total - ICRC_LEN].fill(0);
        packet::emit_headers(&header, &body, n as usize, buf);
        let gathered = {
            let qp = self.qps.get_mut(&qpn)?;
            // A UD message is one packet, which `gather_ahead` reads on its own.
            gather_ahead(
                &self.o.keys,
                qp.init.pd,
                &qp.sq[i],
                &mut qp.ahead,
                off,
                &mut buf[hlen..hlen + n as usize],
                mem,
            )
        };
        if let Err(status) = gathered {
            let qp = self.qps.get_mut(&qpn)?;
            qp.sq[i].done = Some(status);
            self.completer().retire(qpn);
            return None;
        }
        // Advance the cursor; UC/UD WRs complete when their last packet leaves.
        let qp = self.qps.get_mut(&qpn)?;
        let qp_type = qp.qp_type;
        let npkts = qp.sq[i].npkts;
        let is_read = qp.sq[i].wr.opcode == WrOpcode::RdmaRead;
        let timeout = {
            let req = qp.conn.as_mut()?.req.as_mut()?;
            req.cursor = if pkt + 1 < npkts && !is_read {
                (i, pkt + 1)
            } else {
                (i + 1, 0)
            };
            req.ack_timeout
        };
        match qp_type {
            t if t.is_reliable() => {
                if let Some(t) = timeout {
                    if !self.o.timers.is_set(qpn, TimerKind::Retransmit) {
                        self.o.timers.set(qpn, TimerKind::Retransmit, now + t);
                    }
                }
            }
            _ => {
                if pkt + 1 >= npkts {
                    qp.sq[i].done = Some(WcStatus::Success);
                    self.completer().retire(qpn);
                }
            }
        }
        reaction::request_sent(*self.dcqcn, now, qpn, total, self.qps);
        Some(Transmit {
            src: path.src,
            dst: path.dst,
            len: total,
            traffic_class: path.traffic_class,
        })
    }
}
