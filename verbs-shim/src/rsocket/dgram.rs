//! Datagram rsockets (`SOCK_DGRAM`): rsocket.c's datagram service over UD QPs, with
//! its address resolution through a kernel UDP socket.
//!
//! The socket's number is a kernel UDP socket (bound and connected as the caller asks),
//! as in rdma-core. For each local address it sends from, the socket has a UD QP bound
//! (RDMA CM, `RDMA_PS_UDP`) to that address and port. To a destination whose QP is not
//! known yet, a datagram goes on the UDP socket behind a `ds_udp_header` naming the
//! sender's QP; the receiver answers with an `RS_OP_CTRL` datagram naming its own QP,
//! resolves a route back and makes an address handle, so from then on both directions
//! are UD SENDs led by a `ds_header` (the source address), Q_Key `RDMA_UDP_QKEY`.
//!
//! Where rdma-core differs, and why:
//! - rsocket.c reads the UDP socket on a service thread and forwards a datagram that
//!   arrived there to itself through its own QP, with an address handle built from the
//!   port's LID and no GRH. A RoCE port refuses such a handle (the GRH is mandatory,
//!   IBA A17.3; the kernel's `rdma_check_ah_attr` and our device both answer EINVAL),
//!   so on rxe rdma-core's datagram rsockets cannot create their first QP (`rconnect`
//!   then says ENOENT: `ds_free_qp`'s `EPOLL_CTL_DEL` of a descriptor never added
//!   overwrites the errno). Here the UDP
//!   socket is read whenever the socket is used (send, receive, poll: the socket's
//!   number is the UDP socket, so poll wakes on it), and such a datagram is queued
//!   locally instead of crossing the device.
//! - A datagram that does not fit a receive slot (`RS_SNDLOWAT` with its header) or the
//!   port's MTU fails with EMSGSIZE; rsocket.c copies past its slot or loses it.
//! - On iWARP there is no UD QP: creating one fails with EOPNOTSUPP, as the kernel's
//!   siw answers rdma-core, so `rconnect`/`rsendto` fail the same way.
use super::dhdr::{self, GRH_LEN};
use super::ep::{self, Mr, RawBuf};
use super::proto;
use super::stream::Sizes;
use crate::abi::*;
use crate::cm::abi::rdma_cm_id;
use crate::cm::route::{rdma_bind_addr, rdma_resolve_addr, rdma_resolve_route};
use crate::ffi::{Errno, VResult};
use core::ffi::{c_int, c_void};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use wire::client::cm::ps;

/// `RDMA_UDP_QKEY` (`<rdma/rdma_cma.h>`).
const UDP_QKEY: u32 = 0x0123_4567;
/// One send or receive slot (`RS_SNDLOWAT`).
const SLOT: usize = proto::SNDLOWAT as usize;
/// UDP datagrams read per progress call, so a flood cannot starve the caller.
const UDP_BATCH: usize = 64;

fn rc(r: c_int) -> VResult<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// A UD address handle, destroyed on drop.
struct Ah(*mut ibv_ah);

impl Drop for Ah {
    fn drop(&mut self) {
        crate::verbs::ibv_destroy_ah(self.0);
    }
}

/// One UD QP bound to one local address (`struct ds_qp`). Fields drop in order: the
/// memory regions, then the buffer, then the id with its QP.
struct DQp {
    smr: Mr,
    rmr: Mr,
    rbuf: RawBuf,
    id: OwnedId,
    local: SocketAddr,
    /// The `ds_header` every SEND from this QP starts with.
    hdr: Vec<u8>,
    qpn: u32,
    /// The port's active MTU in bytes: the largest UD message.
    mtu: usize,
    armed: bool,
}

/// The RDMA CM id of a [`DQp`], destroyed (with its QP, CQ and channel) on drop.
struct OwnedId(*mut rdma_cm_id);

impl Drop for OwnedId {
    fn drop(&mut self) {
        ep::destroy(self.0);
    }
}

