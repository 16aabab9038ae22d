//! Whole Ethernet frames through `wire::frame::parse` and, for RoCE v2, the IB packet
//! parser: nothing panics, and what parses re-emits to something that parses the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::roce::{Packet, PacketRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = wire::frame::parse(data) else {
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
});
