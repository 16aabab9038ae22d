//! Numbering from `<infiniband/verbs.h>` (rdma-core v44) used by the client protocol.
//!
//! Values cross the protocol as the plain integers libibverbs uses, so the shim copies
//! them and the daemon translates them into the core's types in one place.

/// `enum ibv_wr_opcode`: the `opcode` byte of a send WQE ([`super::slot`]).
pub mod wr_opcode {
    /// IBV_WR_RDMA_WRITE: write the SGEs' bytes at `remote_addr` under `rkey`.
    pub const RDMA_WRITE: u8 = 0;
    /// IBV_WR_RDMA_WRITE_WITH_IMM: an RDMA WRITE that also consumes a receive at the
    /// responder and hands it `imm_data`.
    pub const RDMA_WRITE_WITH_IMM: u8 = 1;
    /// IBV_WR_SEND: a message into the responder's next receive.
    pub const SEND: u8 = 2;
    /// IBV_WR_SEND_WITH_IMM: a SEND carrying `imm_data` into the receive completion.
    pub const SEND_WITH_IMM: u8 = 3;
    /// IBV_WR_RDMA_READ: read `remote_addr` under `rkey` into the local SGEs.
    pub const RDMA_READ: u8 = 4;
    /// IBV_WR_ATOMIC_CMP_AND_SWP: 8 bytes at `remote_addr` become `swap` if they equal
    /// `compare_add`; the old value lands in the local SGE.
    pub const ATOMIC_CMP_AND_SWP: u8 = 5;
    /// IBV_WR_ATOMIC_FETCH_AND_ADD: add `compare_add` to 8 bytes at `remote_addr`; the old
    /// value lands in the local SGE.
    pub const ATOMIC_FETCH_AND_ADD: u8 = 6;
    /// IBV_WR_LOCAL_INV: invalidate the local key in `imm_data`/`invalidate_rkey`.
    pub const LOCAL_INV: u8 = 7;
    /// IBV_WR_BIND_MW: bind a memory window (the slot layout of a bind is in
    /// [`crate::client::slot::SendWqeRepr`]).
    pub const BIND_MW: u8 = 8;
    /// IBV_WR_SEND_WITH_INV: a SEND that invalidates the responder's rkey in
    /// `invalidate_rkey`.
    pub const SEND_WITH_INV: u8 = 9;
    /// IBV_WR_TSO: TCP segmentation offload on raw packet QPs; the core has no such
    /// opcode, so the WQE completes in error.
    pub const TSO: u8 = 10;
    /// IBV_WR_FLUSH: make `remote_addr` .. + `compare_add` (or the whole region, by the
    /// level in `swap`) globally visible or persistent at the responder (IBA Memory
    /// Placement Extensions); RC only.
    pub const FLUSH: u8 = 14;
    /// IBV_WR_ATOMIC_WRITE: write the 8 bytes in `compare_add` (little-endian: the
    /// application's byte order) at `remote_addr` as one (IBA Memory Placement
    /// Extensions); RC only.
    pub const ATOMIC_WRITE: u8 = 15;
}

/// `enum ibv_send_flags`: the `send_flags` word of a send WQE.
pub mod send_flags {
    /// IBV_SEND_FENCE: wait for earlier RDMA READs and atomics to complete first.
    pub const FENCE: u32 = 1 << 0;
    /// IBV_SEND_SIGNALED: write a CQE on success (errors always complete; see
    /// `sq_sig_all`).
    pub const SIGNALED: u32 = 1 << 1;
    /// IBV_SEND_SOLICITED: set the SE bit, waking a responder armed for solicited events.
    pub const SOLICITED: u32 = 1 << 2;
    /// IBV_SEND_INLINE: the payload is in the slot (`inline_len` bytes), not in SGEs.
    pub const INLINE: u32 = 1 << 3;
    /// IBV_SEND_IP_CSUM: checksum offload on raw packet / UD QPs.
    pub const IP_CSUM: u32 = 1 << 4;
}

