//! Event channels and `rdma_cm_id`s: creation and destruction, the id registry the
//! event path looks ids up in, address binding and resolution, listen, migrate, options.
use super::abi::*;
use super::device::{self, DeviceRef};
use super::{addr, call, call_fds, Errno, VResult};
use crate::abi::{ibv_qp_init_attr, IBV_QPT_RC, IBV_QPT_UD};
use crate::ffi;
use crate::log::shim_log;
use core::ffi::{c_int, c_void};
use libc::sockaddr;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use wire::client::cm::{ps, CmIdInfo, CmReply, CmRequest};
use wire::client::Handle;

// ---- event accounting -------------------------------------------------------------------

/// Events handed to the application for one id, and how many it acknowledged
/// (librdmacm's `events_completed` with the kernel's `events_reported`):
/// `rdma_destroy_id` and `rdma_migrate_id` wait until both match.
#[derive(Default)]
pub struct Shared {
    counts: Mutex<(u64, u64)>,
    cond: Condvar,
}

impl Shared {
    fn report(&self) {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
    }

    /// `ucma_complete_event`.
    pub fn complete(&self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.1 += 1;
        self.cond.notify_all();
    }

    fn wait_all_acked(&self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        while c.1 < c.0 {
            c = self.cond.wait(c).unwrap_or_else(|p| p.into_inner());
        }
    }
}

// ---- channels ---------------------------------------------------------------------------

/// `struct rdma_event_channel` and the daemon's name for it. `ch.fd` is the read end of
/// the pipe the daemon writes one token per queued event into.
#[repr(C)]
pub struct Channel {
    pub ch: rdma_event_channel,
    pub handle: Handle,
}

pub fn channel_of<'a>(p: *mut rdma_event_channel) -> VResult<&'a Channel> {
    // SAFETY: every rdma_event_channel the shim returns is the first field of a Channel,
    // which lives until rdma_destroy_event_channel.
    unsafe { (p as *const Channel).as_ref() }.ok_or(Errno::EINVAL)
}

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

/// A multicast group joined on an id (`struct cma_multicast`).
pub struct Multicast {
    pub addr: SocketAddr,
    pub context: *mut c_void,
    pub join_flags: u32,
    /// Set by the MULTICAST_JOIN event.
    pub joined: bool,
    pub mgid: crate::abi::ibv_gid,
    pub mlid: u16,
}

/// `struct cma_id_private`: the application's `rdma_cm_id` followed by librdmacm's state.
#[repr(C)]
pub struct CmId {
    pub id: rdma_cm_id,
    pub handle: Handle,
    pub shared: Arc<Shared>,
    /// Created without a channel: a private one, and every call waits for its event.
    pub sync: bool,
    /// The active side failed after CONNECT_RESPONSE: later REJECTED/DISCONNECTED are
    /// swallowed (cma.c's `connect_error`).
    pub connect_error: bool,
    pub initiator_depth: u8,
    pub responder_resources: u8,
    pub dev: Option<DeviceRef>,
    /// `rdma_addrinfo.ai_connect` of `rdma_create_ep`: prepended to the private data.
    pub connect: Vec<u8>,
    /// `rdma_create_ep` on a passive endpoint: the QP every `rdma_get_request` id gets.
    pub qp_init_attr: Option<ibv_qp_init_attr>,
    pub path: Option<Box<ibv_sa_path_rec>>,
    pub local_ece: ibv_ece,
    pub mcs: Vec<Multicast>,
}

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

