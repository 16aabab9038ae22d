//! Event channels and `rdma_cm_id`s: creation and destruction, the id registry the
//! event path looks ids up in, migrate, options, ports and ECE.
use super::abi::*;
use super::addr;
use super::device;
use super::request::{call, call_fds};
use super::state::{ack, channel_of, cm, Channel, CmId, Shared};
use crate::abi::{IBV_QPT_RC, IBV_QPT_UD};
use crate::ffi::{self, Errno, VResult};
use crate::log::shim_log;
use core::ffi::{c_int, c_void};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use wire::client::cm::{ps, CmReply, CmRequest};
use wire::client::Handle;

// ---- channels ---------------------------------------------------------------------------

fn create_channel() -> VResult<*mut Channel> {
    device::init()?;
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Errno::last());
    }
    // SAFETY: both descriptors are fresh and ours.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let reply = call_fds(CmRequest::CreateChannel, &[write_end.as_raw_fd()])?;
    drop(write_end);
    let Some(CmReply::Channel { handle }) = reply else {
        return Err(Errno::EIO);
    };
    let ch = Box::new(Channel {
        ch: rdma_event_channel {
            fd: read_end.into_raw_fd(),
        },
        handle,
    });
    Ok(Box::into_raw(ch))
}

fn destroy_channel(p: *mut Channel) {
    // SAFETY: p came from create_channel and is given up here.
    let ch = unsafe { Box::from_raw(p) };
    if let Err(e) = call(CmRequest::DestroyChannel { channel: ch.handle }) {
        shim_log!("rdma cm: destroying channel {}: errno {}", ch.handle.0, e.0);
    }
    // SAFETY: the read end is ours (create_channel) and closed once, here.
    drop(unsafe { OwnedFd::from_raw_fd(ch.ch.fd) });
}

#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    ffi::ptr(|| create_channel().map(|c| c as *mut rdma_event_channel))
}

#[no_mangle]
pub extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    ffi::value((), || {
        if !channel.is_null() {
            destroy_channel(channel as *mut Channel);
        }
    })
}

// ---- ids --------------------------------------------------------------------------------

/// Ids by daemon handle, with their event counters. Looking an id up for an event
/// counts the event under the same lock `rdma_destroy_id` takes to remove the id, so
/// an event is either counted (and destroy waits for its ack) or dropped.
type Registry = HashMap<u32, (usize, Arc<Shared>)>;
static IDS: Mutex<Option<Registry>> = Mutex::new(None);

fn with_ids<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut g = IDS.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

fn register(p: *mut CmId) {
    // SAFETY: p is a live CmId just created by this module.
    let (h, shared) = unsafe { ((*p).handle.0, (*p).shared.clone()) };
    with_ids(|ids| ids.insert(h, (p as usize, shared)));
}

fn unregister(h: Handle) {
    with_ids(|ids| ids.remove(&h.0));
}

/// The id an event is for, with the event counted against it; `None` when the id is
/// gone (the event is dropped, as librdmacm drops events of unknown ids).
pub fn lookup_and_report(h: Handle) -> Option<(*mut CmId, Arc<Shared>)> {
    with_ids(|ids| {
        ids.get(&h.0).map(|(p, s)| {
            s.report();
            (*p as *mut CmId, s.clone())
        })
    })
}

/// `ucma_alloc_id` + the daemon's CREATE_ID: an id on `channel`, or on a private
/// channel (synchronous id) when NULL.
pub fn create(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    port_space: u32,
    qp_type: c_int,
) -> VResult<*mut CmId> {
    let (chan, sync) = if channel.is_null() {
        (create_channel()?, true)
    } else {
        (channel as *mut Channel, false)
    };
    let made = channel_of(chan as *mut rdma_event_channel).and_then(|c| {
        call(CmRequest::CreateId {
            channel: c.handle,
            ps: port_space,
            qp_type: qp_type as u32,
        })
    });
    let handle = match made {
        Ok(Some(CmReply::Id { handle })) => handle,
        other => {
            if sync {
                destroy_channel(chan);
            }
            return Err(other.err().unwrap_or(Errno::EIO));
        }
    };
    Ok(alloc(handle, chan, context, port_space, qp_type, sync))
}

/// A `CmId` for a daemon id, registered for events.
pub fn alloc(
    handle: Handle,
    chan: *mut Channel,
    context: *mut c_void,
    port_space: u32,
    qp_type: c_int,
    sync: bool,
) -> *mut CmId {
    let null = core::ptr::null_mut();
    let p = Box::into_raw(Box::new(CmId {
        id: rdma_cm_id {
            verbs: null as _,
            channel: chan as *mut rdma_event_channel,
            context,
            qp: null as _,
            route: rdma_route {
                // SAFETY: plain old data; all-zero is the unbound, unresolved address.
                addr: unsafe { core::mem::zeroed() },
                path_rec: null as _,
                num_paths: 0,
            },
            ps: port_space as c_int,
            port_num: 0,
            event: null as _,
            send_cq_channel: null as _,
            send_cq: null as _,
            recv_cq_channel: null as _,
            recv_cq: null as _,
            srq: null as _,
            pd: null as _,
            qp_type,
        },
        handle,
        shared: Arc::new(Shared::default()),
        sync,
        connect_error: false,
        initiator_depth: 0,
        responder_resources: 0,
        dev: None,
        connect: Vec::new(),
        qp_init_attr: None,
        path: None,
        local_ece: ibv_ece::default(),
        mcs: Vec::new(),
    }));
    register(p);
    p
}

