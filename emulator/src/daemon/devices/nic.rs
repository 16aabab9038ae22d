//! The daemon's view of one device's transport engine, in the protocol's vocabulary.
//!
//! The engine loop, sessions and rings talk to a [`Nic`]; [`crate::daemon::devices::core_nic`] implements it
//! over `emu_core::Device` (translating `wire::client` attributes into the core's types in
//! one place). Object names here are the core's numeric identifiers (`PdHandle.0`,
//! `CqHandle.0`, a QPN, an lkey...), never the protocol's session handles.

use crate::daemon::devices::netdev::Netdev;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;
use wire::client::slot::{CqeRepr, SendWqeRepr, SgeList};
use wire::client::{AhAttr, DeviceAttr, DeviceSummary, GidEntry, PortAttr, QpAttr, QpCap, SrqAttr};

/// Who owns an object: one device context of one session. Also the address space its
/// memory registrations cover (the context's `/proc/self/mem`).
pub type Owner = u32;

/// An errno value (positive).
pub type Errno = i32;

/// A read or write of application memory failed (unmapped page, unknown owner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemFault;

/// What one `ibv_rereg_mr` asks of an engine (`ReregMr` of the protocol, checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rereg {
    /// `IBV_REREG_MR_CHANGE_*`.
    pub flags: u32,
    /// The new PD's engine id (with `CHANGE_PD`).
    pub pd: u32,
    /// The new `IBV_ACCESS_*` (with `CHANGE_ACCESS`).
    pub access: u32,
    /// The region was registered with a write right (its memory was taken as writable).
    pub pinned_writable: bool,
}

/// Where a packet the NIC staged goes, and how it is marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxMeta {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The IPv4 TOS / IPv6 traffic class byte without its ECN bits (DSCP << 2); the
    /// backend adds ECT(0).
    pub traffic_class: u8,
}

/// Application memory, as the NIC's DMA engine reaches it.
pub trait AppMemory {
    fn read(&mut self, owner: Owner, addr: u64, buf: &mut [u8]) -> Result<(), MemFault>;
    fn write(&mut self, owner: Owner, addr: u64, data: &[u8]) -> Result<(), MemFault>;
    /// Whether an access at `addr` is a system call (`core::Memory::prefers_runs`); the
    /// default, `false`, is for memory mapped in this process.
    fn prefers_runs(&self, owner: Owner, addr: u64) -> bool {
        let _ = (owner, addr);
        false
    }
}

/// What an async event concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventElement {
    Qp(u32),
    Cq(u32),
    Srq(u32),
    Port(u8),
    Device,
}

/// QP creation in core identifiers.
#[derive(Debug, Clone, Copy)]
pub struct QpCreate {
    pub pd: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub srq: Option<u32>,
    pub cap: QpCap,
    pub qp_type: u32,
    pub sq_sig_all: bool,
}

/// Device limits and identity, for `ibv_query_device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_ah: u32,
    pub max_mw: u32,
    pub max_inline: u32,
    pub max_msg_sz: u32,
}

impl Default for Limits {
    /// At least rxe's (`ibv_devinfo -v` on rxe).
    fn default() -> Self {
        Limits {
            max_qp: 1 << 16,
            max_qp_wr: 1 << 20,
            max_sge: 32,
            max_cq: 1 << 16,
            // ConnectX's, above rxe's 32767: libfabric's ofi_rxm asks for 262144 entries
            // by default (docs/compatibility.md, "libfabric"). The CQ ring is a sparse memfd.
            max_cqe: 4194303,
            max_mr: 1 << 18,
            max_pd: 1 << 16,
            max_qp_rd_atom: 128,
            max_res_rd_atom: 1 << 14,
            max_srq: 1 << 16,
            max_srq_wr: 1 << 20,
            max_srq_sge: 27,
            max_ah: 1 << 16,
            max_mw: 1 << 16,
            max_inline: 512,
            max_msg_sz: 1 << 31,
        }
    }
}

