//! The clients connected to the control socket.

use std::os::fd::OwnedFd;

/// Most objects one session may hold.
pub const MAX_OBJECTS_PER_SESSION: usize = 1 << 18;

/// A connected client, named by the kernel's credentials of its connection
/// (`SO_PEERCRED`, `SO_PEERGROUPS`) as they were when it connected (`users.rs`).
pub struct Session {
    pub sock: OwnedFd,
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub hello: bool,
    pub objects: usize,
}
