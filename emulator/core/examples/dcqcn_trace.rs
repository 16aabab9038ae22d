//! Writes the two-sender DCQCN scenario as CSV on standard output, with and without
//! DCQCN: `time_us,config,sender,throughput_mbps,rate_mbps` (rate empty while unpaced).
//! `docs/congestion.png` is drawn from it by `docs/congestion_plot.py`.
//!
//! `cargo run --release -p emu-core --example dcqcn_trace > /tmp/dcqcn.csv`

use emu_core::sim::incast::Incast;

fn main() {
    let senders = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    println!("time_us,config,sender,throughput_mbps,rate_mbps");
    for dcqcn in [true, false] {
        let report = Incast::new(senders, dcqcn).run();
        let config = if dcqcn { "dcqcn" } else { "off" };
        for s in &report.samples {
            let rate = s.rate_mbps.map(|r| r.to_string()).unwrap_or_default();
            println!(
                "{},{config},{},{},{rate}",
                s.at_us, s.sender, s.throughput_mbps
            );
        }
        eprintln!(
            "{config}: {:?} Mbit/s, queue max {} mean {} B, marked {}, dropped {}, \
             retransmitted {}, CNPs sent {} handled {} ignored {}, cuts {}",
            report.throughput_mbps,
            report.queue.max_depth,
            report.queue.mean_depth(),
            report.queue.marked,
            report.queue.dropped,
            report.senders.retransmitted_pkts,
            report.receiver.np_cnp_sent,
            report.senders.rp_cnp_handled,
            report.senders.rp_cnp_ignored,
            report.senders.rp_rate_cuts,
        );
    }
}
