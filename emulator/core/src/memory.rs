//! Application memory as the NIC's DMA engine reaches it.

use std::collections::HashMap;

use crate::types::AddrSpace;

/// Memory could not be reached (the page is gone, the process died).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemoryFault;

impl core::fmt::Display for MemoryFault {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "memory fault")
    }
}

impl std::error::Error for MemoryFault {}

/// Application memory, reached the way a NIC's DMA engine does. The core calls it only
/// for ranges inside registered MRs, after every check.
pub trait Memory {
    /// Reads `buf.len()` bytes at `addr` of `space`.
    fn read(&mut self, space: AddrSpace, addr: u64, buf: &mut [u8]) -> Result<(), MemoryFault>;
    /// Writes `data` at `addr` of `space`.
    fn write(&mut self, space: AddrSpace, addr: u64, data: &[u8]) -> Result<(), MemoryFault>;
    /// Whether every access to the memory at `addr` of `space` has a fixed cost far above
    /// its copy (a system call: memory reached through a descriptor), so that a message's
    /// payload should move in runs of up to 64 KiB rather than one packet at a time.
    /// Memory the NIC has mapped answers `false`: a run would only add a copy. The
    /// default is `false`.
    fn prefers_runs(&self, space: AddrSpace, addr: u64) -> bool {
        let _ = (space, addr);
        false
    }
}

/// Most payload bytes read ahead of a message's packets in one memory access.
pub(crate) const AHEAD: u32 = 64 * 1024;

/// Bytes of one send WR's message read ahead of its packets: one memory access for up to
/// [`AHEAD`] bytes instead of one per packet (on the daemon's descriptor path a `pread`
/// costs a page walk and a bounce page per call, whatever its length).
///
/// The application may not change a send buffer between posting the WR and its
/// completion (the buffer belongs to the HCA until then), so bytes read for the WR at one
/// packet are still its bytes at a later packet or a retransmission. They are kept for
/// that WR alone (named by its `seq`, unique in the QP's life) and only until its last
/// packet has been built: a later WR over the same buffer reads memory again. Only where
/// the memory asks for runs ([`Memory::prefers_runs`]).
#[derive(Debug, Default, Clone)]
pub(crate) struct Ahead {
    /// The WR the bytes belong to, and the message offset of `bytes[0]`.
    pub at: Option<(u64, u32)>,
    pub bytes: Vec<u8>,
    /// The WR whose memory is mapped ([`Memory::prefers_runs`]): gathered
    /// packet by packet, as a run would only add a copy.
    pub plain: Option<u64>,
}

impl Ahead {
    /// Message bytes `[off, off + len)` of WR `seq`, if they were read ahead.
    pub fn get(&self, seq: u64, off: u32, len: usize) -> Option<&[u8]> {
        let (s, start) = self.at?;
        let from = off.checked_sub(start)? as usize;
        (s == seq).then_some(())?;
        self.bytes.get(from..from.checked_add(len)?)
    }

    /// Whether a run of [`AHEAD`] bytes merges several packets of `len` bytes. On loopback
    /// siw's FPDU is about 64 KiB, as long as a run, which would add a copy and save no
    /// access.
    pub fn merges(len: usize) -> bool {
        len <= AHEAD as usize / 4
    }

