use super::*;
use proptest::prelude::*;

#[test]
fn slot_sizes_follow_the_contract() {
    assert_eq!(send_slot_size(1, 0), Some(128));
    assert_eq!(send_slot_size(32, 512), Some(576));
    assert_eq!(send_slot_size(2, 100), Some(192));
    assert_eq!(recv_slot_size(1), Some(64));
    assert_eq!(recv_slot_size(4), Some(128));
    assert_eq!(send_slot_size(u32::MAX, 0), None);
}

#[test]
fn send_wqe_fields_sit_at_their_offsets() {
    let sges = [Sge {
        addr: 0x1122,
        length: 7,
        lkey: 0xabcd,
    }];
    let repr = SendWqeRepr {
        wr_id: 0x0102_0304_0506_0708,
        opcode: 4,
        send_flags: send_flags::SIGNALED,
        imm_data: 0xdead_beef,
        remote_addr: 0x7fff_0000,
        rkey: 0x55,
        remote_qpn: 0x12,
        compare_add: 1,
        swap: 2,
        ah: 3,
        remote_qkey: 0x1111_1111,
        data: SendData::Sges(SgeList::Slice(&sges)),
    };
    let mut buf = [0u8; 128];
    repr.emit(&mut buf).unwrap();
    assert_eq!(buf[0..8], 0x0102_0304_0506_0708u64.to_le_bytes());
    assert_eq!(buf[8], 4);
    assert_eq!(buf[9], 1);
    assert_eq!(buf[12..16], 2u32.to_le_bytes());
    assert_eq!(buf[24..32], 0x7fff_0000u64.to_le_bytes());
    assert_eq!(buf[64..72], 0x1122u64.to_le_bytes());
    assert_eq!(buf[76..80], 0xabcdu32.to_le_bytes());
}

/// The CQE table in [`CQE_LEN`]'s documentation, field by field: the shim reads what the
/// daemon writes at these offsets.
#[test]
fn cqe_fields_sit_at_their_documented_offsets() {
    let repr = CqeRepr {
        wr_id: 0x0102_0304_0506_0708,
        status: 5,
        opcode: 0x80,
        vendor_err: 22,
        byte_len: 4096,
        imm_data: 0xdead_beef,
        qp_num: 0x11,
        src_qp: 0x22,
        wc_flags: 0x3,
        pkey_index: 0x44,
        slid: 0x55,
        sl: 6,
        dlid_path_bits: 7,
        completion_ts: 0x1111_2222_3333_4444,
        completion_wallclock_ns: 0x1800_0000_0000_0001,
    };
    let mut buf = [0xffu8; CQE_LEN];
    repr.emit(&mut buf).unwrap();
    assert_eq!(buf[0..8], 0x0102_0304_0506_0708u64.to_le_bytes());
    assert_eq!(buf[8..12], 5u32.to_le_bytes());
    assert_eq!(buf[12..16], 0x80u32.to_le_bytes());
    assert_eq!(buf[16..20], 22u32.to_le_bytes());
    assert_eq!(buf[20..24], 4096u32.to_le_bytes());
    assert_eq!(buf[24..28], 0xdead_beefu32.to_le_bytes());
    assert_eq!(buf[28..32], 0x11u32.to_le_bytes());
    assert_eq!(buf[32..36], 0x22u32.to_le_bytes());
    assert_eq!(buf[36..40], 3u32.to_le_bytes());
    assert_eq!(buf[40..42], 0x44u16.to_le_bytes());
    assert_eq!(buf[42..44], 0x55u16.to_le_bytes());
    assert_eq!((buf[44], buf[45]), (6, 7));
    assert_eq!(buf[46..48], [0, 0]);
    assert_eq!(buf[48..56], 0x1111_2222_3333_4444u64.to_le_bytes());
    assert_eq!(buf[56..64], 0x1800_0000_0000_0001u64.to_le_bytes());
    let view = Cqe::new_checked(&buf[..]).unwrap();
    assert_eq!(view.completion_ts(), repr.completion_ts);
    assert_eq!(view.completion_wallclock_ns(), repr.completion_wallclock_ns);
    // One tick a nanosecond, every bit counted: what query_device_ex reports.
    assert_eq!((CQE_CLOCK_KHZ, CQE_TIMESTAMP_MASK), (1_000_000, u64::MAX));
}

