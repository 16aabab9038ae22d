//! The simulated fabric: nodes, links with their seeded faults, the marking switch port
//! ([`super::queue`]), and the helpers that connect two QPs across it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::paging::{Paged, Paging};
use super::queue::{MarkingQueue, QueueStats};
use super::rng::Rng;
use crate::attr::*;
use crate::memory::VecMemory;
use crate::types::*;
use crate::Device;
use wire::roce::{Psn, Qkey, Qpn};

/// The link model every packet goes through.
#[derive(Debug, Clone, Copy)]
pub struct LinkModel {
    /// Probability a packet is lost.
    pub loss: f64,
    /// Probability a packet is delivered twice.
    pub duplicate: f64,
    /// Probability a packet is delayed past later ones.
    pub reorder: f64,
    /// Probability a byte of the packet is flipped (the ICRC must catch it).
    pub corrupt: f64,
    /// One-way delay.
    pub delay: Duration,
    /// Largest UDP payload the link carries (bigger packets are dropped).
    pub mtu: usize,
    /// Bytes per second each direction between two nodes carries (`None`: unlimited).
    /// Packets queue behind each other, so a burst of large responses (or the duplicate
    /// READ responses a retransmission provokes) arrives spread out, as from a slow
    /// responder.
    pub bandwidth: Option<u64>,
    /// Whether a node takes every packet that has arrived before it sends again, as the
    /// daemon drains its socket in one pass (`recvmmsg`, GRO): two responses back to back
    /// reach the requester with no transmission between them. Otherwise a node may send
    /// between any two packets it takes.
    pub batch: bool,
}

impl LinkModel {
    /// The loss suites' link: up to 20 % loss, duplication and reordering and 2 %
    /// corruption, drawn from `rng`.
    pub fn lossy(rng: &mut Rng) -> Self {
        LinkModel {
            loss: rng.unit() * 0.2,
            duplicate: rng.unit() * 0.2,
            reorder: rng.unit() * 0.2,
            corrupt: rng.unit() * 0.02,
            batch: rng.unit() < 0.5,
            ..LinkModel::default()
        }
    }
}

impl Default for LinkModel {
    fn default() -> Self {
        LinkModel {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay: Duration::from_micros(5),
            mtu: 9000,
            bandwidth: None,
            batch: false,
        }
    }
}

/// Where a packet on the wire goes next.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
enum Hop {
    /// To the [`MarkingQueue`], from node `from`.
    Switch { from: usize },
    /// To the node; `ce`: marked Congestion Experienced on the way.
    Host { ce: bool },
}

/// One simulated host: a device and its memory.
#[derive(Debug)]
pub struct Node {
    /// The device.
    pub dev: Device,
    /// Application memory of every client on the node.
    pub mem: VecMemory,
    /// The node's IP address (GID index 0).
    pub ip: IpAddr,
    /// ODP page faults of the node's memory (`None`: every page resident).
    pub paging: Option<Paging>,
}

impl Node {
    /// The node's memory as its device reaches it (with page faults).
    fn memory(&mut self) -> (&mut Device, Paged<'_>) {
        let mem = Paged {
            mem: &mut self.mem,
            paging: self.paging.as_mut(),
        };
        (&mut self.dev, mem)
    }

    /// How long the device is busy serving the faults of its last call.
    fn stall(&mut self) -> Duration {
        self.paging
            .as_mut()
            .map_or(Duration::ZERO, Paging::take_stall)
    }
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Instant,
    seq: u64,
    to: usize,
    src: SocketAddr,
    dst: SocketAddr,
    hop: Hop,
    bytes: Vec<u8>,
}

