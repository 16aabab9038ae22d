//! Ring slot formats: send WQE, receive WQE and CQE (all little-endian).
//!
//! Views (`SendWqe`, `RecvWqe`, `Cqe`) follow the crate's view contract: `new_checked`
//! validates the length once, after which no accessor panics. Reprs (`SendWqeRepr`,
//! `RecvWqeRepr`, `CqeRepr`) are the parsed values; `parse` also checks that the
//! scatter/gather list or inline data fits in the slot. Limits that depend on the QP
//! (`num_sge <= max_send_sge`, `inline_len <= max_inline_data`) are the daemon's to check.

use super::verbs::send_flags;

/// Byte ranges of each slot's fields.
mod field {
    pub type Field = core::ops::Range<usize>;

    pub mod send {
        use super::Field;
        pub const WR_ID: Field = 0..8;
        pub const OPCODE: usize = 8;
        pub const NUM_SGE: usize = 9;
        pub const SEND_FLAGS: Field = 12..16;
        pub const IMM: Field = 16..20;
        pub const INLINE_LEN: Field = 20..24;
        pub const REMOTE_ADDR: Field = 24..32;
        pub const RKEY: Field = 32..36;
        pub const REMOTE_QPN: Field = 36..40;
        pub const COMPARE_ADD: Field = 40..48;
        pub const SWAP: Field = 48..56;
        pub const AH: Field = 56..60;
        pub const REMOTE_QKEY: Field = 60..64;
        pub const PAYLOAD: usize = 64;
    }

    pub mod recv {
        use super::Field;
        pub const WR_ID: Field = 0..8;
        pub const NUM_SGE: Field = 8..12;
        pub const SGES: usize = 16;
    }

    pub mod cqe {
        use super::Field;
        pub const WR_ID: Field = 0..8;
        pub const STATUS: Field = 8..12;
        pub const OPCODE: Field = 12..16;
        pub const VENDOR_ERR: Field = 16..20;
        pub const BYTE_LEN: Field = 20..24;
        pub const IMM_DATA: Field = 24..28;
        pub const QP_NUM: Field = 28..32;
        pub const SRC_QP: Field = 32..36;
        pub const WC_FLAGS: Field = 36..40;
        pub const PKEY_INDEX: Field = 40..42;
        pub const SLID: Field = 42..44;
        pub const SL: usize = 44;
        pub const DLID_PATH_BITS: usize = 45;
        pub const COMPLETION_TS: Field = 48..56;
        pub const WALLCLOCK_NS: Field = 56..64;
    }

    pub mod sge {
        use super::Field;
        pub const ADDR: Field = 0..8;
        pub const LENGTH: Field = 8..12;
        pub const LKEY: Field = 12..16;
    }
}

/// Header bytes of a send WQE before its SGEs or inline data.
pub const SEND_WQE_HEADER_LEN: usize = field::send::PAYLOAD;
/// Header bytes of a receive WQE before its SGEs.
pub const RECV_WQE_HEADER_LEN: usize = field::recv::SGES;
/// Bytes of one scatter/gather element.
pub const SGE_LEN: usize = 16;
/// Bytes of one CQE slot.
///
/// | bytes | field | bytes | field |
/// |---|---|---|---|
/// | 0..8 | `wr_id` | 32..36 | `src_qp` |
/// | 8..12 | `status` | 36..40 | `wc_flags` |
/// | 12..16 | `opcode` | 40..42 | `pkey_index` |
/// | 16..20 | `vendor_err` | 42..44 | `slid` |
/// | 20..24 | `byte_len` | 44, 45 | `sl`, `dlid_path_bits` |
/// | 24..28 | `imm_data` | 46..48 | zero |
/// | 28..32 | `qp_num` | 48..56 | `completion_ts` ([`CQE_CLOCK_KHZ`] ticks) |
/// | | | 56..64 | `completion_wallclock_ns` |
pub const CQE_LEN: usize = 64;

