//! `rdma-emu top`: the loop that asks the daemon for devices, counters and QPs once per
//! interval and prints each frame (rendered by [`crate::top`]) until Ctrl-C.

use super::control::call;
use std::path::Path;
use wire::client::{ReplyBody, RequestBody};

/// `rdma-emu top`: one frame per interval, the screen cleared between frames on a
/// terminal.
pub(super) fn top(
    socket: Option<&Path>,
    device: Option<&str>,
    interval: f64,
    iterations: Option<u64>,
) -> Result<(), String> {
    use std::io::{IsTerminal, Write};
    if !(0.05..=3600.0).contains(&interval) {
        return Err(format!(
            "top: an interval of {interval} s is out of 0.05..3600"
        ));
    }
    let device = device.map(str::to_string);
    // SIGINT (Ctrl-C) and SIGTERM end the loop between frames, exit 0.
    let stop = crate::signals::Stop::install().map_err(|e| e.to_string())?;
    let mut history = crate::top::History::default();
    let clear = std::io::stdout().is_terminal() && iterations.is_none();
    let mut shown = 0u64;
    loop {
        let links = match call(socket, RequestBody::LinkShow)? {
            ReplyBody::Links(l) => l
                .into_iter()
                .filter(|l| device.as_ref().is_none_or(|d| *d == l.name))
                .collect::<Vec<_>>(),
            other => return Err(format!("unexpected reply {other:?}")),
        };
        if let Some(d) = &device {
            if links.is_empty() {
                return Err(format!("top: no device {d}"));
            }
        }
        let stats = match call(
            socket,
            RequestBody::Stat {
                device: device.clone(),
                qpn: None,
            },
        )? {
            ReplyBody::Stat(s) => s,
            other => return Err(format!("unexpected reply {other:?}")),
        };
        let qps = match call(
            socket,
            RequestBody::QpList {
                device: device.clone(),
            },
        )? {
            ReplyBody::Qps(q) => q,
            other => return Err(format!("unexpected reply {other:?}")),
        };
        let frame = crate::top::Frame {
            at: std::time::Instant::now(),
            links,
            stats,
            qps,
        };
        let header = format!(
            "rdma-emu top: {} device(s), {} QP(s), every {interval} s (Ctrl-C quits)",
            frame.links.len(),
            frame.qps.len()
        );
        let text = history.render(&frame, &header);
        let mut out = std::io::stdout().lock();
        let written = if clear {
            write!(out, "\x1b[H\x1b[2J{text}")
        } else {
            writeln!(out, "{text}")
        };
        if written.and_then(|()| out.flush()).is_err() {
            return Ok(()); // the reader went away (a closed pipe)
        }
        shown += 1;
        if iterations.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        if stop.sleep(std::time::Duration::from_secs_f64(interval)) {
            if clear {
                // Leave the terminal with the last frame on it and the cursor below.
                let _ = writeln!(out);
            }
            return Ok(());
        }
    }
}
