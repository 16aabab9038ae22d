//! `cargo xtask bench`: rdma-emu's figures next to this machine's limits, measured in the
//! same run (machines here are shared and noisy; one absolute number means little).
//!
//! Limits: single-core memcpy of 64 MiB; UDP throughput at the RoCE MTU's datagram size,
//! plain and with GSO+GRO, and a busy-polling UDP ping-pong, on loopback and between two
//! network namespaces over veth. rdma-emu: perftest's ib_write_bw / ib_read_bw /
//! ib_send_bw at 64 B, 4 KiB, 64 KiB and 1 MiB and ib_write_lat / ib_send_lat /
//! ib_read_lat at 2 B and 4 KiB, over RoCE (`rxe0`) and iWARP (`siw0`, RDMA CM), on one host
//! through one daemon and between two daemons in two namespaces; the RoCE backends (`udp`,
//! `packet`, `xdp`) side by side between two namespaces (`backends.rs`); scale (many RC QPs between
//! two daemons, 100 processes on one daemon, the daemon's memory at idle and per idle QP,
//! its idle CPU); the core's criterion bench. Every program runs under a time limit, and a
//! failure becomes a row with its reason. The load average is recorded.
//!
//! The generated tables go to `docs/performance-latest.md` and between the
//! `<!-- bench:begin -->` / `<!-- bench:end -->` markers of `docs/performance.md`; the plot
//! of bandwidth against message size to `docs/performance.png`.
//!
//! This file runs the sections in order and writes the tables; each section measures in a
//! file of its own (`limits.rs`, `perftest.rs`, `backends.rs`, `mtu.rs`, `scale.rs`,
//! `core_bench.rs`, `goals.rs` (issue 22's table), `middleware.rs`, `rsockets.rs`, `ai.rs`), on daemons that `site.rs` starts, with the figures of
//! `figure.rs`.
mod ai;
mod backends;
mod core_bench;
mod figure;
mod goals;
mod limits;
mod middleware;
mod mtu;
mod perftest;
mod plot;
mod rsockets;
mod scale;
mod site;

use core_bench::{core_bench, CoreBench};
use figure::{ratio, show_ratio, size_name, Figure, Notes};
use limits::{measure_limits, Limits, ROCE_DATAGRAM_LO, ROCE_DATAGRAM_VETH};
use perftest::{
    all_runs, perftest_matrix, shared_rows, Matrix, Placement, SharedRows, Transport, BW_PROGRAMS,
    BW_SIZES, DESCRIPTOR_ENV, GOAL_ROUNDS, LAT_PROGRAMS, LAT_SIZES, SHARED_ROUNDS,
};
use scale::{qps_between_daemons, scale_one_host, Scale};
use site::{Net, Site};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

