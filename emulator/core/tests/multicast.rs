//! UD multicast: `attach_mcast` / `detach_mcast` with the kernel's errnos and limits, and
//! a packet to QPN 0xFFFFFF at a group address reaching every attached QP whose Q_Key
//! matches, byte for byte.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);
const MCAST_QPN: Qpn = Qpn(0x00ff_ffff);
const SLOT: u64 = 4096;

fn ud() -> ConnOpts {
    ConnOpts {
        qp_type: QpType::Ud,
        depth: 64,
        ..ConnOpts::default()
    }
}

fn mgid() -> Gid {
    Gid::from_ip(IpAddr::V4(GROUP))
}

/// A UD QP in RTS on each of `n` nodes.
fn nodes(n: usize) -> (Fabric, Vec<End>) {
    let mut f = Fabric::new(7, n, Mtu::Mtu1024, LinkModel::default());
    let o = ud();
    let ends: Vec<End> = (0..n).map(|i| make_end(&mut f, i, &o)).collect();
    for e in &ends {
        bring_up(&mut f, e, None, &o, 0);
    }
    (f, ends)
}

fn post_recvs(f: &mut Fabric, e: &End, n: u64) {
    for i in 0..n {
        let sge = Sge {
            addr: e.base + i * SLOT,
            length: SLOT as u32,
            lkey: e.mr.lkey,
        };
        f.nodes[e.node]
            .dev
            .post_recv(
                e.qpn,
                RecvWr {
                    wr_id: WrId(i),
                    sg_list: vec![sge],
                },
            )
            .unwrap();
    }
}

/// Sends `data` from `e` to the group (the AH names the IPv4-mapped MGID, the WR the
/// multicast QPN) and runs the fabric until idle.
fn send_to_group(f: &mut Fabric, e: &End, data: &[u8], qkey: Qkey) {
    let src = e.base + 63 * SLOT;
    f.nodes[e.node]
        .mem
        .slice_mut(AddrSpace(e.client.0), src, data.len())
        .copy_from_slice(data);
    let ah = f.nodes[e.node]
        .dev
        .create_ah(
            e.pd,
            AhAttr {
                grh: GlobalRoute {
                    dgid: mgid(),
                    hop_limit: 1,
                    ..Default::default()
                },
                is_global: true,
                port_num: 1,
                ..Default::default()
            },
        )
        .expect("an AH to a multicast GID");
    let mut wr = SendWr::new(WrId(99), WrOpcode::Send);
    wr.send_flags = SendFlags::SIGNALED;
    wr.sg_list = vec![Sge {
        addr: src,
        length: data.len() as u32,
        lkey: e.mr.lkey,
    }];
    wr.ud = UdInfo {
        ah,
        remote_qpn: MCAST_QPN,
        remote_qkey: qkey,
    };
    let now = f.now;
    let n = &mut f.nodes[e.node];
    n.dev.post_send(now, e.qpn, wr, &mut n.mem).unwrap();
    assert!(f.run(Duration::from_secs(1)));
}

/// Every completion the node of `e` has (device-wide queue), split into `e`'s receive
/// completions with the received bytes after the 40-byte GRH area, and the rest.
type Got = Vec<(WorkCompletion, Vec<u8>, [u8; 40])>;

fn drain(f: &mut Fabric, node: usize) -> Vec<(CqHandle, WorkCompletion)> {
    std::iter::from_fn(|| f.nodes[node].dev.poll_completion()).collect()
}

fn received_from(f: &Fabric, e: &End, all: &[(CqHandle, WorkCompletion)]) -> Got {
    let mut out = Vec::new();
    for (cq, wc) in all {
        if *cq != e.rcq || wc.qp_num != e.qpn || wc.opcode != WcOpcode::Recv {
            continue;
        }
        let at = e.base + wc.wr_id.0 * SLOT;
        let mem = &f.nodes[e.node].mem;
        let bytes = mem.slice(AddrSpace(e.client.0), at, wc.byte_len as usize);
        let mut grh = [0u8; 40];
        grh.copy_from_slice(&bytes[..40]);
        out.push((*wc, bytes[40..].to_vec(), grh));
    }
    out
}

fn received(f: &mut Fabric, e: &End) -> Got {
    let all = drain(f, e.node);
    received_from(f, e, &all)
}

