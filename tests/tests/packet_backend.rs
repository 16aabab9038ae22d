//! The AF_PACKET backend (`rdma-emu link add … backend packet`): the daemon writes the
//! Ethernet, IP and UDP headers itself. Two namespaces joined by veth, a daemon in each
//! whose `rxe0` is re-added on the packet backend, run the ibverbs pingpongs and perftest
//! unmodified; a capture on the veth passes tshark and `rdma-emu decode` and shows the
//! header fields the backend promises; a packet device and a UDP device interoperate; the
//! backend works on `lo`; without CAP_NET_RAW the device is refused with the reason.
//! Every test needs root (namespaces, CAP_NET_RAW) and says so when it cannot run.
use rdma_emu_tests::*;
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(300);
const PORT: u16 = 18515;

/// Replaces the daemon's `rxe0` (UDP backend) on `iface` with one on the packet backend,
/// and checks that `link show` says so.
fn move_to_packet(d: &Daemon, ns: Option<&Netns>, iface: &str) {
    d.cli(ns, &["link", "del", "rxe0"]).assert_success();
    d.cli(
        ns,
        &[
            "link", "add", "rxe0", "type", "rxe", "netdev", iface, "backend", "packet",
        ],
    )
    .assert_success();
    let show = d.cli(ns, &["link", "show"]);
    show.assert_success();
    assert!(
        show.stdout
            .lines()
            .any(|l| l.starts_with("link rxe0/1") && l.contains("backend packet")),
        "rxe0 is not on the packet backend:\n{}",
        show.stdout
    );
}

/// Two hosts whose daemons serve `rxe0` on the veth; `packet_a` / `packet_b` put that
/// side on the packet backend (else it stays on UDP).
fn hosts(packet_a: bool, packet_b: bool) -> Option<(TwoHosts, Daemon, Daemon)> {
    let net = two_hosts()?;
    let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
    if packet_a {
        move_to_packet(&da, Some(&net.a), net.iface);
    }
    if packet_b {
        move_to_packet(&db, Some(&net.b), net.iface);
    }
    Some((net, da, db))
}

/// Runs `server` on host a and `client` (the same, plus a's address) on host b; both
/// must succeed.
fn pair(net: &TwoHosts, da: &Daemon, db: &Daemon, server: &[&str], client: &[&str]) -> Output {
    let mut client = client.to_vec();
    client.push(&net.addr_a);
    let (s, c) = run_pair(
        da,
        Some(&net.a),
        server,
        db,
        Some(&net.b),
        &client,
        PORT,
        LIMIT,
    );
    if !(s.success() && c.success()) {
        // Where frames were lost: the daemons' counters, the kernels' UDP drops.
        for (d, ns) in [(da, &net.a), (db, &net.b)] {
            let stat = d.cli(Some(ns), &["stat", "rxe0"]).stdout;
            eprintln!("--- {} ---\n{stat}", ns.name);
            let _ = Command::new("ip")
                .args(["netns", "exec", &ns.name, "nstat", "-az", "UdpRcvbufErrors"])
                .status();
        }
    }
    s.assert_success();
    c.assert_success();
    c
}

/// An ibverbs pingpong between the hosts; the client must report its transfer.
fn pingpong(net: &TwoHosts, da: &Daemon, db: &Daemon, program: &str, extra: &[&str]) {
    let (gid_a, gid_b) = (
        da.ipv4_gid_index(Some(&net.a)),
        db.ipv4_gid_index(Some(&net.b)),
    );
    let port = PORT.to_string();
    let mut server = vec![program, "-d", "rxe0", "-g", &gid_a, "-p", &port];
    server.extend(extra);
    let mut client = vec![program, "-d", "rxe0", "-g", &gid_b, "-p", &port];
    client.extend(extra);
    let c = pair(net, da, db, &server, &client);
    assert!(
        c.stdout.contains("iters in"),
        "no summary from `{}`:\n{}",
        c.argv,
        c.stdout
    );
}

