//! Traffic between two QPs of two clients on one daemon, through the real UDP loopback:
//! RC SEND/RECV, WRITE, WRITE_WITH_IMM, READ and both atomics, UC and UD, completion
//! channels, and a client that dies mid-connection; data checked in the applications'
//! memory.

mod common;

use common::*;
use emulator::daemon::client::Client;
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;
use wire::client::proto::Handle;
use wire::client::slot::{Cqe, CqeRepr, RecvWqeRepr, SendData, SendWqeRepr, Sge, SgeList};
use wire::client::verbs::{
    access, qp_attr_mask as m, qp_state, qp_type, send_flags, wc_flags, wc_opcode, wc_status,
    wr_opcode,
};
use wire::client::{
    AhAttr, GlobalRoute, QpAttr, QpCap, QpInitAttr, ReplyBody, RequestBody, SessionPage,
};

const BUF: usize = 64 * 1024;

/// One side: a client with a context, PD, MR, CQ and RC QP.
struct Side {
    c: Client,
    ctx: Ctx,
    buf: Vec<u8>,
    lkey: u32,
    rkey: u32,
    pd: Handle,
    qp: Handle,
    qpn: u32,
    cq_h: Handle,
    cq: MappedRing,
    rings: MappedRing,
    gid: [u8; 16],
    /// Read end of the CQ's completion channel, if any.
    channel: Option<std::os::fd::OwnedFd>,
    qp_type: u32,
}

impl Side {
    fn new(d: &TestDaemon) -> Side {
        Side::with(d, qp_type::RC, false)
    }

    fn with(d: &TestDaemon, kind: u32, with_channel: bool) -> Side {
        let mut c = d.connect();
        let ctx = open_device(&mut c);
        let ReplyBody::DeviceOpened { gids, .. } = &ctx.attrs else {
            unreachable!()
        };
        let gid = gids[0].gid;
        let ReplyBody::Pd { handle: pd } = c
            .call(RequestBody::AllocPd { ctx: ctx.handle }, &[])
            .unwrap()
            .0
        else {
            panic!()
        };
        let buf = vec![0u8; BUF];
        let acc = access::LOCAL_WRITE
            | access::REMOTE_WRITE
            | access::REMOTE_READ
            | access::REMOTE_ATOMIC
            | access::MW_BIND;
        let addr = buf.as_ptr() as u64;
        let reply = c
            .call(
                RequestBody::RegMr {
                    pd,
                    addr,
                    length: BUF as u64,
                    iova: addr,
                    access: acc,
                },
                &[],
            )
            .unwrap()
            .0;
        let ReplyBody::Mr { lkey, rkey, .. } = reply else {
            panic!("{reply:?}")
        };
        let (channel, ch_handle) = if with_channel {
            let (r, w) = emulator::daemon::sys::pipe().unwrap();
            let ReplyBody::CompChannel { handle } = c
                .call(
                    RequestBody::CreateCompChannel { ctx: ctx.handle },
                    &[w.as_raw_fd()],
                )
                .unwrap()
                .0
            else {
                panic!()
            };
            (Some(r), Some(handle))
        } else {
            (None, None)
        };
        let (body, fds) = c
            .call(
                RequestBody::CreateCq {
                    ctx: ctx.handle,
                    cqe: 64,
                    channel: ch_handle,
                    comp_vector: 0,
                },
                &[],
            )
            .unwrap();
        let ReplyBody::Cq {
            handle: cq_h, ring, ..
        } = body
        else {
            panic!("{body:?}")
        };
        let cq = MappedRing::new(&fds[0], vec![ring]);
        let cap = QpCap {
            max_send_wr: 32,
            max_recv_wr: 32,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        };
        let init = QpInitAttr {
            send_cq: cq_h,
            recv_cq: cq_h,
            srq: None,
            cap,
            qp_type: kind,
            sq_sig_all: false,
        };
        let (body, fds) = c.call(RequestBody::CreateQp { pd, init }, &[]).unwrap();
        let ReplyBody::Qp {
            handle: qp,
            qpn,
            sq,
            rq,
            ..
        } = body
        else {
            panic!("{body:?}")
        };
        let rings = MappedRing::new(&fds[0], vec![sq, rq.unwrap()]);
        Side {
            c,
            ctx,
            buf,
            lkey,
            rkey,
            pd,
            qp,
            qpn,
            cq_h,
            cq,
            rings,
            gid,
            channel,
            qp_type: kind,
        }
    }