/// The private state around an `rdma_cm_id` the application passes in.
pub fn cm<'a>(p: *mut rdma_cm_id) -> VResult<&'a mut CmId> {
    // SAFETY: every rdma_cm_id the shim returns is the first field of a CmId, live until
    // rdma_destroy_id; as with librdmacm, the caller does not use one id from two
    // threads at once.
    unsafe { (p as *mut CmId).as_mut() }.ok_or(Errno::EINVAL)
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
        super::event::ack(c.id.event);
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

// ---- addresses and routes ---------------------------------------------------------------

impl CmId {
    /// `ucma_query_route`'s effect: addresses, GIDs, P_Key, path record, and on first
    /// sight of a device, `verbs`/`pd`/`port_num`.
    pub fn apply(&mut self, info: &CmIdInfo) -> VResult<()> {
        let a = &mut self.id.route.addr;
        if let Some(s) = &info.src {
            addr::write(&mut a.src_addr, s);
        }
        if let Some(d) = &info.dst {
            addr::write(&mut a.dst_addr, d);
        }
        a.addr.sgid.raw = info.sgid;
        a.addr.dgid.raw = info.dgid;
        a.addr.pkey = info.pkey.to_be();
        if let (Some(p), true) = (&info.path, info.num_paths > 0) {
            let rec = Box::new(ibv_sa_path_rec {
                dgid: crate::abi::ibv_gid { raw: info.dgid },
                sgid: crate::abi::ibv_gid { raw: info.sgid },
                dlid: 0,
                slid: 0,
                raw_traffic: 0,
                flow_label: p.flow_label.to_be(),
                hop_limit: p.hop_limit,
                traffic_class: p.traffic_class,
                reversible: 1,
                numb_path: 1,
                pkey: info.pkey.to_be(),
                sl: p.sl,
                // IBA 15.2.5.16: selector 2 = "exactly this value".
                mtu_selector: 2,
                mtu: p.mtu as u8,
                rate_selector: 2,
                rate: p.rate,
                packet_life_time_selector: 2,
                packet_life_time: p.packet_life_time,
                preference: 0,
            });
            self.path = Some(rec);
            self.id.route.path_rec = self
                .path
                .as_deref_mut()
                .map_or(core::ptr::null_mut(), |r| r as *mut ibv_sa_path_rec);
            self.id.route.num_paths = 1;
        }
        if self.dev.is_none() {
            if let Some(name) = &info.device {
                let d = device::get(name)?;
                self.dev = Some(d);
                self.id.verbs = d.verbs;
                self.id.pd = d.pd;
                self.id.port_num = info.port_num;
            }
        }
        Ok(())
    }

    /// Asks the daemon for the id's addresses and route and applies them.
    pub fn query(&mut self) -> VResult<()> {
        match call(CmRequest::Query { id: self.handle })? {
            Some(CmReply::Info(info)) => self.apply(&info),
            _ => Err(Errno::EIO),
        }
    }

    fn apply_reply(&mut self, reply: Option<CmReply>) -> VResult<()> {
        match reply {
            Some(CmReply::Info(info)) => self.apply(&info),
            _ => self.query(),
        }
    }

    pub fn channel(&self) -> VResult<&Channel> {
        channel_of(self.id.channel)
    }
}

/// `ucma_complete`: for a synchronous id, waits for the event the call started and
/// turns a failed one into an errno (REJECTED is ECONNREFUSED). The event stays in
/// `id->event` until the next call acknowledges it.
pub fn complete(c: &mut CmId) -> VResult<()> {
    if !c.sync {
        return Ok(());
    }
    if !c.id.event.is_null() {
        super::event::ack(c.id.event);
        c.id.event = core::ptr::null_mut();
    }
    let ev = super::event::get(c.id.channel)?;
    c.id.event = ev;
    // SAFETY: get returned a live event owned by the application side until acked.
    let (event, status) = unsafe { ((*ev).event, (*ev).status) };
    match status {
        0 => Ok(()),
        _ if event as u32 == wire::client::cm::event::REJECTED => Err(Errno(libc::ECONNREFUSED)),
        s if s < 0 => Err(Errno(-s)),
        s => Err(Errno(s)),
    }
}

#[no_mangle]
pub extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        // SAFETY: addr is NULL or a socket address of its family's size (API contract).
        let a = unsafe { addr::read(addr) }?;
        let reply = call(CmRequest::BindAddr {
            id: c.handle,
            addr: a,
        })?;
        c.apply_reply(reply)
    })
}

#[no_mangle]
pub extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut sockaddr,
    dst_addr: *mut sockaddr,
    timeout_ms: c_int,
) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        // SAFETY: both are NULL or socket addresses of their family's size (API contract).
        let dst = unsafe { addr::read(dst_addr) }?;
        let src = if src_addr.is_null() {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { addr::read(src_addr) }?)
        };
        call(CmRequest::ResolveAddr {
            id: c.handle,
            src,
            dst,
            timeout_ms: timeout_ms.max(0) as u32,
        })?;
        addr::write(&mut c.id.route.addr.dst_addr, &dst);
        complete(c)
    })
}

#[no_mangle]
pub extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        call(CmRequest::ResolveRoute {
            id: c.handle,
            timeout_ms: timeout_ms.max(0) as u32,
        })?;
        complete(c)
    })
}

#[no_mangle]
pub extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    ffi::minus_one(|| {
        let c = cm(id)?;
        call(CmRequest::Listen {
            id: c.handle,
            backlog,
        })?;
        c.query()
    })
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
            super::event::ack(c.id.event);
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
