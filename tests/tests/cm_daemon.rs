//! The daemon's RDMA CM, spoken to directly over the control protocol (the requests the
//! shim's librdmacm sends): connect / accept / establish / disconnect on one daemon, a
//! connect with no listener, a reject carrying private data, a peer that never answers
//! (short CM timeouts), SIDR, the errnos of bad requests, and the REQs of real rxe
//! captures replayed into the daemon, which must answer with a REP.
//!
//! Every daemon runs in a network namespace of its own (UDP port 4791 and the loopback
//! addresses are then ours alone): these tests need root, and skip without it.

use emulator::client::{CallError, Client};
use rdma_emu_tests::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wire::client::cm::{
    event, ps, CmConnParam, CmEventParam, CmEventRecord, CmEventToken, CmReply, CmRequest,
};
use wire::client::proto::Handle;
use wire::client::verbs::{qp_attr_mask, qp_state, qp_type};
use wire::client::{ReplyBody, RequestBody};
use wire::cm::{CmMad, CmMessage};
use wire::roce::icrc;

/// CM timers short enough that a dead peer is given up on within seconds:
/// (2 × 2^16 + 2^4) × 4.096 µs ≈ 0.54 s per try, 3 tries.
const SHORT_TIMERS: [&str; 4] = ["--cm-response-timeout", "4", "--cm-max-retries", "2"];

/// A network namespace with only `lo` (up), or `None` when this machine cannot make one.
fn netns(tag: &str) -> Option<Netns> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let _ = cannot_run("network namespaces need root");
        return None;
    }
    let name = format!("cmd-{}-{tag}", std::process::id());
    let ok = |args: &[&str]| {
        Command::new("ip")
            .args(args)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ok(&["netns", "add", &name]) {
        let _ = cannot_run("cannot create a network namespace (ip netns add)");
        return None;
    }
    let ns = Netns { name };
    if !ok(&["-n", &ns.name, "link", "set", "lo", "up"]) {
        let _ = cannot_run("cannot bring lo up in a network namespace");
        return None;
    }
    Some(ns)
}

/// A UDP socket bound to `addr` inside `ns` (made on a thread that entered it).
fn udp_in(ns: &Netns, addr: SocketAddr) -> UdpSocket {
    let path = format!("/run/netns/{}", ns.name);
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).expect("netns file");
        // SAFETY: moves only this short-lived thread into the namespace, with a
        // descriptor we own.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        let s = UdpSocket::bind(addr).expect("bind in the namespace");
        // DF, as RoCE senders set it: Linux then sends IP ID 0, which the ICRC covers.
        let v: libc::c_int = libc::IP_PMTUDISC_DO;
        // SAFETY: setsockopt with a pointer to a live c_int and its size.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        s
    })
    .join()
    .expect("netns thread")
}

/// An event channel as the shim makes one: the daemon holds the pipe's write end.
struct Channel {
    handle: Handle,
    read: OwnedFd,
    /// Events fetched while looking for another one.
    stash: Vec<CmEventRecord>,
}

/// A session speaking RDMA CM to a daemon.
struct Cm {
    c: Client,
}

impl Cm {
    fn connect(d: &Daemon) -> Cm {
        let (c, _) = Client::connect(&d.socket).expect("connect to the daemon");
        Cm { c }
    }

    fn call(&mut self, req: CmRequest) -> Result<ReplyBody, i32> {
        match self.c.call(RequestBody::Cm(req), &[]) {
            Ok((body, _)) => Ok(body),
            Err(CallError::Errno(e)) => Err(e),
            Err(e) => panic!("control protocol failed: {e}"),
        }
    }

    fn ok(&mut self, req: CmRequest) -> ReplyBody {
        let what = format!("{req:?}");
        self.call(req)
            .unwrap_or_else(|e| panic!("{what} failed with errno {e}"))
    }

    fn channel(&mut self) -> Channel {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two-element array on success.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let (body, _) = self
            .c
            .call(
                RequestBody::Cm(CmRequest::CreateChannel),
                &[write.as_raw_fd()],
            )
            .expect("CreateChannel");
        let ReplyBody::Cm(CmReply::Channel { handle }) = body else {
            panic!("CreateChannel answered {body:?}");
        };
        Channel {
            handle,
            read,
            stash: Vec::new(),
        }
    }

    fn id(&mut self, ch: &Channel, space: u32) -> Handle {
        let qp = if space == ps::UDP {
            qp_type::UD
        } else {
            qp_type::RC
        };
        self.typed_id(ch, space, qp)
    }

    /// An id of `RDMA_PS_*` `space` naming QP type `qp` (RDMA_PS_IB takes any).
    fn typed_id(&mut self, ch: &Channel, space: u32, qp: u32) -> Handle {
        match self.ok(CmRequest::CreateId {
            channel: ch.handle,
            ps: space,
            qp_type: qp,
        }) {
            ReplyBody::Cm(CmReply::Id { handle }) => handle,
            other => panic!("CreateId answered {other:?}"),
        }
    }

