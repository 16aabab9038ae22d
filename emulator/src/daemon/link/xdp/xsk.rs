//! One AF_XDP socket (XSK, linux/if_xdp.h) bound to one receive queue of an interface in
//! copy mode, with its own UMEM: the frames it receives into and sends from, and the four
//! rings shared with the kernel (fill and completion for the UMEM, receive and transmit
//! for the socket).
//!
//! The rings are single-producer single-consumer arrays of a power-of-two size indexed by
//! free-running 32-bit counters: a producer writes entries then publishes its counter with
//! release ordering, a consumer reads the other side's counter with acquire ordering.
//! Every descriptor the kernel hands back (an address and a length) is checked against the
//! UMEM before its bytes are touched.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// The size of one UMEM frame: a page, the largest chunk the kernel takes.
pub const FRAME: usize = 4096;
/// The room the kernel leaves before a received frame in copy mode
/// (`XDP_PACKET_HEADROOM`).
pub const RX_HEADROOM: usize = 256;
/// The largest Ethernet frame a socket receives: a frame less the headroom.
pub const MAX_RX_FRAME: usize = FRAME - RX_HEADROOM;
/// Frames for receiving (all on the fill ring while free) and for sending: the receive
/// side absorbs bursts while the engine is busy (when the fill ring is empty the kernel
/// drops, `rx_fill_ring_empty_descs`). 12 MiB of UMEM per socket.
const RX_FRAMES: u32 = 2048;
const TX_FRAMES: u32 = 1024;
/// Entries of the fill and receive rings (every receive frame fits on either), and of the
/// transmit and completion rings (every transmit frame fits).
const RX_RING: u32 = RX_FRAMES;
const TX_RING: u32 = TX_FRAMES;

// linux/if_xdp.h.
const SOL_XDP: libc::c_int = 283;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_RX_RING: libc::c_int = 2;
const XDP_TX_RING: libc::c_int = 3;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_STATISTICS: libc::c_int = 7;
const XDP_COPY: u16 = 1 << 1;
const PGOFF_RX_RING: i64 = 0;
const PGOFF_TX_RING: i64 = 0x8000_0000;
const UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
const UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;

/// `struct xdp_desc`: a frame in the UMEM.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// `struct xdp_statistics`: what the kernel dropped or refused on one socket.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XskStats {
    /// Frames dropped for other reasons than a full ring (too large for a frame…).
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    /// Frames dropped because the receive ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring had no frame to receive into.
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

/// Entries a consumer may read: the producer's counter less its own (free-running).
pub fn ready(producer: u32, consumer: u32) -> u32 {
    producer.wrapping_sub(consumer)
}

/// Entries a producer may write into a ring of `size`.
pub fn room(size: u32, producer: u32, consumer: u32) -> u32 {
    size.saturating_sub(producer.wrapping_sub(consumer))
}

/// The byte range of a descriptor's frame in a UMEM of `umem_len` bytes cut in `FRAME`
/// chunks: `None` unless it is non-empty and lies inside one chunk.
pub fn frame_range(addr: u64, len: u32, umem_len: usize) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(addr).ok()?;
    let end = start.checked_add(len as usize)?;
    if len == 0 || end > umem_len || start / FRAME != (end - 1) / FRAME {
        return None;
    }
    Some(start..end)
}

/// A mapping, unmapped when dropped.
#[derive(Debug)]
struct Mmap {
    ptr: *mut u8,
    len: usize,
}

