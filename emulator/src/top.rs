//! `rdma-emu top`: a live view of the devices and their QPs, one frame per interval.
//!
//! Rendering is separate from the terminal and from the daemon: [`Frame`] is built from one
//! round of replies (`LinkShow`, `Stat`, `QpList`), and packet rates are the difference to
//! the previous frame's counters over the time between them.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Instant;
use wire::client::verbs::qp_state;
use wire::client::{CounterSet, LinkInfo, QpSummary};

/// One refresh's worth of daemon state.
pub struct Frame {
    pub at: Instant,
    pub links: Vec<LinkInfo>,
    pub stats: Vec<CounterSet>,
    pub qps: Vec<QpSummary>,
}

/// Packet counters of the previous frame, for rates.
#[derive(Default)]
pub struct History {
    at: Option<Instant>,
    devices: HashMap<String, (u64, u64)>,
    qps: HashMap<(String, u32), (u64, u64)>,
}

fn counter(set: &CounterSet, name: &str) -> u64 {
    set.counters
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, v)| *v)
}

fn state_name(state: u32) -> &'static str {
    match state {
        qp_state::RESET => "RESET",
        qp_state::INIT => "INIT",
        qp_state::RTR => "RTR",
        qp_state::RTS => "RTS",
        qp_state::SQD => "SQD",
        qp_state::SQE => "SQE",
        qp_state::ERR => "ERR",
        _ => "?",
    }
}

