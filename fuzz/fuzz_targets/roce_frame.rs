//! RoCE v2 through `wire::frame::parse` and the IB packet parser: nothing panics, and
//! what parses re-emits to something that parses the same. Whole frames also go through
//! the PAUSE / PFC parser (`wire::mac_control`), which the packet backend runs on every
//! MAC Control frame it receives: no panic, and a parsed request re-emits to the same.
//!
//! Input: byte 0 chooses the shape. Odd: the rest is a whole Ethernet frame. Even: the
//! rest is an IB packet (BTH through ICRC), wrapped into an IPv4 or IPv6 UDP frame to
//! port 4791 first, so the fuzzer reaches the IB parser without having to invent valid
//! Ethernet, IP and UDP headers.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use wire::frame::{self, FrameAddrs};
use wire::roce::{Packet, PacketRepr, ROCE_V2_UDP_PORT};

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let built;
    let bytes = if shape & 1 == 1 {
        if let Ok(pause) = wire::mac_control::parse_frame(rest) {
            let again = wire::mac_control::emit_frame(&pause, [2, 0, 0, 0, 0, 1]);
            assert_eq!(wire::mac_control::parse_frame(&again), Ok(pause));
        }
        rest
    } else {
        let (src, dst) = if shape & 2 == 0 {
            (
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            )
        } else {
            (
                IpAddr::V6(Ipv6Addr::LOCALHOST),
                IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            )
        };
        let addrs = FrameAddrs {
            eth_src: [2, 0, 0, 0, 0, 1],
            eth_dst: [2, 0, 0, 0, 0, 2],
            src,
            dst,
        };
        if rest.len() > 9000 {
            return;
        }
        built = frame::build_udp(&addrs, 49152, ROCE_V2_UDP_PORT, 0, rest);
        &built[..]
    };
    let Ok(frame) = frame::parse(bytes) else {
        assert!(shape & 1 == 1, "a frame we built does not parse");
        return;
    };
    let _ = frame.verify_icrc();
    let Some(ib) = frame.roce() else {
        return;
    };
    let Ok(packet) = Packet::new_checked(ib) else {
        return;
    };
    let Ok(repr) = PacketRepr::parse(&packet) else {
        return;
    };
    let mut again = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut again[..]));
    let p2 = Packet::new_checked(&again[..]).expect("re-emitted packet is well formed");
    assert_eq!(
        PacketRepr::parse(&p2).expect("re-emitted packet parses"),
        repr
    );
    // A frame built around the re-emitted packet verifies.
    let addrs = FrameAddrs {
        eth_src: [2, 0, 0, 0, 0, 1],
        eth_dst: [2, 0, 0, 0, 0, 2],
        src: frame.ip.src(),
        dst: frame.ip.dst(),
    };
    if addrs.src.is_ipv4() == addrs.dst.is_ipv4() {
        let f = frame::build_roce(&addrs, 1, 2, &repr);
        let parsed = frame::parse(&f).expect("built frame parses");
        assert_eq!(parsed.verify_icrc(), Some(true));
    }
});
