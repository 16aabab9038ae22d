//! What librdmacm keeps beside the objects it hands out: `struct cma_id_private`
//! ([`CmId`]), the event channel ([`Channel`]), `struct cma_event` ([`CmEvent`]), and the
//! per-id count of events handed out and acknowledged ([`Shared`]). Creating, looking up
//! and destroying them is the business of [`super::id`] and [`super::event`]; this file
//! names neither.
use super::abi::*;
use super::addr;
use super::device::{self, DeviceRef};
use super::request::call;
use crate::abi::ibv_qp_init_attr;
use crate::ffi::{Errno, VResult};
use core::ffi::c_void;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use wire::client::cm::{CmIdInfo, CmReply, CmRequest};
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
    /// Counts one event handed out for the id.
    pub fn report(&self) {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
    }

    /// `ucma_complete_event`.
    pub fn complete(&self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.1 += 1;
        self.cond.notify_all();
    }

    /// Waits until every event handed out was acknowledged.
    pub fn wait_all_acked(&self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        while c.1 < c.0 {
            c = self.cond.wait(c).unwrap_or_else(|p| p.into_inner());
        }
    }
}

// ---- channels, ids and events ---------------------------------------------------------

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

/// The private state around an `rdma_cm_id` the application passes in.
pub fn cm<'a>(p: *mut rdma_cm_id) -> VResult<&'a mut CmId> {
    // SAFETY: every rdma_cm_id the shim returns is the first field of a CmId, live until
    // rdma_destroy_id; as with librdmacm, the caller does not use one id from two
    // threads at once.
    unsafe { (p as *mut CmId).as_mut() }.ok_or(Errno::EINVAL)
}

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

    /// Applies a reply that carries the id's info, or asks the daemon for it.
    pub fn apply_reply(&mut self, reply: Option<CmReply>) -> VResult<()> {
        match reply {
            Some(CmReply::Info(info)) => self.apply(&info),
            _ => self.query(),
        }
    }

    pub fn channel(&self) -> VResult<&Channel> {
        channel_of(self.id.channel)
    }
}

/// `struct cma_event`: the event the application holds until it acknowledges it, with
/// the private data it points to.
#[repr(C)]
pub struct CmEvent {
    pub event: rdma_cm_event,
    pub private_data: [u8; RDMA_MAX_PRIVATE_DATA],
    /// Whose events_completed the acknowledgement counts.
    pub shared: Arc<Shared>,
}

/// `rdma_ack_cm_event` for an event `super::event` made.
pub fn ack(e: *mut rdma_cm_event) {
    // SAFETY: every rdma_cm_event the shim hands out is the first field of a boxed
    // CmEvent; the application gives it back exactly once.
    let e = unsafe { Box::from_raw(e as *mut CmEvent) };
    e.shared.complete();
}
