//! `ibv_rereg_mr` and `ibv_resize_cq` as the kernel's rxe has them: a region's PD and
//! rights change in place under the same keys, a change of translation is refused; a CQ
//! takes any depth from 1 to `max_cqe` that still holds the completions not yet polled.

use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

fn opts() -> ConnOpts {
    ConnOpts {
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ..ConnOpts::default()
    }
}

fn write(f: &mut Fabric, a: &End, b: &End, id: u64) -> Vec<(u64, WcStatus)> {
    let mut wr = SendWr::new(WrId(id), WrOpcode::RdmaWrite);
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: 64,
        lkey: a.mr.lkey,
    }];
    wr.rdma = RdmaInfo {
        remote_addr: b.base,
        rkey: b.mr.rkey,
    };
    let now = f.now;
    let n = &mut f.nodes[a.node];
    n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    assert!(f.run(Duration::from_secs(1)));
    let mut v = Vec::new();
    while let Some((_, wc)) = f.nodes[a.node].dev.poll_completion() {
        v.push((wc.wr_id.0, wc.status));
    }
    v
}

fn change_access(access: AccessFlags) -> ReregMr {
    ReregMr {
        flags: REREG_ACCESS,
        access,
        pinned_writable: true,
        ..ReregMr::default()
    }
}

#[test]
fn rereg_without_remote_write_makes_the_next_write_a_remote_access_error() {
    let mut f = Fabric::new(11, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &opts());
    assert_eq!(write(&mut f, &a, &b, 1), [(1, WcStatus::Success)]);
    let keys = f.nodes[1]
        .dev
        .rereg_mr(b.mr.lkey, change_access(AccessFlags::LOCAL_WRITE))
        .unwrap();
    // rxe keeps both keys: the peer's rkey still names the region.
    assert_eq!(keys, b.mr);
    assert_eq!(write(&mut f, &a, &b, 2), [(2, WcStatus::RemAccessErr)]);
}

#[test]
fn rereg_granting_remote_write_again_lets_writes_in() {
    let mut f = Fabric::new(12, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &opts());
    let dev = &mut f.nodes[1].dev;
    dev.rereg_mr(b.mr.lkey, change_access(AccessFlags::LOCAL_WRITE))
        .unwrap();
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    dev.rereg_mr(b.mr.lkey, change_access(all)).unwrap();
    assert_eq!(write(&mut f, &a, &b, 3), [(3, WcStatus::Success)]);
}

#[test]
fn rereg_pd_moves_the_region_and_its_pd_reference() {
    let mut f = Fabric::new(13, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &opts());
    let dev = &mut f.nodes[1].dev;
    let other = dev.alloc_pd(b.client).unwrap();
    let to = |pd| ReregMr {
        flags: REREG_PD,
        pd,
        ..ReregMr::default()
    };
    assert_eq!(dev.rereg_mr(b.mr.lkey, to(other)).unwrap(), b.mr);
    // The region is in `other` now: the QP's PD no longer reaches it.
    assert_eq!(dev.dealloc_pd(other), Err(Errno::EBUSY));
    assert_eq!(write(&mut f, &a, &b, 1), [(1, WcStatus::RemAccessErr)]);
    let dev = &mut f.nodes[1].dev;
    dev.rereg_mr(b.mr.lkey, to(b.pd)).unwrap();
    assert_eq!(dev.dealloc_pd(other), Ok(()));
}

