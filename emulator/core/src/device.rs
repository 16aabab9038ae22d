//! The device: object tables and the verbs that create, change and destroy them.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use wire::roce::{Lkey, Psn, Qpn, Rkey};

use crate::attr::*;
use crate::mr::{Keys, Region};
use crate::qp::*;
use crate::timers::Timers;
use crate::types::*;

#[derive(Debug)]
pub(crate) struct Pd {
    pub owner: ClientId,
    pub refs: u32,
}

#[derive(Debug)]
pub(crate) struct Cq {
    pub owner: ClientId,
    pub depth: u32,
    /// Completions handed to `poll_completion`'s queue and not yet taken.
    pub pending: u32,
    pub refs: u32,
    pub overflowed: bool,
}

#[derive(Debug)]
pub(crate) struct Srq {
    pub owner: ClientId,
    pub pd: PdHandle,
    pub attr: SrqAttr,
    pub wqes: VecDeque<RecvWr>,
    pub refs: u32,
}

#[derive(Debug)]
pub(crate) struct Ah {
    pub owner: ClientId,
    pub pd: PdHandle,
    pub attr: AhAttr,
}

#[derive(Debug)]
pub(crate) struct Mw {
    pub owner: ClientId,
    pub pd: PdHandle,
    pub key: u32,
}

/// Everything but the QPs, so a QP and the rest can be borrowed at once.
#[derive(Debug, Default)]
pub(crate) struct Objects {
    pub pds: U32Map<Pd>,
    pub keys: Keys,
    pub cqs: U32Map<Cq>,
    pub srqs: U32Map<Srq>,
    pub ahs: U32Map<Ah>,
    pub mws: U32Map<Mw>,
    pub completions: VecDeque<(CqHandle, WorkCompletion)>,
    pub events: VecDeque<(ClientId, AsyncEvent)>,
    pub counters: Counters,
    pub timers: Timers,
    /// QPs that may have something to transmit, round robin.
    pub sched: VecDeque<u32>,
    /// Request packets in flight over the device's RC QPs, as last counted.
    pub inflight: crate::requester::Inflight,
    pub next_handle: u32,
    pub key_state: u64,
}

impl Objects {
    pub fn handle(&mut self) -> u32 {
        self.next_handle += 1;
        self.next_handle
    }

    /// A fresh key byte (deterministic from the seed, splitmix64).
    pub fn key_byte(&mut self) -> u32 {
        self.key_state = self.key_state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.key_state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) & 0xff) as u32
    }

    /// Queues a completion on `cq`; on overrun raises CQ_ERR once and drops it.
    pub fn push_wc(&mut self, cq: CqHandle, wc: WorkCompletion) {
        let Some(c) = self.cqs.get_mut(&cq.0) else {
            return;
        };
        if c.pending >= c.depth {
            self.counters.cq_overruns += 1;
            if !c.overflowed {
                c.overflowed = true;
                self.events.push_back((c.owner, AsyncEvent::CqErr(cq)));
            }
            return;
        }
        c.pending += 1;
        self.completions.push_back((cq, wc));
    }

    pub fn schedule(&mut self, qp: &mut Qp) {
        if !qp.scheduled && qp.wants_tx() {
            qp.scheduled = true;
            self.sched.push_back(qp.qpn.0);
        }
    }
}

/// One RDMA device (`rxe0`): the sans-IO NIC.
#[derive(Debug)]
pub struct Device {
    pub(crate) cfg: DeviceConfig,
    pub(crate) o: Objects,
    pub(crate) qps: U32Map<Qp>,
    pub(crate) next_qpn: u32,
    pub(crate) mcast: crate::mcast::Groups,
    /// A response forced on the next request of one QP (fault injection), see
    /// [`Device::force_next_response`].
    pub(crate) forced: Option<(u32, ForcedResponse)>,
    /// CNPs waiting to leave: the path of the QP whose traffic was marked, and its peer QP.
    pub(crate) cnp_out: VecDeque<(Path, Qpn)>,
    /// At most one CNP per QP per this interval.
    pub(crate) cnp_interval: Duration,
    /// The DSCP CNPs leave with, whatever the notified QP's traffic class.
    pub(crate) cnp_dscp: u8,
    /// The reaction point's parameters.
    pub(crate) dcqcn: crate::dcqcn::DcqcnParams,
    /// Priorities the link partner paused (802.1Qbb PFC, 802.3 PAUSE).
    pub(crate) pfc: crate::pfc::TxPause,
}

