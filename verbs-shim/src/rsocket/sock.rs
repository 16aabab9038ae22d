//! Socket states around a stream: bind, listen, accept, connect, shutdown, close and the
//! socket options rsocket.c (and librspreload) set. Connecting and accepting run the
//! RDMA CM synchronously on the socket's own id (a synchronous id: its event channel is
//! the socket's descriptor); a non-blocking listener accepts only once a request is
//! waiting.
use super::ep;
use super::iomap::IoMap;
use super::proto::{self, ConnData};
use super::stream::{self, Sizes, Stream};
use crate::cm::abi::{rdma_cm_id, rdma_conn_param};
use crate::cm::route::{rdma_bind_addr, rdma_listen, rdma_resolve_addr, rdma_resolve_route};
use crate::ffi::{Errno, VResult};
use core::ffi::c_int;
use libc::sockaddr;
use std::sync::{Mutex, MutexGuard};
use wire::client::cm::ps;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Init,
    Bound,
    Listening,
    Connected,
    /// A connect that failed, with its errno.
    ConnectError(i32),
}

pub struct Sock {
    pub id: *mut rdma_cm_id,
    pub phase: Phase,
    pub nonblock: bool,
    pub sizes: Sizes,
    pub stream: Option<Stream>,
    pub maps: Vec<IoMap>,
    /// Option bits as rsocket.c keeps them (`so_opts`, `tcp_opts`), for getsockopt.
    pub so_opts: u64,
    pub tcp_opts: u64,
    /// Seconds between keepalives (`TCP_KEEPIDLE`); 0 until set or keepalive is on.
    pub keepalive_time: u32,
}

// SAFETY: the id belongs to this socket and is used under its lock.
unsafe impl Send for Sock {}

/// `RDMA_CM_EVENT_CONNECT_RESPONSE`'s private data is in the id's last event.
fn event_private_data(id: *mut rdma_cm_id) -> Vec<u8> {
    // SAFETY: a live id; its event is NULL or a live event until the next CM call.
    unsafe {
        let e = (*id).event;
        if e.is_null() {
            return Vec::new();
        }
        let p = (*e).param.conn;
        if p.private_data.is_null() {
            return Vec::new();
        }
        core::slice::from_raw_parts(p.private_data as *const u8, usize::from(p.private_data_len))
            .to_vec()
    }
}

fn rc(r: c_int) -> VResult<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

impl Sock {
    /// `rsocket(domain, SOCK_STREAM, ...)`.
    pub fn new(nonblock: bool) -> VResult<Sock> {
        let id = ep::create_id(ps::TCP)?;
        Ok(Sock::with_id(id, nonblock, Sizes::default()))
    }

    fn with_id(id: *mut rdma_cm_id, nonblock: bool, sizes: Sizes) -> Sock {
        Sock {
            id,
            phase: Phase::Init,
            nonblock,
            sizes,
            stream: None,
            maps: Vec::new(),
            so_opts: 0,
            tcp_opts: 0,
            keepalive_time: 0,
        }
    }

    /// The socket's descriptor: its CM event channel.
    pub fn fd(&self) -> i32 {
        // SAFETY: a live synchronous id with its own channel.
        unsafe { (*(*self.id).channel).fd }
    }

    pub fn bind(&mut self, addr: *const sockaddr) -> VResult<()> {
        rc(rdma_bind_addr(self.id, addr as *mut sockaddr))?;
        self.phase = Phase::Bound;
        Ok(())
    }

    pub fn listen(&mut self, backlog: c_int) -> VResult<()> {
        if self.phase == Phase::Listening {
            return Ok(());
        }
        rc(rdma_listen(self.id, backlog))?;
        self.phase = Phase::Listening;
        Ok(())
    }

