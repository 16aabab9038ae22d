//! The XRC Extended Transport Header (IBA Annex A14, 4 bytes): the XRC SRQ number
//! the request targets.

use super::{read_u24, write_u24, Result};

/// Length of the XRCETH.
pub const HEADER_LEN: usize = 4;

header_view!("XRCETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// XRC SRQ number (24 bits).
    pub fn xrc_srq(&self) -> u32 {
        read_u24(&self.buffer.as_ref()[1..4])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the XRC SRQ number (and clears the reserved byte).
    pub fn set_xrc_srq(&mut self, v: u32) {
        self.buffer.as_mut()[0] = 0;
        write_u24(&mut self.buffer.as_mut()[1..4], v);
    }
}

/// A parsed XRCETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XrcEthRepr {
    /// XRC SRQ number (24 bits).
    pub xrc_srq: u32,
}

impl XrcEthRepr {
    /// Parses the header.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(XrcEthRepr {
            xrc_srq: p.xrc_srq(),
        })
    }
    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_xrc_srq(self.xrc_srq);
    }
}
