//! The CM's own state, apart from the engine: each session's event channels (with the
//! events queued for `GetEvent`), the CM ids and their states, and the port spaces'
//! bindings ([`CmTables`]); the `rdma_set_option` names and the port-space mapping.

use crate::daemon::sessions::objects::SessionId;
use emu_core::cm::{self as core_cm, ConnId};
use emu_core::QpType;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;
use wire::client::cm::{ps, CmEventRecord, CmEventToken, CmPath};
use wire::client::proto::Handle;

/// Ports `rdma_bind_addr` picks from for port 0 (Linux's default
/// `ip_local_port_range`).
pub(super) const EPHEMERAL: RangeInclusive<u16> = 32768..=60999;

/// `RDMA_OPTION_ID` (`rdma_set_option` level) and its option names.
pub(super) mod option {
    pub const LEVEL_ID: i32 = 0;
    pub const LEVEL_IB: i32 = 1;
    pub const ID_TOS: i32 = 0;
    pub const ID_REUSEADDR: i32 = 1;
    pub const ID_AFONLY: i32 = 2;
    pub const ID_ACK_TIMEOUT: i32 = 3;
}

/// Most CONNECT_REQUESTs a listener may have waiting (the ucma's `max_backlog`).
pub(super) const MAX_BACKLOG: usize = 1024;

/// `RDMA_CM_EVENT_*` names for the logs.
pub(super) fn event_name(ev: u32) -> &'static str {
    const NAMES: [&str; 16] = [
        "ADDR_RESOLVED",
        "ADDR_ERROR",
        "ROUTE_RESOLVED",
        "ROUTE_ERROR",
        "CONNECT_REQUEST",
        "CONNECT_RESPONSE",
        "CONNECT_ERROR",
        "UNREACHABLE",
        "REJECTED",
        "ESTABLISHED",
        "DISCONNECTED",
        "DEVICE_REMOVAL",
        "MULTICAST_JOIN",
        "MULTICAST_ERROR",
        "ADDR_CHANGE",
        "TIMEWAIT_EXIT",
    ];
    NAMES.get(ev as usize).copied().unwrap_or("?")
}

/// An event channel (`rdma_create_event_channel`).
pub(in crate::daemon) struct EventChannel {
    pub(super) session: SessionId,
    /// Write end of the shim's pipe (nonblocking).
    pub(super) write: OwnedFd,
    pub(super) events: VecDeque<CmEventRecord>,
    /// Tokens owed to the pipe because it was full; written as it drains. Never more
    /// than the events queued.
    pub(super) unwritten: usize,
    /// Ids that report to this channel (destroying it is EBUSY meanwhile).
    pub(super) users: usize,
}

impl EventChannel {
    /// Queues an event and writes its token (or owes it).
    pub(super) fn push(&mut self, ev: CmEventRecord) {
        self.events.push_back(ev);
        self.unwritten += 1;
        self.flush();
    }

    /// Writes owed tokens until the pipe is full. A pipe whose reader is gone gets none.
    pub(super) fn flush(&mut self) {
        while self.unwritten > 0 {
            match super::super::sys::write_record(self.write.as_raw_fd(), &CmEventToken::BYTES) {
                Ok(true) => self.unwritten -= 1,
                Ok(false) => break,
                Err(_) => {
                    self.unwritten = 0;
                    break;
                }
            }
        }
    }

    /// The oldest event.
    pub(super) fn pop(&mut self) -> Option<CmEventRecord> {
        let ev = self.events.pop_front()?;
        self.unwritten = self.unwritten.min(self.events.len());
        Some(ev)
    }

    /// Removes the events `drop` selects (their tokens, if written, stay in the pipe: the
    /// shim's `GetEvent` then gets EAGAIN, as for any spurious wake-up).
    pub(super) fn remove_where(
        &mut self,
        mut drop: impl FnMut(&CmEventRecord) -> bool,
    ) -> Vec<CmEventRecord> {
        let mut gone = Vec::new();
        let mut kept = VecDeque::with_capacity(self.events.len());
        for ev in self.events.drain(..) {
            if drop(&ev) {
                gone.push(ev);
            } else {
                kept.push_back(ev);
            }
        }
        self.events = kept;
        self.unwritten = self.unwritten.min(self.events.len());
        gone
    }
}

/// Where an id stands (the kernel's `enum rdma_cm_state`, the states the daemon needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::daemon) enum IdState {
    Idle,
    AddrBound,
    AddrResolved,
    RouteResolved,
    Listen,
    /// `rdma_connect` was called (the connection may since have ended).
    Connect,
    /// Created by a CONNECT_REQUEST.
    Passive,
}

