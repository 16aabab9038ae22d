//! The local path against what a TCP connection over loopback does: the connection is
//! made, carries octets both ways in order, blocks when full, ends after what was
//! written, and fails writes once the peer is gone. The wrapped TCP is the kernel's: the
//! listeners are real, and so is the port a local connection holds.

use super::*;
use crate::daemon::siw::net::{KernelNet, TOKEN_KIND};
use std::net::{Ipv4Addr, TcpListener};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const LISTENER: u32 = 1;
const CONNECTOR: u32 = 2;
const ACCEPTED: u32 = 3;

fn net() -> LocalNet {
    LocalNet::new(Box::new(KernelNet::new().expect("epoll set")), &[LO])
}

fn ready(net: &mut LocalNet) -> Vec<Ready> {
    let mut out = Vec::new();
    net.poll(Instant::now(), false, &mut out);
    out
}

fn ready_of(net: &mut LocalNet, kind: u64, id: u32) -> Option<Ready> {
    ready(net)
        .into_iter()
        .find(|r| r.token & TOKEN_KIND == kind && r.token as u32 == id)
}

/// A listener on `listen_on`, a local connection to its port at `dst_ip`, accepted.
/// Returns the net, the connecting end's address and the listener's.
fn pair_via(listen_on: IpAddr, dst_ip: IpAddr) -> (LocalNet, SocketAddr, SocketAddr) {
    let mut net = net();
    let bound = net
        .listen(LISTENER, SocketAddr::new(listen_on, 0))
        .expect("listen");
    let dst = SocketAddr::new(dst_ip, bound.port());
    let from = net
        .connect_local(CONNECTOR, SocketAddr::new(LO, 0), dst)
        .expect("the device's own listener serves it")
        .expect("connected");
    let up = ready_of(&mut net, TOKEN_CONN, CONNECTOR).expect("the connect is reported");
    assert!(up.output && !up.hup, "{up:?}");
    assert_eq!(net.connected(CONNECTOR), Ok(LOCAL_MSS));
    assert!(
        ready_of(&mut net, TOKEN_LISTENER, LISTENER).is_some_and(|r| r.input),
        "the listener reports the connection"
    );
    let a = net.accept(LISTENER, ACCEPTED).expect("accepted");
    assert_eq!(
        a,
        Accepted {
            local: dst,
            peer: from,
            mss: LOCAL_MSS
        }
    );
    assert!(
        ready_of(&mut net, TOKEN_LISTENER, LISTENER).is_none(),
        "backlog empty"
    );
    assert!(net.set_interest(CONNECTOR, true, false));
    (net, from, dst)
}

fn pair() -> LocalNet {
    pair_via(LO, LO).0
}

fn read_all(net: &mut LocalNet, id: u32) -> io::Result<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 100_000];
    loop {
        match net.read(id, &mut buf) {
            Ok(0) => return Ok(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !got.is_empty() => return Ok(got),
            Err(e) => return Err(e),
        }
    }
}

#[test]
fn octets_go_both_ways_in_order_and_are_counted() {
    let mut net = pair();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 256) as u8).collect();
    // Several writes, read back in pieces of another size.
    for chunk in data.chunks(70_001) {
        assert_eq!(net.write(CONNECTOR, chunk).expect("write"), chunk.len());
    }
    let r = ready_of(&mut net, TOKEN_CONN, ACCEPTED).expect("readable");
    assert!(r.input && !r.hup, "{r:?}");
    assert_eq!(read_all(&mut net, ACCEPTED).expect("read"), data);
    assert!(net.take_moved(), "the writes are news for the reader");
    assert!(!net.take_moved(), "told once");
    let empty = net.read(ACCEPTED, &mut [0u8; 16]).unwrap_err();
    assert_eq!(empty.kind(), io::ErrorKind::WouldBlock);
    assert!(
        ready_of(&mut net, TOKEN_CONN, ACCEPTED).is_none(),
        "nothing to read"
    );

    assert_eq!(net.write(ACCEPTED, b"reply").expect("write"), 5);
    assert_eq!(read_all(&mut net, CONNECTOR).expect("read"), b"reply");
    let counters = net.counters();
    assert!(
        counters.contains(&("tcp_local_connections", 1)),
        "{counters:?}"
    );
    assert!(
        counters.contains(&("tcp_local_bytes", 300_005)),
        "{counters:?}"
    );
}

#[test]
fn a_full_pipe_blocks_the_writer_until_read() {
    let mut net = pair();
    assert!(net.set_interest(CONNECTOR, false, true));
    let big = vec![0xa5u8; PIPE_CAP + 1000];
    assert_eq!(net.write(CONNECTOR, &big).expect("write"), PIPE_CAP);
    let full = net.write(CONNECTOR, b"x").unwrap_err();
    assert_eq!(full.kind(), io::ErrorKind::WouldBlock);
    assert!(
        ready_of(&mut net, TOKEN_CONN, CONNECTOR).is_none(),
        "no room: not writable"
    );
    let mut buf = vec![0u8; 4096];
    assert_eq!(net.read(ACCEPTED, &mut buf).expect("read"), 4096);
    let r = ready_of(&mut net, TOKEN_CONN, CONNECTOR).expect("writable again");
    assert!(r.output, "{r:?}");
    assert_eq!(net.write(CONNECTOR, &big[..5000]).expect("write"), 4096);
    let rest = read_all(&mut net, ACCEPTED).expect("read");
    assert_eq!(rest.len(), PIPE_CAP);
}