/// `rdma_destroy_id`: the daemon forgets the id (and its queued events), then this waits
/// until every event already handed out for it was acknowledged.
pub fn destroy(p: *mut rdma_cm_id) -> VResult<()> {
    let c = cm(p)?;
    call(CmRequest::DestroyId { id: c.handle })?;
    unregister(c.handle);
    if !c.id.event.is_null() {
        ack(c.id.event);
        c.id.event = core::ptr::null_mut();
    }
    c.shared.wait_all_acked();
    // SAFETY: boxed in alloc; unregistered above, so no event can reach it any more.
    let c = unsafe { Box::from_raw(p as *mut CmId) };
    if c.sync {
        destroy_channel(c.id.channel as *mut Channel);
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    port_space: c_int,
) -> c_int {
    ffi::minus_one(|| {
        let out = ffi::nonnull(id)?;
        let ps_ = port_space as u32;
        let qp_type = if ps_ == ps::IPOIB || ps_ == ps::UDP {
            IBV_QPT_UD
        } else {
            IBV_QPT_RC
        };
        *out = create(channel, context, ps_, qp_type)? as *mut rdma_cm_id;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    ffi::minus_one(|| destroy(id))
}

#[no_mangle]
pub extern "C" fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
    ffi::minus_one(|| migrate(cm(id)?, channel))
}

/// `rdma_migrate_id`: to `channel`, or to a new private channel (a synchronous id) when
/// NULL; waits until the events already handed out were acknowledged.
pub fn migrate(c: &mut CmId, channel: *mut rdma_event_channel) -> VResult<()> {
    if c.sync && channel.is_null() {
        return Err(Errno::EINVAL);
    }
    let sync = channel.is_null();
    let target = if sync {
        create_channel()?
    } else {
        channel as *mut Channel
    };
    let handle = match channel_of(target as *mut rdma_event_channel) {
        Ok(t) => t.handle,
        Err(e) => return Err(e),
    };
    if let Err(e) = call(CmRequest::MigrateId {
        id: c.handle,
        channel: handle,
    }) {
        if sync {
            destroy_channel(target);
        }
        return Err(e);
    }
    if c.sync {
        if !c.id.event.is_null() {
            ack(c.id.event);
            c.id.event = core::ptr::null_mut();
        }
        destroy_channel(c.id.channel as *mut Channel);
    }
    c.sync = sync;
    c.id.channel = target as *mut rdma_event_channel;
    c.shared.wait_all_acked();
    Ok(())
}

#[no_mangle]
pub extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        let value = if optlen == 0 {
            Vec::new()
        } else if optval.is_null() {
            // The kernel's copy_from_user of a NULL buffer.
            return Err(Errno(libc::EFAULT));
        } else {
            // SAFETY: the caller gave optlen readable bytes at optval.
            unsafe { core::slice::from_raw_parts(optval as *const u8, optlen) }.to_vec()
        };
        call(CmRequest::SetOption {
            id: c.handle,
            level,
            optname,
            value,
        })?;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    ffi::value(0, || {
        cm(id).map_or(0, |c| addr::port_be(&c.id.route.addr.src_addr))
    })
}

#[no_mangle]
pub extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    ffi::value(0, || {
        cm(id).map_or(0, |c| addr::port_be(&c.id.route.addr.dst_addr))
    })
}

/// `rdma_set_local_ece`: recorded as librdmacm records it; the device has no ECE
/// (`ibv_query_ece` answers EOPNOTSUPP), so it never reaches the wire.
#[no_mangle]
pub extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        let e = ffi::nonnull(ece)?;
        if !c.id.qp.is_null() || e.vendor_id == 0 || e.comp_mask != 0 {
            return Err(Errno::EINVAL);
        }
        c.local_ece = ibv_ece {
            vendor_id: e.vendor_id,
            options: e.options,
            comp_mask: 0,
        };
        Ok(())
    })
}

/// `rdma_get_remote_ece`: no peer ever sends ECE here, so all zero (as librdmacm reports
/// a peer without ECE).
#[no_mangle]
pub extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        let e = ffi::nonnull(ece)?;
        if !c.id.qp.is_null() {
            return Err(Errno::EINVAL);
        }
        *e = ibv_ece::default();
        Ok(())
    })
}
