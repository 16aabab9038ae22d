//! siw devices (`emulator::daemon::siw::SiwNic`) over real loopback TCP, stepped the way
//! the daemon's loop steps them, in the two situations that used to hang or break a
//! connection:
//!
//! - A Send that arrives before the receive WR the application already posted reached
//!   the device. The daemon takes receive WRs from the application's ring a batch per
//!   pass, so perftest's "post 100 receives, then tell the peer to start" could let the
//!   peer's Sends overtake the last receives: the device terminated the connection for
//!   "no buffer" and `ib_send_bw -a` hung. The Send now waits for the receive (input
//!   stops, TCP holds the rest) and terminates only when none comes
//!   (`emu_core::iwarp::RECV_WAIT`).
//! - A peer that stops in the middle of an FPDU: after `RX_STALL_TIMEOUT` the device
//!   sends a Terminate (LLP: TCP connection lost), closes, and the QP goes to error with
//!   its receive WRs flushed.

mod siw_host;

use emu_core::iwarp::{Connection, IwarpConfig, IwarpEvent, MrTable, RECV_WAIT, RX_STALL_TIMEOUT};
use emu_core::VecMemory;
use emulator::daemon::devices::nic::EventElement;
use emulator::daemon::siw::{ConnParams, SiwCmEvent};
use siw_host::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use wire::client::verbs::{event_type, qp_state, wc_opcode, wc_status};
use wire::iwarp::fpdu::{self, FpduConfig};
use wire::iwarp::rdmap::RdmapMessage;
use wire::iwarp::TerminateError;

/// A connects to B; B accepts with no receive WR posted. Both in RTS.
fn connect_without_receives() -> (Host, Host) {
    let mut a = Host::new("siw_a");
    let mut b = Host::new("siw_b");
    let (_l, addr) = b.nic.listen(SocketAddr::new(LO, 0), 16).unwrap();
    a.nic
        .connect(
            a.qpn,
            SocketAddr::new(LO, 0),
            addr,
            &ConnParams::default(),
            true,
        )
        .unwrap();
    let limit = Duration::from_secs(10);
    run_until(&mut [&mut a, &mut b], "the connect request", limit, |h| {
        h[1].request().is_some()
    });
    let conn = b.request().unwrap();
    b.accept(conn);
    run_until(&mut [&mut a, &mut b], "established", limit, |h| {
        h[0].established() && h[1].established()
    });
    assert_eq!((a.state(), b.state()), (qp_state::RTS, qp_state::RTS));
    (a, b)
}

#[test]
fn siw_sends_that_overtake_their_receives_wait_for_them() {
    let (mut a, mut b) = connect_without_receives();
    // Three Sends of 200 KiB: more than the device reads while the first one waits.
    let msgs: Vec<Vec<u8>> = (0..3u8).map(|i| pattern(200 * 1024, i + 1)).collect();
    for (i, m) in msgs.iter().enumerate() {
        let off = i * 256 * 1024;
        a.mem.0[off..off + m.len()].copy_from_slice(m);
        a.post_send(10 + i as u64, off, m.len() as u32);
    }
    run_until(
        &mut [&mut a, &mut b],
        "the Sends to leave",
        Duration::from_secs(10),
        |h| h[0].wcs.len() == 3,
    );
    // B holds the first Send (no receive WR yet) and stops reading: TCP keeps the rest.
    run_for(&mut a, &mut b, RECV_WAIT / 4);
    assert!(b.wcs.is_empty(), "nothing received yet: {:?}", b.wcs);
    assert_eq!(b.counter("terminates_sent"), 0);
    assert_eq!(b.state(), qp_state::RTS);
    let sent: u64 = msgs.iter().map(|m| m.len() as u64).sum();
    let read = b.counter("rx_bytes");
    assert!(read < sent, "B read {read} of {sent} octets while waiting");
    // The receives reach the device (the daemon drained the rest of the ring).
    for i in 0..3 {
        b.post_recv(20 + i as u64, i * 256 * 1024, 256 * 1024);
    }
    run_until(
        &mut [&mut a, &mut b],
        "the receives",
        Duration::from_secs(10),
        |h| h[1].wcs.len() == 3,
    );
    for (i, m) in msgs.iter().enumerate() {
        let wc = &b.wcs[i];
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
            (
                20 + i as u64,
                wc_status::SUCCESS,
                wc_opcode::RECV,
                m.len() as u32
            )
        );
        let off = i * 256 * 1024;
        assert_eq!(&b.mem.0[off..off + m.len()], &m[..], "message {i}");
    }
    assert!(a.wcs.iter().all(|w| w.status == wc_status::SUCCESS));
    assert_eq!(b.counter("terminates_sent"), 0);
    assert_eq!((a.state(), b.state()), (qp_state::RTS, qp_state::RTS));
}

