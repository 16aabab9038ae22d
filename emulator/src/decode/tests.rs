use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::pcap::{PcapPacket, PcapWriter};
use pcap_file::DataLink;
use wire::frame::{build_tcp, FrameAddrs, TcpInfo};
use wire::iwarp::fpdu;
use wire::iwarp::mpa::{MpaFrameKind, MpaRepr, MpaRevision};
use wire::iwarp::{FpduConfig, RdmapMessage, Stag};

use super::*;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpora/rxe")
}

fn decode(bytes: &[u8]) -> (Result<Summary, DecodeError>, Vec<String>) {
    let mut lines = Vec::new();
    let r = decode_bytes(bytes, true, &mut |l| lines.push(l.to_string()));
    (r, lines)
}

fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            Duration::from_millis(i as u64),
            f.len() as u32,
            f,
        ))
        .unwrap();
    }
    w.into_writer()
}

#[test]
fn every_corpus_capture_decodes_with_every_icrc_good() {
    let mut files = Vec::new();
    for dir in [corpus(), corpus().join("nccl")] {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "pcap") {
                files.push(e.path());
            }
        }
    }
    assert!(files.len() >= 20, "corpus missing: {files:?}");
    for f in files {
        let (r, lines) = decode(&std::fs::read(&f).unwrap());
        let s = r.unwrap();
        assert!(s.frames > 0, "{}", f.display());
        assert_eq!(s.icrc_bad, 0, "{}", f.display());
        assert_eq!(
            s.malformed,
            0,
            "{}: {:?}",
            f.display(),
            lines.iter().find(|l| l.contains("malformed"))
        );
        assert!(s.icrc_ok > 0, "{}", f.display());
    }
}

#[test]
fn rdma_cm_capture_shows_every_cm_message() {
    let (r, lines) = decode(&std::fs::read(corpus().join("rdma_cm.pcap")).unwrap());
    r.unwrap();
    let all = lines.join("\n");
    for m in [
        "ConnectRequest",
        "ConnectReply",
        "ReadyToUse",
        "DisconnectRequest",
        "DisconnectReply",
    ] {
        assert!(all.contains(&format!("CM {m}")), "no {m}");
    }
}

#[test]
fn flipped_bit_in_a_roce_payload_is_reported_bad() {
    use wire::roce::packet::{Body, Header, Request, SendSeg};
    use wire::roce::{PacketRepr, Psn, Qpn};
    let addrs = FrameAddrs {
        eth_src: [2, 0, 0, 0, 0, 1],
        eth_dst: [2, 0, 0, 0, 0, 2],
        src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    };
    let repr = PacketRepr {
        header: Header::new(Qpn(0x11), Psn::new(5)),
        body: Body::RcRequest(Request::Send(SendSeg::Only)),
        payload: b"some payload",
    };
    let good = wire::frame::build_roce(&addrs, 49152, 1, &repr);
    let mut bad = good.clone();
    bad[14 + 20 + 8 + 12 + 3] ^= 0x40;
    let (r, lines) = decode(&pcap(std::slice::from_ref(&good)));
    assert!(!r.unwrap().has_bad_checksum(), "{lines:?}");
    let (r, lines) = decode(&pcap(&[good, bad]));
    let s = r.unwrap();
    assert_eq!((s.icrc_ok, s.icrc_bad), (1, 1));
    assert!(lines.iter().any(|l| l.contains("ICRC BAD")));
}

#[test]
fn non_pcap_and_truncated_files_are_errors() {
    assert!(decode(b"hello world, not a capture").0.is_err());
    assert!(decode(b"ab").0.is_err());
    let bytes = std::fs::read(corpus().join("pingpong_rc.pcap")).unwrap();
    assert!(decode(&bytes[..bytes.len() - 7]).0.is_err());
    assert!(decode(&bytes[..30]).0.is_err());
}

