//! Send WRs as the driver hands them over (`Device::submit_send`): a type 1 window of
//! the QP's client binds at once, another bind goes through the send queue, and a UD WR
//! may use only an AH of the QP's client and PD.

use emu_core::sim::*;
use emu_core::*;
use std::time::Duration;

fn mw_opts() -> ConnOpts {
    ConnOpts {
        access: AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::MW_BIND,
        ..ConnOpts::default()
    }
}

fn bind_wr(id: u64, end: &End, rkey: Rkey) -> SendWr {
    let mut wr = SendWr::new(WrId(id), WrOpcode::BindMw);
    wr.send_flags = SendFlags::SIGNALED;
    wr.bind_mw = BindMwInfo {
        mw_rkey: rkey,
        new_rkey: Rkey(0),
        mr_lkey: end.mr.lkey,
        addr: end.base,
        length: 4096,
        access: AccessFlags::REMOTE_WRITE,
    };
    wr
}

fn submit(f: &mut Fabric, end: &End, wr: SendWr) -> Result<(), SendRefused> {
    let now = f.now;
    let n = &mut f.nodes[end.node];
    n.dev.submit_send(now, end.qpn, wr, &mut n.mem)
}

#[test]
fn type1_bind_completes_at_once_on_the_send_cq() {
    let mut f = Fabric::new(1, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, _b) = connect(&mut f, &mw_opts());
    let (_mw, rkey) = f.nodes[0].dev.alloc_mw(a.pd, 1).unwrap();
    submit(&mut f, &a, bind_wr(7, &a, rkey)).unwrap();
    let (cq, wc) = f.nodes[0].dev.poll_completion().expect("bind completion");
    assert_eq!(cq, a.scq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.qp_num),
        (WrId(7), WcStatus::Success, WcOpcode::BindMw, a.qpn)
    );
    // Nothing went to the wire: the bind was not queued behind other work.
    let now = f.now;
    let n = &mut f.nodes[0];
    assert!(n
        .dev
        .poll_transmit(now, &mut n.mem, &mut Vec::new())
        .is_none());
}

#[test]
fn type1_bind_outside_the_mr_fails_with_mw_bind_err() {
    let mut f = Fabric::new(2, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, _b) = connect(&mut f, &mw_opts());
    let (_mw, rkey) = f.nodes[0].dev.alloc_mw(a.pd, 1).unwrap();
    let mut wr = bind_wr(1, &a, rkey);
    wr.bind_mw.addr = a.base + a.len;
    assert_eq!(
        submit(&mut f, &a, wr),
        Err(SendRefused {
            status: WcStatus::MwBindErr,
            errno: Errno::EINVAL
        })
    );
}

#[test]
fn bind_of_a_type2_window_goes_through_the_send_queue() {
    let mut f = Fabric::new(3, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, _b) = connect(&mut f, &mw_opts());
    let (_mw, rkey) = f.nodes[0].dev.alloc_mw(a.pd, 2).unwrap();
    // A type 2 bind must choose a new key byte; the wrong type for an immediate bind
    // is not bound at once but queued, and completes in the send queue's order.
    let mut wr = bind_wr(2, &a, rkey);
    wr.bind_mw.new_rkey = Rkey((rkey.0 & !0xff) | ((rkey.0 + 1) & 0xff));
    submit(&mut f, &a, wr).unwrap();
    assert!(f.nodes[0].dev.poll_completion().is_none());
    assert!(f.run(Duration::from_secs(1)));
    let (_, wc) = f.nodes[0].dev.poll_completion().expect("bind completion");
    assert_eq!((wc.wr_id, wc.status), (WrId(2), WcStatus::Success));
}

#[test]
fn type1_window_of_another_client_is_not_bound_at_once() {
    let mut f = Fabric::new(4, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, _b) = connect(&mut f, &mw_opts());
    let other = f.nodes[0].dev.alloc_pd(ClientId(999)).unwrap();
    let (_mw, rkey) = f.nodes[0].dev.alloc_mw(other, 1).unwrap();
    // Queued as a send-queue bind, where the window's PD is not the QP's.
    submit(&mut f, &a, bind_wr(3, &a, rkey)).unwrap();
    assert!(f.run(Duration::from_secs(1)));
    let (_, wc) = f.nodes[0].dev.poll_completion().expect("bind completion");
    assert_eq!((wc.wr_id, wc.status), (WrId(3), WcStatus::MwBindErr));
}

fn ud_pair(seed: u64) -> (Fabric, End) {
    let mut f = Fabric::new(seed, 2, Mtu::Mtu1024, LinkModel::default());
    let opts = ConnOpts {
        qp_type: QpType::Ud,
        ..ConnOpts::default()
    };
    let (a, _b) = connect(&mut f, &opts);
    (f, a)
}

fn ah_attr(f: &Fabric) -> AhAttr {
    AhAttr {
        grh: GlobalRoute {
            dgid: Gid::from_ip(f.nodes[1].ip),
            ..Default::default()
        },
        is_global: true,
        port_num: 1,
        ..Default::default()
    }
}

fn ud_send(a: &End, ah: AhHandle) -> SendWr {
    let mut wr = SendWr::new(WrId(9), WrOpcode::Send);
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: 16,
        lkey: a.mr.lkey,
    }];
    wr.ud = UdInfo {
        ah,
        remote_qpn: Qpn(2),
        remote_qkey: Qkey(0x1111_1111),
    };
    wr
}

#[test]
fn ud_send_with_own_ah_is_queued() {
    let (mut f, a) = ud_pair(5);
    let attr = ah_attr(&f);
    let ah = f.nodes[0].dev.create_ah(a.pd, attr).unwrap();
    submit(&mut f, &a, ud_send(&a, ah)).unwrap();
}

#[test]
fn ud_send_with_a_foreign_ah_is_refused() {
    let (mut f, a) = ud_pair(6);
    let attr = ah_attr(&f);
    let refused = Err(SendRefused::local_qp_op(Errno::EINVAL));
    // Another client's AH on the same device.
    let other = f.nodes[0].dev.alloc_pd(ClientId(999)).unwrap();
    let theirs = f.nodes[0].dev.create_ah(other, attr).unwrap();
    assert_eq!(submit(&mut f, &a, ud_send(&a, theirs)), refused);
    // The QP's own client, another PD (rxe_get_av: "PDs don't match").
    let second = f.nodes[0].dev.alloc_pd(a.client).unwrap();
    let wrong_pd = f.nodes[0].dev.create_ah(second, attr).unwrap();
    assert_eq!(submit(&mut f, &a, ud_send(&a, wrong_pd)), refused);
    // No AH at all.
    assert_eq!(submit(&mut f, &a, ud_send(&a, AhHandle(0xdead))), refused);
    assert!(f.nodes[0].dev.poll_completion().is_none());
}
