//! The responder (IBA 9.7.5.1): PSN checks, duplicates, NAKs, RNR, remote access checks,
//! SEND/WRITE/READ/atomic execution, the READ/atomic resource cache; UC and UD receive.

use std::net::SocketAddr;
use std::time::Instant;

use tracing::debug;

use wire::roce::{
    packet, AethRepr, AtomicAckEthRepr, Body, CreditCode, Header, NakCode, Psn, ReadRespSeg,
    Request, Response, RnrTimer, SendSeg, Syndrome, UcRequest, WriteSeg, ICRC_LEN,
};

use crate::attr::*;
use crate::completer::Completer;
use crate::dma::scatter;
use crate::execute::{execute, imm_to_wc, place_held, take_rwqe};
use crate::memory::Memory;
use crate::objects::Objects;
use crate::outcome::Outcome;
use crate::qp::*;
use crate::types::*;
use wire::roce::Qpn;

/// A response the responder gives to a request instead of executing it (fault
/// injection: `rdma-emu fault add DEV rnr|nak …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForcedResponse {
    /// An RNR NAK, as with no receive WQE: only for requests that consume one (SEND
    /// First/Only, RDMA WRITE Only with Immediate); the PSN stays, the requester retries.
    Rnr,
    /// A NAK with this code. `PsnSequenceError` makes the requester go back to the
    /// expected PSN; the others are fatal on both sides, as when the responder found the
    /// request at fault (invalid request, access error, operational error).
    Nak(wire::roce::NakCode),
}

/// What the responder touches: the QPs, the objects its receives and completions use, and
/// the response fault injection forced on one QP's next request.
#[derive(Debug)]
pub(crate) struct ResponderParts<'a> {
    pub o: &'a mut Objects,
    pub qps: &'a mut U32Map<Qp>,
    pub forced: &'a mut Option<(u32, ForcedResponse)>,
}

