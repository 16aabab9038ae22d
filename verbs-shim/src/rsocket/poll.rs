//! `rpoll`/`rselect`: readiness of rsockets (stream and datagram) and ordinary
//! descriptors together, as
//! librspreload's `poll`/`select` hand them over. An rsocket is checked by progressing
//! its stream (credits, completions); to sleep, its CQ is armed and its completion
//! channel (or, listening, its CM channel) is polled with the ordinary descriptors, then
//! everything is checked again (rsocket.c's `rs_poll_check`/`rs_poll_arm`/
//! `rs_poll_events`).
use super::dapi::{self, DSocket};
use super::ep;
use super::sock::Phase;
use super::sock::RSock;
use super::stream;
use super::table::lookup;
use crate::ffi::{self, Errno, VResult};
use core::ffi::c_int;
use libc::{pollfd, POLLERR, POLLHUP, POLLIN, POLLOUT};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The events of one rsocket now, without waiting.
fn revents(rs: &RSock, events: i16) -> i16 {
    let mut g = rs.lock();
    match g.phase {
        Phase::Listening => {
            if g.request_waiting() {
                events & POLLIN
            } else {
                0
            }
        }
        Phase::ConnectError(_) => (events & (POLLIN | POLLOUT)) | POLLERR,
        Phase::Connected => {
            let Some(s) = g.stream.as_mut() else {
                return POLLERR;
            };
            s.progress();
            let mut r = 0;
            if events & POLLIN != 0 && s.readable_or_done() {
                r |= POLLIN;
            }
            if events & POLLOUT != 0 && s.can_send() {
                r |= POLLOUT;
            }
            // Unlike rsocket.c, hang-up waits until the queued data was read (as a TCP
            // socket reports only POLLIN after the peer's FIN): rstream `-T a` polls
            // between partial reads of its last transfer and fails on POLLHUP.
            if s.state & stream::CONNECTED == 0 && !s.have_rdata() {
                r |= if s.state == stream::DISCONNECTED {
                    POLLHUP
                } else {
                    POLLERR
                };
            }
            r
        }
        Phase::Init | Phase::Bound => 0,
    }
}

/// What to sleep on for one rsocket (its CQ armed first); None when it became ready
/// while arming.
fn arm(rs: &RSock, events: i16) -> Result<c_int, i16> {
    let fd = {
        let mut g = rs.lock();
        match (g.phase, g.stream.as_mut()) {
            (Phase::Connected, Some(s)) => {
                s.arm();
                s.cq_fd()
            }
            _ => g.fd(),
        }
    };
    match revents(rs, events) {
        0 => Ok(fd),
        r => Err(r),
    }
}

/// What one entry of the caller's array is.
enum Entry {
    Stream(Arc<RSock>),
    Dgram(Arc<DSocket>),
    Plain,
}

impl Entry {
    fn of(fd: c_int) -> Entry {
        if let Some(rs) = lookup(fd) {
            Entry::Stream(rs)
        } else if let Some(d) = dapi::lookup(fd) {
            Entry::Dgram(d)
        } else {
            Entry::Plain
        }
    }
}

fn check(fds: &mut [pollfd], socks: &[Entry]) -> c_int {
    let mut n = 0;
    for (p, s) in fds.iter_mut().zip(socks) {
        p.revents = match s {
            Entry::Stream(rs) => revents(rs, p.events),
            Entry::Dgram(d) => dapi::revents(d, p.events),
            Entry::Plain => {
                let mut q = *p;
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut q, 1, 0) };
                q.revents
            }
        };
        if p.revents != 0 {
            n += 1;
        }
    }
    n
}