#[test]
fn multicast_send_reaches_every_attached_qp_byte_for_byte() {
    let (mut f, e) = nodes(4);
    for m in &e[1..] {
        post_recvs(&mut f, m, 4);
    }
    for m in &e[1..3] {
        f.nodes[m.node].dev.attach_mcast(m.qpn, mgid(), 0).unwrap();
    }
    let data: Vec<u8> = (0..700u32).map(|i| (i * 13 + 5) as u8).collect();
    send_to_group(&mut f, &e[0], &data, Qkey(0x1111_1111));
    for m in &e[1..3] {
        let got = received(&mut f, m);
        assert_eq!(got.len(), 1, "node {}", m.node);
        let (wc, bytes, grh) = &got[0];
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(wc.opcode, WcOpcode::Recv);
        assert!(wc.wc_flags.contains(WcFlags::GRH));
        assert_eq!(wc.src_qp, e[0].qpn);
        assert_eq!(wc.byte_len, 40 + data.len() as u32);
        assert_eq!(bytes, &data);
        // rxe's layout: 20 zero bytes, then the IPv4 header 10.0.0.1 -> 239.1.2.3.
        assert_eq!(&grh[..20], &[0u8; 20]);
        assert_eq!(&grh[32..36], &[10, 0, 0, 1]);
        assert_eq!(&grh[36..40], &GROUP.octets());
    }
    // Not attached: nothing.
    assert!(received(&mut f, &e[3]).is_empty());
    // The sender completed its one WR.
    let mut sends = 0;
    while let Some((_, wc)) = f.nodes[0].dev.poll_completion() {
        assert_eq!((wc.wr_id, wc.status), (WrId(99), WcStatus::Success));
        sends += 1;
    }
    assert_eq!(sends, 1);
}

#[test]
fn detach_stops_delivery_and_the_last_detach_empties_the_group() {
    let (mut f, e) = nodes(3);
    for m in &e[1..] {
        post_recvs(&mut f, m, 4);
        f.nodes[m.node].dev.attach_mcast(m.qpn, mgid(), 0).unwrap();
    }
    send_to_group(&mut f, &e[0], b"first", Qkey(0x1111_1111));
    assert_eq!(received(&mut f, &e[1]).len(), 1);
    assert_eq!(received(&mut f, &e[2]).len(), 1);
    f.nodes[1].dev.detach_mcast(e[1].qpn, mgid(), 0).unwrap();
    assert!(f.nodes[1].dev.mcast_groups().is_empty());
    assert_eq!(f.nodes[2].dev.mcast_groups(), vec![mgid()]);
    send_to_group(&mut f, &e[0], b"second", Qkey(0x1111_1111));
    assert!(received(&mut f, &e[1]).is_empty());
    let got = received(&mut f, &e[2]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, b"second");
}

#[test]
fn only_qps_whose_qkey_matches_receive() {
    let (mut f, e) = nodes(3);
    for m in &e[1..] {
        post_recvs(&mut f, m, 4);
        f.nodes[m.node].dev.attach_mcast(m.qpn, mgid(), 0).unwrap();
    }
    // Node 2's QP takes another Q_Key (RTS -> RTS).
    let now = f.now;
    let attr = QpAttr {
        qp_state: QpState::Rts,
        qkey: Qkey(0x2222),
        ..QpAttr::default()
    };
    f.nodes[2]
        .dev
        .modify_qp(now, e[2].qpn, &attr, QpAttrMask::STATE | QpAttrMask::QKEY)
        .unwrap();
    send_to_group(&mut f, &e[0], b"keyed", Qkey(0x1111_1111));
    assert_eq!(received(&mut f, &e[1]).len(), 1);
    assert!(received(&mut f, &e[2]).is_empty());
    assert_eq!(f.nodes[2].dev.counters().qkey_violations, 1);
}

#[test]
fn two_qps_of_one_device_and_the_sender_itself_each_take_a_copy() {
    let (mut f, e) = nodes(2);
    // A second UD QP on node 1, same client, PD and CQs.
    let o = ud();
    let init = QpInitAttr {
        pd: e[1].pd,
        send_cq: e[1].scq,
        recv_cq: e[1].rcq,
        srq: None,
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: QpType::Ud,
        sq_sig_all: false,
    };
    let (qpn2, _) = f.nodes[1].dev.create_qp(e[1].client, &init).unwrap();
    let second = End {
        qpn: qpn2,
        base: e[1].base + 16 * SLOT,
        ..e[1]
    };
    bring_up(&mut f, &second, None, &o, 0);
    post_recvs(&mut f, &e[0], 2);
    post_recvs(&mut f, &e[1], 2);
    post_recvs(&mut f, &second, 2);
    for m in [&e[0], &e[1], &second] {
        f.nodes[m.node].dev.attach_mcast(m.qpn, mgid(), 0).unwrap();
    }
    assert_eq!(f.nodes[1].dev.mcast_members(mgid()), vec![e[1].qpn, qpn2]);
    send_to_group(&mut f, &e[0], b"to all", Qkey(0x1111_1111));
    let node0 = drain(&mut f, 0);
    let node1 = drain(&mut f, 1);
    for (m, all) in [(&e[1], &node1), (&second, &node1), (&e[0], &node0)] {
        let got = received_from(&f, m, all);
        assert_eq!(got.len(), 1, "qpn {:?}", m.qpn);
        assert_eq!(got[0].1, b"to all");
        assert_eq!(got[0].0.src_qp, e[0].qpn);
    }
}