/// The frequency of the clock a CQE's `completion_ts` counts, in kHz, as
/// `ibv_device_attr_ex.hca_core_clock` reports it: 1 GHz, so one tick is one nanosecond of
/// the host's `CLOCK_MONOTONIC` (the daemon's and its clients' are the same clock, unless
/// they live in different time namespaces). `ibv_query_rt_values_ex` reads the same clock.
pub const CQE_CLOCK_KHZ: u64 = 1_000_000;
/// The bits of `completion_ts` that count (`completion_timestamp_mask`): all 64, which
/// `CLOCK_MONOTONIC` nanoseconds fill only after 584 years of uptime.
pub const CQE_TIMESTAMP_MASK: u64 = u64::MAX;

/// Slot size of a send queue: `64 + max(16 × max_send_sge, max_inline_data rounded up to
/// 16)`, rounded up to 64. `None` if it overflows.
pub fn send_slot_size(max_send_sge: u32, max_inline_data: u32) -> Option<u32> {
    let sges = max_send_sge.checked_mul(SGE_LEN as u32)?;
    let inline = max_inline_data.checked_next_multiple_of(16)?;
    (SEND_WQE_HEADER_LEN as u32)
        .checked_add(sges.max(inline))?
        .checked_next_multiple_of(64)
}

/// Slot size of a receive queue or SRQ: `16 + 16 × max_recv_sge`, rounded up to 64.
pub fn recv_slot_size(max_recv_sge: u32) -> Option<u32> {
    let sges = max_recv_sge.checked_mul(SGE_LEN as u32)?;
    (RECV_WQE_HEADER_LEN as u32)
        .checked_add(sges)?
        .checked_next_multiple_of(64)
}

/// A slot could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotError {
    /// The buffer is shorter than the fixed header.
    Truncated,
    /// `num_sge` or `inline_len` runs past the end of the slot.
    Overrun,
    /// The buffer given to `emit` is too small for the repr.
    BufferTooSmall,
}

impl std::fmt::Display for SlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SlotError::Truncated => "slot shorter than its header",
            SlotError::Overrun => "scatter list or inline data runs past the slot",
            SlotError::BufferTooSmall => "buffer too small for the slot",
        })
    }
}
impl std::error::Error for SlotError {}

fn get<const N: usize>(b: &[u8], r: field::Field) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[r]);
    out
}
fn u16_at(b: &[u8], r: field::Field) -> u16 {
    u16::from_le_bytes(get(b, r))
}
fn u32_at(b: &[u8], r: field::Field) -> u32 {
    u32::from_le_bytes(get(b, r))
}
fn u64_at(b: &[u8], r: field::Field) -> u64 {
    u64::from_le_bytes(get(b, r))
}

/// One scatter/gather element (`struct ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Virtual address of the first byte, in the posting process's address space.
    pub addr: u64,
    /// Bytes from `addr`; 0 is a valid, empty element.
    pub length: u32,
    /// Local key of the MR that must cover `[addr, addr + length)` with the access the
    /// operation needs; the core checks it when it executes the WQE (IBV_WC_LOC_PROT_ERR).
    pub lkey: u32,
}

impl Sge {
    fn parse(b: &[u8]) -> Sge {
        Sge {
            addr: u64_at(b, field::sge::ADDR),
            length: u32_at(b, field::sge::LENGTH),
            lkey: u32_at(b, field::sge::LKEY),
        }
    }
    fn emit(&self, b: &mut [u8]) {
        b[field::sge::ADDR].copy_from_slice(&self.addr.to_le_bytes());
        b[field::sge::LENGTH].copy_from_slice(&self.length.to_le_bytes());
        b[field::sge::LKEY].copy_from_slice(&self.lkey.to_le_bytes());
    }
}

