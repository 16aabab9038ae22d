//! MAC Control frames that stop a link partner's transmitter: IEEE 802.3 Annex 31B PAUSE
//! ("802.3x": one pause time for the whole link) and IEEE 802.1Qbb priority-based flow
//! control (PFC: a pause time for each of the eight priorities).
//!
//! Both are Ethernet frames of EtherType 0x8808 (MAC Control), normally to the reserved
//! multicast address 01-80-C2-00-00-01, that a bridge never forwards. Their payload
//! after the Ethernet header (offsets below count from there):
//!
//! ```text
//! PAUSE (opcode 0x0001): opcode(2) pause_time(2)            zero padding to 46 octets
//! PFC   (opcode 0x0101): opcode(2) priority_enable_vector(2) time[0..8](2 each) padding
//! ```
//!
//! Times are in quanta of 512 bit times at the link's speed; 0 ends a pause at once. Only
//! the low octet of PFC's enable vector is defined (bit n: priority n's time is valid).

use crate::frame::ETHERNET_HEADER_LEN;

/// EtherType of MAC Control frames (IEEE 802.3 clause 31).
pub const ETHERTYPE: u16 = 0x8808;
/// The reserved multicast address PAUSE and PFC frames go to (802.3 Annex 31B.1).
pub const MULTICAST: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x01];
/// Bit times in one pause quantum (802.3 31B.2).
pub const QUANTUM_BITS: u64 = 512;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const OPCODE: Field = 0..2;
    /// PAUSE: the pause time; PFC: the priority-enable vector.
    pub const PARAM: Field = 2..4;
    /// PFC: eight pause times, priority 0 first.
    pub const TIMES: Field = 4..20;
}

/// The MAC Control opcodes understood here (802.3 Annex 31A).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// 0x0001: 802.3 PAUSE, stop all traffic for a time.
    Pause,
    /// 0x0101: 802.1Qbb priority-based flow control, stop chosen priorities.
    Pfc,
    /// Any other MAC Control opcode, kept as its raw value.
    Unknown(u16),
}

impl From<u16> for Opcode {
    fn from(v: u16) -> Self {
        match v {
            0x0001 => Opcode::Pause,
            0x0101 => Opcode::Pfc,
            v => Opcode::Unknown(v),
        }
    }
}

impl From<Opcode> for u16 {
    fn from(o: Opcode) -> u16 {
        match o {
            Opcode::Pause => 0x0001,
            Opcode::Pfc => 0x0101,
            Opcode::Unknown(v) => v,
        }
    }
}

/// Why a frame is not a PAUSE or PFC frame this module accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Shorter than its opcode's fields.
    Truncated,
    /// Not EtherType 0x8808 or not to 01-80-C2-00-00-01.
    NotMacControl,
    /// A MAC Control opcode other than PAUSE or PFC.
    UnknownOpcode(u16),
}

/// A view of a MAC Control payload (after the Ethernet header).
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without a length check; the accessors may then panic on a short buffer.
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// A view after checking that the opcode's fields are all there.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// Whether the buffer holds the opcode and the fields it implies.
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < field::OPCODE.end {
            return Err(Error::Truncated);
        }
        let need = match self.opcode() {
            Opcode::Pfc => field::TIMES.end,
            _ => field::PARAM.end,
        };
        if b.len() < need {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    fn u16_at(&self, at: usize) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    /// The MAC Control opcode (the payload's first two octets).
    pub fn opcode(&self) -> Opcode {
        Opcode::from(self.u16_at(field::OPCODE.start))
    }

    /// PAUSE: the pause time; PFC: the priority-enable vector.
    pub fn param(&self) -> u16 {
        self.u16_at(field::PARAM.start)
    }

    /// PFC: priority `p`'s pause time (`p` < 8).
    pub fn time(&self, p: usize) -> u16 {
        self.u16_at(field::TIMES.start + 2 * p)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u16_at(&mut self, at: usize, v: u16) {
        self.buffer.as_mut()[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }

    /// Writes the MAC Control opcode.
    pub fn set_opcode(&mut self, o: Opcode) {
        self.set_u16_at(field::OPCODE.start, o.into());
    }

    /// Writes the PAUSE time (PAUSE) or the priority-enable vector (PFC).
    pub fn set_param(&mut self, v: u16) {
        self.set_u16_at(field::PARAM.start, v);
    }

    /// Writes priority `p`'s pause time of a PFC frame (`p` < 8).
    pub fn set_time(&mut self, p: usize, v: u16) {
        self.set_u16_at(field::TIMES.start + 2 * p, v);
    }
}

/// A parsed PAUSE or PFC request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    /// 802.3 PAUSE: stop everything for `quanta`.
    Pause {
        /// The pause time in quanta of 512 bit times; 0 resumes at once.
        quanta: u16,
    },
    /// 802.1Qbb PFC: for each priority whose bit is set in `enabled`, stop it for its
    /// `quanta`; the others are untouched.
    Pfc {
        /// The priority-enable vector: bit `p` set means `quanta[p]` applies.
        enabled: u8,
        /// The pause time of each priority in quanta of 512 bit times, priority 0 first.
        quanta: [u16; 8],
    },
}

/// The minimum MAC Control payload (an Ethernet frame's 46 octets of minimum payload).
pub const MIN_PAYLOAD_LEN: usize = 46;

impl Repr {
    /// Parses a checked view; an error for an opcode other than PAUSE or PFC.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        p.check_len()?;
        match p.opcode() {
            Opcode::Pause => Ok(Repr::Pause { quanta: p.param() }),
            Opcode::Pfc => {
                let mut quanta = [0; 8];
                for (i, q) in quanta.iter_mut().enumerate() {
                    *q = p.time(i);
                }
                // 802.1Qbb 36.1.3.1: the high octet of the vector is reserved.
                Ok(Repr::Pfc {
                    enabled: (p.param() & 0xff) as u8,
                    quanta,
                })
            }
            Opcode::Unknown(v) => Err(Error::UnknownOpcode(v)),
        }
    }

    /// Octets `emit` writes: the padded minimum payload.
    pub fn buffer_len(&self) -> usize {
        MIN_PAYLOAD_LEN
    }

    /// Writes the payload (zero padded) into the first [`Repr::buffer_len`] octets.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.buffer.as_mut()[..MIN_PAYLOAD_LEN].fill(0);
        match *self {
            Repr::Pause { quanta } => {
                p.set_opcode(Opcode::Pause);
                p.set_param(quanta);
            }
            Repr::Pfc { enabled, quanta } => {
                p.set_opcode(Opcode::Pfc);
                p.set_param(u16::from(enabled));
                for (i, q) in quanta.iter().enumerate() {
                    p.set_time(i, *q);
                }
            }
        }
    }

    /// The pause each priority gets: `Some(quanta)` for those the request concerns.
    pub fn per_priority(&self) -> [Option<u16>; 8] {
        match *self {
            Repr::Pause { quanta } => [Some(quanta); 8],
            Repr::Pfc { enabled, quanta } => {
                let mut out = [None; 8];
                for (i, o) in out.iter_mut().enumerate() {
                    if enabled & (1 << i) != 0 {
                        *o = Some(quanta[i]);
                    }
                }
                out
            }
        }
    }
}

