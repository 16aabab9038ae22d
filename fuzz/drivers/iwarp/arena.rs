//! The memory the engine reaches: regions of different rights and PDs in one arena,
//! separated by guard bytes, and an STag table shared with it so every write can be
//! checked against the regions valid at that moment.

use std::cell::RefCell;
use std::rc::Rc;

use emu_core::iwarp::{MrTable, StagError, Stags};
use emu_core::{AccessFlags, AddrSpace, Memory, MemoryFault, PdHandle};

use super::PD;

/// The arena's address space.
pub const SPACE: AddrSpace = AddrSpace(1);
/// Address of the arena's first octet; MRs map tagged offsets 1:1 onto it.
pub const ARENA: u64 = 0x0001_0000;
/// Octets between regions (and around the first and last).
pub const GUARD: u64 = 64;
const GUARD_BYTE: u8 = 0xee;
const OTHER_PD: PdHandle = PdHandle(2);

/// The regions of the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// Remote write, read and atomic, local write: where the peer's Writes go.
    All,
    /// Local write only: receive buffers (first half), Read/Atomic results (second half).
    Local,
    /// Remote read only: never written, so Read Responses of it can be checked.
    ReadOnly,
    /// Remote write only (no local write).
    RemoteWrite,
    /// Every right, but another PD: never written.
    OtherPd,
}

/// Every region: (region, STag, PD, length, rights).
pub const REGIONS: [(Region, u32, PdHandle, u64, AccessFlags); 5] = [
    (
        Region::All,
        0x100,
        PD,
        2048,
        AccessFlags(
            AccessFlags::LOCAL_WRITE.0
                | AccessFlags::REMOTE_WRITE.0
                | AccessFlags::REMOTE_READ.0
                | AccessFlags::REMOTE_ATOMIC.0,
        ),
    ),
    (Region::Local, 0x200, PD, 1024, AccessFlags::LOCAL_WRITE),
    (Region::ReadOnly, 0x300, PD, 1024, AccessFlags::REMOTE_READ),
    (
        Region::RemoteWrite,
        0x400,
        PD,
        512,
        AccessFlags::REMOTE_WRITE,
    ),
    (
        Region::OtherPd,
        0x500,
        OTHER_PD,
        512,
        AccessFlags(
            AccessFlags::LOCAL_WRITE.0
                | AccessFlags::REMOTE_WRITE.0
                | AccessFlags::REMOTE_READ.0
                | AccessFlags::REMOTE_ATOMIC.0,
        ),
    ),
];

/// Address and length of a region in the arena.
pub fn region(r: Region) -> (u64, u64) {
    let mut at = ARENA + GUARD;
    for (reg, _, _, len, _) in REGIONS {
        if reg == r {
            return (at, len);
        }
        at += len + GUARD;
    }
    unreachable!("every region is listed")
}

/// The STag of a region.
pub fn stag(r: Region) -> u32 {
    REGIONS
        .iter()
        .find(|e| e.0 == r)
        .map(|e| e.1)
        .expect("every region is listed")
}

fn arena_len() -> u64 {
    GUARD + REGIONS.iter().map(|e| e.3 + GUARD).sum::<u64>()
}

/// The initial content of arena octet `i` inside a region.
fn initial(i: u64) -> u8 {
    (i as u8).wrapping_mul(13).wrapping_add((i >> 8) as u8)
}

/// The STag table, shared with the memory so it can check writes against the regions
/// valid at the time of the write.
pub struct Keys(pub(super) Rc<RefCell<MrTable>>);

impl Stags for Keys {
    fn resolve(
        &self,
        stag: u32,
        pd: PdHandle,
        qpn: u32,
        addr: u64,
        len: u64,
        need: AccessFlags,
        remote: bool,
    ) -> Result<(AddrSpace, u64), StagError> {
        self.0
            .borrow()
            .resolve(stag, pd, qpn, addr, len, need, remote)
    }

    fn invalidate(&mut self, stag: u32, pd: PdHandle) -> Result<(), StagError> {
        self.0.borrow_mut().invalidate(stag, pd)
    }
}

/// The arena: regions separated by guard bytes; every access is checked.
pub struct Arena {
    bytes: Vec<u8>,
    table: Rc<RefCell<MrTable>>,
    /// Ranges of the local-write-only region that posted receives and Read/Atomic
    /// results name.
    pub(super) local_sinks: Vec<(u64, u64)>,
    pub writes: u64,
}

