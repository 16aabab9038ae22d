//! A daemon serving many users (`emulator/src/daemon/users.rs`): per-user limits over all of
//! a user's sessions, and clients that claim another process's pid or memory. (Several
//! real users, privileged commands and hostile traffic: `tests/tests/multi_user.rs`.)

mod common;

use common::side::{Side, BUF};
use common::*;
use emulator::client::Client;
use emulator::daemon::sessions::users::UserLimits;
use std::os::fd::AsRawFd;
use std::time::Duration;
use wire::client::proto::Handle;
use wire::client::verbs::{access, qp_type};
use wire::client::{
    QpCap, QpInitAttr, Reply, ReplyBody, Request, RequestBody, MAX_MESSAGE_LEN, PROTOCOL_VERSION,
};

fn counter(c: &mut Client, name: &str) -> u64 {
    let body = c
        .call(
            RequestBody::Stat {
                device: Some("rxe0".into()),
                qpn: None,
            },
            &[],
        )
        .expect("stat")
        .0;
    let ReplyBody::Stat(sets) = body else {
        panic!("{body:?}")
    };
    sets[0]
        .counters
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

fn reply_errno<T: std::fmt::Debug>(r: Result<T, emulator::client::CallError>) -> Result<T, i32> {
    match r {
        Ok(v) => Ok(v),
        Err(emulator::client::CallError::Errno(e)) => Err(e),
        Err(e) => panic!("transport error {e}"),
    }
}

fn create_cq(c: &mut Client, ctx: Handle) -> Result<Handle, i32> {
    let req = RequestBody::CreateCq {
        ctx,
        cqe: 16,
        channel: None,
        comp_vector: 0,
        timestamps: false,
    };
    match reply_errno(c.call(req, &[]))?.0 {
        ReplyBody::Cq { handle, .. } => Ok(handle),
        other => panic!("{other:?}"),
    }
}

fn create_qp(c: &mut Client, pd: Handle, cq: Handle) -> Result<Handle, i32> {
    let init = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: qp_type::RC,
        sq_sig_all: false,
    };
    match reply_errno(c.call(RequestBody::CreateQp { pd, init }, &[]))?.0 {
        ReplyBody::Qp { handle, .. } => Ok(handle),
        other => panic!("{other:?}"),
    }
}

fn reg_mr(c: &mut Client, pd: Handle, buf: &[u8]) -> Result<Handle, i32> {
    let req = RequestBody::RegMr {
        pd,
        addr: buf.as_ptr() as u64,
        length: buf.len() as u64,
        iova: buf.as_ptr() as u64,
        access: access::LOCAL_WRITE,
        shared: Vec::new(),
    };
    match reply_errno(c.call(req, &[]))?.0 {
        ReplyBody::Mr { handle, .. } => Ok(handle),
        other => panic!("{other:?}"),
    }
}

fn alloc_pd(c: &mut Client, ctx: Handle) -> Handle {
    match c.call(RequestBody::AllocPd { ctx }, &[]).expect("pd").0 {
        ReplyBody::Pd { handle } => handle,
        other => panic!("{other:?}"),
    }
}

#[test]
fn per_user_limits_hold_over_every_session_of_the_user() {
    let d = TestDaemon::start_configured(emulator::daemon::default_factory(), |cfg| {
        cfg.user_limits = UserLimits {
            max_qps: 1,
            max_cqs: 2,
            max_mrs: 2,
            max_mr_bytes: (BUF + 8192) as u64,
        };
    });
    // One session takes an MR of BUF bytes, a CQ and the one QP.
    let first = Side::build_at(&d.socket, qp_type::RC, false, false);
    // A second session of the same user shares what is left.
    let mut c = d.connect();
    let ctx = open_device(&mut c).handle;
    let pd = alloc_pd(&mut c, ctx);
    let cq = create_cq(&mut c, ctx).expect("the second CQ fits");
    assert_eq!(create_cq(&mut c, ctx), Err(libc::EAGAIN), "third CQ");
    assert_eq!(create_qp(&mut c, pd, cq), Err(libc::EAGAIN), "second QP");
    let small = vec![1u8; 8192];
    let mr = reg_mr(&mut c, pd, &small).expect("8 KiB more fits");
    let more = vec![2u8; 4096];
    assert_eq!(reg_mr(&mut c, pd, &more), Err(libc::EAGAIN), "third MR");
    c.call(RequestBody::DeregMr { mr }, &[]).expect("dereg");
    let big = vec![3u8; 8193];
    assert_eq!(
        reg_mr(&mut c, pd, &big),
        Err(libc::ENOMEM),
        "one byte too many"
    );
    let mr = reg_mr(&mut c, pd, &small).expect("what was given back is there again");
    assert_eq!(counter(&mut c, "user_limit_refusals"), 4);
    // The first session goes: its QP, CQ and MR are the user's again.
    drop(first);
    c.call(RequestBody::DeregMr { mr }, &[]).expect("dereg");
    let qp = wait_for(Duration::from_secs(10), || create_qp(&mut c, pd, cq).ok());
    assert!(qp.is_some(), "the QP of a closed session is given back");
    create_cq(&mut c, ctx).expect("and its CQ");
    reg_mr(&mut c, pd, &big).expect("and its bytes");
}

