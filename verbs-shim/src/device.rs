//! Devices and device contexts: `ibv_get_device_list`, `ibv_open_device`, the query
//! verbs and the GID table.
use crate::abi::*;
use crate::client::session;
use crate::context::{Context, Objects};
use crate::ffi::{self, Errno, VResult};
use crate::log::shim_log;
use crate::mmap::Mapping;
use core::ffi::{c_char, c_int, c_void};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, OnceLock};
use wire::client::{DeviceAttr, DeviceSummary, GidEntry, PortAttr, ReplyBody, RequestBody};

/// An `ibv_device` and what the daemon said about it. Never freed: rdma-core keeps
/// device structs alive while any context uses them, and programs compare pointers.
#[repr(C)]
pub struct Device {
    pub dev: ibv_device,
    pub summary: DeviceSummary,
}

/// Every device seen in this process, by name (stable addresses).
static DEVICES: OnceLock<Mutex<HashMap<String, usize>>> = OnceLock::new();

fn device_for(summary: &DeviceSummary) -> *mut ibv_device {
    let map = DEVICES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&p) = map.get(&summary.name) {
        return p as *mut ibv_device;
    }
    let mut dev = ibv_device {
        _ops: _ibv_device_ops {
            _dummy1: None,
            _dummy2: None,
        },
        node_type: summary.node_type as c_int,
        transport_type: summary.transport as c_int,
        name: [0; IBV_SYSFS_NAME_MAX],
        dev_name: [0; IBV_SYSFS_NAME_MAX],
        dev_path: [0; IBV_SYSFS_PATH_MAX],
        ibdev_path: [0; IBV_SYSFS_PATH_MAX],
    };
    let index = map.len();
    copy_cstr(&mut dev.name, &summary.name);
    copy_cstr(&mut dev.dev_name, &format!("uverbs{index}"));
    copy_cstr(
        &mut dev.dev_path,
        &format!("/sys/class/infiniband_verbs/uverbs{index}"),
    );
    copy_cstr(
        &mut dev.ibdev_path,
        &format!("/sys/class/infiniband/{}", summary.name),
    );
    let p = Box::into_raw(Box::new(Device {
        dev,
        summary: summary.clone(),
    }));
    map.insert(summary.name.clone(), p as usize);
    p as *mut ibv_device
}

fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

fn device_of<'a>(dev: *mut ibv_device) -> VResult<&'a Device> {
    // SAFETY: every ibv_device the shim hands out is the first field of a leaked Device.
    unsafe { (dev as *const Device).as_ref() }.ok_or(Errno::EINVAL)
}

fn ibv_port_attr_from(p: &PortAttr) -> ibv_port_attr {
    ibv_port_attr {
        state: p.state as c_int,
        max_mtu: p.max_mtu as c_int,
        active_mtu: p.active_mtu as c_int,
        gid_tbl_len: p.gid_tbl_len,
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: p.bad_pkey_cntr,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: p.max_vl_num,
        sm_sl: p.sm_sl,
        subnet_timeout: p.subnet_timeout,
        init_type_reply: p.init_type_reply,
        active_width: p.active_width,
        active_speed: p.active_speed,
        phys_state: p.phys_state,
        link_layer: p.link_layer,
        flags: p.flags,
        port_cap_flags2: p.port_cap_flags2,
    }
}

fn ibv_device_attr_from(a: &DeviceAttr) -> ibv_device_attr {
    let mut fw_ver = [0 as c_char; 64];
    copy_cstr(&mut fw_ver, &a.fw_ver);
    ibv_device_attr {
        fw_ver,
        node_guid: a.node_guid.to_be(),
        sys_image_guid: a.sys_image_guid.to_be(),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: a.max_qp,
        max_qp_wr: a.max_qp_wr,
        device_cap_flags: a.device_cap_flags,
        max_sge: a.max_sge,
        max_sge_rd: a.max_sge_rd,
        max_cq: a.max_cq,
        max_cqe: a.max_cqe,
        max_mr: a.max_mr,
        max_pd: a.max_pd,
        max_qp_rd_atom: a.max_qp_rd_atom,
        max_ee_rd_atom: a.max_ee_rd_atom,
        max_res_rd_atom: a.max_res_rd_atom,
        max_qp_init_rd_atom: a.max_qp_init_rd_atom,
        max_ee_init_rd_atom: a.max_ee_init_rd_atom,
        atomic_cap: a.atomic_cap as c_int,
        max_ee: a.max_ee,
        max_rdd: a.max_rdd,
        max_mw: a.max_mw,
        max_raw_ipv6_qp: a.max_raw_ipv6_qp,
        max_raw_ethy_qp: a.max_raw_ethy_qp,
        max_mcast_grp: a.max_mcast_grp,
        max_mcast_qp_attach: a.max_mcast_qp_attach,
        max_total_mcast_qp_attach: a.max_total_mcast_qp_attach,
        max_ah: a.max_ah,
        max_fmr: a.max_fmr,
        max_map_per_fmr: a.max_map_per_fmr,
        max_srq: a.max_srq,
        max_srq_wr: a.max_srq_wr,
        max_srq_sge: a.max_srq_sge,
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
    }
}