    fn addr(&self, off: usize) -> u64 {
        self.buf.as_ptr() as u64 + off as u64
    }

    fn modify(&mut self, attr: QpAttr, mask: u32) {
        self.c
            .call(
                RequestBody::ModifyQp {
                    qp: self.qp,
                    attr,
                    mask,
                },
                &[],
            )
            .unwrap_or_else(|e| panic!("modify_qp {mask:#x}: {e}"));
    }

    /// RESET → INIT → RTR → RTS towards `peer`, as ibv_rc_pingpong does.
    fn connect(&mut self, peer_qpn: u32, peer_gid: [u8; 16]) {
        self.connect_with(peer_qpn, peer_gid, 14, 7);
    }

    fn connect_with(&mut self, peer_qpn: u32, peer_gid: [u8; 16], timeout: u8, retry_cnt: u8) {
        if self.qp_type == qp_type::UD {
            self.modify(
                QpAttr {
                    qp_state: qp_state::INIT,
                    port_num: 1,
                    qkey: 0x1111_1111,
                    ..QpAttr::default()
                },
                m::STATE | m::PKEY_INDEX | m::PORT | m::QKEY,
            );
            self.modify(
                QpAttr {
                    qp_state: qp_state::RTR,
                    ..QpAttr::default()
                },
                m::STATE,
            );
            self.modify(
                QpAttr {
                    qp_state: qp_state::RTS,
                    sq_psn: 0,
                    ..QpAttr::default()
                },
                m::STATE | m::SQ_PSN,
            );
            return;
        }
        let acc = access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
        self.modify(
            QpAttr {
                qp_state: qp_state::INIT,
                port_num: 1,
                qp_access_flags: acc,
                ..QpAttr::default()
            },
            m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS,
        );
        let ah = AhAttr {
            grh: GlobalRoute {
                dgid: peer_gid,
                sgid_index: 0,
                hop_limit: 1,
                ..GlobalRoute::default()
            },
            is_global: 1,
            port_num: 1,
            ..AhAttr::default()
        };
        let rtr = QpAttr {
            qp_state: qp_state::RTR,
            path_mtu: 3,
            dest_qp_num: peer_qpn,
            rq_psn: 0,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            ah_attr: ah,
            ..QpAttr::default()
        };
        let rtr_mask = m::STATE | m::AV | m::PATH_MTU | m::DEST_QPN | m::RQ_PSN;
        let rc_rtr = if self.qp_type == qp_type::RC {
            m::MAX_DEST_RD_ATOMIC | m::MIN_RNR_TIMER
        } else {
            0
        };
        self.modify(rtr, rtr_mask | rc_rtr);
        let rts = QpAttr {
            qp_state: qp_state::RTS,
            timeout,
            retry_cnt,
            rnr_retry: 7,
            sq_psn: 0,
            max_rd_atomic: 4,
            ..QpAttr::default()
        };
        let rc_rts = if self.qp_type == qp_type::RC {
            m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY | m::MAX_QP_RD_ATOMIC
        } else {
            0
        };
        self.modify(rts, m::STATE | m::SQ_PSN | rc_rts);
    }

    /// Publishes a slot, then rings the doorbell if the engine sleeps (the shim's rule).
    fn publish(&self, ring: usize, slot: &[u8]) {
        self.rings.producer(ring).push(slot).expect("ring has room");
        fence(Ordering::SeqCst);
        if SessionPage::new(self.ctx.page.words()).unwrap().sleeping() {
            emulator::daemon::sys::eventfd_signal(self.ctx.doorbell.as_raw_fd()).unwrap();
        }
    }

