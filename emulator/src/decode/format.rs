//! Decoding and printing one frame: the link type made Ethernet, GSO super-frames split,
//! then addresses and RoCE / CM / iWARP / plain transport fields, with the checks counted
//! in the [`Summary`]. [`Decoder`] holds what lasts from frame to frame.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use wire::cm::{CmMad, CmMessage, CmaHeader};
use wire::frame::{Frame, IpHeader, Transport};
use wire::roce::packet::{
    Body, ReadRespSeg, Request, Response, SendSeg, UcRequest, UcSendSeg, WriteSeg,
};
use wire::roce::{Packet, PacketRepr, Qpn};

use pcap_file::DataLink;

use super::stream::Streams;
use super::summary::Summary;

/// The state of one decoding run: the options, the tally, and the TCP flows being
/// reassembled for the MPA deframer.
pub(super) struct Decoder {
    verbose: bool,
    pub(super) summary: Summary,
    streams: Streams,
}

impl Decoder {
    pub(super) fn new(verbose: bool) -> Decoder {
        Decoder {
            verbose,
            summary: Summary::default(),
            streams: Streams::default(),
        }
    }

    /// Decodes one captured frame of link type `link`, emitting its line and, when
    /// verbose, its fields.
    pub(super) fn frame(
        &mut self,
        link: DataLink,
        ts: Duration,
        data: &[u8],
        emit: &mut dyn FnMut(&str),
    ) {
        self.summary.frames += 1;
        let mut line = timestamp(ts);
        let mut detail = Vec::new();
        let Some(ethernet) = as_ethernet(link, data) else {
            let _ = write!(
                line,
                " unsupported link type {link:?}, {} bytes",
                data.len()
            );
            emit(&line);
            return;
        };
        if let Some(frames) = super::gso::split(&ethernet) {
            self.summary.frames -= 1;
            for f in frames {
                self.frame(DataLink::ETHERNET, ts, &f, emit);
            }
            return;
        }
        match wire::frame::parse(&ethernet) {
            // ARP, LLDP and the like share the wire with RoCE and iWARP: not ours to judge.
            Err(wire::frame::Error::UnsupportedEtherType(t)) => {
                let _ = write!(line, " EtherType {t:#06x}, {} bytes (not IP)", data.len());
            }
            Err(e) => {
                self.summary.malformed += 1;
                let _ = write!(line, " [malformed frame: {e}]");
            }
            Ok(parsed) => {
                frame(self, &parsed, &mut line, &mut detail);
            }
        }
        emit(&line);
        for l in detail {
            emit(&l);
        }
    }
}

/// The frame as Ethernet II: captures on `any` (Linux cooked, SLL and SLL2) and raw IP
/// captures get a synthetic Ethernet header with zero addresses.
fn as_ethernet(link: DataLink, data: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    let synth = |ethertype: [u8; 2], payload: &[u8]| {
        let mut v = Vec::with_capacity(14 + payload.len());
        v.extend_from_slice(&[0u8; 12]);
        v.extend_from_slice(&ethertype);
        v.extend_from_slice(payload);
        std::borrow::Cow::Owned(v)
    };
    match link {
        DataLink::ETHERNET => Some(std::borrow::Cow::Borrowed(data)),
        DataLink::LINUX_SLL => {
            let t = data.get(14..16)?;
            Some(synth([t[0], t[1]], data.get(16..)?))
        }
        DataLink::LINUX_SLL2 => {
            let t = data.get(0..2)?;
            Some(synth([t[0], t[1]], data.get(20..)?))
        }
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => match data.first()? >> 4 {
            4 => Some(synth([0x08, 0x00], data)),
            6 => Some(synth([0x86, 0xdd], data)),
            _ => None,
        },
        _ => None,
    }
}

/// `HH:MM:SS.micros` (UTC) like tcpdump.
pub(super) fn timestamp(ts: Duration) -> String {
    let secs = ts.as_secs();
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60,
        ts.subsec_micros()
    )
}

fn endpoint(a: IpAddr, port: u16) -> String {
    match a {
        IpAddr::V4(v4) => format!("{v4}.{port}"),
        IpAddr::V6(v6) => format!("{v6}.{port}"),
    }
}

