//! What the responder does after executing one request packet (`execute`, `mpe`):
//! a leaf both import.

use wire::roce::NakCode;

use crate::types::AsyncEvent;

/// What to do after a request packet.
pub(crate) enum Outcome {
    /// Processed; advance the expected PSN by this many and maybe ACK.
    Done(u32),
    /// Send an RNR NAK (no receive WQE); the PSN stays.
    Rnr,
    /// Send a PSN sequence error NAK for this very PSN (forced by fault injection); the
    /// PSN stays and the requester retransmits from it.
    Sequence,
    /// Fatal: NAK with this code, raise this event, move to error.
    Fatal(NakCode, Option<AsyncEvent>),
}