impl Mmap {
    fn new(len: usize, fd: Option<(RawFd, i64)>) -> io::Result<Mmap> {
        let (flags, fd, off) = match fd {
            Some((fd, off)) => (libc::MAP_SHARED | libc::MAP_POPULATE, fd, off),
            None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0),
        };
        // SAFETY: a fresh mapping at an address the kernel picks; nothing aliases it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                off as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; no reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One ring of entries `T` shared with the kernel.
#[derive(Debug)]
struct Ring<T> {
    map: Mmap,
    off: RingOffset,
    size: u32,
    _entry: std::marker::PhantomData<T>,
}

impl<T: Copy> Ring<T> {
    fn new(fd: RawFd, off: RingOffset, size: u32, pgoff: i64) -> io::Result<Ring<T>> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        // The kernel's layout, checked before any pointer is made from it: both counters
        // and the entries inside the mapping, aligned.
        let fits = |at: u64, align: usize| {
            (at as usize).checked_add(4).is_some_and(|end| end <= len)
                && (at as usize).is_multiple_of(align)
        };
        if !(size.is_power_of_two()
            && fits(off.producer, 4)
            && fits(off.consumer, 4)
            && fits(off.desc, std::mem::align_of::<T>()))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected AF_XDP ring layout {off:?}"),
            ));
        }
        Ok(Ring {
            map: Mmap::new(len, Some((fd, pgoff)))?,
            off,
            size,
            _entry: std::marker::PhantomData,
        })
    }

    fn counter(&self, at: u64) -> &AtomicU32 {
        // SAFETY: the kernel's offsets of the producer and consumer counters are inside
        // the mapping and 4-byte aligned; the counters live as long as the mapping.
        unsafe { &*(self.map.ptr.add(at as usize) as *const AtomicU32) }
    }

    fn producer(&self) -> &AtomicU32 {
        self.counter(self.off.producer)
    }

    fn consumer(&self) -> &AtomicU32 {
        self.counter(self.off.consumer)
    }

    fn slot(&self, index: u32) -> *mut T {
        let i = (index & (self.size - 1)) as usize;
        // SAFETY: `i < size`, and the mapping holds `size` entries from `off.desc`.
        unsafe { self.map.ptr.add(self.off.desc as usize).cast::<T>().add(i) }
    }

    fn read(&self, index: u32) -> T {
        // SAFETY: `slot` is inside the mapping; entries are plain data the kernel wrote
        // before publishing its counter (read after an acquire load of it).
        unsafe { std::ptr::read_volatile(self.slot(index)) }
    }

    fn write(&self, index: u32, v: T) {
        // SAFETY: `slot` is inside the mapping, in the part the kernel does not read
        // before the producer counter is published with release ordering.
        unsafe { std::ptr::write_volatile(self.slot(index), v) }
    }
}

/// An AF_XDP socket on one queue with its UMEM.
#[derive(Debug)]
pub struct Xsk {
    // Field order: the rings and the UMEM are unmapped before the socket closes.
    rx: Ring<Desc>,
    tx: Ring<Desc>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    umem: Mmap,
    fd: OwnedFd,
    /// Transmit frames not on the transmit ring or in flight.
    tx_free: Vec<u64>,
    /// Whether each transmit frame is on the ring or in flight (by index from the first).
    tx_busy: Vec<bool>,
    /// Descriptors the kernel handed back that point outside the UMEM (never touched).
    pub bad_descs: u64,
}