    /// `rs_do_connect`, run to its end.
    pub fn connect(&mut self, addr: *const sockaddr) -> VResult<()> {
        match self.phase {
            Phase::Connected => return Err(Errno(libc::EISCONN)),
            Phase::Listening => return Err(Errno::EINVAL),
            Phase::ConnectError(_) => return Err(Errno(libc::ENOTCONN)),
            _ => {}
        }
        let r = self.do_connect(addr);
        if let Err(e) = r {
            self.phase = Phase::ConnectError(e.0);
        }
        r
    }

    fn do_connect(&mut self, addr: *const sockaddr) -> VResult<()> {
        rc(rdma_resolve_addr(
            self.id,
            core::ptr::null_mut(),
            addr as *mut sockaddr,
            2000,
        ))?;
        rc(rdma_resolve_route(self.id, 2000))?;
        let mut s = Stream::create(self.id, self.sizes)?;
        let data = s.conn_data();
        let mut param = rdma_conn_param {
            private_data: data.as_ptr() as *const _,
            private_data_len: data.len() as u8,
            responder_resources: 0,
            initiator_depth: 0,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        };
        if ep::is_iwarp(self.id) {
            // rsocket.c: iWARP issues an RDMA READ while connecting.
            param.initiator_depth = 1;
        }
        rc(crate::cm::conn::rdma_connect(self.id, &mut param))?;
        let peer = ConnData::parse(&event_private_data(self.id)).map_err(|_| Errno::EOPNOTSUPP);
        let peer = match peer {
            Ok(p) => p,
            Err(e) => {
                crate::cm::conn::rdma_disconnect(self.id);
                return Err(e);
            }
        };
        s.save_conn_data(&peer);
        self.sizes = s.sz;
        self.stream = Some(s);
        self.phase = Phase::Connected;
        Ok(())
    }

    /// Whether a connection request waits on a listener (its channel is readable).
    pub fn request_waiting(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, 0) > 0 }
    }

    /// `rs_accept` + `raccept`: takes one request, checks its private data, answers with
    /// ours. A request with malformed private data is rejected and the next one taken.
    pub fn accept(&mut self) -> VResult<Sock> {
        if self.phase != Phase::Listening {
            return Err(Errno(libc::EBADF));
        }
        loop {
            if self.nonblock && !self.request_waiting() {
                return Err(Errno::EAGAIN);
            }
            let mut new = core::ptr::null_mut();
            rc(crate::cm::conn::rdma_get_request(self.id, &mut new))?;
            match self.accept_one(new) {
                Ok(s) => return Ok(s),
                Err(e) => crate::log::shim_log!("rsocket: refused a connection: {e:?}"),
            }
        }
    }

    fn accept_one(&mut self, new: *mut rdma_cm_id) -> VResult<Sock> {
        let req = event_private_data(new);
        // SAFETY: the request event of a live id.
        let (resp_res, init_depth) = unsafe {
            let p = (*(*new).event).param.conn;
            (p.responder_resources, p.initiator_depth)
        };
        let peer = match ConnData::parse(&req) {
            Ok(p) => p,
            Err(e) => {
                crate::cm::conn::rdma_reject(new, core::ptr::null(), 0);
                crate::cm::id::rdma_destroy_id(new);
                crate::log::shim_log!("rsocket: bad private data {e:?}");
                return Err(Errno(libc::EPROTO));
            }
        };
        let mut s = match Stream::create(new, self.sizes) {
            Ok(s) => s,
            Err(e) => {
                crate::cm::conn::rdma_reject(new, core::ptr::null(), 0);
                ep::destroy(new);
                return Err(e);
            }
        };
        s.save_conn_data(&peer);
        let data = s.conn_data();
        let mut param = rdma_conn_param {
            private_data: data.as_ptr() as *const _,
            private_data_len: data.len() as u8,
            responder_resources: resp_res,
            initiator_depth: init_depth,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        };
        if crate::cm::conn::rdma_accept(new, &mut param) != 0 {
            let e = Errno::last();
            drop(s);
            ep::destroy(new);
            return Err(e);
        }
        let mut sock = Sock::with_id(new, self.nonblock, s.sz);
        sock.stream = Some(s);
        sock.phase = Phase::Connected;
        Ok(sock)
    }

    /// `rshutdown`'s first half: the state change and the control message; the caller
    /// then drains the sends.
    pub fn shutdown_msg(&mut self, how: c_int) -> VResult<bool> {
        let Some(s) = self.stream.as_mut() else {
            return Err(Errno(libc::ENOTCONN));
        };
        if s.state & stream::CONNECTED == 0 {
            return Ok(false);
        }
        let ctrl = match how {
            libc::SHUT_RDWR => {
                s.state &= !(stream::READABLE | stream::WRITABLE);
                proto::CTRL_DISCONNECT
            }
            libc::SHUT_WR => {
                s.state &= !stream::WRITABLE;
                if s.state & stream::READABLE != 0 {
                    proto::CTRL_SHUTDOWN
                } else {
                    proto::CTRL_DISCONNECT
                }
            }
            libc::SHUT_RD => {
                s.state &= !stream::READABLE;
                if s.state & stream::WRITABLE != 0 {
                    return Ok(false);
                }
                proto::CTRL_DISCONNECT
            }
            _ => return Err(Errno::EINVAL),
        };
        s.post_ctrl(ctrl)
    }
}

