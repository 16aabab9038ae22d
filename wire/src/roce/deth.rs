//! The Datagram Extended Transport Header (IBA 9.3.2, 8 bytes): Q_Key and source QP.

use super::{read_u24, read_u32, write_u24, Qkey, Qpn, Result};

mod field {
    use core::ops::Range;
    pub const QKEY: Range<usize> = 0..4;
    pub const RESERVED: usize = 4;
    pub const SRC_QP: Range<usize> = 5..8;
}

/// Length of the DETH.
pub const HEADER_LEN: usize = field::SRC_QP.end;

header_view!("DETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// Q_Key.
    pub fn qkey(&self) -> Qkey {
        Qkey(read_u32(&self.buffer.as_ref()[field::QKEY]))
    }
    /// Source QP.
    pub fn src_qp(&self) -> Qpn {
        Qpn(read_u24(&self.buffer.as_ref()[field::SRC_QP]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets Q_Key.
    pub fn set_qkey(&mut self, v: Qkey) {
        self.buffer.as_mut()[field::QKEY].copy_from_slice(&v.0.to_be_bytes());
    }
    /// Sets the source QP (and clears the reserved byte).
    pub fn set_src_qp(&mut self, v: Qpn) {
        self.buffer.as_mut()[field::RESERVED] = 0;
        write_u24(&mut self.buffer.as_mut()[field::SRC_QP], v.0);
    }
}

/// A parsed DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DethRepr {
    /// Q_Key.
    pub qkey: Qkey,
    /// The sender's QP number.
    pub src_qp: Qpn,
}

impl DethRepr {
    /// Parses the header.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(DethRepr {
            qkey: p.qkey(),
            src_qp: p.src_qp(),
        })
    }
    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_qkey(self.qkey);
        p.set_src_qp(self.src_qp);
    }
}
