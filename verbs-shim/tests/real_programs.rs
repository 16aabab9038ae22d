//! Unmodified programs from Debian's ibverbs-utils run on the linked libraries
//! (`cargo xtask shim --debug`): with no daemon they find no device; against the
//! scripted daemon `ibv_devinfo -v` shows the device through rdma-core's inline
//! helpers (`verbs_context.query_device_ex`, `query_port`) and the GID table.
//! Skipped when the programs are not installed.
mod mock;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

fn build_libraries() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root)
        .args(["run", "-q", "-p", "xtask", "--", "shim", "--debug"])
        .output()
        .expect("run cargo xtask shim");
    assert!(
        out.status.success(),
        "xtask shim failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .expect("folder printed")
        .to_string();
    PathBuf::from(dir)
}

fn run(lib: &Path, socket: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .env("LD_LIBRARY_PATH", lib)
        .env("LD_BIND_NOW", "1")
        .env("RDMA_EMU_SOCKET", socket)
        .output()
        .expect("run program");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn ibverbs_utils_run_on_the_shim() {
    if !Path::new("/usr/bin/ibv_devinfo").exists() || !Path::new("/usr/bin/ibv_devices").exists() {
        eprintln!("skipped: ibverbs-utils not installed");
        return;
    }
    let lib = build_libraries();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));

    let nowhere = dir.join("no-daemon.sock");
    let _ = std::fs::remove_file(&nowhere);
    let (ok, text) = run(&lib, &nowhere, &["ibv_devices"]);
    assert!(ok, "ibv_devices without a daemon:\n{text}");
    assert!(!text.contains("rxe0"));
    let (ok, text) = run(&lib, &nowhere, &["ibv_devinfo"]);
    assert!(!ok && text.contains("No IB devices found"), "{text}");

    let socket = dir.join(format!("real-programs-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    let listener = mock::listen(&socket);
    std::thread::spawn(move || loop {
        let conn = mock::accept(&listener);
        std::thread::spawn(move || mock::serve(conn, Arc::new(Mutex::new(mock::Rings::default()))));
    });
    let (ok, text) = run(&lib, &socket, &["ibv_devices"]);
    assert!(
        ok && text.contains("rxe0") && text.contains("020000fffe000001"),
        "{text}"
    );
    let (ok, text) = run(&lib, &socket, &["ibv_devinfo", "-v"]);
    assert!(ok, "ibv_devinfo -v:\n{text}");
    for want in [
        "hca_id:\trxe0",
        "transport:\t\t\tInfiniBand (0)",
        "vendor_id:\t\t\t0xffffff",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "GID[  0]:\t\t::ffff:127.0.0.1, RoCE v2",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}