/// Copies `src` into a caller buffer of `len` bytes (extensible structs).
///
/// # Safety
/// `dst` must be valid for `len` bytes of writes.
unsafe fn copy_prefix<T>(src: &T, dst: *mut c_void, len: usize) {
    let n = len.min(core::mem::size_of::<T>());
    // SAFETY: src is a live T (n <= its size); dst has len >= n writable bytes (caller).
    unsafe { core::ptr::copy_nonoverlapping(src as *const T as *const u8, dst as *mut u8, n) };
}

// ---- exports -------------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    ffi::ptr(|| {
        // A session that just failed is marked dead; `session()` then reconnects once.
        let listed = session()
            .and_then(|s| s.hello())
            .or_else(|_| session().and_then(|s| s.hello()));
        let devices: Vec<*mut ibv_device> = match listed {
            Ok(list) => list.iter().map(device_for).collect(),
            Err(e) => {
                shim_log!("no devices: daemon not reachable (errno {})", e.0);
                Vec::new()
            }
        };
        if let Some(n) = unsafe { num_devices.as_mut() } {
            // SAFETY (above): num_devices is NULL or a valid int* by the API contract.
            *n = devices.len() as c_int;
        }
        let mut list = devices;
        list.push(core::ptr::null_mut());
        Ok(Box::into_raw(list.into_boxed_slice()) as *mut *mut ibv_device)
    })
}

#[no_mangle]
pub extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    ffi::value((), || {
        if list.is_null() {
            return;
        }
        // SAFETY: `list` came from ibv_get_device_list: a boxed slice ending with NULL.
        unsafe {
            let mut n = 0;
            while !(*list.add(n)).is_null() {
                n += 1;
            }
            drop(Box::from_raw(core::ptr::slice_from_raw_parts_mut(
                list,
                n + 1,
            )));
        }
    })
}

#[no_mangle]
pub extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    ffi::ptr(|| Ok(device_of(device)?.dev.name.as_ptr() as *mut c_char)) as *const c_char
}

#[no_mangle]
pub extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    ffi::value(0, || {
        device_of(device)
            .map(|d| d.summary.node_guid.to_be())
            .unwrap_or(0)
    })
}

#[no_mangle]
pub extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    ffi::value(-1, || {
        let Ok(d) = device_of(device) else { return -1 };
        let map = DEVICES.get_or_init(|| Mutex::new(HashMap::new()));
        let map = map.lock().unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<&String> = map.keys().collect();
        names.sort();
        names
            .iter()
            .position(|n| **n == d.summary.name)
            .map_or(-1, |i| i as c_int)
    })
}

#[no_mangle]
pub extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    ffi::ptr(|| open_device(device))
}

