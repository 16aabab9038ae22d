use super::*;
use proptest::prelude::*;

fn region(bytes: usize) -> Vec<AtomicU64> {
    (0..bytes / 8).map(|_| AtomicU64::new(0)).collect()
}

const LAYOUT: RingLayout = RingLayout {
    offset: 0,
    entries: 4,
    slot_size: 64,
};

#[test]
fn layout_outside_the_mapping_is_refused() {
    let mem = region(1024);
    assert_eq!(
        RingView::new(
            &mem,
            RingLayout {
                offset: 0,
                entries: 16,
                slot_size: 64
            }
        )
        .err(),
        Some(RingError::BadLayout)
    );
    assert_eq!(
        RingView::new(
            &mem,
            RingLayout {
                offset: 8,
                entries: 1,
                slot_size: 64
            }
        )
        .err(),
        Some(RingError::BadLayout)
    );
    assert_eq!(
        RingView::new(
            &mem,
            RingLayout {
                offset: 0,
                entries: 3,
                slot_size: 64
            }
        )
        .err(),
        Some(RingError::BadLayout)
    );
    assert_eq!(
        RingView::new(
            &mem,
            RingLayout {
                offset: u64::MAX - 63,
                entries: 1,
                slot_size: 64
            }
        )
        .err(),
        Some(RingError::BadLayout)
    );
    assert!(RingView::new(
        &mem,
        RingLayout {
            offset: 0,
            entries: 8,
            slot_size: 64
        }
    )
    .is_ok());
}

#[test]
fn producer_fills_to_capacity_then_reports_full() {
    let mem = region(1024);
    let view = RingView::new(&mem, LAYOUT).unwrap();
    let mut p = Producer::new(view);
    for i in 0..4u8 {
        p.push(&[i; 10]).unwrap();
    }
    assert_eq!(p.push(&[9]), Err(RingError::Full));
    let mut c = Consumer::new(view);
    let mut buf = [0u8; 64];
    assert!(c.pop(&mut buf).unwrap());
    assert_eq!(&buf[..11], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    p.push(&[7; 64]).unwrap();
}

#[test]
fn wild_peer_index_is_a_broken_ring_not_a_panic() {
    let mem = region(1024);
    let view = RingView::new(&mem, LAYOUT).unwrap();
    mem[0].store(1_000_000, Ordering::Relaxed); // hostile producer index
    let mut c = Consumer::new(view);
    let mut buf = [0u8; 64];
    assert_eq!(c.pop(&mut buf), Err(RingError::Broken));
    mem[0].store(0, Ordering::Relaxed);
    mem[8].store(1 << 40, Ordering::Relaxed); // hostile consumer index
    let mut p = Producer::with_index(view, 0);
    assert_eq!(p.push(&[1]), Err(RingError::Broken));
}

#[test]
fn arm_is_taken_once() {
    let mem = region(1024);
    let view = RingView::new(&mem, LAYOUT).unwrap();
    view.set_arm(ARM_NEXT);
    assert_eq!(view.take_arm(), ARM_NEXT);
    assert_eq!(view.take_arm(), ARM_NONE);
}

#[test]
fn session_page_flag_is_the_low_u32_of_word_zero() {
    let mem = region(4096);
    let page = SessionPage::new(&mem).unwrap();
    page.set_sleeping(true);
    assert_eq!(mem[0].load(Ordering::Relaxed), 1);
    assert!(page.sleeping());
    page.set_sleeping(false);
    assert!(!page.sleeping());
}

#[test]
fn two_rings_share_one_memfd_at_their_offsets() {
    let sq = RingLayout {
        offset: 0,
        entries: 2,
        slot_size: 128,
    };
    let rq = RingLayout {
        offset: sq.end(),
        entries: 2,
        slot_size: 64,
    };
    let mem = region(rq.end() as usize);
    let mut psq = Producer::new(RingView::new(&mem, sq).unwrap());
    let mut prq = Producer::new(RingView::new(&mem, rq).unwrap());
    psq.push(&[1; 128]).unwrap();
    prq.push(&[2; 64]).unwrap();
    let mut buf = [0u8; 128];
    assert!(Consumer::new(RingView::new(&mem, sq).unwrap())
        .pop(&mut buf)
        .unwrap());
    assert_eq!(buf, [1; 128]);
    assert!(Consumer::new(RingView::new(&mem, rq).unwrap())
        .pop(&mut buf)
        .unwrap());
    assert_eq!(&buf[..64], &[2; 64]);
}

#[test]
fn threads_pass_every_slot_in_order() {
    let mem = region(4096);
    let layout = RingLayout {
        offset: 0,
        entries: 8,
        slot_size: 64,
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut p = Producer::new(RingView::new(&mem, layout).unwrap());
            for i in 0..10_000u64 {
                while p.push(&i.to_le_bytes()) == Err(RingError::Full) {
                    std::hint::spin_loop();
                }
            }
        });
        let mut c = Consumer::new(RingView::new(&mem, layout).unwrap());
        let mut buf = [0u8; 64];
        for i in 0..10_000u64 {
            while !c.pop(&mut buf).unwrap() {
                std::hint::spin_loop();
            }
            assert_eq!(u64::from_le_bytes(buf[..8].try_into().unwrap()), i);
        }
    });
}

