//! A pair of iWARP engines joined by a simulated TCP stream: in order, chunked at
//! random (seeded).

#![allow(dead_code)]

use std::time::Instant;

use emu_core::iwarp::{Completion, Connection, IwarpConfig, IwarpEvent, MrTable};
use emu_core::{AccessFlags, AddrSpace, CqHandle, Lkey, PdHandle, RecvWr, Sge, VecMemory, WrId};

pub const SPACE: AddrSpace = AddrSpace(1);
pub const PD: PdHandle = PdHandle(1);
/// Base of the test buffer; a guard zone of GUARD octets surrounds the registered part.
pub const BASE: u64 = 0x10_0000;
pub const GUARD: u64 = 4096;

pub struct Node {
    pub conn: Connection,
    pub keys: MrTable,
    pub mem: VecMemory,
    pub events: Vec<IwarpEvent>,
    pub wcs: Vec<Completion>,
    /// Responder: what to answer a ConnectRequest with.
    pub answer: Option<Result<Vec<u8>, Vec<u8>>>,
}

impl Node {
    pub fn new(conn: Connection, mem_len: u64) -> Node {
        let mut mem = VecMemory::new();
        mem.add_region(SPACE, BASE - GUARD, (mem_len + 2 * GUARD) as usize);
        let mut keys = MrTable::new();
        keys.register(
            0x100,
            PD,
            SPACE,
            BASE,
            mem_len,
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        );
        Node {
            conn,
            keys,
            mem,
            events: Vec::new(),
            wcs: Vec::new(),
            answer: Some(Ok(b"reply-pd".to_vec())),
        }
    }

    fn poll(&mut self) {
        while let Some(e) = self.conn.poll_event() {
            if let IwarpEvent::ConnectRequest(_) = &e {
                match self.answer.take() {
                    Some(Ok(pd)) => self.conn.accept(&pd).unwrap(),
                    Some(Err(pd)) => self.conn.reject(&pd).unwrap(),
                    None => {}
                }
            }
            self.events.push(e);
        }
        while let Some(c) = self.conn.poll_completion() {
            self.wcs.push(c);
        }
    }

    pub fn terminated(&self) -> Option<(wire::iwarp::TerminateError, bool)> {
        self.events.iter().find_map(|e| match e {
            IwarpEvent::Terminated { error, local } => Some((*error, *local)),
            _ => None,
        })
    }

    pub fn post_recv(&mut self, id: u64, addr: u64, len: u32) {
        self.conn
            .post_recv(RecvWr {
                wr_id: WrId(id),
                sg_list: vec![Sge {
                    addr,
                    length: len,
                    lkey: Lkey(0x100),
                }],
            })
            .unwrap();
    }

    pub fn guards_intact(&self, mem_len: u64) -> bool {
        self.mem
            .slice(SPACE, BASE - GUARD, GUARD as usize)
            .iter()
            .all(|b| *b == 0)
            && self
                .mem
                .slice(SPACE, BASE + mem_len, GUARD as usize)
                .iter()
                .all(|b| *b == 0)
    }
}

pub struct Pair {
    pub a: Node,
    pub b: Node,
    pub a_to_b: Vec<u8>,
    pub b_to_a: Vec<u8>,
    /// Everything each side sent, for captures.
    pub log_a: Vec<u8>,
    pub log_b: Vec<u8>,
    /// Every delivery in order: (from a, bytes).
    pub trace: Vec<(bool, Vec<u8>)>,
    rng: u64,
    pub now: Instant,
    /// Largest chunk delivered at once (0: everything).
    pub max_chunk: usize,
    /// Keep `log_*` and `trace`.
    pub record: bool,
}

impl Pair {
    pub fn new(cfg_a: IwarpConfig, cfg_b: IwarpConfig, mem_len: u64, seed: u64) -> Pair {
        let now = Instant::now();
        let mut cfg_a = cfg_a;
        let mut cfg_b = cfg_b;
        for c in [&mut cfg_a, &mut cfg_b] {
            c.pd = PD;
            c.send_cq = CqHandle(1);
            c.recv_cq = CqHandle(2);
            c.inline_space = SPACE;
        }
        Pair {
            a: Node::new(Connection::initiator(now, cfg_a), mem_len),
            b: Node::new(Connection::responder(now, cfg_b), mem_len),
            a_to_b: Vec::new(),
            b_to_a: Vec::new(),
            log_a: Vec::new(),
            log_b: Vec::new(),
            trace: Vec::new(),
            rng: seed | 1,
            now,
            max_chunk: 3000,
            record: true,
        }
    }

    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn chunk(&mut self, avail: usize) -> usize {
        if self.max_chunk == 0 {
            avail
        } else {
            (1 + (self.rand() as usize) % self.max_chunk).min(avail)
        }
    }

    /// Runs until neither side has anything to send or deliver.
    pub fn run(&mut self) {
        for _ in 0..1_000_000 {
            let mut busy = false;
            let n = self.a.conn.poll_stream_transmit(
                &mut self.a_to_b,
                &mut self.a.keys,
                &mut self.a.mem,
            );
            busy |= n > 0;
            let n = self.b.conn.poll_stream_transmit(
                &mut self.b_to_a,
                &mut self.b.keys,
                &mut self.b.mem,
            );
            busy |= n > 0;
            if !self.a_to_b.is_empty() {
                let k = self.chunk(self.a_to_b.len());
                let bytes: Vec<u8> = self.a_to_b.drain(..k).collect();
                if self.record {
                    self.log_a.extend_from_slice(&bytes);
                    self.trace.push((true, bytes.clone()));
                }
                self.b
                    .conn
                    .handle_stream(self.now, &bytes, &mut self.b.keys, &mut self.b.mem);
                busy = true;
            }
            if !self.b_to_a.is_empty() {
                let k = self.chunk(self.b_to_a.len());
                let bytes: Vec<u8> = self.b_to_a.drain(..k).collect();
                if self.record {
                    self.log_b.extend_from_slice(&bytes);
                    self.trace.push((false, bytes.clone()));
                }
                self.a
                    .conn
                    .handle_stream(self.now, &bytes, &mut self.a.keys, &mut self.a.mem);
                busy = true;
            }
            let before = (self.a.events.len(), self.b.events.len());
            self.a.poll();
            self.b.poll();
            if before != (self.a.events.len(), self.b.events.len()) {
                // An accept may have unblocked buffered bytes.
                self.b
                    .conn
                    .handle_stream(self.now, &[], &mut self.b.keys, &mut self.b.mem);
                busy = true;
            }
            if !busy {
                return;
            }
        }
        panic!("pair did not settle");
    }

    pub fn established(&self) -> bool {
        self.a.conn.is_established() && self.b.conn.is_established()
    }
}
