//! `rdma-emu run`: a program started with the verbs shim first in its library path (and
//! preloaded, for programs that carry their own rdma-core), replacing this process.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// The folder holding the shim's libibverbs.so.1: $RDMA_EMU_LIB_DIR, else
/// `<dir of this executable>/rdma-emu-lib`.
fn lib_dir() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("RDMA_EMU_LIB_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate rdma-emu: {e}"))?;
    Ok(exe
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join("rdma-emu-lib"))
}

/// Replaces this process with `cmd`, the shim in its library path; `before_exec` runs
/// just before (the device view is set up there). Returns only on failure.
pub(super) fn run(cmd: &[String], before_exec: impl FnOnce()) -> Result<(), String> {
    let dir = lib_dir()?;
    if !dir.join("libibverbs.so.1").exists() {
        return Err(format!(
            "the verbs shim is not in {} (build it with `cargo xtask shim`, or set RDMA_EMU_LIB_DIR)",
            dir.display()
        ));
    }
    let mut path = dir.clone().into_os_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let (prog, args) = cmd.split_first().ok_or("nothing to run")?;
    let mut command = std::process::Command::new(prog);
    command.args(args).env("LD_LIBRARY_PATH", path);
    // Programs and wheels that carry their own rdma-core (under a hashed file name, found
    // through their RPATH) never look in LD_LIBRARY_PATH. Preloading the shim puts its
    // ibv_*/rdma_* symbols first in every lookup, so their calls land here anyway.
    // RDMA_EMU_PRELOAD=0 leaves LD_PRELOAD alone.
    if std::env::var_os("RDMA_EMU_PRELOAD").is_none_or(|v| v != "0") {
        let shim = dir.join("libibverbs.so.1");
        // The loader splits LD_PRELOAD at spaces and colons: such a path cannot be named.
        let bytes = shim.as_os_str().as_encoded_bytes();
        if bytes.iter().any(|b| matches!(b, b' ' | b':')) {
            eprintln!(
                "rdma-emu: not preloading {} (a space or colon in the path); \
                 programs with their own libibverbs will not reach the shim",
                shim.display()
            );
        } else {
            let mut preload = shim.into_os_string();
            if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
                preload.push(":");
                preload.push(old);
            }
            command.env("LD_PRELOAD", preload);
        }
    }
    before_exec();
    let err = command.exec();
    Err(format!("{prog}: {err}"))
}
