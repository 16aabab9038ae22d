//! Issue 22's goals, each judged on this run: the figure, the limit it is compared with
//! (measured in the same run wherever the goal is a ratio), the ratio, the goal, and
//! whether it is met. A figure or limit that failed makes the row "not measured" with its
//! reason in the notes, never "met".

use super::figure::{ratio, Figure, Notes};
use super::limits::Limits;
use super::mtu::MtuRow;
use super::perftest::{Matrix, Placement, SharedRows, Transport, GOAL_ROUNDS, SHARED_ROUNDS};
use super::scale::Scale;
use std::fmt::Write as _;

/// Which way a goal points, and its bound on the ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Goal {
    /// The ratio must be at least this.
    AtLeast(f64),
    /// The ratio must be at most this.
    AtMost(f64),
}

impl Goal {
    /// Whether `r` meets the goal; `None` when there is no ratio to judge.
    pub fn met(self, r: Option<f64>) -> Option<bool> {
        r.map(|r| match self {
            Goal::AtLeast(b) => r >= b,
            Goal::AtMost(b) => r <= b,
        })
    }

    fn text(self) -> String {
        match self {
            Goal::AtLeast(b) => format!("≥ {b}"),
            Goal::AtMost(b) => format!("≤ {b}"),
        }
    }
}

/// One row of the table.
struct Row<'a> {
    what: String,
    figure: Figure,
    unit: &'a str,
    limit_name: String,
    limit: Figure,
    limit_unit: &'a str,
    goal: Goal,
}

impl Row<'_> {
    fn write(&self, d: &mut String, notes: &mut Notes) {
        let r = ratio(&self.figure, &self.limit);
        let _ = writeln!(
            d,
            "| {} | {} | {}: {} | {} | {} | {} |",
            self.what,
            notes.fig(&self.figure, 2, self.unit),
            self.limit_name,
            notes.fig(&self.limit, 2, self.limit_unit),
            r.map_or("–".into(), |r| format!("{r:.2}")),
            self.goal.text(),
            verdict(self.goal.met(r)),
        );
    }
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "**not met**",
        None => "not measured",
    }
}

/// Everything the table is judged from.
pub struct Inputs<'a> {
    pub limits: &'a Limits,
    pub matrix: &'a Matrix,
    pub shared: &'a SharedRows,
    pub mtu_rows: &'a [MtuRow],
    pub scale: &'a Scale,
}

/// A perftest figure of the matrix, or why it is missing.
fn get(m: &Matrix, t: Transport, p: Placement, program: &'static str, size: u64) -> Figure {
    m.get(&(t, p, program, size))
        .cloned()
        .unwrap_or_else(|| Err("not run".into()))
}

