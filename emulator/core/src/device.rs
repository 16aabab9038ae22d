//! The device, on top: it owns its parts (the objects, the QPs, the multicast groups, the
//! link's pauses, the reaction point's parameters, the notification point's CNPs) and
//! offers the verbs, `handle_*` and `poll_*` over them. Each handler below takes the
//! parts it touches as split borrows of these fields (`Completer`, `RequesterParts`,
//! `ResponderParts`, `InputParts`, `VerbParts`), so no lower file names this one.

use std::time::{Duration, Instant};
use wire::roce::{Lkey, Qpn, Rkey};

use crate::attr::*;
use crate::completer::Completer;
use crate::dcqcn::DcqcnParams;
use crate::input::InputParts;
use crate::mcast::Groups;
use crate::memory::Memory;
use crate::mr::{check_registration, Region};
use crate::mw::{alloc_mw, bind_window, dealloc_mw};
use crate::np::NotificationPoint;
use crate::objects::{Ah, Cq, Objects, Pd, XrcSrq};
use crate::pfc::TxPause;
use crate::qp::*;
use crate::qp_verbs::{enqueue_send, Queued, VerbParts};
use crate::reaction;
use crate::requester::RequesterParts;
use crate::responder::ForcedResponse;
use crate::submit::{send_path, SendPath, SendQp, SendRefused};
use crate::timers::TimerKind;
use crate::types::*;
use crate::{srq, xrc};