/// A peer address (`struct ds_dest`): the QP that talks to it and, once the peer's QP
/// is known, the address handle and its QP number.
struct Dest {
    qp: usize,
    ah: Option<Ah>,
    qpn: u32,
}

/// A received datagram waiting for `rrecv`.
enum RMsg {
    /// In QP `qp`'s receive slot at `off`: `len` bytes after the GRH area.
    Ud { qp: usize, off: u32, len: u32 },
    /// Arrived on the UDP socket before the peer knew our QP.
    Local { src: SocketAddr, data: Vec<u8> },
}

/// What exists from the first bind/connect/send on (`ds_init_ep` and the QPs).
struct Ep {
    /// Declared before `sbuf`, whose registrations they hold.
    qps: Vec<DQp>,
    dests: HashMap<SocketAddr, Dest>,
    sbuf: RawBuf,
    free: Vec<u32>,
    rq: VecDeque<RMsg>,
    sz: Sizes,
}

pub struct DSock {
    udp: c_int,
    /// The epoll set of the UDP socket and every QP's completion channel: one
    /// descriptor `rpoll` can sleep on.
    epfd: c_int,
    pub nonblock: bool,
    pub sizes: Sizes,
    conn: Option<SocketAddr>,
    ep: Option<Ep>,
}

// SAFETY: the ids and verbs objects belong to this socket and are used under its lock.
unsafe impl Send for DSock {}

impl Drop for DSock {
    fn drop(&mut self) {
        self.ep = None;
        // SAFETY: descriptors this socket opened, closed once.
        unsafe {
            libc::close(self.epfd);
            libc::close(self.udp);
        }
    }
}

fn epoll_add(epfd: c_int, fd: c_int) -> VResult<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: fd as u64,
    };
    // SAFETY: valid descriptors and event.
    rc(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) })
}

fn sockname(fd: c_int, peer: bool) -> VResult<SocketAddr> {
    // SAFETY: plain old data.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = &mut ss as *mut _ as *mut libc::sockaddr;
    // SAFETY: room for any address.
    let r = unsafe {
        if peer {
            libc::getpeername(fd, p, &mut len)
        } else {
            libc::getsockname(fd, p, &mut len)
        }
    };
    rc(r)?;
    // SAFETY: the kernel wrote `len` bytes.
    unsafe { dhdr::from_sockaddr(p, len) }.ok_or(Errno::EINVAL)
}

