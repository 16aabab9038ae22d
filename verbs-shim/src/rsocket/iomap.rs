//! `riomap`/`riowrite`: buffers a peer may write directly. A mapping is announced by
//! RDMA-writing its entry (`struct rs_iomap`: offset, then an SGE) into the peer's iomap
//! table, which follows its target SGL in the memory it registered for us; `riowrite`
//! looks an offset up in the table the peer wrote into ours and RDMA-writes there.
use super::ep::Mr;
use super::proto::{self, RemoteSge};
use super::stream::Stream;
use crate::ffi::{Errno, VResult};

/// One local mapping (`struct rs_iomap_mr`).
pub struct IoMap {
    pub offset: u64,
    pub addr: u64,
    pub len: usize,
    pub mr: Mr,
    /// The slot in the peer's table, or None for a local-only (read) mapping.
    pub index: Option<u32>,
    pub sent: bool,
}

/// A mapping's table entry in the peer's byte order.
pub fn entry(m: &IoMap, swap: bool) -> [u8; proto::IOMAP_LEN] {
    let mut out = [0u8; proto::IOMAP_LEN];
    let off = if swap {
        m.offset.swap_bytes()
    } else {
        m.offset
    };
    out[..8].copy_from_slice(&off.to_ne_bytes());
    let sge = RemoteSge {
        addr: m.addr,
        key: m.mr.rkey(),
        length: m.len as u32,
    };
    out[8..].copy_from_slice(&sge.emit(swap));
    out
}

/// The peer's mapping that holds `offset` (`rs_find_iomap`), read from the table it
/// wrote into our target buffer: (start offset, SGE).
pub fn find(stream: &Stream, offset: u64) -> Option<(u64, RemoteSge)> {
    let swap = stream.swap();
    for i in 0..usize::from(stream.sz.target_iomap_size) {
        let at = proto::SGE_LEN * proto::SGL_SIZE + i * proto::IOMAP_LEN;
        let head = stream.target.read16(at);
        let mut off = u64::from_ne_bytes(head[..8].try_into().unwrap_or([0; 8]));
        if swap {
            off = off.swap_bytes();
        }
        let sge = RemoteSge::read(&stream.target.read16(at + 8), swap);
        if offset >= off && offset < off.saturating_add(u64::from(sge.length)) {
            return Some((off, sge));
        }
    }
    None
}

/// The first free slot of the peer's table (`rs_get_iomap_mr`).
pub fn free_index(stream: &Stream, maps: &[IoMap]) -> VResult<u32> {
    (0..stream.remote_iomap.length)
        .find(|i| !maps.iter().any(|m| m.index == Some(*i)))
        .ok_or(Errno::ENOMEM)
}
