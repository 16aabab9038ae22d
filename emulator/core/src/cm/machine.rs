//! The CM agent's connection machine: the table of connections, and the carrying out of
//! one step of [`super::table`] on a connection (the MAD it sends, the timer it arms, the
//! event it reports).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Instant;

use tracing::{debug, trace};
use wire::cm::mad;
use wire::roce::Psn;

use super::conn::{Conn, Payload, Sidr};
use super::format;
use super::table::{step, CmState, Ev, Input, Msg, Timer};
use super::types::{
    iba_time, reason, sidr_status, CmConfig, CmCounters, CmEvent, CmTransmit, ConnId, ConnParams,
    Owner, Route,
};
use crate::sim::Rng;
use crate::types::{Errno, QpType};

/// The connection table and what carries out the table's steps on it: IDs, the starting
/// PSNs' generator, the MADs to send and the events to report. The agent's verbs and its
/// input both drive it.
#[derive(Debug)]
pub(super) struct Machine {
    pub cfg: CmConfig,
    pub rng: Rng,
    pub id_operand: u32,
    pub next_id: u32,
    pub conns: HashMap<u32, Conn>,
    /// (peer address, peer comm ID) → local comm ID: duplicate REQs, REJ/SIDR matching.
    pub by_remote: HashMap<(IpAddr, u32), u32>,
    pub transmits: VecDeque<CmTransmit>,
    pub events: VecDeque<(ConnId, Owner, CmEvent)>,
    pub counters: CmCounters,
}

