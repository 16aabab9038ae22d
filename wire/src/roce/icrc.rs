//! The Invariant CRC (IBA Annex A17.4.1 for RoCE v2; 7.8.1 for the CRC itself).
//!
//! The ICRC is the CRC-32 (the Ethernet polynomial, as [`crc32fast`] computes it) of:
//! 8 bytes of ones standing for the LRH RoCE v2 lacks, the IP header with its variant
//! fields set to ones (IPv4: TOS, TTL, header checksum; IPv6: traffic class, flow label,
//! hop limit), the UDP header with its checksum set to ones, the BTH with byte 4
//! (`resv8a`: FECN, BECN) set to ones, then the rest of the IB packet up to the ICRC.
//! Linux rxe stores the result little-endian (the corpora in `tests/corpora/rxe` say so);
//! [`super::Packet::icrc`] reads it that way.
//!
//! The IPv4 identification field is *not* masked, and a kernel UDP socket does not reveal
//! the ID of a packet it receives. CRC-32 is affine over GF(2), so
//! [`verify_udp4_any_id`] solves for the ID that makes a received ICRC match (a 32 × 16
//! linear system): corruption then slips through with odds 2^-16 instead of 2^-32.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{bth, ICRC_LEN};

/// Length of the masked LRH stand-in.
const LRH_LEN: usize = 8;
/// Offset of the IPv4 identification field in the CRC input (after the LRH stand-in).
const IPV4_ID_OFFSET: usize = LRH_LEN + 4;

/// Masks a copy of an IPv4 header (RFC 791) the way Annex A17.4.1 says.
fn mask_ipv4(ip: &[u8; 20]) -> [u8; 20] {
    let mut h = *ip;
    h[1] = 0xff; // TOS (DSCP/ECN)
    h[8] = 0xff; // TTL
    h[10] = 0xff; // header checksum
    h[11] = 0xff;
    h
}

/// Masks a copy of an IPv6 header (RFC 8200) the way Annex A17.4.1 says.
fn mask_ipv6(ip: &[u8; 40]) -> [u8; 40] {
    let mut h = *ip;
    h[0] |= 0x0f; // traffic class, high nibble
    h[1] = 0xff; // traffic class low nibble, flow label
    h[2] = 0xff;
    h[3] = 0xff;
    h[7] = 0xff; // hop limit
    h
}

fn mask_udp(udp: &[u8; 8]) -> [u8; 8] {
    let mut h = *udp;
    h[6] = 0xff;
    h[7] = 0xff;
    h
}

/// The CRC state after the LRH stand-in (8 octets of ones), where every ICRC starts
/// (`crc32fast::hash(&[0xff; 8])`; a test checks it).
const AFTER_LRH: u32 = 0x2144_df1c;

/// CRC over the masked pseudo header `ip_udp` (already masked) and `ib` (BTH..pad). The
/// headers and the BTH go in as one piece: the CRC's short-input paths cost per call.
fn crc_over<const H: usize>(ip_udp_masked: &[u8; H], ib: &[u8]) -> u32 {
    let mut head = [0u8; 64];
    let b = ib.len().min(bth::HEADER_LEN);
    head[..H].copy_from_slice(ip_udp_masked);
    head[H..H + b].copy_from_slice(&ib[..b]);
    if b == bth::HEADER_LEN {
        head[H + 4] = 0xff;
    }
    let mut h = crc32fast::Hasher::new_with_initial(AFTER_LRH);
    h.update(&head[..H + b]);
    h.update(&ib[b..]);
    h.finalize()
}

/// The ICRC of `ib` (BTH through pad, ICRC excluded) carried in the given IPv4 and UDP
/// headers (as on the wire; masking is done here).
pub fn compute_ipv4(ip_header: &[u8; 20], udp_header: &[u8; 8], ib: &[u8]) -> u32 {
    let mut p = [0u8; 28];
    p[..20].copy_from_slice(&mask_ipv4(ip_header));
    p[20..].copy_from_slice(&mask_udp(udp_header));
    crc_over(&p, ib)
}

