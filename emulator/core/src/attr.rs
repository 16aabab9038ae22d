//! Attribute structs mirroring `ibv_qp_attr`, `ibv_qp_init_attr`, `ibv_ah_attr`,
//! `ibv_srq_attr`, work requests and `ibv_wc`, plus the device configuration.

use std::net::SocketAddr;

use wire::roce::{Lkey, Psn, Qkey, Qpn, Rkey};

use crate::types::*;

/// `struct ibv_global_route`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GlobalRoute {
    /// Destination GID (IPv4-mapped or IPv6).
    pub dgid: Gid,
    /// Flow label.
    pub flow_label: u32,
    /// Index of the local GID packets leave from.
    pub sgid_index: u8,
    /// Hop limit (IP TTL).
    pub hop_limit: u8,
    /// Traffic class (IP TOS).
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`. RoCE needs `is_global` with a GRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AhAttr {
    /// The GRH.
    pub grh: GlobalRoute,
    /// DLID (unused on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Whether the GRH is valid (must be set on RoCE).
    pub is_global: bool,
    /// Port number (1).
    pub port_num: u8,
}

/// `struct ibv_qp_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline data bytes per send WR.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` (with the PD of `ibv_create_qp`'s first argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpInitAttr {
    /// Protection domain.
    pub pd: PdHandle,
    /// CQ of send completions.
    pub send_cq: CqHandle,
    /// CQ of receive completions.
    pub recv_cq: CqHandle,
    /// Shared receive queue, if any.
    pub srq: Option<SrqHandle>,
    /// Requested capacities.
    pub cap: QpCap,
    /// Transport.
    pub qp_type: QpType,
    /// Whether every send WR completes (otherwise only IBV_SEND_SIGNALED ones).
    pub sq_sig_all: bool,
}

/// `struct ibv_qp_attr`. Which fields count is said by a [`QpAttrMask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpAttr {
    /// Target state (`IBV_QP_STATE`).
    pub qp_state: QpState,
    /// Assumed current state (`IBV_QP_CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU, `enum ibv_mtu` numbering (1..=5).
    pub path_mtu: u32,
    /// Path migration state (`enum ibv_mig_state`).
    pub path_mig_state: u32,
    /// Q_Key (UD).
    pub qkey: Qkey,
    /// Receive PSN (expected PSN of the responder).
    pub rq_psn: Psn,
    /// Send PSN (first PSN of the requester).
    pub sq_psn: Psn,
    /// Remote QP (RC/UC).
    pub dest_qp_num: Qpn,
    /// Remote access allowed to this QP's responder.
    pub qp_access_flags: AccessFlags,
    /// Capacities (query only).
    pub cap: QpCap,
    /// Primary path.
    pub ah_attr: AhAttr,
    /// Alternate path (accepted, unused).
    pub alt_ah_attr: AhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// Raise SQ_DRAINED when entering SQD.
    pub en_sqd_async_notify: bool,
    /// SQ draining (query only).
    pub sq_draining: bool,
    /// Outstanding READ/atomic requests this requester may have (initiator depth).
    pub max_rd_atomic: u8,
    /// READ/atomic requests this responder keeps resources for (responder depth).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this responder sends (IBA Table 45).
    pub min_rnr_timer: u8,
    /// Port (1).
    pub port_num: u8,
    /// Local ACK timeout: 4.096 µs × 2^timeout; 0 = infinite.
    pub timeout: u8,
    /// Retries after a timeout or sequence NAK (0..=7).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (0..=7; 7 = infinite).
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate timeout.
    pub alt_timeout: u8,
    /// Rate limit (accepted, unused).
    pub rate_limit: u32,
}

/// `struct ibv_srq_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SrqAttr {
    /// Depth.
    pub max_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// Limit: when the number of posted WRs drops below it, SRQ_LIMIT_REACHED fires once
    /// (0 = disarmed).
    pub srq_limit: u32,
}

/// Which SRQ attributes `modify_srq` changes (`enum ibv_srq_attr_mask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SrqAttrMask(pub u32);

impl SrqAttrMask {
    /// IBV_SRQ_MAX_WR (resize).
    pub const MAX_WR: SrqAttrMask = SrqAttrMask(1);
    /// IBV_SRQ_LIMIT (arm the limit event).
    pub const LIMIT: SrqAttrMask = SrqAttrMask(2);
}

