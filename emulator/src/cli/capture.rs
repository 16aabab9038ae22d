//! `rdma-emu capture`: the daemon writes a device's frames as pcap into a pipe this
//! process hands it; what arrives is cut into whole records ([`PcapRecords`]) and written
//! to the file, so the file ends with a whole frame however the capture stopped.

use super::control::{connect, error_text};
use super::pcap::PcapRecords;
use crate::daemon::sys;
use crate::signals::{Stop, Woken};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use wire::client::RequestBody;

/// Streams the daemon's pcap records for `device` into `file`, whole records only, until
/// `count` frames, the daemon's end, or SIGINT/SIGTERM; on a signal what the pipe already
/// holds is written first, so the file ends with the last whole frame received.
pub(super) fn capture(
    socket: Option<&Path>,
    device: &str,
    file: &Path,
    count: Option<u64>,
) -> Result<(), String> {
    let mut out = std::fs::File::create(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let (r, w) = sys::pipe().map_err(|e| e.to_string())?;
    let mut c = connect(socket)?;
    // Before the request, so that a signal during it is not lost.
    let stop = Stop::install().map_err(|e| e.to_string())?;
    c.call(
        RequestBody::Capture {
            device: device.to_string(),
        },
        &[w.as_raw_fd()],
    )
    .map_err(error_text)?;
    drop(w);
    let pipe = std::fs::File::from(r);
    let mut records = PcapRecords::default();
    let mut chunk = vec![0u8; 1 << 16];
    let write_err = |e: std::io::Error| format!("{}: {e}", file.display());
    let mut stopping = false;
    loop {
        if !stopping {
            match stop.wait_readable(Some(pipe.as_raw_fd()), None) {
                Woken::Stop => stopping = true,
                Woken::Readable | Woken::Timeout => {}
            }
        }
        // Never blocks: on a stop, only what the daemon already wrote is taken.
        let n = match read_nonblocking(&pipe, &mut chunk) {
            Ok(Some(0)) => break,
            Ok(Some(n)) => n,
            Ok(None) if stopping => break,
            Ok(None) => continue,
            Err(e) => return Err(e.to_string()),
        };
        let whole = records.push(&chunk[..n], count);
        out.write_all(whole).map_err(write_err)?;
        records.consumed();
        if count.is_some_and(|c| records.frames >= c) {
            break;
        }
    }
    out.flush().map_err(write_err)?;
    out.sync_all().map_err(write_err)?;
    eprintln!(
        "rdma-emu: {} frames written to {}",
        records.frames,
        file.display()
    );
    Ok(())
}

/// One read(2) of a pipe without blocking: `None` when nothing is there yet.
fn read_nonblocking(pipe: &std::fs::File, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
    // SAFETY: reads at most `buf.len()` bytes into `buf`.
    let n = unsafe {
        let fd = pipe.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags & libc::O_NONBLOCK == 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        libc::read(fd, buf.as_mut_ptr().cast(), buf.len())
    };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = std::io::Error::last_os_error();
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(None),
        _ => Err(e),
    }
}
