//! iWARP QPs on a shared receive queue (siw's SRQs): several connections whose receive
//! side is one `Device`, taking each Send's receive WR from the device's SRQ through the
//! `Stags` table. What the kernel's siw does (`siw_rqe_get`, `siw_rq_flush`): WRs are
//! taken in posting order whichever QP the Send came to; the limit event fires when the
//! SRQ falls below its armed limit; a QP that goes to error flushes only the receive it
//! had in progress, and the SRQ's WRs stay for the others; a Send that finds the SRQ empty
//! waits for a receive posted to it.

mod iwarp_common;

use emu_core::iwarp::{Completion, Connection, IwarpConfig, IwarpEvent};
use emu_core::{
    AccessFlags, AsyncEvent, ClientId, Device, DeviceConfig, DeviceLimits, Gid, Lkey, Mtu,
    PdHandle, RecvWr, SendWr, Sge, SrqAttr, SrqAttrMask, SrqHandle, VecMemory, WcOpcode, WcStatus,
    WrId, WrOpcode,
};
use iwarp_common::{Node, BASE, SPACE};
use std::time::Instant;
use wire::roce::Qpn;

const MEM: u64 = 1 << 20;
const OWNER: ClientId = ClientId(7);

/// The receiving host: one device (its MR over the buffer, its SRQ) and memory.
struct Receiver {
    dev: Device,
    mem: VecMemory,
    pd: PdHandle,
    lkey: Lkey,
    srq: SrqHandle,
}

impl Receiver {
    fn new(max_wr: u32) -> Receiver {
        let mut dev = Device::new(DeviceConfig {
            name: "siw0".into(),
            gids: vec![Gid::default()],
            active_mtu: Mtu::Mtu1024,
            udp_src_port: None,
            limits: DeviceLimits::default(),
            seed: 3,
        });
        let pd = dev.alloc_pd(OWNER).unwrap();
        let keys = dev
            .reg_mr(pd, BASE, MEM, BASE, AccessFlags::LOCAL_WRITE, SPACE)
            .unwrap();
        let attr = SrqAttr {
            max_wr,
            max_sge: 1,
            srq_limit: 0,
        };
        let srq = dev.create_srq(OWNER, pd, attr).unwrap();
        let mut mem = VecMemory::new();
        mem.add_region(SPACE, BASE, MEM as usize);
        Receiver {
            dev,
            mem,
            pd,
            lkey: keys.lkey,
            srq,
        }
    }

    /// `ibv_post_srq_recv` of `len` octets at `BASE + off`.
    fn post(&mut self, id: u64, off: u64, len: u32) {
        let wr = RecvWr {
            wr_id: WrId(id),
            sg_list: vec![Sge {
                addr: BASE + off,
                length: len,
                lkey: self.lkey,
            }],
        };
        self.dev.post_srq_recv(self.srq, wr).unwrap();
    }

    fn events(&mut self) -> Vec<AsyncEvent> {
        std::iter::from_fn(|| self.dev.poll_event().map(|(_, e)| e)).collect()
    }
}

/// One QP of the receiver on the SRQ, connected to a sender of its own.
struct Link {
    a: Node,
    b: Connection,
    b_wcs: Vec<Completion>,
    b_events: Vec<IwarpEvent>,
}

/// Moves bytes both ways until neither side has anything to say.
fn run(l: &mut Link, r: &mut Receiver) {
    let now = Instant::now();
    for _ in 0..100_000 {
        let mut to_b = Vec::new();
        let mut to_a = Vec::new();
        l.a.conn
            .poll_stream_transmit(&mut to_b, &mut l.a.keys, &mut l.a.mem);
        l.b.handle_stream(now, &to_b, &mut r.dev, &mut r.mem);
        l.b.poll_stream_transmit(&mut to_a, &mut r.dev, &mut r.mem);
        l.a.conn
            .handle_stream(now, &to_a, &mut l.a.keys, &mut l.a.mem);
        let mut busy = !to_a.is_empty() || !to_b.is_empty();
        while let Some(e) = l.b.poll_event() {
            if matches!(e, IwarpEvent::ConnectRequest(_)) {
                l.b.accept(b"").unwrap();
            }
            l.b_events.push(e);
            busy = true;
        }
        while let Some(c) = l.b.poll_completion() {
            l.b_wcs.push(c);
        }
        while let Some(e) = l.a.conn.poll_event() {
            l.a.events.push(e);
        }
        while let Some(c) = l.a.conn.poll_completion() {
            l.a.wcs.push(c);
        }
        if !busy {
            return;
        }
    }
    panic!("the link did not settle");
}

