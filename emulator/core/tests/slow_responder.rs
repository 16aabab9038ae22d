//! RDMA READ against a responder slower than the local ACK timeout (issue 12: what the
//! kernel's rxe under qemu did to perftest's `ib_read_bw` with its 67 ms timeout).
//!
//! The link carries 4 MB/s each way with 100 ms of delay: eight outstanding 64 KiB READs
//! take longer to answer than the timeout (4.096 µs × 2^14 ≈ 67 ms), so the requester
//! re-sends its window; the responder must execute every duplicate READ again, and its
//! answers to them queue ahead of the answers still missing. The requester must take
//! those duplicate responses as signs of life and not exhaust its seven retries while the
//! responder works through the backlog.
use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;

const READS: u64 = 40;
const LEN: u32 = 64 << 10;

#[test]
fn reads_survive_a_responder_slower_than_the_ack_timeout() {
    let link = LinkModel {
        delay: Duration::from_millis(100),
        bandwidth: Some(4_000_000),
        ..LinkModel::default()
    };
    let mut f = Fabric::new(12, 2, Mtu::Mtu1024, link);
    let o = ConnOpts {
        timeout: 14,
        retry_cnt: 7,
        rd_atomic: 8,
        depth: 64,
        buf_len: 4 << 20,
        ..ConnOpts::default()
    };
    let (a, b) = connect(&mut f, &o);
    // B's source: a recognisable pattern.
    let src: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
    f.nodes[1]
        .mem
        .slice_mut(AddrSpace(b.client.0), b.base, LEN as usize)
        .copy_from_slice(&src);
    for i in 0..READS {
        let mut wr = SendWr::new(WrId(i), WrOpcode::RdmaRead);
        wr.sg_list = vec![Sge {
            addr: a.base + i * u64::from(LEN),
            length: LEN,
            lkey: a.mr.lkey,
        }];
        wr.rdma = RdmaInfo {
            remote_addr: b.base,
            rkey: b.mr.rkey,
        };
        let now = f.now;
        let n = &mut f.nodes[0];
        n.dev.post_send(now, a.qpn, wr, &mut n.mem).unwrap();
    }
    assert!(f.run(Duration::from_secs(300)), "not idle after 300 s");
    let mut wcs = Vec::new();
    while let Some((_, wc)) = f.nodes[0].dev.poll_completion() {
        wcs.push((wc.wr_id.0, wc.status));
    }
    let c = *f.nodes[0].dev.counters();
    let ctx = format!(
        "ack timeouts {}, retransmitted {}, duplicate responses {}",
        c.ack_timeouts, c.retransmitted_pkts, c.duplicate_responses
    );
    assert_eq!(
        wcs,
        (0..READS)
            .map(|i| (i, WcStatus::Success))
            .collect::<Vec<_>>(),
        "{ctx}"
    );
    // The scenario did provoke retransmissions and duplicate answers.
    assert!(c.ack_timeouts > 0 && c.duplicate_responses > 0, "{ctx}");
    for i in 0..READS {
        let got = f.nodes[0].mem.slice(
            AddrSpace(a.client.0),
            a.base + i * u64::from(LEN),
            LEN as usize,
        );
        assert!(got == &src[..], "READ {i} data differs; {ctx}");
    }
}
