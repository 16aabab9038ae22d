//! The responder (IBA 9.7.5.1): PSN checks, duplicates, NAKs, RNR, remote access checks,
//! SEND/WRITE/READ/atomic execution, the READ/atomic resource cache; UC and UD receive.

use std::net::SocketAddr;
use std::time::Instant;

use wire::roce::{
    packet, AethRepr, AtomicAckEthRepr, Body, CreditCode, Header, NakCode, Psn, ReadRespSeg,
    Request, Response, RnrTimer, SendSeg, Syndrome, UcRequest, WriteSeg, ICRC_LEN,
};

use crate::attr::*;
use crate::device::{Device, Objects};
use crate::dma::{finish_icrc, scatter};
use crate::memory::Memory;
use crate::mr::KeyError;
use crate::qp::*;
use crate::types::*;
use wire::roce::Qpn;

/// What to do after a request packet.
enum Outcome {
    /// Processed; advance the expected PSN by this many and maybe ACK.
    Done(u32),
    /// Send an RNR NAK (no receive WQE); the PSN stays.
    Rnr,
    /// Fatal: NAK with this code, raise this event, move to error.
    Fatal(NakCode, Option<AsyncEvent>),
}

impl Device {
    pub(crate) fn handle_request(
        &mut self,
        now: Instant,
        qpn: u32,
        d: &Datagram<'_>,
        repr: &wire::roce::PacketRepr<'_>,
        mem: &mut dyn Memory,
    ) {
        let _ = now;
        match repr.body {
            Body::RcRequest(r) => self.rc_request(qpn, &repr.header, &r, repr.payload, mem),
            Body::Uc(r) => self.uc_request(qpn, &repr.header, &r, repr.payload, mem),
            Body::Ud { deth, imm } => self.ud_request(qpn, d, deth, imm, repr.payload, mem),
            _ => {}
        }
    }

    fn rc_request(
        &mut self,
        qpn: u32,
        h: &Header,
        r: &Request,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) {
        let Device { qps, o, .. } = self;
        let Some(qp) = qps.get_mut(&qpn) else { return };
        let Some(conn) = qp.conn.as_mut() else { return };
        let psn = h.psn;
        let d = psn.distance(conn.resp.epsn);
        if d > 0 {
            // IBA 9.7.5.1.1: a PSN sequence error; one NAK per gap.
            if !conn.resp.nak_sent {
                conn.resp.nak_sent = true;
                let (epsn, msn) = (conn.resp.epsn, conn.resp.msn);
                conn.resp.out.push_back(RespOut::Ack {
                    psn: epsn,
                    syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                    msn,
                });
                o.counters.seq_naks_sent += 1;
                qp.counters.seq_naks_sent += 1;
            }
            return;
        }
        if d < 0 {
            o.counters.duplicate_requests += 1;
            qp.counters.duplicate_requests += 1;
            duplicate(qp, o, psn, r);
            return;
        }
        let outcome = execute(qp, o, h, r, payload, mem);
        let Some(conn) = qp.conn.as_mut() else { return };
        match outcome {
            Outcome::Done(n) => {
                conn.resp.nak_sent = false;
                conn.resp.epsn = psn.wrapping_add(n);
                if h.ack_req && matches!(r, Request::Send(_) | Request::Write(_)) {
                    let msn = conn.resp.msn;
                    push_ack(
                        &mut conn.resp,
                        RespOut::Ack {
                            psn,
                            syndrome: Syndrome::Ack(CreditCode::INVALID),
                            msn,
                        },
                    );
                }
            }
            Outcome::Rnr => {
                let msn = conn.resp.msn;
                conn.resp.out.push_back(RespOut::Ack {
                    psn,
                    syndrome: Syndrome::RnrNak(RnrTimer::new(qp.attr.min_rnr_timer)),
                    msn,
                });
                o.counters.rnr_naks_sent += 1;
                qp.counters.rnr_naks_sent += 1;
            }
            Outcome::Fatal(code, ev) => {
                let msn = conn.resp.msn;
                conn.resp.out.push_back(RespOut::Ack {
                    psn,
                    syndrome: Syndrome::Nak(code),
                    msn,
                });
                if let Some(e) = ev {
                    o.events.push_back((qp.owner, e));
                }
                // Send the NAK, then move to the error state (see transmit_response).
                conn.resp.cur = None;
                conn.resp.fatal = true;
            }
        }
    }