/// Writes issue 22's table.
pub fn report(d: &mut String, notes: &mut Notes, i: &Inputs) {
    let _ = writeln!(
        d,
        "\n### Issue 22's goals\n\n\
         Each figure beside the limit it is judged against, measured in this run (the message \
         rate's goal is absolute). The 2 B latencies and the 64 B message rates are each the \
         median of {GOAL_ROUNDS} runs. Two namespaces at MTU 1500 give RoCE a 1024-byte path \
         MTU, at 9000 a 4096-byte one.\n\n\
         | goal | measured | limit | ratio | goal | verdict |\n|---|---|---|---|---|---|"
    );
    let memcpy: Figure = Ok(i.limits.memcpy);
    let roce_one = get(
        i.matrix,
        Transport::Roce,
        Placement::OneHost,
        "ib_write_bw",
        65536,
    );
    let shared = i
        .shared
        .get(&("ib_write_bw", 65536))
        .map_or_else(|| Err("not run".into()), |p| p.shared.clone());
    let mut rows = vec![
        Row {
            what: "RoCE ib_write_bw 64 KiB, one host, default settings".into(),
            figure: roce_one,
            unit: "GB/s",
            limit_name: "memcpy".into(),
            limit: memcpy.clone(),
            limit_unit: "GB/s",
            goal: Goal::AtLeast(0.33),
        },
        Row {
            what: format!(
                "the same, its shared memory path (the default; median of {SHARED_ROUNDS} runs)"
            ),
            figure: shared,
            unit: "GB/s",
            limit_name: "memcpy".into(),
            limit: memcpy.clone(),
            limit_unit: "GB/s",
            goal: Goal::AtLeast(0.5),
        },
    ];
    for r in i.mtu_rows {
        rows.push(Row {
            what: format!("RoCE ib_write_bw 64 KiB, two namespaces, MTU {}", r.mtu),
            figure: r.roce.clone(),
            unit: "GB/s",
            limit_name: "UDP GSO+GRO".into(),
            limit: r.udp_gso.clone(),
            limit_unit: "GB/s",
            goal: Goal::AtLeast(0.5),
        });
        rows.push(Row {
            what: format!("iWARP ib_write_bw 64 KiB, two namespaces, MTU {}", r.mtu),
            figure: r.iwarp.clone(),
            unit: "GB/s",
            limit_name: "one kernel TCP stream".into(),
            limit: r.tcp.clone(),
            limit_unit: "GB/s",
            goal: Goal::AtLeast(0.5),
        });
    }
    for t in [Transport::Roce, Transport::Iwarp] {
        // perftest's 64 B average in GB/s as millions of messages per second.
        let rate =
            get(i.matrix, t, Placement::OneHost, "ib_write_bw", 64).map(|g| g * 1e9 / 64.0 / 1e6);
        rows.push(Row {
            what: format!("{} ib_write_bw 64 B message rate, one host", t.name()),
            figure: rate,
            unit: "M msg/s",
            limit_name: "goal".into(),
            limit: Ok(1.0),
            limit_unit: "M msg/s",
            goal: Goal::AtLeast(1.0),
        });
    }
    for t in [Transport::Roce, Transport::Iwarp] {
        for program in ["ib_write_lat", "ib_send_lat"] {
            for (p, bound, limit) in [
                (Placement::OneHost, 1.0, &i.limits.rtt_lo),
                (Placement::TwoNamespaces, 1.5, &i.limits.rtt_veth),
            ] {
                rows.push(Row {
                    what: format!("{} {program} 2 B, {}", t.name(), p.name()),
                    figure: get(i.matrix, t, p, program, 2),
                    unit: "µs",
                    limit_name: "UDP busy-poll round trip".into(),
                    limit: limit.clone(),
                    limit_unit: "µs",
                    goal: Goal::AtMost(bound),
                });
            }
        }
    }
    for r in i.mtu_rows {
        for (name, cpu) in [("RoCE", &r.roce_cpu), ("iWARP", &r.iwarp_cpu)] {
            rows.push(Row {
                what: format!(
                    "{name} daemons' CPU per GB, 64 KiB WRITE, two namespaces, MTU {}",
                    r.mtu
                ),
                figure: cpu.clone(),
                unit: "s/GB",
                limit_name: "kernel TCP (iperf3 sender + receiver)".into(),
                limit: r.tcp_cpu.clone(),
                limit_unit: "s/GB",
                goal: Goal::AtMost(1.0),
            });
        }
    }
    for row in &rows {
        row.write(d, notes);
    }
    // The scale goal is pass/fail: 1000 QPs at perftest's defaults, no option added.
    let thousand = i
        .scale
        .many_qps
        .iter()
        .find(|(q, _)| *q == 1000)
        .map_or_else(|| Err("not run".to_string()), |(_, f)| f.clone());
    let _ = writeln!(
        d,
        "| `ib_write_bw -q 1000 -s 4096 -n 128` between two namespaces at perftest's defaults | {} | – | – | passes | {} |",
        notes.fig(&thousand, 3, "GB/s"),
        if thousand.is_ok() { "met" } else { "**not met**" },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_goal_is_judged_only_on_a_measured_ratio() {
        assert_eq!(Goal::AtLeast(0.5).met(Some(0.5)), Some(true));
        assert_eq!(Goal::AtLeast(0.5).met(Some(0.49)), Some(false));
        assert_eq!(Goal::AtMost(1.5).met(Some(1.5)), Some(true));
        assert_eq!(Goal::AtMost(1.5).met(Some(1.51)), Some(false));
        assert_eq!(Goal::AtMost(1.5).met(None), None);
    }

    #[test]
    fn a_failed_limit_makes_the_row_not_measured_with_its_reason() {
        let mut notes = Notes::default();
        let mut d = String::new();
        Row {
            what: "x".into(),
            figure: Ok(1.0),
            unit: "GB/s",
            limit_name: "memcpy".into(),
            limit: Err("no namespaces".into()),
            limit_unit: "GB/s",
            goal: Goal::AtLeast(0.33),
        }
        .write(&mut d, &mut notes);
        assert!(d.contains("not measured"), "{d}");
        assert!(d.contains("failed [1]"), "{d}");
        assert_eq!(notes.0, ["no namespaces"]);
    }
}
