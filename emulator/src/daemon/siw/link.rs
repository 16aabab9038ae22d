//! The Ethernet link under the smoltcp backend: one AF_PACKET socket on the interface
//! (packet(7)) that receives only the frames of the device's own addresses, and sends
//! whole frames smoltcp built. It is smoltcp's [`Device`].
//!
//! - A classic BPF filter passes: ARP whose target is one of the device's IPv4
//!   addresses; IPv4 to one of them; IPv6 to one of them or to its solicited-node
//!   multicast address (neighbour discovery, RFC 4861 §7.2.1). Frames the host itself
//!   sends (`PACKET_OUTGOING`) are never passed, so the device does not hear its own.
//! - Frames from the kernel's side of the link may carry a partial TCP checksum (a
//!   peer namespace's stack offloads it, and veth passes the packet on unchecked): the
//!   socket's `PACKET_AUXDATA` says so (`TP_STATUS_CSUMNOTREADY`, `TP_STATUS_CSUM_VALID`),
//!   and every other TCP segment has its checksum verified here, before smoltcp (which
//!   is told not to verify) sees it. Such a peer may also pass a segment larger than the
//!   MTU (GSO over veth): frames up to 64 KiB are taken.
//! - The MSS option of every SYN received is noted ([`RawLink::peer_mss`]): smoltcp
//!   does not tell the MSS it negotiated, and FPDUs are cut to it (RFC 5044 §4.1).

use crate::daemon::link::packet;
use crate::daemon::sys;
use smoltcp::phy::{Checksum, Device, DeviceCapabilities, Medium};
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpAddress, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket,
};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Frames taken per poll, so one busy link cannot hold the engine.
const RX_BUDGET: usize = 256;
/// The largest frame received (a GSO segment: 64 KiB of IP and the Ethernet header).
const RX_FRAME_MAX: usize = 65536 + 64;
/// Frames staged before one sendmmsg(2).
const TX_BATCH: usize = 64;
/// SYN MSS options remembered; the oldest are forgotten past this.
const MSS_NOTES_MAX: usize = 1024;

// Classic BPF (linux/filter.h).
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: loads the packet type.
const AD_PKTTYPE: u32 = 0xffff_f000 + 4;
const PACKET_OUTGOING: u32 = 4;
const ACCEPT: u32 = 0x0004_0000;

// packet(7) auxiliary data.
const PACKET_AUXDATA: libc::c_int = 8;
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const TP_STATUS_CSUM_VALID: u32 = 1 << 7;

/// `struct tpacket_auxdata`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct TpacketAuxdata {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
}

/// What the link dropped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LinkCounters {
    pub rx_frames: u64,
    pub tx_frames: u64,
    /// TCP segments whose checksum does not verify.
    pub rx_bad_checksum: u64,
    /// Frames larger than [`RX_FRAME_MAX`].
    pub rx_truncated: u64,
    /// Frames the kernel would not take (ENOBUFS and the like; TCP sends them again).
    pub tx_errors: u64,
}

/// A classic BPF instruction.
fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The words of an IPv6 address, as `ld` loads them.
fn words(a: std::net::Ipv6Addr) -> [u32; 4] {
    let o = a.octets();
    std::array::from_fn(|i| {
        u32::from_be_bytes([o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]])
    })
}

/// The solicited-node multicast address of `a` (RFC 4291 §2.7.1): ff02::1:ffXX:XXXX.
fn solicited_node(a: std::net::Ipv6Addr) -> std::net::Ipv6Addr {
    let o = a.octets();
    std::net::Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15],
    ])
}

