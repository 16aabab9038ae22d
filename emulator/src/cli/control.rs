//! Reaching rdma-emud from the command line: one connection to its control socket per
//! request, and the daemon's errors as the text a user reads (an errno as its
//! `strerror`, a refused privileged command with who may run it, anything else as the
//! client's own message).

use crate::client::{CallError, Client};
use std::path::Path;
use wire::client::{ReplyBody, RequestBody};

/// A connection to the daemon at `socket`, or where rdma-emud finds its socket by
/// default.
pub(super) fn connect(socket: Option<&Path>) -> Result<Client, String> {
    let path = socket.map_or_else(wire::client::socket_path, Path::to_path_buf);
    Client::connect(&path).map(|(c, _)| c).map_err(|e| {
        format!(
            "cannot reach rdma-emud at {}: {e} (is the daemon running?)",
            path.display()
        )
    })
}

/// One request without descriptors, its reply or the error as text.
pub(super) fn call(socket: Option<&Path>, body: RequestBody) -> Result<ReplyBody, String> {
    let mut c = connect(socket)?;
    c.call(body, &[]).map(|(b, _)| b).map_err(error_text)
}

/// A failed call as the user reads it: an errno as its `strerror` (EACCES with who may).
pub(super) fn error_text(e: CallError) -> String {
    match e {
        CallError::Errno(n) => crate::client::errno_text(n),
        e => e.to_string(),
    }
}
