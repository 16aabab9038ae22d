//! Two siw devices (`emulator::daemon::siw::SiwNic`) in one process, joined by real
//! loopback TCP through the API the RDMA CM driver calls: listen, connect, the
//! connect request, accept / reject, established; then SEND/RECV, RDMA WRITE and RDMA
//! READ between registered regions checked byte for byte, a disconnect; and hostile
//! peers on a raw socket (garbage after the MPA exchange, a Read Response nobody asked
//! for, a Write beyond its region), each answered with the Terminate the RFCs name and
//! a closed stream.

use emu_core::iwarp::{Connection, IwarpConfig, IwarpEvent, MrTable, Negotiated};
use emu_core::VecMemory;
use emulator::daemon::devices::nic::{AppMemory, EventElement, MemFault, Nic, Owner, QpCreate};
use emulator::daemon::siw::{ConnId, ConnParams, SiwCmEvent, SiwNic};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use wire::client::slot::{CqeRepr, SendData, SendWqeRepr, Sge, SgeList};
use wire::client::verbs::{
    access, event_type, qp_state, qp_type, send_flags, wc_opcode, wc_status, wr_opcode,
};
use wire::client::{QpAttr, QpCap};
use wire::iwarp::deframer::{Deframed, Deframer};
use wire::iwarp::fpdu::{self, FpduConfig};
use wire::iwarp::mpa::MpaRepr;
use wire::iwarp::{RdmapMessage, Stag, TermLayer, TerminateError};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const OWNER: Owner = 7;
const BASE: u64 = 0x7000_0000;
const LEN: usize = 256 * 1024;

/// One address space per owner, a flat buffer at `BASE`.
#[derive(Default)]
struct Mem {
    spaces: Vec<(Owner, Vec<u8>)>,
}

impl Mem {
    fn space(&mut self, owner: Owner) -> &mut Vec<u8> {
        if !self.spaces.iter().any(|(o, _)| *o == owner) {
            self.spaces.push((owner, vec![0u8; LEN]));
        }
        let i = self.spaces.iter().position(|(o, _)| *o == owner).unwrap();
        &mut self.spaces[i].1
    }
}

impl AppMemory for Mem {
    fn read(&mut self, owner: Owner, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        let s = self.space(owner);
        let off = addr.checked_sub(BASE).ok_or(MemFault)? as usize;
        buf.copy_from_slice(s.get(off..off + buf.len()).ok_or(MemFault)?);
        Ok(())
    }
    fn write(&mut self, owner: Owner, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        let s = self.space(owner);
        let off = addr.checked_sub(BASE).ok_or(MemFault)? as usize;
        s.get_mut(off..off + data.len())
            .ok_or(MemFault)?
            .copy_from_slice(data);
        Ok(())
    }
}

/// A device with one PD, one CQ, one MR over the whole space and one RC QP.
struct Host {
    nic: SiwNic,
    mem: Mem,
    qpn: u32,
    cq: u32,
    lkey: u32,
    rkey: u32,
    wcs: Vec<CqeRepr>,
    cm: Vec<SiwCmEvent>,
    events: Vec<(Owner, u32, EventElement)>,
}