fn open_device(device: *mut ibv_device) -> VResult<*mut ibv_context> {
    let dev = device_of(device)?;
    let session = session().map_err(|_| Errno::ENODEV)?;
    let path = c"/proc/self/mem";
    // SAFETY: open(2) with a NUL-terminated path; the result is checked.
    let mem = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if mem < 0 {
        return Err(Errno::last());
    }
    // SAFETY: mem is a fresh descriptor we own; it is closed when `mem` drops (the
    // daemon holds its own copy after the call).
    let mem = unsafe { OwnedFd::from_raw_fd(mem) };
    let (reply, fds) = session.call(
        RequestBody::OpenDevice {
            name: dev.summary.name.clone(),
        },
        &[mem.as_raw_fd()],
    )?;
    let ReplyBody::DeviceOpened {
        ctx,
        device_attr,
        ports,
        gids,
    } = reply
    else {
        return Err(Errno::EIO);
    };
    let mut fds = fds.into_iter();
    let (Some(async_fd), Some(doorbell), Some(page_fd)) = (fds.next(), fds.next(), fds.next())
    else {
        shim_log!("DeviceOpened without its three descriptors");
        return Err(Errno::EIO);
    };
    let session_page = Mapping::map(&page_fd, wire::client::ring::SESSION_PAGE_LEN)?;
    let async_raw = async_fd.as_raw_fd();
    let cmd_fd = command_fd()?;
    let ctx_box = Box::new(Context {
        vctx: verbs_context {
            query_port: Some(vctx_query_port),
            advise_mr: Some(crate::mr_ex::vctx_advise_mr),
            alloc_null_mr: None,
            read_counters: None,
            attach_counters_point_flow: None,
            create_counters: None,
            destroy_counters: None,
            reg_dm_mr: None,
            alloc_dm: None,
            free_dm: None,
            modify_flow_action_esp: None,
            destroy_flow_action: None,
            create_flow_action_esp: None,
            modify_qp_rate_limit: None,
            alloc_parent_domain: None,
            dealloc_td: None,
            alloc_td: None,
            modify_cq: None,
            post_srq_ops: None,
            destroy_rwq_ind_table: None,
            create_rwq_ind_table: None,
            destroy_wq: None,
            modify_wq: None,
            create_wq: None,
            query_rt_values: Some(crate::cq_ex::vctx_query_rt_values),
            create_cq_ex: Some(crate::cq::vctx_create_cq_ex),
            priv_: core::ptr::null_mut(),
            query_device_ex: Some(vctx_query_device_ex),
            ibv_destroy_flow: None,
            ABI_placeholder2: None,
            ibv_create_flow: None,
            ABI_placeholder1: None,
            open_qp: None,
            create_qp_ex: Some(crate::qp::vctx_create_qp_ex),
            get_srq_num: Some(crate::xrc::vctx_get_srq_num),
            create_srq_ex: Some(crate::xrc::vctx_create_srq_ex),
            open_xrcd: Some(crate::xrc::vctx_open_xrcd),
            close_xrcd: Some(crate::xrc::vctx_close_xrcd),
            _ABI_placeholder3: 0,
            sz: core::mem::size_of::<verbs_context>(),
            context: ibv_context {
                device,
                ops: crate::datapath::context_ops(),
                cmd_fd: cmd_fd.as_raw_fd(),
                async_fd: async_raw,
                // The daemon's limit (emu_core::NUM_COMP_VECTORS): one completion path.
                num_comp_vectors: 1,
                // SAFETY: an all-zero pthread_mutex_t is PTHREAD_MUTEX_INITIALIZER on glibc.
                mutex: unsafe { core::mem::zeroed() },
                abi_compat: VERBS_ABI_IS_EXTENDED,
            },
        },
        session,
        handle: ctx,
        device_attr,
        ports,
        gids,
        async_fd,
        cmd_fd,
        doorbell,
        session_page,
        objects: Mutex::new(Objects::default()),
        posted: AtomicBool::new(false),
    });
    let ctx = Box::into_raw(ctx_box);
    // SAFETY: ctx was just allocated; the ibv_context is a field of it.
    Ok(unsafe { &mut (*ctx).vctx.context as *mut ibv_context })
}

