//! Bad input gets a specific error, at every layer this crate parses.

use std::net::{IpAddr, Ipv4Addr};

use wire::cm::{self, CmMad, CmaHeader};
use wire::frame::{self, FrameAddrs};
use wire::iwarp::deframer::Deframer;
use wire::iwarp::mpa::{MpaFrameKind, MpaRepr, MpaRevision};
use wire::iwarp::{fpdu, Error, FpduConfig, RdmapMessage, TerminateRepr};
use wire::roce::packet::{Body, Header, Request, SendSeg};
use wire::roce::{Packet, PacketRepr, Psn, Qpn};

fn addrs() -> FrameAddrs {
    FrameAddrs {
        eth_src: [2, 0, 0, 0, 0, 1],
        eth_dst: [2, 0, 0, 0, 0, 2],
        src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    }
}

fn send_frame(payload: &[u8]) -> Vec<u8> {
    let repr = PacketRepr {
        header: Header::new(Qpn(0x12), Psn::new(1)),
        body: Body::RcRequest(Request::Send(SendSeg::Only)),
        payload,
    };
    frame::build_roce(&addrs(), 1000, 0, &repr)
}

#[test]
fn udp_length_past_the_frame_is_a_udp_error() {
    let mut f = send_frame(b"abcdefgh");
    // UDP length field at 14 + 20 + 4.
    f[38..40].copy_from_slice(&2000u16.to_be_bytes());
    assert_eq!(frame::parse(&f), Err(frame::Error::Udp));
}

#[test]
fn ip_total_length_past_the_frame_is_an_ipv4_error() {
    let mut f = send_frame(b"abcdefgh");
    f[16..18].copy_from_slice(&3000u16.to_be_bytes());
    assert_eq!(frame::parse(&f), Err(frame::Error::Ipv4));
}

#[test]
fn wrong_pad_count_in_a_whole_frame_is_the_ib_pad_error() {
    let mut f = send_frame(b"");
    // BTH byte 1 holds SE, M, PadCnt (2 bits), TVer: claim a pad of 3 with no payload.
    let bth = 14 + 20 + 8;
    let ib_len = f.len() - bth;
    let ib = &mut f[bth..bth + ib_len];
    ib[1] = (ib[1] & !0x30) | 0x30;
    let fr = frame::parse(&f).unwrap();
    let packet = fr.roce().unwrap();
    let err = Packet::new_checked(packet).and_then(|p| PacketRepr::parse(&p).map(|_| ()));
    assert_eq!(err, Err(wire::roce::Error::BadPadCount));
    assert_eq!(fr.verify_icrc(), Some(false));
}

#[test]
fn mpa_request_with_wrong_key_or_length_gets_specific_errors() {
    let repr = MpaRepr {
        kind: MpaFrameKind::Request,
        markers: false,
        crc: true,
        reject: false,
        reserved_flags: 0,
        revision: MpaRevision::V1,
        private_data: b"0123",
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut b);
    let mut bad_key = b.clone();
    bad_key[0] = b'm';
    assert_eq!(MpaRepr::parse_bytes(&bad_key), Err(Error::BadMpaKey));
    let mut too_long = b.clone();
    too_long[18..20].copy_from_slice(&600u16.to_be_bytes());
    assert_eq!(
        MpaRepr::parse_bytes(&too_long),
        Err(Error::PrivateDataTooLong(600))
    );
    let mut past_end = b.clone();
    past_end[18..20].copy_from_slice(&50u16.to_be_bytes());
    assert_eq!(MpaRepr::parse_bytes(&past_end), Err(Error::Truncated));
    // The deframer says the same about a stream.
    let mut d = Deframer::expecting_reply();
    d.read(&b);
    assert_eq!(d.pop().map(|r| r.err()), Some(Some(Error::BadMpaKey)));
    let mut d = Deframer::expecting_request();
    d.read(&too_long);
    assert_eq!(
        d.pop().map(|r| r.err()),
        Some(Some(Error::PrivateDataTooLong(600)))
    );
}

#[test]
fn fpdu_with_short_ulpdu_length_is_rejected() {
    let cfg = FpduConfig {
        crc: true,
        markers: false,
    };
    let mut out = Vec::new();
    assert_eq!(
        fpdu::parse(&[0, 3, 1, 2, 3, 0, 0, 0, 0, 0], cfg, 0, &mut out),
        Err(Error::UlpduTooShort(3))
    );
}

#[test]
fn truncated_ddp_rdmap_and_terminate_headers_are_truncated() {
    assert_eq!(RdmapMessage::parse(&[]), Err(Error::Truncated));
    assert_eq!(
        RdmapMessage::parse(&[0xc1, 0x40, 0, 0]),
        Err(Error::Truncated)
    );
    assert_eq!(
        RdmapMessage::parse(&[0x41, 0x43, 0, 0]),
        Err(Error::Truncated)
    );
    assert_eq!(TerminateRepr::parse(&[0x10]), Err(Error::Truncated));
    // D bit set but no room for the DDP header.
    assert_eq!(
        TerminateRepr::parse(&[0x10, 0, 0x40, 0, 0, 10, 0xc1]),
        Err(Error::Truncated)
    );
}

#[test]
fn unknown_rdmap_opcodes_are_rejected_by_number() {
    for op in 8u8..16 {
        let mut b = [0u8; 18];
        b[0] = 0x41;
        b[1] = 0x40 | op;
        assert_eq!(RdmapMessage::parse(&b), Err(Error::UnknownOpcode(op)));
    }
}

#[test]
fn cm_mads_truncated_or_foreign_get_specific_errors() {
    assert_eq!(CmMad::parse(&[1, 7, 2, 3]), Err(cm::Error::Truncated));
    let mut b = [0u8; 256];
    b[0] = 2;
    assert_eq!(CmMad::parse(&b), Err(cm::Error::BadBaseVersion(2)));
    b[0] = 1;
    b[1] = 0x81;
    assert_eq!(CmMad::parse(&b), Err(cm::Error::NotCmClass(0x81)));
    assert_eq!(CmaHeader::parse(&[0u8; 10]), Err(cm::Error::Truncated));
    let mut h = [0u8; 36];
    h[0] = 1;
    h[1] = 0x40;
    assert_eq!(CmaHeader::parse(&h), Err(cm::Error::BadCmaHeader(1, 4)));
}
