//! `rdma_get_cm_event` / `rdma_ack_cm_event`, and what librdmacm does with each event
//! before the application sees it (cma.c's `rdma_get_cm_event` switch).
use super::abi::*;
use super::device;
use super::id::{self, lookup_and_report};
use super::qp;
use super::request::call;
use super::state::{ack, channel_of, Channel, CmEvent, CmId, Shared};
use crate::abi::IBV_TRANSPORT_IB;
use crate::ffi::{self, Errno, VResult};
use crate::log::shim_log;
use core::ffi::{c_char, c_int, c_void, CStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use wire::client::cm::{event as ev, CmConnParam, CmEventParam, CmEventRecord, CmEventToken};
use wire::client::cm::{CmReply, CmRequest};

/// Waits for one token on the channel's pipe: blocks, or fails with EAGAIN, as the
/// descriptor's `O_NONBLOCK` says. `fd` is the caller's own copy of the channel's
/// descriptor ([`get`]), valid for the whole call.
///
/// End of file means the daemon closed the channel: this process destroyed it while
/// another thread waited here (rping's CM thread does), or the daemon is gone. No event
/// can come any more ([`no_event_can_come`]).
fn read_token(fd: c_int) -> VResult<()> {
    let mut buf = [0u8; CmEventToken::LEN];
    loop {
        // SAFETY: reading at most buf.len() bytes into a live buffer.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut c_void, buf.len()) };
        if n > 0 {
            return Ok(());
        }
        if n == 0 {
            shim_log!("rdma cm: event channel closed; no event can arrive");
            return Err(no_event_can_come(fd));
        }
        let e = Errno::last();
        if e.0 != libc::EINTR {
            return Err(e);
        }
    }
}

/// The call behaves as librdmacm's `read(2)` on a channel no event reaches any more:
/// EAGAIN when the descriptor is non-blocking, otherwise it never returns.
fn no_event_can_come(fd: c_int) -> Errno {
    // SAFETY: F_GETFL on the caller's own live descriptor has no memory effects.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags >= 0 && flags & libc::O_NONBLOCK != 0 {
        return Errno::EAGAIN;
    }
    loop {
        std::thread::park();
    }
}