    /// The next event of `ch` matching `want`, waiting on the pipe's tokens; other
    /// events are kept for later calls.
    fn wait(
        &mut self,
        ch: &mut Channel,
        limit: Duration,
        what: &str,
        want: impl Fn(&CmEventRecord) -> bool,
    ) -> CmEventRecord {
        if let Some(i) = ch.stash.iter().position(&want) {
            return ch.stash.remove(i);
        }
        let start = Instant::now();
        loop {
            let left = limit.saturating_sub(start.elapsed());
            assert!(
                !left.is_zero(),
                "no {what} within {limit:?}; other events: {:#?}",
                ch.stash
            );
            let mut pfd = libc::pollfd {
                fd: ch.read.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(1000) as i32) };
            if n <= 0 {
                continue;
            }
            let mut token = [0u8; CmEventToken::LEN];
            // SAFETY: reads at most token.len() bytes into the array.
            let got =
                unsafe { libc::read(ch.read.as_raw_fd(), token.as_mut_ptr().cast(), token.len()) };
            assert_eq!(got, CmEventToken::LEN as isize, "a whole token");
            assert_eq!(token, CmEventToken::BYTES);
            let ev = match self.ok(CmRequest::GetEvent { channel: ch.handle }) {
                ReplyBody::Cm(CmReply::Event(ev)) => ev,
                other => panic!("GetEvent answered {other:?}"),
            };
            if want(&ev) {
                return ev;
            }
            ch.stash.push(ev);
        }
    }

    /// Resolves address and route of `id` towards `dst`.
    fn resolve(&mut self, ch: &mut Channel, id: Handle, dst: SocketAddr) {
        self.ok(CmRequest::ResolveAddr {
            id,
            src: None,
            dst,
            timeout_ms: 2000,
        });
        let ev = self.wait(ch, Duration::from_secs(5), "ADDR_RESOLVED", |e| e.id == id);
        assert_eq!(
            (ev.event, ev.status),
            (event::ADDR_RESOLVED, 0),
            "address of {dst}: {ev:?}"
        );
        self.ok(CmRequest::ResolveRoute {
            id,
            timeout_ms: 2000,
        });
        let ev = self.wait(ch, Duration::from_secs(5), "ROUTE_RESOLVED", |e| e.id == id);
        assert_eq!((ev.event, ev.status), (event::ROUTE_RESOLVED, 0), "{ev:?}");
    }

    fn listen(&mut self, ch: &Channel, space: u32, port: u16) -> Handle {
        let l = self.id(ch, space);
        self.listen_on(l, port);
        l
    }

    /// Binds `l` to the wildcard address and `port` and listens.
    fn listen_on(&mut self, l: Handle, port: u16) {
        self.ok(CmRequest::BindAddr {
            id: l,
            addr: SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)),
        });
        self.ok(CmRequest::Listen { id: l, backlog: 8 });
    }

    fn qp_attr(&mut self, id: Handle, state: u32) -> (wire::client::QpAttr, u32) {
        match self.ok(CmRequest::InitQpAttr {
            id,
            qp_state: state,
        }) {
            ReplyBody::Cm(CmReply::QpAttr { attr, mask }) => (attr, mask),
            other => panic!("InitQpAttr answered {other:?}"),
        }
    }

    fn counters(&mut self) -> Vec<(String, u64)> {
        match self.c.call(
            RequestBody::Stat {
                device: Some("rxe0".into()),
                qpn: None,
            },
            &[],
        ) {
            Ok((ReplyBody::Stat(sets), _)) => sets.into_iter().flat_map(|s| s.counters).collect(),
            other => panic!("Stat answered {other:?}"),
        }
    }
}

fn rc_param(qpn: u32, private: &[u8]) -> CmConnParam {
    CmConnParam {
        private_data: private.to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        qp_num: qpn,
        ..CmConnParam::default()
    }
}

fn conn_of(ev: &CmEventRecord) -> &CmConnParam {
    match &ev.param {
        CmEventParam::Conn(c) => c,
        other => panic!("event {} without param.conn: {other:?}", ev.event),
    }
}