/// `enum ibv_wc_status`: the `status` of a CQE.
pub mod wc_status {
    /// IBV_WC_SUCCESS: the work request completed.
    pub const SUCCESS: u32 = 0;
    /// IBV_WC_LOC_LEN_ERR: a length did not fit (receive buffer too short, too many SGEs,
    /// inline data too long); the daemon also uses it for a WQE its checks refuse.
    pub const LOC_LEN_ERR: u32 = 1;
    /// IBV_WC_LOC_QP_OP_ERR: the WQE is not valid for the QP (its state or type).
    pub const LOC_QP_OP_ERR: u32 = 2;
    /// IBV_WC_LOC_PROT_ERR: a local SGE's lkey, range or PD does not allow the access.
    pub const LOC_PROT_ERR: u32 = 4;
    /// IBV_WC_WR_FLUSH_ERR: the QP went to error before this WQE was done.
    pub const WR_FLUSH_ERR: u32 = 5;
    /// IBV_WC_MW_BIND_ERR: a memory window bind was refused (MR rights, range, window
    /// state).
    pub const MW_BIND_ERR: u32 = 6;
    /// IBV_WC_BAD_RESP_ERR: the responder answered with an unexpected opcode or length.
    pub const BAD_RESP_ERR: u32 = 7;
    /// IBV_WC_LOC_ACCESS_ERR: a local access error on the responder side (e.g. the
    /// incoming data hit a protected receive buffer).
    pub const LOC_ACCESS_ERR: u32 = 8;
    /// IBV_WC_REM_INV_REQ_ERR: the responder found the request invalid (NAK "invalid
    /// request": bad opcode, length beyond the receive).
    pub const REM_INV_REQ_ERR: u32 = 9;
    /// IBV_WC_REM_ACCESS_ERR: the responder refused the access (bad rkey, range, or
    /// rights).
    pub const REM_ACCESS_ERR: u32 = 10;
    /// IBV_WC_REM_OP_ERR: the responder could not carry out the operation (NAK "remote
    /// operational error").
    pub const REM_OP_ERR: u32 = 11;
    /// IBV_WC_RETRY_EXC_ERR: `retry_cnt` retransmissions went unanswered (timeouts or
    /// sequence NAKs).
    pub const RETRY_EXC_ERR: u32 = 12;
    /// IBV_WC_RNR_RETRY_EXC_ERR: `rnr_retry` RNR NAKs in a row (no receive posted).
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
    /// IBV_WC_FATAL_ERR: the device failed; the daemon uses it when the device is gone.
    pub const FATAL_ERR: u32 = 19;
    /// IBV_WC_GENERAL_ERR: an error no other status describes.
    pub const GENERAL_ERR: u32 = 21;
}

/// `enum ibv_wc_opcode`: the `opcode` of a CQE.
pub mod wc_opcode {
    /// IBV_WC_SEND: a SEND (any variant) of the send queue completed.
    pub const SEND: u32 = 0;
    /// IBV_WC_RDMA_WRITE: an RDMA WRITE (with or without immediate) completed.
    pub const RDMA_WRITE: u32 = 1;
    /// IBV_WC_RDMA_READ: an RDMA READ completed; its data is in the local SGEs.
    pub const RDMA_READ: u32 = 2;
    /// IBV_WC_COMP_SWAP: an atomic compare-and-swap completed.
    pub const COMP_SWAP: u32 = 3;
    /// IBV_WC_FETCH_ADD: an atomic fetch-and-add completed.
    pub const FETCH_ADD: u32 = 4;
    /// IBV_WC_BIND_MW: a memory window bind completed.
    pub const BIND_MW: u32 = 5;
    /// IBV_WC_LOCAL_INV: a local invalidate completed.
    pub const LOCAL_INV: u32 = 6;
    /// IBV_WC_RECV: a receive consumed by a SEND. Bit 7 marks every receive-side opcode,
    /// which is how a CQE is told to come from the receive queue.
    pub const RECV: u32 = 1 << 7;
    /// IBV_WC_RECV_RDMA_WITH_IMM: a receive consumed by an RDMA WRITE with immediate.
    pub const RECV_RDMA_WITH_IMM: u32 = RECV + 1;
}

