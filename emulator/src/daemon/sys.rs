//! Thin, safe wrappers over the Linux system calls the daemon needs: memfd, mmap, eventfd,
//! timerfd, epoll, pipes, and unix `SOCK_SEQPACKET` messages with `SCM_RIGHTS`.
//!
//! Every `unsafe` block of the daemon outside the memory accessor lives here.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_isize(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

fn own(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: `fd` was just returned by a successful syscall that creates a descriptor,
    // so we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A sealed memfd of `len` bytes (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`): a client
/// that maps it cannot truncate it under the daemon.
pub fn sealed_memfd(name: &str, len: usize) -> io::Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `cname` is a valid NUL-terminated string that outlives the call.
    let fd = own(unsafe {
        libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    })?;
    let len_off =
        libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: plain syscalls on a descriptor we own.
    unsafe {
        cvt(libc::ftruncate(fd.as_raw_fd(), len_off))?;
        cvt(libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        ))?;
    }
    Ok(fd)
}

/// Maps the first `len` bytes of `fd` shared and read-write, where the kernel chooses.
fn map_shared(fd: &OwnedFd, len: usize) -> io::Result<*mut libc::c_void> {
    // SAFETY: a fresh mapping chosen by the kernel (no MAP_FIXED) of a descriptor we
    // hold, so no existing memory is affected; the result is checked.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(ptr)
}

/// A shared read-write mapping of a whole memfd, seen as 64-bit atomic words.
#[derive(Debug)]
pub struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is plain shared memory accessed only through atomics
// (`words()`); moving or sharing the handle between threads is sound.
unsafe impl Send for Mapping {}
// SAFETY: as above; all access goes through `&[AtomicU64]`.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` shared. `len` must be a nonzero multiple of 8.
    pub fn new(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        if len == 0 || len & 7 != 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        // A memfd we created and sealed against shrinking: the pages stay valid while mapped.
        let ptr = map_shared(fd, len)?;
        Ok(Mapping { ptr, len })
    }

    /// The mapping as words; the peer writes the same memory concurrently, which atomics
    /// make well defined.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` is page aligned (so aligned for AtomicU64), valid for `len` bytes
        // for as long as `self` lives (unmapped only in Drop), and `len` is a multiple
        // of 8. Every access is atomic, so concurrent writes by the other process are not
        // data races in Rust's model.
        unsafe { std::slice::from_raw_parts(self.ptr as *const AtomicU64, self.len / 8) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping made in `new`, unmapped only here.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

/// What the daemon needs to know about a memfd a client handed over for a memory
/// region, read from the descriptor itself (never from the client's message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemfdInfo {
    /// `F_GET_SEALS`; fails (so no `MemfdInfo`) on anything but a memfd/shmem file.
    pub seals: libc::c_int,
    pub size: u64,
    /// (`st_dev`, `st_ino`): the same file through two descriptors is one mapping.
    pub id: (u64, u64),
}

/// Seals, size and identity of a descriptor that should be a memfd.
pub fn memfd_info(fd: &OwnedFd) -> io::Result<MemfdInfo> {
    // SAFETY: fcntl/fstat on a descriptor we own, with a zeroed out-parameter.
    unsafe {
        let seals = cvt(libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS))?;
        let mut st: libc::stat = std::mem::zeroed();
        cvt(libc::fstat(fd.as_raw_fd(), &mut st))?;
        Ok(MemfdInfo {
            seals,
            size: u64::try_from(st.st_size).unwrap_or(0),
            id: (st.st_dev, st.st_ino),
        })
    }
}

/// A whole client memfd mapped shared and read-write: application pages the client moved
/// onto the memfd, so the daemon reaches them with `memcpy`. The client writes them
/// concurrently, so nothing ever takes a Rust reference into the mapping: bytes move with
/// raw-pointer copies only.
#[derive(Debug)]
pub struct ClientPages {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the handle owns a mapping reached only through raw-pointer copies; moving or
// sharing it between threads is sound.
unsafe impl Send for ClientPages {}
// SAFETY: as above; `&self` methods never create references into the mapping.
unsafe impl Sync for ClientPages {}

impl ClientPages {
    /// Maps `len` bytes of `fd` from offset 0. The caller has checked that the memfd is
    /// sealed against shrinking and at least `len` long: a client that could truncate a
    /// mapped file would make the daemon's next access raise SIGBUS.
    pub fn map(fd: &OwnedFd, len: usize) -> io::Result<ClientPages> {
        if len == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let ptr = map_shared(fd, len)?;
        Ok(ClientPages { ptr, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the mapping starts in the daemon's address space (tests use it as "the
    /// client's" buffer).
    #[cfg(test)]
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Copies `dst.len()` bytes from `offset`; `None` when that leaves the mapping.
    pub fn copy_out(&self, offset: usize, dst: &mut [u8]) -> Option<()> {
        if offset.checked_add(dst.len())? > self.len {
            return None;
        }
        // SAFETY: the source range is inside the live mapping (checked above); `dst` is
        // daemon memory, disjoint from it. The client may write the source concurrently:
        // the copy goes through raw pointers and no reference to the mapping exists.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.cast::<u8>().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            );
        }
        Some(())
    }

    /// Copies `src` to `offset`; `None` when that leaves the mapping.
    pub fn copy_in(&self, offset: usize, src: &[u8]) -> Option<()> {
        if offset.checked_add(src.len())? > self.len {
            return None;
        }
        // SAFETY: as in `copy_out`, with the roles of the two ranges swapped.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.ptr.cast::<u8>().add(offset),
                src.len(),
            );
        }
        Some(())
    }
}

impl Drop for ClientPages {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping made in `map`, unmapped only here.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

/// A nonblocking eventfd (the doorbell).
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    own(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })
}

