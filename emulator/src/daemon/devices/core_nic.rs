//! [`Nic`] over the sans-IO core (`emu_core::Device`): the one place where the protocol's
//! attribute structs and slot reprs become the core's types, and back.

use crate::daemon::devices::nic::{
    AppMemory, Errno, EventElement, Limits, Nic, Owner, QpCreate, Rereg, TxMeta, XrcSrqIds,
};
use emu_core as core;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;
use wire::client::slot::{CqeRepr, SendData, SendWqeRepr, SgeList};
use wire::client::verbs::{mtu, qp_attr_mask};
use wire::client::{self as proto};
use wire::roce::{Lkey, Psn, Qkey, Qpn, Rkey};

/// A [`crate::daemon::devices::device::NicFactory`] building the real transport.
pub fn factory(
    name: &str,
    gids: &[IpAddr],
    mtu_bytes: u32,
    udp_src_port: Option<u16>,
    _limits: Limits,
    seed: u64,
) -> Box<dyn Nic + Send> {
    let cfg = core::DeviceConfig {
        name: name.to_string(),
        gids: gids.iter().map(|ip| core::Gid::from_ip(*ip)).collect(),
        active_mtu: mtu::from_bytes(mtu_bytes)
            .and_then(core::Mtu::from_raw)
            .unwrap_or(core::Mtu::Mtu1024),
        udp_src_port,
        limits: core::DeviceLimits::default(),
        seed,
    };
    let mut dev = core::Device::new(cfg);
    // The data path seals what leaves (`devices::io::transmit`).
    dev.defer_icrc(true);
    Box::new(CoreNic { dev })
}

pub struct CoreNic {
    dev: core::Device,
}

/// The core's view of the daemon's application memory.
pub(in crate::daemon) struct Bridge<'a>(pub(in crate::daemon) &'a mut dyn AppMemory);

impl core::Memory for Bridge<'_> {
    fn read(
        &mut self,
        space: core::AddrSpace,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), core::MemoryFault> {
        self.0
            .read(space.0, addr, buf)
            .map_err(|_| core::MemoryFault)
    }
    fn write(
        &mut self,
        space: core::AddrSpace,
        addr: u64,
        data: &[u8],
    ) -> Result<(), core::MemoryFault> {
        self.0
            .write(space.0, addr, data)
            .map_err(|_| core::MemoryFault)
    }
    fn prefers_runs(&self, space: core::AddrSpace, addr: u64) -> bool {
        self.0.prefers_runs(space.0, addr)
    }
}

fn e(err: core::Errno) -> Errno {
    err.0
}

/// A WQE the device cannot take at posting (`errno`): a local QP operation error, as
/// rxe completes such a WR.
pub(in crate::daemon) fn refused(errno: Errno) -> core::SendRefused {
    core::SendRefused {
        status: core::WcStatus::LocQpOpErr,
        errno: core::Errno(errno),
    }
}

pub(in crate::daemon) fn sges(list: SgeList<'_>) -> Vec<core::Sge> {
    list.iter()
        .map(|s| core::Sge {
            addr: s.addr,
            length: s.length,
            lkey: Lkey(s.lkey),
        })
        .collect()
}

/// `ibv_reg_mr` on a core device (RoCE's, and siw's key table): (lkey, rkey).
pub(in crate::daemon) fn reg_mr_on(
    dev: &mut core::Device,
    owner: Owner,
    pd: u32,
    addr: u64,
    length: u64,
    iova: u64,
    access: u32,
) -> Result<(u32, u32), Errno> {
    let k = dev
        .reg_mr(
            core::PdHandle(pd),
            addr,
            length,
            iova,
            core::AccessFlags(access),
            core::AddrSpace(owner),
        )
        .map_err(e)?;
    Ok((k.lkey.0, k.rkey.0))
}

fn cap_in(c: proto::QpCap) -> core::QpCap {
    wire::qp_cap_fields!(core::QpCap, c)
}

pub(in crate::daemon) fn cap_out(c: core::QpCap) -> proto::QpCap {
    wire::qp_cap_fields!(proto::QpCap, c)
}

