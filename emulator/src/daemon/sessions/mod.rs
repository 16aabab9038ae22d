//! The clients: their sessions and the objects they own, who they are (users and their
//! limits), and what a request handler answers them.

pub(in crate::daemon) mod answer;
pub(in crate::daemon) mod clients;
pub(in crate::daemon) mod objects;
pub mod users;

pub use clients::DaemonCounters;
