//! librdmacm's device table (`cma_dev` in cma.c): each daemon device is opened once per
//! process and shared by every id bound to it (`id->verbs`), with one default protection
//! domain (`id->pd`) allocated on first use. Like librdmacm, the contexts stay open for
//! the life of the process.
use super::request::verbs_ptr;
use crate::abi::*;
use crate::context::Context;
use crate::device::{ibv_free_device_list, ibv_get_device_list, ibv_open_device};
use crate::ffi::{self, Errno, VResult};
use crate::log::shim_log;
use core::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// One opened device.
pub struct CmDevice {
    pub name: String,
    pub verbs: *mut ibv_context,
    /// The default PD (`cma_dev->pd`), NULL until an id needs it.
    pub pd: *mut ibv_pd,
    /// The private XRC domain XRC ids use when given none (`cma_dev->xrcd`), NULL until
    /// the first needs it.
    pub xrcd: *mut ibv_xrcd,
    pub max_qpsize: u32,
    /// `max_qp_init_rd_atom`, `max_qp_rd_atom`.
    pub max_initiator_depth: u8,
    pub max_responder_resources: u8,
}

// SAFETY: the raw pointers name objects that live for the whole process (never closed)
// and whose own state is synchronised; the table itself is behind a Mutex.
unsafe impl Send for CmDevice {}

static DEVICES: Mutex<Vec<CmDevice>> = Mutex::new(Vec::new());

/// librdmacm's `ucma_init`: ENODEV while the daemon cannot be reached or has no device;
/// success is remembered.
pub fn init() -> VResult<()> {
    static READY: AtomicBool = AtomicBool::new(false);
    if READY.load(Ordering::Relaxed) {
        return Ok(());
    }
    let found = crate::client::session()
        .and_then(|s| s.hello())
        .map_err(|_| Errno::ENODEV)?;
    if found.is_empty() {
        return Err(Errno::ENODEV);
    }
    READY.store(true, Ordering::Relaxed);
    Ok(())
}

/// What an id needs of its device.
#[derive(Clone, Copy)]
pub struct DeviceRef {
    pub verbs: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub max_qpsize: u32,
    pub max_initiator_depth: u8,
    pub max_responder_resources: u8,
}

fn name_of(dev: *mut ibv_device) -> String {
    // SAFETY: every ibv_device from ibv_get_device_list holds a NUL-terminated name.
    unsafe { CStr::from_ptr((*dev).name.as_ptr() as *const c_char) }
        .to_string_lossy()
        .into_owned()
}

/// The daemon's current device list (names and `ibv_device`s); an unreachable daemon
/// is no device.
fn listed() -> Vec<(String, *mut ibv_device)> {
    let mut n: c_int = 0;
    let list = ibv_get_device_list(&mut n);
    if list.is_null() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: ibv_get_device_list returned `n` entries followed by NULL.
        let dev = unsafe { *list.add(i) };
        if !dev.is_null() {
            out.push((name_of(dev), dev));
        }
    }
    ibv_free_device_list(list);
    out
}

fn open(name: &str, dev: *mut ibv_device) -> VResult<CmDevice> {
    let verbs = verbs_ptr(ibv_open_device(dev)).map_err(|_| Errno::ENODEV)?;
    let ctx = Context::from_ibv(verbs)?;
    let a = &ctx.device_attr;
    shim_log!("rdma cm: opened {name}");
    Ok(CmDevice {
        name: name.to_string(),
        verbs,
        pd: core::ptr::null_mut(),
        xrcd: core::ptr::null_mut(),
        max_qpsize: a.max_qp_wr.max(0) as u32,
        max_initiator_depth: a.max_qp_init_rd_atom.clamp(0, 255) as u8,
        max_responder_resources: a.max_qp_rd_atom.clamp(0, 255) as u8,
    })
}

/// Opens every device not opened yet; returns the contexts of all of them
/// (`rdma_get_devices`).
fn open_all() -> Vec<*mut ibv_context> {
    let listed = listed();
    let mut devs = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    for (name, dev) in &listed {
        if devs.iter().any(|d| &d.name == name) {
            continue;
        }
        match open(name, *dev) {
            Ok(d) => devs.push(d),
            Err(e) => shim_log!("rdma cm: cannot open {name}: errno {}", e.0),
        }
    }
    listed
        .iter()
        .filter_map(|(name, _)| devs.iter().find(|d| &d.name == name))
        .map(|d| d.verbs)
        .collect()
}

