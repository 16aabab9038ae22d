//! The AI data movers beside perftest (issue 21): Mooncake (Python API and its C++
//! `transfer_engine_bench`), NIXL, mpi4py and `torch.distributed.rpc`, each between two
//! daemons in two namespaces joined by veth, and `ib_write_bw` at 64 KiB on the same kind
//! of path in the same run. A section of its own after the others, or alone with
//! `cargo xtask bench ai`.
//!
//! The movers are run by the suite's own tests (`tests/tests/ai_movers.rs`, with
//! `--nocapture`), so every figure comes from a transfer the test checked (by hash, element
//! by element, or against the daemons' counters); this section reads the rates the movers
//! print. The tests install the packages from PyPI into their virtual environment
//! (`RDMA_EMU_NO_PYPI=1` skips them, and then this section says so).

use super::perftest::parse_bw_avg;
use super::site::{Net, Site};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// One mover's figure: what ran, the rate in MB/s (10^6 bytes), or why there is none.
struct Row {
    mover: &'static str,
    what: &'static str,
    figure: Result<f64, String>,
}

/// The movers' rates, from the tests' output: (mover, what, the text that starts the line,
/// the text the rate follows, whether it is in MiB/s (else MB/s)).
const RATES: [(&str, &str, &str, &str, bool); 9] = [
    (
        "Mooncake (Python)",
        "write 64 MiB",
        "client: write ",
        " B ",
        true,
    ),
    (
        "Mooncake (Python)",
        "read 64 MiB",
        "client: read ",
        " B ",
        true,
    ),
    (
        "Mooncake (Python)",
        "batch 256 × 256 KiB",
        "client: batch ",
        " B ",
        true,
    ),
    (
        "Mooncake transfer_engine_bench",
        "write, 2 threads, 5 s",
        "Test completed",
        "throughput ",
        false,
    ),
    (
        "NIXL (UCX backend)",
        "WRITE 64 MiB",
        "initiator: WRITE ",
        " B ",
        true,
    ),
    (
        "NIXL (UCX backend)",
        "READ 64 MiB",
        "initiator: READ ",
        " B ",
        true,
    ),
    (
        "mpi4py (Open MPI, UCX)",
        "Allreduce 32 MiB",
        "allreduce 33554432 B ",
        " B ",
        false,
    ),
    (
        "mpi4py (Open MPI, UCX)",
        "Allreduce 2 MiB",
        "allreduce 2097152 B ",
        " B ",
        false,
    ),
    (
        "torch.distributed.rpc (TensorPipe ibv)",
        "16 MiB round trip, both ways",
        "worker1: ",
        "s (",
        true,
    ),
];

/// The number after the last `after` in the first line that contains `start` and `after`.
fn rate(text: &str, start: &str, after: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.contains(start) && l.contains(after))
        .find_map(|l| {
            l.rsplit(after)
                .next()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
}

/// `cargo xtask bench ai`: only this section, printed with the date and the load.
pub fn run_alone() -> Result<(), String> {
    let (bin, lib) = crate::build_release()?;
    let dir = std::env::temp_dir().join(format!("rdma-emu-bench-ai-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    println!(
        "start: {} /proc/loadavg {}",
        super::date(),
        super::loadavg()
    );
    let section = measure(&bin, &lib, &dir);
    println!("end: {} /proc/loadavg {}", super::date(), super::loadavg());
    let _ = std::fs::remove_dir_all(&dir);
    println!("{section}");
    Ok(())
}

/// `ib_write_bw` 64 KiB between two daemons on a veth, in MB/s.
fn perftest(bin: &Path, lib: &Path, dir: &Path) -> Result<f64, String> {
    let net = Net::veth("ai")?;
    let site = Site::start(bin, lib, &net, "rxe0", &dir.join("ai-perftest"))?;
    let out = site.perftest(
        "ib_write_bw",
        &["-s", "65536", "-n", "2000"],
        Duration::from_secs(300),
    );
    drop(site);
    drop(net);
    out.and_then(|o| {
        parse_bw_avg(&o, 65536)
            .map(|mib| mib * 1048576.0 / 1e6)
            .ok_or_else(|| "no 65536 B row".to_string())
    })
}

/// The suite's AI mover tests, their output (stdout and stderr together).
fn movers() -> Result<String, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(crate::workspace_root())
        .args([
            "test",
            "--release",
            "-p",
            "rdma-emu-tests",
            "--test",
            "ai_movers",
            "--",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .map_err(|e| format!("cargo test: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if text.contains("SKIPPED: RDMA_EMU_NO_PYPI") {
        return Err("RDMA_EMU_NO_PYPI is set: the movers were not installed".into());
    }
    Ok(text)
}

/// The markdown section (a table, or the reason there is none).
pub fn measure(bin: &Path, lib: &Path, dir: &Path) -> String {
    let mut out = String::from(
        "\n### AI data movers (two namespaces, one daemon each, CPU memory)\n\n\
         Each figure comes from a checked transfer of `tests/tests/ai_movers.rs`, as the \
         mover prints it, in MB/s (10^6 bytes; MiB/s converted). The ratio is to \
         `ib_write_bw` 64 KiB measured between two daemons on a veth in the same run.\n\n",
    );
    let base = perftest(bin, lib, dir);
    let text = movers();
    let rows: Vec<Row> = RATES
        .iter()
        .map(|&(mover, what, start, after, mib)| Row {
            mover,
            what,
            figure: text.as_ref().map_err(Clone::clone).and_then(|t| {
                rate(t, start, after)
                    .map(|v| if mib { v * 1048576.0 / 1e6 } else { v })
                    .ok_or_else(|| "not in the tests' output (did its test fail?)".to_string())
            }),
        })
        .collect();
    let base_text = match &base {
        Ok(v) => format!("{v:.1} MB/s"),
        Err(e) => format!("failed: {e}"),
    };
    let _ = writeln!(out, "`ib_write_bw` 64 KiB, same path: {base_text}\n");
    out.push_str("| mover | transfer | MB/s | ratio to ib_write_bw |\n|---|---|---|---|\n");
    for r in rows {
        let (fig, ratio) = match (&r.figure, &base) {
            (Ok(v), Ok(b)) => (format!("{v:.1}"), format!("{:.2}", v / b)),
            (Ok(v), Err(_)) => (format!("{v:.1}"), "–".into()),
            (Err(e), _) => (format!("failed: {e}"), "–".into()),
        };
        let _ = writeln!(out, "| {} | {} | {fig} | {ratio} |", r.mover, r.what);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn rates_are_read_as_the_movers_print_them() {
        let t = "client: write 67108864 B 81.5 MiB/s\n\
                 I1204 Test completed: duration 5.00, batch count 10, throughput 95.12 MB/s\n\
                 allreduce 1048576 B 12.0 MB/s\nallreduce 33554432 B 40.5 MB/s\n\
                 worker1: 16 MiB sent and returned plus one, checked; round trip 0.46 s \
                 (69.3 MiB/s both ways together)\n";
        assert_eq!(super::rate(t, "client: write ", " B "), Some(81.5));
        assert_eq!(super::rate(t, "Test completed", "throughput "), Some(95.12));
        assert_eq!(super::rate(t, "allreduce 33554432 B ", " B "), Some(40.5));
        assert_eq!(super::rate(t, "worker1: ", "s ("), Some(69.3));
        assert_eq!(super::rate(t, "client: read ", " B "), None);
    }
}
