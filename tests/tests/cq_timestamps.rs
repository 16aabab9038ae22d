//! CQE timestamps through `ibv_create_cq_ex` (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` and
//! `…_WALLCLOCK`), `ibv_query_device_ex`'s clock and `ibv_query_rt_values_ex`, on an rxe
//! and a siw device: `tests/c/cq_timestamps.c` runs RC traffic through the RDMA CM on the
//! device serving the address it is given and checks every completion's stamps against
//! the host's clocks (its header says what it checks).
//!
//! One daemon in a namespace of its own with loopback only: `rxe0` serves 127.0.0.1,
//! `siw0` is configured with `addrs = ["127.0.0.2"]` (as in `rdmacm_siw.rs`).
use rdma_emu_tests::*;
use std::time::Duration;

/// A bound that catches a hang, not a speed requirement.
const LIMIT: Duration = Duration::from_secs(120);

fn stamps_hold_on(addr: &str, device: &str) {
    let _s = serial();
    let dir = TempDir::new("cqts");
    let Some(exe) = compile_c_with("cq_timestamps", dir.path(), true) else {
        return;
    };
    let Some(ns) = loopback_ns("cqts", false) else {
        return;
    };
    let config = dir.path().join("rdma-emu.toml");
    write_rxe_siw_loopback_config(&config);
    let cfg = config.display().to_string();
    let daemon = Daemon::start_with(Some(&ns), &["--config", &cfg]);
    let out = daemon
        .program(Some(&ns), &[exe.to_str().expect("utf-8 path"), addr])
        .wait(LIMIT);
    out.assert_success();
    for line in [
        &format!("device {device}") as &str,
        "ok query_device_ex_clock",
        "ok query_rt_values",
        "ok unsupported_flags",
        "ok traffic_stamps",
        "ok error_stamps",
        "all checks passed",
    ] {
        assert!(
            out.stdout.contains(line),
            "`{line}` missing:\n{}",
            out.stdout
        );
    }
}

#[test]
fn cqe_timestamps_on_rxe0() {
    stamps_hold_on("127.0.0.1", "rxe0");
}

#[test]
fn cqe_timestamps_on_siw0() {
    stamps_hold_on("127.0.0.2", "siw0");
}