    fn post_recv(&self, wr_id: u64, off: usize, len: u32) {
        let sge = [Sge {
            addr: self.addr(off),
            length: len,
            lkey: self.lkey,
        }];
        let mut slot = vec![0u8; self.rings.layouts[1].slot_size as usize];
        RecvWqeRepr {
            wr_id,
            sg_list: SgeList::Slice(&sge),
        }
        .emit(&mut slot)
        .unwrap();
        self.publish(1, &slot);
    }

    fn post_send(&self, wqe: SendWqeRepr<'_>) {
        let mut slot = vec![0u8; self.rings.layouts[0].slot_size as usize];
        wqe.emit(&mut slot).unwrap();
        self.publish(0, &slot);
    }

    fn poll(&self) -> CqeRepr {
        let mut cons = self.cq.consumer(0);
        let mut buf = [0u8; 64];
        wait_for(Duration::from_secs(10), || {
            cons.pop(&mut buf).unwrap().then_some(())
        })
        .expect("a completion within 10 s");
        CqeRepr::parse(&Cqe::new_checked(&buf[..]).unwrap()).unwrap()
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        fence(Ordering::SeqCst);
        // SAFETY: in-bounds reads of our own buffer, which the daemon wrote through
        // /proc/self/mem; volatile so the compiler does not assume it unchanged.
        (off..off + len)
            .map(|i| unsafe { std::ptr::read_volatile(self.buf.as_ptr().add(i)) })
            .collect()
    }

    fn fill(&mut self, off: usize, len: usize, seed: u8) {
        for (i, b) in self.buf[off..off + len].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
        }
    }
}

fn wqe<'a>(wr_id: u64, opcode: u8, sges: &'a [Sge]) -> SendWqeRepr<'a> {
    SendWqeRepr {
        wr_id,
        opcode,
        send_flags: send_flags::SIGNALED,
        imm_data: 0,
        remote_addr: 0,
        rkey: 0,
        remote_qpn: 0,
        compare_add: 0,
        swap: 0,
        ah: 0,
        remote_qkey: 0,
        data: SendData::Sges(SgeList::Slice(sges)),
    }
}

