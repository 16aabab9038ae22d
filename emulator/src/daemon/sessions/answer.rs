//! What a request handler decides: the reply body and the descriptors that go with it,
//! or the errno the client gets.

use std::os::fd::OwnedFd;
use wire::client::ReplyBody;

/// A handler's decision on one request: a reply with its descriptors, or an errno.
pub type Answer = Result<(ReplyBody, Vec<OwnedFd>), i32>;

/// A reply that passes no descriptor.
pub fn ok(body: ReplyBody) -> Answer {
    Ok((body, Vec::new()))
}
