//! Tests of the udp backend: datagrams, batches, GSO/GRO, send sockets.

mod basic {
    use super::super::*;

    #[test]
    fn loopback_sockets_exchange_datagrams_with_addresses() {
        let a: IpAddr = "127.0.0.77".parse().unwrap();
        let b = UdpBackend::bind(&[a], 0, 1).unwrap();
        let local = b.socket(0).unwrap().local;
        b.send(local, local, b"hello").unwrap();
        let mut buf = [0u8; 64];
        let mut got = None;
        for _ in 0..1000 {
            got = b.recv(0, &mut buf).unwrap();
            if got.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let (n, src, dst) = got.expect("datagram arrives");
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(src, local);
        assert_eq!(dst, local);
    }
}

mod batch {
    use super::super::*;

    #[test]
    fn batches_of_datagrams_go_out_and_come_back_in_order() {
        let a: IpAddr = "127.0.0.78".parse().unwrap();
        let b = UdpBackend::bind(&[a], 0, 1).unwrap();
        let local = b.socket(0).unwrap().local;
        let payloads: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 100 + usize::from(i)]).collect();
        // Every other datagram asks for DSCP 24 (0x60); the rest leave with the default.
        let mut msgs: Vec<mmsg::Outgoing<'_>> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| mmsg::Outgoing {
                dst: local,
                traffic_class: if i % 2 == 1 { 0x60 } else { 0 },
                payload: p,
            })
            .collect();
        assert_eq!(b.send_batch(Sock::Slot(0), &mut msgs).unwrap(), 10);
        let mut batch = mmsg::RecvBatch::new(16, 2048);
        let mut got = Vec::new();
        for _ in 0..1000 {
            let (n, dst) = b.recv_batch(0, &mut batch).unwrap();
            assert!(n == 0 || dst == local);
            for i in 0..n {
                got.push((
                    batch.srcs[i],
                    batch.bufs[i][..batch.lens[i].unwrap()].to_vec(),
                    batch.tos[i],
                ));
            }
            if got.len() == 10 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got.len(), 10);
        for (i, (src, data, tos)) in got.iter().enumerate() {
            assert_eq!(*src, Some(local));
            assert_eq!(data, &payloads[i]);
            let dscp = if i % 2 == 1 { 0x60 } else { 0 };
            assert_eq!(*tos, Some(dscp | ECN_ECT0), "datagram {i}");
        }
    }
}

mod offload {
    use super::super::*;

