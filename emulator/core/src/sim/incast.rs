//! The DCQCN scenario: N senders write into one receiver through a switch port with a
//! marking queue ([`MarkingQueue`]); every sender's NIC runs at the port's rate, so the
//! port is the bottleneck. Used by the congestion tests and by the `dcqcn_trace` example
//! that draws `docs/congestion.png`.

use std::time::Duration;

use super::fabric::{connect_nodes, write_wr, ConnOpts, Fabric, LinkModel};
use super::queue::{MarkingQueue, QueueStats};
use crate::attr::*;
use crate::types::*;
use crate::DcqcnParams;

/// The line rate of every NIC and of the switch port, bytes per second (1 Gbit/s).
pub const LINE_RATE: u64 = 125_000_000;

/// The switch port in front of the receiver: 200 KB of buffer, marking from 5 KB (the
/// DCQCN paper's K_min) rising to every packet at 50 KB with P_max 10% (the paper's
/// 200 KB and 1% scaled to a link 40 times slower than its 40 Gbit/s).
pub fn bottleneck(to: usize) -> MarkingQueue {
    MarkingQueue {
        to,
        rate: LINE_RATE,
        capacity: 200_000,
        kmin: 5_000,
        kmax: 50_000,
        pmax: 0.1,
    }
}

/// One run of the scenario.
#[derive(Debug, Clone, Copy)]
pub struct Incast {
    /// Number of senders (nodes `0..senders`; the receiver is node `senders`).
    pub senders: usize,
    /// DCQCN at the senders' reaction points.
    pub dcqcn: bool,
    /// Fabric seed (marking draws).
    pub seed: u64,
    /// Simulated time to run.
    pub duration: Duration,
    /// Throughput is measured after this much time.
    pub warmup: Duration,
    /// Time between two [`Sample`]s.
    pub sample: Duration,
}

impl Incast {
    /// `senders` senders, DCQCN on or off, 60 ms measured after 20 ms, samples every
    /// 500 µs.
    pub fn new(senders: usize, dcqcn: bool) -> Self {
        Incast {
            senders,
            dcqcn,
            seed: 10,
            duration: Duration::from_millis(80),
            warmup: Duration::from_millis(20),
            sample: Duration::from_micros(500),
        }
    }
}

/// What one sender did in one sample period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// End of the period, µs since the start.
    pub at_us: u64,
    /// The sender.
    pub sender: usize,
    /// Bytes per second it got into the switch queue in the period, in Mbit/s.
    pub throughput_mbps: u64,
    /// The rate DCQCN paces it at, in Mbit/s (`None`: unpaced, at the line rate).
    pub rate_mbps: Option<u64>,
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct IncastReport {
    /// Per sender, Mbit/s into the switch queue after the warm-up (retransmissions
    /// included).
    pub throughput_mbps: Vec<u64>,
    /// What the queue saw over the whole run.
    pub queue: QueueStats,
    /// The senders' counters, summed.
    pub senders: Counters,
    /// The receiver's counters.
    pub receiver: Counters,
    /// Every sender every sample period.
    pub samples: Vec<Sample>,
}

impl Incast {
    /// Runs the scenario: RC QPs, every sender keeps 64 KiB RDMA WRITEs queued.
    pub fn run(&self) -> IncastReport {
        let n = self.senders;
        let link = LinkModel {
            delay: Duration::from_micros(2),
            ..LinkModel::default()
        };
        let mut f = Fabric::new(self.seed, n + 1, Mtu::Mtu1024, link);
        f.queue = Some(bottleneck(n));
        f.nic_rate = Some(LINE_RATE);
        let o = ConnOpts {
            depth: 512,
            // 4.2 ms: above the deepest queue's delay (200 KB at 1 Gbit/s is 1.6 ms).
            timeout: 10,
            ..ConnOpts::default()
        };
        let params = DcqcnParams {
            enabled: self.dcqcn,
            max_rate_mbps: (LINE_RATE * 8 / 1_000_000) as u32,
            // The paper's B = 10 MB: with ConnectX's 32767 B a 1 Gbit/s sender counts a
            // byte event every 262 µs, as often as a timer event, and hyper increase
            // overshoots the slow feedback of this link (the docs show both).
            byte_reset: 10_000_000,
            ..DcqcnParams::default()
        };
        let mut qps = Vec::new();
        for s in 0..n {
            f.nodes[s].dev.set_dcqcn(params).expect("valid parameters");
            let (a, b) = connect_nodes(&mut f, s, n, &o);
            let now = f.now;
            let node = &mut f.nodes[s];
            for i in 0..o.depth {
                let wr = write_wr(u64::from(i), &a, &b, 64 << 10);
                node.dev
                    .post_send(now, a.qpn, wr, &mut node.mem)
                    .expect("post_send");
            }
            qps.push(a.qpn);
        }
        let start = f.now;
        let mut samples = Vec::new();
        let mut last = vec![0u64; n];
        let mut at_warmup = vec![0u64; n];
        let mut elapsed = Duration::ZERO;
        while elapsed < self.duration {
            elapsed += self.sample;
            let end = start + elapsed;
            while f.now < end && f.step() {}
            for (s, qpn) in qps.iter().enumerate() {
                let total = f.queue_stats.sent_by.get(&s).copied().unwrap_or(0);
                samples.push(Sample {
                    at_us: elapsed.as_micros() as u64,
                    sender: s,
                    throughput_mbps: mbps(total - last[s], self.sample),
                    rate_mbps: f.nodes[s].dev.qp_rate(*qpn).map(|r| r / 1_000_000),
                });
                last[s] = total;
                if elapsed == self.warmup {
                    at_warmup[s] = total;
                }
            }
        }
        let measured = self.duration.saturating_sub(self.warmup);
        let mut senders = Counters::default();
        for node in &f.nodes[..n] {
            add(&mut senders, node.dev.counters());
        }
        IncastReport {
            throughput_mbps: (0..n)
                .map(|s| mbps(last[s] - at_warmup[s], measured))
                .collect(),
            queue: f.queue_stats.clone(),
            senders,
            receiver: *f.nodes[n].dev.counters(),
            samples,
        }
    }
}

fn mbps(bytes: u64, over: Duration) -> u64 {
    (u128::from(bytes) * 8 * 1_000_000 / over.as_nanos().max(1)) as u64 / 1_000
}

/// The counters the report sums.
fn add(sum: &mut Counters, c: &Counters) {
    sum.sent_pkts += c.sent_pkts;
    sum.retransmitted_pkts += c.retransmitted_pkts;
    sum.ack_timeouts += c.ack_timeouts;
    sum.retry_exceeded += c.retry_exceeded;
    sum.seq_naks_rcvd += c.seq_naks_rcvd;
    sum.rp_cnp_handled += c.rp_cnp_handled;
    sum.rp_cnp_ignored += c.rp_cnp_ignored;
    sum.rp_rate_cuts += c.rp_rate_cuts;
    sum.rp_paced_holds += c.rp_paced_holds;
}