/// `ds_get_src_addr`: the local address datagrams to `dst` leave from (the UDP
/// socket's, or, when it is bound to any address, the routed one with its port).
fn src_addr(udp: c_int, dst: &SocketAddr) -> VResult<SocketAddr> {
    let mut local = sockname(udp, false)?;
    if !local.ip().is_unspecified() {
        return Ok(local);
    }
    let fam = if dst.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: a new socket, closed below.
    let s = unsafe { libc::socket(fam, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(Errno::last());
    }
    let (sa, len) = dhdr::to_sockaddr(dst);
    // SAFETY: a valid address of `len` bytes.
    let r = rc(unsafe { libc::connect(s, &sa as *const _ as *const libc::sockaddr, len) })
        .and_then(|_| sockname(s, false));
    // SAFETY: the socket made above.
    unsafe { libc::close(s) };
    let routed = r?;
    local.set_ip(routed.ip());
    Ok(local)
}

impl DSock {
    /// `rsocket(domain, SOCK_DGRAM, ...)`: the UDP socket and the epoll set.
    pub fn new(domain: c_int, nonblock: bool) -> VResult<DSock> {
        // SAFETY: plain socket calls; results checked.
        let udp = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if udp < 0 {
            return Err(Errno::last());
        }
        // SAFETY: as above.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epfd < 0 {
            let e = Errno::last();
            // SAFETY: the socket made above.
            unsafe { libc::close(udp) };
            return Err(e);
        }
        let s = DSock {
            udp,
            epfd,
            nonblock,
            sizes: Sizes::default(),
            conn: None,
            ep: None,
        };
        ep::set_nonblock(udp, true);
        epoll_add(epfd, udp)?;
        Ok(s)
    }

    pub fn fd(&self) -> c_int {
        self.udp
    }

    /// The descriptor a waiter sleeps on.
    pub fn wait_fd(&self) -> c_int {
        self.epfd
    }

    /// The UDP socket's own name (`rgetsockname`) or peer (`rgetpeername`).
    pub fn name(&self, peer: bool) -> VResult<SocketAddr> {
        sockname(self.udp, peer)
    }

    /// `ds_init_ep`: buffers sized as `ds_set_qp_size` sizes them.
    fn ep(&mut self) -> VResult<&mut Ep> {
        if self.ep.is_none() {
            let mut sz = self.sizes;
            let max = crate::cm::device::min_qpsize().min(u32::from(proto::QP_MAX_SIZE)) as u16;
            let max = max.max(proto::QP_MIN_SIZE);
            let slot = proto::SNDLOWAT;
            sz.sq_size = sz.sq_size.clamp(1, max);
            sz.rq_size = sz.rq_size.clamp(1, max);
            sz.rq_size = sz
                .rq_size
                .min((sz.rbuf_size / slot).clamp(1, 0xffff) as u16);
            sz.rbuf_size = u32::from(sz.rq_size) * slot;
            sz.sq_size = sz
                .sq_size
                .min((sz.sbuf_size / slot).clamp(1, 0xffff) as u16);
            sz.sbuf_size = u32::from(sz.sq_size) * slot;
            let sbuf = RawBuf::new(sz.sbuf_size as usize)?;
            self.sizes = sz;
            self.ep = Some(Ep {
                qps: Vec::new(),
                dests: HashMap::new(),
                sbuf,
                free: (0..u32::from(sz.sq_size)).rev().map(|i| i * slot).collect(),
                rq: VecDeque::new(),
                sz,
            });
        }
        self.ep.as_mut().ok_or(Errno::EINVAL)
    }

    /// `rbind`: the UDP socket's bind.
    pub fn bind(&mut self, addr: *const libc::sockaddr, len: libc::socklen_t) -> VResult<()> {
        self.ep()?;
        // SAFETY: the caller's address of `len` bytes (API contract).
        rc(unsafe { libc::bind(self.udp, addr, len) })
    }

    /// `rconnect`: the UDP socket's connect, then the QP and destination for it.
    pub fn connect(&mut self, addr: *const libc::sockaddr, len: libc::socklen_t) -> VResult<()> {
        // SAFETY: the caller's address of `len` bytes (API contract).
        let dst = unsafe { dhdr::from_sockaddr(addr, len) }.ok_or(Errno(libc::EAFNOSUPPORT))?;
        self.ep()?;
        // SAFETY: as above.
        rc(unsafe { libc::connect(self.udp, addr, len) })?;
        self.dest(&dst)?;
        self.conn = Some(dst);
        Ok(())
    }

    /// `ds_get_dest`: the destination entry for `dst`, with the QP of the local address
    /// that reaches it (`ds_get_qp`, `ds_create_qp` when there is none yet).
    fn dest(&mut self, dst: &SocketAddr) -> VResult<()> {
        if self.ep()?.dests.contains_key(dst) {
            return Ok(());
        }
        let local = src_addr(self.udp, dst)?;
        let ep = self.ep()?;
        let qp = match ep.qps.iter().position(|q| q.local == local) {
            Some(i) => i,
            None => {
                let q = DQp::create(&local, &ep.sbuf, ep.sz)?;
                epoll_add(self.epfd, q.cq_fd())?;
                let ep = self.ep()?;
                ep.qps.push(q);
                ep.qps.len() - 1
            }
        };
        self.ep()?.dests.insert(
            *dst,
            Dest {
                qp,
                ah: None,
                qpn: 0,
            },
        );
        Ok(())
    }

    /// The destination of a send: `to`, or the connected peer.
    fn target(&mut self, to: Option<SocketAddr>) -> VResult<SocketAddr> {
        match to.or(self.conn) {
            Some(d) => {
                self.dest(&d)?;
                Ok(d)
            }
            None => Err(Errno(libc::EDESTADDRREQ)),
        }
    }

    /// Whether a send could go now: a free slot (or no endpoint yet).
    pub fn can_send(&self) -> bool {
        self.ep.as_ref().is_none_or(|e| !e.free.is_empty())
    }

    pub fn have_rdata(&self) -> bool {
        self.ep.as_ref().is_some_and(|e| !e.rq.is_empty())
    }

    pub fn all_sends_done(&self) -> bool {
        self.ep
            .as_ref()
            .is_none_or(|e| e.free.len() == usize::from(e.sz.sq_size))
    }

    /// Reads what waits on the UDP socket and polls every CQ (the service thread's and
    /// `ds_poll_cqs`'s work), without blocking.
    pub fn progress(&mut self) {
        if self.ep.is_none() {
            return;
        }
        self.read_udp();
        if let Some(ep) = self.ep.as_mut() {
            ep.poll_cqs();
        }
    }

    /// `udp_svc_process_rs`, for each datagram waiting.
    fn read_udp(&mut self) {
        let mut buf = [0u8; SLOT];
        for _ in 0..UDP_BATCH {
            // SAFETY: plain old data.
            let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
            let mut len = core::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            // SAFETY: a buffer of buf.len() bytes and room for any address.
            let n = unsafe {
                libc::recvfrom(
                    self.udp,
                    buf.as_mut_ptr() as *mut c_void,
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    &mut ss as *mut _ as *mut libc::sockaddr,
                    &mut len,
                )
            };
            if n < 0 {
                return;
            }
            // SAFETY: the kernel wrote `len` bytes of address.
            let from = unsafe { dhdr::from_sockaddr(&ss as *const _ as *const _, len) };
            let (Some(from), Some(data)) = (from, buf.get(..n as usize)) else {
                continue;
            };
            if let Err(e) = self.handle_udp(from, data) {
                crate::log::shim_log!("rsocket: datagram from {from} dropped: {e:?}");
            }
        }
    }

    fn handle_udp(&mut self, from: SocketAddr, b: &[u8]) -> VResult<()> {
        let h = dhdr::parse_udp_header(b, &from).ok_or(Errno(libc::EPROTO))?;
        self.dest(&from)?;
        if h.op == dhdr::OP_DATA {
            // Tell the sender our QP, so its next datagrams come over the device.
            self.send_udp(&from, dhdr::OP_CTRL, &[])?;
        }
        let ep = self.ep()?;
        let d = ep.dests.get(&from).ok_or(Errno::EINVAL)?;
        if d.ah.is_none() || d.qpn != h.qpn {
            let ah = ep.qps[d.qp].create_ah(&from)?;
            if let Some(d) = ep.dests.get_mut(&from) {
                d.ah = Some(ah);
                d.qpn = h.qpn;
            }
        }
        if h.op == dhdr::OP_DATA && ep.rq.len() < usize::from(ep.sz.rq_size) {
            ep.rq.push_back(RMsg::Local {
                src: from,
                data: b[h.len..].to_vec(),
            });
        }
        Ok(())
    }

    /// `ds_sendv_udp`: `data` behind a `ds_udp_header` on the UDP socket.
    fn send_udp(&mut self, to: &SocketAddr, op: u8, data: &[u8]) -> VResult<usize> {
        let ep = self.ep()?;
        let q = &ep.qps[ep.dests.get(to).ok_or(Errno::EINVAL)?.qp];
        let hdr = dhdr::udp_header(op, q.qpn, &q.local);
        let iov = [
            libc::iovec {
                iov_base: hdr.as_ptr() as *mut c_void,
                iov_len: hdr.len(),
            },
            libc::iovec {
                iov_base: data.as_ptr() as *mut c_void,
                iov_len: data.len(),
            },
        ];
        let (mut sa, salen) = dhdr::to_sockaddr(to);
        // SAFETY: plain old data.
        let mut m: libc::msghdr = unsafe { core::mem::zeroed() };
        m.msg_name = &mut sa as *mut _ as *mut c_void;
        m.msg_namelen = salen;
        m.msg_iov = iov.as_ptr() as *mut libc::iovec;
        m.msg_iovlen = 2;
        // SAFETY: a valid msghdr over live buffers.
        let n = unsafe { libc::sendmsg(self.udp, &m, libc::MSG_DONTWAIT) };
        if n < 0 {
            return Err(Errno::last());
        }
        Ok((n as usize).saturating_sub(hdr.len()))
    }

    /// `dsend`: one datagram to `to` (or the connected peer). Over UD once the peer's
    /// QP is known, on the UDP socket before. Needs a free slot (the caller waited).
    pub fn send(&mut self, to: Option<SocketAddr>, data: &[u8]) -> VResult<usize> {
        let to = self.target(to)?;
        self.progress();
        let ep = self.ep()?;
        let d = ep.dests.get(&to).ok_or(Errno::EINVAL)?;
        let Some(ah) = d.ah.as_ref().map(|a| a.0) else {
            return self.send_udp(&to, dhdr::OP_DATA, data);
        };
        let (qpn, q) = (d.qpn, &ep.qps[d.qp]);
        let total = q.hdr.len() + data.len();
        if total > SLOT || total > q.mtu {
            return Err(Errno(libc::EMSGSIZE));
        }
        let off = ep.free.pop().ok_or(Errno::EAGAIN)?;
        ep.sbuf.write(off as usize, &q.hdr);
        ep.sbuf.write(off as usize + q.hdr.len(), data);
        let mut sge = ibv_sge {
            addr: ep.sbuf.addr() + u64::from(off),
            length: total as u32,
            lkey: q.smr.lkey(),
        };
        let mut wr = ep::send_wr();
        wr.wr_id = u64::from(off);
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        if total as u32 <= ep.sz.sq_inline {
            wr.send_flags = IBV_SEND_INLINE;
        }
        wr.wr = ibv_send_wr_wr {
            ud: ibv_send_wr_ud {
                ah,
                remote_qpn: qpn,
                remote_qkey: UDP_QKEY,
            },
        };
        // SAFETY: the QP's id is live while the socket is.
        let qp = unsafe { (*q.id.0).qp };
        if let Err(e) = ep::post_send(qp, &mut wr) {
            ep.free.push(off);
            return Err(e);
        }
        Ok(data.len())
    }

    /// `ds_recvfrom` once a datagram waits: copies what fits, reports the source,
    /// gives the slot back unless peeking.
    pub fn recv(&mut self, buf: &mut [u8], peek: bool) -> VResult<(usize, SocketAddr)> {
        let ep = self.ep.as_mut().ok_or(Errno::EAGAIN)?;
        let m = ep.rq.front().ok_or(Errno::EAGAIN)?;
        let (n, src) = match m {
            RMsg::Local { src, data } => {
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                (n, *src)
            }
            RMsg::Ud { qp, off, len } => {
                let q = &ep.qps[*qp];
                let mut head = [0u8; dhdr::IPV6_HDR_LEN];
                let hl = head.len().min(*len as usize);
                q.rbuf.read(*off as usize, &mut head[..hl]);
                let (src, hlen) = dhdr::parse_ds_header(&head[..hl]).ok_or(Errno::EIO)?;
                let n = (*len as usize - hlen).min(buf.len());
                q.rbuf.read(*off as usize + hlen, &mut buf[..n]);
                (n, src)
            }
        };
        if !peek {
            if let Some(RMsg::Ud { qp, off, .. }) = ep.rq.pop_front() {
                ep.qps[qp].post_recv(off, ep.sz.rbuf_size)?;
            }
        }
        Ok((n, src))
    }

    /// Arms every CQ not armed yet (`ds_req_notify_cqs`); the caller progresses once
    /// more before sleeping, for what arrived meanwhile.
    pub fn arm(&mut self) {
        if let Some(ep) = self.ep.as_mut() {
            for q in ep.qps.iter_mut().filter(|q| !q.armed) {
                // SAFETY: a live id with its CQ.
                if ep::req_notify(unsafe { (*q.id.0).recv_cq }).is_ok() {
                    q.armed = true;
                }
            }
        }
    }

    /// After a wake-up: consumes the completion events, so the CQs are armed afresh.
    pub fn woke(&mut self) {
        if let Some(ep) = self.ep.as_mut() {
            for q in &mut ep.qps {
                if ep::drain_cq_events(q.id.0) {
                    q.armed = false;
                }
            }
        }
    }
}

