//! Verb-level checks the daemon makes for every client, as the kernel's rxe and
//! uverbs make them.

use emu_core::sim::*;
use emu_core::*;

#[test]
fn comp_vector_at_or_past_num_comp_vectors_is_einval() {
    assert_eq!(check_comp_vector(0), Ok(()));
    assert_eq!(check_comp_vector(NUM_COMP_VECTORS), Err(Errno::EINVAL));
    assert_eq!(check_comp_vector(u32::MAX), Err(Errno::EINVAL));
}

#[test]
fn srq_with_no_sge_is_raised_to_one_as_rxe_does() {
    let mut f = Fabric::new(3, 2, Mtu::Mtu1024, LinkModel::default());
    let a = make_end(&mut f, 0, &ConnOpts::default());
    let d = &mut f.nodes[0].dev;
    let srq = d
        .create_srq(
            a.client,
            a.pd,
            SrqAttr {
                max_wr: 4,
                max_sge: 0,
                srq_limit: 0,
            },
        )
        .expect("rxe accepts max_sge 0");
    let attr = d.query_srq(srq).expect("query");
    assert_eq!((attr.max_wr, attr.max_sge), (4, 1));
    // Still refused: no WR at all, or more SGEs than the device has.
    let bad = |max_wr, max_sge| SrqAttr {
        max_wr,
        max_sge,
        srq_limit: 0,
    };
    assert_eq!(d.create_srq(a.client, a.pd, bad(0, 1)), Err(Errno::EINVAL));
    assert_eq!(
        d.create_srq(a.client, a.pd, bad(4, 10_000)),
        Err(Errno::EINVAL)
    );
}
