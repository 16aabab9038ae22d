//! The iWARP QP state machine (RDMAC verbs as RFC 5040 §6 and the kernel's siw
//! `siw_qp_modify` implement it), beside the InfiniBand one of [`crate::state`].
//!
//! An iWARP QP has no Reset: it is created Idle, and only its LLP (the TCP connection the
//! RDMA CM hands it) brings it to RTS. States as the kernel's siw maps `ibv_qp_state`
//! onto them (`ib_qp_state_to_siw_qp_state`): RESET and INIT are Idle, RTR is RTR, RTS is
//! RTS, SQD is Closing, SQE is Terminate, ERR is Error. Read back, Idle is INIT as siw's
//! reverse map says, except that a QP put back to RESET, or back to Idle by a graceful
//! close, reads RESET (what applications that recycle a QP check before reusing it).
//!
//! Transitions, requested by the application ([`SiwQpState::modify`]) or reported by the
//! connection ([`SiwQpState::handle_llp`]), are one function each, checked whole by the
//! table test below. What the driver must do about the connection comes back as a
//! [`SiwAction`].

use crate::types::{Errno, QpState};

/// The iWARP QP states (RFC 5040 §6.3 as siw names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SiwState {
    /// No connection yet, or the last one closed gracefully; receives may be posted.
    Idle,
    /// Idle, with the application's RTR recorded (siw keeps it apart from Idle).
    Rtr,
    /// The connection is up: sends and receives flow.
    Rts,
    /// Closing the connection gracefully after the application asked for SQD.
    Closing,
    /// A TERMINATE was sent or received (RFC 5040 §7); the connection is going down.
    Terminate,
    /// Flushed: work completes with `IBV_WC_WR_FLUSH_ERR`.
    Error,
}

/// What the driver must do with the QP's connection after a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SiwAction {
    /// Nothing.
    None,
    /// Close the connection gracefully (the QP went to Closing).
    Close,
    /// Flush the QP's pending receives and tear the connection down (the QP went to
    /// Error).
    FlushAndDrop,
    /// Forget the connection the QP was bound to (back to RESET from Error).
    Forget,
}

/// What the connection reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LlpEvent {
    /// MPA negotiation finished: the QP is in RTS.
    Established,
    /// The peer rejected the connection, or its MPA negotiation failed or timed out.
    Failed,
    /// A TERMINATE went out or came in.
    Terminated,
    /// The stream closed (graceful when the QP was Closing).
    Closed,
    /// The connection is gone without a close the engine saw (socket error, reaped).
    Lost,
}

/// One siw QP's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SiwQpState {
    state: SiwState,
    /// Idle reads RESET rather than INIT.
    reads_reset: bool,
}

impl Default for SiwQpState {
    fn default() -> Self {
        SiwQpState::new()
    }
}

impl SiwQpState {
    /// A new QP: Idle, read as INIT.
    pub const fn new() -> SiwQpState {
        SiwQpState {
            state: SiwState::Idle,
            reads_reset: false,
        }
    }

    /// The iWARP state.
    pub fn state(&self) -> SiwState {
        self.state
    }

    /// The state as `ibv_query_qp` reports it.
    pub fn ibv_state(&self) -> QpState {
        match self.state {
            SiwState::Idle if self.reads_reset => QpState::Reset,
            SiwState::Idle => QpState::Init,
            SiwState::Rtr => QpState::Rtr,
            SiwState::Rts => QpState::Rts,
            SiwState::Closing => QpState::Sqd,
            SiwState::Terminate => QpState::Sqe,
            SiwState::Error => QpState::Err,
        }
    }

    /// Whether work is flushed rather than executed (Error, or Terminate on its way
    /// there).
    pub fn is_error(&self) -> bool {
        matches!(self.state, SiwState::Error | SiwState::Terminate)
    }

    /// Whether the RDMA CM may bind the QP to a new connection (not while connected nor
    /// in error).
    pub fn bindable(&self) -> bool {
        !self.is_error() && self.state != SiwState::Rts
    }

    fn set(&mut self, state: SiwState) {
        self.state = state;
        self.reads_reset = false;
    }

