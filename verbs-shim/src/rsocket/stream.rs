//! A connected stream rsocket: rsocket.c's data path (credits, target SGL, RDMA WRITE
//! WITH IMMEDIATE into the peer's receive buffer, or WRITE + inline SEND on iWARP).
//!
//! The sender writes into the halves of the peer's receive buffer the peer granted
//! (through SGEs it RDMA-writes into our target SGL), never more than the remaining
//! length of the current entry, and never more messages than the peer's credits
//! (`sseq_no` up to `sseq_comp`). The receiver counts what was announced
//! ([`RecvRing`]), grants half a buffer back once it was read, and reposts receives.
use super::ep::{self, Mr, RawBuf};
use super::proto::{self, ConnData, Msg, Op, RemoteSge};
use super::recv::RecvRing;
use crate::abi::*;
use crate::cm::abi::rdma_cm_id;
use crate::ffi::{Errno, VResult};

/// rsocket.c's state bits (`enum rs_state`), kept for the connected part.
pub const CONNECTED: u32 = 0x0100;
pub const WRITABLE: u32 = 0x0200;
pub const READABLE: u32 = 0x0400;
pub const CONNECT_RDWR: u32 = CONNECTED | WRITABLE | READABLE;
pub const DISCONNECTED: u32 = 0x1000;
pub const ERROR: u32 = 0x2000;

/// Sizes chosen before connecting (socket options).
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub sq_size: u16,
    pub rq_size: u16,
    pub sq_inline: u32,
    pub sbuf_size: u32,
    pub rbuf_size: u32,
    pub target_iomap_size: u16,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes {
            sq_size: proto::DEF_SQSIZE,
            rq_size: proto::DEF_RQSIZE,
            sq_inline: u32::from(proto::DEF_INLINE),
            sbuf_size: proto::DEF_WMEM,
            rbuf_size: proto::DEF_MEM,
            target_iomap_size: 0,
        }
    }
}

pub struct Stream {
    pub id: *mut rdma_cm_id,
    pub state: u32,
    pub err: i32,
    msg_send: bool,
    swap_sgl: bool,
    pub sz: Sizes,
    sbuf: RawBuf,
    smr: Mr,
    rbuf: RawBuf,
    rmr: Mr,
    pub(super) target: RawBuf,
    pub(super) target_mr: Mr,
    /// Our copy of the current target SGE (the peer writes the others).
    target_sge: usize,
    target_cur: Option<RemoteSge>,
    /// The first half of the peer's receive buffer, from its connection data. Every
    /// target SGE the peer writes is one of its two halves (rsocket.c's
    /// `rs_send_credits`), so an SGE read as anything else is still being written.
    peer_half: RemoteSge,
    remote_sgl: RemoteSge,
    pub(super) remote_iomap: RemoteSge,
    remote_sge: u32,
    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    sseq_no: u16,
    sseq_comp: u16,
    rseq_no: u16,
    rseq_comp: u16,
    rbuf_msg_index: u32,
    rbuf_bytes_avail: u32,
    rbuf_free_offset: u32,
    ring: RecvRing,
    sbuf_bytes_avail: u32,
    sbuf_head: u32,
    pub(super) sqe_avail: i32,
    pub cq_armed: bool,
}

// SAFETY: the raw pointers are verbs objects of this library, used under the rsocket's
// lock.
unsafe impl Send for Stream {}

/// Receives posted: the credits granted (`rq_size`, what the protocol counts) plus room
/// for the peer's control messages, which take receives too: on iWARP a SEND finding no
/// receive breaks the connection (no RNR retry as on InfiniBand).
fn posted(sz: &Sizes) -> u16 {
    sz.rq_size.saturating_add(2 * proto::QP_CTRL_SIZE as u16)
}

fn qp(id: *mut rdma_cm_id) -> *mut ibv_qp {
    // SAFETY: a live id.
    unsafe { (*id).qp }
}

