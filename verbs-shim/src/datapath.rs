//! The data path behind `ibv_context.ops`, which rdma-core's inline `ibv_post_send`,
//! `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq` and `ibv_post_srq_recv` call
//! directly: ring operations on shared memory, no syscall except the doorbell write
//! when the engine sleeps (contracts §3, "Rings").
use crate::abi::*;
use crate::context::Context;
use crate::ffi::{self, Errno, VResult};
use crate::mmap::Mapping;
use crate::objects::{
    cq_of, obj, qp_of, refuse_in_reset, srq_of, Ah, Mw, Qp, RecvQueue, SendQueue,
};
use core::ffi::c_int;
use wire::client::slot::{CqeRepr, RecvWqeRepr, SendData, SendWqeRepr, Sge, SgeList};
use wire::client::{Consumer, Producer, RingError, RingView};

pub fn context_ops() -> ibv_context_ops {
    ibv_context_ops {
        _compat_query_device: None,
        _compat_query_port: None,
        _compat_alloc_pd: None,
        _compat_dealloc_pd: None,
        _compat_reg_mr: None,
        _compat_rereg_mr: None,
        _compat_dereg_mr: None,
        alloc_mw: Some(crate::verbs::alloc_mw),
        bind_mw: Some(bind_mw),
        dealloc_mw: Some(crate::verbs::dealloc_mw),
        _compat_create_cq: None,
        poll_cq: Some(poll_cq),
        req_notify_cq: Some(req_notify_cq),
        _compat_cq_event: None,
        _compat_resize_cq: None,
        _compat_destroy_cq: None,
        _compat_create_srq: None,
        _compat_modify_srq: None,
        _compat_query_srq: None,
        _compat_destroy_srq: None,
        post_srq_recv: Some(post_srq_recv),
        _compat_create_qp: None,
        _compat_query_qp: None,
        _compat_modify_qp: None,
        _compat_destroy_qp: None,
        post_send: Some(post_send),
        post_recv: Some(post_recv),
        _compat_create_ah: None,
        _compat_destroy_ah: None,
        _compat_attach_mcast: None,
        _compat_detach_mcast: None,
        _compat_async_event: None,
    }
}

fn ring_err(e: RingError) -> Errno {
    match e {
        RingError::Full => Errno::ENOMEM,
        _ => Errno::EIO,
    }
}

/// Writes `wqe` into the next SQ slot through `producer` (published later).
fn stage_send(slot: &mut [u8], producer: &mut Producer<'_>, wqe: &SendWqeRepr<'_>) -> VResult<()> {
    slot.fill(0);
    wqe.emit(slot).map_err(|_| Errno::EINVAL)?;
    producer.stage(slot).map_err(ring_err)
}

/// Stages and publishes WQEs already laid out as slots (the `ibv_wr_*` batch), then
/// rings the doorbell if the engine sleeps.
pub fn publish_batch(qp: &Qp, sq: &mut SendQueue) -> VResult<()> {
    let view = RingView::new(qp.ring.words(), sq.layout).map_err(|_| Errno::EIO)?;
    let mut producer = Producer::with_index(view, sq.head);
    let size = sq.layout.slot_size as usize;
    let mut result = Ok(());
    for slot in sq.batch.chunks_exact(size) {
        if let Err(e) = producer.stage(slot) {
            result = Err(ring_err(e));
            break;
        }
    }
    sq.batch.clear();
    producer.publish();
    sq.head = producer.index();
    Context::from_ibv(qp.qpx.qp_base.context)?.ring_doorbell();
    result
}

/// Lays `wqe` out as one slot at the end of the `ibv_wr_*` batch.
pub fn queue_send(sq: &mut SendQueue, wqe: &SendWqeRepr<'_>) -> VResult<()> {
    let size = sq.layout.slot_size as usize;
    let at = sq.batch.len();
    sq.batch.resize(at + size, 0);
    wqe.emit(&mut sq.batch[at..]).map_err(|_| {
        sq.batch.truncate(at);
        Errno::EINVAL
    })
}

unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    let mut failed = core::ptr::null_mut();
    let rc = ffi::errno(|| {
        let q = qp_of(qp)?;
        refuse_in_reset(q)?;
        let mut guard = q.sq.lock().unwrap_or_else(|p| p.into_inner());
        let sq = &mut *guard;
        let view = RingView::new(q.ring.words(), sq.layout).map_err(|_| Errno::EIO)?;
        let mut producer = Producer::with_index(view, sq.head);
        let mut inline = std::mem::take(&mut sq.inline);
        let mut sges = std::mem::take(&mut sq.sges);
        let mut cur = wr;
        let mut result = Ok(());
        while !cur.is_null() {
            // SAFETY: the application's WR list: each `next` is NULL or a valid WR.
            let w = unsafe { &*cur };
            let staged = build_send(q, w, &mut inline, &mut sges)
                .and_then(|repr| stage_send(&mut sq.slot, &mut producer, &repr));
            if let Err(e) = staged {
                failed = cur;
                result = Err(e);
                break;
            }
            cur = w.next;
        }
        producer.publish();
        sq.head = producer.index();
        sq.inline = inline;
        sq.sges = sges;
        Context::from_ibv(q.qpx.qp_base.context)?.ring_doorbell();
        result
    });
    if rc != 0 && !bad_wr.is_null() {
        // SAFETY: bad_wr is a valid out-pointer by the API contract.
        unsafe { *bad_wr = if failed.is_null() { wr } else { failed } };
    }
    rc
}

/// Translates one `ibv_send_wr` into a WQE (checked against the QP's capabilities).
fn build_send<'a>(
    q: &Qp,
    w: &ibv_send_wr,
    inline: &'a mut Vec<u8>,
    sges: &'a mut Vec<Sge>,
) -> VResult<SendWqeRepr<'a>> {
    let num_sge = usize::try_from(w.num_sge).map_err(|_| Errno::EINVAL)?;
    if num_sge > q.cap.max_send_sge as usize {
        return Err(Errno::EINVAL);
    }
    let list: &[ibv_sge] = if num_sge == 0 || w.sg_list.is_null() {
        &[]
    } else {
        // SAFETY: the application promises num_sge valid SGEs at sg_list.
        unsafe { core::slice::from_raw_parts(w.sg_list, num_sge) }
    };
    let data = if w.send_flags & IBV_SEND_INLINE != 0 {
        inline.clear();
        for s in list {
            if inline.len() + s.length as usize > q.cap.max_inline_data as usize {
                return Err(Errno::EINVAL);
            }
            // SAFETY: inline data is read from the application's buffer at post time, as
            // a NIC driver copies it into the WQE.
            let bytes =
                unsafe { core::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
            inline.extend_from_slice(bytes);
        }
        SendData::Inline(inline)
    } else {
        sges.clear();
        sges.extend(list.iter().map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        }));
        SendData::Sges(SgeList::Slice(sges))
    };
    let mut repr = SendWqeRepr {
        wr_id: w.wr_id,
        opcode: u8::try_from(w.opcode).map_err(|_| Errno::EINVAL)?,
        send_flags: w.send_flags,
        imm_data: w.imm_data,
        remote_addr: 0,
        rkey: 0,
        remote_qpn: 0,
        compare_add: 0,
        swap: 0,
        ah: 0,
        remote_qkey: 0,
        data,
    };
    if q.qpx.qp_base.qp_type == IBV_QPT_UD {
        // SAFETY: `ud` is the active union member on UD QPs.
        let ud = unsafe { w.wr.ud };
        // SAFETY: an AH this shim returned.
        let ah: &Ah = unsafe { obj(ud.ah)? };
        repr.ah = ah.handle.0;
        repr.remote_qpn = ud.remote_qpn;
        repr.remote_qkey = ud.remote_qkey;
    } else {
        if q.qpx.qp_base.qp_type == IBV_QPT_XRC_SEND {
            // The remote XRC SRQ travels in the slot's remote_qpn (wire::client::slot).
            repr.remote_qpn = w.qp_type;
        }
        match w.opcode {
            IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
                // SAFETY: `atomic` is the active member for atomic opcodes.
                let a = unsafe { w.wr.atomic };
                repr.remote_addr = a.remote_addr;
                repr.rkey = a.rkey;
                repr.compare_add = a.compare_add;
                repr.swap = a.swap;
            }
            IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_RDMA_READ => {
                // SAFETY: `rdma` is the active member for RDMA opcodes.
                let r = unsafe { w.wr.rdma };
                repr.remote_addr = r.remote_addr;
                repr.rkey = r.rkey;
            }
            IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_SEND_WITH_INV | IBV_WR_LOCAL_INV => {}
            IBV_WR_BIND_MW => {
                // SAFETY: `bind_mw` is the active member for IBV_WR_BIND_MW.
                let b = unsafe { w.bind_mw.bind_mw };
                bind_mw_fields(&mut repr, b.mw, b.rkey, &b.bind_info)?;
            }
            _ => return Err(Errno::EINVAL),
        }
    }
    Ok(repr)
}

