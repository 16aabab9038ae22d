//! rdma-emu's emulator: the daemon's pieces around the sans-IO transport core, and the
//! command-line tool's subcommands.
pub use emu_core as core;
pub mod cli;
pub mod client;
pub mod daemon;
pub mod decode;
pub mod devview;
pub mod signals;
pub mod top;
