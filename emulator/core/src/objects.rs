//! The device's objects other than its QPs (PDs, keys, CQs, SRQs, AHs, MWs) and the queues
//! every part of the transport writes into (completions, events, timers, the transmit
//! schedule, counters): one type, so a QP and the rest can be borrowed at once.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::attr::*;
use crate::mr::Keys;
use crate::qp::Qp;
use crate::timers::Timers;
use crate::types::*;

#[derive(Debug)]
pub(crate) struct Pd {
    pub owner: ClientId,
    pub refs: u32,
}

#[derive(Debug)]
pub(crate) struct Cq {
    pub owner: ClientId,
    pub depth: u32,
    /// Completions handed to `poll_completion`'s queue and not yet taken.
    pub pending: u32,
    pub refs: u32,
    pub overflowed: bool,
}

#[derive(Debug)]
pub(crate) struct Srq {
    pub owner: ClientId,
    pub pd: PdHandle,
    pub attr: SrqAttr,
    pub wqes: VecDeque<RecvWr>,
    pub refs: u32,
    /// An XRC SRQ's domain and completion queue (`None`: a basic SRQ).
    pub xrc: Option<XrcSrq>,
}

/// What makes an SRQ an XRC SRQ: the XRC domain whose target QPs may name it, and the
/// CQ its receives complete on (an XRC target QP has no CQ of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XrcSrq {
    pub xrcd: XrcdHandle,
    pub cq: CqHandle,
}

/// An XRC domain: shared by every open of it (`ibv_open_xrcd` on the same file, which
/// the daemon matches), alive while opened.
#[derive(Debug, Default)]
pub(crate) struct Xrcd {
    /// One entry per open not yet closed.
    pub openers: Vec<ClientId>,
    /// XRC SRQs and target QPs in the domain.
    pub refs: u32,
}

#[derive(Debug)]
pub(crate) struct Ah {
    pub owner: ClientId,
    pub pd: PdHandle,
    pub attr: AhAttr,
}

#[derive(Debug)]
pub(crate) struct Mw {
    pub owner: ClientId,
    pub pd: PdHandle,
    pub key: u32,
}

/// Everything but the QPs, so a QP and the rest can be borrowed at once.
#[derive(Debug, Default)]
pub(crate) struct Objects {
    pub pds: U32Map<Pd>,
    pub keys: Keys,
    pub cqs: U32Map<Cq>,
    pub srqs: U32Map<Srq>,
    pub xrcds: U32Map<Xrcd>,
    pub ahs: U32Map<Ah>,
    pub mws: U32Map<Mw>,
    pub completions: VecDeque<(CqHandle, WorkCompletion)>,
    pub events: VecDeque<(ClientId, AsyncEvent)>,
    pub counters: Counters,
    pub timers: Timers,
    /// QPs that may have something to transmit, round robin.
    pub sched: VecDeque<u32>,
    /// Request packets in flight over the device's RC QPs, as last counted.
    pub inflight: Inflight,
    pub next_handle: u32,
    pub key_state: u64,
}

impl Objects {
    /// Adds `delta` to the use count of `pd`; returns its owner (EINVAL: no such PD).
    pub fn pd_ref(&mut self, pd: PdHandle, delta: i32) -> Result<ClientId, Errno> {
        let p = self.pds.get_mut(&pd.0).ok_or(Errno::EINVAL)?;
        p.refs = p.refs.wrapping_add_signed(delta);
        Ok(p.owner)
    }

    pub fn handle(&mut self) -> u32 {
        self.next_handle += 1;
        self.next_handle
    }

    /// A fresh key byte (deterministic from the seed, splitmix64).
    pub fn key_byte(&mut self) -> u32 {
        self.key_state = self.key_state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.key_state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) & 0xff) as u32
    }

    /// Queues a completion on `cq`; on overrun raises CQ_ERR once and drops it.
    pub fn push_wc(&mut self, cq: CqHandle, wc: WorkCompletion) {
        let Some(c) = self.cqs.get_mut(&cq.0) else {
            return;
        };
        if c.pending >= c.depth {
            self.counters.cq_overruns += 1;
            if !c.overflowed {
                c.overflowed = true;
                self.events.push_back((c.owner, AsyncEvent::CqErr(cq)));
            }
            return;
        }
        c.pending += 1;
        self.completions.push_back((cq, wc));
    }

    pub fn schedule(&mut self, qp: &mut Qp) {
        if !qp.scheduled && qp.wants_tx() {
            qp.scheduled = true;
            self.sched.push_back(qp.qpn.0);
        }
    }
}

/// How long a count of the device's packets in flight stands: messages started since
/// are added to it, ACKs are seen at the next count.
pub(crate) const RECOUNT: Duration = Duration::from_millis(1);

/// The device's request packets in flight over its RC QPs (PSNs sent and not yet
/// acknowledged): counted at most every [`RECOUNT`], with the messages started since
/// added, so between counts it can only be too high, never too low.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    pub packets: u32,
    pub counted_at: Option<Instant>,
}
