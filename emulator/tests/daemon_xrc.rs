//! XRC through the daemon's control socket: domains shared by file between sessions with
//! the kernel's `O_CREAT`/`O_EXCL` rules, XRC SRQs with their numbers, target QPs, the
//! last close waiting for the domain's objects, and siw's refusal.

mod common;

use common::*;
use emulator::client::Client;
use emulator::daemon::devices::nic::Nic;
use std::os::fd::AsRawFd;
use wire::client::proto::Handle;
use wire::client::verbs::qp_type;
use wire::client::xrc::{XrcReply, XrcRequest};
use wire::client::{QpCap, QpInitAttr, ReplyBody, RequestBody, SrqAttr};

/// `Xrc(Open)` on `file` (or a private domain): the domain handle or the errno.
fn open_xrcd(
    c: &mut Client,
    ctx: Handle,
    file: Option<&std::fs::File>,
    oflags: i32,
) -> Result<Handle, i32> {
    let fds: Vec<i32> = file.iter().map(|f| f.as_raw_fd()).collect();
    let req = XrcRequest::Open {
        ctx,
        file: file.is_some(),
        oflags: oflags as u32,
    };
    match c.call(RequestBody::Xrc(req), &fds) {
        Ok((ReplyBody::Xrc(XrcReply::Xrcd { handle }), _)) => Ok(handle),
        Ok((other, _)) => panic!("{other:?}"),
        Err(e) => Err(errno::<()>(Err(e))),
    }
}

fn close_xrcd(c: &mut Client, xrcd: Handle) -> Result<(), i32> {
    match c.call(RequestBody::Xrc(XrcRequest::Close { xrcd }), &[]) {
        Ok(_) => Ok(()),
        Err(e) => Err(errno::<()>(Err(e))),
    }
}

fn pd_and_cq(c: &mut Client, ctx: Handle) -> (Handle, Handle) {
    let ReplyBody::Pd { handle: pd } = c.call(RequestBody::AllocPd { ctx }, &[]).unwrap().0 else {
        panic!("pd")
    };
    let req = RequestBody::CreateCq {
        ctx,
        cqe: 16,
        channel: None,
        comp_vector: 0,
        timestamps: false,
    };
    let ReplyBody::Cq { handle: cq, .. } = c.call(req, &[]).unwrap().0 else {
        panic!("cq")
    };
    (pd, cq)
}

#[test]
fn xrc_domains_are_shared_by_file_and_the_last_close_waits_for_their_objects() {
    let d = TestDaemon::start();
    let dir = std::env::temp_dir().join(format!("rdma-emu-xrc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = std::fs::File::create(dir.join("domain")).unwrap();
    let fresh = std::fs::File::create(dir.join("fresh")).unwrap();
    let (mut a, mut b) = (d.connect(), d.connect());
    let (ca, cb) = (open_device(&mut a), open_device(&mut b));
    // A file with no domain needs O_CREAT (EAGAIN, as uverbs); O_EXCL refuses one that
    // has a domain; a domain without a file is private.
    assert_eq!(
        open_xrcd(&mut a, ca.handle, Some(&fresh), 0),
        Err(libc::EAGAIN)
    );
    let xa = open_xrcd(&mut a, ca.handle, Some(&file), libc::O_CREAT).unwrap();
    let xb = open_xrcd(&mut b, cb.handle, Some(&file), 0).expect("shared by the file");
    let excl = libc::O_CREAT | libc::O_EXCL;
    assert_eq!(
        open_xrcd(&mut b, cb.handle, Some(&file), excl),
        Err(libc::EINVAL)
    );
    let private = open_xrcd(&mut b, cb.handle, None, 0).unwrap();
    // A's XRC SRQ (with its number) and target QP in the domain.
    let (pd, cq) = pd_and_cq(&mut a, ca.handle);
    let attr = SrqAttr {
        max_wr: 8,
        max_sge: 1,
        srq_limit: 0,
    };
    let req = XrcRequest::CreateSrq {
        pd,
        xrcd: xa,
        cq,
        attr,
    };
    let (body, fds) = a.call(RequestBody::Xrc(req), &[]).unwrap();
    let ReplyBody::Xrc(XrcReply::Srq { srqn, ring, .. }) = body else {
        panic!("{body:?}")
    };
    assert!(srqn > 0 && srqn < 1 << 24 && fds.len() == 1 && ring.entries >= 8);
    let tgt = RequestBody::Xrc(XrcRequest::CreateTgtQp { xrcd: xa });
    let (body, fds) = a.call(tgt, &[]).unwrap();
    let ReplyBody::Qp { rq, qpn, .. } = body else {
        panic!("{body:?}")
    };
    assert!(rq.is_none() && qpn > 0 && fds.len() == 1);
    // Another session's domain handle is not this session's.
    let foreign = RequestBody::Xrc(XrcRequest::CreateTgtQp { xrcd: xb });
    assert_eq!(errno(a.call(foreign, &[])), libc::ENOENT);
    // An initiator is a CreateQp without a receive queue.
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
        qp_type: qp_type::XRC_SEND,
        sq_sig_all: false,
    };
    let body = a.call(RequestBody::CreateQp { pd, init }, &[]).unwrap().0;
    let ReplyBody::Qp { rq, cap, .. } = body else {
        panic!("{body:?}")
    };
    assert!(rq.is_none() && cap.max_recv_wr == 0);
    // A closes its open while B holds one; B's is then the last, and the SRQ and target
    // QP are still in the domain.
    close_xrcd(&mut a, xa).unwrap();
    assert_eq!(close_xrcd(&mut a, xa), Err(libc::ENOENT), "the handle went");
    assert_eq!(close_xrcd(&mut b, xb), Err(libc::EBUSY));
    close_xrcd(&mut b, private).unwrap();
    // A's session ends: its objects go, and with them what kept the domain busy.
    drop(a);
    let closed = wait_for(std::time::Duration::from_secs(5), || {
        close_xrcd(&mut b, xb).ok()
    });
    assert!(closed.is_some(), "B's last close never succeeded");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn siw_devices_refuse_xrc_as_the_kernels_siw() {
    let mut nic =
        emulator::daemon::siw::SiwNic::new("siw_xrc", &["127.0.0.1".parse().unwrap()], 4096, 1)
            .expect("siw device");
    assert_eq!(nic.open_xrcd(1, None), Err(libc::EOPNOTSUPP));
    assert_eq!(nic.create_xrc_tgt_qp(1, 1), Err(libc::EOPNOTSUPP));
    assert!(!nic.xrcd_exists(1));
    let ini = emulator::daemon::devices::nic::QpCreate {
        pd: 1,
        send_cq: 1,
        recv_cq: 1,
        srq: None,
        cap: QpCap::default(),
        qp_type: qp_type::XRC_SEND,
        sq_sig_all: false,
    };
    assert_eq!(nic.create_qp(1, &ini).map(|_| ()), Err(libc::EOPNOTSUPP));
}