impl Ep {
    /// `ds_poll_cqs`: receives join the queue while it has room (else their slot is
    /// reposted: the datagram is dropped, as UDP drops it); send slots come back.
    fn poll_cqs(&mut self) {
        let room = usize::from(self.sz.rq_size);
        for i in 0..self.qps.len() {
            // SAFETY: a live id with its CQ.
            let cq = unsafe { (*self.qps[i].id.0).recv_cq };
            while let Ok(Some(wc)) = ep::poll_one(cq) {
                if wc.wr_id & proto::WR_ID_RECV == 0 {
                    self.free.push(wc.wr_id as u32);
                    continue;
                }
                let off = wc.wr_id as u32;
                let q = &self.qps[i];
                let len = (wc.byte_len as usize).saturating_sub(GRH_LEN);
                let ok = wc.status == ep::WC_SUCCESS
                    && wc.byte_len as usize >= GRH_LEN + dhdr::IPV4_HDR_LEN
                    && len <= SLOT
                    && self.rq.len() < room
                    && valid_header(&q.rbuf, off as usize, len);
                if ok {
                    self.rq.push_back(RMsg::Ud {
                        qp: i,
                        off,
                        len: len as u32,
                    });
                } else if q.post_recv(off, self.sz.rbuf_size).is_err() {
                    crate::log::shim_log!("rsocket: cannot repost a datagram receive");
                }
            }
        }
    }
}

