//! `fpdu::emit` against a byte-at-a-time reference of RFC 5044 §4–§6 framing: length
//! field, ULPDU, pad, a marker before every octet that falls on a multiple of 512 in the
//! stream, and a CRC32c computed bit by bit over everything before it.

use proptest::prelude::*;
use wire::iwarp::fpdu::{self, FpduConfig};

/// CRC32c, one bit at a time (reflected Castagnoli polynomial; RFC 3720 B.4).
fn crc32c_bitwise(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// The FPDU carrying `ulpdu` that starts at stream offset `pos`, built one octet at a time.
fn reference_emit(ulpdu: &[u8], cfg: FpduConfig, pos: u64) -> Vec<u8> {
    let mut logical = Vec::new();
    logical.extend_from_slice(&(ulpdu.len() as u16).to_be_bytes());
    logical.extend_from_slice(ulpdu);
    while logical.len() % 4 != 0 {
        logical.push(0);
    }
    logical.extend_from_slice(&[0; 4]); // the CRC, filled in last
    let mut out = Vec::new();
    for &b in &logical {
        if cfg.markers && (pos + out.len() as u64).is_multiple_of(512) {
            let fpduptr = out.len() as u16;
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&fpduptr.to_be_bytes());
        }
        out.push(b);
    }
    let crc_at = out.len() - 4;
    let crc = if cfg.crc {
        crc32c_bitwise(&out[..crc_at])
    } else {
        0
    };
    out[crc_at..].copy_from_slice(&crc.to_le_bytes());
    out
}

fn check(ulpdu: &[u8], cfg: FpduConfig, pos: u64, fill: u8) -> Result<(), TestCaseError> {
    let want = reference_emit(ulpdu, cfg, pos);
    prop_assert_eq!(fpdu::wire_len(ulpdu.len(), cfg, pos), want.len());
    // Stale bytes in the buffer must all be overwritten, and nothing past the FPDU touched.
    let mut buf = vec![fill; want.len() + 8];
    prop_assert_eq!(fpdu::emit(ulpdu, cfg, pos, &mut buf), want.len());
    prop_assert_eq!(&buf[..want.len()], &want[..]);
    prop_assert!(buf[want.len()..].iter().all(|&b| b == fill));
    if ulpdu.len() >= 14 && pos.is_multiple_of(4) {
        let mut out = Vec::new();
        let info = fpdu::parse(&want, cfg, pos, &mut out).unwrap().unwrap();
        prop_assert_eq!(info.wire_len, want.len());
        prop_assert_eq!(&out[..], ulpdu);
    }
    Ok(())
}

#[test]
fn bitwise_crc32c_matches_rfc3720_b4() {
    assert_eq!(crc32c_bitwise(&[0u8; 32]), 0x8a91_36aa);
    assert_eq!(crc32c_bitwise(&[0xffu8; 32]), 0x62a8_ab43);
}

#[test]
fn emit_matches_reference_around_every_marker_phase() {
    for markers in [false, true] {
        for crc in [false, true] {
            let cfg = FpduConfig { crc, markers };
            for len in [
                0, 1, 2, 3, 13, 14, 15, 16, 17, 505, 506, 507, 508, 509, 1448,
            ] {
                let u: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
                for pos in (0..1040).chain((1 << 40) - 16..(1 << 40) + 16) {
                    check(&u, cfg, pos, 0xa5).unwrap();
                }
            }
        }
    }
}

proptest! {
    #[test]
    fn emit_matches_byte_at_a_time_reference(
        ulpdu in proptest::collection::vec(any::<u8>(), 0..3000),
        pos in prop_oneof![0u64..4096, any::<u64>().prop_map(|p| p >> 1)],
        aligned in any::<bool>(),
        crc in any::<bool>(), markers in any::<bool>(), fill in any::<u8>(),
    ) {
        let pos = if aligned { pos & !3 } else { pos };
        check(&ulpdu, FpduConfig { crc, markers }, pos, fill)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn emit_matches_reference_for_long_ulpdus(
        len in 60_000usize..=65_535, seed in any::<u8>(), pos in 0u64..2048,
        crc in any::<bool>(), markers in any::<bool>(),
    ) {
        let ulpdu: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
        check(&ulpdu, FpduConfig { crc, markers }, pos, 0x5a)?;
    }
}