/// The notification point's default CNP interval per QP, as ConnectX's `min_time_between_cnps`.
pub const CNP_INTERVAL: Duration = Duration::from_micros(50);

/// A snapshot of one QP (`Device::qp_statuses`).
#[derive(Debug, Clone)]
pub struct QpStatus {
    /// The QP's number on this device.
    pub qpn: Qpn,
    /// The client (session) that created the QP.
    pub owner: ClientId,
    /// The transport service (RC, UC, UD, ...).
    pub qp_type: QpType,
    /// The QP's current state in the IBA state machine (IBA 10.3.1).
    pub state: QpState,
    /// The connected peer's QP (RC, UC).
    pub dest_qpn: Option<Qpn>,
    /// The peer's address (RC, UC once past RTR).
    pub peer: Option<SocketAddr>,
    /// The PSN the next new packet gets (requester).
    pub next_psn: Option<Psn>,
    /// The oldest unacknowledged PSN (requester; equals `next_psn` when idle).
    pub unacked_psn: Option<Psn>,
    /// The PSN the responder expects next.
    pub expected_psn: Option<Psn>,
    /// Packets sent and not yet acknowledged.
    pub in_flight: u32,
    /// Send WRs not yet completed.
    pub send_queued: usize,
    /// Receive WRs posted and not yet consumed.
    pub recv_posted: usize,
    /// Waiting out an RNR NAK's timer.
    pub rnr_waiting: bool,
    /// The QP's share of the device's protocol counters (retransmissions, NAKs, drops).
    pub counters: Counters,
}

/// A response the responder gives to a request instead of executing it (fault
/// injection: `rdma-emu fault add DEV rnr|nak …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForcedResponse {
    /// An RNR NAK, as with no receive WQE: only for requests that consume one (SEND
    /// First/Only, RDMA WRITE Only with Immediate); the PSN stays, the requester retries.
    Rnr,
    /// A NAK with this code. `PsnSequenceError` makes the requester go back to the
    /// expected PSN; the others are fatal on both sides, as when the responder found the
    /// request at fault (invalid request, access error, operational error).
    Nak(wire::roce::NakCode),
}

impl Device {
    /// A device with no objects.
    pub fn new(cfg: DeviceConfig) -> Self {
        let o = Objects {
            key_state: cfg.seed,
            ..Objects::default()
        };
        Device {
            cfg,
            o,
            qps: U32Map::default(),
            next_qpn: 16,
            mcast: crate::mcast::Groups::default(),
            forced: None,
            cnp_out: VecDeque::new(),
            cnp_interval: CNP_INTERVAL,
            cnp_dscp: crate::attr::CNP_DSCP,
            dcqcn: crate::dcqcn::DcqcnParams::default(),
            pfc: crate::pfc::TxPause::default(),
        }
    }

    /// Sets the DSCP (0..=63) CNPs leave with; ConnectX's default is [`CNP_DSCP`]. Larger
    /// values are cut to six bits.
    ///
    /// [`CNP_DSCP`]: crate::attr::CNP_DSCP
    pub fn set_cnp_dscp(&mut self, dscp: u8) {
        self.cnp_dscp = dscp & 0x3f;
    }

    /// The DSCP CNPs leave with.
    pub fn cnp_dscp(&self) -> u8 {
        self.cnp_dscp
    }

    /// Sets the notification point's minimum time between two CNPs of one QP.
    pub fn set_cnp_interval(&mut self, interval: Duration) {
        self.cnp_interval = interval;
    }

