//! Packet capture: every frame a device sends and receives, as Ethernet / IP / UDP / RoCE
//! frames in a pcap stream written to a pipe (`rdma-emu capture DEVICE FILE.pcap`).
//!
//! The kernel UDP socket hides the IP header: frames are rebuilt with `wire::frame`
//! (IPv4 with DF and IP ID 0, what Linux sends for our sockets), so the ICRC of every frame
//! this daemon sent verifies in the capture.

use crate::daemon::sys;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{SystemTime, UNIX_EPOCH};
use wire::frame::{build_udp, FrameAddrs};

/// Bytes kept for a reader that lags before frames are dropped.
const MAX_PENDING: usize = 4 << 20;

/// One capture stream.
pub struct Capture {
    fd: OwnedFd,
    pending: Vec<u8>,
    pub dropped: u64,
    closed: bool,
}

/// pcap global header: magic, version 2.4, no time zone, snaplen 65535, LINKTYPE_ETHERNET.
fn pcap_header() -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    h[16..20].copy_from_slice(&65535u32.to_le_bytes());
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h
}

impl Capture {
    /// Starts a stream on the write end of a pipe (made nonblocking).
    pub fn new(fd: OwnedFd) -> std::io::Result<Capture> {
        sys::set_nonblocking(fd.as_raw_fd())?;
        let mut c = Capture {
            fd,
            pending: pcap_header().to_vec(),
            dropped: 0,
            closed: false,
        };
        c.flush();
        Ok(c)
    }

    /// Whether the reader went away (the capture is over).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Records one datagram (`payload` = the UDP payload) between `src` and `dst`.
    pub fn record(&mut self, mac: [u8; 6], src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        if self.closed || src.is_ipv4() != dst.is_ipv4() {
            return;
        }
        let addrs = FrameAddrs {
            eth_src: mac,
            eth_dst: mac,
            src: src.ip(),
            dst: dst.ip(),
        };
        let frame = build_udp(&addrs, src.port(), dst.port(), 0, payload);
        if self.pending.len() + frame.len() + 16 > MAX_PENDING {
            self.dropped += 1;
            return;
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let len = frame.len() as u32;
        self.pending
            .extend_from_slice(&(ts.as_secs() as u32).to_le_bytes());
        self.pending
            .extend_from_slice(&ts.subsec_micros().to_le_bytes());
        self.pending.extend_from_slice(&len.to_le_bytes());
        self.pending.extend_from_slice(&len.to_le_bytes());
        self.pending.extend_from_slice(&frame);
        self.flush();
    }

    /// Writes as much pending data as the pipe takes.
    pub fn flush(&mut self) {
        while !self.pending.is_empty() && !self.closed {
            match sys::write_some(self.fd.as_raw_fd(), &self.pending) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) => match e.kind() {
                    std::io::ErrorKind::Interrupted => continue,
                    std::io::ErrorKind::WouldBlock => return,
                    _ => self.closed = true,
                },
            }
        }
    }
}
