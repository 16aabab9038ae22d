//! The give-up timeouts of smoltcp sockets ([`super::arm_timeout`]), in simulated time:
//! two sockets of one interface over a wire that can be muted.

use super::*;
use smoltcp::phy::{DeviceCapabilities, Medium};
use smoltcp::time::Instant as SimInstant;
use std::collections::VecDeque;

/// Ethernet frames from the interface back to itself; `mute` loses every one sent.
#[derive(Default)]
struct Wire {
    packets: VecDeque<Vec<u8>>,
    mute: bool,
}

struct WireRx(Vec<u8>);
struct WireTx<'a>(&'a mut Wire);

impl smoltcp::phy::RxToken for WireRx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl smoltcp::phy::TxToken for WireTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut p = vec![0; len];
        let r = f(&mut p);
        if !self.0.mute {
            self.0.packets.push_back(p);
        }
        r
    }
}

impl smoltcp::phy::Device for Wire {
    type RxToken<'a> = WireRx;
    type TxToken<'a> = WireTx<'a>;

    fn receive(&mut self, _: SimInstant) -> Option<(WireRx, WireTx<'_>)> {
        let p = self.packets.pop_front()?;
        Some((WireRx(p), WireTx(self)))
    }

    fn transmit(&mut self, _: SimInstant) -> Option<WireTx<'_>> {
        Some(WireTx(self))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = 1514;
        caps
    }
}

/// A connected pair (client, server) on one interface, and the simulated clock.
struct Pair {
    wire: Wire,
    iface: Interface,
    sockets: SocketSet<'static>,
    client: SocketHandle,
    server: SocketHandle,
    now: SimInstant,
}

fn socket() -> tcp::Socket<'static> {
    let mut s = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; 65536]),
        tcp::SocketBuffer::new(vec![0; 65536]),
    );
    arm_timeout(&mut s);
    s
}

impl Pair {
    fn connected() -> Pair {
        let mut wire = Wire::default();
        let mut iface = Interface::new(
            Config::new(EthernetAddress([2, 0, 0, 0, 0, 1]).into()),
            &mut wire,
            SimInstant::ZERO,
        );
        iface.update_ip_addrs(|ips| {
            let _ = ips.push(IpCidr::new(IpAddress::v4(10, 0, 0, 1), 24));
        });
        let mut sockets = SocketSet::new(Vec::new());
        let server = sockets.add(socket());
        let client = sockets.add(socket());
        sockets.get_mut::<tcp::Socket>(server).listen(7000).unwrap();
        let remote = IpEndpoint::new(IpAddress::v4(10, 0, 0, 1), 7000);
        let local = IpEndpoint::new(IpAddress::v4(10, 0, 0, 1), 40000);
        sockets
            .get_mut::<tcp::Socket>(client)
            .connect(iface.context(), remote, local)
            .unwrap();
        let mut p = Pair {
            wire,
            iface,
            sockets,
            client,
            server,
            now: SimInstant::ZERO,
        };
        p.run_for(Duration::from_millis(100));
        assert_eq!(p.state(p.client), State::Established);
        assert_eq!(p.state(p.server), State::Established);
        p
    }

    fn state(&self, h: SocketHandle) -> State {
        self.sockets.get::<tcp::Socket>(h).state()
    }

    /// Advances the clock by `d` in 10 ms steps, the sockets' timeouts armed before each
    /// pass as `SmolNet::poll` arms them.
    fn run_for(&mut self, d: Duration) {
        let end = self.now + d.into();
        while self.now < end {
            for (_, s) in self.sockets.iter_mut() {
                if let smoltcp::socket::Socket::Tcp(s) = s {
                    arm_timeout(s);
                }
            }
            self.iface.poll(self.now, &mut self.wire, &mut self.sockets);
            self.now += smoltcp::time::Duration::from_millis(10);
        }
    }

    fn send(&mut self, from: SocketHandle, data: &[u8]) {
        let n = self
            .sockets
            .get_mut::<tcp::Socket>(from)
            .send_slice(data)
            .unwrap();
        assert_eq!(n, data.len());
    }

    fn recv(&mut self, at: SocketHandle) -> Vec<u8> {
        let mut buf = vec![0; 65536];
        let n = self
            .sockets
            .get_mut::<tcp::Socket>(at)
            .recv_slice(&mut buf)
            .unwrap();
        buf.truncate(n);
        buf
    }
}

#[test]
fn an_idle_connection_outlives_every_give_up_timeout() {
    let mut p = Pair::connected();
    p.send(p.client, b"hello");
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.recv(p.server), b"hello");
    // Nothing to send either way for longer than both timeouts: perftest's exchange
    // connection while a long run goes on over the other one.
    p.run_for(CONNECT_TIMEOUT + DATA_TIMEOUT + Duration::from_secs(10));
    assert_eq!(p.state(p.client), State::Established);
    assert_eq!(p.state(p.server), State::Established);
    p.send(p.server, b"still here");
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.recv(p.client), b"still here");
}

#[test]
fn unacknowledged_data_to_a_silent_peer_gives_up_after_the_data_timeout() {
    let mut p = Pair::connected();
    // Long idle first: the count starts with the data, not with the last segment heard.
    p.run_for(Duration::from_secs(200));
    p.wire.mute = true;
    p.send(p.client, b"lost");
    p.run_for(DATA_TIMEOUT - Duration::from_secs(1));
    assert_eq!(p.state(p.client), State::Established);
    p.run_for(Duration::from_secs(2));
    assert_eq!(p.state(p.client), State::Closed);
}

#[test]
fn a_connect_nobody_answers_gives_up_after_the_connect_timeout() {
    let mut p = Pair::connected();
    p.wire.mute = true;
    let h = p.sockets.add(socket());
    let remote = IpEndpoint::new(IpAddress::v4(10, 0, 0, 9), 7000);
    let local = IpEndpoint::new(IpAddress::v4(10, 0, 0, 1), 40001);
    p.sockets
        .get_mut::<tcp::Socket>(h)
        .connect(p.iface.context(), remote, local)
        .unwrap();
    p.run_for(CONNECT_TIMEOUT - Duration::from_secs(1));
    assert_eq!(p.state(h), State::SynSent);
    p.run_for(Duration::from_secs(2));
    assert_eq!(p.state(h), State::Closed);
}
