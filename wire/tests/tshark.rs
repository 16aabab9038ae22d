//! Wireshark agrees with what we build: a RoCE v2 packet of every opcode of every
//! transport (IPv4 and IPv6), and an iWARP session (TCP handshake, MPA Request/Reply
//! with CRC, FPDUs with and without markers). tshark must find no malformed packet and
//! no error-level expert item, report the fields we put in, and say "Good CRC32" for
//! every FPDU. Skips, saying so, when tshark is not installed (CI installs it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pcap_file::pcap::{PcapPacket, PcapWriter};

use wire::frame::{self, FrameAddrs, TcpInfo};
use wire::iwarp::fpdu;
use wire::iwarp::mpa::{IrdOrd, MpaFrameKind, MpaRepr, MpaRevision};
use wire::iwarp::{FpduConfig, RdmapMessage, ReadRequest, Stag};
use wire::roce::packet::{ReadRespSeg, Request, Response, SendSeg, UcRequest, UcSendSeg, WriteSeg};
use wire::roce::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, Body, CreditCode, DethRepr, FethRepr, Header, ImmDt,
    Msn, NakCode, PacketRepr, PlacementType, Psn, Qkey, Qpn, RethRepr, Rkey, Selectivity, Syndrome,
    XrcEthRepr,
};

const HEURISTICS_OFF: [&str; 4] = [
    "--disable-heuristic",
    "rpcrdma_infiniband",
    "--disable-heuristic",
    "rpcrdma_iwarp",
];

fn tshark_available() -> bool {
    let ok = Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("SKIPPED: tshark is not installed (apt-get install tshark); CI installs it");
    }
    ok
}

fn write_pcap(name: &str, frames: &[Vec<u8>]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wire-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let p = PcapPacket::new(Duration::from_micros(i as u64 * 10), f.len() as u32, f);
        w.write_packet(&p).unwrap();
    }
    path
}

fn tshark(path: &Path, extra: &[&str]) -> String {
    let out = Command::new("tshark")
        .args(HEURISTICS_OFF)
        .arg("-r")
        .arg(path)
        .args(extra)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Removes a capture once its test passed (a failing test leaves it for a look).
fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
    if let Some(dir) = path.parent() {
        let _ = std::fs::remove_dir(dir);
    }
}

fn assert_clean(path: &Path) {
    let bad = tshark(
        path,
        &["-Y", "_ws.malformed || _ws.expert.severity >= \"error\""],
    );
    assert!(
        bad.trim().is_empty(),
        "tshark finds malformed/error frames:\n{bad}"
    );
}

