//! The siw SRQ verbs (`srq.rs`) through the device's `Nic`: what the kernel's siw answers.

use super::limits;
use super::nic::SiwNic;
use crate::daemon::devices::nic::{Nic, QpCreate, XrcSrqIds};
use std::net::IpAddr;
use wire::client::slot::{Sge, SgeList};
use wire::client::verbs::{access, qp_type, srq_attr_mask};
use wire::client::{QpCap, SrqAttr};

const OWNER: u32 = 3;

fn nic() -> (SiwNic, u32, u32, u32) {
    let lo = [IpAddr::from([127, 0, 0, 1])];
    let mut nic = SiwNic::new("siw0", &lo, 4096, 1).expect("siw device");
    let pd = nic.alloc_pd(OWNER).unwrap();
    let (cq, _) = nic.create_cq(OWNER, 64).unwrap();
    let (lkey, _) = nic
        .reg_mr(OWNER, pd, 0x10000, 0x10000, 0x10000, access::LOCAL_WRITE)
        .unwrap();
    (nic, pd, cq, lkey)
}

fn attr(max_wr: u32, srq_limit: u32) -> SrqAttr {
    SrqAttr {
        max_wr,
        max_sge: 2,
        srq_limit,
    }
}

fn qp_on(nic: &mut SiwNic, pd: u32, cq: u32, srq: Option<u32>) -> Result<(u32, QpCap), i32> {
    let init = QpCreate {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq,
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 100,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: qp_type::RC,
        sq_sig_all: false,
    };
    nic.create_qp(OWNER, &init)
}

#[test]
fn siw_srq_verbs_answer_as_the_kernels_siw() {
    let (mut nic, pd, cq, _) = nic();
    // siw_create_srq: the limit may not exceed max_wr; depth rounded up; limit kept.
    assert_eq!(nic.create_srq(OWNER, pd, &attr(10, 11)), Err(libc::EINVAL));
    let (srq, got) = nic.create_srq(OWNER, pd, &attr(10, 4)).unwrap();
    assert_eq!((got.max_wr, got.max_sge, got.srq_limit), (16, 2, 4));
    assert_eq!(nic.query_srq(srq).unwrap(), got);
    // The largest depth siw takes, rounded past max_srq_wr as siw does.
    let (big, got) = nic
        .create_srq(OWNER, pd, &attr(limits::MAX_SRQ_WR, 0))
        .unwrap();
    assert_eq!(got.max_wr, limits::MAX_SRQ_WR.next_power_of_two());
    nic.destroy_srq(big).unwrap();
    // siw_modify_srq: no resize; a limit above the depth is EINVAL; 0 disarms.
    let m = srq_attr_mask::MAX_WR | srq_attr_mask::LIMIT;
    assert_eq!(nic.modify_srq(srq, &attr(32, 1), m), Err(libc::EOPNOTSUPP));
    let lim = srq_attr_mask::LIMIT;
    assert_eq!(nic.modify_srq(srq, &attr(0, 17), lim), Err(libc::EINVAL));
    nic.modify_srq(srq, &attr(0, 0), lim).unwrap();
    assert_eq!(nic.query_srq(srq).unwrap().srq_limit, 0);
    // A QP on the SRQ has no receive queue of its own; an unknown SRQ is EINVAL.
    assert_eq!(qp_on(&mut nic, pd, cq, Some(srq + 1000)), Err(libc::EINVAL));
    let (qpn, cap) = qp_on(&mut nic, pd, cq, Some(srq)).unwrap();
    assert_eq!(cap.max_recv_wr, 0);
    // In use: EBUSY, and the PD it holds too.
    assert_eq!(nic.destroy_srq(srq), Err(libc::EBUSY));
    nic.destroy_qp(qpn).unwrap();
    assert_eq!(nic.dealloc_pd(pd), Err(libc::EBUSY));
    nic.destroy_srq(srq).unwrap();
    assert_eq!(nic.query_srq(srq), Err(libc::EINVAL));
    // No XRC on siw.
    let ids = XrcSrqIds { pd, xrcd: 1, cq };
    assert_eq!(nic.open_xrcd(OWNER, None), Err(libc::EOPNOTSUPP));
    assert_eq!(
        nic.create_xrc_srq(OWNER, ids, &attr(8, 0)).map(|_| ()),
        Err(libc::EOPNOTSUPP)
    );
}

#[test]
fn siw_srq_holds_max_wr_receives_and_reports_them_outstanding() {
    let (mut nic, pd, cq, lkey) = nic();
    let (srq, got) = nic.create_srq(OWNER, pd, &attr(3, 0)).unwrap();
    assert_eq!(got.max_wr, 4);
    let sge = [Sge {
        addr: 0x10000,
        length: 64,
        lkey,
    }];
    for i in 0..4 {
        nic.post_srq_recv(srq, i, SgeList::Slice(&sge)).unwrap();
    }
    assert_eq!(
        nic.post_srq_recv(srq, 9, SgeList::Slice(&sge)),
        Err(libc::ENOMEM)
    );
    // The ring's slots stay taken while the SRQ holds their receives.
    assert_eq!(nic.srq_outstanding(srq), Some(4));
    let (qpn, _) = qp_on(&mut nic, pd, cq, Some(srq)).unwrap();
    assert_eq!(nic.srq_outstanding(srq), Some(4));
    nic.destroy_qp(qpn).unwrap();
    // More SGEs than the SRQ's max_sge.
    let three = [sge[0]; 3];
    assert_eq!(
        nic.post_srq_recv(srq, 1, SgeList::Slice(&three)),
        Err(libc::EINVAL)
    );
}
