//! The CM against real rxe traffic (`tests/corpora/rxe/rdma_cm.pcap`: `ib_send_bw -R`,
//! `rping.pcap`): every CM MAD parses and re-emits to the same bytes; the agent answers
//! the captured REQ with a REP, RTU, DREP laid out exactly like the captured ones, and
//! builds the captured REQ itself from the same parameters. Fields that differ are only
//! identities: communication IDs, CA GUIDs, the low half of transaction IDs (the comm ID
//! again), GSI PSNs and the ICRC (rxe sends a non-zero IPv4 ID).

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Instant;

use emu_core::cm::{gsi, CmAgent, CmConfig, CmEvent, ConnParams, PortSpace, Route, ServiceId};
use emu_core::{ClientId, Gid, Mtu, Psn, Qpn};
use wire::cm::messages::attr;
use wire::cm::{CmMad, CmMessage, MAD_LEN};
use wire::roce::icrc;

struct Frame {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    ib: Vec<u8>,
}

impl Frame {
    fn mad(&self) -> &[u8] {
        gsi::decapsulate(&self.ib).expect("GSI packet")
    }
    fn attr(&self) -> u16 {
        let m = self.mad();
        u16::from_be_bytes([m[16], m[17]])
    }
}

fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/corpora/rxe")
        .join(name)
}

/// The RoCE v2 frames to QP1 of a capture.
fn gsi_frames(name: &str) -> Vec<Frame> {
    let mut r =
        pcap_file::pcap::PcapReader::new(std::fs::File::open(corpus(name)).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let d = p.unwrap().data.into_owned();
        if d.len() < 42 || d[12..14] != [8, 0] || d[23] != 17 {
            continue;
        }
        let ip = &d[14..];
        let udp = &ip[20..];
        if u16::from_be_bytes([udp[2], udp[3]]) != 4791 {
            continue;
        }
        let ulen = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
        let ib = udp[8..ulen].to_vec();
        if gsi::decapsulate(&ib).is_none() {
            continue;
        }
        let a = |o: usize| IpAddr::V4(Ipv4Addr::new(ip[o], ip[o + 1], ip[o + 2], ip[o + 3]));
        out.push(Frame {
            src: a(12),
            dst: a(16),
            sport: u16::from_be_bytes([udp[0], udp[1]]),
            ib,
        });
    }
    out
}

/// Offsets (in the MAD) where two MADs differ.
fn diff(a: &[u8], b: &[u8]) -> Vec<usize> {
    (0..MAD_LEN).filter(|&i| a[i] != b[i]).collect()
}

fn within(d: &[usize], ranges: &[std::ops::Range<usize>]) -> bool {
    d.iter().all(|i| ranges.iter().any(|r| r.contains(i)))
}

const TID_LOW: std::ops::Range<usize> = 12..16;
const LOCAL_COMM_ID: std::ops::Range<usize> = 24..28;
const REP_CA_GUID: std::ops::Range<usize> = 24 + 28..24 + 36;

fn rewrite_remote_comm_id(mad: &[u8], id: u32) -> Vec<u8> {
    let mut m = mad.to_vec();
    m[28..32].copy_from_slice(&id.to_be_bytes());
    m
}

#[test]
fn every_cm_mad_in_the_captures_parses_and_reemits_identically() {
    for name in ["rdma_cm.pcap", "rping.pcap"] {
        let frames = gsi_frames(name);
        assert!(frames.len() >= 5, "{name}");
        let mut kinds = Vec::new();
        for f in &frames {
            assert_eq!(f.sport, gsi::GSI_UDP_SRC_PORT, "{name}: rxe's QP1 port");
            let m = CmMad::parse(f.mad()).unwrap();
            assert_eq!((m.header.class_version, m.header.method), (2, 3));
            assert!(!matches!(m.message, CmMessage::Other { .. }));
            let mut b = [0u8; MAD_LEN];
            m.emit(&mut b);
            assert_eq!(&b[..], f.mad(), "{name}: {}", m.message.name());
            kinds.push(m.header.attribute_id);
        }
        for a in [attr::REQ, attr::REP, attr::RTU, attr::DREQ, attr::DREP] {
            assert!(kinds.contains(&a), "{name} has {a:#x}");
        }
    }
}

