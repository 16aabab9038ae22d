//! Batched UDP I/O: recvmmsg(2) and sendmmsg(2) with the socket addresses the kernel uses,
//! with GSO (`UDP_SEGMENT`: a run of equal-size packets to one destination leaves as one
//! super-datagram) and GRO (`UDP_GRO`: a coalesced datagram is split into its packets here,
//! before the core sees them).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::ops::Range;
use std::os::fd::RawFd;

use emu_core::ECN_MASK;
use wire::roce::{icrc, ICRC_LEN};

/// ECN-Capable Transport (0), the IP ECN codepoint RoCE v2 packets leave with (RFC 3168).
pub const ECN_ECT0: u8 = 0b10;
/// Congestion Experienced.
pub const ECN_CE: u8 = 0b11;

/// A socket address as the kernel takes it.
fn sockaddr_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// The address the kernel filled in, if it is IPv4 or IPv6.
fn socket_addr_from(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::from((
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Room for the control messages of one datagram: a TOS / traffic class and a GSO or GRO
/// segment size (`CMSG_SPACE` of an int is 24 bytes on Linux).
const CONTROL_WORDS: usize = 8;

/// At most this many packets go into one GSO super-datagram (`UDP_MAX_SEGMENTS` was 64
/// before Linux 6.2).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// At most this many octets go into one GSO super-datagram: the largest UDP payload of an
/// IPv4 datagram (the kernel refuses more with EMSGSIZE).
pub const GSO_MAX_BYTES: usize = 65_507;
/// A receive buffer that holds any datagram GRO coalesces (at most 64 KiB of IP packet),
/// or a GSO super-frame with its Ethernet and `virtio_net_hdr` headers.
pub const GRO_BUF_LEN: usize = 65_600;

/// Buffers for receiving a batch of datagrams with one recvmmsg(2). With GRO a received
/// datagram can hold several packets of equal size (the last may be shorter); they are
/// split here, so the fields below the buffers are per packet, and [`RecvBatch::payload`]
/// finds each packet's bytes.
#[derive(Debug)]
pub struct RecvBatch {
    /// One per received datagram.
    pub bufs: Vec<Vec<u8>>,
    /// Length of packet `i` (valid for `i < count`); `None` if it was truncated.
    pub lens: Vec<Option<usize>>,
    pub srcs: Vec<Option<SocketAddr>>,
    /// The IPv4 TOS / IPv6 traffic class octet of packet `i`, when the socket reports it
    /// (`IP_RECVTOS` / `IPV6_RECVTCLASS`).
    pub tos: Vec<Option<u8>>,
    /// The local address packet `i` arrived on when the backend reports it per packet
    /// (the xdp backend's sockets serve every address of a device); `None`: the address
    /// the batch was received on.
    pub dsts: Vec<Option<SocketAddr>>,
    /// Where packet `i` starts (buffer, offset) when the last receive split a coalesced
    /// datagram (`split`); otherwise packet `i` is at the start of buffer `i`.
    spans: Vec<(usize, usize)>,
    split: bool,
    /// Coalesced datagrams (GRO, two packets or more) received so far, and the packets
    /// they held.
    pub coalesced: u64,
    pub coalesced_packets: u64,
    names: Vec<libc::sockaddr_storage>,
    /// Ancillary data per datagram (8-byte aligned for `cmsghdr`).
    controls: Vec<[u64; CONTROL_WORDS]>,
}

/// Where a packet is in a [`RecvBatch`]'s buffers, and what came with it.
#[derive(Debug, Clone, Copy)]
pub struct Packet {
    pub buf: usize,
    pub at: usize,
    /// `None`: truncated.
    pub len: Option<usize>,
    pub src: Option<SocketAddr>,
    pub tos: Option<u8>,
}

/// What the control messages of a received datagram say.
#[derive(Debug, Default, Clone, Copy)]
struct Received {
    /// The TOS / traffic class octet.
    tos: Option<u8>,
    /// The segment size GRO coalesced equal packets at (`UDP_GRO`).
    gro_size: Option<usize>,
}

/// The TOS / traffic class octet and the GRO segment size from a received message's
/// control messages.
fn controls_of(h: &libc::msghdr) -> Received {
    let mut r = Received::default();
    // SAFETY: the kernel filled `msg_control` up to `msg_controllen`; CMSG_FIRSTHDR and
    // CMSG_NXTHDR stay within it and return null at its end.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let (level, kind) = ((*c).cmsg_level, (*c).cmsg_type);
            let data = libc::CMSG_DATA(c);
            if level == libc::IPPROTO_IP && kind == libc::IP_TOS {
                r.tos = Some(*data);
            }
            if level == libc::IPPROTO_IPV6 && kind == libc::IPV6_TCLASS {
                let v = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                r.tos = Some(v as u8);
            }
            if level == libc::SOL_UDP && kind == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                r.gro_size = usize::try_from(v).ok().filter(|&v| v > 0);
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    r
}

impl RecvBatch {
    pub fn new(count: usize, size: usize) -> RecvBatch {
        RecvBatch {
            bufs: vec![vec![0u8; size]; count],
            lens: vec![None; count],
            srcs: vec![None; count],
            tos: vec![None; count],
            dsts: vec![None; count],
            spans: vec![(0, 0); count],
            split: false,
            coalesced: 0,
            coalesced_packets: 0,
            controls: vec![[0; CONTROL_WORDS]; count],
            // SAFETY: sockaddr_storage is plain old data; all zeroes is valid.
            names: vec![unsafe { std::mem::zeroed() }; count],
        }
    }

    /// The bytes of packet `i`, `len` long (its `lens[i]`).
    pub fn payload(&self, i: usize, len: usize) -> &[u8] {
        let (b, at) = if self.split { self.spans[i] } else { (i, 0) };
        &self.bufs[b][at..at + len]
    }

    /// Makes every buffer hold a whole coalesced datagram (GRO on): a smaller one would
    /// truncate, and lose, every packet of it.
    pub fn hold_coalesced(&mut self) {
        for b in &mut self.bufs {
            if b.len() < GRO_BUF_LEN {
                b.resize(GRO_BUF_LEN, 0);
            }
        }
    }

    /// Packet `i` is at the start of buffer `i` (what the raw backends fill in).
    pub fn one_packet_per_buffer(&mut self) {
        self.split = false;
    }

    /// Lays out the packets a raw backend found in the received buffers.
    pub fn set_packets(&mut self, packets: &[Packet]) {
        self.packets_room(packets.len());
        for (i, p) in packets.iter().enumerate() {
            (self.lens[i], self.srcs[i], self.tos[i], self.dsts[i]) = (p.len, p.src, p.tos, None);
            self.spans[i] = (p.buf, p.at);
        }
        self.split = true;
    }

    /// Room for `n` packets in the per-packet fields.
    fn packets_room(&mut self, n: usize) {
        if self.lens.len() < n {
            self.lens.resize(n, None);
            self.srcs.resize(n, None);
            self.tos.resize(n, None);
            self.dsts.resize(n, None);
            self.spans.resize(n, (0, 0));
        }
    }
}

/// Receives up to a batch of datagrams without blocking; returns how many packets arrived
/// (a datagram GRO coalesced counts as the packets it holds).
pub fn recv_batch(fd: RawFd, b: &mut RecvBatch) -> io::Result<usize> {
    let mut iovs: Vec<libc::iovec> = b
        .bufs
        .iter_mut()
        .map(|buf| libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        })
        .collect();
    let mut hdrs: Vec<libc::mmsghdr> = iovs
        .iter_mut()
        .zip(b.names.iter_mut())
        .zip(b.controls.iter_mut())
        .map(|((iov, name), control)| {
            // SAFETY: mmsghdr is plain old data; all zeroes is valid.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen =
                std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = control.as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = std::mem::size_of_val(control) as _;
            h
        })
        .collect();
    b.split = false;
    // SAFETY: every header points at a live buffer and name of `b`, for the call only.
    let n = unsafe {
        libc::recvmmsg(
            fd,
            hdrs.as_mut_ptr(),
            hdrs.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    let n = n as usize;
    let got: Vec<(Option<usize>, Option<SocketAddr>, Received)> = hdrs
        .iter()
        .take(n)
        .enumerate()
        .map(|(i, h)| {
            let len = (h.msg_hdr.msg_flags & libc::MSG_TRUNC == 0).then_some(h.msg_len as usize);
            (len, socket_addr_from(&b.names[i]), controls_of(&h.msg_hdr))
        })
        .collect();
    let mut p = 0;
    for (i, (len, src, r)) in got.into_iter().enumerate() {
        let segment = match (len, r.gro_size) {
            (Some(len), Some(size)) if len > size => size,
            _ => {
                b.packets_room(p + 1);
                (b.lens[p], b.srcs[p], b.tos[p], b.dsts[p]) = (len, src, r.tos, None);
                b.spans[p] = (i, 0);
                p += 1;
                continue;
            }
        };
        let len = len.unwrap_or(0);
        let count = len.div_ceil(segment);
        b.packets_room(p + count);
        b.coalesced += 1;
        b.coalesced_packets += count as u64;
        b.split = true;
        let shifts = src
            .is_some_and(|s| s.is_ipv4())
            .then(|| run_shifts(segment, count));
        for k in 0..count {
            let at = k * segment;
            let seg_len = segment.min(len - at);
            if let Some(run) = &shifts {
                undo_gso_id(&mut b.bufs[i][at..at + seg_len], k, run);
            }
            let tos = segment_tos(r.tos, k);
            (b.lens[p], b.srcs[p], b.tos[p], b.dsts[p]) = (Some(seg_len), src, tos, None);
            b.spans[p] = (i, at);
            p += 1;
        }
    }
    if !b.split {
        // Packet `i` is datagram `i`: the spans are the identity.
        debug_assert_eq!(p, n);
    }
    Ok(p)
}

/// The TOS / traffic class octet segment `k` of a coalesced datagram is reported with: the
/// datagram's, except that Congestion Experienced counts once, on the first segment. The
/// network marked one packet (the super-frame veth carried whole, or a run that GRO
/// merged, which it does only for equal TOS), so the notification point sees one mark, as
/// a capture of that link shows one; it answers a flow with one CNP per interval anyway.
pub(super) fn segment_tos(tos: Option<u8>, k: usize) -> Option<u8> {
    match tos {
        Some(t) if k > 0 && t & ECN_MASK == ECN_MASK => Some(t & !ECN_MASK | ECN_ECT0),
        t => t,
    }
}

/// The IPv4 identification the kernel gives segment `k` of a GSO super-datagram sent from
/// an unconnected socket with DF set: the datagram's ID is 0 and each segment counts up
/// from it (as `inet_gso_segment` does; seen on veth with segmentation in software).
fn gso_ipv4_id(k: usize) -> u16 {
    k as u16
}

/// The ID shifts for the segments of a GSO run of `count` packets whose first has
/// `first_len` octets (BTH through ICRC).
pub(super) fn run_shifts(first_len: usize, count: usize) -> icrc::Ipv4IdShifts {
    let last = gso_ipv4_id(count.saturating_sub(1));
    icrc::Ipv4IdShifts::new(first_len.saturating_sub(ICRC_LEN), last)
}

/// Moves the ICRC of `packet` (BTH through ICRC) between the IPv4 ID of GSO segment `k`
/// and ID 0 (the move is its own inverse: CRC-32 is affine in the ID's bits), with the
/// shifts of its run where its length is the run's (all but a shorter last segment).
fn shift_icrc_id(packet: &[u8], k: usize, run: &icrc::Ipv4IdShifts) -> Option<[u8; 4]> {
    let ib_len = packet.len().checked_sub(ICRC_LEN)?;
    let c = &packet[ib_len..];
    let stored = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    let id = gso_ipv4_id(k);
    let delta = if ib_len == run.ib_len() {
        run.delta(id)
    } else {
        icrc::ipv4_id_delta(id, ib_len)
    };
    Some((stored ^ delta).to_le_bytes())
}

/// Segment `k` of a coalesced IPv4 datagram: its ICRC, computed for the ID the segment
/// carried on the wire when it came from a GSO sender, is made the one for ID 0, which
/// the core checks first (any other ID is still found by solving for it). `run`: the
/// shifts of its datagram ([`run_shifts`]).
pub(super) fn undo_gso_id(packet: &mut [u8], k: usize, run: &icrc::Ipv4IdShifts) {
    if k == 0 {
        return;
    }
    if let Some(c) = shift_icrc_id(packet, k, run) {
        let end = packet.len();
        packet[end - ICRC_LEN..].copy_from_slice(&c);
    }
}

/// One datagram to send.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    pub dst: SocketAddr,
    /// The IPv4 TOS / IPv6 traffic class octet without its ECN bits (DSCP << 2); it leaves
    /// with ECT(0) added.
    pub traffic_class: u8,
    pub payload: &'a [u8],
}

/// Writes the control messages `items` (level, type, data) into `control` and points `h`
/// at them.
fn put_controls(
    h: &mut libc::msghdr,
    control: &mut [u64; CONTROL_WORDS],
    items: &[(libc::c_int, libc::c_int, &[u8])],
) {
    if items.is_empty() {
        return;
    }
    h.msg_control = control.as_mut_ptr().cast();
    h.msg_controllen = std::mem::size_of_val(control) as _;
    let mut used = 0;
    // SAFETY: `control` is zeroed, 8-byte aligned and 64 bytes long; two control messages
    // of at most an int each take 48 (CMSG_SPACE(4) = 24). CMSG_FIRSTHDR/CMSG_NXTHDR return
    // null rather than a header that does not fit, and each data write stays within its
    // header's CMSG_LEN.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        for (level, kind, data) in items {
            if c.is_null() {
                break;
            }
            (*c).cmsg_level = *level;
            (*c).cmsg_type = *kind;
            (*c).cmsg_len = libc::CMSG_LEN(data.len() as u32) as _;
            std::ptr::copy_nonoverlapping(data.as_ptr(), libc::CMSG_DATA(c), data.len());
            used += libc::CMSG_SPACE(data.len() as u32) as usize;
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    h.msg_controllen = used as _;
}

/// Consecutive datagrams that can leave as one GSO super-datagram: one destination, one
/// traffic class, equal sizes (the last may be shorter), at most [`GSO_MAX_SEGMENTS`] and
/// [`GSO_MAX_BYTES`]. Without `gso`, or for multicast, each datagram is a run of its own.
fn runs(msgs: &[Outgoing<'_>], gso: bool) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < msgs.len() {
        let first = &msgs[at];
        let size = first.payload.len();
        let mut end = at + 1;
        if gso && size >= ICRC_LEN && !first.dst.ip().is_multicast() {
            let mut total = size;
            while end < msgs.len() && end - at < GSO_MAX_SEGMENTS {
                let m = &msgs[end];
                let len = m.payload.len();
                if m.dst != first.dst
                    || m.traffic_class != first.traffic_class
                    || len > size
                    || len < ICRC_LEN
                    || total + len > GSO_MAX_BYTES
                {
                    break;
                }
                total += len;
                end += 1;
                if len < size {
                    break;
                }
            }
        }
        out.push(at..end);
        at = end;
    }
    out
}

/// What one [`send_batch`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Datagrams (packets) the kernel took, from the front of the batch.
    pub packets: usize,
    /// GSO super-datagrams among them (two packets or more each), and the packets they held.
    pub super_datagrams: usize,
    pub super_packets: usize,
    /// The kernel refused a GSO send: `packets` stops before it, and the rest is to be sent
    /// again without GSO.
    pub gso_refused: bool,
}

/// Hands `hdrs` to sendmmsg(2), again while the kernel takes fewer, until all went, a call
/// sent none, or an error other than an interrupted call stopped it: returns how many went
/// and that error. The one sendmmsg loop of the daemon: datagrams ([`send_batch`]) and
/// whole frames ([`send_frames`]) both leave through it.
///
/// # Safety
/// Every header must point at names, iovecs, payloads and control data that stay valid
/// and unchanged for the call.
unsafe fn send_headers(fd: RawFd, hdrs: &mut [libc::mmsghdr]) -> (usize, Option<io::Error>) {
    let mut sent = 0;
    while sent < hdrs.len() {
        // SAFETY: the caller promises live buffers behind every header.
        let n = unsafe {
            libc::sendmmsg(
                fd,
                hdrs[sent..].as_mut_ptr(),
                (hdrs.len() - sent) as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return (sent, Some(e));
        }
        if n == 0 {
            break;
        }
        sent += n as usize;
    }
    (sent, None)
}

/// Sends whole frames with sendmmsg(2) on a socket bound to its interface and protocol
/// (AF_PACKET: no destination names), each after `prefix` (a `virtio_net_hdr` on a socket
/// with `PACKET_VNET_HDR`, else nothing); returns how many went, or the error when none did.
pub fn send_frames(fd: RawFd, prefix: &[u8], frames: &[Vec<u8>]) -> io::Result<usize> {
    let per = if prefix.is_empty() { 1 } else { 2 };
    let mut iovs: Vec<libc::iovec> = Vec::with_capacity(per * frames.len());
    for f in frames {
        if !prefix.is_empty() {
            iovs.push(libc::iovec {
                iov_base: prefix.as_ptr() as *mut libc::c_void,
                iov_len: prefix.len(),
            });
        }
        iovs.push(libc::iovec {
            iov_base: f.as_ptr() as *mut libc::c_void,
            iov_len: f.len(),
        });
    }
    let mut hdrs: Vec<libc::mmsghdr> = iovs
        .chunks_exact_mut(per)
        .map(|iov| {
            // SAFETY: mmsghdr is plain old data; all zeroes is valid.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = iov.as_mut_ptr();
            h.msg_hdr.msg_iovlen = per;
            h
        })
        .collect();
    // SAFETY: the headers point at `iovs` (over `prefix` and `frames`), alive and
    // unchanged until the call returns.
    match unsafe { send_headers(fd, &mut hdrs) } {
        (0, Some(e)) => Err(e),
        (sent, _) => Ok(sent),
    }
}

/// Whether the kernel refuses GSO itself (not the datagram): an old kernel, a route
/// without checksum offload, a socket with checksums off.
fn refuses_gso(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
    )
}

/// Sends datagrams with one sendmmsg(2) (more if the kernel takes fewer); stops at the
/// first error other than an interrupted call. A datagram whose traffic class is not 0
/// carries its TOS / traffic class (with ECT(0)) in a control message; the others leave
/// with the socket's default, ECT(0) alone. With `gso`, each run of equal-size packets to
/// one destination leaves as one GSO super-datagram (`UDP_SEGMENT`); over IPv4 the ICRC of
/// its segment `k` is moved to the IP ID the kernel gives that segment (DESIGN decision 6:
/// every ICRC verifies over the header on the wire).
pub fn send_batch(fd: RawFd, msgs: &[Outgoing<'_>], gso: bool) -> io::Result<Sent> {
    let runs = runs(msgs, gso);
    // The ICRCs of segments after the first, for their IP IDs; built before any pointer
    // into them is taken.
    let icrcs: Vec<[u8; 4]> = runs
        .iter()
        .flat_map(|r| {
            let v4 = msgs[r.start].dst.is_ipv4() && r.len() > 1;
            let shifts = v4.then(|| run_shifts(msgs[r.start].payload.len(), r.len()));
            r.clone().enumerate().map(move |(k, i)| {
                let p = msgs[i].payload;
                shifts
                    .as_ref()
                    .filter(|_| k > 0)
                    .and_then(|run| shift_icrc_id(p, k, run))
                    .unwrap_or_default()
            })
        })
        .collect();
    let mut iovs: Vec<libc::iovec> = Vec::with_capacity(2 * msgs.len());
    let mut spans: Vec<(usize, usize)> = Vec::with_capacity(runs.len());
    for r in &runs {
        let start = iovs.len();
        let v4 = msgs[r.start].dst.is_ipv4() && r.len() > 1;
        for (k, i) in r.clone().enumerate() {
            let p = msgs[i].payload;
            if v4 && k > 0 && p.len() >= ICRC_LEN {
                let ib = p.len() - ICRC_LEN;
                iovs.push(libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: ib,
                });
                iovs.push(libc::iovec {
                    iov_base: icrcs[i].as_ptr() as *mut libc::c_void,
                    iov_len: ICRC_LEN,
                });
            } else {
                iovs.push(libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                });
            }
        }
        spans.push((start, iovs.len() - start));
    }
    let mut names: Vec<(libc::sockaddr_storage, libc::socklen_t)> = runs
        .iter()
        .map(|r| sockaddr_of(msgs[r.start].dst))
        .collect();
    let mut controls: Vec<[u64; CONTROL_WORDS]> = vec![[0; CONTROL_WORDS]; runs.len()];
    let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(runs.len());
    for (((r, &(start, count)), (name, len)), control) in runs
        .iter()
        .zip(&spans)
        .zip(names.iter_mut())
        .zip(controls.iter_mut())
    {
        let first = &msgs[r.start];
        // SAFETY: mmsghdr is plain old data; all zeroes is valid.
        let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
        h.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
        h.msg_hdr.msg_namelen = *len;
        h.msg_hdr.msg_iov = iovs[start..start + count].as_mut_ptr();
        h.msg_hdr.msg_iovlen = count as _;
        let dscp = first.traffic_class & !ECN_MASK;
        let tos = libc::c_int::from(dscp | ECN_ECT0).to_ne_bytes();
        let segment = (first.payload.len() as u16).to_ne_bytes();
        let mut items: Vec<(libc::c_int, libc::c_int, &[u8])> = Vec::new();
        if dscp != 0 {
            items.push(if first.dst.is_ipv6() {
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS, &tos[..])
            } else {
                (libc::IPPROTO_IP, libc::IP_TOS, &tos[..])
            });
        }
        if r.len() > 1 {
            items.push((libc::SOL_UDP, libc::UDP_SEGMENT, &segment[..]));
        }
        put_controls(&mut h.msg_hdr, control, &items);
        hdrs.push(h);
    }
    // SAFETY: the headers point at `names`, `iovs` (over `msgs`' payloads and `icrcs`) and
    // `controls`, all alive and unchanged until the call returns.
    let (went, error) = unsafe { send_headers(fd, &mut hdrs) };
    let mut out = Sent::default();
    for r in &runs[..went] {
        out.packets += r.len();
        if r.len() > 1 {
            out.super_datagrams += 1;
            out.super_packets += r.len();
        }
    }
    match error {
        Some(e) if runs.get(went).is_some_and(|r| r.len() > 1) && refuses_gso(&e) => {
            out.gso_refused = true;
            Ok(out)
        }
        Some(e) if went == 0 => Err(e),
        _ => Ok(out),
    }
}

/// The ICRC of `packet` moved to the IP ID of GSO segment `k` (for the backends' tests).
#[cfg(test)]
pub fn tests_shift_icrc_id(packet: &[u8], k: usize) -> [u8; 4] {
    shift_icrc_id(packet, k, &run_shifts(packet.len(), k + 1)).expect("a packet with an ICRC")
}

/// The runs [`send_batch`] would make with GSO on (for the backend's tests).
#[cfg(test)]
pub fn tests_runs(msgs: &[Outgoing<'_>]) -> Vec<Range<usize>> {
    runs(msgs, true)
}
