//! TCP flows of a capture: reassembly by sequence number, then MPA deframing for the
//! flows that open with an MPA Request or Reply frame.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::IpAddr;

use wire::frame::TcpInfo;
use wire::iwarp::deframer::{Deframed, Deframer};
use wire::iwarp::mpa::{MpaFrameKind, MpaRevision, KEY_REPLY, KEY_REQUEST};
use wire::iwarp::{Error as IwarpError, FpduConfig, RdmapMessage};

use super::Summary;

/// (source address, source port, destination address, destination port).
pub(super) type FlowKey = (IpAddr, u16, IpAddr, u16);

fn reverse(k: FlowKey) -> FlowKey {
    (k.2, k.3, k.0, k.1)
}

/// Out-of-order data held per flow at most (beyond it, the gap is given up on).
const MAX_PENDING: usize = 4 << 20;

enum Kind {
    /// Not enough bytes yet to tell whether the flow speaks MPA.
    Undecided(Vec<u8>),
    /// Not MPA.
    Plain,
    /// An MPA stream.
    Mpa(Box<Deframer>),
}

struct Flow {
    next_seq: Option<u32>,
    pending: BTreeMap<u32, Vec<u8>>,
    pending_bytes: usize,
    kind: Kind,
}

impl Flow {
    fn new() -> Flow {
        Flow {
            next_seq: None,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            kind: Kind::Undecided(Vec::new()),
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Negotiation {
    /// (markers, crc) of the Request.
    request: Option<(bool, bool)>,
    /// (markers, crc, reject) of the Reply.
    reply: Option<(bool, bool, bool)>,
}

/// Every TCP flow of a capture.
#[derive(Default)]
pub(super) struct Streams {
    flows: HashMap<FlowKey, Flow>,
    /// Keyed by the initiator-to-responder flow.
    negotiations: HashMap<FlowKey, Negotiation>,
}

struct Out<'a> {
    verbose: bool,
    summary: &'a mut Summary,
    line: &'a mut String,
    detail: &'a mut Vec<String>,
}

impl Streams {
    /// Takes one TCP segment; appends what its bytes completed to `line`/`detail`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn segment(
        &mut self,
        key: FlowKey,
        info: &TcpInfo,
        payload: &[u8],
        verbose: bool,
        summary: &mut Summary,
        line: &mut String,
        detail: &mut Vec<String>,
    ) {
        let mut out = Out {
            verbose,
            summary,
            line,
            detail,
        };
        let flow = self.flows.entry(key).or_insert_with(Flow::new);
        if info.syn {
            flow.next_seq = Some(info.seq.wrapping_add(1));
            flow.pending.clear();
            flow.pending_bytes = 0;
        }
        if payload.is_empty() {
            return;
        }
        let next = *flow.next_seq.get_or_insert(info.seq);
        let offset = info.seq.wrapping_sub(next) as i32;
        if offset > 0 {
            if flow.pending_bytes + payload.len() <= MAX_PENDING {
                flow.pending_bytes += payload.len();
                flow.pending.insert(info.seq, payload.to_vec());
            }
            out.line.push_str(" (out of order, held)");
            return;
        }
        let skip = offset.unsigned_abs() as usize;
        if skip >= payload.len() {
            out.line.push_str(" (retransmission)");
            return;
        }
        let mut data = payload[skip..].to_vec();
        // Append whatever held segments now continue the stream.
        loop {
            let next = flow
                .next_seq
                .unwrap_or(info.seq)
                .wrapping_add(data.len() as u32);
            let Some((&seq, _)) = flow
                .pending
                .iter()
                .find(|(s, _)| next.wrapping_sub(**s) as i32 >= 0)
            else {
                break;
            };
            let Some(seg) = flow.pending.remove(&seq) else {
                break;
            };
            flow.pending_bytes -= seg.len();
            let overlap = next.wrapping_sub(seq) as usize;
            if overlap < seg.len() {
                data.extend_from_slice(&seg[overlap..]);
            }
        }
        flow.next_seq = Some(
            flow.next_seq
                .unwrap_or(info.seq)
                .wrapping_add(data.len() as u32),
        );
        deliver(flow, &data);
        self.drain(key, &mut out);
    }

    /// Pops every unit of the flow; on an MPA Request/Reply, records it and, once both
    /// are known, configures both directions and drains them again.
    fn drain(&mut self, key: FlowKey, out: &mut Out<'_>) {
        let mut todo = vec![key];
        while let Some(k) = todo.pop() {
            let Some(flow) = self.flows.get_mut(&k) else {
                continue;
            };
            let Kind::Mpa(deframer) = &mut flow.kind else {
                continue;
            };
            let Some(seen) = pop_all(deframer, out) else {
                continue;
            };
            let initiator = match seen {
                (MpaFrameKind::Request, ..) => k,
                (MpaFrameKind::Reply, ..) => reverse(k),
            };
            let n = self.negotiations.entry(initiator).or_default();
            match seen {
                (MpaFrameKind::Request, m, c, _) => n.request = Some((m, c)),
                (MpaFrameKind::Reply, m, c, r) => n.reply = Some((m, c, r)),
            }
            let (Some((req_m, req_c)), Some((rep_m, rep_c, reject))) = (n.request, n.reply) else {
                continue;
            };
            if reject {
                continue;
            }
            let crc = req_c || rep_c;
            let configs = [
                (
                    initiator,
                    FpduConfig {
                        crc,
                        markers: rep_m,
                    },
                ),
                (
                    reverse(initiator),
                    FpduConfig {
                        crc,
                        markers: req_m,
                    },
                ),
            ];
            for (fk, cfg) in configs {
                if let Some(Flow {
                    kind: Kind::Mpa(d), ..
                }) = self.flows.get_mut(&fk)
                {
                    if d.is_negotiating() {
                        d.set_config(cfg);
                        todo.push(fk);
                    }
                }
            }
        }
    }
}

fn deliver(flow: &mut Flow, data: &[u8]) {
    if let Kind::Undecided(buf) = &mut flow.kind {
        buf.extend_from_slice(data);
        let n = buf.len().min(16);
        let kind = if buf[..n] == KEY_REQUEST[..n] && n == 16 {
            Some(Deframer::expecting_request())
        } else if buf[..n] == KEY_REPLY[..n] && n == 16 {
            Some(Deframer::expecting_reply())
        } else if buf[..n] == KEY_REQUEST[..n] || buf[..n] == KEY_REPLY[..n] {
            return;
        } else {
            None
        };
        let bytes = std::mem::take(buf);
        flow.kind = match kind {
            Some(mut d) => {
                d.read(&bytes);
                Kind::Mpa(Box::new(d))
            }
            None => Kind::Plain,
        };
        return;
    }
    if let Kind::Mpa(d) = &mut flow.kind {
        d.read(data);
    }
}

/// Pops and prints until the deframer needs more; returns the Request/Reply frame's
/// (kind, M, C, R) if one came out.
fn pop_all(d: &mut Deframer, out: &mut Out<'_>) -> Option<(MpaFrameKind, bool, bool, bool)> {
    let mut seen = None;
    while let Some(unit) = d.pop() {
        match unit {
            Ok(Deframed::Mpa(m)) => {
                let kind = match m.kind {
                    MpaFrameKind::Request => "Request",
                    MpaFrameKind::Reply => "Reply",
                };
                let _ = write!(
                    out.line,
                    " | MPA {kind} M={} C={} R={} rev={} pd_len={}",
                    u8::from(m.markers),
                    u8::from(m.crc),
                    u8::from(m.reject),
                    m.revision.number(),
                    m.pd_length()
                );
                if let MpaRevision::V2(w) = m.revision {
                    let _ = write!(out.line, " IRD={} ORD={}", w.ird, w.ord);
                }
                if out.verbose {
                    out.detail.push(format!("  mpa: {m:?}"));
                }
                seen = Some((m.kind, m.markers, m.crc, m.reject));
            }
            Ok(Deframed::Fpdu {
                info,
                ulpdu,
                stream_offset,
            }) => {
                let _ = write!(
                    out.line,
                    " | FPDU ulpdu={} pad={} markers={} CRC {}",
                    info.ulpdu_len,
                    info.pad_len,
                    info.markers,
                    if info.crc_checked { "ok" } else { "off" }
                );
                if info.crc_checked {
                    out.summary.crc_ok += 1;
                }
                if out.verbose {
                    out.detail
                        .push(format!("  fpdu: offset {stream_offset} {info:?}"));
                }
                rdmap(ulpdu, out);
            }
            Err(IwarpError::BadCrc { computed, received }) => {
                out.summary.crc_bad += 1;
                let _ = write!(
                    out.line,
                    " | FPDU CRC BAD (carried {received:#010x}, computed {computed:#010x})"
                );
            }
            Err(e) => {
                out.summary.malformed += 1;
                let _ = write!(out.line, " | MPA stream error: {e}");
            }
        }
    }
    seen
}

fn rdmap(ulpdu: &[u8], out: &mut Out<'_>) {
    let m = match RdmapMessage::parse(ulpdu) {
        Ok(m) => m,
        Err(e) => {
            out.summary.malformed += 1;
            let _ = write!(out.line, " [DDP/RDMAP: {e}]");
            return;
        }
    };
    let _ = write!(out.line, "; RDMAP {}", m.opcode().name());
    match m {
        RdmapMessage::Write {
            last,
            stag,
            offset,
            payload,
        }
        | RdmapMessage::ReadResponse {
            last,
            stag,
            offset,
            payload,
        } => {
            let _ = write!(
                out.line,
                " STag={:#x} TO={:#x} L={} len={}",
                stag.0,
                offset,
                u8::from(last),
                payload.len()
            );
        }
        RdmapMessage::ReadRequest { msn, request } => {
            let _ = write!(
                out.line,
                " MSN={msn} sink={:#x}@{:#x} src={:#x}@{:#x} size={}",
                request.sink_stag.0,
                request.sink_offset,
                request.src_stag.0,
                request.src_offset,
                request.size
            );
        }
        RdmapMessage::Send {
            last,
            invalidate,
            msn,
            mo,
            payload,
            ..
        } => {
            let _ = write!(
                out.line,
                " MSN={msn} MO={mo} L={} len={}",
                u8::from(last),
                payload.len()
            );
            if let Some(s) = invalidate {
                let _ = write!(out.line, " inv={:#x}", s.0);
            }
        }
        RdmapMessage::Terminate { msn, terminate } => {
            let (layer, etype, code) = terminate.error.fields();
            let _ = write!(
                out.line,
                " MSN={msn} {:?}/{etype}/{code:#04x} ({})",
                layer,
                terminate.error.description()
            );
        }
    }
    if out.verbose {
        out.detail.push(format!("  ddp: {:?}", m.ddp()));
        if matches!(
            m,
            RdmapMessage::ReadRequest { .. } | RdmapMessage::Terminate { .. }
        ) {
            out.detail.push(format!("  rdmap: {m:?}"));
        }
    }
}
