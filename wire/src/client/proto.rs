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
//! | `Cq` reply (to `CreateCq`, `ResizeCq`) | `[CQ ring memfd]` |
//! | `Srq` reply | `[SRQ ring memfd]` |
//! | `Qp` reply | `[memfd holding the SQ ring, then the RQ ring]` |
//! | `Capture` request | `[write end of a pipe]` |
//! | `Cm(CreateChannel)` request | `[write end of a pipe]` |
//! | `Xrc(Open { file: true })` request | `[the file the XRC domain is tied to]` |
//! | `Xrc(Srq)` reply | `[SRQ ring memfd]` |

pub use super::attr::{
    AhAttr, DeviceAttr, GidEntry, GlobalRoute, Handle, OdpCaps, PortAttr, QpAttr, QpCap, SrqAttr,
};
use super::ring::RingLayout;
use serde::{Deserialize, Serialize};

/// A control request. `seq` is chosen by the client and echoed in the [`Reply`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Chosen by the client (the shim counts up from 1); the daemon only echoes it.
    pub seq: u64,
    /// The verb asked for.
    pub body: RequestBody,
}

/// The answer to the [`Request`] with the same `seq`: a body, or a positive errno as
/// rdma-core would return it for that verb.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// The `seq` of the request this answers.
    pub seq: u64,
    /// The reply, or the positive errno the verb returns (the shim sets `errno` from it).
    pub result: Result<ReplyBody, i32>,
}