impl Host {
    fn new(name: &str) -> Host {
        let mut nic = SiwNic::new(name, &[LO], 4096, 1).expect("siw device");
        let pd = nic.alloc_pd(OWNER).unwrap();
        let (cq, _) = nic.create_cq(OWNER, 256).unwrap();
        let all = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
        let (lkey, rkey) = nic.reg_mr(OWNER, pd, BASE, LEN as u64, BASE, all).unwrap();
        let (qpn, cap) = nic
            .create_qp(
                OWNER,
                &QpCreate {
                    pd,
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 16,
                        max_recv_wr: 16,
                        max_send_sge: 2,
                        max_recv_sge: 2,
                        max_inline_data: 64,
                    },
                    qp_type: qp_type::RC,
                    sq_sig_all: false,
                },
            )
            .unwrap();
        assert_eq!(cap.max_send_wr, 16);
        let mut h = Host {
            nic,
            mem: Mem::default(),
            qpn,
            cq,
            lkey,
            rkey,
            wcs: Vec::new(),
            cm: Vec::new(),
            events: Vec::new(),
        };
        h.mem.space(OWNER);
        h
    }

    /// One engine pass, as the daemon's loop makes it.
    fn step(&mut self) {
        let now = Instant::now();
        self.nic.handle_streams(now, true, &mut self.mem);
        if self.nic.poll_timeout().is_some_and(|t| t <= now) {
            self.nic.handle_timeout(now, &mut self.mem);
        }
        self.nic.handle_streams(now, false, &mut self.mem);
        while let Some((cq, wc)) = self.nic.poll_completion() {
            assert_eq!(cq, self.cq);
            self.wcs.push(wc);
        }
        while let Some(e) = self.nic.poll_cm_event() {
            self.cm.push(e);
        }
        while let Some(e) = self.nic.poll_event() {
            self.events.push(e);
        }
    }

    fn bytes(&mut self, off: usize, len: usize) -> Vec<u8> {
        self.mem.space(OWNER)[off..off + len].to_vec()
    }

    fn fill(&mut self, off: usize, data: &[u8]) {
        self.mem.space(OWNER)[off..off + data.len()].copy_from_slice(data);
    }

    fn post_recv(&mut self, wr_id: u64, off: usize, len: u32) {
        let sge = [Sge {
            addr: BASE + off as u64,
            length: len,
            lkey: self.lkey,
        }];
        self.nic
            .post_recv(self.qpn, wr_id, SgeList::Slice(&sge))
            .unwrap();
    }

    fn post_send(&mut self, wr_id: u64, opcode: u8, off: usize, len: u32, remote: (u64, u32)) {
        let sge = [Sge {
            addr: BASE + off as u64,
            length: len,
            lkey: self.lkey,
        }];
        let wqe = SendWqeRepr {
            wr_id,
            opcode,
            send_flags: send_flags::SIGNALED,
            imm_data: 0,
            remote_addr: remote.0,
            rkey: remote.1,
            remote_qpn: 0,
            compare_add: 0,
            swap: 0,
            ah: 0,
            remote_qkey: 0,
            data: SendData::Sges(SgeList::Slice(&sge)),
        };
        self.nic
            .post_send(Instant::now(), self.qpn, &wqe, None, &mut self.mem)
            .unwrap();
    }

    fn state(&self) -> u32 {
        self.nic.query_qp(self.qpn).unwrap().qp_state
    }
}