/// `ibv_context.cmd_fd`: rdma-core's is the uverbs device. No uverbs device exists here,
/// but programs dup it (pyverbs' shared-PD tests), pass it to `ibv_import_device`, or
/// poll it: an eventfd that is never signalled is a real descriptor that never
/// becomes readable. Closed with the context.
fn command_fd() -> VResult<OwnedFd> {
    // SAFETY: eventfd(2) with constant flags; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a fresh descriptor this function owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[no_mangle]
pub extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    ffi::errno(|| {
        let ctx = Context::from_ibv(context)?;
        let _ = ctx.call(RequestBody::CloseDevice { ctx: ctx.handle });
        let p = ctx as *const Context as *mut Context;
        // SAFETY: the Context was boxed in open_device and the application gives it up here.
        drop(unsafe { Box::from_raw(p) });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    device_attr: *mut ibv_device_attr,
) -> c_int {
    ffi::errno(|| {
        let ctx = Context::from_ibv(context)?;
        let out = ffi::nonnull(device_attr)?;
        *out = ibv_device_attr_from(&ctx.device_attr);
        Ok(())
    })
}

/// `IB_UVERBS_DEVICE_FLUSH_GLOBAL | _FLUSH_PERSISTENT | _ATOMIC_WRITE` (bits 38, 39, 40
/// of `device_cap_flags_ex`), as rxe reports them; siw has none. Persistent is reported
/// as rxe reports it, though no MR of ordinary memory may grant it (docs/compatibility.md).
const PLACEMENT_CAPS: u64 = (1 << 38) | (1 << 39) | (1 << 40);

unsafe extern "C" fn vctx_query_device_ex(
    context: *mut ibv_context,
    input: *const c_void,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    ffi::errno(|| {
        let ctx = Context::from_ibv(context)?;
        // SAFETY: input is NULL or an ibv_query_device_ex_input (a u32 comp_mask).
        if let Some(mask) = unsafe { (input as *const u32).as_ref() } {
            if *mask != 0 {
                return Err(Errno::EINVAL);
            }
        }
        if attr.is_null() || attr_size < core::mem::size_of::<ibv_device_attr>() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: all-zero is valid for this plain-data struct.
        let mut ex: ibv_device_attr_ex = unsafe { core::mem::zeroed() };
        ex.orig_attr = ibv_device_attr_from(&ctx.device_attr);
        ex.phys_port_cnt_ex = u32::from(ctx.device_attr.phys_port_cnt);
        // The kernel reports the full capability word here too (its low 32 bits are
        // `device_cap_flags`).
        ex.device_cap_flags_ex = u64::from(ctx.device_attr.device_cap_flags);
        let odp = ctx.device_attr.odp_caps;
        ex.odp_caps = ibv_odp_caps {
            general_caps: odp.general_caps,
            per_transport_caps: [odp.rc_odp_caps, odp.uc_odp_caps, odp.ud_odp_caps],
        };
        ex.xrc_odp_caps = odp.xrc_odp_caps;
        // The clock CQE timestamps count (crate::cq_ex), on every device.
        ex.completion_timestamp_mask = wire::client::slot::CQE_TIMESTAMP_MASK;
        ex.hca_core_clock = wire::client::slot::CQE_CLOCK_KHZ;
        // SAFETY: a context this library opened has its device.
        if unsafe { (*(*context).device).transport_type } != IBV_TRANSPORT_IWARP {
            ex.device_cap_flags_ex |= PLACEMENT_CAPS;
        }
        // SAFETY: the caller gave attr_size writable bytes.
        unsafe { copy_prefix(&ex, attr as *mut c_void, attr_size) };
        Ok(())
    })
}

unsafe extern "C" fn vctx_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    ffi::errno(|| {
        let ctx = Context::from_ibv(context)?;
        if port_attr.is_null() {
            return Err(Errno::EINVAL);
        }
        let attr = match ctx.call(RequestBody::QueryPort {
            ctx: ctx.handle,
            port: port_num,
        }) {
            Ok(ReplyBody::PortAttr(p)) => ibv_port_attr_from(&p),
            Ok(_) => return Err(Errno::EIO),
            Err(e) if e == Errno::EIO => ibv_port_attr_from(ctx.port(port_num)?),
            Err(e) => return Err(e),
        };
        // SAFETY: the caller gave port_attr_len writable bytes.
        unsafe {
            core::ptr::write_bytes(port_attr as *mut u8, 0, port_attr_len);
            copy_prefix(&attr, port_attr as *mut c_void, port_attr_len);
        }
        Ok(())
    })
}

/// `ibv_query_port@IBVERBS_1.1`: the pre-`verbs_context` entry, with the old, shorter
/// `struct _compat_ibv_port_attr` (every field up to `link_layer`).
#[no_mangle]
pub extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: the compat struct is the prefix of ibv_port_attr up to `flags`.
    unsafe {
        vctx_query_port(
            context,
            port_num,
            port_attr,
            core::mem::offset_of!(ibv_port_attr, flags),
        )
    }
}

/// The GID entry at `index`, asked of the daemon each time (rdma-core reads the kernel's
/// GID cache each time too): the table follows the interface's addresses, so an entry can
/// empty or fill after the device was opened. `None`: an empty slot.
fn gid_lookup(context: *mut ibv_context, port: u8, index: u32) -> VResult<Option<GidEntry>> {
    let ctx = Context::from_ibv(context)?;
    let p = ctx.port(port)?;
    if index >= p.gid_tbl_len.max(0) as u32 {
        return Err(Errno::EINVAL);
    }
    let entry = match ctx.call(RequestBody::QueryGid {
        ctx: ctx.handle,
        port,
        index,
    })? {
        ReplyBody::Gid(e) => e,
        _ => return Err(Errno::EIO),
    };
    Ok(Some(entry).filter(|g| g.gid != [0; 16]))
}

