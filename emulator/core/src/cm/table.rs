//! The CM state machine as one table (IBA vol. 1 ch. 12.9 state diagrams; behaviour of the
//! Linux CM where IBA leaves a choice).
//!
//! [`step`] maps (state, input) to the next state, the message to send, the event for the
//! consumer and what happens to the connection's timer. `None` means the input is not
//! valid in that state: a verb fails with EINVAL, a received message is dropped (and
//! counted). The agent ([`super::CmAgent`]) only classifies inputs and carries out steps;
//! every decision is here, and `tests/cm_table.rs` checks the table whole against a
//! snapshot.

/// The state of one connection (IBA names; `IB_CM_*` in the Linux CM).
///
/// Listening is not a connection state here: listeners live in their own table, and a
/// REQ that matches one creates a connection in [`CmState::ReqRcvd`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CmState {
    /// No connection (the start and the end: the record is dropped).
    Idle,
    /// Active side: REQ sent, waiting for REP/REJ/MRA.
    ReqSent,
    /// Passive side: REQ received, the consumer decides (accept / reject).
    ReqRcvd,
    /// Passive side: REQ received and MRA sent (the consumer is slow; the peer waits longer).
    MraReqSent,
    /// Active side: MRA received for the REQ; waiting longer for REP.
    MraReqRcvd,
    /// Passive side: REP sent, waiting for RTU.
    RepSent,
    /// Active side: REP received, the consumer readies its QP then establishes (RTU).
    RepRcvd,
    /// Active side: REP received again before the consumer established; MRA sent.
    MraRepSent,
    /// Passive side: MRA received for the REP; waiting longer for RTU.
    MraRepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received; the consumer answers (DREP) when its QP is flushed.
    DreqRcvd,
    /// Quiet period after a disconnect (stale packets die out; the comm ID is kept).
    Timewait,
    /// SIDR_REQ sent, waiting for SIDR_REP (IBA 12.11).
    SidrReqSent,
    /// SIDR_REQ received, the consumer decides.
    SidrReqRcvd,
    /// SIDR_REP sent; kept for a time-wait period so a duplicate SIDR_REQ gets the same
    /// answer (IBA returns to Idle at once; the Linux CM would raise a second request).
    SidrRepSent,
}

impl CmState {
    /// Every state, in table order.
    pub const ALL: [CmState; 16] = [
        CmState::Idle,
        CmState::ReqSent,
        CmState::ReqRcvd,
        CmState::MraReqSent,
        CmState::MraReqRcvd,
        CmState::RepSent,
        CmState::RepRcvd,
        CmState::MraRepSent,
        CmState::MraRepRcvd,
        CmState::Established,
        CmState::DreqSent,
        CmState::DreqRcvd,
        CmState::Timewait,
        CmState::SidrReqSent,
        CmState::SidrReqRcvd,
        CmState::SidrRepSent,
    ];

    /// The Linux CM's name (`IB_CM_*`), or ours for the SIDR states it lacks.
    pub fn name(self) -> &'static str {
        match self {
            CmState::Idle => "IDLE",
            CmState::ReqSent => "REQ_SENT",
            CmState::ReqRcvd => "REQ_RCVD",
            CmState::MraReqSent => "MRA_REQ_SENT",
            CmState::MraReqRcvd => "MRA_REQ_RCVD",
            CmState::RepSent => "REP_SENT",
            CmState::RepRcvd => "REP_RCVD",
            CmState::MraRepSent => "MRA_REP_SENT",
            CmState::MraRepRcvd => "MRA_REP_RCVD",
            CmState::Established => "ESTABLISHED",
            CmState::DreqSent => "DREQ_SENT",
            CmState::DreqRcvd => "DREQ_RCVD",
            CmState::Timewait => "TIMEWAIT",
            CmState::SidrReqSent => "SIDR_REQ_SENT",
            CmState::SidrReqRcvd => "SIDR_REQ_RCVD",
            CmState::SidrRepSent => "SIDR_REP_SENT",
        }
    }
}