pub fn get(channel: *mut rdma_event_channel) -> VResult<*mut rdma_cm_event> {
    let ch = channel_of(channel)?;
    // Another thread may destroy the channel while this one waits (rping's main thread
    // does, while its CM thread waits here): the Channel is freed and its descriptor
    // closed, its number maybe reused. So the handle is copied now, and the pipe is read
    // through a descriptor of this call's own, as the kernel's read holds its file.
    let handle = ch.handle;
    // SAFETY: dup of the channel's live descriptor; the copy is owned here.
    let own = unsafe { libc::dup(ch.ch.fd) };
    if own < 0 {
        return Err(Errno::last());
    }
    // SAFETY: `own` was just returned by dup and is closed once, by this OwnedFd.
    let own = unsafe { OwnedFd::from_raw_fd(own) };
    loop {
        read_token(own.as_raw_fd())?;
        let rec = match call(CmRequest::GetEvent { channel: handle }) {
            Ok(Some(CmReply::Event(rec))) => rec,
            // A token whose event went away with its id (or moved to another channel).
            Err(Errno::EAGAIN) => continue,
            // The channel was destroyed after this thread took a token (the token of an
            // event of an id destroyed meanwhile). The kernel's ucma drops a destroyed
            // id's events and its reader goes on waiting on a file no event reaches any
            // more; so does this one, rather than fail a call the application no longer
            // waits for.
            Err(Errno::ENOENT) => {
                shim_log!("rdma cm: event channel destroyed while waited on");
                return Err(no_event_can_come(own.as_raw_fd()));
            }
            Err(e) => return Err(e),
            Ok(other) => {
                shim_log!("rdma cm: unexpected GetEvent reply {other:?}");
                return Err(Errno::EIO);
            }
        };
        shim_log!(
            "rdma cm: event {} status {} on id {}",
            event_name(rec.event as c_int),
            rec.status,
            rec.id.0
        );
        if let Some(e) = process(rec) {
            return Ok(e);
        }
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
        ack(c.id.event);
        c.id.event = core::ptr::null_mut();
    }
    let ev = get(c.id.channel)?;
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

fn new_event(id: *mut CmId, rec: &CmEventRecord, shared: Arc<Shared>) -> Box<CmEvent> {
    Box::new(CmEvent {
        event: rdma_cm_event {
            id: id as *mut rdma_cm_id,
            listen_id: core::ptr::null_mut(),
            event: rec.event as c_int,
            status: rec.status,
            // SAFETY: both union members are plain data; all-zero is valid.
            param: unsafe { core::mem::zeroed() },
        },
        private_data: [0; RDMA_MAX_PRIVATE_DATA],
        shared,
    })
}

/// Copies the record's parameters into the event (`ucma_copy_conn_event` /
/// `ucma_copy_ud_event`); private data lives in the event itself.
fn copy_param(e: &mut CmEvent, param: &CmEventParam) {
    let data = |e: &mut CmEvent, d: &[u8]| -> (*const c_void, u8) {
        let n = d.len().min(RDMA_MAX_PRIVATE_DATA).min(255);
        e.private_data[..n].copy_from_slice(&d[..n]);
        let p = if n == 0 {
            core::ptr::null()
        } else {
            e.private_data.as_ptr() as *const c_void
        };
        (p, n as u8)
    };
    match param {
        CmEventParam::None => {}
        CmEventParam::Conn(c) => {
            let (private_data, private_data_len) = data(e, &c.private_data);
            e.event.param.conn = conn_from(c, private_data, private_data_len);
        }
        CmEventParam::Ud {
            private_data,
            ah_attr,
            qp_num,
            qkey,
        } => {
            let (p, len) = data(e, private_data);
            e.event.param.ud = rdma_ud_param {
                private_data: p,
                private_data_len: len,
                ah_attr: crate::verbs::ah_attr_from_wire(ah_attr),
                qp_num: *qp_num,
                qkey: *qkey,
            };
        }
    }
}

fn conn_from(c: &CmConnParam, private_data: *const c_void, len: u8) -> rdma_conn_param {
    rdma_conn_param {
        private_data,
        private_data_len: len,
        responder_resources: c.responder_resources,
        initiator_depth: c.initiator_depth,
        flow_control: c.flow_control,
        retry_count: c.retry_count,
        rnr_retry_count: c.rnr_retry_count,
        srq: c.srq,
        qp_num: c.qp_num,
    }
}

/// Turns one daemon event into the application's, or `None` when librdmacm would
/// swallow it (unknown id, a failed CONNECT_REQUEST, REJECTED after CONNECT_ERROR).
fn process(rec: CmEventRecord) -> Option<*mut rdma_cm_event> {
    let is_request = rec.event == ev::CONNECT_REQUEST;
    let owner = if is_request {
        rec.listen_id.unwrap_or(rec.id)
    } else {
        rec.id
    };
    let Some((idp, shared)) = lookup_and_report(owner) else {
        shim_log!("rdma cm: discarding an event of unknown id {}", owner.0);
        if is_request {
            let _ = call(CmRequest::DestroyId { id: rec.id });
        }
        return None;
    };
    // SAFETY: the registry holds only live ids; this event is counted against the id,
    // so rdma_destroy_id waits for its acknowledgement before freeing it.
    let c = unsafe { &mut *idp };
    let mut e = new_event(idp, &rec, shared);
    let failed = -1; // what librdmacm stores in `status` when its own step fails (ERR())
    match rec.event {
        ev::ADDR_RESOLVED => {
            if c.query().is_err() || c.id.verbs.is_null() {
                e.event.event = ev::ADDR_ERROR as c_int;
                e.event.status = failed;
            }
        }
        ev::ROUTE_RESOLVED => {
            if device::transport(c.id.verbs) == IBV_TRANSPORT_IB && c.query().is_err() {
                e.event.event = ev::ROUTE_ERROR as c_int;
                e.event.status = failed;
            }
        }
        ev::CONNECT_REQUEST => {
            copy_param(&mut e, &rec.param);
            match request_id(c, &rec) {
                Ok(new) => {
                    e.event.listen_id = idp as *mut rdma_cm_id;
                    e.event.id = new as *mut rdma_cm_id;
                }
                Err(err) => {
                    shim_log!("rdma cm: dropping a connect request: errno {}", err.0);
                    e.shared.complete();
                    return None;
                }
            }
        }
        ev::CONNECT_RESPONSE => {
            copy_param(&mut e, &rec.param);
            if !c.id.qp.is_null() {
                match qp::finish_connect(c) {
                    Ok(()) => e.event.event = ev::ESTABLISHED as c_int,
                    Err(err) => {
                        shim_log!("rdma cm: connect response failed: errno {}", err.0);
                        e.event.event = ev::CONNECT_ERROR as c_int;
                        e.event.status = failed;
                        c.connect_error = true;
                    }
                }
            }
        }
        ev::REJECTED | ev::DISCONNECTED if c.connect_error => {
            e.shared.complete();
            return None;
        }
        ev::REJECTED | ev::UNREACHABLE | ev::CONNECT_ERROR => {
            copy_param(&mut e, &rec.param);
            // The connection never came up: its QP can carry no traffic
            // (ucma_modify_qp_err). Not on DISCONNECTED: by then the application owns the
            // QP's teardown (rdma_disconnect moves it to ERROR) and may be destroying it
            // on another thread, as rping does.
            let _ = qp::modify_qp_err(c);
        }
        ev::MULTICAST_JOIN | ev::MULTICAST_ERROR => {
            copy_param(&mut e, &rec.param);
            multicast_event(c, &mut e);
        }
        _ => copy_param(&mut e, &rec.param),
    }
    Some(Box::into_raw(e) as *mut rdma_cm_event)
}

/// The new id of a CONNECT_REQUEST (`ucma_process_conn_req`): the listener's channel,
/// context, port space and QP type; a synchronous listener's requests get private
/// channels.
fn request_id(listener: &mut CmId, rec: &CmEventRecord) -> VResult<*mut CmId> {
    let new = id::alloc(
        rec.id,
        listener.id.channel as *mut Channel,
        listener.id.context,
        listener.id.ps as u32,
        listener.id.qp_type,
        false,
    );
    // SAFETY: just allocated and registered; nothing else knows it yet.
    let n = unsafe { &mut *new };
    if let CmEventParam::Conn(p) = &rec.param {
        n.initiator_depth = p.initiator_depth;
        n.responder_resources = p.responder_resources;
    }
    let mut ready = Ok(());
    if listener.sync {
        ready = id::migrate(n, core::ptr::null_mut());
    }
    if ready.is_ok() {
        ready = match &rec.new_id {
            Some(info) => n.apply(info),
            None => n.query(),
        };
    }
    if let Err(e) = ready {
        let _ = id::destroy(new as *mut rdma_cm_id);
        return Err(e);
    }
    Ok(new)
}

/// The MGID the CMA gives group `group` on RoCE v2 (`cma_iboe_set_mgid`): an IPv4
/// group's IPv4-mapped address, an IPv6 group's own.
fn roce_mgid(group: &std::net::SocketAddr) -> [u8; 16] {
    match group.ip() {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(v6) => v6.octets(),
    }
}

/// MULTICAST_JOIN / MULTICAST_ERROR (`ucma_process_join`): the pending join of the id
/// the event reports (the oldest one of the event's MGID, else the oldest one: the
/// kernel names it by the `uid` it was given); its context goes in
/// `param.ud.private_data`, and a joined group is attached to the id's QP.
fn multicast_event(c: &mut CmId, e: &mut CmEvent) {
    let qp = c.id.qp;
    // SAFETY: copy_param wrote the `ud` member for these events (or left zeros).
    let ud = unsafe { &mut e.event.param.ud };
    let dgid = ud.ah_attr.grh.dgid.raw;
    let pos = c
        .mcs
        .iter()
        .position(|m| !m.joined && roce_mgid(&m.addr) == dgid)
        .or_else(|| c.mcs.iter().position(|m| !m.joined));
    let Some(mc) = pos.map(|i| &mut c.mcs[i]) else {
        return;
    };
    ud.private_data = mc.context;
    if e.event.event as u32 != ev::MULTICAST_JOIN {
        return;
    }
    mc.joined = true;
    mc.mgid = ud.ah_attr.grh.dgid;
    mc.mlid = ud.ah_attr.dlid;
    if qp.is_null() || mc.join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER {
        return;
    }
    if crate::misc::ibv_attach_mcast(qp, &mc.mgid, mc.mlid) != 0 {
        e.event.event = ev::MULTICAST_ERROR as c_int;
        e.event.status = -1;
    }
}

#[no_mangle]
pub extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    ffi::minus_one(|| {
        let out = ffi::nonnull(event)?;
        *out = get(channel)?;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    ffi::minus_one(|| {
        if event.is_null() {
            return Err(Errno::EINVAL);
        }
        ack(event);
        Ok(())
    })
}

const EVENT_NAMES: [&CStr; 16] = [
    c"RDMA_CM_EVENT_ADDR_RESOLVED",
    c"RDMA_CM_EVENT_ADDR_ERROR",
    c"RDMA_CM_EVENT_ROUTE_RESOLVED",
    c"RDMA_CM_EVENT_ROUTE_ERROR",
    c"RDMA_CM_EVENT_CONNECT_REQUEST",
    c"RDMA_CM_EVENT_CONNECT_RESPONSE",
    c"RDMA_CM_EVENT_CONNECT_ERROR",
    c"RDMA_CM_EVENT_UNREACHABLE",
    c"RDMA_CM_EVENT_REJECTED",
    c"RDMA_CM_EVENT_ESTABLISHED",
    c"RDMA_CM_EVENT_DISCONNECTED",
    c"RDMA_CM_EVENT_DEVICE_REMOVAL",
    c"RDMA_CM_EVENT_MULTICAST_JOIN",
    c"RDMA_CM_EVENT_MULTICAST_ERROR",
    c"RDMA_CM_EVENT_ADDR_CHANGE",
    c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
];

fn event_cstr(event: c_int) -> &'static CStr {
    usize::try_from(event)
        .ok()
        .and_then(|i| EVENT_NAMES.get(i))
        .copied()
        .unwrap_or(c"UNKNOWN EVENT")
}

fn event_name(event: c_int) -> std::borrow::Cow<'static, str> {
    event_cstr(event).to_string_lossy()
}

