//! One direction of an MPA byte stream, deframed (rustls's deframer shape).
//!
//! Feed what TCP delivered with [`Deframer::read`]; call [`Deframer::pop`] until it
//! answers `None` (need more bytes). `Some(Ok(_))` is the next Request/Reply frame or
//! FPDU, `Some(Err(_))` a broken stream. What comes out does not depend on how the
//! stream was cut into `read` calls.
//!
//! Each direction starts with an MPA Request (initiator to responder) or Reply
//! (responder to initiator) frame; after it the deframer waits, answering `None`, until
//! the owner, who sees both frames, calls [`Deframer::set_config`] with what was
//! negotiated (RFC 5044 §7.1: CRC if either side asked; markers in a direction if its
//! receiver asked). Stream offsets for markers count from the first octet after that
//! frame.
//!
//! Errors: [`Error::BadCrc`] consumes the FPDU and the stream goes on (the owner
//! decides; RFC 5044 §6 says to close). Every other error is fatal: it is returned once,
//! then `pop` answers `None` and [`Deframer::is_failed`] is true.

use super::fpdu::{self, FpduConfig, FpduInfo};
use super::mpa::{self, MpaFrameKind, MpaRepr};
use super::{be16, Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Expect(MpaFrameKind),
    Negotiating,
    Full(FpduConfig),
    Failed,
}

/// What [`Deframer::pop`] yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deframed<'a> {
    /// The MPA Request or Reply frame that opens the direction.
    Mpa(MpaRepr<'a>),
    /// An FPDU.
    Fpdu {
        /// Its framing.
        info: FpduInfo,
        /// Its ULPDU, markers removed (a DDP segment).
        ulpdu: &'a [u8],
        /// Stream offset of its first octet, counted from the start of full operation.
        stream_offset: u64,
    },
}

/// Deframes one direction of an MPA stream.
#[derive(Debug, Clone)]
pub struct Deframer {
    /// `buf[..end]` holds the octets received; the rest is space for the next read,
    /// initialised once and kept (a read into it is not preceded by zeroing).
    buf: Vec<u8>,
    end: usize,
    /// Length of the space the last [`Deframer::space`] offered (what `filled` may count).
    offered: usize,
    /// Octets at the front of `buf` already handed out and released.
    start: usize,
    /// Length of the unit handed out by the last `pop` (released at the next one).
    consumed: usize,
    /// Stream offset (since full operation) of `buf[start + consumed]`.
    pos: u64,
    phase: Phase,
    ulpdu: Vec<u8>,
}

impl Deframer {
    /// A deframer for the initiator-to-responder direction: it expects a Request.
    pub fn expecting_request() -> Deframer {
        Deframer::with_phase(Phase::Expect(MpaFrameKind::Request))
    }

    /// A deframer for the responder-to-initiator direction: it expects a Reply.
    pub fn expecting_reply() -> Deframer {
        Deframer::with_phase(Phase::Expect(MpaFrameKind::Reply))
    }

    /// A deframer already in full operation, at stream offset 0.
    pub fn in_full_operation(cfg: FpduConfig) -> Deframer {
        Deframer::with_phase(Phase::Full(cfg))
    }

    fn with_phase(phase: Phase) -> Deframer {
        Deframer {
            buf: Vec::new(),
            end: 0,
            offered: 0,
            start: 0,
            consumed: 0,
            pos: 0,
            phase,
            ulpdu: Vec::new(),
        }
    }

    /// Appends bytes the stream delivered.
    ///
    /// Octets handed out before are released here, and the rest of the buffer moves to
    /// the front when it is no longer than what was released (so a move costs at most
    /// what was handed out since the last one). The owner pops what is complete before
    /// it reads again, so the rest is usually one partial FPDU: moving it here, and not
    /// in [`Deframer::pop`] half-way through a large read, copies each octet at most once
    /// more and mostly not at all.
    pub fn read(&mut self, bytes: &[u8]) {
        if let Some(space) = self.space(bytes.len()) {
            space.copy_from_slice(bytes);
            self.filled(bytes.len());
        }
    }