/// Reads an eventfd or timerfd counter to reset it; ignores "nothing to read".
pub fn drain_counter(fd: RawFd) {
    let mut buf = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a local buffer.
    unsafe {
        libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
    }
}

/// Adds 1 to an eventfd counter.
pub fn eventfd_signal(fd: RawFd) -> io::Result<()> {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a local buffer.
    cvt_isize(unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) }).map(|_| ())
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

/// A nonblocking rtnetlink socket subscribed to IPv4 and IPv6 address changes
/// (RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR, rtnetlink(7)).
pub fn netlink_addr_watch() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    let fd = own(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    })?;
    // SAFETY: sockaddr_nl is plain data; all-zero is a valid value.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_groups = (libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
    // SAFETY: `sa` is a valid sockaddr_nl of the given length.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
}

/// Reads and discards everything queued on a nonblocking socket (notifications that are
/// only a cue to look again); an overrun (ENOBUFS) counts as something read.
pub fn drain_socket(fd: RawFd) {
    let mut buf = [0u8; 8192];
    for _ in 0..64 {
        // SAFETY: reads at most `buf.len()` bytes into a local buffer.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 && io::Error::last_os_error().raw_os_error() != Some(libc::ENOBUFS) {
            return;
        }
    }
}

/// A pipe: (read end, write end), both close-on-exec; the write end nonblocking so a
/// client that never reads cannot block the daemon.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both were just created by pipe2 and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    set_nonblocking(w.as_raw_fd())?;
    Ok((r, w))
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller holds.
    unsafe {
        let flags = cvt(libc::fcntl(fd, libc::F_GETFL))?;
        cvt(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK))?;
    }
    Ok(())
}

/// Writes a whole small record (≤ PIPE_BUF, so atomic) to a nonblocking pipe.
/// `Ok(false)` when the pipe is full (the record is dropped).
pub fn write_record(fd: RawFd, rec: &[u8]) -> io::Result<bool> {
    // SAFETY: writes `rec.len()` bytes from a valid slice.
    let n = unsafe { libc::write(fd, rec.as_ptr().cast(), rec.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(true)
}

/// One write(2): how many bytes went out.
pub fn write_some(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: writes at most data.len() bytes from a valid slice.
    cvt_isize(unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) })
}

/// A CLOCK_MONOTONIC timerfd, nonblocking.
pub fn timerfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    own(unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_CLOEXEC | libc::TFD_NONBLOCK,
        )
    })
}

/// Arms a timerfd to fire once after `after` (`None` disarms it). A zero delay fires at once.
pub fn timerfd_set(fd: RawFd, after: Option<Duration>) -> io::Result<()> {
    let value = match after {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        Some(d) => {
            let d = d.max(Duration::from_nanos(1));
            libc::timespec {
                tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            }
        }
    };
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: value,
    };
    // SAFETY: `spec` is a valid itimerspec; the old value is not requested.
    cvt(unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) }).map(|_| ())
}

/// An epoll instance; each registered descriptor carries a caller-chosen u64 token.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall.
        Ok(Epoll {
            fd: own(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?,
        })
    }

    /// Watches `fd` for input.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })
            .map(|_| ())
    }

    pub fn remove(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `add`; failure (already closed) is harmless.
        unsafe {
            libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev);
        }
    }

    /// Waits up to `timeout` (`None` = forever); returns the ready tokens in `out`.
    pub fn wait(&self, out: &mut Vec<u64>, timeout: Option<Duration>) -> io::Result<()> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let ms = match timeout {
            None => -1,
            Some(d) => d.as_millis().min(i32::MAX as u128) as libc::c_int,
        };
        // SAFETY: `events` has room for 64 entries, as passed.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                ms,
            )
        };
        out.clear();
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        out.extend(events[..n as usize].iter().map(|e| e.u64));
        Ok(())
    }
}