    fn uc_request(
        &mut self,
        qpn: u32,
        h: &Header,
        r: &UcRequest,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) {
        let Device { qps, o, .. } = self;
        let Some(qp) = qps.get_mut(&qpn) else { return };
        let Some(conn) = qp.conn.as_mut() else { return };
        let psn = h.psn;
        let req = match r {
            UcRequest::Send(s) => Request::Send((*s).into()),
            UcRequest::Write(w) => Request::Write(*w),
        };
        let starts = matches!(
            req,
            Request::Send(SendSeg::First | SendSeg::Only | SendSeg::OnlyImm(_))
                | Request::Write(WriteSeg::First(_) | WriteSeg::Only(_) | WriteSeg::OnlyImm(..))
        );
        // A packet from the recent past is a duplicate the network made: drop it rather
        // than deliver a message twice (rxe would start a new message on it).
        let d = psn.distance(conn.resp.epsn);
        if (-1024..0).contains(&d) {
            o.counters.duplicate_requests += 1;
            return;
        }
        if psn != conn.resp.epsn || (starts && conn.resp.cur.is_some()) {
            // IBA 9.8.3: a gap drops the message in progress, never part of one.
            abort_message(qp);
            let Some(conn) = qp.conn.as_mut() else { return };
            conn.resp.epsn = psn;
            if !starts {
                conn.resp.cur = Some(InProgress::Drop);
                conn.resp.epsn = psn.wrapping_add(1);
                return;
            }
        }
        let Some(conn) = qp.conn.as_mut() else { return };
        if matches!(conn.resp.cur, Some(InProgress::Drop)) {
            conn.resp.epsn = psn.wrapping_add(1);
            if !starts {
                if is_last(&req) {
                    conn.resp.cur = None;
                }
                return;
            }
            conn.resp.cur = None;
        }
        let outcome = execute(qp, o, h, &req, payload, mem);
        let Some(conn) = qp.conn.as_mut() else { return };
        conn.resp.epsn = psn.wrapping_add(1);
        match outcome {
            Outcome::Done(_) => {}
            Outcome::Rnr => {
                o.counters.no_recv_wqe_drops += 1;
                qp.counters.no_recv_wqe_drops += 1;
                conn.resp.cur = if is_last(&req) {
                    None
                } else {
                    Some(InProgress::Drop)
                };
            }
            Outcome::Fatal(..) => {
                abort_message(qp);
                if let Some(c) = qp.conn.as_mut() {
                    c.resp.cur = if is_last(&req) {
                        None
                    } else {
                        Some(InProgress::Drop)
                    };
                }
            }
        }
    }

    fn ud_request(
        &mut self,
        qpn: u32,
        d: &Datagram<'_>,
        deth: wire::roce::DethRepr,
        imm: Option<wire::roce::ImmDt>,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) {
        let Device { qps, o, .. } = self;
        let Some(qp) = qps.get_mut(&qpn) else { return };
        // IBA 10.2.4.5: the Q_Key must match the QP's.
        if deth.qkey != qp.attr.qkey {
            o.counters.qkey_violations += 1;
            qp.counters.qkey_violations += 1;
            return;
        }
        let Some(rwqe) = take_rwqe(qp, o) else {
            o.counters.no_recv_wqe_drops += 1;
            qp.counters.no_recv_wqe_drops += 1;
            return;
        };
        let grh = grh_bytes(d, payload.len());
        let pd = qp.init.pd;
        let status = scatter(&o.keys, pd, &rwqe.sg_list, 0, &grh, mem)
            .and_then(|_| scatter(&o.keys, pd, &rwqe.sg_list, 40, payload, mem));
        let mut flags = WcFlags::GRH;
        if imm.is_some() {
            flags |= WcFlags::WITH_IMM;
        }
        let wc = WorkCompletion {
            wr_id: rwqe.wr_id,
            status: status.err().unwrap_or(WcStatus::Success),
            opcode: WcOpcode::Recv,
            byte_len: 40 + payload.len() as u32,
            imm_data: imm.map_or(0, imm_to_wc),
            qp_num: qp.qpn,
            src_qp: deth.src_qp,
            wc_flags: flags,
            ..WorkCompletion::default()
        };
        o.push_wc(qp.init.recv_cq, wc);
    }