    /// Room for the next `max` octets of the stream, to be filled in place (a socket read
    /// straight into the deframer) and then reported with [`Deframer::filled`]; what was
    /// handed out is released first, as in [`Deframer::read`]. `None` once the stream
    /// failed: its octets are of no use any more.
    pub fn space(&mut self, max: usize) -> Option<&mut [u8]> {
        if self.phase == Phase::Failed {
            return None;
        }
        self.start += std::mem::take(&mut self.consumed);
        if self.start > 0 && self.end - self.start <= self.start {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < self.end + max {
            self.buf.resize(self.end + max, 0);
        }
        self.offered = max;
        Some(&mut self.buf[self.end..self.end + max])
    }

    /// The first `n` octets of the last [`Deframer::space`] were filled with the stream's
    /// next octets (more than that space held are not counted).
    pub fn filled(&mut self, n: usize) {
        self.end += n.min(std::mem::take(&mut self.offered));
    }

    /// Enters full operation with what the MPA negotiation decided. Only takes effect
    /// after the Request/Reply frame was popped (or for a deframer made in full
    /// operation, replaces its configuration).
    pub fn set_config(&mut self, cfg: FpduConfig) {
        if matches!(self.phase, Phase::Negotiating | Phase::Full(_)) {
            self.phase = Phase::Full(cfg);
        }
    }

    /// Whether the Request/Reply frame has been popped and no configuration set yet.
    pub fn is_negotiating(&self) -> bool {
        self.phase == Phase::Negotiating
    }

    /// Whether a fatal error ended the stream.
    pub fn is_failed(&self) -> bool {
        self.phase == Phase::Failed
    }

    /// Octets received and not yet handed out.
    pub fn buffered(&self) -> usize {
        self.end - self.start - self.consumed
    }

    fn fail(&mut self, e: Error) -> Option<Result<Deframed<'_>>> {
        self.phase = Phase::Failed;
        self.buf = Vec::new();
        self.end = 0;
        self.offered = 0;
        self.start = 0;
        self.consumed = 0;
        Some(Err(e))
    }

    /// The next frame, `None` if more bytes are needed, or an error.
    pub fn pop(&mut self) -> Option<Result<Deframed<'_>>> {
        self.start += std::mem::take(&mut self.consumed);
        if self.start == self.end {
            self.end = 0;
            self.start = 0;
        }
        match self.phase {
            Phase::Failed | Phase::Negotiating => None,
            Phase::Expect(kind) => self.pop_mpa(kind),
            Phase::Full(cfg) => self.pop_fpdu(cfg),
        }
    }

    fn pop_mpa(&mut self, kind: MpaFrameKind) -> Option<Result<Deframed<'_>>> {
        let b = &self.buf[self.start..self.end];
        let have = b.len();
        // Judge the key as soon as its octets are here, so a stream that is not MPA
        // fails early; the verdict is the same whatever the chunking.
        let key_seen = have.min(16);
        if b[..key_seen] != kind.key()[..key_seen] {
            return self.fail(Error::BadMpaKey);
        }
        if have < mpa::HEADER_LEN {
            return None;
        }
        let pd_len = usize::from(be16(&b[18..20]));
        if pd_len > mpa::MAX_PRIVATE_DATA {
            return self.fail(Error::PrivateDataTooLong(pd_len as u16));
        }
        let len = mpa::HEADER_LEN + pd_len;
        if have < len {
            return None;
        }
        if let Err(e) = MpaRepr::parse_bytes(&b[..len]) {
            return self.fail(e);
        }
        self.consumed = len;
        self.pos = 0;
        self.phase = Phase::Negotiating;
        match MpaRepr::parse_bytes(&self.buf[self.start..self.start + len]) {
            Ok((repr, _)) => Some(Ok(Deframed::Mpa(repr))),
            Err(e) => Some(Err(e)),
        }
    }

    fn pop_fpdu(&mut self, cfg: FpduConfig) -> Option<Result<Deframed<'_>>> {
        let b = &self.buf[self.start..self.end];
        // Without markers the ULPDU is read where it lies; with them it is put together
        // in `self.ulpdu`.
        let parsed = if cfg.markers {
            fpdu::parse(b, cfg, self.pos, &mut self.ulpdu)
        } else {
            fpdu::parse_unmarked(b, cfg.crc)
        };
        match parsed {
            Ok(None) => None,
            Ok(Some(info)) => {
                let stream_offset = self.pos;
                self.consumed = info.wire_len;
                self.pos += info.wire_len as u64;
                let ulpdu = if cfg.markers {
                    &self.ulpdu[..]
                } else {
                    fpdu::unmarked_ulpdu(&self.buf[self.start..self.end], &info)
                };
                Some(Ok(Deframed::Fpdu {
                    info,
                    ulpdu,
                    stream_offset,
                }))
            }
            Err(e @ Error::BadCrc { .. }) => {
                // The length was sound: skip the FPDU and report.
                let len = be16_at_header(b, cfg, self.pos);
                let wire = fpdu::wire_len(usize::from(len), cfg, self.pos);
                self.consumed = wire;
                self.pos += wire as u64;
                Some(Err(e))
            }
            Err(e) => self.fail(e),
        }
    }
}