    /// `ibv_modify_qp` to `to`; `bound` says whether the QP has a connection. Errors are
    /// what the kernel's siw answers (EINVAL, "no socket" for RTS without a connection).
    pub fn modify(&mut self, to: QpState, bound: bool) -> Result<SiwAction, Errno> {
        use SiwState as S;
        match to {
            QpState::Reset | QpState::Init | QpState::Rtr => {
                if self.state == S::Rts || (bound && !self.is_error()) {
                    return Err(Errno::EINVAL);
                }
                let forget = to == QpState::Reset && self.is_error();
                self.set(if to == QpState::Rtr { S::Rtr } else { S::Idle });
                self.reads_reset = to == QpState::Reset;
                Ok(if forget {
                    SiwAction::Forget
                } else {
                    SiwAction::None
                })
            }
            // siw: RTS only through the connection ("no socket"); RTS to RTS is fine.
            QpState::Rts if self.state == S::Rts => Ok(SiwAction::None),
            QpState::Rts => Err(Errno::EINVAL),
            QpState::Sqd => match self.state {
                S::Rts if bound => {
                    self.set(S::Closing);
                    Ok(SiwAction::Close)
                }
                // siw_qp_modify ignores CLOSING asked of a QP closing or in error, so
                // rdma_disconnect after the peer's disconnect succeeds.
                S::Closing | S::Terminate | S::Error => Ok(SiwAction::None),
                _ => Err(Errno::EINVAL),
            },
            QpState::Sqe | QpState::Err => {
                self.set(S::Error);
                Ok(SiwAction::FlushAndDrop)
            }
        }
    }