impl Machine {
    /// A machine with no connections.
    pub fn new(cfg: CmConfig) -> Self {
        let mut rng = Rng::new(cfg.seed ^ 0x636d_5f61_6765_6e74);
        let id_operand = rng.next_u64() as u32;
        Machine {
            cfg,
            rng,
            id_operand,
            next_id: 0,
            conns: HashMap::new(),
            by_remote: HashMap::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
    }

    pub fn conn(&self, id: ConnId) -> Result<&Conn, Errno> {
        self.conns.get(&id.0).ok_or(Errno::ENOENT)
    }

    // ---- machinery -----------------------------------------------------------------

    pub fn new_comm_id(&mut self) -> u32 {
        loop {
            // Like the Linux CM: a counter XORed with a random operand, stored in network
            // order as the kernel's `__be32` does (so the wire shows it byte-swapped).
            let raw = self.next_id ^ self.id_operand;
            self.next_id = self.next_id.wrapping_add(1);
            let id = raw.swap_bytes();
            if id != 0 && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    pub fn new_conn(
        &mut self,
        owner: Owner,
        active: bool,
        route: Route,
        params: ConnParams,
    ) -> u32 {
        let id = self.new_comm_id();
        let sgid_index = self
            .cfg
            .gids
            .iter()
            .position(|g| g.to_ip() == route.local)
            .unwrap_or(0) as u8;
        let psn = params
            .starting_psn
            .unwrap_or_else(|| Psn::new(self.rng.next_u64() as u32));
        let plt = self.cfg.packet_life_time;
        let mtu = params.path_mtu.min(self.cfg.active_mtu);
        let response_timeout = if params.qp_type == QpType::Ud {
            iba_time(self.cfg.cm_response_timeout)
        } else {
            iba_time(plt) * 2 + iba_time(self.cfg.cm_response_timeout)
        };
        let c = Conn {
            owner,
            state: CmState::Idle,
            active,
            orphan: false,
            local_comm_id: id,
            remote_comm_id: 0,
            tid: self.cfg.tid_for(id),
            dreq_tid: 0,
            service_id: route.service_id(),
            local: route.local,
            remote: route.remote,
            sgid_index,
            src_port: route.src_port,
            params,
            psn,
            peer: None,
            mtu,
            flow_label: route.flow_label(),
            hop_limit: route.hop_limit,
            traffic_class: route.traffic_class,
            ack_timeout: plt + 1,
            response_timeout,
            sent: None,
            retries_left: self.cfg.max_cm_retries,
            deadline: None,
            mra_timeout: 0,
            rej: (reason::CONSUMER_DEFINED, Vec::new(), Vec::new()),
            out_private: Vec::new(),
            sidr: Sidr::default(),
        };
        self.conns.insert(id, c);
        id
    }

    pub fn push(&mut self, src: IpAddr, dst: IpAddr, mad: [u8; mad::MAD_LEN]) {
        self.counters.tx += 1;
        self.transmits.push_back(CmTransmit { src, dst, mad });
    }

    /// A REJ answering a REQ that gets no connection.
    pub fn reply_rej(
        &mut self,
        from: IpAddr,
        to: IpAddr,
        tid: u64,
        remote: u32,
        local: u32,
        why: u16,
    ) {
        let m = format::rej_reply(tid, local, remote, 0, why);
        self.push(to, from, m);
    }

    /// Carries out one cell of the table.
    pub fn apply(
        &mut self,
        now: Instant,
        id: u32,
        input: Input,
        payload: Payload,
    ) -> Result<(), Errno> {
        let cfg_retries = self.cfg.max_cm_retries;
        let timewait = iba_time(self.cfg.packet_life_time + 1);
        let sidr_hold =
            iba_time(self.cfg.cm_response_timeout) * (u32::from(self.cfg.max_cm_retries) + 1);
        let Some(c) = self.conns.get(&id) else {
            return Err(Errno::ENOENT);
        };
        let Some(st) = step(c.state, input) else {
            trace!(
                state = c.state.name(),
                ?input,
                "cm input not valid in state"
            );
            if c.state == CmState::Idle {
                self.remove(id);
            }
            return Err(Errno::EINVAL);
        };
        if st.next != c.state {
            debug!(
                comm_id = id,
                from = c.state.name(),
                to = st.next.name(),
                ?input,
                "cm state"
            );
        }
        let from_state = c.state;
        if let Some(send) = st.send {
            let mad = match send {
                Msg::Resend => {
                    self.counters.tx_retries += 1;
                    c.sent.as_deref().copied()
                }
                _ => Some(format::build(&self.cfg, c, from_state, send)),
            };
            let (src, dst) = (c.local, c.remote);
            let keep = matches!(send, Msg::Req | Msg::Rep | Msg::Dreq | Msg::SidrReq);
            if let Some(m) = mad {
                self.push(src, dst, m);
                if keep {
                    if let Some(c) = self.conns.get_mut(&id) {
                        c.sent = Some(Box::new(m));
                    }
                }
            }
        }
        let Some(c) = self.conns.get_mut(&id) else {
            return Ok(());
        };
        c.state = st.next;
        match st.timer {
            Timer::Keep => {}
            Timer::Stop => c.deadline = None,
            Timer::Response => {
                if st.send == Some(Msg::Resend) {
                    c.retries_left = c.retries_left.saturating_sub(1);
                } else {
                    c.retries_left = cfg_retries;
                }
                c.deadline = Some(now + c.response_timeout);
            }
            Timer::Mra => {
                c.deadline = Some(now + iba_time(c.mra_timeout) + iba_time(c.ack_timeout));
            }
            Timer::Timewait => c.deadline = Some(now + timewait),
            Timer::SidrHold => c.deadline = Some(now + sidr_hold),
        }
        if let Some(ev) = st.event {
            if !c.orphan {
                let event = make_event(ev, c, payload);
                self.events.push_back((ConnId(id), c.owner, event));
            }
        }
        if st.next == CmState::Idle {
            self.remove(id);
        }
        Ok(())
    }

    pub fn remove(&mut self, id: u32) {
        if let Some(c) = self.conns.remove(&id) {
            if self.by_remote.get(&(c.remote, c.remote_comm_id)) == Some(&id) {
                self.by_remote.remove(&(c.remote, c.remote_comm_id));
            }
        }
    }
}

fn make_event(ev: Ev, c: &Conn, p: Payload) -> CmEvent {
    match ev {
        Ev::ConnectRequest => match c.peer {
            Some(peer) => CmEvent::ConnectRequest {
                service_id: c.service_id,
                peer,
                cma: p.cma,
                private_data: p.private_data,
            },
            None => CmEvent::Unreachable,
        },
        Ev::SidrRequest => CmEvent::SidrRequest {
            service_id: c.service_id,
            addr: c.remote,
            cma: p.cma,
            private_data: p.private_data,
        },
        Ev::ConnectResponse => match c.peer {
            Some(peer) => CmEvent::ConnectResponse {
                peer,
                private_data: p.private_data,
            },
            None => CmEvent::Unreachable,
        },
        Ev::Established => CmEvent::Established,
        Ev::Rejected => CmEvent::Rejected {
            reason: p.reason,
            private_data: p.private_data,
            ari: p.ari,
        },
        Ev::Unreachable => CmEvent::Unreachable,
        Ev::Disconnected => CmEvent::Disconnected {
            timed_out: false,
            private_data: p.private_data,
        },
        Ev::DisconnectTimedOut => CmEvent::Disconnected {
            timed_out: true,
            private_data: Vec::new(),
        },
        Ev::TimewaitExit => CmEvent::TimewaitExit,
        Ev::SidrReply => match p.sidr {
            Some((sidr_status::SUCCESS, qpn, qkey)) => CmEvent::SidrResolved {
                qpn,
                qkey,
                private_data: p.private_data,
            },
            Some((status, _, _)) => CmEvent::SidrRejected {
                status,
                private_data: p.private_data,
            },
            None => CmEvent::Unreachable,
        },
    }
}