fn type_name(qp_type: u32) -> &'static str {
    match qp_type {
        2 => "RC",
        3 => "UC",
        4 => "UD",
        _ => "?",
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn psn(v: Option<u32>) -> String {
    v.map_or_else(|| "-".to_string(), |p| format!("{p:#08x}"))
}

/// Per-second rate of a counter that went from `before` to `now` in `secs`.
fn rate(before: Option<u64>, now: u64, secs: f64) -> String {
    match before {
        Some(b) if secs > 0.0 => format!("{:.0}", now.saturating_sub(b) as f64 / secs),
        _ => "-".to_string(),
    }
}

impl History {
    /// The frame as text (no terminal control codes), and the history moved on to it.
    pub fn render(&mut self, f: &Frame, header: &str) -> String {
        let secs = self
            .at
            .map_or(0.0, |t| f.at.saturating_duration_since(t).as_secs_f64());
        let mut out = String::new();
        let _ = writeln!(out, "{header}\n");
        let _ = writeln!(
            out,
            "{:<10} {:<4} {:<6} {:<10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>6}",
            "DEVICE",
            "TYPE",
            "STATE",
            "NETDEV",
            "RX pkt/s",
            "TX pkt/s",
            "RETRANS",
            "RNR_NAK",
            "SEQ_NAK",
            "FAULTS"
        );
        let mut devices = HashMap::new();
        for l in &f.links {
            let set = f
                .stats
                .iter()
                .find(|s| s.device == l.name && s.qpn.is_none());
            let get = |n: &str| set.map_or(0, |s| counter(s, n));
            let (rx, tx) = (get("rcvd_pkts"), get("sent_pkts"));
            let before = self.devices.get(&l.name);
            let faults: u64 = [
                "fault_dropped",
                "fault_duplicated",
                "fault_corrupted",
                "fault_delayed",
                "fault_reordered",
                "fault_rnr_forced",
                "fault_nak_forced",
                "link_down_drops",
            ]
            .iter()
            .map(|n| get(n))
            .sum();
            let _ = writeln!(
                out,
                "{:<10} {:<4} {:<6} {:<10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>6}",
                l.name,
                l.link_type,
                if l.state == 4 { "ACTIVE" } else { "DOWN" },
                l.netdev,
                rate(before.map(|b| b.0), rx, secs),
                rate(before.map(|b| b.1), tx, secs),
                get("retransmitted_pkts"),
                get("rcvd_rnr_err"),
                get("rcvd_seq_err"),
                faults,
            );
            devices.insert(l.name.clone(), (rx, tx));
        }
        let _ = writeln!(
            out,
            "\n{:>6} {:<8} {:>7} {:<3} {:<5} {:<22} {:>6} {:>8} {:>8} {:>8} {:>6} {:>5} {:>5} {:>9} {:>9} {:>7} {:>5}",
            "QPN", "DEVICE", "PID", "T", "STATE", "PEER", "DQPN", "SQ_PSN", "UNA", "EPSN", "FLIGHT", "SQ", "RQ", "TX pkt/s", "RX pkt/s", "RETRANS", "RNR"
        );
        let mut qps = HashMap::new();
        for q in &f.qps {
            let key = (q.device.clone(), q.qpn);
            let before = self.qps.get(&key);
            let rnr = if q.rnr_waiting {
                format!("{}*", q.rnr_naks_rcvd)
            } else {
                q.rnr_naks_rcvd.to_string()
            };
            let _ = writeln!(
                out,
                "{:>6} {:<8} {:>7} {:<3} {:<5} {:<22} {:>6} {:>8} {:>8} {:>8} {:>6} {:>5} {:>5} {:>9} {:>9} {:>7} {:>5}",
                q.qpn,
                q.device,
                q.pid,
                type_name(q.qp_type),
                state_name(q.state),
                opt(q.peer),
                opt(q.dest_qpn),
                psn(q.next_psn),
                psn(q.unacked_psn),
                psn(q.expected_psn),
                q.in_flight,
                q.send_queued,
                q.recv_posted,
                rate(before.map(|b| b.0), q.sent_pkts, secs),
                rate(before.map(|b| b.1), q.rcvd_pkts, secs),
                q.retransmitted_pkts,
                rnr,
            );
            qps.insert(key, (q.sent_pkts, q.rcvd_pkts));
        }
        if f.qps.is_empty() {
            let _ = writeln!(out, "{:>6}", "(no QPs)");
        }
        self.at = Some(f.at);
        self.devices = devices;
        self.qps = qps;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn frame(at: Instant, sent: u64) -> Frame {
        Frame {
            at,
            links: vec![LinkInfo {
                name: "rxe0".into(),
                link_type: "rxe".into(),
                netdev: "lo".into(),
                state: 4,
                active_mtu: 5,
                netdev_mtu: 65536,
                gids: Vec::new(),
                mpa_crc: None,
                mpa_markers: None,
                backend: "udp".into(),
                default_tos: Some(0),
                cnp_dscp: Some(48),
            }],
            stats: vec![CounterSet {
                device: "rxe0".into(),
                qpn: None,
                counters: vec![("sent_pkts".into(), sent), ("rcvd_pkts".into(), sent / 2)],
            }],
            qps: vec![QpSummary {
                device: "rxe0".into(),
                qpn: 17,
                pid: 42,
                qp_type: 2,
                state: qp_state::RTS,
                dest_qpn: Some(18),
                peer: Some("127.0.0.1:4791".parse().unwrap()),
                next_psn: Some(0x10),
                unacked_psn: Some(0x0e),
                expected_psn: Some(0x20),
                in_flight: 2,
                send_queued: 3,
                recv_posted: 4,
                rnr_waiting: true,
                sent_pkts: sent,
                rcvd_pkts: 0,
                retransmitted_pkts: 1,
                rnr_naks_rcvd: 5,
                rnr_naks_sent: 0,
                seq_naks_rcvd: 0,
            }],
        }
    }

    #[test]
    fn rates_come_from_the_previous_frame() {
        let mut h = History::default();
        let t0 = Instant::now();
        let first = h.render(&frame(t0, 1000), "top");
        assert!(first.contains("rxe0"), "{first}");
        let row = |text: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with("17 "))
                .unwrap()
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let r = row(&first);
        assert_eq!(
            r,
            [
                "17",
                "rxe0",
                "42",
                "RC",
                "RTS",
                "127.0.0.1:4791",
                "18",
                "0x000010",
                "0x00000e",
                "0x000020",
                "2",
                "3",
                "4",
                "-",
                "-",
                "1",
                "5*"
            ]
        );
        let second = h.render(&frame(t0 + Duration::from_secs(2), 3000), "top");
        let r = row(&second);
        assert_eq!(r[13], "1000", "2000 packets in 2 s");
        let dev = second.lines().find(|l| l.starts_with("rxe0")).unwrap();
        assert!(dev.split_whitespace().any(|w| w == "1000"), "{dev}");
    }
}
