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
mod backends;
mod limits;
mod middleware;
mod mtu;
mod plot;
mod site;

use site::{Net, Site};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// A RoCE v2 packet at a 4096-byte path MTU: BTH (12) + RETH (16) + payload + ICRC (4).
const ROCE_DATAGRAM_LO: usize = 4096 + 12 + 16 + 4;
/// The same at veth's 1024-byte path MTU (interface MTU 1500).
const ROCE_DATAGRAM_VETH: usize = 1024 + 12 + 16 + 4;
const BW_SIZES: [u64; 4] = [64, 4096, 65536, 1 << 20];
const LAT_SIZES: [u64; 2] = [2, 4096];
const BW_PROGRAMS: [&str; 3] = ["ib_write_bw", "ib_read_bw", "ib_send_bw"];
const LAT_PROGRAMS: [&str; 3] = ["ib_write_lat", "ib_send_lat", "ib_read_lat"];
/// The limit for one perftest pair.
const PERFTEST_LIMIT: Duration = Duration::from_secs(60);
/// After this many failures in a row at one placement, the rest of it is skipped.
const MAX_FAILURES_IN_A_ROW: usize = 3;

/// A measured figure, or why it is missing.
type Figure = Result<f64, String>;

/// The transports and placements of the perftest matrix.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Transport {
    Roce,
    Iwarp,
}

