//! The protocol between an application (the verbs shim) and the daemon `rdma-emud`.
//!
//! Two channels connect a client process to the daemon (see `docs/client-protocol.md`):
//!
//! - **Control** ([`proto`]): a unix `SOCK_SEQPACKET` socket at [`socket_path()`]. One
//!   datagram per message, at most [`MAX_MESSAGE_LEN`] bytes, each a postcard-encoded
//!   [`Request`] answered by exactly one [`Reply`] with the same `seq`. File descriptors
//!   travel beside the named messages with `SCM_RIGHTS`. Decoding never panics; the daemon
//!   answers an undecodable request with `EINVAL` (or closes the session when even the
//!   `seq` cannot be read).
//! - **Data** ([`ring`], [`slot`]): single-producer single-consumer rings in `memfd` shared
//!   memory that the daemon creates, sizes and seals. SQ, RQ and SRQ rings are produced by
//!   the client and consumed by the daemon; CQ rings the other way round. Work requests and
//!   completions are fixed-size little-endian slots ([`slot`]). A doorbell `eventfd` wakes
//!   the daemon only when its session page says it sleeps ([`ring::SessionPage`]).
//!
//! Events flow back through plain pipes ([`event`]): the async-event pipe of a device
//! context (8-byte [`event::AsyncEventRecord`]s) and completion channels (8-byte
//! [`event::CompEventRecord`]s).
//!
//! Numbers follow `<infiniband/verbs.h>` ([`verbs`]): opcodes, statuses, flags, masks and
//! event types cross the protocol with the values libibverbs gives them, so the shim copies
//! them 1:1 and the daemon translates them 1:1 into the core's types.

mod attr;
pub mod cm;
pub mod event;
pub mod fault;
pub mod proto;
pub mod ring;
pub mod slot;
pub mod verbs;
pub mod xrc;

pub use event::{AsyncEventRecord, CompEventRecord};
pub use proto::*;
pub use ring::{Consumer, Producer, RingError, RingLayout, RingView, SessionPage};

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The protocol version a client sends in `Hello` and the daemon answers with.
pub const PROTOCOL_VERSION: u32 = 2;

/// The largest control message (request or reply), in bytes.
pub const MAX_MESSAGE_LEN: usize = 64 * 1024;

/// Environment variable naming the daemon's control socket.
pub const SOCKET_ENV: &str = "RDMA_EMU_SOCKET";

/// The socket file's name inside its directory.
pub const SOCKET_FILE: &str = "rdma-emud.sock";

/// Where the system-wide daemon listens when no `XDG_RUNTIME_DIR` is set.
pub const SYSTEM_SOCKET_DIR: &str = "/run/rdma-emu";

/// The daemon's control socket as clients (the shim, `rdma-emu`) find it:
/// `$RDMA_EMU_SOCKET`; else the user's own daemon's,
/// `$XDG_RUNTIME_DIR/rdma-emu/rdma-emud.sock`, if one listens there; else the system
/// daemon's, `/run/rdma-emu/rdma-emud.sock`, if one listens there; else where the user's
/// own daemon would listen ([`daemon_socket_path`]), for the error message. Empty
/// variables count as unset. So a program of any user reaches a system daemon with no
/// setting, and a user's own daemon, when it runs, comes first.
pub fn socket_path() -> PathBuf {
    socket_path_from(|name| std::env::var_os(name), |p| p.exists())
}

/// [`socket_path`] with the environment and the file system's `exists` supplied by the
/// caller (for tests and for callers that captured the environment earlier).
pub fn socket_path_from(
    env: impl Fn(&str) -> Option<OsString>,
    exists: impl Fn(&Path) -> bool,
) -> PathBuf {
    let own = daemon_socket_path_from(&env);
    if env(SOCKET_ENV).is_some_and(|v| !v.is_empty()) {
        return own;
    }
    let system = PathBuf::from(SYSTEM_SOCKET_DIR).join(SOCKET_FILE);
    if !exists(&own) && exists(&system) {
        system
    } else {
        own
    }
}

/// Where a daemon listens unless told otherwise: `$RDMA_EMU_SOCKET`, else
/// `$XDG_RUNTIME_DIR/rdma-emu/rdma-emud.sock` (a user's own daemon), else
/// `/run/rdma-emu/rdma-emud.sock` (a system daemon, which has no runtime directory).
pub fn daemon_socket_path() -> PathBuf {
    daemon_socket_path_from(|name| std::env::var_os(name))
}

/// [`daemon_socket_path`] with the environment supplied by the caller.
pub fn daemon_socket_path_from(env: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    let set = |name: &str| env(name).filter(|v| !v.is_empty());
    if let Some(path) = set(SOCKET_ENV) {
        return PathBuf::from(path);
    }
    if let Some(dir) = set("XDG_RUNTIME_DIR") {
        return PathBuf::from(dir).join("rdma-emu").join(SOCKET_FILE);
    }
    PathBuf::from(SYSTEM_SOCKET_DIR).join(SOCKET_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn socket_path_prefers_the_explicit_variable() {
        let vars = [
            ("RDMA_EMU_SOCKET", "/tmp/x.sock"),
            ("XDG_RUNTIME_DIR", "/run/user/1"),
        ];
        assert_eq!(
            socket_path_from(env(&vars), |_| true),
            PathBuf::from("/tmp/x.sock")
        );
        assert_eq!(
            daemon_socket_path_from(env(&vars)),
            PathBuf::from("/tmp/x.sock")
        );
    }

    #[test]
    fn daemon_socket_path_falls_back_to_runtime_dir_then_run() {
        let p = daemon_socket_path_from(env(&[
            ("RDMA_EMU_SOCKET", ""),
            ("XDG_RUNTIME_DIR", "/run/user/7"),
        ]));
        assert_eq!(p, PathBuf::from("/run/user/7/rdma-emu/rdma-emud.sock"));
        let p = daemon_socket_path_from(env(&[]));
        assert_eq!(p, PathBuf::from("/run/rdma-emu/rdma-emud.sock"));
    }

    #[test]
    fn clients_reach_the_system_daemon_when_the_user_runs_none() {
        let vars = [("XDG_RUNTIME_DIR", "/run/user/7")];
        let own = PathBuf::from("/run/user/7/rdma-emu/rdma-emud.sock");
        let system = PathBuf::from("/run/rdma-emu/rdma-emud.sock");
        let only = |there: &'static str| move |p: &Path| p == Path::new(there);
        assert_eq!(
            socket_path_from(env(&vars), only("/run/rdma-emu/rdma-emud.sock")),
            system
        );
        assert_eq!(
            socket_path_from(env(&vars), |_| true),
            own,
            "the user's own daemon first"
        );
        assert_eq!(
            socket_path_from(env(&vars), |_| false),
            own,
            "nothing runs: the user's path"
        );
        assert_eq!(socket_path_from(env(&[]), |_| false), system);
    }
}