/// A scatter/gather list: either read from a slot's bytes or given as a slice to emit.
#[derive(Debug, Clone, Copy)]
pub enum SgeList<'a> {
    /// `16 × n` bytes of a slot.
    Bytes(&'a [u8]),
    /// Elements given by the caller (for `emit`).
    Slice(&'a [Sge]),
}

impl<'a> SgeList<'a> {
    /// The number of elements (whole 16-byte elements for `Bytes`).
    pub fn len(&self) -> usize {
        match self {
            SgeList::Bytes(b) => b.len() / SGE_LEN,
            SgeList::Slice(s) => s.len(),
        }
    }

    /// Whether the list has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements in order, decoded from the bytes if need be.
    pub fn iter(&self) -> impl Iterator<Item = Sge> + 'a {
        let (bytes, slice): (&'a [u8], &'a [Sge]) = match *self {
            SgeList::Bytes(b) => (b, &[]),
            SgeList::Slice(s) => (&[], s),
        };
        bytes
            .chunks_exact(SGE_LEN)
            .map(Sge::parse)
            .chain(slice.iter().copied())
    }

    fn emit(&self, b: &mut [u8]) {
        for (sge, chunk) in self.iter().zip(b.chunks_exact_mut(SGE_LEN)) {
            sge.emit(chunk);
        }
    }
}

impl PartialEq for SgeList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}
impl Eq for SgeList<'_> {}

/// What follows a send WQE's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendData<'a> {
    /// A scatter/gather list of `num_sge` elements the device reads (or, for READ and
    /// atomics, writes).
    Sges(SgeList<'a>),
    /// Inline data, copied into the slot at post time (`IBV_SEND_INLINE`).
    Inline(&'a [u8]),
}

/// A view of a send WQE slot.
#[derive(Debug, Clone)]
pub struct SendWqe<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SendWqe<T> {
    /// Wraps a buffer without checking its length; accessors then panic on a short one.
    pub fn new_unchecked(buffer: T) -> Self {
        SendWqe { buffer }
    }
    /// Wraps a buffer after [`Self::check_len`]: no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, SlotError> {
        let w = Self::new_unchecked(buffer);
        w.check_len()?;
        Ok(w)
    }
    /// [`SlotError::Truncated`] unless the buffer holds the 64-byte header.
    pub fn check_len(&self) -> Result<(), SlotError> {
        if self.buffer.as_ref().len() < SEND_WQE_HEADER_LEN {
            return Err(SlotError::Truncated);
        }
        Ok(())
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The application's `wr_id`, returned in the CQE unchanged.
    pub fn wr_id(&self) -> u64 {
        u64_at(self.b(), field::send::WR_ID)
    }
    /// `enum ibv_wr_opcode`.
    pub fn opcode(&self) -> u8 {
        self.b()[field::send::OPCODE]
    }
    /// SGEs following the header (ignored with `IBV_SEND_INLINE`).
    pub fn num_sge(&self) -> u8 {
        self.b()[field::send::NUM_SGE]
    }
    /// `enum ibv_send_flags` bits.
    pub fn send_flags(&self) -> u32 {
        u32_at(self.b(), field::send::SEND_FLAGS)
    }
    /// `imm_data` (the app's `__be32` as stored in its `ibv_send_wr`) or `invalidate_rkey`.
    pub fn imm_data(&self) -> u32 {
        u32_at(self.b(), field::send::IMM)
    }
    /// Bytes of inline data after the header (only with `IBV_SEND_INLINE`).
    pub fn inline_len(&self) -> u32 {
        u32_at(self.b(), field::send::INLINE_LEN)
    }
    /// RDMA/atomic target address (bind MW: the window's address).
    pub fn remote_addr(&self) -> u64 {
        u64_at(self.b(), field::send::REMOTE_ADDR)
    }
    /// RDMA/atomic remote key (bind MW: the window's current rkey).
    pub fn rkey(&self) -> u32 {
        u32_at(self.b(), field::send::RKEY)
    }
    /// UD destination QP number, low 24 bits used (bind MW: the access flags).
    pub fn remote_qpn(&self) -> u32 {
        u32_at(self.b(), field::send::REMOTE_QPN)
    }
    /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD); bind MW: the length.
    pub fn compare_add(&self) -> u64 {
        u64_at(self.b(), field::send::COMPARE_ADD)
    }
    /// Swap value (CMP_AND_SWP); bind MW: the MR's lkey in the low 32 bits.
    pub fn swap(&self) -> u64 {
        u64_at(self.b(), field::send::SWAP)
    }
    /// UD: the [`super::Handle`] of an address handle of the QP's own context.
    pub fn ah(&self) -> u32 {
        u32_at(self.b(), field::send::AH)
    }
    /// UD: the Q_Key sent in the DETH.
    pub fn remote_qkey(&self) -> u32 {
        u32_at(self.b(), field::send::REMOTE_QKEY)
    }
    /// The bytes after the header (SGEs or inline data).
    pub fn payload(&self) -> &[u8] {
        &self.b()[SEND_WQE_HEADER_LEN..]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> SendWqe<&'a T> {
    /// [`SendWqe::payload`] with the buffer's lifetime.
    pub fn payload_ref(&self) -> &'a [u8] {
        &self.buffer.as_ref()[SEND_WQE_HEADER_LEN..]
    }
}