fn pair(d: &TestDaemon, kind: u32, channel: bool) -> (Side, Side) {
    let mut a = Side::with(d, kind, channel);
    let mut b = Side::with(d, kind, channel);
    let (aq, ag, bq, bg) = (a.qpn, a.gid, b.qpn, b.gid);
    a.connect(bq, bg);
    b.connect(aq, ag);
    (a, b)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn rc_send_write_read_and_atomics_between_two_clients_over_udp_loopback() {
    let d = TestDaemon::start();
    let (mut a, mut b) = pair(&d, qp_type::RC, false);

    // SEND / RECV, 3000 bytes over MTU 1024 (three packets).
    b.post_recv(100, 0, 4096);
    a.fill(0, 3000, 1);
    let sge = [Sge {
        addr: a.addr(0),
        length: 3000,
        lkey: a.lkey,
    }];
    a.post_send(wqe(1, wr_opcode::SEND, &sge));
    let rc = b.poll();
    assert_eq!(
        (rc.wr_id, rc.status, rc.opcode, rc.byte_len, rc.qp_num),
        (100, wc_status::SUCCESS, wc_opcode::RECV, 3000, b.qpn)
    );
    let sc = a.poll();
    assert_eq!(
        (sc.wr_id, sc.status, sc.opcode),
        (1, wc_status::SUCCESS, wc_opcode::SEND)
    );
    assert_eq!(b.read(0, 3000), pattern(3000, 1));

    // RDMA WRITE, 5000 bytes from two SGEs.
    a.fill(8192, 5000, 2);
    let sges = [
        Sge {
            addr: a.addr(8192),
            length: 2000,
            lkey: a.lkey,
        },
        Sge {
            addr: a.addr(10192),
            length: 3000,
            lkey: a.lkey,
        },
    ];
    let mut w = wqe(2, wr_opcode::RDMA_WRITE, &sges);
    w.remote_addr = b.addr(8192);
    w.rkey = b.rkey;
    a.post_send(w);
    let c = a.poll();
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (2, wc_status::SUCCESS, wc_opcode::RDMA_WRITE)
    );
    assert_eq!(b.read(8192, 5000), pattern(5000, 2));

    // RDMA WRITE with immediate: consumes a receive at B.
    b.post_recv(101, 0, 16);
    a.fill(14000, 100, 3);
    let sge = [Sge {
        addr: a.addr(14000),
        length: 100,
        lkey: a.lkey,
    }];
    let mut w = wqe(3, wr_opcode::RDMA_WRITE_WITH_IMM, &sge);
    w.remote_addr = b.addr(14000);
    w.rkey = b.rkey;
    w.imm_data = 0x1234_5678;
    a.post_send(w);
    let rc = b.poll();
    assert_eq!(
        (rc.wr_id, rc.status, rc.opcode),
        (101, wc_status::SUCCESS, wc_opcode::RECV_RDMA_WITH_IMM)
    );
    assert!(rc.wc_flags & wc_flags::WITH_IMM != 0);
    assert_eq!(rc.imm_data, 0x1234_5678);
    assert_eq!(a.poll().wr_id, 3);
    assert_eq!(b.read(14000, 100), pattern(100, 3));

    // RDMA READ, 6000 bytes from B into A.
    b.fill(16384, 6000, 4);
    let sge = [Sge {
        addr: a.addr(32768),
        length: 6000,
        lkey: a.lkey,
    }];
    let mut r = wqe(4, wr_opcode::RDMA_READ, &sge);
    r.remote_addr = b.addr(16384);
    r.rkey = b.rkey;
    a.post_send(r);
    let c = a.poll();
    assert_eq!(
        (c.wr_id, c.status, c.opcode, c.byte_len),
        (4, wc_status::SUCCESS, wc_opcode::RDMA_READ, 6000)
    );
    assert_eq!(a.read(32768, 6000), pattern(6000, 4));

    // FETCH_AND_ADD then COMPARE_AND_SWAP on a u64 at B.
    b.buf[40960..40968].copy_from_slice(&100u64.to_ne_bytes());
    let sge = [Sge {
        addr: a.addr(50000),
        length: 8,
        lkey: a.lkey,
    }];
    let mut f = wqe(5, wr_opcode::ATOMIC_FETCH_AND_ADD, &sge);
    f.remote_addr = b.addr(40960);
    f.rkey = b.rkey;
    f.compare_add = 5;
    a.post_send(f);
    let c = a.poll();
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (5, wc_status::SUCCESS, wc_opcode::FETCH_ADD)
    );
    assert_eq!(
        u64::from_ne_bytes(a.read(50000, 8).try_into().unwrap()),
        100
    );
    assert_eq!(
        u64::from_ne_bytes(b.read(40960, 8).try_into().unwrap()),
        105
    );
    let mut s = wqe(6, wr_opcode::ATOMIC_CMP_AND_SWP, &sge);
    s.remote_addr = b.addr(40960);
    s.rkey = b.rkey;
    s.compare_add = 105;
    s.swap = 7;
    a.post_send(s);
    let c = a.poll();
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (6, wc_status::SUCCESS, wc_opcode::COMP_SWAP)
    );
    assert_eq!(
        u64::from_ne_bytes(a.read(50000, 8).try_into().unwrap()),
        105
    );
    assert_eq!(u64::from_ne_bytes(b.read(40960, 8).try_into().unwrap()), 7);

    // A wrong rkey is a remote access error, and the daemon counted real packets.
    let sge = [Sge {
        addr: a.addr(0),
        length: 8,
        lkey: a.lkey,
    }];
    let mut bad = wqe(7, wr_opcode::RDMA_WRITE, &sge);
    bad.remote_addr = b.addr(0);
    bad.rkey = b.rkey ^ 0x0100;
    a.post_send(bad);
    let c = a.poll();
    assert_eq!((c.wr_id, c.status), (7, wc_status::REM_ACCESS_ERR));
    let ReplyBody::Stat(sets) =
        a.c.call(
            RequestBody::Stat {
                device: Some("rxe0".into()),
                qpn: None,
            },
            &[],
        )
        .unwrap()
        .0
    else {
        panic!()
    };
    let get = |k: &str| {
        sets[0]
            .counters
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| *v)
            .unwrap()
    };
    assert!(get("sent_pkts") >= 10 && get("rcvd_pkts") >= 10, "{sets:?}");
    assert_eq!(get("udp_tx_errors"), 0);
    d.stop();
}