    /// A datagram arrived with Congestion Experienced in its IP header (RoCE v2 Annex
    /// A17.9.3): as notification point, the device answers the sending QP with a CNP, at
    /// most one per local QP per CNP interval. Only connected QPs (RC, UC) are notified;
    /// the caller has already handed the datagram to [`Device::handle_datagram`].
    pub fn congestion_experienced(&mut self, now: Instant, d: &Datagram<'_>) {
        let Some(bth) = d.payload.get(..12) else {
            return;
        };
        if bth[0] == wire::roce::Opcode::CNP.0 {
            return;
        }
        let qpn = u32::from_be_bytes([0, bth[5], bth[6], bth[7]]);
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let Some(conn) = qp.conn.as_deref() else {
            return;
        };
        let Some(path) = conn.path.filter(|_| qp.qp_type != QpType::Ud) else {
            return;
        };
        self.o.counters.np_ecn_marked += 1;
        qp.counters.np_ecn_marked += 1;
        if qp
            .last_cnp
            .is_some_and(|t| now.saturating_duration_since(t) < self.cnp_interval)
        {
            return;
        }
        qp.last_cnp = Some(now);
        self.o.counters.np_cnp_sent += 1;
        qp.counters.np_cnp_sent += 1;
        self.cnp_out.push_back((path, conn.dest_qpn));
    }

    /// Writes the next waiting CNP into `buf`.
    pub(crate) fn transmit_cnp(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        let (path, dest) = self.cnp_out.pop_front()?;
        let body = wire::roce::Body::Cnp;
        let total = body.header_len() + wire::roce::ICRC_LEN;
        buf.clear();
        buf.resize(total, 0);
        let mut header = wire::roce::Header::new(dest, wire::roce::Psn::new(0));
        header.becn = true;
        wire::roce::packet::emit_headers(&header, &body, 0, buf);
        crate::dma::finish_icrc(buf, path);
        self.o.counters.sent_pkts += 1;
        Some(Transmit {
            src: path.src,
            dst: path.dst,
            len: total,
            traffic_class: self.cnp_dscp << 2,
        })
    }

    /// The next in-order RC request that starts a message on `qpn`, if it arrives before
    /// [`Device::clear_forced_response`], gets `response` instead of being executed. For
    /// fault injection: the daemon sets it around one received datagram.
    pub fn force_next_response(&mut self, qpn: Qpn, response: ForcedResponse) {
        self.forced = Some((qpn.0, response));
    }

    /// Forgets a forced response that no request took; whether one was pending.
    pub fn clear_forced_response(&mut self) -> bool {
        self.forced.take().is_some()
    }

    /// Replaces the GID table (the netdev's addresses changed); QPs keep their resolved paths.
    pub fn set_gids(&mut self, gids: Vec<crate::Gid>) {
        self.cfg.gids = gids;
    }

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    /// Device-wide counters.
    pub fn counters(&self) -> &Counters {
        &self.o.counters
    }

    /// A QP's counters.
    pub fn qp_counters(&self, qpn: Qpn) -> Option<&Counters> {
        self.qps.get(&qpn.0).map(|q| &q.counters)
    }

    /// Where every QP stands (for `rdma-emu top` and `rdma-emu res qp`), by number.
    pub fn qp_statuses(&self) -> Vec<QpStatus> {
        let mut out: Vec<QpStatus> = self
            .qps
            .values()
            .map(|q| {
                let conn = q.conn.as_deref();
                let req = conn.and_then(|c| c.req.as_ref());
                QpStatus {
                    qpn: q.qpn,
                    owner: q.owner,
                    qp_type: q.qp_type,
                    state: q.state,
                    dest_qpn: conn.filter(|_| q.qp_type != QpType::Ud).map(|c| c.dest_qpn),
                    peer: conn.and_then(|c| c.path.as_ref()).map(|p| p.dst),
                    next_psn: req.map(|r| r.next_psn),
                    unacked_psn: req.map(|r| r.una),
                    expected_psn: conn
                        .filter(|_| q.qp_type != QpType::Ud)
                        .map(|c| c.resp.epsn),
                    in_flight: req.map_or(0, |r| r.next_psn.distance(r.una).max(0) as u32),
                    send_queued: q.sq.len(),
                    recv_posted: q.rq.len(),
                    rnr_waiting: req.is_some_and(|r| r.rnr_waiting),
                    counters: q.counters,
                }
            })
            .collect();
        out.sort_by_key(|s| s.qpn.0);
        out
    }