#[test]
fn siw_send_that_never_gets_a_receive_terminates_after_the_wait() {
    let (mut a, mut b) = connect_without_receives();
    a.post_send(10, 0, 64);
    let start = Instant::now();
    run_until(
        &mut [&mut a, &mut b],
        "the Terminate",
        RECV_WAIT + Duration::from_secs(10),
        |h| h[0].state() == qp_state::ERR && h[1].state() == qp_state::ERR,
    );
    assert!(
        start.elapsed() >= RECV_WAIT,
        "terminated before the wait ended"
    );
    assert_eq!(b.counter("terminates_sent"), 1);
    assert_eq!(a.counter("terminates_rcvd"), 1);
    assert!(a
        .events
        .contains(&(OWNER, event_type::QP_FATAL, EventElement::Qp(a.qpn))));
    // RFC 5041 §7.2: an untagged buffer error is the requester's (its Send had no buffer).
    assert!(b
        .events
        .contains(&(OWNER, event_type::QP_REQ_ERR, EventElement::Qp(b.qpn))));
}

#[test]
fn siw_peer_stopping_mid_fpdu_is_terminated_and_closed() {
    let mut a = Host::new("siw_a"); // stepped alongside, never connected
    let mut b = Host::new("siw_b");
    let (_l, addr) = b.nic.listen(SocketAddr::new(LO, 0), 16).unwrap();
    // A hand-driven initiator on a plain socket, client-server mode (no RTR).
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_nonblocking(true).unwrap();
    let cfg = IwarpConfig {
        peer_to_peer: false,
        ..IwarpConfig::default()
    };
    let mut peer = Connection::initiator(Instant::now(), cfg);
    let (mut keys, mut pmem) = (MrTable::new(), VecMemory::new());
    let mut out = Vec::new();
    while peer.poll_stream_transmit(&mut out, &mut keys, &mut pmem) > 0 {}
    sock.write_all(&out).unwrap();
    let limit = Duration::from_secs(10);
    run_until(&mut [&mut a, &mut b], "the connect request", limit, |h| {
        h[1].request().is_some()
    });
    let conn = b.request().unwrap();
    b.post_recv(1, 0, 4096);
    b.accept(conn);
    // Half of an FPDU carrying a 1000-octet Send, then nothing.
    let u = {
        let m = RdmapMessage::Send {
            last: true,
            solicited: false,
            invalidate: None,
            msn: 1,
            mo: 0,
            payload: &[0x5a; 1000],
        };
        let mut u = vec![0u8; m.buffer_len()];
        m.emit(&mut u);
        u
    };
    let mut frame = vec![0u8; fpdu::wire_len(u.len(), FpduConfig::default(), 0)];
    fpdu::emit(&u, FpduConfig::default(), 0, &mut frame);
    let mut half_sent = None;
    let mut terminate = None;
    let mut eof = false;
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    while !eof {
        assert!(
            start.elapsed() < RX_STALL_TIMEOUT + Duration::from_secs(10),
            "no Terminate and close from the siw side"
        );
        b.step();
        match sock.read(&mut buf) {
            Ok(0) => eof = true,
            Ok(n) => {
                peer.handle_stream(Instant::now(), &buf[..n], &mut keys, &mut pmem);
                while let Some(e) = peer.poll_event() {
                    if let IwarpEvent::Terminated { error, local } = e {
                        assert!(!local, "the Terminate came from the siw side");
                        terminate = Some((error, Instant::now()));
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => eof = true,
        }
        if peer.is_established() && half_sent.is_none() {
            sock.write_all(&frame[..frame.len() / 2]).unwrap();
            half_sent = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let half_sent = half_sent.expect("the MPA Reply arrived");
    let (error, at) = terminate.expect("a Terminate arrived before the FIN");
    assert_eq!(error, TerminateError::MpaTcpLost);
    assert!(
        at.duration_since(half_sent) >= RX_STALL_TIMEOUT,
        "terminated {:?} after the partial FPDU",
        at.duration_since(half_sent)
    );
    drop(sock);
    run_until(&mut [&mut a, &mut b], "the close", limit, |h| {
        h[1].cm.contains(&SiwCmEvent::Closed { conn })
    });
    assert_eq!(b.state(), qp_state::ERR);
    assert!(b
        .wcs
        .iter()
        .any(|w| w.wr_id == 1 && w.status == wc_status::WR_FLUSH_ERR));
    assert!(b
        .events
        .contains(&(OWNER, event_type::QP_FATAL, EventElement::Qp(b.qpn))));
    assert!(b.cm.contains(&SiwCmEvent::Disconnected { conn }));
    assert_eq!(b.counter("terminates_sent"), 1);
}