#[no_mangle]
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    event_cstr(event).as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_str_names_every_event_and_unknown_ones() {
        // SAFETY: rdma_event_str returns static NUL-terminated strings.
        let s = |e| {
            unsafe { CStr::from_ptr(rdma_event_str(e)) }
                .to_str()
                .unwrap()
        };
        assert_eq!(s(0), "RDMA_CM_EVENT_ADDR_RESOLVED");
        assert_eq!(s(ev::ESTABLISHED as c_int), "RDMA_CM_EVENT_ESTABLISHED");
        assert_eq!(s(ev::TIMEWAIT_EXIT as c_int), "RDMA_CM_EVENT_TIMEWAIT_EXIT");
        assert_eq!(s(16), "UNKNOWN EVENT");
        assert_eq!(s(-1), "UNKNOWN EVENT");
    }

    #[test]
    fn private_data_lives_in_the_event() {
        let rec = CmEventRecord {
            id: wire::client::Handle(1),
            listen_id: None,
            event: ev::REJECTED,
            status: 28,
            new_id: None,
            param: CmEventParam::Conn(CmConnParam {
                private_data: vec![7; 56],
                responder_resources: 4,
                ..CmConnParam::default()
            }),
        };
        let mut e = new_event(core::ptr::null_mut(), &rec, Arc::default());
        copy_param(&mut e, &rec.param);
        // SAFETY: a Conn parameter fills the conn member.
        let conn = unsafe { e.event.param.conn };
        assert_eq!(conn.private_data_len, 56);
        assert_eq!(conn.private_data, e.private_data.as_ptr() as *const c_void);
        assert_eq!(conn.responder_resources, 4);
        assert_eq!(e.private_data[55], 7);
        assert_eq!(e.event.status, 28);
    }
}