/// `enum ibv_wc_flags`: the `wc_flags` of a CQE.
pub mod wc_flags {
    /// IBV_WC_GRH: the first 40 bytes of the receive buffer hold the GRH (UD receives).
    pub const GRH: u32 = 1 << 0;
    /// IBV_WC_WITH_IMM: `imm_data` is valid.
    pub const WITH_IMM: u32 = 1 << 1;
    /// IBV_WC_IP_CSUM_OK: the device verified the IP checksum of a raw/UD packet.
    pub const IP_CSUM_OK: u32 = 1 << 2;
    /// IBV_WC_WITH_INV: the SEND invalidated the rkey now in `imm_data`.
    pub const WITH_INV: u32 = 1 << 3;
}

/// `enum ibv_event_type`: the `event_type` of an [`super::AsyncEventRecord`].
pub mod event_type {
    /// IBV_EVENT_CQ_ERR: the CQ overran (its ring was full) or its ring is broken.
    pub const CQ_ERR: u32 = 0;
    /// IBV_EVENT_QP_FATAL: the QP went to error for a reason not tied to one WQE.
    pub const QP_FATAL: u32 = 1;
    /// IBV_EVENT_QP_REQ_ERR: the responder saw an invalid request; the QP is in error.
    pub const QP_REQ_ERR: u32 = 2;
    /// IBV_EVENT_QP_ACCESS_ERR: the responder saw an access violation; the QP is in
    /// error.
    pub const QP_ACCESS_ERR: u32 = 3;
    /// IBV_EVENT_COMM_EST: the first packet arrived on a QP in RTR.
    pub const COMM_EST: u32 = 4;
    /// IBV_EVENT_SQ_DRAINED: a QP moved to SQD has no outstanding send WQE left.
    pub const SQ_DRAINED: u32 = 5;
    /// IBV_EVENT_PATH_MIG: the QP migrated to its alternate path.
    pub const PATH_MIG: u32 = 6;
    /// IBV_EVENT_PATH_MIG_ERR: migrating to the alternate path failed.
    pub const PATH_MIG_ERR: u32 = 7;
    /// IBV_EVENT_DEVICE_FATAL: the device is unusable; the daemon sends it to every
    /// client when it stops.
    pub const DEVICE_FATAL: u32 = 8;
    /// IBV_EVENT_PORT_ACTIVE: the port became ACTIVE (its interface came up).
    pub const PORT_ACTIVE: u32 = 9;
    /// IBV_EVENT_PORT_ERR: the port left ACTIVE (its interface went down).
    pub const PORT_ERR: u32 = 10;
    /// IBV_EVENT_LID_CHANGE: the port's LID changed (InfiniBand only).
    pub const LID_CHANGE: u32 = 11;
    /// IBV_EVENT_PKEY_CHANGE: the port's P_Key table changed.
    pub const PKEY_CHANGE: u32 = 12;
    /// IBV_EVENT_SM_CHANGE: the subnet manager changed (InfiniBand only).
    pub const SM_CHANGE: u32 = 13;
    /// IBV_EVENT_SRQ_ERR: the SRQ failed; its QPs see errors.
    pub const SRQ_ERR: u32 = 14;
    /// IBV_EVENT_SRQ_LIMIT_REACHED: the SRQ's posted receives fell below `srq_limit`;
    /// the limit disarms until set again with `ModifySrq`.
    pub const SRQ_LIMIT_REACHED: u32 = 15;
    /// IBV_EVENT_QP_LAST_WQE_REACHED: a QP attached to an SRQ went to error and will
    /// take no more receives from it.
    pub const QP_LAST_WQE_REACHED: u32 = 16;
    /// IBV_EVENT_CLIENT_REREGISTER: the SM asks clients to register again (InfiniBand
    /// only).
    pub const CLIENT_REREGISTER: u32 = 17;
    /// IBV_EVENT_GID_CHANGE: the port's GID table changed (an address came or went).
    pub const GID_CHANGE: u32 = 18;
    /// IBV_EVENT_WQ_FATAL: a work queue (`ibv_wq`) failed.
    pub const WQ_FATAL: u32 = 19;
}

