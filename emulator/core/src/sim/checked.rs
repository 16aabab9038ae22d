//! Memory that asserts every write lands in a registered range: the hostile-packet tests'
//! check that no packet makes the device write outside its MRs.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Instant;

use wire::roce::icrc;

use super::fabric::Node;
use crate::attr::Datagram;
use crate::memory::{Memory, MemoryFault, VecMemory};
use crate::types::AddrSpace;

/// A [`VecMemory`] whose writes must each fall inside one of `ranges` (space, base,
/// length); a write outside panics.
#[derive(Debug)]
pub struct Checked<'a> {
    /// The memory written through.
    pub inner: &'a mut VecMemory,
    /// The registered ranges.
    pub ranges: Vec<(AddrSpace, u64, u64)>,
}

impl Memory for Checked<'_> {
    fn read(&mut self, space: AddrSpace, addr: u64, buf: &mut [u8]) -> Result<(), MemoryFault> {
        self.inner.read(space, addr, buf)
    }
    fn write(&mut self, space: AddrSpace, addr: u64, data: &[u8]) -> Result<(), MemoryFault> {
        let end = addr + data.len() as u64;
        assert!(
            self.ranges
                .iter()
                .any(|&(s, b, l)| s == space && addr >= b && end <= b + l),
            "write outside a registered range: {space:?} {addr:#x}+{}",
            data.len()
        );
        self.inner.write(space, addr, data)
    }
    fn prefers_runs(&self, space: AddrSpace, addr: u64) -> bool {
        self.inner.prefers_runs(space, addr)
    }
}

/// Delivers `pkt` (BTH onwards, without ICRC) to `node` as a datagram from
/// 10.0.0.1:0xc123 to 10.0.0.2:4791 with a valid ICRC, through [`Checked`] memory over
/// `ranges`, and lets the device answer it: its transmits, completions and events are
/// drained and dropped. Hostile-packet tests build `pkt` as they like.
pub fn inject(node: &mut Node, now: Instant, pkt: &[u8], ranges: &[(AddrSpace, u64, u64)]) {
    let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let (src, dst) = (
        SocketAddr::new(a.into(), 0xc123),
        SocketAddr::new(b.into(), 4791),
    );
    let mut payload = pkt.to_vec();
    let c = icrc::for_udp4(a, b, src.port(), dst.port(), &payload);
    payload.extend_from_slice(&c.to_le_bytes());
    let mut mem = Checked {
        inner: &mut node.mem,
        ranges: ranges.to_vec(),
    };
    let d = Datagram {
        src,
        dst,
        payload: &payload,
    };
    node.dev.handle_datagram(now, &d, &mut mem);
    let mut buf = Vec::new();
    while node.dev.poll_transmit(now, &mut mem, &mut buf).is_some() {}
    while node.dev.poll_completion().is_some() {}
    while node.dev.poll_event().is_some() {}
}