/// The keys of a registered MR (rxe gives both the same value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrKeys {
    /// Local key.
    pub lkey: Lkey,
    /// Remote key.
    pub rkey: Rkey,
}

/// `struct ibv_sge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// Address (in the MR's IOVA space).
    pub addr: u64,
    /// Length.
    pub length: u32,
    /// Local key of the MR.
    pub lkey: Lkey,
}

/// RDMA fields of a send WR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RdmaInfo {
    /// Remote virtual address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: Rkey,
}

/// Atomic fields of a send WR (also of ATOMIC WRITE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicInfo {
    /// Remote virtual address (8-byte aligned).
    pub remote_addr: u64,
    /// Compare (CmpSwap) or add (FetchAdd) operand; ATOMIC WRITE: the 8 bytes to write,
    /// as `u64::from_le_bytes` of the application's buffer (they go on the wire in that
    /// byte order, unchanged, as rxe copies them).
    pub compare_add: u64,
    /// Swap operand (CmpSwap).
    pub swap: u64,
    /// Remote key.
    pub rkey: Rkey,
}

/// FLUSH fields of a send WR (`ibv_wr_flush`); the target is in [`SendWr::rdma`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlushInfo {
    /// Bytes from the remote address (ignored for a whole-region FLUSH).
    pub len: u64,
    /// `enum ibv_placement_type` bits: 1 global visibility, 2 persistence.
    pub placement: u8,
    /// `enum ibv_selectivity_level`: 0 the range, 1 the whole memory region.
    pub selectivity: u8,
}

/// UD fields of a send WR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UdInfo {
    /// Destination address handle.
    pub ah: AhHandle,
    /// Destination QP; on an XRC initiator, the remote XRC SRQ's number (the XRCETH's,
    /// `ibv_send_wr.qp_type.xrc.remote_srqn`).
    pub remote_qpn: Qpn,
    /// Q_Key (high bit set: use the QP's own Q_Key, IBA 10.2.4.5.1).
    pub remote_qkey: Qkey,
}

/// Memory-window bind fields of a send WR (`IBV_WR_BIND_MW`, type 2 windows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BindMwInfo {
    /// The window's current R_Key.
    pub mw_rkey: Rkey,
    /// The new R_Key (the window's index with a new key byte).
    pub new_rkey: Rkey,
    /// The MR the window binds to.
    pub mr_lkey: Lkey,
    /// Start of the window.
    pub addr: u64,
    /// Length of the window.
    pub length: u64,
    /// Remote access the window grants.
    pub access: AccessFlags,
}

/// `struct ibv_send_wr` (one WR; the daemon walks the list).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SendWr {
    /// Application identifier.
    pub wr_id: WrId,
    /// Operation.
    pub opcode: WrOpcode,
    /// Flags.
    pub send_flags: SendFlags,
    /// Gather list (ignored when `inline_data` is set).
    pub sg_list: Vec<Sge>,
    /// Inline data copied at post time (`IBV_SEND_INLINE`).
    pub inline_data: Option<Vec<u8>>,
    /// Immediate data as the `__be32` field holds it: its in-memory bytes are
    /// `imm_data.to_le_bytes()`, which are the wire bytes (so the daemon copies the WQE
    /// slot's little-endian u32 unchanged).
    pub imm_data: u32,
    /// R_Key to invalidate at the responder (`IBV_WR_SEND_WITH_INV`).
    pub invalidate_rkey: Rkey,
    /// RDMA fields.
    pub rdma: RdmaInfo,
    /// Atomic fields.
    pub atomic: AtomicInfo,
    /// UD fields.
    pub ud: UdInfo,
    /// Bind fields.
    pub bind_mw: BindMwInfo,
    /// FLUSH fields.
    pub flush: FlushInfo,
}

impl SendWr {
    /// A WR with every optional field empty.
    pub fn new(wr_id: WrId, opcode: WrOpcode) -> Self {
        SendWr {
            wr_id,
            opcode,
            send_flags: SendFlags::SIGNALED,
            sg_list: Vec::new(),
            inline_data: None,
            imm_data: 0,
            invalidate_rkey: Rkey(0),
            rdma: RdmaInfo::default(),
            atomic: AtomicInfo::default(),
            ud: UdInfo::default(),
            bind_mw: BindMwInfo::default(),
            flush: FlushInfo::default(),
        }
    }
}

/// `struct ibv_recv_wr` (one WR).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecvWr {
    /// Application identifier.
    pub wr_id: WrId,
    /// Scatter list.
    pub sg_list: Vec<Sge>,
}