/// `ds_valid_recv`, with the header's length checked against the datagram's.
fn valid_header(rbuf: &RawBuf, off: usize, len: usize) -> bool {
    let mut head = [0u8; dhdr::IPV6_HDR_LEN];
    let hl = head.len().min(len);
    rbuf.read(off, &mut head[..hl]) && dhdr::parse_ds_header(&head[..hl]).is_some()
}

impl DQp {
    /// `ds_create_qp`: an id bound to `local`, its CQ and UD QP, the receive buffer
    /// (slots, then one GRH area all receives share) with every slot posted.
    fn create(local: &SocketAddr, sbuf: &RawBuf, sz: Sizes) -> VResult<DQp> {
        let id = ep::create_id(ps::UDP)?;
        let made = (|| {
            let (sa, _) = dhdr::to_sockaddr(local);
            rc(rdma_bind_addr(id, &sa as *const _ as *mut libc::sockaddr))?;
            ep::create_qp(id, IBV_QPT_UD, sz.sq_size, sz.rq_size, sz.sq_inline)?;
            // SAFETY: the id's PD and QP, set by bind and create_qp.
            let (pd, qpn, verbs, port) =
                unsafe { ((*id).pd, (*(*id).qp).qp_num, (*id).verbs, (*id).port_num) };
            // SAFETY: plain old data.
            let mut pa: ibv_port_attr = unsafe { core::mem::zeroed() };
            rc(crate::device::ibv_query_port(verbs, port.max(1), &mut pa))?;
            let rbuf = RawBuf::new(sz.rbuf_size as usize + GRH_LEN)?;
            let q = DQp {
                smr: Mr::register(pd, sbuf, false)?,
                rmr: Mr::register(pd, &rbuf, false)?,
                rbuf,
                id: OwnedId(id),
                local: *local,
                hdr: dhdr::ds_header(local),
                qpn,
                mtu: 128usize << pa.active_mtu.clamp(1, 5),
                armed: true,
            };
            Ok(q)
        })();
        let q = match made {
            Ok(q) => q,
            Err(e) => {
                ep::destroy(id);
                return Err(e);
            }
        };
        for i in 0..u32::from(sz.rq_size) {
            q.post_recv(i * proto::SNDLOWAT, sz.rbuf_size)?;
        }
        Ok(q)
    }