fn ah_in(a: &proto::AhAttr) -> core::AhAttr {
    let (dgid, is_global) = (core::Gid(a.grh.dgid), a.is_global != 0);
    wire::ah_attr_fields!(core::AhAttr, core::GlobalRoute, a, dgid: dgid, is_global: is_global)
}

fn ah_out(a: &core::AhAttr) -> proto::AhAttr {
    let (dgid, is_global) = (a.grh.dgid.0, u8::from(a.is_global));
    wire::ah_attr_fields!(proto::AhAttr, proto::GlobalRoute, a, dgid: dgid, is_global: is_global)
}

fn state_in(v: u32, needed: bool) -> Result<core::QpState, Errno> {
    match core::QpState::from_raw(v) {
        Some(s) => Ok(s),
        None if needed => Err(libc::EINVAL),
        None => Ok(core::QpState::Reset),
    }
}

/// The protocol's `ibv_qp_attr` in the core's types: states checked where the mask names
/// them, PSNs and the QPN cut to 24 bits.
fn qp_attr_in(a: &proto::QpAttr, mask: u32) -> Result<core::QpAttr, Errno> {
    Ok(wire::qp_attr_fields!(core::QpAttr, a, {
        qp_state: state_in(a.qp_state, mask & qp_attr_mask::STATE != 0)?,
        cur_qp_state: state_in(a.cur_qp_state, mask & qp_attr_mask::CUR_STATE != 0)?,
        path_mtu: a.path_mtu,
        path_mig_state: a.path_mig_state,
        qkey: Qkey(a.qkey),
        rq_psn: Psn::new(a.rq_psn & 0xff_ffff),
        sq_psn: Psn::new(a.sq_psn & 0xff_ffff),
        dest_qp_num: Qpn(a.dest_qp_num & 0xff_ffff),
        qp_access_flags: core::AccessFlags(a.qp_access_flags),
        cap: cap_in(a.cap),
        ah_attr: ah_in(&a.ah_attr),
        alt_ah_attr: ah_in(&a.alt_ah_attr),
        en_sqd_async_notify: a.en_sqd_async_notify != 0,
        sq_draining: a.sq_draining != 0,
    }))
}

/// The core's QP attributes as the protocol carries them.
pub(in crate::daemon) fn qp_attr_out(a: &core::QpAttr) -> proto::QpAttr {
    wire::qp_attr_fields!(proto::QpAttr, a, {
        qp_state: a.qp_state as u32,
        cur_qp_state: a.cur_qp_state as u32,
        path_mtu: a.path_mtu,
        path_mig_state: a.path_mig_state,
        qkey: a.qkey.0,
        rq_psn: a.rq_psn.value(),
        sq_psn: a.sq_psn.value(),
        dest_qp_num: a.dest_qp_num.0,
        qp_access_flags: a.qp_access_flags.0,
        cap: cap_out(a.cap),
        ah_attr: ah_out(&a.ah_attr),
        alt_ah_attr: ah_out(&a.alt_ah_attr),
        en_sqd_async_notify: u8::from(a.en_sqd_async_notify),
        sq_draining: u8::from(a.sq_draining),
    })
}

