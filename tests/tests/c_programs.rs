//! C programs compiled against the system's rdma-core headers and libraries, run on the
//! shim: what an application built for real hardware sees.
use rdma_emu_tests::*;
use std::time::Duration;

/// Compiles `tests/c/NAME.c`, runs it on a daemon of its own, and asserts that it exits 0
/// and printed every line of `checks` (each of its checks prints `ok NAME` when it holds,
/// and the program ends with "all checks passed").
fn passes_its_checks(name: &str, checks: &[&str]) {
    let _s = serial();
    let dir = TempDir::new("c");
    let Some(exe) = compile_c(name, dir.path()) else {
        return;
    };
    let daemon = Daemon::start();
    let out = daemon
        .program(None, &[exe.to_str().expect("utf-8 path")])
        .wait(Duration::from_secs(120));
    out.assert_success();
    for check in checks.iter().chain(&["all checks passed"]) {
        assert!(
            out.stdout.contains(check),
            "{name}: `{check}` missing:\n{}",
            out.stdout
        );
    }
}

#[test]
fn data_integrity_and_error_statuses_as_rdma_core_reports_them() {
    passes_its_checks(
        "verbs_integrity",
        &[
            "ok write_three_sges",
            "ok inline_send_with_imm",
            "ok read_back",
            "ok remote_access_error",
            "ok retry_exceeded",
            "ok flush",
        ],
    );
}

/// Its UD part posts a receive and then, from another QP of the same process, the send
/// that fills it. That is the order the daemon must keep: it once drained the send ring
/// between two receive drains, the packet found no receive, and this test failed one run
/// in three (`no_recv_wqe_drops`). It is run 50 times in a row to check the fix.
#[test]
fn resize_cq_rereg_mr_and_reset_cleaning_as_rdma_core_reports_them() {
    passes_its_checks(
        "resize_rereg",
        &[
            "ok resize_keeps_unpolled_completions",
            "ok rereg_as_rxe",
            "ok reset_cleans_the_qps_completions",
        ],
    );
}
