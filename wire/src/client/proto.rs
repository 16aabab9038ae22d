//! Control messages: [`Request`] and [`Reply`], postcard-encoded, one per
//! `SOCK_SEQPACKET` datagram.
//!
//! Attribute structs mirror the `ibv_*` structs of `<infiniband/verbs.h>` field for field,
//! with the same names and numbering, so the shim copies them 1:1. Objects are named by
//! [`Handle`]s the daemon allocates; a handle is only valid in the session that created it.
//!
//! File descriptors (`SCM_RIGHTS`) travel with these messages, in this order:
//!
//! | message | fds |
//! |---|---|
//! | `OpenDevice` request | `[/proc/self/mem opened O_RDWR]` |
//! | `RegMr` request | `[one sealed memfd per entry of `shared`, in order]` (often none) |
//! | `DeviceOpened` reply | `[async event pipe read end, doorbell eventfd, session page memfd]` |
//! | `CreateCompChannel` request | `[write end of a pipe the shim made]` |
//! | `Cq` reply | `[CQ ring memfd]` |
//! | `Srq` reply | `[SRQ ring memfd]` |
//! | `Qp` reply | `[memfd holding the SQ ring, then the RQ ring]` |
//! | `Capture` request | `[write end of a pipe]` |
//! | `Cm(CreateChannel)` request | `[write end of a pipe]` |

use super::ring::RingLayout;
use serde::{Deserialize, Serialize};

/// An object named in the protocol (device context, PD, MR, MW, CQ, SRQ, QP, AH,
/// completion channel). Allocated by the daemon, unique in the daemon's lifetime, and
/// only meaningful to the session that created the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Handle(pub u32);

/// A control request. `seq` is chosen by the client and echoed in the [`Reply`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub seq: u64,
    pub body: RequestBody,
}

