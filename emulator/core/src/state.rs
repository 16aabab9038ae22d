//! The QP state machine as one transition table (IBA 11.2.4.2 / 10.3.1, the attribute
//! tables of rdma-core's `ibv_modify_qp(3)`, as the kernel's `ib_modify_qp_is_ok` checks
//! them). Anything not in the table fails with EINVAL.

use crate::types::{Errno, QpAttrMask as M, QpState as S, QpType};

/// Attributes a transition requires and allows, per QP type (index: RC, UC, UD).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// From.
    pub from: Option<S>,
    /// To.
    pub to: S,
    /// Required attributes (besides `STATE`), per type; `None` = transition invalid for it.
    pub required: [Option<M>; 3],
    /// Optional attributes, per type.
    pub optional: [M; 3],
}

const fn m(bits: u32) -> M {
    M(bits)
}

const PKEY: u32 = M::PKEY_INDEX.0;
const PORT: u32 = M::PORT.0;
const ACC: u32 = M::ACCESS_FLAGS.0;
const QKEY: u32 = M::QKEY.0;
const AV: u32 = M::AV.0;
const MTU: u32 = M::PATH_MTU.0;
const DQPN: u32 = M::DEST_QPN.0;
const RQPSN: u32 = M::RQ_PSN.0;
const SQPSN: u32 = M::SQ_PSN.0;
const MDRA: u32 = M::MAX_DEST_RD_ATOMIC.0;
const MQRA: u32 = M::MAX_QP_RD_ATOMIC.0;
const RNRT: u32 = M::MIN_RNR_TIMER.0;
const TMO: u32 = M::TIMEOUT.0;
const RETRY: u32 = M::RETRY_CNT.0;
const RNRR: u32 = M::RNR_RETRY.0;
const ALT: u32 = M::ALT_PATH.0;
const CUR: u32 = M::CUR_STATE.0;
const MIG: u32 = M::PATH_MIG_STATE.0;
const SQDN: u32 = M::EN_SQD_ASYNC_NOTIFY.0;
const RATE: u32 = M::RATE_LIMIT.0;

const RTS_RTS_RC: u32 = CUR | ACC | ALT | MIG | RNRT | RATE;
const RTS_RTS_UC: u32 = CUR | ACC | ALT | MIG | RATE;
const RTS_RTS_UD: u32 = CUR | QKEY | RATE;
const RTS_RTS: [M; 3] = [m(RTS_RTS_RC), m(RTS_RTS_UC), m(RTS_RTS_UD)];

/// The table. `from: None` means "from any state".
pub const TABLE: &[Rule] = &[
    Rule {
        from: None,
        to: S::Reset,
        required: [Some(m(0)); 3],
        optional: [m(0); 3],
    },
    Rule {
        from: None,
        to: S::Err,
        required: [Some(m(0)); 3],
        optional: [m(0); 3],
    },
    Rule {
        from: Some(S::Reset),
        to: S::Init,
        required: [
            Some(m(PKEY | PORT | ACC)),
            Some(m(PKEY | PORT | ACC)),
            Some(m(PKEY | PORT | QKEY)),
        ],
        optional: [m(0); 3],
    },
    Rule {
        from: Some(S::Init),
        to: S::Init,
        required: [Some(m(0)); 3],
        optional: [
            m(PKEY | PORT | ACC),
            m(PKEY | PORT | ACC),
            m(PKEY | PORT | QKEY),
        ],
    },
    Rule {
        from: Some(S::Init),
        to: S::Rtr,
        required: [
            Some(m(AV | MTU | DQPN | RQPSN | MDRA | RNRT)),
            Some(m(AV | MTU | DQPN | RQPSN)),
            Some(m(0)),
        ],
        optional: [
            m(ALT | ACC | PKEY | RATE),
            m(ALT | ACC | PKEY | RATE),
            m(PKEY | QKEY),
        ],
    },
    Rule {
        from: Some(S::Rtr),
        to: S::Rts,
        required: [
            Some(m(SQPSN | TMO | RETRY | RNRR | MQRA)),
            Some(m(SQPSN)),
            Some(m(SQPSN)),
        ],
        optional: RTS_RTS,
    },
    Rule {
        from: Some(S::Rts),
        to: S::Rts,
        required: [Some(m(0)); 3],
        optional: RTS_RTS,
    },
    Rule {
        from: Some(S::Rts),
        to: S::Sqd,
        required: [Some(m(0)); 3],
        optional: [m(SQDN); 3],
    },
    Rule {
        from: Some(S::Sqd),
        to: S::Rts,
        required: [Some(m(0)); 3],
        optional: RTS_RTS,
    },
    Rule {
        from: Some(S::Sqd),
        to: S::Sqd,
        required: [Some(m(0)); 3],
        optional: [
            m(PKEY | PORT | AV | ALT | MQRA | MDRA | CUR | ACC | RNRT | TMO | RETRY | RNRR | MIG),
            m(PKEY | PORT | AV | ALT | CUR | ACC | MIG),
            m(PKEY | QKEY),
        ],
    },
    Rule {
        from: Some(S::Sqe),
        to: S::Rts,
        required: [None, Some(m(0)), Some(m(0))],
        optional: [m(0), m(CUR | ACC), m(CUR | QKEY)],
    },
];

const fn type_index(t: QpType) -> usize {
    match t {
        QpType::Rc | QpType::XrcSend | QpType::XrcRecv => 0,
        QpType::Uc => 1,
        QpType::Ud => 2,
    }
}

/// What an XRC half does not need of RC's required attributes (the kernel's
/// `qp_state_table`): an initiator has no responder (INIT→RTR without
/// `MAX_DEST_RD_ATOMIC`, `MIN_RNR_TIMER`), a target no requester (RTR→RTS with only
/// `SQ_PSN` and `TIMEOUT`). They stay allowed.
const fn xrc_relaxed(t: QpType, from: S, to: S) -> u32 {
    match (t, from, to) {
        (QpType::XrcSend, S::Init, S::Rtr) => MDRA | RNRT,
        (QpType::XrcRecv, S::Rtr, S::Rts) => RETRY | RNRR | MQRA,
        _ => 0,
    }
}

/// The rule for `from → to` on a QP of type `t`, if the transition exists.
pub fn rule(t: QpType, from: S, to: S) -> Option<(M, M)> {
    let i = type_index(t);
    TABLE
        .iter()
        .filter(|r| r.to == to && r.from.is_none_or(|f| f == from))
        .find_map(|r| r.required[i].map(|req| (req, r.optional[i])))
        .map(|(req, opt)| {
            let relax = xrc_relaxed(t, from, to);
            (M(req.0 & !relax), M(opt.0 | relax))
        })
}

/// Checks a `modify_qp` mask: returns the target state, or EINVAL.
///
/// Without `STATE` in the mask the QP stays in its state (a `cur → cur` transition, which
/// must exist). `CUR_STATE`, when given, must name the current state.
pub fn check(t: QpType, cur: S, given_cur: Option<S>, to: Option<S>, mask: M) -> Result<S, Errno> {
    if let Some(g) = given_cur {
        if g != cur {
            return Err(Errno::EINVAL);
        }
    }
    let to = to.unwrap_or(cur);
    let (req, opt) = rule(t, cur, to).ok_or(Errno::EINVAL)?;
    let attrs = M(mask.0 & !M::STATE.0);
    if !attrs.contains(req) || attrs.0 & !(req.0 | opt.0) != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(to)
}