#[test]
fn shutdown_ends_the_peers_stream_after_what_was_written() {
    let mut net = pair();
    net.write(CONNECTOR, b"last words").expect("write");
    net.shutdown_write(CONNECTOR);
    let after = net.write(CONNECTOR, b"more").unwrap_err();
    assert_eq!(
        after.kind(),
        io::ErrorKind::BrokenPipe,
        "write after shutdown"
    );
    assert_eq!(read_all(&mut net, ACCEPTED).expect("read"), b"last words");
    assert_eq!(net.read(ACCEPTED, &mut [0u8; 8]).expect("FIN"), 0);
    // Half closed: the other direction still carries.
    net.write(ACCEPTED, b"still here").expect("write");
    assert_eq!(read_all(&mut net, CONNECTOR).expect("read"), b"still here");
}

#[test]
fn close_ends_the_stream_and_fails_the_peers_writes() {
    let mut net = pair();
    net.write(CONNECTOR, b"bye").expect("write");
    net.take_moved();
    net.close(CONNECTOR);
    assert!(
        net.take_moved(),
        "the end of the stream is news for the reader"
    );
    let r = ready_of(&mut net, TOKEN_CONN, ACCEPTED).expect("reported");
    assert!(r.input && r.hup, "{r:?}");
    assert_eq!(read_all(&mut net, ACCEPTED).expect("read"), b"bye");
    assert_eq!(net.read(ACCEPTED, &mut [0u8; 8]).expect("FIN"), 0);
    let w = net.write(ACCEPTED, b"anyone?").unwrap_err();
    assert_eq!(w.kind(), io::ErrorKind::BrokenPipe);
    net.close(ACCEPTED);
    assert!(ready(&mut net).is_empty(), "nothing left to report");
}

/// A listener (unwatched unless `watched`) with a connection in its backlog.
fn backlogged(watched: bool) -> LocalNet {
    let mut net = net();
    let bound = net
        .listen(LISTENER, SocketAddr::new(LO, 0))
        .expect("listen");
    net.watch_listener(LISTENER, watched);
    net.connect_local(CONNECTOR, SocketAddr::new(LO, 0), bound)
        .expect("served")
        .expect("connected");
    net
}

#[test]
fn a_closed_listener_resets_what_its_backlog_held() {
    let mut net = backlogged(true);
    net.write(CONNECTOR, b"unheard")
        .expect("the backlog holds it");
    net.close_listener(LISTENER);
    assert!(net.set_interest(CONNECTOR, true, true));
    let r = ready_of(&mut net, TOKEN_CONN, CONNECTOR).expect("reported");
    assert!(r.hup, "{r:?}");
    assert_eq!(net.read(CONNECTOR, &mut [0u8; 8]).expect("end"), 0);
    let w = net.write(CONNECTOR, b"x").unwrap_err();
    assert_eq!(w.kind(), io::ErrorKind::BrokenPipe);
}

#[test]
fn an_unwatched_listener_holds_connections_until_watched() {
    let mut net = backlogged(false);
    assert!(ready_of(&mut net, TOKEN_LISTENER, LISTENER).is_none());
    net.watch_listener(LISTENER, true);
    assert!(ready_of(&mut net, TOKEN_LISTENER, LISTENER).is_some());
    assert!(net.accept(LISTENER, ACCEPTED).is_some());
}

#[test]
fn only_the_devices_own_listeners_and_addresses_are_served() {
    let mut net = net();
    let any = net
        .listen(LISTENER, SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0))
        .expect("listen");
    let src = SocketAddr::new(LO, 0);
    let other_port = SocketAddr::new(LO, any.port().wrapping_add(1).max(1));
    assert!(
        net.connect_local(CONNECTOR, src, other_port).is_none(),
        "no listener"
    );
    // The wildcard serves the device's addresses, not every address of the host.
    let other_ip = SocketAddr::new(Ipv4Addr::new(127, 0, 0, 9).into(), any.port());
    assert!(net.connect_local(CONNECTOR, src, other_ip).is_none());
    let v6 = SocketAddr::new(std::net::Ipv6Addr::LOCALHOST.into(), any.port());
    assert!(
        net.connect_local(CONNECTOR, src, v6).is_none(),
        "another family"
    );
    let (_, from, dst) = pair_via(Ipv4Addr::UNSPECIFIED.into(), LO);
    assert_eq!((from.ip(), dst.ip()), (LO, LO));
}

#[test]
fn the_connecting_port_is_held_while_the_connection_lives() {
    let (mut net, from, _) = pair_via(LO, LO);
    assert_ne!(from.port(), 0, "an ephemeral port was taken");
    let taken = TcpListener::bind(from).unwrap_err();
    assert_eq!(taken.kind(), io::ErrorKind::AddrInUse);
    net.close(CONNECTOR);
    TcpListener::bind(from).expect("the port is free again");
}

#[test]
fn connections_not_local_go_to_the_wrapped_tcp() {
    let mut net = net();
    // The kernel's listener: accept finds nothing local and asks it.
    net.listen(LISTENER, SocketAddr::new(LO, 0))
        .expect("listen");
    assert!(net.accept(LISTENER, ACCEPTED).is_none());
    // An id the local path does not know is the kernel's.
    assert!(net.read(7, &mut [0u8; 4]).is_err());
    assert!(!net.set_interest(7, true, false));
}
