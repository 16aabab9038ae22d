//! The engine: the driver loop ([`driver`]) over what the daemon serves
//! (`crate::daemon::served`), and what only the loop needs: its scheduler slice and its
//! stop flag.

pub(in crate::daemon) mod driver;
pub(in crate::daemon) mod shutdown;
pub(in crate::daemon) mod slice;

pub use driver::Engine;
pub use shutdown::Shutdown;