/// The ICRC of `ib` (BTH through pad, ICRC excluded) carried in the given IPv6 and UDP
/// headers.
pub fn compute_ipv6(ip_header: &[u8; 40], udp_header: &[u8; 8], ib: &[u8]) -> u32 {
    let mut p = [0u8; 48];
    p[..40].copy_from_slice(&mask_ipv6(ip_header));
    p[40..].copy_from_slice(&mask_udp(udp_header));
    crc_over(&p, ib)
}

/// The IPv4 header a kernel UDP socket writes for a datagram carrying `ib_len` bytes of IB
/// packet plus the ICRC, with DF set and IP ID `id` (TOS, TTL and checksum are masked by
/// the ICRC anyway, so they are left 0 here).
pub fn udp4_ip_header(src: Ipv4Addr, dst: Ipv4Addr, id: u16, ib_len: usize) -> [u8; 20] {
    let total = (20 + 8 + ib_len + ICRC_LEN) as u16;
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&id.to_be_bytes());
    h[6] = 0x40; // DF
    h[8] = 64;
    h[9] = 17; // UDP
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    h
}

/// The IPv6 header a kernel UDP socket writes (traffic class and flow label are masked).
pub fn udp6_ip_header(src: Ipv6Addr, dst: Ipv6Addr, ib_len: usize) -> [u8; 40] {
    let payload = (8 + ib_len + ICRC_LEN) as u16;
    let mut h = [0u8; 40];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&payload.to_be_bytes());
    h[6] = 17;
    h[7] = 64;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
    h
}

/// The UDP header for `ib_len` bytes of IB packet plus ICRC (checksum masked, left 0).
pub fn udp_header(src_port: u16, dst_port: u16, ib_len: usize) -> [u8; 8] {
    let len = (8 + ib_len + ICRC_LEN) as u16;
    let mut h = [0u8; 8];
    h[0..2].copy_from_slice(&src_port.to_be_bytes());
    h[2..4].copy_from_slice(&dst_port.to_be_bytes());
    h[4..6].copy_from_slice(&len.to_be_bytes());
    h
}

/// The ICRC of `ib` (BTH through pad) sent from a kernel UDP socket with DF set, which
/// Linux sends with IP ID 0 on unconnected sockets.
pub fn for_udp4(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16, dst_port: u16, ib: &[u8]) -> u32 {
    compute_ipv4(
        &udp4_ip_header(src, dst, 0, ib.len()),
        &udp_header(src_port, dst_port, ib.len()),
        ib,
    )
}

/// The ICRC of `ib` (BTH through pad) sent over IPv6 from a kernel UDP socket.
pub fn for_udp6(src: Ipv6Addr, dst: Ipv6Addr, src_port: u16, dst_port: u16, ib: &[u8]) -> u32 {
    compute_ipv6(
        &udp6_ip_header(src, dst, ib.len()),
        &udp_header(src_port, dst_port, ib.len()),
        ib,
    )
}

/// The outcome of checking an ICRC whose IPv4 identification is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcrcCheck {
    /// The ICRC matches with IP ID 0 (what our own peers and kernel DF sockets send).
    Valid,
    /// The ICRC matches with exactly this non-zero IP ID (what rxe sends).
    ValidWithSolvedId(u16),
    /// No IP ID makes the ICRC match: the packet is corrupt.
    Invalid,
}

impl IcrcCheck {
    /// Whether the packet passes.
    pub const fn is_valid(self) -> bool {
        !matches!(self, IcrcCheck::Invalid)
    }
}

/// Checks the ICRC of `packet` (a whole IB packet: BTH through ICRC, as a UDP socket
/// delivers it) received over IPv6 from `src` to `dst`. Returns `false` when the packet is
/// shorter than a BTH plus ICRC.
pub fn verify_udp6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    src_port: u16,
    dst_port: u16,
    packet: &[u8],
) -> bool {
    let Some((ib, stored)) = split_icrc(packet) else {
        return false;
    };
    for_udp6(src, dst, src_port, dst_port, ib) == stored
}

