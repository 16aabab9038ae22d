//! The engine's epoll tokens: what woke it. The top byte says the kind of source, the
//! low bits which one (a session id, a context handle, a device and GID slot).

/// The control socket: a client is connecting.
pub const T_LISTENER: u64 = 1;
/// The timerfd set to the earliest deadline of any core, CM agent or fault rule.
pub const T_TIMER: u64 = 2;
/// The shutdown eventfd.
pub const T_WAKE: u64 = 3;
/// The SIGHUP eventfd (`served/reload.rs`).
pub const T_RELOAD: u64 = 4;
/// The rtnetlink socket: an interface address changed.
pub const T_NETLINK: u64 = 5;
/// A session's control socket; low bits = session id.
pub const T_SESSION: u64 = 1 << 56;
/// A context's doorbell eventfd; low bits = context handle.
pub const T_DOORBELL: u64 = 2 << 56;
/// A device's datagram socket; low bits = device << 16 | GID slot ([`udp_token`]).
pub const T_UDP: u64 = 3 << 56;
/// siw: a device's TCP sockets (one epoll set per device); low bits = device index.
pub const T_STREAM: u64 = 4 << 56;
/// The mask of the kind byte.
pub const T_KIND: u64 = 0xff << 56;

/// The epoll token of device `dev`'s 4791 socket at GID index `slot` (stable while the
/// address stays, so an address change re-registers only the sockets it opens).
pub fn udp_token(dev: usize, slot: usize) -> u64 {
    T_UDP | (dev as u64) << 16 | slot as u64
}