/// N nodes and the packets between them.
#[derive(Debug)]
pub struct Fabric {
    /// The nodes.
    pub nodes: Vec<Node>,
    /// Simulated time.
    pub now: Instant,
    /// The link model.
    pub link: LinkModel,
    /// The seed (print it when a run fails).
    pub seed: u64,
    rng: Rng,
    flying: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    by_ip: HashMap<IpAddr, usize>,
    /// When each direction (from, to) is free again (with [`LinkModel::bandwidth`]).
    busy_until: HashMap<(usize, usize), Instant>,
    buf: Vec<u8>,
    /// Packets delivered.
    pub delivered: u64,
    /// A marking switch queue in front of one node (`None`: none).
    pub queue: Option<MarkingQueue>,
    /// What the queue saw.
    pub queue_stats: QueueStats,
    /// Departure times and sizes of the packets in the queue.
    queued: VecDeque<(Instant, usize)>,
    /// Bytes per second each node's NIC sends (`None`: unlimited). Unlike
    /// [`LinkModel::bandwidth`], which queues whatever a device hands over behind the link,
    /// the fabric takes the next packet from a device only when its NIC has finished the
    /// previous one, so packets wait in the device (where DCQCN paces them), as on a NIC.
    pub nic_rate: Option<u64>,
    /// When each node's NIC is free again (with `nic_rate`).
    nic_free: Vec<Instant>,
    /// Until when each node serves page faults ([`Node::paging`]): it sends nothing and
    /// takes no packet in until then.
    stalled_until: Vec<Instant>,
    /// Packets that reached a node while it served a fault, in arrival order.
    backlog: Vec<VecDeque<InFlight>>,
    /// Whether a node with a backlog sends before it takes the next packet.
    send_turn: Vec<bool>,
}

/// The device configuration the simulator uses for node `i`.
pub fn node_config(i: usize, mtu: Mtu, seed: u64) -> DeviceConfig {
    DeviceConfig {
        name: format!("sim{i}"),
        gids: vec![Gid::from_ip(IpAddr::V4(Ipv4Addr::new(
            10,
            0,
            0,
            1 + i as u8,
        )))],
        active_mtu: mtu,
        udp_src_port: None,
        limits: DeviceLimits::default(),
        seed: seed.wrapping_add(i as u64),
    }
}

impl Fabric {
    /// `n` nodes with port MTU `mtu`.
    pub fn new(seed: u64, n: usize, mtu: Mtu, link: LinkModel) -> Self {
        let mut nodes = Vec::new();
        let mut by_ip = HashMap::new();
        for i in 0..n {
            let cfg = node_config(i, mtu, seed);
            let ip = cfg.gids[0].to_ip();
            by_ip.insert(ip, i);
            nodes.push(Node {
                dev: Device::new(cfg),
                mem: VecMemory::new(),
                ip,
                paging: None,
            });
        }
        Fabric {
            nodes,
            now: Instant::now(),
            link,
            seed,
            rng: Rng::new(seed),
            flying: BinaryHeap::new(),
            seq: 0,
            by_ip,
            busy_until: HashMap::new(),
            buf: Vec::with_capacity(9000),
            delivered: 0,
            queue: None,
            queue_stats: QueueStats::default(),
            queued: VecDeque::new(),
            nic_rate: None,
            nic_free: Vec::new(),
            stalled_until: Vec::new(),
            backlog: (0..n).map(|_| VecDeque::new()).collect(),
            send_turn: Vec::new(),
        }
    }

