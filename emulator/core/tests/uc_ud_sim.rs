//! UC and UD under loss, duplication and reordering lose only whole messages: every
//! completion carries one whole message, exactly as sent, in order.

use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

/// Message `i`: bytes derived from its number, so any mix-up shows.
fn message(i: u64, len: u32) -> Vec<u8> {
    (0..len)
        .map(|k| (i as u32 * 31 + k * 7) as u8 ^ (k >> 8) as u8)
        .collect()
}

fn run_uc(seed: u64) {
    let mut rng = Rng::new(seed);
    let link = LinkModel::lossy(&mut rng);
    let mtu = [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][rng.below(3) as usize];
    let psn = if seed & 3 == 0 {
        0x00ff_fff0
    } else {
        rng.below(1 << 24) as u32
    };
    // Odd seeds: ODP MRs over memory that faults (emu_core::sim::Paging).
    let odp = seed & 1 == 1;
    let opts = ConnOpts {
        qp_type: QpType::Uc,
        mtu,
        psn,
        odp,
        ..ConnOpts::default()
    };
    let mut f = Fabric::new(seed, 2, Mtu::Mtu4096, link);
    if odp {
        f.page_faults(Duration::from_micros(1 + rng.below(150)), rng.unit() * 0.05);
    }
    let (a, b) = connect(&mut f, &opts);
    let n = 4 + rng.below(12);
    let slot = 4 * u64::from(mtu.bytes()) + 64;
    let mut sent = Vec::new();
    for i in 0..n {
        let len = rng.below(3 * u64::from(mtu.bytes()) + 50) as u32;
        let data = message(i, len);
        let src = a.base + i * slot;
        f.nodes[0]
            .mem
            .slice_mut(AddrSpace(a.client.0), src, len as usize)
            .copy_from_slice(&data);
        let sge = Sge {
            addr: b.base + i * slot,
            length: slot as u32,
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
        let mut wr = SendWr::new(
            WrId(i),
            if rng.chance(0.5) {
                WrOpcode::Send
            } else {
                WrOpcode::RdmaWriteWithImm
            },
        );
        wr.imm_data = i as u32;
        wr.sg_list = vec![Sge {
            addr: src,
            length: len,
            lkey: a.mr.lkey,
        }];
        // WRITE_WITH_IMM i lands in B's upper half at slot i.
        wr.rdma = RdmaInfo {
            remote_addr: b.base + (512 << 10) + i * slot,
            rkey: b.mr.rkey,
        };
        let now = f.now;
        let nd = &mut f.nodes[0];
        nd.dev
            .post_send(now, a.qpn, wr.clone(), &mut nd.mem)
            .unwrap();
        sent.push((wr.opcode, data));
    }
    assert!(f.run(Duration::from_secs(10)), "seed {seed}");
    for nd in &f.nodes {
        assert_eq!(nd.dev.armed_timers(), 0, "seed {seed}");
    }
    let mut sends = 0;
    while let Some((_, wc)) = f.nodes[0].dev.poll_completion() {
        assert_eq!(
            (wc.wr_id.0, wc.status),
            (sends, WcStatus::Success),
            "seed {seed}"
        );
        sends += 1;
    }
    assert_eq!(sends, n, "seed {seed}");
    let mut last_msg: Option<u64> = None;
    let mut used_rwqe = 0;
    while let Some((_, wc)) = f.nodes[1].dev.poll_completion() {
        assert_eq!(wc.status, WcStatus::Success, "seed {seed}");
        let i = u64::from(wc.imm_data);
        let i = if wc.opcode == WcOpcode::RecvRdmaWithImm {
            i
        } else {
            u64::MAX
        };
        // Receive WQEs are used in order; SEND data lands in the WQE's buffer.
        let (idx, data) = if wc.opcode == WcOpcode::Recv {
            let got = f.nodes[1]
                .mem
                .slice(
                    AddrSpace(b.client.0),
                    b.base + wc.wr_id.0 * slot,
                    wc.byte_len as usize,
                )
                .to_vec();
            let idx = sent
                .iter()
                .position(|(op, d)| *op == WrOpcode::Send && *d == got);
            (idx.map(|x| x as u64), got)
        } else {
            let got = f.nodes[1]
                .mem
                .slice(
                    AddrSpace(b.client.0),
                    b.base + (512 << 10) + i * slot,
                    wc.byte_len as usize,
                )
                .to_vec();
            (Some(i), got)
        };
        let idx = idx.unwrap_or_else(|| panic!("seed {seed}: a received message is no sent one"));
        assert_eq!(
            sent[idx as usize].1, data,
            "seed {seed}: message {idx} partial or corrupt"
        );
        assert!(
            last_msg.is_none_or(|l| l < idx),
            "seed {seed}: message {idx} out of order or twice"
        );
        last_msg = Some(idx);
        assert_eq!(wc.wr_id.0, used_rwqe, "seed {seed}");
        used_rwqe += 1;
    }
}

fn run_ud(seed: u64) {
    let mut rng = Rng::new(seed);
    let link = LinkModel::lossy(&mut rng);
    let mtu = [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][rng.below(3) as usize];
    let odp = seed & 1 == 1;
    let opts = ConnOpts {
        qp_type: QpType::Ud,
        odp,
        ..ConnOpts::default()
    };
    let mut f = Fabric::new(seed, 2, mtu, link);
    if odp {
        f.page_faults(Duration::from_micros(1 + rng.below(150)), rng.unit() * 0.05);
    }
    let (a, b) = connect(&mut f, &opts);
    let dgid = Gid::from_ip(f.nodes[1].ip);
    let ah_attr = AhAttr {
        grh: GlobalRoute {
            dgid,
            ..Default::default()
        },
        is_global: true,
        port_num: 1,
        ..Default::default()
    };
    let ah = f.nodes[0].dev.create_ah(a.pd, ah_attr).unwrap();
    let n = 4 + rng.below(12);
    let slot = u64::from(mtu.bytes()) + 64;
    let mut sent = Vec::new();
    for i in 0..n {
        let len = rng.below(u64::from(mtu.bytes()) + 1) as u32;
        let data = message(i, len);
        let src = a.base + i * slot;
        f.nodes[0]
            .mem
            .slice_mut(AddrSpace(a.client.0), src, len as usize)
            .copy_from_slice(&data);
        sent.push(data);
    }
    for i in 0..2 * n {
        let sge = Sge {
            addr: b.base + i * slot,
            length: slot as u32,
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
    for (i, d) in sent.iter().enumerate() {
        let mut wr = SendWr::new(WrId(i as u64), WrOpcode::Send);
        wr.sg_list = vec![Sge {
            addr: a.base + i as u64 * slot,
            length: d.len() as u32,
            lkey: a.mr.lkey,
        }];
        // Half use the controlled Q_Key (high bit: the QP's own Q_Key is sent).
        let qkey = if i % 2 == 0 {
            Qkey(0x1111_1111)
        } else {
            Qkey(0x8000_0000)
        };
        wr.ud = UdInfo {
            ah,
            remote_qpn: b.qpn,
            remote_qkey: qkey,
        };
        let now = f.now;
        let nd = &mut f.nodes[0];
        nd.dev.post_send(now, a.qpn, wr, &mut nd.mem).unwrap();
    }
    assert!(f.run(Duration::from_secs(10)), "seed {seed}");
    let mut c = 0;
    while let Some((_, wc)) = f.nodes[0].dev.poll_completion() {
        assert_eq!(wc.status, WcStatus::Success);
        c += 1;
    }
    assert_eq!(c, n);
    while let Some((_, wc)) = f.nodes[1].dev.poll_completion() {
        assert_eq!(wc.status, WcStatus::Success, "seed {seed}");
        assert!(wc.wc_flags.contains(WcFlags::GRH));
        // ConnectX's packet type in `sl`: RoCE v2 (UDP, bit 3) over IPv4 (2).
        assert_eq!(wc.sl, 0x8 | 0x2, "seed {seed}");
        assert_eq!(wc.src_qp, a.qpn);
        let buf = f.nodes[1].mem.slice(
            AddrSpace(b.client.0),
            b.base + wc.wr_id.0 * slot,
            wc.byte_len as usize,
        );
        // rxe's layout: 20 zero bytes, then the IPv4 header (10.0.0.1 -> 10.0.0.2).
        assert_eq!(&buf[..20], &[0u8; 20]);
        assert_eq!(buf[20], 0x45);
        assert_eq!(&buf[32..36], &[10, 0, 0, 1]);
        assert_eq!(&buf[36..40], &[10, 0, 0, 2]);
        let payload = &buf[40..];
        assert!(
            sent.iter().any(|s| s == payload),
            "seed {seed}: UD payload partial or corrupt"
        );
    }
}

#[test]
fn uc_loses_only_whole_messages() {
    for seed in seed_range() {
        run_uc(seed);
    }
}

#[test]
fn ud_delivers_whole_datagrams_with_the_grh() {
    for seed in seed_range() {
        run_ud(seed);
    }
}

#[test]
fn ud_send_from_an_emptied_gid_slot_completes_in_error_and_sends_nothing() {
    // The daemon empties a GID slot when its address leaves the interface (stable GID
    // indices): an AH created on that index must not send from it, nor stall the queue.
    let opts = ConnOpts {
        qp_type: QpType::Ud,
        ..ConnOpts::default()
    };
    let mut f = Fabric::new(7, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &opts);
    let ah_attr = AhAttr {
        grh: GlobalRoute {
            dgid: Gid::from_ip(f.nodes[1].ip),
            sgid_index: 0,
            ..Default::default()
        },
        is_global: true,
        port_num: 1,
        ..Default::default()
    };
    let ah = f.nodes[0].dev.create_ah(a.pd, ah_attr).unwrap();
    let sge = Sge {
        addr: b.base,
        length: 4096,
        lkey: b.mr.lkey,
    };
    f.nodes[1]
        .dev
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: WrId(9),
                sg_list: vec![sge],
            },
        )
        .unwrap();
    f.nodes[0].dev.set_gids(vec![Gid::default()]);
    assert_eq!(
        f.nodes[0].dev.create_ah(a.pd, ah_attr),
        Err(Errno::EINVAL),
        "no new AH on an empty slot"
    );
    let mut wr = SendWr::new(WrId(1), WrOpcode::Send);
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: 64,
        lkey: a.mr.lkey,
    }];
    wr.ud = UdInfo {
        ah,
        remote_qpn: b.qpn,
        remote_qkey: Qkey(0x1111_1111),
    };
    let now = f.now;
    let nd = &mut f.nodes[0];
    nd.dev.post_send(now, a.qpn, wr, &mut nd.mem).unwrap();
    assert!(f.run(Duration::from_secs(1)));
    let (_, wc) = f.nodes[0].dev.poll_completion().expect("a completion");
    assert_eq!((wc.wr_id, wc.status), (WrId(1), WcStatus::LocQpOpErr));
    assert!(
        f.nodes[1].dev.poll_completion().is_none(),
        "nothing was sent"
    );
}
