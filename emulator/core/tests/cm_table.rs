//! The CM state table, checked whole: every valid (state, input) cell against the
//! snapshot `tests/cm_state_table.snapshot` (regenerate with `UPDATE_SNAPSHOTS=1`), plus
//! the invariants every cell must keep.

use emu_core::cm::table::{render, step, CmState, Input, Msg, Timer};

#[test]
fn state_table_matches_snapshot() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cm_state_table.snapshot");
    let now = render();
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(path, &now).unwrap();
    }
    let want = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        now, want,
        "the CM table changed: review and regenerate the snapshot"
    );
}

#[test]
fn every_cell_keeps_the_table_invariants() {
    for s in CmState::ALL {
        for i in Input::ALL {
            let Some(st) = step(s, i) else { continue };
            // Only retransmittable messages are resent, and resending rearms the timer
            // or keeps it.
            if st.send == Some(Msg::Resend) {
                assert!(
                    matches!(st.timer, Timer::Response | Timer::Keep),
                    "{s:?} {i:?}"
                );
            }
            // A state with a retransmission timer is only entered by arming it.
            if matches!(
                st.next,
                CmState::ReqSent | CmState::RepSent | CmState::DreqSent | CmState::SidrReqSent
            ) && st.next != s
            {
                assert_eq!(st.timer, Timer::Response, "{s:?} {i:?}");
            }
            // Time wait is always timed.
            if st.next == CmState::Timewait && s != CmState::Timewait {
                assert_eq!(st.timer, Timer::Timewait, "{s:?} {i:?}");
            }
            // Idle is the end: no timer left.
            if st.next == CmState::Idle {
                assert_eq!(st.timer, Timer::Stop, "{s:?} {i:?}");
            }
        }
    }
}

#[test]
fn every_state_but_idle_can_be_destroyed_and_ends() {
    // Destroy from any live state leads (through the protocol's own timers) to Idle.
    for s in CmState::ALL.into_iter().filter(|s| *s != CmState::Idle) {
        let st = step(s, Input::Destroy).unwrap_or_else(|| panic!("{s:?}"));
        let mut cur = st.next;
        for _ in 0..4 {
            if cur == CmState::Idle {
                break;
            }
            cur = step(cur, Input::Timeout)
                .or_else(|| step(cur, Input::RetriesExhausted))
                .map_or(cur, |x| x.next);
            if cur == CmState::DreqSent {
                cur = step(cur, Input::RetriesExhausted).unwrap().next;
            }
        }
        assert_eq!(cur, CmState::Idle, "from {s:?}");
    }
}