    /// Number of armed timers (0 when the device is idle).
    pub fn armed_timers(&self) -> usize {
        self.o.timers.len()
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self, owner: ClientId) -> Result<PdHandle, Errno> {
        if self.o.pds.len() >= self.cfg.limits.max_pd as usize {
            return Err(Errno::ENOMEM);
        }
        let h = self.o.handle();
        self.o.pds.insert(h, Pd { owner, refs: 0 });
        Ok(PdHandle(h))
    }

    /// `ibv_dealloc_pd`: EBUSY while MRs, QPs, AHs, SRQs or MWs use it.
    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), Errno> {
        match self.o.pds.get(&pd.0) {
            None => Err(Errno::EINVAL),
            Some(p) if p.refs > 0 => Err(Errno::EBUSY),
            Some(_) => {
                self.o.pds.remove(&pd.0);
                Ok(())
            }
        }
    }

    pub(crate) fn pd_ref(&mut self, pd: PdHandle, delta: i32) -> Result<ClientId, Errno> {
        let p = self.o.pds.get_mut(&pd.0).ok_or(Errno::EINVAL)?;
        p.refs = p.refs.wrapping_add_signed(delta);
        Ok(p.owner)
    }

    /// `ibv_reg_mr` / `ibv_reg_mr_iova`: `addr` is where the bytes are in `space`, `iova`
    /// the address keys use for them (equal to `addr` for plain `ibv_reg_mr`).
    pub fn reg_mr(
        &mut self,
        pd: PdHandle,
        addr: u64,
        length: u64,
        iova: u64,
        access: AccessFlags,
        space: AddrSpace,
    ) -> Result<MrKeys, Errno> {
        // IBA 10.6.3.1 / ibv_reg_mr(3): remote write or atomic requires local write.
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(Errno::EINVAL);
        }
        if access.0 & !0x3f != 0
            || length > self.cfg.limits.max_mr_size
            || addr.checked_add(length).is_none()
            || iova.checked_add(length).is_none()
        {
            return Err(Errno::EINVAL);
        }
        if self.o.keys.by_index.len() >= self.cfg.limits.max_mr as usize {
            return Err(Errno::ENOMEM);
        }
        let owner = self.pd_ref(pd, 1)?;
        let idx = self.o.keys.alloc_index();
        let key = (idx << 8) | self.o.key_byte();
        let iova = if access.contains(AccessFlags::ZERO_BASED) {
            0
        } else {
            iova
        };
        self.o.keys.by_index.insert(
            idx,
            Region {
                owner,
                pd,
                space,
                host: addr,
                iova,
                length,
                access,
                key,
                window_of: None,
                valid: true,
                mw_type2: false,
                bound_qp: None,
            },
        );
        Ok(MrKeys {
            lkey: Lkey(key),
            rkey: Rkey(key),
        })
    }

    /// [`Device::reg_mr`] with a chosen key (replaying captured traffic, record/replay):
    /// EBUSY when the key's index is taken.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub fn reg_mr_with_key(
        &mut self,
        pd: PdHandle,
        addr: u64,
        length: u64,
        iova: u64,
        access: AccessFlags,
        space: AddrSpace,
        key: u32,
    ) -> Result<MrKeys, Errno> {
        if self.o.keys.by_index.contains_key(&(key >> 8)) || key >> 8 == 0 {
            return Err(Errno::EBUSY);
        }
        let keys = self.reg_mr(pd, addr, length, iova, access, space)?;
        let mut r = self
            .o
            .keys
            .by_index
            .remove(&(keys.lkey.0 >> 8))
            .ok_or(Errno::EINVAL)?;
        r.key = key;
        self.o.keys.by_index.insert(key >> 8, r);
        Ok(MrKeys {
            lkey: Lkey(key),
            rkey: Rkey(key),
        })
    }

    /// Makes the next `create_qp` use `qpn` if it is free (replaying captured traffic).
    #[doc(hidden)]
    pub fn set_next_qpn(&mut self, qpn: Qpn) {
        self.next_qpn = qpn.0.wrapping_sub(1) & Qpn::MAX;
    }

    /// `ibv_dereg_mr`: EBUSY while a window is bound to it.
    pub fn dereg_mr(&mut self, lkey: Lkey) -> Result<(), Errno> {
        let r = self.o.keys.get(lkey.0).ok_or(Errno::EINVAL)?;
        if r.window_of.is_some() {
            return Err(Errno::EINVAL);
        }
        let pd = r.pd;
        if self
            .o
            .keys
            .by_index
            .values()
            .any(|w| w.valid && w.window_of == Some(lkey.0))
        {
            return Err(Errno::EBUSY);
        }
        self.o.keys.by_index.remove(&(lkey.0 >> 8));
        let _ = self.pd_ref(pd, -1);
        Ok(())
    }

    /// `ibv_create_cq`: returns the handle and the actual depth.
    pub fn create_cq(&mut self, owner: ClientId, cqe: u32) -> Result<(CqHandle, u32), Errno> {
        if cqe == 0 || cqe > self.cfg.limits.max_cqe {
            return Err(Errno::EINVAL);
        }
        if self.o.cqs.len() >= self.cfg.limits.max_cq as usize {
            return Err(Errno::ENOMEM);
        }
        let h = self.o.handle();
        self.o.cqs.insert(
            h,
            Cq {
                owner,
                depth: cqe,
                pending: 0,
                refs: 0,
                overflowed: false,
            },
        );
        Ok((CqHandle(h), cqe))
    }

    /// `ibv_destroy_cq`: EBUSY while a QP uses it.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), Errno> {
        match self.o.cqs.get(&cq.0) {
            None => Err(Errno::EINVAL),
            Some(c) if c.refs > 0 => Err(Errno::EBUSY),
            Some(_) => {
                self.o.cqs.remove(&cq.0);
                self.o.completions.retain(|(c, _)| *c != cq);
                Ok(())
            }
        }
    }

    /// `ibv_create_srq`.
    pub fn create_srq(
        &mut self,
        owner: ClientId,
        pd: PdHandle,
        attr: SrqAttr,
    ) -> Result<SrqHandle, Errno> {
        let l = &self.cfg.limits;
        if attr.max_wr == 0 || attr.max_wr > l.max_srq_wr || attr.max_sge > l.max_srq_sge {
            return Err(Errno::EINVAL);
        }
        // rxe_srq_chk_init raises max_sge to RXE_MIN_SRQ_SGE (1): an SRQ asked for with
        // no SGE (TensorPipe does so) takes one-SGE receives.
        let attr = SrqAttr {
            max_sge: attr.max_sge.max(1),
            ..attr
        };
        if self.o.srqs.len() >= l.max_srq as usize {
            return Err(Errno::ENOMEM);
        }
        self.pd_ref(pd, 1)?;
        let h = self.o.handle();
        let attr = SrqAttr {
            srq_limit: 0,
            ..attr
        };
        self.o.srqs.insert(
            h,
            Srq {
                owner,
                pd,
                attr,
                wqes: VecDeque::new(),
                refs: 0,
            },
        );
        Ok(SrqHandle(h))
    }

    /// `ibv_modify_srq`: `LIMIT` arms the limit event, `MAX_WR` resizes.
    pub fn modify_srq(
        &mut self,
        srq: SrqHandle,
        attr: &SrqAttr,
        mask: SrqAttrMask,
    ) -> Result<(), Errno> {
        let max = self.cfg.limits.max_srq_wr;
        let s = self.o.srqs.get_mut(&srq.0).ok_or(Errno::EINVAL)?;
        if mask.0 & !3 != 0 {
            return Err(Errno::EINVAL);
        }
        let new_max = if mask.0 & SrqAttrMask::MAX_WR.0 != 0 {
            attr.max_wr
        } else {
            s.attr.max_wr
        };
        if new_max == 0 || new_max > max || (new_max as usize) < s.wqes.len() {
            return Err(Errno::EINVAL);
        }
        if mask.0 & SrqAttrMask::LIMIT.0 != 0 && attr.srq_limit > new_max {
            return Err(Errno::EINVAL);
        }
        s.attr.max_wr = new_max;
        if mask.0 & SrqAttrMask::LIMIT.0 != 0 {
            s.attr.srq_limit = attr.srq_limit;
        }
        Ok(())
    }

    /// `ibv_query_srq`.
    pub fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr, Errno> {
        self.o.srqs.get(&srq.0).map(|s| s.attr).ok_or(Errno::EINVAL)
    }

    /// `ibv_destroy_srq`: EBUSY while a QP uses it.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), Errno> {
        match self.o.srqs.get(&srq.0) {
            None => Err(Errno::EINVAL),
            Some(s) if s.refs > 0 => Err(Errno::EBUSY),
            Some(s) => {
                let pd = s.pd;
                self.o.srqs.remove(&srq.0);
                let _ = self.pd_ref(pd, -1);
                Ok(())
            }
        }
    }

    /// Receives queued on SRQ `srq` (a QP that takes one owns it from then on, as rxe's
    /// SRQ gives its slot back when a QP takes the WQE). `None` for an unknown SRQ.
    pub fn srq_outstanding(&self, srq: SrqHandle) -> Option<usize> {
        self.o.srqs.get(&srq.0).map(|s| s.wqes.len())
    }

    /// `ibv_post_srq_recv` (one WR).
    pub fn post_srq_recv(&mut self, srq: SrqHandle, wr: RecvWr) -> Result<(), Errno> {
        let s = self.o.srqs.get_mut(&srq.0).ok_or(Errno::EINVAL)?;
        if wr.sg_list.len() > s.attr.max_sge as usize {
            return Err(Errno::EINVAL);
        }
        if s.wqes.len() >= s.attr.max_wr as usize {
            return Err(Errno::ENOMEM);
        }
        s.wqes.push_back(wr);
        Ok(())
    }

    pub(crate) fn check_ah(&self, a: &AhAttr) -> Result<(), Errno> {
        // RoCE has no LIDs: the GRH is mandatory (IBA Annex A17.3).
        if !a.is_global || a.grh.dgid.is_zero() || a.port_num > 1 {
            return Err(Errno::EINVAL);
        }
        match self.cfg.gids.get(usize::from(a.grh.sgid_index)) {
            Some(g) if !g.is_zero() => {}
            _ => return Err(Errno::EINVAL),
        }
        let (s, d) = (
            self.cfg.gids[usize::from(a.grh.sgid_index)].to_ip(),
            a.grh.dgid.to_ip(),
        );
        if s.is_ipv4() != d.is_ipv4() {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    /// `ibv_create_ah`: EINVAL without a GRH (RoCE).
    pub fn create_ah(&mut self, pd: PdHandle, attr: AhAttr) -> Result<AhHandle, Errno> {
        self.check_ah(&attr)?;
        if self.o.ahs.len() >= self.cfg.limits.max_ah as usize {
            return Err(Errno::ENOMEM);
        }
        let owner = self.pd_ref(pd, 1)?;
        let h = self.o.handle();
        self.o.ahs.insert(h, Ah { owner, pd, attr });
        Ok(AhHandle(h))
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, ah: AhHandle) -> Result<(), Errno> {
        let a = self.o.ahs.remove(&ah.0).ok_or(Errno::EINVAL)?;
        let _ = self.pd_ref(a.pd, -1);
        Ok(())
    }
}