fn cq(id: *mut rdma_cm_id) -> *mut ibv_cq {
    // SAFETY: a live id.
    unsafe { (*id).recv_cq }
}

impl Stream {
    /// `rs_create_ep` + `rs_init_bufs`: the QP, buffers and posted receives of a
    /// connection about to be made on `id`.
    pub fn create(id: *mut rdma_cm_id, mut sz: Sizes) -> VResult<Stream> {
        let msg_send = ep::is_iwarp(id);
        sz.sq_size = sz.sq_size.clamp(proto::QP_MIN_SIZE, proto::QP_MAX_SIZE);
        sz.rq_size = sz.rq_size.clamp(proto::QP_MIN_SIZE, proto::QP_MAX_SIZE);
        let max = crate::cm::device::min_qpsize().min(u32::from(proto::QP_MAX_SIZE)) as u16;
        sz.sq_size = sz.sq_size.min(max.max(proto::QP_MIN_SIZE));
        sz.rq_size = sz.rq_size.min(max.max(proto::QP_MIN_SIZE));
        if msg_send {
            sz.sq_inline = sz.sq_inline.max(proto::MSG_SIZE as u32);
        }
        sz.sbuf_size = sz.sbuf_size.max(proto::SNDLOWAT * 2);
        sz.rbuf_size = sz.rbuf_size.max(proto::SNDLOWAT * 2) & !1;
        sz.sq_inline = ep::create_qp(id, IBV_QPT_RC, sz.sq_size, posted(&sz), sz.sq_inline)?;
        if msg_send && sz.sq_inline < proto::MSG_SIZE as u32 {
            return Err(Errno::EOPNOTSUPP);
        }
        // SAFETY: the id's PD, set by route resolution or the request.
        let pd = unsafe { (*id).pd };
        let ctrl = proto::SGE_LEN * proto::QP_CTRL_SIZE as usize;
        let sbuf = RawBuf::new(sz.sbuf_size as usize + ctrl)?;
        let smr = Mr::register(pd, &sbuf, false)?;
        let target = RawBuf::new(
            proto::SGE_LEN * proto::SGL_SIZE + proto::IOMAP_LEN * usize::from(sz.target_iomap_size),
        )?;
        let target_mr = Mr::register(pd, &target, true)?;
        let msgs = if msg_send {
            usize::from(posted(&sz)) * proto::MSG_SIZE
        } else {
            0
        };
        let rbuf = RawBuf::new(sz.rbuf_size as usize + msgs)?;
        let rmr = Mr::register(pd, &rbuf, true)?;
        let mut s = Stream {
            id,
            state: 0,
            err: 0,
            msg_send,
            swap_sgl: false,
            sz,
            sbuf,
            smr,
            rbuf,
            rmr,
            target,
            target_mr,
            target_sge: 0,
            target_cur: None,
            peer_half: RemoteSge::default(),
            remote_sgl: RemoteSge::default(),
            remote_iomap: RemoteSge::default(),
            remote_sge: 1,
            ctrl_seqno: 0,
            ctrl_max_seqno: proto::QP_CTRL_SIZE,
            sseq_no: 0,
            sseq_comp: 0,
            rseq_no: 0,
            rseq_comp: sz.rq_size >> 1,
            rbuf_msg_index: 0,
            rbuf_bytes_avail: sz.rbuf_size >> 1,
            rbuf_free_offset: sz.rbuf_size >> 1,
            ring: RecvRing::new(sz.rbuf_size, sz.rq_size),
            sbuf_bytes_avail: sz.sbuf_size,
            sbuf_head: 0,
            sqe_avail: i32::from(sz.sq_size) - proto::QP_CTRL_SIZE as i32,
            cq_armed: false,
        };
        for _ in 0..posted(&sz) {
            s.post_recv()?;
        }
        Ok(s)
    }