pub fn run(args: &[String]) -> Result<(), String> {
    crate::ensure_debian_packages(&["perftest", "iproute2", "gcc", "libibverbs-dev", "iperf3"])?;
    if args.first().map(String::as_str) == Some("mtu") {
        // `cargo xtask bench mtu`: only the two-namespace MTU table, printed.
        return mtu::run_alone();
    }
    if args.first().map(String::as_str) == Some("middleware") {
        // `cargo xtask bench middleware`: only the UCX and libfabric tables, printed.
        return middleware::run_alone();
    }
    if args.first().map(String::as_str) == Some("ai") {
        // `cargo xtask bench ai`: only the AI data movers beside ib_write_bw, printed.
        return ai::run_alone();
    }
    let plot_tool = crate::ensure_debian_packages(&["python3-matplotlib"]);
    let (bin, lib) = crate::build_release()?;
    let started = Instant::now();
    let load0 = loadavg();
    let when = date();
    println!("bench: started {when}, load average {load0}");
    let dir = std::env::temp_dir().join(format!("rdma-emu-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = suite(&bin, &lib, &dir, plot_tool, started, load0, when);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn suite(
    bin: &Path,
    lib: &Path,
    dir: &Path,
    plot_tool: Result<(), String>,
    started: Instant,
    load0: String,
    when: String,
) -> Result<(), String> {
    let limits = measure_limits();
    let mut matrix = Matrix::new();
    let mut shared = SharedRows::new();
    let mut many_qps = Vec::new();
    for placement in [Placement::OneHost, Placement::TwoNamespaces] {
        for transport in [Transport::Roce, Transport::Iwarp] {
            let tag = format!("{}-{}", transport.device(), placement as u8);
            let net = match placement {
                Placement::OneHost => Net::loopback(&tag),
                Placement::TwoNamespaces => Net::veth(&tag),
            };
            let site = net.and_then(|net| {
                Site::start(bin, lib, &net, transport.device(), &dir.join(&tag)).map(|s| (net, s))
            });
            match site {
                Ok((_net, site)) => {
                    perftest_matrix(&site, transport, placement, &mut matrix);
                    if (transport, placement) == (Transport::Roce, Placement::OneHost) {
                        shared = shared_rows(&site);
                    }
                    if (transport, placement) == (Transport::Roce, Placement::TwoNamespaces) {
                        many_qps = qps_between_daemons(&site);
                    }
                    // The site's daemons go before its namespaces (`_net`).
                    drop(site);
                }
                Err(e) => {
                    println!(
                        "{} {}: cannot set up: {e}",
                        transport.name(),
                        placement.name()
                    );
                    for (program, size) in all_runs() {
                        matrix.insert((transport, placement, program, size), Err(e.clone()));
                    }
                }
            }
        }
    }
    let backend_rows = backends::measure(bin, lib, dir);
    let mtu_rows = mtu::measure(bin, lib, dir);
    let scale = scale_one_host(bin, lib, dir, many_qps);
    let core = core_bench();
    match &core {
        Ok(c) => println!(
            "core alone: RC WRITE 64 KiB {:.2} GB/s, 256 B {:.2} Mpackets/s, memcpy 1 MiB {:.2} GB/s",
            c.write_gbps, c.small_mpps, c.memcpy_gbps
        ),
        Err(e) => println!("core bench failed: {e}"),
    }
    let root = crate::workspace_root();
    let png = root.join("docs/performance.png");
    let plotted = plot_tool.and_then(|()| draw_plot(&limits, &matrix, dir, &png));
    if let Err(e) = &plotted {
        println!("plot not drawn: {e}");
    }
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let load1 = loadavg();
    let tables = report(
        &limits,
        &matrix,
        &shared,
        (&backend_rows, &mtu_rows),
        &scale,
        &core,
        &plotted,
    ) + &middleware::measure(bin, lib, dir)
        + &rsockets::measure(bin, lib, dir)
        + &ai::measure(bin, lib, dir);
    let header = format!(
        "Run of {when}, {minutes:.1} minutes; load average (1 min) {load0} at the start and \
         {load1} at the end ({} cores).\n\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let latest = format!(
        "# Performance: the latest run\n\nWritten by `cargo xtask bench`; the analysis is in \
         [performance.md](performance.md). Every rdma-emu figure is given as a ratio to a \
         limit measured in the same run, on the same machine.\n\n{header}{tables}"
    );
    let path = root.join("docs/performance-latest.md");
    std::fs::write(&path, latest).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("written to {}", path.display());
    let doc_path = root.join("docs/performance.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap_or_default();
    std::fs::write(&doc_path, splice(&doc, &format!("{header}{tables}")))
        .map_err(|e| format!("{}: {e}", doc_path.display()))?;
    println!(
        "tables written between the markers of {}",
        doc_path.display()
    );
    println!("bench took {minutes:.1} minutes; load average {load0} → {load1}");
    Ok(())
}

const BEGIN: &str = "<!-- bench:begin -->";

const END: &str = "<!-- bench:end -->";

/// `doc` with the text between the bench markers replaced by `tables` (appended with the
/// markers when they are missing).
fn splice(doc: &str, tables: &str) -> String {
    match (doc.find(BEGIN), doc.find(END)) {
        (Some(b), Some(e)) if b < e => format!("{}{BEGIN}\n{tables}{}", &doc[..b], &doc[e..]),
        _ => format!("{doc}\n{BEGIN}\n{tables}{END}\n"),
    }
}

/// The 1-minute load average (the machines here are shared: say how loaded).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// The local date and time, as `date` prints it.
fn date() -> String {
    std::process::Command::new("date")
        .arg("+%Y-%m-%d %H:%M %Z")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn report(
    limits: &Limits,
    matrix: &Matrix,
    shared: &SharedRows,
    (backend_rows, mtu_rows): (&[backends::BackendRow], &[mtu::MtuRow]),
    scale: &Scale,
    core: &Result<CoreBench, String>,
    plotted: &Result<(), String>,
) -> String {
    let mut notes = Notes::default();
    let mut d = String::new();
    let memcpy: Figure = Ok(limits.memcpy);
    let _ = writeln!(
        d,
        "### Limits (this machine, this run)\n\n\
         | limit | loopback | veth between two namespaces |\n|---|---|---|"
    );
    let _ = writeln!(
        d,
        "| memcpy 64 MiB, one core | {:.2} GB/s | |",
        limits.memcpy
    );
    let _ = writeln!(
        d,
        "| UDP, one datagram per send ({ROCE_DATAGRAM_LO} B on loopback, {ROCE_DATAGRAM_VETH} B on veth: RoCE packets at the path MTU) | {} | {} |",
        notes.fig(&limits.udp_lo, 2, "GB/s"),
        notes.fig(&limits.udp_veth, 2, "GB/s")
    );
    let _ = writeln!(
        d,
        "| UDP with GSO+GRO (64 KiB per send) | {} | {} |",
        notes.fig(&limits.udp_lo_gso, 2, "GB/s"),
        notes.fig(&limits.udp_veth_gso, 2, "GB/s")
    );
    let _ = writeln!(
        d,
        "| UDP ping-pong round trip, busy polling (median) | {} | {} |",
        notes.fig(&limits.rtt_lo, 2, "µs"),
        notes.fig(&limits.rtt_veth, 2, "µs")
    );
    let cols = [
        (Transport::Roce, Placement::OneHost),
        (Transport::Iwarp, Placement::OneHost),
        (Transport::Roce, Placement::TwoNamespaces),
        (Transport::Iwarp, Placement::TwoNamespaces),
    ];
    let head: Vec<String> = cols
        .iter()
        .map(|(t, p)| format!("{} ({}), {}", t.name(), t.device(), p.name()))
        .collect();
    let _ = writeln!(
        d,
        "\n### Bandwidth (perftest's average; ratio to memcpy and to UDP GSO+GRO on the same path; \
         ib_write_bw 64 B: the median of {GOAL_ROUNDS} runs)\n\n\
         | program | size | {} |\n|---|---|---|---|---|---|",
        head.join(" | ")
    );
    for program in BW_PROGRAMS {
        for size in BW_SIZES {
            let cells: Vec<String> = cols
                .iter()
                .map(|&(t, p)| {
                    let f = matrix
                        .get(&(t, p, program, size))
                        .cloned()
                        .unwrap_or_else(|| Err("not run".into()));
                    format!(
                        "{}{}{}",
                        notes.fig(&f, 3, "GB/s"),
                        show_ratio(ratio(&f, &memcpy), "memcpy"),
                        show_ratio(ratio(&f, limits.udp_gso(p)), "UDP")
                    )
                })
                .collect();
            let _ = writeln!(
                d,
                "| {program} | {} | {} |",
                size_name(size),
                cells.join(" | ")
            );
        }
    }
    let _ = writeln!(
        d,
        "\n### Latency (perftest's typical, one way = half a round trip; ratio to the whole UDP busy-poll round trip on the same path; \
         ib_write_lat and ib_send_lat 2 B: the median of {GOAL_ROUNDS} runs)\n\n\
         | program | size | {} |\n|---|---|---|---|---|---|",
        head.join(" | ")
    );
    for program in LAT_PROGRAMS {
        for size in LAT_SIZES {
            let cells: Vec<String> = cols
                .iter()
                .map(|&(t, p)| {
                    let f = matrix
                        .get(&(t, p, program, size))
                        .cloned()
                        .unwrap_or_else(|| Err("not run".into()));
                    format!(
                        "{}{}",
                        notes.fig(&f, 2, "µs"),
                        show_ratio(ratio(&f, limits.rtt(p)), "× RTT")
                    )
                })
                .collect();
            let _ = writeln!(
                d,
                "| {program} | {} | {} |",
                size_name(size),
                cells.join(" | ")
            );
        }
    }
    let _ = writeln!(
        d,
        "\n### Shared memory regions (the default) and the descriptor path (`{DESCRIPTOR_ENV}`), RoCE, one host (each the median of {SHARED_ROUNDS} runs)\n\n\
         | program | size | descriptor (`/proc/PID/mem`) | shared (default) | shared ÷ descriptor |\n|---|---|---|---|---|"
    );
    for ((program, size), pair) in shared {
        let speedup =
            ratio(&pair.shared, &pair.descriptor).map_or_else(String::new, |r| format!("{r:.2}×"));
        let _ = writeln!(
            d,
            "| {program} | {} | {}{} | {}{} | {speedup} |",
            size_name(*size),
            notes.fig(&pair.descriptor, 3, "GB/s"),
            show_ratio(ratio(&pair.descriptor, &memcpy), "memcpy"),
            notes.fig(&pair.shared, 3, "GB/s"),
            show_ratio(ratio(&pair.shared, &memcpy), "memcpy"),
        );
    }
    backends::report(&mut d, &mut notes, limits, backend_rows);
    mtu::report(&mut d, &mut notes, mtu_rows);
    let _ = writeln!(
        d,
        "\n### Scale and idle cost\n\n| what | value |\n|---|---|"
    );
    for (q, f) in &scale.many_qps {
        let _ = writeln!(
            d,
            "| `ib_write_bw -q {q} -s 4096 -n 128`, RoCE, two daemons in two namespaces | {} |",
            notes.fig(f, 3, "GB/s")
        );
    }
    let _ = writeln!(
        d,
        "| processes on one daemon (idle clients, 1 RC QP each), all ready in | {} in {} |",
        notes.fig(&scale.processes, 0, ""),
        notes.fig(&scale.setup_secs, 1, "s")
    );
    let _ = writeln!(
        d,
        "| daemon CPU with those 100 clients connected and idle (10 s) | {} |",
        notes.fig(&scale.idle_cpu, 2, "%")
    );
    let _ = writeln!(
        d,
        "| daemon resident memory (VmRSS) at idle, no client | {} |",
        notes.fig(&scale.rss_idle, 0, "KiB")
    );
    let _ = writeln!(
        d,
        "| daemon resident memory with the 100 clients | {} |",
        notes.fig(&scale.rss_100, 0, "KiB")
    );
    let _ = writeln!(
        d,
        "| daemon memory per idle RC QP (one client, 1000 QPs in INIT) | {} |",
        notes.fig(&scale.kib_per_qp, 1, "KiB")
    );
    let _ = writeln!(
        d,
        "\n### The core alone (`cargo bench -p emu-core --bench rc_write`)\n\n| what | value | ratio |\n|---|---|---|"
    );
    match core {
        Ok(c) => {
            let _ = writeln!(
                d,
                "| RC WRITE 64 KiB, MTU 4096, ICRC on, one core | {:.2} GB/s | {:.2} of memcpy 64 MiB, {:.2} of memcpy 1 MiB (in cache, {:.1} GB/s) |",
                c.write_gbps,
                c.write_gbps / limits.memcpy,
                c.write_gbps / c.memcpy_gbps,
                c.memcpy_gbps
            );
            let _ = writeln!(
                d,
                "| RC WRITE 256 B messages | {:.2} M packets/s | |",
                c.small_mpps
            );
        }
        Err(e) => {
            let _ = writeln!(d, "| RC WRITE | {} | |", notes.fig(&Err(e.clone()), 0, ""));
        }
    }
    goals::report(
        &mut d,
        &mut notes,
        &goals::Inputs {
            limits,
            matrix,
            shared,
            mtu_rows,
            scale,
        },
    );
    match plotted {
        Ok(()) => {
            let _ = writeln!(
                d,
                "\n![ib_write_bw against message size, RoCE and iWARP, one host and two namespaces, next to the UDP limits](performance.png)"
            );
        }
        Err(e) => {
            let _ = writeln!(d, "\nNo plot in this run: {}.", e.replace('\n', " "));
        }
    }
    if !notes.0.is_empty() {
        let _ = writeln!(d, "\nFailures in this run:\n");
        for (i, n) in notes.0.iter().enumerate() {
            let _ = writeln!(d, "{}. {n}", i + 1);
        }
    }
    d
}

/// ib_write_bw against message size for both transports and placements, with the UDP
/// limits of both paths.
fn draw_plot(limits: &Limits, matrix: &Matrix, dir: &Path, out: &Path) -> Result<(), String> {
    let mut curves = Vec::new();
    for p in [Placement::OneHost, Placement::TwoNamespaces] {
        for t in [Transport::Roce, Transport::Iwarp] {
            let points = BW_SIZES
                .iter()
                .filter_map(|&s| {
                    matrix
                        .get(&(t, p, "ib_write_bw", s))
                        .and_then(|f| f.as_ref().ok())
                        .map(|v| (s, *v))
                })
                .collect();
            curves.push(plot::Curve {
                label: format!(
                    "rdma-emu {} ({}) ib_write_bw, {}",
                    t.name(),
                    t.device(),
                    p.name()
                ),
                points,
                dashed: p == Placement::TwoNamespaces,
            });
        }
    }
    let mut lines = vec![(
        format!("memcpy 64 MiB, one core ({:.1} GB/s)", limits.memcpy),
        limits.memcpy,
    )];
    for (label, f) in [
        (
            format!("UDP loopback, GSO+GRO, {ROCE_DATAGRAM_LO} B datagrams"),
            &limits.udp_lo_gso,
        ),
        (
            format!("UDP loopback, {ROCE_DATAGRAM_LO} B datagrams"),
            &limits.udp_lo,
        ),
        (
            format!("UDP veth, GSO+GRO, {ROCE_DATAGRAM_VETH} B datagrams"),
            &limits.udp_veth_gso,
        ),
        (
            format!("UDP veth, {ROCE_DATAGRAM_VETH} B datagrams"),
            &limits.udp_veth,
        ),
    ] {
        if let Ok(v) = f {
            lines.push((format!("{label} ({v:.2} GB/s)"), *v));
        }
    }
    plot::draw(
        "rdma-emu ib_write_bw against the limits of this machine (same run)",
        &curves,
        &lines,
        dir,
        out,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_replace_only_the_text_between_the_markers() {
        let doc = format!("intro\n{BEGIN}\nold table\n{END}\nanalysis\n");
        assert_eq!(
            splice(&doc, "new table\n"),
            format!("intro\n{BEGIN}\nnew table\n{END}\nanalysis\n")
        );
        assert_eq!(
            splice("intro\n", "t\n"),
            format!("intro\n\n{BEGIN}\nt\n{END}\n")
        );
    }
}
