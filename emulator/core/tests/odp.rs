//! On-demand paging in the core: ODP and implicit ODP registrations, `ibv_advise_mr`'s
//! checks, and traffic through an implicit region's keys.

use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

const RW: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_READ.0,
);
const ODP: AccessFlags = AccessFlags::ON_DEMAND;

fn device() -> (Device, PdHandle) {
    let mut d = Device::new(node_config(0, Mtu::Mtu1024, 1));
    let pd = d.alloc_pd(ClientId(7)).unwrap();
    (d, pd)
}

#[test]
fn implicit_odp_covers_the_address_space_with_iova_zero_only() {
    let (mut d, pd) = device();
    let space = AddrSpace(7);
    assert!(d.reg_mr(pd, 0, u64::MAX, 0, RW | ODP, space).is_ok());
    assert_eq!(
        d.reg_mr(pd, 0, u64::MAX, 0x1000, RW | ODP, space),
        Err(Errno::EINVAL)
    );
    // Explicit ODP regions are checked like any other.
    assert!(d.reg_mr(pd, 0x1000, 4096, 0x1000, RW | ODP, space).is_ok());
    assert_eq!(
        d.reg_mr(pd, 0x1000, u64::MAX, 0x1000, RW | ODP, space),
        Err(Errno::EINVAL)
    );
    // HUGETLB is a hint for ODP regions only; unknown bits stay refused.
    let huge = AccessFlags::HUGETLB;
    assert!(d
        .reg_mr(pd, 0x1000, 4096, 0x1000, RW | ODP | huge, space)
        .is_ok());
    assert_eq!(
        d.reg_mr(pd, 0x1000, 4096, 0x1000, RW | huge, space),
        Err(Errno::EINVAL)
    );
    // 1 << 10: no IBV_ACCESS_* bit (1 << 8 and 1 << 9 are FLUSH's, `mpe.rs`).
    assert_eq!(
        d.reg_mr(pd, 0x1000, 4096, 0x1000, AccessFlags(1 << 10), space),
        Err(Errno::EINVAL)
    );
}

#[test]
fn advise_mr_answers_as_the_kernels_rxe() {
    let (mut d, pd) = device();
    let space = AddrSpace(7);
    let other_pd = d.alloc_pd(ClientId(8)).unwrap();
    let odp = d
        .reg_mr(pd, 0x10_000, 8192, 0x10_000, RW | ODP, space)
        .unwrap();
    let pinned = d.reg_mr(pd, 0x10_000, 8192, 0x10_000, RW, space).unwrap();
    let read_only = d
        .reg_mr(
            pd,
            0x10_000,
            8192,
            0x10_000,
            AccessFlags::REMOTE_READ | ODP,
            space,
        )
        .unwrap();
    let implicit = d.reg_mr(pd, 0, u64::MAX, 0, RW | ODP, space).unwrap();
    assert_eq!(
        d.advise_mr(pd, odp.lkey, 0x10_100, 100),
        Ok((space, 0x10_100))
    );
    assert_eq!(
        d.advise_mr(pd, odp.lkey, 0x10_000, 8192),
        Ok((space, 0x10_000))
    );
    assert_eq!(
        d.advise_mr(pd, odp.lkey, 0x11_f00, 0x200),
        Err(Errno::EFAULT)
    );
    assert_eq!(d.advise_mr(pd, odp.lkey, 0xf000, 1), Err(Errno::EFAULT));
    // Not an ODP MR, no local write, another PD, no such key: EINVAL.
    assert_eq!(
        d.advise_mr(pd, pinned.lkey, 0x10_000, 1),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        d.advise_mr(pd, read_only.lkey, 0x10_000, 1),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        d.advise_mr(other_pd, odp.lkey, 0x10_000, 1),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        d.advise_mr(pd, Lkey(odp.lkey.0 ^ 0x100), 0x10_000, 1),
        Err(Errno::EINVAL)
    );
    // An implicit region: any address of its owner's space.
    let far = 0x7fff_0000_0000;
    assert_eq!(
        d.advise_mr(pd, implicit.lkey, far, 1 << 20),
        Ok((space, far))
    );
}

/// Client 100's implicit region on node 0 serves as the source of a WRITE, and as the
/// target of node 1's WRITE through its rkey; the bytes land in client 100's memory only.
/// A QP of another PD on node 0 cannot use the implicit lkey.
#[test]
fn traffic_through_implicit_keys_reaches_the_owners_memory_only() {
    let mut f = Fabric::new(3, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let n0 = &mut f.nodes[0];
    let implicit = n0
        .dev
        .reg_mr(a.pd, 0, u64::MAX, 0, RW | ODP, AddrSpace(a.client.0))
        .unwrap();
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    n0.mem
        .slice_mut(AddrSpace(a.client.0), a.base + 100, data.len())
        .copy_from_slice(&data);
    let mut wr = write_wr(1, &a, &b, data.len() as u32);
    wr.sg_list[0].addr = a.base + 100;
    wr.sg_list[0].lkey = implicit.lkey;
    wr.send_flags = SendFlags::SIGNALED;
    let now = f.now;
    n0.dev.post_send(now, a.qpn, wr, &mut n0.mem).unwrap();
    // Node 1 writes back into node 0 at another address, through the implicit rkey.
    let mut back = write_wr(2, &b, &a, 512);
    back.rdma.remote_addr = a.base + 0x8000;
    back.rdma.rkey = implicit.rkey;
    back.send_flags = SendFlags::SIGNALED;
    let n1 = &mut f.nodes[1];
    n1.mem
        .slice_mut(AddrSpace(b.client.0), b.base, 512)
        .fill(0xab);
    n1.dev.post_send(now, b.qpn, back, &mut n1.mem).unwrap();
    assert!(f.run(Duration::from_secs(5)), "seed {}", f.seed);
    for node in 0..2 {
        let (_, wc) = f.nodes[node].dev.poll_completion().expect("a completion");
        assert_eq!(wc.status, WcStatus::Success, "node {node}");
    }
    assert_eq!(
        f.nodes[1]
            .mem
            .slice(AddrSpace(b.client.0), b.base, data.len()),
        &data[..]
    );
    assert!(f.nodes[0]
        .mem
        .slice(AddrSpace(a.client.0), a.base + 0x8000, 512)
        .iter()
        .all(|&x| x == 0xab));
    // Another end on node 0 (its own PD) may not gather through the implicit lkey.
    let (c, _d) = connect_nodes(&mut f, 0, 1, &ConnOpts::default());
    let mut wr = write_wr(3, &c, &b, 64);
    wr.sg_list[0].lkey = implicit.lkey;
    wr.send_flags = SendFlags::SIGNALED;
    let now = f.now;
    let n0 = &mut f.nodes[0];
    n0.dev.post_send(now, c.qpn, wr, &mut n0.mem).unwrap();
    assert!(f.run(Duration::from_secs(5)));
    let (_, wc) = f.nodes[0].dev.poll_completion().expect("a completion");
    assert_eq!((wc.wr_id, wc.status), (WrId(3), WcStatus::LocProtErr));
}
