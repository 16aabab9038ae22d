//! The control connection to rdma-emud: one `SOCK_SEQPACKET` socket per process,
//! one request/reply per verb, file descriptors beside messages with `SCM_RIGHTS`
//! (contracts §3, `wire::client::proto`).
use crate::ffi::{Errno, VResult};
use crate::log::shim_log;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use wire::client::{
    DeviceSummary, Reply, ReplyBody, Request, RequestBody, MAX_MESSAGE_LEN, PROTOCOL_VERSION,
};

/// Most descriptors any reply carries (`DeviceOpened`: 3).
const MAX_FDS: usize = 4;

pub struct Session {
    sock: OwnedFd,
    /// Set when the daemon closed the session or the socket failed: the next
    /// `ibv_get_device_list` connects again (a restarted daemon is found), while
    /// contexts opened on this session keep failing with EIO.
    dead: AtomicBool,
    /// The process that connected. A forked child shares the socket with its parent,
    /// so it must never speak on it: its calls fail with EIO and its next
    /// `ibv_get_device_list` opens a session of its own.
    pid: u32,
    /// Serialises request/reply pairs; holds the next `seq`.
    next_seq: Mutex<u64>,
}

static SESSION: OnceLock<Mutex<Option<Arc<Session>>>> = OnceLock::new();

/// The process's session, connecting (and saying `Hello`) on first use.
pub fn session() -> VResult<Arc<Session>> {
    let slot = SESSION.get_or_init(|| Mutex::new(None));
    let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
    let usable = |s: &&Arc<Session>| !s.dead.load(Ordering::Relaxed) && s.pid == std::process::id();
    if let Some(s) = guard.as_ref().filter(usable) {
        return Ok(s.clone());
    }
    let s = Arc::new(Session::connect()?);
    *guard = Some(s.clone());
    Ok(s)
}

impl Session {
    fn connect() -> VResult<Session> {
        let path = wire::client::socket_path();
        // SAFETY: plain socket(2) call; the result is checked.
        let fd =
            unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(Errno::last());
        }
        // SAFETY: fd is a fresh descriptor we own.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
        let mut addr: libc::sockaddr_un = unsafe { core::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = path.as_os_str().as_encoded_bytes();
        if bytes.len() >= addr.sun_path.len() {
            shim_log!("socket path {} too long", path.display());
            return Err(Errno::ENODEV);
        }
        for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
            *dst = *src as libc::c_char;
        }
        let len = (core::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
        // SAFETY: addr is a valid sockaddr_un of at least `len` bytes.
        let rc = unsafe {
            libc::connect(
                sock.as_raw_fd(),
                &addr as *const _ as *const libc::sockaddr,
                len,
            )
        };
        if rc != 0 {
            let e = Errno::last();
            shim_log!(
                "cannot reach rdma-emud at {}: {}",
                path.display(),
                std::io::Error::from_raw_os_error(e.0)
            );
            return Err(e);
        }
        let s = Session {
            sock,
            dead: AtomicBool::new(false),
            pid: std::process::id(),
            next_seq: Mutex::new(1),
        };
        let devices = s.hello()?;
        shim_log!(
            "connected to {}: {} device(s)",
            path.display(),
            devices.len()
        );
        Ok(s)
    }

    /// `Hello`: opens the session and, on every later call, lists the daemon's current
    /// devices (as rdma-core rescans sysfs on every `ibv_get_device_list`).
    pub fn hello(&self) -> VResult<Vec<DeviceSummary>> {
        let body = RequestBody::Hello {
            version: PROTOCOL_VERSION,
            pid: std::process::id(),
        };
        match self.call(body, &[])? {
            (ReplyBody::Hello { devices, .. }, _) => Ok(devices),
            (other, _) => {
                shim_log!("unexpected Hello reply {other:?}");
                Err(Errno::EIO)
            }
        }
    }

    /// Sends one request with `fds` attached and waits for its reply.
    /// `Err` is the daemon's errno, or EIO when the daemon is gone.
    pub fn call(&self, body: RequestBody, fds: &[RawFd]) -> VResult<(ReplyBody, Vec<OwnedFd>)> {
        if self.pid != std::process::id() {
            shim_log!("verbs on a context opened before fork() are not supported");
            return Err(Errno::EIO);
        }
        let mut seq_guard = self.next_seq.lock().unwrap_or_else(|p| p.into_inner());
        let seq = *seq_guard;
        *seq_guard += 1;
        let req = Request { seq, body };
        let bytes = req.encode().map_err(|e| {
            shim_log!("cannot encode request: {e}");
            Errno::EINVAL
        })?;
        let dead = |e| {
            self.dead.store(true, Ordering::Relaxed);
            e
        };
        send_with_fds(self.sock.as_raw_fd(), &bytes, fds).map_err(dead)?;
        loop {
            let (buf, got_fds) = recv_with_fds(self.sock.as_raw_fd()).map_err(dead)?;
            let reply = Reply::decode(&buf).map_err(|_| {
                shim_log!("undecodable reply from the daemon");
                Errno::EIO
            })?;
            if reply.seq != seq {
                shim_log!("reply seq {} while waiting for {seq}; skipped", reply.seq);
                continue;
            }
            return match reply.result {
                Ok(body) => Ok((body, got_fds)),
                Err(e) if e > 0 => Err(Errno(e)),
                Err(_) => Err(Errno::EIO),
            };
        }
    }
}

/// Sends one datagram with `fds` attached (`SCM_RIGHTS`).
pub fn send_with_fds(sock: RawFd, bytes: &[u8], fds: &[RawFd]) -> VResult<()> {
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut _,
        iov_len: bytes.len(),
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let data_len = core::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(data_len) } as usize;
        if space > core::mem::size_of_val(&cbuf) {
            return Err(Errno::EINVAL);
        }
        msg.msg_control = cbuf.as_mut_ptr() as *mut _;
        msg.msg_controllen = space;
        // SAFETY: msg_control points at `space` zeroed bytes, enough for one header
        // and `fds`; CMSG_FIRSTHDR/CMSG_DATA stay inside it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as usize;
            core::ptr::copy_nonoverlapping(
                fds.as_ptr() as *const u8,
                libc::CMSG_DATA(cmsg),
                data_len as usize,
            );
        }
    }
    loop {
        // SAFETY: msg describes valid buffers for the duration of the call.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = Errno::last();
        if e.0 != libc::EINTR {
            shim_log!("sendmsg to the daemon failed: errno {}", e.0);
            return Err(Errno::EIO);
        }
    }
}

/// Receives one datagram and the descriptors that came with it.
pub fn recv_with_fds(sock: RawFd) -> VResult<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; MAX_MESSAGE_LEN];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut _,
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 16];
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut _;
    msg.msg_controllen = core::mem::size_of_val(&cbuf);
    let n = loop {
        // SAFETY: msg describes valid, writable buffers for the duration of the call.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = Errno::last();
        if e.0 != libc::EINTR {
            shim_log!("recvmsg from the daemon failed: errno {}", e.0);
            return Err(Errno::EIO);
        }
    };
    if n == 0 {
        shim_log!("the daemon closed the session");
        return Err(Errno::EIO);
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control; CMSG_FIRSTHDR/NXTHDR walk only inside
    // msg_controllen, and every SCM_RIGHTS payload holds cmsg_len - CMSG_LEN(0) bytes of fds.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize;
                let count = bytes / core::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                for i in 0..count {
                    let fd = core::ptr::read_unaligned(data.add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if fds.len() > MAX_FDS {
        shim_log!("reply carried {} descriptors", fds.len());
    }
    buf.truncate(n);
    Ok((buf, fds))
}