/// `struct ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WorkCompletion {
    /// The WR's identifier.
    pub wr_id: WrId,
    /// Status.
    pub status: WcStatus,
    /// Opcode (valid for successful completions).
    pub opcode: WcOpcode,
    /// Vendor error (0).
    pub vendor_err: u32,
    /// Bytes received / transferred.
    pub byte_len: u32,
    /// With `WITH_IMM`: the immediate data as `ibv_wc.imm_data` holds it (in-memory bytes =
    /// wire bytes = `imm_data.to_le_bytes()`); with `WITH_INV`: the invalidated R_Key.
    pub imm_data: u32,
    /// The local QP.
    pub qp_num: Qpn,
    /// The remote QP (UD receives).
    pub src_qp: Qpn,
    /// Flags.
    pub wc_flags: WcFlags,
    /// P_Key index.
    pub pkey_index: u16,
    /// SLID (0 on RoCE).
    pub slid: u16,
    /// SL.
    pub sl: u8,
    /// DLID path bits.
    pub dlid_path_bits: u8,
}

/// Device limits (`ibv_device_attr`), at least rxe's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceLimits {
    /// Largest MR.
    pub max_mr_size: u64,
    /// QPs.
    pub max_qp: u32,
    /// WRs per queue.
    pub max_qp_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// CQs.
    pub max_cq: u32,
    /// CQ depth.
    pub max_cqe: u32,
    /// MRs.
    pub max_mr: u32,
    /// PDs.
    pub max_pd: u32,
    /// Responder READ/atomic depth.
    pub max_qp_rd_atom: u32,
    /// Requester READ/atomic depth.
    pub max_qp_init_rd_atom: u32,
    /// SRQs.
    pub max_srq: u32,
    /// SRQ depth.
    pub max_srq_wr: u32,
    /// SGEs per SRQ WR.
    pub max_srq_sge: u32,
    /// AHs.
    pub max_ah: u32,
    /// MWs.
    pub max_mw: u32,
    /// Inline bytes.
    pub max_inline_data: u32,
    /// Multicast groups (`max_mcast_grp`).
    pub max_mcast_grp: u32,
    /// QPs attached to one multicast group (`max_mcast_qp_attach`).
    pub max_mcast_qp_attach: u32,
    /// QP attachments to all groups together (`max_total_mcast_qp_attach`).
    pub max_total_mcast_qp_attach: u32,
}

/// `ibv_context.num_comp_vectors` of every device: completions reach the application
/// through one path. The kernel's uverbs refuses a CQ whose `comp_vector` is not below
/// it with EINVAL (`ib_uverbs_create_cq`), before any driver sees the request.
pub const NUM_COMP_VECTORS: u32 = 1;

/// `ibv_create_cq`'s check of `comp_vector`, as uverbs makes it for every driver.
pub fn check_comp_vector(comp_vector: u32) -> Result<(), crate::Errno> {
    if comp_vector >= NUM_COMP_VECTORS {
        return Err(crate::Errno::EINVAL);
    }
    Ok(())
}

impl Default for DeviceLimits {
    fn default() -> Self {
        DeviceLimits {
            max_mr_size: u64::MAX,
            max_qp: 0x10000,
            max_qp_wr: 0x100000,
            max_sge: 32,
            max_cq: 0x4000,
            // ConnectX's, above rxe's 32767: libfabric's ofi_rxm opens a CQ of 262144.
            max_cqe: 4194303,
            max_mr: 0x40000,
            max_pd: 0x10000,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_srq: 0x4000,
            max_srq_wr: 0x100000,
            max_srq_sge: 27,
            max_ah: 0x8000,
            max_mw: 0x10000,
            max_inline_data: 512,
            // rxe_param.h: RXE_MAX_MCAST_GRP, RXE_MAX_MCAST_QP_ATTACH,
            // RXE_MAX_TOT_MCAST_QP_ATTACH.
            max_mcast_grp: 8192,
            max_mcast_qp_attach: 56,
            max_total_mcast_qp_attach: 0x70000,
        }
    }
}