/// A parsed send WQE (`struct ibv_send_wr` without `next`).
///
/// Bind MW reuses fields: `remote_addr` = bind address, `compare_add` = length, `rkey` =
/// the MW's rkey, low 32 bits of `swap` = the MR's lkey, `imm_data` = the new rkey,
/// `remote_qpn` = access flags. XRC initiators: `remote_qpn` = the remote XRC SRQ number
/// (`qp_type.xrc.remote_srqn`). ATOMIC WRITE: `compare_add` = the 8 bytes (as
/// `u64::from_le_bytes` of the application's buffer). FLUSH: `compare_add` = length,
/// `swap` = placement type | selectivity level << 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWqeRepr<'a> {
    /// Returned in the CQE unchanged.
    pub wr_id: u64,
    /// `enum ibv_wr_opcode` ([`super::verbs::wr_opcode`]); the core refuses an unknown
    /// value (IBV_WC_LOC_QP_OP_ERR).
    pub opcode: u8,
    /// `IBV_SEND_INLINE` is set by `parse` exactly when `data` is `Inline`; `emit` derives
    /// it from `data`.
    pub send_flags: u32,
    /// Immediate data (the app's `__be32` as stored), or the rkey to invalidate for
    /// SEND_WITH_INV and LOCAL_INV; bind MW: the new rkey.
    pub imm_data: u32,
    /// RDMA/atomic target address; bind MW: the window's address.
    pub remote_addr: u64,
    /// RDMA/atomic remote key; bind MW: the window's current rkey.
    pub rkey: u32,
    /// UD destination QP (low 24 bits); bind MW: the window's access flags.
    pub remote_qpn: u32,
    /// Compare value or addend of an atomic; bind MW: the window's length.
    pub compare_add: u64,
    /// Swap value of CMP_AND_SWP; bind MW: the MR's lkey in the low 32 bits.
    pub swap: u64,
    /// UD: address handle; the daemon completes the WQE with IBV_WC_LOC_QP_OP_ERR unless
    /// it names an AH of the QP's own context. Ignored for RC and UC.
    pub ah: u32,
    /// UD: the Q_Key for the DETH (its high bit set means: use the QP's own Q_Key).
    pub remote_qkey: u32,
    /// The SGEs or the inline payload.
    pub data: SendData<'a>,
}

