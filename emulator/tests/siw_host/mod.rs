//! A siw device (`SiwNic`) with one PD, CQ, MR and RC QP over real loopback TCP, stepped
//! the way the daemon's loop steps it: the hosts of `siw_stall.rs` and `siw_srq.rs`.
#![allow(dead_code)]

use emulator::daemon::devices::nic::{AppMemory, EventElement, MemFault, Nic, Owner, QpCreate};
use emulator::daemon::siw::{ConnId, ConnParams, SiwCmEvent, SiwNic};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};
use wire::client::slot::{CqeRepr, SendData, SendWqeRepr, Sge, SgeList};
use wire::client::verbs::{access, qp_type, send_flags, wr_opcode};
use wire::client::QpCap;

pub const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
pub const OWNER: Owner = 7;
pub const BASE: u64 = 0x7000_0000;
pub const LEN: usize = 1 << 20;

/// The application's memory: a flat buffer at `BASE`.
pub struct Mem(pub Vec<u8>);

impl AppMemory for Mem {
    fn read(&mut self, _owner: Owner, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        let off = addr.checked_sub(BASE).ok_or(MemFault)? as usize;
        buf.copy_from_slice(self.0.get(off..off + buf.len()).ok_or(MemFault)?);
        Ok(())
    }
    fn write(&mut self, _owner: Owner, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        let off = addr.checked_sub(BASE).ok_or(MemFault)? as usize;
        self.0
            .get_mut(off..off + data.len())
            .ok_or(MemFault)?
            .copy_from_slice(data);
        Ok(())
    }
}

/// A siw device with one PD, CQ, MR (the whole buffer) and RC QP.
pub struct Host {
    pub nic: SiwNic,
    pub mem: Mem,
    pub qpn: u32,
    pub pd: u32,
    pub cq: u32,
    pub lkey: u32,
    pub wcs: Vec<CqeRepr>,
    pub cm: Vec<SiwCmEvent>,
    pub events: Vec<(Owner, u32, EventElement)>,
}

impl Host {
    pub fn new(name: &str) -> Host {
        let mut nic = SiwNic::new(name, &[LO], 4096, 1).expect("siw device");
        let pd = nic.alloc_pd(OWNER).unwrap();
        let (cq, _) = nic.create_cq(OWNER, 256).unwrap();
        let all = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
        let (lkey, _) = nic.reg_mr(OWNER, pd, BASE, LEN as u64, BASE, all).unwrap();
        let qpn = new_qp(&mut nic, pd, cq, None);
        Host {
            nic,
            mem: Mem(vec![0u8; LEN]),
            qpn,
            pd,
            cq,
            lkey,
            wcs: Vec::new(),
            cm: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Another RC QP, on SRQ `srq` if given.
    pub fn add_qp(&mut self, srq: Option<u32>) -> u32 {
        new_qp(&mut self.nic, self.pd, self.cq, srq)
    }

    /// One engine pass: ready sockets, due timers, output, completions and events.
    pub fn step(&mut self) {
        let now = Instant::now();
        self.nic.handle_streams(now, true, &mut self.mem);
        if self.nic.poll_timeout().is_some_and(|t| t <= now) {
            self.nic.handle_timeout(now, &mut self.mem);
        }
        self.nic.handle_streams(now, false, &mut self.mem);
        while let Some((_, wc)) = self.nic.poll_completion() {
            self.wcs.push(wc);
        }
        while let Some(e) = self.nic.poll_cm_event() {
            self.cm.push(e);
        }
        while let Some(e) = self.nic.poll_event() {
            self.events.push(e);
        }
    }

    pub fn sge(&self, off: usize, len: u32) -> [Sge; 1] {
        [Sge {
            addr: BASE + off as u64,
            length: len,
            lkey: self.lkey,
        }]
    }

    pub fn post_recv(&mut self, wr_id: u64, off: usize, len: u32) {
        let sge = self.sge(off, len);
        self.nic
            .post_recv(self.qpn, wr_id, SgeList::Slice(&sge))
            .unwrap();
    }

    pub fn post_send(&mut self, wr_id: u64, off: usize, len: u32) {
        self.post_send_on(self.qpn, wr_id, off, len);
    }

    /// A signaled Send of `len` octets at `off` on QP `qpn`.
    pub fn post_send_on(&mut self, qpn: u32, wr_id: u64, off: usize, len: u32) {
        let sge = self.sge(off, len);
        let wqe = SendWqeRepr {
            wr_id,
            opcode: wr_opcode::SEND,
            send_flags: send_flags::SIGNALED,
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
            remote_qpn: 0,
            compare_add: 0,
            swap: 0,
            ah: 0,
            remote_qkey: 0,
            data: SendData::Sges(SgeList::Slice(&sge)),
        };
        self.nic
            .post_send(Instant::now(), qpn, &wqe, None, &mut self.mem)
            .unwrap();
    }

    pub fn state(&self) -> u32 {
        self.nic.query_qp(self.qpn).unwrap().qp_state
    }

    pub fn counter(&self, name: &str) -> u64 {
        self.nic
            .counters()
            .into_iter()
            .find_map(|(k, v)| (k == name).then_some(v))
            .unwrap_or_else(|| panic!("no counter {name}"))
    }

    pub fn request(&self) -> Option<ConnId> {
        self.cm.iter().find_map(|e| match e {
            SiwCmEvent::ConnectRequest { conn, .. } => Some(*conn),
            _ => None,
        })
    }

    pub fn established(&self) -> bool {
        self.cm
            .iter()
            .any(|e| matches!(e, SiwCmEvent::Established { .. }))
    }

    pub fn accept(&mut self, conn: ConnId) {
        self.accept_on(conn, self.qpn);
    }

    /// Accepts `conn` with QP `qpn`.
    pub fn accept_on(&mut self, conn: ConnId, qpn: u32) {
        let mut mem = std::mem::replace(&mut self.mem, Mem(Vec::new()));
        self.nic
            .accept(Instant::now(), conn, qpn, &ConnParams::default(), &mut mem)
            .unwrap();
        self.mem = mem;
    }
}

/// Steps both hosts until `done` holds; panics after `limit`.
pub fn run_until(
    hosts: &mut [&mut Host],
    what: &str,
    limit: Duration,
    mut done: impl FnMut(&[&mut Host]) -> bool,
) {
    let start = Instant::now();
    while !done(hosts) {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        for h in hosts.iter_mut() {
            h.step();
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Steps both hosts for `d`.
pub fn run_for(a: &mut Host, b: &mut Host, d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        a.step();
        b.step();
        std::thread::sleep(Duration::from_micros(200));
    }
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// An RC QP of 16 WRs each way (none of its own with an SRQ) on `pd` and `cq`.
fn new_qp(nic: &mut SiwNic, pd: u32, cq: u32, srq: Option<u32>) -> u32 {
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = QpCreate {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq,
        cap,
        qp_type: qp_type::RC,
        sq_sig_all: false,
    };
    nic.create_qp(OWNER, &init).unwrap().0
}