fn localhost(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

#[test]
fn connect_accept_establish_disconnect_on_one_daemon() {
    let _s = serial();
    let Some(ns) = netns("a") else { return };
    let daemon = Daemon::start_with(Some(&ns), &SHORT_TIMERS);
    let mut cm = Cm::connect(&daemon);
    let mut ch = cm.channel();
    let listener = cm.listen(&ch, ps::TCP, 7471);
    let active = cm.id(&ch, ps::TCP);
    cm.resolve(&mut ch, active, localhost(7471));
    let info = match cm.ok(CmRequest::Query { id: active }) {
        ReplyBody::Cm(CmReply::Info(i)) => i,
        other => panic!("Query answered {other:?}"),
    };
    assert_eq!(info.device.as_deref(), Some("rxe0"));
    assert_eq!(info.num_paths, 1);
    let src = info.src.expect("bound source");
    assert_eq!(src.ip(), IpAddr::from(Ipv4Addr::LOCALHOST));
    assert!(src.port() >= 32768, "an ephemeral port: {src}");
    let path = info.path.expect("a path");
    assert_eq!(path.hop_limit, 64);
    assert_eq!(
        path.flow_label,
        (u32::from(src.port()) * 31 + 7471) & 0xf_ffff
    );

    // A QP created before connecting: INIT with no remote access.
    let (init, mask) = cm.qp_attr(active, qp_state::INIT);
    assert_eq!(init.qp_state, qp_state::INIT);
    assert_eq!(init.port_num, 1);
    assert_eq!(
        mask,
        qp_attr_mask::STATE
            | qp_attr_mask::PKEY_INDEX
            | qp_attr_mask::PORT
            | qp_attr_mask::ACCESS_FLAGS
    );

    cm.ok(CmRequest::Connect {
        id: active,
        param: rc_param(0x111, b"hello"),
    });
    let req = cm.wait(&mut ch, Duration::from_secs(5), "CONNECT_REQUEST", |e| {
        e.event == event::CONNECT_REQUEST
    });
    assert_eq!(req.listen_id, Some(listener));
    let passive = req.id;
    assert_ne!(passive, listener);
    let p = conn_of(&req);
    assert_eq!(p.qp_num, 0x111);
    assert_eq!(&p.private_data[..5], b"hello");
    assert_eq!((p.responder_resources, p.initiator_depth), (1, 1));
    let new = req.new_id.clone().expect("the new id's addresses");
    assert_eq!(new.device.as_deref(), Some("rxe0"));
    assert_eq!(new.src, Some(localhost(7471)));
    assert_eq!(new.dst, Some(src));

    let (rtr, _) = cm.qp_attr(passive, qp_state::RTR);
    assert_eq!(rtr.dest_qp_num, 0x111);
    let (passive_rts, _) = cm.qp_attr(passive, qp_state::RTS);
    cm.ok(CmRequest::Accept {
        id: passive,
        param: rc_param(0x222, b"world"),
    });
    let rep = cm.wait(&mut ch, Duration::from_secs(5), "CONNECT_RESPONSE", |e| {
        e.id == active
    });
    assert_eq!(
        (rep.event, rep.status),
        (event::CONNECT_RESPONSE, 0),
        "{rep:?}"
    );
    let p = conn_of(&rep);
    assert_eq!(p.qp_num, 0x222);
    assert_eq!(&p.private_data[..5], b"world");
    // What librdmacm does next: RTR and RTS from the daemon's attributes, then the RTU.
    let (rtr, mask) = cm.qp_attr(active, qp_state::RTR);
    assert_eq!(rtr.dest_qp_num, 0x222);
    assert_eq!(
        rtr.rq_psn, passive_rts.sq_psn,
        "the PSNs of the two sides agree"
    );
    assert_ne!(mask & qp_attr_mask::AV, 0);
    assert_eq!(rtr.ah_attr.is_global, 1);
    cm.ok(CmRequest::Establish { id: active });
    let est = cm.wait(&mut ch, Duration::from_secs(5), "ESTABLISHED", |e| {
        e.id == passive
    });
    assert_eq!((est.event, est.status), (event::ESTABLISHED, 0), "{est:?}");

    cm.ok(CmRequest::Disconnect { id: active });
    let ev = cm.wait(
        &mut ch,
        Duration::from_secs(5),
        "DISCONNECTED (passive)",
        |e| e.id == passive,
    );
    assert_eq!((ev.event, ev.status), (event::DISCONNECTED, 0), "{ev:?}");
    cm.ok(CmRequest::Disconnect { id: passive });
    let ev = cm.wait(
        &mut ch,
        Duration::from_secs(5),
        "DISCONNECTED (active)",
        |e| e.id == active,
    );
    assert_eq!((ev.event, ev.status), (event::DISCONNECTED, 0), "{ev:?}");
    for id in [active, passive] {
        let ev = cm.wait(&mut ch, Duration::from_secs(5), "TIMEWAIT_EXIT", |e| {
            e.id == id
        });
        assert_eq!(ev.event, event::TIMEWAIT_EXIT, "{ev:?}");
    }

    let counters = cm.counters();
    let get = |n: &str| {
        counters
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("counter {n} missing: {counters:?}"))
    };
    // REQ, REP, RTU, DREQ, DREP, each sent and received by the one device.
    assert!(get("cm_tx") >= 5, "{counters:?}");
    assert!(get("cm_rx") >= 5, "{counters:?}");
    assert_eq!(get("cm_rx_dropped"), 0, "{counters:?}");

    for id in [active, passive, listener] {
        cm.ok(CmRequest::DestroyId { id });
    }
    cm.ok(CmRequest::DestroyChannel { channel: ch.handle });
}

#[test]
fn connect_without_listener_is_rejected_and_reject_carries_private_data() {
    let _s = serial();
    let Some(ns) = netns("b") else { return };
    let daemon = Daemon::start_with(Some(&ns), &SHORT_TIMERS);
    let mut cm = Cm::connect(&daemon);
    let mut ch = cm.channel();

    // Nobody listens on 7999: the CM answers REJ "invalid service ID".
    let lonely = cm.id(&ch, ps::TCP);
    cm.resolve(&mut ch, lonely, localhost(7999));
    let started = Instant::now();
    cm.ok(CmRequest::Connect {
        id: lonely,
        param: rc_param(0x10, b""),
    });
    let ev = cm.wait(&mut ch, Duration::from_secs(2), "REJECTED", |e| {
        e.id == lonely
    });
    assert_eq!((ev.event, ev.status), (event::REJECTED, 8), "{ev:?}");
    assert!(started.elapsed() < Duration::from_secs(2));

    // The consumer rejects, with private data.
    let listener = cm.listen(&ch, ps::TCP, 7472);
    let active = cm.id(&ch, ps::TCP);
    cm.resolve(&mut ch, active, localhost(7472));
    cm.ok(CmRequest::Connect {
        id: active,
        param: rc_param(0x11, b"let me in"),
    });
    let req = cm.wait(&mut ch, Duration::from_secs(5), "CONNECT_REQUEST", |e| {
        e.event == event::CONNECT_REQUEST
    });
    assert_eq!(req.listen_id, Some(listener));
    cm.ok(CmRequest::Reject {
        id: req.id,
        private_data: b"go away".to_vec(),
    });
    let ev = cm.wait(&mut ch, Duration::from_secs(5), "REJECTED", |e| {
        e.id == active
    });
    assert_eq!((ev.event, ev.status), (event::REJECTED, 28), "{ev:?}");
    assert_eq!(&conn_of(&ev).private_data[..7], b"go away");
    // The rejected passive id has no connection left.
    assert_eq!(
        cm.call(CmRequest::Accept {
            id: req.id,
            param: rc_param(1, b"")
        }),
        Err(libc::EINVAL)
    );
}