/// What a client asks the daemon to do. Every handle must name an object of the
/// requesting session (ENOENT otherwise) of the right kind (EINVAL otherwise); each
/// variant's reply is named in its doc, `Ok` when none is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RequestBody {
    /// First message of a session; any other before it is EPROTO. Reply `Hello`.
    Hello {
        /// [`super::PROTOCOL_VERSION`]; another value is EPROTONOSUPPORT.
        version: u32,
        /// The client's own pid, which must be the socket peer's (`SO_PEERCRED`; EPERM
        /// otherwise).
        pid: u32,
    },
    /// `ibv_open_device`. `fd[0]`: the client's `/proc/self/mem`, opened `O_RDWR` (EINVAL
    /// if it is not a `/proc/<pid>/mem`, EPERM if of another process). Reply
    /// `DeviceOpened`.
    OpenDevice {
        /// The device's name as the `Hello` reply listed it (ENODEV otherwise).
        name: String,
    },
    /// `ibv_close_device`: releases the context and every object created under it.
    CloseDevice {
        /// The device context (a `DeviceOpened` handle).
        ctx: Handle,
    },
    /// `ibv_query_device`. Reply `DeviceAttr`.
    QueryDevice {
        /// The device context (a `DeviceOpened` handle).
        ctx: Handle,
    },
    /// `ibv_query_port`. Reply `PortAttr`.
    QueryPort {
        /// The device context (a `DeviceOpened` handle).
        ctx: Handle,
        /// The port number; devices have port 1 only (EINVAL otherwise).
        port: u8,
    },
    /// `ibv_query_gid` / `ibv_query_gid_ex`. Reply `Gid`; an empty slot is the zero GID.
    QueryGid {
        /// The device context (a `DeviceOpened` handle).
        ctx: Handle,
        /// The port number; 1 only (EINVAL otherwise).
        port: u8,
        /// The GID table index, below the port's `gid_tbl_len` (EINVAL otherwise).
        index: u32,
    },
    /// `ibv_alloc_pd`. Reply `Pd`.
    AllocPd {
        /// The device context (a `DeviceOpened` handle).
        ctx: Handle,
    },
    /// `ibv_dealloc_pd`; the core refuses (EBUSY) while objects use the PD.
    DeallocPd {
        /// The PD to free.
        pd: Handle,
    },
    /// `ibv_reg_mr`. Reply `Mr`. `fd[i]`: the memfd that backs `shared[i]` (see
    /// [`SharedPages`]); none when `shared` is empty, the default, where the daemon reaches
    /// the region through `/proc/self/mem`.
    RegMr {
        /// The PD the MR belongs to.
        pd: Handle,
        /// Start of the region in the client's address space; the daemon probes it
        /// through `/proc/<pid>/mem` (EFAULT when unreadable).
        addr: u64,
        /// Bytes of the region.
        length: u64,
        /// The address peers use for the region's first byte (`ibv_reg_mr_iova`; equal to
        /// `addr` for `ibv_reg_mr`).
        iova: u64,
        /// `IBV_ACCESS_*` ([`super::verbs::access`]); remote write or atomic without
        /// local write, or an unknown bit, is EINVAL.
        access: u32,
        /// Pages the client mapped from memfds, at most [`MAX_SHARED_PAGES`] (EINVAL beyond),
        /// each inside the region (EINVAL otherwise).
        shared: Vec<SharedPages>,
    },
    /// `ibv_dereg_mr`.
    DeregMr {
        /// The MR to deregister.
        mr: Handle,
    },
    /// `ibv_rereg_mr`, as the kernel's rxe does it: the PD and the access rights change in
    /// place, the keys stay. Reply `Mr` (the same handle and keys). `flags` of 0 or with
    /// unknown bits, an unknown or foreign `pd`, or an access `RegMr` would refuse is
    /// EINVAL; a change of translation EOPNOTSUPP; write access on a region registered
    /// without it EACCES (its pages were never checked writable, as the kernel's
    /// `ib_umem_check_rereg`). Nothing changes when the answer is an error.
    ReregMr {
        /// The MR to change.
        mr: Handle,
        /// `IBV_REREG_MR_CHANGE_*` ([`super::verbs::rereg_flags`]).
        flags: u32,
        /// The new PD, with `CHANGE_PD` (EINVAL when missing then).
        pd: Option<Handle>,
        /// The new start, with `CHANGE_TRANSLATION`.
        addr: u64,
        /// The new length, with `CHANGE_TRANSLATION`.
        length: u64,
        /// The new `IBV_ACCESS_*`, with `CHANGE_ACCESS`.
        access: u32,
    },
    /// `ibv_create_comp_channel`. Reply `CompChannel`. `fd[0]`: write end of a pipe (EINVAL
    /// otherwise); the daemon writes [`super::CompEventRecord`]s to it.
    CreateCompChannel {
        /// The device context the channel serves.
        ctx: Handle,
    },
    /// `ibv_destroy_comp_channel`; EBUSY while a CQ uses it.
    DestroyCompChannel {
        /// The channel to destroy.
        channel: Handle,
    },
    /// `ibv_create_cq`. fd: none. Reply `Cq`, with the ring's memfd.
    CreateCq {
        /// The device context (a `DeviceOpened` handle).
        ctx: Handle,
        /// Completions the CQ must hold: 1 to the device's `max_cqe` (EINVAL otherwise).
        cqe: u32,
        /// The completion channel of the same context that gets this CQ's events, if any.
        channel: Option<Handle>,
        /// The completion vector: below the context's `num_comp_vectors`, 1 (EINVAL
        /// otherwise); otherwise unused.
        comp_vector: u32,
        /// `ibv_create_cq_ex` asked for `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` or
        /// `…_WALLCLOCK`: the daemon stamps each CQE it writes (`CqeRepr::completion_ts`).
        /// Without it the two fields stay 0 and no clock is read per completion.
        timestamps: bool,
    },
    /// `ibv_destroy_cq`; the core refuses (EBUSY) while QPs use it.
    DestroyCq {
        /// The CQ to destroy.
        cq: Handle,
    },
    /// `ibv_resize_cq`. Reply `Cq` (the same handle), with the memfd of a new ring that
    /// holds, in order, every completion the old one held past its published consumer
    /// index; the daemon writes only to the new ring from then on. The client must not
    /// consume from the old ring while it asks (it polls under the lock it holds for
    /// the call). `cqe` of 0, above `max_cqe`, or below the completions not yet polled is
    /// EINVAL (rxe's `rxe_cq_chk_attr`).
    ResizeCq {
        /// The CQ to resize.
        cq: Handle,
        /// The completions it should hold.
        cqe: u32,
    },
    /// `ibv_create_srq`. Reply `Srq`, with the ring's memfd.
    CreateSrq {
        /// The PD the SRQ belongs to.
        pd: Handle,
        /// `max_wr` 1..=`max_srq_wr`, `max_sge` ≤ `max_srq_sge` (EINVAL otherwise);
        /// `srq_limit` is ignored.
        attr: SrqAttr,
    },
    /// `ibv_modify_srq`.
    ModifySrq {
        /// The SRQ to modify.
        srq: Handle,
        /// The new values; only those `mask` names are read.
        attr: SrqAttr,
        /// `IBV_SRQ_*` bits ([`super::verbs::srq_attr_mask`]); others are EINVAL.
        mask: u32,
    },
    /// `ibv_query_srq`. Reply `SrqAttr`.
    QuerySrq {
        /// The SRQ to query.
        srq: Handle,
    },
    /// `ibv_destroy_srq`; the core refuses (EBUSY) while QPs use it.
    DestroySrq {
        /// The SRQ to destroy.
        srq: Handle,
    },
    /// `ibv_create_qp`. Reply `Qp`, with the memfd of its rings.
    CreateQp {
        /// The PD the QP belongs to.
        pd: Handle,
        /// CQs and SRQ of the PD's context (EINVAL otherwise), a type of RC, UC or UD
        /// (EOPNOTSUPP otherwise) and capabilities within the device's limits (EINVAL).
        init: QpInitAttr,
    },
    /// `ibv_modify_qp`: the core checks the transition and the attributes it needs (IBA
    /// 10.3, EINVAL). A move to RESET drops the queued receives without completions.
    ModifyQp {
        /// The QP to modify.
        qp: Handle,
        /// The new values; only those `mask` names are read.
        attr: QpAttr,
        /// `IBV_QP_*` bits ([`super::verbs::qp_attr_mask`]).
        mask: u32,
    },
    /// `ibv_query_qp`. Reply `QpAttrs`.
    QueryQp {
        /// The QP to query.
        qp: Handle,
        /// The `IBV_QP_*` bits asked for; ignored, the reply holds every attribute.
        mask: u32,
    },
    /// `ibv_destroy_qp`: outstanding work is dropped without completions; EBUSY while
    /// attached to a multicast group.
    DestroyQp {
        /// The QP to destroy.
        qp: Handle,
    },
    /// `ibv_create_ah`. Reply `Ah`.
    CreateAh {
        /// The PD the AH belongs to.
        pd: Handle,
        /// Where UD sends go. RoCE has no LIDs, so `is_global`, a nonzero `dgid` and an
        /// occupied `sgid_index` of the same IP family are required (EINVAL).
        attr: AhAttr,
    },
    /// `ibv_destroy_ah`.
    DestroyAh {
        /// The AH to destroy.
        ah: Handle,
    },
    /// `ibv_alloc_mw`. Reply `Mw`.
    AllocMw {
        /// The PD the window belongs to.
        pd: Handle,
        /// `IBV_MW_TYPE_1` or `IBV_MW_TYPE_2` ([`super::verbs::mw_type`]).
        mw_type: u32,
    },
    /// `ibv_dealloc_mw`.
    DeallocMw {
        /// The window to free.
        mw: Handle,
    },
    /// `ibv_advise_mr`: prefetch ranges of ODP MRs (`IBV_ACCESS_ON_DEMAND`). Reply `Ok`.
    /// An advice other than the three prefetches ([`super::verbs::advise`]) is EOPNOTSUPP,
    /// a flag other than `FLUSH` or an empty `sg_list` EINVAL; each range must lie in an
    /// ODP MR of `pd` with local write (EINVAL) and inside it (EFAULT). With `FLUSH` the
    /// reply comes after the pages were touched, and a page that cannot be faulted in is
    /// EFAULT; without it the prefetch is best effort and only the keys are checked.
    AdviseMr {
        /// The PD the MRs belong to.
        pd: Handle,
        /// `IBV_ADVISE_MR_ADVICE_*`.
        advice: u32,
        /// `IBV_ADVISE_MR_FLAG_*`.
        flags: u32,
        /// The ranges, as `struct ibv_sge`.
        sg_list: Vec<AdviseRange>,
    },
    /// Counters of a device (all devices when `None`), or of one QP by number. Reply
    /// `Stat`.
    Stat {
        /// The device's name, or `None` for every device.
        device: Option<String>,
        /// A QP number: that QP's counters instead of the device's.
        qpn: Option<u32>,
    },
    /// `rdma-emu link show`. Reply `Links`.
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
        /// The new device's name; EEXIST when one has it.
        name: String,
        /// `rxe` or `siw` (EOPNOTSUPP otherwise).
        link_type: String,
        /// The network interface the device runs on (ENODEV when it does not exist).
        netdev: String,
        /// siw: ask for MPA CRCs.
        mpa_crc: Option<bool>,
        /// siw: ask for MPA markers.
        mpa_markers: Option<bool>,
        /// How the device reaches the network; `None` is the type's default.
        backend: Option<String>,
        /// rxe: the IP TOS byte of RDMA CM ids without `RDMA_OPTION_ID_TOS`.
        default_tos: Option<u8>,
        /// rxe: the DSCP of the CNPs the device sends (0..=63).
        cnp_dscp: Option<u8>,
        /// The device's own addresses (the smoltcp backend).
        addrs: Option<Vec<std::net::IpAddr>>,
    },
    /// `rdma-emu link del`: EBUSY while a context is open on the device; RDMA CM ids bound
    /// to it get DEVICE_REMOVAL.
    LinkDel {
        /// The device to delete (ENODEV when none has the name).
        name: String,
    },
    /// `fd[0]`: write end of a pipe. The daemon writes a pcap stream (Ethernet link type) of
    /// every frame the device sends and receives into it until the read end closes
    /// (`rdma-emu capture`). Frames that do not fit while the reader lags are dropped.
    Capture {
        /// The device whose frames to capture (ENODEV otherwise).
        device: String,
    },
    /// RDMA CM (librdmacm): see [`super::cm`]. `CreateChannel` carries `fd[0]`, the write
    /// end of the channel's pipe.
    Cm(super::cm::CmRequest),
    /// XRC domains, XRC SRQs and XRC target QPs ([`super::xrc`]).
    Xrc(super::xrc::XrcRequest),
    /// `ibv_attach_mcast`: the UD QP joins the multicast group `gid` (a multicast GID:
    /// first octet 0xff, or IPv4-mapped 224.0.0.0/4 as RoCE v2 uses). `lid` is ignored on
    /// RoCE (IBA Annex A17) but kept per attachment, as the kernel's uverbs layer does.
    /// Reply `Ok`. Attaching again with the same `gid` and `lid` is a success.
    AttachMcast {
        /// A UD QP of the session.
        qp: Handle,
        /// The multicast GID (MGID), network order.
        gid: [u8; 16],
        /// The multicast LID; kept to name the attachment, otherwise unused.
        lid: u16,
    },
    /// `ibv_detach_mcast`: the reverse; EINVAL when the QP is not attached with this
    /// `gid` and `lid`. Reply `Ok`.
    DetachMcast {
        /// A UD QP of the session.
        qp: Handle,
        /// The multicast GID (MGID), network order.
        gid: [u8; 16],
        /// The multicast LID; kept to name the attachment, otherwise unused.
        lid: u16,
    },
    /// Fault injection (`rdma-emu fault`): see [`super::fault`]. Reply `Faults`.
    Fault(super::fault::FaultRequest),
    /// Every QP of a device (all devices when `None`), as `rdma-emu top` and `rdma-emu res
    /// qp` show them. Reply `Qps`.
    QpList {
        /// The device's name (ENODEV when unknown), or `None` for every device.
        device: Option<String>,
    },
}