    /// Sends the next queued response of a QP.
    pub(crate) fn transmit_response(
        &mut self,
        qpn: u32,
        mem: &mut dyn Memory,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let qp = self.qps.get_mut(&qpn)?;
        let credits = if qp.init.srq.is_some() {
            CreditCode::INVALID
        } else {
            CreditCode::from_credits(qp.rq.len() as u32)
        };
        let conn = qp.conn.as_mut()?;
        let path = conn.path?;
        let mtu = conn.mtu;
        let dest = conn.dest_qpn;
        let front = *conn.resp.out.front()?;
        let (psn, body, read) = match front {
            RespOut::Ack { psn, syndrome, msn } => {
                conn.resp.out.pop_front();
                let syndrome = match syndrome {
                    Syndrome::Ack(_) => Syndrome::Ack(credits),
                    s => s,
                };
                (
                    psn,
                    Body::RcResponse(Response::Ack(AethRepr { syndrome, msn })),
                    None,
                )
            }
            RespOut::AtomicAck { psn, orig, msn } => {
                conn.resp.out.pop_front();
                let aeth = AethRepr {
                    syndrome: Syndrome::Ack(credits),
                    msn,
                };
                (
                    psn,
                    Body::RcResponse(Response::AtomicAck(
                        aeth,
                        AtomicAckEthRepr { orig_data: orig },
                    )),
                    None,
                )
            }
            RespOut::Read {
                first_psn,
                next_pkt,
                npkts,
                space,
                host,
                len,
                msn,
            } => {
                let aeth = AethRepr {
                    syndrome: Syndrome::Ack(credits),
                    msn,
                };
                let seg = match (next_pkt == 0, next_pkt + 1 == npkts) {
                    (true, true) => ReadRespSeg::Only(aeth),
                    (true, false) => ReadRespSeg::First(aeth),
                    (false, false) => ReadRespSeg::Middle,
                    (false, true) => ReadRespSeg::Last(aeth),
                };
                if next_pkt + 1 >= npkts {
                    conn.resp.out.pop_front();
                } else if let Some(RespOut::Read { next_pkt: n, .. }) = conn.resp.out.front_mut() {
                    *n += 1;
                }
                let off = next_pkt * mtu;
                let n = len.saturating_sub(off).min(mtu);
                (
                    first_psn.wrapping_add(next_pkt),
                    Body::RcResponse(Response::ReadResponse(seg)),
                    Some((space, host + u64::from(off), n)),
                )
            }
        };
        let n = read.map_or(0, |r| r.2 as usize);
        let hlen = body.header_len();
        let total = hlen + n + usize::from(packet::pad_count(n)) + ICRC_LEN;
        buf.clear();
        buf.resize(total, 0);
        let header = Header::new(dest, psn);
        packet::emit_headers(&header, &body, n, buf);
        if let Some((space, host, n)) = read {
            if n > 0
                && mem
                    .read(space, host, &mut buf[hlen..hlen + n as usize])
                    .is_err()
            {
                // The memory went away under a READ: NAK it (remote operational error).
                let msn = conn.resp.msn;
                conn.resp.out.retain(|o| !matches!(o, RespOut::Read { .. }));
                conn.resp.out.push_front(RespOut::Ack {
                    psn,
                    syndrome: Syndrome::Nak(NakCode::RemoteOperationalError),
                    msn,
                });
                return self.transmit_response(qpn, mem, buf);
            }
        }
        finish_icrc(buf, path);
        // A fatal responder error moves the QP to error once its NAK has left.
        let fatal = qp
            .conn
            .as_ref()
            .is_some_and(|c| c.resp.fatal && c.resp.out.is_empty());
        if fatal {
            self.enter_error(Qpn(qpn));
        }
        Some(Transmit {
            src: path.src,
            dst: path.dst,
            len: total,
        })
    }
}

