//! The MPA CRC: CRC32c (Castagnoli, RFC 3385 / RFC 3720 §12.1), as RFC 5044 §6 uses it.
//!
//! Byte order on the wire: Linux siw stores the final CRC value with `put_unaligned_le32`
//! (drivers/infiniband/sw/siw/siw.h, `siw_crc_final`), which is also the order of the
//! RFC 3720 B.4 examples (the CRC of 32 zero octets, `0x8a9136aa`, is sent `aa 36 91 8a`).
//! Wireshark's iwarp_mpa dissector reports "Good CRC32" for that layout.

/// Length of the CRC field in an FPDU.
pub const CRC_LEN: usize = 4;

/// The CRC32c of `data` (initial value all ones, final complement; RFC 3720 B.4).
pub fn crc32c(data: &[u8]) -> u32 {
    ::crc32c::crc32c(data)
}

/// Continues a CRC32c computed over earlier bytes with `data`.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    ::crc32c::crc32c_append(crc, data)
}

/// The four octets an FPDU carries for the CRC value `crc`.
pub fn to_wire(crc: u32) -> [u8; CRC_LEN] {
    crc.to_le_bytes()
}

/// The CRC value carried by the four octets `b` (at least 4 long).
pub fn from_wire(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 3720 B.4: the four 32-octet examples and the SCSI Read (10) command PDU; the
    // RFC lists the CRC bytes in transmission order.
    #[test]
    fn crc32c_matches_rfc3720_b4_vectors() {
        let zeros = [0u8; 32];
        assert_eq!(to_wire(crc32c(&zeros)), [0xaa, 0x36, 0x91, 0x8a]);
        let ones = [0xffu8; 32];
        assert_eq!(to_wire(crc32c(&ones)), [0x43, 0xab, 0xa8, 0x62]);
        let inc: Vec<u8> = (0u8..32).collect();
        assert_eq!(to_wire(crc32c(&inc)), [0x4e, 0x79, 0xdd, 0x46]);
        let dec: Vec<u8> = (0u8..32).rev().collect();
        assert_eq!(to_wire(crc32c(&dec)), [0x5c, 0xdb, 0x3f, 0x11]);
        let read10_pdu: [u8; 48] = [
            0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14,
            0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(to_wire(crc32c(&read10_pdu)), [0x56, 0x3a, 0x96, 0xd9]);
    }

    #[test]
    fn crc32c_append_equals_one_shot() {
        let data: Vec<u8> = (0u8..100).collect();
        let (a, b) = data.split_at(37);
        assert_eq!(crc32c_append(crc32c(a), b), crc32c(&data));
    }

    #[test]
    fn wire_order_round_trips() {
        assert_eq!(from_wire(&to_wire(0x1234_5678)), 0x1234_5678);
    }
}
