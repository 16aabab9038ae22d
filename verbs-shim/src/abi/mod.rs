//! `#[repr(C)]` mirrors of the rdma-core v44 structs the shim reads or writes
//! (`/usr/include/infiniband/verbs.h`). Field names are the C names, so the layout
//! test (`tests/abi_layout.rs`) can compare every `offsetof` with the system header.
//!
//! This file holds the objects (context, device, PD, MR, MW, CQ, QP, SRQ, AH, completion
//! channel), the structs that point to them (init attributes, work requests) and the ops
//! tables; `attr.rs` holds the value-only attribute structs, re-exported here.
//!
//! Only x86_64/aarch64 Linux (LP64, glibc) is targeted: `pthread_mutex_t` and
//! `pthread_cond_t` come from `libc`.
#![allow(non_camel_case_types, non_snake_case)]

mod attr;

pub use attr::*;

use core::ffi::{c_char, c_int, c_uint, c_void};
use libc::{pthread_cond_t, pthread_mutex_t};

/// `struct ibv_async_event`: the element union is one pointer-sized word.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: *mut c_void,
    pub event_type: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    pub type_: c_int,
}

/// `struct ibv_xrcd`.
#[repr(C)]
pub struct ibv_xrcd {
    pub context: *mut ibv_context,
}