impl Arena {
    pub(super) fn new(table: Rc<RefCell<MrTable>>) -> Arena {
        let mut bytes = vec![GUARD_BYTE; arena_len() as usize];
        for (r, ..) in REGIONS {
            let (addr, len) = region(r);
            for a in addr..addr + len {
                bytes[(a - ARENA) as usize] = initial(a - ARENA);
            }
        }
        Arena {
            bytes,
            table,
            local_sinks: Vec::new(),
            writes: 0,
        }
    }

    /// `len` octets at `addr` (inside the arena).
    pub fn get(&self, addr: u64, len: usize) -> &[u8] {
        let o = (addr - ARENA) as usize;
        &self.bytes[o..o + len]
    }

    /// The region holding `[addr, addr + len)`, if one does.
    pub(super) fn region_of(addr: u64, len: u64) -> Option<Region> {
        let end = addr.checked_add(len)?;
        REGIONS.iter().find_map(|e| {
            let (a, l) = region(e.0);
            (addr >= a && end <= a + l).then_some(e.0)
        })
    }

    fn in_arena(addr: u64, len: usize) -> bool {
        addr >= ARENA
            && addr
                .checked_add(len as u64)
                .is_some_and(|e| e <= ARENA + arena_len())
    }

    /// Guard bytes, the read-only region and the other PD's region are as they started.
    pub(super) fn check_untouched(&self) {
        let mut at = ARENA;
        for (r, _, _, len, _) in REGIONS {
            let (addr, _) = region(r);
            assert!(
                self.get(at, (addr - at) as usize)
                    .iter()
                    .all(|b| *b == GUARD_BYTE),
                "guard bytes before {r:?} changed"
            );
            if matches!(r, Region::ReadOnly | Region::OtherPd) {
                for a in addr..addr + len {
                    assert_eq!(
                        self.get(a, 1)[0],
                        initial(a - ARENA),
                        "{r:?} changed at {a:#x}"
                    );
                }
            }
            at = addr + len;
        }
        assert!(
            self.get(at, GUARD as usize)
                .iter()
                .all(|b| *b == GUARD_BYTE),
            "guard bytes after the last region changed"
        );
    }
}

impl Memory for Arena {
    fn read(&mut self, space: AddrSpace, addr: u64, buf: &mut [u8]) -> Result<(), MemoryFault> {
        assert_eq!(space, SPACE, "read of another address space");
        assert!(
            Self::in_arena(addr, buf.len()),
            "read outside the arena: {addr:#x}+{}",
            buf.len()
        );
        let r = Self::region_of(addr, buf.len() as u64);
        assert!(
            r.is_some_and(|r| r != Region::OtherPd),
            "read outside the QP's regions: {addr:#x}+{} ({r:?})",
            buf.len()
        );
        buf.copy_from_slice(self.get(addr, buf.len()));
        Ok(())
    }

    fn write(&mut self, space: AddrSpace, addr: u64, data: &[u8]) -> Result<(), MemoryFault> {
        assert_eq!(space, SPACE, "write to another address space");
        let len = data.len() as u64;
        let table = self.table.borrow();
        let writable = table.entries.iter().any(|e| {
            e.valid
                && e.pd == PD
                && e.access.intersects(AccessFlags(
                    AccessFlags::LOCAL_WRITE.0
                        | AccessFlags::REMOTE_WRITE.0
                        | AccessFlags::REMOTE_ATOMIC.0,
                ))
                && addr >= e.addr
                && addr
                    .checked_add(len)
                    .is_some_and(|end| end <= e.addr + e.length)
        });
        assert!(
            writable,
            "write outside a valid writable region of the QP's PD: {addr:#x}+{len}"
        );
        if Self::region_of(addr, len) == Some(Region::Local) {
            assert!(
                self.local_sinks
                    .iter()
                    .any(|&(a, l)| addr >= a && addr + len <= a + l),
                "write into the local-only region outside every posted sink: {addr:#x}+{len}"
            );
        }
        drop(table);
        let o = (addr - ARENA) as usize;
        self.bytes[o..o + data.len()].copy_from_slice(data);
        self.writes += 1;
        Ok(())
    }
}