    /// Fills `out` with the bytes at offset `off` of message `key` (`total` bytes long)
    /// from a run of up to [`AHEAD`] bytes that `read(mem, at, buf)` fills from message
    /// offset `at`. A run starts afresh at a message's first bytes and is dropped after its
    /// last. It is read only where it merges several packets and `wants_runs(mem)` says
    /// so (asked once per message: [`Memory::prefers_runs`]); otherwise, and for the rest
    /// of the message once a run read has failed, `out` is read on its own, so a fault is
    /// met at the packet where it lies. The one read-ahead of the RoCE requester, the RoCE
    /// responder's READ responses and both iWARP queues.
    pub fn serve<M: ?Sized, E>(
        &mut self,
        mem: &mut M,
        (key, off, total): (u64, u64, u64),
        out: &mut [u8],
        wants_runs: impl FnOnce(&M) -> bool,
        mut read: impl FnMut(&mut M, u64, &mut [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let last = off + out.len() as u64 >= total;
        let Ok(off32) = u32::try_from(off) else {
            return read(mem, off, out);
        };
        if off == 0 {
            (self.at, self.plain) = (None, None);
        }
        if self.get(key, off32, out.len()).is_none() {
            if (last && self.at.is_none()) || self.plain == Some(key) || !Ahead::merges(out.len()) {
                return read(mem, off, out);
            }
            if !wants_runs(mem) {
                self.forget();
                self.plain = Some(key);
                return read(mem, off, out);
            }
            let want = (total - off).min(u64::from(AHEAD).max(out.len() as u64)) as usize;
            self.at = None;
            self.bytes.resize(want, 0);
            if read(mem, off, &mut self.bytes).is_err() {
                self.forget();
                self.plain = Some(key);
                return read(mem, off, out);
            }
            self.at = Some((key, off32));
        }
        match self.get(key, off32, out.len()) {
            Some(b) => out.copy_from_slice(b),
            None => return read(mem, off, out),
        }
        if last {
            self.forget();
        }
        Ok(())
    }

    /// [`Ahead::serve`] for a READ response: `out.len()` bytes at offset `off` of its
    /// source, `size` bytes at `host` of `space`, keyed by `host`.
    pub fn read_run<M: Memory + ?Sized>(
        &mut self,
        mem: &mut M,
        (space, host, size): (AddrSpace, u64, u64),
        off: u64,
        out: &mut [u8],
    ) -> Result<(), MemoryFault> {
        let at = |o: u64| host.wrapping_add(o);
        self.serve(
            mem,
            (host, off, size),
            out,
            |m| m.prefers_runs(space, at(off)),
            |m, o, buf| m.read(space, at(o), buf),
        )
    }

    pub fn forget(&mut self) {
        self.at = None;
        self.bytes = Vec::new();
    }
}

/// Memory made of `Vec<u8>` regions, for tests and the simulator. Every write is
/// checked to land inside a region (a write outside one is a fault) and counted.
#[derive(Debug, Default, Clone)]
pub struct VecMemory {
    regions: HashMap<AddrSpace, Vec<(u64, Vec<u8>)>>,
    /// Number of writes performed.
    pub writes: u64,
    /// Number of reads performed.
    pub reads: u64,
    /// The answer to [`Memory::prefers_runs`]: `true` makes this memory stand for memory
    /// reached through a descriptor (as the daemon's `/proc/PID/mem`), `false` (the
    /// default) for mapped memory.
    pub runs: bool,
}

impl VecMemory {
    /// Empty memory.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds a zeroed region of `len` bytes at `addr` in `space`.
    pub fn add_region(&mut self, space: AddrSpace, addr: u64, len: usize) {
        self.regions
            .entry(space)
            .or_default()
            .push((addr, vec![0; len]));
    }
    /// The bytes of a region range (panics when outside: test helper).
    pub fn slice(&self, space: AddrSpace, addr: u64, len: usize) -> &[u8] {
        let (base, v) = self.find(space, addr, len as u64).expect("inside a region");
        let o = (addr - base) as usize;
        &v[o..o + len]
    }
    /// Mutable bytes of a region range (panics when outside: test helper).
    pub fn slice_mut(&mut self, space: AddrSpace, addr: u64, len: usize) -> &mut [u8] {
        let r = self.regions.get_mut(&space).expect("space");
        let (base, v) = r
            .iter_mut()
            .find(|(b, v)| addr >= *b && addr + len as u64 <= *b + v.len() as u64)
            .expect("inside a region");
        let o = (addr - *base) as usize;
        &mut v[o..o + len]
    }
    fn find(&self, space: AddrSpace, addr: u64, len: u64) -> Option<(u64, &Vec<u8>)> {
        self.regions.get(&space)?.iter().find_map(|(b, v)| {
            let end = addr.checked_add(len)?;
            (addr >= *b && end <= *b + v.len() as u64).then_some((*b, v))
        })
    }
}

impl Memory for VecMemory {
    fn read(&mut self, space: AddrSpace, addr: u64, buf: &mut [u8]) -> Result<(), MemoryFault> {
        let (b, v) = self
            .find(space, addr, buf.len() as u64)
            .ok_or(MemoryFault)?;
        let o = (addr - b) as usize;
        buf.copy_from_slice(&v[o..o + buf.len()]);
        self.reads += 1;
        Ok(())
    }
    fn write(&mut self, space: AddrSpace, addr: u64, data: &[u8]) -> Result<(), MemoryFault> {
        let len = data.len() as u64;
        let r = self.regions.get_mut(&space).ok_or(MemoryFault)?;
        let (b, v) = r
            .iter_mut()
            .find(|(b, v)| {
                addr >= *b
                    && addr
                        .checked_add(len)
                        .is_some_and(|e| e <= *b + v.len() as u64)
            })
            .ok_or(MemoryFault)?;
        let o = (addr - *b) as usize;
        v[o..o + data.len()].copy_from_slice(data);
        self.writes += 1;
        Ok(())
    }
    fn prefers_runs(&self, _space: AddrSpace, _addr: u64) -> bool {
        self.runs
    }
}