    fn send(&mut self, src: SocketAddr, dst: SocketAddr, bytes: &[u8], depart: Instant) {
        if dst.ip().is_multicast() {
            // Like IP multicast with loopback on: every node whose device has a QP
            // attached to the group, the sender's own included.
            let gid = Gid::from_ip(dst.ip());
            let to: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].dev.mcast_groups().contains(&gid))
                .collect();
            for i in to {
                self.send_to(i, src, dst, bytes, depart);
            }
            return;
        }
        let Some(&to) = self.by_ip.get(&dst.ip()) else {
            return;
        };
        self.send_to(to, src, dst, bytes, depart);
    }

    fn send_to(
        &mut self,
        to: usize,
        src: SocketAddr,
        dst: SocketAddr,
        bytes: &[u8],
        depart: Instant,
    ) {
        if bytes.len() > self.link.mtu || self.rng.chance(self.link.loss) {
            return;
        }
        // Serialisation on a bandwidth-limited direction: leave when the link is free.
        let mut leave = depart;
        if let (Some(bw), Some(&from)) = (self.link.bandwidth, self.by_ip.get(&src.ip())) {
            let free = self.busy_until.entry((from, to)).or_insert(depart);
            leave = (*free).max(depart)
                + Duration::from_nanos(bytes.len() as u64 * 1_000_000_000 / bw.max(1));
            *free = leave;
        }
        let copies = if self.rng.chance(self.link.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut b = bytes.to_vec();
            if self.rng.chance(self.link.corrupt) {
                let i = self.rng.below(b.len() as u64) as usize;
                b[i] ^= 1 << self.rng.below(8);
            }
            let mut at = leave + self.link.delay;
            if self.rng.chance(self.link.reorder) {
                at += self.link.delay * (1 + self.rng.below(4) as u32);
            }
            let hop = match (self.queue, self.by_ip.get(&src.ip())) {
                (Some(q), Some(&from)) if q.to == to && from != to => Hop::Switch { from },
                _ => Hop::Host { ce: false },
            };
            self.seq += 1;
            self.flying.push(Reverse(InFlight {
                at,
                seq: self.seq,
                to,
                src,
                dst,
                hop,
                bytes: b,
            }));
        }
    }

    /// A packet from node `from` reached the marking queue: dropped when it does not fit,
    /// else marked or not and sent on when the packets before it have left.
    fn enqueue(&mut self, from: usize, mut pkt: InFlight) {
        let Some(q) = self.queue else {
            return;
        };
        let now = self.now;
        while self.queued.front().is_some_and(|&(t, _)| t <= now) {
            self.queued.pop_front();
        }
        let depth: usize = self.queued.iter().map(|&(_, b)| b).sum();
        let len = pkt.bytes.len();
        let st = &mut self.queue_stats;
        st.arrived += 1;
        st.depth_sum += depth as u64;
        st.max_depth = st.max_depth.max(depth);
        if depth + len > q.capacity {
            st.dropped += 1;
            return;
        }
        let p = if depth <= q.kmin {
            0.0
        } else if depth >= q.kmax {
            1.0
        } else {
            q.pmax * (depth - q.kmin) as f64 / (q.kmax - q.kmin).max(1) as f64
        };
        let ce = p > 0.0 && self.rng.chance(p);
        let st = &mut self.queue_stats;
        st.marked += u64::from(ce);
        *st.sent_by.entry(from).or_default() += len as u64;
        let start = self.queued.back().map_or(now, |&(t, _)| t.max(now));
        let depart = start + Duration::from_nanos(len as u64 * 1_000_000_000 / q.rate.max(1));
        self.queued.push_back((depart, len));
        self.seq += 1;
        pkt.seq = self.seq;
        pkt.at = depart + self.link.delay;
        pkt.hop = Hop::Host { ce };
        self.flying.push(Reverse(pkt));
    }

    /// Moves every packet the nodes want to send onto the wire.
    pub fn pump(&mut self) {
        for i in 0..self.nodes.len() {
            self.pump_node(i);
        }
    }

    /// Moves every packet node `i` wants to send onto the wire (until its NIC is busy or
    /// it serves a fault).
    fn pump_node(&mut self, i: usize) {
        self.nic_free.resize(self.nodes.len(), self.now);
        self.stalled_until.resize(self.nodes.len(), self.now);
        loop {
            let now = self.now;
            if (self.nic_rate.is_some() && self.nic_free[i] > now) || self.stalled_until[i] > now {
                break;
            }
            let mut buf = std::mem::take(&mut self.buf);
            let n = &mut self.nodes[i];
            let (dev, mut mem) = n.memory();
            let t = dev.poll_transmit(now, &mut mem, &mut buf);
            // A packet whose payload faulted in leaves once the faults are served.
            let depart = now + n.stall();
            self.stalled_until[i] = depart;
            match t {
                Some(t) => {
                    if let Some(rate) = self.nic_rate {
                        self.nic_free[i] = depart
                            + Duration::from_nanos(t.len as u64 * 1_000_000_000 / rate.max(1));
                    }
                    self.send(t.src, t.dst, &buf[..t.len], depart);
                    self.buf = buf;
                }
                None => {
                    self.buf = buf;
                    break;
                }
            }
        }
    }

    /// Runs one event (a delivery or a timer), jumping time to it. Returns false when
    /// nothing is left to happen.
    pub fn step(&mut self) -> bool {
        let now = self.now;
        self.stalled_until.resize(self.nodes.len(), now);
        // A node done with its faults takes the packets that waited for it in order, and
        // takes turns between them and what it sends (rxe's receiving and sending tasks
        // share the CPU): a responder's ACK leaves before the next request faults, and a
        // requester that faults on every packet it builds still sees its ACKs.
        let ready = (0..self.nodes.len())
            .find(|&i| self.stalled_until[i] <= now && !self.backlog[i].is_empty());
        if let Some(i) = ready {
            self.send_turn.resize(self.nodes.len(), false);
            for _ in 0..2 {
                if self.stalled_until[i] > self.now {
                    break;
                }
                if self.send_turn[i] {
                    self.pump_node(i);
                } else if let Some(pkt) = self.backlog[i].pop_front() {
                    self.deliver(pkt);
                }
                self.send_turn[i] = !self.send_turn[i];
            }
            return true;
        }
        self.pump();
        let next_pkt = self.flying.peek().map(|Reverse(p)| p.at);
        // A node serving faults handles its timers after them, as rxe's tasks (its
        // retransmission runs in the requester task the fault holds up).
        let next_timer = (self.nodes.iter().enumerate())
            .filter_map(|(i, n)| Some(n.dev.poll_timeout()?.max(self.stalled_until[i])))
            .min();
        // A NIC that finishes a packet, or a node that served its faults, may take the next
        // one from its device.
        let next_nic = self
            .nic_free
            .iter()
            .chain(&self.stalled_until)
            .copied()
            .filter(|&t| t > now)
            .min();
        if let Some(free) = next_nic {
            if next_pkt.is_none_or(|p| free < p) && next_timer.is_none_or(|t| free < t) {
                self.now = free;
                return true;
            }
        }
        match (next_pkt, next_timer) {
            (None, None) => false,
            (Some(p), t) if t.is_none_or(|t| p <= t) => {
                let Some(Reverse(pkt)) = self.flying.pop() else {
                    return false;
                };
                self.now = self.now.max(pkt.at);
                if let Hop::Switch { from } = pkt.hop {
                    self.enqueue(from, pkt);
                    return true;
                }
                if self.busy(pkt.to) {
                    self.backlog[pkt.to].push_back(pkt);
                    return true;
                }
                self.deliver(pkt);
                if self.link.batch {
                    self.deliver_arrived();
                }
                true
            }
            (_, Some(t)) => {
                self.now = self.now.max(t);
                let now = self.now;
                for (i, n) in self.nodes.iter_mut().enumerate() {
                    if n.dev.poll_timeout().is_some_and(|d| d <= now)
                        && self.stalled_until[i] <= now
                    {
                        let (dev, mut mem) = n.memory();
                        dev.handle_timeout(now, &mut mem);
                        let until = now + n.stall();
                        self.stalled_until[i] = self.stalled_until[i].max(until);
                    }
                }
                true
            }
            (Some(_), None) => unreachable!("covered above"),
        }
    }

    /// Gives every node ODP memory ([`Node::paging`]) whose faults take `fault_time`, a
    /// resident page evicted before a touch with probability `evict` (drawn from the
    /// fabric's seed).
    pub fn page_faults(&mut self, fault_time: Duration, evict: f64) {
        for (i, n) in self.nodes.iter_mut().enumerate() {
            let seed = self.seed ^ ((i as u64 + 1) << 32);
            n.paging = Some(Paging::new(seed, fault_time, evict));
        }
    }

    /// Delivers the packets that have reached their nodes by now (see
    /// [`LinkModel::batch`]), in arrival order, up to the first one whose node is busy
    /// (serving page faults, or with a backlog) or that still has a switch to pass.
    fn deliver_arrived(&mut self) {
        while let Some(Reverse(p)) = self.flying.peek() {
            if p.at > self.now || !matches!(p.hop, Hop::Host { .. }) || self.busy(p.to) {
                break;
            }
            let Some(Reverse(pkt)) = self.flying.pop() else {
                break;
            };
            self.deliver(pkt);
        }
    }

    /// Whether `node` cannot take a packet now: it serves page faults, or packets wait
    /// for it already.
    fn busy(&self, node: usize) -> bool {
        self.stalled_until[node] > self.now || !self.backlog[node].is_empty()
    }

    /// Hands a packet to its node, which is then busy with the faults it took.
    fn deliver(&mut self, pkt: InFlight) {
        let ce = matches!(pkt.hop, Hop::Host { ce: true });
        let now = self.now;
        let n = &mut self.nodes[pkt.to];
        let d = Datagram {
            src: pkt.src,
            dst: pkt.dst,
            payload: &pkt.bytes,
        };
        let (dev, mut mem) = n.memory();
        dev.handle_datagram(now, &d, &mut mem);
        if ce {
            dev.congestion_experienced(now, &d);
        }
        let until = now + n.stall();
        self.stalled_until[pkt.to] = until;
        self.delivered += 1;
    }

    /// Runs as [`Fabric::run`] and asserts that the fabric went idle with no timer left
    /// armed on any node; `ctx` (the seed and what it drew) goes into the panic message.
    pub fn settle(&mut self, limit: Duration, ctx: &str) {
        assert!(self.run(limit), "not idle: {ctx}");
        for n in &self.nodes {
            assert_eq!(n.dev.armed_timers(), 0, "timers left: {ctx}");
        }
    }

    /// Steps until nothing is left or `limit` simulated time passed; returns whether idle.
    pub fn run(&mut self, limit: Duration) -> bool {
        let end = self.now + limit;
        while self.now <= end {
            if !self.step() {
                return true;
            }
        }
        false
    }
}