#[test]
fn uc_send_and_write_between_two_clients() {
    let d = TestDaemon::start();
    let (mut a, b) = pair(&d, qp_type::UC, false);
    b.post_recv(10, 0, 4096);
    a.fill(0, 2500, 9);
    let sge = [Sge {
        addr: a.addr(0),
        length: 2500,
        lkey: a.lkey,
    }];
    a.post_send(wqe(1, wr_opcode::SEND, &sge));
    let rc = b.poll();
    assert_eq!(
        (rc.wr_id, rc.status, rc.byte_len),
        (10, wc_status::SUCCESS, 2500)
    );
    assert_eq!(a.poll().wr_id, 1);
    let mut w = wqe(2, wr_opcode::RDMA_WRITE, &sge);
    w.remote_addr = b.addr(20000);
    w.rkey = b.rkey;
    a.post_send(w);
    assert_eq!(a.poll().status, wc_status::SUCCESS);
    let landed = wait_for(Duration::from_secs(5), || {
        (b.read(20000, 2500) == pattern(2500, 9)).then_some(())
    });
    assert!(
        landed.is_some(),
        "UC write lands (UC completes at the requester without an ACK)"
    );
    assert_eq!(b.read(0, 2500), pattern(2500, 9));
    d.stop();
}

#[test]
fn ud_send_carries_a_grh_and_the_source_qp() {
    let d = TestDaemon::start();
    let (mut a, b) = pair(&d, qp_type::UD, false);
    let ah_attr = AhAttr {
        grh: GlobalRoute {
            dgid: b.gid,
            sgid_index: 0,
            hop_limit: 64,
            ..GlobalRoute::default()
        },
        is_global: 1,
        port_num: 1,
        ..AhAttr::default()
    };
    let ReplyBody::Ah { handle: ah } =
        a.c.call(
            RequestBody::CreateAh {
                pd: a.pd,
                attr: ah_attr,
            },
            &[],
        )
        .unwrap()
        .0
    else {
        panic!()
    };
    b.post_recv(20, 0, 40 + 512);
    a.fill(1000, 512, 5);
    let sge = [Sge {
        addr: a.addr(1000),
        length: 512,
        lkey: a.lkey,
    }];
    let mut s = wqe(1, wr_opcode::SEND, &sge);
    s.ah = ah.0;
    s.remote_qpn = b.qpn;
    s.remote_qkey = 0x1111_1111;
    a.post_send(s);
    let rc = b.poll();
    assert_eq!(
        (rc.wr_id, rc.status, rc.opcode, rc.byte_len, rc.src_qp),
        (20, wc_status::SUCCESS, wc_opcode::RECV, 552, a.qpn)
    );
    assert!(rc.wc_flags & wc_flags::GRH != 0);
    assert_eq!(b.read(40, 512), pattern(512, 5));
    assert_eq!(a.poll().wr_id, 1);
    // An AH handle of another session is refused with an error completion.
    let mut s = wqe(2, wr_opcode::SEND, &sge);
    s.ah = b.qp.0;
    s.remote_qpn = b.qpn;
    a.post_send(s);
    assert_ne!(a.poll().status, wc_status::SUCCESS);
    d.stop();
}

