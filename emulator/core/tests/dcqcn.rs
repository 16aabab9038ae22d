//! The DCQCN reaction point in the device: a CNP slows the QP down and the requester paces
//! its packets (poll_transmit holds them, poll_timeout says when the next is due); the rate
//! recovers and the QP sends unpaced again; with DCQCN off a CNP is counted and ignored.
//! Then the incast scenarios through a marking switch queue ([`Incast`]): with DCQCN the
//! queue stays bounded and the port is shared fairly, without it the queue overflows and
//! packets are retransmitted; the whole matrix is the snapshot
//! `tests/snapshots/dcqcn.snapshot` (regenerate with `UPDATE_SNAPSHOTS=1`).
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::Duration;

use emu_core::sim::incast::{bottleneck, Incast, IncastReport, LINE_RATE};
use emu_core::sim::*;
use emu_core::*;

/// Nodes 0 and 1 connected, node 0 with DCQCN `params`, and `n` 4 KiB WRITEs posted on
/// node 0's QP (not yet sent).
fn pair(params: DcqcnParams, n: u32) -> (Fabric, End, End) {
    let mut f = Fabric::new(21, 2, Mtu::Mtu1024, LinkModel::default());
    f.nodes[0].dev.set_dcqcn(params).unwrap();
    let (a, b) = connect(&mut f, &ConnOpts::default());
    assert!(f.run(Duration::from_secs(1)));
    let now = f.now;
    let node = &mut f.nodes[0];
    for i in 0..n {
        let wr = write_wr(u64::from(i), &a, &b, 4096);
        node.dev.post_send(now, a.qpn, wr, &mut node.mem).unwrap();
    }
    (f, a, b)
}

/// Makes node 1 answer a marked packet of `b`'s with a CNP and hands it to node 0.
fn deliver_cnp(f: &mut Fabric, b: &End) {
    let now = f.now;
    let mut payload = vec![0u8; 32];
    payload[0] = 0x0a;
    payload[5..8].copy_from_slice(&b.qpn.0.to_be_bytes()[1..]);
    let (ip0, ip1) = (f.nodes[0].ip, f.nodes[1].ip);
    let n1 = &mut f.nodes[1];
    n1.dev.congestion_experienced(
        now,
        &Datagram {
            src: std::net::SocketAddr::new(ip0, 49152),
            dst: std::net::SocketAddr::new(ip1, 4791),
            payload: &payload,
        },
    );
    let mut buf = Vec::new();
    let t = n1
        .dev
        .poll_transmit(now, &mut n1.mem, &mut buf)
        .expect("a CNP");
    let n0 = &mut f.nodes[0];
    n0.dev.handle_datagram(
        now,
        &Datagram {
            src: t.src,
            dst: t.dst,
            payload: &buf[..t.len],
        },
        &mut n0.mem,
    );
}

const LINE_MBPS: u32 = 1000;

fn line_rate() -> DcqcnParams {
    DcqcnParams {
        max_rate_mbps: LINE_MBPS,
        ..DcqcnParams::default()
    }
}

#[test]
fn a_cnp_paces_the_requester_to_the_cut_rate() {
    let (mut f, a, b) = pair(line_rate(), 4);
    assert_eq!(
        f.nodes[0].dev.qp_rate(a.qpn),
        None,
        "unpaced before any CNP"
    );
    deliver_cnp(&mut f, &b);
    let c = *f.nodes[0].dev.counters();
    assert_eq!(
        (c.rp_cnp_handled, c.rp_cnp_ignored, c.rp_rate_cuts),
        (1, 0, 1)
    );
    // α = 1023/1024 at the first CNP: 1 Gbit/s · (1 − 1023/2048).
    let rate = f.nodes[0].dev.qp_rate(a.qpn).expect("paced");
    assert_eq!(rate, 1_000_000_000 * 1025 / 2048);
    // The first packet leaves at once; the second is held until its time.
    let now = f.now;
    let mut buf = Vec::new();
    let n0 = &mut f.nodes[0];
    let t = n0.dev.poll_transmit(now, &mut n0.mem, &mut buf).unwrap();
    let gap = Duration::from_nanos(t.len as u64 * 8 * 1_000_000_000 / rate);
    assert!(n0.dev.poll_transmit(now, &mut n0.mem, &mut buf).is_none());
    assert_eq!(n0.dev.poll_timeout(), Some(now + gap));
    assert_eq!(n0.dev.counters().rp_paced_holds, 1);
    // Not before it is due, then exactly one.
    let early = now + gap - Duration::from_nanos(1);
    n0.dev.handle_timeout(early, &mut n0.mem);
    assert!(n0.dev.poll_transmit(early, &mut n0.mem, &mut buf).is_none());
    let due = now + gap;
    n0.dev.handle_timeout(due, &mut n0.mem);
    assert!(n0.dev.poll_transmit(due, &mut n0.mem, &mut buf).is_some());
    assert!(n0.dev.poll_transmit(due, &mut n0.mem, &mut buf).is_none());
}

