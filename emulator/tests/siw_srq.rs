//! siw devices' shared receive queues through the device's `Nic` (`SiwNic`) over real
//! loopback TCP: two QPs of one device on one SRQ, each connected to a QP of another
//! device. Receives are taken in posting order whichever QP a Send came to, the limit
//! event reaches the SRQ's owner as `IBV_EVENT_SRQ_LIMIT_REACHED` on the SRQ, the SRQ is
//! EBUSY while its QPs exist, and a QP moved to ERROR flushes none of the SRQ's receives.

mod siw_host;

use emulator::daemon::devices::nic::{EventElement, Nic};
use emulator::daemon::siw::ConnParams;
use siw_host::*;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use wire::client::slot::{Sge, SgeList};
use wire::client::verbs::{event_type, qp_attr_mask, qp_state, wc_opcode, wc_status};
use wire::client::{QpAttr, SrqAttr};

const LIMIT: Duration = Duration::from_secs(10);

/// Connects A's QP `a_qp` to B's QP `b_qp` through B's listener at `addr`.
fn connect(a: &mut Host, a_qp: u32, b: &mut Host, b_qp: u32, addr: SocketAddr) {
    b.cm.clear();
    a.cm.clear();
    a.nic
        .connect(
            a_qp,
            SocketAddr::new(LO, 0),
            addr,
            &ConnParams::default(),
            true,
        )
        .unwrap();
    run_until(&mut [a, b], "the connect request", LIMIT, |h| {
        h[1].request().is_some()
    });
    let conn = b.request().unwrap();
    b.accept_on(conn, b_qp);
    run_until(&mut [a, b], "established", LIMIT, |h| {
        h[0].established() && h[1].established()
    });
}

/// B's receive completions so far: (wr_id, status, opcode, byte_len, qp_num).
fn recvs(b: &Host) -> Vec<(u64, u32, u32, u32, u32)> {
    b.wcs
        .iter()
        .filter(|w| w.opcode & wc_opcode::RECV != 0)
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num))
        .collect()
}

#[test]
fn siw_qps_share_an_srq_with_its_limit_event_and_error_flush() {
    let mut a = Host::new("siw_a");
    let mut b = Host::new("siw_b");
    let attr = SrqAttr {
        max_wr: 8,
        max_sge: 1,
        srq_limit: 0,
    };
    let (srq, _) = b.nic.create_srq(OWNER, b.pd, &attr).unwrap();
    let (b1, b2) = (b.add_qp(Some(srq)), b.add_qp(Some(srq)));
    let (a1, a2) = (a.qpn, a.add_qp(None));
    let (_l, addr) = b.nic.listen(SocketAddr::new(LO, 0), 16).unwrap();
    connect(&mut a, a1, &mut b, b1, addr);
    connect(&mut a, a2, &mut b, b2, addr);
    for i in 0..4u64 {
        let sge = [Sge {
            addr: BASE + i * 4096,
            length: 4096,
            lkey: b.lkey,
        }];
        b.nic
            .post_srq_recv(srq, 10 + i, SgeList::Slice(&sge))
            .unwrap();
    }
    let limit = SrqAttr {
        srq_limit: 2,
        ..attr
    };
    b.nic.modify_srq(srq, &limit, 2).unwrap();
    // Sends on A's QPs 1, 2, 1: receives 10, 11, 12 in that order, on B's QPs 1, 2, 1.
    let mut expected = Vec::new();
    for (n, (aq, bq)) in [(a1, b1), (a2, b2), (a1, b1)].into_iter().enumerate() {
        let data = pattern(1000 + 100 * n, n as u8);
        let off = 512 * 1024;
        a.mem.0[off..off + data.len()].copy_from_slice(&data);
        a.post_send_on(aq, n as u64, off, data.len() as u32);
        run_until(&mut [&mut a, &mut b], "the receive", LIMIT, |h| {
            recvs(h[1]).len() == n + 1
        });
        let at = n * 4096;
        assert_eq!(&b.mem.0[at..at + data.len()], &data[..], "message {n}");
        expected.push((
            10 + n as u64,
            wc_status::SUCCESS,
            wc_opcode::RECV,
            data.len() as u32,
            bq,
        ));
        let limit_event = (OWNER, event_type::SRQ_LIMIT_REACHED, EventElement::Srq(srq));
        // 4 posted, limit 2: the third receive leaves 1.
        assert_eq!(b.events.contains(&limit_event), n == 2, "after receive {n}");
    }
    assert_eq!(recvs(&b), expected);
    assert_eq!(b.nic.query_srq(srq).unwrap().srq_limit, 0, "disarmed");
    assert_eq!(b.nic.destroy_srq(srq), Err(libc::EBUSY));
    // B's QP 1 to ERROR: the SRQ keeps receive 13, which QP 2 then takes.
    let err = QpAttr {
        qp_state: qp_state::ERR,
        ..QpAttr::default()
    };
    b.nic
        .modify_qp(Instant::now(), b1, &err, qp_attr_mask::STATE)
        .unwrap();
    run_for(&mut a, &mut b, Duration::from_millis(200));
    assert_eq!(
        recvs(&b).len(),
        3,
        "nothing of the SRQ flushed: {:?}",
        b.wcs
    );
    assert_eq!(b.nic.srq_outstanding(srq), Some(1));
    a.post_send_on(a2, 9, 0, 64);
    run_until(&mut [&mut a, &mut b], "the last receive", LIMIT, |h| {
        recvs(h[1]).len() == 4
    });
    assert_eq!(
        recvs(&b)[3],
        (13, wc_status::SUCCESS, wc_opcode::RECV, 64, b2)
    );
    b.nic.destroy_qp(b1).unwrap();
    b.nic.destroy_qp(b2).unwrap();
    b.nic.destroy_srq(srq).unwrap();
}
