//! The daemon's control path through its real socket: devices, objects, rings, and
//! hostile clients that must get errors and never bring the daemon down.

mod common;

use common::*;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;
use wire::client::proto::Handle;
use wire::client::slot::{send_slot_size, Cqe, CqeRepr, SendData, SendWqeRepr, Sge, SgeList};
use wire::client::verbs::{event_type, qp_type, wc_status};
use wire::client::{AsyncEventRecord, QpCap, QpInitAttr, ReplyBody, Request, RequestBody, SrqAttr};

fn pipe() -> (OwnedFd, OwnedFd) {
    emulator::daemon::sys::pipe().expect("pipe")
}

fn alloc_pd(c: &mut emulator::client::Client, ctx: Handle) -> Handle {
    match c
        .call(RequestBody::AllocPd { ctx }, &[])
        .expect("alloc pd")
        .0
    {
        ReplyBody::Pd { handle } => handle,
        other => panic!("{other:?}"),
    }
}

fn create_cq(c: &mut emulator::client::Client, ctx: Handle, cqe: u32) -> (Handle, MappedRing) {
    create_cq_ts(c, ctx, cqe, false)
}

/// A CQ whose CQEs the daemon stamps when `timestamps`.
fn create_cq_ts(
    c: &mut emulator::client::Client,
    ctx: Handle,
    cqe: u32,
    timestamps: bool,
) -> (Handle, MappedRing) {
    let (body, fds) = c
        .call(
            RequestBody::CreateCq {
                ctx,
                cqe,
                channel: None,
                comp_vector: 0,
                timestamps,
            },
            &[],
        )
        .expect("create cq");
    let ReplyBody::Cq {
        handle,
        cqe: depth,
        ring,
    } = body
    else {
        panic!("{body:?}")
    };
    assert!(depth >= cqe);
    assert!(ring.entries >= depth && ring.entries.is_power_of_two());
    (handle, MappedRing::new(&fds[0], vec![ring]))
}

fn rc_init(cq: Handle) -> QpInitAttr {
    QpInitAttr {
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
    }
}

fn create_qp(
    c: &mut emulator::client::Client,
    pd: Handle,
    init: QpInitAttr,
) -> (Handle, u32, QpCap, MappedRing) {
    let (body, fds) = c
        .call(RequestBody::CreateQp { pd, init }, &[])
        .expect("create qp");
    let ReplyBody::Qp {
        handle,
        qpn,
        cap,
        sq,
        rq,
    } = body
    else {
        panic!("{body:?}")
    };
    let mut layouts = vec![sq];
    layouts.extend(rq);
    (handle, qpn, cap, MappedRing::new(&fds[0], layouts))
}

#[test]
fn hello_lists_rxe0_and_open_device_hands_over_three_descriptors() {
    let d = TestDaemon::start();
    let (mut c, hello) = emulator::client::Client::connect(&d.socket).unwrap();
    let ReplyBody::Hello { devices, .. } = hello else {
        panic!("{hello:?}")
    };
    assert_eq!(
        devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        ["rxe0"]
    );
    let ctx = open_device(&mut c);
    let ReplyBody::DeviceOpened {
        device_attr,
        ports,
        gids,
        ..
    } = &ctx.attrs
    else {
        unreachable!()
    };
    assert!(device_attr.max_qp_wr >= 1 << 20);
    assert_eq!(device_attr.max_sge, 32);
    assert_eq!(device_attr.max_cqe, 4194303);
    assert_eq!(device_attr.max_qp_rd_atom, 128);
    assert_eq!(ports[0].link_layer, 2, "Ethernet");
    assert_eq!(ports[0].active_mtu, 5, "lo's 64 KiB MTU gives IB MTU 4096");
    let std::net::IpAddr::V4(v4) = d.addr else {
        unreachable!()
    };
    assert_eq!(gids[0].gid, v4.to_ipv6_mapped().octets());
    assert_eq!(gids[0].gid_type, 2);
    let q = c
        .call(
            RequestBody::QueryGid {
                ctx: ctx.handle,
                port: 1,
                index: 0,
            },
            &[],
        )
        .unwrap()
        .0;
    assert_eq!(q, ReplyBody::Gid(gids[0]));
    assert_eq!(
        errno(c.call(
            RequestBody::QueryPort {
                ctx: ctx.handle,
                port: 2
            },
            &[]
        )),
        libc::EINVAL
    );
    d.stop();
}

