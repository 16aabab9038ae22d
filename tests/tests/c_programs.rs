//! C programs compiled against the system's rdma-core headers and libraries, run on the
//! shim: what an application built for real hardware sees.
use rdma_emu_tests::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Compiles `tests/c/NAME.c` with gcc against the system's libibverbs; `None` (with the
/// reason) when the headers are missing outside CI.
fn compile(name: &str, dir: &Path) -> Option<std::path::PathBuf> {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        let _ = cannot_run("libibverbs-dev is not installed (apt-get install libibverbs-dev)");
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

#[test]
fn data_integrity_and_error_statuses_as_rdma_core_reports_them() {
    let _s = serial();
    let dir = TempDir::new("c");
    let Some(exe) = compile("verbs_integrity", dir.path()) else {
        return;
    };
    let daemon = Daemon::start();
    let out = daemon
        .program(None, &[exe.to_str().expect("utf-8 path")])
        .wait(Duration::from_secs(120));
    out.assert_success();
    for check in [
        "ok write_three_sges",
        "ok inline_send_with_imm",
        "ok read_back",
        "ok remote_access_error",
        "ok retry_exceeded",
        "ok flush",
        "all checks passed",
    ] {
        assert!(
            out.stdout.contains(check),
            "`{check}` missing:\n{}",
            out.stdout
        );
    }
}