/// Sends one request on a raw connection and returns the daemon's answer.
fn raw_call(sock: &std::os::fd::OwnedFd, seq: u64, body: RequestBody) -> Result<ReplyBody, i32> {
    let bytes = Request { seq, body }.encode().expect("encode");
    emulator::daemon::sys::send_msg(sock.as_raw_fd(), &bytes, &[]).expect("send");
    let mut buf = vec![0u8; MAX_MESSAGE_LEN];
    let got = wait_for(Duration::from_secs(10), || {
        emulator::daemon::sys::recv_msg(sock.as_raw_fd(), &mut buf)
            .expect("recv")
            .map(|g| g.len)
    })
    .expect("a reply");
    let reply = Reply::decode(&buf[..got]).expect("reply");
    assert_eq!(reply.seq, seq);
    reply.result
}

#[test]
fn hello_naming_another_pid_is_refused() {
    let d = TestDaemon::start();
    let sock = emulator::daemon::sys::seqpacket_connect(&d.socket).expect("connect");
    let hello = |pid| RequestBody::Hello {
        version: PROTOCOL_VERSION,
        pid,
    };
    assert_eq!(raw_call(&sock, 1, hello(1)).err(), Some(libc::EPERM));
    let parent = std::os::unix::process::parent_id();
    assert_eq!(raw_call(&sock, 2, hello(parent)).err(), Some(libc::EPERM));
    assert!(
        raw_call(&sock, 3, hello(std::process::id())).is_ok(),
        "its own pid is accepted on the same connection"
    );
    let mut c = d.connect();
    assert_eq!(counter(&mut c, "refused_credentials"), 2);
}

#[test]
fn memory_of_another_process_is_refused() {
    let d = TestDaemon::start();
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("sleep");
    // A child of ours: the kernel lets us open its memory (same user, and Yama's
    // ptrace_scope 1 allows descendants), but it is not the client's own.
    let other = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{}/mem", child.id()));
    let mut c = d.connect();
    match other {
        Ok(mem) => {
            let r = c.call(
                RequestBody::OpenDevice {
                    name: "rxe0".into(),
                },
                &[mem.as_raw_fd()],
            );
            assert_eq!(errno(r), libc::EPERM);
            assert_eq!(counter(&mut c, "refused_credentials"), 1);
        }
        Err(e) => eprintln!("cannot open a child's memory here ({e}); that part is skipped"),
    }
    let _ = child.kill();
    let _ = child.wait();
    // Its own memory opens the device on the same session.
    open_device(&mut c);
}

