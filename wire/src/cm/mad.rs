//! The common MAD header (IBA 13.4.2).
//!
//! ```text
//!  0 BaseVersion | 1 MgmtClass | 2 ClassVersion | 3 R (1) Method (7)
//!  4..6 Status | 6..8 ClassSpecific | 8..16 TransactionID
//!  16..18 AttributeID | 18..20 Reserved | 20..24 AttributeModifier
//! ```

use super::{be16, be32, be64, Error, Result};

/// Every MAD is 256 octets (IBA 13.4.1).
pub const MAD_LEN: usize = 256;
/// Length of the common header.
pub const HEADER_LEN: usize = 24;
/// The only base version.
pub const BASE_VERSION: u8 = 1;
/// Management class of Communication Management.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM class version RDMA CM speaks.
pub const CM_CLASS_VERSION: u8 = 2;
/// Method Send (IBA 13.4.5): CM messages are all sent with it.
pub const METHOD_SEND: u8 = 0x03;

/// A parsed common MAD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeader {
    /// BaseVersion (1).
    pub base_version: u8,
    /// Management class (CM: 0x07).
    pub mgmt_class: u8,
    /// Class version (CM: 2).
    pub class_version: u8,
    /// R: this MAD is a response.
    pub response: bool,
    /// Method (7 bits).
    pub method: u8,
    /// Status.
    pub status: u16,
    /// Class-specific field.
    pub class_specific: u16,
    /// Transaction ID.
    pub transaction_id: u64,
    /// Attribute ID: which message.
    pub attribute_id: u16,
    /// Attribute modifier.
    pub attribute_modifier: u32,
}

impl MadHeader {
    /// A CM header for the message `attribute_id` with transaction `transaction_id`.
    pub fn cm(attribute_id: u16, transaction_id: u64) -> MadHeader {
        MadHeader {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            response: false,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            attribute_modifier: 0,
        }
    }

    /// Parses the header at the start of `b` (base version checked).
    pub fn parse(b: &[u8]) -> Result<MadHeader> {
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[0] != BASE_VERSION {
            return Err(Error::BadBaseVersion(b[0]));
        }
        Ok(MadHeader {
            base_version: b[0],
            mgmt_class: b[1],
            class_version: b[2],
            response: b[3] & 0x80 != 0,
            method: b[3] & 0x7f,
            status: be16(&b[4..6]),
            class_specific: be16(&b[6..8]),
            transaction_id: be64(&b[8..16]),
            attribute_id: be16(&b[16..18]),
            attribute_modifier: be32(&b[20..24]),
        })
    }

    /// Writes the header into `b[..24]`.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.base_version;
        b[1] = self.mgmt_class;
        b[2] = self.class_version;
        b[3] = (self.method & 0x7f) | if self.response { 0x80 } else { 0 };
        b[4..6].copy_from_slice(&self.status.to_be_bytes());
        b[6..8].copy_from_slice(&self.class_specific.to_be_bytes());
        b[8..16].copy_from_slice(&self.transaction_id.to_be_bytes());
        b[16..18].copy_from_slice(&self.attribute_id.to_be_bytes());
        b[18..20].fill(0);
        b[20..24].copy_from_slice(&self.attribute_modifier.to_be_bytes());
    }
}
