//! Async events against object lifetimes: `ibv_get_async_event` never reports an event for a
//! destroyed QP, CQ or SRQ, and destroying one waits until its reported events are acked, as
//! rdma-core guarantees (tests/c/async_events.c says how the events are raised).
use rdma_emu_tests::*;
use std::time::Duration;

#[test]
fn async_events_never_name_destroyed_objects_and_destroy_waits_for_acks() {
    let _s = serial();
    let dir = TempDir::new("c");
    let Some(exe) = compile_c("async_events", dir.path()) else {
        return;
    };
    let daemon = Daemon::start();
    let out = daemon
        .program(None, &[exe.to_str().expect("utf-8 path"), "rxe0", "40"])
        .wait(Duration::from_secs(600));
    out.assert_success();
    assert!(
        out.stdout.contains("all checks passed"),
        "no verdict:\n{}",
        out.stdout
    );
    // Every kind of event was delivered at least once, so the checks above saw each kind.
    let counts = out
        .stdout
        .lines()
        .find(|l| l.starts_with("rounds "))
        .unwrap_or_else(|| panic!("no counts:\n{}", out.stdout));
    let words: Vec<&str> = counts.split_whitespace().collect();
    for kind in ["cq", "qp", "srq"] {
        let n: u64 = words
            .iter()
            .position(|w| *w == kind)
            .and_then(|i| words.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {kind} count in `{counts}`"));
        assert!(n > 0, "no {kind} event delivered: `{counts}`");
    }
}
