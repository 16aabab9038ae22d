//! The core alone: RC WRITE between two devices in memory, ICRC on, next to single-core
//! memcpy measured in the same run. Packets move by direct calls (no simulator queue).

use std::time::Instant;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use emu_core::sim::*;
use emu_core::*;

struct Pair {
    f: Fabric,
    a: End,
    b: End,
    buf: Vec<u8>,
}

fn pair(mtu: Mtu) -> Pair {
    let opts = ConnOpts {
        mtu,
        buf_len: 1 << 20,
        depth: 4096,
        ..ConnOpts::default()
    };
    let mut f = Fabric::new(1, 2, Mtu::Mtu4096, LinkModel::default());
    let (a, b) = connect(&mut f, &opts);
    Pair {
        f,
        a,
        b,
        buf: Vec::with_capacity(8192),
    }
}

/// Posts `n` WRITEs of `len` bytes and moves packets until all complete; returns packets.
fn write_burst(p: &mut Pair, n: u64, len: u32) -> u64 {
    let now = Instant::now();
    for i in 0..n {
        let mut wr = SendWr::new(WrId(i), WrOpcode::RdmaWrite);
        wr.send_flags = if i + 1 == n {
            SendFlags::SIGNALED
        } else {
            SendFlags::EMPTY
        };
        wr.sg_list = vec![Sge {
            addr: p.a.base,
            length: len,
            lkey: p.a.mr.lkey,
        }];
        wr.rdma = RdmaInfo {
            remote_addr: p.b.base,
            rkey: p.b.mr.rkey,
        };
        let nd = &mut p.f.nodes[0];
        nd.dev.post_send(now, p.a.qpn, wr, &mut nd.mem).unwrap();
    }
    let mut pkts = 0;
    let [na, nb] = &mut p.f.nodes[..] else {
        unreachable!()
    };
    loop {
        let mut moved = false;
        while let Some(t) = na.dev.poll_transmit(now, &mut na.mem, &mut p.buf) {
            let d = Datagram {
                src: t.src,
                dst: t.dst,
                payload: &p.buf[..t.len],
            };
            nb.dev.handle_datagram(now, &d, &mut nb.mem);
            pkts += 1;
            moved = true;
        }
        while let Some(t) = nb.dev.poll_transmit(now, &mut nb.mem, &mut p.buf) {
            let d = Datagram {
                src: t.src,
                dst: t.dst,
                payload: &p.buf[..t.len],
            };
            na.dev.handle_datagram(now, &d, &mut na.mem);
            moved = true;
        }
        if let Some((_, wc)) = na.dev.poll_completion() {
            assert_eq!(wc.status, WcStatus::Success);
            return pkts;
        }
        assert!(moved, "stalled");
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("core");
    // 16 × 64 KiB WRITEs, 4 KiB MTU: 256 data packets per iteration.
    let mut p = pair(Mtu::Mtu4096);
    g.throughput(Throughput::Bytes(16 * 65536));
    g.bench_function("rc_write_64KiB_mtu4096_icrc", |b| {
        b.iter(|| write_burst(&mut p, 16, 65536))
    });
    // 256 × 256 B WRITEs: packets per second.
    let mut p = pair(Mtu::Mtu4096);
    g.throughput(Throughput::Elements(256));
    g.bench_function("rc_write_256B_packets", |b| {
        b.iter(|| write_burst(&mut p, 256, 256))
    });
    // Single-core memcpy of the same volume, same run.
    let src = vec![1u8; 1 << 20];
    let mut dst = vec![0u8; 1 << 20];
    g.throughput(Throughput::Bytes(1 << 20));
    g.bench_function("memcpy_1MiB", |b| {
        b.iter_batched(
            || (),
            |_| dst.copy_from_slice(std::hint::black_box(&src)),
            BatchSize::SmallInput,
        )
    });
    // The ICRC alone over one 4 KiB packet (each packet costs two: send and receive).
    let pkt = vec![7u8; 4096 + 28];
    g.throughput(Throughput::Bytes(4096));
    g.bench_function("icrc_4KiB", |b| {
        b.iter(|| {
            let ip = std::net::Ipv4Addr::new(10, 0, 0, 1);
            wire::roce::icrc::for_udp4(ip, ip, 0xc000, 4791, std::hint::black_box(&pkt))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
