//! The device context every verb reaches its daemon through: the shim's state behind
//! an `ibv_context`, and the table of objects the daemon's events name. A leaf: the
//! verbs and the data path use it, it names none of them.
use crate::abi::*;
use crate::client::Session;
use crate::ffi::{Errno, VResult};
use crate::mmap::Mapping;
use core::ffi::c_void;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use wire::client::{DeviceAttr, GidEntry, Handle, PortAttr, ReplyBody, RequestBody};

/// A device context: `verbs_context` (whose tail is the `ibv_context` handed to the
/// application) followed by the shim's own state.
#[repr(C)]
pub struct Context {
    pub vctx: verbs_context,
    pub session: Arc<Session>,
    pub handle: Handle,
    pub device_attr: DeviceAttr,
    pub ports: Vec<PortAttr>,
    pub gids: Vec<GidEntry>,
    pub async_fd: OwnedFd,
    /// Behind `ibv_context.cmd_fd` (see `command_fd`).
    pub cmd_fd: OwnedFd,
    pub doorbell: OwnedFd,
    pub session_page: Mapping,
    /// CQs, QPs and SRQs by daemon handle (events name them this way).
    pub objects: Mutex<Objects>,
    /// Work was published on a ring since a poll of one of this context's CQs last
    /// found it empty (`backoff::empty_poll`).
    pub posted: AtomicBool,
}

#[derive(Default)]
pub struct Objects {
    pub cqs: HashMap<u32, usize>,
    pub qps: HashMap<u32, usize>,
    pub srqs: HashMap<u32, usize>,
    /// Async events handed to the application per object (see `crate::async_event`).
    pub events_reported: HashMap<(EventObject, u32), u32>,
}

impl Context {
    /// The shim context around an `ibv_context` this shim created.
    pub fn from_ibv<'a>(ctx: *mut ibv_context) -> VResult<&'a Context> {
        if ctx.is_null() {
            return Err(Errno::EINVAL);
        }
        let off = core::mem::offset_of!(Context, vctx.context);
        // SAFETY: every ibv_context the shim hands out sits at `off` inside a Context
        // (open_device), which lives until close_device.
        Ok(unsafe { &*((ctx as *mut u8).sub(off) as *const Context) })
    }

    pub fn ibv(&self) -> *mut ibv_context {
        &self.vctx.context as *const ibv_context as *mut ibv_context
    }

    pub fn call(&self, body: RequestBody) -> VResult<ReplyBody> {
        self.session.call(body, &[]).map(|(r, _)| r)
    }

    /// After publishing work on a ring: wake the engine if it sleeps (contracts §3).
    pub fn ring_doorbell(&self) {
        // Read first: an already set mark is not written again (threads that post in
        // parallel would otherwise pass this cache line around on every post).
        if !self.posted.load(Ordering::Relaxed) {
            self.posted.store(true, Ordering::Relaxed);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        let sleeping =
            wire::client::SessionPage::new(self.session_page.words()).is_some_and(|p| p.sleeping());
        if sleeping {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a live u64 to our eventfd.
            let _ = unsafe {
                libc::write(
                    self.doorbell.as_raw_fd(),
                    &one as *const u64 as *const c_void,
                    8,
                )
            };
        }
    }

    /// The attributes of port `port` (numbered from 1).
    pub fn port(&self, port: u8) -> VResult<&PortAttr> {
        if port == 0 {
            return Err(Errno::EINVAL);
        }
        self.ports.get(usize::from(port) - 1).ok_or(Errno::EINVAL)
    }
}

/// The kind of object an event's element points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventObject {
    Cq,
    Qp,
    Srq,
}