impl<'a> SendWqeRepr<'a> {
    /// Parses a slot: [`SlotError::Truncated`] for a short one, [`SlotError::Overrun`]
    /// when `num_sge` or `inline_len` runs past its end.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(wqe: &SendWqe<&'a T>) -> Result<Self, SlotError> {
        wqe.check_len()?;
        let payload = wqe.payload_ref();
        let flags = wqe.send_flags();
        let data = if flags & send_flags::INLINE != 0 {
            let len = wqe.inline_len() as usize;
            SendData::Inline(payload.get(..len).ok_or(SlotError::Overrun)?)
        } else {
            let len = usize::from(wqe.num_sge()) * SGE_LEN;
            SendData::Sges(SgeList::Bytes(
                payload.get(..len).ok_or(SlotError::Overrun)?,
            ))
        };
        Ok(SendWqeRepr {
            wr_id: wqe.wr_id(),
            opcode: wqe.opcode(),
            send_flags: flags,
            imm_data: wqe.imm_data(),
            remote_addr: wqe.remote_addr(),
            rkey: wqe.rkey(),
            remote_qpn: wqe.remote_qpn(),
            compare_add: wqe.compare_add(),
            swap: wqe.swap(),
            ah: wqe.ah(),
            remote_qkey: wqe.remote_qkey(),
            data,
        })
    }

    /// Bytes the slot needs.
    pub fn buffer_len(&self) -> usize {
        SEND_WQE_HEADER_LEN
            + match self.data {
                SendData::Sges(s) => s.len() * SGE_LEN,
                SendData::Inline(d) => d.len(),
            }
    }

    /// Writes the WQE; bytes past `buffer_len` are left as they are. Fails if the buffer
    /// is too small or the list has more than 255 SGEs.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), SlotError> {
        if buf.len() < self.buffer_len() {
            return Err(SlotError::BufferTooSmall);
        }
        let (num_sge, inline_len, flags) = match self.data {
            SendData::Sges(s) => (
                u8::try_from(s.len()).map_err(|_| SlotError::Overrun)?,
                0u32,
                self.send_flags & !send_flags::INLINE,
            ),
            SendData::Inline(d) => (
                0,
                u32::try_from(d.len()).map_err(|_| SlotError::Overrun)?,
                self.send_flags | send_flags::INLINE,
            ),
        };
        use field::send as f;
        buf[f::WR_ID].copy_from_slice(&self.wr_id.to_le_bytes());
        buf[f::OPCODE] = self.opcode;
        buf[f::NUM_SGE] = num_sge;
        buf[10..12].fill(0);
        buf[f::SEND_FLAGS].copy_from_slice(&flags.to_le_bytes());
        buf[f::IMM].copy_from_slice(&self.imm_data.to_le_bytes());
        buf[f::INLINE_LEN].copy_from_slice(&inline_len.to_le_bytes());
        buf[f::REMOTE_ADDR].copy_from_slice(&self.remote_addr.to_le_bytes());
        buf[f::RKEY].copy_from_slice(&self.rkey.to_le_bytes());
        buf[f::REMOTE_QPN].copy_from_slice(&self.remote_qpn.to_le_bytes());
        buf[f::COMPARE_ADD].copy_from_slice(&self.compare_add.to_le_bytes());
        buf[f::SWAP].copy_from_slice(&self.swap.to_le_bytes());
        buf[f::AH].copy_from_slice(&self.ah.to_le_bytes());
        buf[f::REMOTE_QKEY].copy_from_slice(&self.remote_qkey.to_le_bytes());
        let payload = &mut buf[f::PAYLOAD..];
        match self.data {
            SendData::Sges(s) => s.emit(payload),
            SendData::Inline(d) => payload[..d.len()].copy_from_slice(d),
        }
        Ok(())
    }
}

