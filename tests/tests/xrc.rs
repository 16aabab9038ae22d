//! XRC with Debian's unmodified `ibv_xsrq_pingpong` between two network namespaces: an
//! XRC domain opened on a file, an XRC SRQ per side, XRC target and initiator QPs, and
//! Sends naming the peer's SRQ (`wr.qp_type.xrc.remote_srqn`), with its default options
//! and with other message counts and sizes, polling and sleeping on CQ events.
use rdma_emu_tests::two_host;
use rdma_emu_tests::*;

/// `ibv_xsrq_pingpong` with `extra` between a daemon in each namespace: both sides exit
/// 0 and the client says `success` after its local and remote SRQ numbers.
fn xsrq_pingpong_two_hosts(extra: &[&str]) {
    let _s = serial();
    if missing(&["ibv_xsrq_pingpong"]) {
        return;
    }
    let Some((net, da, db)) = two_host::hosts("udp", "udp") else {
        return;
    };
    let c = two_host::program_pair(&net, &da, &db, "ibv_xsrq_pingpong", extra);
    assert!(
        c.stdout.contains("SRQN") && c.stdout.trim_end().ends_with("success"),
        "no success:\n{}\n{}",
        c.stdout,
        c.stderr
    );
    // Both daemons counted the XRC requests they took, and no bad one.
    for (d, ns) in [(&da, &net.a), (&db, &net.b)] {
        let stat = d.cli(Some(ns), &["stat", "rxe0"]).stdout;
        assert_eq!(counter(&stat, "xrc_srq_errors"), Some(0), "{stat}");
        assert!(counter(&stat, "rcvd_pkts").is_some_and(|n| n > 0), "{stat}");
    }
}

/// The value `rdma-emu stat` shows for counter `name` (`… name value …`).
fn counter(stat: &str, name: &str) -> Option<u64> {
    let mut words = stat.split_whitespace();
    words.find(|w| *w == name)?;
    words.next()?.parse().ok()
}

#[test]
fn xsrq_pingpong_defaults_two_hosts() {
    xsrq_pingpong_two_hosts(&[]);
}

#[test]
fn xsrq_pingpong_many_messages_two_hosts() {
    xsrq_pingpong_two_hosts(&["-n", "200"]);
}

#[test]
fn xsrq_pingpong_small_messages_two_hosts() {
    xsrq_pingpong_two_hosts(&["-s", "64", "-n", "50"]);
}

#[test]
fn xsrq_pingpong_multi_packet_messages_two_hosts() {
    // 64 KiB at the 1024-byte path MTU: 64 packets per Send, each with the XRCETH.
    xsrq_pingpong_two_hosts(&["-s", "65536", "-n", "20"]);
}

#[test]
fn xsrq_pingpong_events_two_hosts() {
    xsrq_pingpong_two_hosts(&["-e", "-n", "20"]);
}

#[test]
fn devinfo_shows_xrc_on_rxe0_and_not_on_siw0() {
    let _s = serial();
    if missing(&["ibv_devinfo"]) {
        return;
    }
    // In a namespace of its own where possible, as odp.rs's devinfo test.
    let ns = loopback_ns("xrcinfo", false);
    let daemon = Daemon::start_with(ns.as_ref(), &[]);
    for (dev, xrc) in [("rxe0", true), ("siw0", false)] {
        let out = daemon
            .program(ns.as_ref(), &["ibv_devinfo", "-v", "-d", dev])
            .wait(std::time::Duration::from_secs(60));
        out.assert_success();
        let flags = out.stdout.split("device_cap_flags:").nth(1).unwrap_or("");
        let flags = flags.split("max_sge").next().unwrap_or("");
        let has = flags.lines().any(|l| l.trim() == "XRC");
        assert_eq!(has, xrc, "{dev}:\n{}", out.stdout);
    }
}

#[test]
fn xsrq_pingpong_odp_two_hosts() {
    // -o: the buffer registered ON_DEMAND, which needs xrc_odp_caps SEND and SRQ_RECV.
    xsrq_pingpong_two_hosts(&["-o", "-n", "20"]);
}

#[test]
fn xsrq_pingpong_two_clients_share_one_domain_two_hosts() {
    // `-c 2`: the server sends to each client's SRQ through both of its initiators in
    // turn, so a message for client 0's SRQ arrives at client 1's target QP: the two
    // client processes on host b opened the same file, so their daemon gave them one
    // XRC domain, and the target delivers into the other process's SRQ and CQ.
    let _s = serial();
    if missing(&["ibv_xsrq_pingpong"]) {
        return;
    }
    let Some((net, da, db)) = two_host::hosts("udp", "udp") else {
        return;
    };
    let (gid_a, gid_b) = (
        da.ipv4_gid_index(Some(&net.a)),
        db.ipv4_gid_index(Some(&net.b)),
    );
    let port = two_host::PORT.to_string();
    let common = ["ibv_xsrq_pingpong", "-d", "rxe0", "-p", &port, "-n", "20"];
    let mut server = common.to_vec();
    server.extend(["-g", &gid_a, "-c", "2"]);
    let mut client = common.to_vec();
    client.extend(["-g", &gid_b, &net.addr_a]);
    let srv = da.program(Some(&net.a), &server);
    let limit = std::time::Duration::from_secs(120);
    assert!(
        wait_listening(Some(&net.a), two_host::PORT, limit),
        "the server never listened"
    );
    let clients = [
        db.program(Some(&net.b), &client),
        db.program(Some(&net.b), &client),
    ];
    for c in clients {
        let out = c.wait(limit);
        out.assert_success();
        assert!(out.stdout.trim_end().ends_with("success"), "{}", out.stdout);
    }
    let s = srv.wait(limit);
    s.assert_success();
    assert!(s.stdout.trim_end().ends_with("success"), "{}", s.stdout);
    let stat = db.cli(Some(&net.b), &["stat", "rxe0"]).stdout;
    assert_eq!(counter(&stat, "xrc_srq_errors"), Some(0), "{stat}");
}
