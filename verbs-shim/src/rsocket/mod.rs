//! librdmacm's rsockets (`<rdma/rsocket.h>`): stream sockets over RC QPs, speaking
//! rdma-core's rsocket protocol so either end may be rdma-core's own librdmacm, and so
//! Debian's unmodified `librspreload.so` carries TCP programs over rdma-emu.
//!
//! - [`proto`]: the wire layout (connection private data, 32-bit messages, SGEs);
//! - [`recv`]: the receive-side bookkeeping a hostile peer is checked against;
//! - [`stream`]: a connected socket's data path (credits, RDMA WRITE WITH IMMEDIATE or,
//!   on iWARP, WRITE + inline SEND);
//! - [`iomap`]: the `riomap`/`riowrite` mappings;
//! - [`ep`]: the verbs underneath (the shim's own functions, no daemon request of its own);
//! - [`sock`]: socket states (bind, listen, accept, connect, shutdown, options);
//! - [`opts`]: socket options;
//! - [`poll`]: `rpoll`/`rselect` over rsockets and ordinary descriptors;
//! - [`api`]: the exported C functions.
//!
//! An rsocket's number is a real descriptor, as in rdma-core: the event channel of its
//! RDMA CM id. Datagram rsockets (`SOCK_DGRAM`, rsocket.c's UD service) are not
//! provided: `rsocket` refuses them with ENOTSUP (see docs/compatibility.md).
pub mod api;
pub mod ep;
pub mod iomap;
pub mod opts;
pub mod poll;
pub mod proto;
pub mod recv;
pub mod sock;
pub mod stream;

use sock::Sock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// One rsocket: its state behind a lock, and a second lock that serialises sleeping on
/// its completion channel (so `rsend` and `rrecv` of two threads both progress, as
/// rsocket.c's `cq_lock`/`cq_wait_lock` allow).
pub struct RSock {
    pub fd: i32,
    pub inner: Mutex<Sock>,
    pub wait: Mutex<()>,
}

impl RSock {
    pub fn lock(&self) -> MutexGuard<'_, Sock> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn table() -> MutexGuard<'static, HashMap<i32, Arc<RSock>>> {
    static T: OnceLock<Mutex<HashMap<i32, Arc<RSock>>>> = OnceLock::new();
    T.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

pub fn lookup(fd: i32) -> Option<Arc<RSock>> {
    table().get(&fd).cloned()
}

pub fn insert(s: Sock) -> i32 {
    let fd = s.fd();
    table().insert(
        fd,
        Arc::new(RSock {
            fd,
            inner: Mutex::new(s),
            wait: Mutex::new(()),
        }),
    );
    fd
}

pub fn remove(fd: i32) -> Option<Arc<RSock>> {
    table().remove(&fd)
}
