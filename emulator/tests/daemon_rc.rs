//! Traffic between two QPs of two clients on one daemon, through the real UDP loopback:
//! RC SEND/RECV, WRITE, WRITE_WITH_IMM, READ and both atomics, UC, UD and SRQ, with data
//! checked in the applications' memory.

mod common;

use common::side::*;
use common::*;
use std::time::Duration;
use wire::client::slot::Sge;
use wire::client::verbs::{qp_type, wc_flags, wc_opcode, wc_status, wr_opcode};
use wire::client::{AhAttr, GlobalRoute, ReplyBody, RequestBody};

#[test]
fn rc_send_write_read_and_atomics_between_two_clients_over_udp_loopback() {
    let d = TestDaemon::start();
    let (mut a, mut b) = pair(&d, qp_type::RC, false);

    // SEND / RECV, 3000 bytes over MTU 1024 (three packets).
    b.post_recv(100, 0, 4096);
    a.fill(0, 3000, 1);
    let sge = [Sge {
        addr: a.addr(0),
        length: 3000,
        lkey: a.lkey,
    }];
    a.post_send(wqe(1, wr_opcode::SEND, &sge));
    let rc = b.poll();
    assert_eq!(
        (rc.wr_id, rc.status, rc.opcode, rc.byte_len, rc.qp_num),
        (100, wc_status::SUCCESS, wc_opcode::RECV, 3000, b.qpn)
    );
    let sc = a.poll();
    assert_eq!(
        (sc.wr_id, sc.status, sc.opcode),
        (1, wc_status::SUCCESS, wc_opcode::SEND)
    );
    assert_eq!(b.read(0, 3000), pattern(3000, 1));

    // RDMA WRITE, 5000 bytes from two SGEs.
    a.fill(8192, 5000, 2);
    let sges = [
        Sge {
            addr: a.addr(8192),
            length: 2000,
            lkey: a.lkey,
        },
        Sge {
            addr: a.addr(10192),
            length: 3000,
            lkey: a.lkey,
        },
    ];
    let mut w = wqe(2, wr_opcode::RDMA_WRITE, &sges);
    w.remote_addr = b.addr(8192);
    w.rkey = b.rkey;
    a.post_send(w);
    let c = a.poll();
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (2, wc_status::SUCCESS, wc_opcode::RDMA_WRITE)
    );
    assert_eq!(b.read(8192, 5000), pattern(5000, 2));

    // RDMA WRITE with immediate: consumes a receive at B.
    b.post_recv(101, 0, 16);
    a.fill(14000, 100, 3);
    let sge = [Sge {
        addr: a.addr(14000),
        length: 100,
        lkey: a.lkey,
    }];
    let mut w = wqe(3, wr_opcode::RDMA_WRITE_WITH_IMM, &sge);
    w.remote_addr = b.addr(14000);
    w.rkey = b.rkey;
    w.imm_data = 0x1234_5678;
    a.post_send(w);
    let rc = b.poll();
    assert_eq!(
        (rc.wr_id, rc.status, rc.opcode),
        (101, wc_status::SUCCESS, wc_opcode::RECV_RDMA_WITH_IMM)
    );
    assert!(rc.wc_flags & wc_flags::WITH_IMM != 0);
    assert_eq!(rc.imm_data, 0x1234_5678);
    assert_eq!(a.poll().wr_id, 3);
    assert_eq!(b.read(14000, 100), pattern(100, 3));

    // RDMA READ, 6000 bytes from B into A.
    b.fill(16384, 6000, 4);
    let sge = [Sge {
        addr: a.addr(32768),
        length: 6000,
        lkey: a.lkey,
    }];
    let mut r = wqe(4, wr_opcode::RDMA_READ, &sge);
    r.remote_addr = b.addr(16384);
    r.rkey = b.rkey;
    a.post_send(r);
    let c = a.poll();
    assert_eq!(
        (c.wr_id, c.status, c.opcode, c.byte_len),
        (4, wc_status::SUCCESS, wc_opcode::RDMA_READ, 6000)
    );
    assert_eq!(a.read(32768, 6000), pattern(6000, 4));

    // FETCH_AND_ADD then COMPARE_AND_SWAP on a u64 at B.
    b.buf[40960..40968].copy_from_slice(&100u64.to_ne_bytes());
    let sge = [Sge {
        addr: a.addr(50000),
        length: 8,
        lkey: a.lkey,
    }];
    let mut f = wqe(5, wr_opcode::ATOMIC_FETCH_AND_ADD, &sge);
    f.remote_addr = b.addr(40960);
    f.rkey = b.rkey;
    f.compare_add = 5;
    a.post_send(f);
    let c = a.poll();
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (5, wc_status::SUCCESS, wc_opcode::FETCH_ADD)
    );
    assert_eq!(
        u64::from_ne_bytes(a.read(50000, 8).try_into().unwrap()),
        100
    );
    assert_eq!(
        u64::from_ne_bytes(b.read(40960, 8).try_into().unwrap()),
        105
    );
    let mut s = wqe(6, wr_opcode::ATOMIC_CMP_AND_SWP, &sge);
    s.remote_addr = b.addr(40960);
    s.rkey = b.rkey;
    s.compare_add = 105;
    s.swap = 7;
    a.post_send(s);
    let c = a.poll();
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (6, wc_status::SUCCESS, wc_opcode::COMP_SWAP)
    );
    assert_eq!(
        u64::from_ne_bytes(a.read(50000, 8).try_into().unwrap()),
        105
    );
    assert_eq!(u64::from_ne_bytes(b.read(40960, 8).try_into().unwrap()), 7);

    // A wrong rkey is a remote access error, and the daemon counted real packets.
    let sge = [Sge {
        addr: a.addr(0),
        length: 8,
        lkey: a.lkey,
    }];
    let mut bad = wqe(7, wr_opcode::RDMA_WRITE, &sge);
    bad.remote_addr = b.addr(0);
    bad.rkey = b.rkey ^ 0x0100;
    a.post_send(bad);
    let c = a.poll();
    assert_eq!((c.wr_id, c.status), (7, wc_status::REM_ACCESS_ERR));
    let ReplyBody::Stat(sets) =
        a.c.call(
            RequestBody::Stat {
                device: Some("rxe0".into()),
                qpn: None,
            },
            &[],
        )
        .unwrap()
        .0
    else {
        panic!()
    };
    let get = |k: &str| {
        sets[0]
            .counters
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| *v)
            .unwrap()
    };
    assert!(get("sent_pkts") >= 10 && get("rcvd_pkts") >= 10, "{sets:?}");
    assert_eq!(get("udp_tx_errors"), 0);
    d.stop();
}

