//! What a thread does with its core when its poll finds a CQ empty.
//!
//! Applications busy-poll their CQs while the daemon, the NIC, needs a core to produce
//! what they wait for. On a machine with fewer cores than spinning threads a poller that
//! never lets go leaves the daemon waiting for a time slice, so the shim gives the core
//! away:
//! - after [`POLL_YIELD_DEFAULT`] empty polls in a row it yields once
//!   (`RDMA_EMU_POLL_YIELD=N`; 0 = never give the core away, and not the below either);
//! - the first empty poll after work was posted on the CQ's context yields at once: the
//!   daemon has that work to do, and if it shares this core it runs now instead of after
//!   the spin.
//!
//! docs/performance.md, items 1 and 11, has the measurements (and item 11 a sleep for
//! long-idle pollers that was measured and left out).

use crate::context::Context;
use crate::objects::Cq;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

/// Empty polls in a row after which a polling thread yields its core.
const POLL_YIELD_DEFAULT: u32 = 64;

fn poll_yield_after() -> u32 {
    static AFTER: OnceLock<u32> = OnceLock::new();
    *AFTER.get_or_init(|| {
        std::env::var("RDMA_EMU_POLL_YIELD")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(POLL_YIELD_DEFAULT)
    })
}

/// Counts a poll of `cq` that found it empty and gives the core away when it is time to.
pub fn empty_poll(cq: &Cq, count: &mut u32) {
    let posted = || {
        // A load before the swap: an empty poll with nothing posted writes nothing.
        Context::from_ibv(cq.cq.context).is_ok_and(|ctx| {
            ctx.posted.load(Ordering::Relaxed) && ctx.posted.swap(false, Ordering::Relaxed)
        })
    };
    if give_up_core(count, poll_yield_after(), posted) {
        std::thread::yield_now();
    }
}

/// Whether a poll that found the CQ empty, the `count`-th in a row, gives the core away:
/// after `after` of them (0 = never), or at once when `posted` (which reads and clears
/// the context's mark) says work was posted since.
fn give_up_core(count: &mut u32, after: u32, posted: impl FnOnce() -> bool) -> bool {
    if after == 0 {
        return false;
    }
    *count += 1;
    if posted() || *count >= after {
        *count = 0;
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::give_up_core;

    #[test]
    fn empty_polls_give_up_the_core_after_the_count_and_at_once_after_a_post() {
        let mut count = 0;
        for _ in 1..64 {
            assert!(!give_up_core(&mut count, 64, || false));
        }
        assert!(give_up_core(&mut count, 64, || false), "the 64th");
        assert_eq!(count, 0, "the count starts again");
        assert!(!give_up_core(&mut count, 64, || false));
        assert!(
            give_up_core(&mut count, 64, || true),
            "the first empty poll after a post"
        );
        assert_eq!(count, 0);
    }

    #[test]
    fn zero_never_gives_up_the_core_and_leaves_the_posted_mark() {
        let mut count = 0;
        for _ in 0..200 {
            assert!(!give_up_core(&mut count, 0, || {
                panic!("the mark is not read when yields are off")
            }));
        }
    }
}