fn v4() -> FrameAddrs {
    FrameAddrs {
        eth_src: [0x02, 0, 0, 0, 0, 1],
        eth_dst: [0x02, 0, 0, 0, 0, 2],
        src: IpAddr::V4(Ipv4Addr::new(192, 168, 7, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(192, 168, 7, 2)),
    }
}

fn v6() -> FrameAddrs {
    FrameAddrs {
        src: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
        dst: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
        ..v4()
    }
}

const RETH: RethRepr = RethRepr {
    va: 0x0000_7f12_3456_7000,
    rkey: Rkey(0x1234_5678),
    dma_len: 4100,
};
const IMM: ImmDt = ImmDt(0xdead_beef);

fn aeth(i: u32) -> AethRepr {
    let syndrome = match i % 3 {
        0 => Syndrome::Ack(CreditCode::new(0x1f)),
        1 => Syndrome::Ack(CreditCode::new(3)),
        _ => Syndrome::Nak(NakCode::PsnSequenceError),
    };
    AethRepr {
        syndrome,
        msn: Msn::new(0x00ab_0000 + i),
    }
}

fn requests() -> Vec<Request> {
    let atomic = AtomicEthRepr {
        va: 0x1000,
        rkey: Rkey(0x42),
        swap_add: 5,
        compare: 7,
    };
    let mut v: Vec<Request> = [
        SendSeg::First,
        SendSeg::Middle,
        SendSeg::Last,
        SendSeg::LastImm(IMM),
        SendSeg::LastInv(Rkey(0x77)),
        SendSeg::Only,
        SendSeg::OnlyImm(IMM),
        SendSeg::OnlyInv(Rkey(0x78)),
    ]
    .into_iter()
    .map(Request::Send)
    .collect();
    v.extend(
        [
            WriteSeg::First(RETH),
            WriteSeg::Middle,
            WriteSeg::Last,
            WriteSeg::LastImm(IMM),
            WriteSeg::Only(RETH),
            WriteSeg::OnlyImm(RETH, IMM),
        ]
        .into_iter()
        .map(Request::Write),
    );
    v.push(Request::Read(RETH));
    v.push(Request::CompareSwap(atomic));
    v.push(Request::FetchAdd(atomic));
    // The Memory Placement Extensions' FLUSH and ATOMIC WRITE.
    let feth = FethRepr {
        placement: PlacementType::GLOBAL,
        selectivity: Selectivity::MemoryRange,
    };
    v.push(Request::Flush(feth, RETH));
    v.push(Request::AtomicWrite(RETH));
    v
}

fn responses() -> Vec<Response> {
    vec![
        Response::ReadResponse(ReadRespSeg::First(aeth(0))),
        Response::ReadResponse(ReadRespSeg::Middle),
        Response::ReadResponse(ReadRespSeg::Last(aeth(1))),
        Response::ReadResponse(ReadRespSeg::Only(aeth(2))),
        Response::Ack(aeth(3)),
        Response::Ack(aeth(5)),
        Response::AtomicAck(aeth(4), AtomicAckEthRepr { orig_data: 99 }),
    ]
}

fn bodies() -> Vec<Body> {
    let mut v: Vec<Body> = requests().into_iter().map(Body::RcRequest).collect();
    v.extend(responses().into_iter().map(Body::RcResponse));
    v.extend(
        [
            UcSendSeg::First,
            UcSendSeg::Middle,
            UcSendSeg::Last,
            UcSendSeg::LastImm(IMM),
            UcSendSeg::Only,
            UcSendSeg::OnlyImm(IMM),
        ]
        .into_iter()
        .map(|s| Body::Uc(UcRequest::Send(s))),
    );
    v.extend(
        [
            WriteSeg::First(RETH),
            WriteSeg::Middle,
            WriteSeg::Last,
            WriteSeg::LastImm(IMM),
            WriteSeg::Only(RETH),
            WriteSeg::OnlyImm(RETH, IMM),
        ]
        .into_iter()
        .map(|w| Body::Uc(UcRequest::Write(w))),
    );
    let deth = DethRepr {
        qkey: Qkey(0x1111_2222),
        src_qp: Qpn(0x33),
    };
    v.push(Body::Ud { deth, imm: None });
    v.push(Body::Ud {
        deth,
        imm: Some(IMM),
    });
    v.extend(requests().into_iter().map(|request| Body::XrcRequest {
        xrceth: XrcEthRepr { xrc_srq: 0x99 },
        request,
    }));
    v.extend(responses().into_iter().map(Body::XrcResponse));
    v.push(Body::Cnp);
    v
}

/// What tshark should report for a packet: (field, value) pairs.
#[derive(Debug, Default, Clone, PartialEq)]
struct Expect {
    opcode: u8,
    dest_qp: u32,
    psn: u32,
    /// RETH (va, rkey, dma length); Wireshark shows AtomicETH va/rkey in the same fields.
    reth: Option<(u64, u32, Option<u32>)>,
    aeth: Option<AethRepr>,
    imm: Option<u32>,
    /// Whether tshark dissects the extension headers. Wireshark 4.0 shows XRC packets'
    /// headers after the BTH as "Vendor Specific or Unknown Header Sequence": for them
    /// only the BTH fields are compared (and any extension field tshark does show). The
    /// same for FLUSH (0x1c) and ATOMIC WRITE (0x1d): Wireshark 4.0's `packet-infiniband.c`
    /// has no entry for them in its opcode table (`infiniband.bth.opcode` lists 0x17, SEND
    /// Only with Invalidate, as the last RC opcode), so it shows "Unknown (28)" and the
    /// rest as a "Vendor Specific or Unknown Header Sequence"; later releases'
    /// `packet-infiniband.h` define `RC_FLUSH` 28 and `RC_ATOMIC_WRITE` 29, and whatever
    /// RETH field they show is compared.
    strict: bool,
}

fn expect(header: &Header, body: &Body) -> Expect {
    let mut e = Expect {
        opcode: body.opcode().0,
        dest_qp: header.dest_qp.0,
        psn: header.psn.value(),
        strict: !matches!(body, Body::XrcRequest { .. } | Body::XrcResponse(_))
            && !matches!(
                body,
                Body::RcRequest(Request::Flush(..) | Request::AtomicWrite(_))
            ),
        ..Expect::default()
    };
    let request = |r: &Request, e: &mut Expect| match r {
        Request::Send(SendSeg::LastImm(i) | SendSeg::OnlyImm(i)) => e.imm = Some(i.0),
        Request::Write(WriteSeg::First(r) | WriteSeg::Only(r))
        | Request::Read(r)
        | Request::Flush(_, r)
        | Request::AtomicWrite(r) => e.reth = Some((r.va, r.rkey.0, Some(r.dma_len))),
        Request::CompareSwap(a) | Request::FetchAdd(a) => e.reth = Some((a.va, a.rkey.0, None)),
        Request::Write(WriteSeg::OnlyImm(r, i)) => {
            e.reth = Some((r.va, r.rkey.0, Some(r.dma_len)));
            e.imm = Some(i.0);
        }
        Request::Write(WriteSeg::LastImm(i)) => e.imm = Some(i.0),
        _ => {}
    };
    let response = |r: &Response, e: &mut Expect| match r {
        Response::ReadResponse(
            ReadRespSeg::First(a) | ReadRespSeg::Last(a) | ReadRespSeg::Only(a),
        )
        | Response::Ack(a)
        | Response::AtomicAck(a, _) => e.aeth = Some(*a),
        Response::ReadResponse(ReadRespSeg::Middle) => {}
    };
    match body {
        Body::RcRequest(r) => request(r, &mut e),
        Body::XrcRequest { request: r, .. } => request(r, &mut e),
        Body::RcResponse(r) | Body::XrcResponse(r) => response(r, &mut e),
        Body::Uc(UcRequest::Send(UcSendSeg::LastImm(i) | UcSendSeg::OnlyImm(i))) => {
            e.imm = Some(i.0)
        }
        Body::Uc(UcRequest::Write(w)) => request(&Request::Write(*w), &mut e),
        Body::Ud { imm: Some(i), .. } => e.imm = Some(i.0),
        _ => {}
    }
    e
}

fn num(s: &str) -> u64 {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap_or_else(|_| panic!("bad hex {s:?}")),
        None => s.parse().unwrap_or_else(|_| panic!("bad number {s:?}")),
    }
}

