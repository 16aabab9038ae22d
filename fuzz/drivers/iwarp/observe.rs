//! Checks of what the engine puts out: its byte stream (deframed and parsed as the
//! peer would), its events and its completions.

use std::collections::BTreeMap;

use emu_core::iwarp::ext::ExtMessage;
use emu_core::iwarp::{mulpdu, Completion, IwarpEvent};
use emu_core::{Sge, WcOpcode, WcStatus, WrOpcode};
use wire::iwarp::deframer::Deframed;
use wire::iwarp::fpdu::FpduConfig;
use wire::iwarp::RdmapMessage;

use super::arena::{Arena, Region};
use super::{EngineReq, Harness, PeerReq, QPN, RECV_CQ, RECV_ID, SEND_CQ, SEND_ID};

impl Harness {
    /// Takes every octet the engine has to send and checks it.
    pub(super) fn transmit(&mut self) {
        let mut buf = Vec::new();
        let mut calls = 0;
        while self
            .conn
            .poll_stream_transmit(&mut buf, &mut self.keys, &mut self.mem)
            > 0
        {
            calls += 1;
            assert!(calls < 1000, "the engine keeps transmitting");
        }
        if buf.is_empty() {
            return;
        }
        assert!(
            !self.driver_closed,
            "{} octets transmitted after the close",
            buf.len()
        );
        self.obs_backlog.extend_from_slice(&buf);
        self.observe();
    }

    /// Deframes and checks the engine's output (once its framing is known).
    pub(super) fn observe(&mut self) {
        let Some(neg) = self.neg.clone() else {
            return;
        };
        let bytes = std::mem::take(&mut self.obs_backlog);
        self.obs.read(&bytes);
        let max = mulpdu(self.cfg.mss, neg.markers_tx);
        let mut ulpdus = Vec::new();
        while let Some(u) = self.obs.pop() {
            match u {
                Ok(Deframed::Mpa(m)) => {
                    assert!(!m.reject, "the engine rejected");
                    self.obs.set_config(FpduConfig {
                        crc: neg.crc,
                        markers: neg.markers_tx,
                    });
                }
                Ok(Deframed::Fpdu { ulpdu, .. }) => ulpdus.push(ulpdu.to_vec()),
                Err(e) => panic!("the engine's output does not deframe: {e:?}"),
            }
        }
        for u in ulpdus {
            assert!(
                u.len() <= max,
                "a {}-octet ULPDU exceeds the MULPDU {max}",
                u.len()
            );
            self.out.fpdus_out += 1;
            self.on_output(&u, neg.extensions);
        }
    }

    /// One ULPDU the engine sent.
    fn on_output(&mut self, u: &[u8], ext: bool) {
        assert!(
            self.engine_term.is_none(),
            "the engine sent an FPDU after its Terminate"
        );
        let opcode = u[1] & 0x0f;
        if opcode >= 8 && u[1] >> 6 == 1 && u[0] & 0x03 == 1 {
            assert!(ext, "extension opcode {opcode} without the extensions");
            let m = ExtMessage::parse(u)
                .unwrap_or_else(|e| panic!("the engine sent a bad extension segment: {e:?}"));
            self.on_ext_output(m);
            return;
        }
        let m = RdmapMessage::parse(u)
            .unwrap_or_else(|e| panic!("the engine sent an unparsable segment: {e:?} {u:02x?}"));
        match m {
            RdmapMessage::Send {
                last,
                msn,
                mo,
                payload,
                ..
            } => self.obs_untagged0(last, msn, mo, payload.len()),
            RdmapMessage::Write {
                last,
                offset,
                payload,
                ..
            } => {
                if let Some(to) = self.obs_write_to {
                    assert_eq!(offset, to, "Write segments are not contiguous");
                }
                self.obs_write_to = (!last).then(|| offset.wrapping_add(payload.len() as u64));
            }
            RdmapMessage::ReadRequest { msn, request } => {
                self.obs_msn(1, msn);
                self.engine_orq.push_back(EngineReq::Read {
                    sink_stag: request.sink_stag.0,
                    sink_to: request.sink_offset,
                    size: u64::from(request.size),
                    sent: 0,
                    placed: Default::default(),
                });
            }
            RdmapMessage::ReadResponse {
                last,
                stag,
                offset,
                payload,
            } => self.obs_read_response(last, stag.0, offset, payload),
            RdmapMessage::Terminate { msn, terminate } => {
                self.obs_msn(2, msn);
                self.engine_term = Some(terminate.error);
                self.out.terminate_sent = Some(terminate.error);
            }
        }
    }

