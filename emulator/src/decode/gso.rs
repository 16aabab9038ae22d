//! UDP GSO super-frames in a capture: a kernel UDP sender's `UDP_SEGMENT` datagram that
//! the capture saw before segmentation (on veth and loopback, which pass it on whole, or
//! on the sending host of a NIC that segments). Such a frame holds a run of RoCE packets of
//! one size (the last may be shorter) behind one IP and UDP header, so its own ICRC fails.
//! Here it is cut back into the frames the wire carries once segmented: each segment gets
//! its own IP and UDP lengths and the IP ID counting up from the super-frame's, as the
//! kernel's segmentation writes them, and then decodes and verifies like any frame.

use wire::frame::{self, IpHeader, Transport};

/// The smallest RoCE packet: BTH and ICRC.
const MIN_PACKET: usize = 16;
/// Candidate segment sizes checked by their ICRC before giving up.
const MAX_TRIES: usize = 64;

/// The frames a GSO super-frame stands for, when `ethernet` is one: a RoCE v2 frame whose
/// ICRC fails as a whole and whose first segment verifies at some size. `None` otherwise.
pub(super) fn split(ethernet: &[u8]) -> Option<Vec<Vec<u8>>> {
    let f = frame::parse(ethernet).ok()?;
    let ib = f.roce()?;
    if f.verify_icrc() != Some(false) || ib.len() < 2 * MIN_PACKET {
        return None;
    }
    let Transport::Udp { header: udp, .. } = f.transport else {
        return None;
    };
    let offset = |s: &[u8]| s.as_ptr() as usize - ethernet.as_ptr() as usize;
    let (ip_at, ip_len) = match f.ip {
        IpHeader::V4 { header, .. } if header.len() == 20 => (offset(header), 20),
        IpHeader::V6 { header, .. } => (offset(header), 40),
        IpHeader::V4 { .. } => return None,
    };
    let (udp_at, ib_at) = (offset(udp), offset(ib));
    let cut = |k: usize, size: usize| -> Vec<u8> {
        let seg = &ib[k * size..ib.len().min((k + 1) * size)];
        let mut out = Vec::with_capacity(ib_at + seg.len());
        out.extend_from_slice(&ethernet[..ib_at]);
        out.extend_from_slice(seg);
        let udp_len = (8 + seg.len()) as u16;
        out[udp_at + 4..udp_at + 6].copy_from_slice(&udp_len.to_be_bytes());
        let ip = &mut out[ip_at..ip_at + ip_len];
        if ip_len == 20 {
            ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            let id = u16::from_be_bytes([ip[4], ip[5]]).wrapping_add(k as u16);
            ip[4..6].copy_from_slice(&id.to_be_bytes());
            ip[10..12].copy_from_slice(&[0, 0]);
            let sum = ipv4_checksum(ip);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
        } else {
            ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
        }
        out
    };
    // A segment boundary starts a BTH for the same destination QP (bytes 5..8).
    let qp = &ib[5..8];
    let size = (MIN_PACKET..=ib.len() - MIN_PACKET)
        .step_by(4)
        .filter(|&s| ib.get(s + 5..s + 8) == Some(qp))
        .take(MAX_TRIES)
        .find(|&s| frame::parse(&cut(0, s)).is_ok_and(|f| f.verify_icrc() == Some(true)))?;
    Some((0..ib.len().div_ceil(size)).map(|k| cut(k, size)).collect())
}

/// The IPv4 header checksum of `header` (its checksum field zero).
fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
