//! The Immediate Data header (IBA 9.3.6, 4 bytes), on SEND/RDMA WRITE Last/Only with Immediate.

use super::{read_u32, Result};

/// Length of the ImmDt.
pub const HEADER_LEN: usize = 4;

header_view!("ImmDt");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The immediate data.
    pub fn imm(&self) -> ImmDt {
        ImmDt(read_u32(&self.buffer.as_ref()[..4]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the field.
    pub fn set_imm(&mut self, v: ImmDt) {
        self.buffer.as_mut()[..4].copy_from_slice(&v.0.to_be_bytes());
    }
}

/// Immediate data, as the 32-bit big-endian number on the wire.
///
/// `ibv_send_wr.imm_data` and `ibv_wc.imm_data` are `__be32`: the application's bytes in
/// memory are the wire bytes, so `ImmDt(u32::from_be_bytes(app_bytes))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmDt(pub u32);

impl ImmDt {
    /// Parses the header.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(p.imm())
    }
    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_imm(*self);
    }
}