/// `enum ibv_qp_type`: `QpInitAttr::qp_type`.
pub mod qp_type {
    /// IBV_QPT_RC: reliable connected.
    pub const RC: u32 = 2;
    /// IBV_QPT_UC: unreliable connected (no ACKs, no READ or atomics).
    pub const UC: u32 = 3;
    /// IBV_QPT_UD: unreliable datagram (SENDs to an address handle per WQE).
    pub const UD: u32 = 4;
    /// IBV_QPT_RAW_PACKET: raw Ethernet frames; the daemon refuses it (EOPNOTSUPP).
    pub const RAW_PACKET: u32 = 8;
    /// IBV_QPT_XRC_SEND: XRC initiator (RoCE devices; siw refuses it, EOPNOTSUPP).
    pub const XRC_SEND: u32 = 9;
    /// IBV_QPT_XRC_RECV: XRC target, made by `Xrc(CreateTgtQp)`.
    pub const XRC_RECV: u32 = 10;
}

/// `enum ibv_qp_state`: `QpAttr::qp_state` and `cur_qp_state` (IBA 10.3.1).
pub mod qp_state {
    /// IBV_QPS_RESET: the state after creation; queues empty, nothing sent or received.
    pub const RESET: u32 = 0;
    /// IBV_QPS_INIT: receives may be posted; nothing is processed yet.
    pub const INIT: u32 = 1;
    /// IBV_QPS_RTR: ready to receive; the path and remote QP are known.
    pub const RTR: u32 = 2;
    /// IBV_QPS_RTS: ready to send.
    pub const RTS: u32 = 3;
    /// IBV_QPS_SQD: send queue drain; no new send WQE starts.
    pub const SQD: u32 = 4;
    /// IBV_QPS_SQE: send queue error (UC/UD): a send failed, receives still work.
    pub const SQE: u32 = 5;
    /// IBV_QPS_ERR: error; every outstanding WQE completes with IBV_WC_WR_FLUSH_ERR.
    pub const ERR: u32 = 6;
}