pub(in crate::daemon) fn srq_in(a: &proto::SrqAttr) -> core::SrqAttr {
    core::SrqAttr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

pub(in crate::daemon) fn srq_out(a: &core::SrqAttr) -> proto::SrqAttr {
    proto::SrqAttr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

/// A core async event as (owner, `ibv_event_type`, element).
pub(in crate::daemon) fn event_out(
    (owner, ev): (core::ClientId, core::AsyncEvent),
) -> (Owner, u32, EventElement) {
    let (kind, _) = ev.raw();
    let element = match ev {
        core::AsyncEvent::CqErr(c) => EventElement::Cq(c.0),
        core::AsyncEvent::SrqLimitReached(s) => EventElement::Srq(s.0),
        core::AsyncEvent::QpFatal(q)
        | core::AsyncEvent::QpReqErr(q)
        | core::AsyncEvent::QpAccessErr(q)
        | core::AsyncEvent::CommEst(q)
        | core::AsyncEvent::SqDrained(q)
        | core::AsyncEvent::QpLastWqeReached(q) => EventElement::Qp(q.0),
    };
    (owner.0, kind, element)
}

/// A send WQE slot as the core's work request.
pub(in crate::daemon) fn send_wr(
    w: &SendWqeRepr<'_>,
    ah: Option<u32>,
) -> Result<core::SendWr, Errno> {
    let opcode = core::WrOpcode::from_raw(u32::from(w.opcode)).ok_or(libc::EINVAL)?;
    let mut wr = core::SendWr::new(core::WrId(w.wr_id), opcode);
    wr.send_flags = core::SendFlags(w.send_flags);
    match w.data {
        SendData::Sges(list) => wr.sg_list = sges(list),
        SendData::Inline(d) => wr.inline_data = Some(d.to_vec()),
    }
    wr.imm_data = w.imm_data;
    wr.invalidate_rkey = Rkey(w.imm_data);
    wr.rdma = core::RdmaInfo {
        remote_addr: w.remote_addr,
        rkey: Rkey(w.rkey),
    };
    wr.atomic = core::AtomicInfo {
        remote_addr: w.remote_addr,
        compare_add: w.compare_add,
        swap: w.swap,
        rkey: Rkey(w.rkey),
    };
    wr.ud = core::UdInfo {
        ah: core::AhHandle(ah.unwrap_or(0)),
        remote_qpn: Qpn(w.remote_qpn & 0xff_ffff),
        remote_qkey: Qkey(w.remote_qkey),
    };
    // FLUSH reuses fields (wire::client::slot): the length, the type and the level.
    wr.flush = core::FlushInfo {
        len: w.compare_add,
        placement: w.swap as u8,
        selectivity: (w.swap >> 8) as u8,
    };
    // Bind MW reuses fields (wire::client::slot): see SendWqeRepr's documentation.
    wr.bind_mw = core::BindMwInfo {
        mw_rkey: Rkey(w.rkey),
        new_rkey: Rkey(w.imm_data),
        mr_lkey: Lkey(w.swap as u32),
        addr: w.remote_addr,
        length: w.compare_add,
        access: core::AccessFlags(w.remote_qpn),
    };
    Ok(wr)
}

pub(in crate::daemon) fn cqe_out(wc: &core::WorkCompletion) -> CqeRepr {
    CqeRepr {
        wr_id: wc.wr_id.0,
        status: wc.status as u32,
        opcode: wc.opcode as u32,
        vendor_err: wc.vendor_err,
        byte_len: wc.byte_len,
        imm_data: wc.imm_data,
        qp_num: wc.qp_num.0,
        src_qp: wc.src_qp.0,
        wc_flags: wc.wc_flags.0,
        pkey_index: wc.pkey_index,
        slid: wc.slid,
        sl: wc.sl,
        dlid_path_bits: wc.dlid_path_bits,
        // Stamped when written into the ring (notify::deliver_cqe), if the CQ asked.
        completion_ts: 0,
        completion_wallclock_ns: 0,
    }
}

/// Counters under the names rxe's hw_counters use (and ours for what rxe lacks).
fn named(c: &core::Counters) -> Vec<(String, u64)> {
    [
        ("sent_pkts", c.sent_pkts),
        ("rcvd_pkts", c.rcvd_pkts),
        ("duplicate_request", c.duplicate_requests),
        ("out_of_sequence", c.seq_naks_sent),
        ("rcvd_seq_err", c.seq_naks_rcvd),
        ("send_rnr_err", c.rnr_naks_sent),
        ("rcvd_rnr_err", c.rnr_naks_rcvd),
        ("completer_retry_err", c.ack_timeouts),
        ("retry_exceeded_err", c.retry_exceeded),
        ("rnr_nak_retry_err", c.rnr_retry_exceeded),
        ("retransmitted_pkts", c.retransmitted_pkts),
        ("duplicate_responses", c.duplicate_responses),
        ("icrc_errors", c.icrc_errors),
        ("icrc_solved_ip_id", c.icrc_solved_id),
        ("malformed_pkts", c.malformed),
        ("unknown_qp_pkts", c.unknown_qp),
        ("qkey_violations", c.qkey_violations),
        ("no_recv_wqe_drops", c.no_recv_wqe_drops),
        ("cq_overruns", c.cq_overruns),
        ("np_ecn_marked_roce_packets", c.np_ecn_marked),
        ("np_cnp_sent", c.np_cnp_sent),
        ("rp_cnp_ignored", c.rp_cnp_ignored),
        ("rp_cnp_handled", c.rp_cnp_handled),
        ("rp_rate_cuts", c.rp_rate_cuts),
        ("rp_paced_holds", c.rp_paced_holds),
        ("pfc_held", c.pfc_held),
        ("device_window_waits", c.device_window_waits),
        ("xrc_srq_errors", c.xrc_srq_errors),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

impl Nic for CoreNic {
    fn limits(&self) -> Limits {
        let l = self.dev.config().limits;
        Limits {
            max_qp: l.max_qp,
            max_qp_wr: l.max_qp_wr,
            max_sge: l.max_sge,
            max_cq: l.max_cq,
            max_cqe: l.max_cqe,
            max_mr: l.max_mr,
            max_pd: l.max_pd,
            max_qp_rd_atom: l.max_qp_rd_atom,
            max_res_rd_atom: l.max_qp_rd_atom.saturating_mul(128),
            max_srq: l.max_srq,
            max_srq_wr: l.max_srq_wr,
            max_srq_sge: l.max_srq_sge,
            max_ah: l.max_ah,
            max_mw: l.max_mw,
            max_inline: l.max_inline_data,
            max_msg_sz: 1 << 31,
        }
    }
    fn alloc_pd(&mut self, owner: Owner) -> Result<u32, Errno> {
        self.dev
            .alloc_pd(core::ClientId(owner))
            .map(|p| p.0)
            .map_err(e)
    }
    fn dealloc_pd(&mut self, pd: u32) -> Result<(), Errno> {
        self.dev.dealloc_pd(core::PdHandle(pd)).map_err(e)
    }
    fn reg_mr(
        &mut self,
        owner: Owner,
        pd: u32,
        addr: u64,
        length: u64,
        iova: u64,
        access: u32,
    ) -> Result<(u32, u32), Errno> {
        reg_mr_on(&mut self.dev, owner, pd, addr, length, iova, access)
    }
    fn dereg_mr(&mut self, lkey: u32) -> Result<(), Errno> {
        self.dev.dereg_mr(Lkey(lkey)).map_err(e)
    }
    fn rereg_mr(&mut self, lkey: u32, r: &Rereg) -> Result<(u32, u32), Errno> {
        let r = core::ReregMr {
            flags: r.flags,
            pd: core::PdHandle(r.pd),
            access: core::AccessFlags(r.access),
            pinned_writable: r.pinned_writable,
        };
        let k = self.dev.rereg_mr(Lkey(lkey), r).map_err(e)?;
        Ok((k.lkey.0, k.rkey.0))
    }
    fn advise_mr(&self, pd: u32, lkey: u32, addr: u64, len: u64) -> Result<(Owner, u64), Errno> {
        let (space, host) = self
            .dev
            .advise_mr(core::PdHandle(pd), Lkey(lkey), addr, len)
            .map_err(e)?;
        Ok((space.0, host))
    }
    fn alloc_mw(&mut self, _owner: Owner, pd: u32, mw_type: u32) -> Result<(u32, u32), Errno> {
        let (h, rkey) = self.dev.alloc_mw(core::PdHandle(pd), mw_type).map_err(e)?;
        Ok((h.0, rkey.0))
    }
    fn dealloc_mw(&mut self, mw: u32) -> Result<(), Errno> {
        self.dev.dealloc_mw(core::MwHandle(mw)).map_err(e)
    }
    fn create_cq(&mut self, owner: Owner, cqe: u32) -> Result<(u32, u32), Errno> {
        let (h, depth) = self.dev.create_cq(core::ClientId(owner), cqe).map_err(e)?;
        Ok((h.0, depth))
    }
    fn destroy_cq(&mut self, cq: u32) -> Result<(), Errno> {
        self.dev.destroy_cq(core::CqHandle(cq)).map_err(e)
    }
    fn resize_cq(&mut self, cq: u32, cqe: u32, queued: u32) -> Result<u32, Errno> {
        self.dev
            .resize_cq(core::CqHandle(cq), cqe, queued)
            .map_err(e)
    }
    fn create_srq(
        &mut self,
        owner: Owner,
        pd: u32,
        attr: &proto::SrqAttr,
    ) -> Result<(u32, proto::SrqAttr), Errno> {
        let h = self
            .dev
            .create_srq(core::ClientId(owner), core::PdHandle(pd), srq_in(attr))
            .map_err(e)?;
        let actual = self.dev.query_srq(h).map_err(e)?;
        Ok((h.0, srq_out(&actual)))
    }
    fn modify_srq(&mut self, srq: u32, attr: &proto::SrqAttr, mask: u32) -> Result<(), Errno> {
        self.dev
            .modify_srq(core::SrqHandle(srq), &srq_in(attr), core::SrqAttrMask(mask))
            .map_err(e)
    }
    fn query_srq(&self, srq: u32) -> Result<proto::SrqAttr, Errno> {
        self.dev
            .query_srq(core::SrqHandle(srq))
            .map(|a| srq_out(&a))
            .map_err(e)
    }
    fn destroy_srq(&mut self, srq: u32) -> Result<(), Errno> {
        self.dev.destroy_srq(core::SrqHandle(srq)).map_err(e)
    }
    fn post_srq_recv(&mut self, srq: u32, wr_id: u64, list: SgeList<'_>) -> Result<(), Errno> {
        self.dev
            .post_srq_recv(
                core::SrqHandle(srq),
                core::RecvWr {
                    wr_id: core::WrId(wr_id),
                    sg_list: sges(list),
                },
            )
            .map_err(e)
    }
    fn open_xrcd(&mut self, owner: Owner, existing: Option<u32>) -> Result<u32, Errno> {
        let owner = core::ClientId(owner);
        match existing {
            Some(x) => self
                .dev
                .share_xrcd(core::XrcdHandle(x), owner)
                .map(|()| x)
                .map_err(e),
            None => Ok(self.dev.open_xrcd(owner).0),
        }
    }
    fn close_xrcd(&mut self, xrcd: u32, owner: Owner) -> Result<bool, Errno> {
        self.dev
            .close_xrcd(core::XrcdHandle(xrcd), core::ClientId(owner))
            .map_err(e)
    }
    fn xrcd_exists(&self, xrcd: u32) -> bool {
        self.dev.xrcd_exists(core::XrcdHandle(xrcd))
    }
    fn create_xrc_srq(
        &mut self,
        owner: Owner,
        ids: XrcSrqIds,
        attr: &proto::SrqAttr,
    ) -> Result<(u32, proto::SrqAttr), Errno> {
        let h = self
            .dev
            .create_xrc_srq(
                core::ClientId(owner),
                core::PdHandle(ids.pd),
                core::XrcdHandle(ids.xrcd),
                core::CqHandle(ids.cq),
                srq_in(attr),
            )
            .map_err(e)?;
        let actual = self.dev.query_srq(h).map_err(e)?;
        Ok((h.0, srq_out(&actual)))
    }
    fn create_xrc_tgt_qp(&mut self, owner: Owner, xrcd: u32) -> Result<u32, Errno> {
        self.dev
            .create_xrc_tgt_qp(core::ClientId(owner), core::XrcdHandle(xrcd))
            .map(|q| q.0)
            .map_err(e)
    }
    fn create_ah(&mut self, pd: u32, attr: &proto::AhAttr) -> Result<u32, Errno> {
        self.dev
            .create_ah(core::PdHandle(pd), ah_in(attr))
            .map(|h| h.0)
            .map_err(e)
    }
    fn destroy_ah(&mut self, ah: u32) -> Result<(), Errno> {
        self.dev.destroy_ah(core::AhHandle(ah)).map_err(e)
    }
    fn create_qp(&mut self, owner: Owner, init: &QpCreate) -> Result<(u32, proto::QpCap), Errno> {
        let attr = core::QpInitAttr {
            pd: core::PdHandle(init.pd),
            send_cq: core::CqHandle(init.send_cq),
            recv_cq: core::CqHandle(init.recv_cq),
            srq: init.srq.map(core::SrqHandle),
            cap: cap_in(init.cap),
            qp_type: core::QpType::from_raw(init.qp_type).ok_or(libc::EOPNOTSUPP)?,
            sq_sig_all: init.sq_sig_all,
        };
        let (qpn, cap) = self
            .dev
            .create_qp(core::ClientId(owner), &attr)
            .map_err(e)?;
        Ok((qpn.0, cap_out(cap)))
    }
    fn modify_qp(
        &mut self,
        now: Instant,
        qpn: u32,
        attr: &proto::QpAttr,
        mask: u32,
    ) -> Result<(), Errno> {
        let a = qp_attr_in(attr, mask)?;
        self.dev
            .modify_qp(now, Qpn(qpn), &a, core::QpAttrMask(mask))
            .map_err(e)
    }
    fn query_qp(&self, qpn: u32) -> Result<proto::QpAttr, Errno> {
        self.dev
            .query_qp(Qpn(qpn))
            .map(|(a, _)| qp_attr_out(&a))
            .map_err(e)
    }
    fn destroy_qp(&mut self, qpn: u32) -> Result<(), Errno> {
        self.dev.destroy_qp(Qpn(qpn)).map_err(e)
    }
    fn post_send(
        &mut self,
        now: Instant,
        qpn: u32,
        wqe: &SendWqeRepr<'_>,
        ah: Option<u32>,
        mem: &mut dyn AppMemory,
    ) -> Result<(), core::SendRefused> {
        let wr = send_wr(wqe, ah).map_err(refused)?;
        self.dev.submit_send(now, Qpn(qpn), wr, &mut Bridge(mem))
    }
    fn post_recv(&mut self, qpn: u32, wr_id: u64, list: SgeList<'_>) -> Result<(), Errno> {
        self.dev
            .post_recv(
                Qpn(qpn),
                core::RecvWr {
                    wr_id: core::WrId(wr_id),
                    sg_list: sges(list),
                },
            )
            .map_err(e)
    }
    fn recv_outstanding(&self, qpn: u32) -> Option<usize> {
        self.dev.recv_outstanding(Qpn(qpn))
    }
    fn srq_outstanding(&self, srq: u32) -> Option<usize> {
        self.dev.srq_outstanding(core::SrqHandle(srq))
    }
    fn qp_to_error(&mut self, now: Instant, qpn: u32) {
        let attr = core::QpAttr {
            qp_state: core::QpState::Err,
            ..core::QpAttr::default()
        };
        let _ = self
            .dev
            .modify_qp(now, Qpn(qpn), &attr, core::QpAttrMask::STATE);
    }
    fn congestion_experienced(
        &mut self,
        now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        payload: &[u8],
    ) {
        self.dev
            .congestion_experienced(now, &core::Datagram { src, dst, payload });
    }
    fn set_congestion(&mut self, dcqcn: core::DcqcnParams, cnp_interval: std::time::Duration) {
        if let Err(e) = self.dev.set_dcqcn(dcqcn) {
            // The configuration was validated; keep the defaults rather than fail.
            tracing::warn!(device = %self.dev.config().name, "dcqcn parameters refused: {e}");
        }
        self.dev.set_cnp_interval(cnp_interval);
    }
    fn pause_priority(&mut self, now: Instant, priority: u8, until: Instant) {
        self.dev.pause_priority(now, priority, until);
    }
    fn set_cnp_dscp(&mut self, dscp: u8) {
        self.dev.set_cnp_dscp(dscp);
    }
    fn force_next_response(&mut self, qpn: u32, response: core::ForcedResponse) {
        self.dev.force_next_response(Qpn(qpn), response);
    }
    fn clear_forced_response(&mut self) -> bool {
        self.dev.clear_forced_response()
    }
    fn release_client(&mut self, now: Instant, owner: Owner) {
        self.dev.release_client(now, core::ClientId(owner));
    }
    fn handle_datagram(
        &mut self,
        now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        payload: &[u8],
        sealed: bool,
        mem: &mut dyn AppMemory,
    ) {
        let d = &core::Datagram { src, dst, payload };
        if sealed {
            self.dev.handle_datagram(now, d, &mut Bridge(mem))
        } else {
            self.dev.handle_unsealed_datagram(now, d, &mut Bridge(mem))
        }
    }
    fn handle_timeout(&mut self, now: Instant, mem: &mut dyn AppMemory) {
        self.dev.handle_timeout(now, &mut Bridge(mem));
    }
    fn poll_transmit(
        &mut self,
        now: Instant,
        mem: &mut dyn AppMemory,
        buf: &mut Vec<u8>,
    ) -> Option<TxMeta> {
        let t = self.dev.poll_transmit(now, &mut Bridge(mem), buf)?;
        buf.truncate(t.len);
        Some(TxMeta {
            src: t.src,
            dst: t.dst,
            traffic_class: t.traffic_class,
        })
    }
    fn set_gids(&mut self, gids: &[Option<IpAddr>]) {
        self.dev.set_gids(
            gids.iter()
                .map(|ip| ip.map_or(core::Gid::default(), core::Gid::from_ip))
                .collect(),
        );
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.dev.poll_timeout()
    }
    fn poll_completion(&mut self) -> Option<(u32, CqeRepr)> {
        self.dev
            .poll_completion()
            .map(|(cq, wc)| (cq.0, cqe_out(&wc)))
    }
    fn poll_event(&mut self) -> Option<(Owner, u32, EventElement)> {
        self.dev.poll_event().map(event_out)
    }
    fn counters(&self) -> Vec<(String, u64)> {
        named(self.dev.counters())
    }
    fn qp_counters(&self, qpn: u32) -> Option<Vec<(String, u64)>> {
        self.dev.qp_counters(Qpn(qpn)).map(named)
    }
    fn qp_summaries(&self) -> Vec<proto::QpSummary> {
        self.dev
            .qp_statuses()
            .into_iter()
            .map(|s| proto::QpSummary {
                device: String::new(),
                qpn: s.qpn.0,
                pid: s.owner.0,
                qp_type: s.qp_type as u32,
                state: s.state as u32,
                dest_qpn: s.dest_qpn.map(|q| q.0),
                peer: s.peer,
                next_psn: s.next_psn.map(Psn::value),
                unacked_psn: s.unacked_psn.map(Psn::value),
                expected_psn: s.expected_psn.map(Psn::value),
                in_flight: s.in_flight,
                send_queued: s.send_queued as u32,
                recv_posted: s.recv_posted as u32,
                rnr_waiting: s.rnr_waiting,
                sent_pkts: s.counters.sent_pkts,
                rcvd_pkts: s.counters.rcvd_pkts,
                retransmitted_pkts: s.counters.retransmitted_pkts,
                rnr_naks_rcvd: s.counters.rnr_naks_rcvd,
                rnr_naks_sent: s.counters.rnr_naks_sent,
                seq_naks_rcvd: s.counters.seq_naks_rcvd,
            })
            .collect()
    }
    fn attach_mcast(&mut self, qpn: u32, gid: [u8; 16], lid: u16) -> Result<(), Errno> {
        self.dev
            .attach_mcast(Qpn(qpn), core::Gid(gid), lid)
            .map_err(e)
    }
    fn detach_mcast(&mut self, qpn: u32, gid: [u8; 16], lid: u16) -> Result<(), Errno> {
        self.dev
            .detach_mcast(Qpn(qpn), core::Gid(gid), lid)
            .map_err(e)
    }
    fn mcast_groups(&self) -> Vec<[u8; 16]> {
        self.dev.mcast_groups().into_iter().map(|g| g.0).collect()
    }
}
