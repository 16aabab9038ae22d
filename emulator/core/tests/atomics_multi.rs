//! Atomics from several requesters on one counter are serialized by the device
//! (IBV_ATOMIC_HCA): the final value is the sum, and every returned value is distinct.

use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

#[test]
fn fetch_adds_from_three_nodes_on_one_counter_sum_exactly() {
    for seed in 0..50 {
        let mut rng = Rng::new(seed);
        let link = LinkModel {
            loss: rng.unit() * 0.1,
            duplicate: rng.unit() * 0.1,
            reorder: rng.unit() * 0.1,
            ..LinkModel::default()
        };
        let mut f = Fabric::new(seed, 4, Mtu::Mtu1024, link);
        let o = ConnOpts::default();
        // Node 3 is the target; nodes 0..3 each connect one QP to it.
        let mut pairs = Vec::new();
        for n in 0..3 {
            let req = make_end(&mut f, n, &o);
            let mut tgt_opts = o;
            tgt_opts.buf_len = 1 << 16;
            let tgt = if n == 0 {
                make_end(&mut f, 3, &tgt_opts)
            } else {
                extra_qp(&mut f, &pairs[1], &o)
            };
            bring_up(&mut f, &req, Some((&tgt, 500)), &o, 100);
            bring_up(&mut f, &tgt, Some((&req, 100)), &o, 500);
            pairs.push(tgt);
            pairs.push(req);
            let k = pairs.len();
            pairs.swap(k - 2, k - 1);
        }
        // pairs = [req0, tgt0, req1, tgt1, req2, tgt2]; all targets share node 3's MR.
        let tgt0 = pairs[1];
        let per = 20u64;
        for p in 0..3 {
            let req = pairs[2 * p];
            for i in 0..per {
                let mut wr = SendWr::new(WrId(i), WrOpcode::AtomicFetchAndAdd);
                wr.sg_list = vec![Sge {
                    addr: req.base + 8 * i,
                    length: 8,
                    lkey: req.mr.lkey,
                }];
                wr.atomic = AtomicInfo {
                    remote_addr: tgt0.base,
                    compare_add: 1,
                    swap: 0,
                    rkey: tgt0.mr.rkey,
                };
                let now = f.now;
                let n = &mut f.nodes[req.node];
                n.dev.post_send(now, req.qpn, wr, &mut n.mem).unwrap();
            }
        }
        assert!(f.run(Duration::from_secs(10)), "seed {seed}");
        let got = f.nodes[3].mem.slice(AddrSpace(tgt0.client.0), tgt0.base, 8);
        assert_eq!(
            u64::from_le_bytes(got.try_into().unwrap()),
            3 * per,
            "seed {seed}"
        );
        let mut seen = Vec::new();
        for p in 0..3 {
            let req = pairs[2 * p];
            for i in 0..per {
                let v = f.nodes[req.node]
                    .mem
                    .slice(AddrSpace(req.client.0), req.base + 8 * i, 8);
                seen.push(u64::from_le_bytes(v.try_into().unwrap()));
            }
        }
        seen.sort_unstable();
        assert_eq!(
            seen,
            (0..3 * per).collect::<Vec<_>>(),
            "seed {seed}: each old value returned once"
        );
    }
}

/// Another QP on the target node, sharing the first target end's PD, CQs and MR.
fn extra_qp(f: &mut Fabric, first: &End, o: &ConnOpts) -> End {
    let d = &mut f.nodes[first.node].dev;
    let cap = QpCap {
        max_send_wr: o.depth,
        max_recv_wr: o.depth,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 0,
    };
    let init = QpInitAttr {
        pd: first.pd,
        send_cq: first.scq,
        recv_cq: first.rcq,
        srq: None,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
    };
    let (qpn, _) = d.create_qp(first.client, &init).unwrap();
    End { qpn, ..*first }
}
