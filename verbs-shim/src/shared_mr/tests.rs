//! The plan, the moves there and back, fork, and writes during a move.
use super::swap::Scratch;
use super::*;

fn line(s: &str) -> MapsLine {
    MapsLine::parse(s).unwrap()
}

fn known(inodes: &[u64]) -> Memfds {
    inodes
        .iter()
        .map(|&i| (i, (std::fs::File::open("/dev/null").unwrap().into(), 1)))
        .collect()
}

#[test]
fn parses_maps_lines_with_and_without_a_path() {
    let m =
        line("7f0000001000-7f0000005000 rw-s 00002000 00:01 4242    /memfd:rdma-emu-mr (deleted)");
    assert_eq!(
        m,
        MapsLine {
            start: 0x7f00_0000_1000,
            end: 0x7f00_0000_5000,
            perms: "rw-s".into(),
            offset: 0x2000,
            inode: 4242,
            path: "/memfd:rdma-emu-mr (deleted)".into(),
        }
    );
    let anon = line("7f0000005000-7f0000009000 rw-p 00000000 00:00 0 ");
    assert!(anon.path.is_empty() && anon.convertible());
    assert!(line("5555000-5556000 rw-p 00000000 00:00 0   [heap]").convertible());
    assert!(!line("7ffc000-7ffd000 rw-p 00000000 00:00 0   [stack]").convertible());
    assert!(!line("7f00-7f01 r--p 00000000 00:00 0").convertible());
    assert!(!line("7f00-7f01 rw-p 00000000 08:01 77 /usr/lib/x.so").convertible());
    assert_eq!(MapsLine::parse("garbage"), None);
}

#[test]
fn plans_conversion_of_anonymous_pages_and_reuse_of_our_memfds() {
    let maps = [
        line("1000-3000 rw-p 00000000 00:00 0"),
        line("3000-5000 rw-p 00000000 00:00 0"),
        line("5000-6000 r--p 00000000 08:01 9 /usr/lib/libc.so.6"),
        line("6000-8000 rw-s 00004000 00:01 77 /memfd:rdma-emu-mr (deleted)"),
        line("8000-9000 rw-s 00006000 00:01 77 /memfd:rdma-emu-mr (deleted)"),
        line("9000-a000 rw-s 00000000 00:01 78 /memfd:someone-else (deleted)"),
    ];
    let steps = plan(&maps, 0x2000, 0xa000, &known(&[77]));
    assert_eq!(
        steps,
        vec![
            Step::Convert {
                addr: 0x2000,
                len: 0x3000
            },
            Step::Reuse {
                addr: 0x6000,
                len: 0x3000,
                inode: 77,
                offset: 0x4000
            },
        ]
    );
    // A memfd of ours that is no longer known (its pages went) is not reused.
    assert_eq!(plan(&maps, 0x6000, 0x8000, &known(&[])), vec![]);
}

#[test]
fn reuse_splits_where_offsets_are_not_consecutive() {
    let maps = [
        line("6000-8000 rw-s 00004000 00:01 77 /memfd:rdma-emu-mr (deleted)"),
        line("8000-9000 rw-s 00000000 00:01 77 /memfd:rdma-emu-mr (deleted)"),
    ];
    assert_eq!(plan(&maps, 0x7000, 0x9000, &known(&[77])).len(), 2);
}

/// A private anonymous mapping of `pages` pages, unmapped on drop.
struct Anon(Scratch);

impl Anon {
    fn new(pages: usize) -> Anon {
        let len = pages * page_size() as usize;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        Anon(Scratch::map(len, flags, -1).expect("mmap"))
    }

    fn addr(&self) -> u64 {
        self.0.addr as u64
    }

    fn len(&self) -> usize {
        self.0.len
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is ours and `len` long.
        unsafe { core::slice::from_raw_parts_mut(self.0.addr.cast(), self.0.len) }
    }
}

/// Whether address `a` is on one of our memfds.
fn on_memfd(a: u64) -> bool {
    mapping_of(a).path.starts_with("/memfd:rdma-emu-mr")
}

/// The mapping that holds address `a` as `/proc/self/maps` shows it.
fn mapping_of(a: u64) -> MapsLine {
    maps()
        .into_iter()
        .find(|m| m.start <= a && a < m.end)
        .expect("mapped")
}

fn pread_byte(fd: &OwnedFd, offset: i64) -> u8 {
    let mut b = 0u8;
    // SAFETY: pread of one byte into a local from a descriptor we hold.
    let n = unsafe { libc::pread(fd.as_raw_fd(), (&mut b as *mut u8).cast(), 1, offset) };
    assert_eq!(n, 1);
    b
}