#[no_mangle]
pub extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    ffi::minus_one(|| {
        let index = u32::try_from(index).map_err(|_| Errno::EINVAL)?;
        let entry = gid_lookup(context, port_num, index)?;
        // An empty entry reads as the zero GID (rdma-core: ENODATA becomes zeros).
        ffi::nonnull(gid)?.raw = entry.map_or([0; 16], |e| e.gid);
        Ok(())
    })
}

/// `ibv_query_gid_type@IBVERBS_PRIVATE_34`; `type` is `enum ibv_gid_type_sysfs`
/// (0 = IB/RoCE v1, 1 = RoCE v2), not `enum ibv_gid_type`.
#[no_mangle]
pub extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: u32,
    type_: *mut c_int,
) -> c_int {
    ffi::minus_one(|| {
        let entry = gid_lookup(context, port_num, index)?;
        let out = ffi::nonnull(type_)?;
        *out = match entry {
            Some(e) if e.gid_type == IBV_GID_TYPE_ROCE_V2 => 1,
            _ => 0,
        };
        Ok(())
    })
}

fn gid_entry_from(e: &GidEntry) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: ibv_gid { raw: e.gid },
        gid_index: e.index,
        port_num: u32::from(e.port_num),
        gid_type: e.gid_type,
        ndev_ifindex: 0,
    }
}

#[no_mangle]
pub extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    ffi::errno(|| {
        if flags != 0 || entry.is_null() {
            return Err(Errno::EINVAL);
        }
        let port = u8::try_from(port_num).map_err(|_| Errno::EINVAL)?;
        let e = gid_lookup(context, port, gid_index)?.ok_or(Errno::ENODATA)?;
        // SAFETY: the caller gave entry_size writable bytes.
        unsafe { copy_prefix(&gid_entry_from(&e), entry as *mut c_void, entry_size) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    ffi::count(|| {
        let ctx = Context::from_ibv(context)?;
        if flags != 0 || entry_size < core::mem::size_of::<ibv_gid_entry>() {
            return Err(Errno::EINVAL);
        }
        // What ibv_query_gid_ex reports, entry by entry, as rdma-core's fallback
        // (query_gid_table_fb) builds it: the list given at open may be stale or, on
        // siw, name the MAC-derived GID where the port's table holds the addresses.
        let mut valid = Vec::new();
        for (p, port) in ctx.ports.iter().enumerate() {
            let port_num = u8::try_from(p + 1).map_err(|_| Errno::EINVAL)?;
            for index in 0..port.gid_tbl_len.max(0) as u32 {
                if let Some(e) = gid_lookup(context, port_num, index)? {
                    valid.push(e);
                }
            }
        }
        if valid.len() > max_entries {
            return Err(Errno::EINVAL);
        }
        for (i, e) in valid.iter().enumerate() {
            // SAFETY: the caller gave max_entries elements of entry_size bytes.
            unsafe {
                copy_prefix(
                    &gid_entry_from(e),
                    (entries as *mut u8).add(i * entry_size) as *mut c_void,
                    entry_size,
                )
            };
        }
        Ok(valid.len() as c_int)
    }) as isize
}

#[no_mangle]
pub extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    ffi::minus_one(|| {
        let ctx = Context::from_ibv(context)?;
        let p = ctx.port(port_num)?;
        if index < 0 || index >= c_int::from(p.pkey_tbl_len) {
            return Err(Errno::EINVAL);
        }
        // RoCE has one P_Key, the default full-membership 0xffff (big-endian).
        *ffi::nonnull(pkey)? = if index == 0 { 0xffffu16.to_be() } else { 0 };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn ibv_get_pkey_index(context: *mut ibv_context, port_num: u8, pkey: u16) -> c_int {
    ffi::count(|| {
        let ctx = Context::from_ibv(context)?;
        ctx.port(port_num)?;
        if u16::from_be(pkey) & 0x7fff == 0x7fff {
            Ok(0)
        } else {
            Err(Errno::ENOENT)
        }
    })
}
