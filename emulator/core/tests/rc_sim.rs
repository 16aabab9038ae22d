//! RC under a lossy, duplicating, reordering fabric: every WR completes exactly once with
//! success, and memory equals a sequential reference model byte for byte.

use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

const A_SRC: u64 = 0;
const A_READ: u64 = 256 << 10;
const A_ATOMIC: u64 = 512 << 10;
const B_WRITE: u64 = 0;
const B_READ_SRC: u64 = 256 << 10;
const B_ATOMIC: u64 = 512 << 10;
const B_RECV: u64 = 600 << 10;

#[derive(Debug)]
enum Op {
    Write {
        src: u64,
        dst: u64,
        len: u32,
        imm: bool,
    },
    Read {
        src: u64,
        dst: u64,
        len: u32,
    },
    Send {
        src: u64,
        len: u32,
    },
    FetchAdd {
        slot: u64,
        add: u64,
    },
    CmpSwap {
        slot: u64,
        cmp_model: bool,
        swap: u64,
    },
}

fn run_seed(seed: u64) {
    let mut rng = Rng::new(seed);
    let link = LinkModel::lossy(&mut rng);
    let mtu = [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ][rng.below(5) as usize];
    // Every fourth seed starts right below the PSN wrap.
    let psn = start_psn(seed, &mut rng);
    // Odd seeds: ODP MRs over paged memory on both nodes (first touches and evicted pages
    // fault). A fault stalls its node up to 150 µs, so a packet over two pages that fault
    // at both ends (600 µs) can outlast the ACK timeout, then 537 µs: ODP users set it
    // above their fault time, else loss on top of faults exhausts the retries.
    let odp = seed & 1 == 1;
    let opts = ConnOpts {
        mtu,
        psn,
        buf_len: 1 << 20,
        timeout: if odp { 7 } else { 6 },
        odp,
        ..ConnOpts::default()
    };
    let mut f = Fabric::new(seed, 2, Mtu::Mtu4096, link);
    // Seeds 2, 3, 6, 7, ...: memory reached by system calls, so payload moves in runs of
    // 64 KiB (read ahead, placed together); the others place each packet as it comes.
    for n in &mut f.nodes {
        n.mem.runs = seed & 2 == 2;
    }
    if odp {
        f.page_faults(Duration::from_micros(1 + rng.below(150)), rng.unit() * 0.05);
    }
    let (a, b) = connect(&mut f, &opts);
    // Contents: random source data on A, random READ source on B.
    let mut model_b = vec![0u8; 1 << 20];
    {
        let sa = f.nodes[0]
            .mem
            .slice_mut(AddrSpace(a.client.0), a.base, 256 << 10);
        for x in sa.iter_mut() {
            *x = rng.next_u64() as u8;
        }
        for x in model_b[B_READ_SRC as usize..(B_READ_SRC as usize + (256 << 10))].iter_mut() {
            *x = rng.next_u64() as u8;
        }
        let src = model_b[B_READ_SRC as usize..B_READ_SRC as usize + (256 << 10)].to_vec();
        f.nodes[1]
            .mem
            .slice_mut(AddrSpace(b.client.0), b.base + B_READ_SRC, 256 << 10)
            .copy_from_slice(&src);
    }
    let a_src = f.nodes[0]
        .mem
        .slice(AddrSpace(a.client.0), a.base, 256 << 10)
        .to_vec();
    let nops = 4 + rng.below(16);
    let mut ops = Vec::new();
    let (mut read_off, mut recv_off, mut atomic_n) = (0u64, 0u64, 0u64);
    let max_len = 3 * mtu.bytes() + 100;
    for _ in 0..nops {
        let op = match rng.below(6) {
            0 | 1 => {
                let len = rng.below(u64::from(max_len)) as u32;
                Op::Write {
                    src: rng.below(128 << 10),
                    dst: rng.below(128 << 10),
                    len,
                    imm: rng.chance(0.3),
                }
            }
            2 => {
                let len = rng.below(u64::from(max_len)) as u32;
                let o = Op::Read {
                    src: rng.below(128 << 10),
                    dst: read_off,
                    len,
                };
                read_off += u64::from(len);
                o
            }
            3 => Op::Send {
                src: rng.below(128 << 10),
                len: rng.below(u64::from(max_len)) as u32,
            },
            4 => Op::FetchAdd {
                slot: rng.below(4),
                add: rng.next_u64() % 1000,
            },
            _ => Op::CmpSwap {
                slot: rng.below(4),
                cmp_model: rng.chance(0.5),
                swap: rng.next_u64(),
            },
        };
        ops.push(op);
    }
    // Post receives for SENDs and WRITE_WITH_IMM on B.
    let recvs = ops
        .iter()
        .filter(|o| matches!(o, Op::Send { .. } | Op::Write { imm: true, .. }))
        .count();
    let mut recv_slots = Vec::new();
    for i in 0..recvs {
        let sge = Sge {
            addr: b.base + B_RECV + recv_off,
            length: max_len,
            lkey: b.mr.lkey,
        };
        recv_slots.push(recv_off);
        recv_off += u64::from(max_len);
        f.nodes[1]
            .dev
            .post_recv(
                b.qpn,
                RecvWr {
                    wr_id: WrId(i as u64),
                    sg_list: vec![sge],
                },
            )
            .unwrap();
    }
    // Post everything from A, computing the model as we go.
    let mut atomics = [0u64; 4];
    let mut expected_atomic = Vec::new();
    let mut expected_recv = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let now = f.now;
        let mut wr = SendWr::new(WrId(i as u64), WrOpcode::Send);
        match *op {
            Op::Write { src, dst, len, imm } => {
                wr.opcode = if imm {
                    WrOpcode::RdmaWriteWithImm
                } else {
                    WrOpcode::RdmaWrite
                };
                wr.imm_data = i as u32;
                wr.sg_list = vec![Sge {
                    addr: a.base + A_SRC + src,
                    length: len,
                    lkey: a.mr.lkey,
                }];
                wr.rdma = RdmaInfo {
                    remote_addr: b.base + B_WRITE + dst,
                    rkey: b.mr.rkey,
                };
                let (s, d) = (src as usize, (B_WRITE + dst) as usize);
                model_b[d..d + len as usize].copy_from_slice(&a_src[s..s + len as usize]);
                if imm {
                    expected_recv.push((WcOpcode::RecvRdmaWithImm, len, Vec::new()));
                }
            }
            Op::Read { src, dst, len } => {
                wr.opcode = WrOpcode::RdmaRead;
                wr.sg_list = vec![Sge {
                    addr: a.base + A_READ + dst,
                    length: len,
                    lkey: a.mr.lkey,
                }];
                wr.rdma = RdmaInfo {
                    remote_addr: b.base + B_READ_SRC + src,
                    rkey: b.mr.rkey,
                };
            }
            Op::Send { src, len } => {
                wr.sg_list = vec![Sge {
                    addr: a.base + A_SRC + src,
                    length: len,
                    lkey: a.mr.lkey,
                }];
                expected_recv.push((
                    WcOpcode::Recv,
                    len,
                    a_src[src as usize..(src + u64::from(len)) as usize].to_vec(),
                ));
            }
            Op::FetchAdd { slot, add } => {
                wr.opcode = WrOpcode::AtomicFetchAndAdd;
                wr.sg_list = vec![Sge {
                    addr: a.base + A_ATOMIC + 8 * atomic_n,
                    length: 8,
                    lkey: a.mr.lkey,
                }];
                wr.atomic = AtomicInfo {
                    remote_addr: b.base + B_ATOMIC + 8 * slot,
                    compare_add: add,
                    swap: 0,
                    rkey: b.mr.rkey,
                };
                expected_atomic.push((atomic_n, atomics[slot as usize]));
                atomics[slot as usize] = atomics[slot as usize].wrapping_add(add);
                atomic_n += 1;
            }
            Op::CmpSwap {
                slot,
                cmp_model,
                swap,
            } => {
                wr.opcode = WrOpcode::AtomicCmpAndSwp;
                let cmp = if cmp_model {
                    atomics[slot as usize]
                } else {
                    12345
                };
                wr.sg_list = vec![Sge {
                    addr: a.base + A_ATOMIC + 8 * atomic_n,
                    length: 8,
                    lkey: a.mr.lkey,
                }];
                wr.atomic = AtomicInfo {
                    remote_addr: b.base + B_ATOMIC + 8 * slot,
                    compare_add: cmp,
                    swap,
                    rkey: b.mr.rkey,
                };
                expected_atomic.push((atomic_n, atomics[slot as usize]));
                if atomics[slot as usize] == cmp {
                    atomics[slot as usize] = swap;
                }
                atomic_n += 1;
            }
        }
        let n = &mut f.nodes[0];
        n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    }
    for (s, v) in atomics.iter().enumerate() {
        let o = (B_ATOMIC + 8 * s as u64) as usize;
        model_b[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }
    let ctx = format!("seed {seed} link {link:?} mtu {mtu:?} psn {psn:#x} ops {ops:?}");
    f.settle(Duration::from_secs(30), &ctx);
    let faults: u64 = f
        .nodes
        .iter()
        .filter_map(|n| n.paging.as_ref())
        .map(|p| p.faults)
        .sum();
    assert_eq!(odp, faults > 0, "ODP page faults {faults}: {ctx}");
    // Completions: every send WR exactly once, in order, successful.
    let mut send_wcs = Vec::new();
    let mut recv_wcs = Vec::new();
    for (node, list) in [(0usize, &mut send_wcs), (1, &mut recv_wcs)] {
        while let Some((_, wc)) = f.nodes[node].dev.poll_completion() {
            list.push(wc);
        }
    }
    let ids: Vec<u64> = send_wcs.iter().map(|w| w.wr_id.0).collect();
    assert_eq!(
        ids,
        (0..ops.len() as u64).collect::<Vec<_>>(),
        "send completions: {ctx} {send_wcs:?}"
    );
    assert!(
        send_wcs.iter().all(|w| w.status == WcStatus::Success),
        "{ctx} {send_wcs:?}"
    );
    assert_eq!(recv_wcs.len(), expected_recv.len(), "{ctx}");
    for (i, (wc, (op, len, data))) in recv_wcs.iter().zip(&expected_recv).enumerate() {
        assert_eq!(
            (wc.status, wc.opcode, wc.byte_len),
            (WcStatus::Success, *op, *len),
            "{ctx}"
        );
        if *op == WcOpcode::Recv {
            let got = f.nodes[1].mem.slice(
                AddrSpace(b.client.0),
                b.base + B_RECV + recv_slots[i],
                *len as usize,
            );
            assert_eq!(got, &data[..], "recv data {i}: {ctx}");
        }
    }
    // Memory: B's write and atomic areas equal the model; A's READ results equal B's source.
    let got_b = f.nodes[1]
        .mem
        .slice(AddrSpace(b.client.0), b.base, 600 << 10);
    assert!(got_b == &model_b[..600 << 10], "B memory differs: {ctx}");
    for op in &ops {
        if let Op::Read { src, dst, len } = *op {
            let got =
                f.nodes[0]
                    .mem
                    .slice(AddrSpace(a.client.0), a.base + A_READ + dst, len as usize);
            let want =
                &model_b[(B_READ_SRC + src) as usize..(B_READ_SRC + src) as usize + len as usize];
            if got != want {
                let first = got.iter().zip(want).position(|(x, y)| x != y);
                let last = got.iter().zip(want).rposition(|(x, y)| x != y);
                panic!("READ data differs at {first:?}..{last:?} of {len}: {ctx}");
            }
        }
    }
    for (n, orig) in expected_atomic {
        let got = f.nodes[0]
            .mem
            .slice(AddrSpace(a.client.0), a.base + A_ATOMIC + 8 * n, 8);
        assert_eq!(
            u64::from_le_bytes(got.try_into().unwrap()),
            orig,
            "atomic {n}: {ctx}"
        );
    }
}

#[test]
fn rc_send_write_read_atomic_match_the_model_under_loss_dup_reorder() {
    for seed in seed_range() {
        run_seed(seed);
    }
}
