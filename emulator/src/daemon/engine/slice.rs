//! The engine thread's scheduler time slice: short while its idle yields show that
//! spinning threads that never yield hold the cores (docs/performance.md, "What was
//! changed", item 4).

use crate::daemon::sys;
use std::time::{Duration, Instant};

/// The short scheduler time slice the engine thread asks for while it is being starved
/// (`RDMA_EMU_DAEMON_SLICE_US`, microseconds; 0 = never, for measurements).
///
/// On a machine with fewer cores than spinning threads (ib_write_lat's processes spin on
/// their buffers and never call a verb), an engine that yields while it spins gives its
/// core to a spinner, and EEVDF moves the engine's deadline one slice later: it comes back
/// after a whole slice of the spinner's (milliseconds), and ib_write_lat 2 B between two
/// daemons measured 2–10 ms typical over iWARP. With a short slice its deadline comes
/// first and it runs at once (30–50 µs). Kept all the time, though, the short slice cost
/// one daemon serving both sides 1.5–2× in latency, so it is switched on only while the
/// yields look starved: at least a quarter of a window of [`YIELD_WINDOW`] yields took
/// longer than [`LONG_YIELD`] (measured with the default slice: 45 % of the engine's yields
/// took over 0.5 ms with two daemons, 6 % with one daemon serving both sides), and kept for
/// [`SHORT_SLICE_HOLD`] after the last such window.
fn thread_slice() -> Option<Duration> {
    let us = std::env::var("RDMA_EMU_DAEMON_SLICE_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(DEFAULT_SLICE_US);
    (us > 0).then(|| Duration::from_micros(us))
}

/// The short slice when `RDMA_EMU_DAEMON_SLICE_US` does not say: the shortest EEVDF
/// accepts.
const DEFAULT_SLICE_US: u64 = 100;
/// A `sched_yield` that kept the engine off its core this long was a long one.
const LONG_YIELD: Duration = Duration::from_micros(500);
/// Yields judged together.
const YIELD_WINDOW: u32 = 32;
/// How long the short slice stays after the last window of starved yields.
const SHORT_SLICE_HOLD: Duration = Duration::from_secs(2);

/// Switches the engine thread's short time slice on and off ([`thread_slice`]).
pub(in crate::daemon) struct SliceControl {
    short: Option<Duration>,
    /// While the short slice is on: until when it stays.
    until: Option<Instant>,
    /// Yields in the current window, and how many of them were long.
    yields: u32,
    long: u32,
}

impl SliceControl {
    pub(in crate::daemon) fn new() -> SliceControl {
        SliceControl {
            short: thread_slice(),
            until: None,
            yields: 0,
            long: 0,
        }
    }

    /// After a `sched_yield` that took `took`, at `now`.
    pub(in crate::daemon) fn after_yield(&mut self, took: Duration, now: Instant) {
        let Some(short) = self.short else {
            return;
        };
        self.yields += 1;
        self.long += u32::from(took >= LONG_YIELD);
        if self.yields < YIELD_WINDOW {
            return;
        }
        let starved = self.long * 4 >= YIELD_WINDOW;
        (self.yields, self.long) = (0, 0);
        if starved {
            if self.until.is_none() {
                self.set(short);
            }
            self.until = Some(now + SHORT_SLICE_HOLD);
        } else if self.until.is_some_and(|t| now >= t) {
            self.until = None;
            self.set(Duration::ZERO);
        }
    }

    fn set(&mut self, slice: Duration) {
        match sys::set_thread_slice(slice) {
            Ok(true) => tracing::debug!(?slice, "engine thread's time slice (0: the kernel's)"),
            Ok(false) => {
                tracing::debug!("not a fair scheduling policy; slice left alone");
                self.short = None;
            }
            Err(e) => {
                tracing::debug!(error = %e, "sched_setattr refused the time slice");
                self.short = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds one window of yields, `long` of them long.
    fn window(c: &mut SliceControl, long: u32, now: Instant) {
        for i in 0..YIELD_WINDOW {
            let took = if i < long {
                LONG_YIELD
            } else {
                Duration::from_micros(5)
            };
            c.after_yield(took, now);
        }
    }

    #[test]
    fn short_slice_follows_starved_windows_and_is_held() {
        // Runs on the test's own thread: the slice it sets dies with it.
        let mut c = SliceControl {
            short: Some(Duration::from_micros(DEFAULT_SLICE_US)),
            until: None,
            yields: 0,
            long: 0,
        };
        let t0 = Instant::now();
        window(&mut c, YIELD_WINDOW / 4 - 1, t0);
        assert_eq!(c.until, None, "fewer than a quarter long: not starved");
        window(&mut c, YIELD_WINDOW / 4, t0);
        if c.short.is_none() {
            // The kernel refused sched_setattr (or the thread is not SCHED_OTHER): the
            // control gave up, as it must.
            return;
        }
        assert_eq!(c.until, Some(t0 + SHORT_SLICE_HOLD), "a quarter long: on");
        window(&mut c, 0, t0 + SHORT_SLICE_HOLD / 2);
        assert!(c.until.is_some(), "held after the last starved window");
        window(&mut c, 0, t0 + SHORT_SLICE_HOLD);
        assert_eq!(c.until, None, "off once the hold is over");
    }
}