#[test]
fn rereg_refusals_change_nothing() {
    let mut f = Fabric::new(14, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &opts());
    let dev = &mut f.nodes[1].dev;
    let lkey = b.mr.lkey;
    let err = |dev: &mut Device, r: ReregMr| dev.rereg_mr(lkey, r).unwrap_err();
    let flags = |flags| ReregMr {
        flags,
        pinned_writable: true,
        ..ReregMr::default()
    };
    assert_eq!(err(dev, flags(0)), Errno::EINVAL);
    assert_eq!(err(dev, flags(1 << 3)), Errno::EINVAL);
    assert_eq!(err(dev, flags(REREG_TRANSLATION)), Errno::EOPNOTSUPP);
    // Remote write without local write, unknown rights: as ibv_reg_mr, EINVAL.
    assert_eq!(
        err(dev, change_access(AccessFlags::REMOTE_WRITE)),
        Errno::EINVAL
    );
    assert_eq!(err(dev, change_access(AccessFlags(1 << 12))), Errno::EINVAL);
    // HUGETLB is a hint for ODP regions only, as at registration.
    assert_eq!(
        err(
            dev,
            change_access(AccessFlags::LOCAL_WRITE | AccessFlags::HUGETLB)
        ),
        Errno::EINVAL
    );
    // ON_DEMAND changes how the pages are reached: not in place.
    assert_eq!(
        err(
            dev,
            change_access(AccessFlags::LOCAL_WRITE | AccessFlags::ON_DEMAND)
        ),
        Errno::EOPNOTSUPP
    );
    // ZERO_BASED would move the region's addresses: a translation change.
    assert_eq!(
        err(
            dev,
            change_access(AccessFlags::LOCAL_WRITE | AccessFlags::ZERO_BASED)
        ),
        Errno::EOPNOTSUPP
    );
    // Write rights on memory that was not pinned writable.
    let ro = ReregMr {
        pinned_writable: false,
        ..change_access(AccessFlags::LOCAL_WRITE)
    };
    assert_eq!(err(dev, ro), Errno::EACCES);
    // Another client's PD, a PD that does not exist, an unknown key.
    let stranger = dev.alloc_pd(ClientId(b.client.0 + 100)).unwrap();
    let pd = |pd| ReregMr {
        flags: REREG_PD,
        pd,
        ..ReregMr::default()
    };
    assert_eq!(err(dev, pd(stranger)), Errno::EINVAL);
    assert_eq!(err(dev, pd(PdHandle(0xdead))), Errno::EINVAL);
    assert_eq!(
        dev.rereg_mr(Lkey(lkey.0 ^ 0xff), flags(REREG_ACCESS)),
        Err(Errno::EINVAL)
    );
    // A translation change with a PD change: refused whole, the PD did not move.
    let both = ReregMr {
        flags: REREG_PD | REREG_TRANSLATION,
        ..pd(b.pd)
    };
    assert_eq!(err(dev, both), Errno::EOPNOTSUPP);
    assert_eq!(write(&mut f, &a, &b, 1), [(1, WcStatus::Success)]);
}

#[test]
fn resize_cq_takes_one_to_max_cqe_and_keeps_what_is_queued() {
    let mut dev = Device::new(DeviceConfig {
        name: "rxe0".into(),
        gids: vec![Gid::default()],
        active_mtu: Mtu::Mtu1024,
        udp_src_port: None,
        limits: DeviceLimits::default(),
        seed: 1,
    });
    let max = DeviceLimits::default().max_cqe;
    let (cq, depth) = dev.create_cq(ClientId(1), 3).unwrap();
    assert_eq!(depth, 3);
    assert_eq!(dev.resize_cq(cq, 0, 0), Err(Errno::EINVAL));
    assert_eq!(dev.resize_cq(cq, max + 1, 0), Err(Errno::EINVAL));
    assert_eq!(dev.resize_cq(cq, 1, 0), Ok(1));
    assert_eq!(dev.resize_cq(cq, max, 0), Ok(max));
    // Fewer than the completions the driver's ring still holds: rxe's EINVAL.
    assert_eq!(dev.resize_cq(cq, 5, 6), Err(Errno::EINVAL));
    assert_eq!(dev.resize_cq(cq, 6, 6), Ok(6));
    assert_eq!(dev.resize_cq(CqHandle(cq.0 + 77), 6, 0), Err(Errno::EINVAL));
}

#[test]
fn rereg_takes_every_right_ibv_reg_mr_takes() {
    let mut f = Fabric::new(15, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &opts());
    let rights = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
        | AccessFlags::MW_BIND
        | AccessFlags::FLUSH_GLOBAL;
    let keys = f.nodes[1].dev.rereg_mr(b.mr.lkey, change_access(rights));
    assert_eq!(keys.map(|k| k.rkey), Ok(b.mr.rkey));
    assert_eq!(write(&mut f, &a, &b, 2), [(2, WcStatus::Success)]);
}