#[test]
fn objects_are_created_used_and_destroyed_in_order() {
    let d = TestDaemon::start();
    let mut c = d.connect();
    let ctx = open_device(&mut c);
    let pd = alloc_pd(&mut c, ctx.handle);
    let buf = vec![0u8; 8192];
    let mr = c
        .call(
            RequestBody::RegMr {
                pd,
                addr: buf.as_ptr() as u64,
                length: 8192,
                iova: buf.as_ptr() as u64,
                access: 7,
                shared: Vec::new(),
            },
            &[],
        )
        .unwrap()
        .0;
    let ReplyBody::Mr { handle: mr, .. } = mr else {
        panic!("{mr:?}")
    };
    let (_r, w) = pipe();
    let ch = c
        .call(
            RequestBody::CreateCompChannel { ctx: ctx.handle },
            &[w.as_raw_fd()],
        )
        .unwrap()
        .0;
    let ReplyBody::CompChannel { handle: ch } = ch else {
        panic!("{ch:?}")
    };
    let (body, _fds) = c
        .call(
            RequestBody::CreateCq {
                ctx: ctx.handle,
                cqe: 100,
                channel: Some(ch),
                comp_vector: 0,
                timestamps: false,
            },
            &[],
        )
        .unwrap();
    let ReplyBody::Cq { handle: cq, .. } = body else {
        panic!("{body:?}")
    };
    assert_eq!(
        errno(c.call(RequestBody::DestroyCompChannel { channel: ch }, &[])),
        libc::EBUSY
    );
    let (qp, _qpn, cap, rings) = create_qp(&mut c, pd, rc_init(cq));
    assert!(cap.max_send_wr >= 16 && cap.max_inline_data >= 64);
    assert_eq!(
        rings.layouts[0].slot_size,
        send_slot_size(cap.max_send_sge, cap.max_inline_data).unwrap()
    );
    assert_eq!(rings.layouts.len(), 2, "SQ and RQ");
    let q = c.call(RequestBody::QueryQp { qp, mask: 0 }, &[]).unwrap().0;
    let ReplyBody::QpAttrs { init, .. } = q else {
        panic!("{q:?}")
    };
    assert_eq!((init.send_cq, init.qp_type), (cq, qp_type::RC));
    let (sbody, _) = c
        .call(
            RequestBody::CreateSrq {
                pd,
                attr: SrqAttr {
                    max_wr: 32,
                    max_sge: 1,
                    srq_limit: 0,
                },
            },
            &[],
        )
        .unwrap();
    let ReplyBody::Srq { handle: srq, .. } = sbody else {
        panic!("{sbody:?}")
    };
    for req in [
        RequestBody::DestroySrq { srq },
        RequestBody::DestroyQp { qp },
        RequestBody::DestroyCq { cq },
        RequestBody::DestroyCompChannel { channel: ch },
        RequestBody::DeregMr { mr },
        RequestBody::DeallocPd { pd },
        RequestBody::CloseDevice { ctx: ctx.handle },
    ] {
        c.call(req.clone(), &[])
            .unwrap_or_else(|e| panic!("{req:?}: {e}"));
    }
    assert_eq!(
        errno(c.call(RequestBody::AllocPd { ctx: ctx.handle }, &[])),
        libc::ENOENT
    );
    d.stop();
}

#[test]
fn another_sessions_handles_do_not_exist_for_you() {
    let d = TestDaemon::start();
    let mut a = d.connect();
    let mut b = d.connect();
    let ctx_a = open_device(&mut a);
    let pd_a = alloc_pd(&mut a, ctx_a.handle);
    let _ctx_b = open_device(&mut b);
    assert_eq!(
        errno(b.call(RequestBody::AllocPd { ctx: ctx_a.handle }, &[])),
        libc::ENOENT
    );
    assert_eq!(
        errno(b.call(RequestBody::DeallocPd { pd: pd_a }, &[])),
        libc::ENOENT
    );
    let buf = [0u8; 64];
    assert_eq!(
        errno(b.call(
            RequestBody::RegMr {
                pd: pd_a,
                addr: buf.as_ptr() as u64,
                length: 64,
                iova: 0,
                access: 1,
                shared: Vec::new(),
            },
            &[]
        )),
        libc::ENOENT
    );
    // A handle of the wrong kind is EINVAL.
    assert_eq!(
        errno(a.call(RequestBody::DeallocPd { pd: ctx_a.handle }, &[])),
        libc::EINVAL
    );
    a.call(RequestBody::DeallocPd { pd: pd_a }, &[])
        .expect("owner may");
    d.stop();
}