/// The answer to the [`Request`] with the same `seq`: a body, or a positive errno as
/// rdma-core would return it for that verb.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub seq: u64,
    pub result: Result<ReplyBody, i32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RequestBody {
    /// First message of a session.
    Hello {
        version: u32,
        pid: u32,
    },
    /// fd[0]: the client's `/proc/self/mem`, opened `O_RDWR`.
    OpenDevice {
        name: String,
    },
    CloseDevice {
        ctx: Handle,
    },
    QueryDevice {
        ctx: Handle,
    },
    QueryPort {
        ctx: Handle,
        port: u8,
    },
    QueryGid {
        ctx: Handle,
        port: u8,
        index: u32,
    },
    AllocPd {
        ctx: Handle,
    },
    DeallocPd {
        pd: Handle,
    },
    /// fd[i]: the memfd that backs `shared[i]` (see [`SharedPages`]); none when `shared`
    /// is empty, the default, where the daemon reaches the region through `/proc/self/mem`.
    RegMr {
        pd: Handle,
        addr: u64,
        length: u64,
        iova: u64,
        access: u32,
        shared: Vec<SharedPages>,
    },
    DeregMr {
        mr: Handle,
    },
    /// fd[0]: write end of a pipe; the daemon writes [`super::CompEventRecord`]s to it.
    CreateCompChannel {
        ctx: Handle,
    },
    DestroyCompChannel {
        channel: Handle,
    },
    CreateCq {
        ctx: Handle,
        cqe: u32,
        channel: Option<Handle>,
        comp_vector: u32,
    },
    DestroyCq {
        cq: Handle,
    },
    ResizeCq {
        cq: Handle,
        cqe: u32,
    },
    CreateSrq {
        pd: Handle,
        attr: SrqAttr,
    },
    ModifySrq {
        srq: Handle,
        attr: SrqAttr,
        mask: u32,
    },
    QuerySrq {
        srq: Handle,
    },
    DestroySrq {
        srq: Handle,
    },
    CreateQp {
        pd: Handle,
        init: QpInitAttr,
    },
    ModifyQp {
        qp: Handle,
        attr: QpAttr,
        mask: u32,
    },
    QueryQp {
        qp: Handle,
        mask: u32,
    },
    DestroyQp {
        qp: Handle,
    },
    CreateAh {
        pd: Handle,
        attr: AhAttr,
    },
    DestroyAh {
        ah: Handle,
    },
    AllocMw {
        pd: Handle,
        mw_type: u32,
    },
    DeallocMw {
        mw: Handle,
    },
    /// Counters of a device (all devices when `None`), or of one QP by number.
    Stat {
        device: Option<String>,
        qpn: Option<u32>,
    },
    LinkShow,
    /// `rdma-emu link add`. `mpa_crc` / `mpa_markers`: what a siw device asks for in
    /// MPA (unset: off); EINVAL when set for an rxe device. `backend`: how the device
    /// reaches the network (rxe: `udp`, the default, or `packet`; siw: `tcp`, the
    /// default, or `smoltcp`); a backend this daemon does not build is EOPNOTSUPP, one of
    /// the other device type EINVAL. `addrs`: the addresses the device serves instead of
    /// its interface's (a smoltcp device's own, which the kernel must not have:
    /// EADDRINUSE when it does, EINVAL when none is given).
    /// `default_tos` / `cnp_dscp`: rxe's RDMA CM default traffic class and CNP DSCP (unset:
    /// 0 and 48); EINVAL when set for a siw device or out of range.
    LinkAdd {
        name: String,
        link_type: String,
        netdev: String,
        mpa_crc: Option<bool>,
        mpa_markers: Option<bool>,
        backend: Option<String>,
        default_tos: Option<u8>,
        cnp_dscp: Option<u8>,
        addrs: Option<Vec<std::net::IpAddr>>,
    },
    LinkDel {
        name: String,
    },
    /// fd[0]: write end of a pipe. The daemon writes a pcap stream (Ethernet link type) of
    /// every frame the device sends and receives into it until the read end closes
    /// (`rdma-emu capture`). Frames that do not fit while the reader lags are dropped.
    Capture {
        device: String,
    },
    /// RDMA CM (librdmacm): see [`super::cm`]. `CreateChannel` carries fd[0], the write
    /// end of the channel's pipe.
    Cm(super::cm::CmRequest),
    /// `ibv_attach_mcast`: the UD QP joins the multicast group `gid` (a multicast GID:
    /// first octet 0xff, or IPv4-mapped 224.0.0.0/4 as RoCE v2 uses). `lid` is ignored on
    /// RoCE (IBA Annex A17) but kept per attachment, as the kernel's uverbs layer does.
    /// Reply `Ok`. Attaching again with the same `gid` and `lid` is a success.
    AttachMcast {
        qp: Handle,
        gid: [u8; 16],
        lid: u16,
    },
    /// `ibv_detach_mcast`: the reverse; EINVAL when the QP is not attached with this
    /// `gid` and `lid`. Reply `Ok`.
    DetachMcast {
        qp: Handle,
        gid: [u8; 16],
        lid: u16,
    },
    /// Fault injection (`rdma-emu fault`): see [`super::fault`]. Reply `Faults`.
    Fault(super::fault::FaultRequest),
    /// Every QP of a device (all devices when `None`), as `rdma-emu top` and `rdma-emu res
    /// qp` show them. Reply `Qps`.
    QpList {
        device: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReplyBody {
    /// Success with nothing to return.
    Ok,
    Hello {
        version: u32,
        devices: Vec<DeviceSummary>,
    },
    /// fds: async event pipe read end, doorbell eventfd, session page memfd.
    DeviceOpened {
        ctx: Handle,
        device_attr: DeviceAttr,
        ports: Vec<PortAttr>,
        gids: Vec<GidEntry>,
    },
    DeviceAttr(DeviceAttr),
    PortAttr(PortAttr),
    Gid(GidEntry),
    Pd {
        handle: Handle,
    },
    Mr {
        handle: Handle,
        lkey: u32,
        rkey: u32,
    },
    CompChannel {
        handle: Handle,
    },
    /// fd[0]: the ring memfd. `cqe` is the depth the application may use.
    Cq {
        handle: Handle,
        cqe: u32,
        ring: RingLayout,
    },
    /// fd[0]: the ring memfd.
    Srq {
        handle: Handle,
        attr: SrqAttr,
        ring: RingLayout,
    },
    SrqAttr(SrqAttr),
    /// fd[0]: the memfd with both rings. `rq` is `None` when the QP uses an SRQ.
    Qp {
        handle: Handle,
        qpn: u32,
        cap: QpCap,
        sq: RingLayout,
        rq: Option<RingLayout>,
    },
    QpAttrs {
        attr: QpAttr,
        init: QpInitAttr,
    },
    Ah {
        handle: Handle,
    },
    Mw {
        handle: Handle,
        rkey: u32,
    },
    Stat(Vec<CounterSet>),
    Links(Vec<LinkInfo>),
    Cm(super::cm::CmReply),
    Faults(Vec<super::fault::FaultInfo>),
    Qps(Vec<QpSummary>),
}

/// Whole pages of a registered region that the client mapped from a memfd
/// (`RDMA_EMU_SHARED_MR`): the client's `[addr, addr + len)` are the memfd's
/// `[offset, offset + len)`, so the daemon can map the memfd and copy at memory speed
/// instead of going through `/proc/self/mem`. All three are multiples of the page size.
/// The memfd travels as the descriptor at the same index; the daemon checks it is sealed
/// against shrinking and growing and large enough, and otherwise ignores the entry (the
/// descriptor path still reaches those pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedPages {
    pub addr: u64,
    pub len: u64,
    pub offset: u64,
}

/// The most [`SharedPages`] one `RegMr` may carry (one descriptor each).
pub const MAX_SHARED_PAGES: usize = 4;

/// One device in the `Hello` reply (what `ibv_get_device_list` needs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSummary {
    pub name: String,
    /// `__be64` as `ibv_get_device_guid` returns it: the value in host order.
    pub node_guid: u64,
    /// `enum ibv_transport_type`.
    pub transport: u32,
    /// `enum ibv_node_type`.
    pub node_type: u32,
}