#[test]
fn armed_cq_fires_its_completion_channel_once() {
    let d = TestDaemon::start();
    let (mut a, b) = pair(&d, qp_type::RC, true);
    let cq_view = b.cq.view(0);
    cq_view.set_arm(wire::client::ring::ARM_NEXT);
    b.post_recv(1, 0, 64);
    b.post_recv(2, 0, 64);
    a.fill(0, 64, 1);
    let sge = [Sge {
        addr: a.addr(0),
        length: 64,
        lkey: a.lkey,
    }];
    a.post_send(wqe(1, wr_opcode::SEND, &sge));
    let rec =
        read_record(b.channel.as_ref().unwrap(), Duration::from_secs(5)).expect("completion event");
    assert_eq!(
        wire::client::CompEventRecord::from_bytes(rec),
        Some(wire::client::CompEventRecord { cq: b.cq_h })
    );
    assert_eq!(cq_view.arm(), 0, "disarmed when fired");
    assert_eq!(b.poll().wr_id, 1);
    // Not armed: a second completion writes nothing to the channel.
    a.post_send(wqe(2, wr_opcode::SEND, &sge));
    assert_eq!(b.poll().wr_id, 2);
    assert!(read_record(b.channel.as_ref().unwrap(), Duration::from_millis(100)).is_none());
    d.stop();
}

#[test]
fn peer_of_a_client_that_died_sees_an_error_completion_and_the_daemon_serves_on() {
    let d = TestDaemon::start();
    let mut a = Side::new(&d);
    let mut b = Side::new(&d);
    let (aq, ag, bq, bg) = (a.qpn, a.gid, b.qpn, b.gid);
    a.connect_with(bq, bg, 8, 1);
    b.connect(aq, ag);
    let sge = [Sge {
        addr: a.addr(0),
        length: 4096,
        lkey: a.lkey,
    }];
    let mut w = wqe(1, wr_opcode::RDMA_WRITE, &sge);
    w.remote_addr = b.addr(0);
    w.rkey = b.rkey;
    a.post_send(w);
    assert_eq!(a.poll().status, wc_status::SUCCESS);
    drop(b); // the client goes away: its QP, MR and memory with it
    let mut w = wqe(2, wr_opcode::RDMA_WRITE, &sge);
    w.remote_addr = a.addr(0);
    w.rkey = a.rkey;
    a.post_send(w);
    let c = a.poll();
    assert_eq!(c.wr_id, 2);
    assert_ne!(
        c.status,
        wc_status::SUCCESS,
        "retry exceeded or a NAK, never a hang"
    );
    let (mut c2, mut d2) = pair(&d, qp_type::RC, false);
    d2.post_recv(5, 0, 16);
    let sge = [Sge {
        addr: c2.addr(0),
        length: 16,
        lkey: c2.lkey,
    }];
    c2.fill(0, 16, 1);
    c2.post_send(wqe(5, wr_opcode::SEND, &sge));
    assert_eq!(d2.poll().status, wc_status::SUCCESS);
    let _ = &mut d2;
    d.stop();
}

