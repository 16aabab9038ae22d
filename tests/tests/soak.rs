//! Three minutes of the soak (`cargo xtask soak`, whose code this includes): checked
//! transfers on RoCE and iWARP, perftest load, faults, a killed client, a daemon
//! restarted; every checked transfer succeeds, nothing hangs, the server daemon's RSS
//! and descriptors stay bounded.
#[allow(dead_code)]
#[path = "../../xtask/src/soak.rs"]
mod soak;

use rdma_emu_tests::*;
use std::time::Duration;

#[test]
fn three_minutes_of_soak_with_faults_kills_and_a_restart() {
    let _s = serial();
    if let Some(why) = soak::missing_programs() {
        let _ = cannot_run(&why);
        return;
    }
    let Some(fig) = soak::soak(Duration::from_secs(180)) else {
        return;
    };
    eprint!("{fig}");
    assert!(fig.failures.is_empty(), "{fig}");
    assert!(fig.rounds >= 2, "{fig}");
    assert!(fig.checked_transfers > 0 && fig.load_runs > 0, "{fig}");
    assert!(fig.kills >= 1 && fig.restarts == 1, "{fig}");
    assert!(fig.faults_fired > 0, "{fig}");
}