/// The filter passing the frames of `addrs` (see the module docs). Each block is a list
/// of (load, offset, value) equalities that all hold for the frame to pass; a failed
/// one jumps to the next block.
pub fn filter(addrs: &[IpAddr]) -> Vec<libc::sock_filter> {
    let mut blocks: Vec<Vec<(u16, u32, u32)>> = Vec::new();
    for a in addrs {
        match *a {
            IpAddr::V4(v4) => {
                let v4 = u32::from(v4);
                // ARP: the target protocol address is at 14 + 24.
                blocks.push(vec![(LD_H_ABS, 12, 0x0806), (LD_W_ABS, 38, v4)]);
                blocks.push(vec![(LD_H_ABS, 12, 0x0800), (LD_W_ABS, 30, v4)]);
            }
            IpAddr::V6(v6) => {
                for dst in [v6, solicited_node(v6)] {
                    let mut b = vec![(LD_H_ABS, 12, 0x86dd)];
                    for (i, w) in words(dst).into_iter().enumerate() {
                        b.push((LD_W_ABS, 38 + 4 * i as u32, w));
                    }
                    blocks.push(b);
                }
            }
        }
    }
    let mut prog = vec![insn(LD_W_ABS, 0, 0, AD_PKTTYPE)];
    // Jump target fixed below: the final `ret 0`.
    prog.push(insn(JEQ_K, 0, 0, PACKET_OUTGOING));
    for b in &blocks {
        let block_len = 2 * b.len() + 1;
        for (i, &(load, offset, value)) in b.iter().enumerate() {
            prog.push(insn(load, 0, 0, offset));
            // Past this block's remaining checks and its `ret`.
            let skip = block_len - 2 * (i + 1);
            prog.push(insn(JEQ_K, 0, skip as u8, value));
        }
        prog.push(insn(RET_K, 0, 0, ACCEPT));
    }
    prog.push(insn(RET_K, 0, 0, 0));
    let to_drop = prog.len() - 3;
    prog[1].jt = u8::try_from(to_drop).unwrap_or(u8::MAX);
    prog
}

/// The AF_PACKET socket of a smoltcp device.
#[derive(Debug)]
pub struct RawLink {
    fd: OwnedFd,
    mtu: usize,
    rx: Vec<u8>,
    /// Frames smoltcp built, sent together by [`RawLink::flush`].
    tx: TxStage,
    budget: usize,
    /// (local port, peer) → the MSS option of the peer's SYN.
    mss: HashMap<(u16, SocketAddr), u16>,
    pub counters: LinkCounters,
}

impl RawLink {
    /// Opens the link on interface `ifindex` (`mtu`: its IP MTU) for `addrs`. Errors
    /// name the interface and, for a missing capability, what to do.
    pub fn open(netdev: &str, ifindex: u32, mtu: u32, addrs: &[IpAddr]) -> io::Result<RawLink> {
        let fd = open_socket(ifindex, addrs).map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "backend smoltcp on {netdev}: AF_PACKET needs CAP_NET_RAW (run rdma-emud \
                     as root or setcap cap_net_raw+ep rdma-emud); backend tcp needs none"
                ),
            ),
            _ => io::Error::new(e.kind(), format!("backend smoltcp on {netdev}: {e}")),
        })?;
        Ok(RawLink {
            fd,
            mtu: mtu as usize,
            rx: vec![0; RX_FRAME_MAX],
            tx: TxStage::default(),
            budget: RX_BUDGET,
            mss: HashMap::new(),
            counters: LinkCounters::default(),
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Sends the staged frames. Whether any left.
    pub fn flush(&mut self) -> bool {
        let sent = self.tx.flush(self.fd.as_raw_fd(), &mut self.counters);
        sent > 0
    }

    /// Gives the link its receive budget for the next poll.
    pub fn refill(&mut self) {
        self.budget = RX_BUDGET;
    }

    /// The MSS option of the SYN `peer` sent to local port `port`, if one was seen.
    pub fn peer_mss(&self, port: u16, peer: SocketAddr) -> Option<u16> {
        self.mss.get(&(port, peer)).copied()
    }

    /// Receives one frame into `rx`: its length and auxiliary status. `None`: nothing
    /// waiting (or an error).
    fn recv(&mut self) -> Option<(usize, u32)> {
        let mut aux = [0u64; 8];
        let mut iov = libc::iovec {
            iov_base: self.rx.as_mut_ptr().cast(),
            iov_len: self.rx.len(),
        };
        // SAFETY: msghdr is plain old data; all zeroes is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = aux.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&aux) as _;
        // SAFETY: `msg` points at `iov` (over `rx`) and `aux`, live for the call.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            return None;
        }
        let mut status = 0;
        // SAFETY: the kernel filled `msg_control` with well-formed cmsgs within
        // `msg_controllen`; CMSG_FIRSTHDR/NXTHDR stay inside it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == PACKET_AUXDATA {
                    let data = libc::CMSG_DATA(c).cast::<TpacketAuxdata>();
                    status = std::ptr::read_unaligned(data).tp_status;
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & libc::MSG_TRUNC != 0 {
            self.counters.rx_truncated += 1;
            return Some((0, status));
        }
        Some((n as usize, status))
    }

    /// Checks a received frame: a TCP segment's checksum unless the kernel vouches for
    /// it; notes a SYN's MSS. Whether smoltcp may have it.
    fn admit(&mut self, len: usize, status: u32) -> bool {
        let verify = status & (TP_STATUS_CSUMNOTREADY | TP_STATUS_CSUM_VALID) == 0;
        let Some((src, dst, tcp)) = tcp_of(&self.rx[..len]) else {
            // Not TCP (ARP, ICMP, ND, or malformed): smoltcp checks the rest itself.
            return len > 0;
        };
        let Ok(seg) = TcpPacket::new_checked(tcp) else {
            return false;
        };
        if verify && !seg.verify_checksum(&src, &dst) {
            self.counters.rx_bad_checksum += 1;
            return false;
        }
        if seg.syn() {
            if let Some(mss) = syn_mss(&seg) {
                if self.mss.len() >= MSS_NOTES_MAX {
                    self.mss.clear();
                }
                let peer = SocketAddr::new(IpAddr::from(src), seg.src_port());
                self.mss.insert((seg.dst_port(), peer), mss);
            }
        }
        true
    }
}