fn is_last(r: &Request) -> bool {
    !matches!(
        r,
        Request::Send(SendSeg::First | SendSeg::Middle)
            | Request::Write(WriteSeg::First(_) | WriteSeg::Middle)
    )
}

/// ACK coalescing: a newer plain ACK replaces a queued one.
fn push_ack(resp: &mut Responder, ack: RespOut) {
    if let Some(RespOut::Ack {
        syndrome: Syndrome::Ack(_),
        ..
    }) = resp.out.back()
    {
        resp.out.pop_back();
    }
    resp.out.push_back(ack);
}

/// `ibv_wc.imm_data` from the wire value: in-memory bytes equal the wire bytes.
pub(crate) fn imm_to_wc(i: wire::roce::ImmDt) -> u32 {
    u32::from_le_bytes(i.0.to_be_bytes())
}

/// UC: forget the message in progress; a receive WQE it took goes back to the queue.
fn abort_message(qp: &mut Qp) {
    let Some(conn) = qp.conn.as_mut() else { return };
    if let Some(InProgress::Send { rwqe, .. }) = conn.resp.cur.take() {
        qp.rq.push_front(rwqe);
    }
}

/// Takes a receive WQE from the SRQ or the RQ; raises the SRQ limit event.
fn take_rwqe(qp: &mut Qp, o: &mut Objects) -> Option<RecvWr> {
    match qp.init.srq {
        None => qp.rq.pop_front(),
        Some(h) => {
            let s = o.srqs.get_mut(&h.0)?;
            let w = s.wqes.pop_front()?;
            if s.attr.srq_limit > 0 && (s.wqes.len() as u32) < s.attr.srq_limit {
                s.attr.srq_limit = 0;
                o.events
                    .push_back((s.owner, AsyncEvent::SrqLimitReached(h)));
            }
            Some(w)
        }
    }
}

/// The 40 bytes a UD receive buffer starts with: for RoCE v2 over IPv4, 20 zero bytes and
/// the IPv4 header (as rxe's `union rdma_network_hdr`); over IPv6, the IPv6 header.
fn grh_bytes(d: &Datagram<'_>, payload_len: usize) -> [u8; 40] {
    let mut g = [0u8; 40];
    let ib_len = d.payload.len() - ICRC_LEN;
    let _ = payload_len;
    match (d.src, d.dst) {
        (SocketAddr::V4(s), SocketAddr::V4(t)) => {
            let mut h = wire::roce::icrc::udp4_ip_header(*s.ip(), *t.ip(), 0, ib_len);
            let mut sum: u32 = h
                .chunks(2)
                .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
                .sum();
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            g[20..].copy_from_slice(&h);
        }
        (SocketAddr::V6(s), SocketAddr::V6(t)) => {
            g.copy_from_slice(&wire::roce::icrc::udp6_ip_header(*s.ip(), *t.ip(), ib_len));
        }
        _ => {}
    }
    g
}

