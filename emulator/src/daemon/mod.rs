//! The daemon: client sessions, shared memory, backends, the engine loop.
//!
//! `rdma-emud` is the NIC (DESIGN decision 1). One engine thread serves the control socket
//! (`wire::client` protocol, see `docs/client-protocol.md`), drains the clients' SQ/RQ/SRQ
//! rings into each device's transport core, feeds it datagrams from the UDP backend and
//! its timers, and writes what it produces back: packets to the network, completions into
//! CQ rings, events into pipes. See `docs/daemon.md`.

pub mod config;

mod cm;
mod control;
mod datapath;
pub mod devices;
mod engine;
mod faults;
pub mod link;
mod served;
pub mod sessions;
pub mod siw;
pub mod sys;
mod tokens;

pub use config::{Config, DeviceSpec, PollMode, SrcPortMode};
pub use engine::Engine;
pub use engine::Shutdown;
pub use sessions::DaemonCounters;

use std::io;
use std::thread::JoinHandle;

/// The transport engine factory the daemon uses.
pub fn default_factory() -> devices::device::NicFactory {
    devices::core_nic::factory
}

/// A daemon running on a thread of this process (for tests and embedding).
pub struct Daemon {
    shutdown: Shutdown,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Daemon {
    /// Opens devices and the socket (errors are returned here), then serves on a thread.
    pub fn start(cfg: Config) -> io::Result<Daemon> {
        Daemon::start_with(cfg, default_factory())
    }

    pub fn start_with(cfg: Config, factory: devices::device::NicFactory) -> io::Result<Daemon> {
        let shutdown = Shutdown::new()?;
        let engine = Engine::new(cfg, factory, shutdown.clone())?;
        let thread = std::thread::Builder::new()
            .name("rdma-emud-engine".into())
            .spawn(move || engine.run())?;
        Ok(Daemon {
            shutdown,
            thread: Some(thread),
        })
    }

    /// Stops as SIGTERM would and waits for the engine.
    pub fn stop(mut self) -> io::Result<()> {
        self.shutdown.trigger();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(io::Error::other("engine thread panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.shutdown.trigger();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs the daemon on this thread until `shutdown` fires.
pub fn run(cfg: Config, shutdown: Shutdown) -> io::Result<()> {
    Engine::new(cfg, default_factory(), shutdown)?.run()
}
