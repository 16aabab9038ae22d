//! On-demand paging faults in the simulator.
//!
//! A node with [`Paging`] holds ODP memory: a page is not resident until the device first
//! touches it (at the responder: a WRITE's or SEND's payload, a READ's source, an atomic's
//! target; at the requester: the send buffer it gathers from, a READ response's or an
//! atomic result's destination), and a resident page may be evicted again (the kernel
//! reclaimed it and invalidated the device's mapping), so a later touch faults once more.
//! Serving a fault takes [`Paging::fault_time`].
//!
//! What the device does meanwhile follows the kernel's rxe, not ConnectX. A ConnectX
//! responder answers a request that faults with an RNR NAK and resolves the fault while
//! the requester waits out its RNR timer; rxe resolves the fault in line
//! (`rxe_odp_map_range_and_lock` calls `hmm_range_fault` from the responder's and the
//! requester's tasks) and the QP simply stalls. rdma-emu's daemon does what rxe does: its
//! pread/pwrite on `/proc/PID/mem` blocks while the kernel faults the page in. So here a
//! faulting access completes at once in memory, and the node is then busy for the fault
//! time: what it sends leaves only after it (an ACK, a READ response, the packet whose
//! payload it gathered), and packets that arrive meanwhile wait in order. A fault longer
//! than the requester's ACK timeout provokes retransmissions and duplicate requests, as
//! a slow fault does on a wire.

use std::collections::HashSet;
use std::time::Duration;

use super::rng::Rng;
use crate::memory::{Memory, MemoryFault, VecMemory};
use crate::types::AddrSpace;

/// The page size of the model (the kernel's base page).
const PAGE: u64 = 4096;

/// The residency of one node's ODP memory.
#[derive(Debug, Clone)]
pub struct Paging {
    /// How long serving one page fault takes.
    pub fault_time: Duration,
    /// Probability that a resident page was evicted before a touch (it faults again).
    pub evict: f64,
    /// Page faults served.
    pub faults: u64,
    resident: HashSet<(AddrSpace, u64)>,
    rng: Rng,
    /// Fault time owed since the fabric last asked ([`Paging::take_stall`]).
    stall: Duration,
}

impl Paging {
    /// No page resident; evictions drawn from `seed`.
    pub fn new(seed: u64, fault_time: Duration, evict: f64) -> Self {
        Paging {
            fault_time,
            evict,
            faults: 0,
            resident: HashSet::new(),
            rng: Rng::new(seed),
            stall: Duration::ZERO,
        }
    }

    /// Whether the page holding `addr` of `space` is resident.
    pub fn is_resident(&self, space: AddrSpace, addr: u64) -> bool {
        self.resident.contains(&(space, addr / PAGE))
    }

    /// Touches `[addr, addr + len)`: every page not resident (or evicted since) faults.
    fn touch(&mut self, space: AddrSpace, addr: u64, len: usize) {
        if len == 0 {
            return;
        }
        let last = addr.saturating_add(len as u64 - 1) / PAGE;
        for page in addr / PAGE..=last {
            let evicted = self.evict > 0.0 && self.rng.chance(self.evict);
            if evicted || !self.resident.contains(&(space, page)) {
                self.resident.insert((space, page));
                self.faults += 1;
                self.stall += self.fault_time;
            }
        }
    }

    /// The fault time the device owes since the last call: it is busy that long.
    pub fn take_stall(&mut self) -> Duration {
        std::mem::take(&mut self.stall)
    }
}

/// A node's memory as its device reaches it: [`VecMemory`], with page faults when the
/// node has [`Paging`].
#[derive(Debug)]
pub struct Paged<'a> {
    /// The bytes.
    pub mem: &'a mut VecMemory,
    /// The residency, if the memory is ODP.
    pub paging: Option<&'a mut Paging>,
}

impl Memory for Paged<'_> {
    fn read(&mut self, space: AddrSpace, addr: u64, buf: &mut [u8]) -> Result<(), MemoryFault> {
        self.mem.read(space, addr, buf)?;
        if let Some(p) = self.paging.as_mut() {
            p.touch(space, addr, buf.len());
        }
        Ok(())
    }
    fn write(&mut self, space: AddrSpace, addr: u64, data: &[u8]) -> Result<(), MemoryFault> {
        self.mem.write(space, addr, data)?;
        if let Some(p) = self.paging.as_mut() {
            p.touch(space, addr, data.len());
        }
        Ok(())
    }
    fn prefers_runs(&self, space: AddrSpace, addr: u64) -> bool {
        self.mem.prefers_runs(space, addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_touch_faults_once_per_page_and_owes_the_fault_time() {
        let mut mem = VecMemory::new();
        mem.add_region(AddrSpace(1), 0x1000, 4 * 4096);
        let mut p = Paging::new(7, Duration::from_micros(50), 0.0);
        let mut m = Paged {
            mem: &mut mem,
            paging: Some(&mut p),
        };
        m.write(AddrSpace(1), 0x1000 + 4000, &[1; 200]).unwrap();
        let mut b = [0u8; 100];
        m.read(AddrSpace(1), 0x2000, &mut b).unwrap();
        assert!(m.read(AddrSpace(2), 0x2000, &mut b).is_err());
        assert_eq!(p.faults, 2);
        assert!(p.is_resident(AddrSpace(1), 0x1fff) && p.is_resident(AddrSpace(1), 0x2000));
        assert!(!p.is_resident(AddrSpace(1), 0x3000));
        assert_eq!(p.take_stall(), Duration::from_micros(100));
        assert_eq!(p.take_stall(), Duration::ZERO);
    }

    #[test]
    fn evicted_pages_fault_again() {
        let mut mem = VecMemory::new();
        mem.add_region(AddrSpace(1), 0, 4096);
        let mut p = Paging::new(1, Duration::from_micros(1), 1.0);
        let mut m = Paged {
            mem: &mut mem,
            paging: Some(&mut p),
        };
        for _ in 0..3 {
            m.write(AddrSpace(1), 0, &[1]).unwrap();
        }
        assert_eq!(p.faults, 3);
    }
}