#[test]
fn hostile_requests_get_errors_and_the_daemon_keeps_serving() {
    let d = TestDaemon::start();
    let mut c = d.connect();
    // A valid seq followed by garbage: EINVAL under that seq.
    let mut bytes = postcard::to_stdvec(&777u64).unwrap();
    bytes.extend_from_slice(&[0xff; 40]);
    c.send_raw(&bytes, &[]).unwrap();
    let (reply, _) = c.recv().unwrap();
    assert_eq!((reply.seq, reply.result), (777, Err(libc::EINVAL)));
    // Descriptors where none belong: EINVAL, and they are closed by the daemon.
    let (_r, w) = pipe();
    assert_eq!(
        errno(c.call(RequestBody::AllocPd { ctx: Handle(1) }, &[w.as_raw_fd()])),
        libc::EINVAL
    );
    // OpenDevice without /proc/self/mem, or with something else.
    assert_eq!(
        errno(c.call(
            RequestBody::OpenDevice {
                name: "rxe0".into()
            },
            &[]
        )),
        libc::EINVAL
    );
    assert_eq!(
        errno(c.call(
            RequestBody::OpenDevice {
                name: "rxe0".into()
            },
            &[w.as_raw_fd()]
        )),
        libc::EINVAL
    );
    let mem = proc_self_mem();
    assert_eq!(
        errno(c.call(
            RequestBody::OpenDevice {
                name: "mlx5_0".into()
            },
            &[mem.as_raw_fd()]
        )),
        libc::ENODEV
    );
    let ctx = open_device(&mut c);
    let pd = alloc_pd(&mut c, ctx.handle);
    // Sizes beyond the device's limits.
    assert_eq!(
        errno(c.call(
            RequestBody::CreateCq {
                ctx: ctx.handle,
                cqe: 1 << 22,
                channel: None,
                comp_vector: 0,
                timestamps: false
            },
            &[]
        )),
        libc::EINVAL
    );
    assert_eq!(
        errno(c.call(
            RequestBody::CreateCq {
                ctx: ctx.handle,
                cqe: 0,
                channel: None,
                comp_vector: 0,
                timestamps: false
            },
            &[]
        )),
        libc::EINVAL
    );
    let (cq, _ring) = create_cq(&mut c, ctx.handle, 16);
    let mut init = rc_init(cq);
    init.cap.max_send_wr = u32::MAX;
    assert_eq!(
        errno(c.call(RequestBody::CreateQp { pd, init }, &[])),
        libc::EINVAL
    );
    let mut init = rc_init(cq);
    init.cap.max_send_sge = 33;
    assert_eq!(
        errno(c.call(RequestBody::CreateQp { pd, init }, &[])),
        libc::EINVAL
    );
    // Memory registrations over unmapped memory.
    assert_eq!(
        errno(c.call(
            RequestBody::RegMr {
                pd,
                addr: 0x1000,
                length: 4096,
                iova: 0,
                access: 1,
                shared: Vec::new(),
            },
            &[]
        )),
        libc::EFAULT
    );
    assert_eq!(
        errno(c.call(
            RequestBody::RegMr {
                pd,
                addr: u64::MAX - 10,
                length: 4096,
                iova: 0,
                access: 1,
                shared: Vec::new(),
            },
            &[]
        )),
        libc::EFAULT
    );
    // Pure garbage (no readable seq) closes that session only.
    let mut g = d.connect();
    g.send_raw(&[0xff; 20], &[]).unwrap();
    assert!(g.recv().is_err(), "session closed");
    // The first session and new ones are still served.
    alloc_pd(&mut c, ctx.handle);
    let mut n = d.connect();
    open_device(&mut n);
    d.stop();
}