/// A perftest program between the hosts; the client must print a result row.
fn perftest(net: &TwoHosts, da: &Daemon, db: &Daemon, program: &str, extra: &[&str]) {
    let port = PORT.to_string();
    let mut args = vec![program, "-d", "rxe0", "-p", &port, "-F"];
    args.extend(extra);
    let c = pair(net, da, db, &args, &args);
    let rows = c
        .stdout
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"))
        .skip(1)
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u64>().is_ok())
        })
        .count();
    assert!(rows >= 1, "no result row from `{}`:\n{}", c.argv, c.stdout);
}

/// No frame either backend dropped for a bad ICRC or as malformed, on either host.
fn assert_clean_receive(net: &TwoHosts, da: &Daemon, db: &Daemon) {
    for (d, ns) in [(da, &net.a), (db, &net.b)] {
        let stat = d.cli(Some(ns), &["stat", "rxe0"]);
        stat.assert_success();
        for name in [
            "icrc_errors",
            "packet_rx_icrc_errors",
            "packet_rx_malformed",
        ] {
            if stat.stdout.split_whitespace().any(|w| w == name) {
                assert_eq!(d.counter(Some(ns), "rxe0", name), 0, "{name}");
            }
        }
    }
}

#[test]
fn pingpongs_run_over_the_packet_backend_between_two_hosts() {
    let _s = serial();
    let programs = [
        "ibv_rc_pingpong",
        "ibv_uc_pingpong",
        "ibv_ud_pingpong",
        "ibv_srq_pingpong",
    ];
    if missing(&programs) {
        return;
    }
    let Some((net, da, db)) = hosts(true, true) else {
        return;
    };
    pingpong(&net, &da, &db, "ibv_rc_pingpong", &[]);
    pingpong(
        &net,
        &da,
        &db,
        "ibv_rc_pingpong",
        &["-s", "65536", "-n", "200"],
    );
    pingpong(&net, &da, &db, "ibv_uc_pingpong", &[]);
    pingpong(&net, &da, &db, "ibv_ud_pingpong", &["-s", "1024"]);
    pingpong(&net, &da, &db, "ibv_srq_pingpong", &[]);
    pingpong(&net, &da, &db, "ibv_rc_pingpong", &["-e"]);
    assert_clean_receive(&net, &da, &db);
    // The frames went through the packet sockets: each side received what the other sent.
    for (d, ns) in [(&da, &net.a), (&db, &net.b)] {
        assert!(d.counter(Some(ns), "rxe0", "udp_rx_datagrams") > 1000);
    }
}

#[test]
fn perftest_runs_over_the_packet_backend_between_two_hosts() {
    let _s = serial();
    let programs = [
        "ib_write_bw",
        "ib_read_bw",
        "ib_send_bw",
        "ib_write_lat",
        "ib_send_lat",
        "ib_atomic_bw",
    ];
    if missing(&programs) {
        return;
    }
    let Some((net, da, db)) = hosts(true, true) else {
        return;
    };
    perftest(&net, &da, &db, "ib_write_bw", &[]);
    perftest(&net, &da, &db, "ib_read_bw", &[]);
    perftest(&net, &da, &db, "ib_send_bw", &[]);
    perftest(&net, &da, &db, "ib_write_lat", &[]);
    perftest(&net, &da, &db, "ib_send_lat", &[]);
    perftest(&net, &da, &db, "ib_atomic_bw", &[]);
    perftest(
        &net,
        &da,
        &db,
        "ib_write_bw",
        &["-s", "1048576", "-n", "100"],
    );
    assert_clean_receive(&net, &da, &db);
}