fn split_icrc(packet: &[u8]) -> Option<(&[u8], u32)> {
    if packet.len() < bth::HEADER_LEN + ICRC_LEN {
        return None;
    }
    let (ib, c) = packet.split_at(packet.len() - ICRC_LEN);
    Some((ib, u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
}

/// The CRC-32 polynomial, reflected.
const POLY: u32 = 0xedb8_8320;

/// `a * b mod P` in the reflected representation (bit 31 = x^0).
const fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0u32;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `X2N[k] = x^(2^k) mod P`, reflected.
const X2N: [u32; 32] = {
    let mut t = [0u32; 32];
    let mut p = 1u32 << 30; // x^1
    let mut k = 0;
    while k < 32 {
        t[k] = p;
        p = mul_mod(p, p);
        k += 1;
    }
    t
};

/// `X8_LOW[j] = x^(8 j) mod P` and `X8_HIGH[j] = x^(8 * 256 j) mod P`, reflected: with
/// them the shift of a packet shorter than 64 KiB is one product ([`x8n`]), which the
/// ICRC of every GSO segment after the first needs (`ipv4_id_delta`).
const X8_LOW: [u32; 256] = powers(X2N[3]);
const X8_HIGH: [u32; 256] = powers(X2N[11]);

/// `[1, g, g^2, …, g^255] mod P`.
const fn powers(g: u32) -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut p = 1u32 << 31; // x^0
    let mut j = 0;
    while j < 256 {
        t[j] = p;
        p = mul_mod(p, g);
        j += 1;
    }
    t
}

/// `x^(8 n) mod P`: the linear effect of appending `n` zero bytes.
fn x8n(n: u64) -> u32 {
    if n < 1 << 16 {
        return mul_mod(X8_LOW[(n & 0xff) as usize], X8_HIGH[(n >> 8) as usize]);
    }
    x8n_by_squares(n)
}

/// [`x8n`] for any `n`, one product per bit of `n`.
fn x8n_by_squares(mut n: u64) -> u32 {
    let mut p = 1u32 << 31; // x^0
    let mut k = 3;
    while n != 0 {
        if n & 1 != 0 {
            p = mul_mod(X2N[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// Linear CRC state contributed by the two ID bytes `id` from a zero state.
const fn id_contribution(id: u16) -> u32 {
    let bytes = id.to_be_bytes();
    let mut s = 0u32;
    let mut i = 0;
    while i < 2 {
        s ^= bytes[i] as u32;
        let mut j = 0;
        while j < 8 {
            s = if s & 1 != 0 { (s >> 1) ^ POLY } else { s >> 1 };
            j += 1;
        }
        i += 1;
    }
    s
}

/// What an IPv4 identification of `id` instead of 0 changes in the ICRC of an IB packet of
/// `ib_len` octets (BTH through pad, the ICRC excluded): XOR it into an ICRC computed with
/// ID 0 ([`for_udp4`]) to get the ICRC of the same packet sent with ID `id`. A raw backend
/// that writes its own IP header sends any ID without computing the CRC again.
pub fn ipv4_id_delta(id: u16, ib_len: usize) -> u32 {
    mul_mod(id_contribution(id), x8n(after_ipv4_id(ib_len)))
}

/// The octets the ICRC covers after the IPv4 ID of an IB packet of `ib_len` octets.
fn after_ipv4_id(ib_len: usize) -> u64 {
    (LRH_LEN + 20 + 8 + ib_len - IPV4_ID_OFFSET - 2) as u64
}

/// [`ipv4_id_delta`] for the IDs `0..=max_id` of packets of one length, as the segments of
/// a GSO run have them: one product per ID bit in use, made once, instead of two per
/// packet (CRC-32 is linear in the ID's bits, so each delta is an XOR of per-bit ones).
#[derive(Debug, Clone)]
pub struct Ipv4IdShifts {
    ib_len: usize,
    max_id: u16,
    bits: [u32; 16],
}

impl Ipv4IdShifts {
    /// For packets of `ib_len` octets (BTH through pad) and IDs up to `max_id` (any other
    /// ID still gets its delta, the slow way).
    pub fn new(ib_len: usize, max_id: u16) -> Ipv4IdShifts {
        let shift = x8n(after_ipv4_id(ib_len));
        let used = 16 - max_id.leading_zeros() as usize;
        let mut bits = [0u32; 16];
        for (i, b) in bits.iter_mut().enumerate().take(used) {
            *b = mul_mod(id_contribution(1 << i), shift);
        }
        Ipv4IdShifts {
            ib_len,
            max_id,
            bits,
        }
    }

    /// The length these shifts are for.
    pub fn ib_len(&self) -> usize {
        self.ib_len
    }

    /// `ipv4_id_delta(id, self.ib_len())`.
    pub fn delta(&self, id: u16) -> u32 {
        if id > self.max_id {
            return ipv4_id_delta(id, self.ib_len);
        }
        let mut d = 0;
        let mut rest = id;
        while rest != 0 {
            d ^= self.bits[rest.trailing_zeros() as usize];
            rest &= rest - 1;
        }
        d
    }
}

/// Checks the ICRC of `packet` (BTH through ICRC, as a UDP socket delivers it) received
/// over IPv4 from `src` to `dst` when the sender's IP ID is unknown (DF assumed set).
pub fn verify_udp4_any_id(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    packet: &[u8],
) -> IcrcCheck {
    let Some((ib, stored)) = split_icrc(packet) else {
        return IcrcCheck::Invalid;
    };
    let c0 = for_udp4(src, dst, src_port, dst_port, ib);
    if c0 == stored {
        return IcrcCheck::Valid;
    }
    // crc(id) = c0 ^ S(L(id)) where L maps the ID bits to the CRC state right after the ID
    // field and S appends the rest of the message (multiplication by x^(8 n)).
    let target = c0 ^ stored;
    // Gaussian elimination: rows = basis vectors d_i (32-bit) with their ID bit.
    let basis = Ipv4IdShifts::new(ib.len(), u16::MAX);
    let mut rows = [(0u32, 0u16); 16];
    for (i, row) in rows.iter_mut().enumerate() {
        *row = (basis.bits[i], 1u16 << i);
    }
    let mut t = (target, 0u16);
    let mut used = 0usize;
    for bit in (0..32).rev() {
        let mask = 1u32 << bit;
        let Some(pivot) = (used..16).find(|&r| rows[r].0 & mask != 0) else {
            continue;
        };
        rows.swap(used, pivot);
        let (pv, pid) = rows[used];
        for (r, row) in rows.iter_mut().enumerate() {
            if r != used && row.0 & mask != 0 {
                row.0 ^= pv;
                row.1 ^= pid;
            }
        }
        if t.0 & mask != 0 {
            t.0 ^= pv;
            t.1 ^= pid;
        }
        used += 1;
    }
    if t.0 == 0 {
        IcrcCheck::ValidWithSolvedId(t.1)
    } else {
        IcrcCheck::Invalid
    }
}

/// Checks the ICRC of `packet` (BTH through ICRC) received over IPv4 when the whole
/// IP header is known (raw backends, captures).
pub fn verify_ipv4(ip_header: &[u8; 20], udp_header: &[u8; 8], packet: &[u8]) -> bool {
    match split_icrc(packet) {
        Some((ib, stored)) => compute_ipv4(ip_header, udp_header, ib) == stored,
        None => false,
    }
}

/// Checks the ICRC of `packet` (BTH through ICRC) received over IPv6 with known headers.
pub fn verify_ipv6(ip_header: &[u8; 40], udp_header: &[u8; 8], packet: &[u8]) -> bool {
    match split_icrc(packet) {
        Some((ib, stored)) => compute_ipv6(ip_header, udp_header, ib) == stored,
        None => false,
    }
}

#[cfg(test)]
mod shift_tests {
    use super::*;

    #[test]
    fn the_crc_after_the_lrh_stand_in_is_the_constant() {
        assert_eq!(crc32fast::hash(&[0xff; LRH_LEN]), AFTER_LRH);
    }

    #[test]
    fn the_shift_tables_agree_with_repeated_squaring() {
        for n in (0..1u64 << 16)
            .step_by(97)
            .chain([255, 256, 257, 4096, 65535])
        {
            assert_eq!(x8n(n), x8n_by_squares(n), "n = {n}");
        }
        assert_eq!(x8n(1 << 16), x8n_by_squares(1 << 16));
    }
}