fn be16_at_header(buf: &[u8], cfg: FpduConfig, pos: u64) -> u16 {
    let at = if cfg.markers && pos.is_multiple_of(fpdu::MARKER_INTERVAL) {
        fpdu::MARKER_LEN
    } else {
        0
    };
    be16(&buf[at..at + 2])
}

#[cfg(test)]
mod tests {
    use super::super::mpa::MpaRevision;
    use super::*;

    fn stream(cfg: FpduConfig, ulpdus: &[Vec<u8>]) -> Vec<u8> {
        let req = MpaRepr {
            kind: MpaFrameKind::Request,
            markers: cfg.markers,
            crc: cfg.crc,
            reject: false,
            reserved_flags: 0,
            revision: MpaRevision::V1,
            private_data: b"pd",
        };
        let mut out = vec![0u8; req.buffer_len()];
        req.emit(&mut out);
        let mut pos = 0u64;
        for u in ulpdus {
            let n = fpdu::wire_len(u.len(), cfg, pos);
            let at = out.len();
            out.resize(at + n, 0);
            fpdu::emit(u, cfg, pos, &mut out[at..]);
            pos += n as u64;
        }
        out
    }

    fn drain(
        d: &mut Deframer,
        cfg: FpduConfig,
        out: &mut Vec<std::result::Result<Vec<u8>, Error>>,
    ) {
        loop {
            let item = match d.pop() {
                None => return,
                Some(Ok(Deframed::Mpa(m))) => Ok(m.private_data.to_vec()),
                Some(Ok(Deframed::Fpdu { ulpdu, .. })) => Ok(ulpdu.to_vec()),
                Some(Err(e)) => Err(e),
            };
            out.push(item);
            if d.is_negotiating() {
                d.set_config(cfg);
            }
        }
    }