#[test]
fn connect_before_the_server_listens_again_waits_for_its_listener() {
    let _s = serial();
    let Some(ns) = netns("l") else { return };
    let daemon = Daemon::start_with(Some(&ns), &SHORT_TIMERS);
    let mut cm = Cm::connect(&daemon);
    let mut ch = cm.channel();

    // perftest -R: the client's second REQ comes before the server listens again. The
    // passive side holds it 200 ms, then REJ 8; the active side sends it again for up to
    // a second (cm/rerequest.rs), and the listener 600 ms later gets it.
    let active = cm.id(&ch, ps::TCP);
    cm.resolve(&mut ch, active, localhost(7473));
    cm.ok(CmRequest::Connect {
        id: active,
        param: rc_param(0x12, b"again"),
    });
    std::thread::sleep(Duration::from_millis(600));
    let listener = cm.listen(&ch, ps::TCP, 7473);
    let req = cm.wait(&mut ch, Duration::from_secs(5), "CONNECT_REQUEST", |e| {
        e.event == event::CONNECT_REQUEST
    });
    assert_eq!(req.listen_id, Some(listener));
    assert_eq!(&conn_of(&req).private_data[..5], b"again");
    cm.ok(CmRequest::Accept {
        id: req.id,
        param: rc_param(0x13, b""),
    });
    let rep = cm.wait(&mut ch, Duration::from_secs(5), "CONNECT_RESPONSE", |e| {
        e.id == active
    });
    assert_eq!(
        (rep.event, rep.status),
        (event::CONNECT_RESPONSE, 0),
        "{rep:?}"
    );
    assert_eq!(conn_of(&rep).qp_num, 0x13);
}

#[test]
fn connect_to_a_peer_that_never_answers_is_unreachable() {
    let _s = serial();
    let Some(ns) = netns("c") else { return };
    let daemon = Daemon::start_with(Some(&ns), &SHORT_TIMERS);
    let mut cm = Cm::connect(&daemon);
    let mut ch = cm.channel();
    // 127.0.0.2 is this host's loopback too, but no CM (no UDP port 4791) is there.
    let id = cm.id(&ch, ps::TCP);
    cm.resolve(&mut ch, id, SocketAddr::from(([127, 0, 0, 2], 7471)));
    let started = Instant::now();
    cm.ok(CmRequest::Connect {
        id,
        param: rc_param(0x12, b""),
    });
    let ev = cm.wait(&mut ch, Duration::from_secs(10), "UNREACHABLE", |e| {
        e.id == id
    });
    assert_eq!(
        (ev.event, ev.status),
        (event::UNREACHABLE, -libc::ETIMEDOUT),
        "{ev:?}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1500),
        "given up before 3 tries: {took:?}"
    );
    let retries = cm
        .counters()
        .into_iter()
        .find(|(k, _)| k == "cm_tx_retries")
        .map(|(_, v)| v);
    assert_eq!(retries, Some(2), "two retransmissions of the REQ");
}

#[test]
fn ud_ids_resolve_the_peer_qp_through_sidr() {
    let _s = serial();
    let Some(ns) = netns("d") else { return };
    // The CMA's own timers: SIDR has no MRA, so the SIDR REQ waits for this test to
    // accept for as long as its retries last (with SHORT_TIMERS, 1.6 s: too short for a
    // loaded machine, where the active side once got UNREACHABLE, ETIMEDOUT).
    let daemon = Daemon::start_with(Some(&ns), &[]);
    let mut cm = Cm::connect(&daemon);
    let mut ch = cm.channel();
    let listener = cm.listen(&ch, ps::UDP, 7473);
    let active = cm.id(&ch, ps::UDP);
    cm.resolve(&mut ch, active, localhost(7473));
    let (rts, mask) = cm.qp_attr(active, qp_state::RTS);
    assert_eq!(rts.qp_state, qp_state::RTS);
    assert_ne!(mask & qp_attr_mask::SQ_PSN, 0);
    cm.ok(CmRequest::Connect {
        id: active,
        param: CmConnParam {
            private_data: b"ud?".to_vec(),
            ..CmConnParam::default()
        },
    });
    let req = cm.wait(&mut ch, Duration::from_secs(5), "CONNECT_REQUEST", |e| {
        e.event == event::CONNECT_REQUEST
    });
    assert_eq!(req.listen_id, Some(listener));
    match &req.param {
        CmEventParam::Ud { private_data, .. } => assert_eq!(&private_data[..3], b"ud?"),
        other => panic!("SIDR request without param.ud: {other:?}"),
    }
    cm.ok(CmRequest::Accept {
        id: req.id,
        param: CmConnParam {
            qp_num: 0x333,
            ..CmConnParam::default()
        },
    });
    let ev = cm.wait(&mut ch, Duration::from_secs(5), "ESTABLISHED", |e| {
        e.id == active
    });
    assert_eq!((ev.event, ev.status), (event::ESTABLISHED, 0), "{ev:?}");
    match ev.param {
        CmEventParam::Ud {
            ah_attr,
            qp_num,
            qkey,
            ..
        } => {
            assert_eq!(qp_num, 0x333);
            assert_eq!(qkey, 0x0123_4567, "RDMA_UDP_QKEY");
            assert_eq!(ah_attr.is_global, 1);
            assert_eq!(
                ah_attr.grh.dgid,
                Ipv4Addr::LOCALHOST.to_ipv6_mapped().octets()
            );
        }
        other => panic!("SIDR reply without param.ud: {other:?}"),
    }
}