fn first(frames: &[Frame], a: u16) -> &Frame {
    frames.iter().find(|f| f.attr() == a).unwrap()
}

#[test]
fn passive_agent_answers_the_captured_req_like_rxe() {
    let mut dreps_checked = 0;
    for name in ["rdma_cm.pcap", "rping.pcap"] {
        let frames = gsi_frames(name);
        let req = first(&frames, attr::REQ);
        let rep = first(&frames, attr::REP);
        let rtu = first(&frames, attr::RTU);
        let CmMessage::Req(r) = CmMad::parse(req.mad()).unwrap().message else {
            unreachable!()
        };
        let CmMessage::Rep(cap_rep) = CmMad::parse(rep.mad()).unwrap().message else {
            unreachable!()
        };
        let now = Instant::now();
        let mut ag = CmAgent::new(CmConfig::new(
            0x1122_3344_5566_7788,
            vec![Gid::from_ip(req.dst)],
            Mtu::Mtu1024,
            5,
        ));
        ag.listen(ServiceId(r.service_id), ClientId(1)).unwrap();
        ag.handle_mad(now, req.src, req.dst, req.mad());
        let (id, _, ev) = ag.poll_event().expect("connect request");
        let CmEvent::ConnectRequest {
            peer,
            cma,
            private_data,
            ..
        } = ev
        else {
            panic!("{ev:?}")
        };
        assert_eq!(peer.qpn, r.local_qpn);
        assert_eq!(peer.starting_psn, r.starting_psn);
        assert_eq!(peer.path_mtu, Mtu::Mtu1024);
        let cma = cma.expect("CMA header");
        assert_eq!((cma.src, cma.dst), (req.src, req.dst));
        assert_eq!(private_data.len(), 56);
        let mut p = ConnParams::rc(cap_rep.local_qpn);
        p.starting_psn = Some(cap_rep.starting_psn);
        p.responder_resources = cap_rep.responder_resources;
        p.initiator_depth = cap_rep.initiator_depth;
        ag.accept(now, id, p).unwrap();
        let t = ag.poll_transmit().expect("REP");
        assert_eq!((t.src, t.dst), (req.dst, req.src));
        let d = diff(&t.mad, rep.mad());
        assert!(
            within(&d, &[LOCAL_COMM_ID, REP_CA_GUID]),
            "{name}: REP differs at {d:?}"
        );
        // The GSI packet around it: only the PSN and the ICRC differ.
        let mut pkt = [0u8; gsi::GSI_PACKET_LEN];
        gsi::encapsulate(t.src, t.dst, Psn::new(0), &t.mad, &mut pkt);
        let pd: Vec<usize> = (0..40).filter(|&i| pkt[i] != rep.ib[i]).collect();
        let v4 = |a: IpAddr| match a {
            IpAddr::V4(v) => v,
            IpAddr::V6(_) => unreachable!(),
        };
        // Ours carries the ICRC of an IPv4 ID 0 datagram; rxe's that of its own ID.
        assert_eq!(
            icrc::verify_udp4_any_id(v4(t.src), v4(t.dst), gsi::GSI_UDP_SRC_PORT, 4791, &pkt),
            icrc::IcrcCheck::Valid
        );
        assert!(matches!(
            icrc::verify_udp4_any_id(v4(rep.src), v4(rep.dst), rep.sport, 4791, &rep.ib),
            icrc::IcrcCheck::ValidWithSolvedId(_)
        ));
        assert!(
            pd.iter().all(|i| (9..12).contains(i)),
            "{name}: GSI header differs at {pd:?}"
        );
        // The captured RTU, addressed to our comm ID, establishes the connection.
        let ours = u32::from_be_bytes(t.mad[24..28].try_into().unwrap());
        ag.handle_mad(
            now,
            rtu.src,
            rtu.dst,
            &rewrite_remote_comm_id(rtu.mad(), ours),
        );
        assert_eq!(ag.poll_event().map(|e| e.2), Some(CmEvent::Established));
        // A captured DREQ from the active side gets the captured DREP.
        let dreq = frames.iter().find(|f| {
            f.attr() == attr::DREQ && f.src == req.src && f.mad()[24..28] == req.mad()[24..28]
        });
        if let Some(dreq) = dreq {
            let drep = frames
                .iter()
                .find(|f| {
                    f.attr() == attr::DREP
                        && f.src == req.dst
                        && f.mad()[8..16] == dreq.mad()[8..16]
                })
                .unwrap();
            ag.handle_mad(
                now,
                dreq.src,
                dreq.dst,
                &rewrite_remote_comm_id(dreq.mad(), ours),
            );
            assert!(matches!(
                ag.poll_event().map(|e| e.2),
                Some(CmEvent::Disconnected { .. })
            ));
            ag.disconnect(now, id, &[]).unwrap();
            let t = ag.poll_transmit().expect("DREP");
            let d = diff(&t.mad, drep.mad());
            assert!(
                within(&d, &[LOCAL_COMM_ID]),
                "{name}: DREP differs at {d:?}"
            );
            dreps_checked += 1;
        }
    }
    assert!(dreps_checked >= 1);
}

