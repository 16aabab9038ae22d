//! `ibv_resize_cq` and `ibv_rereg_mr` through the control protocol, no shim: the new CQ
//! ring carries every completion the old one had not handed out, in order, while the
//! QP keeps completing work; a rereg'd MR's rights take effect on the next packet; and
//! hostile requests (bad sizes, unknown or foreign handles, rights never pinned) get
//! the errno rxe answers with, changing nothing.

mod common;

use common::side::*;
use common::*;
use wire::client::proto::Handle;
use wire::client::slot::Sge;
use wire::client::verbs::{access, qp_type, rereg_flags, wc_status, wr_opcode};
use wire::client::{ReplyBody, RequestBody};

/// Posts a signalled RDMA WRITE of 64 bytes from `a` into `b`'s buffer.
fn write(a: &Side, b: &Side, wr_id: u64) {
    let sge = [Sge {
        addr: a.addr(0),
        length: 64,
        lkey: a.lkey,
    }];
    let mut w = wqe(wr_id, wr_opcode::RDMA_WRITE, &sge);
    w.remote_addr = b.addr(0);
    w.rkey = b.rkey;
    a.post_send(w);
}

fn resize(
    s: &mut Side,
    cq: Handle,
    cqe: u32,
) -> Result<(ReplyBody, Vec<std::os::fd::OwnedFd>), i32> {
    s.c.call(RequestBody::ResizeCq { cq, cqe }, &[])
        .map_err(|e| errno::<()>(Err(e)))
}

#[test]
fn resize_keeps_every_unpolled_completion_in_order_while_work_completes() {
    let d = TestDaemon::start();
    let (mut a, b) = pair(&d, qp_type::RC, false);
    for id in 0..30 {
        write(&a, &b, id);
    }
    // Five handed out before the resize: the copy starts at the consumer index.
    for id in 0..5 {
        assert_eq!(a.poll().wr_id, id);
    }
    // All 30 in the ring (the ACKs came back), 25 of them not polled.
    let queued = || a.cq.view(0).producer_index() - a.cq.view(0).consumer_index();
    wait_for(std::time::Duration::from_secs(10), || {
        (queued() == 25).then_some(())
    })
    .expect("30 completions");
    // Shrinking below what is queued is rxe's EINVAL; the old ring stays in use.
    let cq = a.cq_h;
    assert_eq!(resize(&mut a, cq, 24).err(), Some(libc::EINVAL));
    assert_eq!(a.poll().wr_id, 5);
    for id in 30..40 {
        write(&a, &b, id);
    }
    let (body, fds) = resize(&mut a, cq, 100).expect("resize");
    let ReplyBody::Cq { handle, cqe, ring } = body else {
        panic!("{body:?}")
    };
    assert_eq!((handle, cqe), (cq, 100));
    assert!(ring.entries >= 100);
    a.cq = MappedRing::new(&fds[0], vec![ring]);
    // Work posted after the hand-over completes into the new ring, after the copies.
    for id in 40..50 {
        write(&a, &b, id);
    }
    let got: Vec<u64> = (6..50).map(|_| a.poll().wr_id).collect();
    assert_eq!(got, (6..50).collect::<Vec<_>>());
    let c = a.poll_once();
    assert!(c.is_none(), "no completion twice: {c:?}");
}

#[test]
fn resize_refuses_bad_sizes_and_handles_that_are_not_the_clients_cq() {
    let d = TestDaemon::start();
    let mut a = Side::new(&d);
    let mut other = Side::new(&d);
    let (cq, pd) = (a.cq_h, a.pd);
    assert_eq!(resize(&mut a, cq, 0).err(), Some(libc::EINVAL));
    assert_eq!(resize(&mut a, cq, u32::MAX).err(), Some(libc::EINVAL));
    assert_eq!(resize(&mut a, cq, 4194304).err(), Some(libc::EINVAL));
    assert_eq!(resize(&mut a, pd, 8).err(), Some(libc::EINVAL));
    assert_eq!(
        resize(&mut a, Handle(0xfff_fff0), 8).err(),
        Some(libc::ENOENT)
    );
    // Another client's CQ does not exist for this one.
    assert_eq!(resize(&mut other, cq, 8).err(), Some(libc::ENOENT));
    // The CQ still works at its old size, and a good resize still succeeds.
    let (body, _) = resize(&mut a, cq, 1).expect("shrink an empty CQ to 1");
    assert!(matches!(body, ReplyBody::Cq { cqe: 1, .. }));
}

