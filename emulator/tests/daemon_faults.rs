//! Completion channels, memory windows, capture, and faults: a client that dies
//! mid-connection, memory unmapped under a registration.

mod common;

use common::side::*;
use common::*;
use std::os::fd::AsRawFd;
use std::time::Duration;
use wire::client::slot::{Cqe, CqeRepr, Sge};
use wire::client::verbs::{access, qp_type, wc_opcode, wc_status, wr_opcode};
use wire::client::{ReplyBody, RequestBody};

#[test]
fn armed_cq_fires_its_completion_channel_once() {
    let d = TestDaemon::start();
    let (mut a, b) = pair(&d, qp_type::RC, true);
    let cq_view = b.cq.view(0);
    cq_view.set_arm(wire::client::ring::ARM_NEXT);
    b.post_recv(1, 0, 64);
    b.post_recv(2, 0, 64);
    a.fill(0, 64, 1);
    let sge = [Sge {
        addr: a.addr(0),
        length: 64,
        lkey: a.lkey,
    }];
    a.post_send(wqe(1, wr_opcode::SEND, &sge));
    let rec =
        read_record(b.channel.as_ref().unwrap(), Duration::from_secs(5)).expect("completion event");
    assert_eq!(
        wire::client::CompEventRecord::from_bytes(rec),
        Some(wire::client::CompEventRecord { cq: b.cq_h })
    );
    assert_eq!(cq_view.arm(), 0, "disarmed when fired");
    assert_eq!(b.poll().wr_id, 1);
    // Not armed: a second completion writes nothing to the channel.
    a.post_send(wqe(2, wr_opcode::SEND, &sge));
    assert_eq!(b.poll().wr_id, 2);
    assert!(read_record(b.channel.as_ref().unwrap(), Duration::from_millis(100)).is_none());
    d.stop();
}

#[test]
fn peer_of_a_client_that_died_sees_an_error_completion_and_the_daemon_serves_on() {
    let d = TestDaemon::start();
    let mut a = Side::new(&d);
    let mut b = Side::new(&d);
    let (aq, ag, bq, bg) = (a.qpn, a.gid, b.qpn, b.gid);
    a.connect_with(bq, bg, 8, 1);
    b.connect(aq, ag);
    let sge = [Sge {
        addr: a.addr(0),
        length: 4096,
        lkey: a.lkey,
    }];
    let mut w = wqe(1, wr_opcode::RDMA_WRITE, &sge);
    w.remote_addr = b.addr(0);
    w.rkey = b.rkey;
    a.post_send(w);
    assert_eq!(a.poll().status, wc_status::SUCCESS);
    drop(b); // the client goes away: its QP, MR and memory with it
    let mut w = wqe(2, wr_opcode::RDMA_WRITE, &sge);
    w.remote_addr = a.addr(0);
    w.rkey = a.rkey;
    a.post_send(w);
    let c = a.poll();
    assert_eq!(c.wr_id, 2);
    assert_ne!(
        c.status,
        wc_status::SUCCESS,
        "retry exceeded or a NAK, never a hang"
    );
    let (mut c2, mut d2) = pair(&d, qp_type::RC, false);
    d2.post_recv(5, 0, 16);
    let sge = [Sge {
        addr: c2.addr(0),
        length: 16,
        lkey: c2.lkey,
    }];
    c2.fill(0, 16, 1);
    c2.post_send(wqe(5, wr_opcode::SEND, &sge));
    assert_eq!(d2.poll().status, wc_status::SUCCESS);
    let _ = &mut d2;
    d.stop();
}