#[test]
fn active_agent_builds_the_captured_req_and_rtu() {
    for name in ["rdma_cm.pcap", "rping.pcap"] {
        let frames = gsi_frames(name);
        let req = first(&frames, attr::REQ);
        let rep = first(&frames, attr::REP);
        let rtu = first(&frames, attr::RTU);
        let CmMessage::Req(r) = CmMad::parse(req.mad()).unwrap().message else {
            unreachable!()
        };
        let cma = wire::cm::CmaHeader::parse(r.private_data).unwrap();
        let now = Instant::now();
        let mut cfg = CmConfig::new(
            r.local_ca_guid,
            vec![Gid::from_ip(req.src)],
            Mtu::Mtu1024,
            9,
        );
        cfg.hi_tid = (u64::from_be_bytes(req.mad()[8..16].try_into().unwrap()) >> 32) as u32;
        let mut ag = CmAgent::new(cfg);
        let (space, port) = ServiceId(r.service_id).as_rdma_ip().unwrap();
        assert_eq!(space, PortSpace::Tcp);
        let route = Route::tcp(req.src, req.dst, cma.src_port, port);
        let mut p = ConnParams::rc(r.local_qpn);
        p.starting_psn = Some(r.starting_psn);
        p.responder_resources = r.responder_resources;
        p.initiator_depth = r.initiator_depth;
        let id = ag.connect(now, ClientId(1), p, route).unwrap();
        let t = ag.poll_transmit().expect("REQ");
        let d = diff(&t.mad, req.mad());
        assert!(
            within(&d, &[TID_LOW, LOCAL_COMM_ID]),
            "{name}: REQ differs at {d:?}"
        );
        // The captured REP, addressed to us, then establish: the RTU matches.
        let ours = u32::from_be_bytes(t.mad[24..28].try_into().unwrap());
        ag.handle_mad(
            now,
            rep.src,
            rep.dst,
            &rewrite_remote_comm_id(rep.mad(), ours),
        );
        let ev = ag.poll_event().unwrap().2;
        assert!(matches!(ev, CmEvent::ConnectResponse { .. }), "{ev:?}");
        ag.establish(now, id).unwrap();
        let t = ag.poll_transmit().expect("RTU");
        let d = diff(&t.mad, rtu.mad());
        assert!(
            within(&d, &[TID_LOW, LOCAL_COMM_ID]),
            "{name}: RTU differs at {d:?}"
        );
        let (rtr, _) = ag.init_qp_attr(id, emu_core::QpState::Rtr).unwrap();
        let CmMessage::Rep(cap_rep) = CmMad::parse(rep.mad()).unwrap().message else {
            unreachable!()
        };
        assert_eq!(rtr.dest_qp_num, cap_rep.local_qpn);
        // The Linux CM's meaning of the starting PSNs (rping.pcap's active side sends its
        // first SEND with the REP's): we receive from the REQ's, we send from the REP's.
        let CmMessage::Req(cap_req) = CmMad::parse(req.mad()).unwrap().message else {
            unreachable!()
        };
        assert_eq!(rtr.rq_psn, cap_req.starting_psn);
        let (rts, _) = ag.init_qp_attr(id, emu_core::QpState::Rts).unwrap();
        assert_eq!(rts.sq_psn, cap_rep.starting_psn);
        assert_eq!(rtr.ah_attr.grh.dgid, Gid::from_ip(req.dst));
        assert_eq!(rtr.ah_attr.grh.flow_label, r.primary_path.flow_label);
        let _ = Qpn(0);
    }
}
