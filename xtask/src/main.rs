//! `cargo xtask <task>`: what cargo alone cannot do.
//!
//! - `shim [--debug]`: build verbs-shim and link it into libibverbs.so.1 / librdmacm.so.1
//!   (with rdma-core's symbol versions) and the stand-in vendor libraries, in
//!   `target/<profile>/rdma-emu-lib/`.
//! - `test [--stress[=N]]`: build everything in release mode (daemon, CLI, shim libraries),
//!   then run every test of the workspace, end-to-end tests with unmodified RDMA programs
//!   included; `--stress` (or `RDMA_EMU_STRESS=N`) runs N CPU hogs per core beside them
//!   (`stress.rs`, docs/reliability.md). For the whole suite the interop guests are built
//!   first, before any hog (`guests.rs`).
//! - `stub-maps TREE...`: regenerate the version scripts of the vendor stand-ins from
//!   rdma-core source trees (see `stubs.rs`).
//! - `soak [--minutes N]`: N minutes (default 10) of checked traffic, load, faults, killed
//!   clients and a daemon restart between two namespaces (`soak.rs`); prints its figures.
//! - `bench`: rdma-emu's figures next to this machine's limits measured in the same run.
//! - `demo`: the main job: start `rdma-emud`, run perftest's `ib_read_bw -a` server and
//!   client over it through `rdma-emu run`, and print perftest's own table.
mod bench;
mod demo;
mod guests;
mod shim;
mod soak;
mod stress;
mod stubs;

