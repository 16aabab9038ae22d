//! Helpers for the end-to-end tests: daemons, network namespaces, unmodified programs.
//!
//! The tests find `rdma-emud`, `rdma-emu` and the shim libraries through
//! `RDMA_EMU_BIN_DIR` / `RDMA_EMU_LIB_DIR` (set by `cargo xtask test`), falling back to
//! `target/release`. A test that needs something this machine lacks (root for network
//! namespaces, a program from Debian's packages) prints why and returns early — except
//! under CI (`CI` set), where `.ci/run` installs everything and runs as root, so there the
//! same condition fails the test instead of passing it silently.
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub mod releases;
pub mod two_host;

/// Flags for every tshark that reads our captures. A SEND's payload is the application's
/// bytes, so no heuristic dissector may claim it. The RPC-over-RDMA heuristics would claim
/// RoCE/iWARP payloads. The InfiniBand dissector's Ethernet-over-IB heuristic
/// (`eth_over_ib`) reads a payload whose first two bytes are a known EtherType and whose
/// next two are zero as that protocol: perftest fills its buffers with random bytes, and a
/// 2-byte `ib_send_lat` payload of 0x888e with its two zero pad bytes once made tshark
/// report 500 malformed EAPOL frames in the interop capture. And TCP's heuristic
/// dissectors (MPA's among them) go before the port tables, because an ephemeral port can
/// be some protocol's registered one (a client port of 44818 once made tshark read an
/// MPA Request as EtherNet/IP). The names are tshark 4.0's (Debian 12); tshark refuses
/// to run with a name it does not know, so a wrong one fails loudly.
pub const TSHARK_FLAGS: [&str; 8] = [
    "--disable-heuristic",
    "rpcrdma_infiniband",
    "--disable-heuristic",
    "rpcrdma_iwarp",
    "--disable-heuristic",
    "eth_over_ib",
    "-o",
    "tcp.try_heuristic_first:TRUE",
];

/// The address a smoltcp siw device on the host with kernel address `kernel` (…`.1` or
/// …`.2`, IPv6 …`::1` or …`::2`, as [`two_hosts`] gives them) takes: …`.11` or …`.12`
/// (…`::11`, …`::12`), on the same subnet, and not the kernel's (issue 8).
pub fn smoltcp_own_addr(kernel: &str) -> String {
    let at = kernel.rfind(['.', ':']).expect("an IP address");
    format!("{}1{}", &kernel[..=at], &kernel[at + 1..])
}

/// The UDP port 4791 and the programs' TCP ports are per network namespace: tests that
/// start daemons run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the lock that serialises end-to-end tests (poisoning from a failed test is fine).
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(PathBuf::from).unwrap_or(here)
}

/// Folder holding `rdma-emud` and `rdma-emu`.
pub fn bin_dir() -> PathBuf {
    std::env::var_os("RDMA_EMU_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/release"))
}

/// Folder holding the shim's libibverbs.so.1 and friends.
pub fn lib_dir() -> PathBuf {
    std::env::var_os("RDMA_EMU_LIB_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| bin_dir().join("rdma-emu-lib"))
}

/// True under CI, where every precondition must hold.
pub fn under_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false")
}

/// Says why a test cannot run here. Under CI that is a failure; elsewhere the test prints
/// the reason and the caller returns early.
#[must_use]
pub fn cannot_run(why: &str) -> bool {
    if under_ci() {
        panic!("CI must be able to run this test, but: {why}");
    }
    eprintln!("SKIPPED: {why}");
    true
}

/// True when `program` is on PATH.
pub fn have_program(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Early return for a test when a program from Debian's packages is missing.
pub fn missing(programs: &[&str]) -> bool {
    for p in programs {
        if !have_program(p) {
            return cannot_run(&format!(
                "{p} is not installed (apt-get install ibverbs-utils perftest rdmacm-utils)"
            ));
        }
    }
    false
}

/// The artefacts every end-to-end test needs; a clear failure when they were not built.
pub fn require_build() {
    for (path, hint) in [
        (
            bin_dir().join("rdma-emud"),
            "cargo build --release -p emulator",
        ),
        (lib_dir().join("libibverbs.so.1"), "cargo xtask shim"),
    ] {
        assert!(
            path.exists(),
            "{} is missing: run the tests with `cargo xtask test` (or build it: {hint})",
            path.display()
        );
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A network namespace this test created; deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn exec_prefix(&self) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.name.clone(),
        ]
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_file(netns_owner_file(&self.name));
    }
}