#[test]
fn inline_length_past_the_slot_is_an_overrun() {
    let mut buf = [0u8; 128];
    buf[12] = send_flags::INLINE as u8;
    buf[20..24].copy_from_slice(&65u32.to_le_bytes());
    let wqe = SendWqe::new_checked(&buf[..]).unwrap();
    assert_eq!(SendWqeRepr::parse(&wqe), Err(SlotError::Overrun));
    buf[12] = 0;
    buf[9] = 5;
    let wqe = SendWqe::new_checked(&buf[..]).unwrap();
    assert_eq!(SendWqeRepr::parse(&wqe), Err(SlotError::Overrun));
}

#[test]
fn recv_wqe_with_wild_num_sge_is_an_overrun() {
    let mut buf = [0u8; 64];
    buf[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    let wqe = RecvWqe::new_checked(&buf[..]).unwrap();
    assert_eq!(RecvWqeRepr::parse(&wqe), Err(SlotError::Overrun));
}

fn sge() -> impl Strategy<Value = Sge> {
    (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(addr, length, lkey)| Sge {
        addr,
        length,
        lkey,
    })
}

proptest! {
    #[test]
    fn send_wqe_round_trips(
        wr_id in any::<u64>(), opcode in any::<u8>(), flags in any::<u32>(), imm in any::<u32>(),
        remote_addr in any::<u64>(), rkey in any::<u32>(), qpn in any::<u32>(), ca in any::<u64>(),
        swap in any::<u64>(), ah in any::<u32>(), qkey in any::<u32>(),
        sges in proptest::collection::vec(sge(), 0..32),
        inline in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..512)),
    ) {
        let (data, flags) = match &inline {
            Some(d) => (SendData::Inline(d), flags | send_flags::INLINE),
            None => (SendData::Sges(SgeList::Slice(&sges)), flags & !send_flags::INLINE),
        };
        let repr = SendWqeRepr { wr_id, opcode, send_flags: flags, imm_data: imm, remote_addr, rkey,
            remote_qpn: qpn, compare_add: ca, swap, ah, remote_qkey: qkey, data };
        let mut buf = vec![0u8; send_slot_size(32, 512).unwrap() as usize];
        repr.emit(&mut buf).unwrap();
        let wqe = SendWqe::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(SendWqeRepr::parse(&wqe).unwrap(), repr);
    }

    #[test]
    fn recv_wqe_round_trips(wr_id in any::<u64>(), sges in proptest::collection::vec(sge(), 0..32)) {
        let repr = RecvWqeRepr { wr_id, sg_list: SgeList::Slice(&sges) };
        let mut buf = vec![0u8; recv_slot_size(32).unwrap() as usize];
        repr.emit(&mut buf).unwrap();
        let wqe = RecvWqe::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(RecvWqeRepr::parse(&wqe).unwrap(), repr);
    }

    #[test]
    fn cqe_round_trips(wr_id in any::<u64>(), a in any::<[u32; 8]>(), pk in any::<u16>(), slid in any::<u16>(), sl in any::<u8>(), dp in any::<u8>(), ts in any::<[u64; 2]>()) {
        let repr = CqeRepr { wr_id, status: a[0], opcode: a[1], vendor_err: a[2], byte_len: a[3], imm_data: a[4],
            qp_num: a[5], src_qp: a[6], wc_flags: a[7], pkey_index: pk, slid, sl, dlid_path_bits: dp,
            completion_ts: ts[0], completion_wallclock_ns: ts[1] };
        let mut buf = [0xffu8; CQE_LEN];
        repr.emit(&mut buf).unwrap();
        prop_assert!(buf[46..48].iter().all(|&b| b == 0));
        prop_assert_eq!(&buf[48..56], &ts[0].to_le_bytes()[..]);
        prop_assert_eq!(&buf[56..64], &ts[1].to_le_bytes()[..]);
        prop_assert_eq!(CqeRepr::parse(&Cqe::new_checked(&buf[..]).unwrap()).unwrap(), repr);
    }

    #[test]
    fn parsing_any_slot_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(w) = SendWqe::new_checked(&bytes[..]) {
            if let Ok(r) = SendWqeRepr::parse(&w) {
                if let SendData::Sges(s) = r.data { let _ = s.iter().count(); }
            }
        }
        if let Ok(w) = RecvWqe::new_checked(&bytes[..]) {
            let _ = RecvWqeRepr::parse(&w);
        }
        if let Ok(c) = Cqe::new_checked(&bytes[..]) {
            let _ = CqeRepr::parse(&c);
        }
    }
}