#[test]
fn ud_send_with_an_ah_of_another_context_fails() {
    use common::side::{pair, wqe};
    use wire::client::slot::Sge;
    use wire::client::verbs::{wc_status, wr_opcode};
    use wire::client::{AhAttr, GlobalRoute};
    let d = TestDaemon::start();
    let (mut a, b) = pair(&d, qp_type::UD, false);
    // The same session, a second context on the same device: its AH ids are the same
    // core's, so without the check its AH would stand in for one of A's first context.
    let other = open_device(&mut a.c).handle;
    let pd = alloc_pd(&mut a.c, other);
    let attr = AhAttr {
        grh: GlobalRoute {
            dgid: b.gid,
            hop_limit: 64,
            ..GlobalRoute::default()
        },
        is_global: 1,
        port_num: 1,
        ..AhAttr::default()
    };
    let ReplyBody::Ah { handle: ah } =
        a.c.call(RequestBody::CreateAh { pd, attr }, &[])
            .expect("an AH in the second context")
            .0
    else {
        panic!()
    };
    b.post_recv(1, 0, 40 + 64);
    let sge = [Sge {
        addr: a.addr(0),
        length: 64,
        lkey: a.lkey,
    }];
    let mut s = wqe(2, wr_opcode::SEND, &sge);
    s.ah = ah.0;
    s.remote_qpn = b.qpn;
    s.remote_qkey = 0x1111_1111;
    a.post_send(s);
    assert_eq!(a.poll().status, wc_status::LOC_QP_OP_ERR);
}

#[test]
fn rdma_cm_may_not_name_the_qp_of_another_session() {
    use wire::client::cm::{CmConnParam, CmReply, CmRequest};
    let d = TestDaemon::start();
    let victim = Side::build_at(&d.socket, qp_type::RC, false, false);
    let mut own = Side::build_at(&d.socket, qp_type::RC, false, false);
    let (_r, w) = emulator::daemon::sys::pipe().expect("pipe");
    let cm = |c: &mut Client, req: CmRequest, fds: &[std::os::fd::RawFd]| match c
        .call(RequestBody::Cm(req), fds)
        .map(|(b, _)| b)
    {
        Ok(ReplyBody::Cm(reply)) => Ok(reply),
        Ok(other) => panic!("{other:?}"),
        Err(emulator::client::CallError::Errno(e)) => Err(e),
        Err(e) => panic!("{e}"),
    };
    let Ok(CmReply::Channel { handle: channel }) =
        cm(&mut own.c, CmRequest::CreateChannel, &[w.as_raw_fd()])
    else {
        panic!("channel")
    };
    let Ok(CmReply::Id { handle: id }) = cm(
        &mut own.c,
        CmRequest::CreateId {
            channel,
            ps: 0x0106, // RDMA_PS_TCP
            qp_type: qp_type::RC,
        },
        &[],
    ) else {
        panic!("id")
    };
    let bound = cm(
        &mut own.c,
        CmRequest::BindAddr {
            id,
            addr: std::net::SocketAddr::new(d.addr, 0),
        },
        &[],
    );
    assert!(
        matches!(bound, Ok(CmReply::Info(ref i)) if i.device.as_deref() == Some("rxe0")),
        "{bound:?}"
    );
    let connect = |qp_num| CmRequest::Connect {
        id,
        param: CmConnParam {
            qp_num,
            ..CmConnParam::default()
        },
    };
    assert_eq!(cm(&mut own.c, connect(victim.qpn), &[]), Err(libc::EINVAL));
    assert_eq!(counter(&mut own.c, "refused_credentials"), 1);
    // Its own QP passes the check (and the CM then wants a resolved route: EINVAL).
    let _ = cm(&mut own.c, connect(own.qpn), &[]);
    assert_eq!(counter(&mut own.c, "refused_credentials"), 1);
}

#[test]
fn the_configuration_names_the_admin_group_and_the_limits() {
    use emulator::daemon::sessions::users::Group;
    use emulator::daemon::Config;
    let cfg = Config::from_toml("admin_group = 27\n[user_limits]\nmax_qps = 3\n").unwrap();
    assert_eq!(cfg.admin_group, Some(27));
    assert_eq!(cfg.user_limits.max_qps, 3);
    assert_eq!(cfg.user_limits.max_cqs, UserLimits::default().max_cqs);
    let by_name = Config::from_toml("admin_group = \"root\"").unwrap();
    assert_eq!(by_name.admin_group, Some(0));
    assert!(Config::from_toml("admin_group = \"no-such-group-here\"").is_err());
    assert!(Config::from_toml("[user_limits]\nmax_qp = 3\n").is_err());
    assert_eq!(Group::parse("61010"), Group::Id(61010));
    assert_eq!(Config::default().admin_group, None);
}