#[test]
fn attach_and_detach_answer_with_the_kernels_errnos() {
    let (mut f, e) = nodes(1);
    let d = &mut f.nodes[0].dev;
    let q = e[0].qpn;
    // Not multicast: a unicast IPv4-mapped GID, an IPv6 unicast GID.
    let unicast = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)));
    assert_eq!(d.attach_mcast(q, unicast, 0), Err(Errno::EINVAL));
    let mut v6 = [0u8; 16];
    v6[0] = 0xfe;
    v6[1] = 0x80;
    assert_eq!(d.attach_mcast(q, Gid(v6), 0), Err(Errno::EINVAL));
    // IPv6 multicast is fine; so is attaching twice.
    let mut ff0e = [0u8; 16];
    ff0e[0] = 0xff;
    ff0e[1] = 0x0e;
    ff0e[15] = 1;
    d.attach_mcast(q, Gid(ff0e), 0).unwrap();
    d.attach_mcast(q, mgid(), 0).unwrap();
    d.attach_mcast(q, mgid(), 0).unwrap();
    assert_eq!(d.mcast_members(mgid()), vec![q]);
    // Unknown QP, detach of what is not attached (another LID, another group).
    assert_eq!(d.attach_mcast(Qpn(0x1234), mgid(), 0), Err(Errno::EINVAL));
    assert_eq!(d.detach_mcast(q, mgid(), 7), Err(Errno::EINVAL));
    let other = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(239, 9, 9, 9)));
    assert_eq!(d.detach_mcast(q, other, 0), Err(Errno::EINVAL));
    // Destroying an attached QP: EBUSY (IBA o10-2.2.3, uverbs).
    assert_eq!(d.destroy_qp(q), Err(Errno::EBUSY));
    d.detach_mcast(q, mgid(), 0).unwrap();
    assert_eq!(d.detach_mcast(q, mgid(), 0), Err(Errno::EINVAL));
    d.detach_mcast(q, Gid(ff0e), 0).unwrap();
    assert!(d.mcast_groups().is_empty());
    d.destroy_qp(q).unwrap();
}

#[test]
fn only_ud_qps_attach() {
    let mut f = Fabric::new(1, 1, Mtu::Mtu1024, LinkModel::default());
    let e = make_end(&mut f, 0, &ConnOpts::default());
    assert_eq!(
        f.nodes[0].dev.attach_mcast(e.qpn, mgid(), 0),
        Err(Errno::EINVAL)
    );
}

#[test]
fn a_departing_client_leaves_its_groups() {
    let (mut f, e) = nodes(1);
    let now = f.now;
    let d = &mut f.nodes[0].dev;
    d.attach_mcast(e[0].qpn, mgid(), 0).unwrap();
    d.release_client(now, e[0].client);
    assert!(d.mcast_groups().is_empty());
    assert!(d.qp_counters(e[0].qpn).is_none());
}

#[test]
fn group_limits_answer_enomem() {
    let mut cfg = node_config(0, Mtu::Mtu1024, 1);
    cfg.limits.max_mcast_grp = 2;
    cfg.limits.max_mcast_qp_attach = 2;
    cfg.limits.max_total_mcast_qp_attach = 3;
    let mut d = Device::new(cfg);
    let c = ClientId(1);
    let pd = d.alloc_pd(c).unwrap();
    let (cq, _) = d.create_cq(c, 16).unwrap();
    let init = QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: QpType::Ud,
        sq_sig_all: false,
    };
    let qps: Vec<Qpn> = (0..3).map(|_| d.create_qp(c, &init).unwrap().0).collect();
    let g = |x: u8| Gid::from_ip(IpAddr::V4(Ipv4Addr::new(239, 0, 0, x)));
    d.attach_mcast(qps[0], g(1), 0).unwrap();
    d.attach_mcast(qps[1], g(1), 0).unwrap();
    // Group full.
    assert_eq!(d.attach_mcast(qps[2], g(1), 0), Err(Errno::ENOMEM));
    d.attach_mcast(qps[2], g(2), 0).unwrap();
    // Too many groups.
    assert_eq!(d.attach_mcast(qps[2], g(3), 0), Err(Errno::ENOMEM));
    // Too many attachments in all.
    assert_eq!(d.attach_mcast(qps[0], g(2), 0), Err(Errno::ENOMEM));
    assert_eq!(d.mcast_groups(), vec![g(1), g(2)]);
    d.detach_mcast(qps[1], g(1), 0).unwrap();
    d.attach_mcast(qps[0], g(2), 0).unwrap();
}