#[test]
fn captured_rc_traffic_decodes_with_every_icrc_valid() {
    use std::io::Read;
    let d = TestDaemon::start();
    let (mut a, b) = pair(&d, qp_type::RC, false);
    let (r, w) = emulator::daemon::sys::pipe().unwrap();
    let mut admin = d.connect();
    admin
        .call(
            RequestBody::Capture {
                device: "rxe0".into(),
            },
            &[w.as_raw_fd()],
        )
        .unwrap();
    drop(w);
    b.post_recv(1, 0, 4096);
    a.fill(0, 3000, 7);
    let sge = [Sge {
        addr: a.addr(0),
        length: 3000,
        lkey: a.lkey,
    }];
    a.post_send(wqe(1, wr_opcode::SEND, &sge));
    assert_eq!(b.poll().status, wc_status::SUCCESS);
    let mut rd = wqe(2, wr_opcode::RDMA_READ, &sge);
    rd.remote_addr = b.addr(0);
    rd.rkey = b.rkey;
    a.post_send(rd);
    assert_eq!(a.poll().wr_id, 1);
    assert_eq!(a.poll().wr_id, 2);
    d.stop(); // closes the capture stream
    let mut pcap = Vec::new();
    std::fs::File::from(r).read_to_end(&mut pcap).unwrap();
    assert_eq!(pcap[..4], 0xa1b2_c3d4u32.to_le_bytes());
    // Sent and received copies of 3 SEND packets, an ACK, a READ request, 3 responses.
    let mut frames = 0;
    let mut at = 24;
    while at + 16 <= pcap.len() {
        at += 16 + u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        frames += 1;
    }
    assert_eq!(at, pcap.len(), "whole records");
    assert!(frames >= 16, "{frames} frames");
    let file = std::env::temp_dir().join(format!("rdma-emu-capture-{}.pcap", std::process::id()));
    std::fs::write(&file, &pcap).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-emu"))
        .arg("decode")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "decode: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Ok(out) = std::process::Command::new("tshark")
        .args(["-r"])
        .arg(&file)
        .args(["-Y", "_ws.malformed || _ws.expert.severity >= error"])
        .output()
    {
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "",
            "tshark finds no malformed or error items"
        );
    }
    let _ = std::fs::remove_file(&file);
}

/// Binds window `mw_rkey` of `side` to `[off, off + len)` of its MR through its SQ.
fn bind(side: &Side, wr_id: u64, mw_rkey: u32, new_rkey: u32, off: usize, len: u64) -> CqeRepr {
    let mut w = wqe(wr_id, wr_opcode::BIND_MW, &[]);
    w.remote_addr = side.addr(off);
    w.compare_add = len;
    w.rkey = mw_rkey;
    w.swap = u64::from(side.lkey);
    w.imm_data = new_rkey;
    w.remote_qpn = access::REMOTE_WRITE | access::REMOTE_READ;
    side.post_send(w);
    side.poll()
}

#[test]
fn memory_windows_of_both_types_grant_remote_access_once_bound() {
    let d = TestDaemon::start();
    let (mut a, mut b) = pair(&d, qp_type::RC, false);
    for (mw_type, wr_id) in [(1u32, 10u64), (2, 20)] {
        let reply =
            b.c.call(RequestBody::AllocMw { pd: b.pd, mw_type }, &[])
                .unwrap()
                .0;
        let ReplyBody::Mw { rkey, .. } = reply else {
            panic!("{reply:?}")
        };
        let new_rkey = (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff);
        let c = bind(&b, wr_id, rkey, new_rkey, 4096, 1024);
        assert_eq!(
            (c.wr_id, c.status, c.opcode),
            (wr_id, wc_status::SUCCESS, wc_opcode::BIND_MW),
            "type {mw_type}"
        );
        a.fill(0, 512, mw_type as u8);
        let sge = [Sge {
            addr: a.addr(0),
            length: 512,
            lkey: a.lkey,
        }];
        let mut w = wqe(wr_id + 1, wr_opcode::RDMA_WRITE, &sge);
        w.remote_addr = b.addr(4096);
        w.rkey = new_rkey;
        a.post_send(w);
        assert_eq!(
            a.poll().status,
            wc_status::SUCCESS,
            "write through the type {mw_type} window"
        );
        assert_eq!(b.read(4096, 512), pattern(512, mw_type as u8));
    }
    // Outside the window: a remote access error.
    let reply =
        b.c.call(
            RequestBody::AllocMw {
                pd: b.pd,
                mw_type: 2,
            },
            &[],
        )
        .unwrap()
        .0;
    let ReplyBody::Mw { rkey, .. } = reply else {
        panic!("{reply:?}")
    };
    let new_rkey = (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff);
    assert_eq!(
        bind(&b, 30, rkey, new_rkey, 0, 64).status,
        wc_status::SUCCESS
    );
    let sge = [Sge {
        addr: a.addr(0),
        length: 128,
        lkey: a.lkey,
    }];
    let mut w = wqe(31, wr_opcode::RDMA_WRITE, &sge);
    w.remote_addr = b.addr(0);
    w.rkey = new_rkey;
    a.post_send(w);
    assert_eq!(a.poll().status, wc_status::REM_ACCESS_ERR);
    d.stop();
}