/// Creates a listening unix `SOCK_SEQPACKET` socket at `path` (nonblocking), replacing a
/// stale socket file, with the file's mode set to `mode`.
pub fn seqpacket_listen(path: &Path, mode: u32) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    // Bound and listening under a temporary name, then renamed into place: a client that
    // sees the file can connect at once.
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp_name);
    let addr = sockaddr_un(tmp.as_os_str().as_bytes())?;
    sockaddr_un(path.as_os_str().as_bytes())?;
    // SAFETY: plain syscall.
    let fd = own(unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    })?;
    // A live daemon keeps its socket; only a stale file (nobody accepting) is replaced.
    if seqpacket_connect(path).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "another daemon is listening there",
        ));
    }
    let _ = std::fs::remove_file(&tmp);
    // SAFETY: `addr` is a valid sockaddr_un of the given size.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as u32,
        )
    })?;
    let placed = std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(mode))
        // SAFETY: plain syscall on our socket.
        .and_then(|()| cvt(unsafe { libc::listen(fd.as_raw_fd(), 128) }).map(|_| ()))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(fd)
}

/// Connects a blocking unix `SOCK_SEQPACKET` socket to `path`.
pub fn seqpacket_connect(path: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let addr = sockaddr_un(path.as_os_str().as_bytes())?;
    // SAFETY: plain syscall.
    let fd =
        own(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `addr` is a valid sockaddr_un of the given size.
    cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as u32,
        )
    })?;
    Ok(fd)
}

fn sockaddr_un(path: &[u8]) -> io::Result<libc::sockaddr_un> {
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    if path.is_empty() || path.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path empty or too long",
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(path) {
        *d = *s as libc::c_char;
    }
    Ok(addr)
}