/// The engine's ids an XRC SRQ is made of: its PD, XRC domain and CQ.
#[derive(Debug, Clone, Copy)]
pub struct XrcSrqIds {
    pub pd: u32,
    pub xrcd: u32,
    pub cq: u32,
}

/// A device kind's own answers to `ibv_get_device_list`, `ibv_query_device`,
/// `ibv_query_port` and the GID queries ([`Nic::identity`]).
pub trait Identity {
    fn summary(&self, name: &str, node_guid: u64) -> DeviceSummary;
    fn device_attr(&self, node_guid: u64) -> DeviceAttr;
    /// Port 1 when up (`mtu`: the IB MTU in bytes; `netdev`: the interface).
    fn port_attr(&self, mtu: u32, netdev: &Netdev) -> PortAttr;
    /// The occupied GID entries.
    fn gid_entries(&self, node_guid: u64) -> Vec<GidEntry>;
}

/// One device's transport engine. `Any`: code that drives one kind of engine beyond this
/// trait (the RDMA CM's iWARP calls on a siw device) finds it by downcasting, so the trait
/// names none of its implementors.
pub trait Nic: std::any::Any {
    /// What the device says of itself where its kind answers unlike RoCE (a siw device:
    /// the iWARP transport, siw's attributes, its one MAC-based GID); `None`: the RoCE
    /// answers `ServedDevice` gives for rxe.
    fn identity(&self) -> Option<&dyn Identity> {
        None
    }
    fn limits(&self) -> Limits;
    fn alloc_pd(&mut self, owner: Owner) -> Result<u32, Errno>;
    fn dealloc_pd(&mut self, pd: u32) -> Result<(), Errno>;
    /// Returns (lkey, rkey).
    fn reg_mr(
        &mut self,
        owner: Owner,
        pd: u32,
        addr: u64,
        length: u64,
        iova: u64,
        access: u32,
    ) -> Result<(u32, u32), Errno>;
    fn dereg_mr(&mut self, lkey: u32) -> Result<(), Errno>;
    /// `ibv_rereg_mr`: returns (lkey, rkey). The kernel's siw has no `rereg_user_mr`:
    /// EOPNOTSUPP unless the engine has it.
    fn rereg_mr(&mut self, _lkey: u32, _r: &Rereg) -> Result<(u32, u32), Errno> {
        Err(libc::EOPNOTSUPP)
    }
    /// `ibv_advise_mr`'s checks for one range of an ODP MR of `pd`: whose memory and
    /// where. EOPNOTSUPP on a device without ODP (the kernel's answer when a driver has
    /// no `advise_mr`).
    fn advise_mr(&self, pd: u32, lkey: u32, addr: u64, len: u64) -> Result<(Owner, u64), Errno> {
        let _ = (pd, lkey, addr, len);
        Err(libc::EOPNOTSUPP)
    }
    /// Returns (mw id, rkey).
    fn alloc_mw(&mut self, owner: Owner, pd: u32, mw_type: u32) -> Result<(u32, u32), Errno>;
    fn dealloc_mw(&mut self, mw: u32) -> Result<(), Errno>;
    /// Returns (cq, actual depth).
    fn create_cq(&mut self, owner: Owner, cqe: u32) -> Result<(u32, u32), Errno>;
    fn destroy_cq(&mut self, cq: u32) -> Result<(), Errno>;
    /// `ibv_resize_cq`: the new depth; `queued` completions are still in the CQ's ring.
    /// The kernel's siw has no `resize_cq`: EOPNOTSUPP unless the engine has it.
    fn resize_cq(&mut self, _cq: u32, _cqe: u32, _queued: u32) -> Result<u32, Errno> {
        Err(libc::EOPNOTSUPP)
    }
    fn create_srq(
        &mut self,
        owner: Owner,
        pd: u32,
        attr: &SrqAttr,
    ) -> Result<(u32, SrqAttr), Errno>;
    fn modify_srq(&mut self, srq: u32, attr: &SrqAttr, mask: u32) -> Result<(), Errno>;
    fn query_srq(&self, srq: u32) -> Result<SrqAttr, Errno>;
    fn destroy_srq(&mut self, srq: u32) -> Result<(), Errno>;
    fn post_srq_recv(&mut self, srq: u32, wr_id: u64, sges: SgeList<'_>) -> Result<(), Errno>;
    /// XRC (IBA annex A14), RoCE only: the kernel's siw has none, so these are
    /// EOPNOTSUPP unless the engine has them. `ibv_open_xrcd`: a new domain for `owner`,
    /// or one more open of `existing`; returns the domain.
    fn open_xrcd(&mut self, _owner: Owner, _existing: Option<u32>) -> Result<u32, Errno> {
        Err(libc::EOPNOTSUPP)
    }
    /// `ibv_close_xrcd` by `owner`: whether the domain is gone.
    fn close_xrcd(&mut self, _xrcd: u32, _owner: Owner) -> Result<bool, Errno> {
        Err(libc::EOPNOTSUPP)
    }
    /// Whether the domain still exists (a released owner may have taken it).
    fn xrcd_exists(&self, _xrcd: u32) -> bool {
        false
    }
    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: returns (srq, actual attributes); the
    /// SRQ number is the srq id.
    fn create_xrc_srq(
        &mut self,
        _owner: Owner,
        _ids: XrcSrqIds,
        _attr: &SrqAttr,
    ) -> Result<(u32, SrqAttr), Errno> {
        Err(libc::EOPNOTSUPP)
    }
    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: returns the target's QPN.
    fn create_xrc_tgt_qp(&mut self, _owner: Owner, _xrcd: u32) -> Result<u32, Errno> {
        Err(libc::EOPNOTSUPP)
    }
    fn create_ah(&mut self, pd: u32, attr: &AhAttr) -> Result<u32, Errno>;
    fn destroy_ah(&mut self, ah: u32) -> Result<(), Errno>;
    /// Returns (qpn, actual capabilities).
    fn create_qp(&mut self, owner: Owner, init: &QpCreate) -> Result<(u32, QpCap), Errno>;
    fn modify_qp(&mut self, now: Instant, qpn: u32, attr: &QpAttr, mask: u32) -> Result<(), Errno>;
    fn query_qp(&self, qpn: u32) -> Result<QpAttr, Errno>;
    fn destroy_qp(&mut self, qpn: u32) -> Result<(), Errno>;
    /// A WQE read from QP `qpn`'s send queue; `ah` is the device's number of the AH the
    /// WQE names (UD), if it names one of this device. A refusal is the error completion
    /// the WQE gets (ENOMEM: the queue is full, the WQE stays in the ring).
    fn post_send(
        &mut self,
        now: Instant,
        qpn: u32,
        wqe: &SendWqeRepr<'_>,
        ah: Option<u32>,
        mem: &mut dyn AppMemory,
    ) -> Result<(), emu_core::SendRefused>;
    fn post_recv(&mut self, qpn: u32, wr_id: u64, sges: SgeList<'_>) -> Result<(), Errno>;
    /// Receives posted to QP `qpn`'s RQ that have not completed; `None` when the device
    /// gives a receive's ring slot back as soon as it has queued it (siw).
    fn recv_outstanding(&self, _qpn: u32) -> Option<usize> {
        None
    }
    /// Receives queued on SRQ `srq`; `None` as for [`Nic::recv_outstanding`].
    fn srq_outstanding(&self, _srq: u32) -> Option<usize> {
        None
    }
    /// Moves a QP to the error state (a broken ring, daemon shutdown).
    fn qp_to_error(&mut self, now: Instant, qpn: u32);
    /// The datagram (already handled) arrived marked Congestion Experienced: the
    /// notification point's CNP. RoCE only.
    fn congestion_experienced(
        &mut self,
        _now: Instant,
        _src: SocketAddr,
        _dst: SocketAddr,
        _payload: &[u8],
    ) {
    }
    /// Congestion control of the device: the DCQCN reaction point's parameters and the
    /// notification point's CNP interval. RoCE only.
    fn set_congestion(
        &mut self,
        _dcqcn: emu_core::DcqcnParams,
        _cnp_interval: std::time::Duration,
    ) {
    }
    /// The DSCP (0..=63) the notification point's CNPs leave with. RoCE only.
    fn set_cnp_dscp(&mut self, _dscp: u8) {}
    /// The link partner paused `priority` (802.1Qbb PFC, 802.3 PAUSE) until `until`; an
    /// `until` not after `now` resumes it. RoCE only.
    fn pause_priority(&mut self, _now: Instant, _priority: u8, _until: Instant) {}
    /// Fault injection: the next in-order request of `qpn` that can take `response` gets
    /// it instead of being executed (until `clear_forced_response`). RoCE only.
    fn force_next_response(&mut self, _qpn: u32, _response: emu_core::ForcedResponse) {}
    /// Forgets an unused forced response; whether one was pending.
    fn clear_forced_response(&mut self) -> bool {
        false
    }
    fn release_client(&mut self, now: Instant, owner: Owner);
    /// A received datagram (BTH through ICRC); without `sealed`, one of this NIC's own
    /// packets looped back unsealed ([`Nic::poll_transmit`]), whose ICRC is not checked.
    fn handle_datagram(
        &mut self,
        now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        payload: &[u8],
        sealed: bool,
        mem: &mut dyn AppMemory,
    );
    fn handle_timeout(&mut self, now: Instant, mem: &mut dyn AppMemory);
    /// Fills `buf` with BTH..ICRC, the ICRC not yet computed: the caller seals the packet
    /// (`emu_core::seal_icrc`) unless it loops it back itself; returns where it goes.
    fn poll_transmit(
        &mut self,
        now: Instant,
        mem: &mut dyn AppMemory,
        buf: &mut Vec<u8>,
    ) -> Option<TxMeta>;
    fn poll_timeout(&self) -> Option<Instant>;
    /// The device's addresses changed: the new GID table (index = sgid_index; `None` is an
    /// empty slot, the zero GID, which nothing may be sent from).
    fn set_gids(&mut self, _gids: &[Option<IpAddr>]) {}
    fn poll_completion(&mut self) -> Option<(u32, CqeRepr)>;
    fn poll_event(&mut self) -> Option<(Owner, u32, EventElement)>;
    fn counters(&self) -> Vec<(String, u64)>;
    fn qp_counters(&self, qpn: u32) -> Option<Vec<(String, u64)>>;
    /// Every QP (`rdma-emu top`, `res qp`): `device` and `pid` are left for the caller,
    /// `pid` holds the owner.
    fn qp_summaries(&self) -> Vec<wire::client::QpSummary> {
        Vec::new()
    }
    /// `ibv_attach_mcast` (UD multicast): EOPNOTSUPP where the transport has none.
    fn attach_mcast(&mut self, qpn: u32, gid: [u8; 16], lid: u16) -> Result<(), Errno> {
        let _ = (qpn, gid, lid);
        Err(libc::EOPNOTSUPP)
    }
    /// `ibv_detach_mcast`.
    fn detach_mcast(&mut self, qpn: u32, gid: [u8; 16], lid: u16) -> Result<(), Errno> {
        let _ = (qpn, gid, lid);
        Err(libc::EOPNOTSUPP)
    }
    /// The multicast groups (MGIDs) at least one QP is attached to: the IP groups the
    /// device's interface must have joined.
    fn mcast_groups(&self) -> Vec<[u8; 16]> {
        Vec::new()
    }

    // --- siw (iWARP) hooks; RoCE engines keep the defaults ---
    /// A descriptor (an epoll set over the device's TCP sockets) the engine watches.
    fn stream_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Serves the TCP sockets (`readable`: `stream_fd` was reported ready) and writes
    /// what the connections produced; called every engine pass. Whether anything
    /// happened.
    fn handle_streams(&mut self, _now: Instant, _readable: bool, _mem: &mut dyn AppMemory) -> bool {
        false
    }
}