    /// `rs_format_conn_data`.
    pub fn conn_data(&self) -> [u8; proto::CONN_DATA_LEN] {
        ConnData {
            flags: proto::CONN_FLAG_IOMAP
                | if cfg!(target_endian = "big") {
                    proto::CONN_FLAG_NET
                } else {
                    0
                },
            credits: self.sz.rq_size,
            target_iomap_size: proto::value_to_scale(u32::from(self.sz.target_iomap_size), 8) as u8,
            target_sgl: RemoteSge {
                addr: self.target.addr(),
                key: self.target_mr.rkey(),
                length: proto::SGL_SIZE as u32,
            },
            data_buf: RemoteSge {
                addr: self.rbuf.addr(),
                key: self.rmr.rkey(),
                length: self.sz.rbuf_size >> 1,
            },
        }
        .emit()
    }

    /// `rs_save_conn_data`: the peer's buffers, from its (checked) private data.
    pub fn save_conn_data(&mut self, c: &ConnData) {
        self.remote_sgl = c.target_sgl;
        self.remote_sge = 1;
        self.swap_sgl = c.peer_is_net() != cfg!(target_endian = "big");
        if c.flags & proto::CONN_FLAG_IOMAP != 0 {
            self.remote_iomap = RemoteSge {
                addr: c
                    .target_sgl
                    .addr
                    .wrapping_add(proto::SGE_LEN as u64 * u64::from(c.target_sgl.length)),
                key: c.target_sgl.key,
                length: proto::scale_to_value(u32::from(c.target_iomap_size), 8),
            };
        }
        self.target_cur = Some(c.data_buf);
        self.peer_half = c.data_buf;
        self.sseq_comp = c.credits;
        self.state = CONNECT_RDWR;
    }