use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    let result = match args.first().map(String::as_str) {
        Some("shim") => shim::build(!rest.iter().any(|a| a == "--debug")).map(|_| ()),
        Some("test") => test(rest),
        Some("demo") => demo::run(rest),
        Some("bench") => bench::run(rest),
        Some("stub-maps") => stubs::generate_maps(rest),
        Some("soak") => soak_command(rest),
        _ => {
            eprintln!(
                "usage: cargo xtask shim [--debug]\n       cargo xtask test [--stress[=N]] [CARGO TEST ARGS]\n       cargo xtask demo\n       cargo xtask bench\n       cargo xtask soak [--minutes N]\n       cargo xtask stub-maps RDMA_CORE_TREE..."
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    // `cargo run` sets CARGO_MANIFEST_DIR for the run: the checkout being worked on. The
    // value baked in at build time names the checkout the binary was first built from,
    // which a target directory shared between checkouts keeps (cargo does not rebuild
    // an unchanged xtask for another checkout), so it is only the fallback.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// Where cargo puts build output for `profile` ("release" or "debug").
pub fn profile_dir(profile: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join(profile)
}

/// Runs cargo with `args` in the workspace root; an error if it fails.
pub fn cargo(args: &[&str]) -> Result<(), String> {
    cargo_with_env(args, &[])
}

/// Runs cargo with `args` and extra environment variables; an error if it fails.
pub fn cargo_with_env(args: &[&str], env: &[(&str, &std::path::Path)]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(workspace_root())
        .status()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}

/// Builds the daemon, the CLI and the shim libraries in release mode; returns
/// (binary folder, library folder).
pub fn build_release() -> Result<(PathBuf, PathBuf), String> {
    cargo(&["build", "--release", "-p", "emulator", "--bins"])?;
    let lib = shim::build(true)?;
    Ok((profile_dir("release"), lib))
}

/// The Debian packages the tests and the demo run: the unmodified RDMA programs, the
/// headers the ABI test compiles against, tshark for the wire checks, tcpdump to capture
/// what the kernel carries, iproute2 for the network namespaces, tmux for the terminal
/// test of `rdma-emu top`, nftables to mark packets Congestion Experienced, stress-ng for
/// the CPU hogs of the stress mode.
pub const DEBIAN_PACKAGES: &[&str] = &[
    "ibverbs-utils",
    "rdmacm-utils",
    "perftest",
    "qperf",
    "libibverbs-dev",
    "librdmacm-dev",
    "tshark",
    "tcpdump",
    "iproute2",
    "gcc",
    "tmux",
    "nftables",
    "ucx-utils",
    "openmpi-bin",
    "libopenmpi-dev",
    "libfabric-bin",
    "iperf3",
    "sockperf",
    "netcat-openbsd",
    "ethtool",
    "python3-pyverbs",
    "stress-ng",
    "binutils",
    "python3-venv",
    "curl",
    // pyverbs v59 built from its PyPI sdist (tests/tests/pyverbs.rs).
    "cmake",
    "pkg-config",
    "python3-dev",
    "libnl-3-dev",
    "libnl-route-3-dev",
];

/// Installs the missing packages of `packages` with apt-get when running as root (CI, a
/// container, a fresh VM); otherwise says which command would.
pub fn ensure_debian_packages(packages: &[&str]) -> Result<(), String> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        return Err(format!(
            "missing Debian packages; install them with: sudo apt-get install {}",
            missing.join(" ")
        ));
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    let run = |args: &[&str]| -> Result<(), String> {
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| format!("cannot run apt-get: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("apt-get {} failed ({status})", args.join(" ")))
        }
    };
    run(&["update", "-q"])?;
    let mut install = vec!["install", "-y", "-q"];
    install.extend(&missing);
    run(&install)
}

/// Whether this process runs as root.
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

fn test(extra: &[String]) -> Result<(), String> {
    let env = std::env::var("RDMA_EMU_STRESS").ok();
    let (per_core, extra) = stress::requested(extra, env.as_deref())?;
    ensure_debian_packages(DEBIAN_PACKAGES)?;
    let (bin, lib) = build_release()?;
    let var = |name| std::env::var(name).ok();
    if guests::wanted(
        &extra,
        var("RDMA_EMU_SKIP_INTEROP").as_deref(),
        var("RDMA_EMU_INTEROP_ONLY").as_deref(),
        is_root(),
    ) {
        guests::prepare(&workspace_root());
    }
    let mut args = vec!["test", "--release", "--workspace"];
    args.extend(extra.iter().map(String::as_str));
    // Stopped when this function returns, also on an error or a stop signal.
    stress::catch_stop_signals();
    let _hogs = match per_core {
        0 => None,
        n => Some(stress::Hogs::start(n)?),
    };
    // The end-to-end tests find the daemon and the libraries through these.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut child = Command::new(&cargo)
        .args(&args)
        .env("RDMA_EMU_BIN_DIR", &bin)
        .env("RDMA_EMU_LIB_DIR", &lib)
        .current_dir(workspace_root())
        .spawn()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    let status = stress::wait_passing_stop(&mut child).map_err(|e| e.to_string())?;
    // A test process killed before it dropped its namespaces leaves them behind: removed
    // here, and named with the test that made them.
    let leaked = rdma_emu_tests::sweep_dead_namespaces();
    if !leaked.is_empty() {
        eprintln!(
            "xtask: the suite left {} network namespace(s) behind, now removed: {}",
            leaked.len(),
            leaked.join(", ")
        );
    }
    match stress::stopped() {
        Some(sig) => Err(format!("stopped by signal {sig}")),
        None if status.success() => Ok(()),
        None => Err(format!("`cargo {}` failed ({status})", args.join(" "))),
    }
}

/// `cargo xtask soak [--minutes N]`.
fn soak_command(args: &[String]) -> Result<(), String> {
    let minutes: f64 = match args {
        [] => 10.0,
        [flag, n] if flag == "--minutes" => n
            .parse()
            .ok()
            .filter(|m: &f64| *m > 0.0 && *m <= 24.0 * 60.0)
            .ok_or(format!("--minutes {n}: a number of minutes"))?,
        _ => return Err("usage: cargo xtask soak [--minutes N]".into()),
    };
    if let Some(why) = soak::missing_programs() {
        return Err(why);
    }
    ensure_debian_packages(DEBIAN_PACKAGES)?;
    let (bin, lib) = build_release()?;
    // The helpers find the daemon and the shim through these, as the tests do.
    std::env::set_var("RDMA_EMU_BIN_DIR", &bin);
    std::env::set_var("RDMA_EMU_LIB_DIR", &lib);
    let length = std::time::Duration::from_secs_f64(minutes * 60.0);
    let fig = soak::soak(length).ok_or("the soak needs root (network namespaces)")?;
    print!("{fig}");
    if fig.failures.is_empty() {
        Ok(())
    } else {
        Err(format!("the soak saw {} failures", fig.failures.len()))
    }
}
