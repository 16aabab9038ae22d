//! What a connection has to tell its driver: completions (with their CQ) and events, in
//! the order they happened. Every path of the connection writes here (the send side
//! retires WRs, the receive side completes receive WRs, setup and teardown post events);
//! none reads it back, so it is a type of its own that each handler borrows alone.

use std::collections::VecDeque;

use wire::roce::Qpn;

use super::config::{Completion, IwarpConfig, IwarpEvent};
use crate::attr::WorkCompletion;
use crate::types::{CqHandle, WcStatus, WrId};

/// The completions and events not yet polled, with the CQs and QP number they carry.
#[derive(Debug)]
pub(super) struct Outbox {
    completions: VecDeque<Completion>,
    events: VecDeque<IwarpEvent>,
    send_cq: CqHandle,
    recv_cq: CqHandle,
    qpn: Qpn,
}

impl Outbox {
    pub(super) fn new(cfg: &IwarpConfig) -> Outbox {
        Outbox {
            completions: VecDeque::new(),
            events: VecDeque::new(),
            send_cq: cfg.send_cq,
            recv_cq: cfg.recv_cq,
            qpn: cfg.qpn,
        }
    }

    pub(super) fn event(&mut self, e: IwarpEvent) {
        self.events.push_back(e);
    }

    pub(super) fn poll_event(&mut self) -> Option<IwarpEvent> {
        self.events.pop_front()
    }

    pub(super) fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Queues a completion on the send CQ (`wc` without its QP number).
    pub(super) fn send_wc(&mut self, wc: WorkCompletion) {
        self.completions.push_back(Completion {
            cq: self.send_cq,
            wc: WorkCompletion {
                qp_num: self.qpn,
                ..wc
            },
            solicited: false,
        });
    }

    /// Queues a completion on the receive CQ; returns it for the flags of a successful
    /// one (immediate data, invalidated STag, solicited).
    pub(super) fn recv_wc(
        &mut self,
        wr_id: WrId,
        status: WcStatus,
        opcode: crate::types::WcOpcode,
        byte_len: u32,
    ) -> &mut Completion {
        self.completions.push_back(Completion {
            cq: self.recv_cq,
            wc: WorkCompletion {
                wr_id,
                status,
                opcode,
                byte_len,
                qp_num: self.qpn,
                ..WorkCompletion::default()
            },
            solicited: false,
        });
        self.completions.back_mut().expect("just pushed")
    }
}
