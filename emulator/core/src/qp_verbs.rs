//! QP verbs: create, modify (through the transition table), query, destroy, post, and
//! the output pollers.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use wire::roce::{Msn, Qpn};

use crate::attr::*;
use crate::completer::Completer;
use crate::mcast::Groups;
use crate::memory::Memory;
use crate::mw::dealloc_mw;
use crate::objects::Objects;
use crate::path::{check_ah, path_of};
use crate::qp::*;
use crate::state;
use crate::types::*;

/// The access flags a QP may be granted: local write, the remote rights, MW bind, zero
/// based, and both FLUSH placement types (rxe takes them all on a QP).
const QP_ACCESS: u32 = 0x3f | AccessFlags::FLUSH_GLOBAL.0 | AccessFlags::FLUSH_PERSISTENT.0;

/// What the QP verbs touch: the QPs and objects, the limits and GIDs of the
/// configuration, the next QPN to hand out and the multicast groups (a QP attached to one
/// is not destroyed).
#[derive(Debug)]
pub(crate) struct VerbParts<'a> {
    pub cfg: &'a DeviceConfig,
    pub o: &'a mut Objects,
    pub qps: &'a mut U32Map<Qp>,
    pub next_qpn: &'a mut u32,
    pub mcast: &'a mut Groups,
}

