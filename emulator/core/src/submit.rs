//! A send work request as the driver hands it over from a client's send queue: the
//! decisions a NIC takes when it reads the WQE, before the transport queues it
//! ([`crate::Device::submit_send`] carries them out).
//!
//! - A `BIND_MW` WR naming a type 1 window of the QP's own client binds it at once
//!   (`ibv_bind_mw` posts such a WR: rdma-core's rxe provider does, and so does the shim),
//!   outside the send queue's order, and completes with `IBV_WC_BIND_MW` when signaled.
//!   Any other `BIND_MW` is a type 2 bind, which goes through the send queue.
//! - A UD WR's address handle must be one the QP's client created on the QP's PD: AH
//!   numbers are the device's, so one of another client names someone else's path (rxe
//!   checks the PD in `rxe_get_av` and fails the WR with `IBV_WC_LOC_QP_OP_ERR`).
//! - What the transport refuses at posting becomes the error completion rxe gives it.

use crate::attr::SendWr;
use crate::mr::Keys;
use crate::types::{ClientId, Errno, PdHandle, QpType, WcStatus, WrOpcode};

/// A send WR the device refused when it read it: the status of the error completion
/// it gets, and the errno the driver records as its `vendor_err`. `errno` ENOMEM means
/// the send queue is full: the WR was not consumed and may be handed over again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendRefused {
    /// The completion's status.
    pub status: WcStatus,
    /// Why, as rdma-core's post_send would say it.
    pub errno: Errno,
}

impl SendRefused {
    /// A WR the QP cannot take (`IBV_WC_LOC_QP_OP_ERR`), as rxe completes one.
    pub fn local_qp_op(errno: Errno) -> SendRefused {
        SendRefused {
            status: WcStatus::LocQpOpErr,
            errno,
        }
    }

    /// A type 1 bind that failed its checks (IBA 10.6.7.2.1).
    pub(crate) fn bind() -> SendRefused {
        SendRefused {
            status: WcStatus::MwBindErr,
            errno: Errno::EINVAL,
        }
    }
}

/// How the device takes a send WR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendPath {
    /// Bind the type 1 window now, outside the send queue's order.
    BindNow,
    /// Queue it on the send queue.
    Queue,
}

/// What the decision needs to know of the QP the WR was posted to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendQp {
    pub owner: ClientId,
    pub pd: PdHandle,
    pub qp_type: QpType,
}

/// Decides how `wr` posted to `qp` is taken. `keys` is the device's key table; `ah` the
/// (creator, PD) of the address handle the WR names, if it exists (looked up for UD QPs
/// only: it is not read otherwise).
pub(crate) fn send_path(
    wr: &SendWr,
    qp: SendQp,
    keys: &Keys,
    ah: Option<(ClientId, PdHandle)>,
) -> Result<SendPath, SendRefused> {
    let own_type1 = || {
        keys.by_index
            .get(&(wr.bind_mw.mw_rkey.0 >> 8))
            .is_some_and(|w| w.window_of.is_some() && !w.mw_type2 && w.owner == qp.owner)
    };
    if wr.opcode == WrOpcode::BindMw && own_type1() {
        return Ok(SendPath::BindNow);
    }
    if qp.qp_type == QpType::Ud && ah != Some((qp.owner, qp.pd)) {
        return Err(SendRefused::local_qp_op(Errno::EINVAL));
    }
    Ok(SendPath::Queue)
}
