//! The AF_XDP backend (`rdma-emu link add … backend xdp`): an XDP program on the veth
//! hands the RoCE v2 frames to the daemon's AF_XDP sockets, which writes and reads the
//! whole frames as the packet backend does. Two namespaces joined by veth, a daemon in
//! each whose `rxe0` is re-added on the xdp backend, run the ibverbs pingpongs (over IPv4
//! and IPv6 link-local GIDs) and perftest unmodified; an xdp device and a UDP device
//! interoperate, and a capture of the xdp side's frames passes tshark and `rdma-emu
//! decode` and shows the promised header; a killed daemon leaves no program attached; an
//! interface that cannot be served, or a daemon without the capabilities, is refused with
//! the reason. Every test needs root (namespaces, CAP_BPF) and says so when it cannot run.
use rdma_emu_tests::two_host::*;
use rdma_emu_tests::*;
use std::time::Duration;

/// What `ip -d link show IFACE` in `ns` says about XDP: the `prog/xdp` line, if any.
fn attached_program(ns: &Netns, iface: &str) -> Option<String> {
    let out = std::process::Command::new("ip")
        .args(["-n", &ns.name, "-d", "link", "show", iface])
        .output()
        .expect("ip link show");
    assert!(out.status.success(), "ip -d link show {iface} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("prog/xdp"))
        .map(|l| l.trim().to_string())
}

#[test]
fn pingpongs_run_over_the_xdp_backend_between_two_hosts() {
    let _s = serial();
    let Some((net, da, db)) = pingpongs_between("xdp") else {
        return;
    };
    // Through the program and the sockets: it is on both veths, and the kernel dropped
    // no frame on the way to the sockets nor refused one sent.
    for (d, ns) in [(&da, &net.a), (&db, &net.b)] {
        let prog = attached_program(ns, net.iface).expect("no XDP program on the veth");
        assert!(prog.contains("rdma_emu_roce"), "{prog}");
        assert_eq!(d.counter(Some(ns), "rxe0", "xdp_rx_dropped"), 0);
        assert_eq!(d.counter(Some(ns), "rxe0", "xdp_tx_invalid_descs"), 0);
    }
}

#[test]
fn perftest_runs_over_the_xdp_backend_between_two_hosts() {
    let _s = serial();
    if let Some(row) = perftest_between("xdp") {
        eprintln!("ib_write_bw 1 MiB over xdp: {row}");
    }
}

/// RoCE over IPv6: the program's IPv6 path, the address map following the link-local
/// address that appears after duplicate address detection, next hops from neighbour
/// discovery.
#[test]
fn rc_pingpong_runs_over_ipv6_link_local_gids_on_the_xdp_backend() {
    let _s = serial();
    ipv6_link_local_pingpong("xdp");
}

/// One side on UDP, the other on xdp: both directions work, and the UDP side's core
/// accepts the xdp side's nonzero IP IDs by solving for them, which proves the frames
/// came from the xdp side's own headers.
#[test]
fn an_xdp_device_and_a_udp_device_interoperate() {
    let _s = serial();
    interoperates_with_udp("xdp");
}

/// Frames corrupted on the way (`fault … corrupt` on the sender) are caught by the
/// receiving xdp backend's ICRC check over the real headers, never reach the core, and
/// the connection recovers by retransmission.
#[test]
fn corrupted_frames_are_dropped_by_the_xdp_backend_icrc_check() {
    let _s = serial();
    corrupted_frames_are_caught("xdp");
}

/// The ECN field is read from each frame's real IP header. The marks are set where the
/// sender's kernel sends (a netdev egress rule on the UDP side): an ingress rule on the
/// xdp side would never see the frames, which the program takes before it. The xdp side
/// answers Congestion Experienced with CNPs that reach the sender.
#[test]
fn congestion_experienced_frames_are_answered_with_cnps_on_the_xdp_backend() {
    let _s = serial();
    ce_marks_are_answered_with_cnps("xdp", "udp", "egress");
}

/// Frames an xdp device sends, captured where a UDP device receives them (a capture on
/// the xdp side sees neither direction: AF_XDP's copy-mode transmit skips the packet
/// taps, and redirected frames never reach them).
#[test]
fn xdp_backend_frames_on_the_veth_dissect_verify_and_carry_the_promised_header() {
    let _s = serial();
    capture_shows_the_promised_header("udp", "xdp");
}

/// veth runs XDP natively only up to an MTU of about 3500: at 3600 the program runs in
/// generic mode, `link show` says so, and 2048-byte RoCE MTU frames (2 KiB and more in a
/// 4 KiB UMEM frame) go through.
#[test]
fn xdp_backend_falls_back_to_generic_mode_and_carries_a_2048_mtu() {
    let _s = serial();
    if missing(&["ibv_rc_pingpong", "ib_write_bw"]) {
        return;
    }
    let Some(net) = two_hosts() else {
        return;
    };
    for ns in [&net.a, &net.b] {
        sh(&format!(
            "ip -n {} link set {} mtu 3600",
            ns.name, net.iface
        ))
        .expect("mtu 3600");
    }
    let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
    for (d, ns) in [(&da, &net.a), (&db, &net.b)] {
        move_to(d, Some(ns), net.iface, "xdp");
        let show = d.cli(Some(ns), &["link", "show"]).stdout;
        assert!(
            show.lines()
                .any(|l| l.starts_with("link rxe0/1") && l.contains("backend xdp mode generic")),
            "{show}"
        );
        assert!(show.contains("mtu 2048"), "{show}");
        let prog = attached_program(ns, net.iface).expect("no XDP program");
        assert!(prog.contains("rdma_emu_roce"), "{prog}");
    }
    pingpong(
        &net,
        &da,
        &db,
        "ibv_rc_pingpong",
        &["-m", "2048", "-s", "65536", "-n", "100"],
    );
    perftest(&net, &da, &db, "ib_write_bw", &["-s", "65536", "-n", "200"]);
    assert_clean_receive(&net, &da, &db);
    for (d, ns) in [(&da, &net.a), (&db, &net.b)] {
        assert_eq!(d.counter(Some(ns), "rxe0", "xdp_rx_dropped"), 0);
    }
}

/// The program is attached through a BPF link: when the daemon dies, even by SIGKILL,
/// the kernel detaches it, and the interface carries plain traffic again.
#[test]
fn a_killed_daemon_leaves_no_xdp_program_attached() {
    let _s = serial();
    let Some(net) = two_hosts() else {
        return;
    };
    let mut d = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    move_to(&d, Some(&net.a), net.iface, "xdp");
    let prog = attached_program(&net.a, net.iface).expect("no XDP program while serving");
    assert!(prog.contains("rdma_emu_roce"), "{prog}");
    d.kill9();
    let start = std::time::Instant::now();
    let mut left = attached_program(&net.a, net.iface);
    while left.is_some() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
        left = attached_program(&net.a, net.iface);
    }
    assert_eq!(
        left, None,
        "the killed daemon left its XDP program attached"
    );
    // A new daemon can attach again.
    let d = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    move_to(&d, Some(&net.a), net.iface, "xdp");
    // `link del` detaches too.
    d.cli(Some(&net.a), &["link", "del", "rxe0"])
        .assert_success();
    assert_eq!(attached_program(&net.a, net.iface), None);
}

