//! A table of failures and the completion statuses and async events rdma-core programs
//! expect for them.

use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

struct Case {
    name: &'static str,
    opts: ConnOpts,
    link: LinkModel,
    /// Prepare B (post receives, change MRs) and return the WRs A posts.
    setup: fn(&mut Fabric, &End, &End) -> Vec<SendWr>,
    /// Statuses of A's send completions, in order.
    a: &'static [WcStatus],
    /// Statuses of B's receive completions, in order.
    b: &'static [WcStatus],
    /// Event types (ibv_event_type) raised on B.
    b_events: &'static [u32],
}

fn write(a: &End, b: &End, len: u32, rkey: Rkey) -> SendWr {
    let mut wr = SendWr::new(WrId(1), WrOpcode::RdmaWrite);
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: len,
        lkey: a.mr.lkey,
    }];
    wr.rdma = RdmaInfo {
        remote_addr: b.base,
        rkey,
    };
    wr
}

fn send(a: &End, len: u32, id: u64) -> SendWr {
    let mut wr = SendWr::new(WrId(id), WrOpcode::Send);
    wr.sg_list = vec![Sge {
        addr: a.base,
        length: len,
        lkey: a.mr.lkey,
    }];
    wr
}

fn recv(f: &mut Fabric, b: &End, len: u32) {
    let sge = Sge {
        addr: b.base,
        length: len,
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
}

const LOST: LinkModel = LinkModel {
    loss: 1.0,
    duplicate: 0.0,
    reorder: 0.0,
    corrupt: 0.0,
    delay: Duration::from_micros(5),
    mtu: 9000,
    bandwidth: None,
    batch: false,
};
const GOOD: LinkModel = LinkModel {
    loss: 0.0,
    duplicate: 0.0,
    reorder: 0.0,
    corrupt: 0.0,
    delay: Duration::from_micros(5),
    mtu: 9000,
    bandwidth: None,
    batch: false,
};

fn cases() -> Vec<Case> {
    let o = ConnOpts {
        timeout: 4,
        retry_cnt: 2,
        rnr_retry: 2,
        ..ConnOpts::default()
    };
    use WcStatus::*;
    vec![
        Case {
            name: "retry exhaustion: the peer never answers",
            opts: o,
            link: LOST,
            setup: |_, a, b| vec![write(a, b, 100, b.mr.rkey), send(a, 10, 2)],
            a: &[RetryExcErr, WrFlushErr],
            b: &[],
            b_events: &[],
        },
        Case {
            name: "RNR exhaustion: no receive posted",
            opts: o,
            link: GOOD,
            setup: |_, a, _| vec![send(a, 10, 1)],
            a: &[RnrRetryExcErr],
            b: &[],
            b_events: &[],
        },
        Case {
            name: "remote access violation: bad rkey",
            opts: o,
            link: GOOD,
            setup: |_, a, b| vec![write(a, b, 100, Rkey(b.mr.rkey.0 ^ 0xff)), send(a, 10, 2)],
            a: &[RemAccessErr, WrFlushErr],
            b: &[],
            b_events: &[3],
        },
        Case {
            name: "remote access violation: QP grants no remote write",
            opts: ConnOpts {
                access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
                ..o
            },
            link: GOOD,
            setup: |_, a, b| vec![write(a, b, 100, b.mr.rkey)],
            a: &[RemAccessErr],
            b: &[],
            b_events: &[3],
        },
        Case {
            name: "remote access violation: out of bounds",
            opts: o,
            link: GOOD,
            setup: |_, a, b| {
                let mut w = write(a, b, 100, b.mr.rkey);
                w.rdma.remote_addr = b.base + b.len - 50;
                vec![w]
            },
            a: &[RemAccessErr],
            b: &[],
            b_events: &[3],
        },
        Case {
            name: "length error: SEND longer than the receive buffer",
            opts: o,
            link: GOOD,
            setup: |f, a, b| {
                recv(f, b, 16);
                vec![send(a, 100, 1)]
            },
            a: &[RemInvReqErr],
            b: &[LocLenErr],
            b_events: &[2],
        },
        Case {
            name: "local protection error: bad lkey",
            opts: o,
            link: GOOD,
            setup: |_, a, b| {
                let mut w = write(a, b, 100, b.mr.rkey);
                w.sg_list[0].lkey = Lkey(0x1234_5678);
                vec![w, send(a, 1, 2)]
            },
            a: &[LocProtErr, WrFlushErr],
            b: &[],
            b_events: &[],
        },
    ]
}

#[test]
fn failures_complete_with_the_status_and_event_rdma_core_programs_expect() {
    for c in cases() {
        let mut f = Fabric::new(7, 2, Mtu::Mtu4096, c.link);
        let (a, b) = connect(&mut f, &c.opts);
        let wrs = (c.setup)(&mut f, &a, &b);
        for wr in wrs {
            let now = f.now;
            let n = &mut f.nodes[0];
            n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
        }
        assert!(f.run(Duration::from_secs(60)), "{}", c.name);
        let mut got_a = Vec::new();
        while let Some((_, wc)) = f.nodes[0].dev.poll_completion() {
            got_a.push(wc.status);
        }
        let mut got_b = Vec::new();
        while let Some((_, wc)) = f.nodes[1].dev.poll_completion() {
            got_b.push(wc.status);
        }
        let mut ev = Vec::new();
        while let Some((_, e)) = f.nodes[1].dev.poll_event() {
            ev.push(e.raw().0);
        }
        assert_eq!(got_a, c.a, "{}", c.name);
        assert_eq!(got_b, c.b, "{}", c.name);
        assert_eq!(ev, c.b_events, "{}", c.name);
        if c.a.iter().any(|s| *s != WcStatus::Success) {
            assert_eq!(
                f.nodes[0].dev.query_qp(a.qpn).unwrap().0.qp_state,
                QpState::Err,
                "{}",
                c.name
            );
        }
    }
}

#[test]
fn verbs_on_a_qp_in_the_wrong_state_fail_with_einval() {
    let mut f = Fabric::new(1, 2, Mtu::Mtu1024, GOOD);
    let o = ConnOpts::default();
    let a = make_end(&mut f, 0, &o);
    let now = f.now;
    let n = &mut f.nodes[0];
    assert_eq!(
        n.dev.post_send(now, a.qpn, send(&a, 1, 1), &mut n.mem),
        Err(Errno::EINVAL)
    );
    let sge = Sge {
        addr: a.base,
        length: 1,
        lkey: a.mr.lkey,
    };
    assert_eq!(
        n.dev.post_recv(
            a.qpn,
            RecvWr {
                wr_id: WrId(1),
                sg_list: vec![sge]
            }
        ),
        Err(Errno::EINVAL)
    );
    // RESET -> RTR is no transition.
    let attr = QpAttr {
        qp_state: QpState::Rtr,
        ..QpAttr::default()
    };
    assert_eq!(
        n.dev.modify_qp(now, a.qpn, &attr, QpAttrMask::STATE),
        Err(Errno::EINVAL)
    );
    // An unknown access bit is EINVAL; both FLUSH placement types may be granted to a QP
    // (rdma-core's suite since v57 asks for them on every RC QP), as rxe grants them.
    for (bits, errno) in [
        (1 << 12, Err(Errno::EINVAL)),
        (1 << 8, Ok(())),
        (1 << 9, Ok(())),
    ] {
        let attr = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: AccessFlags(AccessFlags::REMOTE_WRITE.0 | bits),
            ..QpAttr::default()
        };
        let mask = QpAttrMask::STATE
            | QpAttrMask::PKEY_INDEX
            | QpAttrMask::PORT
            | QpAttrMask::ACCESS_FLAGS;
        assert_eq!(
            n.dev.modify_qp(now, a.qpn, &attr, mask),
            errno,
            "bits {bits:#x}"
        );
    }
    // RoCE needs a GRH.
    let bad_ah = AhAttr {
        is_global: false,
        port_num: 1,
        ..AhAttr::default()
    };
    assert_eq!(n.dev.create_ah(a.pd, bad_ah), Err(Errno::EINVAL));
    // Objects in use cannot go.
    assert_eq!(n.dev.dealloc_pd(a.pd), Err(Errno::EBUSY));
    assert_eq!(n.dev.destroy_cq(a.scq), Err(Errno::EBUSY));
    n.dev.destroy_qp(a.qpn).unwrap();
    n.dev.destroy_cq(a.scq).unwrap();
    // Remote write without local write is refused at registration.
    let acc = AccessFlags::REMOTE_WRITE;
    assert_eq!(
        n.dev
            .reg_mr(a.pd, a.base, 64, a.base, acc, AddrSpace(a.client.0)),
        Err(Errno::EINVAL)
    );
}

