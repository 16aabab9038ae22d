//! The suite's stress mode (`cargo xtask test --stress[=N]`, or `RDMA_EMU_STRESS=N`):
//! `N` busy processes per core (stress-ng's CPU hogs, N = 1 or 2) run beside the tests
//! for the whole run, as on a shared CI runner, and are stopped after it whatever
//! happens: the run ends or fails, Ctrl-C (SIGINT) or SIGTERM reach xtask, or xtask is
//! killed (the kernel then signals stress-ng, whose workers follow their parent).

use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// How many hogs per core `args` and the environment ask for, and `args` without the
/// flag. `--stress` alone is 1; `--stress=N` and `RDMA_EMU_STRESS=N` give N (1..=8; the
/// flag wins; `RDMA_EMU_STRESS=0` or unset: off).
pub fn requested(args: &[String], env: Option<&str>) -> Result<(usize, Vec<String>), String> {
    let parse = |v: &str| -> Result<usize, String> {
        match v.trim().parse::<usize>() {
            Ok(n) if n <= 8 => Ok(n),
            _ => Err(format!(
                "stress level `{v}`: a number of hogs per core, 0 to 8"
            )),
        }
    };
    let mut level = match env {
        Some(v) if !v.is_empty() => parse(v)?,
        _ => 0,
    };
    let mut rest = Vec::new();
    for a in args {
        if a == "--stress" {
            level = 1;
        } else if let Some(v) = a.strip_prefix("--stress=") {
            level = parse(v)?;
        } else {
            rest.push(a.clone());
        }
    }
    Ok((level, rest))
}

/// The hogs: one stress-ng process group, stopped on drop.
pub struct Hogs {
    child: Child,
}

impl Hogs {
    /// Starts `per_core` busy processes for each online core.
    pub fn start(per_core: usize) -> Result<Hogs, String> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = (per_core * cores).to_string();
        let mut cmd = Command::new("stress-ng");
        cmd.args(["--cpu", &workers, "--cpu-method", "int64", "--quiet"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // Its own process group (stopped as one below), killed with us if we die
                // without running our drop.
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start stress-ng (apt-get install stress-ng): {e}"))?;
        eprintln!(
            "xtask: stress mode: {workers} CPU hogs (stress-ng, {per_core} per core) beside the run"
        );
        Ok(Hogs { child })
    }

    /// The stress-ng process (its process group has the same id).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        let pgid = self.pid();
        // SAFETY: plain syscalls on a process group we created.
        unsafe {
            libc::kill(-pgid, libc::SIGTERM);
        }
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: as above; whatever is left of the group goes.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.child.wait();
        // The workers (children of stress-ng) take a moment to die; a reaped group is
        // gone for kill(2) (ESRCH). Bounded: a container whose init reaps nothing keeps
        // zombies, which run nothing.
        for _ in 0..50 {
            // SAFETY: signal 0 only checks that the group exists.
            if unsafe { libc::kill(-pgid, 0) } != 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("xtask: stress mode: CPU hogs stopped");
    }
}

/// The signal that asked xtask to stop (0: none yet).
static STOP: AtomicI32 = AtomicI32::new(0);

extern "C" fn note_stop(sig: libc::c_int) {
    STOP.store(sig, Ordering::SeqCst);
}

/// Catches SIGINT and SIGTERM so that xtask outlives them long enough to clean up
/// (a handler, not SIG_IGN: the programs it runs get the default dispositions back at
/// exec, so Ctrl-C still stops them).
pub fn catch_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `note_stop` only stores into an atomic (async-signal-safe).
        unsafe {
            libc::signal(sig, note_stop as *const () as libc::sighandler_t);
        }
    }
}

/// Waits for `child`; when a stop signal reached xtask, passes SIGTERM on to it (Ctrl-C
/// already reached the whole foreground group) and keeps waiting for it to end.
pub fn wait_passing_stop(child: &mut Child) -> std::io::Result<ExitStatus> {
    let mut passed = false;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if !passed && STOP.load(Ordering::SeqCst) != 0 {
            passed = true;
            // SAFETY: a signal to our own child.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether a stop signal reached xtask.
pub fn stopped() -> Option<i32> {
    match STOP.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_flag_and_the_variable_choose_the_level_and_the_flag_leaves_the_arguments() {
        let args = strings(&["--stress", "--", "--nocapture"]);
        assert_eq!(
            requested(&args, None).unwrap(),
            (1, strings(&["--", "--nocapture"]))
        );
        assert_eq!(
            requested(&strings(&["--stress=2"]), Some("1")).unwrap().0,
            2
        );
        assert_eq!(requested(&[], Some("2")).unwrap().0, 2);
        assert_eq!(requested(&[], Some("0")).unwrap().0, 0);
        assert_eq!(requested(&[], None).unwrap().0, 0);
        assert!(requested(&strings(&["--stress=lots"]), None).is_err());
        assert!(requested(&[], Some("99")).is_err());
    }

    fn alive(pid: i32) -> bool {
        // A zombie counts as gone: it runs nothing.
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    }

    #[test]
    fn the_hogs_burn_cpu_while_held_and_are_all_gone_after() {
        if Command::new("stress-ng").arg("--version").output().is_err() {
            eprintln!("SKIPPED: stress-ng is not installed (apt-get install stress-ng)");
            return;
        }
        let hogs = Hogs::start(1).expect("stress-ng starts");
        let pgid = hogs.pid();
        // Its workers appear within a few seconds, even on a loaded machine.
        let members = || {
            std::fs::read_dir("/proc")
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|&p| {
                    // SAFETY: getpgid has no memory effects.
                    let group = unsafe { libc::getpgid(p) };
                    group == pgid && alive(p)
                })
                .count()
        };
        let mut seen = 0;
        for _ in 0..100 {
            seen = members();
            if seen >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(seen >= 2, "stress-ng and at least one worker: {seen}");
        drop(hogs);
        assert_eq!(members(), 0, "a hog outlived the run");
    }
}