impl VerbParts<'_> {
    fn completer(&mut self) -> Completer<'_> {
        Completer {
            o: self.o,
            qps: self.qps,
        }
    }

    /// `ibv_create_qp`: returns the QPN and the actual capacities.
    pub(crate) fn create_qp(
        &mut self,
        owner: ClientId,
        init: &QpInitAttr,
    ) -> Result<(Qpn, QpCap), Errno> {
        let l = self.cfg.limits;
        let c = init.cap;
        if c.max_send_wr > l.max_qp_wr
            || c.max_recv_wr > l.max_qp_wr
            || c.max_send_sge > l.max_sge
            || c.max_recv_sge > l.max_sge
            || c.max_inline_data > l.max_inline_data
        {
            return Err(Errno::EINVAL);
        }
        // An XRC target has no PD, CQs or SRQ of its own (xrc.rs).
        let tgt = init.qp_type == QpType::XrcRecv;
        if !tgt
            && (!self.o.pds.contains_key(&init.pd.0)
                || !self.o.cqs.contains_key(&init.send_cq.0)
                || !self.o.cqs.contains_key(&init.recv_cq.0)
                || init.srq.is_some_and(|s| !self.o.srqs.contains_key(&s.0)))
        {
            return Err(Errno::EINVAL);
        }
        if self.qps.len() >= l.max_qp as usize {
            return Err(Errno::ENOMEM);
        }
        let qpn = loop {
            *self.next_qpn = (*self.next_qpn + 1) & Qpn::MAX;
            if *self.next_qpn >= 16 && !self.qps.contains_key(&*self.next_qpn) {
                break Qpn(*self.next_qpn);
            }
        };
        if !tgt {
            self.o.pd_ref(init.pd, 1)?;
            for cq in [init.send_cq, init.recv_cq] {
                if let Some(c) = self.o.cqs.get_mut(&cq.0) {
                    c.refs += 1;
                }
            }
            if let Some(s) = init.srq.and_then(|s| self.o.srqs.get_mut(&s.0)) {
                s.refs += 1;
            }
        }
        let cap = QpCap {
            // rxe sizes a send WQE for max(max_send_sge SGEs of 16 octets, the inline
            // data asked for) and reports all of it as inline space: rdma_xclient asks
            // for 0 and then posts 16 octets inline.
            max_inline_data: c
                .max_inline_data
                .max(c.max_send_sge.saturating_mul(16))
                .min(l.max_inline_data),
            max_recv_wr: if init.srq.is_some() { 0 } else { c.max_recv_wr },
            max_recv_sge: if init.srq.is_some() {
                0
            } else {
                c.max_recv_sge
            },
            ..c
        };
        let init = QpInitAttr { cap, ..*init };
        self.qps.insert(
            qpn.0,
            Qp {
                qpn,
                owner,
                qp_type: init.qp_type,
                init,
                xrcd: None,
                state: QpState::Reset,
                attr: QpAttr {
                    cap,
                    ..QpAttr::default()
                },
                sq: VecDeque::new(),
                rq: VecDeque::new(),
                conn: None,
                counters: Counters::default(),
                scheduled: false,
                last_cnp: None,
                rp: None,
                tx_meter: Default::default(),
                posted: 0,
                ahead: Default::default(),
            },
        );
        Ok((qpn, cap))
    }

    /// `ibv_destroy_qp`: outstanding WRs are discarded without completions.
    pub(crate) fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), Errno> {
        if !self.qps.contains_key(&qpn.0) {
            return Err(Errno::EINVAL);
        }
        // IBA o10-2.2.3, and the kernel's uverbs: EBUSY while attached to a group.
        if self.mcast.is_attached(qpn) {
            return Err(Errno::EBUSY);
        }
        let qp = self.qps.remove(&qpn.0).ok_or(Errno::EINVAL)?;
        self.o.timers.cancel_qp(qpn.0);
        if let Some(d) = qp.xrcd.and_then(|x| self.o.xrcds.get_mut(&x.0)) {
            // An XRC target's PD, CQ and SRQ are the last request's, unreferenced.
            d.refs = d.refs.saturating_sub(1);
        } else {
            let _ = self.o.pd_ref(qp.init.pd, -1);
            for cq in [qp.init.send_cq, qp.init.recv_cq] {
                if let Some(c) = self.o.cqs.get_mut(&cq.0) {
                    c.refs = c.refs.saturating_sub(1);
                }
            }
            if let Some(s) = qp.init.srq.and_then(|s| self.o.srqs.get_mut(&s.0)) {
                s.refs = s.refs.saturating_sub(1);
            }
        }
        // Windows bound through this QP lose their binding.
        for r in self.o.keys.by_index.values_mut() {
            if r.bound_qp == Some(qpn.0) {
                r.valid = false;
            }
        }
        Ok(())
    }

    /// `ibv_modify_qp`.
    pub(crate) fn modify_qp(
        &mut self,
        now: Instant,
        qpn: Qpn,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), Errno> {
        let _ = now;
        let qp = self.qps.get(&qpn.0).ok_or(Errno::EINVAL)?;
        let given_cur = mask
            .contains(QpAttrMask::CUR_STATE)
            .then_some(attr.cur_qp_state);
        let to_state = mask.contains(QpAttrMask::STATE).then_some(attr.qp_state);
        let to = state::check(qp.qp_type, qp.state, given_cur, to_state, mask)?;
        self.check_values(qp.qp_type, attr, mask)?;
        let from = qp.state;
        // Validate the path before changing anything.
        let path = if mask.contains(QpAttrMask::AV) {
            Some(path_of(self.cfg, qpn, &attr.ah_attr, attr.dest_qp_num)?)
        } else {
            None
        };
        let active_mtu = self.cfg.active_mtu.bytes();
        let qp = self.qps.get_mut(&qpn.0).ok_or(Errno::EINVAL)?;
        copy_masked(&mut qp.attr, attr, mask);
        match to {
            QpState::Reset => {
                qp.conn = None;
                qp.sq.clear();
                qp.rq.clear();
                qp.attr = QpAttr {
                    cap: qp.init.cap,
                    ..QpAttr::default()
                };
                qp.state = QpState::Reset;
                qp.rp = None;
                qp.tx_meter = Default::default();
                self.o.timers.cancel_qp(qpn.0);
                return Ok(());
            }
            QpState::Err => {
                self.completer().enter_error(qpn);
                return Ok(());
            }
            _ => {}
        }
        if from == QpState::Init && to == QpState::Rtr {
            let mtu = match qp.qp_type {
                QpType::Ud => active_mtu,
                _ => Mtu::from_raw(qp.attr.path_mtu)
                    .map_or(active_mtu, |m| m.bytes().min(active_mtu)),
            };
            qp.conn = Some(Box::new(Conn {
                path,
                mtu,
                dest_qpn: qp.attr.dest_qp_num,
                resp: Responder {
                    epsn: qp.attr.rq_psn,
                    msn: Msn(0),
                    nak_sent: false,
                    cur: None,
                    resources: VecDeque::new(),
                    out: VecDeque::new(),
                    comm_est: false,
                    fatal: false,
                    ahead: Default::default(),
                },
                req: None,
            }));
        } else if let (Some(c), Some(p)) = (qp.conn.as_mut(), path) {
            c.path = Some(p);
        }
        let ack_timeout = (qp.attr.timeout != 0)
            .then(|| Duration::from_nanos(4096u64 << qp.attr.timeout.min(31)));
        if let Some(c) = qp.conn.as_mut() {
            if from == QpState::Rtr && to == QpState::Rts {
                c.req = Some(Requester {
                    next_psn: qp.attr.sq_psn,
                    una: qp.attr.sq_psn,
                    cursor: (0, 0),
                    retry_left: qp.attr.retry_cnt,
                    rnr_left: qp.attr.rnr_retry,
                    rnr_waiting: false,
                    gap_retried_at: None,
                    read_held: ReadHeld::default(),
                    retried_at: None,
                    ack_timeout,
                });
            } else if let Some(r) = c.req.as_mut() {
                r.ack_timeout = ack_timeout;
                if mask.contains(QpAttrMask::RETRY_CNT) {
                    r.retry_left = qp.attr.retry_cnt;
                }
                if mask.contains(QpAttrMask::RNR_RETRY) {
                    r.rnr_left = qp.attr.rnr_retry;
                }
            }
        }
        qp.state = to;
        if to == QpState::Sqd
            && qp.attr.en_sqd_async_notify
            && qp.sq.iter().all(|w| w.first_psn.is_none())
        {
            self.o
                .events
                .push_back((qp.owner, AsyncEvent::SqDrained(qpn)));
        }
        self.o.schedule(qp);
        Ok(())
    }

    fn check_values(&self, t: QpType, a: &QpAttr, mask: QpAttrMask) -> Result<(), Errno> {
        let l = &self.cfg.limits;
        let bad = (mask.contains(QpAttrMask::PORT) && a.port_num != 1)
            || (mask.contains(QpAttrMask::PKEY_INDEX) && a.pkey_index != 0)
            || (mask.contains(QpAttrMask::PATH_MTU) && Mtu::from_raw(a.path_mtu).is_none())
            || (mask.contains(QpAttrMask::TIMEOUT) && a.timeout > 31)
            || (mask.contains(QpAttrMask::RETRY_CNT) && a.retry_cnt > 7)
            || (mask.contains(QpAttrMask::RNR_RETRY) && a.rnr_retry > 7)
            || (mask.contains(QpAttrMask::MIN_RNR_TIMER) && a.min_rnr_timer > 31)
            || (mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC)
                && u32::from(a.max_rd_atomic) > l.max_qp_init_rd_atom)
            || (mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC)
                && u32::from(a.max_dest_rd_atomic) > l.max_qp_rd_atom)
            || (mask.contains(QpAttrMask::DEST_QPN) && a.dest_qp_num.0 > Qpn::MAX)
            // ON_DEMAND means nothing on a QP; rxe and mlx5 ignore it (pyverbs' ODP
            // tests grant it with the remote rights).
            || (mask.contains(QpAttrMask::ACCESS_FLAGS)
                && a.qp_access_flags.0 & !(QP_ACCESS | AccessFlags::ON_DEMAND.0) != 0)
            || (mask.contains(QpAttrMask::AV)
                && t != QpType::Ud
                && check_ah(self.cfg, &a.ah_attr).is_err());
        if bad {
            Err(Errno::EINVAL)
        } else {
            Ok(())
        }
    }

    /// `ibv_post_send` (one WR). Inline data not already copied (`INLINE` set, no
    /// `inline_data`) is gathered from `mem` now, as `ibv_post_send` does.
    pub(crate) fn post_send(
        &mut self,
        now: Instant,
        qpn: Qpn,
        wr: SendWr,
        mem: &mut dyn Memory,
    ) -> Result<(), Errno> {
        let _ = now;
        let qp = self.qps.get_mut(&qpn.0).ok_or(Errno::EINVAL)?;
        if enqueue_send(self.cfg, self.o, qp, wr, mem)? == Queued::Flush {
            self.completer().flush(qpn);
        }
        Ok(())
    }

    /// `ibv_post_recv` (one WR).
    pub(crate) fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) -> Result<(), Errno> {
        let qp = self.qps.get_mut(&qpn.0).ok_or(Errno::EINVAL)?;
        if qp.init.srq.is_some()
            || qp.state == QpState::Reset
            || matches!(qp.qp_type, QpType::XrcSend | QpType::XrcRecv)
        {
            return Err(Errno::EINVAL);
        }
        if wr.sg_list.len() > qp.init.cap.max_recv_sge as usize {
            return Err(Errno::EINVAL);
        }
        if qp.rq.len() >= qp.init.cap.max_recv_wr as usize {
            return Err(Errno::ENOMEM);
        }
        qp.rq.push_back(wr);
        if qp.state == QpState::Err {
            self.completer().flush(qpn);
        }
        Ok(())
    }

    /// A client died: its QPs are destroyed (no completion of theirs reaches anyone),
    /// its objects freed, its queued completions and events dropped.
    pub(crate) fn release_client(&mut self, now: Instant, owner: ClientId) {
        let _ = now;
        let qpns: Vec<u32> = self
            .qps
            .values()
            .filter(|q| q.owner == owner)
            .map(|q| q.qpn.0)
            .collect();
        for q in qpns {
            // A departed client's attachments go with it (uverbs detaches them).
            self.mcast.detach_all(Qpn(q));
            let _ = self.destroy_qp(Qpn(q));
        }
        let mws: Vec<u32> = self
            .o
            .mws
            .iter()
            .filter(|(_, m)| m.owner == owner)
            .map(|(h, _)| *h)
            .collect();
        for h in mws {
            let _ = dealloc_mw(self.o, MwHandle(h));
        }
        self.o.keys.by_index.retain(|_, r| r.owner != owner);
        self.o.ahs.retain(|_, a| a.owner != owner);
        let srqs: Vec<u32> = self
            .o
            .srqs
            .iter()
            .filter(|(_, s)| s.owner == owner)
            .map(|(h, _)| *h)
            .collect();
        for h in srqs {
            if let Some(s) = self.o.srqs.remove(&h) {
                crate::srq::release(self.o, &s);
            }
        }
        crate::xrc::release_client(self.o, owner);
        let cqs: Vec<u32> = self
            .o
            .cqs
            .iter()
            .filter(|(_, c)| c.owner == owner)
            .map(|(h, _)| *h)
            .collect();
        for h in &cqs {
            self.o.cqs.remove(h);
        }
        self.o.completions.retain(|(c, _)| !cqs.contains(&c.0));
        self.o.pds.retain(|_, p| p.owner != owner);
        self.o.events.retain(|(c, _)| *c != owner);
    }
}