/// Where the test that made namespace `name` is written down, so that a namespace left
/// behind can be traced to its test ([`sweep_dead_namespaces`]).
fn netns_owner_file(name: &str) -> PathBuf {
    std::env::temp_dir().join("rdmaemu-netns").join(name)
}

/// Notes which program and test made namespace `name`.
fn note_netns_owner(name: &str) {
    let file = netns_owner_file(name);
    if let Some(dir) = file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let _ = std::fs::write(file, format!("{} {test}", exe.display()));
}

/// Runs a shell script; its stderr is the error.
pub fn sh(script: &str) -> Result<(), String> {
    let out = Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Deletes the namespaces `rdmaemu-PID-…` that a test process no longer alive left
/// behind (one killed before its `Netns` values were dropped), so that a leak of one run
/// neither lingers nor collides with a later process given the same pid. Returns their
/// names.
pub fn sweep_dead_namespaces() -> Vec<String> {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return Vec::new();
    };
    let mut swept = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix("rdmaemu-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let deleted = Command::new("ip")
                .args(["netns", "del", name])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if deleted {
                let owner = std::fs::read_to_string(netns_owner_file(name))
                    .unwrap_or_else(|_| "an unknown test".into());
                let _ = std::fs::remove_file(netns_owner_file(name));
                swept.push(format!("{name} (made by {owner})"));
            }
        }
    }
    if !swept.is_empty() {
        eprintln!("removed namespaces left by dead test processes: {swept:?}");
    }
    swept
}

/// A namespace `rdmaemu-PID-TAG` with only `lo`, up; with `multicast`, `lo` also carries
/// multicast (it lacks the MULTICAST flag by default) and routes every group. `None` with
/// the reason (a failure under CI) when this machine cannot make one.
pub fn loopback_ns(tag: &str, multicast: bool) -> Option<Netns> {
    if !is_root() {
        let _ = cannot_run("network namespaces need root");
        return None;
    }
    sweep_dead_namespaces();
    let ns = Netns {
        name: format!("rdmaemu-{}-{tag}", std::process::id()),
    };
    let n = &ns.name;
    let mut script = format!("set -e\nip netns add {n}\nip -n {n} link set lo up\n");
    if multicast {
        script += &format!(
            "ip -n {n} link set lo multicast on\nip -n {n} route add 224.0.0.0/4 dev lo\n"
        );
    }
    note_netns_owner(&ns.name);
    match sh(&script) {
        Ok(()) => Some(ns),
        Err(e) => {
            let _ = cannot_run(&format!("cannot create a network namespace: {e}"));
            None
        }
    }
}

/// Two hosts: two namespaces joined by a veth pair, `10.211.N.1/24` and `10.211.N.2/24`.
pub struct TwoHosts {
    pub a: Netns,
    pub b: Netns,
    pub addr_a: String,
    pub addr_b: String,
    pub iface: &'static str,
}

