//! Memory windows: type 1 bound by the verb, type 2 bound through the send queue and
//! invalidated remotely by SEND_WITH_INV; access outside a window is a remote access error.

use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

fn opts() -> ConnOpts {
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    ConnOpts {
        access: all | AccessFlags::MW_BIND,
        ..ConnOpts::default()
    }
}

fn post(f: &mut Fabric, node: usize, qpn: Qpn, wr: SendWr) {
    let now = f.now;
    let n = &mut f.nodes[node];
    n.dev.post_send(now, qpn, wr, &mut n.mem).unwrap();
}

fn write_to(a: &End, va: u64, rkey: Rkey, id: u64) -> SendWr {
    let mut wr = SendWr::new(WrId(id), WrOpcode::RdmaWrite);
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: 64,
        lkey: a.mr.lkey,
    }];
    wr.rdma = RdmaInfo {
        remote_addr: va,
        rkey,
    };
    wr
}

fn statuses(f: &mut Fabric, node: usize) -> Vec<(u64, WcStatus, u32, WcFlags)> {
    let mut v = Vec::new();
    while let Some((_, wc)) = f.nodes[node].dev.poll_completion() {
        v.push((wc.wr_id.0, wc.status, wc.imm_data, wc.wc_flags));
    }
    v
}

#[test]
fn type1_window_grants_exactly_its_range() {
    let mut f = Fabric::new(1, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &opts());
    let (_mw, rkey) = f.nodes[1].dev.alloc_mw(b.pd, 1).unwrap();
    // ibv_bind_mw: the provider picks the next key and hands the bind over as a WR,
    // which the device carries out at once for a type 1 window.
    let new_rkey = Rkey((rkey.0 & !0xff) | ((rkey.0 + 1) & 0xff));
    let mut bind = SendWr::new(WrId(9), WrOpcode::BindMw);
    bind.bind_mw = BindMwInfo {
        mw_rkey: rkey,
        new_rkey,
        mr_lkey: b.mr.lkey,
        addr: b.base + 4096,
        length: 4096,
        access: AccessFlags::REMOTE_WRITE,
    };
    let now = f.now;
    let n = &mut f.nodes[1];
    n.dev.submit_send(now, b.qpn, bind, &mut n.mem).unwrap();
    let rkey = new_rkey;
    post(&mut f, 0, a.qpn, write_to(&a, b.base + 4096, rkey, 1));
    assert!(f.run(Duration::from_secs(1)));
    assert_eq!(
        statuses(&mut f, 0),
        [(1, WcStatus::Success, 0, WcFlags::EMPTY)]
    );
    post(&mut f, 0, a.qpn, write_to(&a, b.base + 8192 - 32, rkey, 2));
    assert!(f.run(Duration::from_secs(1)));
    assert_eq!(
        statuses(&mut f, 0),
        [(2, WcStatus::RemAccessErr, 0, WcFlags::EMPTY)]
    );
    // The window is in use: its MR cannot be deregistered.
    assert_eq!(f.nodes[1].dev.dereg_mr(b.mr.lkey), Err(Errno::EBUSY));
}

#[test]
fn type2_window_bound_by_wr_is_invalidated_by_send_with_inv() {
    let mut f = Fabric::new(2, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &opts());
    let (_mw, rkey) = f.nodes[1].dev.alloc_mw(b.pd, 2).unwrap();
    let new_rkey = Rkey((rkey.0 & !0xff) | ((rkey.0 + 1) & 0xff));
    let mut bind = SendWr::new(WrId(10), WrOpcode::BindMw);
    bind.bind_mw = BindMwInfo {
        mw_rkey: rkey,
        new_rkey,
        mr_lkey: b.mr.lkey,
        addr: b.base,
        length: 4096,
        access: AccessFlags::REMOTE_WRITE,
    };
    post(&mut f, 1, b.qpn, bind);
    assert!(f.run(Duration::from_secs(1)));
    assert_eq!(
        statuses(&mut f, 1),
        [(10, WcStatus::Success, 0, WcFlags::EMPTY)]
    );
    post(&mut f, 0, a.qpn, write_to(&a, b.base, new_rkey, 1));
    assert!(f.run(Duration::from_secs(1)));
    assert_eq!(
        statuses(&mut f, 0),
        [(1, WcStatus::Success, 0, WcFlags::EMPTY)]
    );
    // SEND_WITH_INV: B's receive completion says which rkey went.
    let sge = Sge {
        addr: b.base + 65536,
        length: 64,
        lkey: b.mr.lkey,
    };
    f.nodes[1]
        .dev
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: WrId(20),
                sg_list: vec![sge],
            },
        )
        .unwrap();
    let mut inv = SendWr::new(WrId(2), WrOpcode::SendWithInv);
    inv.sg_list = vec![Sge {
        addr: a.base,
        length: 8,
        lkey: a.mr.lkey,
    }];
    inv.invalidate_rkey = new_rkey;
    post(&mut f, 0, a.qpn, inv);
    assert!(f.run(Duration::from_secs(1)));
    assert_eq!(
        statuses(&mut f, 0),
        [(2, WcStatus::Success, 0, WcFlags::EMPTY)]
    );
    assert_eq!(
        statuses(&mut f, 1),
        // GRH too: a receive completion carries IBV_WC_GRH, as the kernel's rxe sets it.
        [(
            20,
            WcStatus::Success,
            new_rkey.0,
            WcFlags::WITH_INV | WcFlags::GRH
        )]
    );
    // The window is gone.
    post(&mut f, 0, a.qpn, write_to(&a, b.base, new_rkey, 3));
    assert!(f.run(Duration::from_secs(1)));
    assert_eq!(
        statuses(&mut f, 0),
        [(3, WcStatus::RemAccessErr, 0, WcFlags::EMPTY)]
    );
}