/// The daemon's answer to a [`RequestBody`], one variant per kind of result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReplyBody {
    /// Success with nothing to return.
    Ok,
    /// Answers `Hello`: the session may send other requests now.
    Hello {
        /// [`super::PROTOCOL_VERSION`].
        version: u32,
        /// Every device the daemon serves, in its order.
        devices: Vec<DeviceSummary>,
    },
    /// Answers `OpenDevice`. fds: async event pipe read end, doorbell eventfd, session page
    /// memfd.
    DeviceOpened {
        /// The new device context.
        ctx: Handle,
        /// What `QueryDevice` would answer, so opening costs one round trip.
        device_attr: DeviceAttr,
        /// What `QueryPort` answers for each port (one: port 1).
        ports: Vec<PortAttr>,
        /// The occupied GID table entries.
        gids: Vec<GidEntry>,
    },
    /// Answers `QueryDevice`.
    DeviceAttr(DeviceAttr),
    /// Answers `QueryPort`.
    PortAttr(PortAttr),
    /// Answers `QueryGid`.
    Gid(GidEntry),
    /// Answers `AllocPd`.
    Pd {
        /// The new PD.
        handle: Handle,
    },
    /// Answers `RegMr` and `ReregMr`.
    Mr {
        /// The new MR.
        handle: Handle,
        /// The key local SGEs name the MR with.
        lkey: u32,
        /// The key peers name the MR with (meaningful with a remote access right).
        rkey: u32,
    },
    /// Answers `CreateCompChannel`.
    CompChannel {
        /// The new channel; `CompEventRecord`s name CQs, not it.
        handle: Handle,
    },
    /// Answers `CreateCq` and `ResizeCq`. `fd[0]`: the ring memfd.
    Cq {
        /// The new CQ.
        handle: Handle,
        /// The depth the application may use (the `cqe` asked for).
        cqe: u32,
        /// The CQ ring's place in the memfd ([`CQE_LEN`](super::slot::CQE_LEN)-byte slots).
        ring: RingLayout,
    },
    /// Answers `CreateSrq`. `fd[0]`: the ring memfd.
    Srq {
        /// The new SRQ.
        handle: Handle,
        /// The SRQ's actual attributes (the device may raise `max_wr` and `max_sge`).
        attr: SrqAttr,
        /// The SRQ ring's place in the memfd.
        ring: RingLayout,
    },
    /// Answers `QuerySrq`.
    SrqAttr(SrqAttr),
    /// Answers `CreateQp`. `fd[0]`: the memfd with both rings.
    Qp {
        /// The new QP.
        handle: Handle,
        /// The QP number peers address (24 bits).
        qpn: u32,
        /// The QP's actual capabilities (at least those asked for).
        cap: QpCap,
        /// The send queue ring's place in the memfd (offset 0).
        sq: RingLayout,
        /// The receive queue ring's place, after the send queue's; `None` when the QP
        /// uses an SRQ.
        rq: Option<RingLayout>,
    },
    /// Answers `QueryQp`.
    QpAttrs {
        /// The QP's current attributes, all of them.
        attr: QpAttr,
        /// The attributes it was created with.
        init: QpInitAttr,
    },
    /// Answers `CreateAh`.
    Ah {
        /// The new AH; UD send WQEs name it in their `ah` field.
        handle: Handle,
    },
    /// Answers `AllocMw`.
    Mw {
        /// The new window.
        handle: Handle,
        /// Its initial rkey (the index in the high 24 bits); a bind changes the low byte.
        rkey: u32,
    },
    /// Answers `Stat`: one set per device, or the one QP's (empty: no such QP).
    Stat(Vec<CounterSet>),
    /// Answers `LinkShow`.
    Links(Vec<LinkInfo>),
    /// Answers `RequestBody::Cm`.
    Cm(super::cm::CmReply),
    /// Answers `Xrc` requests ([`super::xrc`]).
    Xrc(super::xrc::XrcReply),
    /// Answers `RequestBody::Fault`: the rules in place.
    Faults(Vec<super::fault::FaultInfo>),
    /// Answers `QpList`.
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
    /// First byte, in the client's address space.
    pub addr: u64,
    /// Bytes covered.
    pub len: u64,
    /// Where `addr` lies in the memfd.
    pub offset: u64,
}

