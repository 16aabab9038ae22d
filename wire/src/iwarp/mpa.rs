//! MPA Request and Reply frames (RFC 5044 §7.1) with the RFC 6581 extensions.
//!
//! ```text
//!  0..16  Key: "MPA ID Req Frame" or "MPA ID Rep Frame"
//!  16     |M|C|R| Res (5) |     17  Rev     |  18..20  PD_Length
//!  20..   Private data (PD_Length octets, at most 512); for Rev 2 it starts with the
//!         RFC 6581 §5 word |A|B| IRD (14) |C|D| ORD (14)|
//! ```

use super::{be16, Error, Result};

/// The key of an MPA Request frame.
pub const KEY_REQUEST: &[u8; 16] = b"MPA ID Req Frame";
/// The key of an MPA Reply frame.
pub const KEY_REPLY: &[u8; 16] = b"MPA ID Rep Frame";
/// Length of the fixed part of a Request/Reply frame.
pub const HEADER_LEN: usize = 20;
/// The largest private data (RFC 5044 §7.1), the IRD/ORD word included.
pub const MAX_PRIVATE_DATA: usize = 512;
/// Length of the RFC 6581 IRD/ORD word.
pub const IRD_ORD_LEN: usize = 4;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const KEY: Field = 0..16;
    pub const FLAGS: usize = 16;
    pub const REV: usize = 17;
    pub const PD_LENGTH: Field = 18..20;

    pub const FLAG_MARKERS: u8 = 0x80;
    pub const FLAG_CRC: u8 = 0x40;
    pub const FLAG_REJECT: u8 = 0x20;
    pub const FLAG_RESERVED: u8 = 0x1f;

    pub const IRD_ORD_A: u16 = 0x8000;
    pub const IRD_ORD_B: u16 = 0x4000;
    pub const IRD_ORD_MASK: u16 = 0x3fff;
}

/// Which of the two frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MpaFrameKind {
    /// Sent by the initiator ("MPA ID Req Frame").
    Request,
    /// Sent by the responder ("MPA ID Rep Frame").
    Reply,
}

impl MpaFrameKind {
    /// The 16-octet key that starts this frame.
    pub fn key(self) -> &'static [u8; 16] {
        match self {
            MpaFrameKind::Request => KEY_REQUEST,
            MpaFrameKind::Reply => KEY_REPLY,
        }
    }
}

/// The RFC 6581 §5 IRD/ORD word with its control bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IrdOrd {
    /// Inbound RDMA Read queue depth (14 bits).
    pub ird: u16,
    /// Outbound RDMA Read queue depth (14 bits).
    pub ord: u16,
    /// A: peer-to-peer connection model (an RTR message follows the Reply).
    pub peer_to_peer: bool,
    /// B: a zero-length Send may serve as the RTR message (cxgb4 names it SEND0, Linux
    /// siw ZERO_LENGTH_RTR).
    pub rtr_send: bool,
    /// C: a zero-length RDMA Write may serve as the RTR message.
    pub rtr_write: bool,
    /// D: a zero-length RDMA Read may serve as the RTR message.
    pub rtr_read: bool,
}

impl IrdOrd {
    /// Parses the word from 4 octets.
    pub fn parse(b: &[u8; IRD_ORD_LEN]) -> IrdOrd {
        let ird = be16(&b[0..2]);
        let ord = be16(&b[2..4]);
        IrdOrd {
            ird: ird & field::IRD_ORD_MASK,
            ord: ord & field::IRD_ORD_MASK,
            peer_to_peer: ird & field::IRD_ORD_A != 0,
            rtr_send: ird & field::IRD_ORD_B != 0,
            rtr_write: ord & field::IRD_ORD_A != 0,
            rtr_read: ord & field::IRD_ORD_B != 0,
        }
    }

    /// The 4 octets of the word (IRD and ORD are masked to 14 bits).
    pub fn to_bytes(self) -> [u8; IRD_ORD_LEN] {
        let mut ird = self.ird & field::IRD_ORD_MASK;
        let mut ord = self.ord & field::IRD_ORD_MASK;
        if self.peer_to_peer {
            ird |= field::IRD_ORD_A;
        }
        if self.rtr_send {
            ird |= field::IRD_ORD_B;
        }
        if self.rtr_write {
            ord |= field::IRD_ORD_A;
        }
        if self.rtr_read {
            ord |= field::IRD_ORD_B;
        }
        let mut out = [0u8; IRD_ORD_LEN];
        out[0..2].copy_from_slice(&ird.to_be_bytes());
        out[2..4].copy_from_slice(&ord.to_be_bytes());
        out
    }
}