/// Steps both hosts until `done` holds (or panics after 10 s).
fn run_until(a: &mut Host, b: &mut Host, what: &str, mut done: impl FnMut(&Host, &Host) -> bool) {
    let start = Instant::now();
    while !done(a, b) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        a.step();
        b.step();
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn request(b: &Host) -> Option<(ConnId, Vec<u8>, u16, u16)> {
    b.cm.iter().find_map(|e| match e {
        SiwCmEvent::ConnectRequest {
            conn,
            private_data,
            ird,
            ord,
            ..
        } => Some((*conn, private_data.clone(), *ird, *ord)),
        _ => None,
    })
}

fn established(h: &Host) -> Option<(ConnId, Vec<u8>)> {
    h.cm.iter().find_map(|e| match e {
        SiwCmEvent::Established {
            conn, private_data, ..
        } => Some((*conn, private_data.clone())),
        _ => None,
    })
}

/// Listens on B, connects A, accepts on B: both in RTS.
fn connect_pair() -> (Host, Host, ConnId, ConnId) {
    let mut a = Host::new("siw_a");
    let mut b = Host::new("siw_b");
    let (_l, addr) = b.nic.listen(SocketAddr::new(LO, 0), 16).unwrap();
    assert_eq!(addr.ip(), LO);
    assert_ne!(addr.port(), 0);
    // A receive posted before the connection exists is kept for it.
    a.post_recv(1, 0x1000, 4096);
    assert_eq!(
        a.nic
            .modify_qp(
                Instant::now(),
                a.qpn,
                &QpAttr {
                    qp_state: qp_state::RTS,
                    ..QpAttr::default()
                },
                1
            )
            .unwrap_err(),
        libc::EINVAL,
        "siw: no RTS without a connection"
    );
    let params = ConnParams {
        private_data: b"hello from a".to_vec(),
        ird: 4,
        ord: 4,
    };
    let (ca, local) = a
        .nic
        .connect(a.qpn, SocketAddr::new(LO, 0), addr, &params, true)
        .unwrap();
    assert_eq!(local.ip(), LO);
    assert_eq!(
        a.nic
            .connect(a.qpn, SocketAddr::new(LO, 0), addr, &params, true),
        Err(libc::EISCONN)
    );
    run_until(&mut a, &mut b, "the connect request", |_, b| {
        request(b).is_some()
    });
    let (cb, pd, ird, ord) = request(&b).unwrap();
    assert_eq!(pd, b"hello from a");
    assert_eq!((ird, ord), (4, 4));
    assert_eq!(b.nic.conn_addrs(cb).map(|(_, p)| p), Some(local));
    b.post_recv(2, 0x1000, 4096);
    let mut bmem = std::mem::take(&mut b.mem);
    b.nic
        .accept(
            Instant::now(),
            cb,
            b.qpn,
            &ConnParams {
                private_data: b"welcome".to_vec(),
                ird: 4,
                ord: 4,
            },
            &mut bmem,
        )
        .unwrap();
    b.mem = bmem;
    run_until(&mut a, &mut b, "established", |a, b| {
        established(a).is_some() && established(b).is_some()
    });
    assert_eq!(established(&a), Some((ca, b"welcome".to_vec())));
    assert_eq!(established(&b), Some((cb, b"hello from a".to_vec())));
    assert_eq!(a.state(), qp_state::RTS);
    assert_eq!(b.state(), qp_state::RTS);
    assert_eq!(a.nic.conn_qpn(ca), Some(a.qpn));
    (a, b, ca, cb)
}

#[test]
fn siw_connects_over_tcp_and_moves_send_write_read_byte_for_byte() {
    let (mut a, mut b, ca, cb) = connect_pair();

    // SEND A → B into the receive B posted before accepting.
    let msg = pattern(3000, 1);
    a.fill(0x8000, &msg);
    a.post_send(10, wr_opcode::SEND, 0x8000, msg.len() as u32, (0, 0));
    run_until(&mut a, &mut b, "the SEND", |a, b| {
        !b.wcs.is_empty() && a.wcs.iter().any(|w| w.wr_id == 10)
    });
    let wc = b.wcs.remove(0);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (2, wc_status::SUCCESS, wc_opcode::RECV)
    );
    assert_eq!(wc.byte_len, 3000);
    assert_eq!(wc.qp_num, b.qpn);
    assert_eq!(b.bytes(0x1000, 3000), msg);
    assert_eq!(
        b.bytes(0x1000 + 3000, 16),
        vec![0u8; 16],
        "nothing past the message"
    );

    // RDMA WRITE A → B (larger than one FPDU).
    let data = pattern(100_000, 7);
    a.fill(0x10000, &data);
    let target = BASE + 0x20000;
    a.post_send(
        11,
        wr_opcode::RDMA_WRITE,
        0x10000,
        data.len() as u32,
        (target, b.rkey),
    );
    run_until(&mut a, &mut b, "the WRITE", |a, b| {
        a.wcs.iter().any(|w| w.wr_id == 11)
            && b.mem.spaces[0].1[0x20000..0x20000 + data.len()] == data[..]
    });
    let wc = a.wcs.iter().find(|w| w.wr_id == 11).unwrap();
    assert_eq!(
        (wc.status, wc.opcode),
        (wc_status::SUCCESS, wc_opcode::RDMA_WRITE)
    );
    assert!(b.wcs.is_empty(), "a WRITE consumes no receive");

    // RDMA READ: A reads B's region.
    let src = pattern(50_000, 99);
    b.fill(0x30000, &src);
    a.post_send(
        12,
        wr_opcode::RDMA_READ,
        0x30000,
        src.len() as u32,
        (BASE + 0x30000, b.rkey),
    );
    run_until(&mut a, &mut b, "the READ", |a, _| {
        a.wcs.iter().any(|w| w.wr_id == 12)
    });
    let wc = a.wcs.iter().find(|w| w.wr_id == 12).unwrap();
    assert_eq!(
        (wc.status, wc.opcode),
        (wc_status::SUCCESS, wc_opcode::RDMA_READ)
    );
    assert_eq!(wc.byte_len, 50_000);
    assert_eq!(a.bytes(0x30000, src.len()), src);

    // A WRITE with a wrong rkey: B terminates, A's WR fails, both QPs in ERROR.
    a.post_send(
        13,
        wr_opcode::RDMA_WRITE,
        0x10000,
        64,
        (target, b.rkey ^ 0x100),
    );
    run_until(&mut a, &mut b, "the Terminate", |a, b| {
        a.wcs.iter().any(|w| w.wr_id == 13)
            && a.state() == qp_state::ERR
            && b.state() == qp_state::ERR
    });
    assert!(
        b.events
            .contains(&(OWNER, event_type::QP_ACCESS_ERR, EventElement::Qp(b.qpn))),
        "the side that detected the bad STag reports an access error: {:?}",
        b.events
    );
    run_until(&mut a, &mut b, "both sides closed", |a, b| {
        a.cm.contains(&SiwCmEvent::Closed { conn: ca })
            && b.cm.contains(&SiwCmEvent::Closed { conn: cb })
    });
    assert!(a.cm.contains(&SiwCmEvent::Disconnected { conn: ca }));
    assert!(b.cm.contains(&SiwCmEvent::Disconnected { conn: cb }));
    // Posting on an ERROR QP flushes at once.
    a.post_recv(20, 0, 64);
    a.step();
    assert!(a
        .wcs
        .iter()
        .any(|w| w.wr_id == 20 && w.status == wc_status::WR_FLUSH_ERR));
}

