//! The device's window of request packets in flight over all its RC QPs: many QPs with
//! full windows of their own do not flood the peer, and everything still completes.

use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

/// `requester::DEVICE_WINDOW`.
const DEVICE_WINDOW: usize = 4096;
const QPS: usize = 20;
const WRITES: u64 = 160;

/// Twenty QPs with 160 WRITEs of 4 KiB each (4 packets at MTU 1024) want 20 × 512
/// packets in flight, their own windows' worth. Polled with no ACK coming back, the
/// device sends its window's worth (give or take the message that crossed it) and then
/// holds the rest, counted. Run to the end, every WRITE completes.
#[test]
fn a_device_keeps_at_most_its_window_of_request_packets_in_flight() {
    let mut f = Fabric::new(7, 2, Mtu::Mtu1024, LinkModel::default());
    let ends: Vec<(End, End)> = (0..QPS)
        .map(|_| connect(&mut f, &ConnOpts::default()))
        .collect();
    let now = f.now;
    for (a, b) in &ends {
        for k in 0..WRITES {
            let mut wr = SendWr::new(WrId(k), WrOpcode::RdmaWrite);
            wr.send_flags = SendFlags::SIGNALED;
            wr.sg_list = vec![Sge {
                addr: a.base,
                length: 4096,
                lkey: a.mr.lkey,
            }];
            wr.rdma = RdmaInfo {
                remote_addr: b.base,
                rkey: b.mr.rkey,
            };
            let n = &mut f.nodes[a.node];
            n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
        }
    }
    let n = &mut f.nodes[0];
    let mut buf = Vec::new();
    let mut sent = 0;
    while n.dev.poll_transmit(now, &mut n.mem, &mut buf).is_some() {
        sent += 1;
    }
    assert!(
        (DEVICE_WINDOW..DEVICE_WINDOW + 4).contains(&sent),
        "{sent} packets left before any ACK"
    );
    assert!(n.dev.counters().device_window_waits > 0);
    // What left above never arrives: the ACK timeouts resend it.
    assert!(f.run(Duration::from_secs(60)), "the fabric never went idle");
    let mut done = 0;
    while let Some((_, wc)) = f.nodes[0].dev.poll_completion() {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        done += 1;
    }
    assert_eq!(done, QPS as u64 * WRITES);
}
