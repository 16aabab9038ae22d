//! The 24-bit Packet Sequence Number (IBA 9.7.1).

/// A Packet Sequence Number: 24 bits, arithmetic modulo 2^24.
///
/// There is deliberately no `PartialOrd`: order in a circular space is not transitive.
/// Use [`Psn::distance`] and [`Psn::is_before`], which treat the half of the space ahead
/// of `self` as "after" (IBA 9.7.5.1.1 splits the space into valid and duplicate halves).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// 2^24 - 1.
    pub const MASK: u32 = 0x00ff_ffff;
    /// Number of PSNs (2^24).
    pub const MODULUS: u32 = 1 << 24;

    /// A PSN from the low 24 bits of `v`.
    pub const fn new(v: u32) -> Self {
        Psn(v & Self::MASK)
    }

    /// The 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    pub const fn wrapping_add(self, n: u32) -> Self {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// `self - n` modulo 2^24.
    pub const fn wrapping_sub(self, n: u32) -> Self {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// The signed distance from `other` to `self`: the `d` in `-2^23 ..= 2^23 - 1` with
    /// `other + d == self` modulo 2^24.
    pub const fn distance(self, other: Psn) -> i32 {
        // Shift into the top 24 bits of an i32 so the subtraction wraps at 2^24.
        ((self.0 << 8).wrapping_sub(other.0 << 8) as i32) >> 8
    }

    /// Whether `self` comes strictly before `other` (`self.distance(other) < 0`).
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance(other) < 0
    }
}

impl core::fmt::Display for Psn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0)
    }
}
