//! `cargo xtask bench`: rdma-emu's figures next to this machine's limits, measured in the
//! same run, written to `docs/performance-latest.md` as ratios (machines here are shared and
//! noisy; one absolute number means little).
//!
//! Limits: single-core memcpy of 64 MiB; loopback UDP with 4 KiB + RoCE-header datagrams,
//! plain and with GSO+GRO; a UDP ping-pong round trip with busy polling.
//! rdma-emu: perftest's ib_write_bw / ib_read_bw / ib_send_bw at 64 KiB and
//! ib_write_lat / ib_send_lat at 2 B, on one host through one daemon; ib_write_bw and
//! ib_write_lat between two daemons in two network namespaces joined by veth (root only);
//! the core's criterion bench (`cargo bench -p emu-core`); the idle cost. The load average
//! is recorded, since the machines are shared. `docs/performance.md` is written by hand
//! from these results, with before/after comparisons.
use std::fmt::Write as _;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// A RoCE v2 packet at a 4096-byte path MTU: BTH (12) + RETH (16) + payload + ICRC (4).
const ROCE_DATAGRAM: usize = 4096 + 12 + 16 + 4;
const MEASURE: Duration = Duration::from_secs(2);

pub fn run(_args: &[String]) -> Result<(), String> {
    crate::ensure_debian_packages(&["perftest", "iproute2"])?;
    let (bin, lib) = crate::build_release()?;
    let load0 = loadavg();
    let memcpy = memcpy_gbps();
    println!("memcpy 64 MiB, one core: {memcpy:.2} GB/s");
    let udp_plain = udp_throughput(false)?;
    println!("UDP loopback, {ROCE_DATAGRAM} B datagrams: {udp_plain:.2} GB/s");
    let udp_gso = udp_throughput(true)?;
    println!("UDP loopback with GSO+GRO: {udp_gso:.2} GB/s");
    let rtt = udp_busy_rtt_us()?;
    println!("UDP ping-pong, busy polling: {rtt:.2} us round trip");

    let perf = crate::demo::Perftest::start(&bin, &lib)?;
    let mut rows = Vec::new();
    for (program, size) in [
        ("ib_write_bw", 65536),
        ("ib_read_bw", 65536),
        ("ib_send_bw", 65536),
    ] {
        let gbps = perf.bandwidth_gbps(program, size)?;
        println!("{program} {size} B: {gbps:.2} GB/s");
        rows.push((
            format!("{program}, {size} B, one host"),
            format!("{gbps:.2} GB/s"),
            format!("{:.2} of memcpy", gbps / memcpy),
        ));
    }
    for program in ["ib_write_lat", "ib_send_lat"] {
        let us = perf.latency_us(program, 2)?;
        println!("{program} 2 B: {us:.2} us");
        rows.push((
            format!("{program}, 2 B, one host"),
            format!("{us:.2} us"),
            format!("{:.2} x UDP round trip / 2", us / (rtt / 2.0)),
        ));
    }
    drop(perf);
    match two_namespaces(&bin, &lib) {
        Ok(two) => {
            println!(
                "two namespaces over veth: ib_write_bw 64 KiB {:.2} GB/s, ib_write_lat 2 B {:.2} us",
                two.write_bw_gbps, two.write_lat_us
            );
            rows.push((
                "ib_write_bw, 65536 B, two daemons in two namespaces (veth)".into(),
                format!("{:.2} GB/s", two.write_bw_gbps),
                format!(
                    "{:.2} of memcpy, {:.2} of loopback UDP GSO+GRO",
                    two.write_bw_gbps / memcpy,
                    two.write_bw_gbps / udp_gso
                ),
            ));
            rows.push((
                "ib_write_lat, 2 B, two daemons in two namespaces (veth)".into(),
                format!("{:.2} us", two.write_lat_us),
                format!("{:.2} x UDP round trip / 2", two.write_lat_us / (rtt / 2.0)),
            ));
        }
        Err(e) => println!("two namespaces skipped: {e}"),
    }
    let core = core_bench();
    match &core {
        Ok(c) => println!(
            "core alone: RC WRITE 64 KiB {:.2} GB/s, 256 B {:.2} Mpackets/s, memcpy 1 MiB {:.2} GB/s",
            c.write_gbps, c.small_mpps, c.memcpy_gbps
        ),
        Err(e) => println!("core bench skipped: {e}"),
    }
    let perf = crate::demo::Perftest::start(&bin, &lib)?;
    let idle = idle_cost(&perf)?;
    println!(
        "idle daemon with {} clients: {:.2}% CPU; {:.1} KiB per idle RC QP",
        idle.clients, idle.cpu_percent, idle.kib_per_qp
    );
    drop(perf);

    let mut doc = String::new();
    let _ = writeln!(doc, "# Performance\n");
    let _ = writeln!(
        doc,
        "Measured by `cargo xtask bench` on this project's machine (2 cores, shared). Every \
         rdma-emu figure is given as a ratio to a limit measured in the same run.\n"
    );
    let _ = writeln!(
        doc,
        "## Limits measured in this run\n\n| limit | value |\n|---|---|"
    );
    let _ = writeln!(doc, "| memcpy 64 MiB, one core | {memcpy:.2} GB/s |");
    let _ = writeln!(
        doc,
        "| UDP loopback, {ROCE_DATAGRAM} B datagrams | {udp_plain:.2} GB/s |"
    );
    let _ = writeln!(doc, "| UDP loopback, GSO+GRO | {udp_gso:.2} GB/s |");
    let _ = writeln!(
        doc,
        "| UDP ping-pong round trip, busy polling | {rtt:.2} µs |"
    );
    let _ = writeln!(
        doc,
        "\n## rdma-emu\n\n| test | value | ratio |\n|---|---|---|"
    );
    for (name, value, ratio) in rows {
        let _ = writeln!(doc, "| {name} | {value} | {ratio} |");
    }
    let _ = writeln!(
        doc,
        "\n## Idle cost\n\n| what | value | target |\n|---|---|---|"
    );
    let _ = writeln!(
        doc,
        "| daemon CPU with {} idle connected clients (10 s) | {:.2} % | < 1 % |",
        idle.clients, idle.cpu_percent
    );
    let _ = writeln!(
        doc,
        "| daemon memory per idle RC QP (1000 QPs) | {:.1} KiB | < 16 KiB |",
        idle.kib_per_qp
    );
    if let Ok(c) = &core {
        let _ = writeln!(
            doc,
            "\n## The core alone (cargo bench -p emu-core, in this run)\n\n| what | value | ratio |\n|---|---|---|"
        );
        let _ = writeln!(
            doc,
            "| RC WRITE 64 KiB, MTU 4096, ICRC on, one core | {:.2} GB/s | {:.2} of memcpy 64 MiB, {:.2} of memcpy 1 MiB (in cache) |",
            c.write_gbps,
            c.write_gbps / memcpy,
            c.write_gbps / c.memcpy_gbps
        );
        let _ = writeln!(
            doc,
            "| RC WRITE 256 B messages | {:.2} M packets/s | |",
            c.small_mpps
        );
    }
    let _ = writeln!(
        doc,
        "\nLoad average (1 min) at start / end: {load0} / {}.",
        loadavg()
    );
    let path = crate::workspace_root().join("docs/performance-latest.md");
    std::fs::write(&path, doc).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("written to {}", path.display());
    Ok(())
}