#[test]
fn bad_cm_requests_get_the_kernels_errnos() {
    let _s = serial();
    let Some(ns) = netns("e") else { return };
    let daemon = Daemon::start_with(Some(&ns), &[]);
    let mut cm = Cm::connect(&daemon);
    let ch = cm.channel();
    let a = cm.id(&ch, ps::TCP);
    let b = cm.id(&ch, ps::TCP);
    cm.ok(CmRequest::BindAddr {
        id: a,
        addr: localhost(7480),
    });
    assert_eq!(
        cm.call(CmRequest::BindAddr {
            id: b,
            addr: localhost(7480)
        }),
        Err(libc::EADDRINUSE)
    );
    assert_eq!(
        cm.call(CmRequest::BindAddr {
            id: b,
            addr: SocketAddr::from(([192, 0, 2, 1], 7480))
        }),
        Err(libc::EADDRNOTAVAIL),
        "not an address of this host"
    );
    assert_eq!(
        cm.call(CmRequest::Listen { id: a, backlog: 1 }).map(|_| ()),
        Ok(())
    );
    assert_eq!(
        cm.call(CmRequest::Connect {
            id: b,
            param: rc_param(1, b"")
        }),
        Err(libc::EINVAL),
        "connect before the route is resolved"
    );
    assert_eq!(
        cm.call(CmRequest::GetEvent { channel: ch.handle }),
        Err(libc::EAGAIN)
    );
    assert_eq!(
        cm.call(CmRequest::DestroyChannel { channel: ch.handle }),
        Err(libc::EBUSY)
    );
    assert_eq!(
        cm.call(CmRequest::JoinMulticast {
            id: a,
            addr: SocketAddr::from(([239, 1, 1, 1], 0)),
            join_flags: 0
        }),
        Err(libc::EINVAL),
        "multicast on a listening RC id"
    );
    assert_eq!(
        cm.call(CmRequest::SetOption {
            id: b,
            level: 0,
            optname: 0,
            value: vec![0x20]
        })
        .map(|_| ()),
        Ok(()),
        "RDMA_OPTION_ID_TOS"
    );
    assert_eq!(
        cm.call(CmRequest::SetOption {
            id: b,
            level: 0,
            optname: 0,
            value: vec![0, 0]
        }),
        Err(libc::EINVAL)
    );
    // Another session's handles do not exist for this one.
    let mut other = Cm::connect(&daemon);
    assert_eq!(other.call(CmRequest::Query { id: a }), Err(libc::ENOENT));
    assert_eq!(
        other.call(CmRequest::DestroyId { id: a }),
        Err(libc::ENOENT)
    );
    // The session ends: its port is free again.
    drop(cm);
    let och = other.channel();
    let c = other.id(&och, ps::TCP);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match other.call(CmRequest::BindAddr {
            id: c,
            addr: localhost(7480),
        }) {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e, libc::EADDRINUSE);
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("port still bound after its session ended: errno {e}"),
        }
    }
}

/// One captured GSI packet: its UDP payload (BTH through ICRC).
struct Captured {
    ib: Vec<u8>,
}

/// The REQ (first ConnectRequest MAD) of a capture in `tests/corpora/rxe`.
fn captured_req(name: &str) -> Option<Captured> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpora/rxe");
    let file = std::fs::File::open(dir.join(name)).ok()?;
    let mut r = pcap_file::pcap::PcapReader::new(file).ok()?;
    while let Some(p) = r.next_packet() {
        let d = p.ok()?.data.into_owned();
        // Ethernet, IPv4 (20 octets), UDP to 4791.
        if d.len() < 42 || d[12..14] != [8, 0] || d[23] != 17 || d[14] != 0x45 {
            continue;
        }
        let udp = &d[34..];
        if u16::from_be_bytes([udp[2], udp[3]]) != 4791 {
            continue;
        }
        let ulen = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
        let Some(ib) = udp.get(8..ulen) else {
            continue;
        };
        // BTH dest QP 1, then DETH, then the MAD.
        if ib.len() < 20 + 256 || ib[5..8] != [0, 0, 1] {
            continue;
        }
        if let Ok(m) = CmMad::parse(&ib[20..]) {
            if matches!(m.message, CmMessage::Req(_)) {
                return Some(Captured { ib: ib.to_vec() });
            }
        }
    }
    None
}