/// An interface that already has an XDP program, and one whose MTU does not fit an
/// AF_XDP frame, are refused; the CLI and the daemon's log say why.
#[test]
fn xdp_backend_refuses_a_taken_interface_and_a_large_mtu_with_the_reason() {
    let _s = serial();
    let Some((net, da, _db)) = hosts("xdp", "udp") else {
        return;
    };
    let add = |name: &str, iface: &str| {
        da.cli(
            Some(&net.a),
            &[
                "link", "add", name, "type", "rxe", "netdev", iface, "backend", "xdp",
            ],
        )
    };
    let taken = add("rxe1", net.iface);
    assert!(!taken.success(), "a second program attached");
    assert!(
        taken.stderr.contains("already has an XDP program"),
        "{}",
        taken.stderr
    );
    assert!(
        da.log_text().contains("already has an XDP program"),
        "{}",
        da.log_text()
    );
    // lo's MTU (65536) does not fit a 4 KiB frame.
    let large = add("rxe2", "lo");
    assert!(!large.success(), "lo added on xdp");
    assert!(large.stderr.contains("MTU"), "{}", large.stderr);
    assert!(da.log_text().contains("MTU 65536"), "{}", da.log_text());
    // The first device still serves.
    pingpong(&net, &da, &_db, "ibv_rc_pingpong", &["-n", "100"]);
}

/// Without CAP_BPF and CAP_SYS_ADMIN the device is refused, and both the CLI and the
/// daemon's log say why and what to use instead; the UDP backend still works.
#[test]
fn xdp_backend_without_cap_bpf_is_refused_with_the_reason() {
    let _s = serial();
    let caps = "-bpf,-sys_admin,-perfmon";
    let Some((ns, d)) = refused_without_capability("xdp", caps, "CAP_BPF") else {
        return;
    };
    link_add(&d, Some(&ns), "lo", "udp").assert_success();
}
