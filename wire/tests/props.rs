//! Property tests: repr -> emit -> parse round trips for the iWARP, CM and frame
//! layers; arbitrary bytes never panic a parser; the MPA deframer's output does not
//! depend on how the stream is chunked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use wire::cm::mad::MadHeader;
use wire::cm::messages::{attr, CommIds, Dreq, Mra, Rej, Rep, Req, SidrRep, SidrReq};
use wire::cm::{CmMad, CmMessage, CmPath, CmaHeader};
use wire::frame::{self, FrameAddrs, TcpInfo, Transport};
use wire::iwarp::deframer::{Deframed, Deframer};
use wire::iwarp::fpdu;
use wire::iwarp::mpa::{IrdOrd, MpaFrameKind, MpaRepr, MpaRevision};
use wire::iwarp::{
    FpduConfig, RdmapMessage, ReadRequest, Stag, TermLayer, TerminateError, TerminateRepr,
};
use wire::roce::packet::{Body, Header, Request, SendSeg, UcRequest, UcSendSeg, WriteSeg};
use wire::roce::{DethRepr, ImmDt, Packet, PacketRepr, Pkey, Psn, Qkey, Qpn, RethRepr, Rkey};

fn ird_ord() -> impl Strategy<Value = IrdOrd> {
    (0u16..0x4000, 0u16..0x4000, any::<[bool; 4]>()).prop_map(|(ird, ord, f)| IrdOrd {
        ird,
        ord,
        peer_to_peer: f[0],
        rtr_send: f[1],
        rtr_write: f[2],
        rtr_read: f[3],
    })
}