impl ResponderParts<'_> {
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
            Body::XrcRequest { xrceth, request } => {
                let Some(qp) = self.qps.get_mut(&qpn) else {
                    return;
                };
                if crate::xrc::admit(qp, self.o, repr.header.psn, xrceth.xrc_srq) {
                    self.rc_request(qpn, &repr.header, &request, repr.payload, mem);
                }
            }
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
        let ResponderParts { qps, o, forced } = self;
        let Some(qp) = qps.get_mut(&qpn) else { return };
        let psn = h.psn;
        let Some(epsn) = qp.conn.as_ref().map(|c| c.resp.epsn) else {
            return;
        };
        let d = psn.distance(epsn);
        // Whatever answers this packet covers the ones before it: the payload a message in
        // progress holds is placed first, unless this is that message's next packet,
        // whose execution places it when it must.
        let continues = d == 0
            && matches!(
                r,
                Request::Write(WriteSeg::Middle | WriteSeg::Last | WriteSeg::LastImm(_))
                    | Request::Send(
                        SendSeg::Middle | SendSeg::Last | SendSeg::LastImm(_) | SendSeg::LastInv(_)
                    )
            )
            && forced
                .as_ref()
                .is_none_or(|&(q, f)| q != qpn || !takes_forced(f, r));
        if !continues {
            if let Err(Outcome::Fatal(code, ev)) = place_held(qp, o, mem) {
                nak_fatal(qp, o, epsn.wrapping_sub(1), code, ev);
                return;
            }
        }
        let Some(conn) = qp.conn.as_mut() else { return };
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
        let outcome = match forced.take_if(|(q, f)| *q == qpn && takes_forced(*f, r)) {
            Some((_, f)) => forced_outcome(qpn, f),
            None => execute(qp, o, h, r, payload, mem),
        };
        let Some(conn) = qp.conn.as_mut() else { return };
        match outcome {
            Outcome::Done(n) => {
                conn.resp.nak_sent = false;
                conn.resp.epsn = psn.wrapping_add(n);
                if h.ack_req
                    && matches!(
                        r,
                        Request::Send(_)
                            | Request::Write(_)
                            | Request::Flush(..)
                            | Request::AtomicWrite(_)
                    )
                {
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
                // A WRITE with immediate found no receive WQE at its last packet: the NAK
                // covers the packets before it, so their payload goes to memory first.
                if let Err(Outcome::Fatal(code, ev)) = place_held(qp, o, mem) {
                    nak_fatal(qp, o, psn.wrapping_sub(1), code, ev);
                    return;
                }
                let Some(conn) = qp.conn.as_mut() else { return };
                let msn = conn.resp.msn;
                conn.resp.out.push_back(RespOut::Ack {
                    psn,
                    syndrome: Syndrome::RnrNak(RnrTimer::new(qp.attr.min_rnr_timer)),
                    msn,
                });
                o.counters.rnr_naks_sent += 1;
                qp.counters.rnr_naks_sent += 1;
            }
            Outcome::Sequence => {
                conn.resp.nak_sent = true;
                let msn = conn.resp.msn;
                conn.resp.out.push_back(RespOut::Ack {
                    psn,
                    syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                    msn,
                });
                o.counters.seq_naks_sent += 1;
                qp.counters.seq_naks_sent += 1;
            }
            Outcome::Fatal(code, ev) => {
                let cur = match conn.resp.cur {
                    Some(InProgress::Send { offset, .. }) => format!("send at {offset}"),
                    Some(InProgress::Write { left, total, .. }) => {
                        format!("write with {left} of {total} left")
                    }
                    Some(InProgress::Drop) | None => "none".into(),
                };
                debug!(qpn, %psn, ?code, request = ?r, payload = payload.len(), cur, "fatal NAK");
                nak_fatal(qp, o, psn, code, ev)
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
        let ResponderParts { qps, o, .. } = self;
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
            Outcome::Done(_) | Outcome::Sequence => {}
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

    pub(crate) fn ud_request(
        &mut self,
        qpn: u32,
        d: &Datagram<'_>,
        deth: wire::roce::DethRepr,
        imm: Option<wire::roce::ImmDt>,
        payload: &[u8],
        mem: &mut dyn Memory,
    ) {
        let ResponderParts { qps, o, .. } = self;
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
            sl: roce_packet_type(d),
            ..WorkCompletion::default()
        };
        o.push_wc(qp.init.recv_cq, wc);
    }
}

/// Sends the next queued response of a QP.
pub(crate) fn transmit_response(
    qps: &mut U32Map<Qp>,
    o: &mut Objects,
    qpn: u32,
    mem: &mut dyn Memory,
    buf: &mut Vec<u8>,
) -> Option<Transmit> {
    let qp = qps.get_mut(&qpn)?;
    let xrc = qp.qp_type == QpType::XrcRecv;
    let credits = if qp.init.srq.is_some() || xrc {
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
                Some((space, host, u64::from(off), u64::from(len), n)),
            )
        }
    };
    // An XRC target answers with the XRC transport's response opcodes.
    let body = match body {
        Body::RcResponse(r) if xrc => Body::XrcResponse(r),
        b => b,
    };
    let n = read.map_or(0, |r| r.4 as usize);
    let hlen = body.header_len();
    let pad = usize::from(packet::pad_count(n));
    let total = hlen + n + pad + ICRC_LEN;
    // Reuse the buffer without zero-filling it: headers and payload overwrite it, the
    // pad is cleared below and the ICRC written last.
    if buf.len() < total {
        buf.resize(total, 0);
    }
    buf.truncate(total);
    buf[total - ICRC_LEN - pad..total - ICRC_LEN].fill(0);
    let header = Header::new(dest, psn);
    packet::emit_headers(&header, &body, n, buf);
    if let Some((space, host, off, len, n)) = read {
        let out = &mut buf[hlen..hlen + n as usize];
        if n > 0
            && conn
                .resp
                .ahead
                .read_run(mem, (space, host, len), off, out)
                .is_err()
        {
            conn.resp.ahead.forget();
            // The memory went away under a READ: NAK it (remote operational error).
            let msn = conn.resp.msn;
            conn.resp.out.retain(|o| !matches!(o, RespOut::Read { .. }));
            conn.resp.out.push_front(RespOut::Ack {
                psn,
                syndrome: Syndrome::Nak(NakCode::RemoteOperationalError),
                msn,
            });
            return transmit_response(qps, o, qpn, mem, buf);
        }
    }
    // A fatal responder error moves the QP to error once its NAK has left.
    let fatal = qp
        .conn
        .as_ref()
        .is_some_and(|c| c.resp.fatal && c.resp.out.is_empty());
    if fatal {
        Completer { o, qps }.enter_error(Qpn(qpn));
    }
    Some(Transmit {
        src: path.src,
        dst: path.dst,
        len: total,
        traffic_class: path.traffic_class,
    })
}