/// Handles a duplicate request (IBA 9.7.5.1.2): re-ACK SEND/WRITE, re-execute READ,
/// replay atomics from the resource cache.
fn duplicate(qp: &mut Qp, o: &mut Objects, psn: Psn, r: &Request) {
    let pd = qp.init.pd;
    let qpn = qp.qpn.0;
    let access = qp.attr.qp_access_flags;
    let Some(conn) = qp.conn.as_mut() else { return };
    let msn = conn.resp.msn;
    match r {
        Request::Read(reth) => {
            let found = conn.resp.resources.iter().any(|res| {
                let d = psn.distance(res.psn);
                res.atomic_orig.is_none() && d >= 0 && (d as u32) < res.npkts
            });
            if !found || !access.contains(AccessFlags::REMOTE_READ) {
                return;
            }
            let Ok((space, host)) = o.keys.resolve(
                reth.rkey.0,
                pd,
                reth.va,
                u64::from(reth.dma_len),
                AccessFlags::REMOTE_READ,
                true,
                qpn,
            ) else {
                return;
            };
            // Drop a READ response still queued for the same request.
            conn.resp.out.retain(|x| !matches!(x, RespOut::Read { .. }));
            conn.resp.out.push_back(RespOut::Read {
                first_psn: psn,
                next_pkt: 0,
                npkts: packets_for(reth.dma_len, conn.mtu),
                space,
                host,
                len: reth.dma_len,
                msn,
            });
        }
        Request::CompareSwap(_) | Request::FetchAdd(_) => {
            if let Some(orig) = conn
                .resp
                .resources
                .iter()
                .find(|res| res.psn == psn)
                .and_then(|res| res.atomic_orig)
            {
                conn.resp
                    .out
                    .push_back(RespOut::AtomicAck { psn, orig, msn });
            }
        }
        _ => {
            let last = conn.resp.epsn.wrapping_sub(1);
            push_ack(
                &mut conn.resp,
                RespOut::Ack {
                    psn: last,
                    syndrome: Syndrome::Ack(CreditCode::INVALID),
                    msn,
                },
            );
        }
    }
}

fn remote_err(e: KeyError) -> Outcome {
    let _ = e;
    Outcome::Fatal(NakCode::RemoteAccessError, None)
}

/// Executes an in-sequence request packet.
fn execute(
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
            let (rwqe, offset) = match (first, conn.resp.cur.take()) {
                (true, None) => match take_rwqe(qp, o) {
                    Some(w) => (w, 0),
                    None => return Outcome::Rnr,
                },
                (false, Some(InProgress::Send { rwqe, offset })) => (rwqe, offset),
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
            if let Err(status) = scatter(&o.keys, pd, &rwqe.sg_list, offset, payload, mem) {
                let wc = WorkCompletion {
                    wr_id: rwqe.wr_id,
                    status,
                    opcode: WcOpcode::Recv,
                    qp_num: qpn,
                    ..Default::default()
                };
                o.push_wc(qp.init.recv_cq, wc);
                return if status == WcStatus::LocLenErr {
                    inv_req
                } else {
                    Outcome::Fatal(NakCode::RemoteOperationalError, None)
                };
            }
            let offset = offset + payload.len() as u32;
            if !last {
                conn.resp.cur = Some(InProgress::Send { rwqe, offset });
                return Outcome::Done(1);
            }
            conn.resp.msn = conn.resp.msn.wrapping_add(1);
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
                wc_flags: flags,
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
            let (space, mut host, mut left, total) = match (reth, conn.resp.cur.take()) {
                (Some(r), None) => {
                    if !access.contains(AccessFlags::REMOTE_WRITE) {
                        return access_err;
                    }
                    if r.dma_len == 0 {
                        (AddrSpace(0), 0, 0, 0)
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
                            Ok((s, h)) => (s, h, r.dma_len, r.dma_len),
                            Err(e) => {
                                let _ = remote_err(e);
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
                    }),
                ) => (space, host, left, total),
                (_, other) => {
                    conn.resp.cur = other;
                    return inv_req;
                }
            };
            if payload.len() as u32 > left || (last && payload.len() as u32 != left) {
                return inv_req;
            }
            if !payload.is_empty() && mem.write(space, host, payload).is_err() {
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
                    wc_flags: WcFlags::WITH_IMM,
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
                atomic_orig: None,
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
                atomic_orig: Some(orig),
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