fn hex_bytes(s: &str) -> u64 {
    let h: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    u64::from_str_radix(&h, 16).unwrap_or_else(|_| panic!("bad bytes {s:?}"))
}

#[test]
fn tshark_dissects_every_roce_opcode_as_built() {
    if !tshark_available() {
        return;
    }
    let payload: Vec<u8> = (0..13u8).collect();
    let mut frames = Vec::new();
    let mut expected = Vec::new();
    for addrs in [v4(), v6()] {
        for (i, body) in bodies().into_iter().enumerate() {
            let i = i as u32;
            let mut header = Header::new(Qpn(0x10_0000 + i), Psn::new(0x00ff_fff0 + i * 3));
            header.ack_req = i.is_multiple_of(2);
            let repr = PacketRepr {
                header,
                body,
                payload: if body.has_payload() { &payload } else { &[] },
            };
            frames.push(frame::build_roce(
                &addrs,
                0xc000 + i as u16,
                i as u16,
                &repr,
            ));
            expected.push(expect(&header, &body));
        }
    }
    let path = write_pcap("roce.pcap", &frames);
    assert_clean(&path);
    let fields = [
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
        "infiniband.reth.va",
        "infiniband.reth.r_key",
        "infiniband.reth.dmalen",
        "infiniband.aeth.syndrome",
        "infiniband.aeth.msn",
        "infiniband.immdt",
    ];
    let mut args = vec!["-T", "fields", "-E", "separator=|", "-E", "occurrence=f"];
    for f in &fields {
        args.push("-e");
        args.push(f);
    }
    let out = tshark(&path, &args);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), expected.len());
    for (line, e) in lines.iter().zip(&expected) {
        let c: Vec<&str> = line.split('|').collect();
        assert_eq!(c.len(), fields.len(), "{line}");
        let ctx = format!("{e:?} vs tshark {line:?}");
        assert_eq!(num(c[0]), u64::from(e.opcode), "{ctx}");
        assert_eq!(num(c[1]), u64::from(e.dest_qp), "{ctx}");
        assert_eq!(num(c[2]), u64::from(e.psn), "{ctx}");
        let shown = |i: usize| e.strict || !c[i].is_empty();
        match e.reth {
            Some(_) if !shown(3) => {}
            Some((va, rkey, len)) => {
                assert_eq!(num(c[3]), va, "{ctx}");
                assert_eq!(num(c[4]), u64::from(rkey), "{ctx}");
                match len {
                    Some(len) => assert_eq!(num(c[5]), u64::from(len), "{ctx}"),
                    None => assert!(c[5].is_empty(), "{ctx}"),
                }
            }
            None => assert!(c[3].is_empty(), "{ctx}"),
        }
        match e.aeth {
            Some(_) if !shown(6) => {}
            Some(a) => {
                assert_eq!(num(c[6]), u64::from(a.syndrome.to_byte()), "{ctx}");
                assert_eq!(num(c[7]), u64::from(a.msn.0), "{ctx}");
            }
            None => assert!(c[6].is_empty(), "{ctx}"),
        }
        match e.imm {
            Some(_) if !shown(8) => {}
            Some(i) => {
                assert!(!c[8].is_empty(), "no immediate data: {ctx}");
                assert_eq!(hex_bytes(c[8]), u64::from(i), "{ctx}");
            }
            None => assert!(c[8].is_empty(), "{ctx}"),
        }
    }
    remove(&path);
}

