//! Keepalive on stream rsockets (`SO_KEEPALIVE`), as rsocket.c's `tcp_svc` sends it:
//! every `keepalive_time` seconds (`TCP_KEEPIDLE`, else
//! `/proc/sys/net/ipv4/tcp_keepalive_time`, else 7200) a connected socket with a free
//! control slot posts the `RS_CTRL_KEEPALIVE` control message, a 0-byte RDMA WRITE WITH
//! IMMEDIATE (WRITE + inline SEND on iWARP) that the peer consumes without answering.
//! A dead peer then surfaces as a failed completion instead of silence.
//!
//! One thread serves every socket of the process; it holds them weakly (a closed socket
//! leaves by itself) and ends when none is left, as rsocket.c's service thread does.
use super::proto;
use super::sock::RSock;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

struct Entry {
    sock: Weak<RSock>,
    every: Duration,
    next: Instant,
}

#[derive(Default)]
struct Service {
    entries: Vec<Entry>,
    running: bool,
}

fn service() -> (&'static Mutex<Service>, &'static Condvar) {
    static S: OnceLock<(Mutex<Service>, Condvar)> = OnceLock::new();
    let (m, c) = S.get_or_init(Default::default);
    (m, c)
}

fn lock() -> MutexGuard<'static, Service> {
    service().0.lock().unwrap_or_else(|p| p.into_inner())
}

/// `tcp_keepalive_time` of the kernel, rsocket.c's default interval.
pub fn default_time() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(7200)
}

/// Starts, changes (`RS_SVC_MOD_KEEPALIVE`: the next one a full interval from now) or
/// stops the keepalive of `rs`: `every` is None to stop.
pub fn set(rs: &Arc<RSock>, every: Option<Duration>) {
    let mut s = lock();
    s.entries
        .retain(|e| e.sock.strong_count() > 0 && !std::ptr::eq(e.sock.as_ptr(), Arc::as_ptr(rs)));
    if let Some(every) = every {
        s.entries.push(Entry {
            sock: Arc::downgrade(rs),
            every,
            next: Instant::now() + every,
        });
        if !s.running {
            s.running = true;
            if std::thread::Builder::new()
                .name("rsocket-keepalive".into())
                .spawn(run)
                .is_err()
            {
                s.running = false;
            }
        }
    }
    service().1.notify_all();
}

/// `tcp_svc_send_keepalive`: only when connected and a control slot is free (a busy
/// socket's traffic proves it alive anyway).
fn send(rs: &RSock) {
    let mut g = rs.lock();
    if let Some(s) = g.stream.as_mut() {
        s.progress();
        if let Err(e) = s.post_ctrl(proto::CTRL_KEEPALIVE) {
            crate::log::shim_log!("rsocket: keepalive not sent: {e:?}");
        }
    }
}

fn run() {
    let (_, cv) = service();
    let mut s = lock();
    loop {
        s.entries.retain(|e| e.sock.strong_count() > 0);
        if s.entries.is_empty() {
            s.running = false;
            return;
        }
        let now = Instant::now();
        let due: Vec<Arc<RSock>> = s
            .entries
            .iter_mut()
            .filter(|e| e.next <= now)
            .filter_map(|e| {
                e.next = now + e.every;
                e.sock.upgrade()
            })
            .collect();
        if !due.is_empty() {
            // Sending takes the sockets' locks: not under the service's.
            drop(s);
            for rs in &due {
                send(rs);
            }
            drop(due);
            s = lock();
            continue;
        }
        let next = s.entries.iter().map(|e| e.next).min().unwrap_or(now);
        // Woken early by `set`; at most a minute, to notice closed sockets.
        let wait = next
            .saturating_duration_since(now)
            .min(Duration::from_secs(60));
        s = cv
            .wait_timeout(s, wait)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}
