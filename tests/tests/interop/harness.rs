//! The plumbing of the interop suite: the scripts in `tests/interop/`, the guest (qemu
//! through `vm.sh`, its shared folder and job queue), the captures on the taps and the
//! RoCE capture's checks (`iwarp.rs` checks the iWARP one).
use rdma_emu_tests::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// From starting qemu to the guest's `ready` file (measured: 28-49 s under TCG, 97 s while
/// two cargo builds shared the two cores).
pub const BOOT_LIMIT: Duration = Duration::from_secs(180);

/// `tests/interop/`, the scripts.
pub fn interop_scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop")
}

/// `$RDMA_EMU_INTEROP_DIR`, default `~/.cache/rdma-emu-interop`: the image and the runs.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("RDMA_EMU_INTEROP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".cache/rdma-emu-interop")
        })
}

/// True when running as root (the namespace, the tap, apt-get and mmdebstrap need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Sends `sig` to a process this test started.
pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a pid this test started; no memory is involved.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Runs a command to completion within `limit` (killed after it); (exit code, output).
pub fn run_bounded(cmd: &mut Command, limit: Duration, log: &Path) -> (Option<i32>, String) {
    let file = std::fs::File::create(log).expect("log file");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log file"))
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let start = Instant::now();
    let code = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s.code(),
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(_) => break None,
        }
    };
    (code, std::fs::read_to_string(log).unwrap_or_default())
}

/// Whether the interop suite may run: not when `RDMA_EMU_SKIP_INTEROP` is set, nor
/// without root (then it says why, and fails under CI).
pub fn interop_wanted() -> bool {
    if std::env::var_os("RDMA_EMU_SKIP_INTEROP").is_some_and(|v| !v.is_empty() && v != "0") {
        eprintln!("SKIPPED: interop suite skipped (RDMA_EMU_SKIP_INTEROP is set)");
        return false;
    }
    if !is_root() {
        let _ = cannot_run(
            "the interop suite needs root (apt-get, mmdebstrap, a network namespace and a tap)",
        );
        return false;
    }
    true
}

/// A new folder `runs/<seconds since 1970><suffix>` in the cache folder; the newest five
/// run folders are kept.
pub fn new_run_dir(suffix: &str) -> PathBuf {
    let runs_dir = cache_dir().join("runs");
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let run_dir = runs_dir.join(format!("{stamp}{suffix}"));
    std::fs::create_dir_all(&run_dir).expect("run folder");
    prune_runs(&runs_dir, 5);
    run_dir
}

/// `prepare.sh ARGS` (host packages, the guest image when missing) within `limit`, its
/// output in `run_dir/prepare.log`: the seconds it took, or None when it failed (said
/// through `cannot_run`).
pub fn prepare(run_dir: &Path, args: &[&str], limit: Duration) -> Option<f64> {
    let t = Instant::now();
    let (code, log) = run_bounded(
        Command::new("bash")
            .arg(interop_scripts().join("prepare.sh"))
            .args(args),
        limit,
        &run_dir.join("prepare.log"),
    );
    if code != Some(0) {
        let _ = cannot_run(&format!(
            "cannot prepare the interop guest (prepare.sh {}: {}):\n{}",
            args.join(" "),
            code.map_or("timed out".into(), |c| format!("exit {c}")),
            tail(&log, 20)
        ));
        return None;
    }
    Some(t.elapsed().as_secs_f64())
}

/// tcpdump on `tap` in `netns`, every frame into `pcap`.
pub fn capture(netns: &Netns, tap: &str, pcap: &Path, log: &Path) -> Capture {
    Capture(
        Command::new("ip")
            .args(["netns", "exec", &netns.name, "tcpdump", "-i", tap, "-U"])
            .args(["-s", "0", "-w"])
            .arg(pcap)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("log"))
            .spawn()
            .expect("cannot start tcpdump"),
    )
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The guest: qemu (through `vm.sh`) and the folder it shares with the host.
pub struct Guest {
    vm: Child,
    pub share: PathBuf,
    pub ready: BTreeMap<String, String>,
}

impl Guest {
    /// Boots the guest with one NIC per (tap in `netns`, the guest's address on it): eth0,
    /// eth1, ... in order, `env` (`VAR=VALUE`) passed to guest-main.sh; waits until it is
    /// ready (rxe0 up, and siw0 with `SIW=1`).
    pub fn boot(
        netns: &Netns,
        share: &Path,
        taps: &[(&str, String)],
        env: &[&str],
        timeout: Duration,
    ) -> Result<Guest, String> {
        Guest::boot_image(netns, share, taps, env, timeout, None)
    }