/// Builds a TCP connection with MPA negotiation and FPDUs from the initiator.
fn iwarp_session(markers: bool, revision: MpaRevision) -> (Vec<Vec<u8>>, usize) {
    let a = v4();
    let b = FrameAddrs {
        eth_src: a.eth_dst,
        eth_dst: a.eth_src,
        src: a.dst,
        dst: a.src,
    };
    let (ip, rp) = (46000u16, 7174u16);
    let seg = |seq: u32, ack: u32| TcpInfo {
        seq,
        ack_number: ack,
        ack: true,
        psh: true,
        window: 8192,
        ..TcpInfo::default()
    };
    let (mut iseq, mut rseq) = (0x1000_0000u32, 0xffff_ff00u32);
    let mut frames = vec![
        frame::build_tcp(
            &a,
            &TcpInfo {
                src_port: ip,
                dst_port: rp,
                syn: true,
                ack: false,
                psh: false,
                ..seg(iseq, 0)
            },
            &[],
        ),
        frame::build_tcp(
            &b,
            &TcpInfo {
                src_port: rp,
                dst_port: ip,
                syn: true,
                psh: false,
                ..seg(rseq, iseq + 1)
            },
            &[],
        ),
    ];
    iseq += 1;
    rseq = rseq.wrapping_add(1);
    frames.push(frame::build_tcp(
        &a,
        &TcpInfo {
            src_port: ip,
            dst_port: rp,
            psh: false,
            ..seg(iseq, rseq)
        },
        &[],
    ));
    let mpa = |kind| {
        let r = MpaRepr {
            kind,
            markers,
            crc: true,
            reject: false,
            reserved_flags: 0,
            revision,
            private_data: b"rdma-emu",
        };
        let mut v = vec![0u8; r.buffer_len()];
        r.emit(&mut v);
        v
    };
    let req = mpa(MpaFrameKind::Request);
    frames.push(frame::build_tcp(
        &a,
        &TcpInfo {
            src_port: ip,
            dst_port: rp,
            ..seg(iseq, rseq)
        },
        &req,
    ));
    iseq += req.len() as u32;
    let rep = mpa(MpaFrameKind::Reply);
    frames.push(frame::build_tcp(
        &b,
        &TcpInfo {
            src_port: rp,
            dst_port: ip,
            ..seg(rseq, iseq)
        },
        &rep,
    ));
    rseq = rseq.wrapping_add(rep.len() as u32);
    let cfg = FpduConfig { crc: true, markers };
    let payload: Vec<u8> = (0..700u32).map(|i| i as u8).collect();
    let messages = [
        RdmapMessage::Send {
            last: true,
            solicited: false,
            invalidate: None,
            msn: 1,
            mo: 0,
            payload: &payload[..5],
        },
        RdmapMessage::Write {
            last: true,
            stag: Stag(0x1234),
            offset: 0x10_0000,
            payload: &payload,
        },
        RdmapMessage::ReadRequest {
            msn: 1,
            request: ReadRequest {
                sink_stag: Stag(5),
                sink_offset: 0x40,
                size: 64,
                src_stag: Stag(6),
                src_offset: 0x80,
            },
        },
        RdmapMessage::Send {
            last: false,
            solicited: true,
            invalidate: Some(Stag(0x99)),
            msn: 2,
            mo: 0,
            payload: &payload[..333],
        },
        RdmapMessage::Send {
            last: true,
            solicited: true,
            invalidate: Some(Stag(0x99)),
            msn: 2,
            mo: 333,
            payload: &payload[..100],
        },
        RdmapMessage::Write {
            last: false,
            stag: Stag(0x1234),
            offset: 0,
            payload: &payload[..511],
        },
    ];
    let mut pos = 0u64;
    for m in &messages {
        let mut ulpdu = vec![0u8; m.buffer_len()];
        m.emit(&mut ulpdu);
        let mut f = vec![0u8; fpdu::wire_len(ulpdu.len(), cfg, pos)];
        fpdu::emit(&ulpdu, cfg, pos, &mut f);
        frames.push(frame::build_tcp(
            &a,
            &TcpInfo {
                src_port: ip,
                dst_port: rp,
                ..seg(iseq, rseq)
            },
            &f,
        ));
        iseq = iseq.wrapping_add(f.len() as u32);
        pos += f.len() as u64;
    }
    // A Read Response the other way.
    let resp = RdmapMessage::ReadResponse {
        last: true,
        stag: Stag(5),
        offset: 0x40,
        payload: &payload[..64],
    };
    let mut ulpdu = vec![0u8; resp.buffer_len()];
    resp.emit(&mut ulpdu);
    let mut f = vec![0u8; fpdu::wire_len(ulpdu.len(), cfg, 0)];
    fpdu::emit(&ulpdu, cfg, 0, &mut f);
    frames.push(frame::build_tcp(
        &b,
        &TcpInfo {
            src_port: rp,
            dst_port: ip,
            ..seg(rseq, iseq)
        },
        &f,
    ));
    (frames, messages.len() + 1)
}

