//! Single-producer single-consumer rings in shared memory, as safe views over
//! `&[AtomicU64]`.
//!
//! Each side maps the ring's memfd and turns the mapping into a `&[AtomicU64]` with one
//! `unsafe` of its own; everything here is safe code over that slice, and nothing here
//! panics or reads outside the slice whatever the other side writes into it.
//!
//! Layout of one ring at byte `offset` of its memfd ([`RingLayout`]):
//!
//! | bytes | content |
//! |---|---|
//! | +0 | producer index, u64, free-running |
//! | +64 | consumer index, u64, free-running |
//! | +128 | `arm` (CQ only): 0 = not armed, 1 = next completion, 2 = solicited only |
//! | +192..256 | reserved |
//! | +256 | slot `i` at `256 + (i & (entries - 1)) * slot_size` |
//!
//! Ordering: the producer writes the slot words (`Relaxed`), then stores the producer
//! index (`Release`); the consumer loads the producer index (`Acquire`), reads the slot,
//! then stores its consumer index (`Release`). Each side keeps its own index privately
//! and only publishes it, so a hostile peer overwriting the shared copy of *our* index
//! changes nothing for us; a peer index that makes `producer - consumer > entries` is
//! [`RingError::Broken`].
//!
//! A receive ring's consumer index counts the slots *released*, not the slots read: the
//! daemon reads a receive WQE when it queues it ([`Consumer::take`]) and releases its slot
//! when the receive completes ([`Consumer::release_to`]), as rxe advances its RQ's consumer
//! index at completion. So the producer's `producer - consumer` is the receives
//! outstanding, which is what `max_recv_wr` bounds.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes before the first slot: the index and `arm` words, each on its own cache line.
pub const RING_HEADER_LEN: u64 = 256;
const PRODUCER_WORD: usize = 0;
const CONSUMER_WORD: usize = 64 / 8;
const ARM_WORD: usize = 128 / 8;

/// `arm` values of a CQ ring (`ibv_req_notify_cq`).
/// Not armed: no completion event is due.
pub const ARM_NONE: u64 = 0;
/// Armed for the next completion of any kind (`solicited_only` = 0).
pub const ARM_NEXT: u64 = 1;
/// Armed for the next solicited or error completion only (`solicited_only` = 1).
pub const ARM_SOLICITED: u64 = 2;

/// Where one ring lies in its memfd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingLayout {
    /// Byte offset of the ring header; a multiple of 64.
    pub offset: u64,
    /// Number of slots; a power of two.
    pub entries: u32,
    /// Bytes per slot; a nonzero multiple of 64.
    pub slot_size: u32,
}

impl RingLayout {
    /// Bytes the ring occupies from `offset`: header plus slots.
    pub fn len(&self) -> u64 {
        RING_HEADER_LEN + u64::from(self.entries) * u64::from(self.slot_size)
    }

    /// Never true for a layout that passed [`RingLayout::check`]; here for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The first byte after the ring, rounded up to 64 (where a following ring may start).
    pub fn end(&self) -> u64 {
        (self.offset + self.len()).next_multiple_of(64)
    }

    /// Checks the layout is well formed and fits in a region of `region_len` bytes.
    pub fn check(&self, region_len: u64) -> Result<(), RingError> {
        let well_formed = self.offset & 63 == 0
            && self.entries.is_power_of_two()
            && self.slot_size != 0
            && self.slot_size & 63 == 0;
        if !well_formed {
            return Err(RingError::BadLayout);
        }
        match self.offset.checked_add(self.len()) {
            Some(end) if end <= region_len => Ok(()),
            _ => Err(RingError::BadLayout),
        }
    }
}