// SAFETY: the raw pointers are mappings owned by this value; it moves between threads
// whole and is used by one thread at a time (the engine).
unsafe impl Send for Xsk {}

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: passes a live `T` and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            SOL_XDP,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn getsockopt<T: Default>(fd: RawFd, opt: libc::c_int) -> io::Result<T> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into the live `v` (plain data).
    let r = unsafe { libc::getsockopt(fd, SOL_XDP, opt, (&mut v as *mut T).cast(), &mut len) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

/// A new AF_XDP socket, unbound.
fn socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the descriptor is owned at once.
    let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

impl Xsk {
    /// Whether this process may open AF_XDP sockets (CAP_NET_RAW).
    pub fn probe() -> io::Result<()> {
        socket().map(drop)
    }

    /// A socket on queue `queue` of interface `ifindex`, in copy mode, its fill ring full.
    pub fn open(ifindex: u32, queue: u32) -> io::Result<Xsk> {
        let fd = socket()?;
        let s = fd.as_raw_fd();
        let umem = Mmap::new((RX_FRAMES + TX_FRAMES) as usize * FRAME, None)?;
        setsockopt(
            s,
            XDP_UMEM_REG,
            &UmemReg {
                addr: umem.ptr as u64,
                len: umem.len as u64,
                chunk_size: FRAME as u32,
                headroom: 0,
                flags: 0,
                tx_metadata_len: 0,
            },
        )?;
        for (opt, size) in [
            (XDP_UMEM_FILL_RING, RX_RING),
            (XDP_UMEM_COMPLETION_RING, TX_RING),
            (XDP_RX_RING, RX_RING),
            (XDP_TX_RING, TX_RING),
        ] {
            setsockopt(s, opt, &(size as libc::c_int))?;
        }
        let off: MmapOffsets = getsockopt(s, XDP_MMAP_OFFSETS)?;
        let fill = Ring::new(s, off.fr, RX_RING, UMEM_PGOFF_FILL_RING)?;
        let comp = Ring::new(s, off.cr, TX_RING, UMEM_PGOFF_COMPLETION_RING)?;
        let rx = Ring::new(s, off.rx, RX_RING, PGOFF_RX_RING)?;
        let tx = Ring::new(s, off.tx, TX_RING, PGOFF_TX_RING)?;
        let mut x = Xsk {
            rx,
            tx,
            fill,
            comp,
            umem,
            fd,
            tx_free: (RX_FRAMES..RX_FRAMES + TX_FRAMES)
                .map(|i| u64::from(i) * FRAME as u64)
                .collect(),
            tx_busy: vec![false; TX_FRAMES as usize],
            bad_descs: 0,
        };
        let frames: Vec<u64> = (0..RX_FRAMES)
            .map(|i| u64::from(i) * FRAME as u64)
            .collect();
        x.refill(&frames);
        let sxdp = SockaddrXdp {
            family: libc::AF_XDP as u16,
            flags: XDP_COPY,
            ifindex,
            queue_id: queue,
            shared_umem_fd: 0,
        };
        // SAFETY: passes a live sockaddr_xdp and its size.
        let r = unsafe {
            libc::bind(
                s,
                (&sxdp as *const SockaddrXdp).cast(),
                std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(x)
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Gives frames back to the kernel to receive into (their chunk's address).
    fn refill(&mut self, addrs: &[u64]) {
        let prod = self.fill.producer().load(Ordering::Relaxed);
        let cons = self.fill.consumer().load(Ordering::Acquire);
        let n = (room(self.fill.size, prod, cons) as usize).min(addrs.len());
        for (i, &a) in addrs[..n].iter().enumerate() {
            self.fill.write(prod.wrapping_add(i as u32), a);
        }
        self.fill
            .producer()
            .store(prod.wrapping_add(n as u32), Ordering::Release);
    }

    /// Hands each received frame (at most `max`) to `f`, then gives their chunks back to
    /// the fill ring; returns how many were taken off the ring.
    pub fn receive(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let cons = self.rx.consumer().load(Ordering::Relaxed);
        let prod = self.rx.producer().load(Ordering::Acquire);
        let n = (ready(prod, cons) as usize).min(max).min(RX_RING as usize);
        let mut back = [0u64; 64];
        let mut done = 0;
        while done < n {
            let k = (n - done).min(back.len());
            for (j, slot) in back[..k].iter_mut().enumerate() {
                let d = self.rx.read(cons.wrapping_add((done + j) as u32));
                // Only the receive frames: a transmit frame must not join the fill ring.
                match frame_range(d.addr, d.len, RX_FRAMES as usize * FRAME) {
                    Some(r) => {
                        // SAFETY: `r` lies inside the UMEM (checked above); the kernel
                        // wrote the frame before publishing the descriptor and does not
                        // touch the chunk until it is back on the fill ring.
                        let bytes = unsafe {
                            std::slice::from_raw_parts(self.umem.ptr.add(r.start), r.len())
                        };
                        f(bytes);
                        *slot = (r.start - r.start % FRAME) as u64;
                    }
                    None => {
                        // A chunk the kernel should not have handed out: never touched,
                        // and its address not given back (it may not be one of ours).
                        self.bad_descs += 1;
                        *slot = u64::MAX;
                    }
                }
            }
            self.rx
                .consumer()
                .store(cons.wrapping_add((done + k) as u32), Ordering::Release);
            let mut good = 0;
            for j in 0..k {
                if back[j] != u64::MAX {
                    back[good] = back[j];
                    good += 1;
                }
            }
            // The fill ring has room for every receive frame, so none is lost here.
            self.refill(&back[..good]);
            done += k;
        }
        n
    }

    /// Takes back the transmit frames the kernel is done with.
    fn complete(&mut self) {
        let cons = self.comp.consumer().load(Ordering::Relaxed);
        let prod = self.comp.producer().load(Ordering::Acquire);
        let n = ready(prod, cons).min(TX_RING);
        for i in 0..n {
            let a = self.comp.read(cons.wrapping_add(i));
            // Only our own transmit chunks in flight go back on the free list.
            let busy = a
                .is_multiple_of(FRAME as u64)
                .then(|| (a / FRAME as u64).checked_sub(u64::from(RX_FRAMES)))
                .flatten()
                .and_then(|i| self.tx_busy.get_mut(i as usize))
                .filter(|b| **b);
            match busy {
                Some(b) => {
                    *b = false;
                    self.tx_free.push(a);
                }
                None => self.bad_descs += 1,
            }
        }
        self.comp
            .consumer()
            .store(cons.wrapping_add(n), Ordering::Release);
    }

    /// Puts `frames` on the transmit ring (as many as there are free frames and ring
    /// entries for) and tells the kernel; returns how many were queued.
    pub fn transmit<'a>(&mut self, frames: impl IntoIterator<Item = &'a [u8]>) -> usize {
        self.complete();
        let prod = self.tx.producer().load(Ordering::Relaxed);
        let cons = self.tx.consumer().load(Ordering::Acquire);
        let mut n = 0u32;
        for f in frames {
            if room(self.tx.size, prod.wrapping_add(n), cons) == 0 || f.len() > FRAME {
                break;
            }
            let Some(addr) = self.tx_free.pop() else {
                break;
            };
            self.tx_busy[(addr / FRAME as u64) as usize - RX_FRAMES as usize] = true;
            // SAFETY: `addr` is a free transmit chunk of the UMEM (FRAME bytes from it are
            // inside), not on any ring, so the kernel does not read it meanwhile.
            unsafe {
                std::ptr::copy_nonoverlapping(f.as_ptr(), self.umem.ptr.add(addr as usize), f.len())
            };
            self.tx.write(
                prod.wrapping_add(n),
                Desc {
                    addr,
                    len: f.len() as u32,
                    options: 0,
                },
            );
            n += 1;
        }
        if n > 0 {
            self.tx
                .producer()
                .store(prod.wrapping_add(n), Ordering::Release);
            self.kick();
        }
        n as usize
    }

    /// Makes the kernel send what is on the transmit ring (copy mode sends in the call, a
    /// bounded number of frames each time).
    fn kick(&mut self) {
        for _ in 0..64 {
            // SAFETY: a send with no data and no address, as AF_XDP takes it.
            let r = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            let pending = ready(
                self.tx.producer().load(Ordering::Relaxed),
                self.tx.consumer().load(Ordering::Acquire),
            );
            if pending == 0 {
                break;
            }
            if r < 0 {
                let e = io::Error::last_os_error().raw_os_error();
                if !matches!(
                    e,
                    Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::EINTR)
                ) {
                    break;
                }
            }
        }
        self.complete();
    }

    /// The kernel's counts for this socket (zeroes when it cannot tell).
    pub fn stats(&self) -> XskStats {
        getsockopt(self.fd.as_raw_fd(), XDP_STATISTICS).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_counters_wrap_around() {
        assert_eq!(ready(5, 3), 2);
        assert_eq!(ready(2, u32::MAX - 1), 4);
        assert_eq!(room(1024, 2, u32::MAX - 1), 1020);
        assert_eq!(room(1024, 1024, 0), 0);
        // A consumer counter the kernel left inconsistent never yields more room.
        assert_eq!(room(1024, 0, 5), 0);
    }

    #[test]
    fn descriptors_outside_the_umem_or_across_frames_are_refused() {
        let len = 4 * FRAME;
        assert_eq!(frame_range(256, 60, len), Some(256..316));
        assert_eq!(
            frame_range(3 * FRAME as u64, FRAME as u32, len),
            Some(3 * FRAME..4 * FRAME)
        );
        assert_eq!(frame_range(0, 0, len), None, "empty");
        assert_eq!(frame_range(4 * FRAME as u64, 1, len), None, "past the end");
        assert_eq!(
            frame_range(FRAME as u64 - 10, 20, len),
            None,
            "across chunks"
        );
        assert_eq!(frame_range(u64::MAX - 2, 10, len), None, "overflow");
        assert_eq!(frame_range(0, u32::MAX, len), None, "too long");
    }

    proptest::proptest! {
        /// Whatever a descriptor says, what is accepted lies inside the UMEM and inside
        /// one frame.
        #[test]
        fn accepted_descriptors_stay_inside_one_frame_of_the_umem(
            addr in proptest::prelude::any::<u64>(),
            len in proptest::prelude::any::<u32>(),
            small in 0u64..(8 * FRAME as u64),
            short in 0u32..(2 * FRAME as u32),
        ) {
            let umem = 4 * FRAME;
            for (a, l) in [(addr, len), (small, short), (small, len), (addr, short)] {
                if let Some(r) = frame_range(a, l, umem) {
                    proptest::prop_assert!(r.end <= umem && r.start < r.end);
                    proptest::prop_assert_eq!(r.start / FRAME, (r.end - 1) / FRAME);
                    proptest::prop_assert_eq!(r.len(), l as usize);
                }
            }
        }
    }
}