#[test]
fn a_qp_in_error_flushes_every_outstanding_wr_exactly_once() {
    let mut f = Fabric::new(3, 2, Mtu::Mtu1024, LOST);
    let (a, b) = connect(&mut f, &ConnOpts::default());
    for i in 0..5 {
        let now = f.now;
        let n = &mut f.nodes[0];
        n.dev
            .post_send(now, a.qpn, send(&a, 10, i), &mut n.mem)
            .unwrap();
        let sge = Sge {
            addr: a.base,
            length: 10,
            lkey: a.mr.lkey,
        };
        f.nodes[0]
            .dev
            .post_recv(
                a.qpn,
                RecvWr {
                    wr_id: WrId(i),
                    sg_list: vec![sge],
                },
            )
            .unwrap();
    }
    let now = f.now;
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    f.nodes[0]
        .dev
        .modify_qp(now, a.qpn, &err, QpAttrMask::STATE)
        .unwrap();
    // Posting in ERR completes at once with a flush error.
    let n = &mut f.nodes[0];
    n.dev
        .post_send(now, a.qpn, send(&a, 10, 5), &mut n.mem)
        .unwrap();
    f.run(Duration::from_secs(1));
    let mut send_ids = Vec::new();
    let mut recvs = 0;
    while let Some((cq, wc)) = f.nodes[0].dev.poll_completion() {
        assert_eq!(wc.status, WcStatus::WrFlushErr);
        if cq == a.scq {
            send_ids.push(wc.wr_id.0);
        } else {
            recvs += 1;
        }
    }
    assert_eq!(send_ids, [0, 1, 2, 3, 4, 5]);
    assert_eq!(recvs, 5);
    assert_eq!(f.nodes[0].dev.armed_timers(), 0);
    let _ = b;
}

