//! Every frame of the real rxe captures parses as a whole frame, every RoCE ICRC
//! verifies, and every CM MAD on QP1 parses and re-emits byte for byte.

mod common;

use std::collections::BTreeSet;

use wire::cm::{CmMad, CmMessage, CmaHeader, PortSpace, ServiceId};
use wire::frame::{self, Transport};
use wire::roce::{Body, Packet, PacketRepr, Qpn};

#[test]
fn every_corpus_frame_parses_and_every_icrc_verifies() {
    let files = common::corpus_files();
    assert!(files.len() >= 20, "corpus incomplete: {files:?}");
    let mut roce = 0;
    for f in &files {
        for (i, bytes) in common::frames(f).iter().enumerate() {
            let fr = frame::parse(bytes).unwrap_or_else(|e| panic!("{}#{i}: {e}", f.display()));
            if let Some(ib) = fr.roce() {
                roce += 1;
                assert_eq!(fr.verify_icrc(), Some(true), "{}#{i}", f.display());
                let p =
                    Packet::new_checked(ib).unwrap_or_else(|e| panic!("{}#{i}: {e}", f.display()));
                PacketRepr::parse(&p).unwrap_or_else(|e| panic!("{}#{i}: {e}", f.display()));
            } else {
                assert!(
                    matches!(fr.transport, Transport::Tcp { .. }),
                    "{}#{i}: unexpected non-RoCE, non-TCP frame",
                    f.display()
                );
            }
        }
    }
    assert!(roce > 1000, "only {roce} RoCE frames");
}

fn cm_mads(name: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for bytes in common::frames(&common::corpus_dir().join(name)) {
        let fr = frame::parse(&bytes).unwrap();
        let Some(ib) = fr.roce() else { continue };
        let p = Packet::new_checked(ib).unwrap();
        let repr = PacketRepr::parse(&p).unwrap();
        if repr.header.dest_qp == Qpn::GSI {
            assert!(matches!(repr.body, Body::Ud { .. }));
            out.push(repr.payload.to_vec());
        }
    }
    out
}

#[test]
fn every_cm_mad_in_the_rdma_cm_captures_parses_and_re_emits_identically() {
    for name in ["rdma_cm.pcap", "rping.pcap"] {
        let mads = cm_mads(name);
        let mut seen = BTreeSet::new();
        for mad in &mads {
            let m = CmMad::parse(mad).unwrap_or_else(|e| panic!("{name}: {e}"));
            seen.insert(m.message.name());
            let mut again = vec![0u8; m.buffer_len()];
            m.emit(&mut again);
            assert_eq!(&again[..], &mad[..256], "{name}: {}", m.message.name());
            if let CmMessage::Req(r) = m.message {
                let (space, port) = ServiceId(r.service_id)
                    .as_rdma_ip()
                    .expect("RDMA CM service ID");
                assert_eq!(space, PortSpace::Tcp);
                let h = CmaHeader::parse(r.private_data).unwrap();
                assert!(h.src.is_ipv4() && h.dst.is_ipv4());
                assert_ne!(port, 0);
                assert_eq!(r.primary_path.local_lid, 0xffff);
            }
        }
        for want in [
            "ConnectRequest",
            "ConnectReply",
            "ReadyToUse",
            "DisconnectRequest",
            "DisconnectReply",
        ] {
            assert!(seen.contains(want), "{name}: no {want} in {seen:?}");
        }
    }
}
