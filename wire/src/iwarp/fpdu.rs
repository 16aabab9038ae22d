//! MPA FPDUs (RFC 5044 §4–§6): framing, padding, CRC32c and markers.
//!
//! ```text
//!  ULPDU_Length (16) | ULPDU (ULPDU_Length octets) | PAD (0..3) | CRC (32)
//! ```
//! The pad makes `2 + ULPDU_Length + PAD` a multiple of 4. When markers are on, a 4-octet
//! marker `| reserved (16) | FPDUPTR (16) |` sits at every stream offset that is a multiple
//! of 512, counted from the first octet after the MPA Request/Reply frame of that
//! direction (RFC 5044 §5; Wireshark's iwarp_mpa dissector counts the same way). FPDUPTR
//! is the distance from the FPDU's first octet back from the marker, so a marker at the
//! very start of an FPDU carries 0. Markers are not counted in ULPDU_Length or in the
//! pad, but the CRC covers the markers that precede it (RFC 5044 §6).
//!
//! Stream offsets here are `u64` octet counts since the start of full operation; every
//! FPDU starts at a multiple of 4, so a marker never splits a field.

use super::crc::{self, CRC_LEN};
use super::ddp::TAGGED_HEADER_LEN;
use super::{be16, Error, Result};

/// Markers are placed every this many octets of the stream.
pub const MARKER_INTERVAL: u64 = 512;
/// Length of a marker.
pub const MARKER_LEN: usize = 4;
/// Length of the ULPDU_Length field.
pub const LENGTH_LEN: usize = 2;

/// What the MPA negotiation decided for one direction of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FpduConfig {
    /// CRCs are computed and checked (either side asked: RFC 5044 §7.1, C flag).
    pub crc: bool,
    /// Markers are inserted in this direction (the receiver asked: M flag).
    pub markers: bool,
}

/// Octets of pad after a ULPDU of `ulpdu_len` octets.
pub fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (LENGTH_LEN + ulpdu_len) % 4) % 4
}

/// Length of an FPDU without markers: length field, ULPDU, pad and CRC.
pub fn unmarked_len(ulpdu_len: usize) -> usize {
    LENGTH_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

fn is_marker_position(pos: u64) -> bool {
    pos.is_multiple_of(MARKER_INTERVAL)
}

/// One piece of an FPDU as it lies in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    /// `len` octets of the unmarked FPDU starting at `logical`, placed at `phys`.
    Data {
        phys: usize,
        logical: usize,
        len: usize,
    },
    /// A marker at `phys` (offset from the FPDU's first octet).
    Marker { phys: usize },
}

/// Splits an FPDU whose unmarked length is `logical_len`, starting at stream offset
/// `pos`, into the pieces it occupies; returns the length it occupies in the stream.
fn layout(pos: u64, logical_len: usize, markers: bool, mut f: impl FnMut(Piece)) -> usize {
    let mut phys = 0usize;
    let mut logical = 0usize;
    while logical < logical_len {
        let at = pos + phys as u64;
        if markers && is_marker_position(at) {
            f(Piece::Marker { phys });
            phys += MARKER_LEN;
            continue;
        }
        let room = if markers {
            (MARKER_INTERVAL - at % MARKER_INTERVAL) as usize
        } else {
            usize::MAX
        };
        let len = room.min(logical_len - logical);
        f(Piece::Data { phys, logical, len });
        phys += len;
        logical += len;
    }
    phys
}

/// Length an FPDU carrying `ulpdu_len` octets occupies in the stream when it starts at
/// stream offset `pos`.
pub fn wire_len(ulpdu_len: usize, cfg: FpduConfig, pos: u64) -> usize {
    layout(pos, unmarked_len(ulpdu_len), cfg.markers, |_| {})
}

