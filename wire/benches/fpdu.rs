//! FPDU emission alone: 1 MiB of ULPDUs of 1448 octets (about the MULPDU of a 1460-octet
//! MSS: 1454 without markers, 1442 with), emitted back to back into one stream buffer,
//! with markers and CRC on and off.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use wire::iwarp::fpdu::{self, FpduConfig};

const TOTAL: usize = 1 << 20;
const ULPDU_LEN: usize = 1448;

fn emit_stream(ulpdu: &[u8], cfg: FpduConfig, out: &mut [u8]) -> usize {
    let mut pos = 0u64;
    let mut at = 0usize;
    let mut left = TOTAL;
    while left > 0 {
        let n = left.min(ulpdu.len());
        let len = fpdu::emit(&ulpdu[..n], cfg, pos, &mut out[at..]);
        at += len;
        pos += len as u64;
        left -= n;
    }
    at
}

fn bench_emit(c: &mut Criterion) {
    let ulpdu: Vec<u8> = (0..ULPDU_LEN).map(|i| (i * 7) as u8).collect();
    // Room for the largest layout: markers and framing add well under 5 %.
    let mut out = vec![0u8; TOTAL + TOTAL / 16];
    let mut g = c.benchmark_group("fpdu_emit_1MiB");
    g.throughput(Throughput::Bytes(TOTAL as u64));
    g.sample_size(20);
    g.warm_up_time(std::time::Duration::from_millis(500));
    g.measurement_time(std::time::Duration::from_secs(2));
    for (name, crc, markers) in [
        ("crc_markers", true, true),
        ("crc_nomarkers", true, false),
        ("nocrc_markers", false, true),
        ("nocrc_nomarkers", false, false),
    ] {
        let cfg = FpduConfig { crc, markers };
        g.bench_function(name, |b| {
            b.iter(|| emit_stream(std::hint::black_box(&ulpdu), cfg, &mut out))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_emit);
criterion_main!(benches);