/// `struct ibv_xrcd_init_attr`.
#[repr(C)]
pub struct ibv_xrcd_init_attr {
    pub comp_mask: u32,
    pub fd: c_int,
    pub oflags: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: c_int,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The last (anonymous in C) union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_ext {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    /// `imm_data` (network order) or `invalidate_rkey` (anonymous union in C).
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    /// `qp_type.xrc.remote_srqn`.
    pub qp_type: u32,
    /// `bind_mw` / `tso` (anonymous union in C; its members are named on the C side).
    pub bind_mw: ibv_send_wr_ext,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

type QpEx = *mut ibv_qp_ex;

/// `struct ibv_qp_ex`: the `ibv_wr_*` API's function table follows the base QP.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(QpEx, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(QpEx, u32, u64, u64)>,
    pub wr_bind_mw: Option<unsafe extern "C" fn(QpEx, *mut ibv_mw, u32, *const ibv_mw_bind_info)>,
    pub wr_local_inv: Option<unsafe extern "C" fn(QpEx, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(QpEx, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(QpEx, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(QpEx, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(QpEx)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(QpEx, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(QpEx, u32)>,
    pub wr_send_tso: Option<unsafe extern "C" fn(QpEx, *mut c_void, u16, u16)>,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(QpEx, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(QpEx, u32)>,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(QpEx, *mut c_void, usize)>,
    pub wr_set_inline_data_list: Option<unsafe extern "C" fn(QpEx, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(QpEx, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(QpEx, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(QpEx)>,
    pub wr_complete: Option<unsafe extern "C" fn(QpEx) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(QpEx)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(QpEx, u32, u64, *const c_void)>,
}

/// The members later releases appended to `struct ibv_qp_ex` (v44's is the one above):
/// `wr_flush` since rdma-core v41's FLUSH, absent from Debian 12's v44 headers. The shim
/// places this right after its `ibv_qp_ex` (`objects::Qp`), where a program built against
/// newer headers reads it.
#[repr(C)]
pub struct ibv_qp_ex_tail {
    pub wr_flush: Option<unsafe extern "C" fn(QpEx, u32, u64, usize, u8, u8)>,
}

#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

type CqEx = *mut ibv_cq_ex;

/// `struct ibv_cq_ex`: `struct ibv_cq` followed by the `ibv_start_poll` /
/// `ibv_wc_read_*` function table.
#[repr(C)]
pub struct ibv_cq_ex {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub comp_mask: u32,
    pub status: c_int,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(CqEx, *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(CqEx) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(CqEx)>,
    pub read_opcode: Option<unsafe extern "C" fn(CqEx) -> c_int>,
    pub read_vendor_err: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_imm_data: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_qp_num: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(CqEx) -> c_uint>,
    pub read_slid: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(CqEx) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(CqEx) -> u8>,
    pub read_completion_ts: Option<unsafe extern "C" fn(CqEx) -> u64>,
    pub read_cvlan: Option<unsafe extern "C" fn(CqEx) -> u16>,
    pub read_flow_tag: Option<unsafe extern "C" fn(CqEx) -> u32>,
    pub read_tm_info: Option<unsafe extern "C" fn(CqEx, *mut c_void)>,
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(CqEx) -> u64>,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

#[repr(C)]
pub struct _ibv_device_ops {
    pub _dummy1: Option<unsafe extern "C" fn(*mut ibv_device, c_int) -> *mut ibv_context>,
    pub _dummy2: Option<unsafe extern "C" fn(*mut ibv_context)>,
}

pub const IBV_SYSFS_NAME_MAX: usize = 64;
pub const IBV_SYSFS_PATH_MAX: usize = 256;

#[repr(C)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

type Ctx = *mut ibv_context;
type Compat = Option<unsafe extern "C" fn() -> *mut c_void>;

/// `struct ibv_context_ops`: only the data-path entries are live in v44; the
/// `_compat_*` slots are never called by rdma-core's headers.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: Option<unsafe extern "C" fn(Ctx, *mut ibv_device_attr) -> c_int>,
    pub _compat_query_port: Option<unsafe extern "C" fn(Ctx, u8, *mut c_void) -> c_int>,
    pub _compat_alloc_pd: Compat,
    pub _compat_dealloc_pd: Compat,
    pub _compat_reg_mr: Compat,
    pub _compat_rereg_mr: Compat,
    pub _compat_dereg_mr: Compat,
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, c_int) -> *mut ibv_mw>,
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    pub _compat_create_cq: Compat,
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub _compat_cq_event: Compat,
    pub _compat_resize_cq: Compat,
    pub _compat_destroy_cq: Compat,
    pub _compat_create_srq: Compat,
    pub _compat_modify_srq: Compat,
    pub _compat_query_srq: Compat,
    pub _compat_destroy_srq: Compat,
    pub post_srq_recv: Option<
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    >,
    pub _compat_create_qp: Compat,
    pub _compat_query_qp: Compat,
    pub _compat_modify_qp: Compat,
    pub _compat_destroy_qp: Compat,
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    pub _compat_create_ah: Compat,
    pub _compat_destroy_ah: Compat,
    pub _compat_attach_mcast: Compat,
    pub _compat_detach_mcast: Compat,
    pub _compat_async_event: Compat,
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`: `ibv_context.abi_compat` says a `verbs_context` surrounds it.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

type Unused = Option<unsafe extern "C" fn()>;

/// `struct verbs_context`: extended ops "grow up" in front of the `ibv_context`;
/// `sz` tells rdma-core's inline helpers which ones exist. Slots we do not
/// implement stay `None`, so the inlines return `EOPNOTSUPP` as with real drivers.
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<unsafe extern "C" fn(Ctx, u8, *mut ibv_port_attr, usize) -> c_int>,
    pub advise_mr:
        Option<unsafe extern "C" fn(*mut ibv_pd, c_uint, u32, *mut ibv_sge, u32) -> c_int>,
    pub alloc_null_mr: Unused,
    pub read_counters: Unused,
    pub attach_counters_point_flow: Unused,
    pub create_counters: Unused,
    pub destroy_counters: Unused,
    pub reg_dm_mr: Unused,
    pub alloc_dm: Unused,
    pub free_dm: Unused,
    pub modify_flow_action_esp: Unused,
    pub destroy_flow_action: Unused,
    pub create_flow_action_esp: Unused,
    pub modify_qp_rate_limit: Unused,
    pub alloc_parent_domain: Unused,
    pub dealloc_td: Unused,
    pub alloc_td: Unused,
    pub modify_cq: Unused,
    pub post_srq_ops: Unused,
    pub destroy_rwq_ind_table: Unused,
    pub create_rwq_ind_table: Unused,
    pub destroy_wq: Unused,
    pub modify_wq: Unused,
    pub create_wq: Unused,
    pub query_rt_values: Option<unsafe extern "C" fn(Ctx, *mut ibv_values_ex) -> c_int>,
    pub create_cq_ex: Option<unsafe extern "C" fn(Ctx, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
    pub priv_: *mut c_void,
    pub query_device_ex:
        Option<unsafe extern "C" fn(Ctx, *const c_void, *mut ibv_device_attr_ex, usize) -> c_int>,
    pub ibv_destroy_flow: Unused,
    pub ABI_placeholder2: Unused,
    pub ibv_create_flow: Unused,
    pub ABI_placeholder1: Unused,
    pub open_qp: Unused,
    pub create_qp_ex: Option<unsafe extern "C" fn(Ctx, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    pub get_srq_num: Option<unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int>,
    pub create_srq_ex: Option<unsafe extern "C" fn(Ctx, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq>,
    pub open_xrcd: Option<unsafe extern "C" fn(Ctx, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd>,
    pub close_xrcd: Option<unsafe extern "C" fn(*mut ibv_xrcd) -> c_int>,
    pub _ABI_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}

// Enum values from verbs.h used by the shim.
pub const IBV_NODE_CA: c_int = 1;
pub const IBV_TRANSPORT_IB: c_int = 0;
pub const IBV_TRANSPORT_IWARP: c_int = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
pub const IBV_PORT_ACTIVE: c_int = 4;
pub const IBV_GID_TYPE_IB: u32 = 0;
pub const IBV_GID_TYPE_ROCE_V1: u32 = 1;
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
pub const IBV_SEND_INLINE: c_uint = 1 << 3;
pub const IBV_QPT_RC: c_int = 2;
pub const IBV_QPT_UC: c_int = 3;
pub const IBV_QPT_UD: c_int = 4;
pub const IBV_QPT_XRC_SEND: c_int = 9;
pub const IBV_QPT_XRC_RECV: c_int = 10;
pub const IBV_QP_INIT_ATTR_XRCD: u32 = 1 << 1;
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
pub const IBV_SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
pub const IBV_SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
pub const IBV_SRQT_BASIC: c_int = 0;
pub const IBV_SRQT_XRC: c_int = 1;
pub const IBV_XRCD_INIT_ATTR_FD: u32 = 1 << 0;
pub const IBV_XRCD_INIT_ATTR_OFLAGS: u32 = 1 << 1;
pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
pub const IBV_WR_RDMA_WRITE: c_int = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_int = 1;
pub const IBV_WR_SEND: c_int = 2;
pub const IBV_WR_SEND_WITH_IMM: c_int = 3;
pub const IBV_WR_RDMA_READ: c_int = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: c_int = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: c_int = 6;
pub const IBV_WR_LOCAL_INV: c_int = 7;
pub const IBV_WR_BIND_MW: c_int = 8;
pub const IBV_WR_SEND_WITH_INV: c_int = 9;