    fn cq_fd(&self) -> c_int {
        // SAFETY: a live id with its channel.
        unsafe { (*(*self.id.0).recv_cq_channel).fd }
    }

    /// `ds_post_recv`: the GRH into the shared area, the datagram into slot `off`.
    fn post_recv(&self, off: u32, rbuf_size: u32) -> VResult<()> {
        let base = self.rbuf.addr();
        let mut sge = [
            ibv_sge {
                addr: base + u64::from(rbuf_size),
                length: GRH_LEN as u32,
                lkey: self.rmr.lkey(),
            },
            ibv_sge {
                addr: base + u64::from(off),
                length: proto::SNDLOWAT,
                lkey: self.rmr.lkey(),
            },
        ];
        let mut wr = ibv_recv_wr {
            wr_id: proto::WR_ID_RECV | u64::from(off),
            next: core::ptr::null_mut(),
            sg_list: sge.as_mut_ptr(),
            num_sge: 2,
        };
        // SAFETY: the id's live QP.
        ep::post_recv(unsafe { (*self.id.0).qp }, &mut wr)
    }

    /// `udp_svc_create_ah`: resolves a route from this QP's address to `peer` on a
    /// scratch id and makes the address handle from its path (always with a GRH, which
    /// RoCE needs).
    fn create_ah(&self, peer: &SocketAddr) -> VResult<Ah> {
        let id = ep::create_id(ps::UDP)?;
        let r = (|| {
            let mut src = self.local;
            src.set_port(0);
            let (mut s, _) = dhdr::to_sockaddr(&src);
            let (mut d, _) = dhdr::to_sockaddr(peer);
            rc(rdma_resolve_addr(
                id,
                &mut s as *mut _ as *mut libc::sockaddr,
                &mut d as *mut _ as *mut libc::sockaddr,
                2000,
            ))?;
            rc(rdma_resolve_route(id, 2000))?;
            // SAFETY: a resolved id: its path record is set (or NULL, refused).
            let path = unsafe { (*id).route.path_rec.as_ref() }.ok_or(Errno(libc::EHOSTUNREACH))?;
            // SAFETY: the QP's live id.
            let (verbs, port, pd) =
                unsafe { ((*self.id.0).verbs, (*self.id.0).port_num, (*self.id.0).pd) };
            let mut attr = ibv_ah_attr {
                grh: ibv_global_route {
                    dgid: path.dgid,
                    flow_label: u32::from_be(path.flow_label),
                    sgid_index: sgid_index(verbs, port, &path.sgid),
                    hop_limit: if path.hop_limit > 1 {
                        path.hop_limit
                    } else {
                        64
                    },
                    traffic_class: path.traffic_class,
                },
                dlid: u16::from_be(path.dlid),
                sl: path.sl,
                src_path_bits: 0,
                static_rate: path.rate,
                is_global: 1,
                port_num: port.max(1),
            };
            crate::cm::request::verbs_ptr(crate::verbs::ibv_create_ah(pd, &mut attr)).map(Ah)
        })();
        crate::cm::id::rdma_destroy_id(id);
        r
    }
}

/// `udp_svc_sgid_index`: where `sgid` sits in the port's first 16 GIDs (0 if absent).
fn sgid_index(verbs: *mut ibv_context, port: u8, sgid: &ibv_gid) -> u8 {
    (0..16u8)
        .find(|&i| {
            let mut g = ibv_gid::default();
            crate::device::ibv_query_gid(verbs, port.max(1), c_int::from(i), &mut g) == 0
                && g == *sgid
        })
        .unwrap_or(0)
}
