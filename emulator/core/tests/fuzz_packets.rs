//! Arbitrary packets (valid ICRC, random opcodes, headers, PSNs, keys and addresses)
//! injected into devices with established QPs: nothing panics, and no write lands
//! outside a registered range.

use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;
use wire::roce::Opcode;

const OPCODES: &[u8] = &[
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17, 0x20, 0x24, 0x26, 0x2a, 0x64, 0x65, 0x81, 0x15, 0x40,
    0xff, 0x1c, 0x1d, 0x3c, 0x3d,
];

fn random_packet(rng: &mut Rng, qpn: Qpn, psn: u32, rkey: Rkey, base: u64, len: u64) -> Vec<u8> {
    let op = OPCODES[rng.below(OPCODES.len() as u64) as usize];
    let hlen = Opcode(op).layout().map_or(12, |l| l.header_len());
    let payload = if rng.chance(0.5) {
        rng.below(300) as usize
    } else {
        0
    };
    let n = (hlen + payload + 3) & !3;
    let mut b: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
    b[0] = op;
    b[1] &= 0xf0; // TVer 0
    if rng.chance(0.8) {
        b[5..8].copy_from_slice(&qpn.0.to_be_bytes()[1..]);
    }
    let p = psn.wrapping_add(rng.below(6) as u32).wrapping_sub(2) & 0xff_ffff;
    b[9..12].copy_from_slice(&p.to_be_bytes()[1..]);
    // RETH or AtomicETH right after the BTH (RC/UC), or after a FLUSH's FETH: aim near
    // the real MR half the time.
    let at = if op == 0x1c { 16 } else { 12 };
    if hlen >= at + 16 && rng.chance(0.6) {
        let va = base + rng.below(len + 64) - 32;
        b[at..at + 8].copy_from_slice(&va.to_be_bytes());
        b[at + 8..at + 12].copy_from_slice(&rkey.0.to_be_bytes());
        if rng.chance(0.5) {
            // A consistent WRITE Only: the DMA length is the payload's.
            b[at + 12..at + 16].copy_from_slice(&(payload as u32).to_be_bytes());
            b[1] = (b[1] & 0xc0) | ((((4 - payload % 4) % 4) as u8) << 4);
        } else if rng.chance(0.7) {
            b[at + 12..at + 16].copy_from_slice(&(rng.below(len / 2) as u32).to_be_bytes());
        }
    }
    b
}

#[test]
fn arbitrary_packets_into_established_qps_never_panic_nor_write_outside_mrs() {
    let (mut accepted, mut writes) = (0, 0);
    for seed in 0..60u64 {
        let mut rng = Rng::new(seed);
        let qp_type = [QpType::Rc, QpType::Uc, QpType::Ud][(seed % 3) as usize];
        let opts = ConnOpts {
            qp_type,
            mtu: Mtu::Mtu256,
            buf_len: 1 << 16,
            timeout: 3,
            retry_cnt: 1,
            rnr_retry: 1,
            access: ConnOpts::default().access | AccessFlags::FLUSH_GLOBAL,
            ..ConnOpts::default()
        };
        let mut f = Fabric::new(seed, 2, Mtu::Mtu1024, LinkModel::default());
        let (a, b) = connect(&mut f, &opts);
        for i in 0..8 {
            let sge = Sge {
                addr: b.base + i * 512,
                length: 512,
                lkey: b.mr.lkey,
            };
            f.nodes[1]
                .dev
                .post_recv(
                    b.qpn,
                    RecvWr {
                        wr_id: WrId(i),
                        sg_list: vec![sge],
                    },
                )
                .unwrap();
        }
        // Outstanding WRs on B's send side, so responses to B mean something.
        if qp_type == QpType::Rc {
            for i in 0..4 {
                let mut wr = SendWr::new(
                    WrId(i),
                    if i % 2 == 0 {
                        WrOpcode::RdmaRead
                    } else {
                        WrOpcode::Send
                    },
                );
                wr.sg_list = vec![Sge {
                    addr: b.base + 4096 + i * 1024,
                    length: 700,
                    lkey: b.mr.lkey,
                }];
                wr.rdma = RdmaInfo {
                    remote_addr: a.base,
                    rkey: a.mr.rkey,
                };
                let now = f.now;
                let n = &mut f.nodes[1];
                n.dev.post_send(now, b.qpn, wr, &mut n.mem).unwrap();
            }
        }
        let ranges = vec![(AddrSpace(b.client.0), b.base, b.len)];
        let psn = opts.psn;
        for _ in 0..400 {
            // A fatal error moved the QP to error: bring it back so fuzzing goes on.
            if f.nodes[1].dev.query_qp(b.qpn).unwrap().0.qp_state == QpState::Err {
                let now = f.now;
                let reset = QpAttr {
                    qp_state: QpState::Reset,
                    ..QpAttr::default()
                };
                f.nodes[1]
                    .dev
                    .modify_qp(now, b.qpn, &reset, QpAttrMask::STATE)
                    .unwrap();
                let remote = (qp_type != QpType::Ud).then_some((&a, psn));
                bring_up(&mut f, &b, remote, &opts, psn.wrapping_add(1000));
                for i in 0..8 {
                    let sge = Sge {
                        addr: b.base + i * 512,
                        length: 512,
                        lkey: b.mr.lkey,
                    };
                    f.nodes[1]
                        .dev
                        .post_recv(
                            b.qpn,
                            RecvWr {
                                wr_id: WrId(i),
                                sg_list: vec![sge],
                            },
                        )
                        .unwrap();
                }
            }
            // Requests near B's expected PSN, responses near B's send PSN.
            let near = if rng.chance(0.5) {
                psn
            } else {
                psn.wrapping_add(1000)
            };
            let near = near.wrapping_add(rng.below(8) as u32);
            let pkt = random_packet(&mut rng, b.qpn, near, b.mr.rkey, b.base, b.len);
            let now = f.now;
            let node = &mut f.nodes[1];
            inject(node, now, &pkt, &ranges);
            let mut mem = Checked {
                inner: &mut node.mem,
                ranges: ranges.clone(),
            };
            if rng.chance(0.05) {
                f.now += Duration::from_millis(1);
                let now = f.now;
                node.dev.handle_timeout(now, &mut mem);
            }
        }
        accepted += f.nodes[1].dev.counters().rcvd_pkts;
        writes += f.nodes[1].mem.writes;
    }
    // The fuzzer reaches the transport, not just the header checks.
    assert!(
        accepted > 1000 && writes > 10,
        "accepted {accepted} writes {writes}"
    );
}