/// The MAD of the next GSI packet the daemon at `daemon_ip` sent to `peer` (checked:
/// from port 4791, a valid ICRC, to QP1), or `None` when nothing came within the socket's
/// read timeout.
fn recv_mad(peer: &UdpSocket, peer_ip: Ipv4Addr, daemon_ip: Ipv4Addr) -> Option<Vec<u8>> {
    let mut buf = [0u8; 2048];
    let (len, from) = peer.recv_from(&mut buf).ok()?;
    let ib = &buf[..len];
    assert_eq!(from, SocketAddr::from((daemon_ip, 4791)));
    assert!(
        !matches!(
            icrc::verify_udp4_any_id(daemon_ip, peer_ip, 4791, 4791, ib),
            icrc::IcrcCheck::Invalid
        ),
        "the daemon's GSI packet has a bad ICRC"
    );
    assert_eq!(ib[5..8], [0, 0, 1], "to QP1");
    Some(ib[20..].to_vec())
}

#[test]
fn a_req_for_the_rd_transport_gets_rej_9_counted() {
    // rxe's captured REQ, rewritten to ask for RD (transport service type 2): the CM
    // answers REJ "invalid transport service type", counts it, and no listener hears of it.
    let _s = serial();
    let Some(ns) = netns("r") else { return };
    let daemon = Daemon::start_with(Some(&ns), &[]);
    let mut cm = Cm::connect(&daemon);
    let mut ch = cm.channel();
    let peer = udp_in(&ns, SocketAddr::from(([127, 0, 0, 2], 4791)));
    let (peer_ip, daemon_ip) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::LOCALHOST);
    let mut req = captured_req("rdma_cm.pcap").expect("a REQ in rdma_cm.pcap");
    let (comm_id, service_id, mad) = {
        let m = CmMad::parse(&req.ib[20..]).expect("checked when read");
        let CmMessage::Req(r) = m.message else {
            unreachable!("checked when read");
        };
        let mut mad = vec![0u8; 256];
        CmMad {
            header: m.header,
            message: CmMessage::Req(wire::cm::messages::Req {
                transport_service_type: 2,
                ..r
            }),
        }
        .emit(&mut mad);
        (r.local_comm_id, r.service_id, mad)
    };
    let (_, port) = wire::cm::ServiceId(service_id)
        .as_rdma_ip()
        .expect("an RDMA CM service ID");
    let listener = cm.listen(&ch, ps::TCP, port);
    req.ib[20..276].copy_from_slice(&mad);
    let n = req.ib.len();
    let crc = icrc::for_udp4(peer_ip, daemon_ip, 4791, 4791, &req.ib[..n - 4]);
    wire::roce::packet::Packet::new_unchecked(&mut req.ib[..]).set_icrc(crc);
    peer.send_to(&req.ib, SocketAddr::from((daemon_ip, 4791)))
        .expect("send the REQ");
    let deadline = Instant::now() + Duration::from_secs(5);
    let rej = loop {
        assert!(Instant::now() < deadline, "no REJ came back");
        let Some(mad) = recv_mad(&peer, peer_ip, daemon_ip) else {
            continue;
        };
        if let CmMessage::Rej(j) = CmMad::parse(&mad).expect("a CM MAD").message {
            break (j.remote_comm_id, j.reason, j.message_rejected);
        }
    };
    assert_eq!(rej, (comm_id, 9, 0));
    let counters = cm.counters();
    assert_eq!(count(&counters, "cm_rx_bad_transport"), Some(1));
    assert_eq!(count(&counters, "cm_connections"), Some(0));
    // The listener got nothing: a connect of ours still reaches it first.
    let id = cm.id(&ch, ps::TCP);
    cm.resolve(&mut ch, id, localhost(port));
    cm.ok(CmRequest::Connect {
        id,
        param: rc_param(0x50, b""),
    });
    let ev = cm.wait(&mut ch, Duration::from_secs(5), "CONNECT_REQUEST", |e| {
        e.listen_id == Some(listener)
    });
    assert_eq!(ev.event, event::CONNECT_REQUEST);
    assert_eq!(
        conn_of(&ev).qp_num,
        0x50,
        "the first request is ours: {ev:?}"
    );
}

