//! Bad input: a specific error for each kind of malformed packet.

use crate::roce::*;

/// A valid RC SEND Only with 4 bytes of payload, BTH..ICRC.
fn send_only() -> Vec<u8> {
    let repr = PacketRepr {
        header: Header::new(Qpn(0x11), Psn::new(1)),
        body: Body::RcRequest(Request::Send(SendSeg::Only)),
        payload: &[1, 2, 3, 4],
    };
    let mut b = vec![0; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut b[..]));
    b
}

fn check(b: &[u8]) -> Result<()> {
    let p = Packet::new_checked(b)?;
    PacketRepr::parse(&p).map(|_| ())
}

#[test]
fn a_valid_packet_passes() {
    assert_eq!(check(&send_only()), Ok(()));
}

#[test]
fn truncated_headers_are_truncated() {
    let b = send_only();
    assert_eq!(check(&b[..8]), Err(Error::Truncated));
    let mut read = vec![0u8; 12 + 16 + 4];
    read[0] = 0x0c;
    assert_eq!(check(&read[..28]), Err(Error::Truncated));
    assert_eq!(check(&read), Ok(()));
}

#[test]
fn unaligned_length_is_rejected() {
    let mut b = send_only();
    b.push(0);
    assert_eq!(check(&b), Err(Error::Unaligned));
}

#[test]
fn nonzero_transport_version_is_rejected() {
    let mut b = send_only();
    b[1] |= 0x01;
    assert_eq!(check(&b), Err(Error::BadTransportVersion(1)));
}

#[test]
fn opcodes_outside_the_table_are_invalid() {
    for op in [0x15u8, 0x2c, 0x31, 0x60, 0x80, 0x1f, 0x36] {
        let mut b = vec![0u8; 64];
        b[0] = op;
        assert_eq!(check(&b), Err(Error::InvalidOpcode(Opcode(op))), "{op:#x}");
    }
}

#[test]
fn rd_and_manufacturer_opcodes_are_unsupported() {
    let mut b = vec![0u8; 64];
    b[0] = 0x44;
    assert_eq!(
        check(&b),
        Err(Error::UnsupportedTransport(TransportType::Rd))
    );
    b[0] = 0xc0;
    assert_eq!(
        check(&b),
        Err(Error::UnsupportedTransport(TransportType::Unknown(6)))
    );
    assert!(Opcode(0x44).layout().is_some_and(|l| l.rdeth && l.deth));
}

#[test]
fn pad_count_larger_than_payload_is_bad() {
    let repr = PacketRepr {
        header: Header::new(Qpn(1), Psn::new(1)),
        body: Body::RcRequest(Request::Send(SendSeg::Only)),
        payload: &[],
    };
    let mut b = vec![0; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut b[..]));
    b[1] |= 0x30;
    assert_eq!(check(&b), Err(Error::BadPadCount));
}

#[test]
fn payload_on_an_ack_is_unexpected() {
    let mut b = vec![0u8; 12 + 4 + 4 + 4];
    b[0] = 0x11;
    assert_eq!(check(&b), Err(Error::UnexpectedPayload));
    assert_eq!(check(&b[..20]), Ok(()));
    b[1] = 0x10;
    assert_eq!(check(&b[..20]), Err(Error::BadPadCount));
}

#[test]
fn reserved_aeth_syndromes_are_rejected() {
    let mut b = vec![0u8; 12 + 4 + 4];
    b[0] = 0x11;
    b[12] = 0x40;
    assert_eq!(check(&b), Err(Error::ReservedSyndrome(0x40)));
    b[12] = 0x80;
    assert_eq!(check(&b), Err(Error::ReservedSyndrome(0x80)));
}

#[test]
fn payload_strips_the_pad() {
    let repr = PacketRepr {
        header: Header::new(Qpn(1), Psn::new(1)),
        body: Body::Uc(UcRequest::Send(UcSendSeg::Only)),
        payload: &[9, 8, 7, 6, 5],
    };
    assert_eq!(repr.buffer_len(), 12 + 8 + 4);
    let mut b = vec![0; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut b[..]));
    assert_eq!(b[1] >> 4 & 3, 3);
    let p = Packet::new_checked(&b[..]).unwrap();
    assert_eq!(p.payload(), &[9, 8, 7, 6, 5]);
}
