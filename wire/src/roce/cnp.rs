//! The RoCE v2 Congestion Notification Packet body (IBA Annex A17.9.3): after a BTH with
//! opcode 0x81 (DestQP = the QP whose traffic was marked, PSN 0), 16 reserved bytes.

use super::Result;

/// Length of the CNP's reserved field.
pub const HEADER_LEN: usize = 16;

header_view!("CNP body");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The 16 reserved bytes.
    pub fn reserved(&self) -> &[u8] {
        &self.buffer.as_ref()[..HEADER_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Clears the reserved bytes.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[..HEADER_LEN].fill(0);
    }
}

/// A parsed CNP body (nothing but reserved bytes, ignored on receive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CnpRepr;

impl CnpRepr {
    /// Parses the body.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(CnpRepr)
    }
    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the body (zeros).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.clear_reserved();
    }
}
