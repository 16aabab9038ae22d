//! Priority flow control as the transmitter obeys it (IEEE 802.1Qbb): a paused priority's
//! packets are held, not dropped, other priorities go on, the pause ends at its time or
//! at once on a resume, and the local ACK timer does not run out during a pause.
use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

/// A connection in priority 3 (traffic class 96: DSCP 24).
fn priority_3() -> ConnOpts {
    ConnOpts {
        traffic_class: 96,
        ..ConnOpts::default()
    }
}

fn post_write(f: &mut Fabric, a: &End, b: &End, len: u32) {
    let now = f.now;
    let n = &mut f.nodes[0];
    n.dev
        .post_send(now, a.qpn, write_wr(1, a, b, len), &mut n.mem)
        .expect("post_send");
}

/// Node 0's WRITE completed, successfully.
fn write_completed(f: &mut Fabric) {
    let (_, wc) = f.nodes[0]
        .dev
        .poll_completion()
        .expect("the WRITE completes");
    assert_eq!(wc.status, WcStatus::Success);
}

/// Node 0's packets sent so far.
fn sent(f: &Fabric) -> u64 {
    f.nodes[0].dev.counters().sent_pkts
}

#[test]
fn a_paused_priority_holds_its_packets_until_the_pause_ends() {
    let mut f = Fabric::new(11, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &priority_3());
    assert!(f.run(Duration::from_secs(1)));
    let before = sent(&f);
    let t0 = f.now;
    let end = t0 + Duration::from_millis(10);
    f.nodes[0].dev.pause_priority(t0, 3, end);
    assert_eq!(f.nodes[0].dev.paused_until(t0, 3), Some(end));
    post_write(&mut f, &a, &b, 4096);
    f.pump();
    assert_eq!(sent(&f), before, "nothing leaves in a paused priority");
    assert!(f.nodes[0].dev.counters().pfc_held > 0);
    assert!(f.nodes[0].dev.poll_timeout().is_some_and(|t| t <= end));
    assert!(f.run(Duration::from_secs(1)));
    write_completed(&mut f);
    assert_eq!(sent(&f), before + 4, "four packets, none lost or resent");
    assert!(f.now >= end, "not before the pause ended");
    assert_eq!(f.nodes[0].dev.counters().retransmitted_pkts, 0);
}

#[test]
fn other_priorities_go_on_and_quanta_zero_resumes_at_once() {
    let mut f = Fabric::new(12, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &priority_3());
    assert!(f.run(Duration::from_secs(1)));
    let t0 = f.now;
    let before = sent(&f);
    for p in [0, 1, 2, 4, 5, 6, 7] {
        f.nodes[0]
            .dev
            .pause_priority(t0, p, t0 + Duration::from_secs(10));
    }
    post_write(&mut f, &a, &b, 1024);
    f.pump();
    assert_eq!(sent(&f), before + 1, "priority 3 is not paused");
    f.nodes[0]
        .dev
        .pause_priority(t0, 3, t0 + Duration::from_secs(10));
    post_write(&mut f, &a, &b, 1024);
    f.pump();
    assert_eq!(sent(&f), before + 1);
    // Quanta 0: the pause ends now, the held QP goes on without waiting for a timer.
    f.nodes[0].dev.pause_priority(t0, 3, t0);
    assert_eq!(f.nodes[0].dev.paused_until(t0, 3), None);
    f.pump();
    assert_eq!(sent(&f), before + 2);
}

#[test]
fn the_ack_timer_waits_a_full_timeout_after_a_pause_ended() {
    let mut f = Fabric::new(14, 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &priority_3());
    assert!(f.run(Duration::from_secs(1)));
    post_write(&mut f, &a, &b, 2048);
    // The two packets leave (the ACK timer starts, ≈ 1 ms) and are kept back here.
    let t0 = f.now;
    let mut sent = Vec::new();
    loop {
        let n = &mut f.nodes[0];
        let mut buf = Vec::new();
        let Some(t) = n.dev.poll_transmit(t0, &mut n.mem, &mut buf) else {
            break;
        };
        buf.truncate(t.len);
        sent.push((t, buf));
    }
    assert_eq!(sent.len(), 2);
    // A pause of 0.5 ms, over when the timer runs out (as when a refresh comes late): the
    // timer waits a full timeout after the pause's end instead of retransmitting.
    let end = t0 + Duration::from_micros(500);
    f.nodes[0].dev.pause_priority(t0, 3, end);
    let t1 = t0 + Duration::from_micros(1100);
    {
        let n = &mut f.nodes[0];
        n.dev.handle_timeout(t1, &mut n.mem);
        assert_eq!(n.dev.counters().ack_timeouts, 0);
        let mut buf = Vec::new();
        assert!(n.dev.poll_transmit(t1, &mut n.mem, &mut buf).is_none());
        assert!(n.dev.poll_timeout().is_some_and(|t| t > t1 && t > end));
    }
    // The packets arrive, the ACK comes back: done, nothing resent.
    f.now = t1;
    for (t, bytes) in &sent {
        let n = &mut f.nodes[1];
        let d = Datagram {
            src: t.src,
            dst: t.dst,
            payload: bytes,
        };
        n.dev.handle_datagram(t1, &d, &mut n.mem);
    }
    assert!(f.run(Duration::from_secs(1)));
    write_completed(&mut f);
    let c = f.nodes[0].dev.counters();
    assert_eq!((c.ack_timeouts, c.retransmitted_pkts), (0, 0), "{c:?}");
}

#[test]
fn the_ack_timer_does_not_run_out_while_the_sender_is_paused() {
    let mut f = Fabric::new(13, 2, Mtu::Mtu1024, LinkModel::default());
    // ACK timeout 4.096 µs × 2^8 ≈ 1 ms, 7 retries: a 50 ms pause of both directions
    // would exceed the retries if the timer ran during it.
    let (a, b) = connect(&mut f, &priority_3());
    assert!(f.run(Duration::from_secs(1)));
    post_write(&mut f, &a, &b, 16 * 1024);
    f.pump();
    let t0 = f.now;
    let end = t0 + Duration::from_millis(50);
    f.nodes[0].dev.pause_priority(t0, 3, end);
    f.nodes[1].dev.pause_priority(t0, 3, end);
    assert!(f.run(Duration::from_secs(1)));
    write_completed(&mut f);
    let c = f.nodes[0].dev.counters();
    assert_eq!((c.ack_timeouts, c.retransmitted_pkts), (0, 0), "{c:?}");
    assert!(f.now >= end);
}
