//! The process's rsockets, by descriptor number.
use super::sock::{RSock, Sock};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

fn table() -> MutexGuard<'static, HashMap<i32, Arc<RSock>>> {
    static T: OnceLock<Mutex<HashMap<i32, Arc<RSock>>>> = OnceLock::new();
    T.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// The rsocket numbered `fd`, if there is one.
pub fn lookup(fd: i32) -> Option<Arc<RSock>> {
    table().get(&fd).cloned()
}

/// Files `s` under its descriptor; returns that number.
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

/// Takes the rsocket numbered `fd` out of the table.
pub fn remove(fd: i32) -> Option<Arc<RSock>> {
    table().remove(&fd)
}