/// `struct ibv_device_attr`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAttr {
    pub fw_ver: String,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: i32,
    pub max_qp_wr: i32,
    pub device_cap_flags: u32,
    pub max_sge: i32,
    pub max_sge_rd: i32,
    pub max_cq: i32,
    pub max_cqe: i32,
    pub max_mr: i32,
    pub max_pd: i32,
    pub max_qp_rd_atom: i32,
    pub max_ee_rd_atom: i32,
    pub max_res_rd_atom: i32,
    pub max_qp_init_rd_atom: i32,
    pub max_ee_init_rd_atom: i32,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: u32,
    pub max_ee: i32,
    pub max_rdd: i32,
    pub max_mw: i32,
    pub max_raw_ipv6_qp: i32,
    pub max_raw_ethy_qp: i32,
    pub max_mcast_grp: i32,
    pub max_mcast_qp_attach: i32,
    pub max_total_mcast_qp_attach: i32,
    pub max_ah: i32,
    pub max_fmr: i32,
    pub max_map_per_fmr: i32,
    pub max_srq: i32,
    pub max_srq_wr: i32,
    pub max_srq_sge: i32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortAttr {
    /// `enum ibv_port_state`.
    pub state: u32,
    /// `enum ibv_mtu`.
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: i32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
    pub active_speed_ex: u32,
}

/// One GID table entry (`ibv_query_gid_ex`'s `struct ibv_gid_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GidEntry {
    pub index: u32,
    pub port_num: u8,
    pub gid: [u8; 16],
    /// IB = 0, RoCE v1 = 1, RoCE v2 = 2 ([`super::verbs::gid_type`]).
    pub gid_type: u32,
}

/// `struct ibv_qp_cap`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`, with handles in place of pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpInitAttr {
    pub send_cq: Handle,
    pub recv_cq: Handle,
    pub srq: Option<Handle>,
    pub cap: QpCap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    pub sq_sig_all: bool,
}