/// Objects of one end of a connection made by [`connect`].
#[derive(Debug, Clone, Copy)]
pub struct End {
    /// Node index.
    pub node: usize,
    /// Owner.
    pub client: ClientId,
    /// PD.
    pub pd: PdHandle,
    /// Send CQ.
    pub scq: CqHandle,
    /// Receive CQ.
    pub rcq: CqHandle,
    /// The QP.
    pub qpn: Qpn,
    /// MR over the node's buffer.
    pub mr: MrKeys,
    /// Buffer address.
    pub base: u64,
    /// Buffer length.
    pub len: u64,
    /// The SRQ the QP receives from, if [`ConnOpts::use_srq`].
    pub srq: Option<SrqHandle>,
}

/// Options of a simulated connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnOpts {
    /// Transport.
    pub qp_type: QpType,
    /// Path MTU.
    pub mtu: Mtu,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Initial send PSN of side A (side B uses `psn + 1000`).
    pub psn: u32,
    /// Buffer size per side.
    pub buf_len: u64,
    /// Queue depths.
    pub depth: u32,
    /// READ/atomic depth.
    pub rd_atomic: u8,
    /// Remote access granted.
    pub access: AccessFlags,
    /// Receive through a shared receive queue.
    pub use_srq: bool,
    /// The traffic class of both sides' paths (`grh.traffic_class`).
    pub traffic_class: u8,
    /// Register the MRs with `IBV_ACCESS_ON_DEMAND` (give the nodes [`Node::paging`] for
    /// their faults).
    pub odp: bool,
}