#[test]
fn captured_rc_traffic_decodes_with_every_icrc_valid() {
    use std::io::Read;
    let d = TestDaemon::start();
    let (mut a, b) = pair(&d, qp_type::RC, false);
    let (r, w) = emulator::daemon::sys::pipe().unwrap();
    let mut admin = d.connect();
    admin
        .call(
            RequestBody::Capture {
                device: "rxe0".into(),
            },
            &[w.as_raw_fd()],
        )
        .unwrap();
    drop(w);
    b.post_recv(1, 0, 4096);
    a.fill(0, 3000, 7);
    let sge = [Sge {
        addr: a.addr(0),
        length: 3000,
        lkey: a.lkey,
    }];
    a.post_send(wqe(1, wr_opcode::SEND, &sge));
    assert_eq!(b.poll().status, wc_status::SUCCESS);
    let mut rd = wqe(2, wr_opcode::RDMA_READ, &sge);
    rd.remote_addr = b.addr(0);
    rd.rkey = b.rkey;
    a.post_send(rd);
    assert_eq!(a.poll().wr_id, 1);
    assert_eq!(a.poll().wr_id, 2);
    d.stop(); // closes the capture stream
    let mut pcap = Vec::new();
    std::fs::File::from(r).read_to_end(&mut pcap).unwrap();
    assert_eq!(pcap[..4], 0xa1b2_c3d4u32.to_le_bytes());
    // Sent and received copies of 3 SEND packets, an ACK, a READ request, 3 responses.
    let mut frames = 0;
    let mut at = 24;
    while at + 16 <= pcap.len() {
        at += 16 + u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        frames += 1;
    }
    assert_eq!(at, pcap.len(), "whole records");
    assert!(frames >= 16, "{frames} frames");
    let file = std::env::temp_dir().join(format!("rdma-emu-capture-{}.pcap", std::process::id()));
    std::fs::write(&file, &pcap).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-emu"))
        .arg("decode")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "decode: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Ok(out) = std::process::Command::new("tshark")
        .args(["-r"])
        .arg(&file)
        .args(["-Y", "_ws.malformed || _ws.expert.severity >= error"])
        .output()
    {
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "",
            "tshark finds no malformed or error items"
        );
    }
    let _ = std::fs::remove_file(&file);
}

#[test]
fn memory_windows_of_both_types_grant_remote_access_once_bound() {
    let d = TestDaemon::start();
    let (mut a, mut b) = pair(&d, qp_type::RC, false);
    for (mw_type, wr_id) in [(1u32, 10u64), (2, 20)] {
        let reply =
            b.c.call(RequestBody::AllocMw { pd: b.pd, mw_type }, &[])
                .unwrap()
                .0;
        let ReplyBody::Mw { rkey, .. } = reply else {
            panic!("{reply:?}")
        };
        let new_rkey = (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff);
        let c = bind(&b, wr_id, rkey, new_rkey, 4096, 1024);
        assert_eq!(
            (c.wr_id, c.status, c.opcode),
            (wr_id, wc_status::SUCCESS, wc_opcode::BIND_MW),
            "type {mw_type}"
        );
        a.fill(0, 512, mw_type as u8);
        let sge = [Sge {
            addr: a.addr(0),
            length: 512,
            lkey: a.lkey,
        }];
        let mut w = wqe(wr_id + 1, wr_opcode::RDMA_WRITE, &sge);
        w.remote_addr = b.addr(4096);
        w.rkey = new_rkey;
        a.post_send(w);
        assert_eq!(
            a.poll().status,
            wc_status::SUCCESS,
            "write through the type {mw_type} window"
        );
        assert_eq!(b.read(4096, 512), pattern(512, mw_type as u8));
    }
    // Outside the window: a remote access error.
    let reply =
        b.c.call(
            RequestBody::AllocMw {
                pd: b.pd,
                mw_type: 2,
            },
            &[],
        )
        .unwrap()
        .0;
    let ReplyBody::Mw { rkey, .. } = reply else {
        panic!("{reply:?}")
    };
    let new_rkey = (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff);
    assert_eq!(
        bind(&b, 30, rkey, new_rkey, 0, 64).status,
        wc_status::SUCCESS
    );
    let sge = [Sge {
        addr: a.addr(0),
        length: 128,
        lkey: a.lkey,
    }];
    let mut w = wqe(31, wr_opcode::RDMA_WRITE, &sge);
    w.remote_addr = b.addr(0);
    w.rkey = new_rkey;
    a.post_send(w);
    assert_eq!(a.poll().status, wc_status::REM_ACCESS_ERR);
    d.stop();
}