/// `enum ibv_qp_attr_mask`: which fields of a `QpAttr` a `ModifyQp` sets.
pub mod qp_attr_mask {
    /// IBV_QP_STATE: `qp_state`, the state to move to.
    pub const STATE: u32 = 1 << 0;
    /// IBV_QP_CUR_STATE: `cur_qp_state`, the state the caller believes the QP is in.
    pub const CUR_STATE: u32 = 1 << 1;
    /// IBV_QP_EN_SQD_ASYNC_NOTIFY: `en_sqd_async_notify`, raise SQ_DRAINED in SQD.
    pub const EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    /// IBV_QP_ACCESS_FLAGS: `qp_access_flags`, the remote operations the responder
    /// allows.
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    /// IBV_QP_PKEY_INDEX: `pkey_index`.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// IBV_QP_PORT: `port_num`.
    pub const PORT: u32 = 1 << 5;
    /// IBV_QP_QKEY: `qkey` (UD).
    pub const QKEY: u32 = 1 << 6;
    /// IBV_QP_AV: `ah_attr`, the primary path to the remote QP.
    pub const AV: u32 = 1 << 7;
    /// IBV_QP_PATH_MTU: `path_mtu`.
    pub const PATH_MTU: u32 = 1 << 8;
    /// IBV_QP_TIMEOUT: `timeout`, the local ACK timeout exponent.
    pub const TIMEOUT: u32 = 1 << 9;
    /// IBV_QP_RETRY_CNT: `retry_cnt`.
    pub const RETRY_CNT: u32 = 1 << 10;
    /// IBV_QP_RNR_RETRY: `rnr_retry`.
    pub const RNR_RETRY: u32 = 1 << 11;
    /// IBV_QP_RQ_PSN: `rq_psn`, the first PSN the responder expects.
    pub const RQ_PSN: u32 = 1 << 12;
    /// IBV_QP_MAX_QP_RD_ATOMIC: `max_rd_atomic`, READs/atomics outstanding as requester.
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    /// IBV_QP_ALT_PATH: `alt_ah_attr`, `alt_pkey_index`, `alt_port_num`, `alt_timeout`.
    pub const ALT_PATH: u32 = 1 << 14;
    /// IBV_QP_MIN_RNR_TIMER: `min_rnr_timer`, the delay this responder's RNR NAKs ask for.
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    /// IBV_QP_SQ_PSN: `sq_psn`, the first PSN the requester sends.
    pub const SQ_PSN: u32 = 1 << 16;
    /// IBV_QP_MAX_DEST_RD_ATOMIC: `max_dest_rd_atomic`, READs/atomics accepted as
    /// responder.
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    /// IBV_QP_PATH_MIG_STATE: `path_mig_state`.
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    /// IBV_QP_CAP: `cap` (queue sizes; resizing is not supported by most devices).
    pub const CAP: u32 = 1 << 19;
    /// IBV_QP_DEST_QPN: `dest_qp_num`, the remote QP (RC/UC).
    pub const DEST_QPN: u32 = 1 << 20;
    /// IBV_QP_RATE_LIMIT: `rate_limit`, the packet pacing rate in kbit/s.
    pub const RATE_LIMIT: u32 = 1 << 25;
}

/// `enum ibv_access_flags`: `RegMr::access` and `QpAttr::qp_access_flags`.
pub mod access {
    /// IBV_ACCESS_LOCAL_WRITE: the device may write the region (receives, READ
    /// responses); required with any remote write or atomic right.
    pub const LOCAL_WRITE: u32 = 1 << 0;
    /// IBV_ACCESS_REMOTE_WRITE: peers may RDMA WRITE the region.
    pub const REMOTE_WRITE: u32 = 1 << 1;
    /// IBV_ACCESS_REMOTE_READ: peers may RDMA READ the region.
    pub const REMOTE_READ: u32 = 1 << 2;
    /// IBV_ACCESS_REMOTE_ATOMIC: peers may run atomics on the region.
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    /// IBV_ACCESS_MW_BIND: memory windows may be bound to the region.
    pub const MW_BIND: u32 = 1 << 4;
    /// IBV_ACCESS_ZERO_BASED: remote addresses are offsets from the region's start.
    pub const ZERO_BASED: u32 = 1 << 5;
    /// IBV_ACCESS_ON_DEMAND: on-demand paging. The region's pages need not be mapped at
    /// registration (no EFAULT probe), it never uses shared pages, and address 0 with
    /// length `u64::MAX` registers an implicit region over the whole address space.
    /// EOPNOTSUPP on a device whose [`super::DeviceAttr::odp_caps`] are zero.
    pub const ON_DEMAND: u32 = 1 << 6;
    /// IBV_ACCESS_HUGETLB: the ODP region is backed by huge pages (a hint); EINVAL
    /// without ON_DEMAND.
    pub const HUGETLB: u32 = 1 << 7;
    /// IBV_ACCESS_RELAXED_ORDERING: the device may reorder its PCIe writes to the region.
    /// An optional hint (`IBV_ACCESS_OPTIONAL_RANGE`): the shim strips it, as rdma-core
    /// does for devices that ignore it.
    pub const RELAXED_ORDERING: u32 = 1 << 20;
}

