//! The shim against a scripted daemon speaking wire::client: device discovery, open,
//! queries, object creation, and the ring data path (a posted send appears in the SQ
//! ring as a WQE; a CQE written into the CQ ring comes out of `ibv_poll_cq`).
//!
//! One test function: the shim keeps one daemon session per process.
mod mock;

use mock::*;
use std::sync::{Arc, Mutex};
use verbs_shim::abi::*;
use verbs_shim::cq::*;
use verbs_shim::device::*;
use verbs_shim::mmap::Mapping;
use verbs_shim::qp::*;
use verbs_shim::verbs::*;
use wire::client::slot::{CqeRepr, SendData, SendWqe, SendWqeRepr, Sge};
use wire::client::{
    ring, AsyncEventRecord, CompEventRecord, Consumer, Handle, Producer, RingLayout, RingView,
};

#[test]
fn verbs_reach_the_daemon_and_the_data_path_uses_the_rings() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("mock-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = listen(&path);
    let rings = Arc::new(Mutex::new(Rings::default()));
    let r2 = rings.clone();
    std::thread::spawn(move || serve(accept(&listener), r2));
    std::env::set_var("RDMA_EMU_SOCKET", &path);

    // Discovery and open.
    let mut n = 0;
    let list = ibv_get_device_list(&mut n);
    assert_eq!(n, 1);
    // SAFETY: the list has n entries plus NULL.
    let dev = unsafe { *list };
    // SAFETY: a NUL-terminated name.
    let name = unsafe { std::ffi::CStr::from_ptr(ibv_get_device_name(dev)) };
    assert_eq!(name.to_str().unwrap(), "rxe0");
    assert_eq!(ibv_get_device_guid(dev), 0x0200_00ff_fe00_0001u64.to_be());
    let ctx = ibv_open_device(dev);
    assert!(!ctx.is_null());
    ibv_free_device_list(list);

    // rdma-core's inline helpers find the extended ops through verbs_context.
    // SAFETY: ctx is live.
    unsafe {
        assert_eq!((*ctx).abi_compat, VERBS_ABI_IS_EXTENDED);
        let vctx = (ctx as *mut u8).sub(std::mem::offset_of!(verbs_context, context))
            as *const verbs_context;
        assert_eq!((*vctx).sz, std::mem::size_of::<verbs_context>());
        let mut pa = ibv_port_attr::default();
        let q = (*vctx).query_port.expect("query_port");
        assert_eq!(q(ctx, 1, &mut pa, std::mem::size_of::<ibv_port_attr>()), 0);
        assert_eq!((pa.state, pa.link_layer, pa.gid_tbl_len), (4, 2, 4));
        assert_eq!(
            q(ctx, 2, &mut pa, std::mem::size_of::<ibv_port_attr>()),
            libc::EINVAL
        );
    }
    // SAFETY: all-zero is valid for the plain struct.
    let mut da: ibv_device_attr = unsafe { std::mem::zeroed() };
    assert_eq!(ibv_query_device(ctx, &mut da), 0);
    assert_eq!(
        (da.vendor_id, da.phys_port_cnt, da.max_sge),
        (0xffffff, 1, 32)
    );
    let mut gid = ibv_gid::default();
    assert_eq!(ibv_query_gid(ctx, 1, 0, &mut gid), 0);
    assert_eq!(gid.raw, GID);
    assert_eq!(
        ibv_query_gid(ctx, 1, 1, &mut gid),
        0,
        "empty entries read as zero"
    );
    assert_eq!(gid.raw, [0; 16]);
    assert_eq!(ibv_query_gid(ctx, 1, 4, &mut gid), -1, "past gid_tbl_len");
    let mut t = -1;
    assert_eq!(ibv_query_gid_type(ctx, 1, 0, &mut t), 0);
    assert_eq!(t, 1, "IBV_GID_TYPE_SYSFS_ROCE_V2");
    let mut entry = ibv_gid_entry::default();
    assert_eq!(
        _ibv_query_gid_ex(
            ctx,
            1,
            0,
            &mut entry,
            0,
            std::mem::size_of::<ibv_gid_entry>()
        ),
        0
    );
    assert_eq!((entry.gid_type, entry.port_num), (IBV_GID_TYPE_ROCE_V2, 1));
    assert_eq!(
        _ibv_query_gid_ex(
            ctx,
            1,
            2,
            &mut entry,
            0,
            std::mem::size_of::<ibv_gid_entry>()
        ),
        libc::ENODATA
    );

    // Objects.
    let pd = ibv_alloc_pd(ctx);
    assert!(!pd.is_null());
    let mut buf = vec![0u8; 4096];
    let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 7);
    assert!(!mr.is_null());
    // SAFETY: mr is live.
    assert_eq!(unsafe { ((*mr).lkey, (*mr).rkey) }, (0x100, 0x200));
    let cq = ibv_create_cq(ctx, 16, std::ptr::null_mut(), std::ptr::null_mut(), 0);
    assert!(!cq.is_null());
    // SAFETY: all-zero then filled; pointers are live objects.
    let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 2,
        max_inline_data: 64,
    };
    let qp = ibv_create_qp(pd, &mut init);
    assert!(!qp.is_null());
    // SAFETY: qp is live.
    assert_eq!(unsafe { (*qp).qp_num }, 17);
    assert!(
        ibv_qp_to_qp_ex(qp).is_null(),
        "not created with send ops flags"
    );

    // A posted send becomes one WQE in the SQ ring.
    let mut sges = [
        ibv_sge {
            addr: buf.as_ptr() as u64,
            length: 100,
            lkey: 0x100,
        },
        ibv_sge {
            addr: buf.as_ptr() as u64 + 100,
            length: 28,
            lkey: 0x100,
        },
    ];
    // SAFETY: all-zero is valid for the WR (NULL pointers, zero union).
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = 0xabc;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = 2; // IBV_SEND_SIGNALED
    wr.num_sge = 2;
    wr.sg_list = sges.as_mut_ptr();
    let mut bad = std::ptr::null_mut();
    // A QP in RESET refuses posts with EINVAL, as librxe (the mock moves it unchecked).
    // SAFETY: ops were installed by open_device; arguments are live.
    let rc = unsafe { ((*ctx).ops.post_send.unwrap())(qp, &mut wr, &mut bad) };
    assert_eq!(rc, libc::EINVAL);
    // SAFETY: all-zero is a valid ibv_qp_attr.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = wire::client::verbs::qp_state::RTS as _;
    assert_eq!(
        ibv_modify_qp(qp, &mut attr, wire::client::verbs::qp_attr_mask::STATE as _),
        0
    );
    // SAFETY: as above.
    let rc = unsafe { ((*ctx).ops.post_send.unwrap())(qp, &mut wr, &mut bad) };
    assert_eq!(rc, 0);
    let qp_fd = rings.lock().unwrap().qp.take().expect("qp ring");
    let qp_map = Mapping::map(&qp_fd, 8192).unwrap();
    let mut consumer = Consumer::new(RingView::new(qp_map.words(), SQ_RING).unwrap());
    let mut slot = [0u8; 128];
    assert!(consumer.pop(&mut slot).unwrap());
    let view = SendWqe::new_checked(&slot[..]).unwrap();
    let wqe = SendWqeRepr::parse(&view).unwrap();
    assert_eq!((wqe.wr_id, wqe.opcode), (0xabc, 2));
    match wqe.data {
        SendData::Sges(list) => assert_eq!(
            list.iter().collect::<Vec<_>>(),
            vec![
                Sge {
                    addr: buf.as_ptr() as u64,
                    length: 100,
                    lkey: 0x100
                },
                Sge {
                    addr: buf.as_ptr() as u64 + 100,
                    length: 28,
                    lkey: 0x100
                }
            ]
        ),
        other => panic!("expected SGEs, got {other:?}"),
    }
    // Receives: a chain of two WRs becomes two RQ WQEs.
    let mut rsge = [ibv_sge {
        addr: buf.as_ptr() as u64 + 512,
        length: 256,
        lkey: 0x100,
    }];
    // SAFETY: all-zero is valid for the WR.
    let mut r2: ibv_recv_wr = unsafe { std::mem::zeroed() };
    r2.wr_id = 2;
    r2.num_sge = 1;
    r2.sg_list = rsge.as_mut_ptr();
    let mut r1 = r2;
    r1.wr_id = 1;
    r1.next = &mut r2;
    let mut bad_r = std::ptr::null_mut();
    // SAFETY: ops installed; the WR chain is live.
    assert_eq!(
        unsafe { ((*ctx).ops.post_recv.unwrap())(qp, &mut r1, &mut bad_r) },
        0
    );
    let rq_layout = RingLayout {
        offset: 4096,
        entries: 16,
        slot_size: 64,
    };
    let mut rq = Consumer::new(RingView::new(qp_map.words(), rq_layout).unwrap());
    for id in [1u64, 2] {
        let mut rslot = [0u8; 64];
        assert!(rq.pop(&mut rslot).unwrap());
        let view = wire::client::slot::RecvWqe::new_checked(&rslot[..]).unwrap();
        let wqe = wire::client::slot::RecvWqeRepr::parse(&view).unwrap();
        assert_eq!(wqe.wr_id, id);
        assert_eq!(
            wqe.sg_list.iter().collect::<Vec<_>>(),
            vec![Sge {
                addr: buf.as_ptr() as u64 + 512,
                length: 256,
                lkey: 0x100
            }]
        );
    }
    assert!(!rq.pop(&mut [0u8; 64]).unwrap());

    // Inline data is copied into the WQE at post time.
    buf[..4].copy_from_slice(b"ping");
    let mut isge = [ibv_sge {
        addr: buf.as_ptr() as u64,
        length: 4,
        lkey: 0,
    }];
    // SAFETY: all-zero is valid for the WR.
    let mut iw: ibv_send_wr = unsafe { std::mem::zeroed() };
    iw.wr_id = 9;
    iw.opcode = IBV_WR_SEND;
    iw.send_flags = IBV_SEND_INLINE;
    iw.num_sge = 1;
    iw.sg_list = isge.as_mut_ptr();
    // SAFETY: as above.
    assert_eq!(
        unsafe { ((*ctx).ops.post_send.unwrap())(qp, &mut iw, &mut bad) },
        0
    );
    buf[..4].copy_from_slice(b"XXXX");
    assert!(consumer.pop(&mut slot).unwrap());
    let view = SendWqe::new_checked(&slot[..]).unwrap();
    assert_eq!(
        SendWqeRepr::parse(&view).unwrap().data,
        SendData::Inline(b"ping")
    );

    // Too many SGEs: EINVAL and bad_wr names the WR.
    wr.num_sge = 5;
    // SAFETY: as above.
    let rc = unsafe { ((*ctx).ops.post_send.unwrap())(qp, &mut wr, &mut bad) };
    assert_eq!(rc, libc::EINVAL);
    assert_eq!(bad, &mut wr as *mut ibv_send_wr);

    // A CQE the daemon writes comes out of poll_cq.
    let cq_fd = rings.lock().unwrap().cq.take().expect("cq ring");
    let cq_map = Mapping::map(&cq_fd, 4096).unwrap();
    let mut producer = Producer::new(RingView::new(cq_map.words(), CQ_RING).unwrap());
    let mut cqe = [0u8; 64];
    CqeRepr {
        wr_id: 0xabc,
        status: 0,
        opcode: 0,
        byte_len: 128,
        qp_num: 17,
        ..Default::default()
    }
    .emit(&mut cqe)
    .unwrap();
    producer.push(&cqe).unwrap();
    let mut wc = [ibv_wc::default(); 4];
    // SAFETY: ops installed; wc has 4 entries.
    let got = unsafe { ((*ctx).ops.poll_cq.unwrap())(cq, 4, wc.as_mut_ptr()) };
    assert_eq!(got, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].byte_len, wc[0].qp_num),
        (0xabc, 0, 128, 17)
    );
    // SAFETY: as above.
    assert_eq!(
        unsafe { ((*ctx).ops.poll_cq.unwrap())(cq, 4, wc.as_mut_ptr()) },
        0
    );
    // SAFETY: as above.
    assert_eq!(unsafe { ((*ctx).ops.req_notify_cq.unwrap())(cq, 0) }, 0);
    assert_eq!(
        RingView::new(cq_map.words(), CQ_RING).unwrap().arm(),
        ring::ARM_NEXT
    );

    // UD: the AH travels as its handle, with the remote QPN and Q_Key.
    // SAFETY: zeroed then filled.
    let mut ah_attr: ibv_ah_attr = unsafe { std::mem::zeroed() };
    ah_attr.is_global = 1;
    ah_attr.port_num = 1;
    ah_attr.grh.dgid = ibv_gid { raw: GID };
    let ah = ibv_create_ah(pd, &mut ah_attr);
    assert!(!ah.is_null());
    let mut ud_init = init;
    ud_init.qp_type = IBV_QPT_UD;
    let ud = ibv_create_qp(pd, &mut ud_init);
    assert!(!ud.is_null());
    assert_eq!(
        ibv_modify_qp(ud, &mut attr, wire::client::verbs::qp_attr_mask::STATE as _),
        0
    );
    let ud_fd = rings.lock().unwrap().qp.take().expect("ud ring");
    let ud_map = Mapping::map(&ud_fd, 8192).unwrap();
    // SAFETY: all-zero is valid for the WR; `ud` is the member used on UD QPs.
    let mut uw: ibv_send_wr = unsafe { std::mem::zeroed() };
    uw.wr_id = 5;
    uw.opcode = IBV_WR_SEND;
    uw.num_sge = 1;
    uw.sg_list = sges.as_mut_ptr();
    uw.wr.ud = ibv_send_wr_ud {
        ah,
        remote_qpn: 0x33,
        remote_qkey: 0x1111_1111,
    };
    // SAFETY: ops installed; arguments live.
    assert_eq!(
        unsafe { ((*ctx).ops.post_send.unwrap())(ud, &mut uw, &mut bad) },
        0
    );
    let mut udc = Consumer::new(RingView::new(ud_map.words(), SQ_RING).unwrap());
    assert!(udc.pop(&mut slot).unwrap());
    let view = SendWqe::new_checked(&slot[..]).unwrap();
    let wqe = SendWqeRepr::parse(&view).unwrap();
    assert_eq!(
        (wqe.ah, wqe.remote_qpn, wqe.remote_qkey),
        (7, 0x33, 0x1111_1111)
    );
    assert_eq!(ibv_destroy_qp(ud), 0);
    assert_eq!(ibv_destroy_ah(ah), 0);

    // SRQ: post_srq_recv fills the SRQ ring.
    // SAFETY: zeroed then filled.
    let mut srq_init: ibv_srq_init_attr = unsafe { std::mem::zeroed() };
    srq_init.attr = ibv_srq_attr {
        max_wr: 8,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq = ibv_create_srq(pd, &mut srq_init);
    assert!(!srq.is_null());
    let srq_fd = rings.lock().unwrap().srq.take().expect("srq ring");
    let srq_map = Mapping::map(&srq_fd, 4096).unwrap();
    r2.next = std::ptr::null_mut();
    // SAFETY: ops installed; the WR is live.
    assert_eq!(
        unsafe { ((*ctx).ops.post_srq_recv.unwrap())(srq, &mut r2, &mut bad_r) },
        0
    );
    let srq_layout = RingLayout {
        offset: 0,
        entries: 8,
        slot_size: 64,
    };
    let mut sc = Consumer::new(RingView::new(srq_map.words(), srq_layout).unwrap());
    let mut rslot = [0u8; 64];
    assert!(sc.pop(&mut rslot).unwrap());
    assert_eq!(
        wire::client::slot::RecvWqe::new_checked(&rslot[..])
            .unwrap()
            .wr_id(),
        2
    );
    r2.num_sge = 2;
    // SAFETY: as above.
    assert_eq!(
        unsafe { ((*ctx).ops.post_srq_recv.unwrap())(srq, &mut r2, &mut bad_r) },
        libc::EINVAL
    );
    assert_eq!(bad_r, &mut r2 as *mut ibv_recv_wr);
    assert_eq!(ibv_destroy_srq(srq), 0);

    // The ibv_wr_* API (perftest's default): WQEs reach the ring at wr_complete only.
    // SAFETY: all-zero then filled.
    let mut ex: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    ex.send_cq = cq;
    ex.recv_cq = cq;
    ex.qp_type = IBV_QPT_RC;
    ex.cap = init.cap;
    ex.pd = pd;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ex.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
    // SAFETY: ctx is live; create_qp_ex was installed by open_device.
    let qp2 = unsafe {
        let vctx = (ctx as *mut u8).sub(std::mem::offset_of!(verbs_context, context))
            as *const verbs_context;
        ((*vctx).create_qp_ex.expect("create_qp_ex"))(ctx, &mut ex)
    };
    assert!(!qp2.is_null());
    let qpx = ibv_qp_to_qp_ex(qp2);
    assert!(!qpx.is_null());
    assert_eq!(
        ibv_modify_qp(
            qp2,
            &mut attr,
            wire::client::verbs::qp_attr_mask::STATE as _
        ),
        0
    );
    let qp_fd = rings.lock().unwrap().qp.take().expect("qp ring");
    let qp2_map = Mapping::map(&qp_fd, 8192).unwrap();
    let mut consumer = Consumer::new(RingView::new(qp2_map.words(), SQ_RING).unwrap());
    // SAFETY: qpx is live and its table filled.
    unsafe {
        ((*qpx).wr_start.unwrap())(qpx);
        (*qpx).wr_id = 77;
        (*qpx).wr_flags = 2;
        ((*qpx).wr_rdma_write.unwrap())(qpx, 0x200, 0x1000);
        ((*qpx).wr_set_sge.unwrap())(qpx, 0x100, buf.as_ptr() as u64, 64);
        assert!(
            !consumer.pop(&mut slot).unwrap(),
            "nothing visible before wr_complete"
        );
        assert_eq!(((*qpx).wr_complete.unwrap())(qpx), 0);
    }
    assert!(consumer.pop(&mut slot).unwrap());
    let view = SendWqe::new_checked(&slot[..]).unwrap();
    let wqe = SendWqeRepr::parse(&view).unwrap();
    assert_eq!(
        (wqe.wr_id, wqe.opcode, wqe.rkey, wqe.remote_addr),
        (77, 0, 0x200, 0x1000)
    );
    assert_eq!(ibv_destroy_qp(qp2), 0);

    // The ibv_start_poll API over a CQ made by create_cq_ex.
    // SAFETY: all-zero then filled.
    let mut cq_attr: ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
    cq_attr.cqe = 8;
    cq_attr.wc_flags = 1 | 4; // BYTE_LEN | QP_NUM
                              // SAFETY: ctx is live; create_cq_ex was installed by open_device.
    let cqx = unsafe {
        let vctx = (ctx as *mut u8).sub(std::mem::offset_of!(verbs_context, context))
            as *const verbs_context;
        ((*vctx).create_cq_ex.expect("create_cq_ex"))(ctx, &mut cq_attr)
    };
    assert!(!cqx.is_null());
    let cq_fd = rings.lock().unwrap().cq.take().expect("cq ring");
    let layout = RingLayout {
        offset: 0,
        entries: 8,
        slot_size: 64,
    };
    let cqx_map = Mapping::map(&cq_fd, 4096).unwrap();
    let mut producer = Producer::new(RingView::new(cqx_map.words(), layout).unwrap());
    // SAFETY: cqx is live and its table filled.
    unsafe {
        let mut pa = ibv_poll_cq_attr::default();
        assert_eq!(((*cqx).start_poll.unwrap())(cqx, &mut pa), libc::ENOENT);
        for id in [1u64, 2] {
            CqeRepr {
                wr_id: id,
                byte_len: 10 * id as u32,
                qp_num: 17,
                ..Default::default()
            }
            .emit(&mut cqe)
            .unwrap();
            producer.push(&cqe).unwrap();
        }
        assert_eq!(((*cqx).start_poll.unwrap())(cqx, &mut pa), 0);
        assert_eq!(((*cqx).wr_id, (*cqx).status), (1, 0));
        assert_eq!(((*cqx).read_byte_len.unwrap())(cqx), 10);
        assert_eq!(((*cqx).next_poll.unwrap())(cqx), 0);
        assert_eq!(((*cqx).wr_id, ((*cqx).read_qp_num.unwrap())(cqx)), (2, 17));
        assert_eq!(((*cqx).next_poll.unwrap())(cqx), libc::ENOENT);
        ((*cqx).end_poll.unwrap())(cqx);
    }
    assert_eq!(ibv_destroy_cq(cqx.cast()), 0);

    // Completion channel: the daemon writes the CQ handle; ibv_get_cq_event maps it.
    let ch = ibv_create_comp_channel(ctx);
    assert!(!ch.is_null());
    let cq3 = ibv_create_cq(ctx, 4, 0x55 as *mut _, ch, 0);
    assert!(!cq3.is_null());
    let w = rings
        .lock()
        .unwrap()
        .channel_w
        .take()
        .expect("channel write end");
    // SAFETY: cq3 is live; its handle is what the daemon would name.
    let rec = CompEventRecord {
        cq: Handle(unsafe { (*cq3).handle }),
    }
    .to_bytes();
    // SAFETY: writing 8 bytes to our pipe.
    assert_eq!(
        unsafe { libc::write(std::os::fd::AsRawFd::as_raw_fd(&w), rec.as_ptr().cast(), 8) },
        8
    );
    let mut ev_cq = std::ptr::null_mut();
    let mut ev_ctx = std::ptr::null_mut();
    assert_eq!(ibv_get_cq_event(ch, &mut ev_cq, &mut ev_ctx), 0);
    assert_eq!((ev_cq, ev_ctx as usize), (cq3, 0x55));
    ibv_ack_cq_events(cq3, 1);
    // SAFETY: cq3 is live.
    assert_eq!(unsafe { (*cq3).comp_events_completed }, 1);
    assert_eq!(
        ibv_destroy_comp_channel(ch),
        libc::EBUSY,
        "a CQ still uses it"
    );
    assert_eq!(ibv_destroy_cq(cq3), 0);
    assert_eq!(ibv_destroy_comp_channel(ch), 0);

    // Async events: the element handle becomes the object pointer.
    let w = rings
        .lock()
        .unwrap()
        .async_w
        .take()
        .expect("async write end");
    // SAFETY: qp is live.
    let rec = AsyncEventRecord {
        event_type: 4,
        element: unsafe { (*qp).handle },
    }
    .to_bytes();
    // SAFETY: writing 8 bytes to our pipe.
    assert_eq!(
        unsafe { libc::write(std::os::fd::AsRawFd::as_raw_fd(&w), rec.as_ptr().cast(), 8) },
        8
    );
    // SAFETY: all-zero is valid (NULL element).
    let mut ev: ibv_async_event = unsafe { std::mem::zeroed() };
    assert_eq!(ibv_get_async_event(ctx, &mut ev), 0);
    assert_eq!((ev.event_type, ev.element), (4, qp.cast()));
    ibv_ack_async_event(&mut ev);
    // SAFETY: qp is live.
    assert_eq!(unsafe { (*qp).events_completed }, 1);

    // Teardown.
    assert_eq!(ibv_destroy_qp(qp), 0);
    assert_eq!(ibv_destroy_cq(cq), 0);
    assert_eq!(ibv_dereg_mr(mr), 0);
    assert_eq!(ibv_dealloc_pd(pd), 0);
    assert_eq!(ibv_close_device(ctx), 0);
}