impl Drop for Sock {
    fn drop(&mut self) {
        // As rsocket.c's rs_free: the peer was told by the DISCONNECT control message
        // (rclose's shutdown); the id goes without waiting for the CM's disconnect
        // handshake, which a peer that keeps its socket open would never finish.
        self.maps.clear();
        self.stream = None;
        ep::destroy(self.id);
    }
}

/// What a wait loop is waiting for.
#[derive(Clone, Copy)]
pub enum Want {
    Readable,
    Writable,
    CtrlSlot,
    SendsDone,
}

fn ready(s: &mut Stream, w: Want) -> bool {
    match w {
        Want::Readable => s.readable_or_done(),
        Want::Writable => s.can_send() || s.state & stream::WRITABLE == 0,
        Want::CtrlSlot => s.ctrl_slot_free(),
        Want::SendsDone => s.all_sends_done(),
    }
}

/// `rs_get_comp`: progresses the stream until `want` holds; EAGAIN when non-blocking.
/// Sleeps on the completion channel with the socket unlocked.
pub fn wait<'a>(
    rs: &'a RSock,
    mut g: MutexGuard<'a, Sock>,
    want: Want,
    nonblock: bool,
) -> VResult<MutexGuard<'a, Sock>> {
    let mut spins = 0u32;
    loop {
        let s = g.stream.as_mut().ok_or(Errno(libc::ENOTCONN))?;
        s.progress();
        if ready(s, want) {
            return Ok(g);
        }
        if nonblock {
            return Err(Errno::EAGAIN);
        }
        // rsocket.c polls for a while (polling_time) before sleeping.
        if spins < 64 {
            spins += 1;
            drop(g);
            std::thread::yield_now();
            g = rs.lock();
            continue;
        }
        if !s.cq_armed {
            s.arm();
            continue;
        }
        let fd = s.cq_fd();
        let id = s.id;
        drop(g);
        {
            let _w = rs.wait.lock().unwrap_or_else(|p| p.into_inner());
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd; bounded so a missed wake-up costs 100 ms at most.
            unsafe { libc::poll(&mut p, 1, 100) };
            if p.revents != 0 {
                ep::drain_cq_events(id);
            }
        }
        g = rs.lock();
        if let Some(s) = g.stream.as_mut() {
            s.cq_armed = false;
        }
    }
}

/// One rsocket: its state behind a lock, and a second lock that serialises sleeping on
/// its completion channel (so `rsend` and `rrecv` of two threads both progress, as
/// rsocket.c's `cq_lock`/`cq_wait_lock` allow).
pub struct RSock {
    pub fd: i32,
    pub inner: Mutex<Sock>,
    pub wait: Mutex<()>,
}

impl RSock {
    pub fn lock(&self) -> MutexGuard<'_, Sock> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}