fn iwarp_session(markers: bool, corrupt: bool) -> Vec<u8> {
    let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let ab = FrameAddrs {
        eth_src: [2, 0, 0, 0, 0, 1],
        eth_dst: [2, 0, 0, 0, 0, 2],
        src: a,
        dst: b,
    };
    let ba = FrameAddrs {
        eth_src: ab.eth_dst,
        eth_dst: ab.eth_src,
        src: b,
        dst: a,
    };
    let tcp = |sp: u16, dp: u16, seq: u32, ack: u32| TcpInfo {
        src_port: sp,
        dst_port: dp,
        seq,
        ack_number: ack,
        ack: true,
        psh: true,
        window: 1024,
        ..TcpInfo::default()
    };
    let mut frames = Vec::new();
    frames.push(build_tcp(
        &ab,
        &TcpInfo {
            syn: true,
            ack: false,
            ..tcp(40000, 7174, 1000, 0)
        },
        &[],
    ));
    frames.push(build_tcp(
        &ba,
        &TcpInfo {
            syn: true,
            ..tcp(7174, 40000, 5000, 1001)
        },
        &[],
    ));
    let mpa = |kind, m| {
        let r = MpaRepr {
            kind,
            markers: m,
            crc: true,
            reject: false,
            reserved_flags: 0,
            revision: MpaRevision::V1,
            private_data: b"",
        };
        let mut v = vec![0u8; r.buffer_len()];
        r.emit(&mut v);
        v
    };
    let req = mpa(MpaFrameKind::Request, markers);
    let rep = mpa(MpaFrameKind::Reply, markers);
    frames.push(build_tcp(&ab, &tcp(40000, 7174, 1001, 5001), &req));
    frames.push(build_tcp(
        &ba,
        &tcp(7174, 40000, 5001, 1001 + req.len() as u32),
        &rep,
    ));
    let cfg = FpduConfig { crc: true, markers };
    let mut seq = 1001 + req.len() as u32;
    let mut pos = 0u64;
    for i in 0..4u32 {
        let payload = vec![i as u8; 300];
        let m = RdmapMessage::Write {
            last: true,
            stag: Stag(0x100 + i),
            offset: 0x1000,
            payload: &payload,
        };
        let mut ulpdu = vec![0u8; m.buffer_len()];
        m.emit(&mut ulpdu);
        let mut f = vec![0u8; fpdu::wire_len(ulpdu.len(), cfg, pos)];
        fpdu::emit(&ulpdu, cfg, pos, &mut f);
        if corrupt && i == 2 {
            f[40] ^= 1;
        }
        frames.push(build_tcp(
            &ab,
            &tcp(40000, 7174, seq, 5001 + rep.len() as u32),
            &f,
        ));
        seq += f.len() as u32;
        pos += f.len() as u64;
    }
    pcap(&frames)
}

#[test]
fn iwarp_session_fpdus_have_good_crcs_with_and_without_markers() {
    for markers in [false, true] {
        let (r, lines) = decode(&iwarp_session(markers, false));
        let s = r.unwrap();
        assert_eq!(s.crc_ok, 4, "{lines:#?}");
        assert_eq!(s.crc_bad + s.malformed, 0, "{lines:#?}");
        assert!(
            lines
                .iter()
                .any(|l| l.contains("RDMAP RDMA Write STag=0x103")),
            "{lines:#?}"
        );
    }
}

#[test]
fn corrupted_fpdu_is_a_bad_crc() {
    let (r, _) = decode(&iwarp_session(true, true));
    let s = r.unwrap();
    assert_eq!(s.crc_bad, 1);
    assert!(s.has_bad_checksum());
}