#[test]
fn captured_rxe_reqs_are_answered_with_a_rep() {
    let _s = serial();
    let Some(ns) = netns("f") else { return };
    let daemon = Daemon::start_with(Some(&ns), &[]);
    let mut cm = Cm::connect(&daemon);
    let mut ch = cm.channel();
    let peer = udp_in(&ns, SocketAddr::from(([127, 0, 0, 2], 4791)));
    let (peer_ip, daemon_ip) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::LOCALHOST);
    for (i, name) in ["rdma_cm.pcap", "rping.pcap"].into_iter().enumerate() {
        let Some(mut req) = captured_req(name) else {
            panic!("no REQ in {name}");
        };
        let (comm_id, service_id) = match CmMad::parse(&req.ib[20..]).map(|m| m.message) {
            Ok(CmMessage::Req(r)) => (r.local_comm_id, r.service_id),
            _ => unreachable!("checked when read"),
        };
        let (space, port) = wire::cm::ServiceId(service_id)
            .as_rdma_ip()
            .expect("an RDMA CM service ID");
        assert_eq!(space, wire::cm::PortSpace::Tcp, "{name}");
        let listener = cm.listen(&ch, ps::TCP, port);
        // Readdressed to the daemon: the ICRC covers the addresses and ports.
        let n = req.ib.len();
        let crc = icrc::for_udp4(peer_ip, daemon_ip, 4791, 4791, &req.ib[..n - 4]);
        wire::roce::packet::Packet::new_unchecked(&mut req.ib[..]).set_icrc(crc);
        peer.send_to(&req.ib, SocketAddr::from((daemon_ip, 4791)))
            .expect("send the REQ");
        let ev = cm.wait(&mut ch, Duration::from_secs(5), "CONNECT_REQUEST", |e| {
            e.event == event::CONNECT_REQUEST && e.listen_id == Some(listener)
        });
        cm.ok(CmRequest::Accept {
            id: ev.id,
            param: rc_param(0x400 + i as u32, b""),
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let rep = loop {
            assert!(Instant::now() < deadline, "{name}: no REP came back");
            let Some(mad) = recv_mad(&peer, peer_ip, daemon_ip) else {
                continue;
            };
            let m = CmMad::parse(&mad).expect("a CM MAD");
            if let CmMessage::Rep(r) = m.message {
                break (r.remote_comm_id, r.local_qpn.0);
            }
        };
        assert_eq!(rep.0, comm_id, "{name}: the REP answers the captured REQ");
        assert_eq!(rep.1, 0x400 + i as u32, "{name}: the REP carries our QP");
        cm.ok(CmRequest::DestroyId { id: ev.id });
        cm.ok(CmRequest::DestroyId { id: listener });
    }
}

#[test]
fn ipv6_requests_reach_a_wildcard_listener() {
    let _s = serial();
    let Some(ns) = netns("g") else { return };
    let daemon = Daemon::start_with(Some(&ns), &SHORT_TIMERS);
    let mut cm = Cm::connect(&daemon);
    let mut ch = cm.channel();
    let listener = cm.id(&ch, ps::TCP);
    cm.ok(CmRequest::BindAddr {
        id: listener,
        addr: "[::]:7476".parse().expect("address"),
    });
    cm.ok(CmRequest::Listen {
        id: listener,
        backlog: 1,
    });
    let active = cm.id(&ch, ps::TCP);
    cm.resolve(&mut ch, active, "[::1]:7476".parse().expect("address"));
    cm.ok(CmRequest::Connect {
        id: active,
        param: rc_param(0x13, b"v6"),
    });
    let req = cm.wait(&mut ch, Duration::from_secs(5), "CONNECT_REQUEST", |e| {
        e.event == event::CONNECT_REQUEST
    });
    assert_eq!(req.listen_id, Some(listener));
    let new = req.new_id.clone().expect("the new id's addresses");
    assert_eq!(new.src, Some("[::1]:7476".parse().expect("address")));
    assert_eq!(new.sgid, std::net::Ipv6Addr::LOCALHOST.octets());
    cm.ok(CmRequest::Reject {
        id: req.id,
        private_data: Vec::new(),
    });
    let ev = cm.wait(&mut ch, Duration::from_secs(5), "REJECTED", |e| {
        e.id == active
    });
    assert_eq!((ev.event, ev.status), (event::REJECTED, 28), "{ev:?}");
}

#[test]
fn two_daemons_connect_across_a_veth() {
    let _s = serial();
    let Some(hosts) = two_hosts() else { return };
    let args = ["--netdev", hosts.iface, "--cm-response-timeout", "4"];
    let da = Daemon::start_with(Some(&hosts.a), &args);
    let db = Daemon::start_with(Some(&hosts.b), &args);
    let (mut a, mut b) = (Cm::connect(&da), Cm::connect(&db));
    let (mut cha, mut chb) = (a.channel(), b.channel());
    let addr_a: Ipv4Addr = hosts.addr_a.parse().expect("address");
    let listener = a.listen(&cha, ps::TCP, 7477);
    let active = b.id(&chb, ps::TCP);
    b.resolve(&mut chb, active, SocketAddr::from((addr_a, 7477)));
    b.ok(CmRequest::Connect {
        id: active,
        param: rc_param(0x21, b"from b"),
    });
    let req = a.wait(&mut cha, Duration::from_secs(5), "CONNECT_REQUEST", |e| {
        e.event == event::CONNECT_REQUEST
    });
    assert_eq!(req.listen_id, Some(listener));
    assert_eq!(&conn_of(&req).private_data[..6], b"from b");
    let new = req.new_id.clone().expect("the new id's addresses");
    assert_eq!(new.src, Some(SocketAddr::from((addr_a, 7477))));
    assert_eq!(
        new.dst.map(|d| d.ip()),
        Some(IpAddr::V4(hosts.addr_b.parse().expect("address")))
    );
    a.ok(CmRequest::Accept {
        id: req.id,
        param: rc_param(0x31, b"from a"),
    });
    let rep = b.wait(&mut chb, Duration::from_secs(5), "CONNECT_RESPONSE", |e| {
        e.id == active
    });
    assert_eq!(rep.event, event::CONNECT_RESPONSE, "{rep:?}");
    assert_eq!(conn_of(&rep).qp_num, 0x31);
    b.ok(CmRequest::Establish { id: active });
    let est = a.wait(&mut cha, Duration::from_secs(5), "ESTABLISHED", |e| {
        e.id == req.id
    });
    assert_eq!(est.event, event::ESTABLISHED, "{est:?}");
    a.ok(CmRequest::Disconnect { id: req.id });
    let ev = b.wait(&mut chb, Duration::from_secs(5), "DISCONNECTED", |e| {
        e.id == active
    });
    assert_eq!(ev.event, event::DISCONNECTED, "{ev:?}");
    b.ok(CmRequest::Disconnect { id: active });
    let ev = a.wait(&mut cha, Duration::from_secs(5), "DISCONNECTED", |e| {
        e.id == req.id
    });
    assert_eq!((ev.event, ev.status), (event::DISCONNECTED, 0), "{ev:?}");
}

/// The value of counter `name` in `counters`.
fn count(counters: &[(String, u64)], name: &str) -> Option<u64> {
    counters.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
}

#[test]
fn xrc_ids_connect_over_ps_ib_and_other_qp_types_are_rejected() {
    let _s = serial();
    let Some(ns) = netns("x") else { return };
    let daemon = Daemon::start_with(Some(&ns), &SHORT_TIMERS);
    let mut cm = Cm::connect(&daemon);
    let mut ch = cm.channel();
    let xrc_listener = cm.typed_id(&ch, ps::IB, qp_type::XRC_RECV);
    cm.listen_on(xrc_listener, 7481);

    // An XRC initiator's id (rdma_xclient -c x): REQ, CONNECT_REQUEST on the listener
    // with the initiator's QPN, REP with the target's QPN and the SRQ number.
    let ini = cm.typed_id(&ch, ps::IB, qp_type::XRC_SEND);
    cm.resolve(&mut ch, ini, localhost(7481));
    cm.ok(CmRequest::Connect {
        id: ini,
        param: rc_param(0x21, b"xrc"),
    });
    let req = cm.wait(&mut ch, Duration::from_secs(5), "CONNECT_REQUEST", |e| {
        e.event == event::CONNECT_REQUEST
    });
    assert_eq!(req.listen_id, Some(xrc_listener));
    assert_eq!(conn_of(&req).qp_num, 0x21);
    assert_eq!(&conn_of(&req).private_data[..3], b"xrc");
    let tgt = req.id;
    // The target's half: responder attributes at RTR, only SQ_PSN and TIMEOUT at RTS.
    let (rtr, mask) = cm.qp_attr(tgt, qp_state::RTR);
    assert_eq!(rtr.dest_qp_num, 0x21);
    assert_ne!(mask & qp_attr_mask::MAX_DEST_RD_ATOMIC, 0);
    let (_, mask) = cm.qp_attr(tgt, qp_state::RTS);
    assert_eq!(
        mask,
        qp_attr_mask::STATE | qp_attr_mask::SQ_PSN | qp_attr_mask::TIMEOUT
    );
    cm.ok(CmRequest::Accept {
        id: tgt,
        param: rc_param(0x31, &0x00ab_cdefu32.to_be_bytes()),
    });
    let rep = cm.wait(&mut ch, Duration::from_secs(5), "CONNECT_RESPONSE", |e| {
        e.id == ini
    });
    assert_eq!(
        (rep.event, rep.status),
        (event::CONNECT_RESPONSE, 0),
        "{rep:?}"
    );
    // The target's QPN came in the REP's EE context number; the SRQ number in its
    // private data.
    assert_eq!(conn_of(&rep).qp_num, 0x31);
    assert_eq!(&conn_of(&rep).private_data[..4], &[0x00, 0xab, 0xcd, 0xef]);
    let (rtr, mask) = cm.qp_attr(ini, qp_state::RTR);
    assert_eq!(rtr.dest_qp_num, 0x31);
    assert_eq!(mask & qp_attr_mask::MAX_DEST_RD_ATOMIC, 0);
    let (_, mask) = cm.qp_attr(ini, qp_state::RTS);
    assert_ne!(mask & qp_attr_mask::RETRY_CNT, 0);
    cm.ok(CmRequest::Establish { id: ini });
    let ev = cm.wait(&mut ch, Duration::from_secs(5), "ESTABLISHED", |e| {
        e.id == tgt
    });
    assert_eq!(ev.event, event::ESTABLISHED, "{ev:?}");

    // An RC REQ at the XRC listener, and an XRC REQ at an RC listener of RDMA_PS_IB:
    // refused as the Linux CMA refuses them (cma_check_req_qp_type), with a consumer
    // REJ, and counted; the listeners see nothing.
    let rc_listener = cm.typed_id(&ch, ps::IB, qp_type::RC);
    cm.listen_on(rc_listener, 7482);
    for (n, (qp, port)) in [(qp_type::RC, 7481), (qp_type::XRC_SEND, 7482)]
        .into_iter()
        .enumerate()
    {
        let id = cm.typed_id(&ch, ps::IB, qp);
        cm.resolve(&mut ch, id, localhost(port));
        cm.ok(CmRequest::Connect {
            id,
            param: rc_param(0x40 + n as u32, b""),
        });
        let ev = cm.wait(&mut ch, Duration::from_secs(5), "REJECTED", |e| e.id == id);
        assert_eq!((ev.event, ev.status), (event::REJECTED, 28), "{ev:?}");
        let counters = cm.counters();
        assert_eq!(
            count(&counters, "cm_rx_qp_type_mismatch"),
            Some(n as u64 + 1)
        );
        assert_eq!(count(&counters, "cm_rx_bad_transport"), Some(0));
    }
    assert!(
        ch.stash.iter().all(|e| e.event != event::CONNECT_REQUEST),
        "{:#?}",
        ch.stash
    );
}