#[test]
fn paced_writes_take_as_long_as_the_rate_says() {
    let (mut f, a, b) = pair(line_rate(), 0);
    deliver_cnp(&mut f, &b);
    let rate = f.nodes[0].dev.qp_rate(a.qpn).unwrap();
    let now = f.now;
    let node = &mut f.nodes[0];
    let mut wr = write_wr(7, &a, &b, 64 << 10);
    wr.send_flags = SendFlags::SIGNALED;
    node.dev.post_send(now, a.qpn, wr, &mut node.mem).unwrap();
    let start = f.now;
    while f.nodes[0].dev.poll_completion().is_none() {
        assert!(f.step(), "the WRITE completes");
    }
    let took = f.now - start;
    // 64 packets of 1024 payload bytes, BTH and ICRC; the first with a RETH.
    let bits = (64 * (12 + 1024 + 4) + 16) * 8;
    let at_line_rate = Duration::from_nanos(bits * 1_000_000_000 / 1_000_000_000);
    let at_cut_rate = Duration::from_nanos(bits * 1_000_000_000 / rate);
    // The rate rises on the way (fast recovery every 300 µs, half way back to the line
    // rate): well slower than the line rate, not slower than the cut rate (plus the round
    // trip of the last packet and its ACK).
    assert!(
        took > at_line_rate + Duration::from_micros(150),
        "{took:?} vs {at_line_rate:?}"
    );
    assert!(
        took <= at_cut_rate + Duration::from_micros(20),
        "{took:?} > {at_cut_rate:?}"
    );
}

#[test]
fn the_rate_recovers_and_the_qp_sends_unpaced_again() {
    let (mut f, a, b) = pair(line_rate(), 0);
    deliver_cnp(&mut f, &b);
    assert!(f.nodes[0].dev.qp_rate(a.qpn).is_some());
    assert!(f.nodes[0].dev.armed_timers() > 0, "α and rate timers run");
    // No more CNPs: α decays to 0 and the rate climbs back to the line rate.
    assert!(f.run(Duration::from_secs(1)), "the device goes idle");
    assert_eq!(f.nodes[0].dev.qp_rate(a.qpn), None);
    assert_eq!(f.nodes[0].dev.armed_timers(), 0);
}

#[test]
fn without_a_line_rate_the_first_cut_starts_from_the_measured_rate() {
    let mut f = Fabric::new(22, 2, Mtu::Mtu1024, LinkModel::default());
    f.nic_rate = Some(LINE_RATE); // 1 Gbit/s
    let (a, b) = connect(&mut f, &ConnOpts::default());
    assert!(f.run(Duration::from_secs(1)));
    let now = f.now;
    let node = &mut f.nodes[0];
    for i in 0..64 {
        let wr = write_wr(i, &a, &b, 4096);
        node.dev.post_send(now, a.qpn, wr, &mut node.mem).unwrap();
    }
    f.run(Duration::from_micros(500));
    deliver_cnp(&mut f, &b);
    // Measured ≈ 1 Gbit/s, cut by about half.
    let rate = f.nodes[0].dev.qp_rate(a.qpn).expect("paced");
    assert!((400_000_000..=600_000_000).contains(&rate), "{rate}");
}

#[test]
fn with_dcqcn_off_a_cnp_is_counted_and_ignored() {
    let off = DcqcnParams {
        enabled: false,
        ..line_rate()
    };
    let (mut f, a, b) = pair(off, 4);
    deliver_cnp(&mut f, &b);
    let c = *f.nodes[0].dev.counters();
    assert_eq!(
        (c.rp_cnp_handled, c.rp_cnp_ignored, c.rp_rate_cuts),
        (0, 1, 0)
    );
    assert_eq!(f.nodes[0].dev.qp_rate(a.qpn), None);
    // Everything leaves at once.
    let now = f.now;
    let mut buf = Vec::new();
    let n0 = &mut f.nodes[0];
    let mut sent = 0;
    while n0.dev.poll_transmit(now, &mut n0.mem, &mut buf).is_some() {
        sent += 1;
    }
    assert_eq!(sent, 16);
}

#[test]
fn invalid_parameters_are_refused_and_the_old_ones_kept() {
    let (mut f, _, _) = pair(line_rate(), 0);
    let bad = DcqcnParams {
        g: 2000,
        ..line_rate()
    };
    assert!(f.nodes[0].dev.set_dcqcn(bad).is_err());
    assert_eq!(*f.nodes[0].dev.dcqcn(), line_rate());
}