#[test]
fn cq_overrun_raises_cq_err_and_srq_limit_fires_once() {
    let mut f = Fabric::new(3, 2, Mtu::Mtu1024, GOOD);
    let o = ConnOpts::default();
    let a = make_end(&mut f, 0, &o);
    let d = &mut f.nodes[0].dev;
    let (cq, depth) = d.create_cq(a.client, 2).unwrap();
    assert_eq!(depth, 2);
    let init = QpInitAttr {
        pd: a.pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: QpType::Rc,
        sq_sig_all: true,
    };
    let (qpn, _) = d.create_qp(a.client, &init).unwrap();
    let attr = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    use QpAttrMask as M;
    d.modify_qp(
        f.now,
        qpn,
        &attr,
        M::STATE | M::PORT | M::PKEY_INDEX | M::ACCESS_FLAGS,
    )
    .unwrap();
    for i in 0..3 {
        let sge = Sge {
            addr: a.base,
            length: 1,
            lkey: a.mr.lkey,
        };
        d.post_recv(
            qpn,
            RecvWr {
                wr_id: WrId(i),
                sg_list: vec![sge],
            },
        )
        .unwrap();
    }
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    d.modify_qp(f.now, qpn, &err, M::STATE).unwrap();
    assert_eq!(d.poll_event(), Some((a.client, AsyncEvent::CqErr(cq))));
    // SRQ limit.
    let srq = d
        .create_srq(
            a.client,
            a.pd,
            SrqAttr {
                max_wr: 8,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    for i in 0..4 {
        let sge = Sge {
            addr: a.base,
            length: 1,
            lkey: a.mr.lkey,
        };
        d.post_srq_recv(
            srq,
            RecvWr {
                wr_id: WrId(i),
                sg_list: vec![sge],
            },
        )
        .unwrap();
    }
    assert_eq!(
        d.modify_srq(
            srq,
            &SrqAttr {
                srq_limit: 9,
                ..Default::default()
            },
            SrqAttrMask::LIMIT
        ),
        Err(Errno::EINVAL)
    );
    d.modify_srq(
        srq,
        &SrqAttr {
            srq_limit: 3,
            ..Default::default()
        },
        SrqAttrMask::LIMIT,
    )
    .unwrap();
    assert_eq!(d.query_srq(srq).unwrap().srq_limit, 3);
}

#[test]
fn srq_receives_sends_and_raises_the_limit_event_once() {
    let mut f = Fabric::new(3, 2, Mtu::Mtu1024, GOOD);
    let (a, b) = connect(
        &mut f,
        &ConnOpts {
            use_srq: true,
            ..ConnOpts::default()
        },
    );
    let srq = b.srq.unwrap();
    let d = &mut f.nodes[1].dev;
    for i in 0..5 {
        let sge = Sge {
            addr: b.base + i * 64,
            length: 64,
            lkey: b.mr.lkey,
        };
        d.post_srq_recv(
            srq,
            RecvWr {
                wr_id: WrId(i),
                sg_list: vec![sge],
            },
        )
        .unwrap();
    }
    // Posting to the QP's own RQ is refused when it has an SRQ.
    let sge = Sge {
        addr: b.base,
        length: 64,
        lkey: b.mr.lkey,
    };
    assert_eq!(
        d.post_recv(
            b.qpn,
            RecvWr {
                wr_id: WrId(9),
                sg_list: vec![sge]
            }
        ),
        Err(Errno::EINVAL)
    );
    d.modify_srq(
        srq,
        &SrqAttr {
            srq_limit: 3,
            ..Default::default()
        },
        SrqAttrMask::LIMIT,
    )
    .unwrap();
    for i in 0..4 {
        let now = f.now;
        let n = &mut f.nodes[0];
        n.dev
            .post_send(now, a.qpn, send(&a, 16, i), &mut n.mem)
            .unwrap();
    }
    assert!(f.run(Duration::from_secs(1)));
    let mut ids = Vec::new();
    while let Some((_, wc)) = f.nodes[1].dev.poll_completion() {
        assert_eq!(wc.status, WcStatus::Success);
        ids.push(wc.wr_id.0);
    }
    assert_eq!(ids, [0, 1, 2, 3]);
    assert_eq!(
        f.nodes[1].dev.poll_event(),
        Some((b.client, AsyncEvent::SrqLimitReached(srq)))
    );
    assert_eq!(f.nodes[1].dev.poll_event(), None);
    assert_eq!(
        f.nodes[1].dev.query_srq(srq).unwrap().srq_limit,
        0,
        "disarmed after firing"
    );
}

#[test]
fn a_dead_client_is_released_and_its_peer_sees_retry_exceeded_not_a_hang() {
    let o = ConnOpts {
        timeout: 4,
        retry_cnt: 1,
        ..ConnOpts::default()
    };
    let mut f = Fabric::new(4, 2, Mtu::Mtu1024, GOOD);
    let (a, b) = connect(&mut f, &o);
    recv(&mut f, &b, 64);
    let now = f.now;
    f.nodes[1].dev.release_client(now, b.client);
    assert_eq!(f.nodes[1].dev.query_qp(b.qpn), Err(Errno::EINVAL));
    assert!(
        f.nodes[1].dev.poll_completion().is_none(),
        "nothing of the dead client completes"
    );
    let n = &mut f.nodes[0];
    n.dev
        .post_send(now, a.qpn, send(&a, 8, 1), &mut n.mem)
        .unwrap();
    assert!(f.run(Duration::from_secs(1)));
    let (_, wc) = f.nodes[0].dev.poll_completion().unwrap();
    assert_eq!(wc.status, WcStatus::RetryExcErr);
    assert!(f.nodes[1].dev.counters().unknown_qp > 0);
}

#[test]
fn sqd_stops_new_work_and_reports_sq_drained() {
    let mut f = Fabric::new(4, 2, Mtu::Mtu1024, GOOD);
    let (a, b) = connect(&mut f, &ConnOpts::default());
    let now = f.now;
    let sqd = QpAttr {
        qp_state: QpState::Sqd,
        en_sqd_async_notify: true,
        ..QpAttr::default()
    };
    let d = &mut f.nodes[0].dev;
    d.modify_qp(
        now,
        a.qpn,
        &sqd,
        QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY,
    )
    .unwrap();
    assert_eq!(
        d.poll_event(),
        Some((a.client, AsyncEvent::SqDrained(a.qpn)))
    );
    recv(&mut f, &b, 64);
    let n = &mut f.nodes[0];
    n.dev
        .post_send(now, a.qpn, send(&a, 8, 1), &mut n.mem)
        .unwrap();
    assert!(f.run(Duration::from_secs(1)));
    assert!(
        f.nodes[0].dev.poll_completion().is_none(),
        "no new WR starts in SQD"
    );
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    let now = f.now;
    f.nodes[0]
        .dev
        .modify_qp(now, a.qpn, &rts, QpAttrMask::STATE)
        .unwrap();
    assert!(f.run(Duration::from_secs(1)));
    assert_eq!(
        f.nodes[0].dev.poll_completion().unwrap().1.status,
        WcStatus::Success
    );
}

#[test]
fn first_packet_in_rtr_raises_comm_est() {
    let mut f = Fabric::new(4, 2, Mtu::Mtu1024, GOOD);
    let o = ConnOpts::default();
    let a = make_end(&mut f, 0, &o);
    let b = make_end(&mut f, 1, &o);
    bring_up(&mut f, &a, Some((&b, 1100)), &o, 100);
    // B only to RTR (no RTS): reset and redo INIT/RTR by hand.
    bring_up(&mut f, &b, Some((&a, 100)), &o, 1100);
    let now = f.now;
    let d = &mut f.nodes[1].dev;
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    d.modify_qp(now, b.qpn, &reset, QpAttrMask::STATE).unwrap();
    use QpAttrMask as M;
    let mut at = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: o.access,
        ..QpAttr::default()
    };
    d.modify_qp(
        now,
        b.qpn,
        &at,
        M::STATE | M::PORT | M::PKEY_INDEX | M::ACCESS_FLAGS,
    )
    .unwrap();
    at = QpAttr {
        qp_state: QpState::Rtr,
        ..f.nodes[0].dev.query_qp(a.qpn).unwrap().0
    };
    at.ah_attr.grh.dgid = Gid::from_ip(f.nodes[0].ip);
    at.dest_qp_num = a.qpn;
    at.rq_psn = Psn::new(100);
    let d = &mut f.nodes[1].dev;
    d.modify_qp(
        now,
        b.qpn,
        &at,
        M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER,
    )
    .unwrap();
    recv(&mut f, &b, 64);
    let n = &mut f.nodes[0];
    n.dev
        .post_send(now, a.qpn, send(&a, 8, 1), &mut n.mem)
        .unwrap();
    assert!(f.run(Duration::from_secs(1)));
    assert_eq!(
        f.nodes[1].dev.poll_event(),
        Some((b.client, AsyncEvent::CommEst(b.qpn)))
    );
    assert_eq!(
        f.nodes[0].dev.poll_completion().unwrap().1.status,
        WcStatus::Success
    );
}
