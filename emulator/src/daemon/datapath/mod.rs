//! The data path: the clients' rings drained into the devices' cores ([`rings`]), and
//! completions and events written back to the clients ([`notify`]).

pub(in crate::daemon) mod notify;
pub(in crate::daemon) mod rings;