proptest! {
    #[test]
    fn mpa_frame_round_trips(
        req in any::<bool>(), flags in any::<[bool; 3]>(), res in 0u8..32,
        v2 in proptest::option::of(ird_ord()), pd in proptest::collection::vec(any::<u8>(), 0..=508),
    ) {
        let repr = MpaRepr {
            kind: if req { MpaFrameKind::Request } else { MpaFrameKind::Reply },
            markers: flags[0], crc: flags[1], reject: flags[2], reserved_flags: res,
            revision: v2.map_or(MpaRevision::V1, MpaRevision::V2),
            private_data: &pd,
        };
        let mut b = vec![0u8; repr.buffer_len()];
        repr.emit(&mut b);
        prop_assert_eq!(MpaRepr::parse_bytes(&b), Ok((repr, b.len())));
    }

    #[test]
    fn rdmap_messages_round_trip(
        kind in 0u8..6, last in any::<bool>(), se in any::<bool>(), inv in proptest::option::of(any::<u32>()),
        a in any::<u32>(), b in any::<u64>(), c in any::<u32>(),
        payload in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let ddp_hdr = [0x41u8; 18];
        let m = match kind {
            0 => RdmapMessage::Write { last, stag: Stag(a), offset: b, payload: &payload },
            1 => RdmapMessage::ReadResponse { last, stag: Stag(a), offset: b, payload: &payload },
            2 => RdmapMessage::Send { last, solicited: se, invalidate: inv.map(Stag), msn: a, mo: c, payload: &payload },
            3 => RdmapMessage::ReadRequest { msn: a, request: ReadRequest {
                sink_stag: Stag(c), sink_offset: b, size: a, src_stag: Stag(a ^ c), src_offset: !b } },
            4 => RdmapMessage::Terminate { msn: a, terminate: TerminateRepr {
                error: TerminateError::from_fields(TermLayer::from_bits(c as u8), (c >> 8) as u8, (c >> 16) as u8),
                segment_length_valid: se, ddp: last.then_some((c as u16, &ddp_hdr[..])), rdmap_header: None } },
            _ => RdmapMessage::Terminate { msn: a, terminate: TerminateRepr {
                error: TerminateError::RdmapInvalidStag, segment_length_valid: false, ddp: None,
                rdmap_header: Some(&payload[..payload.len().min(28)]).filter(|p| p.len() == 28) } },
        };
        let mut buf = vec![0u8; m.buffer_len()];
        m.emit(&mut buf);
        prop_assert_eq!(RdmapMessage::parse(&buf), Ok(m));
    }

    #[test]
    fn fpdus_round_trip_at_any_stream_offset(
        ulpdu in proptest::collection::vec(any::<u8>(), 14..1500), pos4 in 0u64..2000,
        crc in any::<bool>(), markers in any::<bool>(),
    ) {
        let cfg = FpduConfig { crc, markers };
        let pos = pos4 * 4;
        let mut b = vec![0u8; fpdu::wire_len(ulpdu.len(), cfg, pos)];
        prop_assert_eq!(fpdu::emit(&ulpdu, cfg, pos, &mut b), b.len());
        let mut out = Vec::new();
        let info = fpdu::parse(&b, cfg, pos, &mut out).unwrap().unwrap();
        prop_assert_eq!(info.wire_len, b.len());
        prop_assert_eq!(out, ulpdu);
    }

    #[test]
    fn deframer_output_does_not_depend_on_chunking(
        sizes in proptest::collection::vec(14usize..700, 1..6),
        cuts in proptest::collection::vec(1usize..300, 1..40),
        crc in any::<bool>(), markers in any::<bool>(), corrupt in proptest::option::of(any::<usize>()),
    ) {
        let cfg = FpduConfig { crc, markers };
        let req = MpaRepr { kind: MpaFrameKind::Request, markers, crc, reject: false, reserved_flags: 0,
            revision: MpaRevision::V2(IrdOrd::default()), private_data: b"hello" };
        let mut s = vec![0u8; req.buffer_len()];
        req.emit(&mut s);
        let mut pos = 0u64;
        for (i, n) in sizes.iter().enumerate() {
            let u = vec![i as u8; *n];
            let len = fpdu::wire_len(u.len(), cfg, pos);
            let at = s.len();
            s.resize(at + len, 0);
            fpdu::emit(&u, cfg, pos, &mut s[at..]);
            pos += len as u64;
        }
        if let Some(c) = corrupt {
            let i = c % s.len();
            s[i] ^= 0x10;
        }
        let whole = run_deframer(&s, &[s.len()], cfg);
        let chunked = run_deframer(&s, &cuts, cfg);
        let bytewise = run_deframer(&s, &[1], cfg);
        prop_assert_eq!(&whole, &chunked);
        prop_assert_eq!(&whole, &bytewise);
        if corrupt.is_none() {
            prop_assert_eq!(whole.len(), 1 + sizes.len());
        }
    }

    #[test]
    fn cm_mads_round_trip(kind in 0u8..10, status in any::<u16>(), method in 0u8..0x80, response in any::<bool>(), ids in any::<[u32; 4]>(), bytes in any::<[u8; 32]>(), pd_seed in any::<u8>()) {
        let pd: Vec<u8> = (0..232u32).map(|i| (i as u8).wrapping_mul(pd_seed)).collect();
        let gid = |o: usize| { let mut g = [0u8; 16]; g.copy_from_slice(&bytes[o..o + 16]); g };
        let path = CmPath { local_lid: ids[0] as u16, remote_lid: ids[1] as u16, local_gid: gid(0), remote_gid: gid(16),
            flow_label: ids[2] & 0xf_ffff, packet_rate: bytes[0] & 0x3f, traffic_class: bytes[1], hop_limit: bytes[2],
            sl: bytes[3] & 0xf, subnet_local: bytes[4] & 1 != 0, local_ack_timeout: bytes[5] & 0x1f };
        let message = match kind {
            0 => CmMessage::Req(Req { local_comm_id: ids[0], vendor_id: ids[1] & 0xff_ffff, service_id: u64::from(ids[2]) << 8,
                local_ca_guid: u64::from(ids[3]), local_qkey: Qkey(ids[1]), local_qpn: Qpn(ids[2] & 0xff_ffff),
                responder_resources: bytes[6], local_eecn: ids[3] & 0xff_ffff, initiator_depth: bytes[7],
                remote_eecn: ids[0] & 0xff_ffff, remote_cm_response_timeout: bytes[8] & 0x1f, transport_service_type: bytes[9] & 3,
                end_to_end_flow_control: bytes[10] & 1 != 0, starting_psn: Psn::new(ids[1]), local_cm_response_timeout: bytes[11] & 0x1f,
                retry_count: bytes[12] & 7, pkey: Pkey(ids[3] as u16), path_mtu: bytes[13] & 0xf, rdc_exists: bytes[14] & 1 != 0,
                rnr_retry_count: bytes[15] & 7, max_cm_retries: bytes[16] & 0xf, srq: bytes[17] & 1 != 0,
                extended_transport_type: bytes[18] & 7, primary_path: path, alternate_path: CmPath { sl: 3, ..path },
                sap_supported: bytes[19] & 1 != 0, private_data: &pd[..92] }),
            1 => CmMessage::Rep(Rep { local_comm_id: ids[0], remote_comm_id: ids[1], local_qkey: Qkey(ids[2]),
                local_qpn: Qpn(ids[3] & 0xff_ffff), local_eecn: ids[0] & 0xff_ffff, starting_psn: Psn::new(ids[1]),
                vendor_id: ids[2] & 0xff_ffff, responder_resources: bytes[0], initiator_depth: bytes[1],
                target_ack_delay: bytes[2] & 0x1f, failover_accepted: bytes[3] & 3, end_to_end_flow_control: bytes[4] & 1 != 0,
                rnr_retry_count: bytes[5] & 7, srq: bytes[6] & 1 != 0, local_ca_guid: u64::from(ids[3]) << 3, private_data: &pd[..196] }),
            2 => CmMessage::Rej(Rej { local_comm_id: ids[0], remote_comm_id: ids[1], message_rejected: bytes[0] & 3,
                rejected_info_length: bytes[1] & 0x7f, reason: ids[2] as u16, ari: &pd[..72], private_data: &pd[..148] }),
            3 => CmMessage::Mra(Mra { local_comm_id: ids[0], remote_comm_id: ids[1], message_mraed: bytes[0] & 3,
                service_timeout: bytes[1] & 0x1f, private_data: &pd[..222] }),
            6 => CmMessage::Drep(CommIds { local_comm_id: ids[0], remote_comm_id: ids[1], private_data: &pd[..224] }),
            7 => CmMessage::SidrReq(SidrReq { request_id: ids[0], pkey: Pkey(ids[1] as u16), service_id: u64::from(ids[2]) << 16, private_data: &pd[..216] }),
            8 => CmMessage::SidrRep(SidrRep { request_id: ids[0], status: bytes[0], additional_info_length: bytes[1],
                vendor_id: ids[1] & 0xff_ffff, qpn: Qpn(ids[2] & 0xff_ffff), service_id: u64::from(ids[3]), qkey: Qkey(ids[0] ^ ids[1]),
                additional_info: &pd[..72], private_data: &pd[..136] }),
            9 => CmMessage::Other { attribute_id: 0x0019, data: &pd[..232] },
            4 => CmMessage::Dreq(Dreq { local_comm_id: ids[0], remote_comm_id: ids[1], remote_qpn: Qpn(ids[2] & 0xff_ffff), private_data: &pd[..220] }),
            _ => CmMessage::Rtu(CommIds { local_comm_id: ids[0], remote_comm_id: ids[1], private_data: &pd[..224] }),
        };
        let header = MadHeader { status, method, response, class_specific: status ^ 1, attribute_modifier: ids[2],
            ..MadHeader::cm(message.attribute_id(), u64::from(ids[3]) << 20) };
        let mad = CmMad { header, message };
        let mut b = [0u8; 256];
        mad.emit(&mut b);
        prop_assert_eq!(CmMad::parse(&b), Ok(mad));
        prop_assert!(message.attribute_id() >= attr::REQ);
    }

    #[test]
    fn cma_header_round_trips(v6 in any::<bool>(), a in any::<[u8; 16]>(), b in any::<[u8; 16]>(), port in any::<u16>()) {
        let (src, dst) = if v6 {
            (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))
        } else {
            (IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])), IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])))
        };
        let h = CmaHeader { src_port: port, src, dst };
        let mut buf = [0u8; 36];
        h.emit(&mut buf);
        prop_assert_eq!(CmaHeader::parse(&buf), Ok(h));
    }

    #[test]
    fn roce_frames_round_trip_with_a_valid_icrc(
        v6 in any::<bool>(), kind in 0u8..4, qpn in 0u32..0x100_0000, psn in any::<u32>(), sport in any::<u16>(),
        ip_id in any::<u16>(), payload in proptest::collection::vec(any::<u8>(), 0..1100),
    ) {
        let addrs = if v6 {
            FrameAddrs { eth_src: [1; 6], eth_dst: [2; 6], src: IpAddr::V6(Ipv6Addr::LOCALHOST), dst: IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 9)) }
        } else {
            FrameAddrs { eth_src: [1; 6], eth_dst: [2; 6], src: IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), dst: IpAddr::V4(Ipv4Addr::new(10, 3, 2, 1)) }
        };
        let reth = RethRepr { va: u64::from(psn) << 7, rkey: Rkey(qpn ^ 0xabcd), dma_len: payload.len() as u32 };
        let body = match kind {
            0 => Body::RcRequest(Request::Send(SendSeg::Only)),
            1 => Body::RcRequest(Request::Write(WriteSeg::OnlyImm(reth, ImmDt(psn)))),
            2 => Body::Ud { deth: DethRepr { qkey: Qkey(psn), src_qp: Qpn(qpn) }, imm: Some(ImmDt(qpn)) },
            _ => Body::Uc(UcRequest::Send(UcSendSeg::First)),
        };
        let repr = PacketRepr { header: Header::new(Qpn(qpn), Psn::new(psn)), body, payload: &payload };
        let f = frame::build_roce(&addrs, sport, ip_id, &repr);
        let parsed = frame::parse(&f).unwrap();
        prop_assert_eq!(parsed.verify_icrc(), Some(true));
        let ib = parsed.roce().unwrap();
        let p = Packet::new_checked(ib).unwrap();
        prop_assert_eq!(PacketRepr::parse(&p).unwrap(), repr);
    }

    #[test]
    fn tcp_frames_round_trip(v6 in any::<bool>(), seq in any::<u32>(), ack in any::<u32>(), flags in any::<[bool; 3]>(),
                             payload in proptest::collection::vec(any::<u8>(), 0..300)) {
        let addrs = if v6 {
            FrameAddrs { eth_src: [1; 6], eth_dst: [2; 6], src: IpAddr::V6(Ipv6Addr::LOCALHOST), dst: IpAddr::V6(Ipv6Addr::UNSPECIFIED) }
        } else {
            FrameAddrs { eth_src: [1; 6], eth_dst: [2; 6], src: IpAddr::V4(Ipv4Addr::LOCALHOST), dst: IpAddr::V4(Ipv4Addr::BROADCAST) }
        };
        let info = TcpInfo { src_port: 1, dst_port: 2, seq, ack_number: if flags[0] { ack } else { 0 }, ack: flags[0],
            psh: flags[1], fin: flags[2] && !flags[1], window: 100, ..TcpInfo::default() };
        let f = frame::build_tcp(&addrs, &info, &payload);
        let parsed = frame::parse(&f).unwrap();
        prop_assert_eq!(parsed.ip.src(), addrs.src);
        match parsed.transport {
            Transport::Tcp { info: got, payload: p } => {
                prop_assert_eq!(got, info);
                prop_assert_eq!(p, &payload[..]);
            }
            _ => prop_assert!(false, "not TCP"),
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_a_parser(b in proptest::collection::vec(any::<u8>(), 0..600), pos in any::<u64>()) {
        let _ = MpaRepr::parse_bytes(&b);
        let _ = RdmapMessage::parse(&b);
        let _ = TerminateRepr::parse(&b);
        let _ = CmMad::parse(&b);
        let _ = CmaHeader::parse(&b);
        if let Ok(f) = frame::parse(&b) {
            let _ = f.verify_icrc();
        }
        let mut out = Vec::new();
        for cfg in [FpduConfig { crc: true, markers: true }, FpduConfig::default()] {
            let _ = fpdu::parse(&b, cfg, pos & !3, &mut out);
            for mut d in [Deframer::expecting_request(), Deframer::expecting_reply(), Deframer::in_full_operation(cfg)] {
                d.read(&b);
                for _ in 0..64 {
                    match d.pop() {
                        None => break,
                        Some(Ok(Deframed::Mpa(_))) => d.set_config(cfg),
                        Some(_) => {}
                    }
                }
            }
        }
    }
}

#[derive(Debug, PartialEq)]
enum Unit {
    Mpa(Vec<u8>),
    Fpdu(u64, Vec<u8>),
    Err(wire::iwarp::Error),
}

fn run_deframer(s: &[u8], cuts: &[usize], cfg: FpduConfig) -> Vec<Unit> {
    let mut d = Deframer::expecting_request();
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < s.len() {
        let n = cuts[i % cuts.len()].min(s.len() - at);
        d.read(&s[at..at + n]);
        at += n;
        i += 1;
        while let Some(u) = d.pop() {
            out.push(match u {
                Ok(Deframed::Mpa(m)) => Unit::Mpa(m.private_data.to_vec()),
                Ok(Deframed::Fpdu {
                    ulpdu,
                    stream_offset,
                    ..
                }) => Unit::Fpdu(stream_offset, ulpdu.to_vec()),
                Err(e) => Unit::Err(e),
            });
            if d.is_negotiating() {
                d.set_config(cfg);
            }
        }
    }
    out
}

/// Every way to cut the stream in two (and three, around each marker) gives the same.
#[test]
fn deframer_gives_the_same_frames_for_every_two_piece_split() {
    let cfg = FpduConfig {
        crc: true,
        markers: true,
    };
    let req = MpaRepr {
        kind: MpaFrameKind::Request,
        markers: true,
        crc: true,
        reject: false,
        reserved_flags: 0,
        revision: MpaRevision::V1,
        private_data: b"split",
    };
    let mut s = vec![0u8; req.buffer_len()];
    req.emit(&mut s);
    let mut pos = 0u64;
    for (i, n) in [14usize, 515, 30, 1100, 17].iter().enumerate() {
        let u = vec![i as u8 + 1; *n];
        let len = fpdu::wire_len(*n, cfg, pos);
        let at = s.len();
        s.resize(at + len, 0);
        fpdu::emit(&u, cfg, pos, &mut s[at..]);
        pos += len as u64;
    }
    let whole = run_deframer(&s, &[s.len()], cfg);
    assert_eq!(whole.len(), 6);
    for cut in 1..s.len() {
        assert_eq!(
            run_deframer(&s, &[cut, s.len()], cfg),
            whole,
            "cut at {cut}"
        );
    }
    for a in (1..s.len()).step_by(7) {
        for b in (1..s.len() - a).step_by(13) {
            assert_eq!(
                run_deframer(&s, &[a, b, s.len()], cfg),
                whole,
                "cuts {a}, {b}"
            );
        }
    }
}