/// The MSS option of a SYN (RFC 9293 §3.7.1).
fn syn_mss(seg: &TcpPacket<&[u8]>) -> Option<u16> {
    let mut opts = seg.options();
    while !opts.is_empty() {
        let (rest, opt) = smoltcp::wire::TcpOption::parse(opts).ok()?;
        match opt {
            smoltcp::wire::TcpOption::MaxSegmentSize(mss) => return Some(mss),
            smoltcp::wire::TcpOption::EndOfList => return None,
            _ => opts = rest,
        }
    }
    None
}

/// The addresses and TCP segment of an Ethernet frame carrying TCP over IPv4 (first
/// fragment, whole) or IPv6 (TCP as the first next header).
fn tcp_of(frame: &[u8]) -> Option<(IpAddress, IpAddress, &[u8])> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let payload = eth.payload();
    match eth.ethertype() {
        EthernetProtocol::Ipv4 => {
            let ip = Ipv4Packet::new_checked(payload).ok()?;
            if ip.next_header() != IpProtocol::Tcp || ip.more_frags() || ip.frag_offset() != 0 {
                return None;
            }
            let (src, dst) = (ip.src_addr(), ip.dst_addr());
            let at = usize::from(ip.header_len());
            let end = usize::from(ip.total_len());
            Some((src.into(), dst.into(), payload.get(at..end)?))
        }
        EthernetProtocol::Ipv6 => {
            let ip = Ipv6Packet::new_checked(payload).ok()?;
            if ip.next_header() != IpProtocol::Tcp {
                return None;
            }
            let (src, dst) = (ip.src_addr(), ip.dst_addr());
            let end = 40 + usize::from(ip.payload_len());
            Some((src.into(), dst.into(), payload.get(40..end)?))
        }
        _ => None,
    }
}

/// An AF_PACKET socket on `ifindex`, filtered for `addrs`, with auxiliary data on.
fn open_socket(ifindex: u32, addrs: &[IpAddr]) -> io::Result<OwnedFd> {
    // Nothing is queued before the filter is in place and the bind below.
    let fd = packet::unbound_socket()?;
    packet::attach_filter(fd.as_raw_fd(), &mut filter(addrs))?;
    sys::setsockopt_int(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_AUXDATA, 1)?;
    let _ = sys::setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20);
    let _ = sys::setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
    packet::bind_to_interface(fd.as_raw_fd(), ifindex, libc::ETH_P_ALL as u16)?;
    Ok(fd)
}

/// A received frame handed to smoltcp.
pub struct Rx<'a>(&'a [u8]);

/// Frames waiting for one sendmmsg(2): `frames[..len]` (the buffers are reused).
#[derive(Debug, Default)]
struct TxStage {
    frames: Vec<Vec<u8>>,
    len: usize,
}

impl TxStage {
    /// Room for the next frame of `size` octets (the stage is sent first when full).
    fn next(&mut self, size: usize, fd: RawFd, counters: &mut LinkCounters) -> &mut [u8] {
        if self.len == TX_BATCH {
            self.flush(fd, counters);
        }
        if self.frames.len() == self.len {
            self.frames.push(Vec::new());
        }
        let buf = &mut self.frames[self.len];
        self.len += 1;
        buf.clear();
        buf.resize(size, 0);
        buf
    }

    /// Sends the staged frames with sendmmsg(2); those the kernel does not take are
    /// dropped and counted (TCP sends them again). How many left.
    fn flush(&mut self, fd: RawFd, counters: &mut LinkCounters) -> usize {
        let n = std::mem::take(&mut self.len);
        if n == 0 {
            return 0;
        }
        let sent = crate::daemon::link::mmsg::send_frames(fd, &[], &self.frames[..n]).unwrap_or(0);
        counters.tx_frames += sent as u64;
        counters.tx_errors += (n - sent) as u64;
        sent
    }
}