/// The most [`SharedPages`] one `RegMr` may carry (one descriptor each).
pub const MAX_SHARED_PAGES: usize = 4;

/// One range of an `AdviseMr` request (`struct ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdviseRange {
    /// First byte, in the client's address space (the MR's IOVA space).
    pub addr: u64,
    /// Bytes from `addr`.
    pub length: u32,
    /// The local key of the ODP MR that covers the range.
    pub lkey: u32,
}

/// One device in the `Hello` reply (what `ibv_get_device_list` needs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSummary {
    /// The device's name (`rxe0`, `siw0`, …), as `OpenDevice` takes it.
    pub name: String,
    /// `__be64` as `ibv_get_device_guid` returns it: the value in host order.
    pub node_guid: u64,
    /// `enum ibv_transport_type`.
    pub transport: u32,
    /// `enum ibv_node_type`.
    pub node_type: u32,
}

/// `struct ibv_qp_init_attr`, with handles in place of pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpInitAttr {
    /// The CQ that gets send completions.
    pub send_cq: Handle,
    /// The CQ that gets receive completions.
    pub recv_cq: Handle,
    /// The SRQ the QP receives from; `None`: the QP has its own receive queue.
    pub srq: Option<Handle>,
    /// The queue sizes asked for.
    pub cap: QpCap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    /// Every send WR completes into the CQ, not only those with IBV_SEND_SIGNALED.
    pub sq_sig_all: bool,
}

