//! The Atomic ACK Extended Transport Header (IBA 9.3.4, 8 bytes): the original
//! remote data an atomic operation found.

use super::{read_u64, Result};

/// Length of the AtomicAckETH.
pub const HEADER_LEN: usize = 8;

header_view!("AtomicAckETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The original remote data.
    pub fn orig_data(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[..8])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the original remote data.
    pub fn set_orig_data(&mut self, v: u64) {
        self.buffer.as_mut()[..8].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    /// The 64-bit value at the target before the atomic operation.
    pub orig_data: u64,
}

impl AtomicAckEthRepr {
    /// Parses the header.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(AtomicAckEthRepr {
            orig_data: p.orig_data(),
        })
    }
    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_orig_data(self.orig_data);
    }
}