/// Room for one frame smoltcp sends.
pub struct Tx<'a> {
    fd: RawFd,
    stage: &'a mut TxStage,
    counters: &'a mut LinkCounters,
}

impl smoltcp::phy::RxToken for Rx<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.0)
    }
}

impl smoltcp::phy::TxToken for Tx<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        f(self.stage.next(len, self.fd, self.counters))
    }
}

impl Device for RawLink {
    type RxToken<'a> = Rx<'a>;
    type TxToken<'a> = Tx<'a>;

    fn receive(
        &mut self,
        _now: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        loop {
            if self.budget == 0 {
                return None;
            }
            self.budget -= 1;
            let (len, status) = self.recv()?;
            if !self.admit(len, status) {
                continue;
            }
            self.counters.rx_frames += 1;
            let fd = self.fd.as_raw_fd();
            let RawLink {
                rx, tx, counters, ..
            } = self;
            return Some((
                Rx(&rx[..len]),
                Tx {
                    fd,
                    stage: tx,
                    counters,
                },
            ));
        }
    }

    fn transmit(&mut self, _now: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        Some(Tx {
            fd: self.fd.as_raw_fd(),
            stage: &mut self.tx,
            counters: &mut self.counters,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.mtu + 14;
        // TCP checksums of received segments are verified in `admit` (the kernel may
        // have left them partial); everything is checksummed on sending.
        caps.checksum.tcp = Checksum::Tx;
        caps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a classic BPF program (the subset `filter` emits) over a frame.
    fn run(prog: &[libc::sock_filter], frame: &[u8], pkttype: u32) -> u32 {
        let mut pc = 0;
        let mut acc = 0u32;
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                LD_W_ABS if i.k == AD_PKTTYPE => acc = pkttype,
                LD_W_ABS => {
                    let k = i.k as usize;
                    let Some(b) = frame.get(k..k + 4) else {
                        return 0;
                    };
                    acc = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                }
                LD_H_ABS => {
                    let k = i.k as usize;
                    let Some(b) = frame.get(k..k + 2) else {
                        return 0;
                    };
                    acc = u32::from(u16::from_be_bytes([b[0], b[1]]));
                }
                JEQ_K => pc += usize::from(if acc == i.k { i.jt } else { i.jf }),
                RET_K => return i.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    fn frame(ethertype: u16, at: usize, bytes: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 80];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f[at..at + bytes.len()].copy_from_slice(bytes);
        f
    }

    #[test]
    fn the_filter_passes_only_the_devices_own_frames() {
        let v4: std::net::Ipv4Addr = "10.0.0.11".parse().unwrap();
        let v6: std::net::Ipv6Addr = "fd00::11".parse().unwrap();
        let prog = filter(&[IpAddr::V4(v4), IpAddr::V6(v6)]);
        let other4: std::net::Ipv4Addr = "10.0.0.1".parse().unwrap();
        let other6: std::net::Ipv6Addr = "fd00::1".parse().unwrap();
        // IPv4 and ARP for our address, from the wire.
        assert_eq!(run(&prog, &frame(0x0800, 30, &v4.octets()), 0), ACCEPT);
        assert_eq!(run(&prog, &frame(0x0806, 38, &v4.octets()), 1), ACCEPT);
        // The kernel's own address, or an ARP asking for it: not ours.
        assert_eq!(run(&prog, &frame(0x0800, 30, &other4.octets()), 0), 0);
        assert_eq!(run(&prog, &frame(0x0806, 38, &other4.octets()), 1), 0);
        // IPv6 to us and to our solicited-node group; not to the kernel's.
        assert_eq!(run(&prog, &frame(0x86dd, 38, &v6.octets()), 0), ACCEPT);
        let sn = solicited_node(v6);
        assert_eq!(sn.to_string(), "ff02::1:ff00:11");
        assert_eq!(run(&prog, &frame(0x86dd, 38, &sn.octets()), 2), ACCEPT);
        assert_eq!(run(&prog, &frame(0x86dd, 38, &other6.octets()), 0), 0);
        // What the host sends itself never comes back.
        assert_eq!(
            run(&prog, &frame(0x0800, 30, &v4.octets()), PACKET_OUTGOING),
            0
        );
        // A short frame is dropped, not read past its end.
        assert_eq!(run(&prog, &[0u8; 20], 0), 0);
    }
}
