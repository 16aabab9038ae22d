//! The tally of a decoded capture: frames read, checks passed and failed, and what could
//! not be parsed. Every part of the decoder adds to it; `rdma-emu decode`'s exit status is
//! read from it.

/// What decoding a capture found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Frames read.
    pub frames: usize,
    /// RoCE v2 packets whose ICRC verified.
    pub icrc_ok: usize,
    /// RoCE v2 packets whose ICRC did not.
    pub icrc_bad: usize,
    /// FPDUs whose CRC was checked and matched.
    pub crc_ok: usize,
    /// FPDUs whose CRC did not match.
    pub crc_bad: usize,
    /// Frames or stream units that could not be parsed.
    pub malformed: usize,
}

impl Summary {
    /// Whether any check failed.
    pub fn has_bad_checksum(&self) -> bool {
        self.icrc_bad > 0 || self.crc_bad > 0
    }
}