/// Copies the fields `mask` names from `src` into `dst`.
fn copy_masked(dst: &mut QpAttr, src: &QpAttr, mask: QpAttrMask) {
    use QpAttrMask as M;
    let has = |m: M| mask.contains(m);
    if has(M::ACCESS_FLAGS) {
        dst.qp_access_flags = src.qp_access_flags;
    }
    if has(M::PKEY_INDEX) {
        dst.pkey_index = src.pkey_index;
    }
    if has(M::PORT) {
        dst.port_num = src.port_num;
    }
    if has(M::QKEY) {
        dst.qkey = src.qkey;
    }
    if has(M::AV) {
        dst.ah_attr = src.ah_attr;
    }
    if has(M::PATH_MTU) {
        dst.path_mtu = src.path_mtu;
    }
    if has(M::TIMEOUT) {
        dst.timeout = src.timeout;
    }
    if has(M::RETRY_CNT) {
        dst.retry_cnt = src.retry_cnt;
    }
    if has(M::RNR_RETRY) {
        dst.rnr_retry = src.rnr_retry;
    }
    if has(M::RQ_PSN) {
        dst.rq_psn = src.rq_psn;
    }
    if has(M::MAX_QP_RD_ATOMIC) {
        dst.max_rd_atomic = src.max_rd_atomic;
    }
    if has(M::ALT_PATH) {
        dst.alt_ah_attr = src.alt_ah_attr;
        dst.alt_pkey_index = src.alt_pkey_index;
        dst.alt_port_num = src.alt_port_num;
        dst.alt_timeout = src.alt_timeout;
    }
    if has(M::MIN_RNR_TIMER) {
        dst.min_rnr_timer = src.min_rnr_timer;
    }
    if has(M::SQ_PSN) {
        dst.sq_psn = src.sq_psn;
    }
    if has(M::MAX_DEST_RD_ATOMIC) {
        dst.max_dest_rd_atomic = src.max_dest_rd_atomic;
    }
    if has(M::PATH_MIG_STATE) {
        dst.path_mig_state = src.path_mig_state;
    }
    if has(M::DEST_QPN) {
        dst.dest_qp_num = src.dest_qp_num;
    }
    if has(M::EN_SQD_ASYNC_NOTIFY) {
        dst.en_sqd_async_notify = src.en_sqd_async_notify;
    }
    if has(M::RATE_LIMIT) {
        dst.rate_limit = src.rate_limit;
    }
}