/// What went wrong with a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// The layout is malformed or does not fit in the mapping.
    BadLayout,
    /// The peer's index is more than `entries` away from ours: the ring is corrupt.
    Broken,
    /// No free slot (producer side).
    Full,
    /// The slot given is larger than `slot_size`, or the buffer to read into is smaller.
    SlotSize,
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RingError::BadLayout => "ring layout malformed or outside its mapping",
            RingError::Broken => "ring indices are inconsistent",
            RingError::Full => "ring full",
            RingError::SlotSize => "slot size mismatch",
        })
    }
}
impl std::error::Error for RingError {}

/// A checked view of one ring inside a mapping.
#[derive(Debug, Clone, Copy)]
pub struct RingView<'a> {
    words: &'a [AtomicU64],
    layout: RingLayout,
    /// Index of the header's first word in `words`.
    base: usize,
}

impl<'a> RingView<'a> {
    /// `words` is the whole mapping (byte `8 * i` is word `i`).
    pub fn new(words: &'a [AtomicU64], layout: RingLayout) -> Result<Self, RingError> {
        layout.check(words.len() as u64 * 8)?;
        let base = usize::try_from(layout.offset / 8).map_err(|_| RingError::BadLayout)?;
        Ok(RingView {
            words,
            layout,
            base,
        })
    }

    /// Where this ring lies in its memfd (offset, entries, slot size).
    pub fn layout(&self) -> RingLayout {
        self.layout
    }

    fn word(&self, index: usize) -> &'a AtomicU64 {
        // In bounds: `new` checked offset + len <= words.len() * 8 and index < 32.
        &self.words[self.base + index]
    }

    /// The producer index as last published (`Acquire`).
    pub fn producer_index(&self) -> u64 {
        self.word(PRODUCER_WORD).load(Ordering::Acquire)
    }

    /// The consumer index as last published (`Acquire`).
    pub fn consumer_index(&self) -> u64 {
        self.word(CONSUMER_WORD).load(Ordering::Acquire)
    }

    /// The CQ `arm` word.
    pub fn arm(&self) -> u64 {
        self.word(ARM_WORD).load(Ordering::Acquire)
    }

    /// Arms a CQ (client side of `ibv_req_notify_cq`).
    pub fn set_arm(&self, value: u64) {
        self.word(ARM_WORD).store(value, Ordering::SeqCst);
    }

    /// Disarms and returns what was armed (daemon side, when it fires the channel).
    pub fn take_arm(&self) -> u64 {
        self.word(ARM_WORD).swap(ARM_NONE, Ordering::SeqCst)
    }

    fn slot_words(&self, index: u64) -> &'a [AtomicU64] {
        let mask = u64::from(self.layout.entries) - 1;
        let per_slot = self.layout.slot_size as usize / 8;
        let start = self.base + RING_HEADER_LEN as usize / 8 + (index & mask) as usize * per_slot;
        // In bounds by the layout check in `new`.
        &self.words[start..start + per_slot]
    }

    fn write_slot(&self, index: u64, bytes: &[u8]) {
        let mut chunks = bytes.chunks(8);
        for word in self.slot_words(index) {
            let mut le = [0u8; 8];
            if let Some(chunk) = chunks.next() {
                le[..chunk.len()].copy_from_slice(chunk);
            }
            word.store(u64::from_le_bytes(le), Ordering::Relaxed);
        }
    }

    fn read_slot(&self, index: u64, buf: &mut [u8]) {
        // Whole words first, in a loop the compiler keeps to a load and a store each
        // (the send path reads one slot per WQE).
        let full = buf.len() / 8;
        let (head, tail) = buf.split_at_mut(full * 8);
        let words = self.slot_words(index);
        for (word, chunk) in words.iter().zip(head.chunks_exact_mut(8)) {
            chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
        }
        if let (false, Some(word)) = (tail.is_empty(), words.get(full)) {
            let le = word.load(Ordering::Relaxed).to_le_bytes();
            tail.copy_from_slice(&le[..tail.len()]);
        }
    }
}

/// The producing side of a ring. Keeps its own index; publishes it with `Release`.
#[derive(Debug)]
pub struct Producer<'a> {
    view: RingView<'a>,
    head: u64,
    published: u64,
}