#[test]
fn pcapng_captures_decode_like_pcap() {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    use pcap_file::pcapng::PcapNgWriter;
    let frames = common_frames();
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 0xffff))
        .unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::from_micros(i as u64),
            original_len: f.len() as u32,
            data: std::borrow::Cow::Borrowed(&f[..]),
            options: vec![],
        })
        .unwrap();
    }
    let ng = w.into_inner();
    let (r_ng, lines_ng) = decode(&ng);
    let (r_pcap, lines_pcap) = decode(&pcap(&frames));
    assert_eq!(r_ng.unwrap(), r_pcap.unwrap());
    assert_eq!(lines_ng.len(), lines_pcap.len());
    assert!(decode(&ng[..ng.len() - 3]).0.is_err());
}

fn common_frames() -> Vec<Vec<u8>> {
    let bytes = std::fs::read(corpus().join("rdma_cm.pcap")).unwrap();
    let mut r = PcapReader::new(&bytes[..]).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        v.push(p.unwrap().data.into_owned());
    }
    v
}

#[test]
fn decode_args_take_a_file_and_verbose_flag() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: DecodeArgs,
    }
    let cli = Cli::try_parse_from(["decode", "-v", "x.pcap"]).unwrap();
    assert!(cli.args.verbose);
    assert_eq!(cli.args.file, PathBuf::from("x.pcap"));
}

#[test]
fn run_exits_2_for_a_missing_or_foreign_file_and_0_for_a_good_one() {
    let missing = DecodeArgs {
        file: PathBuf::from("/nonexistent/capture.pcap"),
        verbose: false,
    };
    assert_eq!(run(&missing), ExitCode::from(2));
    let good = DecodeArgs {
        file: corpus().join("pingpong_ud.pcap"),
        verbose: false,
    };
    assert_eq!(run(&good), ExitCode::SUCCESS);
}

#[test]
fn linux_cooked_and_raw_ip_captures_decode_like_ethernet() {
    let frames = common_frames();
    let eth = decode(&pcap(&frames)).0.unwrap();
    let with_link = |link: DataLink, f: &dyn Fn(&[u8]) -> Vec<u8>| {
        let header = pcap_file::pcap::PcapHeader {
            datalink: link,
            ..Default::default()
        };
        let mut w = PcapWriter::with_header(Vec::new(), header).unwrap();
        for (i, fr) in frames.iter().enumerate() {
            let d = f(fr);
            w.write_packet(&PcapPacket::new(
                Duration::from_millis(i as u64),
                d.len() as u32,
                &d,
            ))
            .unwrap();
        }
        decode(&w.into_writer()).0.unwrap()
    };
    let sll = with_link(DataLink::LINUX_SLL, &|fr| {
        let mut v = vec![0u8; 14];
        v.extend_from_slice(&fr[12..14]);
        v.extend_from_slice(&fr[14..]);
        v
    });
    let raw = with_link(DataLink::RAW, &|fr| fr[14..].to_vec());
    assert_eq!(sll, eth);
    assert_eq!(raw, eth);
}

#[test]
fn mangled_captures_never_panic_the_decoder() {
    let mut originals = vec![
        std::fs::read(corpus().join("rping.pcap")).unwrap(),
        iwarp_session(true, false),
        iwarp_session(false, false),
    ];
    originals[0].truncate(20_000);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for original in &originals {
        for _ in 0..150 {
            let mut b = original.clone();
            for _ in 0..1 + next() % 8 {
                // Leave the 24-byte file header alone half of the time.
                let lo = if next().is_multiple_of(2) { 24 } else { 0 };
                let i = lo + (next() as usize) % (b.len() - lo);
                b[i] = next() as u8;
            }
            if next().is_multiple_of(4) {
                let n = (next() as usize) % b.len();
                b.truncate(n);
            }
            let _ = decode_bytes(&b, true, &mut |_| {});
        }
    }
}

#[test]
fn arp_frames_are_shown_as_not_ip_and_not_counted_malformed() {
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]);
    let (r, lines) = decode(&pcap(&[arp]));
    let s = r.unwrap();
    assert_eq!(s.malformed, 0);
    assert!(
        lines[0].ends_with("EtherType 0x0806, 42 bytes (not IP)"),
        "{lines:?}"
    );
}