fn rereg(
    s: &mut Side,
    mr: Handle,
    flags: u32,
    pd: Option<Handle>,
    acc: u32,
) -> Result<(u32, u32), i32> {
    let body = RequestBody::ReregMr {
        mr,
        flags,
        pd,
        addr: 0,
        length: 0,
        access: acc,
    };
    match s.c.call(body, &[]) {
        Ok((ReplyBody::Mr { lkey, rkey, .. }, _)) => Ok((lkey, rkey)),
        Ok((other, _)) => panic!("{other:?}"),
        Err(e) => Err(errno::<()>(Err(e))),
    }
}

#[test]
fn rereg_access_takes_effect_on_the_next_write_and_keeps_the_keys() {
    let d = TestDaemon::start();
    let (a, mut b) = pair(&d, qp_type::RC, false);
    write(&a, &b, 1);
    assert_eq!(a.poll().status, wc_status::SUCCESS);
    let mr = b.mr;
    let keys = rereg(
        &mut b,
        mr,
        rereg_flags::CHANGE_ACCESS,
        None,
        access::LOCAL_WRITE,
    );
    assert_eq!(keys, Ok((b.lkey, b.rkey)));
    write(&a, &b, 2);
    let c = a.poll();
    assert_eq!((c.wr_id, c.status), (2, wc_status::REM_ACCESS_ERR));
}

#[test]
fn rereg_refuses_what_rxe_refuses_and_foreign_handles() {
    let d = TestDaemon::start();
    let mut a = Side::new(&d);
    let mut other = Side::new(&d);
    let (mr, pd, cq) = (a.mr, a.pd, a.cq_h);
    let acc = rereg_flags::CHANGE_ACCESS;
    assert_eq!(rereg(&mut a, mr, 0, None, 0), Err(libc::EINVAL));
    assert_eq!(rereg(&mut a, mr, 1 << 3, None, 0), Err(libc::EINVAL));
    let tr = rereg_flags::CHANGE_TRANSLATION;
    assert_eq!(rereg(&mut a, mr, tr, None, 0), Err(libc::EOPNOTSUPP));
    assert_eq!(
        rereg(&mut a, mr, acc, None, access::REMOTE_WRITE),
        Err(libc::EINVAL)
    );
    let cpd = rereg_flags::CHANGE_PD;
    assert_eq!(rereg(&mut a, mr, cpd, None, 0), Err(libc::EINVAL));
    // A PD of another client, an MR of another client, a CQ named as an MR.
    let foreign_pd = other.pd;
    assert_eq!(
        rereg(&mut a, mr, cpd, Some(foreign_pd), 0),
        Err(libc::EINVAL)
    );
    assert_eq!(
        rereg(&mut other, mr, acc, None, access::LOCAL_WRITE),
        Err(libc::ENOENT)
    );
    assert_eq!(
        rereg(&mut a, cq, acc, None, access::LOCAL_WRITE),
        Err(libc::EINVAL)
    );
    // A region registered read-only never gets a write right.
    let buf = vec![0u8; 4096];
    let addr = buf.as_ptr() as u64;
    let reg = RequestBody::RegMr {
        pd,
        addr,
        length: 4096,
        iova: addr,
        access: access::REMOTE_READ,
        shared: Vec::new(),
    };
    let Ok((ReplyBody::Mr { handle: ro, .. }, _)) = a.c.call(reg, &[]) else {
        panic!("read-only MR")
    };
    assert_eq!(
        rereg(&mut a, ro, acc, None, access::LOCAL_WRITE),
        Err(libc::EACCES)
    );
    assert!(rereg(&mut a, ro, acc, None, access::REMOTE_READ).is_ok());
    // The PD moves, and back: the keys stay.
    let Ok((ReplyBody::Pd { handle: pd2 }, _)) =
        a.c.call(RequestBody::AllocPd { ctx: a.ctx.handle }, &[])
    else {
        panic!("second PD")
    };
    assert_eq!(rereg(&mut a, mr, cpd, Some(pd2), 0), Ok((a.lkey, a.rkey)));
    assert!(a.c.call(RequestBody::DeallocPd { pd: pd2 }, &[]).is_err());
    assert!(rereg(&mut a, mr, cpd, Some(pd), 0).is_ok());
    assert!(a.c.call(RequestBody::DeallocPd { pd: pd2 }, &[]).is_ok());
    drop(buf);
}