#[test]
fn uc_send_and_write_between_two_clients() {
    let d = TestDaemon::start();
    let (mut a, b) = pair(&d, qp_type::UC, false);
    b.post_recv(10, 0, 4096);
    a.fill(0, 2500, 9);
    let sge = [Sge {
        addr: a.addr(0),
        length: 2500,
        lkey: a.lkey,
    }];
    a.post_send(wqe(1, wr_opcode::SEND, &sge));
    let rc = b.poll();
    assert_eq!(
        (rc.wr_id, rc.status, rc.byte_len),
        (10, wc_status::SUCCESS, 2500)
    );
    assert_eq!(a.poll().wr_id, 1);
    let mut w = wqe(2, wr_opcode::RDMA_WRITE, &sge);
    w.remote_addr = b.addr(20000);
    w.rkey = b.rkey;
    a.post_send(w);
    assert_eq!(a.poll().status, wc_status::SUCCESS);
    let landed = wait_for(Duration::from_secs(5), || {
        (b.read(20000, 2500) == pattern(2500, 9)).then_some(())
    });
    assert!(
        landed.is_some(),
        "UC write lands (UC completes at the requester without an ACK)"
    );
    assert_eq!(b.read(0, 2500), pattern(2500, 9));
    d.stop();
}

#[test]
fn ud_send_carries_a_grh_and_the_source_qp() {
    let d = TestDaemon::start();
    let (mut a, b) = pair(&d, qp_type::UD, false);
    let ah_attr = AhAttr {
        grh: GlobalRoute {
            dgid: b.gid,
            sgid_index: 0,
            hop_limit: 64,
            ..GlobalRoute::default()
        },
        is_global: 1,
        port_num: 1,
        ..AhAttr::default()
    };
    let ReplyBody::Ah { handle: ah } =
        a.c.call(
            RequestBody::CreateAh {
                pd: a.pd,
                attr: ah_attr,
            },
            &[],
        )
        .unwrap()
        .0
    else {
        panic!()
    };
    b.post_recv(20, 0, 40 + 512);
    a.fill(1000, 512, 5);
    let sge = [Sge {
        addr: a.addr(1000),
        length: 512,
        lkey: a.lkey,
    }];
    let mut s = wqe(1, wr_opcode::SEND, &sge);
    s.ah = ah.0;
    s.remote_qpn = b.qpn;
    s.remote_qkey = 0x1111_1111;
    a.post_send(s);
    let rc = b.poll();
    assert_eq!(
        (rc.wr_id, rc.status, rc.opcode, rc.byte_len, rc.src_qp),
        (20, wc_status::SUCCESS, wc_opcode::RECV, 552, a.qpn)
    );
    assert!(rc.wc_flags & wc_flags::GRH != 0);
    assert_eq!(b.read(40, 512), pattern(512, 5));
    assert_eq!(a.poll().wr_id, 1);
    // An AH handle of another session is refused with an error completion.
    let mut s = wqe(2, wr_opcode::SEND, &sge);
    s.ah = b.qp.0;
    s.remote_qpn = b.qpn;
    a.post_send(s);
    assert_ne!(a.poll().status, wc_status::SUCCESS);
    d.stop();
}

#[test]
fn receives_through_a_shared_receive_queue() {
    let d = TestDaemon::start();
    let mut a = Side::new(&d);
    let mut b = Side::build(&d, qp_type::RC, false, true);
    let (aq, ag, bq, bg) = (a.qpn, a.gid, b.qpn, b.gid);
    a.connect(bq, bg);
    b.connect(aq, ag);
    for i in 0..4 {
        b.post_recv(200 + i, 1024 * i as usize, 1024);
    }
    for i in 0..4u64 {
        a.fill(0, 100, i as u8);
        let sge = [Sge {
            addr: a.addr(0),
            length: 100,
            lkey: a.lkey,
        }];
        a.post_send(wqe(i, wr_opcode::SEND, &sge));
        assert_eq!(a.poll().status, wc_status::SUCCESS);
        let rc = b.poll();
        assert_eq!(
            (rc.wr_id, rc.status, rc.byte_len, rc.qp_num),
            (200 + i, wc_status::SUCCESS, 100, b.qpn)
        );
        assert_eq!(b.read(1024 * i as usize, 100), pattern(100, i as u8));
    }
    d.stop();
}