pub fn rpoll_slice(fds: &mut [pollfd], timeout: c_int) -> VResult<c_int> {
    let socks: Vec<Entry> = fds.iter().map(|p| Entry::of(p.fd)).collect();
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        let n = check(fds, &socks);
        if n > 0 || timeout == 0 {
            return Ok(n);
        }
        let mut real: Vec<pollfd> = Vec::with_capacity(fds.len());
        for (p, s) in fds.iter_mut().zip(&socks) {
            let armed = match s {
                Entry::Stream(rs) => arm(rs, p.events),
                Entry::Dgram(d) => dapi::arm(d, p.events),
                Entry::Plain => Ok(p.fd),
            };
            let fd = match armed {
                Ok(fd) => fd,
                Err(r) => {
                    p.revents = r;
                    return Ok(check(fds, &socks).max(1));
                }
            };
            real.push(pollfd {
                fd,
                events: match s {
                    Entry::Plain => p.events,
                    _ => POLLIN,
                },
                revents: 0,
            });
        }
        // Sleep at most 100 ms at a time (rsocket.c's wake_up_interval is 500 ms).
        let wait = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(0);
                }
                left.min(Duration::from_millis(100)).as_millis().max(1) as c_int
            }
            None => 100,
        };
        // SAFETY: `real` holds fds.len() valid pollfds.
        let r = unsafe { libc::poll(real.as_mut_ptr(), real.len() as libc::nfds_t, wait) };
        if r < 0 {
            let e = Errno::last();
            if e.0 != libc::EINTR {
                return Err(e);
            }
            return Err(e);
        }
        for (q, s) in real.iter().zip(&socks) {
            if q.revents == 0 {
                continue;
            }
            match s {
                Entry::Stream(rs) => {
                    let mut g = rs.lock();
                    if let Some(st) = g.stream.as_mut() {
                        if q.fd == st.cq_fd() {
                            let _w = rs.wait.lock().unwrap_or_else(|p| p.into_inner());
                            ep::drain_cq_events(st.id);
                            st.cq_armed = false;
                        }
                    }
                }
                Entry::Dgram(d) => dapi::woke(d),
                Entry::Plain => {}
            }
        }
    }
}

#[no_mangle]
pub extern "C" fn rpoll(fds: *mut pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    ffi::value(-1, || {
        let r = if nfds == 0 {
            rpoll_slice(&mut [], timeout)
        } else if fds.is_null() {
            Err(Errno(libc::EFAULT))
        } else {
            // SAFETY: nfds pollfds at fds (API contract).
            rpoll_slice(
                unsafe { core::slice::from_raw_parts_mut(fds, nfds as usize) },
                timeout,
            )
        };
        r.unwrap_or_else(|e| {
            ffi::set_errno(e);
            -1
        })
    })
}

fn isset(set: *mut libc::fd_set, fd: c_int) -> bool {
    // SAFETY: a valid fd_set (API contract) and fd below FD_SETSIZE (checked by caller).
    !set.is_null() && unsafe { libc::FD_ISSET(fd, set) }
}

#[no_mangle]
pub extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    ffi::value(-1, || {
        let n = nfds.clamp(0, libc::FD_SETSIZE as c_int);
        let mut fds = Vec::new();
        for fd in 0..n {
            let mut events = 0;
            if isset(readfds, fd) {
                events |= POLLIN;
            }
            if isset(writefds, fd) {
                events |= POLLOUT;
            }
            if events != 0 || isset(exceptfds, fd) {
                fds.push(pollfd {
                    fd,
                    events,
                    revents: 0,
                });
            }
        }
        // SAFETY: NULL or a valid timeval (API contract).
        let ms = match unsafe { timeout.as_ref() } {
            None => -1,
            Some(t) => (t.tv_sec * 1000 + t.tv_usec / 1000).clamp(0, c_int::MAX as i64) as c_int,
        };
        let r = match rpoll_slice(&mut fds, ms) {
            Ok(r) => r,
            Err(e) => {
                ffi::set_errno(e);
                return -1;
            }
        };
        let _ = r;
        // SAFETY: valid fd_sets (API contract).
        unsafe {
            for set in [readfds, writefds, exceptfds] {
                if !set.is_null() {
                    libc::FD_ZERO(set);
                }
            }
        }
        let mut cnt = 0;
        for p in &fds {
            // SAFETY: valid fd_sets; fd below FD_SETSIZE.
            unsafe {
                if !readfds.is_null() && p.revents & (POLLIN | POLLHUP) != 0 {
                    libc::FD_SET(p.fd, readfds);
                    cnt += 1;
                }
                if !writefds.is_null() && p.revents & POLLOUT != 0 {
                    libc::FD_SET(p.fd, writefds);
                    cnt += 1;
                }
                if !exceptfds.is_null() && p.revents & !(POLLIN | POLLOUT) != 0 {
                    libc::FD_SET(p.fd, exceptfds);
                    cnt += 1;
                }
            }
        }
        cnt
    })
}