/// One RDMA device (`rxe0`): the sans-IO NIC.
#[derive(Debug)]
pub struct Device {
    pub(crate) cfg: DeviceConfig,
    pub(crate) o: Objects,
    pub(crate) qps: U32Map<Qp>,
    pub(crate) next_qpn: u32,
    pub(crate) mcast: Groups,
    /// A response forced on the next request of one QP (fault injection), see
    /// [`Device::force_next_response`].
    pub(crate) forced: Option<(u32, ForcedResponse)>,
    /// The notification point's CNPs.
    pub(crate) np: NotificationPoint,
    /// The reaction point's parameters.
    pub(crate) dcqcn: DcqcnParams,
    /// Priorities the link partner paused (802.1Qbb PFC, 802.3 PAUSE).
    pub(crate) pfc: TxPause,
    /// Whether `poll_transmit` leaves the ICRC to the caller ([`Device::defer_icrc`]).
    pub(crate) icrc_deferred: bool,
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
            mcast: Groups::default(),
            forced: None,
            np: NotificationPoint::default(),
            dcqcn: DcqcnParams::default(),
            pfc: TxPause::default(),
            icrc_deferred: false,
        }
    }

    /// With `on`, [`Device::poll_transmit`] leaves each packet's ICRC unwritten: the
    /// caller seals ([`seal_icrc`](crate::seal_icrc)) every packet that leaves or is
    /// recorded, and may hand one it loops back to itself unsealed to
    /// [`Device::handle_unsealed_datagram`] (the local path, where nothing can alter it).
    pub fn defer_icrc(&mut self, on: bool) {
        self.icrc_deferred = on;
    }

    /// Sets the DSCP (0..=63) CNPs leave with; ConnectX's default is [`CNP_DSCP`]. Larger
    /// values are cut to six bits.
    ///
    /// [`CNP_DSCP`]: crate::attr::CNP_DSCP
    pub fn set_cnp_dscp(&mut self, dscp: u8) {
        self.np.dscp = dscp & 0x3f;
    }

    /// The DSCP CNPs leave with.
    pub fn cnp_dscp(&self) -> u8 {
        self.np.dscp
    }

    /// Sets the notification point's minimum time between two CNPs of one QP.
    pub fn set_cnp_interval(&mut self, interval: Duration) {
        self.np.interval = interval;
    }

    /// A datagram arrived with Congestion Experienced in its IP header (RoCE v2 Annex
    /// A17.9.3): as notification point, the device answers the sending QP with a CNP, at
    /// most one per local QP per CNP interval. Only connected QPs (RC, UC) are notified;
    /// the caller has already handed the datagram to [`Device::handle_datagram`].
    pub fn congestion_experienced(&mut self, now: Instant, d: &Datagram<'_>) {
        self.np.marked(now, d, &mut self.qps, &mut self.o.counters);
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
        let mut out: Vec<QpStatus> = self.qps.values().map(Qp::status).collect();
        out.sort_by_key(|s| s.qpn.0);
        out
    }

    /// Number of armed timers (0 when the device is idle).
    pub fn armed_timers(&self) -> usize {
        self.o.timers.len()
    }

    // The parts each handler borrows: split borrows of the fields, so what a handler may
    // touch is written in its type.

    fn completer(&mut self) -> Completer<'_> {
        Completer {
            o: &mut self.o,
            qps: &mut self.qps,
        }
    }

    fn verbs(&mut self) -> VerbParts<'_> {
        VerbParts {
            cfg: &self.cfg,
            o: &mut self.o,
            qps: &mut self.qps,
            next_qpn: &mut self.next_qpn,
            mcast: &mut self.mcast,
        }
    }

    /// Dispatches one received RoCE v2 datagram (BTH through ICRC).
    ///
    /// `d.dst` should carry the local IP the packet arrived on (`IP_PKTINFO`); when it is
    /// unspecified, each local GID of the same family is tried. IPv4-mapped IPv6 socket
    /// addresses count as IPv4. Packets whose ICRC does not verify are dropped and counted.
    pub fn handle_datagram(&mut self, now: Instant, d: &Datagram<'_>, mem: &mut dyn Memory) {
        self.input().handle_datagram(now, d, true, mem)
    }

    /// [`Device::handle_datagram`] for a packet this device's own `poll_transmit` built
    /// under [`Device::defer_icrc`] and its owner looped back without letting it out or
    /// recording it: there is no ICRC to check.
    pub fn handle_unsealed_datagram(
        &mut self,
        now: Instant,
        d: &Datagram<'_>,
        mem: &mut dyn Memory,
    ) {
        self.input().handle_datagram(now, d, false, mem)
    }

    fn input(&mut self) -> InputParts<'_> {
        InputParts {
            cfg: &self.cfg,
            o: &mut self.o,
            qps: &mut self.qps,
            mcast: &self.mcast,
            forced: &mut self.forced,
            dcqcn: &self.dcqcn,
        }
    }

    /// Handles due timers.
    pub fn handle_timeout(&mut self, now: Instant, mem: &mut dyn Memory) {
        let _ = mem;
        self.pfc
            .expire_and_reschedule(now, &mut self.qps, &mut self.o);
        while let Some((qpn, kind)) = self.o.timers.pop_due(now) {
            match kind {
                TimerKind::RnrWait => {
                    let mut c = self.completer();
                    if let Some(r) = c.requester_mut(qpn) {
                        r.rnr_waiting = false;
                    }
                    c.go_back(now, qpn);
                }
                TimerKind::Retransmit => Completer {
                    o: &mut self.o,
                    qps: &mut self.qps,
                }
                .ack_timeout(now, qpn, &self.pfc),
                TimerKind::Window => {
                    if let Some(qp) = self.qps.get_mut(&qpn) {
                        self.o.schedule(qp);
                    }
                }
                TimerKind::DcqcnAlpha | TimerKind::DcqcnRate | TimerKind::Pace => {
                    reaction::timer(self.dcqcn, now, qpn, kind, &mut self.qps, &mut self.o)
                }
            }
        }
    }

    /// Writes the next packet to send into `buf` (BTH through ICRC) and says where it
    /// goes; `None` when nothing is ready. CNPs go first, unless their priority is paused.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        mem: &mut dyn Memory,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let cnp = if self.pfc.cnp_paused(now, self.np.dscp) {
            None
        } else {
            self.np.transmit(buf, &mut self.o.counters)
        };
        let t = cnp.or_else(|| {
            RequesterParts {
                cfg: &self.cfg,
                o: &mut self.o,
                qps: &mut self.qps,
                pfc: &mut self.pfc,
                dcqcn: &self.dcqcn,
            }
            .poll_transmit(now, mem, buf)
        })?;
        if !self.icrc_deferred {
            crate::seal_icrc(&mut buf[..t.len], t.src, t.dst);
        }
        Some(t)
    }

    /// The next completion, with the CQ it belongs to.
    pub fn poll_completion(&mut self) -> Option<(CqHandle, WorkCompletion)> {
        let (cq, wc) = self.o.completions.pop_front()?;
        if let Some(c) = self.o.cqs.get_mut(&cq.0) {
            c.pending = c.pending.saturating_sub(1);
        }
        Some((cq, wc))
    }

    /// The next async event, with the client it belongs to.
    pub fn poll_event(&mut self) -> Option<(ClientId, AsyncEvent)> {
        self.o.events.pop_front()
    }

    /// The earliest timer deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.o.timers.next(), self.pfc.next_end()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// `ibv_create_qp`: returns the QPN and the actual capacities.
    pub fn create_qp(&mut self, owner: ClientId, init: &QpInitAttr) -> Result<(Qpn, QpCap), Errno> {
        self.verbs().create_qp(owner, init)
    }

    /// `ibv_query_qp`: the attributes as last set, and the creation attributes.
    pub fn query_qp(&self, qpn: Qpn) -> Result<(QpAttr, QpInitAttr), Errno> {
        self.qps.get(&qpn.0).map(Qp::query).ok_or(Errno::EINVAL)
    }

    /// `ibv_destroy_qp`: outstanding WRs are discarded without completions.
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), Errno> {
        self.verbs().destroy_qp(qpn)
    }

    /// `ibv_modify_qp`.
    pub fn modify_qp(
        &mut self,
        now: Instant,
        qpn: Qpn,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), Errno> {
        self.verbs().modify_qp(now, qpn, attr, mask)
    }

    /// `ibv_post_send` (one WR). Inline data not already copied (`INLINE` set, no
    /// `inline_data`) is gathered from `mem` now, as `ibv_post_send` does.
    pub fn post_send(
        &mut self,
        now: Instant,
        qpn: Qpn,
        wr: SendWr,
        mem: &mut dyn Memory,
    ) -> Result<(), Errno> {
        self.verbs().post_send(now, qpn, wr, mem)
    }

    /// A send WR the driver read from QP `qpn`'s send queue, taken as
    /// [`crate::submit`] decides: a type 1 window of the QP's client bound at once (its
    /// completion queued on the send CQ when signaled), a UD WR's AH checked, the rest
    /// queued as by [`Device::post_send`].
    pub fn submit_send(
        &mut self,
        now: Instant,
        qpn: Qpn,
        wr: SendWr,
        mem: &mut dyn Memory,
    ) -> Result<(), SendRefused> {
        let qp = self
            .qps
            .get_mut(&qpn.0)
            .ok_or(SendRefused::local_qp_op(Errno::EINVAL))?;
        let facts = SendQp {
            owner: qp.owner,
            pd: qp.init.pd,
            qp_type: qp.qp_type,
        };
        let (cq, signaled) = (
            qp.init.send_cq,
            qp.init.sq_sig_all || wr.send_flags.contains(SendFlags::SIGNALED),
        );
        let ah = (facts.qp_type == QpType::Ud)
            .then(|| self.o.ahs.get(&wr.ud.ah.0).map(|a| (a.owner, a.pd)))
            .flatten();
        match send_path(&wr, facts, &self.o.keys, ah)? {
            SendPath::Queue => {
                let _ = now;
                let queued = enqueue_send(&self.cfg, &mut self.o, qp, wr, mem)
                    .map_err(SendRefused::local_qp_op)?;
                if queued == Queued::Flush {
                    self.completer().flush(qpn);
                }
                Ok(())
            }
            SendPath::BindNow => {
                bind_window(&mut self.o.keys, facts.pd, None, &wr.bind_mw)
                    .map_err(|_| SendRefused::bind())?;
                if signaled {
                    let wc = WorkCompletion {
                        wr_id: wr.wr_id,
                        opcode: WcOpcode::BindMw,
                        qp_num: qpn,
                        ..WorkCompletion::default()
                    };
                    self.o.push_wc(cq, wc);
                }
                Ok(())
            }
        }
    }

    /// Receives posted to QP `qpn`'s own RQ and not yet completed: queued, or the one a
    /// multi-packet Send is being placed into. `None` for an unknown QP.
    pub fn recv_outstanding(&self, qpn: Qpn) -> Option<usize> {
        self.qps.get(&qpn.0).map(Qp::recv_outstanding)
    }

    /// `ibv_post_recv` (one WR).
    pub fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) -> Result<(), Errno> {
        self.verbs().post_recv(qpn, wr)
    }

    /// A client died: its QPs are destroyed (no completion of theirs reaches anyone),
    /// its objects freed, its queued completions and events dropped.
    pub fn release_client(&mut self, now: Instant, owner: ClientId) {
        self.verbs().release_client(now, owner)
    }

    /// `ibv_attach_mcast`: attaches UD QP `qpn` to the multicast group `gid`. `lid` is
    /// ignored on RoCE (IBA Annex A17) except that an attachment is named by both.
    pub fn attach_mcast(&mut self, qpn: Qpn, gid: Gid, lid: u16) -> Result<(), Errno> {
        self.mcast
            .attach(&self.qps, &self.cfg.limits, qpn, gid, lid)
    }

    /// `ibv_detach_mcast`: EINVAL unless `qpn` is attached to `gid` with `lid`.
    pub fn detach_mcast(&mut self, qpn: Qpn, gid: Gid, lid: u16) -> Result<(), Errno> {
        self.mcast.detach(&self.qps, qpn, gid, lid)
    }

    /// The groups at least one QP is attached to: the IP multicast groups the driver
    /// must have joined on the device's interface (a group's address is `Gid::to_ip`).
    pub fn mcast_groups(&self) -> Vec<Gid> {
        self.mcast.groups()
    }

    /// The QPs attached to `gid`, in attach order.
    pub fn mcast_members(&self, gid: Gid) -> Vec<Qpn> {
        self.mcast.members(gid)
    }

    /// `ibv_alloc_mw` (type 1 or 2).
    pub fn alloc_mw(&mut self, pd: PdHandle, mw_type: u32) -> Result<(MwHandle, Rkey), Errno> {
        alloc_mw(&mut self.o, &self.cfg.limits, pd, mw_type)
    }

    /// `ibv_dealloc_mw`.
    pub fn dealloc_mw(&mut self, mw: MwHandle) -> Result<(), Errno> {
        dealloc_mw(&mut self.o, mw)
    }

    /// The link partner asked (802.1Qbb PFC, or 802.3 PAUSE for every priority) that
    /// nothing be sent in `priority` until `until`; an `until` not after `now` (quanta 0)
    /// resumes at once. A new request replaces the running one.
    pub fn pause_priority(&mut self, now: Instant, priority: u8, until: Instant) {
        self.pfc
            .pause(now, priority, until, &mut self.qps, &mut self.o);
    }

    /// When priority `priority`'s pause ends, if it is paused at `now`.
    pub fn paused_until(&self, now: Instant, priority: u8) -> Option<Instant> {
        self.pfc.paused_until(now, priority)
    }

    /// Sets the reaction point's parameters (DCQCN on by default, with
    /// [`DcqcnParams::default`]); refused as [`DcqcnParams::validate`] says. QPs already
    /// slowed down keep their rate and follow the new parameters from their next event;
    /// turned off, every QP sends unpaced again.
    pub fn set_dcqcn(&mut self, params: DcqcnParams) -> Result<(), String> {
        params.validate()?;
        self.dcqcn = params;
        if !params.enabled {
            for (qpn, qp) in self.qps.iter_mut() {
                if qp.rp.take().is_some() {
                    self.o.timers.cancel_dcqcn(*qpn);
                    self.o.schedule(qp);
                }
            }
        }
        Ok(())
    }

    /// The reaction point's parameters.
    pub fn dcqcn(&self) -> &DcqcnParams {
        &self.dcqcn
    }

    /// The rate a QP is paced at (bit/s): `None` while it sends unpaced (no CNP yet, or
    /// recovered).
    pub fn qp_rate(&self, qpn: wire::roce::Qpn) -> Option<u64> {
        self.qps.get(&qpn.0)?.rp.as_ref().map(|rp| rp.rc)
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
        check_registration(addr, length, iova, access, self.cfg.limits.max_mr_size)?;
        if self.o.keys.by_index.len() >= self.cfg.limits.max_mr as usize {
            return Err(Errno::ENOMEM);
        }
        let owner = self.o.pd_ref(pd, 1)?;
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
        let _ = self.o.pd_ref(pd, -1);
        Ok(())
    }

    /// `ibv_advise_mr`'s checks for one SGE: `[addr, addr + length)` of the ODP MR
    /// `lkey` of `pd` as (space, host address), for the caller to touch; errnos as
    /// [`crate::mr::Keys::prefetch_target`] gives them.
    pub fn advise_mr(
        &self,
        pd: PdHandle,
        lkey: Lkey,
        addr: u64,
        length: u64,
    ) -> Result<(AddrSpace, u64), Errno> {
        self.o.keys.prefetch_target(lkey.0, pd, addr, length)
    }

    /// `ibv_create_cq`: returns the handle and the actual depth.
    pub fn create_cq(&mut self, owner: ClientId, cqe: u32) -> Result<(CqHandle, u32), Errno> {
        crate::cq::check_cqe(&self.cfg.limits, cqe)?;
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

    /// `ibv_resize_cq`, the new depth ([`crate::cq`]); `queued`: completions in the ring.
    pub fn resize_cq(&mut self, cq: CqHandle, cqe: u32, queued: u32) -> Result<u32, Errno> {
        crate::cq::resize_cq(&mut self.o, &self.cfg.limits, cq, cqe, queued)
    }

    /// `ibv_rereg_mr` ([`crate::rereg`]): the PD and rights change, the keys stay.
    pub fn rereg_mr(&mut self, lkey: Lkey, r: crate::ReregMr) -> Result<MrKeys, Errno> {
        crate::rereg::rereg_mr(&mut self.o, lkey, r)
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
        srq::create(&mut self.o, &self.cfg.limits, owner, pd, attr, None)
    }

    /// `ibv_modify_srq`: `LIMIT` arms the limit event, `MAX_WR` resizes.
    pub fn modify_srq(
        &mut self,
        srq: SrqHandle,
        attr: &SrqAttr,
        mask: SrqAttrMask,
    ) -> Result<(), Errno> {
        srq::modify(&mut self.o, self.cfg.limits.max_srq_wr, srq, attr, mask)
    }

    /// `ibv_query_srq`.
    pub fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr, Errno> {
        self.o.srqs.get(&srq.0).map(|s| s.attr).ok_or(Errno::EINVAL)
    }

    /// `ibv_destroy_srq`: EBUSY while a QP uses it.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), Errno> {
        srq::destroy(&mut self.o, srq)
    }

    /// Receives queued on SRQ `srq` (a QP that takes one owns it from then on, as rxe's
    /// SRQ gives its slot back when a QP takes the WQE). `None` for an unknown SRQ.
    pub fn srq_outstanding(&self, srq: SrqHandle) -> Option<usize> {
        self.o.srqs.get(&srq.0).map(|s| s.wqes.len())
    }

    /// `ibv_post_srq_recv` (one WR).
    pub fn post_srq_recv(&mut self, srq: SrqHandle, wr: RecvWr) -> Result<(), Errno> {
        srq::post_recv(&mut self.o, srq, wr)
    }

    /// `ibv_open_xrcd` of a new XRC domain by `owner`.
    pub fn open_xrcd(&mut self, owner: ClientId) -> XrcdHandle {
        xrc::open(&mut self.o, owner)
    }

    /// `ibv_open_xrcd` of an existing domain (the daemon matched its file); EINVAL if gone.
    pub fn share_xrcd(&mut self, xrcd: XrcdHandle, owner: ClientId) -> Result<(), Errno> {
        xrc::share(&mut self.o, xrcd, owner)
    }

    /// `ibv_close_xrcd`: true when the domain is gone; EBUSY on the last close while
    /// SRQs or target QPs remain in it.
    pub fn close_xrcd(&mut self, xrcd: XrcdHandle, owner: ClientId) -> Result<bool, Errno> {
        xrc::close(&mut self.o, xrcd, owner)
    }

    /// Whether the domain exists (it goes with its last open, or its openers' release).
    pub fn xrcd_exists(&self, xrcd: XrcdHandle) -> bool {
        self.o.xrcds.contains_key(&xrcd.0)
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an SRQ in `xrcd` (which `owner` has
    /// open) whose receives complete on `cq`. Its SRQ number (`ibv_get_srq_num`, the
    /// XRCETH's) is the handle's value.
    pub fn create_xrc_srq(
        &mut self,
        owner: ClientId,
        pd: PdHandle,
        xrcd: XrcdHandle,
        cq: CqHandle,
        attr: SrqAttr,
    ) -> Result<SrqHandle, Errno> {
        xrc::check_opener(&self.o, xrcd, owner)?;
        if !self.o.cqs.contains_key(&cq.0) || self.o.next_handle >= Qpn::MAX {
            return Err(Errno::EINVAL);
        }
        let x = Some(XrcSrq { xrcd, cq });
        srq::create(&mut self.o, &self.cfg.limits, owner, pd, attr, x)
    }

    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: a target QP in `xrcd`. An initiator
    /// (`IBV_QPT_XRC_SEND`) is made by [`Device::create_qp`] (its `recv_cq` unused).
    pub fn create_xrc_tgt_qp(&mut self, owner: ClientId, xrcd: XrcdHandle) -> Result<Qpn, Errno> {
        xrc::check_opener(&self.o, xrcd, owner)?;
        let (qpn, _) = self.verbs().create_qp(owner, &xrc::TGT_INIT)?;
        xrc::attach_tgt(&mut self.o, &mut self.qps, qpn, xrcd);
        Ok(qpn)
    }

    /// `ibv_create_ah`: EINVAL without a GRH (RoCE).
    pub fn create_ah(&mut self, pd: PdHandle, attr: AhAttr) -> Result<AhHandle, Errno> {
        crate::path::check_ah(&self.cfg, &attr)?;
        if self.o.ahs.len() >= self.cfg.limits.max_ah as usize {
            return Err(Errno::ENOMEM);
        }
        let owner = self.o.pd_ref(pd, 1)?;
        let h = self.o.handle();
        self.o.ahs.insert(h, Ah { owner, pd, attr });
        Ok(AhHandle(h))
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, ah: AhHandle) -> Result<(), Errno> {
        let a = self.o.ahs.remove(&ah.0).ok_or(Errno::EINVAL)?;
        let _ = self.o.pd_ref(a.pd, -1);
        Ok(())
    }
}
