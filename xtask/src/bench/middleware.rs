//! UCX over rdma-emu (issue 18): `ucx_perftest` between two daemons in two namespaces
//! joined by veth, over rc_verbs and ud_verbs, each program under `rdma-emu run` (whose
//! device view UCX needs). A section of its own after the perftest tables.

use super::site::{Net, Program, Site};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// ucx_perftest's TCP port for its out-of-band exchange.
const PORT: &str = "13901";
const LIMIT: Duration = Duration::from_secs(120);

/// One measured line: what ran, and its figure or why there is none.
struct Row {
    transport: &'static str,
    test: &'static str,
    size: &'static str,
    unit: &'static str,
    figure: Result<f64, String>,
}

/// (transport label, UCX_TLS, test, message size, extra arguments).
const RUNS: [(&str, &str, &str, &str, &[&str]); 5] = [
    ("rc_verbs", "rc_v", "tag_lat", "8", &["-n", "10000"]),
    ("rc_verbs", "rc_v", "tag_bw", "65536", &["-n", "5000"]),
    (
        "rc_verbs (UCT, zcopy)",
        "rc_v",
        "put_bw",
        "65536",
        &[
            "-x", "rc_verbs", "-d", "rxe0:1", "-D", "zcopy", "-n", "5000",
        ],
    ),
    ("ud_verbs", "ud_v", "tag_lat", "8", &["-n", "10000"]),
    ("ud_verbs", "ud_v", "tag_bw", "65536", &["-n", "5000"]),
];

/// The markdown section (a table, or the reason there is none).
pub fn measure(bin: &Path, lib: &Path, dir: &Path) -> String {
    let mut out = String::from(
        "\n### UCX (ucx_perftest 1.13, two namespaces, one daemon each)\n\n\
         `UCX_TLS=rc_v` or `ud_v`, everything else UCX's default (docs/compatibility.md, \
         Middleware). Latency: the median (µs); bandwidth: the average (MB/s).\n\n",
    );
    if let Err(e) = crate::ensure_debian_packages(&["ucx-utils"]) {
        let _ = writeln!(out, "Not measured: {e}");
        return out;
    }
    let rows = match Net::veth("ucx").and_then(|net| {
        let site = Site::start(bin, lib, &net, "rxe0", &dir.join("ucx"))?;
        let rows = RUNS
            .iter()
            .map(|r| run(&site, bin, lib, *r))
            .collect::<Vec<_>>();
        // The daemons go before the namespaces.
        drop(site);
        drop(net);
        Ok(rows)
    }) {
        Ok(rows) => rows,
        Err(e) => {
            let _ = writeln!(out, "Not measured: {e}");
            return out;
        }
    };
    out.push_str("| transport | test | size (B) | figure |\n|---|---|---|---|\n");
    for r in rows {
        let figure = match r.figure {
            Ok(v) => format!("{v:.2} {}", r.unit),
            Err(e) => format!("failed: {e}"),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {figure} |",
            r.transport, r.test, r.size
        );
    }
    out
}

fn run(
    site: &Site,
    bin: &Path,
    lib: &Path,
    (transport, tls, test, size, extra): (&'static str, &str, &'static str, &'static str, &[&str]),
) -> Row {
    let tls = format!("UCX_TLS={tls}");
    let server = ["env", tls.as_str(), "ucx_perftest", "-p", PORT];
    let mut client = server.to_vec();
    client.extend([site.addr.as_str(), "-t", test, "-s", size]);
    client.extend_from_slice(extra);
    let lat = test.ends_with("_lat");
    let figure = pair(site, bin, lib, &server, &client)
        .and_then(|text| final_figure(&text, lat).ok_or_else(|| "no Final: line".to_string()));
    println!("ucx_perftest {transport} {test} {size} B: {figure:?}");
    Row {
        transport,
        test,
        size,
        unit: if lat { "µs" } else { "MB/s" },
        figure,
    }
}

/// Server on the first daemon, client on the last; the client's output.
fn pair(
    site: &Site,
    bin: &Path,
    lib: &Path,
    server: &[&str],
    client: &[&str],
) -> Result<String, String> {
    let first = &site.daemons[0];
    let last = site.daemons.last().unwrap_or(first);
    let mut s = Program::start(bin, lib, first, server, site.dir.join("ucx-server.txt"))?;
    // Its TCP port must listen before the client connects.
    std::thread::sleep(Duration::from_millis(1500));
    let mut c = Program::start(bin, lib, last, client, site.dir.join("ucx-client.txt"))?;
    let c_ok = c.finish(LIMIT);
    let s_ok = s.finish(Duration::from_secs(10));
    match (c_ok, s_ok) {
        (Ok(true), Ok(true)) => Ok(c.output()),
        _ => Err(c
            .errors()
            .lines()
            .rev()
            .take(2)
            .collect::<Vec<_>>()
            .join(" / ")),
    }
}

/// From ucx_perftest's `Final:` line: the median latency (µs), or the average bandwidth
/// (MB/s).
fn final_figure(text: &str, lat: bool) -> Option<f64> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("Final:"))?;
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    // iterations, latency 50%ile / average / overall, bandwidth average / overall, …
    f.get(if lat { 1 } else { 4 }).copied()
}

#[cfg(test)]
mod tests {
    use super::final_figure;

    #[test]
    fn final_line_gives_median_latency_and_average_bandwidth() {
        let text = "+----+\nFinal:                  2000     43.244    49.312    49.312        \
                    0.15       0.15       20279       20279\n";
        assert_eq!(final_figure(text, true), Some(43.244));
        assert_eq!(final_figure(text, false), Some(0.15));
        assert_eq!(final_figure("no table", true), None);
    }
}