impl Default for ConnOpts {
    fn default() -> Self {
        ConnOpts {
            qp_type: QpType::Rc,
            mtu: Mtu::Mtu1024,
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            psn: 100,
            buf_len: 1 << 20,
            depth: 1024,
            rd_atomic: 16,
            use_srq: false,
            traffic_class: 0,
            odp: false,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        }
    }
}

/// Creates a PD, CQs, an MR and a QP on `node` (QP left in RESET).
pub fn make_end(f: &mut Fabric, node: usize, o: &ConnOpts) -> End {
    let client = ClientId(100 + node as u32);
    let base = 0x10_0000 * (node as u64 + 1);
    let n = &mut f.nodes[node];
    n.mem
        .add_region(AddrSpace(client.0), base, o.buf_len as usize);
    let d = &mut n.dev;
    let pd = d.alloc_pd(client).expect("pd");
    let (scq, _) = d.create_cq(client, 32767).expect("cq");
    let (rcq, _) = d.create_cq(client, 32767).expect("cq");
    let access = if o.odp {
        o.access | AccessFlags::ON_DEMAND
    } else {
        o.access
    };
    let mr = d
        .reg_mr(pd, base, o.buf_len, base, access, AddrSpace(client.0))
        .expect("mr");
    let cap = QpCap {
        max_send_wr: o.depth,
        max_recv_wr: o.depth,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 256,
    };
    let srq = o.use_srq.then(|| {
        d.create_srq(
            client,
            pd,
            SrqAttr {
                max_wr: o.depth,
                max_sge: 4,
                srq_limit: 0,
            },
        )
        .expect("srq")
    });
    let init = QpInitAttr {
        pd,
        send_cq: scq,
        recv_cq: rcq,
        srq,
        cap,
        qp_type: o.qp_type,
        sq_sig_all: false,
    };
    let (qpn, _) = d.create_qp(client, &init).expect("qp");
    End {
        node,
        client,
        pd,
        scq,
        rcq,
        qpn,
        mr,
        base,
        len: o.buf_len,
        srq,
    }
}