proptest! {
    #[test]
    fn any_shared_index_values_never_panic(prod in any::<u64>(), cons in any::<u64>(), mine in any::<u64>()) {
        let mem = region(1024);
        let view = RingView::new(&mem, LAYOUT).unwrap();
        mem[0].store(prod, Ordering::Relaxed);
        mem[8].store(cons, Ordering::Relaxed);
        let mut c = Consumer::with_index(view, mine);
        let mut buf = [0u8; 64];
        let _ = c.pop(&mut buf);
        let mut p = Producer::with_index(view, mine);
        let _ = p.push(&[1, 2, 3]);
    }
}

#[test]
fn taken_slots_stay_the_consumers_until_released() {
    let mem = region(LAYOUT.end() as usize);
    let view = RingView::new(&mem, LAYOUT).unwrap();
    let mut p = Producer::new(view);
    for i in 0..4u8 {
        p.push(&[i; 64]).unwrap();
    }
    let mut c = Consumer::new(view);
    let mut buf = [0u8; 64];
    for _ in 0..4 {
        assert!(c.peek(&mut buf).unwrap());
        c.take();
    }
    // All four read, none released: the producer still sees a full ring.
    assert_eq!(c.index(), 4);
    assert_eq!(p.free().unwrap(), 0);
    assert_eq!(p.push(&[9; 64]), Err(RingError::Full));
    c.release_to(1);
    assert_eq!(p.free().unwrap(), 1);
    // Past what was consumed, or a whole ring behind it: the private index instead.
    c.release_to(99);
    assert_eq!(view.consumer_index(), 4);
    c.release_to(u64::MAX);
    assert_eq!(view.consumer_index(), 4);
    assert_eq!(p.free().unwrap(), 4);
}

#[test]
fn discard_keeps_the_other_slots_in_order_and_frees_the_dropped() {
    let mem = region(1024);
    let view = RingView::new(&mem, LAYOUT).unwrap();
    let mut p = Producer::new(view);
    let mut c = Consumer::new(view);
    let mut buf = [0u8; 64];
    // Wrap the ring once so the kept slots cross the end.
    for b in [9u8, 9] {
        p.push(&[b]).unwrap();
        assert!(c.pop(&mut buf).unwrap());
    }
    for b in [1u8, 7, 2, 7] {
        p.push(&[b]).unwrap();
    }
    assert_eq!(p.free(), Ok(0));
    assert_eq!(c.discard(&mut buf, |s| s[0] == 7), Ok(2));
    // The consumer index moved past the two freed slots: the producer may reuse them.
    assert_eq!(view.consumer_index(), 4);
    assert_eq!(p.free(), Ok(2));
    p.push(&[3]).unwrap();
    let mut got = Vec::new();
    while c.pop(&mut buf).unwrap() {
        got.push(buf[0]);
    }
    assert_eq!(got, [1, 2, 3]);
    assert_eq!(c.discard(&mut buf, |_| true), Ok(0));
    assert_eq!(c.discard(&mut [0u8; 8], |_| true), Err(RingError::SlotSize));
}
