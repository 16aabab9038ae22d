//! FLUSH and ATOMIC WRITE (the Memory Placement Extensions annex): their opcodes, the
//! FETH before the RETH, the 8-byte payload, and truncated packets rejected.

use crate::roce::*;

const RETH: RethRepr = RethRepr {
    va: 0x0000_7f00_1234_5678,
    rkey: Rkey(0x0102_0304),
    dma_len: 8,
};

fn build(body: Body, payload: &[u8]) -> Vec<u8> {
    let repr = PacketRepr {
        header: Header::new(Qpn(0x11), Psn::new(0x22)),
        body,
        payload,
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut b[..]));
    b
}

#[test]
fn flush_carries_feth_then_reth_and_no_payload() {
    let feth = FethRepr {
        placement: PlacementType::GLOBAL,
        selectivity: Selectivity::MemoryRange,
    };
    let b = build(Body::RcRequest(Request::Flush(feth, RETH)), &[]);
    // BTH (12) + FETH (4) + RETH (16) + ICRC (4), as rxe's opcode table sizes RC FLUSH.
    assert_eq!(b.len(), 36);
    assert_eq!(b[0], 0x1c);
    assert_eq!(&b[12..16], &[0, 0, 0, 1]);
    assert_eq!(&b[16..24], &RETH.va.to_be_bytes());
    assert_eq!(&b[24..28], &RETH.rkey.0.to_be_bytes());
    assert_eq!(&b[28..32], &8u32.to_be_bytes());
    let p = Packet::new_checked(&b[..]).unwrap();
    let r = PacketRepr::parse(&p).unwrap();
    assert_eq!(r.body, Body::RcRequest(Request::Flush(feth, RETH)));
    assert!(r.payload.is_empty());
    // XRC: the XRCETH comes first.
    let x = build(
        Body::XrcRequest {
            xrceth: XrcEthRepr { xrc_srq: 5 },
            request: Request::Flush(feth, RETH),
        },
        &[],
    );
    assert_eq!(x[0], 0xbc);
    assert_eq!(x.len(), 40);
    assert_eq!(&x[16..20], &[0, 0, 0, 1]);
}

#[test]
fn atomic_write_carries_reth_and_eight_bytes() {
    let v = 0x1122_3344_5566_7788u64.to_le_bytes();
    let b = build(Body::RcRequest(Request::AtomicWrite(RETH)), &v);
    assert_eq!(b[0], 0x1d);
    // BTH + RETH + 8 bytes + ICRC; no pad.
    assert_eq!(b.len(), 12 + 16 + 8 + 4);
    assert_eq!(b[1] & 0x30, 0);
    let p = Packet::new_checked(&b[..]).unwrap();
    let r = PacketRepr::parse(&p).unwrap();
    assert_eq!(r.body, Body::RcRequest(Request::AtomicWrite(RETH)));
    assert_eq!(r.payload, &v);
}

#[test]
fn truncated_flush_and_atomic_write_are_rejected() {
    let feth = FethRepr {
        placement: PlacementType::PERSISTENT,
        selectivity: Selectivity::MemoryRegion,
    };
    for (b, min) in [
        (build(Body::RcRequest(Request::Flush(feth, RETH)), &[]), 36),
        (build(Body::RcRequest(Request::AtomicWrite(RETH)), &[]), 32),
    ] {
        for n in (0..min).step_by(4) {
            assert!(Packet::new_checked(&b[..n]).is_err(), "{n} bytes accepted");
        }
    }
    // A FLUSH with bytes after the RETH carries a payload it may not have.
    let mut b = build(Body::RcRequest(Request::Flush(feth, RETH)), &[]);
    b.extend_from_slice(&[0; 4]);
    assert_eq!(
        Packet::new_checked(&b[..]).err(),
        Some(Error::UnexpectedPayload)
    );
}

#[test]
fn uc_and_ud_have_no_placement_opcodes() {
    for t in [TransportType::Uc, TransportType::Ud, TransportType::Rd] {
        for op in [Op::Flush, Op::AtomicWrite] {
            assert_eq!(Opcode::new(t, op).layout(), None, "{t:?} {op:?}");
        }
    }
    assert_eq!(Op::from_bits(0x1c), Op::Flush);
    assert_eq!(Op::from_bits(0x1d), Op::AtomicWrite);
}