/// Throughput of 64 KiB RDMA WRITEs with 16 in flight, for a rough figure:
/// `cargo test --release -p emulator --test daemon_rc -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_write_bandwidth() {
    let d = TestDaemon::start();
    let (a, b) = pair(&d, qp_type::RC, false);
    let len = 32 * 1024u32;
    let sge = [Sge {
        addr: a.addr(0),
        length: len,
        lkey: a.lkey,
    }];
    let start = std::time::Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    let mut cons = a.cq.consumer(0);
    let mut buf = [0u8; 64];
    while start.elapsed() < Duration::from_secs(2) {
        while posted - done < 16 {
            let mut w = wqe(posted, wr_opcode::RDMA_WRITE, &sge);
            w.remote_addr = b.addr(0);
            w.rkey = b.rkey;
            a.post_send(w);
            posted += 1;
        }
        if cons.pop(&mut buf).unwrap() {
            let c = CqeRepr::parse(&Cqe::new_checked(&buf[..]).unwrap()).unwrap();
            assert_eq!(c.status, wc_status::SUCCESS);
            done += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{done} writes of {len} B in {secs:.2} s: {:.1} MB/s",
        done as f64 * f64::from(len) / secs / 1e6
    );
    d.stop();
}

#[test]
fn write_into_an_mr_whose_pages_were_unmapped_fails_without_harming_the_daemon() {
    let d = TestDaemon::start();
    let (mut a, mut b) = pair(&d, qp_type::RC, false);
    // SAFETY: a fresh anonymous mapping, unmapped below; nothing else refers to it.
    let region = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(region, libc::MAP_FAILED);
    let addr = region as u64;
    let acc = access::LOCAL_WRITE | access::REMOTE_WRITE;
    let reply =
        b.c.call(
            RequestBody::RegMr {
                pd: b.pd,
                addr,
                length: 8192,
                iova: addr,
                access: acc,
            },
            &[],
        )
        .unwrap()
        .0;
    let ReplyBody::Mr { rkey, .. } = reply else {
        panic!("{reply:?}")
    };
    // SAFETY: unmapping the region mapped above.
    unsafe { libc::munmap(region, 8192) };
    let sge = [Sge {
        addr: a.addr(0),
        length: 4096,
        lkey: a.lkey,
    }];
    let mut w = wqe(1, wr_opcode::RDMA_WRITE, &sge);
    w.remote_addr = addr;
    w.rkey = rkey;
    a.post_send(w);
    let c = a.poll();
    assert_eq!(c.wr_id, 1);
    assert_ne!(c.status, wc_status::SUCCESS);
    // The daemon still serves new connections and traffic.
    let (c2, d2) = pair(&d, qp_type::RC, false);
    d2.post_recv(1, 0, 8);
    let sge = [Sge {
        addr: c2.addr(0),
        length: 8,
        lkey: c2.lkey,
    }];
    c2.post_send(wqe(1, wr_opcode::SEND, &sge));
    assert_eq!(d2.poll().status, wc_status::SUCCESS);
    let ReplyBody::Stat(sets) =
        a.c.call(
            RequestBody::Stat {
                device: None,
                qpn: None,
            },
            &[],
        )
        .unwrap()
        .0
    else {
        panic!()
    };
    assert!(
        sets[0]
            .counters
            .iter()
            .any(|(k, v)| k == "memory_faults" && *v > 0),
        "{sets:?}"
    );
    let _ = &mut b;
    d.stop();
}