#[test]
fn turning_dcqcn_off_releases_paced_qps() {
    let (mut f, a, b) = pair(line_rate(), 4);
    deliver_cnp(&mut f, &b);
    assert!(f.nodes[0].dev.qp_rate(a.qpn).is_some());
    f.nodes[0]
        .dev
        .set_dcqcn(DcqcnParams {
            enabled: false,
            ..line_rate()
        })
        .unwrap();
    assert_eq!(f.nodes[0].dev.qp_rate(a.qpn), None);
    assert_eq!(f.nodes[0].dev.armed_timers(), 0);
}

/// The four scenarios, run once.
fn scenarios() -> &'static [(usize, bool, IncastReport)] {
    static RUNS: OnceLock<Vec<(usize, bool, IncastReport)>> = OnceLock::new();
    RUNS.get_or_init(|| {
        let mut runs = Vec::new();
        for n in [2, 4] {
            for on in [true, false] {
                runs.push((n, on, Incast::new(n, on).run()));
            }
        }
        runs
    })
}

#[test]
fn with_dcqcn_the_queue_stays_bounded_and_the_port_is_shared_fairly() {
    let capacity = bottleneck(0).capacity;
    for (n, _, r) in scenarios().iter().filter(|(_, on, _)| *on) {
        let total: u64 = r.throughput_mbps.iter().sum();
        let share = total / *n as u64;
        assert!(
            r.queue.max_depth < capacity && r.queue.dropped == 0,
            "{n} senders: {r:?}"
        );
        for t in &r.throughput_mbps {
            assert!(
                t * 10 >= share * 8 && t * 10 <= share * 12,
                "{n} senders: {:?} not within ±20% of {share}",
                r.throughput_mbps
            );
        }
        assert!(total >= 700, "{n} senders use the port: {total} Mbit/s");
        assert!(r.receiver.np_cnp_sent > 0);
        // Every CNP is handled but those still on the wire when the run stops.
        let (sent, handled) = (r.receiver.np_cnp_sent, r.senders.rp_cnp_handled);
        assert!(
            handled <= sent && handled + *n as u64 >= sent,
            "{sent} {handled}"
        );
        assert_eq!(r.senders.rp_cnp_ignored, 0);
        assert!(r.senders.rp_rate_cuts > 0 && r.senders.rp_paced_holds > 0);
    }
}

#[test]
fn without_dcqcn_the_queue_overflows_and_packets_are_retransmitted() {
    let capacity = bottleneck(0).capacity;
    for (n, _, r) in scenarios().iter().filter(|(_, on, _)| !*on) {
        assert!(r.queue.dropped > 0, "{n} senders: {r:?}");
        assert!(r.queue.max_depth + 1100 > capacity, "{n} senders: full");
        assert!(r.senders.retransmitted_pkts > 0, "{n} senders");
        assert_eq!(r.senders.rp_cnp_handled, 0);
        let (sent, ignored) = (r.receiver.np_cnp_sent, r.senders.rp_cnp_ignored);
        assert!(
            ignored <= sent && ignored + *n as u64 >= sent,
            "{sent} {ignored}"
        );
    }
}

fn table() -> String {
    let mut t = String::from(
        "# N senders into one receiver, 1 Gbit/s NICs and switch port, 200 KB queue marking\n\
         # CE from 5 KB to 50 KB (P_max 10%); 80 ms simulated, throughput after 20 ms.\n\
         # senders | DCQCN | Mbit/s per sender | queue max KB | queue mean KB | marked | \
         dropped | retransmitted | retry exceeded | CNPs sent | CNPs handled | CNPs ignored | \
         rate cuts\n",
    );
    for (n, on, r) in scenarios() {
        let rates: Vec<String> = r.throughput_mbps.iter().map(u64::to_string).collect();
        writeln!(
            t,
            "{n} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}",
            if *on { "on" } else { "off" },
            rates.join(" "),
            r.queue.max_depth / 1000,
            r.queue.mean_depth() / 1000,
            r.queue.marked,
            r.queue.dropped,
            r.senders.retransmitted_pkts,
            r.senders.retry_exceeded,
            r.receiver.np_cnp_sent,
            r.senders.rp_cnp_handled,
            r.senders.rp_cnp_ignored,
            r.senders.rp_rate_cuts,
        )
        .unwrap();
    }
    t
}

#[test]
fn incast_scenarios_match_the_snapshot() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/snapshots/dcqcn.snapshot"
    );
    let got = table();
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(path, &got).unwrap();
    }
    let want = std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(
        got, want,
        "the incast table changed: review it and regenerate with UPDATE_SNAPSHOTS=1"
    );
}