/// `enum ibv_rereg_mr_flags`: what `ReregMr::flags` changes.
pub mod rereg_flags {
    /// IBV_REREG_MR_CHANGE_TRANSLATION: a new address and length; rxe refuses it
    /// (EOPNOTSUPP), and so does rdma-emu.
    pub const CHANGE_TRANSLATION: u32 = 1 << 0;
    /// IBV_REREG_MR_CHANGE_PD: the MR moves to another PD of the same context.
    pub const CHANGE_PD: u32 = 1 << 1;
    /// IBV_REREG_MR_CHANGE_ACCESS: new `IBV_ACCESS_*` rights.
    pub const CHANGE_ACCESS: u32 = 1 << 2;
}

/// `enum ibv_odp_general_caps` and `enum ibv_odp_transport_cap_bits`
/// ([`super::OdpCaps`]).
pub mod odp {
    /// IBV_ODP_SUPPORT: ODP regions can be registered.
    pub const SUPPORT: u64 = 1 << 0;
    /// IBV_ODP_SUPPORT_IMPLICIT: implicit ODP regions (the whole address space).
    pub const SUPPORT_IMPLICIT: u64 = 1 << 1;
    /// IBV_ODP_SUPPORT_SEND: SEND from ODP memory.
    pub const SEND: u32 = 1 << 0;
    /// IBV_ODP_SUPPORT_RECV: receive into ODP memory.
    pub const RECV: u32 = 1 << 1;
    /// IBV_ODP_SUPPORT_WRITE: RDMA WRITE to and from ODP memory.
    pub const WRITE: u32 = 1 << 2;
    /// IBV_ODP_SUPPORT_READ: RDMA READ to and from ODP memory.
    pub const READ: u32 = 1 << 3;
    /// IBV_ODP_SUPPORT_ATOMIC: atomics on ODP memory.
    pub const ATOMIC: u32 = 1 << 4;
    /// IBV_ODP_SUPPORT_SRQ_RECV: receive through an SRQ into ODP memory.
    pub const SRQ_RECV: u32 = 1 << 5;
    /// IBV_ODP_SUPPORT_FLUSH: FLUSH targeting ODP memory (rdma-core v44 lacks the name).
    pub const FLUSH: u32 = 1 << 6;
    /// IBV_ODP_SUPPORT_ATOMIC_WRITE: ATOMIC WRITE to ODP memory.
    pub const ATOMIC_WRITE: u32 = 1 << 7;
}

/// `enum ibv_advise_mr_advice` and `IBV_ADVISE_MR_FLAG_*` (`AdviseMr`).
pub mod advise {
    /// IBV_ADVISE_MR_ADVICE_PREFETCH: fault the pages in for reading.
    pub const PREFETCH: u32 = 0;
    /// IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE: fault the pages in for writing.
    pub const PREFETCH_WRITE: u32 = 1;
    /// IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: map what is present, fault nothing in.
    pub const PREFETCH_NO_FAULT: u32 = 2;
    /// IBV_ADVISE_MR_FLAG_FLUSH: return after the prefetch is done.
    pub const FLAG_FLUSH: u32 = 1 << 0;
}

/// `enum ibv_mtu` (1 = 256 … 5 = 4096).
pub mod mtu {
    /// IBV_MTU_256: 256-byte payloads.
    pub const MTU_256: u32 = 1;
    /// IBV_MTU_512: 512-byte payloads.
    pub const MTU_512: u32 = 2;
    /// IBV_MTU_1024: 1024-byte payloads.
    pub const MTU_1024: u32 = 3;
    /// IBV_MTU_2048: 2048-byte payloads.
    pub const MTU_2048: u32 = 4;
    /// IBV_MTU_4096: 4096-byte payloads.
    pub const MTU_4096: u32 = 5;

    /// The byte count of an `ibv_mtu` value, `None` for values outside 1..=5.
    pub fn to_bytes(mtu: u32) -> Option<u32> {
        (MTU_256..=MTU_4096).contains(&mtu).then(|| 128 << mtu)
    }

    /// The `ibv_mtu` value of a byte count, `None` unless it is 256, 512, …, 4096.
    pub fn from_bytes(bytes: u32) -> Option<u32> {
        (MTU_256..=MTU_4096).find(|&m| 128 << m == bytes)
    }
}