/// A CM id (`rdma_create_id`).
pub(in crate::daemon) struct CmId {
    pub(super) session: SessionId,
    pub(super) channel: Handle,
    /// `RDMA_PS_*`.
    pub(super) ps: u32,
    pub(super) qp_type: QpType,
    pub(super) state: IdState,
    /// Bound source address (port included; IPv6 link-local with its scope).
    pub(super) src: Option<SocketAddr>,
    /// Destination (after `rdma_resolve_addr`, or the peer of a passive id).
    pub(super) dst: Option<SocketAddr>,
    /// The device the source address belongs to.
    pub(super) dev: Option<usize>,
    /// The agent's connection (active after `rdma_connect`, passive from its request).
    pub(super) conn: Option<ConnId>,
    /// iWARP: the siw device's TCP connection (instead of `conn`).
    pub(super) siw_conn: Option<crate::daemon::siw::ConnId>,
    /// A passive iWARP id: the request it was made for, while nobody fetched its
    /// CONNECT_REQUEST (a listener destroyed meanwhile hands it on, see `iwarp.rs`).
    pub(super) siw_request: Option<crate::daemon::siw::SiwCmEvent>,
    /// iWARP: the TCP listeners of a listening id, (device index, listener).
    pub(super) siw_listeners: Vec<(usize, crate::daemon::siw::ListenerId)>,
    /// The resolved route (`num_paths` 1).
    pub(super) path: Option<CmPath>,
    /// An active RC/UC id's connection attempt, while a REJ "invalid service ID" may
    /// still repeat its REQ (`rerequest.rs`).
    pub(super) rerequest: Option<super::rerequest::ReRequest>,
    /// Listener: most requests waiting to be fetched, and how many wait.
    pub(super) backlog: usize,
    pub(super) pending: usize,
    /// `rdma_set_option` values.
    pub(super) tos: Option<u8>,
    pub(super) ack_timeout: Option<u8>,
    pub(super) reuseaddr: bool,
    pub(super) afonly: bool,
}

impl CmId {
    pub(super) fn new(session: SessionId, channel: Handle, ps: u32, qp_type: QpType) -> CmId {
        CmId {
            session,
            channel,
            ps,
            qp_type,
            state: IdState::Idle,
            src: None,
            dst: None,
            dev: None,
            conn: None,
            siw_conn: None,
            siw_request: None,
            siw_listeners: Vec::new(),
            path: None,
            rerequest: None,
            backlog: 0,
            pending: 0,
            tos: None,
            ack_timeout: None,
            reuseaddr: false,
            afonly: false,
        }
    }
}

/// Every CM object of the daemon.
#[derive(Default)]
pub(in crate::daemon) struct CmTables {
    pub(super) channels: HashMap<Handle, EventChannel>,
    pub(super) ids: HashMap<Handle, CmId>,
    /// (`RDMA_PS_*`, port) → ids bound to it.
    pub(super) ports: HashMap<(u32, u16), Vec<Handle>>,
    /// (device index, connection) → id.
    pub(super) conns: HashMap<(usize, ConnId), Handle>,
    /// iWARP: (device index, TCP connection) → id.
    pub(super) siw_conns: HashMap<(usize, crate::daemon::siw::ConnId), Handle>,
    /// iWARP: (device index, TCP listener) → listening id.
    pub(super) siw_listeners: HashMap<(usize, crate::daemon::siw::ListenerId), Handle>,
    /// iWARP connection requests whose listener went away, held until a listener on the
    /// same address and port appears or the deadline passes (`iwarp::LISTEN_GRACE`).
    pub(super) siw_parked: Vec<(Instant, usize, crate::daemon::siw::SiwCmEvent)>,
    /// (device index, service ID) → listening ids using the agent's listener.
    pub(super) listens: HashMap<(usize, u64), usize>,
    /// Where the search for an ephemeral port starts.
    pub(super) next_port: u16,
    /// Some channel owes tokens to its pipe.
    pub(super) tokens_owed: bool,
}

impl CmTables {
    pub(in crate::daemon) fn new(seed: u64) -> CmTables {
        CmTables {
            next_port: EPHEMERAL.start() + (seed % 1000) as u16,
            ..CmTables::default()
        }
    }

    /// Whether the engine must come back soon: tokens owed to full pipes, iWARP
    /// requests waiting for a listener, or REQs to send again (`rerequest.rs`).
    pub(in crate::daemon) fn tokens_owed(&self) -> bool {
        self.tokens_owed
            || !self.siw_parked.is_empty()
            || self
                .ids
                .values()
                .any(|id| id.rerequest.as_ref().is_some_and(|r| r.due().is_some()))
    }

    /// Writes tokens owed to pipes that were full.
    pub(in crate::daemon) fn flush_tokens(&mut self) {
        if !self.tokens_owed {
            return;
        }
        let mut owed = false;
        for ch in self.channels.values_mut() {
            ch.flush();
            owed |= ch.unwritten > 0;
        }
        self.tokens_owed = owed;
    }

    pub(super) fn push_event(&mut self, rec: CmEventRecord) {
        let Some(id) = self.ids.get(&rec.id) else {
            return;
        };
        tracing::debug!(
            id = rec.id.0,
            event = event_name(rec.event),
            status = rec.status,
            "cm event"
        );
        if let Some(ch) = self.channels.get_mut(&id.channel) {
            ch.push(rec);
            self.tokens_owed |= ch.unwritten > 0;
        }
    }

    pub(super) fn simple_event(&mut self, id: Handle, ev: u32, status: i32) {
        self.push_event(CmEventRecord {
            id,
            listen_id: None,
            event: ev,
            status,
            new_id: None,
            param: wire::client::cm::CmEventParam::None,
        });
    }
}

/// The port space of a service ID (`RDMA_PS_*` low octet).
pub(super) fn port_space(ps: u32) -> core_cm::PortSpace {
    core_cm::PortSpace::from_code(ps as u8)
}

/// The QP type of an id, as the ucma derives it from the port space.
pub(super) fn id_qp_type(ps_value: u32, qp_type: u32) -> Result<QpType, i32> {
    match ps_value {
        ps::TCP => Ok(QpType::Rc),
        ps::UDP | ps::IPOIB => Ok(QpType::Ud),
        ps::IB => QpType::from_raw(qp_type).ok_or(libc::EINVAL),
        _ => Err(libc::EINVAL),
    }
}
