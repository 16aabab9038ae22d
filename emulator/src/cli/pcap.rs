//! Cutting a pcap byte stream, as it arrives in pieces of any size, into the file header
//! and whole records, so that what is written out never ends mid-record.

/// A pcap stream cut into whole records: the 24-octet file header, then records of a
/// 16-octet header and `incl_len` octets.
#[derive(Default)]
pub(super) struct PcapRecords {
    buf: Vec<u8>,
    header_done: bool,
    /// Octets of `buf` handed out by the last `push`.
    whole: usize,
    /// Whole records handed out so far.
    pub(super) frames: u64,
}

impl PcapRecords {
    /// Takes `bytes`; returns the whole header and records now complete (at most
    /// `count` records in all). Call [`PcapRecords::consumed`] once they are written.
    pub(super) fn push(&mut self, bytes: &[u8], count: Option<u64>) -> &[u8] {
        self.buf.extend_from_slice(bytes);
        let mut at = 0;
        if !self.header_done && self.buf.len() >= 24 {
            at = 24;
            self.header_done = true;
        }
        while self.header_done && self.buf.len() >= at + 16 {
            let b = &self.buf[at + 8..at + 12];
            let incl = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
            if self.buf.len() < at + 16 + incl || count.is_some_and(|c| self.frames >= c) {
                break;
            }
            at += 16 + incl;
            self.frames += 1;
        }
        self.whole = at;
        &self.buf[..at]
    }

    /// Drops what the last [`PcapRecords::push`] handed out.
    pub(super) fn consumed(&mut self) {
        self.buf.drain(..self.whole);
        self.whole = 0;
    }
}