/// `struct ibv_global_route`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobalRoute {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AhAttr {
    pub grh: GlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`. Only the fields named by the accompanying mask are meaningful.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpAttr {
    /// `enum ibv_qp_state`.
    pub qp_state: u32,
    pub cur_qp_state: u32,
    /// `enum ibv_mtu`.
    pub path_mtu: u32,
    /// `enum ibv_mig_state`.
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: QpCap,
    pub ah_attr: AhAttr,
    pub alt_ah_attr: AhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_srq_attr`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// Named counters of one device or QP (`rdma-emu stat`), named like rxe's hw_counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSet {
    pub device: String,
    pub qpn: Option<u32>,
    pub counters: Vec<(String, u64)>,
}

/// One QP as `rdma-emu top` and `rdma-emu res qp` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpSummary {
    pub device: String,
    pub qpn: u32,
    /// The owning process (0 when unknown).
    pub pid: u32,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    /// `enum ibv_qp_state`.
    pub state: u32,
    pub dest_qpn: Option<u32>,
    pub peer: Option<std::net::SocketAddr>,
    /// Requester: the next PSN, the oldest unacknowledged one.
    pub next_psn: Option<u32>,
    pub unacked_psn: Option<u32>,
    /// Responder: the PSN expected next.
    pub expected_psn: Option<u32>,
    /// Packets sent and not yet acknowledged.
    pub in_flight: u32,
    pub send_queued: u32,
    pub recv_posted: u32,
    pub rnr_waiting: bool,
    pub sent_pkts: u64,
    pub rcvd_pkts: u64,
    pub retransmitted_pkts: u64,
    pub rnr_naks_rcvd: u64,
    pub rnr_naks_sent: u64,
    pub seq_naks_rcvd: u64,
}

/// One device as `rdma-emu link show` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkInfo {
    pub name: String,
    /// `rxe` or `siw`.
    pub link_type: String,
    pub netdev: String,
    /// `enum ibv_port_state`.
    pub state: u32,
    /// `enum ibv_mtu`.
    pub active_mtu: u32,
    pub netdev_mtu: u32,
    pub gids: Vec<GidEntry>,
    /// siw: whether the device asks for MPA CRCs (C bit); `None` for rxe.
    pub mpa_crc: Option<bool>,
    /// siw: whether the device asks for MPA markers (M bit); `None` for rxe.
    pub mpa_markers: Option<bool>,
    /// How the device reaches the network: `udp`, `packet` (rxe) or `tcp` (siw).
    pub backend: String,
    /// rxe: the traffic class RDMA CM ids without `RDMA_OPTION_ID_TOS` get (IP TOS byte,
    /// DSCP << 2); `None` for siw.
    pub default_tos: Option<u8>,
    /// rxe: the DSCP CNPs leave with; `None` for siw.
    pub cnp_dscp: Option<u8>,
}

impl Request {
    /// Encode into a buffer of at most [`super::MAX_MESSAGE_LEN`] bytes.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode(self)
    }

    /// Decode one datagram. Never panics, whatever the bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        postcard::from_bytes(bytes).map_err(|_| DecodeError)
    }

    /// The `seq` of a datagram whose body may not decode: the daemon answers with
    /// `EINVAL` under this number, and closes the session when even this fails.
    pub fn decode_seq(bytes: &[u8]) -> Option<u64> {
        postcard::take_from_bytes::<u64>(bytes)
            .ok()
            .map(|(seq, _)| seq)
    }
}

impl Reply {
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        postcard::from_bytes(bytes).map_err(|_| DecodeError)
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let bytes = postcard::to_stdvec(value).map_err(|_| EncodeError::Serialize)?;
    if bytes.len() > super::MAX_MESSAGE_LEN {
        return Err(EncodeError::TooLong(bytes.len()));
    }
    Ok(bytes)
}

/// A message could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    Serialize,
    /// Longer than [`super::MAX_MESSAGE_LEN`].
    TooLong(usize),
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EncodeError::Serialize => f.write_str("message could not be serialized"),
            EncodeError::TooLong(n) => write!(f, "message of {n} bytes exceeds 64 KiB"),
        }
    }
}
impl std::error::Error for EncodeError {}

/// A datagram is not a valid message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError;

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("undecodable client protocol message")
    }
}
impl std::error::Error for DecodeError {}

#[cfg(test)]
#[path = "proto_tests.rs"]
mod tests;