/// The index of the daemon's IPv6 link-local RoCE v2 GID, once duplicate address
/// detection let the kernel offer it (up to 10 s), as `ibv_devinfo -v` shows it.
fn link_local_gid_index(d: &Daemon, ns: &Netns) -> Option<String> {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let out = d
            .program(Some(ns), &["ibv_devinfo", "-v"])
            .wait(Duration::from_secs(60));
        out.assert_success();
        let found = out.stdout.lines().find_map(|line| {
            let (idx, tail) = line.trim().strip_prefix("GID[")?.split_once(']')?;
            (tail.trim_start_matches(':').trim().starts_with("fe80") && tail.contains("RoCE v2"))
                .then(|| idx.trim().to_string())
        });
        if found.is_some() {
            return found;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

/// RoCE over IPv6: frames with the UDP checksum IPv6 requires, next hops from neighbour
/// discovery, link-local sources scoped to the interface.
#[test]
fn rc_pingpong_runs_over_ipv6_link_local_gids_on_the_packet_backend() {
    let _s = serial();
    if missing(&["ibv_rc_pingpong"]) {
        return;
    }
    let Some((net, da, db)) = hosts(true, true) else {
        return;
    };
    let (Some(gid_a), Some(gid_b)) = (
        link_local_gid_index(&da, &net.a),
        link_local_gid_index(&db, &net.b),
    ) else {
        panic!("no IPv6 link-local GID after 10 s");
    };
    let port = PORT.to_string();
    let server = [
        "ibv_rc_pingpong",
        "-d",
        "rxe0",
        "-g",
        &gid_a,
        "-p",
        &port,
        "-n",
        "200",
    ];
    let client = [
        "ibv_rc_pingpong",
        "-d",
        "rxe0",
        "-g",
        &gid_b,
        "-p",
        &port,
        "-n",
        "200",
    ];
    let c = pair(&net, &da, &db, &server, &client);
    assert!(c.stdout.contains("iters in"), "{}", c.stdout);
    assert_clean_receive(&net, &da, &db);
    assert!(da.counter(Some(&net.a), "rxe0", "udp_rx_datagrams") >= 200);
}

/// One side on UDP, the other on the packet backend: both directions work, and the UDP
/// side's core accepts the packet side's nonzero IP IDs by solving for them (the kernel
/// socket does not show them), which proves they were sent.
#[test]
fn a_packet_device_and_a_udp_device_interoperate() {
    let _s = serial();
    if missing(&[
        "ibv_rc_pingpong",
        "ibv_ud_pingpong",
        "ib_write_bw",
        "ib_read_bw",
    ]) {
        return;
    }
    let Some((net, da, db)) = hosts(false, true) else {
        return;
    };
    pingpong(&net, &da, &db, "ibv_rc_pingpong", &[]);
    pingpong(&net, &da, &db, "ibv_ud_pingpong", &["-s", "1024"]);
    perftest(&net, &da, &db, "ib_write_bw", &["-n", "200"]);
    perftest(&net, &da, &db, "ib_read_bw", &["-n", "200"]);
    assert_clean_receive(&net, &da, &db);
    let solved = da.counter(Some(&net.a), "rxe0", "icrc_solved_ip_id");
    assert!(
        solved > 100,
        "the UDP side solved only {solved} IP IDs of the packet side's frames"
    );
    // The packet side hears the UDP side's kernel headers (ID 0) and verifies them whole.
    assert!(db.counter(Some(&net.b), "rxe0", "udp_rx_datagrams") > 100);
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
    if missing(&["ibv_rc_pingpong"]) {
        return;
    }
    let Some((net, da, db)) = hosts(true, true) else {
        return;
    };
    db.cli(
        Some(&net.b),
        &[
            "fault", "add", "rxe0", "corrupt", "5%", "--dir", "tx", "--opcode", "send", "--seed",
            "5",
        ],
    )
    .assert_success();
    pingpong(&net, &da, &db, "ibv_rc_pingpong", &["-n", "300"]);
    let caught = da.counter(Some(&net.a), "rxe0", "packet_rx_icrc_errors");
    assert!(caught > 0, "no corrupted frame caught");
    assert_eq!(da.counter(Some(&net.a), "rxe0", "icrc_errors"), 0);
    assert!(db.counter(Some(&net.b), "rxe0", "retransmitted_pkts") > 0);
}

/// The ECN field is read from each frame's real IP header: a netdev ingress rule in the
/// receiver's namespace marks 5% of the arriving RoCE frames Congestion Experienced
/// before the packet socket sees them (nftables' postrouting hook never sees frames a
/// packet socket sends), and the receiver answers with CNPs that reach the sender.
#[test]
fn congestion_experienced_frames_are_answered_with_cnps_on_the_packet_backend() {
    let _s = serial();
    if missing(&["ib_write_bw", "nft"]) {
        return;
    }
    let Some((net, da, db)) = hosts(true, true) else {
        return;
    };
    let mark = format!(
        "set -e
         ip netns exec {a} nft add table netdev rdmaemu_ecn
         ip netns exec {a} nft add chain netdev rdmaemu_ecn in '{{ type filter hook ingress device {i} priority 0 ; }}'
         ip netns exec {a} nft add rule netdev rdmaemu_ecn in udp dport 4791 numgen random mod 100 lt 5 ip ecn set ce",
        a = net.a.name,
        i = net.iface
    );
    sh(&mark).expect("nftables marks CE");
    perftest(&net, &da, &db, "ib_write_bw", &["-s", "65536", "-n", "300"]);
    let marked = da.counter(Some(&net.a), "rxe0", "np_ecn_marked_roce_packets");
    let sent = da.counter(Some(&net.a), "rxe0", "np_cnp_sent");
    // DCQCN is on by default: the sender acts on every CNP (none ignored).
    let received = db.counter(Some(&net.b), "rxe0", "rp_cnp_handled");
    assert_eq!(db.counter(Some(&net.b), "rxe0", "rp_cnp_ignored"), 0);
    assert!(marked > 0 && sent > 0, "marked {marked}, CNPs sent {sent}");
    assert!(sent <= marked);
    assert_eq!(received, sent, "every CNP reaches the sender");
    assert_clean_receive(&net, &da, &db);
}

/// Fields of every RoCE frame in `pcap`, one line each, as tshark prints them.
fn fields(pcap: &std::path::Path, names: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(pcap)
        .args(["-Y", "udp.dstport == 4791", "-T", "fields"]);
    for n in names {
        cmd.args(["-e", n]);
    }
    let out = cmd.output().expect("tshark -r");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

#[test]
fn packet_backend_frames_on_the_veth_dissect_verify_and_carry_the_promised_header() {
    let _s = serial();
    if missing(&[
        "tshark",
        "tcpdump",
        "ibv_rc_pingpong",
        "ibv_ud_pingpong",
        "ib_write_bw",
        "ib_read_bw",
        "ib_atomic_bw",
    ]) {
        return;
    }
    let Some((net, da, db)) = hosts(true, true) else {
        return;
    };
    let dir = TempDir::new("packet-capture");
    let pcap = dir.path().join("packet.pcap");
    let dump = Tcpdump::start(&net.b, net.iface, "udp port 4791", &pcap);
    pingpong(&net, &da, &db, "ibv_rc_pingpong", &["-n", "50"]);
    pingpong(
        &net,
        &da,
        &db,
        "ibv_ud_pingpong",
        &["-n", "50", "-s", "512"],
    );
    // Traffic class 96 on both sides: every frame of this run carries DSCP 24.
    perftest(
        &net,
        &da,
        &db,
        "ib_write_bw",
        &["-n", "50", "-s", "8192", "--tclass=96"],
    );
    perftest(&net, &da, &db, "ib_read_bw", &["-n", "50", "-s", "8192"]);
    perftest(&net, &da, &db, "ib_atomic_bw", &["-n", "50"]);
    std::thread::sleep(Duration::from_millis(300));
    dump.stop();

    let bad = Command::new("tshark")
        .args(["-r"])
        .arg(&pcap)
        .args(["-Y", "_ws.malformed || _ws.expert.severity >= \"error\""])
        .output()
        .expect("tshark -r");
    assert!(bad.status.success());
    let bad = String::from_utf8_lossy(&bad.stdout);
    assert!(
        bad.trim().is_empty(),
        "malformed or error-level frames:\n{bad}"
    );

    let decode = Command::new(bin_dir().join("rdma-emu"))
        .arg("decode")
        .arg(&pcap)
        .output()
        .expect("rdma-emu decode");
    assert!(
        decode.status.success(),
        "rdma-emu decode found a bad ICRC or frame:\n{}{}",
        String::from_utf8_lossy(&decode.stdout)
            .lines()
            .filter(|l| l.to_lowercase().contains("bad"))
            .take(20)
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&decode.stderr)
    );

    let rows = fields(
        &pcap,
        &[
            "ip.src",
            "ip.dsfield.dscp",
            "ip.dsfield.ecn",
            "ip.flags.df",
            "ip.ttl",
            "ip.id",
            "udp.checksum",
            "eth.src",
        ],
    );
    assert!(rows.len() > 200, "only {} RoCE frames captured", rows.len());
    let mut last_id: std::collections::HashMap<String, u32> = Default::default();
    let mut increasing = 0;
    let mut dscp_24 = 0;
    for r in &rows {
        let [src, dscp, ecn, df, ttl, id, csum, mac] = &r[..] else {
            panic!("unexpected tshark fields {r:?}");
        };
        assert!(dscp == "0" || dscp == "24", "DSCP in {r:?}");
        dscp_24 += usize::from(dscp == "24");
        assert_eq!(ecn, "2", "ECN ECT(0) in {r:?}");
        assert!(df == "1" || df == "True", "DF in {r:?}");
        assert_eq!(ttl, "64", "TTL in {r:?}");
        assert_eq!(csum, "0x0000", "UDP checksum in {r:?}");
        assert_ne!(mac, "00:00:00:00:00:00", "a real source MAC in {r:?}");
        let id = u32::from_str_radix(id.trim_start_matches("0x"), 16).expect("IP ID");
        if let Some(prev) = last_id.insert(src.clone(), id) {
            if id == (prev + 1) % 0x10000 {
                increasing += 1;
            }
        }
    }
    // Each sender counts its IDs up by one per frame (tcpdump may miss none, see stop()).
    assert!(
        increasing + last_id.len() >= rows.len() * 9 / 10,
        "IP IDs do not count up: {increasing} of {} frames",
        rows.len()
    );
    assert!(
        dscp_24 >= 100,
        "only {dscp_24} frames of ib_write_bw --tclass=96 with DSCP 24"
    );
    assert_clean_receive(&net, &da, &db);
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
    if missing(&["setpriv"]) {
        return;
    }
    let Some(ns) = loopback_ns("packet-cap", false) else {
        return;
    };
    let d = Daemon::start_under(
        Some(&ns),
        &["setpriv", "--bounding-set", "-net_raw", "--"],
        &[],
        &[],
    );
    d.cli(Some(&ns), &["link", "del", "rxe0"]).assert_success();
    let add = |backend: &str| {
        d.cli(
            Some(&ns),
            &[
                "link", "add", "rxe0", "type", "rxe", "netdev", "lo", "backend", backend,
            ],
        )
    };
    let refused = add("packet");
    assert!(!refused.success(), "added without CAP_NET_RAW");
    assert!(
        refused.stderr.contains("CAP_NET_RAW") && refused.stderr.contains("backend udp"),
        "the CLI does not say why:\n{}",
        refused.stderr
    );
    assert!(
        d.log_text().contains("CAP_NET_RAW"),
        "the daemon's log does not say why:\n{}",
        d.log_text()
    );
    let xdp = add("xdp");
    assert!(
        !xdp.success() && xdp.stderr.contains("not built"),
        "{}",
        xdp.stderr
    );
    add("udp").assert_success();
}
