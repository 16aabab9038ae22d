//! Every RoCE v2 frame in the real rxe captures parses, round-trips and verifies.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::roce::icrc::{self, IcrcCheck};
use crate::roce::{Packet, PacketRepr, ROCE_V2_UDP_PORT};

/// One RoCE v2 datagram found in a capture.
pub(crate) struct Frame {
    pub ip: [u8; 20],
    pub udp: [u8; 8],
    /// BTH through ICRC (Ethernet padding removed using the IP/UDP lengths).
    pub ib: Vec<u8>,
}

/// The rxe corpus directory (`tests/corpora/rxe` in the repository).
pub(crate) fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpora/rxe")
}

fn corpus_files() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for dir in [corpus_dir(), corpus_dir().join("nccl")] {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "pcap") {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

/// The RoCE v2 frames of an Ethernet/IPv4 capture.
pub(crate) fn roce_frames(path: &Path) -> Vec<Frame> {
    let file = std::fs::File::open(path).expect("open capture");
    let mut r = pcap_file::pcap::PcapReader::new(file).expect("pcap header");
    let mut out = Vec::new();
    while let Some(pkt) = r.next_packet() {
        let pkt = pkt.expect("pcap record");
        let d = &pkt.data[..];
        if d.len() < 14 + 20 + 8 || d[12..14] != [0x08, 0x00] {
            continue;
        }
        let ip = &d[14..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        if ihl != 20 || ip[9] != 17 {
            continue;
        }
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let udp = &ip[20..];
        if u16::from_be_bytes([udp[2], udp[3]]) != ROCE_V2_UDP_PORT {
            continue;
        }
        let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
        assert_eq!(udp_len + 20, total, "IP and UDP lengths agree");
        out.push(Frame {
            ip: ip[..20].try_into().unwrap(),
            udp: udp[..8].try_into().unwrap(),
            ib: udp[8..udp_len].to_vec(),
        });
    }
    out
}

#[test]
fn every_corpus_icrc_verifies_with_known_and_unknown_ip_id() {
    let files = corpus_files();
    assert!(files.len() >= 10, "corpus present: {files:?}");
    let mut total = 0;
    for f in &files {
        for (i, fr) in roce_frames(f).iter().enumerate() {
            total += 1;
            assert!(
                icrc::verify_ipv4(&fr.ip, &fr.udp, &fr.ib),
                "{} frame {i}: ICRC",
                f.display()
            );
            let id = u16::from_be_bytes([fr.ip[4], fr.ip[5]]);
            let src = Ipv4Addr::from(<[u8; 4]>::try_from(&fr.ip[12..16]).unwrap());
            let dst = Ipv4Addr::from(<[u8; 4]>::try_from(&fr.ip[16..20]).unwrap());
            let sport = u16::from_be_bytes([fr.udp[0], fr.udp[1]]);
            let dport = u16::from_be_bytes([fr.udp[2], fr.udp[3]]);
            let want = if id == 0 {
                IcrcCheck::Valid
            } else {
                IcrcCheck::ValidWithSolvedId(id)
            };
            assert_eq!(
                icrc::verify_udp4_any_id(src, dst, sport, dport, &fr.ib),
                want,
                "{} frame {i}",
                f.display()
            );
            // One flipped payload bit must not verify with the real ID.
            let mut bad = fr.ib.clone();
            let n = bad.len();
            bad[n / 2] ^= 0x10;
            assert!(!icrc::verify_ipv4(&fr.ip, &fr.udp, &bad));
        }
    }
    assert!(total > 1000, "found {total} RoCE frames");
}

#[test]
fn every_corpus_packet_parses_and_reemits_byte_for_byte() {
    for f in corpus_files() {
        for (i, fr) in roce_frames(&f).iter().enumerate() {
            let p = Packet::new_checked(&fr.ib[..])
                .unwrap_or_else(|e| panic!("{} frame {i}: {e}", f.display()));
            let repr =
                PacketRepr::parse(&p).unwrap_or_else(|e| panic!("{} frame {i}: {e}", f.display()));
            assert_eq!(repr.buffer_len(), fr.ib.len());
            let mut buf = vec![0u8; repr.buffer_len()];
            let mut out = Packet::new_unchecked(&mut buf[..]);
            repr.emit(&mut out);
            let c = icrc::compute_ipv4(&fr.ip, &fr.udp, out.icrc_covered());
            out.set_icrc(c);
            assert_eq!(buf, fr.ib, "{} frame {i}", f.display());
        }
    }
}

#[test]
fn corpus_covers_the_main_opcodes() {
    use std::collections::BTreeSet;
    let mut seen = BTreeSet::new();
    for f in corpus_files() {
        for fr in roce_frames(&f) {
            seen.insert(fr.ib[0]);
        }
    }
    // RC SEND/WRITE/READ/atomic/ACK, UC SEND, UD SEND.
    for op in [
        0x04u8, 0x06, 0x07, 0x08, 0x0c, 0x0d, 0x10, 0x11, 0x12, 0x14, 0x24, 0x64,
    ] {
        assert!(seen.contains(&op), "opcode {op:#04x} in corpus: {seen:x?}");
    }
}