/// QP `qpn` of the receiver on its SRQ, connected.
fn link(r: &mut Receiver, qpn: u32) -> Link {
    let now = Instant::now();
    let b = IwarpConfig {
        qpn: Qpn(qpn),
        pd: r.pd,
        srq: Some(r.srq),
        max_recv_wr: 0,
        inline_space: SPACE,
        ..IwarpConfig::default()
    };
    let a = IwarpConfig {
        qpn: Qpn(qpn + 100),
        pd: iwarp_common::PD,
        inline_space: SPACE,
        ..IwarpConfig::default()
    };
    let mut l = Link {
        a: Node::new(Connection::initiator(now, a), MEM),
        b: Connection::responder(now, b),
        b_wcs: Vec::new(),
        b_events: Vec::new(),
    };
    run(&mut l, r);
    assert!(
        l.a.conn.is_established() && l.b.is_established(),
        "a {:?} b {:?}",
        l.a.events,
        l.b_events
    );
    l
}

/// The sender of `l` sends `len` octets of pattern `seed` from its buffer's start.
fn send(l: &mut Link, id: u64, len: u32, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..len as usize)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect();
    l.a.mem
        .slice_mut(SPACE, BASE, data.len())
        .copy_from_slice(&data);
    let mut wr = SendWr::new(WrId(id), WrOpcode::Send);
    wr.sg_list = vec![Sge {
        addr: BASE,
        length: len,
        lkey: Lkey(0x100),
    }];
    l.a.conn.post_send(wr).unwrap();
    data
}

fn recv_wcs(l: &Link) -> Vec<(u64, WcStatus, WcOpcode, u32, u32)> {
    l.b_wcs
        .iter()
        .map(|c| {
            let w = &c.wc;
            (w.wr_id.0, w.status, w.opcode, w.byte_len, w.qp_num.0)
        })
        .collect()
}

#[test]
fn siw_qps_on_one_srq_take_its_receives_in_posting_order() {
    let mut r = Receiver::new(16);
    let mut links: Vec<Link> = (0..3).map(|i| link(&mut r, 10 + i)).collect();
    for i in 0..6u64 {
        r.post(100 + i, i * 4096, 4096);
    }
    // Sends to the QPs in turn 0, 1, 2, 0, 2: each takes the SRQ's oldest receive.
    let order = [0usize, 1, 2, 0, 2];
    let mut sent = Vec::new();
    for (n, &q) in order.iter().enumerate() {
        let len = 1000 + 500 * n as u32;
        sent.push(send(&mut links[q], n as u64, len, n as u8));
        run(&mut links[q], &mut r);
    }
    let mut got: Vec<(u64, u32)> = Vec::new();
    for (q, l) in links.iter().enumerate() {
        for (id, status, op, len, qpn) in recv_wcs(l) {
            assert_eq!(
                (status, op, qpn),
                (WcStatus::Success, WcOpcode::Recv, 10 + q as u32)
            );
            got.push((id, len));
        }
    }
    got.sort();
    let expected: Vec<(u64, u32)> = sent
        .iter()
        .enumerate()
        .map(|(n, d)| (100 + n as u64, d.len() as u32))
        .collect();
    assert_eq!(got, expected, "receive n went to the n-th Send");
    // Each QP saw its own Sends' receives in order.
    let ids = |q: usize| -> Vec<u64> { recv_wcs(&links[q]).iter().map(|w| w.0).collect() };
    assert_eq!(
        (ids(0), ids(1), ids(2)),
        (vec![100, 103], vec![101], vec![102, 104])
    );
    for (n, d) in sent.iter().enumerate() {
        assert_eq!(
            r.mem.slice(SPACE, BASE + n as u64 * 4096, d.len()),
            &d[..],
            "message {n} in receive {n}'s buffer"
        );
    }
    assert_eq!(r.dev.srq_outstanding(r.srq), Some(1));
    assert!(links
        .iter()
        .all(|l| l.a.wcs.iter().all(|c| c.wc.status == WcStatus::Success)));
}