/// Writes the FPDU carrying `ulpdu` that starts at stream offset `pos` into `buf`;
/// returns its length (`wire_len`).
///
/// # Panics
/// If `ulpdu` is longer than 65535 octets or `buf` is shorter than `wire_len`.
pub fn emit(ulpdu: &[u8], cfg: FpduConfig, pos: u64, buf: &mut [u8]) -> usize {
    let ulpdu_len = u16::try_from(ulpdu.len()).expect("ULPDU longer than 65535 octets");
    let logical_len = unmarked_len(ulpdu.len());
    let len_bytes = ulpdu_len.to_be_bytes();
    let ulpdu_end = LENGTH_LEN + ulpdu.len();
    // Each piece is filled by runs: the part of the length field, of the ULPDU, and of
    // the pad and CRC (zeros for now) that it holds.
    let total = layout(pos, logical_len, cfg.markers, |piece| match piece {
        Piece::Marker { phys } => {
            buf[phys..phys + 2].fill(0);
            buf[phys + 2..phys + 4].copy_from_slice(&(phys as u16).to_be_bytes());
        }
        Piece::Data { phys, logical, len } => {
            let out = &mut buf[phys..phys + len];
            if let Some((lo, hi)) = overlap(logical, len, 0, LENGTH_LEN) {
                out[lo - logical..hi - logical].copy_from_slice(&len_bytes[lo..hi]);
            }
            if let Some((lo, hi)) = overlap(logical, len, LENGTH_LEN, ulpdu_end) {
                out[lo - logical..hi - logical]
                    .copy_from_slice(&ulpdu[lo - LENGTH_LEN..hi - LENGTH_LEN]);
            }
            if let Some((lo, hi)) = overlap(logical, len, ulpdu_end, logical_len) {
                out[lo - logical..hi - logical].fill(0);
            }
        }
    });
    // The CRC is the last aligned word; no marker follows it inside this FPDU.
    let crc_phys = total - CRC_LEN;
    let value = if cfg.crc {
        crc::crc32c(&buf[..crc_phys])
    } else {
        0
    };
    buf[crc_phys..total].copy_from_slice(&crc::to_wire(value));
    total
}

/// [`emit`] for a direction without markers, the ULPDU written in place by `fill` (given
/// exactly `ulpdu_len` octets) instead of built elsewhere and copied; returns the FPDU's
/// length ([`unmarked_len`]).
///
/// # Panics
/// If `ulpdu_len` is over 65535 or `buf` is shorter than [`unmarked_len`].
pub fn emit_unmarked_with(
    ulpdu_len: usize,
    crc: bool,
    buf: &mut [u8],
    fill: impl FnOnce(&mut [u8]),
) -> usize {
    let len = u16::try_from(ulpdu_len).expect("ULPDU longer than 65535 octets");
    let total = unmarked_len(ulpdu_len);
    let ulpdu_end = LENGTH_LEN + ulpdu_len;
    let crc_at = total - CRC_LEN;
    buf[..LENGTH_LEN].copy_from_slice(&len.to_be_bytes());
    fill(&mut buf[LENGTH_LEN..ulpdu_end]);
    buf[ulpdu_end..crc_at].fill(0);
    let value = if crc { crc::crc32c(&buf[..crc_at]) } else { 0 };
    buf[crc_at..total].copy_from_slice(&crc::to_wire(value));
    total
}

/// The logical range `from..to` clipped to the piece `logical..logical + len`, if they
/// meet.
fn overlap(logical: usize, len: usize, from: usize, to: usize) -> Option<(usize, usize)> {
    let lo = logical.max(from);
    let hi = (logical + len).min(to);
    (lo < hi).then_some((lo, hi))
}

/// An FPDU found in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FpduInfo {
    /// ULPDU_Length.
    pub ulpdu_len: u16,
    /// Octets of pad.
    pub pad_len: u8,
    /// Markers inside the FPDU.
    pub markers: u8,
    /// The CRC field as received (0 when CRCs are off).
    pub crc: u32,
    /// Whether the CRC was checked (CRCs negotiated) and matched.
    pub crc_checked: bool,
    /// Octets the FPDU occupies in the stream, markers included.
    pub wire_len: usize,
}