/// What queuing a send WR left for the caller to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queued {
    /// The WR waits on the send queue; the QP is scheduled if it has work.
    Scheduled,
    /// The QP is in an error state: its send queue is to be flushed.
    Flush,
}

/// The body of `ibv_post_send` for one WR on `qp`, which the caller has looked up once:
/// the WR is checked against the QP's state, capacities and type, its inline data
/// gathered from `mem` when not already copied, and it is queued.
pub(crate) fn enqueue_send(
    cfg: &DeviceConfig,
    o: &mut Objects,
    qp: &mut Qp,
    wr: SendWr,
    mem: &mut dyn Memory,
) -> Result<Queued, Errno> {
    let mtu = cfg.active_mtu.bytes();
    let max_inline = cfg.limits.max_inline_data;
    let mut wr = wr;
    match qp.state {
        QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err => {}
        _ => return Err(Errno::EINVAL),
    }
    if qp.sq.len() >= qp.init.cap.max_send_wr as usize {
        return Err(Errno::ENOMEM);
    }
    if wr.sg_list.len() > qp.init.cap.max_send_sge as usize {
        return Err(Errno::EINVAL);
    }
    use WrOpcode::*;
    let allowed = match qp.qp_type {
        QpType::Rc | QpType::XrcSend => true,
        // An XRC target has no send queue.
        QpType::XrcRecv => false,
        // FLUSH and ATOMIC WRITE are RC (and XRC) only (annex A19).
        QpType::Uc => matches!(
            wr.opcode,
            Send | SendWithImm | RdmaWrite | RdmaWriteWithImm | LocalInv | BindMw
        ),
        QpType::Ud => matches!(wr.opcode, Send | SendWithImm),
    };
    if !allowed {
        return Err(Errno::EINVAL);
    }
    if wr.send_flags.contains(SendFlags::INLINE) && wr.inline_data.is_none() {
        let total: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
        if total > u64::from(qp.init.cap.max_inline_data.max(max_inline)) {
            return Err(Errno::EINVAL);
        }
        // Inline data is read with the application's own rights: no lkey check
        // (ibv_post_send(3)), but only from the client's own address space.
        let space = AddrSpace(qp.owner.0);
        let mut data = vec![0u8; total as usize];
        let mut off = 0;
        for s in &wr.sg_list {
            let n = s.length as usize;
            mem.read(space, s.addr, &mut data[off..off + n])
                .map_err(|_| Errno::EINVAL)?;
            off += n;
        }
        wr.inline_data = Some(data);
    }
    let len: u64 = match (&wr.inline_data, wr.opcode) {
        // FLUSH has no payload (oA19-2); its length is the RETH's.
        (_, Flush) => wr.flush.len,
        // ATOMIC WRITE's 8 bytes travel as the packet's payload: they become the WQE's
        // inline data, gathered like any other (alignment is the responder's to check,
        // as on rxe).
        (_, AtomicWrite) => {
            wr.inline_data = Some(wr.atomic.compare_add.to_le_bytes().to_vec());
            8
        }
        (_, AtomicCmpAndSwp | AtomicFetchAndAdd) => {
            let l: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
            if l != 8 || wr.atomic.remote_addr & 7 != 0 {
                return Err(Errno::EINVAL);
            }
            8
        }
        (Some(d), _) => {
            if d.len() as u64 > u64::from(qp.init.cap.max_inline_data.max(max_inline)) {
                return Err(Errno::EINVAL);
            }
            d.len() as u64
        }
        (None, _) => wr.sg_list.iter().map(|s| u64::from(s.length)).sum(),
    };
    if len > 1 << 31 {
        return Err(Errno::EINVAL);
    }
    if qp.qp_type == QpType::Ud && (len > u64::from(mtu) || !o.ahs.contains_key(&wr.ud.ah.0)) {
        return Err(Errno::EINVAL);
    }
    let signaled = qp.init.sq_sig_all || wr.send_flags.contains(SendFlags::SIGNALED);
    qp.sq.push_back(SendWqe {
        wr,
        len: len as u32,
        first_psn: None,
        npkts: 1,
        signaled,
        done: None,
        seq: qp.posted,
    });
    qp.posted += 1;
    if matches!(qp.state, QpState::Err | QpState::Sqe) {
        return Ok(Queued::Flush);
    }
    o.schedule(qp);
    Ok(Queued::Scheduled)
}