/// Named counters of one device or QP (`rdma-emu stat`), named like rxe's hw_counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSet {
    /// The device the counters are of.
    pub device: String,
    /// The QP they are of; `None` for the device's own.
    pub qpn: Option<u32>,
    /// (name, value) pairs, named like rxe's hw_counters, in a stable order.
    pub counters: Vec<(String, u64)>,
}

/// One QP as `rdma-emu top` and `rdma-emu res qp` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpSummary {
    /// The QP's device.
    pub device: String,
    /// The QP number.
    pub qpn: u32,
    /// The owning process (0 when unknown).
    pub pid: u32,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    /// `enum ibv_qp_state`.
    pub state: u32,
    /// RC/UC: the remote QP, once set.
    pub dest_qpn: Option<u32>,
    /// RC/UC: the peer's address, once past RTR.
    pub peer: Option<std::net::SocketAddr>,
    /// Requester: the PSN the next new packet gets.
    pub next_psn: Option<u32>,
    /// Requester: the oldest PSN not yet acknowledged (`next_psn` when idle).
    pub unacked_psn: Option<u32>,
    /// Responder: the PSN expected next.
    pub expected_psn: Option<u32>,
    /// Packets sent and not yet acknowledged.
    pub in_flight: u32,
    /// Send WRs the core holds and has not completed yet.
    pub send_queued: u32,
    /// Receive WRs posted and not yet consumed.
    pub recv_posted: u32,
    /// Whether the requester waits out an RNR NAK's timer.
    pub rnr_waiting: bool,
    /// Packets sent.
    pub sent_pkts: u64,
    /// Packets received.
    pub rcvd_pkts: u64,
    /// Packets sent again (timeouts, NAKs).
    pub retransmitted_pkts: u64,
    /// RNR NAKs received.
    pub rnr_naks_rcvd: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// Sequence error NAKs received.
    pub seq_naks_rcvd: u64,
}

/// One device as `rdma-emu link show` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkInfo {
    /// The device's name.
    pub name: String,
    /// `rxe` or `siw`.
    pub link_type: String,
    /// The network interface it runs on.
    pub netdev: String,
    /// `enum ibv_port_state`.
    pub state: u32,
    /// `enum ibv_mtu`.
    pub active_mtu: u32,
    /// The interface's MTU, in bytes.
    pub netdev_mtu: u32,
    /// The occupied GID table entries.
    pub gids: Vec<GidEntry>,
    /// siw: whether the device asks for MPA CRCs (C bit); `None` for rxe.
    pub mpa_crc: Option<bool>,
    /// siw: whether the device asks for MPA markers (M bit); `None` for rxe.
    pub mpa_markers: Option<bool>,
    /// How the device reaches the network: rxe `udp`, `packet` or `xdp mode <mode>` (an
    /// XDP program attached); siw `tcp` or `smoltcp`.
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
    /// Encode into a buffer of at most [`super::MAX_MESSAGE_LEN`] bytes.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode(self)
    }

    /// Decode one datagram. Never panics, whatever the bytes.
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
    /// postcard refused the value (it cannot for these types; kept so no path panics).
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