#[test]
fn requests_before_hello_are_refused() {
    let d = TestDaemon::start();
    let sock = emulator::daemon::sys::seqpacket_connect(&d.socket).unwrap();
    let bytes = Request {
        seq: 5,
        body: RequestBody::LinkShow,
    }
    .encode()
    .unwrap();
    emulator::daemon::sys::send_msg(sock.as_raw_fd(), &bytes, &[]).unwrap();
    let mut buf = vec![0u8; 65536];
    let got = emulator::daemon::sys::recv_msg(sock.as_raw_fd(), &mut buf)
        .unwrap()
        .unwrap();
    let reply = wire::client::Reply::decode(&buf[..got.len]).unwrap();
    assert_eq!((reply.seq, reply.result), (5, Err(libc::EPROTO)));
    d.stop();
}

/// Also the error path's CQE timestamps: stamped when the daemon writes the CQE (between
/// the post and the poll, on both clocks) if the CQ asked for them, zero otherwise.
#[test]
fn oversized_wqe_completes_with_an_error_instead_of_being_executed() {
    let d = TestDaemon::start();
    let mut c = d.connect();
    let ctx = open_device(&mut c);
    let pd = alloc_pd(&mut c, ctx.handle);
    for timestamps in [true, false] {
        oversized_wqe_on_a_new_qp(&mut c, &ctx, pd, timestamps);
    }
    d.stop();
}

fn oversized_wqe_on_a_new_qp(
    c: &mut emulator::client::Client,
    ctx: &Ctx,
    pd: Handle,
    timestamps: bool,
) {
    let clock = emulator::daemon::sys::clock_ns;
    let (cq, cq_ring) = create_cq_ts(c, ctx.handle, 16, timestamps);
    let (_qp, qpn, cap, rings) = create_qp(c, pd, rc_init(cq));
    let sges = vec![
        Sge {
            addr: 0,
            length: 1,
            lkey: 0
        };
        cap.max_send_sge as usize + 1
    ];
    let wqe = SendWqeRepr {
        wr_id: 0xabc,
        opcode: wire::client::verbs::wr_opcode::SEND,
        send_flags: 2,
        imm_data: 0,
        remote_addr: 0,
        rkey: 0,
        remote_qpn: 0,
        compare_add: 0,
        swap: 0,
        ah: 0,
        remote_qkey: 0,
        data: SendData::Sges(SgeList::Slice(&sges)),
    };
    let mut slot = vec![0u8; rings.layouts[0].slot_size as usize];
    wqe.emit(&mut slot).unwrap();
    let (mono0, real0) = (clock(libc::CLOCK_MONOTONIC), clock(libc::CLOCK_REALTIME));
    rings.producer(0).push(&slot).unwrap();
    emulator::daemon::sys::eventfd_signal(ctx.doorbell.as_raw_fd()).unwrap();
    let mut cons = cq_ring.consumer(0);
    let mut buf = [0u8; 64];
    let got = wait_for(Duration::from_secs(5), || {
        cons.pop(&mut buf).unwrap().then_some(())
    });
    assert!(got.is_some(), "an error completion arrives");
    let (mono1, real1) = (clock(libc::CLOCK_MONOTONIC), clock(libc::CLOCK_REALTIME));
    let cqe = CqeRepr::parse(&Cqe::new_checked(&buf[..]).unwrap()).unwrap();
    assert_eq!(
        (cqe.wr_id, cqe.status, cqe.qp_num),
        (0xabc, wc_status::LOC_LEN_ERR, qpn)
    );
    if timestamps {
        assert!(
            (mono0..=mono1).contains(&cqe.completion_ts),
            "raw stamp {} outside [{mono0}, {mono1}]",
            cqe.completion_ts
        );
        assert!(
            (real0..=real1).contains(&cqe.completion_wallclock_ns),
            "wall-clock stamp {} outside [{real0}, {real1}]",
            cqe.completion_wallclock_ns
        );
    } else {
        assert_eq!((cqe.completion_ts, cqe.completion_wallclock_ns), (0, 0));
    }
}