/// A view of a receive WQE slot (RQ or SRQ).
#[derive(Debug, Clone)]
pub struct RecvWqe<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RecvWqe<T> {
    /// Wraps a buffer without checking its length; accessors then panic on a short one.
    pub fn new_unchecked(buffer: T) -> Self {
        RecvWqe { buffer }
    }
    /// Wraps a buffer after [`Self::check_len`]: no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self, SlotError> {
        let w = Self::new_unchecked(buffer);
        w.check_len()?;
        Ok(w)
    }
    /// [`SlotError::Truncated`] unless the buffer holds the 16-byte header.
    pub fn check_len(&self) -> Result<(), SlotError> {
        if self.buffer.as_ref().len() < RECV_WQE_HEADER_LEN {
            return Err(SlotError::Truncated);
        }
        Ok(())
    }
    /// The application's `wr_id`, returned in the CQE unchanged.
    pub fn wr_id(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::recv::WR_ID)
    }
    /// SGEs following the header. The daemon refuses more than the QP's `max_recv_sge`
    /// (an IBV_WC_LOC_LEN_ERR CQE) or the SRQ's `max_sge` (IBV_EVENT_SRQ_ERR).
    pub fn num_sge(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::recv::NUM_SGE)
    }
    /// The bytes after the header (the SGEs).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[RECV_WQE_HEADER_LEN..]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> RecvWqe<&'a T> {
    /// [`RecvWqe::payload`] with the buffer's lifetime.
    pub fn payload_ref(&self) -> &'a [u8] {
        &self.buffer.as_ref()[RECV_WQE_HEADER_LEN..]
    }
}

/// A parsed receive WQE (`struct ibv_recv_wr` without `next`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWqeRepr<'a> {
    /// Returned in the CQE unchanged.
    pub wr_id: u64,
    /// Where an incoming message is scattered, in order.
    pub sg_list: SgeList<'a>,
}

impl<'a> RecvWqeRepr<'a> {
    /// Parses a slot: [`SlotError::Truncated`] for a short one, [`SlotError::Overrun`]
    /// when `num_sge` runs past its end.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(wqe: &RecvWqe<&'a T>) -> Result<Self, SlotError> {
        wqe.check_len()?;
        let len = usize::try_from(wqe.num_sge())
            .ok()
            .and_then(|n| n.checked_mul(SGE_LEN))
            .ok_or(SlotError::Overrun)?;
        let sges = wqe.payload_ref().get(..len).ok_or(SlotError::Overrun)?;
        Ok(RecvWqeRepr {
            wr_id: wqe.wr_id(),
            sg_list: SgeList::Bytes(sges),
        })
    }

    /// Bytes the slot needs: the header and 16 per SGE.
    pub fn buffer_len(&self) -> usize {
        RECV_WQE_HEADER_LEN + self.sg_list.len() * SGE_LEN
    }

    /// Writes the WQE (the reserved word zeroed); bytes past `buffer_len` are left as they
    /// are. Fails if the buffer is too small.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), SlotError> {
        if buf.len() < self.buffer_len() {
            return Err(SlotError::BufferTooSmall);
        }
        let n = u32::try_from(self.sg_list.len()).map_err(|_| SlotError::Overrun)?;
        buf[field::recv::WR_ID].copy_from_slice(&self.wr_id.to_le_bytes());
        buf[field::recv::NUM_SGE].copy_from_slice(&n.to_le_bytes());
        buf[12..16].fill(0);
        self.sg_list.emit(&mut buf[RECV_WQE_HEADER_LEN..]);
        Ok(())
    }
}

