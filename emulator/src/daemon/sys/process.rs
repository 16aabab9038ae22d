//! The process and its thread: the descriptor limit, the scheduler time slice, signals
//! forwarded to a descriptor, and daemonizing.

use super::cvt::cvt;
use std::io;
use std::os::fd::RawFd;
use std::path::Path;
use std::time::Duration;

/// Raises the soft limit on open descriptors to the hard limit, and returns it. The daemon
/// holds a send socket per UDP source port in use (one per QP pair, up to
/// `udp::MAX_SENDERS`), a connection per iWARP QP and a descriptor or two per client; the
/// usual soft limit of 1024 would make the QP pairs past it send from the wrong port
/// (failing their ICRC), where the hard limit (systemd's default: 524288) does not.
pub fn raise_descriptor_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: the kernel writes one `rlimit` into `lim`, a live local.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: the kernel reads one `rlimit` from `lim`, a live local.
        cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    }
    Ok(lim.rlim_cur)
}

/// `struct sched_attr` of `sched_setattr(2)` (the fields up to `sched_period`, the size
/// the kernel has accepted since Linux 3.14).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Asks the scheduler to give the calling thread time slices of `slice` (EEVDF's custom
/// slice, Linux 6.12 and later: `sched_setattr` with the thread's own fair policy and nice
/// value and `sched_runtime` = the slice, which the kernel clamps to 0.1–100 ms). A thread
/// with a shorter slice gets an earlier virtual deadline, so when it wakes up, or yields,
/// it runs before threads with the default slice (about 3 ms) instead of after them.
/// Earlier kernels accept the call and ignore the runtime; `Ok(false)` when the thread's
/// policy is not a fair one (real-time, deadline), which is left alone.
pub fn set_thread_slice(slice: Duration) -> io::Result<bool> {
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: the kernel writes at most `size` bytes into `attr`, a live local.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            size,
            0,
        )
    } as libc::c_int)?;
    if attr.policy != libc::SCHED_OTHER as u32 && attr.policy != libc::SCHED_BATCH as u32 {
        return Ok(false);
    }
    attr.size = size;
    attr.flags = 0;
    attr.runtime = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
    // SAFETY: the kernel reads `attr.size` bytes from `attr`, a live local.
    cvt(
        unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) }
            as libc::c_int,
    )?;
    Ok(true)
}

static SIGNAL_WAKE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_signal(_: libc::c_int) {
    let fd = SIGNAL_WAKE_FD.load(std::sync::atomic::Ordering::Relaxed);
    if fd >= 0 {
        let one = 1u64.to_ne_bytes();
        // SAFETY: write(2) is async-signal-safe; the buffer is a local array.
        unsafe {
            libc::write(fd, one.as_ptr().cast(), one.len());
        }
    }
}

static RELOAD_WAKE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_reload_signal(_: libc::c_int) {
    let fd = RELOAD_WAKE_FD.load(std::sync::atomic::Ordering::Relaxed);
    if fd >= 0 {
        let one = 1u64.to_ne_bytes();
        // SAFETY: write(2) is async-signal-safe; the buffer is a local array.
        unsafe {
            libc::write(fd, one.as_ptr().cast(), one.len());
        }
    }
}

/// Makes SIGHUP write to the eventfd `fd` (the engine's reload wake-up).
pub fn forward_sighup(fd: RawFd) -> io::Result<()> {
    RELOAD_WAKE_FD.store(fd, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: installs an async-signal-safe handler (it only calls write(2)).
    let prev = unsafe {
        libc::signal(
            libc::SIGHUP,
            on_reload_signal as *const () as libc::sighandler_t,
        )
    };
    if prev == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `signals` write to the eventfd `fd` (the engine's shutdown wake-up), and ignores
/// SIGPIPE and `ignored`.
pub fn forward_signals(
    fd: RawFd,
    signals: &[libc::c_int],
    ignored: &[libc::c_int],
) -> io::Result<()> {
    SIGNAL_WAKE_FD.store(fd, std::sync::atomic::Ordering::Relaxed);
    for &sig in signals {
        // SAFETY: installs an async-signal-safe handler (it only calls write(2)).
        let prev = unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
        if prev == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
    }
    for &sig in ignored.iter().chain(&[libc::SIGPIPE]) {
        // SAFETY: setting a signal's disposition to ignore.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    Ok(())
}

/// Detaches from the terminal: fork (the parent writes the child's pid to `pid_file`, if
/// any, then exits 0, so the file exists when the command returns), setsid, stdio to
/// /dev/null. Call before any thread is started.
pub fn daemonize(pid_file: Option<&Path>) -> io::Result<()> {
    // SAFETY: fork in a single-threaded process; the parent only writes a file and
    // exits without running destructors, the child continues.
    match unsafe { libc::fork() } {
        -1 => return Err(io::Error::last_os_error()),
        0 => {}
        child => {
            let code = match pid_file.map(|p| std::fs::write(p, format!("{child}\n"))) {
                Some(Err(_)) => 1,
                _ => 0,
            };
            // SAFETY: ends the parent at once; the child owns everything from here.
            unsafe { libc::_exit(code) }
        }
    }
    // SAFETY: plain syscalls; dup2 onto the standard descriptors of /dev/null.
    unsafe {
        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::dup2(null, 2);
            if null > 2 {
                libc::close(null);
            }
        }
    }
    Ok(())
}