    fn on_ext_output(&mut self, m: ExtMessage<'_>) {
        match m {
            ExtMessage::Immediate { msn, .. } => self.obs_untagged0(true, msn, 0, 0),
            ExtMessage::SendImm {
                last,
                msn,
                mo,
                payload,
                ..
            } => self.obs_untagged0(last, msn, mo, payload.len()),
            ExtMessage::AtomicRequest { msn, req_id, .. } => {
                self.obs_msn(1, msn);
                self.engine_orq.push_back(EngineReq::Atomic { req_id });
            }
            ExtMessage::AtomicResponse {
                msn,
                req_id,
                original,
            } => {
                self.obs_msn(3, msn);
                match self.peer_irq.pop_front() {
                    Some(PeerReq::Atomic {
                        req_id: want,
                        original: o,
                    }) => {
                        assert_eq!(req_id, want, "Atomic Response for the wrong request");
                        if let Some(o) = o {
                            assert_eq!(original, o, "Atomic Response with a wrong original");
                        }
                    }
                    other => panic!("Atomic Response answers {other:?}"),
                }
            }
        }
    }

    /// An untagged queue 0 segment of the engine: MSN and MO in sequence.
    fn obs_untagged0(&mut self, last: bool, msn: u32, mo: u32, len: usize) {
        let want_mo = self.obs_q.mo.unwrap_or(0);
        assert_eq!(msn, self.obs_q.msn[0], "queue 0 MSN out of sequence");
        assert_eq!(mo, want_mo, "queue 0 MO out of sequence");
        if last {
            self.obs_q.msn[0] = msn.wrapping_add(1);
            self.obs_q.mo = None;
        } else {
            self.obs_q.mo = Some(mo.wrapping_add(len as u32));
        }
    }

    fn obs_msn(&mut self, q: usize, msn: u32) {
        assert_eq!(msn, self.obs_q.msn[q], "queue {q} MSN out of sequence");
        self.obs_q.msn[q] = msn.wrapping_add(1);
    }

    /// A Read Response segment of the engine answers the peer's oldest request.
    fn obs_read_response(&mut self, last: bool, stag: u32, offset: u64, payload: &[u8]) {
        let Some(PeerReq::Read {
            sink_stag,
            sink_to,
            size,
            sent,
            fixed_src,
        }) = self.peer_irq.front_mut()
        else {
            panic!("a Read Response answers no Read Request");
        };
        assert_eq!(stag, *sink_stag, "Read Response to the wrong STag");
        assert_eq!(
            offset,
            sink_to.wrapping_add(*sent),
            "Read Response segments not contiguous"
        );
        let end = *sent + payload.len() as u64;
        assert!(end <= *size, "Read Response longer than asked");
        if let Some(src) = *fixed_src {
            let want = self.mem.get(src + *sent, payload.len());
            assert_eq!(payload, want, "Read Response data differs from the source");
        }
        *sent = end;
        assert_eq!(last, end == *size, "Read Response L bit");
        if last {
            self.peer_irq.pop_front();
        }
    }

    pub(super) fn on_event(&mut self, e: IwarpEvent) {
        match e {
            IwarpEvent::Terminated { error, local } => {
                if local {
                    if self.neg.is_some() {
                        assert_eq!(
                            self.engine_term,
                            Some(error),
                            "a local Terminate event without that Terminate on the wire"
                        );
                    }
                } else {
                    assert!(
                        self.peer_terminated || self.desynced,
                        "a received Terminate nobody sent"
                    );
                    self.out.terminate_received = Some(error);
                }
            }
            IwarpEvent::Closed => {}
            IwarpEvent::ConnectRequest(_) | IwarpEvent::Established(_) => {
                panic!("{e:?} after the MPA exchange")
            }
            IwarpEvent::MpaFailed(_) | IwarpEvent::MpaTimeout | IwarpEvent::Rejected { .. } => {
                assert!(self.neg.is_none(), "{e:?} in full operation");
            }
        }
    }