/// A view of a CQE slot.
#[derive(Debug, Clone)]
pub struct Cqe<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Cqe<T> {
    /// Wraps a buffer without checking its length; accessors then panic on a short one.
    pub fn new_unchecked(buffer: T) -> Self {
        Cqe { buffer }
    }
    /// Wraps a buffer of at least [`CQE_LEN`] bytes ([`SlotError::Truncated`] otherwise).
    pub fn new_checked(buffer: T) -> Result<Self, SlotError> {
        if buffer.as_ref().len() < CQE_LEN {
            return Err(SlotError::Truncated);
        }
        Ok(Cqe { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// `wr_id` of the completed work request.
    pub fn wr_id(&self) -> u64 {
        u64_at(self.b(), field::cqe::WR_ID)
    }
    /// `enum ibv_wc_status`.
    pub fn status(&self) -> u32 {
        u32_at(self.b(), field::cqe::STATUS)
    }
    /// `enum ibv_wc_opcode`.
    pub fn opcode(&self) -> u32 {
        u32_at(self.b(), field::cqe::OPCODE)
    }
    /// The errno behind an error the daemon's checks raised, else 0.
    pub fn vendor_err(&self) -> u32 {
        u32_at(self.b(), field::cqe::VENDOR_ERR)
    }
    /// Bytes received (receive completions) or transferred.
    pub fn byte_len(&self) -> u32 {
        u32_at(self.b(), field::cqe::BYTE_LEN)
    }
    /// Immediate data or invalidated rkey, as the `wc_flags` say.
    pub fn imm_data(&self) -> u32 {
        u32_at(self.b(), field::cqe::IMM_DATA)
    }
    /// The local QP the work request belonged to.
    pub fn qp_num(&self) -> u32 {
        u32_at(self.b(), field::cqe::QP_NUM)
    }
    /// UD receives: the sender's QP number.
    pub fn src_qp(&self) -> u32 {
        u32_at(self.b(), field::cqe::SRC_QP)
    }
    /// `enum ibv_wc_flags` bits.
    pub fn wc_flags(&self) -> u32 {
        u32_at(self.b(), field::cqe::WC_FLAGS)
    }
    /// UD receives: the P_Key index (0: RoCE has one P_Key).
    pub fn pkey_index(&self) -> u16 {
        u16_at(self.b(), field::cqe::PKEY_INDEX)
    }
    /// Source LID (0 on RoCE and iWARP).
    pub fn slid(&self) -> u16 {
        u16_at(self.b(), field::cqe::SLID)
    }
    /// Service level (0 on RoCE and iWARP).
    pub fn sl(&self) -> u8 {
        self.b()[field::cqe::SL]
    }
    /// Destination LID path bits (0 on RoCE and iWARP).
    pub fn dlid_path_bits(&self) -> u8 {
        self.b()[field::cqe::DLID_PATH_BITS]
    }
    /// When the daemon wrote the CQE, in [`CQE_CLOCK_KHZ`] ticks (`CLOCK_MONOTONIC` ns);
    /// 0 when the CQ was created without timestamps.
    pub fn completion_ts(&self) -> u64 {
        u64_at(self.b(), field::cqe::COMPLETION_TS)
    }
    /// When the daemon wrote the CQE, in `CLOCK_REALTIME` nanoseconds; 0 when the CQ was
    /// created without timestamps.
    pub fn completion_wallclock_ns(&self) -> u64 {
        u64_at(self.b(), field::cqe::WALLCLOCK_NS)
    }
}

/// A completion (`struct ibv_wc`), numbering as verbs.h.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CqeRepr {
    /// `wr_id` of the completed work request, as posted.
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: u32,
    /// `enum ibv_wc_opcode`.
    pub opcode: u32,
    /// The errno when the daemon's checks or the core refused the WQE (EINVAL, ENODEV,
    /// …), else 0.
    pub vendor_err: u32,
    /// Bytes received (receive completions; UD counts the 40-byte GRH), or the WQE's
    /// length on the send side; 0 for an error.
    pub byte_len: u32,
    /// As in `ibv_wc`: the network-order bytes as received, read as a host u32.
    pub imm_data: u32,
    /// The local QP number the work request belonged to.
    pub qp_num: u32,
    /// UD receives: the sender's QP number (from the DETH).
    pub src_qp: u32,
    /// `enum ibv_wc_flags` bits.
    pub wc_flags: u32,
    /// UD receives: the P_Key index (0: RoCE devices have one P_Key).
    pub pkey_index: u16,
    /// Source LID; 0 on RoCE and iWARP, which have none.
    pub slid: u16,
    /// Service level; 0 on RoCE and iWARP.
    pub sl: u8,
    /// Destination LID path bits; 0 on RoCE and iWARP.
    pub dlid_path_bits: u8,
    /// `ibv_wc_read_completion_ts`: when the daemon wrote the CQE into the ring, as a NIC
    /// stamps its CQE write, in [`CQE_CLOCK_KHZ`] ticks (`CLOCK_MONOTONIC` nanoseconds).
    /// 0 when the CQ was created without timestamps.
    pub completion_ts: u64,
    /// `ibv_wc_read_completion_wallclock_ns`: the same moment in `CLOCK_REALTIME`
    /// nanoseconds since the epoch; 0 when the CQ was created without timestamps.
    pub completion_wallclock_ns: u64,
}

impl CqeRepr {
    /// Reads every field ([`SlotError::Truncated`] below [`CQE_LEN`] bytes).
    pub fn parse<T: AsRef<[u8]>>(cqe: &Cqe<T>) -> Result<Self, SlotError> {
        if cqe.b().len() < CQE_LEN {
            return Err(SlotError::Truncated);
        }
        Ok(CqeRepr {
            wr_id: cqe.wr_id(),
            status: cqe.status(),
            opcode: cqe.opcode(),
            vendor_err: cqe.vendor_err(),
            byte_len: cqe.byte_len(),
            imm_data: cqe.imm_data(),
            qp_num: cqe.qp_num(),
            src_qp: cqe.src_qp(),
            wc_flags: cqe.wc_flags(),
            pkey_index: cqe.pkey_index(),
            slid: cqe.slid(),
            sl: cqe.sl(),
            dlid_path_bits: cqe.dlid_path_bits(),
            completion_ts: cqe.completion_ts(),
            completion_wallclock_ns: cqe.completion_wallclock_ns(),
        })
    }

    /// Always [`CQE_LEN`].
    pub const fn buffer_len(&self) -> usize {
        CQE_LEN
    }

    /// Writes all 64 bytes (46..48 zeroed).
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), SlotError> {
        let buf = buf.get_mut(..CQE_LEN).ok_or(SlotError::BufferTooSmall)?;
        use field::cqe as f;
        buf.fill(0);
        buf[f::WR_ID].copy_from_slice(&self.wr_id.to_le_bytes());
        buf[f::STATUS].copy_from_slice(&self.status.to_le_bytes());
        buf[f::OPCODE].copy_from_slice(&self.opcode.to_le_bytes());
        buf[f::VENDOR_ERR].copy_from_slice(&self.vendor_err.to_le_bytes());
        buf[f::BYTE_LEN].copy_from_slice(&self.byte_len.to_le_bytes());
        buf[f::IMM_DATA].copy_from_slice(&self.imm_data.to_le_bytes());
        buf[f::QP_NUM].copy_from_slice(&self.qp_num.to_le_bytes());
        buf[f::SRC_QP].copy_from_slice(&self.src_qp.to_le_bytes());
        buf[f::WC_FLAGS].copy_from_slice(&self.wc_flags.to_le_bytes());
        buf[f::PKEY_INDEX].copy_from_slice(&self.pkey_index.to_le_bytes());
        buf[f::SLID].copy_from_slice(&self.slid.to_le_bytes());
        buf[f::SL] = self.sl;
        buf[f::DLID_PATH_BITS] = self.dlid_path_bits;
        buf[f::COMPLETION_TS].copy_from_slice(&self.completion_ts.to_le_bytes());
        buf[f::WALLCLOCK_NS].copy_from_slice(&self.completion_wallclock_ns.to_le_bytes());
        Ok(())
    }
}

#[cfg(test)]
#[path = "slot_tests.rs"]
mod tests;
