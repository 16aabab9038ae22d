//! The FLUSH Extended Transport Header (IBA vol. 1, Memory Placement Extensions annex,
//! 4 bytes): on RC/XRC FLUSH requests (opcode 0x1c), between the BTH (and XRCETH) and the
//! RETH. One big-endian word: bits 3..0 the placement type (bit 0 global visibility, bit
//! 1 persistence), bits 5..4 the selectivity level (0 a memory range, the RETH's VA and
//! DMA length; 1 the whole memory region the R_Key names), the rest reserved (sent as
//! zero, ignored on receipt).

use super::{read_u32, Result};

mod field {
    use core::ops::Range;
    pub const WORD: Range<usize> = 0..4;
    /// Placement type: bits 3..0 of the word.
    pub const PLT_MASK: u32 = 0x0f;
    /// Selectivity level: bits 5..4 of the word.
    pub const SEL_MASK: u32 = 0x30;
    pub const SEL_SHIFT: u32 = 4;
}

/// Length of the FETH.
pub const HEADER_LEN: usize = field::WORD.end;

header_view!("FETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The placement type bits.
    pub fn placement(&self) -> PlacementType {
        PlacementType((read_u32(&self.buffer.as_ref()[field::WORD]) & field::PLT_MASK) as u8)
    }
    /// The selectivity level.
    pub fn selectivity(&self) -> Selectivity {
        let w = read_u32(&self.buffer.as_ref()[field::WORD]);
        Selectivity::from_bits(((w & field::SEL_MASK) >> field::SEL_SHIFT) as u8)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the word with these fields and the reserved bits zero.
    pub fn set_fields(&mut self, p: PlacementType, s: Selectivity) {
        let w = (u32::from(p.0) & field::PLT_MASK)
            | ((u32::from(s.bits()) << field::SEL_SHIFT) & field::SEL_MASK);
        self.buffer.as_mut()[field::WORD].copy_from_slice(&w.to_be_bytes());
    }
}

/// The placement type of a FLUSH: which guarantee the responder gives for the bytes
/// before it answers. Bits as `enum ibv_placement_type` numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PlacementType(pub u8);

impl PlacementType {
    /// Global visibility: every later access by anyone sees the data.
    pub const GLOBAL: PlacementType = PlacementType(1 << 0);
    /// Persistence: the data survives a power loss.
    pub const PERSISTENT: PlacementType = PlacementType(1 << 1);
    /// Whether every bit of `o` is set.
    pub const fn contains(self, o: PlacementType) -> bool {
        self.0 & o.0 == o.0
    }
}

/// The selectivity level of a FLUSH (`enum ibv_selectivity_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Selectivity {
    /// The range the RETH names.
    MemoryRange,
    /// The whole memory region of the R_Key; the RETH's VA and length are not used.
    MemoryRegion,
    /// A reserved value (2 or 3).
    Unknown(u8),
}

impl Selectivity {
    /// The 2-bit code.
    pub const fn bits(self) -> u8 {
        match self {
            Selectivity::MemoryRange => 0,
            Selectivity::MemoryRegion => 1,
            Selectivity::Unknown(b) => b & 3,
        }
    }
    /// The level of a 2-bit code.
    pub const fn from_bits(b: u8) -> Self {
        match b & 3 {
            0 => Selectivity::MemoryRange,
            1 => Selectivity::MemoryRegion,
            b => Selectivity::Unknown(b),
        }
    }
}

/// A parsed FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FethRepr {
    /// What the FLUSH asks for.
    pub placement: PlacementType,
    /// Over which bytes.
    pub selectivity: Selectivity,
}

impl FethRepr {
    /// Parses a FETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(FethRepr {
            placement: p.placement(),
            selectivity: p.selectivity(),
        })
    }
    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the FETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_fields(self.placement, self.selectivity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::Error;

    #[test]
    fn feth_round_trips_and_places_fields_as_rxe() {
        // rxe's feth_init: the placement type in the low nibble, the selectivity in
        // bits 5..4, big-endian.
        let r = FethRepr {
            placement: PlacementType::PERSISTENT,
            selectivity: Selectivity::MemoryRegion,
        };
        let mut b = [0xffu8; 4];
        r.emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(b, [0, 0, 0, 0x12]);
        assert_eq!(
            FethRepr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Ok(r)
        );
        let g = [0, 0, 0, 0x01];
        let p = FethRepr::parse(&Packet::new_checked(&g[..]).unwrap()).unwrap();
        assert_eq!(p.placement, PlacementType::GLOBAL);
        assert_eq!(p.selectivity, Selectivity::MemoryRange);
        // Reserved bits are ignored on receipt.
        let x = [0xff, 0xff, 0xff, 0xe1];
        let p = FethRepr::parse(&Packet::new_checked(&x[..]).unwrap()).unwrap();
        assert_eq!(p.placement, PlacementType::GLOBAL);
        assert_eq!(p.selectivity, Selectivity::Unknown(2));
    }

    #[test]
    fn truncated_feth_is_rejected() {
        for n in 0..HEADER_LEN {
            let b = vec![0u8; n];
            assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Truncated));
        }
    }
}
