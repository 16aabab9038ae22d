//! Scale and idle cost: many RC QPs between two daemons, 100 idle processes on one
//! daemon (how fast they are all ready, the daemon's CPU while they idle), and the daemon's
//! resident memory at idle, with them, and per idle QP, read from `/proc`.

use super::figure::Figure;
use super::perftest::parse_bw_avg;
use super::site::{self, Net, Site};
use std::path::Path;
use std::time::{Duration, Instant};

/// What scale and idle measurements found.
pub struct Scale {
    /// (QPs asked for, figure in GB/s) for each attempt of `ib_write_bw -q`, largest first.
    pub many_qps: Vec<(u32, Figure)>,
    pub processes: Figure,
    pub setup_secs: Figure,
    pub idle_cpu: Figure,
    pub rss_idle: Figure,
    pub rss_100: Figure,
    pub kib_per_qp: Figure,
}

/// `ib_write_bw -q N` between the two daemons at perftest's defaults otherwise (send
/// queue depth 128, so one CQ of 128 000 entries, and the 67 ms ACK timeout), for N =
/// 1000 and then smaller until one works; every attempt with its figure or failure. It
/// needs the devices' ConnectX-sized `max_cqe` and the core's device window of packets in
/// flight (docs/performance.md).
pub fn qps_between_daemons(site: &Site) -> Vec<(u32, Figure)> {
    let mut tries = Vec::new();
    for q in [1000u32, 500, 200, 100] {
        let qs = q.to_string();
        let figure = site
            .perftest(
                "ib_write_bw",
                &["-q", &qs, "-s", "4096", "-n", "128"],
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
pub fn scale_one_host(bin: &Path, lib: &Path, dir: &Path, many_qps: Vec<(u32, Figure)>) -> Scale {
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
pub fn idle_clients(
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

pub fn idle_cost(bin: &Path, lib: &Path, dir: &Path, scale: &mut Scale) -> Result<(), String> {
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

/// CPU time (user + system) a process has used, in seconds.
pub fn cpu_seconds(pid: u32) -> Result<f64, String> {
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
pub fn rss_kib(pid: u32) -> Result<f64, String> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| "no VmRSS".into())
}
