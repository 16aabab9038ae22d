use super::*;
use std::os::fd::FromRawFd;

const A: u64 = 0x7f12_3400_0000;

fn sealed(pages: u64) -> OwnedFd {
    sys::sealed_memfd("test-shared-pages", (pages * PAGE) as usize).unwrap()
}

/// A memfd that allows sealing but carries no seal: a client could truncate it.
fn unsealed(pages: u64) -> OwnedFd {
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked and owned.
    let fd = unsafe { libc::memfd_create(c"test-unsealed".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: `fd` is fresh and ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let f = std::fs::File::from(fd);
    f.set_len(pages * PAGE).unwrap();
    f.into()
}

fn pages(addr: u64, n: u64, offset_pages: u64) -> SharedPages {
    SharedPages {
        addr,
        len: n * PAGE,
        offset: offset_pages * PAGE,
    }
}

/// `(start, end, memfd offset, users)` of every range.
fn layout(s: &SharedRanges) -> Vec<(u64, u64, u64, u32)> {
    s.ranges
        .iter()
        .map(|(&a, r)| ((a - A) / PAGE, (r.end - A) / PAGE, r.offset / PAGE, r.users))
        .collect()
}

fn is_shared_at(s: &SharedRanges, addr: u64, want_offset: u64, want_len: u64) -> bool {
    matches!(
        s.piece(addr, addr + 64 * PAGE),
        Piece::Shared { offset, len, .. } if offset as u64 == want_offset && len as u64 == want_len
    )
}

#[test]
fn refuses_a_memfd_without_shrink_and_grow_seals() {
    let mut s = SharedRanges::default();
    assert_eq!(
        s.attach(pages(A, 1, 0), unsealed(1)),
        Err(Refused::NotSealed)
    );
    // Not a memfd at all: F_GET_SEALS fails.
    let file: OwnedFd = std::fs::File::open("/proc/self/stat").unwrap().into();
    assert_eq!(s.attach(pages(A, 1, 0), file), Err(Refused::NotSealed));
    assert!(s.is_empty() && s.memfds.is_empty());
}

#[test]
fn refuses_ranges_the_memfd_does_not_hold_or_that_are_unaligned() {
    let mut s = SharedRanges::default();
    let fd = sealed(2);
    let try_range = |s: &mut SharedRanges, p| s.attach(p, fd.try_clone().unwrap());
    assert_eq!(try_range(&mut s, pages(A, 3, 0)), Err(Refused::BadRange));
    assert_eq!(try_range(&mut s, pages(A, 1, 2)), Err(Refused::BadRange));
    assert_eq!(try_range(&mut s, pages(A, 0, 0)), Err(Refused::BadRange));
    assert_eq!(
        try_range(&mut s, pages(A + 8, 1, 0)),
        Err(Refused::BadRange)
    );
    let wraps = SharedPages {
        addr: u64::MAX - PAGE + 1,
        len: 2 * PAGE,
        offset: 0,
    };
    assert_eq!(try_range(&mut s, wraps), Err(Refused::BadRange));
    assert!(s.is_empty() && s.memfds.is_empty());
    assert_eq!(try_range(&mut s, pages(A, 1, 1)), Ok(()));
}

#[test]
fn overlapping_registrations_share_one_mapping_and_count_users() {
    let mut s = SharedRanges::default();
    let fd = sealed(8);
    // MR 1: pages 0..4 at memfd pages 0..4; MR 2: pages 2..6, the same file again
    // through another descriptor (the shim reuses its memfd).
    s.attach(pages(A, 4, 0), fd.try_clone().unwrap()).unwrap();
    s.attach(pages(A + 2 * PAGE, 4, 2), fd.try_clone().unwrap())
        .unwrap();
    assert_eq!(s.memfds.len(), 1);
    assert_eq!(
        layout(&s),
        vec![(0, 2, 0, 1), (2, 4, 2, 2), (4, 6, 4, 1)],
        "split where the registrations overlap"
    );
    assert!(is_shared_at(&s, A + PAGE + 100, PAGE + 100, PAGE - 100));
    assert!(is_shared_at(&s, A + 3 * PAGE, 3 * PAGE, PAGE));
    // The same pages once more: only counts change.
    s.attach(pages(A, 4, 0), fd.try_clone().unwrap()).unwrap();
    assert_eq!(layout(&s), vec![(0, 2, 0, 2), (2, 4, 2, 3), (4, 6, 4, 1)]);
    s.detach(A, 4 * PAGE);
    s.detach(A, 4 * PAGE);
    assert_eq!(layout(&s), vec![(2, 4, 2, 1), (4, 6, 4, 1)]);
    assert!(matches!(
        s.piece(A, A + 8 * PAGE),
        Piece::Other { len } if len as u64 == 2 * PAGE
    ));
    assert_eq!(s.memfds.len(), 1);
    s.detach(A + 2 * PAGE, 4 * PAGE);
    assert!(s.is_empty());
    assert!(
        s.memfds.is_empty(),
        "the last range took the mapping with it"
    );
}

#[test]
fn refuses_pages_already_backed_differently_and_changes_nothing() {
    let mut s = SharedRanges::default();
    let fd = sealed(4);
    s.attach(pages(A, 2, 0), fd.try_clone().unwrap()).unwrap();
    let before = layout(&s);
    // Same file, other offset for the same addresses.
    assert_eq!(
        s.attach(pages(A + PAGE, 2, 0), fd.try_clone().unwrap()),
        Err(Refused::Conflict)
    );
    // Another file over the same addresses.
    assert_eq!(
        s.attach(pages(A + PAGE, 1, 0), sealed(1)),
        Err(Refused::Conflict)
    );
    assert_eq!(layout(&s), before);
    assert_eq!(s.memfds.len(), 1);
    // Adjacent pages of another file are fine.
    s.attach(pages(A + 2 * PAGE, 1, 0), sealed(1)).unwrap();
    assert_eq!(s.memfds.len(), 2);
    assert!(matches!(
        s.piece(A + PAGE, A + 3 * PAGE),
        Piece::Shared { len, .. } if len as u64 == PAGE
    ));
}

#[test]
fn pieces_stop_at_the_next_shared_range_and_at_the_end() {
    let mut s = SharedRanges::default();
    s.attach(pages(A + 4 * PAGE, 1, 0), sealed(1)).unwrap();
    assert!(matches!(s.piece(A, A + 100), Piece::Other { len: 100 }));
    assert!(matches!(
        s.piece(A + 1, A + 10 * PAGE),
        Piece::Other { len } if len as u64 == 4 * PAGE - 1
    ));
    assert!(is_shared_at(&s, A + 4 * PAGE, 0, PAGE));
    assert!(matches!(
        s.piece(A + 5 * PAGE, A + 6 * PAGE),
        Piece::Other { len } if len as u64 == PAGE
    ));
}
