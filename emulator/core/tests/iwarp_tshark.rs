//! Wireshark reads what the iWARP engine sends: a whole session (TCP handshake, MPA
//! Request/Reply, RTR, Send / Send with SE / Send with Invalidate / Write / Read, a
//! Terminate) captured as TCP segments, for CRC and markers on and off, revision 1 and
//! 2. tshark must find no malformed item or error-level expert item, recognise the MPA
//! Request and Reply, and report "Good CRC32" on every FPDU when CRCs are on. Skips,
//! saying so, when tshark is not installed.

mod iwarp_common;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use emu_core::iwarp::{IwarpConfig, RtrOffer};
use emu_core::{Lkey, RdmaInfo, Rkey, SendFlags, SendWr, Sge, WrId, WrOpcode};
use iwarp_common::*;
use pcap_file::pcap::{PcapPacket, PcapWriter};
use wire::frame::{self, FrameAddrs, TcpInfo};
use wire::iwarp::{Deframed, Deframer, FpduConfig};

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
        println!("SKIPPED: tshark is not installed (apt-get install tshark)");
    }
    ok
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

/// Lengths of the units (MPA frame, then FPDUs) of one direction's stream.
fn unit_lengths(stream: &[u8], request: bool, cfg: FpduConfig) -> Vec<usize> {
    let mut d = if request {
        Deframer::expecting_request()
    } else {
        Deframer::expecting_reply()
    };
    d.read(stream);
    let mut out = Vec::new();
    loop {
        match d.pop() {
            Some(Ok(Deframed::Mpa(m))) => out.push(m.buffer_len()),
            Some(Ok(Deframed::Fpdu { info, .. })) => out.push(info.wire_len),
            Some(Err(e)) => panic!("own stream does not deframe: {e:?}"),
            None => {
                if d.is_negotiating() {
                    d.set_config(cfg);
                    continue;
                }
                return out;
            }
        }
    }
}