    /// Receives until `want` packets arrived (or a generous bound passed).
    fn receive(b: &UdpBackend, want: usize) -> Vec<Vec<u8>> {
        let mut batch = mmsg::RecvBatch::new(8, 2048);
        let mut got = Vec::new();
        for _ in 0..2000 {
            let (n, _) = b.recv_batch(0, &mut batch).unwrap();
            for i in 0..n {
                got.push(batch.payload(i, batch.lens[i].unwrap()).to_vec());
            }
            if got.len() >= want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        got
    }

    #[test]
    fn a_run_of_equal_packets_leaves_as_one_gso_datagram_and_comes_back_split() {
        let a: IpAddr = "127.0.0.79".parse().unwrap();
        let b = UdpBackend::bind(&[a], 0, 1).unwrap();
        if !(b.kernel().gso.get() && b.kernel().gro) {
            eprintln!("this kernel has no UDP GSO/GRO; nothing to check");
            return;
        }
        let local = b.socket(0).unwrap().local;
        // Five full packets and a short last one, then one to itself alone (other size).
        let mut payloads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i + 1; 1000]).collect();
        payloads.push(vec![9; 300]);
        payloads.push(vec![10; 1200]);
        let mut msgs: Vec<mmsg::Outgoing<'_>> = payloads
            .iter()
            .map(|p| mmsg::Outgoing {
                dst: local,
                traffic_class: 0,
                payload: p,
            })
            .collect();
        assert_eq!(b.send_batch(Sock::Slot(0), &mut msgs).unwrap(), 7);
        let c = b.kernel().offload.get();
        assert_eq!((c.gso_datagrams, c.gso_packets), (1, 6));
        let got = receive(&b, 7);
        // Byte for byte as sent: the ICRC moved to each segment's IP ID is moved back.
        assert_eq!(got, payloads);
        let c = b.kernel().offload.get();
        assert_eq!((c.gro_datagrams, c.gro_packets), (1, 6));
    }

    #[test]
    fn congestion_experienced_counts_once_per_coalesced_datagram() {
        use crate::daemon::link::mmsg::ECN_CE;
        let ce = Some((24 << 2) | ECN_CE);
        assert_eq!(mmsg::segment_tos(ce, 0), ce);
        assert_eq!(mmsg::segment_tos(ce, 1), Some((24 << 2) | ECN_ECT0));
        assert_eq!(mmsg::segment_tos(Some(ECN_ECT0), 5), Some(ECN_ECT0));
        assert_eq!(mmsg::segment_tos(None, 3), None);
    }

    #[test]
    fn runs_break_at_another_destination_class_size_or_the_limits() {
        let d1: SocketAddr = "10.0.0.1:4791".parse().unwrap();
        let d2: SocketAddr = "10.0.0.2:4791".parse().unwrap();
        let big = [0u8; 4000];
        let small = [0u8; 100];
        let m = |dst, traffic_class, payload| mmsg::Outgoing {
            dst,
            traffic_class,
            payload,
        };
        let mut msgs = vec![m(d1, 0, &big[..]); 20];
        msgs.push(m(d1, 0, &small[..]));
        msgs.push(m(d1, 0, &small[..]));
        msgs.push(m(d2, 0, &small[..]));
        msgs.push(m(d2, 0x60, &small[..]));
        let lens: Vec<usize> = mmsg::tests_runs(&msgs).iter().map(|r| r.len()).collect();
        // 16 × 4000 fits 65507, the 17th does not; then 4 more and the short one close
        // that run; the second short one, d2, and d2 with another class stand alone.
        assert_eq!(lens, vec![16, 5, 1, 1, 1]);
    }
}

mod senders {
    use super::super::*;

    /// A free port of the hashed range on `ip`, found by binding and letting go.
    fn free_port(ip: IpAddr) -> u16 {
        (0xC000..=0xFFFFu16)
            .rev()
            .find(|&p| UdpSocket::bind(SocketAddr::new(ip, p)).is_ok())
            .expect("a free port in 0xC000..=0xFFFF")
    }

    #[test]
    fn a_send_socket_is_bound_on_first_use_kept_while_used_and_closed_when_idle() {
        let a: IpAddr = "127.0.0.80".parse().unwrap();
        let mut b = UdpBackend::bind(&[a], 0, 1).unwrap();
        let src = SocketAddr::new(a, free_port(a));
        let t0 = Instant::now();
        b.ensure_sender(src, t0);
        assert_eq!(b.senders().count(), 1);
        assert_eq!(b.socket_for(src), Some(Sock::Sender((a, src.port()))));
        // Used again just before it would be idle: kept past the first deadline.
        b.ensure_sender(src, t0 + SENDER_IDLE - Duration::from_secs(1));
        b.ensure_sender(src, t0 + SENDER_IDLE + SENDER_SWEEP);
        assert_eq!(b.senders().count(), 1, "a socket in use was closed");
        // Another port's packet after a whole idle period: the first one is closed, its
        // port free again, and the counters say so.
        let later = t0 + 2 * SENDER_IDLE + 2 * SENDER_SWEEP;
        let other = SocketAddr::new(a, free_port(a));
        b.ensure_sender(other, later);
        assert_eq!(
            b.senders().map(|s| s.local.port()).collect::<Vec<_>>(),
            vec![other.port()]
        );
        assert!(
            UdpSocket::bind(src).is_ok(),
            "the idle socket's port is still held"
        );
        let counters: HashMap<String, u64> = b.counters().into_iter().collect();
        assert_eq!(counters["udp_tx_port_sockets"], 1);
        assert_eq!(counters["udp_tx_port_sockets_closed"], 1);
        // A packet from the closed port binds it again.
        b.ensure_sender(src, later);
        assert_eq!(b.socket_for(src), Some(Sock::Sender((a, src.port()))));
    }
}