#[test]
fn siw_srq_limit_event_fires_once_when_it_falls_below_the_limit() {
    let mut r = Receiver::new(16);
    let mut links: Vec<Link> = (0..2).map(|i| link(&mut r, 20 + i)).collect();
    for i in 0..6u64 {
        r.post(i, i * 4096, 4096);
    }
    let limit = SrqAttr {
        max_wr: 0,
        max_sge: 0,
        srq_limit: 3,
    };
    r.dev.modify_srq(r.srq, &limit, SrqAttrMask::LIMIT).unwrap();
    // 6 posted, limit 3: taking the third leaves 3 (no event), the fourth leaves 2.
    for n in 0..3u64 {
        send(&mut links[(n % 2) as usize], n, 64, 1);
        run(&mut links[(n % 2) as usize], &mut r);
        assert_eq!(r.events(), vec![], "after receive {n}");
    }
    send(&mut links[1], 3, 64, 1);
    run(&mut links[1], &mut r);
    assert_eq!(r.events(), vec![AsyncEvent::SrqLimitReached(r.srq)]);
    // Disarmed: reads 0, and no second event.
    assert_eq!(r.dev.query_srq(r.srq).unwrap().srq_limit, 0);
    send(&mut links[0], 4, 64, 1);
    run(&mut links[0], &mut r);
    assert_eq!(r.events(), vec![]);
    let done: usize = links.iter().map(|l| l.b_wcs.len()).sum();
    assert_eq!(done, 5);
}

#[test]
fn siw_qp_in_error_flushes_its_receive_in_progress_not_the_srqs() {
    let mut r = Receiver::new(16);
    let mut l0 = link(&mut r, 30);
    let mut l1 = link(&mut r, 31);
    for i in 0..3u64 {
        r.post(50 + i, i * 65536, 65536);
    }
    // A 40 000-octet Send to QP 30, of which only the first FPDUs arrive: it takes
    // receive 50 and is in progress.
    send(&mut l0, 1, 40_000, 9);
    let mut bytes = Vec::new();
    l0.a.conn
        .poll_stream_transmit(&mut bytes, &mut l0.a.keys, &mut l0.a.mem);
    assert!(bytes.len() > 10_000, "the Send is several FPDUs");
    l0.b.handle_stream(Instant::now(), &bytes[..4000], &mut r.dev, &mut r.mem);
    assert_eq!(
        r.dev.srq_outstanding(r.srq),
        Some(2),
        "receive 50 in progress"
    );
    assert!(l0.b.poll_completion().is_none());
    // QP 30 goes to error: its receive in progress is flushed, the SRQ keeps 51 and 52.
    l0.b.close();
    let flushed: Vec<(u64, WcStatus)> = std::iter::from_fn(|| l0.b.poll_completion())
        .map(|c| (c.wc.wr_id.0, c.wc.status))
        .collect();
    assert_eq!(flushed, vec![(50, WcStatus::WrFlushErr)]);
    assert_eq!(r.dev.srq_outstanding(r.srq), Some(2));
    // QP 31 goes on with the SRQ's next receive.
    let d = send(&mut l1, 2, 3000, 4);
    run(&mut l1, &mut r);
    assert_eq!(
        recv_wcs(&l1),
        vec![(51, WcStatus::Success, WcOpcode::Recv, 3000, 31)]
    );
    assert_eq!(r.mem.slice(SPACE, BASE + 65536, d.len()), &d[..]);
    assert_eq!(r.dev.srq_outstanding(r.srq), Some(1));
}

#[test]
fn siw_send_waits_for_a_receive_posted_to_the_empty_srq() {
    let mut r = Receiver::new(4);
    let mut l = link(&mut r, 40);
    let d = send(&mut l, 1, 500, 2);
    run(&mut l, &mut r);
    assert!(
        l.b.is_waiting_for_recv(),
        "the Send holds: the SRQ is empty"
    );
    assert_eq!(l.b.counters().recv_waits, 1);
    assert!(l.b_wcs.is_empty());
    r.post(7, 0, 4096);
    l.b.handle_stream(Instant::now(), &[], &mut r.dev, &mut r.mem);
    run(&mut l, &mut r);
    assert!(!l.b.is_waiting_for_recv());
    assert_eq!(
        recv_wcs(&l),
        vec![(7, WcStatus::Success, WcOpcode::Recv, 500, 40)]
    );
    assert_eq!(r.mem.slice(SPACE, BASE, d.len()), &d[..]);
    assert!(l
        .b_events
        .iter()
        .all(|e| !matches!(e, IwarpEvent::Terminated { .. })));
}
