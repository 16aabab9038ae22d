//! Helpers with no device behind them (strings, rate tables, fork), and the exports
//! rdma-emu does not implement, answering as rdma-core does for a provider without
//! that operation (see docs/compatibility.md).
use crate::abi::*;
use crate::ffi::{self, Errno};
use core::ffi::{c_char, c_int, c_uint, c_void, CStr};

fn table_str(table: &[&'static CStr], index: c_int, offset: c_int) -> *const c_char {
    usize::try_from(index - offset)
        .ok()
        .and_then(|i| table.get(i))
        .unwrap_or(&c"unknown")
        .as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    table_str(T, status, 0)
}

#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"unknown",
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ];
    // IBV_NODE_UNKNOWN is -1, so the table starts there.
    table_str(T, node_type, -1)
}

#[no_mangle]
pub extern "C" fn ibv_port_state_str(port_state: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"no state change (NOP)",
        c"down",
        c"init",
        c"armed",
        c"active",
        c"active defer",
    ];
    table_str(T, port_state, 0)
}

#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    table_str(T, event, 0)
}

/// `enum ibv_rate` value, multiple of 2.5 Gb/s, Mb/s.
const RATES: &[(c_int, c_int, c_int)] = &[
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 0, 14062),
    (12, 0, 56250),
    (13, 0, 112500),
    (14, 0, 168750),
    (15, 0, 25781),
    (16, 0, 103125),
    (17, 0, 206250),
    (18, 0, 309375),
    (19, 0, 28125),
    (20, 0, 53125),
    (21, 0, 425000),
    (22, 0, 637500),
    (23, 0, 850000),
    (24, 0, 1275000),
];

#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.1 != 0)
        .map_or(-1, |r| r.1)
}

#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult != 0)
        .map_or(0, |r| r.0)
}

#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

// ---- fork support: nothing is pinned, so fork needs no preparation ----------------------

#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `IBV_FORK_UNNEEDED`: registration pins nothing (the daemon reaches memory through
/// `/proc/self/mem`), and a child of `fork()` gets private copies of pages that shared
/// memory regions moved onto memfds (`shared_mr`), like a kernel with copy-on-fork for
/// pinned pages.
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

// ---- sysfs: there is none for rdma-emu devices ------------------------------------------

#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_read_sysfs_file(
    _dir: *const c_char,
    _file: *const c_char,
    _buf: *mut c_char,
    _size: usize,
) -> c_int {
    ffi::set_errno(Errno(libc::ENOENT));
    -1
}

// ---- kernel ABI converters: there is no kernel ABI; left untouched ----------------------

#[no_mangle]
pub extern "C" fn ibv_copy_qp_attr_from_kern(_dst: *mut ibv_qp_attr, _src: *mut c_void) {}

#[no_mangle]
pub extern "C" fn ibv_copy_ah_attr_from_kern(_dst: *mut ibv_ah_attr, _src: *mut c_void) {}

#[no_mangle]
pub extern "C" fn ibv_copy_path_rec_from_kern(_dst: *mut c_void, _src: *mut c_void) {}

#[no_mangle]
pub extern "C" fn ibv_copy_path_rec_to_kern(_dst: *mut c_void, _src: *mut c_void) {}

// ---- not implemented ----------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn ibv_resolve_eth_l2_from_gid(
    _context: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    ffi::errno(|| Err(Errno::EOPNOTSUPP))
}

#[no_mangle]
pub extern "C" fn ibv_import_device(_cmd_fd: c_int) -> *mut ibv_context {
    ffi::ptr(|| Err(Errno::EOPNOTSUPP))
}

#[no_mangle]
pub extern "C" fn ibv_import_pd(_context: *mut ibv_context, _pd_handle: u32) -> *mut ibv_pd {
    ffi::ptr(|| Err(Errno::EOPNOTSUPP))
}

#[no_mangle]
pub extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _mr_handle: u32) -> *mut ibv_mr {
    ffi::ptr(|| Err(Errno::EOPNOTSUPP))
}

#[no_mangle]
pub extern "C" fn ibv_import_dm(_context: *mut ibv_context, _dm_handle: u32) -> *mut c_void {
    ffi::ptr(|| Err(Errno::EOPNOTSUPP))
}

#[no_mangle]
pub extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {}

#[no_mangle]
pub extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {}

#[no_mangle]
pub extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

#[no_mangle]
pub extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    ffi::ptr(|| Err(Errno::EOPNOTSUPP))
}

#[no_mangle]
pub extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    ffi::errno(|| Err(Errno::EOPNOTSUPP))
}

#[no_mangle]
pub extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    ffi::errno(|| Err(Errno::EOPNOTSUPP))
}

/// 0: data is not guaranteed to land in order (what rdma-core answers for a provider
/// without the query).
#[no_mangle]
pub extern "C" fn ibv_query_qp_data_in_order(
    _qp: *mut ibv_qp,
    _op: c_int,
    _flags: c_uint,
) -> c_int {
    0
}

// ---- multicast ----------------------------------------------------------------------------

/// What the kernel's `ib_attach_mcast` / `ib_detach_mcast` check before the driver: a UD
/// QP and a multicast GID (`rdma_is_multicast_addr`: IPv4-mapped 224.0.0.0/4, or first
/// octet 0xff). The LID is ignored on RoCE.
fn mcast_args(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
) -> ffi::VResult<(&'static crate::objects::Qp, [u8; 16])> {
    let q = crate::objects::qp_of(qp)?;
    if gid.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the caller passes a readable `union ibv_gid` (16 bytes); checked non-null.
    let raw = unsafe { (*gid).raw };
    let v4_mapped = raw[..10] == [0; 10] && raw[10..12] == [0xff, 0xff];
    let multicast = if v4_mapped {
        raw[12] & 0xf0 == 0xe0
    } else {
        raw[0] == 0xff
    };
    if !multicast || q.qpx.qp_base.qp_type != IBV_QPT_UD {
        return Err(Errno::EINVAL);
    }
    Ok((q, raw))
}

/// `ibv_attach_mcast`: the daemon attaches the UD QP and joins the IP group on the
/// device's interface. 0 or a positive errno (also in `errno`), as rdma-core.
#[no_mangle]
pub extern "C" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    ffi::errno(|| {
        let (q, gid) = mcast_args(qp, gid)?;
        crate::context::Context::from_ibv(q.qpx.qp_base.context)?.call(
            wire::client::RequestBody::AttachMcast {
                qp: q.handle,
                gid,
                lid,
            },
        )?;
        Ok(())
    })
}

/// `ibv_detach_mcast`: EINVAL when the QP is not attached with this GID and LID.
#[no_mangle]
pub extern "C" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    ffi::errno(|| {
        let (q, gid) = mcast_args(qp, gid)?;
        crate::context::Context::from_ibv(q.qpx.qp_base.context)?.call(
            wire::client::RequestBody::DetachMcast {
                qp: q.handle,
                gid,
                lid,
            },
        )?;
        Ok(())
    })
}