/// The 1-minute load average (the machines here are shared: say how loaded).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
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

struct TwoHosts {
    write_bw_gbps: f64,
    write_lat_us: f64,
}

/// Two network namespaces joined by veth, one daemon in each; removed when dropped.
struct Namespaces {
    names: [String; 2],
    daemons: Vec<std::process::Child>,
    dir: std::path::PathBuf,
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        for n in &self.names {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", n])
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let st = std::process::Command::new("ip")
        .args(args)
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("ip: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("`ip {}` failed (needs root)", args.join(" ")))
    }
}

/// ib_write_bw (64 KiB) and ib_write_lat (2 B) between two daemons in two network
/// namespaces joined by veth, over the daemons' UDP backend.
fn two_namespaces(bin: &std::path::Path, lib: &std::path::Path) -> Result<TwoHosts, String> {
    let pid = std::process::id();
    let mut ns = Namespaces {
        names: [format!("emubench-a-{pid}"), format!("emubench-b-{pid}")],
        daemons: Vec::new(),
        dir: std::env::temp_dir().join(format!("rdma-emu-bench-ns-{pid}")),
    };
    std::fs::create_dir_all(&ns.dir).map_err(|e| e.to_string())?;
    let (a, b) = (ns.names[0].clone(), ns.names[1].clone());
    ip(&["netns", "add", &a])?;
    ip(&["netns", "add", &b])?;
    ip(&[
        "link", "add", "ebva", "netns", &a, "type", "veth", "peer", "name", "ebvb", "netns", &b,
    ])?;
    for (n, dev, addr) in [(&a, "ebva", "10.213.0.1/24"), (&b, "ebvb", "10.213.0.2/24")] {
        // No duplicate address detection: the link-local address is usable at once, so
        // the GID table is [link-local, IPv4-mapped] when the daemon starts.
        let _ = std::process::Command::new("ip")
            .args(["netns", "exec", n, "sysctl", "-qw"])
            .arg(format!("net.ipv6.conf.{dev}.accept_dad=0"))
            .status();
        ip(&["-n", n, "addr", "add", addr, "dev", dev])?;
        ip(&["-n", n, "link", "set", dev, "up"])?;
        ip(&["-n", n, "link", "set", "lo", "up"])?;
    }
    let mut sockets = Vec::new();
    for (n, dev) in [(&a, "ebva"), (&b, "ebvb")] {
        let sock = ns.dir.join(format!("{dev}.sock"));
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", n])
            .arg(bin.join("rdma-emud"))
            .args(["--netdev", dev, "--socket"])
            .arg(&sock)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("rdma-emud: {e}"))?;
        ns.daemons.push(child);
        sockets.push(sock);
    }
    for s in &sockets {
        let t = Instant::now();
        while !s.exists() {
            if t.elapsed() > Duration::from_secs(20) {
                return Err(format!("{} did not appear", s.display()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let run = |n: &str, sock: &std::path::Path, argv: &[&str]| {
        std::process::Command::new("ip")
            .args(["netns", "exec", n])
            .arg(bin.join("rdma-emu"))
            .arg("run")
            .arg("--")
            .args(argv)
            .env("RDMA_EMU_SOCKET", sock)
            .env("RDMA_EMU_LIB_DIR", lib)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", argv[0]))
    };
    let pair = |program: &str, size: &str| -> Result<String, String> {
        // perftest's default GID, as tests/tests/perftest.rs runs it.
        let args = [program, "-d", "rxe0", "-F", "-s", size];
        let mut server = run(&a, &sockets[0], &args)?;
        std::thread::sleep(Duration::from_millis(700));
        let mut cargs = args.to_vec();
        cargs.push("10.213.0.1");
        let client = run(&b, &sockets[1], &cargs)?;
        let out = client.wait_with_output().map_err(|e| e.to_string())?;
        let _ = server.wait();
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let bw = pair("ib_write_bw", "65536")?;
    let write_bw_gbps = parse_bw_avg(&bw, 65536)
        .map(|mib| mib * 1048576.0 / 1e9)
        .ok_or_else(|| format!("no 65536 B row in ib_write_bw's output:\n{bw}"))?;
    let lat = pair("ib_write_lat", "2")?;
    let write_lat_us = parse_lat_typical(&lat, 2)
        .ok_or_else(|| format!("no 2 B row in ib_write_lat's output:\n{lat}"))?;
    Ok(TwoHosts {
        write_bw_gbps,
        write_lat_us,
    })
}

struct IdleCost {
    clients: usize,
    cpu_percent: f64,
    kib_per_qp: f64,
}

/// Kills the children when dropped.
struct Clients(Vec<std::process::Child>);

impl Drop for Clients {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `count` idle clients with `qps` QPs each and waits until each says "ready".
fn idle_clients(
    perf: &crate::demo::Perftest,
    exe: &str,
    count: usize,
    qps: usize,
) -> Result<Clients, String> {
    use std::io::BufRead;
    let mut clients = Clients(Vec::new());
    let q = qps.to_string();
    for _ in 0..count {
        clients.0.push(perf.client(&[exe, &q])?);
    }
    for c in &mut clients.0 {
        let out = c.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        std::io::BufReader::new(out)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        if line.trim() != "ready" {
            return Err("an idle client failed to set up its QPs".into());
        }
    }
    Ok(clients)
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

/// What idle clients cost the daemon: CPU with 100 connected clients over 10 s, and
/// resident memory per idle RC QP (one client with 1000 QPs).
fn idle_cost(perf: &crate::demo::Perftest) -> Result<IdleCost, String> {
    let exe = perf.dir().join("idle_client");
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
    let pid = perf.daemon_pid();
    let clients = 100;
    let idle = idle_clients(perf, &exe, clients, 1)?;
    std::thread::sleep(Duration::from_secs(2));
    let (t0, c0) = (Instant::now(), cpu_seconds(pid)?);
    std::thread::sleep(Duration::from_secs(10));
    let cpu_percent = (cpu_seconds(pid)? - c0) / t0.elapsed().as_secs_f64() * 100.0;
    drop(idle);
    std::thread::sleep(Duration::from_secs(1));
    let before = rss_kib(pid)?;
    let many = idle_clients(perf, &exe, 1, 1000)?;
    std::thread::sleep(Duration::from_millis(500));
    let kib_per_qp = (rss_kib(pid)? - before) / 1000.0;
    drop(many);
    Ok(IdleCost {
        clients,
        cpu_percent,
        kib_per_qp,
    })
}

/// Best of several 64 MiB copies on one core, in GB/s (10^9 bytes per second).
fn memcpy_gbps() -> f64 {
    const LEN: usize = 64 << 20;
    let src = vec![0x5au8; LEN];
    let mut dst = vec![0u8; LEN];
    let mut best = f64::MAX;
    for _ in 0..10 {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    LEN as f64 / best / 1e9
}

fn setsockopt_int(sock: &UdpSocket, level: i32, name: i32, value: i32) -> Result<(), String> {
    // SAFETY: the option value is a valid c_int that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "setsockopt({level}, {name}): {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// One sender thread and one receiver thread on loopback for `MEASURE`; bytes received
/// per second in GB/s. With `gso`, the sender hands the kernel 15 datagrams per call
/// (UDP_SEGMENT) and the receiver takes coalesced ones (UDP_GRO).
fn udp_throughput(gso: bool) -> Result<f64, String> {
    let rx = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let tx = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    tx.connect(rx.local_addr().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    setsockopt_int(&rx, libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20)?;
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| e.to_string())?;
    // A GSO send is one UDP datagram of at most 65507 bytes before segmentation.
    let batch = if gso { 65507 / ROCE_DATAGRAM } else { 1 };
    if gso {
        setsockopt_int(&tx, libc::SOL_UDP, libc::UDP_SEGMENT, ROCE_DATAGRAM as i32)?;
        setsockopt_int(&rx, libc::SOL_UDP, libc::UDP_GRO, 1)?;
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let sender = std::thread::spawn(move || {
        let buf = vec![7u8; ROCE_DATAGRAM * batch];
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = tx.send(&buf);
        }
    });
    let mut buf = vec![0u8; 65536];
    let start = Instant::now();
    let mut bytes = 0usize;
    while start.elapsed() < MEASURE {
        if let Ok(n) = rx.recv(&mut buf) {
            bytes += n;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = sender.join();
    Ok(bytes as f64 / secs / 1e9)
}

/// Median round trip of a 2-byte UDP ping-pong between two threads that spin on
/// non-blocking sockets, in microseconds.
fn udp_busy_rtt_us() -> Result<f64, String> {
    let a = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let b = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    a.connect(b.local_addr().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    b.connect(a.local_addr().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    a.set_nonblocking(true).map_err(|e| e.to_string())?;
    b.set_nonblocking(true).map_err(|e| e.to_string())?;
    const ROUNDS: usize = 20000;
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 16];
        let mut n = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        while n < ROUNDS && Instant::now() < deadline {
            if b.recv(&mut buf).is_ok() {
                let _ = b.send(&buf[..2]);
                n += 1;
            }
        }
    });
    let mut samples = Vec::with_capacity(ROUNDS);
    let mut buf = [0u8; 16];
    for _ in 0..ROUNDS {
        let t = Instant::now();
        a.send(&[1, 2]).map_err(|e| e.to_string())?;
        loop {
            if a.recv(&mut buf).is_ok() {
                break;
            }
            if t.elapsed() > Duration::from_secs(1) {
                return Err("UDP ping-pong lost a datagram".into());
            }
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let _ = echo.join();
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
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
}
