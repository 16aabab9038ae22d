//! Middleware over rdma-emu (issue 18): `ucx_perftest` over rc_verbs and ud_verbs, and
//! libfabric's `fi_pingpong` over verbs MSG, RDM (ofi_rxm) and DGRAM, between two daemons
//! in two namespaces joined by veth, each program under `rdma-emu run` (whose device view
//! UCX needs). A section of its own after the perftest tables, or alone with
//! `cargo xtask bench middleware`.

use super::site::{Net, Program, Site};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// ucx_perftest's TCP port for its out-of-band exchange.
const PORT: &str = "13901";
/// fi_pingpong's round trips per run.
const FI_ITERATIONS: &str = "1000";
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

/// fi_pingpong runs: (provider, endpoint type, message size, environment, extra options),
/// all at libfabric's defaults.
const FI_RUNS: [(&str, &str, &str, &[&str]); 3] = [
    ("verbs", "msg", "4096", &[]),
    ("verbs;ofi_rxm", "rdm", "4096", &[]),
    ("verbs", "dgram", "1024", &[]),
];

/// `cargo xtask bench middleware`: only this section, printed with the date and the load.
pub fn run_alone() -> Result<(), String> {
    let (bin, lib) = crate::build_release()?;
    let dir = std::env::temp_dir().join(format!("rdma-emu-bench-mw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let load = |when: &str| {
        let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!("{when}: /proc/loadavg {}", l.trim());
    };
    let _ = std::process::Command::new("date").arg("-u").status();
    load("start");
    let section = measure(&bin, &lib, &dir);
    load("end");
    let _ = std::fs::remove_dir_all(&dir);
    println!("{section}");
    Ok(())
}

/// The markdown sections (tables, or the reason there are none).
pub fn measure(bin: &Path, lib: &Path, dir: &Path) -> String {
    ucx(bin, lib, dir) + &fabric(bin, lib, dir)
}

/// The UCX section.
fn ucx(bin: &Path, lib: &Path, dir: &Path) -> String {
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
    let figure = pair(site, bin, lib, "ucx", &server, &client)
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

/// Server on the first daemon, client on the last (outputs in `{name}-server.txt` and
/// `{name}-client.txt`); the client's output.
fn pair(
    site: &Site,
    bin: &Path,
    lib: &Path,
    name: &str,
    server: &[&str],
    client: &[&str],
) -> Result<String, String> {
    let first = &site.daemons[0];
    let last = site.daemons.last().unwrap_or(first);
    let out = |side: &str| site.dir.join(format!("{name}-{side}.txt"));
    let mut s = Program::start(bin, lib, first, server, out("server"))?;
    // Its TCP port must listen before the client connects.
    std::thread::sleep(Duration::from_millis(1500));
    let mut c = Program::start(bin, lib, last, client, out("client"))?;
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

/// The libfabric section: fi_pingpong between daemons serving rxe0 on the veth (a device
/// on a non-loopback interface, which libfabric's MSG endpoints need).
fn fabric(bin: &Path, lib: &Path, dir: &Path) -> String {
    let mut out = String::from(
        "\n### libfabric (fi_pingpong 1.17, verbs provider, two namespaces, one daemon each)\n\n\
         One message size per endpoint type, `-I 1000`; the client's row (docs/compatibility.md, \
         libfabric).\n\n",
    );
    if let Err(e) = crate::ensure_debian_packages(&["libfabric-bin"]) {
        let _ = writeln!(out, "Not measured: {e}");
        return out;
    }
    let rows = Net::veth("fab").and_then(|net| {
        link_local_ready(&net);
        let site = Site::start(bin, lib, &net, "rxe0", &dir.join("fabric"))?;
        let rows = FI_RUNS
            .iter()
            .map(|&(provider, endpoint, size, env)| {
                let mut server = vec!["env"];
                server.extend_from_slice(env);
                server.extend([
                    "fi_pingpong",
                    "-p",
                    provider,
                    "-e",
                    endpoint,
                    "-I",
                    FI_ITERATIONS,
                    "-S",
                    size,
                ]);
                let mut client = server.clone();
                client.push(site.addr.as_str());
                let figure = pair(&site, bin, lib, "fi", &server, &client).and_then(|text| {
                    pingpong_row(&text).ok_or_else(|| "no result row".to_string())
                });
                println!("fi_pingpong {provider} {endpoint} {size} B: {figure:?}");
                (provider, endpoint, size, env, figure)
            })
            .collect::<Vec<_>>();
        drop(site);
        drop(net);
        Ok(rows)
    });
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            let _ = writeln!(out, "Not measured: {e}");
            return out;
        }
    };
    out.push_str("| provider | endpoint | size (B) | setting | MB/s | µs/xfer |\n|---|---|---|---|---|---|\n");
    for (provider, endpoint, size, env, figure) in rows {
        let setting = if env.is_empty() {
            "–".to_string()
        } else {
            format!("`{}`", env.join(" "))
        };
        let figures = match figure {
            Ok((mbps, usec)) => format!("{mbps:.2} | {usec:.1}"),
            Err(e) => format!("failed: {e} | –"),
        };
        let _ = writeln!(
            out,
            "| `{provider}` | {endpoint} | {size} | {setting} | {figures} |"
        );
    }
    out
}

/// Waits (at most 10 s) until both sides of `net` have their IPv6 link-local address, so
/// that both daemons start with the same GID table order (link-local at index 0, then the
/// IPv4-mapped GID). libfabric's DGRAM endpoints always send from GID index 0
/// (`FI_VERBS_GID_IDX`): with an IPv4 GID on one side and a link-local one on the other,
/// every address handle mixes the families, `ibv_create_ah` fails (as on rxe), and
/// `fi_av_insert` inserts nothing. The second veth end gets its address only once the
/// first is up, often after its daemon started.
fn link_local_ready(net: &Net) {
    let ready = |i: usize| {
        std::process::Command::new("ip")
            .args(["-n", net.name(i), "-6", "addr", "show", "dev", net.iface[i]])
            .args(["scope", "link", "-tentative"])
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.trim_ascii().is_empty())
    };
    let start = std::time::Instant::now();
    while !(ready(0) && ready(1)) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// From fi_pingpong's result row (`bytes #sent #ack total time MB/sec usec/xfer
/// Mxfers/sec`): MB/s and µs per transfer.
fn pingpong_row(text: &str) -> Option<(f64, f64)> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with("bytes"));
    let row: Vec<&str> = lines.nth(1)?.split_whitespace().collect();
    if row.len() != 8 {
        return None;
    }
    Some((row[5].parse().ok()?, row[6].parse().ok()?))
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
    use super::{final_figure, pingpong_row};

    #[test]
    fn pingpong_row_gives_bandwidth_and_latency() {
        let text = "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   \
                    Mxfers/sec\n4k      100     =100     800k        0.02s     45.88      \
                    89.27       0.01\n";
        assert_eq!(pingpong_row(text), Some((45.88, 89.27)));
        assert_eq!(pingpong_row("fi_enable(): ret=-22"), None);
    }

    #[test]
    fn final_line_gives_median_latency_and_average_bandwidth() {
        let text = "+----+\nFinal:                  2000     43.244    49.312    49.312        \
                    0.15       0.15       20279       20279\n";
        assert_eq!(final_figure(text, true), Some(43.244));
        assert_eq!(final_figure(text, false), Some(0.15));
        assert_eq!(final_figure("no table", true), None);
    }
}