/// What happened to a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Input {
    /// Verb: connect (rdma_connect on RC/UC).
    Connect,
    /// Verb: resolve a service ID (rdma_connect on UD).
    SidrResolve,
    /// Verb: accept.
    Accept,
    /// Verb: reject.
    Reject,
    /// Verb: establish (active: send RTU; passive: the QP saw traffic, COMM_EST).
    Establish,
    /// Verb: disconnect.
    Disconnect,
    /// Verb: destroy the connection (rdma_destroy_id; the CM finishes the protocol alone).
    Destroy,
    /// A REQ for this connection (new on Idle, a duplicate otherwise).
    RecvReq,
    /// An MRA for our REQ.
    RecvMraReq,
    /// An MRA for our REP.
    RecvMraRep,
    /// A REP.
    RecvRep,
    /// An RTU.
    RecvRtu,
    /// A REJ (any reason but stale connection).
    RecvRej,
    /// A REJ with reason 10, stale connection.
    RecvRejStale,
    /// A DREQ.
    RecvDreq,
    /// A DREP.
    RecvDrep,
    /// A SIDR_REQ (new on Idle, a duplicate otherwise).
    RecvSidrReq,
    /// A SIDR_REP.
    RecvSidrRep,
    /// The timer fired and retries are left (or it is not a retry timer).
    Timeout,
    /// The retransmission timer fired with no retries left.
    RetriesExhausted,
}

impl Input {
    /// Every input, in table order.
    pub const ALL: [Input; 20] = [
        Input::Connect,
        Input::SidrResolve,
        Input::Accept,
        Input::Reject,
        Input::Establish,
        Input::Disconnect,
        Input::Destroy,
        Input::RecvReq,
        Input::RecvMraReq,
        Input::RecvMraRep,
        Input::RecvRep,
        Input::RecvRtu,
        Input::RecvRej,
        Input::RecvRejStale,
        Input::RecvDreq,
        Input::RecvDrep,
        Input::RecvSidrReq,
        Input::RecvSidrRep,
        Input::Timeout,
        Input::RetriesExhausted,
    ];
}

/// Which message a step sends. The retransmittable ones (REQ, REP, DREQ, SIDR_REQ) are
/// kept by the connection and resent on its timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// ConnectRequest.
    Req,
    /// ConnectReply.
    Rep,
    /// ReadyToUse.
    Rtu,
    /// MRA for the peer's REQ.
    MraReq,
    /// MRA for the peer's REP.
    MraRep,
    /// Reject with the consumer's reason, or on destroy: consumer defined (28) on the
    /// passive side, timeout (4) on an active side that has no answer yet.
    Rej,
    /// Reject with reason 10, stale connection.
    RejStale,
    /// DisconnectRequest.
    Dreq,
    /// DisconnectReply.
    Drep,
    /// Service ID Resolution Request.
    SidrReq,
    /// Service ID Resolution Response (the consumer's answer).
    SidrRep,
    /// The kept retransmittable message again.
    Resend,
}

/// Which event a step raises for the consumer (see [`super::CmEvent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ev {
    /// RDMA_CM_EVENT_CONNECT_REQUEST (RC/UC).
    ConnectRequest,
    /// RDMA_CM_EVENT_CONNECT_REQUEST (UD, SIDR).
    SidrRequest,
    /// RDMA_CM_EVENT_CONNECT_RESPONSE (or ESTABLISHED once the daemon moved the QP).
    ConnectResponse,
    /// RDMA_CM_EVENT_ESTABLISHED.
    Established,
    /// RDMA_CM_EVENT_REJECTED.
    Rejected,
    /// RDMA_CM_EVENT_UNREACHABLE (ETIMEDOUT).
    Unreachable,
    /// RDMA_CM_EVENT_DISCONNECTED.
    Disconnected,
    /// RDMA_CM_EVENT_DISCONNECTED with ETIMEDOUT (DREQ never answered).
    DisconnectTimedOut,
    /// RDMA_CM_EVENT_TIMEWAIT_EXIT.
    TimewaitExit,
    /// RDMA_CM_EVENT_ESTABLISHED (UD) or RDMA_CM_EVENT_UNREACHABLE, by the SIDR_REP status.
    SidrReply,
}

/// What a step does to the connection's timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Timer {
    /// Leave it as it is.
    Keep,
    /// Stop it.
    Stop,
    /// (Re)arm the retransmission timer: the peer's CM response time plus twice the
    /// packet lifetime; on the first send the retry count is reset.
    Response,
    /// Arm the longer timer an MRA asked for (service timeout plus packet lifetime).
    Mra,
    /// Arm the time-wait timer.
    Timewait,
    /// Keep a SIDR answer for as long as the requester may repeat its SIDR_REQ
    /// (max CM retries + 1 CM response timeouts).
    SidrHold,
}

/// One cell of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Step {
    /// The state after the input.
    pub next: CmState,
    /// The message sent, if any.
    pub send: Option<Msg>,
    /// The event raised, if any.
    pub event: Option<Ev>,
    /// The timer.
    pub timer: Timer,
}

const fn go(next: CmState, send: Option<Msg>, event: Option<Ev>, timer: Timer) -> Option<Step> {
    Some(Step {
        next,
        send,
        event,
        timer,
    })
}