    #[test]
    fn request_then_fpdus_byte_by_byte() {
        let cfg = FpduConfig {
            crc: true,
            markers: true,
        };
        let ulpdus: Vec<Vec<u8>> = (0..5).map(|i| vec![i as u8; 14 + 300 * i]).collect();
        let s = stream(cfg, &ulpdus);
        let mut d = Deframer::expecting_request();
        let mut got = Vec::new();
        for b in &s {
            d.read(std::slice::from_ref(b));
            drain(&mut d, cfg, &mut got);
        }
        assert_eq!(got.len(), 6);
        assert_eq!(got[0], Ok(b"pd".to_vec()));
        for (g, u) in got[1..].iter().zip(&ulpdus) {
            assert_eq!(g.as_ref().unwrap(), u);
        }
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn wrong_key_fails_once_then_stays_silent() {
        let mut d = Deframer::expecting_reply();
        d.read(b"MPA ID Req Frame\0\x01\0\0");
        assert_eq!(d.pop().map(|r| r.err()), Some(Some(Error::BadMpaKey)));
        assert!(d.pop().is_none());
        assert!(d.is_failed());
    }

    #[test]
    fn nothing_comes_out_before_negotiation_ends() {
        let cfg = FpduConfig::default();
        let s = stream(cfg, &[vec![0u8; 20]]);
        let mut d = Deframer::expecting_request();
        d.read(&s);
        assert!(matches!(d.pop(), Some(Ok(Deframed::Mpa(_)))));
        assert!(d.pop().is_none());
        d.set_config(cfg);
        assert!(matches!(d.pop(), Some(Ok(Deframed::Fpdu { .. }))));
    }

    #[test]
    fn crc_error_skips_the_fpdu_and_goes_on() {
        let cfg = FpduConfig {
            crc: true,
            markers: false,
        };
        let mut s = stream(cfg, &[vec![1u8; 20], vec![2u8; 20]]);
        let hdr = 22;
        s[hdr + 5] ^= 0xff;
        let mut d = Deframer::expecting_request();
        d.read(&s);
        let mut got = Vec::new();
        drain(&mut d, cfg, &mut got);
        assert_eq!(got.len(), 3);
        assert!(matches!(got[1], Err(Error::BadCrc { .. })));
        assert_eq!(got[2], Ok(vec![2u8; 20]));
    }

    #[test]
    fn long_streams_fed_in_big_pieces_come_out_whole() {
        let cfg = FpduConfig {
            crc: true,
            markers: true,
        };
        let ulpdus: Vec<Vec<u8>> = (0..300)
            .map(|i| vec![i as u8; 14 + (i * 37) % 1500])
            .collect();
        let s = stream(cfg, &ulpdus);
        for piece in [1000, 70_000, s.len()] {
            let mut d = Deframer::expecting_request();
            let mut got = Vec::new();
            for chunk in s.chunks(piece) {
                d.read(chunk);
                drain(&mut d, cfg, &mut got);
            }
            assert_eq!(got.len(), 301, "piece {piece}");
            for (g, u) in got[1..].iter().zip(&ulpdus) {
                assert_eq!(g.as_ref().unwrap(), u);
            }
            assert_eq!(d.buffered(), 0);
        }
    }

    #[test]
    fn filling_in_place_equals_reading() {
        for markers in [false, true] {
            let cfg = FpduConfig { crc: true, markers };
            let ulpdus: Vec<Vec<u8>> = (0..200)
                .map(|i| vec![(i * 3) as u8; 14 + (i * 53) % 3000])
                .collect();
            let s = stream(cfg, &ulpdus);
            let mut d = Deframer::expecting_request();
            let mut got = Vec::new();
            let mut at = 0;
            // Offers larger than what arrives, as a socket read into a big buffer does;
            // an over-report is not counted beyond the space offered.
            for piece in [1usize, 7, 700, 4096, 65536].iter().cycle() {
                if at == s.len() {
                    break;
                }
                let n = (*piece).min(s.len() - at);
                let space = d.space(piece + 100).expect("not failed");
                space[..n].copy_from_slice(&s[at..at + n]);
                space[n..].fill(0xee);
                d.filled(n);
                at += n;
                drain(&mut d, cfg, &mut got);
            }
            assert_eq!(got.len(), 201, "markers {markers}");
            for (g, u) in got[1..].iter().zip(&ulpdus) {
                assert_eq!(g.as_ref().unwrap(), u);
            }
            assert_eq!(d.buffered(), 0);
            d.space(10).expect("room")[..4].copy_from_slice(b"abcd");
            d.filled(1000);
            assert_eq!(d.buffered(), 10, "at most the space offered counts");
        }
    }
}