/// The session's deliveries as TCP segments (after a handshake), one MPA frame or FPDU
/// per segment as RFC 5044 §4.1 asks senders to align them, in a pcap.
fn capture(name: &str, p: &Pair, cfg_ab: FpduConfig, cfg_ba: FpduConfig) -> PathBuf {
    let mut units_a = unit_lengths(&p.log_a, true, cfg_ab).into_iter();
    let mut units_b = unit_lengths(&p.log_b, false, cfg_ba).into_iter();
    let trace = &p.trace;
    let a = FrameAddrs {
        eth_src: [0x02, 0, 0, 0, 0, 1],
        eth_dst: [0x02, 0, 0, 0, 0, 2],
        src: IpAddr::V4(Ipv4Addr::new(192, 168, 7, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(192, 168, 7, 2)),
    };
    let b = FrameAddrs {
        eth_src: a.eth_dst,
        eth_dst: a.eth_src,
        src: a.dst,
        dst: a.src,
    };
    let (ap, bp) = (46000u16, 7174u16);
    let (mut aseq, mut bseq) = (0x1000_0000u32, 0x7000_0000u32);
    let info = |sp, dp, seq, ack| TcpInfo {
        src_port: sp,
        dst_port: dp,
        seq,
        ack_number: ack,
        ack: true,
        psh: true,
        window: 65535,
        ..TcpInfo::default()
    };
    let mut frames = vec![
        frame::build_tcp(
            &a,
            &TcpInfo {
                syn: true,
                ack: false,
                psh: false,
                ..info(ap, bp, aseq, 0)
            },
            &[],
        ),
        frame::build_tcp(
            &b,
            &TcpInfo {
                syn: true,
                psh: false,
                ..info(bp, ap, bseq, aseq + 1)
            },
            &[],
        ),
    ];
    aseq += 1;
    bseq += 1;
    frames.push(frame::build_tcp(
        &a,
        &TcpInfo {
            psh: false,
            ..info(ap, bp, aseq, bseq)
        },
        &[],
    ));
    for (from_a, bytes) in trace {
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let n = if *from_a {
                units_a.next()
            } else {
                units_b.next()
            };
            let (seg, r) = rest.split_at(n.expect("a unit per byte").min(rest.len()));
            rest = r;
            if *from_a {
                frames.push(frame::build_tcp(&a, &info(ap, bp, aseq, bseq), seg));
                aseq = aseq.wrapping_add(seg.len() as u32);
            } else {
                frames.push(frame::build_tcp(&b, &info(bp, ap, bseq, aseq), seg));
                bseq = bseq.wrapping_add(seg.len() as u32);
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("iwarp-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let p = PcapPacket::new(Duration::from_micros(i as u64 * 10), f.len() as u32, f);
        w.write_packet(&p).unwrap();
    }
    path
}

/// FPDUs in one direction's stream (after its MPA frame).
fn count_fpdus(stream: &[u8], request: bool, cfg: FpduConfig) -> usize {
    let mut d = if request {
        Deframer::expecting_request()
    } else {
        Deframer::expecting_reply()
    };
    d.read(stream);
    let mut n = 0;
    loop {
        match d.pop() {
            Some(Ok(Deframed::Mpa(_))) => {}
            Some(Ok(Deframed::Fpdu { .. })) => n += 1,
            Some(Err(e)) => panic!("own stream does not deframe: {e:?}"),
            None => {
                if d.is_negotiating() {
                    d.set_config(cfg);
                    continue;
                }
                return n;
            }
        }
    }
}

fn wr(id: u64, op: WrOpcode, addr: u64, len: u32) -> SendWr {
    let mut w = SendWr::new(WrId(id), op);
    w.sg_list = vec![Sge {
        addr,
        length: len,
        lkey: Lkey(0x100),
    }];
    w
}

fn session(cfg_a: IwarpConfig, cfg_b: IwarpConfig) -> Pair {
    let ext = cfg_a.extensions && cfg_b.extensions;
    let mut p = Pair::new(cfg_a, cfg_b, 1 << 20, 77);
    p.max_chunk = 0;
    p.run();
    assert!(p.established());
    if ext {
        p.b.post_recv(8, BASE, 4096);
        p.b.post_recv(9, BASE, 4096);
        let mut at = wr(7, WrOpcode::AtomicFetchAndAdd, BASE + 0x3_0000, 8);
        at.atomic = emu_core::AtomicInfo {
            remote_addr: BASE + 0x3_0000,
            compare_add: 1,
            swap: 0,
            rkey: Rkey(0x100),
        };
        p.a.conn.post_send(at).unwrap();
        let mut wi = wr(8, WrOpcode::RdmaWriteWithImm, BASE, 100);
        wi.rdma = RdmaInfo {
            remote_addr: BASE + 0x1_0000,
            rkey: Rkey(0x100),
        };
        wi.imm_data = 0x0102_0304;
        p.a.conn.post_send(wi).unwrap();
        let mut si = wr(9, WrOpcode::SendWithImm, BASE, 10);
        si.imm_data = 0x0506_0708;
        p.a.conn.post_send(si).unwrap();
        p.run();
        assert_eq!(p.b.wcs.len(), 2, "{:?}", p.b.events);
    }
    p.b.post_recv(1, BASE, 4096);
    p.b.post_recv(2, BASE, 4096);
    p.b.post_recv(3, BASE, 4096);
    p.a.conn
        .post_send(wr(1, WrOpcode::Send, BASE, 3000))
        .unwrap();
    let mut se = wr(2, WrOpcode::Send, BASE, 5);
    se.send_flags |= SendFlags::SOLICITED;
    p.a.conn.post_send(se).unwrap();
    let mut inv = wr(3, WrOpcode::SendWithInv, BASE, 7);
    inv.invalidate_rkey = Rkey(0x200);
    p.b.keys.register(
        0x200,
        PD,
        SPACE,
        BASE + 0x8000,
        64,
        emu_core::AccessFlags::LOCAL_WRITE | emu_core::AccessFlags::REMOTE_WRITE,
    );
    p.a.conn.post_send(inv).unwrap();
    let mut w = wr(4, WrOpcode::RdmaWrite, BASE, 5000);
    w.rdma = RdmaInfo {
        remote_addr: BASE + 0x1_0000,
        rkey: Rkey(0x100),
    };
    p.a.conn.post_send(w).unwrap();
    let mut r = wr(5, WrOpcode::RdmaRead, BASE + 0x2_0000, 4000);
    r.rdma = RdmaInfo {
        remote_addr: BASE,
        rkey: Rkey(0x100),
    };
    p.a.conn.post_send(r).unwrap();
    p.run();
    // A Write to a bad STag ends the session with a Terminate.
    let mut bad = wr(6, WrOpcode::RdmaWrite, BASE, 16);
    bad.rdma = RdmaInfo {
        remote_addr: BASE,
        rkey: Rkey(0x999),
    };
    p.a.conn.post_send(bad).unwrap();
    p.run();
    assert!(p.b.terminated().is_some());
    p
}

#[test]
fn tshark_dissects_the_engines_session_cleanly() {
    if !tshark_available() {
        return;
    }
    let combos = [
        (2u8, true, false, RtrOffer::ALL),
        (2, true, true, RtrOffer::ALL),
        (2, false, false, RtrOffer::ALL),
        (
            2,
            true,
            false,
            RtrOffer {
                send: false,
                write: false,
                read: true,
            },
        ),
        (
            2,
            true,
            true,
            RtrOffer {
                send: true,
                write: false,
                read: false,
            },
        ),
        (1, true, false, RtrOffer::ALL),
        (1, true, true, RtrOffer::ALL),
        (2, true, false, RtrOffer::ALL),
    ];
    for (i, (rev, crc, markers, rtr)) in combos.into_iter().enumerate() {
        let cfg = IwarpConfig {
            revision: rev,
            crc,
            markers,
            rtr,
            // The last session also carries the rdma-emu extensions.
            extensions: i == combos.len() - 1,
            ..IwarpConfig::default()
        };
        let p = session(cfg.clone(), cfg);
        let n = p.a.conn.negotiated().unwrap().clone();
        let cfg_ab = FpduConfig {
            crc: n.crc,
            markers: n.markers_tx,
        };
        let cfg_ba = FpduConfig {
            crc: n.crc,
            markers: n.markers_rx,
        };
        let fpdus = count_fpdus(&p.log_a, true, cfg_ab) + count_fpdus(&p.log_b, false, cfg_ba);
        let ctx = format!("rev {rev} crc {crc} markers {markers} rtr {rtr:?}");
        let path = capture(&format!("session-{i}.pcap"), &p, cfg_ab, cfg_ba);
        let bad = tshark(
            &path,
            &["-Y", "_ws.malformed || _ws.expert.severity >= \"error\""],
        );
        assert!(
            bad.trim().is_empty(),
            "{ctx}: malformed/error frames:\n{bad}"
        );
        let req = tshark(&path, &["-Y", "iwarp_mpa.req"]);
        let rep = tshark(&path, &["-Y", "iwarp_mpa.rep"]);
        assert_eq!(req.lines().count(), 1, "{ctx}: MPA Request");
        assert_eq!(rep.lines().count(), 1, "{ctx}: MPA Reply");
        let verbose = tshark(&path, &["-V"]);
        assert!(!verbose.contains("Bad CRC32"), "{ctx}");
        if crc {
            let good = verbose.matches("Good CRC32").count();
            assert_eq!(good, fpdus, "{ctx}: Good CRC32 on every FPDU");
        }
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
        let ops: Vec<&str> = ops
            .lines()
            .flat_map(|l| l.split(','))
            .map(str::trim)
            .collect();
        assert_eq!(ops.len(), fpdus, "{ctx}: every FPDU is DDP/RDMAP: {ops:?}");
        assert_eq!(
            ops.last(),
            Some(&"0x07"),
            "{ctx}: ends with a Terminate: {ops:?}"
        );
        let _ = std::fs::remove_file(&path);
        // The folder goes with the last capture in it (other tests may still write theirs).
        if let Some(dir) = path.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}