impl<'a> Producer<'a> {
    /// Starts producing where the shared producer index says (0 for a fresh ring).
    pub fn new(view: RingView<'a>) -> Self {
        let head = view.producer_index();
        Producer {
            view,
            head,
            published: head,
        }
    }

    /// Resumes at a producer index kept elsewhere (the daemon keeps its own copy).
    pub fn with_index(view: RingView<'a>, head: u64) -> Self {
        Producer {
            view,
            head,
            published: head,
        }
    }

    /// The ring this producer writes to.
    pub fn view(&self) -> &RingView<'a> {
        &self.view
    }

    /// The private producer index, including staged but unpublished slots.
    pub fn index(&self) -> u64 {
        self.head
    }

    /// Free slots, or [`RingError::Broken`] if the consumer index is out of range.
    pub fn free(&self) -> Result<u64, RingError> {
        let used = self.head.wrapping_sub(self.view.consumer_index());
        let entries = u64::from(self.view.layout.entries);
        if used > entries {
            return Err(RingError::Broken);
        }
        Ok(entries - used)
    }

    /// Writes the next slot (zero-padded to `slot_size`) without publishing it.
    pub fn stage(&mut self, slot: &[u8]) -> Result<(), RingError> {
        if slot.len() > self.view.layout.slot_size as usize {
            return Err(RingError::SlotSize);
        }
        if self.free()? == 0 {
            return Err(RingError::Full);
        }
        self.view.write_slot(self.head, slot);
        self.head = self.head.wrapping_add(1);
        Ok(())
    }

    /// Makes every staged slot visible to the consumer (`Release`).
    pub fn publish(&mut self) {
        if self.published != self.head {
            self.view
                .word(PRODUCER_WORD)
                .store(self.head, Ordering::Release);
            self.published = self.head;
        }
    }

    /// [`Producer::stage`] then [`Producer::publish`].
    pub fn push(&mut self, slot: &[u8]) -> Result<(), RingError> {
        self.stage(slot)?;
        self.publish();
        Ok(())
    }
}

/// The consuming side of a ring. Keeps its own index; publishes it with `Release`.
#[derive(Debug)]
pub struct Consumer<'a> {
    view: RingView<'a>,
    tail: u64,
}

impl<'a> Consumer<'a> {
    /// Starts consuming where the shared consumer index says (0 for a fresh ring).
    pub fn new(view: RingView<'a>) -> Self {
        let tail = view.consumer_index();
        Consumer { view, tail }
    }

    /// Resumes at a consumer index kept elsewhere (the daemon keeps its own copy).
    pub fn with_index(view: RingView<'a>, tail: u64) -> Self {
        Consumer { view, tail }
    }