#[test]
fn siw_disconnect_flushes_and_reports_disconnected_on_both_sides() {
    let (mut a, mut b, ca, cb) = connect_pair();
    a.post_recv(30, 0x2000, 64);
    a.nic.disconnect(ca).unwrap();
    run_until(&mut a, &mut b, "closed", |a, b| {
        a.cm.contains(&SiwCmEvent::Closed { conn: ca })
            && b.cm.contains(&SiwCmEvent::Closed { conn: cb })
    });
    assert!(a.cm.contains(&SiwCmEvent::Disconnected { conn: ca }));
    assert!(b.cm.contains(&SiwCmEvent::Disconnected { conn: cb }));
    assert!(a
        .wcs
        .iter()
        .any(|w| w.wr_id == 30 && w.status == wc_status::WR_FLUSH_ERR));
    assert!(b
        .wcs
        .iter()
        .any(|w| w.wr_id == 2 && w.status == wc_status::WR_FLUSH_ERR));
    assert_eq!(a.state(), qp_state::ERR);
    assert_eq!(b.state(), qp_state::ERR);
}

#[test]
fn siw_reject_carries_private_data_to_the_initiator() {
    let mut a = Host::new("siw_a");
    let mut b = Host::new("siw_b");
    let (_l, addr) = b.nic.listen(SocketAddr::new(LO, 0), 16).unwrap();
    let (ca, _) = a
        .nic
        .connect(
            a.qpn,
            SocketAddr::new(LO, 0),
            addr,
            &ConnParams {
                private_data: b"may I".to_vec(),
                ird: 1,
                ord: 1,
            },
            true,
        )
        .unwrap();
    run_until(&mut a, &mut b, "the connect request", |_, b| {
        request(b).is_some()
    });
    let (cb, _, _, _) = request(&b).unwrap();
    let mut bmem = std::mem::take(&mut b.mem);
    b.nic
        .reject(Instant::now(), cb, b"no, busy", &mut bmem)
        .unwrap();
    assert_eq!(
        b.nic.reject(Instant::now(), cb, b"again", &mut bmem),
        Err(libc::EINVAL),
        "a rejected request cannot be answered twice"
    );
    b.mem = bmem;
    run_until(&mut a, &mut b, "the reject", |a, b| {
        a.cm.contains(&SiwCmEvent::Closed { conn: ca })
            && b.cm.contains(&SiwCmEvent::Closed { conn: cb })
    });
    assert!(a.cm.contains(&SiwCmEvent::Rejected {
        conn: ca,
        private_data: b"no, busy".to_vec()
    }));
    assert!(established(&a).is_none() && established(&b).is_none());
    // The QP is free for another attempt... after a reset, as on siw.
    assert!(SiwNic::of(&mut a.nic).is_some());
}