/// How a device is set up.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeviceConfig {
    /// Device name (`rxe0`).
    pub name: String,
    /// GID table (RoCE v2 GIDs, index = sgid_index).
    pub gids: Vec<Gid>,
    /// Port active MTU (the UD MTU and the upper bound of path MTUs).
    pub active_mtu: Mtu,
    /// `Some(p)`: every packet leaves from UDP port `p` (the backend cannot vary it);
    /// `None`: the source port is a hash of the QP pair, as rxe does.
    pub udp_src_port: Option<u16>,
    /// Limits.
    pub limits: DeviceLimits,
    /// Seed for key generation (the core draws no randomness of its own).
    pub seed: u64,
}

/// An IB packet received in a UDP datagram.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// Sender.
    pub src: SocketAddr,
    /// Local address it arrived on.
    pub dst: SocketAddr,
    /// The UDP payload: BTH through ICRC.
    pub payload: &'a [u8],
}

/// A packet to send, written into the caller's buffer by `poll_transmit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Source address (local GID at the QP's sgid_index, UDP source port).
    pub src: SocketAddr,
    /// Destination (dgid, port 4791).
    pub dst: SocketAddr,
    /// Bytes written into the buffer (BTH through ICRC).
    pub len: usize,
    /// The IPv4 TOS / IPv6 traffic class byte without its ECN bits (DSCP << 2): the QP's
    /// traffic class for requests and responses, the device's CNP DSCP for CNPs. The
    /// backend adds the ECN codepoint; the ICRC masks the byte, so it is not covered.
    pub traffic_class: u8,
}

/// The ECN bits of the IPv4 TOS / IPv6 traffic class byte (RFC 3168 section 5).
pub const ECN_MASK: u8 = 0x03;

/// The DSCP ConnectX sends CNPs with (its `cnp_dscp` default); 802.1p priority 6 goes with
/// it on VLANs, which a UDP socket cannot set.
pub const CNP_DSCP: u8 = 48;

/// Counters, device-wide and per QP (like rxe's hw_counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Counters {
    /// Packets sent.
    pub sent_pkts: u64,
    /// Packets received and accepted past the header checks.
    pub rcvd_pkts: u64,
    /// Packets dropped for a bad ICRC.
    pub icrc_errors: u64,
    /// Packets whose ICRC only matched with a solved, non-zero IPv4 ID.
    pub icrc_solved_id: u64,
    /// Packets dropped as malformed.
    pub malformed: u64,
    /// Packets for an unknown QP or a QP in the wrong state.
    pub unknown_qp: u64,
    /// Sequence-error NAKs sent.
    pub seq_naks_sent: u64,
    /// Sequence-error NAKs received.
    pub seq_naks_rcvd: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received.
    pub rnr_naks_rcvd: u64,
    /// Duplicate requests received.
    pub duplicate_requests: u64,
    /// Local ACK timeouts.
    pub ack_timeouts: u64,
    /// Packets retransmitted.
    pub retransmitted_pkts: u64,
    /// READ responses for PSNs already completed: answers to our retransmissions that a
    /// slow responder is still working through. Each one postpones the ACK timer.
    pub duplicate_responses: u64,
    /// Retry counter exhausted.
    pub retry_exceeded: u64,
    /// RNR retry counter exhausted.
    pub rnr_retry_exceeded: u64,
    /// UD packets dropped for a wrong Q_Key.
    pub qkey_violations: u64,
    /// Packets dropped because no receive WQE was posted (UC, UD).
    pub no_recv_wqe_drops: u64,
    /// Completion queue overruns.
    pub cq_overruns: u64,
    /// Notification point: packets that arrived marked Congestion Experienced.
    pub np_ecn_marked: u64,
    /// Notification point: CNPs sent (at most one per QP per CNP interval).
    pub np_cnp_sent: u64,
    /// Reaction point: CNPs received and not acted on (DCQCN off).
    pub rp_cnp_ignored: u64,
    /// Reaction point: CNPs received and handed to DCQCN (DCQCN on).
    pub rp_cnp_handled: u64,
    /// Reaction point: rate cuts (at most one per rate-reduce monitor period).
    pub rp_rate_cuts: u64,
    /// Reaction point: times a paced QP's next packet was held until it was due.
    pub rp_paced_holds: u64,
    /// Times a QP's next packet was held because the link partner paused its priority
    /// (802.1Qbb PFC or 802.3 PAUSE).
    pub pfc_held: u64,
    /// Times an RC QP waited to start a message because the device had its window of
    /// request packets in flight.
    pub device_window_waits: u64,
    /// XRC requests whose XRCETH named no XRC SRQ of the target QP's domain (NAKed
    /// Invalid Request).
    pub xrc_srq_errors: u64,
}