/// Fills a WQE's reused fields for a type 2 bind (contracts §3, "Bind MW reuses").
fn bind_mw_fields(
    repr: &mut SendWqeRepr<'_>,
    mw: *mut ibv_mw,
    new_rkey: u32,
    info: &ibv_mw_bind_info,
) -> VResult<()> {
    // SAFETY: the application names an MW this shim allocated.
    let mw: &Mw = unsafe { obj(mw)? };
    let lkey = if info.mr.is_null() {
        0
    } else {
        // SAFETY: an MR this shim registered.
        unsafe { (*info.mr).lkey }
    };
    repr.opcode = wire::client::verbs::wr_opcode::BIND_MW;
    repr.remote_addr = info.addr;
    repr.compare_add = info.length;
    repr.rkey = mw.mw.rkey;
    repr.swap = u64::from(lkey);
    repr.imm_data = new_rkey;
    repr.remote_qpn = info.mw_access_flags;
    repr.data = SendData::Sges(SgeList::Slice(&[]));
    Ok(())
}

/// `ops.bind_mw` (rdma-core's inline `ibv_bind_mw`, type 1 windows): posts a bind WQE
/// with a new rkey (the low byte, the key, advances as rdma-core's providers do) and
/// updates `mw->rkey` to it.
unsafe extern "C" fn bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, bind: *mut ibv_mw_bind) -> c_int {
    ffi::errno(|| {
        let q = qp_of(qp)?;
        let b = ffi::nonnull(bind)?;
        // SAFETY: an MW this shim allocated.
        let m: &Mw = unsafe { obj(mw)? };
        let old = m.mw.rkey;
        let new_rkey = (old & !0xff) | (old.wrapping_add(1) & 0xff);
        let mut repr = SendWqeRepr {
            wr_id: b.wr_id,
            opcode: 0,
            send_flags: b.send_flags,
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
            remote_qpn: 0,
            compare_add: 0,
            swap: 0,
            ah: 0,
            remote_qkey: 0,
            data: SendData::Sges(SgeList::Slice(&[])),
        };
        bind_mw_fields(&mut repr, mw, new_rkey, &b.bind_info)?;
        let mut guard = q.sq.lock().unwrap_or_else(|p| p.into_inner());
        let sq = &mut *guard;
        let view = RingView::new(q.ring.words(), sq.layout).map_err(|_| Errno::EIO)?;
        let mut producer = Producer::with_index(view, sq.head);
        stage_send(&mut sq.slot, &mut producer, &repr)?;
        producer.publish();
        sq.head = producer.index();
        drop(guard);
        // SAFETY: the application-visible rkey of the window, as providers update it.
        unsafe { (*mw).rkey = new_rkey };
        Context::from_ibv(q.qpx.qp_base.context)?.ring_doorbell();
        Ok(())
    })
}

fn post_recv_ring(
    q_ring: &Mapping,
    rq: &mut RecvQueue,
    max_sge: u32,
    wr: *mut ibv_recv_wr,
    failed: &mut *mut ibv_recv_wr,
) -> VResult<()> {
    let view = RingView::new(q_ring.words(), rq.layout).map_err(|_| Errno::EIO)?;
    let mut producer = Producer::with_index(view, rq.head);
    let mut cur = wr;
    let mut result = Ok(());
    while !cur.is_null() {
        // SAFETY: the application's WR list.
        let w = unsafe { &*cur };
        let r = (|| {
            let n = usize::try_from(w.num_sge).map_err(|_| Errno::EINVAL)?;
            if n > max_sge as usize {
                return Err(Errno::EINVAL);
            }
            let list: &[ibv_sge] = if n == 0 || w.sg_list.is_null() {
                &[]
            } else {
                // SAFETY: num_sge valid SGEs at sg_list.
                unsafe { core::slice::from_raw_parts(w.sg_list, n) }
            };
            rq.sges.clear();
            rq.sges.extend(list.iter().map(|s| Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            }));
            // The daemon releases a receive's slot when the receive completes
            // (`wire::client::ring`): this is what is outstanding.
            if producer.index().wrapping_sub(view.consumer_index()) >= u64::from(rq.max_wr) {
                return Err(Errno::ENOMEM);
            }
            rq.slot.fill(0);
            RecvWqeRepr {
                wr_id: w.wr_id,
                sg_list: SgeList::Slice(&rq.sges),
            }
            .emit(&mut rq.slot)
            .map_err(|_| Errno::EINVAL)?;
            producer.stage(&rq.slot).map_err(ring_err)
        })();
        if let Err(e) = r {
            *failed = cur;
            result = Err(e);
            break;
        }
        cur = w.next;
    }
    producer.publish();
    rq.head = producer.index();
    result
}

unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let mut failed = core::ptr::null_mut();
    let rc = ffi::errno(|| {
        let q = qp_of(qp)?;
        refuse_in_reset(q)?;
        let rq = q.rq.as_ref().ok_or(Errno::EINVAL)?;
        let mut rq = rq.lock().unwrap_or_else(|p| p.into_inner());
        let r = post_recv_ring(&q.ring, &mut rq, q.cap.max_recv_sge, wr, &mut failed);
        Context::from_ibv(q.qpx.qp_base.context)?.ring_doorbell();
        r
    });
    if rc != 0 && !bad_wr.is_null() {
        // SAFETY: valid out-pointer by the API contract.
        unsafe { *bad_wr = if failed.is_null() { wr } else { failed } };
    }
    rc
}

unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let mut failed = core::ptr::null_mut();
    let rc = ffi::errno(|| {
        let s = srq_of(srq)?;
        let mut rq = s.rq.lock().unwrap_or_else(|p| p.into_inner());
        let r = post_recv_ring(&s.ring, &mut rq, s.max_sge, wr, &mut failed);
        Context::from_ibv(s.srq.context)?.ring_doorbell();
        r
    });
    if rc != 0 && !bad_wr.is_null() {
        // SAFETY: valid out-pointer by the API contract.
        unsafe { *bad_wr = if failed.is_null() { wr } else { failed } };
    }
    rc
}

unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    ffi::count(|| {
        let c = cq_of(cq)?;
        if num_entries <= 0 {
            return Ok(0);
        }
        if wc.is_null() {
            return Err(Errno::EINVAL);
        }
        let mut guard = c.poll.lock().unwrap_or_else(|p| p.into_inner());
        let poll = &mut *guard;
        let view = RingView::new(poll.ring.words(), poll.layout).map_err(|_| Errno::EIO)?;
        let mut consumer = Consumer::with_index(view, poll.tail);
        let mut buf = [0u8; 64];
        let mut n = 0;
        while n < num_entries {
            let slot = &mut buf[..];
            if !consumer.pop(slot).map_err(|_| Errno::EIO)? {
                break;
            }
            let e = CqeRepr::parse(&wire::client::slot::Cqe::new_unchecked(&buf[..]))
                .map_err(|_| Errno::EIO)?;
            // SAFETY: the caller provides num_entries ibv_wc slots at wc.
            let out = unsafe { &mut *wc.add(n as usize) };
            *out = ibv_wc {
                wr_id: e.wr_id,
                status: e.status as c_int,
                opcode: e.opcode as c_int,
                vendor_err: e.vendor_err,
                byte_len: e.byte_len,
                imm_data: e.imm_data,
                qp_num: e.qp_num,
                src_qp: e.src_qp,
                wc_flags: e.wc_flags,
                pkey_index: e.pkey_index,
                slid: e.slid,
                sl: e.sl,
                dlid_path_bits: e.dlid_path_bits,
            };
            n += 1;
        }
        poll.tail = consumer.index();
        if n == 0 {
            crate::backoff::empty_poll(c, &mut poll.empty);
        } else {
            poll.empty = 0;
        }
        Ok(n)
    })
}

unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    ffi::errno(|| {
        let c = cq_of(cq)?;
        let poll = c.poll.lock().unwrap_or_else(|p| p.into_inner());
        let view = RingView::new(poll.ring.words(), poll.layout).map_err(|_| Errno::EIO)?;
        view.set_arm(if solicited_only != 0 {
            wire::client::ring::ARM_SOLICITED
        } else {
            wire::client::ring::ARM_NEXT
        });
        // The other half of the daemon's fence in `deliver_cqe`: the arm is visible
        // before the program's next poll reads the ring.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    })
}