/// Moves a QP through INIT, RTR and RTS towards `remote` (RC/UC) or alone (UD).
pub fn bring_up(f: &mut Fabric, e: &End, remote: Option<(&End, u32)>, o: &ConnOpts, sq_psn: u32) {
    let now = f.now;
    let d = &mut f.nodes[e.node].dev;
    use QpAttrMask as M;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qp_access_flags: o.access,
        qkey: Qkey(0x1111_1111),
        ..QpAttr::default()
    };
    let m = if o.qp_type == QpType::Ud {
        M::QKEY
    } else {
        M::ACCESS_FLAGS
    };
    d.modify_qp(now, e.qpn, &a, M::STATE | M::PKEY_INDEX | M::PORT | m)
        .expect("INIT");
    a.qp_state = QpState::Rtr;
    let mut mask = M::STATE;
    if let Some((r, rq_psn)) = remote {
        let dgid = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1 + r.node as u8)));
        a.ah_attr = AhAttr {
            grh: GlobalRoute {
                dgid,
                hop_limit: 64,
                traffic_class: o.traffic_class,
                ..Default::default()
            },
            is_global: true,
            port_num: 1,
            ..Default::default()
        };
        a.path_mtu = o.mtu as u32;
        a.dest_qp_num = r.qpn;
        a.rq_psn = Psn::new(rq_psn);
        a.max_dest_rd_atomic = o.rd_atomic;
        a.min_rnr_timer = 1;
        mask |= M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
        if o.qp_type == QpType::Rc {
            mask |= M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        }
    }
    d.modify_qp(now, e.qpn, &a, mask).expect("RTR");
    a.qp_state = QpState::Rts;
    a.sq_psn = Psn::new(sq_psn);
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = o.rd_atomic;
    let mut mask = M::STATE | M::SQ_PSN;
    if o.qp_type == QpType::Rc {
        mask |= M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    }
    d.modify_qp(now, e.qpn, &a, mask).expect("RTS");
}

/// An RDMA WRITE of `len` bytes from the start of `from`'s buffer to the start of `to`'s.
pub fn write_wr(wr_id: u64, from: &End, to: &End, len: u32) -> SendWr {
    let mut wr = SendWr::new(WrId(wr_id), WrOpcode::RdmaWrite);
    wr.sg_list = vec![Sge {
        addr: from.base,
        length: len,
        lkey: from.mr.lkey,
    }];
    wr.rdma = RdmaInfo {
        remote_addr: to.base,
        rkey: to.mr.rkey,
    };
    wr
}

/// Two connected ends on nodes 0 and 1.
pub fn connect(f: &mut Fabric, o: &ConnOpts) -> (End, End) {
    connect_nodes(f, 0, 1, o)
}

/// Two connected ends on nodes `a` and `b` (a node may hold several ends: each has its own
/// QP, CQs and MR over the node's buffer).
pub fn connect_nodes(f: &mut Fabric, a: usize, b: usize, o: &ConnOpts) -> (End, End) {
    let a = make_end(f, a, o);
    let b = make_end(f, b, o);
    let (pa, pb) = (o.psn & Psn::MASK, o.psn.wrapping_add(1000) & Psn::MASK);
    if o.qp_type == QpType::Ud {
        bring_up(f, &a, None, o, pa);
        bring_up(f, &b, None, o, pb);
    } else {
        bring_up(f, &a, Some((&b, pb)), o, pa);
        bring_up(f, &b, Some((&a, pa)), o, pb);
    }
    (a, b)
}