    /// What the connection reported.
    pub fn handle_llp(&mut self, ev: LlpEvent) {
        use SiwState as S;
        match ev {
            LlpEvent::Established => self.set(S::Rts),
            LlpEvent::Failed => self.set(S::Error),
            LlpEvent::Terminated => self.set(S::Terminate),
            // siw: CLOSING → IDLE after a graceful close, else ERROR.
            LlpEvent::Closed if self.state == S::Closing => {
                self.set(S::Idle);
                self.reads_reset = true;
            }
            LlpEvent::Closed => self.set(S::Error),
            LlpEvent::Lost if matches!(self.state, S::Rts | S::Terminate) => self.set(S::Error),
            LlpEvent::Lost => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state a QP can be in, as reached from a new one.
    fn states() -> Vec<(&'static str, SiwQpState)> {
        let new = SiwQpState::new;
        let modified = |s: SiwQpState, to: QpState, bound: bool| {
            let mut s = s;
            s.modify(to, bound).expect("a valid transition");
            s
        };
        let reported = |s: SiwQpState, ev: LlpEvent| {
            let mut s = s;
            s.handle_llp(ev);
            s
        };
        let rts = reported(new(), LlpEvent::Established);
        vec![
            ("idle", new()),
            ("idle-reset", modified(new(), QpState::Reset, false)),
            ("rtr", modified(new(), QpState::Rtr, false)),
            ("rts", rts),
            ("closing", modified(rts, QpState::Sqd, true)),
            ("terminate", reported(rts, LlpEvent::Terminated)),
            ("error", modified(new(), QpState::Err, false)),
        ]
    }

    /// The whole table of application requests: from every state, bound or not, to
    /// every `ibv_qp_state`: the state read back afterwards and the action, or the errno.
    #[test]
    fn modify_table() {
        let mut table = String::new();
        for (name, s) in states() {
            for bound in [false, true] {
                for to in QpState::ALL {
                    let mut after = s;
                    let out = match after.modify(to, bound) {
                        Ok(a) => format!("{:?} {a:?}", after.ibv_state()),
                        Err(e) => {
                            assert_eq!(after, s, "{name} -> {to:?}: a refusal changes nothing");
                            format!("errno {}", e.0)
                        }
                    };
                    let b = if bound { "bound" } else { "free" };
                    table += &format!("{name} {b} -> {to:?}: {out}\n");
                }
            }
        }
        let expected = "\
idle free -> Reset: Reset None
idle free -> Init: Init None
idle free -> Rtr: Rtr None
idle free -> Rts: errno 22
idle free -> Sqd: errno 22
idle free -> Sqe: Err FlushAndDrop
idle free -> Err: Err FlushAndDrop
idle bound -> Reset: errno 22
idle bound -> Init: errno 22
idle bound -> Rtr: errno 22
idle bound -> Rts: errno 22
idle bound -> Sqd: errno 22
idle bound -> Sqe: Err FlushAndDrop
idle bound -> Err: Err FlushAndDrop
idle-reset free -> Reset: Reset None
idle-reset free -> Init: Init None
idle-reset free -> Rtr: Rtr None
idle-reset free -> Rts: errno 22
idle-reset free -> Sqd: errno 22
idle-reset free -> Sqe: Err FlushAndDrop
idle-reset free -> Err: Err FlushAndDrop
idle-reset bound -> Reset: errno 22
idle-reset bound -> Init: errno 22
idle-reset bound -> Rtr: errno 22
idle-reset bound -> Rts: errno 22
idle-reset bound -> Sqd: errno 22
idle-reset bound -> Sqe: Err FlushAndDrop
idle-reset bound -> Err: Err FlushAndDrop
rtr free -> Reset: Reset None
rtr free -> Init: Init None
rtr free -> Rtr: Rtr None
rtr free -> Rts: errno 22
rtr free -> Sqd: errno 22
rtr free -> Sqe: Err FlushAndDrop
rtr free -> Err: Err FlushAndDrop
rtr bound -> Reset: errno 22
rtr bound -> Init: errno 22
rtr bound -> Rtr: errno 22
rtr bound -> Rts: errno 22
rtr bound -> Sqd: errno 22
rtr bound -> Sqe: Err FlushAndDrop
rtr bound -> Err: Err FlushAndDrop
rts free -> Reset: errno 22
rts free -> Init: errno 22
rts free -> Rtr: errno 22
rts free -> Rts: Rts None
rts free -> Sqd: errno 22
rts free -> Sqe: Err FlushAndDrop
rts free -> Err: Err FlushAndDrop
rts bound -> Reset: errno 22
rts bound -> Init: errno 22
rts bound -> Rtr: errno 22
rts bound -> Rts: Rts None
rts bound -> Sqd: Sqd Close
rts bound -> Sqe: Err FlushAndDrop
rts bound -> Err: Err FlushAndDrop
closing free -> Reset: Reset None
closing free -> Init: Init None
closing free -> Rtr: Rtr None
closing free -> Rts: errno 22
closing free -> Sqd: Sqd None
closing free -> Sqe: Err FlushAndDrop
closing free -> Err: Err FlushAndDrop
closing bound -> Reset: errno 22
closing bound -> Init: errno 22
closing bound -> Rtr: errno 22
closing bound -> Rts: errno 22
closing bound -> Sqd: Sqd None
closing bound -> Sqe: Err FlushAndDrop
closing bound -> Err: Err FlushAndDrop
terminate free -> Reset: Reset Forget
terminate free -> Init: Init None
terminate free -> Rtr: Rtr None
terminate free -> Rts: errno 22
terminate free -> Sqd: Sqe None
terminate free -> Sqe: Err FlushAndDrop
terminate free -> Err: Err FlushAndDrop
terminate bound -> Reset: Reset Forget
terminate bound -> Init: Init None
terminate bound -> Rtr: Rtr None
terminate bound -> Rts: errno 22
terminate bound -> Sqd: Sqe None
terminate bound -> Sqe: Err FlushAndDrop
terminate bound -> Err: Err FlushAndDrop
error free -> Reset: Reset Forget
error free -> Init: Init None
error free -> Rtr: Rtr None
error free -> Rts: errno 22
error free -> Sqd: Err None
error free -> Sqe: Err FlushAndDrop
error free -> Err: Err FlushAndDrop
error bound -> Reset: Reset Forget
error bound -> Init: Init None
error bound -> Rtr: Rtr None
error bound -> Rts: errno 22
error bound -> Sqd: Err None
error bound -> Sqe: Err FlushAndDrop
error bound -> Err: Err FlushAndDrop
";
        assert_eq!(table, expected, "{table}");
    }

    /// The connection's reports, from every state.
    #[test]
    fn llp_table() {
        use LlpEvent::*;
        let mut table = String::new();
        for (name, s) in states() {
            for ev in [Established, Failed, Terminated, Closed, Lost] {
                let mut after = s;
                after.handle_llp(ev);
                table += &format!("{name} {ev:?}: {:?}\n", after.ibv_state());
            }
        }
        let expected = "\
idle Established: Rts
idle Failed: Err
idle Terminated: Sqe
idle Closed: Err
idle Lost: Init
idle-reset Established: Rts
idle-reset Failed: Err
idle-reset Terminated: Sqe
idle-reset Closed: Err
idle-reset Lost: Reset
rtr Established: Rts
rtr Failed: Err
rtr Terminated: Sqe
rtr Closed: Err
rtr Lost: Rtr
rts Established: Rts
rts Failed: Err
rts Terminated: Sqe
rts Closed: Err
rts Lost: Err
closing Established: Rts
closing Failed: Err
closing Terminated: Sqe
closing Closed: Reset
closing Lost: Sqd
terminate Established: Rts
terminate Failed: Err
terminate Terminated: Sqe
terminate Closed: Err
terminate Lost: Err
error Established: Rts
error Failed: Err
error Terminated: Sqe
error Closed: Err
error Lost: Err
";
        assert_eq!(table, expected, "{table}");
    }

    #[test]
    fn new_qp_reads_init_and_binds() {
        let s = SiwQpState::new();
        assert_eq!(s.ibv_state(), QpState::Init);
        assert!(s.bindable());
        let mut rts = s;
        rts.handle_llp(LlpEvent::Established);
        assert!(!rts.bindable());
        let mut term = rts;
        term.handle_llp(LlpEvent::Terminated);
        assert!(term.is_error() && !term.bindable());
    }
}
