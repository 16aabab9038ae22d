//! Application memory as the NIC's DMA engine reaches it: through the descriptor of the
//! client's own `/proc/self/mem`, handed over at `OpenDevice` (DESIGN decision 1).
//!
//! The core has already checked keys, PD, bounds and access before it asks for a read
//! or write; this layer only moves bytes, and a fault (unmapped page) is an error, never a
//! crash of the daemon.

use super::nic::{AppMemory, MemFault, Owner};
use super::sys;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};

/// The address spaces of all open device contexts.
#[derive(Debug, Default)]
pub struct ProcMem {
    spaces: HashMap<Owner, OwnedFd>,
    /// Reads and writes that faulted.
    pub faults: u64,
}

impl ProcMem {
    pub fn insert(&mut self, owner: Owner, fd: OwnedFd) {
        self.spaces.insert(owner, fd);
    }

    pub fn remove(&mut self, owner: Owner) {
        self.spaces.remove(&owner);
    }

    /// Whether `[addr, addr + len)` can be read now (first and last byte). Used to refuse
    /// memory registrations over unmapped memory with EFAULT, as the kernel's pinning does.
    pub fn probe(&self, owner: Owner, addr: u64, len: u64) -> bool {
        let Some(fd) = self.spaces.get(&owner) else {
            return false;
        };
        if len == 0 {
            return true;
        }
        let Some(last) = addr.checked_add(len - 1) else {
            return false;
        };
        let mut b = [0u8; 1];
        sys::pread_exact(fd.as_raw_fd(), addr, &mut b).is_ok()
            && sys::pread_exact(fd.as_raw_fd(), last, &mut b).is_ok()
    }
}

impl AppMemory for ProcMem {
    fn read(&mut self, owner: Owner, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        let fd = self.spaces.get(&owner).ok_or(MemFault)?;
        sys::pread_exact(fd.as_raw_fd(), addr, buf).map_err(|_| {
            self.faults += 1;
            MemFault
        })
    }

    fn write(&mut self, owner: Owner, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        let fd = self.spaces.get(&owner).ok_or(MemFault)?;
        sys::pwrite_all(fd.as_raw_fd(), addr, data).map_err(|_| {
            self.faults += 1;
            MemFault
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_own_memory_through_proc_self_mem() {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/self/mem")
            .unwrap();
        let mut mem = ProcMem::default();
        mem.insert(7, f.into());
        let mut target = vec![0u8; 32];
        let addr = target.as_mut_ptr() as u64;
        mem.write(7, addr + 4, b"rdma").unwrap();
        let mut back = [0u8; 4];
        mem.read(7, addr + 4, &mut back).unwrap();
        assert_eq!(&back, b"rdma");
        assert_eq!(&std::hint::black_box(&target)[4..8], b"rdma");
        assert!(mem.probe(7, addr, 32));
        assert!(!mem.probe(7, 0, 4096));
        assert!(mem.read(7, 0, &mut back).is_err());
        assert!(mem.read(8, addr, &mut back).is_err());
    }
}