/// Creates two namespaces joined by veth, or `None` (with the reason printed, or a
/// failure under CI) when this machine cannot.
pub fn two_hosts() -> Option<TwoHosts> {
    if !is_root() {
        let _ = cannot_run("network namespaces need root");
        return None;
    }
    sweep_dead_namespaces();
    let id = std::process::id() % 250;
    let a = Netns {
        name: format!("rdmaemu-{}-a", std::process::id()),
    };
    let b = Netns {
        name: format!("rdmaemu-{}-b", std::process::id()),
    };
    let addr_a = format!("10.211.{id}.1");
    let addr_b = format!("10.211.{id}.2");
    let iface = "eth0";
    let script = format!(
        "set -e
         ip netns add {a}
         ip netns add {b}
         ip link add rdmaemu{id}a type veth peer name rdmaemu{id}b
         ip link set rdmaemu{id}a netns {a}
         ip link set rdmaemu{id}b netns {b}
         ip -n {a} link set rdmaemu{id}a name {iface}
         ip -n {b} link set rdmaemu{id}b name {iface}
         ip -n {a} addr add {addr_a}/24 dev {iface}
         ip -n {b} addr add {addr_b}/24 dev {iface}
         ip -n {a} link set lo up
         ip -n {b} link set lo up
         ip -n {a} link set {iface} up
         ip -n {b} link set {iface} up",
        a = a.name,
        b = b.name,
    );
    note_netns_owner(&a.name);
    note_netns_owner(&b.name);
    let out = Command::new("sh").args(["-c", &script]).output();
    match out {
        Ok(o) if o.status.success() => Some(TwoHosts {
            a,
            b,
            addr_a,
            addr_b,
            iface,
        }),
        Ok(o) => {
            let _ = cannot_run(&format!(
                "cannot create network namespaces: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            None
        }
        Err(e) => {
            let _ = cannot_run(&format!("cannot run ip: {e}"));
            None
        }
    }
}

/// A running `rdma-emud`; stopped with SIGTERM on drop (its log printed if it failed).
pub struct Daemon {
    child: Child,
    pub socket: PathBuf,
    pub log: PathBuf,
    _dir: TempDir,
}

impl Daemon {
    /// Starts a daemon with its default device (`rxe0` on loopback).
    pub fn start() -> Daemon {
        Daemon::start_with(None, &[])
    }

    /// Starts a daemon inside `netns` (if any) with extra arguments.
    pub fn start_with(netns: Option<&Netns>, args: &[&str]) -> Daemon {
        Daemon::start_env(netns, args, &[])
    }

    /// Starts a daemon inside `netns` (if any) with extra arguments and environment.
    pub fn start_env(netns: Option<&Netns>, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        Daemon::start_under(netns, &[], args, env)
    }

    /// Starts a daemon inside `netns` (if any) through `wrapper` (a command that runs the
    /// rest of its arguments, such as `setpriv --bounding-set -net_raw`).
    pub fn start_under(
        netns: Option<&Netns>,
        wrapper: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        require_build();
        let dir = TempDir::new("daemon");
        let socket = dir.path().join("rdma-emud.sock");
        let log = dir.path().join("rdma-emud.log");
        let mut argv: Vec<String> = netns.map(Netns::exec_prefix).unwrap_or_default();
        argv.extend(wrapper.iter().map(|s| s.to_string()));
        argv.push(bin_dir().join("rdma-emud").display().to_string());
        argv.push("--socket".into());
        argv.push(socket.display().to_string());
        argv.extend(args.iter().map(|s| s.to_string()));
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("daemon log file"))
            .spawn()
            .expect("cannot start rdma-emud");
        let mut daemon = Daemon {
            child,
            socket,
            log,
            _dir: dir,
        };
        let start = Instant::now();
        while !daemon.socket.exists() {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                panic!("rdma-emud exited with {status}:\n{}", daemon.log_text());
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "rdma-emud did not create its socket in 20 s:\n{}",
                daemon.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        daemon
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Process id (for CPU measurements).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the daemon with SIGKILL (no chance to clean up) and reaps it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The index of this daemon's IPv4 RoCE v2 GID, as `ibv_devinfo -v` shows it. Each
    /// host must use its own: whether a veth's IPv6 link-local address (listed first)
    /// has left duplicate-address detection when a daemon starts is timing, so two
    /// daemons' tables can differ.
    pub fn ipv4_gid_index(&self, netns: Option<&Netns>) -> String {
        let out = self
            .program(netns, &["ibv_devinfo", "-v"])
            .wait(Duration::from_secs(60));
        out.assert_success();
        roce_v2_ipv4_gid_index(&out.stdout)
            .expect("an IPv4 RoCE v2 GID")
            .to_string()
    }

    /// Runs `rdma-emu ARGS` (the management CLI) against this daemon and waits for it.
    pub fn cli(&self, netns: Option<&Netns>, args: &[&str]) -> Output {
        let mut argv: Vec<String> = netns.map(Netns::exec_prefix).unwrap_or_default();
        argv.push(bin_dir().join("rdma-emu").display().to_string());
        argv.push("--socket".into());
        argv.push(self.socket.display().to_string());
        argv.extend(args.iter().map(|s| s.to_string()));
        let out = Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .unwrap_or_else(|e| panic!("cannot run rdma-emu: {e}"));
        Output {
            status: Some(out.status),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            argv: args.join(" "),
        }
    }

    /// A device counter from `rdma-emu stat DEVICE`.
    pub fn counter(&self, netns: Option<&Netns>, device: &str, name: &str) -> u64 {
        let out = self.cli(netns, &["stat", device]);
        out.assert_success();
        let words: Vec<&str> = out.stdout.split_whitespace().collect();
        words
            .windows(2)
            .find(|w| w[0] == name)
            .and_then(|w| w[1].parse().ok())
            .unwrap_or_else(|| panic!("no counter {name} in:\n{}", out.stdout))
    }

    /// `rdma-emu stat DEVICE` under a heading naming the device and namespace, for a
    /// failure's message: what the daemon counted (drops, timeouts, retries, NAKs).
    pub fn stat_report(&self, netns: Option<&Netns>, device: &str) -> String {
        let stat = self.cli(netns, &["stat", device]).stdout;
        let host = netns.map_or("host", |n| n.name.as_str());
        format!("--- {device} of {host} ---\n{stat}")
    }

    /// Runs an unmodified program against this daemon (through `rdma-emu run`).
    pub fn program(&self, netns: Option<&Netns>, argv: &[&str]) -> Program {
        Program::new(self, netns, argv)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our own child's pid; no memory is involved.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- rdma-emud log ---\n{}", self.log_text());
        }
    }
}

/// What a finished program printed.
#[derive(Debug)]
pub struct Output {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub argv: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Panics with everything the program printed unless it exited 0.
    pub fn assert_success(&self) -> &Self {
        assert!(
            self.success(),
            "`{}` failed ({}):\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.argv,
            self.status.map_or("timed out".into(), |s| s.to_string()),
            self.stdout,
            self.stderr
        );
        self
    }
}

/// tshark's output for `pcap` with `args` (after [`TSHARK_FLAGS`]); a panic when it fails.
pub fn tshark(pcap: &Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .args(TSHARK_FLAGS)
        .arg("-r")
        .arg(pcap)
        .args(args)
        .output()
        .expect("tshark -r");
    assert!(
        out.status.success(),
        "tshark {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `rdma-emu decode PCAP`: what it printed; a panic (with everything it printed) unless
/// it exited 0, i.e. found no bad ICRC, CRC or frame.
pub fn decode(pcap: &Path) -> String {
    let out = Command::new(bin_dir().join("rdma-emu"))
        .arg("decode")
        .arg(pcap)
        .output()
        .expect("rdma-emu decode");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rdma-emu decode {} found an error ({}):\n{text}{}",
        pcap.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// How many pings an `rping -v -V` client printed (each verified).
pub fn rping_pings(client: &Output) -> usize {
    client
        .stdout
        .lines()
        .filter(|l| l.starts_with("ping data: rdma-ping-"))
        .count()
}

/// What perftest prints when its clock calibration failed (`get_cpu_mhz`: "Correlation
/// coefficient r^2 < 0.9", which CPU contention causes).
pub const PERFTEST_NO_REPORT: &str = "Can't produce a report";

/// Both programs of a pair exited 0; otherwise a panic with what both printed (the side
/// that failed first is often not the one that timed out).
pub fn assert_both(server: &Output, client: &Output) {
    if server.success() && client.success() {
        return;
    }
    let show = |o: &Output| {
        format!(
            "`{}`: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            o.argv,
            o.status.map_or("timed out".into(), |st| st.to_string()),
            o.stdout,
            o.stderr
        )
    };
    panic!("client {}\n\nserver {}", show(client), show(server));
}

/// Runs a perftest server/client pair (`try_pair`), again (at most twice) when perftest
/// could not report because its clock calibration failed; then both must have exited 0.
pub fn perftest_retrying(mut try_pair: impl FnMut() -> (Output, Output)) -> (Output, Output) {
    let mut tries = 0;
    loop {
        tries += 1;
        let (s, c) = try_pair();
        let uncalibrated = [&s, &c]
            .iter()
            .any(|o| !o.success() && o.stderr.contains(PERFTEST_NO_REPORT));
        if !uncalibrated || tries == 3 {
            assert_both(&s, &c);
            return (s, c);
        }
        eprintln!("perftest could not calibrate its clock (run {tries}), again");
    }
}

/// A running program; its output is collected by threads so it never blocks on a pipe.
pub struct Program {
    child: Child,
    argv: String,
    out: std::thread::JoinHandle<String>,
    err: std::thread::JoinHandle<String>,
}

impl Program {
    fn new(daemon: &Daemon, netns: Option<&Netns>, argv: &[&str]) -> Program {
        let mut full: Vec<String> = netns.map(Netns::exec_prefix).unwrap_or_default();
        full.push(bin_dir().join("rdma-emu").display().to_string());
        full.push("run".into());
        full.push("--".into());
        full.extend(argv.iter().map(|s| s.to_string()));
        let mut child = Command::new(&full[0])
            .args(&full[1..])
            .env("RDMA_EMU_SOCKET", &daemon.socket)
            .env("RDMA_EMU_LIB_DIR", lib_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", argv.join(" ")));
        let mut so = child.stdout.take().expect("piped stdout");
        let mut se = child.stderr.take().expect("piped stderr");
        let out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = so.read_to_string(&mut s);
            s
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = se.read_to_string(&mut s);
            s
        });
        Program {
            child,
            argv: argv.join(" "),
            out,
            err,
        }
    }

    /// Process id (`rdma-emu run` execs the program, so this is the program itself).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True while the program runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGKILL: the program dies with no chance to clean up.
    pub fn kill9(&mut self) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
    }

    /// Waits at most `limit`; a program still running then is killed and reported as
    /// timed out (status `None`).
    pub fn wait(mut self, limit: Duration) -> Output {
        let start = Instant::now();
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if start.elapsed() > limit => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => break None,
            }
        };
        Output {
            status,
            stdout: self.out.join().unwrap_or_default(),
            stderr: self.err.join().unwrap_or_default(),
            argv: self.argv,
        }
    }
}

/// Waits until a TCP port listens in `netns` (or here), without connecting to it: the
/// programs accept exactly one connection.
pub fn wait_listening(netns: Option<&Netns>, port: u16, limit: Duration) -> bool {
    let start = Instant::now();
    let mut argv: Vec<String> = netns.map(Netns::exec_prefix).unwrap_or_default();
    argv.extend(["ss".into(), "-Hltn".into(), format!("sport = :{port}")]);
    while start.elapsed() < limit {
        if let Ok(o) = Command::new(&argv[0]).args(&argv[1..]).output() {
            if o.status.success() && !o.stdout.trim_ascii().is_empty() {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// The verdict of rdmacm-utils' ucmatose and udaddy: every side finished with status 0.
pub fn assert_complete(outputs: &[&Output]) {
    for out in outputs {
        assert!(
            out.stdout.contains("test complete") && out.stdout.contains("return status 0"),
            "`{}` output:\n{}",
            out.argv,
            out.stdout
        );
    }
}

/// Waits until an RDMA CM id of `daemon` listens on `port` (as `rdma-emu res cm_id`
/// lists it): RDMA CM servers open no TCP port that `ss` could see.
pub fn wait_cm_listening(
    daemon: &Daemon,
    netns: Option<&Netns>,
    port: u16,
    limit: Duration,
) -> bool {
    let start = Instant::now();
    let mut argv: Vec<String> = netns.map(Netns::exec_prefix).unwrap_or_default();
    argv.push(bin_dir().join("rdma-emu").display().to_string());
    argv.extend([
        "--socket".into(),
        daemon.socket.display().to_string(),
        "res".into(),
        "cm_id".into(),
    ]);
    let suffix = format!(":{port}");
    while start.elapsed() < limit {
        if let Ok(o) = Command::new(&argv[0]).args(&argv[1..]).output() {
            let text = String::from_utf8_lossy(&o.stdout);
            let listening = text.lines().any(|l| {
                l.contains(" state LISTEN ")
                    && l.split(" src-addr ")
                        .nth(1)
                        .and_then(|rest| rest.split_whitespace().next())
                        .is_some_and(|a| a.ends_with(&suffix))
            });
            if o.status.success() && listening {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// Runs a server/client pair of one program and returns both outputs. The server starts
/// first and must be listening on `port` before the client starts.
#[allow(clippy::too_many_arguments)]
pub fn run_pair(
    server_daemon: &Daemon,
    server_ns: Option<&Netns>,
    server: &[&str],
    client_daemon: &Daemon,
    client_ns: Option<&Netns>,
    client: &[&str],
    port: u16,
    limit: Duration,
) -> (Output, Output) {
    run_pair_when(
        server_daemon.program(server_ns, server),
        || wait_listening(server_ns, port, Duration::from_secs(20)),
        &format!("TCP port {port}"),
        || client_daemon.program(client_ns, client),
        limit,
    )
}

/// Runs a started server's client once `ready` says the server listens (on `what`, for
/// the message when it never does), and returns both outputs. A client that failed
/// leaves its server 3 s to finish.
pub fn run_pair_when(
    srv: Program,
    ready: impl FnOnce() -> bool,
    what: &str,
    client: impl FnOnce() -> Program,
    limit: Duration,
) -> (Output, Output) {
    if !ready() {
        let out = srv.wait(Duration::from_millis(100));
        panic!(
            "server `{}` never listened on {what}:\n{}\n{}",
            out.argv, out.stdout, out.stderr
        );
    }
    let c = client().wait(limit);
    let s = srv.wait(if c.success() {
        limit
    } else {
        Duration::from_secs(3)
    });
    (s, c)
}

/// Writes the one-host configuration of an rxe and a siw device on loopback to `path`:
/// `rxe0` serves loopback's own address, `siw0` 127.0.0.2, so an RDMA CM program chooses
/// the device by the address it uses.
pub fn write_rxe_siw_loopback_config(path: &Path) {
    std::fs::write(
        path,
        "[[device]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"lo\"\n\n\
         [[device]]\nname = \"siw0\"\ntype = \"siw\"\nnetdev = \"lo\"\n\
         addrs = [\"127.0.0.2\"]\n",
    )
    .expect("write the configuration");
}

/// Compiles `tests/c/NAME.c` with gcc against the system's libibverbs; `None` (with the
/// reason) when the headers are missing outside CI.
pub fn compile_c(name: &str, dir: &Path) -> Option<std::path::PathBuf> {
    compile_c_with(name, dir, false)
}

/// [`compile_c`], also against librdmacm when `rdmacm`.
pub fn compile_c_with(name: &str, dir: &Path, rdmacm: bool) -> Option<std::path::PathBuf> {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        let _ = cannot_run("libibverbs-dev is not installed (apt-get install libibverbs-dev)");
        return None;
    }
    if rdmacm && !Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        let _ = cannot_run("librdmacm-dev is not installed (apt-get install librdmacm-dev)");
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("c")
        .join(format!("{name}.c"));
    let exe = dir.join(name);
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(rdmacm.then_some("-lrdmacm"))
        .arg("-libverbs")
        .output()
        .expect("cannot run gcc");
    assert!(
        out.status.success(),
        "gcc failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

/// `tcpdump -w` on an interface of a namespace; killed on drop if not stopped.
///
/// Immediate mode and `-U` write each packet as it comes (otherwise packets wait in the
/// kernel's ring for its block timeout, and those of the last second are lost at SIGINT).
/// Immediate mode's ring has one slot per snapshot length of buffer: with the default
/// 256 KiB snapshots and 2 MiB buffer that is 8 packets, which a busy machine overruns, so
/// snapshots are cut to 64 KiB (an IP packet's limit) in a 32 MiB buffer.
pub struct Tcpdump {
    child: Child,
    stderr: std::sync::mpsc::Receiver<String>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Tcpdump {
    /// Starts tcpdump and returns once it says it listens.
    pub fn start(ns: &Netns, iface: &str, filter: &str, pcap: &Path) -> Tcpdump {
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                "tcpdump",
                "--immediate-mode",
                "-U",
            ])
            // 128 MiB of kernel buffer: a loaded CI machine can deschedule tcpdump for
            // long enough that 32 MiB overflowed (17 of 20 351 frames dropped once).
            .args(["-s", "65535", "-B", "131072", "-i", iface, "-w"])
            .arg(pcap)
            .arg(filter)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start tcpdump");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        // tcpdump says "listening on IFACE" once its socket is bound, and its counts when
        // it stops; a thread reads its stderr so it never blocks.
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        let mut said = Vec::new();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) if line.contains("listening on") => {
                    return Tcpdump {
                        child,
                        stderr: rx,
                        reader: Some(reader),
                    };
                }
                Ok(line) => said.push(line),
                Err(_) => {
                    if let Ok(Some(status)) = child.try_wait() {
                        panic!("tcpdump exited with {status}: {}", said.join("\n"));
                    }
                }
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "tcpdump did not start listening in 20 s: {}",
            said.join("\n")
        );
    }

    /// Stops tcpdump so that it writes out and closes the file; fails if the kernel
    /// dropped any packet (the capture would then miss FPDUs).
    pub fn stop(mut self) {
        // SAFETY: kill(2) on our own child's pid; SIGINT makes tcpdump close the file.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let _ = self.child.wait();
        // The reader ends at tcpdump's exit, having passed on its last lines.
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let said: Vec<String> = self.stderr.try_iter().collect();
        assert!(
            said.iter().any(|l| l == "0 packets dropped by kernel"),
            "tcpdump lost packets: {}",
            said.join("\n")
        );
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A private temporary folder, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("rdma-emu-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The index of the first RoCE v2 GID with an IPv4-mapped address in `ibv_devinfo -v`
/// output (what `-g`/`-x` take).
pub fn roce_v2_ipv4_gid_index(devinfo_v: &str) -> Option<u32> {
    devinfo_v.lines().find_map(|line| {
        let line = line.trim();
        let rest = line.strip_prefix("GID[")?;
        let (idx, tail) = rest.split_once(']')?;
        (tail.contains("::ffff:") && tail.contains("RoCE v2")).then(|| idx.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_index_parsed_from_devinfo_output() {
        let text = "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0000:0000:0000:0001, RoCE v2\n\
                    \t\t\tGID[  1]:\t\t::ffff:127.0.0.1, RoCE v2\n";
        assert_eq!(roce_v2_ipv4_gid_index(text), Some(1));
        assert_eq!(
            roce_v2_ipv4_gid_index("GID[  0]: ::ffff:1.2.3.4, RoCE v1"),
            None
        );
    }

    #[test]
    fn namespaces_of_dead_test_processes_are_swept_with_their_maker_named() {
        if !is_root() {
            let _ = cannot_run("network namespaces need root");
            return;
        }
        // A pid that was alive and is no more.
        let mut child = Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let name = format!("rdmaemu-{dead}-sweep");
        sh(&format!("ip netns add {name}")).unwrap();
        std::fs::create_dir_all(netns_owner_file(&name).parent().unwrap()).unwrap();
        std::fs::write(netns_owner_file(&name), "some_binary some_test").unwrap();
        let swept = sweep_dead_namespaces();
        assert!(
            swept.contains(&format!("{name} (made by some_binary some_test)")),
            "{swept:?}"
        );
        let mine = loopback_ns("sweep-live", false).expect("namespace");
        sweep_dead_namespaces();
        let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
        let listed = String::from_utf8_lossy(&listed.stdout).to_string();
        assert!(!listed.contains(&name), "{listed}");
        assert!(
            listed.contains(&mine.name),
            "a live process's namespace kept: {listed}"
        );
        assert!(!netns_owner_file(&name).exists());
    }
}