/// Parses a whole untagged Ethernet frame as a PAUSE or PFC request to the reserved
/// multicast address.
pub fn parse_frame(frame: &[u8]) -> Result<Repr, Error> {
    if frame.len() < ETHERNET_HEADER_LEN {
        return Err(Error::Truncated);
    }
    if frame[0..6] != MULTICAST || frame[12..14] != ETHERTYPE.to_be_bytes() {
        return Err(Error::NotMacControl);
    }
    Repr::parse(&Packet::new_checked(&frame[ETHERNET_HEADER_LEN..])?)
}

/// Writes a whole frame carrying `repr` from `src` to the reserved multicast address
/// (60 octets: the minimum frame without its FCS).
pub fn emit_frame(repr: &Repr, src: [u8; 6]) -> Vec<u8> {
    let mut f = vec![0; ETHERNET_HEADER_LEN + repr.buffer_len()];
    f[0..6].copy_from_slice(&MULTICAST);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    repr.emit(&mut Packet::new_unchecked(&mut f[ETHERNET_HEADER_LEN..]));
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A PFC frame as a switch sends it: priority 3 for 0xffff quanta, 4 for 0x10 (the
    /// vector also names 4; priority 0's time is set but not enabled).
    const PFC: [u8; 60] = [
        0x01, 0x80, 0xc2, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x88, 0x08, 0x01,
        0x01, 0x00, 0x18, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00, 0x10, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn a_pfc_frame_pauses_only_its_enabled_priorities() {
        let r = parse_frame(&PFC).expect("parses");
        assert_eq!(
            r.per_priority(),
            [None, None, None, Some(0xffff), Some(0x10), None, None, None]
        );
        assert_eq!(emit_frame(&r, [0x02, 0, 0, 0, 0, 0x02]), PFC);
    }

    #[test]
    fn a_pause_frame_pauses_every_priority() {
        let f = emit_frame(&Repr::Pause { quanta: 300 }, [2, 0, 0, 0, 0, 1]);
        assert_eq!(&f[12..18], &[0x88, 0x08, 0x00, 0x01, 0x01, 0x2c]);
        assert_eq!(parse_frame(&f), Ok(Repr::Pause { quanta: 300 }));
        assert_eq!(parse_frame(&f).unwrap().per_priority(), [Some(300); 8]);
    }

    #[test]
    fn short_misaddressed_or_unknown_frames_are_refused() {
        assert_eq!(parse_frame(&PFC[..10]), Err(Error::Truncated));
        assert_eq!(
            parse_frame(&PFC[..33]),
            Err(Error::Truncated),
            "PFC cut short"
        );
        let pause = emit_frame(&Repr::Pause { quanta: 1 }, [2; 6]);
        assert!(parse_frame(&pause[..18]).is_ok(), "PAUSE needs 4 octets");
        assert_eq!(parse_frame(&pause[..17]), Err(Error::Truncated));
        let mut unicast = PFC;
        unicast[0] = 0x02;
        assert_eq!(parse_frame(&unicast), Err(Error::NotMacControl));
        let mut ip = PFC;
        ip[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(parse_frame(&ip), Err(Error::NotMacControl));
        let mut gate = PFC;
        gate[14..16].copy_from_slice(&[0x00, 0x02]); // 802.3 GATE (EPON)
        assert_eq!(parse_frame(&gate), Err(Error::UnknownOpcode(2)));
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_are_refused_without_panicking(
            tail in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut f = PFC[..14].to_vec();
            f.extend_from_slice(&tail);
            let _ = parse_frame(&f);
            let _ = parse_frame(&tail);
        }

        #[test]
        fn emitted_pfc_frames_parse_back(enabled: u8, quanta: [u16; 8]) {
            let r = Repr::Pfc { enabled, quanta };
            let back = parse_frame(&emit_frame(&r, [2; 6])).unwrap();
            prop_assert_eq!(back.per_priority(), r.per_priority());
        }
    }
}