/// The MPA revision, with what each revision carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MpaRevision {
    /// RFC 5044 MPA.
    V1,
    /// RFC 6581 enhanced MPA: the private data starts with the IRD/ORD word.
    V2(IrdOrd),
}

impl MpaRevision {
    /// The Rev octet.
    pub fn number(self) -> u8 {
        match self {
            MpaRevision::V1 => 1,
            MpaRevision::V2(_) => 2,
        }
    }
}

/// A view over an MPA Request/Reply frame.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking it holds the header and the private data it announces.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the buffer holds the fixed header and `PD_Length` octets after it.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN || b.len() < HEADER_LEN + usize::from(self.pd_length()) {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The 16-octet key.
    pub fn key(&self) -> &[u8] {
        &self.buffer.as_ref()[field::KEY]
    }

    /// The flags octet (M, C, R and reserved bits).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// M: the sender asks the receiver to insert markers.
    pub fn markers(&self) -> bool {
        self.flags() & field::FLAG_MARKERS != 0
    }

    /// C: the sender asks for CRCs.
    pub fn crc(&self) -> bool {
        self.flags() & field::FLAG_CRC != 0
    }

    /// R: the responder rejects the connection (Reply only).
    pub fn reject(&self) -> bool {
        self.flags() & field::FLAG_REJECT != 0
    }

    /// The Rev octet.
    pub fn revision(&self) -> u8 {
        self.buffer.as_ref()[field::REV]
    }

    /// PD_Length.
    pub fn pd_length(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::PD_LENGTH])
    }

    /// The whole private data (for revision 2, the IRD/ORD word included).
    pub fn private_data(&self) -> &[u8] {
        let end = HEADER_LEN + usize::from(self.pd_length());
        &self.buffer.as_ref()[HEADER_LEN..end]
    }

    /// Length of the whole frame.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + usize::from(self.pd_length())
    }
}

/// A parsed MPA Request or Reply frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MpaRepr<'a> {
    /// Request or Reply (from the key).
    pub kind: MpaFrameKind,
    /// M flag.
    pub markers: bool,
    /// C flag.
    pub crc: bool,
    /// R flag (meaningful in a Reply).
    pub reject: bool,
    /// The five reserved flag bits as received (Linux siw and Chelsio use 0x10 to
    /// announce enhanced connection establishment).
    pub reserved_flags: u8,
    /// Revision, with the IRD/ORD word for revision 2.
    pub revision: MpaRevision,
    /// Private data for the upper layer (after the IRD/ORD word for revision 2).
    pub private_data: &'a [u8],
}