#[test]
fn wild_ring_index_moves_the_qp_to_error_and_tells_its_owner() {
    let d = TestDaemon::start();
    let mut c = d.connect();
    let ctx = open_device(&mut c);
    let pd = alloc_pd(&mut c, ctx.handle);
    let (cq, _cq_ring) = create_cq(&mut c, ctx.handle, 16);
    let (qp, _qpn, _cap, rings) = create_qp(&mut c, pd, rc_init(cq));
    // Producer index far beyond the consumer: a broken ring.
    rings.map.words()[(rings.layouts[0].offset / 8) as usize]
        .store(1 << 40, std::sync::atomic::Ordering::Release);
    emulator::daemon::sys::eventfd_signal(ctx.doorbell.as_raw_fd()).unwrap();
    let rec = read_record(&ctx.async_fd, Duration::from_secs(5)).expect("an async event");
    assert_eq!(
        AsyncEventRecord::from_bytes(rec),
        AsyncEventRecord {
            event_type: event_type::QP_FATAL,
            element: qp.0
        }
    );
    alloc_pd(&mut c, ctx.handle);
    d.stop();
}

#[test]
fn client_death_releases_its_device_contexts() {
    let d = TestDaemon::start();
    {
        let mut c = d.connect();
        let ctx = open_device(&mut c);
        let pd = alloc_pd(&mut c, ctx.handle);
        let (cq, _r) = create_cq(&mut c, ctx.handle, 16);
        create_qp(&mut c, pd, rc_init(cq));
        let mut admin = d.connect();
        assert_eq!(
            errno(admin.call(
                RequestBody::LinkDel {
                    name: "rxe0".into()
                },
                &[]
            )),
            libc::EBUSY
        );
    } // the client's socket closes here
    let mut admin = d.connect();
    let gone = wait_for(Duration::from_secs(5), || {
        admin
            .call(
                RequestBody::LinkDel {
                    name: "rxe0".into(),
                },
                &[],
            )
            .ok()
    });
    assert!(gone.is_some(), "device free once its only client died");
    let links = admin.call(RequestBody::LinkShow, &[]).unwrap().0;
    assert_eq!(links, ReplyBody::Links(vec![]));
    d.stop();
}

#[test]
fn shutdown_tells_every_client_device_fatal() {
    let d = TestDaemon::start();
    let mut c = d.connect();
    let ctx = open_device(&mut c);
    d.stop();
    let rec = read_record(&ctx.async_fd, Duration::from_secs(5)).expect("an async event");
    assert_eq!(
        AsyncEventRecord::from_bytes(rec).event_type,
        event_type::DEVICE_FATAL
    );
}

#[test]
fn hostile_datagrams_on_4791_are_dropped_and_counted() {
    let d = TestDaemon::start();
    let s = std::net::UdpSocket::bind((d.addr, 0)).unwrap();
    for len in [0usize, 1, 11, 12, 40, 1500] {
        s.send_to(&vec![0x5a; len], (d.addr, 4791)).unwrap();
    }
    let mut c = d.connect();
    let counted = wait_for(Duration::from_secs(5), || {
        let counters = device_counters(&mut c);
        let rx = counters
            .iter()
            .find(|(k, _)| k == "udp_rx_datagrams")
            .map(|(_, v)| *v)?;
        (rx == 6).then_some(counters)
    });
    let counters = counted.expect("all six reached the device");
    let get = |k: &str| counters.iter().find(|(n, _)| n == k).map_or(0, |(_, v)| *v);
    let dropped = get("malformed_pkts") + get("icrc_errors") + get("unknown_qp_pkts");
    assert_eq!(dropped, 6, "every one dropped and counted: {counters:?}");
    assert_eq!(get("rcvd_pkts"), 0);
    open_device(&mut c);
    d.stop();
}

mod garbage {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn random_datagrams_never_bring_the_daemon_down(
            msgs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..20),
            seq in any::<u64>(),
        ) {
            let d = TestDaemon::start();
            let c = d.connect();
            for m in &msgs {
                // Half raw garbage, half a valid seq followed by garbage.
                let mut bytes = postcard::to_stdvec(&seq).unwrap();
                bytes.extend_from_slice(m);
                let _ = c.send_raw(m, &[]);
                let _ = c.send_raw(&bytes, &[]);
            }
            let mut fresh = d.connect();
            open_device(&mut fresh);
            d.stop();
        }
    }
}

