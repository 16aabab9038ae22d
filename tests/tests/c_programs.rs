//! C programs compiled against the system's rdma-core headers and libraries, run on the
//! shim: what an application built for real hardware sees.
use rdma_emu_tests::*;
use std::time::Duration;

#[test]
fn data_integrity_and_error_statuses_as_rdma_core_reports_them() {
    let _s = serial();
    let dir = TempDir::new("c");
    let Some(exe) = compile_c("verbs_integrity", dir.path()) else {
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

#[test]
fn resize_cq_rereg_mr_and_reset_cleaning_as_rdma_core_reports_them() {
    let _s = serial();
    let dir = TempDir::new("c");
    let Some(exe) = compile_c("resize_rereg", dir.path()) else {
        return;
    };
    let daemon = Daemon::start();
    let out = daemon
        .program(None, &[exe.to_str().expect("utf-8 path")])
        .wait(Duration::from_secs(120));
    out.assert_success();
    for check in [
        "ok resize_keeps_unpolled_completions",
        "ok rereg_as_rxe",
        "ok reset_cleans_the_qps_completions",
        "all checks passed",
    ] {
        assert!(
            out.stdout.contains(check),
            "`{check}` missing:\n{}",
            out.stdout
        );
    }
}
