//! The QP state machine's transition table, checked whole against the attribute tables of
//! `ibv_modify_qp(3)` / IBA 11.2.4.2 (a snapshot: any change to the table shows here).

use emu_core::state::rule;
use emu_core::*;

const NAMES: [(u32, &str); 20] = [
    (1 << 1, "CUR_STATE"),
    (1 << 2, "EN_SQD_ASYNC_NOTIFY"),
    (1 << 3, "ACCESS_FLAGS"),
    (1 << 4, "PKEY_INDEX"),
    (1 << 5, "PORT"),
    (1 << 6, "QKEY"),
    (1 << 7, "AV"),
    (1 << 8, "PATH_MTU"),
    (1 << 9, "TIMEOUT"),
    (1 << 10, "RETRY_CNT"),
    (1 << 11, "RNR_RETRY"),
    (1 << 12, "RQ_PSN"),
    (1 << 13, "MAX_QP_RD_ATOMIC"),
    (1 << 14, "ALT_PATH"),
    (1 << 15, "MIN_RNR_TIMER"),
    (1 << 16, "SQ_PSN"),
    (1 << 17, "MAX_DEST_RD_ATOMIC"),
    (1 << 18, "PATH_MIG_STATE"),
    (1 << 20, "DEST_QPN"),
    (1 << 25, "RATE_LIMIT"),
];

fn names(m: QpAttrMask) -> String {
    let v: Vec<&str> = NAMES
        .iter()
        .filter(|(b, _)| m.0 & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        "-".into()
    } else {
        v.join("|")
    }
}

fn render() -> String {
    let mut s = String::new();
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        for from in QpState::ALL {
            for to in QpState::ALL {
                if let Some((req, opt)) = rule(t, from, to) {
                    s += &format!(
                        "{t:?} {from:?}->{to:?} req {} opt {}\n",
                        names(req),
                        names(opt)
                    );
                }
            }
        }
    }
    s
}

const EXPECTED: &str = include_str!("state_table.snapshot");

#[test]
fn qp_transition_table_matches_the_ibv_modify_qp_attribute_tables() {
    let got = render();
    if got != EXPECTED {
        std::fs::write(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/state_table.snapshot.new"
            ),
            &got,
        )
        .unwrap();
        panic!("transition table changed; see tests/state_table.snapshot.new");
    }
}

#[test]
fn masks_outside_the_table_fail_with_einval() {
    use emu_core::state::check;
    use QpAttrMask as M;
    let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    assert_eq!(
        check(QpType::Rc, QpState::Reset, None, Some(QpState::Init), init),
        Ok(QpState::Init)
    );
    // Missing a required attribute.
    assert_eq!(
        check(
            QpType::Rc,
            QpState::Reset,
            None,
            Some(QpState::Init),
            M::STATE | M::PORT
        ),
        Err(Errno::EINVAL)
    );
    // An attribute the transition does not allow.
    assert_eq!(
        check(
            QpType::Rc,
            QpState::Reset,
            None,
            Some(QpState::Init),
            init | M::SQ_PSN
        ),
        Err(Errno::EINVAL)
    );
    // UD needs QKEY, not ACCESS_FLAGS.
    assert_eq!(
        check(QpType::Ud, QpState::Reset, None, Some(QpState::Init), init),
        Err(Errno::EINVAL)
    );
    // No such transition.
    assert_eq!(
        check(
            QpType::Rc,
            QpState::Init,
            None,
            Some(QpState::Rts),
            M::STATE
        ),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        check(QpType::Rc, QpState::Sqe, None, Some(QpState::Rts), M::STATE),
        Err(Errno::EINVAL)
    );
    // Any state to RESET or ERR.
    for s in QpState::ALL {
        assert_eq!(
            check(QpType::Uc, s, None, Some(QpState::Err), M::STATE),
            Ok(QpState::Err)
        );
        assert_eq!(
            check(QpType::Uc, s, None, Some(QpState::Reset), M::STATE),
            Ok(QpState::Reset)
        );
    }
    // A wrong CUR_STATE.
    assert_eq!(
        check(
            QpType::Rc,
            QpState::Rts,
            Some(QpState::Sqd),
            Some(QpState::Rts),
            M::STATE | M::CUR_STATE
        ),
        Err(Errno::EINVAL)
    );
}
