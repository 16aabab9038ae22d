//! Numbering from `<infiniband/verbs.h>` (rdma-core v44) used by the client protocol.
//!
//! Values cross the protocol as the plain integers libibverbs uses, so the shim copies
//! them and the daemon translates them into the core's types in one place.

/// `enum ibv_wr_opcode`.
pub mod wr_opcode {
    pub const RDMA_WRITE: u8 = 0;
    pub const RDMA_WRITE_WITH_IMM: u8 = 1;
    pub const SEND: u8 = 2;
    pub const SEND_WITH_IMM: u8 = 3;
    pub const RDMA_READ: u8 = 4;
    pub const ATOMIC_CMP_AND_SWP: u8 = 5;
    pub const ATOMIC_FETCH_AND_ADD: u8 = 6;
    pub const LOCAL_INV: u8 = 7;
    pub const BIND_MW: u8 = 8;
    pub const SEND_WITH_INV: u8 = 9;
    pub const TSO: u8 = 10;
    pub const ATOMIC_WRITE: u8 = 15;
}

/// `enum ibv_send_flags`.
pub mod send_flags {
    pub const FENCE: u32 = 1 << 0;
    pub const SIGNALED: u32 = 1 << 1;
    pub const SOLICITED: u32 = 1 << 2;
    pub const INLINE: u32 = 1 << 3;
    pub const IP_CSUM: u32 = 1 << 4;
}

/// `enum ibv_wc_status`.
pub mod wc_status {
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_QP_OP_ERR: u32 = 2;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    pub const MW_BIND_ERR: u32 = 6;
    pub const BAD_RESP_ERR: u32 = 7;
    pub const LOC_ACCESS_ERR: u32 = 8;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const REM_OP_ERR: u32 = 11;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
    pub const FATAL_ERR: u32 = 19;
    pub const GENERAL_ERR: u32 = 21;
}

/// `enum ibv_wc_opcode`.
pub mod wc_opcode {
    pub const SEND: u32 = 0;
    pub const RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const COMP_SWAP: u32 = 3;
    pub const FETCH_ADD: u32 = 4;
    pub const BIND_MW: u32 = 5;
    pub const LOCAL_INV: u32 = 6;
    pub const RECV: u32 = 1 << 7;
    pub const RECV_RDMA_WITH_IMM: u32 = RECV + 1;
}

/// `enum ibv_wc_flags`.
pub mod wc_flags {
    pub const GRH: u32 = 1 << 0;
    pub const WITH_IMM: u32 = 1 << 1;
    pub const IP_CSUM_OK: u32 = 1 << 2;
    pub const WITH_INV: u32 = 1 << 3;
}

/// `enum ibv_event_type`.
pub mod event_type {
    pub const CQ_ERR: u32 = 0;
    pub const QP_FATAL: u32 = 1;
    pub const QP_REQ_ERR: u32 = 2;
    pub const QP_ACCESS_ERR: u32 = 3;
    pub const COMM_EST: u32 = 4;
    pub const SQ_DRAINED: u32 = 5;
    pub const PATH_MIG: u32 = 6;
    pub const PATH_MIG_ERR: u32 = 7;
    pub const DEVICE_FATAL: u32 = 8;
    pub const PORT_ACTIVE: u32 = 9;
    pub const PORT_ERR: u32 = 10;
    pub const LID_CHANGE: u32 = 11;
    pub const PKEY_CHANGE: u32 = 12;
    pub const SM_CHANGE: u32 = 13;
    pub const SRQ_ERR: u32 = 14;
    pub const SRQ_LIMIT_REACHED: u32 = 15;
    pub const QP_LAST_WQE_REACHED: u32 = 16;
    pub const CLIENT_REREGISTER: u32 = 17;
    pub const GID_CHANGE: u32 = 18;
    pub const WQ_FATAL: u32 = 19;
}

/// `enum ibv_qp_type`.
pub mod qp_type {
    pub const RC: u32 = 2;
    pub const UC: u32 = 3;
    pub const UD: u32 = 4;
    pub const RAW_PACKET: u32 = 8;
    pub const XRC_SEND: u32 = 9;
    pub const XRC_RECV: u32 = 10;
}

/// `enum ibv_qp_state`.
pub mod qp_state {
    pub const RESET: u32 = 0;
    pub const INIT: u32 = 1;
    pub const RTR: u32 = 2;
    pub const RTS: u32 = 3;
    pub const SQD: u32 = 4;
    pub const SQE: u32 = 5;
    pub const ERR: u32 = 6;
}

/// `enum ibv_qp_attr_mask`.
pub mod qp_attr_mask {
    pub const STATE: u32 = 1 << 0;
    pub const CUR_STATE: u32 = 1 << 1;
    pub const EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const ALT_PATH: u32 = 1 << 14;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    pub const CAP: u32 = 1 << 19;
    pub const DEST_QPN: u32 = 1 << 20;
    pub const RATE_LIMIT: u32 = 1 << 25;
}

/// `enum ibv_access_flags`.
pub mod access {
    pub const LOCAL_WRITE: u32 = 1 << 0;
    pub const REMOTE_WRITE: u32 = 1 << 1;
    pub const REMOTE_READ: u32 = 1 << 2;
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    pub const MW_BIND: u32 = 1 << 4;
    pub const ZERO_BASED: u32 = 1 << 5;
    pub const ON_DEMAND: u32 = 1 << 6;
    pub const HUGETLB: u32 = 1 << 7;
    pub const RELAXED_ORDERING: u32 = 1 << 20;
}

/// `enum ibv_mtu` (1 = 256 … 5 = 4096).
pub mod mtu {
    pub const MTU_256: u32 = 1;
    pub const MTU_512: u32 = 2;
    pub const MTU_1024: u32 = 3;
    pub const MTU_2048: u32 = 4;
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

/// `enum ibv_port_state`.
pub mod port_state {
    pub const DOWN: u32 = 1;
    pub const INIT: u32 = 2;
    pub const ARMED: u32 = 3;
    pub const ACTIVE: u32 = 4;
}

/// `enum ibv_node_type` / `enum ibv_transport_type`.
pub mod node {
    pub const NODE_CA: u32 = 1;
    pub const NODE_RNIC: u32 = 4;
    pub const TRANSPORT_IB: u32 = 0;
    pub const TRANSPORT_IWARP: u32 = 1;
}

/// `IBV_LINK_LAYER_*`.
pub mod link_layer {
    pub const UNSPECIFIED: u8 = 0;
    pub const INFINIBAND: u8 = 1;
    pub const ETHERNET: u8 = 2;
}

/// `enum ibv_atomic_cap`.
pub mod atomic_cap {
    pub const NONE: u32 = 0;
    pub const HCA: u32 = 1;
    pub const GLOB: u32 = 2;
}

/// `enum ibv_srq_attr_mask`.
pub mod srq_attr_mask {
    pub const MAX_WR: u32 = 1 << 0;
    pub const LIMIT: u32 = 1 << 1;
}

/// `enum ibv_mw_type`.
pub mod mw_type {
    pub const TYPE_1: u32 = 1;
    pub const TYPE_2: u32 = 2;
}

/// GID types as `ibv_query_gid_type` reports them.
pub mod gid_type {
    pub const IB: u32 = 0;
    pub const ROCE_V1: u32 = 1;
    pub const ROCE_V2: u32 = 2;
}
