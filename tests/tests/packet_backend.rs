//! The AF_PACKET backend (`rdma-emu link add … backend packet`): the daemon writes the
//! Ethernet, IP and UDP headers itself. Two namespaces joined by veth, a daemon in each
//! whose `rxe0` is re-added on the packet backend, run the ibverbs pingpongs and perftest
//! unmodified; a capture on the veth passes tshark and `rdma-emu decode` and shows the
//! header fields the backend promises; a packet device and a UDP device interoperate; the
//! backend works on `lo`; without CAP_NET_RAW the device is refused with the reason.
//! Every test needs root (namespaces, CAP_NET_RAW) and says so when it cannot run.
use rdma_emu_tests::two_host::*;
use rdma_emu_tests::*;
use std::time::Duration;

/// Replaces the daemon's `rxe0` (UDP backend) on `iface` with one on the packet backend,
/// and checks that `link show` says so.
fn move_to_packet(d: &Daemon, ns: Option<&Netns>, iface: &str) {
    move_to(d, ns, iface, "packet");
}

/// Two hosts whose daemons serve `rxe0` on the veth; `packet_a` / `packet_b` put that
/// side on the packet backend (else it stays on UDP).
fn hosts(packet_a: bool, packet_b: bool) -> Option<(TwoHosts, Daemon, Daemon)> {
    let backend = |packet| if packet { "packet" } else { "udp" };
    two_host::hosts(backend(packet_a), backend(packet_b))
}

#[test]
fn pingpongs_run_over_the_packet_backend_between_two_hosts() {
    let _s = serial();
    pingpongs_between("packet");
}

#[test]
fn perftest_runs_over_the_packet_backend_between_two_hosts() {
    let _s = serial();
    perftest_between("packet");
}

/// RoCE over IPv6: frames with the UDP checksum IPv6 requires, next hops from neighbour
/// discovery, link-local sources scoped to the interface.
#[test]
fn rc_pingpong_runs_over_ipv6_link_local_gids_on_the_packet_backend() {
    let _s = serial();
    ipv6_link_local_pingpong("packet");
}

/// One side on UDP, the other on the packet backend: both directions work, and the UDP
/// side's core accepts the packet side's nonzero IP IDs by solving for them (the kernel
/// socket does not show them), which proves they were sent.
#[test]
fn a_packet_device_and_a_udp_device_interoperate() {
    let _s = serial();
    interoperates_with_udp("packet");
}

/// With the neighbour tables flushed and no TCP between the hosts (RDMA CM only), the
/// first frame the client's daemon sends has no next-hop MAC: the daemon asks the kernel
/// to resolve it, waits, and sends; nothing is lost for want of a neighbour.
#[test]
fn rping_resolves_the_next_hop_through_the_kernel() {
    let _s = serial();
    if missing(&["rping"]) {
        return;
    }
    let Some((net, da, db)) = hosts(true, true) else {
        return;
    };
    for ns in [&net.a, &net.b] {
        sh(&format!("ip -n {} neigh flush all", ns.name)).expect("neigh flush");
    }
    let srv = da.program(
        Some(&net.a),
        &["rping", "-s", "-a", &net.addr_a, "-p", "7175", "-C", "10"],
    );
    assert!(
        wait_cm_listening(&da, Some(&net.a), 7175, Duration::from_secs(20)),
        "rping never listened"
    );
    let c = db
        .program(
            Some(&net.b),
            &[
                "rping",
                "-c",
                "-a",
                &net.addr_a,
                "-p",
                "7175",
                "-C",
                "10",
                "-V",
            ],
        )
        .wait(Duration::from_secs(60));
    let s = srv.wait(Duration::from_secs(30));
    c.assert_success();
    s.assert_success();
    assert!(db.counter(Some(&net.b), "rxe0", "packet_neigh_resolved") >= 1);
    for (d, ns) in [(&da, &net.a), (&db, &net.b)] {
        assert_eq!(d.counter(Some(ns), "rxe0", "packet_tx_no_neighbour"), 0);
    }
}

/// Frames corrupted on the way (`fault … corrupt` on the sender) are caught by the
/// receiving packet backend's ICRC check over the real headers, never reach the core,
/// and the connection recovers by retransmission.
#[test]
fn corrupted_frames_are_dropped_by_the_packet_backend_icrc_check() {
    let _s = serial();
    corrupted_frames_are_caught("packet");
}

/// The ECN field is read from each frame's real IP header: a netdev ingress rule in the
/// receiver's namespace marks 5% of the arriving RoCE frames Congestion Experienced
/// before the packet socket sees them (nftables' postrouting hook never sees frames a
/// packet socket sends), and the receiver answers with CNPs that reach the sender.
#[test]
fn congestion_experienced_frames_are_answered_with_cnps_on_the_packet_backend() {
    let _s = serial();
    ce_marks_are_answered_with_cnps("packet", "packet", "ingress");
}

#[test]
fn packet_backend_frames_on_the_veth_dissect_verify_and_carry_the_promised_header() {
    let _s = serial();
    capture_shows_the_promised_header("packet", "packet");
}

/// On `lo` (no neighbours: all-zero MACs) with the local path off, so that one daemon's
/// QPs talk through the packet socket.
#[test]
fn packet_backend_serves_loopback() {
    let _s = serial();
    if missing(&["ibv_rc_pingpong"]) {
        return;
    }
    let Some(ns) = loopback_ns("packet-lo", false) else {
        return;
    };
    let d = Daemon::start_with(Some(&ns), &["--local-path", "off"]);
    move_to_packet(&d, Some(&ns), "lo");
    let gid = d.ipv4_gid_index(Some(&ns));
    let port = PORT.to_string();
    let server = ["ibv_rc_pingpong", "-d", "rxe0", "-g", &gid, "-p", &port];
    let mut client = server.to_vec();
    client.push("127.0.0.1");
    let (s, c) = run_pair(&d, Some(&ns), &server, &d, Some(&ns), &client, PORT, LIMIT);
    s.assert_success();
    c.assert_success();
    assert!(d.counter(Some(&ns), "rxe0", "udp_rx_datagrams") > 1000);
    assert_eq!(d.counter(Some(&ns), "rxe0", "packet_rx_icrc_errors"), 0);
}

/// Without CAP_NET_RAW the device is refused, and both the CLI and the daemon's log say
/// why and what to use instead; the UDP backend still works for the same daemon.
#[test]
fn packet_backend_without_cap_net_raw_is_refused_with_the_reason() {
    let _s = serial();
    let Some((ns, d)) = refused_without_capability("packet", "-net_raw", "CAP_NET_RAW") else {
        return;
    };
    // AF_XDP sockets need CAP_NET_RAW too.
    let xdp = link_add(&d, Some(&ns), "lo", "xdp");
    assert!(
        !xdp.success() && xdp.stderr.contains("CAP_NET_RAW"),
        "{}",
        xdp.stderr
    );
    link_add(&d, Some(&ns), "lo", "udp").assert_success();
}