/// The device named `name`, opened on first use, with its default PD allocated
/// (`ucma_get_device`): ENODEV when the daemon has no such device.
pub fn get(name: &str) -> VResult<DeviceRef> {
    let mut devs = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    if !devs.iter().any(|d| d.name == name) {
        let found = listed().into_iter().find(|(n, _)| n == name);
        let (_, dev) = found.ok_or(Errno::ENODEV)?;
        devs.push(open(name, dev)?);
    }
    let d = devs
        .iter_mut()
        .find(|d| d.name == name)
        .ok_or(Errno::ENODEV)?;
    if d.pd.is_null() {
        d.pd = verbs_ptr(crate::verbs::ibv_alloc_pd(d.verbs))?;
    }
    Ok(DeviceRef {
        verbs: d.verbs,
        pd: d.pd,
        max_qpsize: d.max_qpsize,
        max_initiator_depth: d.max_initiator_depth,
        max_responder_resources: d.max_responder_resources,
    })
}

/// The device behind `verbs`, if librdmacm opened it.
pub fn by_context(verbs: *mut ibv_context) -> Option<DeviceRef> {
    let devs = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    devs.iter().find(|d| d.verbs == verbs).map(|d| DeviceRef {
        verbs: d.verbs,
        pd: d.pd,
        max_qpsize: d.max_qpsize,
        max_initiator_depth: d.max_initiator_depth,
        max_responder_resources: d.max_responder_resources,
    })
}

/// librdmacm's `ucma_get_xrcd`: the device's XRC domain, opened on first use as a private
/// one (no file, `O_CREAT`) and kept for the life of the process. EINVAL for a context
/// librdmacm did not open; what `ibv_open_xrcd` answers (EOPNOTSUPP on siw devices).
pub fn xrcd(verbs: *mut ibv_context) -> VResult<*mut ibv_xrcd> {
    let mut devs = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    let d = devs
        .iter_mut()
        .find(|d| d.verbs == verbs)
        .ok_or(Errno::EINVAL)?;
    if d.xrcd.is_null() {
        let mut attr = ibv_xrcd_init_attr {
            comp_mask: IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
            fd: -1,
            oflags: libc::O_CREAT,
        };
        // SAFETY: verbs is a context this library opened; attr is valid.
        d.xrcd = verbs_ptr(unsafe { crate::xrc::vctx_open_xrcd(verbs, &mut attr) })?;
    }
    Ok(d.xrcd)
}

/// The smallest `max_qp_wr` of all devices (`ucma_max_qpsize` without an id).
pub fn min_qpsize() -> u32 {
    open_all();
    let devs = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    devs.iter().map(|d| d.max_qpsize).min().unwrap_or(0)
}

/// The transport of a context's device (`IBV_TRANSPORT_*`), IB when unknown.
pub fn transport(verbs: *mut ibv_context) -> c_int {
    // SAFETY: verbs is NULL or a context this library opened; its device pointer is the
    // leaked, never-freed ibv_device of that context.
    unsafe {
        verbs
            .as_ref()
            .and_then(|c| c.device.as_ref())
            .map_or(IBV_TRANSPORT_IB, |d| d.transport_type)
    }
}

#[no_mangle]
pub extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    let mut out: Option<Vec<*mut ibv_context>> = None;
    let list = ffi::ptr(|| {
        let mut list = open_all();
        if list.is_empty() {
            // librdmacm's ucma_init: no RDMA device at all.
            return Err(Errno::ENODEV);
        }
        out = Some(list.clone());
        list.push(core::ptr::null_mut());
        Ok(Box::into_raw(list.into_boxed_slice()) as *mut *mut ibv_context)
    });
    if let Ok(n) = ffi::nonnull(num_devices) {
        *n = out.map_or(0, |l| l.len() as c_int);
    }
    list
}

#[no_mangle]
pub extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    ffi::value((), || {
        if list.is_null() {
            return;
        }
        // SAFETY: `list` came from rdma_get_devices: a boxed slice ending with NULL.
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