#[test]
fn siw_connect_to_a_closed_port_is_refused() {
    let mut a = Host::new("siw_a");
    let mut b = Host::new("siw_b");
    // A port nobody listens on: bind one, learn it, close it.
    let port = std::net::TcpListener::bind((LO, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (ca, _) = a
        .nic
        .connect(
            a.qpn,
            SocketAddr::new(LO, 0),
            SocketAddr::new(LO, port),
            &ConnParams::default(),
            true,
        )
        .unwrap();
    run_until(&mut a, &mut b, "the refusal", |a, _| {
        a.cm.contains(&SiwCmEvent::Closed { conn: ca })
    });
    assert!(a.cm.contains(&SiwCmEvent::ConnectError {
        conn: ca,
        errno: libc::ECONNREFUSED
    }));
    // The QP can connect again: back to Idle, which an iWARP QP reads as INIT.
    assert_eq!(a.state(), qp_state::INIT);
}

#[test]
fn siw_peer_sending_garbage_after_mpa_gets_a_terminate_and_a_close() {
    let mut a = Host::new("siw_a"); // unused peer for run_until
    let mut b = Host::new("siw_b");
    let (_l, addr) = b.nic.listen(SocketAddr::new(LO, 0), 16).unwrap();
    // A hand-driven initiator on a plain socket.
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_nonblocking(true).unwrap();
    let now = Instant::now();
    let mut peer = Connection::initiator(now, IwarpConfig::default());
    let mut keys = MrTable::new();
    let mut pmem = VecMemory::new();
    let mut out = Vec::new();
    while peer.poll_stream_transmit(&mut out, &mut keys, &mut pmem) > 0 {}
    sock.write_all(&out).unwrap();
    run_until(&mut a, &mut b, "the connect request", |_, b| {
        request(b).is_some()
    });
    let (cb, _, _, _) = request(&b).unwrap();
    let mut bmem = std::mem::take(&mut b.mem);
    b.nic
        .accept(Instant::now(), cb, b.qpn, &ConnParams::default(), &mut bmem)
        .unwrap();
    b.mem = bmem;
    // Read the Reply, then send garbage instead of the RTR / first FPDU.
    let mut got_reply = false;
    let mut eof = false;
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    let mut garbage_sent = false;
    while !eof {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no close from the siw side"
        );
        b.step();
        match sock.read(&mut buf) {
            Ok(0) => eof = true,
            Ok(n) => {
                peer.handle_stream(Instant::now(), &buf[..n], &mut keys, &mut pmem);
                while let Some(e) = peer.poll_event() {
                    if matches!(e, IwarpEvent::Established(_)) {
                        got_reply = true;
                    }
                    if let IwarpEvent::Terminated { local, .. } = e {
                        assert!(!local, "the Terminate came from the siw side");
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => eof = true,
        }
        if got_reply && !garbage_sent {
            // A well-framed FPDU (length 18, no CRC) whose DDP/RDMAP header is garbage.
            let mut fpdu = vec![0x00, 0x12];
            fpdu.extend_from_slice(&[0xff; 18]);
            fpdu.extend_from_slice(&[0; 4]);
            sock.write_all(&fpdu).unwrap();
            sock.write_all(&[0xffu8; 300]).unwrap();
            garbage_sent = true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert!(got_reply, "the MPA Reply arrived");
    assert!(
        peer.counters().terminates_rcvd == 1,
        "a Terminate arrived before the FIN"
    );
    drop(sock);
    run_until(&mut a, &mut b, "the close", |_, b| {
        b.cm.contains(&SiwCmEvent::Closed { conn: cb })
    });
    assert!(b.cm.contains(&SiwCmEvent::Disconnected { conn: cb }));
    assert_eq!(b.state(), qp_state::ERR);
    assert!(b
        .events
        .iter()
        .any(|e| e.0 == OWNER && e.2 == EventElement::Qp(b.qpn)));
}

#[test]
fn siw_refuses_ud_and_uc_qps_and_reports_siw_limits() {
    let mut h = Host::new("siw_x");
    for t in [qp_type::UD, qp_type::UC] {
        let r = h.nic.create_qp(
            OWNER,
            &QpCreate {
                pd: 1,
                send_cq: h.cq,
                recv_cq: h.cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 1,
                    ..QpCap::default()
                },
                qp_type: t,
                sq_sig_all: false,
            },
        );
        assert_eq!(r.unwrap_err(), libc::EOPNOTSUPP);
    }
    let l = h.nic.limits();
    assert_eq!((l.max_qp_wr, l.max_sge, l.max_qp_rd_atom), (32768, 6, 128));
    // Sends before the connection exists fail as on siw ("QP out of state").
    let sge = [Sge {
        addr: BASE,
        length: 8,
        lkey: h.lkey,
    }];
    let wqe = SendWqeRepr {
        wr_id: 1,
        opcode: wr_opcode::SEND,
        send_flags: 0,
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
    assert_eq!(
        h.nic
            .post_send(Instant::now(), h.qpn, &wqe, None, &mut h.mem)
            .map_err(|r| r.errno.0),
        Err(libc::ENOTCONN)
    );
}

/// A Terminate as the raw peer received it.
#[derive(Debug)]
struct TerminateSeen {
    error: TerminateError,
    segment_length_valid: bool,
    /// The DDP Segment Length and the terminated DDP header (D bit).
    ddp: Option<(u16, Vec<u8>)>,
    /// The terminated RDMAP header (R bit).
    rdmap: bool,
}

/// A peer on a plain socket: an initiator engine does the MPA exchange and sends the
/// RTR, then the test writes FPDUs of its own making and reads whatever comes back.
struct RawPeer {
    sock: TcpStream,
    engine: Connection,
    keys: MrTable,
    mem: VecMemory,
    /// Every octet received, from the MPA Reply on.
    rx: Vec<u8>,
    /// Stream offset (from full operation on) of the next FPDU we send.
    tx_pos: u64,
    eof: bool,
}

impl RawPeer {
    /// Connects to B's listener at `addr`, has B accept, and runs the MPA exchange and
    /// the RTR; returns the peer and what was negotiated.
    fn connect(a: &mut Host, b: &mut Host, addr: SocketAddr) -> (RawPeer, Negotiated) {
        let sock = TcpStream::connect(addr).unwrap();
        sock.set_nonblocking(true).unwrap();
        let mut p = RawPeer {
            sock,
            engine: Connection::initiator(Instant::now(), IwarpConfig::default()),
            keys: MrTable::new(),
            mem: VecMemory::new(),
            rx: Vec::new(),
            tx_pos: 0,
            eof: false,
        };
        let mut out = Vec::new();
        while p
            .engine
            .poll_stream_transmit(&mut out, &mut p.keys, &mut p.mem)
            > 0
        {}
        let request_len = MpaRepr::parse_bytes(&out).unwrap().1;
        assert_eq!(request_len, out.len(), "only the Request goes out first");
        p.sock.write_all(&out).unwrap();
        run_until(a, b, "the connect request", |_, b| request(b).is_some());
        let (cb, _, _, _) = request(b).unwrap();
        let mut bmem = std::mem::take(&mut b.mem);
        b.nic
            .accept(Instant::now(), cb, b.qpn, &ConnParams::default(), &mut bmem)
            .unwrap();
        b.mem = bmem;
        let start = Instant::now();
        while !p.engine.is_established() {
            assert!(start.elapsed() < Duration::from_secs(10), "no MPA Reply");
            b.step();
            p.read_some();
            std::thread::sleep(Duration::from_micros(200));
        }
        // The RTR (and nothing else: no WR is posted on this side).
        let mut out = Vec::new();
        while p
            .engine
            .poll_stream_transmit(&mut out, &mut p.keys, &mut p.mem)
            > 0
        {}
        assert!(!out.is_empty(), "peer-to-peer mode sends an RTR");
        p.sock.write_all(&out).unwrap();
        p.tx_pos = out.len() as u64;
        let neg = p.engine.negotiated().cloned().unwrap();
        run_until(a, b, "established", |_, b| established(b).is_some());
        (p, neg)
    }

    /// Reads what the socket has; feeds the engine (until full operation) and `rx`.
    fn read_some(&mut self) {
        let mut buf = [0u8; 4096];
        loop {
            match self.sock.read(&mut buf) {
                Ok(0) => {
                    self.eof = true;
                    return;
                }
                Ok(n) => {
                    self.rx.extend_from_slice(&buf[..n]);
                    if !self.engine.is_established() {
                        self.engine.handle_stream(
                            Instant::now(),
                            &buf[..n],
                            &mut self.keys,
                            &mut self.mem,
                        );
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.eof = true;
                    return;
                }
            }
        }
    }

    /// Sends `ulpdu` as one FPDU with the negotiated framing.
    fn send_ulpdu(&mut self, neg: &Negotiated, ulpdu: &[u8]) {
        let cfg = FpduConfig {
            crc: neg.crc,
            markers: neg.markers_tx,
        };
        let mut f = vec![0u8; fpdu::wire_len(ulpdu.len(), cfg, self.tx_pos)];
        fpdu::emit(ulpdu, cfg, self.tx_pos, &mut f);
        self.tx_pos += f.len() as u64;
        self.sock.write_all(&f).unwrap();
    }

    /// Steps B until it closes the stream; returns how many FPDUs B sent after its
    /// Reply, and the last of them, which must be a Terminate.
    fn until_closed(&mut self, b: &mut Host, neg: &Negotiated) -> (usize, TerminateSeen) {
        let start = Instant::now();
        while !self.eof {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the siw side did not close the stream"
            );
            b.step();
            self.read_some();
            std::thread::sleep(Duration::from_micros(200));
        }
        // Deframe everything B sent, from its Reply on, as a peer would.
        let mut d = Deframer::expecting_reply();
        d.read(&self.rx);
        let mut msgs = Vec::new();
        while let Some(u) = d.pop() {
            match u.expect("B's stream deframes") {
                Deframed::Mpa(_) => d.set_config(FpduConfig {
                    crc: neg.crc,
                    markers: neg.markers_rx,
                }),
                Deframed::Fpdu { ulpdu, .. } => msgs.push(ulpdu.to_vec()),
            }
        }
        assert_eq!(d.buffered(), 0, "B's stream ends on an FPDU boundary");
        let last = msgs.last().expect("B sent a Terminate");
        let RdmapMessage::Terminate { terminate, .. } = RdmapMessage::parse(last).unwrap() else {
            panic!("B's last message is not a Terminate: {last:02x?}");
        };
        let seen = TerminateSeen {
            error: terminate.error,
            segment_length_valid: terminate.segment_length_valid,
            ddp: terminate.ddp.map(|(l, h)| (l, h.to_vec())),
            rdmap: terminate.rdmap_header.is_some(),
        };
        (msgs.len(), seen)
    }
}

/// The ULPDU (DDP segment) of `m`.
fn ulpdu(m: &RdmapMessage<'_>) -> Vec<u8> {
    let mut u = vec![0u8; m.buffer_len()];
    m.emit(&mut u);
    u
}

/// B listening, a raw peer connected to it in full operation.
fn hostile_pair() -> (Host, Host, RawPeer, Negotiated) {
    let mut a = Host::new("siw_a"); // unused peer for run_until
    let mut b = Host::new("siw_b");
    let (_l, addr) = b.nic.listen(SocketAddr::new(LO, 0), 16).unwrap();
    let (p, neg) = RawPeer::connect(&mut a, &mut b, addr);
    assert_eq!(b.state(), qp_state::RTS);
    (a, b, p, neg)
}

/// B's QP is in ERROR, reported with `event`, and its connection closed.
fn assert_closed_in_error(a: &mut Host, b: &mut Host, event: u32) {
    assert_eq!(b.state(), qp_state::ERR);
    assert!(
        b.events.contains(&(OWNER, event, EventElement::Qp(b.qpn))),
        "expected event {event}: {:?}",
        b.events
    );
    let (cb, _) = established(b).unwrap();
    run_until(a, b, "the close", |_, b| {
        b.cm.contains(&SiwCmEvent::Closed { conn: cb })
    });
    assert!(b.cm.contains(&SiwCmEvent::Disconnected { conn: cb }));
}

#[test]
fn siw_peer_sending_a_read_response_nobody_asked_for_gets_unexpected_opcode() {
    let (mut a, mut b, mut p, neg) = hostile_pair();
    // RFC 5040 §5.2: a Read Response answers an outstanding Read Request; B has none.
    // The answer is the Terminate table's (docs/iwarp.md); Linux siw sends "DDP local
    // catastrophic" (1/0/0) here instead.
    let payload = [0xabu8; 32];
    let ulpdu = ulpdu(&RdmapMessage::ReadResponse {
        last: true,
        stag: Stag(b.rkey),
        offset: BASE + 0x100,
        payload: &payload,
    });
    p.send_ulpdu(&neg, &ulpdu);
    let (n, t) = p.until_closed(&mut b, &neg);
    assert_eq!(n, 1, "the Terminate is all B sent after the Reply");
    // RDMAP layer (0), remote operation error (2), unexpected OpCode (0x06).
    assert_eq!(t.error, TerminateError::RdmapUnexpectedOpcode);
    assert_eq!(t.error.fields(), (TermLayer::Rdmap, 2, 0x06));
    // It names the offending segment: its length and its tagged DDP header.
    assert!(t.segment_length_valid);
    assert_eq!(t.ddp, Some((ulpdu.len() as u16, ulpdu[..14].to_vec())));
    assert!(!t.rdmap, "no Read Request header for a Read Response");
    assert_eq!(b.bytes(0x100, 32), vec![0u8; 32], "nothing was placed");
    assert_closed_in_error(&mut a, &mut b, event_type::QP_REQ_ERR);
}

#[test]
fn siw_peer_writing_beyond_the_region_gets_base_or_bounds() {
    let (mut a, mut b, mut p, neg) = hostile_pair();
    // A valid STag, but the last 16 octets of the region plus 48 beyond it.
    let payload = [0x5au8; 64];
    let ulpdu = ulpdu(&RdmapMessage::Write {
        last: true,
        stag: Stag(b.rkey),
        offset: BASE + LEN as u64 - 16,
        payload: &payload,
    });
    p.send_ulpdu(&neg, &ulpdu);
    let (n, t) = p.until_closed(&mut b, &neg);
    assert_eq!(n, 1, "the Terminate is all B sent after the Reply");
    // DDP layer (1), tagged buffer error (1), base or bounds violation (0x01).
    assert_eq!(t.error, TerminateError::DdpTaggedBaseBounds);
    assert_eq!(t.error.fields(), (TermLayer::Ddp, 1, 0x01));
    assert!(t.segment_length_valid);
    assert_eq!(t.ddp, Some((ulpdu.len() as u16, ulpdu[..14].to_vec())));
    assert!(!t.rdmap);
    assert_eq!(
        b.bytes(LEN - 16, 16),
        vec![0u8; 16],
        "not even the part inside the region was placed"
    );
    assert_closed_in_error(&mut a, &mut b, event_type::QP_ACCESS_ERR);
}