/// Parses the FPDU at the start of `buf`, which starts at stream offset `pos`.
///
/// Returns `Ok(None)` if `buf` does not yet hold the whole FPDU. On success the ULPDU,
/// markers removed, is in `ulpdu` (cleared first). A CRC mismatch is
/// [`Error::BadCrc`]; a marker whose FPDUPTR does not point to the FPDU's start is
/// [`Error::BadMarker`]; a ULPDU too short for a DDP header is [`Error::UlpduTooShort`].
pub fn parse(
    buf: &[u8],
    cfg: FpduConfig,
    pos: u64,
    ulpdu: &mut Vec<u8>,
) -> Result<Option<FpduInfo>> {
    ulpdu.clear();
    if !cfg.markers {
        let parsed = parse_unmarked(buf, cfg.crc);
        if let Ok(Some(info)) = &parsed {
            ulpdu.extend_from_slice(unmarked_ulpdu(buf, info));
        }
        return parsed;
    }
    let header_at = if cfg.markers && is_marker_position(pos) {
        MARKER_LEN
    } else {
        0
    };
    let Some(len_field) = buf.get(header_at..header_at + LENGTH_LEN) else {
        return Ok(None);
    };
    let ulpdu_len = be16(len_field);
    if usize::from(ulpdu_len) < TAGGED_HEADER_LEN {
        return Err(Error::UlpduTooShort(ulpdu_len));
    }
    let logical_len = unmarked_len(usize::from(ulpdu_len));
    let total = wire_len(usize::from(ulpdu_len), cfg, pos);
    if buf.len() < total {
        return Ok(None);
    }
    let ulpdu_end = LENGTH_LEN + usize::from(ulpdu_len);
    let mut marker_count = 0u8;
    let mut bad_marker = None;
    layout(pos, logical_len, cfg.markers, |piece| match piece {
        Piece::Marker { phys } => {
            marker_count = marker_count.saturating_add(1);
            let fpduptr = be16(&buf[phys + 2..phys + 4]);
            // FPDUPTR is 16 bits: an FPDU with markers can outgrow it (a ULPDU near
            // 65535 octets plus its markers), and then the offset wraps, as `emit`
            // writes it.
            if fpduptr != phys as u16 && bad_marker.is_none() {
                bad_marker = Some(Error::BadMarker {
                    position: pos + phys as u64,
                    fpduptr,
                });
            }
        }
        Piece::Data { phys, logical, len } => {
            if let Some((lo, hi)) = overlap(logical, len, LENGTH_LEN, ulpdu_end) {
                let from = phys + (lo - logical);
                ulpdu.extend_from_slice(&buf[from..from + (hi - lo)]);
            }
        }
    });
    if let Some(e) = bad_marker {
        ulpdu.clear();
        return Err(e);
    }
    let crc_phys = total - CRC_LEN;
    let received = crc::from_wire(&buf[crc_phys..total]);
    if cfg.crc {
        let computed = crc::crc32c(&buf[..crc_phys]);
        if computed != received {
            ulpdu.clear();
            return Err(Error::BadCrc { computed, received });
        }
    }
    Ok(Some(FpduInfo {
        ulpdu_len,
        pad_len: pad_len(usize::from(ulpdu_len)) as u8,
        markers: marker_count,
        crc: received,
        crc_checked: cfg.crc,
        wire_len: total,
    }))
}

/// [`parse`] for a direction without markers, where the ULPDU lies whole in `buf`
/// ([`unmarked_ulpdu`]) and is not copied out.
pub fn parse_unmarked(buf: &[u8], crc: bool) -> Result<Option<FpduInfo>> {
    let Some(len_field) = buf.get(..LENGTH_LEN) else {
        return Ok(None);
    };
    let ulpdu_len = be16(len_field);
    if usize::from(ulpdu_len) < TAGGED_HEADER_LEN {
        return Err(Error::UlpduTooShort(ulpdu_len));
    }
    let total = unmarked_len(usize::from(ulpdu_len));
    if buf.len() < total {
        return Ok(None);
    }
    let crc_at = total - CRC_LEN;
    let received = crc::from_wire(&buf[crc_at..total]);
    if crc {
        let computed = crc::crc32c(&buf[..crc_at]);
        if computed != received {
            return Err(Error::BadCrc { computed, received });
        }
    }
    Ok(Some(FpduInfo {
        ulpdu_len,
        pad_len: pad_len(usize::from(ulpdu_len)) as u8,
        markers: 0,
        crc: received,
        crc_checked: crc,
        wire_len: total,
    }))
}