#[test]
fn tshark_finds_good_crc32_on_every_fpdu_with_and_without_markers() {
    if !tshark_available() {
        return;
    }
    for (markers, revision) in [
        (false, MpaRevision::V1),
        (true, MpaRevision::V1),
        (
            false,
            MpaRevision::V2(IrdOrd {
                ird: 16,
                ord: 16,
                peer_to_peer: true,
                rtr_read: true,
                ..IrdOrd::default()
            }),
        ),
    ] {
        let (frames, fpdus) = iwarp_session(markers, revision);
        let path = write_pcap(
            &format!("iwarp-{markers}-{}.pcap", revision.number()),
            &frames,
        );
        assert_clean(&path);
        let verbose = tshark(&path, &["-V"]);
        let good = verbose.matches("Good CRC32").count();
        assert_eq!(good, fpdus, "markers={markers}: tshark -V:\n{verbose}");
        assert!(!verbose.contains("Bad CRC32"));
        let ops = tshark(
            &path,
            &[
                "-T",
                "fields",
                "-e",
                "iwarp_rdma.opcode",
                "-Y",
                "iwarp_rdma",
            ],
        );
        let got: Vec<u64> = ops.lines().map(num).collect();
        assert_eq!(got, vec![3, 0, 1, 6, 6, 0, 2], "markers={markers}");
        remove(&path);
    }
}
