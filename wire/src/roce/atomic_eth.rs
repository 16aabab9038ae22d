//! The Atomic Extended Transport Header (IBA 9.3.4, 28 bytes): virtual address, R_Key,
//! swap (or add) data, compare data. On CmpSwap and FetchAdd requests.

use super::{read_u32, read_u64, Result, Rkey};

mod field {
    use core::ops::Range;
    pub const VA: Range<usize> = 0..8;
    pub const RKEY: Range<usize> = 8..12;
    pub const SWAP_ADD: Range<usize> = 12..20;
    pub const COMPARE: Range<usize> = 20..28;
}

/// Length of the AtomicETH.
pub const HEADER_LEN: usize = field::COMPARE.end;

header_view!("AtomicETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// Virtual address (must be 8-byte aligned; the responder checks).
    pub fn va(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[field::VA])
    }
    /// R_Key.
    pub fn rkey(&self) -> Rkey {
        Rkey(read_u32(&self.buffer.as_ref()[field::RKEY]))
    }
    /// Swap data (CmpSwap) or add data (FetchAdd).
    pub fn swap_add(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[field::SWAP_ADD])
    }
    /// Compare data (CmpSwap; ignored by FetchAdd).
    pub fn compare(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[field::COMPARE])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, v: u64) {
        self.buffer.as_mut()[field::VA].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the R_Key.
    pub fn set_rkey(&mut self, v: Rkey) {
        self.buffer.as_mut()[field::RKEY].copy_from_slice(&v.0.to_be_bytes());
    }
    /// Sets the swap/add data.
    pub fn set_swap_add(&mut self, v: u64) {
        self.buffer.as_mut()[field::SWAP_ADD].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the compare data.
    pub fn set_compare(&mut self, v: u64) {
        self.buffer.as_mut()[field::COMPARE].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    /// Virtual address.
    pub va: u64,
    /// R_Key.
    pub rkey: Rkey,
    /// Swap data (CmpSwap) or add data (FetchAdd).
    pub swap_add: u64,
    /// Compare data.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Parses an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(AtomicEthRepr {
            va: p.va(),
            rkey: p.rkey(),
            swap_add: p.swap_add(),
            compare: p.compare(),
        })
    }
    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the AtomicETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_swap_add(self.swap_add);
        p.set_compare(self.compare);
    }
}