/// The ULPDU of the unmarked FPDU at the start of `buf` that [`parse_unmarked`] found.
pub fn unmarked_ulpdu<'a>(buf: &'a [u8], info: &FpduInfo) -> &'a [u8] {
    &buf[LENGTH_LEN..LENGTH_LEN + usize::from(info.ulpdu_len)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_unmarked_with_writes_what_emit_writes() {
        for crc in [false, true] {
            let cfg = FpduConfig {
                crc,
                markers: false,
            };
            for len in [0usize, 1, 2, 3, 4, 5, 511, 1448, 65535] {
                let ulpdu: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
                let n = wire_len(len, cfg, 0);
                let mut a = vec![0xaa; n];
                let mut b = vec![0x55; n];
                assert_eq!(emit(&ulpdu, cfg, 0, &mut a), n);
                let m = emit_unmarked_with(len, crc, &mut b, |u| u.copy_from_slice(&ulpdu));
                assert_eq!((m, &a), (n, &b), "length {len}, crc {crc}");
            }
        }
    }

    const CRC_ONLY: FpduConfig = FpduConfig {
        crc: true,
        markers: false,
    };
    const BOTH: FpduConfig = FpduConfig {
        crc: true,
        markers: true,
    };

    fn build(ulpdu: &[u8], cfg: FpduConfig, pos: u64) -> Vec<u8> {
        let mut b = vec![0u8; wire_len(ulpdu.len(), cfg, pos)];
        let n = emit(ulpdu, cfg, pos, &mut b);
        assert_eq!(n, b.len());
        b
    }

    #[test]
    fn pad_makes_length_field_and_ulpdu_a_multiple_of_four() {
        assert_eq!(pad_len(14), 0);
        assert_eq!(pad_len(15), 3);
        assert_eq!(pad_len(16), 2);
        assert_eq!(pad_len(17), 1);
    }

    #[test]
    fn unmarked_fpdu_is_length_ulpdu_pad_crc() {
        let u = [7u8; 17];
        let b = build(&u, CRC_ONLY, 0);
        assert_eq!(b.len(), 2 + 17 + 1 + 4);
        assert_eq!(&b[..2], &[0, 17]);
        assert_eq!(&b[2..19], &u);
        assert_eq!(b[19], 0);
        assert_eq!(crc::from_wire(&b[20..]), crc::crc32c(&b[..20]));
    }

    #[test]
    fn fpdu_at_stream_start_begins_with_a_zero_marker() {
        let u = [1u8; 18];
        let b = build(&u, BOTH, 0);
        assert_eq!(&b[..4], &[0, 0, 0, 0]);
        assert_eq!(&b[4..6], &[0, 18]);
        let mut out = Vec::new();
        let info = parse(&b, BOTH, 0, &mut out).unwrap().unwrap();
        assert_eq!(out, u);
        assert_eq!(info.markers, 1);
    }

    #[test]
    fn marker_inside_an_fpdu_points_back_to_its_start() {
        let u: Vec<u8> = (0..600u32).map(|i| i as u8).collect();
        let pos = 500;
        let b = build(&u, BOTH, pos);
        // Stream offset 512 is 12 octets into the FPDU.
        assert_eq!(&b[12..16], &[0, 0, 0, 12]);
        let mut out = Vec::new();
        let info = parse(&b, BOTH, pos, &mut out).unwrap().unwrap();
        assert_eq!(out, u);
        assert_eq!(info.markers, 2);
        assert_eq!(info.wire_len, unmarked_len(600) + 8);
    }

    #[test]
    fn partial_fpdu_needs_more() {
        let b = build(&[3u8; 20], CRC_ONLY, 0);
        let mut out = Vec::new();
        for cut in 0..b.len() {
            assert_eq!(parse(&b[..cut], CRC_ONLY, 0, &mut out), Ok(None));
        }
    }

    #[test]
    fn flipped_bit_is_a_crc_error() {
        let mut b = build(&[3u8; 20], CRC_ONLY, 0);
        b[5] ^= 1;
        let mut out = Vec::new();
        assert!(matches!(
            parse(&b, CRC_ONLY, 0, &mut out),
            Err(Error::BadCrc { .. })
        ));
    }

    #[test]
    fn crc_is_not_checked_when_not_negotiated() {
        let cfg = FpduConfig::default();
        let b = build(&[3u8; 20], cfg, 0);
        assert_eq!(&b[b.len() - 4..], &[0, 0, 0, 0]);
        let mut out = Vec::new();
        assert!(parse(&b, cfg, 0, &mut out).unwrap().is_some());
    }

    #[test]
    fn wrong_fpduptr_is_a_marker_error() {
        let mut b = build(&[3u8; 600], BOTH, 500);
        b[15] = 13;
        let mut out = Vec::new();
        assert_eq!(
            parse(&b, BOTH, 500, &mut out),
            Err(Error::BadMarker {
                position: 512,
                fpduptr: 13
            })
        );
    }

    #[test]
    fn fpdu_longer_than_fpduptr_can_count_round_trips() {
        let u: Vec<u8> = (0..65_191u32).map(|i| i as u8).collect();
        let b = build(&u, BOTH, 852);
        assert!(b.len() > usize::from(u16::MAX));
        let mut out = Vec::new();
        let info = parse(&b, BOTH, 852, &mut out).unwrap().unwrap();
        assert_eq!(info.wire_len, b.len());
        assert_eq!(out, u);
    }

    #[test]
    fn ulpdu_shorter_than_a_ddp_header_is_rejected() {
        let mut out = Vec::new();
        assert_eq!(
            parse(&[0, 4, 0, 0, 0, 0, 0, 0, 0, 0], CRC_ONLY, 0, &mut out),
            Err(Error::UlpduTooShort(4))
        );
    }
}