impl<'a> MpaRepr<'a> {
    /// Parses a frame, checking the key, revision and private data length.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<MpaRepr<'a>> {
        let b: &'a [u8] = packet.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let p = Packet::new_unchecked(b);
        let kind = if p.key() == KEY_REQUEST {
            MpaFrameKind::Request
        } else if p.key() == KEY_REPLY {
            MpaFrameKind::Reply
        } else {
            return Err(Error::BadMpaKey);
        };
        let pd_len = p.pd_length();
        if usize::from(pd_len) > MAX_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong(pd_len));
        }
        p.check_len()?;
        let pd = &b[HEADER_LEN..HEADER_LEN + usize::from(pd_len)];
        let (revision, private_data) = match p.revision() {
            1 => (MpaRevision::V1, pd),
            2 => {
                let word: &[u8; IRD_ORD_LEN] = pd
                    .get(..IRD_ORD_LEN)
                    .and_then(|w| w.try_into().ok())
                    .ok_or(Error::MissingIrdOrd)?;
                (MpaRevision::V2(IrdOrd::parse(word)), &pd[IRD_ORD_LEN..])
            }
            r => return Err(Error::BadMpaRevision(r)),
        };
        Ok(MpaRepr {
            kind,
            markers: p.markers(),
            crc: p.crc(),
            reject: p.reject(),
            reserved_flags: p.flags() & field::FLAG_RESERVED,
            revision,
            private_data,
        })
    }

    /// Parses a frame from the start of `bytes`; returns it and its length.
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<(MpaRepr<'a>, usize)> {
        let repr = MpaRepr::parse(&Packet::new_unchecked(bytes))?;
        Ok((repr, repr.buffer_len()))
    }

    /// PD_Length this frame carries.
    pub fn pd_length(&self) -> usize {
        let word = match self.revision {
            MpaRevision::V1 => 0,
            MpaRevision::V2(_) => IRD_ORD_LEN,
        };
        word + self.private_data.len()
    }

    /// Length of the emitted frame.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.pd_length()
    }

    /// Writes the frame into `buf[..self.buffer_len()]`.
    ///
    /// # Panics
    /// If the buffer is shorter than `buffer_len()`, or the private data makes PD_Length
    /// exceed 512 octets (a caller bug: the private data comes from the local consumer).
    pub fn emit(&self, buf: &mut [u8]) {
        let pd_len = self.pd_length();
        assert!(
            pd_len <= MAX_PRIVATE_DATA,
            "MPA private data over 512 octets"
        );
        let b = &mut buf[..self.buffer_len()];
        b[field::KEY].copy_from_slice(self.kind.key());
        let mut flags = self.reserved_flags & field::FLAG_RESERVED;
        if self.markers {
            flags |= field::FLAG_MARKERS;
        }
        if self.crc {
            flags |= field::FLAG_CRC;
        }
        if self.reject {
            flags |= field::FLAG_REJECT;
        }
        b[field::FLAGS] = flags;
        b[field::REV] = self.revision.number();
        b[field::PD_LENGTH].copy_from_slice(&(pd_len as u16).to_be_bytes());
        let mut at = HEADER_LEN;
        if let MpaRevision::V2(w) = self.revision {
            b[at..at + IRD_ORD_LEN].copy_from_slice(&w.to_bytes());
            at += IRD_ORD_LEN;
        }
        b[at..].copy_from_slice(self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(rev: MpaRevision, pd: &[u8]) -> Vec<u8> {
        let repr = MpaRepr {
            kind: MpaFrameKind::Request,
            markers: false,
            crc: true,
            reject: false,
            reserved_flags: 0,
            revision: rev,
            private_data: pd,
        };
        let mut b = vec![0u8; repr.buffer_len()];
        repr.emit(&mut b);
        b
    }

    #[test]
    fn request_layout_matches_rfc5044() {
        let b = request(MpaRevision::V1, b"hi");
        assert_eq!(&b[..16], b"MPA ID Req Frame");
        assert_eq!(b[16], 0x40);
        assert_eq!(b[17], 1);
        assert_eq!(&b[18..20], &[0, 2]);
        assert_eq!(&b[20..], b"hi");
    }

    #[test]
    fn revision_2_carries_ird_ord_word_first() {
        let w = IrdOrd {
            ird: 16,
            ord: 0x3fff,
            peer_to_peer: true,
            rtr_send: false,
            rtr_write: false,
            rtr_read: true,
        };
        let b = request(MpaRevision::V2(w), b"x");
        assert_eq!(&b[18..20], &[0, 5]);
        assert_eq!(&b[20..24], &[0x80, 16, 0x7f, 0xff]);
        let (repr, len) = MpaRepr::parse_bytes(&b).unwrap();
        assert_eq!(len, b.len());
        assert_eq!(repr.revision, MpaRevision::V2(w));
        assert_eq!(repr.private_data, b"x");
    }

    #[test]
    fn wrong_key_is_rejected() {
        let mut b = request(MpaRevision::V1, b"");
        b[4] = b'X';
        assert_eq!(MpaRepr::parse_bytes(&b), Err(Error::BadMpaKey));
    }

    #[test]
    fn private_data_past_the_buffer_is_truncated() {
        let mut b = request(MpaRevision::V1, b"abcd");
        b.truncate(22);
        assert_eq!(MpaRepr::parse_bytes(&b), Err(Error::Truncated));
    }

    #[test]
    fn private_data_over_512_is_rejected() {
        let mut b = request(MpaRevision::V1, b"");
        b[18..20].copy_from_slice(&513u16.to_be_bytes());
        b.resize(20 + 513, 0);
        assert_eq!(
            MpaRepr::parse_bytes(&b),
            Err(Error::PrivateDataTooLong(513))
        );
    }

    #[test]
    fn unknown_revision_is_rejected() {
        let mut b = request(MpaRevision::V1, b"");
        b[17] = 3;
        assert_eq!(MpaRepr::parse_bytes(&b), Err(Error::BadMpaRevision(3)));
    }

    #[test]
    fn revision_2_without_room_for_ird_ord_is_rejected() {
        let mut b = request(MpaRevision::V1, b"ab");
        b[17] = 2;
        assert_eq!(MpaRepr::parse_bytes(&b), Err(Error::MissingIrdOrd));
    }

    #[test]
    fn short_header_is_truncated() {
        assert_eq!(MpaRepr::parse_bytes(b"MPA ID Req"), Err(Error::Truncated));
    }
}
