//! The Invalidate Extended Transport Header (IBA 9.3.7, 4 bytes): the R_Key to invalidate, on SEND Last/Only with Invalidate.

use super::{read_u32, Result, Rkey};

/// Length of the IETH.
pub const HEADER_LEN: usize = 4;

header_view!("IETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The R_Key the responder invalidates.
    pub fn rkey(&self) -> Rkey {
        Rkey(read_u32(&self.buffer.as_ref()[..4]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the field.
    pub fn set_rkey(&mut self, v: Rkey) {
        self.buffer.as_mut()[..4].copy_from_slice(&v.0.to_be_bytes());
    }
}

/// A parsed IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IethRepr {
    /// The R_Key to invalidate.
    pub rkey: Rkey,
}

impl IethRepr {
    /// Parses the header.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(IethRepr { rkey: p.rkey() })
    }
    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_rkey(self.rkey);
    }
}