    pub(super) fn on_completion(&mut self, c: Completion) {
        assert_eq!(c.wc.qp_num, QPN, "completion of another QP");
        let id = c.wc.wr_id.0;
        if id >= RECV_ID {
            assert_eq!(c.cq, RECV_CQ, "receive completion on the send CQ");
            let i = (id - RECV_ID) as usize;
            assert_eq!(i, self.recv_next, "receive completions out of order");
            self.recv_next += 1;
            let p = &mut self.recvs[i];
            assert!(!p.done, "receive {id} completed twice");
            p.done = true;
            if c.wc.status == WcStatus::Success {
                assert!(
                    matches!(c.wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm),
                    "receive completion opcode {:?}",
                    c.wc.opcode
                );
                if c.wc.opcode == WcOpcode::Recv {
                    assert!(
                        u64::from(c.wc.byte_len) <= p.total,
                        "received {} octets into {}",
                        c.wc.byte_len,
                        p.total
                    );
                }
                self.out.recvs_ok += 1;
            }
        } else {
            assert_eq!(c.cq, SEND_CQ, "send completion on the receive CQ");
            let i = (id - SEND_ID) as usize;
            assert!(
                self.send_last.is_none_or(|l| i > l),
                "send completions out of order"
            );
            self.send_last = Some(i);
            let p = &mut self.sends[i];
            assert!(!p.done, "send {id} completed twice");
            p.done = true;
            if c.wc.status == WcStatus::Success {
                let op = p.opcode.expect("a posted send has an opcode");
                assert_eq!(c.wc.opcode, op.wc_opcode(), "send completion opcode");
                let want = match op {
                    WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => 8,
                    WrOpcode::LocalInv => 0,
                    _ => p.total,
                };
                assert_eq!(u64::from(c.wc.byte_len), want, "send completion length");
                self.out.sends_ok += 1;
            } else {
                assert!(
                    p.signaled || c.wc.status != WcStatus::Success,
                    "unsignaled success completion"
                );
            }
        }
        self.op_completions.push(c);
    }

    /// Checks what this op's successful completions placed.
    pub(super) fn check_placement(&mut self) {
        let wcs = std::mem::take(&mut self.op_completions);
        if self.desynced || self.batch {
            return;
        }
        for c in wcs {
            if c.wc.status != WcStatus::Success {
                continue;
            }
            let id = c.wc.wr_id.0;
            let (sges, placed) = if id >= RECV_ID {
                if c.wc.opcode != WcOpcode::Recv {
                    continue;
                }
                let p = &self.recvs[(id - RECV_ID) as usize];
                (p.sges.clone(), self.finished_msg.take())
            } else {
                let p = &self.sends[(id - SEND_ID) as usize];
                if !matches!(
                    p.opcode,
                    Some(
                        WrOpcode::RdmaRead
                            | WrOpcode::AtomicCmpAndSwp
                            | WrOpcode::AtomicFetchAndAdd
                    )
                ) {
                    continue;
                }
                (p.sges.clone(), self.answered.take())
            };
            let Some(placed) = placed else {
                panic!("completion {id} placed data the peer never finished sending");
            };
            if id >= RECV_ID {
                assert_eq!(
                    u64::from(c.wc.byte_len),
                    placed.end,
                    "receive {id}: length differs from the message sent"
                );
            }
            // What each address should hold: the octet of the latest segment that
            // reached it.
            let n = (c.wc.byte_len as usize).min(placed.data.len());
            let mut want: BTreeMap<u64, (u8, u32, usize)> = BTreeMap::new();
            for (off, put) in placed.data[..n].iter().enumerate() {
                let Some((b, seg)) = *put else {
                    continue;
                };
                let Some(addr) = sge_addr(&sges, off as u64) else {
                    panic!("message offset {off} beyond the scatter list");
                };
                // Only the local-only region is out of reach of the peer's Writes.
                if Arena::region_of(addr, 1) == Some(Region::Local)
                    && want.get(&addr).is_none_or(|w| w.1 <= seg)
                {
                    want.insert(addr, (b, seg, off));
                }
            }
            for (addr, (b, _, off)) in want {
                assert_eq!(
                    self.mem.get(addr, 1)[0],
                    b,
                    "placed octet {off} of completion {id} differs (at {addr:#x})"
                );
            }
        }
    }
}

/// The address of message offset `off` in a scatter list.
fn sge_addr(sges: &[Sge], mut off: u64) -> Option<u64> {
    for s in sges {
        let l = u64::from(s.length);
        if off < l {
            return Some(s.addr + off);
        }
        off -= l;
    }
    None
}
