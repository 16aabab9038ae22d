//! iperf3 over rsockets (issue 19): Debian's unmodified `librspreload.so` under
//! `rdma-emu run`, beside iperf3 over kernel TCP on the same path (two namespaces joined
//! by veth, MTU 1500, one daemon each), over RoCE (`rxe0`) and iWARP (`siw0`). Each run
//! moves a fixed amount (`-n`) from namespace b to namespace a. Figures: bandwidth, and
//! CPU seconds per GB moved of iperf3's sender and receiver (iperf3's own accounting)
//! plus both daemons (from /proc). A section of its own after the perftest tables.

use super::mtu::json_number;
use super::scale::cpu_seconds;
use super::site::{Net, Program, Site};
use super::{date, loadavg, Figure};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

const PRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";
/// iperf3's port (TCP, or the RDMA CM port under librspreload).
const PORT: &str = "5213";
/// Bytes per run.
const BYTES: u64 = 512 << 20;
const LIMIT: Duration = Duration::from_secs(120);

/// One path's figures.
struct Row {
    path: String,
    gbit: Figure,
    /// iperf3 (both ends) and daemons, CPU seconds per GB; the daemons' share alone.
    cpu: Figure,
    daemons: Figure,
}

/// One iperf3 run at `site` (server on its first daemon, client on its last), under
/// librspreload when `rsockets`: (Gbit/s, CPU s/GB of iperf3 and daemons, of daemons).
fn iperf3(site: &Site, bin: &Path, lib: &Path, rsockets: bool) -> Result<(f64, f64, f64), String> {
    let preload = format!("LD_PRELOAD={PRELOAD}");
    let mut pre: Vec<&str> = vec!["env"];
    if rsockets {
        pre.push(&preload);
    }
    let n = BYTES.to_string();
    let mut sargv = pre.clone();
    sargv.extend(["iperf3", "-s", "-1", "-B", &site.addr, "-p", PORT]);
    let mut cargv = pre;
    cargv.extend(["iperf3", "-J", "-c", &site.addr, "-p", PORT, "-n", &n]);
    let daemons =
        || -> Result<f64, String> { site.daemons.iter().map(|d| cpu_seconds(d.pid())).sum() };
    let tag = if rsockets { "rsockets" } else { "tcp" };
    let mut server = Program::start(
        bin,
        lib,
        &site.daemons[0],
        &sargv,
        site.dir.join(format!("{tag}-server.txt")),
    )?;
    // The server must listen (its TCP port, or its RDMA CM id) before the client starts.
    std::thread::sleep(Duration::from_millis(1500));
    let before = daemons()?;
    let client_daemon = site.daemons.last().ok_or("no daemon")?;
    let mut client = Program::start(
        bin,
        lib,
        client_daemon,
        &cargv,
        site.dir.join(format!("{tag}-client.txt")),
    )?;
    let ok = client.finish(LIMIT)?;
    let after = daemons()?;
    let _ = server.finish(Duration::from_secs(10));
    let text = client.output();
    if !ok {
        let err = client.errors();
        return Err(format!(
            "iperf3 failed: {}",
            err.lines().last().unwrap_or("no message")
        ));
    }
    let got =
        |from, key| json_number(&text, from, key).ok_or_else(|| format!("iperf3 printed no {key}"));
    let bytes = got("\"sum_received\"", "bytes")?;
    let secs = got("\"sum_received\"", "seconds")?;
    let host = got("\"cpu_utilization_percent\"", "host_total")?;
    let remote = got("\"cpu_utilization_percent\"", "remote_total")?;
    let gb = bytes / 1e9;
    let d = (after - before) / gb;
    Ok((
        bytes * 8.0 / secs / 1e9,
        (host + remote) / 100.0 * secs / gb + d,
        d,
    ))
}

fn row(path: String, r: Result<(f64, f64, f64), String>) -> Row {
    let (gbit, cpu, daemons) = match r {
        Ok((g, c, d)) => (Ok(g), Ok(c), Ok(d)),
        Err(e) => (Err(e.clone()), Err(e.clone()), Err(e)),
    };
    Row {
        path,
        gbit,
        cpu,
        daemons,
    }
}

/// Kernel TCP once (on the RoCE site's namespaces: the same veth), then rsockets over
/// each transport.
fn rows(bin: &Path, lib: &Path, dir: &Path) -> Vec<Row> {
    let mut rows = Vec::new();
    for (device, name) in [("rxe0", "RoCE"), ("siw0", "iWARP")] {
        let site = Net::veth(&format!("rs{device}")).and_then(|net| {
            Site::start(
                bin,
                lib,
                &net,
                device,
                &dir.join(format!("rsockets-{device}")),
            )
            .map(|s| (net, s))
        });
        let (net, site) = match site {
            Ok(v) => v,
            Err(e) => {
                rows.push(row(format!("rsockets over {name} ({device})"), Err(e)));
                continue;
            }
        };
        if device == "rxe0" {
            rows.push(row("kernel TCP".into(), iperf3(&site, bin, lib, false)));
        }
        rows.push(row(
            format!("rsockets over {name} ({device})"),
            iperf3(&site, bin, lib, true),
        ));
        // The daemons go before the namespaces.
        drop(site);
        drop(net);
    }
    rows
}

/// The markdown section (a table, or the reason there is none).
pub fn measure(bin: &Path, lib: &Path, dir: &Path) -> String {
    let mut out = format!(
        "\n### iperf3 over rsockets (two namespaces, one daemon each)\n\n\
         `LD_PRELOAD=librspreload.so iperf3` (Debian's rdma-core 44, unmodified) under \
         `rdma-emu run`, beside plain iperf3 over kernel TCP on the same veth (MTU 1500); \
         {} MiB per run, one stream. CPU: iperf3's sender and receiver (its own \
         accounting) plus both daemons, per GB moved. Run of {}, load average {}.\n\n",
        BYTES >> 20,
        date(),
        loadavg()
    );
    if !Path::new(PRELOAD).exists() {
        let _ = writeln!(out, "Not measured: {PRELOAD} is missing (librdmacm1).");
        return out;
    }
    if let Err(e) = crate::ensure_debian_packages(&["iperf3", "librdmacm1"]) {
        let _ = writeln!(out, "Not measured: {e}");
        return out;
    }
    out.push_str(
        "| path | Gbit/s | CPU s/GB (iperf3 + daemons) | of which daemons |\n|---|---|---|---|\n",
    );
    let show = |f: &Figure| match f {
        Ok(v) => format!("{v:.2}"),
        Err(e) => format!("— ({e})"),
    };
    for r in rows(bin, lib, dir) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            r.path,
            show(&r.gbit),
            show(&r.cpu),
            show(&r.daemons)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    /// Runs this section alone and prints it (root, a few minutes):
    /// `cargo test --release -p xtask -- --ignored --nocapture rsockets_section`.
    #[test]
    #[ignore]
    fn rsockets_section() {
        let (bin, lib) = crate::build_release().expect("build");
        let dir = std::env::temp_dir().join(format!("rdma-emu-bench-rs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temporary folder");
        println!("{}", super::measure(&bin, &lib, &dir));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn json_number_reads_iperf3_fields() {
        let t = r#"{"end": {"sum_received": {"seconds": 2.5, "bytes": 536870912}}}"#;
        assert_eq!(
            super::json_number(t, "\"sum_received\"", "bytes"),
            Some(536870912.0)
        );
        assert_eq!(
            super::json_number(t, "\"sum_received\"", "seconds"),
            Some(2.5)
        );
        assert_eq!(super::json_number(t, "\"nothing\"", "bytes"), None);
    }
}