    fn post_recv(&mut self) -> VResult<()> {
        let mut sge = ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        };
        // SAFETY: plain old data.
        let mut wr: ibv_recv_wr = unsafe { core::mem::zeroed() };
        wr.wr_id = proto::WR_ID_RECV;
        if self.msg_send {
            wr.wr_id |= u64::from(self.rbuf_msg_index);
            sge.addr = self.rbuf.addr()
                + u64::from(self.sz.rbuf_size)
                + u64::from(self.rbuf_msg_index) * proto::MSG_SIZE as u64;
            sge.length = proto::MSG_SIZE as u32;
            sge.lkey = self.rmr.lkey();
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            self.rbuf_msg_index += 1;
            if self.rbuf_msg_index == u32::from(posted(&self.sz)) {
                self.rbuf_msg_index = 0;
            }
        }
        ep::post_recv(qp(self.id), &mut wr)
    }

    /// `rs_post_msg`: a message with no data (credits, control).
    fn post_msg(&mut self, msg: Msg) -> VResult<()> {
        let mut v = msg.to_u32();
        let mut sge = ibv_sge {
            addr: &mut v as *mut u32 as u64,
            length: 4,
            lkey: 0,
        };
        let mut wr = ep::send_wr();
        wr.wr_id = u64::from(msg.to_u32());
        if !self.msg_send {
            wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = msg.to_u32().to_be();
        } else {
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
            wr.send_flags = IBV_SEND_INLINE;
        }
        ep::post_send(qp(self.id), &mut wr)
    }

    /// `rs_post_write_msg`: data (or an SGE) written to the peer, announced by `msg`.
    fn post_write_msg(
        &mut self,
        sges: &mut [ibv_sge],
        msg: Msg,
        flags: u32,
        addr: u64,
        rkey: u32,
    ) -> VResult<()> {
        let mut wr = ep::send_wr();
        wr.wr_id = u64::from(msg.to_u32());
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = sges.len() as i32;
        wr.send_flags = flags;
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: addr,
            rkey,
        };
        if !self.msg_send {
            wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = msg.to_u32().to_be();
            return ep::post_send(qp(self.id), &mut wr);
        }
        wr.opcode = IBV_WR_RDMA_WRITE;
        ep::post_send(qp(self.id), &mut wr)?;
        let mut v = msg.to_u32();
        let mut sge = ibv_sge {
            addr: &mut v as *mut u32 as u64,
            length: 4,
            lkey: 0,
        };
        let mut send = ep::send_wr();
        send.wr_id = u64::from(Msg::new(msg.op, 0).to_u32()) | proto::WR_ID_MSG_SEND;
        send.sg_list = &mut sge;
        send.num_sge = 1;
        send.opcode = IBV_WR_SEND;
        send.send_flags = IBV_SEND_INLINE;
        ep::post_send(qp(self.id), &mut send)
    }

    /// A plain RDMA WRITE of `data` (riowrite's direct path), its completion counted as
    /// `RS_OP_WRITE`.
    pub(super) fn write_direct(&mut self, data: &[u8], addr: u64, rkey: u32) -> VResult<()> {
        let len = data.len() as u32;
        let (mut sges, n, flags) = self.stage(data);
        let mut wr = ep::send_wr();
        wr.wr_id = u64::from(Msg::new(Op::Write, len).to_u32());
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = n as i32;
        wr.send_flags = flags;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: addr,
            rkey,
        };
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        ep::post_send(qp(self.id), &mut wr)
    }

    /// An iomap entry written into the peer's iomap table at `index` (`rs_write_iomap`).
    pub(super) fn write_iomap(
        &mut self,
        entry: &[u8; proto::IOMAP_LEN],
        index: u32,
    ) -> VResult<()> {
        if index >= self.remote_iomap.length {
            return Err(Errno::EINVAL);
        }
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= if self.msg_send { 2 } else { 1 };
        self.sbuf_bytes_avail -= proto::IOMAP_LEN as u32;
        let (mut sges, n, flags) = self.stage(entry);
        let addr = self.remote_iomap.addr + u64::from(index) * proto::IOMAP_LEN as u64;
        let key = self.remote_iomap.key;
        self.post_write_msg(
            &mut sges[..n],
            Msg::new(Op::IomapSgl, index),
            flags,
            addr,
            key,
        )
    }

    /// Where the bytes of a write come from: `data` itself when it fits inline (copied
    /// at post time), else copied into the send buffer's next bytes (two pieces when
    /// they wrap). The caller made sure the send buffer has room.
    fn stage(&mut self, data: &[u8]) -> ([ibv_sge; 2], usize, u32) {
        let len = data.len() as u32;
        let none = ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        };
        if len <= self.sz.sq_inline {
            let s = ibv_sge {
                addr: data.as_ptr() as u64,
                length: len,
                lkey: 0,
            };
            return ([s, none], 1, IBV_SEND_INLINE);
        }
        let left = self.sz.sbuf_size - self.sbuf_head;
        let lkey = self.smr.lkey();
        let base = self.sbuf.addr();
        if len <= left {
            self.sbuf.write(self.sbuf_head as usize, data);
            let s = ibv_sge {
                addr: base + u64::from(self.sbuf_head),
                length: len,
                lkey,
            };
            self.sbuf_head = if len < left { self.sbuf_head + len } else { 0 };
            return ([s, none], 1, 0);
        }
        let (a, b) = data.split_at(left as usize);
        self.sbuf.write(self.sbuf_head as usize, a);
        self.sbuf.write(0, b);
        let s = [
            ibv_sge {
                addr: base + u64::from(self.sbuf_head),
                length: left,
                lkey,
            },
            ibv_sge {
                addr: base,
                length: len - left,
                lkey,
            },
        ];
        self.sbuf_head = len - left;
        (s, 2, 0)
    }

    fn ctrl_slot(&self) -> usize {
        self.sz.sbuf_size as usize
            + proto::SGE_LEN * (self.ctrl_seqno & (proto::QP_CTRL_SIZE - 1)) as usize
    }

    /// The current target SGE: ours once set, else what the peer wrote at that slot, once
    /// it is whole. The peer's RDMA WRITE of the slot may be placed while we read it, and
    /// a torn read (the new length with the old key) would send to a key the peer never
    /// gave: iWARP answers that with a Terminate (invalid STag).
    fn target(&mut self) -> RemoteSge {
        if let Some(t) = self.target_cur {
            return t;
        }
        let b = self.target.read16(self.target_sge * proto::SGE_LEN);
        let t = RemoteSge::read(&b, self.swap_sgl);
        // At `rbuf_free_offset` 0, half or (an odd buffer size) twice half.
        let half = self.peer_half;
        let offset = t.addr.wrapping_sub(half.addr);
        let whole = t.key == half.key
            && t.length == half.length
            && half.length != 0
            && offset.is_multiple_of(u64::from(half.length))
            && offset / u64::from(half.length) <= 2;
        if !whole {
            return RemoteSge::default();
        }
        // Taken over from the peer's write: clear it so the next lap sees a fresh one.
        self.target
            .write(self.target_sge * proto::SGE_LEN, &[0u8; 16]);
        self.target_cur = Some(t);
        t
    }

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    fn ctrl2_avail(&self) -> bool {
        (self
            .ctrl_seqno
            .wrapping_add(1)
            .wrapping_sub(self.ctrl_max_seqno) as i32)
            < 0
    }

    /// `rs_give_credits`.
    fn give_credits(&self) -> bool {
        let half = self.rbuf_bytes_avail >= (self.sz.rbuf_size >> 1)
            || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0;
        let ctrl = if self.msg_send {
            self.ctrl2_avail()
        } else {
            self.ctrl_avail()
        };
        half && ctrl && self.state & CONNECTED != 0
    }

    /// `rs_send_credits`.
    fn send_credits(&mut self) -> VResult<()> {
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.rseq_comp = self.rseq_no.wrapping_add(self.sz.rq_size >> 1);
        let limit = Msg::new(
            Op::Sgl,
            u32::from(self.rseq_no.wrapping_add(self.sz.rq_size)),
        );
        let half = self.sz.rbuf_size >> 1;
        if self.rbuf_bytes_avail < half {
            return self.post_msg(limit);
        }
        if self.msg_send {
            self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        }
        let sge = RemoteSge {
            addr: self.rbuf.addr() + u64::from(self.rbuf_free_offset),
            key: self.rmr.rkey(),
            length: half,
        };
        let bytes = sge.emit(self.swap_sgl);
        let (mut ib, flags) = if self.sz.sq_inline < proto::SGE_LEN as u32 {
            let off = self.ctrl_slot();
            self.sbuf.write(off, &bytes);
            (
                ibv_sge {
                    addr: self.sbuf.addr() + off as u64,
                    length: proto::SGE_LEN as u32,
                    lkey: self.smr.lkey(),
                },
                0,
            )
        } else {
            (
                ibv_sge {
                    addr: bytes.as_ptr() as u64,
                    length: proto::SGE_LEN as u32,
                    lkey: 0,
                },
                IBV_SEND_INLINE,
            )
        };
        let addr = self.remote_sgl.addr + u64::from(self.remote_sge) * proto::SGE_LEN as u64;
        let key = self.remote_sgl.key;
        self.post_write_msg(core::slice::from_mut(&mut ib), limit, flags, addr, key)?;
        self.rbuf_bytes_avail -= half;
        self.rbuf_free_offset += half;
        if self.rbuf_free_offset >= self.sz.rbuf_size {
            self.rbuf_free_offset = 0;
        }
        self.remote_sge += 1;
        if self.remote_sge >= self.remote_sgl.length {
            self.remote_sge = 0;
        }
        Ok(())
    }

    fn update_credits(&mut self) {
        if self.give_credits() {
            if let Err(e) = self.send_credits() {
                self.fail(e.0);
            }
        }
    }

    #[track_caller]
    fn fail(&mut self, err: i32) {
        crate::log::shim_log!(
            "rsocket: connection failed (errno {err}) at {}",
            core::panic::Location::caller()
        );
        if self.state & CONNECTED != 0 || self.state == 0 {
            self.state = ERROR;
            self.err = err;
        }
    }

    /// `rs_poll_cq`: processes every completion waiting.
    fn poll_cq(&mut self) {
        let mut reposts = 0;
        loop {
            let wc = match ep::poll_one(cq(self.id)) {
                Ok(Some(wc)) => wc,
                Ok(None) => break,
                Err(e) => {
                    self.fail(e.0);
                    break;
                }
            };
            if wc.wr_id & proto::WR_ID_RECV != 0 {
                if wc.status != ep::WC_SUCCESS {
                    // A flushed receive: the connection broke (rsocket.c learns it from
                    // its CM service thread's DISCONNECTED event).
                    if self.state & CONNECTED != 0 {
                        crate::log::shim_log!(
                            "rsocket: receive completed with status {}",
                            wc.status
                        );
                        self.state = ERROR;
                        self.err = libc::ECONNRESET;
                    }
                    continue;
                }
                reposts += 1;
                let raw = if wc.wc_flags & ep::WC_WITH_IMM != 0 {
                    u32::from_be(wc.imm_data)
                } else {
                    let idx = (wc.wr_id & 0xffff_ffff) as usize;
                    let mut b = [0u8; 4];
                    let off = self.sz.rbuf_size as usize + idx * proto::MSG_SIZE;
                    if wc.byte_len as usize != proto::MSG_SIZE
                        || idx >= usize::from(posted(&self.sz))
                        || !self.rbuf.read(off, &mut b)
                    {
                        self.fail(libc::EPROTO);
                        continue;
                    }
                    u32::from_ne_bytes(b)
                };
                self.on_msg(Msg::from_u32(raw));
                if self.state & CONNECTED == 0 {
                    break;
                }
            } else {
                let msg = Msg::from_u32(wc.wr_id as u32);
                match msg.op {
                    Op::Sgl => self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1),
                    Op::Ctrl => {
                        self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1);
                        if msg.data == proto::CTRL_DISCONNECT {
                            self.state = DISCONNECTED;
                        }
                    }
                    Op::IomapSgl => {
                        self.sqe_avail += 1;
                        if wc.wr_id & proto::WR_ID_MSG_SEND == 0 {
                            self.sbuf_bytes_avail += proto::IOMAP_LEN as u32;
                        }
                    }
                    _ => {
                        self.sqe_avail += 1;
                        self.sbuf_bytes_avail += msg.data;
                    }
                }
                if wc.status != ep::WC_SUCCESS && self.state & CONNECTED != 0 {
                    crate::log::shim_log!(
                        "rsocket: send {msg:?} completed with status {}",
                        wc.status
                    );
                    self.state = ERROR;
                    self.err = libc::EIO;
                }
            }
        }
        if self.state & CONNECTED != 0 {
            for _ in 0..reposts {
                if let Err(e) = self.post_recv() {
                    self.fail(e.0);
                    break;
                }
            }
        }
    }

    fn on_msg(&mut self, msg: Msg) {
        match msg.op {
            Op::Sgl => self.sseq_comp = msg.data as u16,
            Op::IomapSgl | Op::Write => {}
            Op::Ctrl => match msg.data {
                proto::CTRL_DISCONNECT => {
                    crate::log::shim_log!("rsocket: the peer disconnected");
                    self.state = DISCONNECTED;
                }
                proto::CTRL_SHUTDOWN => {
                    if self.state & WRITABLE != 0 {
                        self.state &= !READABLE;
                    } else {
                        self.state = DISCONNECTED;
                    }
                }
                _ => {} // keepalive
            },
            Op::Data => {
                if self.state & READABLE != 0 && self.ring.on_data(msg.data).is_err() {
                    self.fail(libc::EPROTO);
                }
            }
            Op::Reserved(_) => self.fail(libc::EPROTO),
        }
    }

    /// One round of `rs_process_cq` without waiting: credits out, completions in.
    pub fn progress(&mut self) {
        self.update_credits();
        self.poll_cq();
        self.update_credits();
    }

    /// Arms the CQ once; the caller polls again before sleeping.
    pub fn arm(&mut self) {
        if !self.cq_armed {
            if let Err(e) = ep::req_notify(cq(self.id)) {
                self.fail(e.0);
            }
            self.cq_armed = true;
        }
    }

    pub fn cq_fd(&self) -> i32 {
        // SAFETY: the id's completion channel, live with the stream.
        unsafe { (*(*self.id).recv_cq_channel).fd }
    }

    /// `rs_can_send`.
    pub fn can_send(&mut self) -> bool {
        let sqe = if self.msg_send { 2 } else { 1 };
        self.state & WRITABLE != 0
            && self.sqe_avail >= sqe
            && self.sbuf_bytes_avail >= proto::SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target().length != 0
    }

    pub fn have_rdata(&self) -> bool {
        self.ring.has_data()
    }

    /// `rs_conn_have_rdata`: data, or nothing more will come.
    pub fn readable_or_done(&self) -> bool {
        self.have_rdata() || self.state & READABLE == 0
    }

    /// `rs_conn_all_sends_done`.
    pub fn all_sends_done(&self) -> bool {
        let ctrl = self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno) as i32;
        ctrl + self.sqe_avail == i32::from(self.sz.sq_size) || self.state & CONNECTED == 0
    }

    /// Sends one chunk of `buf` (`rsend`'s loop body); the caller checked `can_send`.
    pub fn send_chunk(&mut self, buf: &[u8], olen: &mut u32) -> VResult<usize> {
        let mut xfer = buf.len() as u32;
        if *olen < xfer {
            xfer = *olen;
            if *olen < proto::MAX_TRANSFER {
                *olen <<= 1;
            }
        }
        let t = self.target();
        xfer = xfer.min(self.sbuf_bytes_avail).min(t.length);
        let data = &buf[..xfer as usize];
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= if self.msg_send { 2 } else { 1 };
        self.sbuf_bytes_avail -= xfer;
        let mut next = t;
        next.addr = next.addr.wrapping_add(u64::from(xfer));
        next.length -= xfer;
        if next.length == 0 {
            self.target_cur = None;
            self.target_sge = (self.target_sge + 1) % proto::SGL_SIZE;
        } else {
            self.target_cur = Some(next);
        }
        let (mut sges, n, flags) = self.stage(data);
        self.post_write_msg(
            &mut sges[..n],
            Msg::new(Op::Data, xfer),
            flags,
            t.addr,
            t.key,
        )?;
        Ok(xfer as usize)
    }

    /// Copies received data into `out` (consuming unless `peek`).
    pub fn recv_into(&mut self, out: &mut [u8], peek: bool) -> usize {
        let pieces = if peek {
            self.ring.peek(out.len())
        } else {
            let (p, done) = self.ring.take(out.len());
            self.rseq_no = self.rseq_no.wrapping_add(done as u16);
            p
        };
        let mut n = 0;
        for (off, len) in pieces {
            if !self.rbuf.read(off, &mut out[n..n + len]) {
                break;
            }
            n += len;
        }
        if !peek {
            self.rbuf_bytes_avail += n as u32;
        }
        n
    }

    /// Posts a control message (`rshutdown`), when a control slot is free.
    pub fn post_ctrl(&mut self, code: u32) -> VResult<bool> {
        if self.state & CONNECTED == 0 || !self.ctrl_avail() {
            return Ok(false);
        }
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.post_msg(Msg::new(Op::Ctrl, code))?;
        Ok(true)
    }

    pub fn ctrl_slot_free(&self) -> bool {
        self.ctrl_avail() || self.state & CONNECTED == 0
    }

    pub fn sbuf_avail(&self) -> u32 {
        self.sbuf_bytes_avail
    }

    pub fn swap(&self) -> bool {
        self.swap_sgl
    }

    pub fn pd(&self) -> *mut ibv_pd {
        // SAFETY: a live id.
        unsafe { (*self.id).pd }
    }
}