impl Transport {
    fn device(self) -> &'static str {
        match self {
            Transport::Roce => "rxe0",
            Transport::Iwarp => "siw0",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Transport::Roce => "RoCE",
            Transport::Iwarp => "iWARP",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Placement {
    OneHost,
    TwoNamespaces,
}

impl Placement {
    fn name(self) -> &'static str {
        match self {
            Placement::OneHost => "one host",
            Placement::TwoNamespaces => "two namespaces",
        }
    }
}

/// (transport, placement, program, size) → figure (GB/s or µs).
type Matrix = BTreeMap<(Transport, Placement, &'static str, u64), Figure>;

/// (program, size) → GB/s with shared memory regions (`RDMA_EMU_SHARED_MR=1`), RoCE, one
/// host: the opt-in fast path next to the default descriptor path of the matrix.
type SharedRows = BTreeMap<(&'static str, u64), Figure>;

/// What the shared-region rows run.
const SHARED_ENV: &str = "RDMA_EMU_SHARED_MR=1";
const SHARED_SIZES: [u64; 2] = [65536, 1 << 20];

/// The limits measured in this run.
struct Limits {
    memcpy: f64,
    udp_lo: Figure,
    udp_lo_gso: Figure,
    rtt_lo: Figure,
    udp_veth: Figure,
    udp_veth_gso: Figure,
    rtt_veth: Figure,
}

impl Limits {
    fn udp_gso(&self, p: Placement) -> &Figure {
        match p {
            Placement::OneHost => &self.udp_lo_gso,
            Placement::TwoNamespaces => &self.udp_veth_gso,
        }
    }
    fn rtt(&self, p: Placement) -> &Figure {
        match p {
            Placement::OneHost => &self.rtt_lo,
            Placement::TwoNamespaces => &self.rtt_veth,
        }
    }
}

/// What scale and idle measurements found.
struct Scale {
    /// (QPs asked for, figure in GB/s) for each attempt of `ib_write_bw -q`, largest first.
    many_qps: Vec<(u32, Figure)>,
    processes: Figure,
    setup_secs: Figure,
    idle_cpu: Figure,
    rss_idle: Figure,
    rss_100: Figure,
    kib_per_qp: Figure,
}

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
    ) + &middleware::measure(bin, lib, dir);
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

fn all_runs() -> impl Iterator<Item = (&'static str, u64)> {
    let bw = BW_PROGRAMS
        .iter()
        .flat_map(|p| BW_SIZES.iter().map(move |s| (*p, *s)));
    let lat = LAT_PROGRAMS
        .iter()
        .flat_map(|p| LAT_SIZES.iter().map(move |s| (*p, *s)));
    bw.chain(lat)
}

fn is_bw(program: &str) -> bool {
    program.ends_with("_bw")
}

/// Iterations for one bandwidth run: about 128 MiB, between 200 and 10000 messages.
fn bw_iterations(size: u64) -> u64 {
    ((128 << 20) / size).clamp(200, 10000)
}

fn measure_limits() -> Limits {
    let memcpy = limits::memcpy_gbps();
    println!("memcpy 64 MiB, one core: {memcpy:.2} GB/s");
    let lo = || -> Result<_, String> {
        Ok((
            limits::bind_in(None, "127.0.0.1:0")?,
            limits::bind_in(None, "127.0.0.1:0")?,
        ))
    };
    let udp_lo = lo().and_then(|(a, b)| limits::udp_throughput(a, b, ROCE_DATAGRAM_LO, false));
    let udp_lo_gso = lo().and_then(|(a, b)| limits::udp_throughput(a, b, ROCE_DATAGRAM_LO, true));
    let rtt_lo = lo().and_then(|(a, b)| limits::udp_busy_rtt_us(a, b));
    println!("UDP loopback {ROCE_DATAGRAM_LO} B: {udp_lo:.2?} GB/s, GSO+GRO {udp_gso:.2?} GB/s, busy RTT {rtt_lo:.2?} us", udp_gso = udp_lo_gso);
    let (udp_veth, udp_veth_gso, rtt_veth) = match Net::veth("limits") {
        Ok(net) => {
            let pair = |port: u16| -> Result<_, String> {
                Ok((
                    limits::bind_in(Some(net.name(0)), &format!("{}:{port}", net.addrs[0]))?,
                    limits::bind_in(Some(net.name(1)), &format!("{}:{port}", net.addrs[1]))?,
                ))
            };
            (
                pair(0).and_then(|(a, b)| limits::udp_throughput(a, b, ROCE_DATAGRAM_VETH, false)),
                pair(0).and_then(|(a, b)| limits::udp_throughput(a, b, ROCE_DATAGRAM_VETH, true)),
                pair(0).and_then(|(a, b)| limits::udp_busy_rtt_us(a, b)),
            )
        }
        Err(e) => (Err(e.clone()), Err(e.clone()), Err(e)),
    };
    println!("UDP veth {ROCE_DATAGRAM_VETH} B: {udp_veth:.2?} GB/s, GSO+GRO {udp_veth_gso:.2?} GB/s, busy RTT {rtt_veth:.2?} us");
    Limits {
        memcpy,
        udp_lo,
        udp_lo_gso,
        rtt_lo,
        udp_veth,
        udp_veth_gso,
        rtt_veth,
    }
}

/// Every perftest program and size at one site.
fn perftest_matrix(site: &Site, t: Transport, p: Placement, matrix: &mut Matrix) {
    let mut failures = 0;
    for (program, size) in all_runs() {
        let figure = if failures >= MAX_FAILURES_IN_A_ROW {
            Err(format!("skipped after {failures} failures in a row"))
        } else {
            let s = size.to_string();
            let n = if is_bw(program) {
                bw_iterations(size)
            } else {
                1000
            }
            .to_string();
            site.perftest(program, &["-s", &s, "-n", &n], PERFTEST_LIMIT)
                .and_then(|out| {
                    if is_bw(program) {
                        parse_bw_avg(&out, size).map(|mib| mib * 1048576.0 / 1e9)
                    } else {
                        parse_lat_typical(&out, size)
                    }
                    .ok_or_else(|| format!("no {size} B row in the output"))
                })
        };
        failures = if figure.is_ok() { 0 } else { failures + 1 };
        let unit = if is_bw(program) { "GB/s" } else { "us" };
        match &figure {
            Ok(v) => println!(
                "{} {}: {program} {size} B: {v:.3} {unit}",
                t.name(),
                p.name()
            ),
            Err(e) => println!("{} {}: {program} {size} B failed: {e}", t.name(), p.name()),
        }
        matrix.insert((t, p, program, size), figure);
    }
}

/// The bandwidth programs at [`SHARED_SIZES`] with shared memory regions.
fn shared_rows(site: &Site) -> SharedRows {
    let mut rows = SharedRows::new();
    for program in BW_PROGRAMS {
        for size in SHARED_SIZES {
            let (s, n) = (size.to_string(), bw_iterations(size).to_string());
            let figure = site
                .perftest_env(
                    &[SHARED_ENV],
                    program,
                    &["-s", &s, "-n", &n],
                    PERFTEST_LIMIT,
                )
                .and_then(|out| {
                    parse_bw_avg(&out, size)
                        .map(|mib| mib * 1048576.0 / 1e9)
                        .ok_or_else(|| format!("no {size} B row in the output"))
                });
            match &figure {
                Ok(v) => println!("RoCE one host, {SHARED_ENV}: {program} {size} B: {v:.3} GB/s"),
                Err(e) => println!("RoCE one host, {SHARED_ENV}: {program} {size} B failed: {e}"),
            }
            rows.insert((program, size), figure);
        }
    }
    rows
}

/// The device's largest CQ (`max_cqe`, rxe's).
const MAX_CQE: u32 = 32767;

/// `ib_write_bw -q N` between the two daemons, for N = 1000 and then smaller until one
/// works; every attempt with its figure or failure. perftest makes one CQ of `-t` × `-q`
/// entries, so the send queue depth `-t` is lowered to keep that within `MAX_CQE`. `-u 20`
/// (a 4 s local ACK timeout instead of perftest's 67 ms): with 1000 QPs the daemons queue
/// more than 67 ms of packets between them, and without congestion control every QP's
/// timer then fires on packets that are only queued (docs/performance.md).
fn qps_between_daemons(site: &Site) -> Vec<(u32, Figure)> {
    let mut tries = Vec::new();
    for q in [1000u32, 500, 200, 100] {
        let qs = q.to_string();
        let depth = (MAX_CQE / q).min(128).to_string();
        let figure = site
            .perftest(
                "ib_write_bw",
                &[
                    "-q", &qs, "-t", &depth, "-u", "20", "-s", "4096", "-n", "128",
                ],
                Duration::from_secs(120),
            )
            .and_then(|out| {
                parse_bw_avg(&out, 4096)
                    .map(|mib| mib * 1048576.0 / 1e9)
                    .ok_or_else(|| "no 4096 B row in the output".to_string())
            });
        println!("ib_write_bw -q {q}, two namespaces: {figure:.3?} GB/s");
        let ok = figure.is_ok();
        tries.push((q, figure));
        if ok {
            break;
        }
    }
    tries
}

/// 100 processes on one daemon, its idle CPU with them connected, and its memory: at idle,
/// with the 100, and per idle RC QP (one client with 1000 QPs).
fn scale_one_host(bin: &Path, lib: &Path, dir: &Path, many_qps: Vec<(u32, Figure)>) -> Scale {
    let mut scale = Scale {
        many_qps,
        processes: Err("not run".into()),
        setup_secs: Err("not run".into()),
        idle_cpu: Err("not run".into()),
        rss_idle: Err("not run".into()),
        rss_100: Err("not run".into()),
        kib_per_qp: Err("not run".into()),
    };
    if let Err(e) = idle_cost(bin, lib, dir, &mut scale) {
        println!("scale on one host failed: {e}");
        for f in [
            &mut scale.processes,
            &mut scale.setup_secs,
            &mut scale.idle_cpu,
            &mut scale.rss_idle,
            &mut scale.rss_100,
            &mut scale.kib_per_qp,
        ] {
            if f.is_err() {
                *f = Err(e.clone());
            }
        }
    }
    scale
}

/// Starts `count` idle clients with `qps` RC QPs each; waits until each says "ready".
fn idle_clients(
    site: &Site,
    exe: &str,
    tag: &str,
    count: usize,
    qps: usize,
) -> Result<Vec<site::Program>, String> {
    let q = qps.to_string();
    let mut clients = Vec::new();
    for i in 0..count {
        clients.push(site.program(&[exe, &q], &format!("{tag}-{i}.txt"))?);
    }
    let t = Instant::now();
    for c in &mut clients {
        while !c.output().contains("ready") {
            if t.elapsed() > Duration::from_secs(90) {
                return Err(format!(
                    "an idle client was not ready after 90 s: {}",
                    c.output().trim()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(clients)
}

fn idle_cost(bin: &Path, lib: &Path, dir: &Path, scale: &mut Scale) -> Result<(), String> {
    let exe = dir.join("idle_client");
    let src = crate::workspace_root().join("tests/c/idle_client.c");
    let status = std::process::Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .status()
        .map_err(|e| format!("gcc: {e}"))?;
    if !status.success() {
        return Err("cannot compile tests/c/idle_client.c (apt-get install libibverbs-dev)".into());
    }
    let exe = exe.to_str().ok_or("non-UTF-8 path")?.to_string();
    let net = Net::loopback("idle")?;
    let site = Site::start(bin, lib, &net, "rxe0", &dir.join("idle"))?;
    let pid = site.server_daemon().pid();
    std::thread::sleep(Duration::from_secs(1));
    scale.rss_idle = rss_kib(pid);
    let t = Instant::now();
    let clients = 100;
    let idle = idle_clients(&site, &exe, "idle", clients, 1)?;
    scale.setup_secs = Ok(t.elapsed().as_secs_f64());
    scale.processes = Ok(idle.len() as f64);
    std::thread::sleep(Duration::from_secs(2));
    scale.rss_100 = rss_kib(pid);
    let (t0, c0) = (Instant::now(), cpu_seconds(pid)?);
    std::thread::sleep(Duration::from_secs(10));
    scale.idle_cpu = Ok((cpu_seconds(pid)? - c0) / t0.elapsed().as_secs_f64() * 100.0);
    println!(
        "100 processes: ready in {:.1?} s; daemon CPU {:.2?} %, RSS idle {:.0?} KiB, with 100 {:.0?} KiB",
        scale.setup_secs, scale.idle_cpu, scale.rss_idle, scale.rss_100
    );
    drop(idle);
    std::thread::sleep(Duration::from_secs(1));
    let before = rss_kib(pid)?;
    let many = idle_clients(&site, &exe, "qps", 1, 1000)?;
    std::thread::sleep(Duration::from_millis(500));
    scale.kib_per_qp = Ok((rss_kib(pid)? - before) / 1000.0);
    println!("memory per idle RC QP: {:.2?} KiB", scale.kib_per_qp);
    drop(many);
    drop(site);
    drop(net);
    Ok(())
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

/// Collects failure reasons as numbered notes under the tables.
#[derive(Default)]
struct Notes(Vec<String>);

impl Notes {
    /// The figure with `prec` decimals and `unit`, or "failed [n]" with its reason noted.
    fn fig(&mut self, f: &Figure, prec: usize, unit: &str) -> String {
        match f {
            Ok(v) => format!("{v:.prec$} {unit}"),
            Err(e) => {
                let e = e.replace('|', "/").replace('\n', " ");
                let n = match self.0.iter().position(|x| *x == e) {
                    Some(i) => i + 1,
                    None => {
                        self.0.push(e);
                        self.0.len()
                    }
                };
                format!("failed [{n}]")
            }
        }
    }
}

fn ratio(a: &Figure, b: &Figure) -> Option<f64> {
    match (a, b) {
        (Ok(a), Ok(b)) if *b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn show_ratio(r: Option<f64>, what: &str) -> String {
    r.map_or_else(String::new, |r| format!(" · {r:.2} {what}"))
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
        "\n### Bandwidth (perftest's average; ratio to memcpy and to UDP GSO+GRO on the same path)\n\n\
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
        "\n### Latency (perftest's typical, one way = half a round trip; ratio to the whole UDP busy-poll round trip on the same path)\n\n\
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
        "\n### Shared memory regions (`{SHARED_ENV}`), RoCE, one host\n\n\
         | program | size | default (`/proc/self/mem`) | shared | shared ÷ default |\n|---|---|---|---|---|"
    );
    for ((program, size), f) in shared {
        let default = matrix
            .get(&(Transport::Roce, Placement::OneHost, *program, *size))
            .cloned()
            .unwrap_or_else(|| Err("not run".into()));
        let speedup = ratio(f, &default).map_or_else(String::new, |r| format!("{r:.2}×"));
        let _ = writeln!(
            d,
            "| {program} | {} | {}{} | {}{} | {speedup} |",
            size_name(*size),
            notes.fig(&default, 3, "GB/s"),
            show_ratio(ratio(&default, &memcpy), "memcpy"),
            notes.fig(f, 3, "GB/s"),
            show_ratio(ratio(f, &memcpy), "memcpy"),
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
            "| `ib_write_bw -q {q} -t {} -u 20 -s 4096 -n 128`, RoCE, two daemons in two namespaces | {} |",
            (MAX_CQE / q).min(128),
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
    targets(&mut d, &mut notes, limits, matrix, shared, scale);
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

fn size_name(size: u64) -> String {
    match size {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s if s >= 1024 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

/// Issue 9's targets: each with the measured ratio and whether it is met.
fn targets(
    d: &mut String,
    notes: &mut Notes,
    limits: &Limits,
    matrix: &Matrix,
    shared: &SharedRows,
    scale: &Scale,
) {
    let _ = writeln!(
        d,
        "\n### Issue 9's targets\n\n| target | measured | ratio | met? |\n|---|---|---|---|"
    );
    let get = |t, p, program, size| {
        matrix
            .get(&(t, p, program, size))
            .cloned()
            .unwrap_or_else(|| Err("not run".into()))
    };
    let memcpy: Figure = Ok(limits.memcpy);
    let mut row = |d: &mut String,
                   name: String,
                   f: &Figure,
                   unit: &str,
                   r: Option<f64>,
                   goal: &str,
                   met: Option<bool>| {
        let _ = writeln!(
            d,
            "| {name} | {} | {} | {} |",
            notes.fig(f, 2, unit),
            r.map_or("–".into(), |r| format!("{r:.2} (goal {goal})")),
            match met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "not measured",
            }
        );
    };
    for t in [Transport::Roce, Transport::Iwarp] {
        let f = get(t, Placement::OneHost, "ib_write_bw", 65536);
        let r = ratio(&f, &memcpy);
        row(
            d,
            format!("{} ib_write_bw 64 KiB, one host ≥ 1/3 of memcpy", t.name()),
            &f,
            "GB/s",
            r,
            "≥ 0.33",
            r.map(|r| r >= 1.0 / 3.0),
        );
        if t == Transport::Roce {
            let f = shared
                .get(&("ib_write_bw", 65536))
                .cloned()
                .unwrap_or_else(|| Err("not run".into()));
            let r = ratio(&f, &memcpy);
            row(
                d,
                format!("RoCE ib_write_bw 64 KiB, one host, `{SHARED_ENV}` ≥ 1/3 of memcpy"),
                &f,
                "GB/s",
                r,
                "≥ 0.33",
                r.map(|r| r >= 1.0 / 3.0),
            );
        }
        let f = get(t, Placement::TwoNamespaces, "ib_write_bw", 65536);
        let r = ratio(&f, &memcpy);
        row(
            d,
            format!(
                "{} ib_write_bw 64 KiB, two namespaces ≥ 1/4 of memcpy",
                t.name()
            ),
            &f,
            "GB/s",
            r,
            "≥ 0.25",
            r.map(|r| r >= 0.25),
        );
        let r = ratio(&f, &limits.udp_veth_gso);
        row(
            d,
            format!(
                "{} ib_write_bw 64 KiB, two namespaces ≥ 1/2 of UDP GSO+GRO over veth",
                t.name()
            ),
            &f,
            "GB/s",
            r,
            "≥ 0.5",
            r.map(|r| r >= 0.5),
        );
        for program in ["ib_write_lat", "ib_send_lat"] {
            let f = get(t, Placement::OneHost, program, 2);
            let r = ratio(&f, &limits.rtt_lo);
            row(
                d,
                format!(
                    "{} {program} 2 B, one host ≤ UDP busy-poll round trip",
                    t.name()
                ),
                &f,
                "µs",
                r,
                "≤ 1",
                r.map(|r| r <= 1.0),
            );
            let f = get(t, Placement::TwoNamespaces, program, 2);
            let r = ratio(&f, &limits.rtt_veth);
            row(
                d,
                format!(
                    "{} {program} 2 B, two namespaces ≤ 1.5 × UDP busy-poll round trip over veth",
                    t.name()
                ),
                &f,
                "µs",
                r,
                "≤ 1.5",
                r.map(|r| r <= 1.5),
            );
        }
    }
    let r = scale.idle_cpu.as_ref().ok().map(|c| c / 1.0);
    row(
        d,
        "daemon idle CPU < 1 % (100 idle clients)".into(),
        &scale.idle_cpu,
        "%",
        r,
        "< 1 %",
        r.map(|c| c < 1.0),
    );
    let r = scale.kib_per_qp.as_ref().ok().map(|k| k / 16.0);
    row(
        d,
        "memory per idle RC QP < 16 KiB".into(),
        &scale.kib_per_qp,
        "KiB",
        r,
        "< 1 × 16 KiB",
        r.map(|r| r < 1.0),
    );
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

struct CoreBench {
    write_gbps: f64,
    small_mpps: f64,
    memcpy_gbps: f64,
}

/// Runs the core's criterion bench and reads its throughputs (middle estimates).
fn core_bench() -> Result<CoreBench, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(&cargo)
        .args([
            "bench", "-p", "emu-core", "--bench", "rc_write", "--", "--noplot",
        ])
        .current_dir(crate::workspace_root())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let thrpt = |name: &str| -> Option<(f64, String)> {
        let at = text.find(name)?;
        let line = text[at..].lines().find(|l| l.contains("thrpt:"))?;
        let inner = line.split('[').nth(1)?.trim_end_matches(']');
        let f: Vec<&str> = inner.split_whitespace().collect();
        Some((f.get(2)?.parse().ok()?, f.get(3)?.to_string()))
    };
    let bytes = |(v, unit): (f64, String)| -> f64 {
        match unit.as_str() {
            "GiB/s" => v * 1073741824.0 / 1e9,
            "MiB/s" => v * 1048576.0 / 1e9,
            "KiB/s" => v * 1024.0 / 1e9,
            _ => v,
        }
    };
    let elems = |(v, unit): (f64, String)| -> f64 {
        match unit.as_str() {
            "Melem/s" => v,
            "Kelem/s" => v / 1e3,
            "Gelem/s" => v * 1e3,
            _ => v / 1e6,
        }
    };
    let missing = || format!("no throughput in the core bench's output:\n{text}");
    Ok(CoreBench {
        write_gbps: bytes(thrpt("rc_write_64KiB_mtu4096_icrc").ok_or_else(missing)?),
        small_mpps: elems(thrpt("rc_write_256B_packets").ok_or_else(missing)?),
        memcpy_gbps: bytes(thrpt("memcpy_1MiB").ok_or_else(missing)?),
    })
}

/// CPU time (user + system) a process has used, in seconds.
fn cpu_seconds(pid: u32) -> Result<f64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or("bad /proc stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ticks / hz)
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> Result<f64, String> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| "no VmRSS".into())
}

/// Extracts perftest's average bandwidth (MB/sec, 2^20 bytes) for one size from its table.
pub fn parse_bw_avg(stdout: &str, size: u64) -> Option<f64> {
    stdout.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.len() >= 4 && cols[0].parse::<u64>().ok()? == size)
            .then(|| cols[3].parse::<f64>().ok())
            .flatten()
    })
}

/// Extracts perftest's typical latency (µs) for one size from its table.
pub fn parse_lat_typical(stdout: &str, size: u64) -> Option<f64> {
    stdout.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.len() >= 5 && cols[0].parse::<u64>().ok()? == size)
            .then(|| cols[4].parse::<f64>().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_tables_are_parsed() {
        let bw =
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n \
                  65536      5000             2765.12            2764.90\t\t   0.044238\n";
        assert_eq!(parse_bw_avg(bw, 65536), Some(2764.90));
        let lat =
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]\n \
                   2       1000          1.71           5.36         1.80             1.85\n";
        assert_eq!(parse_lat_typical(lat, 2), Some(1.80));
    }

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

    #[test]
    fn a_failure_is_noted_once_and_numbered() {
        let mut notes = Notes::default();
        assert_eq!(notes.fig(&Ok(1.234), 2, "GB/s"), "1.23 GB/s");
        assert_eq!(notes.fig(&Err("timed out".into()), 2, "µs"), "failed [1]");
        assert_eq!(notes.fig(&Err("refused".into()), 2, "µs"), "failed [2]");
        assert_eq!(notes.fig(&Err("timed out".into()), 2, "µs"), "failed [1]");
        assert_eq!(notes.0, ["timed out", "refused"]);
    }
}
