use super::*;
use proptest::prelude::*;

fn sample_requests() -> Vec<Request> {
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let mut attr = QpAttr {
        qp_state: 2,
        path_mtu: 3,
        dest_qp_num: 0x11,
        rq_psn: 7,
        ..QpAttr::default()
    };
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];
    let bodies = vec![
        RequestBody::Hello {
            version: 1,
            pid: 42,
        },
        RequestBody::OpenDevice {
            name: "rxe0".into(),
        },
        RequestBody::RegMr {
            pd: Handle(3),
            addr: u64::MAX,
            length: 4096,
            iova: 0,
            access: 7,
            shared: vec![SharedPages {
                addr: 0x7f00_0000_1000,
                len: 8192,
                offset: 4096,
            }],
        },
        RequestBody::AdviseMr {
            pd: Handle(3),
            advice: 1,
            flags: 1,
            sg_list: vec![AdviseRange {
                addr: u64::MAX - 1,
                length: u32::MAX,
                lkey: 0x1234_5601,
            }],
        },
        RequestBody::CreateCq {
            ctx: Handle(1),
            cqe: 100,
            channel: Some(Handle(9)),
            comp_vector: 0,
            timestamps: true,
        },
        RequestBody::CreateQp {
            pd: Handle(3),
            init: QpInitAttr {
                send_cq: Handle(4),
                recv_cq: Handle(4),
                srq: None,
                cap,
                qp_type: 2,
                sq_sig_all: false,
            },
        },
        RequestBody::ModifyQp {
            qp: Handle(5),
            attr,
            mask: 0x1_2345,
        },
        RequestBody::Stat {
            device: None,
            qpn: Some(17),
        },
        RequestBody::LinkAdd {
            name: "rxe1".into(),
            link_type: "rxe".into(),
            netdev: "eth0".into(),
            mpa_crc: None,
            mpa_markers: None,
            backend: Some("packet".into()),
            default_tos: Some(96),
            cnp_dscp: Some(48),
            addrs: None,
        },
        RequestBody::LinkAdd {
            name: "siw1".into(),
            link_type: "siw".into(),
            netdev: "eth0".into(),
            mpa_crc: Some(true),
            mpa_markers: Some(false),
            backend: Some("smoltcp".into()),
            default_tos: None,
            cnp_dscp: None,
            addrs: Some(vec![
                "10.0.0.11".parse().unwrap(),
                "fd00::11".parse().unwrap(),
            ]),
        },
        RequestBody::AttachMcast {
            qp: Handle(5),
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3],
            lid: 0,
        },
        RequestBody::DetachMcast {
            qp: Handle(5),
            gid: [0xff; 16],
            lid: 0xffff,
        },
    ];
    bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| Request {
            seq: i as u64 * 1000,
            body,
        })
        .collect()
}

#[test]
fn requests_round_trip_through_postcard() {
    for req in sample_requests() {
        let bytes = req.encode().expect("encodes");
        assert_eq!(Request::decode(&bytes), Ok(req.clone()));
        assert_eq!(Request::decode_seq(&bytes), Some(req.seq));
    }
}

#[test]
fn replies_round_trip_including_errno() {
    let ring = RingLayout {
        offset: 0,
        entries: 64,
        slot_size: 128,
    };
    let replies = vec![
        Reply {
            seq: 1,
            result: Err(22),
        },
        Reply {
            seq: 2,
            result: Ok(ReplyBody::Ok),
        },
        Reply {
            seq: 3,
            result: Ok(ReplyBody::Cq {
                handle: Handle(8),
                cqe: 127,
                ring,
            }),
        },
        Reply {
            seq: 4,
            result: Ok(ReplyBody::Qp {
                handle: Handle(9),
                qpn: 17,
                cap: QpCap::default(),
                sq: ring,
                rq: None,
            }),
        },
        Reply {
            seq: 5,
            result: Ok(ReplyBody::DeviceOpened {
                ctx: Handle(1),
                device_attr: DeviceAttr {
                    fw_ver: "0.1".into(),
                    max_qp_wr: 1 << 20,
                    ..DeviceAttr::default()
                },
                ports: vec![PortAttr {
                    state: 4,
                    active_mtu: 3,
                    ..PortAttr::default()
                }],
                gids: vec![GidEntry {
                    index: 0,
                    port_num: 1,
                    gid: [0xfe; 16],
                    gid_type: 2,
                }],
            }),
        },
    ];
    for reply in replies {
        let bytes = reply.encode().expect("encodes");
        assert_eq!(Reply::decode(&bytes), Ok(reply));
    }
}

#[test]
fn oversized_message_is_refused_by_the_encoder() {
    let req = Request {
        seq: 0,
        body: RequestBody::OpenDevice {
            name: "x".repeat(70_000),
        },
    };
    assert!(matches!(req.encode(), Err(EncodeError::TooLong(_))));
}

proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Request::decode(&bytes);
        let _ = Request::decode_seq(&bytes);
        let _ = Reply::decode(&bytes);
    }

    #[test]
    fn truncated_valid_requests_are_rejected_not_misread(cut in 0usize..64) {
        for req in sample_requests() {
            let bytes = req.encode().unwrap();
            if cut < bytes.len() {
                let decoded = Request::decode(&bytes[..cut]);
                prop_assert!(decoded.is_err() || decoded == Ok(req.clone()));
            }
        }
    }
}