/// A request at `psn` failed for good: NAK it with `code`, raise `ev`, and enter the
/// error state once the NAK is out (see `transmit_response`).
fn nak_fatal(qp: &mut Qp, o: &mut Objects, psn: Psn, code: NakCode, ev: Option<AsyncEvent>) {
    if let Some(e) = ev {
        o.events.push_back((qp.owner, e));
    }
    let Some(conn) = qp.conn.as_mut() else { return };
    let msn = conn.resp.msn;
    conn.resp.out.push_back(RespOut::Ack {
        psn,
        syndrome: Syndrome::Nak(code),
        msn,
    });
    conn.resp.cur = None;
    conn.resp.fatal = true;
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

/// UC: forget the message in progress; a receive WQE it took goes back to the queue.
fn abort_message(qp: &mut Qp) {
    let Some(conn) = qp.conn.as_mut() else { return };
    if let Some(InProgress::Send { rwqe, .. }) = conn.resp.cur.take() {
        qp.rq.push_front(rwqe);
    }
}

/// What a RoCE NIC reports in `ibv_wc.sl` of a UD receive: there is no LRH, hence no SL,
/// so ConnectX hardware (whose CQE field rdma-core's mlx5 provider copies into `sl`) puts
/// the packet type there: bit 3 set when the frame had a UDP header (RoCE v2), bits 2:0
/// the L3 header, 1 for IPv6 and 2 for IPv4. Consumers need it to find the destination
/// address in the 40-byte area (IBA Annex A17.4.5.2): UCX's UD transport reads the IPv4
/// destination from the last 4 bytes only when `sl & 7 == 2`, and otherwise compares the
/// 16 bytes of a GRH DGID, which over IPv4 hold the IP header and never match.
fn roce_packet_type(d: &Datagram<'_>) -> u8 {
    const UDP: u8 = 0x8;
    match d.dst {
        SocketAddr::V4(_) => UDP | 0x2,
        SocketAddr::V6(_) => UDP | 0x1,
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

/// Whether a forced response applies to request `r`: RNR only where a receive WQE would
/// be consumed, a NAK on any request that starts a message. An in-progress message is
/// never cut in two.
fn takes_forced(f: ForcedResponse, r: &Request) -> bool {
    let rnr = matches!(
        r,
        Request::Send(SendSeg::First | SendSeg::Only | SendSeg::OnlyImm(_) | SendSeg::OnlyInv(_))
            | Request::Write(WriteSeg::OnlyImm(..))
    );
    match f {
        ForcedResponse::Rnr => rnr,
        ForcedResponse::Nak(_) => {
            rnr || matches!(
                r,
                Request::Write(WriteSeg::First(_) | WriteSeg::Only(_))
                    | Request::Read(_)
                    | Request::CompareSwap(_)
                    | Request::FetchAdd(_)
                    | Request::Flush(..)
                    | Request::AtomicWrite(_)
            )
        }
    }
}

/// What a forced response does, with the async event the responder raises for it as if
/// it had found the request at fault (IBA 11.6.3.1).
fn forced_outcome(qpn: u32, f: ForcedResponse) -> Outcome {
    match f {
        ForcedResponse::Rnr => Outcome::Rnr,
        ForcedResponse::Nak(NakCode::PsnSequenceError) => Outcome::Sequence,
        ForcedResponse::Nak(code @ NakCode::InvalidRequest) => {
            Outcome::Fatal(code, Some(AsyncEvent::QpReqErr(Qpn(qpn))))
        }
        ForcedResponse::Nak(code @ NakCode::RemoteAccessError) => {
            Outcome::Fatal(code, Some(AsyncEvent::QpAccessErr(Qpn(qpn))))
        }
        ForcedResponse::Nak(code) => Outcome::Fatal(code, None),
    }
}

/// Handles a duplicate request (IBA 9.7.5.1.2): re-ACK SEND/WRITE, re-execute READ,
/// replay atomics from the resource cache. A duplicate FLUSH or ATOMIC WRITE is never
/// executed again (an ATOMIC WRITE replayed after a later WRITE to the same bytes would
/// undo it): it was executed, so the ACK of the last executed PSN answers it, as the
/// annex's oA19-14/15 ask (rxe re-ACKs from its resource).
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
                res.kind == ResKind::Read && d >= 0 && (d as u32) < res.npkts
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
            // Drop what is still queued of the same READ: the new responses replace it.
            let npkts = packets_for(reth.dma_len, conn.mtu);
            conn.resp.out.retain(|x| match *x {
                RespOut::Read {
                    first_psn,
                    next_pkt,
                    npkts: n,
                    ..
                } => {
                    let next = first_psn.wrapping_add(next_pkt);
                    let end = first_psn.wrapping_add(n);
                    // Keep it unless its remaining range overlaps [psn, psn + npkts).
                    !(next.is_before(psn.wrapping_add(npkts)) && psn.is_before(end))
                }
                _ => true,
            });
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
                .and_then(|res| match res.kind {
                    ResKind::Atomic(orig) => Some(orig),
                    _ => None,
                })
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