/// Throughput of 64 KiB RDMA WRITEs with 16 in flight, for a rough figure:
/// `cargo test --release -p emulator --test daemon_faults -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_write_bandwidth() {
    let d = TestDaemon::start();
    let (a, b) = pair(&d, qp_type::RC, false);
    let len = 32 * 1024u32;
    let sge = [Sge {
        addr: a.addr(0),
        length: len,
        lkey: a.lkey,
    }];
    let start = std::time::Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    let mut cons = a.cq.consumer(0);
    let mut buf = [0u8; 64];
    while start.elapsed() < Duration::from_secs(2) {
        while posted - done < 16 {
            let mut w = wqe(posted, wr_opcode::RDMA_WRITE, &sge);
            w.remote_addr = b.addr(0);
            w.rkey = b.rkey;
            a.post_send(w);
            posted += 1;
        }
        if cons.pop(&mut buf).unwrap() {
            let c = CqeRepr::parse(&Cqe::new_checked(&buf[..]).unwrap()).unwrap();
            assert_eq!(c.status, wc_status::SUCCESS);
            done += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{done} writes of {len} B in {secs:.2} s: {:.1} MB/s",
        done as f64 * f64::from(len) / secs / 1e6
    );
    d.stop();
}

#[test]
fn write_into_an_mr_whose_pages_were_unmapped_fails_without_harming_the_daemon() {
    let d = TestDaemon::start();
    let (mut a, mut b) = pair(&d, qp_type::RC, false);
    // SAFETY: a fresh anonymous mapping, unmapped below; nothing else refers to it.
    let region = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(region, libc::MAP_FAILED);
    let addr = region as u64;
    let acc = access::LOCAL_WRITE | access::REMOTE_WRITE;
    let reply =
        b.c.call(
            RequestBody::RegMr {
                pd: b.pd,
                addr,
                length: 8192,
                iova: addr,
                access: acc,
                shared: Vec::new(),
            },
            &[],
        )
        .unwrap()
        .0;
    let ReplyBody::Mr { rkey, .. } = reply else {
        panic!("{reply:?}")
    };
    // SAFETY: unmapping the region mapped above.
    unsafe { libc::munmap(region, 8192) };
    let sge = [Sge {
        addr: a.addr(0),
        length: 4096,
        lkey: a.lkey,
    }];
    let mut w = wqe(1, wr_opcode::RDMA_WRITE, &sge);
    w.remote_addr = addr;
    w.rkey = rkey;
    a.post_send(w);
    let c = a.poll();
    assert_eq!(c.wr_id, 1);
    assert_ne!(c.status, wc_status::SUCCESS);
    // The daemon still serves new connections and traffic.
    let (c2, d2) = pair(&d, qp_type::RC, false);
    d2.post_recv(1, 0, 8);
    let sge = [Sge {
        addr: c2.addr(0),
        length: 8,
        lkey: c2.lkey,
    }];
    c2.post_send(wqe(1, wr_opcode::SEND, &sge));
    assert_eq!(d2.poll().status, wc_status::SUCCESS);
    let ReplyBody::Stat(sets) =
        a.c.call(
            RequestBody::Stat {
                device: None,
                qpn: None,
            },
            &[],
        )
        .unwrap()
        .0
    else {
        panic!()
    };
    assert!(
        sets[0]
            .counters
            .iter()
            .any(|(k, v)| k == "memory_faults" && *v > 0),
        "{sets:?}"
    );
    let _ = &mut b;
    d.stop();
}