pub(super) fn frame(d: &mut Decoder, f: &Frame<'_>, line: &mut String, detail: &mut Vec<String>) {
    if d.verbose {
        detail.push(format!(
            "  ethernet: src {} dst {} type {}",
            f.ethernet.src_addr, f.ethernet.dst_addr, f.ethernet.ethertype
        ));
        if let Some(tci) = f.vlan {
            detail.push(format!(
                "  vlan: id {} pcp {} dei {}",
                tci & 0x0fff,
                tci >> 13,
                (tci >> 12) & 1
            ));
        }
        match f.ip {
            IpHeader::V4 {
                repr, ident, tos, ..
            } => detail.push(format!(
                "  ipv4: src {} dst {} proto {} ttl {} id {ident:#06x} tos {tos:#04x} payload_len {}",
                repr.src_addr, repr.dst_addr, repr.next_header, repr.hop_limit, repr.payload_len
            )),
            IpHeader::V6 {
                repr,
                traffic_class,
                flow_label,
                ..
            } => detail.push(format!(
                "  ipv6: src {} dst {} next {} hop_limit {} tclass {traffic_class:#04x} flow {flow_label:#07x} payload_len {}",
                repr.src_addr, repr.dst_addr, repr.next_header, repr.hop_limit, repr.payload_len
            )),
        }
    }
    let (src, dst) = (f.ip.src(), f.ip.dst());
    match f.transport {
        Transport::Udp {
            src_port,
            dst_port,
            checksum,
            payload,
            ..
        } => {
            let _ = write!(
                line,
                " {} > {}:",
                endpoint(src, src_port),
                endpoint(dst, dst_port)
            );
            if d.verbose {
                detail.push(format!(
                    "  udp: src_port {src_port} dst_port {dst_port} len {} checksum {checksum:#06x}",
                    payload.len() + 8
                ));
            }
            if f.roce().is_some() {
                roce(d, f, payload, line, detail);
            } else {
                let _ = write!(line, " UDP, length {}", payload.len());
            }
        }
        Transport::Tcp { info, payload } => {
            let _ = write!(
                line,
                " {} > {}: TCP [{}] seq {} ack {} win {} length {}",
                endpoint(src, info.src_port),
                endpoint(dst, info.dst_port),
                tcp_flags(&info),
                info.seq,
                info.ack_number,
                info.window,
                payload.len()
            );
            if d.verbose {
                detail.push(format!("  tcp: {info:?}"));
            }
            d.streams.segment(
                (src, info.src_port, dst, info.dst_port),
                &info,
                payload,
                d.verbose,
                &mut d.summary,
                line,
                detail,
            );
        }
        Transport::Other { protocol, payload } => {
            let _ = write!(
                line,
                " {src} > {dst}: ip-proto-{protocol}, length {}",
                payload.len()
            );
        }
    }
}

fn tcp_flags(i: &wire::frame::TcpInfo) -> String {
    let mut s = String::new();
    for (on, c) in [
        (i.syn, 'S'),
        (i.fin, 'F'),
        (i.rst, 'R'),
        (i.psh, 'P'),
        (i.ack, '.'),
    ] {
        if on {
            s.push(c);
        }
    }
    s
}

/// The extension-header fields worth a place on the one-line summary.
fn ext_summary(body: &Body) -> String {
    let mut s = String::new();
    let reth = |s: &mut String, r: &wire::roce::RethRepr| {
        let _ = write!(
            s,
            " RETH va={:#x} rkey={:#x} len={}",
            r.va, r.rkey.0, r.dma_len
        );
    };
    let aeth = |s: &mut String, a: &wire::roce::AethRepr| {
        let _ = write!(s, " AETH {:?} MSN={}", a.syndrome, a.msn.0);
    };
    let imm = |s: &mut String, i: &wire::roce::ImmDt| {
        let _ = write!(s, " IMM={:#010x}", i.0);
    };
    let request = |s: &mut String, r: &Request| match r {
        Request::Send(SendSeg::LastImm(i) | SendSeg::OnlyImm(i)) => imm(s, i),
        Request::Send(SendSeg::LastInv(k) | SendSeg::OnlyInv(k)) => {
            let _ = write!(s, " IETH rkey={:#x}", k.0);
        }
        Request::Send(_) => {}
        Request::Write(WriteSeg::First(r) | WriteSeg::Only(r)) => reth(s, r),
        Request::Write(WriteSeg::OnlyImm(r, i)) => {
            reth(s, r);
            imm(s, i);
        }
        Request::Write(WriteSeg::LastImm(i)) => imm(s, i),
        Request::Write(_) => {}
        Request::Read(r) | Request::AtomicWrite(r) => reth(s, r),
        Request::Flush(f, r) => {
            let _ = write!(
                s,
                " FETH placement={:#x} level={:?}",
                f.placement.0, f.selectivity
            );
            reth(s, r);
        }
        Request::CompareSwap(a) | Request::FetchAdd(a) => {
            let _ = write!(
                s,
                " AtomicETH va={:#x} rkey={:#x} swap_add={:#x} compare={:#x}",
                a.va, a.rkey.0, a.swap_add, a.compare
            );
        }
    };
    let response = |s: &mut String, r: &Response| match r {
        Response::ReadResponse(
            ReadRespSeg::First(a) | ReadRespSeg::Last(a) | ReadRespSeg::Only(a),
        )
        | Response::Ack(a) => aeth(s, a),
        Response::ReadResponse(ReadRespSeg::Middle) => {}
        Response::AtomicAck(a, o) => {
            aeth(s, a);
            let _ = write!(s, " orig={:#x}", o.orig_data);
        }
    };
    match body {
        Body::RcRequest(r) => request(&mut s, r),
        Body::RcResponse(r) | Body::XrcResponse(r) => response(&mut s, r),
        Body::Uc(UcRequest::Send(UcSendSeg::LastImm(i) | UcSendSeg::OnlyImm(i))) => imm(&mut s, i),
        Body::Uc(UcRequest::Write(w)) => request(&mut s, &Request::Write(*w)),
        Body::Uc(_) => {}
        Body::Ud { deth, imm: i } => {
            let _ = write!(
                s,
                " DETH qkey={:#x} srcQP={:#x}",
                deth.qkey.0, deth.src_qp.0
            );
            if let Some(i) = i {
                imm(&mut s, i);
            }
        }
        Body::XrcRequest { xrceth, request: r } => {
            let _ = write!(s, " XRCETH srq={:#x}", xrceth.xrc_srq);
            request(&mut s, r);
        }
        Body::Cnp => {}
    }
    s
}