/// Accepts one connection (nonblocking, close-on-exec); `Ok(None)` when none is pending.
pub fn accept(listener: RawFd) -> io::Result<Option<OwnedFd>> {
    // SAFETY: no peer address requested.
    let fd = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: freshly accepted descriptor, owned by nobody else.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The peer's credentials (`SO_PEERCRED`): (pid, uid, gid).
pub fn peer_cred(fd: RawFd) -> io::Result<(u32, u32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred`/`len` are valid out-parameters of the right size.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok((cred.pid as u32, cred.uid, cred.gid))
}

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and has no preconditions.
    unsafe { libc::geteuid() }
}

/// The most descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// Sends one datagram with `fds` attached (`SCM_RIGHTS`). Never raises SIGPIPE.
pub fn send_msg(sock: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let mut cbuf = [0u64; 8]; // 64 bytes, aligned for cmsghdr; room for MAX_FDS descriptors
                              // SAFETY: msghdr is plain old data; all zeroes is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let data_len = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_* are pure computations; the buffer is large enough for one cmsghdr
        // with MAX_FDS ints (checked above), and CMSG_FIRSTHDR is non-null as controllen > 0.
        unsafe {
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(data_len) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(cmsg).cast::<RawFd>(),
                fds.len(),
            );
        }
    }
    // SAFETY: `msg` points at live buffers for the duration of the call.
    let n = cvt_isize(unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) })?;
    if n != bytes.len() {
        return Err(io::Error::from(io::ErrorKind::WriteZero));
    }
    Ok(())
}

/// One received datagram.
#[derive(Debug)]
pub struct Received {
    pub len: usize,
    pub fds: Vec<OwnedFd>,
    /// The datagram or its descriptors did not fit.
    pub truncated: bool,
}

/// Receives one datagram into `buf`, taking ownership of any passed descriptors.
/// `Ok(None)` on a nonblocking socket with nothing pending; `len == 0` with no fds means
/// the peer closed.
pub fn recv_msg(sock: RawFd, buf: &mut [u8]) -> io::Result<Option<Received>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain old data; all zeroes is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // SAFETY: `msg` points at live buffers; MSG_CMSG_CLOEXEC marks received fds cloexec.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control buffer the kernel filled, with the CMSG_* macros and
    // bounds it reported in msg_controllen; each SCM_RIGHTS payload is an array of ints
    // that are now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    let truncated = msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
    Ok(Some(Received {
        len: n as usize,
        fds,
        truncated,
    }))
}

/// Reads exactly `buf.len()` bytes at `offset` of `fd` (pread), or fails.
pub fn pread_exact(fd: RawFd, mut offset: u64, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let off = libc::off64_t::try_from(offset)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: reads at most buf.len() bytes into a valid slice.
        let n = unsafe { libc::pread64(fd, buf.as_mut_ptr().cast(), buf.len(), off) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        let n = n as usize;
        buf = &mut buf[n..];
        offset += n as u64;
    }
    Ok(())
}

/// Writes all of `data` at `offset` of `fd` (pwrite), or fails.
pub fn pwrite_all(fd: RawFd, mut offset: u64, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        let off = libc::off64_t::try_from(offset)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: writes at most data.len() bytes from a valid slice.
        let n = unsafe { libc::pwrite64(fd, data.as_ptr().cast(), data.len(), off) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        let n = n as usize;
        data = &data[n..];
        offset += n as u64;
    }
    Ok(())
}

/// Sets an integer socket option.
pub fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        )
    })
    .map(|_| ())
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

// ---- IP multicast (UD multicast groups, see `super::mcast`) -------------------------------

/// Sets a socket option from a plain C struct.
fn setsockopt_struct<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: passes a pointer to a live, initialised `T` and its size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as u32,
        )
    })
    .map(|_| ())
}

/// Joins (`join`) or leaves the IP multicast `group` on interface `ifindex`
/// (IP_ADD_MEMBERSHIP / IP_DROP_MEMBERSHIP with `ip_mreqn`, IPV6_ADD_MEMBERSHIP /
/// IPV6_DROP_MEMBERSHIP with `ipv6_mreq`).
pub fn mcast_membership(
    fd: RawFd,
    group: std::net::IpAddr,
    ifindex: u32,
    join: bool,
) -> io::Result<()> {
    match group {
        std::net::IpAddr::V4(g) => {
            let m = libc::ip_mreqn {
                imr_multiaddr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(g.octets()),
                },
                imr_address: libc::in_addr { s_addr: 0 },
                imr_ifindex: ifindex as libc::c_int,
            };
            let name = if join {
                libc::IP_ADD_MEMBERSHIP
            } else {
                libc::IP_DROP_MEMBERSHIP
            };
            setsockopt_struct(fd, libc::IPPROTO_IP, name, &m)
        }
        std::net::IpAddr::V6(g) => {
            let m = libc::ipv6_mreq {
                ipv6mr_multiaddr: libc::in6_addr {
                    s6_addr: g.octets(),
                },
                ipv6mr_interface: ifindex,
            };
            let name = if join {
                libc::IPV6_ADD_MEMBERSHIP
            } else {
                libc::IPV6_DROP_MEMBERSHIP
            };
            setsockopt_struct(fd, libc::IPPROTO_IPV6, name, &m)
        }
    }
}

/// Makes an unconnected UDP socket send multicast out of interface `ifindex`
/// (IP_MULTICAST_IF / IPV6_MULTICAST_IF), with `ttl` (IP_MULTICAST_TTL /
/// IPV6_MULTICAST_HOPS), looped back to local listeners (IP_MULTICAST_LOOP /
/// IPV6_MULTICAST_LOOP), as a host's other processes expect.
pub fn mcast_sender(fd: RawFd, v6: bool, ifindex: u32, ttl: u8) -> io::Result<()> {
    if v6 {
        setsockopt_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MULTICAST_IF,
            ifindex as libc::c_int,
        )?;
        setsockopt_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MULTICAST_HOPS,
            libc::c_int::from(ttl),
        )?;
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_LOOP, 1)
    } else {
        let m = libc::ip_mreqn {
            imr_multiaddr: libc::in_addr { s_addr: 0 },
            imr_address: libc::in_addr { s_addr: 0 },
            imr_ifindex: ifindex as libc::c_int,
        };
        setsockopt_struct(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_IF, &m)?;
        setsockopt_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_TTL,
            libc::c_int::from(ttl),
        )?;
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_LOOP, 1)
    }
}

/// A nonblocking UDP socket bound to `addr` with SO_REUSEADDR, so several listeners (two
/// daemons on one host) can bind one multicast group address and port.
pub fn udp_bind_reuse(addr: std::net::SocketAddr) -> io::Result<std::net::UdpSocket> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain syscall; the result is checked and owned at once.
    let fd = own(unsafe {
        libc::socket(
            family,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    match addr {
        std::net::SocketAddr::V4(a) => {
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a live sockaddr_in and its size.
            cvt(unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as u32,
                )
            })?;
        }
        std::net::SocketAddr::V6(a) => {
            let sa = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: a live sockaddr_in6 and its size.
            cvt(unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_in6).cast(),
                    std::mem::size_of::<libc::sockaddr_in6>() as u32,
                )
            })?;
        }
    }
    Ok(std::net::UdpSocket::from(fd))
}