/// `enum ibv_port_state`: `PortAttr::state`, `LinkInfo::state`.
pub mod port_state {
    /// IBV_PORT_DOWN: no link (the interface is down).
    pub const DOWN: u32 = 1;
    /// IBV_PORT_INIT: link up, not yet configured by an SM (InfiniBand).
    pub const INIT: u32 = 2;
    /// IBV_PORT_ARMED: configured, waiting to become active (InfiniBand).
    pub const ARMED: u32 = 3;
    /// IBV_PORT_ACTIVE: the port passes traffic.
    pub const ACTIVE: u32 = 4;
}

/// `enum ibv_node_type` / `enum ibv_transport_type`: `DeviceSummary::node_type` and
/// `transport`.
pub mod node {
    /// IBV_NODE_CA: a channel adapter (RoCE and InfiniBand devices; rxe).
    pub const NODE_CA: u32 = 1;
    /// IBV_NODE_RNIC: an RDMA-enabled NIC (iWARP devices; siw).
    pub const NODE_RNIC: u32 = 4;
    /// IBV_TRANSPORT_IB: the InfiniBand transport (RoCE included).
    pub const TRANSPORT_IB: u32 = 0;
    /// IBV_TRANSPORT_IWARP: the iWARP transport.
    pub const TRANSPORT_IWARP: u32 = 1;
}

/// `IBV_LINK_LAYER_*`: `PortAttr::link_layer`.
pub mod link_layer {
    /// IBV_LINK_LAYER_UNSPECIFIED: the device does not say (read as InfiniBand).
    pub const UNSPECIFIED: u8 = 0;
    /// IBV_LINK_LAYER_INFINIBAND: an InfiniBand fabric.
    pub const INFINIBAND: u8 = 1;
    /// IBV_LINK_LAYER_ETHERNET: Ethernet (RoCE, iWARP); every emulated device.
    pub const ETHERNET: u8 = 2;
}

/// `enum ibv_atomic_cap`: `DeviceAttr::atomic_cap`.
pub mod atomic_cap {
    /// IBV_ATOMIC_NONE: no atomic operations.
    pub const NONE: u32 = 0;
    /// IBV_ATOMIC_HCA: atomics are atomic among this device's own operations only.
    pub const HCA: u32 = 1;
    /// IBV_ATOMIC_GLOB: atomics are atomic also against the CPU and other devices.
    pub const GLOB: u32 = 2;
}

/// `enum ibv_srq_attr_mask`: which fields of an `SrqAttr` a `ModifySrq` sets.
pub mod srq_attr_mask {
    /// IBV_SRQ_MAX_WR: set the SRQ's `max_wr` (EINVAL below the receives it holds or
    /// above the device's `max_srq_wr`).
    pub const MAX_WR: u32 = 1 << 0;
    /// IBV_SRQ_LIMIT: arm the limit event at `srq_limit` posted receives.
    pub const LIMIT: u32 = 1 << 1;
}

/// `enum ibv_mw_type`: `AllocMw::mw_type`.
pub mod mw_type {
    /// IBV_MW_TYPE_1: bound with `ibv_bind_mw` (outside the send queue), PD-associated.
    pub const TYPE_1: u32 = 1;
    /// IBV_MW_TYPE_2: bound with an IBV_WR_BIND_MW WQE, QP-associated.
    pub const TYPE_2: u32 = 2;
}

/// GID types as `ibv_query_gid_type` reports them.
pub mod gid_type {
    /// IBV_GID_TYPE_IB: an InfiniBand GID.
    pub const IB: u32 = 0;
    /// IBV_GID_TYPE_ROCE_V1: RoCE v1 (GRH over Ethernet, ethertype 0x8915).
    pub const ROCE_V1: u32 = 1;
    /// IBV_GID_TYPE_ROCE_V2: RoCE v2 (over UDP/IP, port 4791).
    pub const ROCE_V2: u32 = 2;
}
