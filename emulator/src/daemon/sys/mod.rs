//! Thin, safe wrappers over the Linux system calls the daemon's engine and control path
//! make, one file per concern:
//!
//! - [`memfd`]: sealed memfds and their shared mappings (rings, session pages, pages a
//!   client shares);
//! - [`fd`]: eventfd doorbells, pipes, whole-record writes, positioned reads and writes;
//! - [`poll`]: timerfds, epoll and clock reads;
//! - [`unix`]: the control socket (`SOCK_SEQPACKET`, peer credentials, `SCM_RIGHTS`);
//! - [`socket`]: socket options and IP multicast membership;
//! - [`netlink`]: address-change notifications;
//! - [`process`]: the thread's time slice, signals forwarded to a descriptor, daemonizing;
//! - `cvt`: the `-1`/`errno` convention turned into `io::Result` (private).
//!
//! Every `unsafe` block here has a `// SAFETY:` comment. Not all of the daemon's `unsafe`
//! is here: the raw backends hold their own (`link/mmsg.rs`, `link/packet.rs`,
//! `link/pause.rs`, `link/xdp/`, `siw/sock.rs`, `siw/link.rs`), as do the interface and
//! neighbour queries (`devices/netdev.rs`, `devices/neigh.rs`) and the descriptor checks
//! of the control path (`control/dispatch.rs`), each block with its own `// SAFETY:`
//! comment. The items of every file are re-exported here, so
//! callers name them `sys::eventfd`, `sys::Epoll`, ...

mod cvt;
pub mod fd;
pub mod memfd;
pub mod netlink;
pub mod poll;
pub mod process;
pub mod socket;
pub mod unix;

pub use fd::*;
pub use memfd::*;
pub use netlink::*;
pub use poll::*;
pub use process::*;
pub use socket::*;
pub use unix::*;