/// The table. `None`: not valid in this state (verb: EINVAL; message: dropped).
pub fn step(state: CmState, input: Input) -> Option<Step> {
    use CmState as S;
    use Ev as E;
    use Input as I;
    use Msg as M;
    use Timer as T;
    match (state, input) {
        // Starting a connection (active and passive side).
        (S::Idle, I::Connect) => go(S::ReqSent, Some(M::Req), None, T::Response),
        (S::Idle, I::SidrResolve) => go(S::SidrReqSent, Some(M::SidrReq), None, T::Response),
        (S::Idle, I::RecvReq) => go(S::ReqRcvd, None, Some(E::ConnectRequest), T::Stop),
        (S::Idle, I::RecvSidrReq) => go(S::SidrReqRcvd, None, Some(E::SidrRequest), T::Stop),

        // Active side waiting for the REP.
        (S::ReqSent | S::MraReqRcvd, I::RecvMraReq) => go(S::MraReqRcvd, None, None, T::Mra),
        (S::ReqSent | S::MraReqRcvd, I::RecvRep) => {
            go(S::RepRcvd, None, Some(E::ConnectResponse), T::Stop)
        }
        (S::ReqSent | S::MraReqRcvd, I::RecvRej) => go(S::Idle, None, Some(E::Rejected), T::Stop),
        (S::ReqSent | S::MraReqRcvd, I::RecvRejStale) => {
            go(S::Timewait, None, Some(E::Rejected), T::Timewait)
        }
        (S::ReqSent | S::MraReqRcvd, I::Timeout) => {
            go(S::ReqSent, Some(M::Resend), None, T::Response)
        }
        (S::ReqSent | S::MraReqRcvd, I::RetriesExhausted) => {
            go(S::Idle, None, Some(E::Unreachable), T::Stop)
        }
        (S::ReqSent | S::MraReqRcvd, I::Destroy) => go(S::Idle, Some(M::Rej), None, T::Stop),

        // Passive side deciding.
        (S::ReqRcvd | S::MraReqSent, I::Accept) => go(S::RepSent, Some(M::Rep), None, T::Response),
        (S::ReqRcvd | S::MraReqSent, I::Reject | I::Destroy) => {
            go(S::Idle, Some(M::Rej), None, T::Stop)
        }
        // A duplicate REQ: the consumer is slow, ask the peer to wait (the Linux CMA's
        // delayed MRA, sent only when the REQ is repeated).
        (S::ReqRcvd | S::MraReqSent, I::RecvReq) => {
            go(S::MraReqSent, Some(M::MraReq), None, T::Keep)
        }
        (S::ReqRcvd | S::MraReqSent, I::RecvRej) => go(S::Idle, None, Some(E::Rejected), T::Stop),
        (S::ReqRcvd | S::MraReqSent, I::RecvRejStale) => {
            go(S::Timewait, None, Some(E::Rejected), T::Timewait)
        }

        // Passive side waiting for the RTU.
        (S::RepSent | S::MraRepRcvd, I::RecvRtu | I::Establish) => {
            go(S::Established, None, Some(E::Established), T::Stop)
        }
        (S::RepSent | S::MraRepRcvd, I::RecvReq) => go(state, Some(M::Resend), None, T::Keep),
        (S::RepSent | S::MraRepRcvd, I::RecvMraRep) => go(S::MraRepRcvd, None, None, T::Mra),
        (S::RepSent | S::MraRepRcvd, I::RecvRej) => go(S::Idle, None, Some(E::Rejected), T::Stop),
        (S::RepSent | S::MraRepRcvd, I::RecvRejStale) => {
            go(S::Timewait, None, Some(E::Rejected), T::Timewait)
        }
        // The RTU was lost and the peer already disconnects.
        (S::RepSent | S::MraRepRcvd, I::RecvDreq) => {
            go(S::DreqRcvd, None, Some(E::Disconnected), T::Stop)
        }
        (S::RepSent | S::MraRepRcvd, I::Timeout) => {
            go(S::RepSent, Some(M::Resend), None, T::Response)
        }
        (S::RepSent | S::MraRepRcvd, I::RetriesExhausted) => {
            go(S::Idle, None, Some(E::Unreachable), T::Stop)
        }
        (S::RepSent | S::MraRepRcvd, I::Destroy) => go(S::Idle, Some(M::Rej), None, T::Stop),

        // Active side with the REP, until the consumer establishes.
        (S::RepRcvd | S::MraRepSent, I::Establish) => {
            go(S::Established, Some(M::Rtu), None, T::Stop)
        }
        (S::RepRcvd | S::MraRepSent, I::Reject | I::Destroy) => {
            go(S::Timewait, Some(M::Rej), None, T::Timewait)
        }
        (S::RepRcvd | S::MraRepSent, I::RecvRep) => {
            go(S::MraRepSent, Some(M::MraRep), None, T::Keep)
        }
        (S::RepRcvd | S::MraRepSent, I::RecvRej | I::RecvRejStale) => {
            go(S::Timewait, None, Some(E::Rejected), T::Timewait)
        }

        // Connected.
        (S::Established, I::Disconnect | I::Destroy) => {
            go(S::DreqSent, Some(M::Dreq), None, T::Response)
        }
        // The RTU was lost: the peer repeats its REP.
        (S::Established, I::RecvRep) => go(S::Established, Some(M::Rtu), None, T::Keep),
        (S::Established, I::RecvDreq) => go(S::DreqRcvd, None, Some(E::Disconnected), T::Stop),
        (S::Established, I::RecvRejStale) => {
            go(S::Timewait, None, Some(E::Disconnected), T::Timewait)
        }

        // Disconnecting.
        (S::DreqSent, I::RecvDrep) => go(S::Timewait, None, Some(E::Disconnected), T::Timewait),
        // Both sides disconnect at once: answer and wait (as both rxe hosts do in
        // rdma_cm.pcap, frames 91–94).
        (S::DreqSent, I::RecvDreq) => go(
            S::Timewait,
            Some(M::Drep),
            Some(E::Disconnected),
            T::Timewait,
        ),
        (S::DreqSent, I::RecvRej | I::RecvRejStale) => {
            go(S::Timewait, None, Some(E::Disconnected), T::Timewait)
        }
        (S::DreqSent, I::Timeout) => go(S::DreqSent, Some(M::Resend), None, T::Response),
        (S::DreqSent, I::RetriesExhausted) => {
            go(S::Timewait, None, Some(E::DisconnectTimedOut), T::Timewait)
        }
        (S::DreqSent, I::Destroy) => go(S::DreqSent, None, None, T::Keep),
        (S::DreqRcvd, I::Disconnect | I::Destroy) => {
            go(S::Timewait, Some(M::Drep), None, T::Timewait)
        }
        (S::DreqRcvd, I::RecvDreq) => go(S::DreqRcvd, None, None, T::Keep),

        // Time wait: answer stragglers, then forget.
        (S::Timewait, I::RecvDreq) => go(S::Timewait, Some(M::Drep), None, T::Keep),
        (S::Timewait, I::RecvReq) => go(S::Timewait, Some(M::RejStale), None, T::Keep),
        (S::Timewait, I::Timeout) => go(S::Idle, None, Some(E::TimewaitExit), T::Stop),
        (S::Timewait, I::Destroy) => go(S::Timewait, None, None, T::Keep),

        // SIDR (IBA 12.11).
        (S::SidrReqSent, I::RecvSidrRep) => go(S::Idle, None, Some(E::SidrReply), T::Stop),
        (S::SidrReqSent, I::Timeout) => go(S::SidrReqSent, Some(M::Resend), None, T::Response),
        (S::SidrReqSent, I::RetriesExhausted) => go(S::Idle, None, Some(E::Unreachable), T::Stop),
        (S::SidrReqSent, I::Destroy) => go(S::Idle, None, None, T::Stop),
        (S::SidrReqRcvd, I::Accept | I::Reject | I::Destroy) => {
            go(S::SidrRepSent, Some(M::SidrRep), None, T::SidrHold)
        }
        (S::SidrReqRcvd, I::RecvSidrReq) => go(S::SidrReqRcvd, None, None, T::Keep),
        (S::SidrRepSent, I::RecvSidrReq) => go(S::SidrRepSent, Some(M::SidrRep), None, T::Keep),
        (S::SidrRepSent, I::Timeout) => go(S::Idle, None, None, T::Stop),
        (S::SidrRepSent, I::Destroy) => go(S::SidrRepSent, None, None, T::Keep),

        _ => None,
    }
}

/// The whole table as text, one line per valid (state, input): the snapshot the tests
/// compare and `docs/cm.md` shows.
pub fn render() -> String {
    let mut out = String::new();
    for s in CmState::ALL {
        for i in Input::ALL {
            if let Some(st) = step(s, i) {
                out.push_str(&format!(
                    "{:<14} {:<17} -> {:<14} send={:<9} event={:<17} timer={:?}\n",
                    s.name(),
                    format!("{i:?}"),
                    st.next.name(),
                    st.send.map_or("-".to_string(), |m| format!("{m:?}")),
                    st.event.map_or("-".to_string(), |e| format!("{e:?}")),
                    st.timer,
                ));
            }
        }
    }
    out
}