    /// The ring this consumer reads from.
    pub fn view(&self) -> &RingView<'a> {
        &self.view
    }

    /// The private consumer index.
    pub fn index(&self) -> u64 {
        self.tail
    }

    /// Slots published and not yet consumed (`Acquire` on the producer index).
    pub fn available(&self) -> Result<u64, RingError> {
        let n = self.view.producer_index().wrapping_sub(self.tail);
        if n > u64::from(self.view.layout.entries) {
            return Err(RingError::Broken);
        }
        Ok(n)
    }

    /// Copies the oldest unconsumed slot into `buf` (at least `slot_size` bytes) without
    /// consuming it; `Ok(false)` when the ring is empty.
    pub fn peek(&self, buf: &mut [u8]) -> Result<bool, RingError> {
        let size = self.view.layout.slot_size as usize;
        if buf.len() < size {
            return Err(RingError::SlotSize);
        }
        if self.available()? == 0 {
            return Ok(false);
        }
        self.view.read_slot(self.tail, &mut buf[..size]);
        Ok(true)
    }

    /// Consumes the slot last peeked and publishes the consumer index (`Release`).
    pub fn advance(&mut self) {
        self.tail = self.tail.wrapping_add(1);
        self.view
            .word(CONSUMER_WORD)
            .store(self.tail, Ordering::Release);
    }

    /// Consumes the slot last peeked without publishing: the slot stays the consumer's
    /// until [`Consumer::release_to`] gives it back.
    pub fn take(&mut self) {
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes the consumer index `index` (`Release`): every slot before it may be
    /// written again. Never beyond what was consumed: an `index` past the private index,
    /// or more than a ring behind it, publishes the private index. Keeping the published
    /// index from going back is the caller's part.
    pub fn release_to(&self, index: u64) {
        let behind = self.tail.wrapping_sub(index);
        let index = if behind <= u64::from(self.view.layout.entries) {
            index
        } else {
            self.tail
        };
        self.view
            .word(CONSUMER_WORD)
            .store(index, Ordering::Release);
    }

    /// Removes the published, unconsumed slots `drop` picks (it sees each slot's first
    /// `slot_size` bytes) and keeps the others in order; returns how many went. The kept
    /// slots move toward the newest end and the consumer index then passes the freed
    /// ones, so only slots the consumer owns are written and the producer, which may go
    /// on publishing meanwhile, needs no warning (as mlx5's provider cleans a CQ of a QP
    /// moved to RESET). `buf` holds at least `slot_size` bytes.
    pub fn discard(
        &mut self,
        buf: &mut [u8],
        mut drop: impl FnMut(&[u8]) -> bool,
    ) -> Result<u64, RingError> {
        let size = self.view.layout.slot_size as usize;
        let buf = buf.get_mut(..size).ok_or(RingError::SlotSize)?;
        let n = self.available()?;
        let mut removed = 0u64;
        for i in (0..n).rev() {
            let index = self.tail.wrapping_add(i);
            self.view.read_slot(index, buf);
            if drop(buf) {
                removed += 1;
            } else if removed > 0 {
                self.view.write_slot(index.wrapping_add(removed), buf);
            }
        }
        if removed > 0 {
            self.tail = self.tail.wrapping_add(removed);
            self.view
                .word(CONSUMER_WORD)
                .store(self.tail, Ordering::Release);
        }
        Ok(removed)
    }

    /// [`Consumer::peek`] then [`Consumer::advance`].
    pub fn pop(&mut self, buf: &mut [u8]) -> Result<bool, RingError> {
        let got = self.peek(buf)?;
        if got {
            self.advance();
        }
        Ok(got)
    }
}

/// The session page shared by the daemon and one client (4096 bytes, from the
/// `DeviceOpened` reply): word 0 holds the "engine sleeping" flag (a u32 at byte 0,
/// upper half zero). The engine sets it, re-checks every ring, then sleeps; a client
/// that published work does a `SeqCst` fence and rings the doorbell eventfd if it is set.
#[derive(Debug, Clone, Copy)]
pub struct SessionPage<'a> {
    words: &'a [AtomicU64],
}

/// Size of the session page memfd.
pub const SESSION_PAGE_LEN: usize = 4096;

impl<'a> SessionPage<'a> {
    /// `None` if the mapping is shorter than one word.
    pub fn new(words: &'a [AtomicU64]) -> Option<Self> {
        (!words.is_empty()).then_some(SessionPage { words })
    }

    /// Whether the engine announced that it is about to sleep (clients must then ring
    /// the doorbell after publishing work).
    pub fn sleeping(&self) -> bool {
        self.words[0].load(Ordering::SeqCst) & 0xffff_ffff != 0
    }

    /// The engine's announcement: set before its last check of the rings, cleared when
    /// it wakes.
    pub fn set_sleeping(&self, sleeping: bool) {
        self.words[0].store(u64::from(sleeping), Ordering::SeqCst);
    }
}

#[cfg(test)]
#[path = "ring_tests.rs"]
mod tests;