#[test]
fn a_second_daemon_on_the_same_socket_is_refused() {
    let d = TestDaemon::start();
    let cfg = emulator::daemon::Config {
        socket: d.socket.clone(),
        devices: vec![emulator::daemon::DeviceSpec {
            addrs: Some(vec!["127.0.0.254".parse().unwrap()]),
            ..emulator::daemon::DeviceSpec::new("rxe0", "rxe", "lo")
        }],
        ..emulator::daemon::Config::default()
    };
    let err = emulator::daemon::Daemon::start(cfg).err().expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");
    let mut c = d.connect();
    open_device(&mut c);
    d.stop();
}

/// The counters of `rxe0` (`rdma-emu stat rxe0`).
fn device_counters(c: &mut emulator::client::Client) -> Vec<(String, u64)> {
    let request = RequestBody::Stat {
        device: Some("rxe0".into()),
        qpn: None,
    };
    match c.call(request, &[]).expect("stat").0 {
        ReplyBody::Stat(mut sets) if !sets.is_empty() => sets.swap_remove(0).counters,
        other => panic!("{other:?}"),
    }
}

/// One counter of `rxe0` (the memory counters are daemon-wide).
fn device_counter(c: &mut emulator::client::Client, name: &str) -> u64 {
    device_counters(c)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

#[test]
fn shared_pages_are_checked_and_a_refused_memfd_leaves_the_region_working() {
    use wire::client::SharedPages;
    let d = TestDaemon::start();
    let mut c = d.connect();
    let ctx = open_device(&mut c);
    let pd = alloc_pd(&mut c, ctx.handle);
    // "The client's" buffer: two pages of a sealed memfd mapped in this process.
    let memfd = emulator::daemon::sys::sealed_memfd("test-region", 8192).unwrap();
    let map = emulator::daemon::sys::Mapping::new(&memfd, 8192).unwrap();
    let base = map.words().as_ptr() as u64;
    let reg = |shared: Vec<SharedPages>| RequestBody::RegMr {
        pd,
        addr: base,
        length: 8192,
        iova: base,
        access: 1,
        shared,
    };
    let page = |addr: u64| SharedPages {
        addr,
        len: 4096,
        offset: 0,
    };
    let fd = || memfd.try_clone().unwrap();
    // A shared entry without its descriptor, a descriptor without an entry, more entries
    // than allowed, pages outside the region: EINVAL.
    assert_eq!(errno(c.call(reg(vec![page(base)]), &[])), libc::EINVAL);
    let one = fd();
    assert_eq!(errno(c.call(reg(vec![]), &[one.as_raw_fd()])), libc::EINVAL);
    let four: Vec<OwnedFd> = (0..4).map(|_| fd()).collect();
    let raw: Vec<i32> = four.iter().map(AsRawFd::as_raw_fd).collect();
    assert_eq!(errno(c.call(reg(vec![page(base); 5]), &raw)), libc::EINVAL);
    assert_eq!(
        errno(c.call(reg(vec![page(base + 8192)]), &[one.as_raw_fd()])),
        libc::EINVAL
    );
    // Not a sealed memfd (a pipe): the region is registered, the pages stay on the
    // descriptor path, and the refusal is counted.
    let (pipe_r, _pipe_w) = pipe();
    let (body, _) = c
        .call(reg(vec![page(base)]), &[pipe_r.as_raw_fd()])
        .expect("registered without the shared pages");
    let ReplyBody::Mr {
        handle: refused, ..
    } = body
    else {
        panic!("{body:?}")
    };
    assert_eq!(device_counter(&mut c, "memory_shared_refused"), 1);
    // The real memfd: taken.
    let whole = SharedPages {
        addr: base,
        len: 8192,
        offset: 0,
    };
    let (body, _) = c
        .call(reg(vec![whole]), &[one.as_raw_fd()])
        .expect("registered with shared pages");
    let ReplyBody::Mr { handle: taken, .. } = body else {
        panic!("{body:?}")
    };
    assert_eq!(device_counter(&mut c, "memory_shared_refused"), 1);
    for mr in [refused, taken] {
        c.call(RequestBody::DeregMr { mr }, &[]).expect("dereg");
    }
    d.stop();
}