#[test]
fn moves_pages_in_place_and_back_keeping_their_contents() {
    let page = page_size() as usize;
    let mut anon = Anon::new(3);
    let addr = anon.addr();
    let buf = anon.bytes();
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    // A region that starts mid-page: only pages 1 and 2 are whole.
    let first = share(addr + 100, 3 * page as u64 - 100);
    assert_eq!(
        first.pages,
        vec![SharedPages {
            addr: addr + page as u64,
            len: 2 * page as u64,
            offset: 0
        }]
    );
    assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    assert!(on_memfd(addr + page as u64));
    assert_eq!(mapping_of(addr).inode, 0, "the partial page stays private");
    // The memfd holds the same bytes, and writes through either side are seen by both.
    assert_eq!(pread_byte(&first.fds[0], 0), buf[page]);
    buf[page] = 0xee;
    assert_eq!(pread_byte(&first.fds[0], 0), 0xee);
    // The same pages again (an overlapping registration): reused, not moved again.
    let again = share(addr + page as u64, page as u64);
    assert_eq!(
        again.pages,
        vec![SharedPages {
            addr: addr + page as u64,
            len: page as u64,
            offset: 0
        }]
    );
    assert_eq!(first.inodes, again.inodes);
    // While one registration still uses them, the pages stay on the memfd.
    release(&first.inodes);
    assert!(on_memfd(addr + page as u64));
    // The last one gone, they are private memory again, with the same bytes, and a
    // write no longer reaches the memfd.
    release(&again.inodes);
    let m = mapping_of(addr + page as u64);
    assert!(m.inode == 0 && m.perms == "rw-p", "{m:?}");
    assert_eq!(buf[page], 0xee);
    assert!(buf[page + 1..]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == ((page + 1 + i) % 251) as u8));
    buf[page + 1] = 0x11;
    assert_ne!(pread_byte(&first.fds[0], 1), 0x11);
}

/// A thread that keeps writing into the pages while they move loses no write: each
/// slot ends with the last value the thread wrote there, also kept in a private array.
/// The move without the fence (copy, then map over) loses thousands of them.
#[test]
fn writes_by_another_thread_during_the_move_are_not_lost() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
    const SLOT: usize = 512; // one u64 written per 4 KiB
    let anon = Anon::new(8192); // 32 MiB: a move takes milliseconds
    let slots = anon.len() / 8 / SLOT;
    let base = anon.addr() as usize;
    let stop = AtomicBool::new(false);
    let written = AtomicU64::new(0);
    let shared = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut shadow = vec![0u64; slots];
            let mut v = 1u64;
            while !stop.load(Relaxed) {
                for (i, slot) in shadow.iter_mut().enumerate() {
                    // SAFETY: slot `i` is inside the mapping, 8-byte aligned.
                    unsafe { core::ptr::write_volatile((base as *mut u64).add(i * SLOT), v) };
                    *slot = v;
                    v += 1;
                }
                written.store(v, Relaxed);
            }
            shadow
        });
        // Let the writer get going, then move the pages under it.
        while written.load(Relaxed) == 0 {
            std::hint::spin_loop();
        }
        let shared = share(anon.addr(), anon.len() as u64);
        stop.store(true, Relaxed);
        let shadow = writer.join().unwrap();
        for (i, want) in shadow.iter().enumerate() {
            // SAFETY: as in the writer; it has stopped.
            let got = unsafe { core::ptr::read_volatile((base as *const u64).add(i * SLOT)) };
            assert_eq!(got, *want, "slot {i} lost a write");
        }
        shared
    });
    assert_eq!(shared.pages.len(), 1, "the pages moved");
    release(&shared.inodes);
}

/// After a fork the child has the registered pages as private memory: what they held,
/// its own writes unseen by the parent, the parent's later writes unseen by it.
#[test]
fn a_forked_child_gets_a_private_copy() {
    let mut anon = Anon::new(2);
    let (base, len) = (anon.addr() as *mut u8, anon.len());
    let shared = share(anon.addr(), len as u64);
    let buf = anon.bytes();
    buf.fill(0x5a);
    assert_eq!(shared.pages.len(), 1);
    let mut pipe = [0; 2];
    // SAFETY: pipe into a local array.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    // SAFETY: the child only reads and writes memory, reads the pipe and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let mut go = 0u8;
        // SAFETY: waits for the parent's byte; the child's pages are its own.
        let code = unsafe {
            libc::read(pipe[0], (&mut go as *mut u8).cast(), 1);
            let before = (0..len).all(|i| *base.add(i) == 0x5a);
            *base = 0x77;
            match before {
                true => 0,
                false => 1,
            }
        };
        // SAFETY: leaves the child without running the test harness's exit path.
        unsafe { libc::_exit(code) };
    }
    // The parent writes after the fork, before the child looks.
    buf[1] = 0x33;
    // SAFETY: one byte to the child through the pipe, then wait for it.
    let status = unsafe {
        libc::write(pipe[1], b"g".as_ptr().cast(), 1);
        let mut st = 0;
        assert_eq!(libc::waitpid(pid, &mut st, 0), pid);
        libc::close(pipe[0]);
        libc::close(pipe[1]);
        st
    };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child saw other bytes or lacked the pages (status {status:#x})"
    );
    assert_eq!(buf[0], 0x5a, "the child's write reached the parent");
    assert_eq!(
        pread_byte(&shared.fds[0], 1),
        0x33,
        "the parent's pages are still shared"
    );
    release(&shared.inodes);
}