fn roce(d: &mut Decoder, f: &Frame<'_>, ib: &[u8], line: &mut String, detail: &mut Vec<String>) {
    line.push_str(" RoCEv2");
    let packet = match Packet::new_checked(ib) {
        Ok(p) => p,
        Err(e) => {
            d.summary.malformed += 1;
            let _ = write!(line, " [malformed: {e}], length {}", ib.len());
            return;
        }
    };
    let repr = match PacketRepr::parse(&packet) {
        Ok(r) => r,
        Err(e) => {
            d.summary.malformed += 1;
            let _ = write!(
                line,
                " {} [malformed: {e}], length {}",
                packet.opcode(),
                ib.len()
            );
            return;
        }
    };
    let h = &repr.header;
    let _ = write!(
        line,
        " {} QP={:#08x} PSN={}{}{}{} len={}",
        packet.opcode(),
        h.dest_qp.0,
        h.psn.value(),
        if h.ack_req { " A" } else { "" },
        if h.solicited { " SE" } else { "" },
        ext_summary(&repr.body),
        repr.payload.len()
    );
    if d.verbose {
        detail.push(format!("  bth: {:?}", repr.header));
        detail.push(format!("  body: {:?}", repr.body));
        detail.push(format!(
            "  payload: {} bytes, icrc {:#010x}",
            repr.payload.len(),
            packet.icrc()
        ));
    }
    if h.dest_qp == Qpn::GSI {
        if let Body::Ud { .. } = repr.body {
            cm(d, repr.payload, line, detail);
        }
    }
    match f.verify_icrc() {
        Some(true) => {
            d.summary.icrc_ok += 1;
            line.push_str(" ICRC ok");
        }
        Some(false) => {
            d.summary.icrc_bad += 1;
            line.push_str(" ICRC BAD");
        }
        None => line.push_str(" ICRC unchecked"),
    }
}

fn cm(d: &mut Decoder, mad: &[u8], line: &mut String, detail: &mut Vec<String>) {
    let m = match CmMad::parse(mad) {
        Ok(m) => m,
        Err(e) => {
            let _ = write!(line, " MAD [{e}]");
            return;
        }
    };
    let _ = write!(
        line,
        " CM {} tid={:#x}",
        m.message.name(),
        m.header.transaction_id
    );
    match &m.message {
        CmMessage::Req(r) => {
            let _ = write!(
                line,
                " comm_id={:#x} sid={:#x} qpn={:#x} psn={}",
                r.local_comm_id,
                r.service_id,
                r.local_qpn.0,
                r.starting_psn.value()
            );
            if let Ok(h) = CmaHeader::parse(r.private_data) {
                let _ = write!(line, " cma {} > {}", endpoint(h.src, h.src_port), h.dst);
            }
        }
        CmMessage::Rep(r) => {
            let _ = write!(
                line,
                " comm_id={:#x}/{:#x} qpn={:#x} psn={}",
                r.local_comm_id,
                r.remote_comm_id,
                r.local_qpn.0,
                r.starting_psn.value()
            );
        }
        CmMessage::Rej(r) => {
            let _ = write!(
                line,
                " comm_id={:#x}/{:#x} reason={}",
                r.local_comm_id, r.remote_comm_id, r.reason
            );
        }
        CmMessage::Mra(r) => {
            let _ = write!(
                line,
                " comm_id={:#x}/{:#x}",
                r.local_comm_id, r.remote_comm_id
            );
        }
        CmMessage::Rtu(r) | CmMessage::Drep(r) => {
            let _ = write!(
                line,
                " comm_id={:#x}/{:#x}",
                r.local_comm_id, r.remote_comm_id
            );
        }
        CmMessage::Dreq(r) => {
            let _ = write!(
                line,
                " comm_id={:#x}/{:#x} qpn={:#x}",
                r.local_comm_id, r.remote_comm_id, r.remote_qpn.0
            );
        }
        CmMessage::SidrReq(r) => {
            let _ = write!(line, " req_id={:#x} sid={:#x}", r.request_id, r.service_id);
        }
        CmMessage::SidrRep(r) => {
            let _ = write!(
                line,
                " req_id={:#x} status={} qpn={:#x}",
                r.request_id, r.status, r.qpn.0
            );
        }
        CmMessage::Other { attribute_id, .. } => {
            let _ = write!(line, " attr={attribute_id:#06x}");
        }
    }
    if d.verbose {
        detail.push(format!("  mad: {:?}", m.header));
        detail.push(format!("  cm: {:?}", m.message));
    }
}
