//! Random sequences of verbs against a reference model of the RC QP state machine
//! (written from `ibv_modify_qp(3)`, independently of the core's table): valid calls
//! succeed, invalid ones return the model's errno.

use std::time::Instant;

use emu_core::sim::node_config;
use emu_core::*;
use proptest::prelude::*;
use QpAttrMask as M;
use QpState as S;

/// The man page's RC table: (from, to, required attributes besides STATE).
fn model_required(from: S, to: S) -> Option<QpAttrMask> {
    let m = |b: u32| Some(QpAttrMask(b));
    match (from, to) {
        (_, S::Reset) | (_, S::Err) => m(0),
        (S::Reset, S::Init) => m((M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS).0),
        (S::Init, S::Init) => m(0),
        (S::Init, S::Rtr) => m((M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER)
            .0),
        (S::Rtr, S::Rts) => {
            m((M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC).0)
        }
        (S::Rts, S::Rts) | (S::Rts, S::Sqd) | (S::Sqd, S::Rts) | (S::Sqd, S::Sqd) => m(0),
        _ => None,
    }
}

#[derive(Debug, Clone)]
enum Step {
    Modify { to: usize, drop_bit: Option<u8> },
    PostSend,
    PostRecv,
    DestroyCq,
    Recreate,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0usize..7, proptest::option::of(0u8..6)).prop_map(|(to, drop_bit)| Step::Modify { to, drop_bit }),
        2 => Just(Step::PostSend),
        2 => Just(Step::PostRecv),
        1 => Just(Step::DestroyCq),
        1 => Just(Step::Recreate),
    ]
}

fn attr() -> QpAttr {
    let dgid = Gid::from_ip("10.0.0.9".parse().unwrap());
    QpAttr {
        port_num: 1,
        qp_access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ah_attr: AhAttr {
            grh: GlobalRoute {
                dgid,
                ..Default::default()
            },
            is_global: true,
            port_num: 1,
            ..Default::default()
        },
        path_mtu: 3,
        dest_qp_num: Qpn(99),
        max_dest_rd_atomic: 4,
        max_rd_atomic: 4,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn verbs_follow_the_reference_model(steps in proptest::collection::vec(step(), 1..40)) {
        let now = Instant::now();
        let mut dev = Device::new(node_config(0, Mtu::Mtu1024, 1));
        let mut mem = VecMemory::new();
        let c = ClientId(1);
        let pd = dev.alloc_pd(c).unwrap();
        let (cq, _) = dev.create_cq(c, 16).unwrap();
        let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let init = QpInitAttr { pd, send_cq: cq, recv_cq: cq, srq: None, cap, qp_type: QpType::Rc, sq_sig_all: false };
        let (mut qpn, _) = dev.create_qp(c, &init).unwrap();
        let mut state = S::Reset;
        let (mut sq, mut rq) = (0usize, 0usize);
        for s in steps {
            match s {
                Step::Modify { to, drop_bit } => {
                    let to = S::ALL[to];
                    let mut a = attr();
                    a.qp_state = to;
                    let req = model_required(state, to);
                    let mut mask = M::STATE | req.unwrap_or(QpAttrMask(0));
                    let mut dropped = false;
                    if let (Some(b), Some(r)) = (drop_bit, req) {
                        let bits: Vec<u32> = (0..32).map(|i| 1u32 << i).filter(|x| r.0 & x != 0).collect();
                        if let Some(x) = bits.get(b as usize) {
                            mask = QpAttrMask(mask.0 & !x);
                            dropped = true;
                        }
                    }
                    let got = dev.modify_qp(now, qpn, &a, mask);
                    if req.is_some() && !dropped {
                        prop_assert_eq!(got, Ok(()), "{:?} -> {:?}", state, to);
                        state = to;
                        if to == S::Reset { sq = 0; rq = 0; }
                        if to == S::Err {
                            // Flushed: every queued WR completes.
                            sq = 0; rq = 0;
                            while dev.poll_completion().is_some() {}
                        }
                    } else {
                        prop_assert_eq!(got, Err(Errno::EINVAL), "{:?} -> {:?} mask {:?}", state, to, mask);
                    }
                }
                Step::PostSend => {
                    let wr = SendWr::new(WrId(1), WrOpcode::Send);
                    let got = dev.post_send(now, qpn, wr, &mut mem);
                    let want = match state {
                        S::Rts | S::Sqd | S::Err if sq < 4 => Ok(()),
                        S::Rts | S::Sqd => Err(Errno::ENOMEM),
                        _ => Err(Errno::EINVAL),
                    };
                    prop_assert_eq!(got, want, "post_send in {:?}", state);
                    if got.is_ok() && state != S::Err { sq += 1; }
                    while dev.poll_completion().is_some() {}
                }
                Step::PostRecv => {
                    let got = dev.post_recv(qpn, RecvWr { wr_id: WrId(2), sg_list: vec![] });
                    let want = match state {
                        S::Reset => Err(Errno::EINVAL),
                        S::Err => Ok(()),
                        _ if rq < 4 => Ok(()),
                        _ => Err(Errno::ENOMEM),
                    };
                    prop_assert_eq!(got, want, "post_recv in {:?}", state);
                    if got.is_ok() && state != S::Err { rq += 1; }
                    while dev.poll_completion().is_some() {}
                }
                Step::DestroyCq => prop_assert_eq!(dev.destroy_cq(cq), Err(Errno::EBUSY)),
                Step::Recreate => {
                    prop_assert_eq!(dev.destroy_qp(qpn), Ok(()));
                    prop_assert_eq!(dev.destroy_qp(qpn), Err(Errno::EINVAL));
                    qpn = dev.create_qp(c, &init).unwrap().0;
                    state = S::Reset;
                    sq = 0;
                    rq = 0;
                }
            }
        }
    }
}
