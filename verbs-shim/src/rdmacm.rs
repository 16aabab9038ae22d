//! librdmacm.so.1's rsocket API (`<rdma/rsocket.h>`) lives in [`crate::rsocket`]; this
//! module only re-exports it under its historical name.
pub use crate::rsocket::api::*;
pub use crate::rsocket::poll::{rpoll, rselect};