    /// [`Guest::boot`] from the image in folder `image` (`vm.sh --image`; None: the cache
    /// folder's, Debian 12's own kernel).
    pub fn boot_image(
        netns: &Netns,
        share: &Path,
        taps: &[(&str, String)],
        env: &[&str],
        timeout: Duration,
        image: Option<&Path>,
    ) -> Result<Guest, String> {
        std::fs::create_dir_all(share).map_err(|e| e.to_string())?;
        let mut args: Vec<String> = Vec::new();
        if let Some(dir) = image {
            args.extend(["--image".to_string(), dir.display().to_string()]);
        }
        for (tap, cidr) in taps {
            args.extend(["--tap".to_string(), format!("{tap}={cidr}")]);
        }
        for e in env {
            args.extend(["-e".to_string(), e.to_string()]);
        }
        // Not niced: at nice 19 on a host whose two cores were busy compiling, the guest
        // went silent for 0.4-0.8 s at a time, longer than perftest's and ibv_rc_pingpong's
        // seven 67 ms retries of rdma-emu (docs/interop.md, "Findings").
        let vm = Command::new("bash")
            .arg(interop_scripts().join("vm.sh"))
            .args(["--netns", &netns.name, "--share"])
            .arg(share)
            .args(&args)
            .args(["--timeout", &timeout.as_secs().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(share.join("vm.stderr")).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("cannot start vm.sh: {e}"))?;
        let mut guest = Guest {
            vm,
            share: share.to_path_buf(),
            ready: BTreeMap::new(),
        };
        let start = Instant::now();
        let ready = share.join("ready");
        while !ready.exists() {
            if let Ok(Some(status)) = guest.vm.try_wait() {
                return Err(format!(
                    "qemu exited ({status}) before the guest was ready:\n{}\n--- console ---\n{}",
                    std::fs::read_to_string(share.join("vm.stderr")).unwrap_or_default(),
                    tail(&guest.console(), 30)
                ));
            }
            if start.elapsed() > BOOT_LIMIT {
                return Err(format!(
                    "the guest was not ready in {BOOT_LIMIT:?}:\n{}",
                    tail(&guest.console(), 30)
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let text = std::fs::read_to_string(&ready).map_err(|e| e.to_string())?;
        guest.ready = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(guest)
    }

    /// What the guest printed on its serial console.
    pub fn console(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(self.share.join("console.log")).unwrap_or_default())
            .into_owned()
    }

    /// A value from the guest's `ready` file (`kernel`, `rxe0_gid_index`, ...), or "".
    pub fn get(&self, key: &str) -> &str {
        self.ready.get(key).map_or("", String::as_str)
    }

    /// Drops a job into the guest's queue: `script` runs as `bash` in the guest.
    pub fn job(&self, name: &str, script: &str) -> GuestJob {
        let jobs = self.share.join("jobs");
        let tmp = jobs.join(format!("{name}.tmp"));
        std::fs::write(&tmp, script).expect("write guest job");
        std::fs::rename(&tmp, jobs.join(format!("{name}.sh"))).expect("queue guest job");
        GuestJob {
            dir: jobs,
            name: name.to_string(),
        }
    }

    /// Asks the guest to power off and waits for qemu (killed when it does not stop).
    pub fn stop(mut self) {
        let _ = std::fs::write(self.share.join("stop"), b"");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if let Ok(Some(_)) = self.vm.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        // Drop kills it.
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if let Ok(None) = self.vm.try_wait() {
            // bash exec'd into vm.sh's `ip netns exec ... timeout`, which passes
            // SIGTERM on to qemu.
            signal(self.vm.id(), libc::SIGTERM);
            std::thread::sleep(Duration::from_secs(1));
            if let Some(pid) = std::fs::read_to_string(self.share.join("qemu.pid"))
                .ok()
                .and_then(|p| p.trim().parse::<u32>().ok())
            {
                if Path::new(&format!("/proc/{pid}")).exists() {
                    signal(pid, libc::SIGKILL);
                }
            }
            let _ = self.vm.kill();
            let _ = self.vm.wait();
        }
    }
}

/// A job in the guest's queue.
pub struct GuestJob {
    dir: PathBuf,
    name: String,
}

impl GuestJob {
    fn path(&self, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", self.name))
    }

    /// Waits until the job's server listens (it called `listening PORT`); false when the
    /// job ended first or `limit` passed.
    pub fn wait_listening(&self, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.path("listening").exists() {
                return true;
            }
            if self.path("rc").exists() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Waits for the job's exit status (`None`: timed out, the job is cancelled).
    pub fn wait(&self, limit: Duration) -> (Option<i32>, String) {
        let start = Instant::now();
        let rc = loop {
            if let Ok(rc) = std::fs::read_to_string(self.path("rc")) {
                break rc.trim().parse().ok();
            }
            if start.elapsed() > limit {
                let _ = std::fs::write(self.path("cancel"), b"");
                std::thread::sleep(Duration::from_secs(1));
                break None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        (
            rc,
            std::fs::read_to_string(self.path("out")).unwrap_or_default(),
        )
    }
}

/// tcpdump on the tap; stopped with SIGINT (it then flushes the file) when dropped.
pub struct Capture(pub Child);

impl Capture {
    /// Stops tcpdump (SIGINT, then SIGKILL after 5 s) and waits for it.
    pub fn stop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            signal(self.0.id(), libc::SIGINT);
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = self.0.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the capture checks found.
pub struct CaptureReport {
    pub ok: bool,
    pub text: String,
}

/// Checks the RoCE capture: `rdma-emu decode` must verify every RoCE v2 ICRC (from both
/// sides, when `pairs_ran`), tshark must find no malformed or error-level frame.
pub fn check_capture(pcap: &Path, host_ip: &str, guest_ip: &str, pairs_ran: bool) -> CaptureReport {
    let mut text = String::new();
    let mut ok = true;
    let decode = Command::new(bin_dir().join("rdma-emu"))
        .arg("decode")
        .arg(pcap)
        .output();
    match decode {
        Ok(d) => {
            let out = String::from_utf8_lossy(&d.stdout);
            let roce: Vec<&str> = out.lines().filter(|l| l.contains("ICRC")).collect();
            let count = |needle: &str| roce.iter().filter(|l| l.contains(needle)).count();
            let from = |ip: &str| {
                roce.iter()
                    .filter(|l| l.contains(&format!("{ip}.")) && l.find(ip) < l.find('>'))
                    .count()
            };
            let (good, bad, unchecked) =
                (count("ICRC ok"), count("ICRC BAD"), count("ICRC unchecked"));
            let (from_kernel, from_emu) = (from(guest_ip), from(host_ip));
            let _ = writeln!(
                text,
                "rdma-emu decode: exit {}, {} RoCE v2 packets ({from_kernel} from the kernel's rxe, {from_emu} from rdma-emu): ICRC ok {good}, BAD {bad}, unchecked {unchecked}",
                d.status.code().unwrap_or(-1),
                roce.len(),
            );
            for l in roce.iter().filter(|l| !l.contains("ICRC ok")).take(10) {
                let _ = writeln!(text, "  {l}");
            }
            let silent = pairs_ran && (from_kernel == 0 || from_emu == 0);
            if !d.status.success() || bad > 0 || unchecked > 0 || silent {
                ok = false;
            }
        }
        Err(e) => {
            ok = false;
            let _ = writeln!(text, "cannot run rdma-emu decode: {e}");
        }
    }
    let bad = Command::new("tshark")
        .args(TSHARK_FLAGS)
        .arg("-r")
        .arg(pcap)
        .args(["-Y", "_ws.malformed || _ws.expert.severity >= \"error\""])
        .output();
    match bad {
        Ok(b) => {
            let out = String::from_utf8_lossy(&b.stdout);
            let lines: Vec<&str> = out.lines().collect();
            let _ = writeln!(
                text,
                "tshark: exit {}, {} malformed or error-level frames",
                b.status.code().unwrap_or(-1),
                lines.len()
            );
            for l in lines.iter().take(10) {
                let _ = writeln!(text, "  {l}");
            }
            if !b.status.success() || !lines.is_empty() {
                ok = false;
                let _ = writeln!(text, "{}", String::from_utf8_lossy(&b.stderr).trim());
            }
        }
        Err(e) => {
            ok = false;
            let _ = writeln!(text, "cannot run tshark: {e}");
        }
    }
    CaptureReport { ok, text }
}

/// Keeps the newest `keep` run folders.
pub fn prune_runs(runs: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(runs) else {
        return;
    };
    let mut dirs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    dirs.sort();
    for d in dirs.iter().take(dirs.len().saturating_sub(keep)) {
        let _ = std::fs::remove_dir_all(d);
    }
}
