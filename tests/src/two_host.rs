//! Two hosts whose daemons serve `rxe0` on the veth between them, each on a chosen RoCE
//! backend (`udp`, `packet`, `xdp`), and the scenarios every backend's tests run: the
//! ibverbs pingpongs, perftest, IPv6, interoperation with `udp`, corruption, checks of a
//! capture's frames, a daemon without the backend's capability.
use crate::*;
use std::process::Command;
use std::time::Duration;

/// How long one program pair may run.
pub const LIMIT: Duration = Duration::from_secs(300);
/// The TCP port the programs exchange their addresses on.
pub const PORT: u16 = 18515;

/// `rdma-emu link add rxe0 type rxe netdev IFACE backend BACKEND`.
pub fn link_add(d: &Daemon, ns: Option<&Netns>, iface: &str, backend: &str) -> Output {
    d.cli(
        ns,
        &[
            "link", "add", "rxe0", "type", "rxe", "netdev", iface, "backend", backend,
        ],
    )
}

/// Replaces the daemon's `rxe0` on `iface` with one on `backend`, and checks that
/// `link show` says so.
pub fn move_to(d: &Daemon, ns: Option<&Netns>, iface: &str, backend: &str) {
    d.cli(ns, &["link", "del", "rxe0"]).assert_success();
    link_add(d, ns, iface, backend).assert_success();
    let show = d.cli(ns, &["link", "show"]);
    show.assert_success();
    let wanted = format!("backend {backend}");
    assert!(
        show.stdout
            .lines()
            .any(|l| l.starts_with("link rxe0/1") && l.contains(&wanted)),
        "rxe0 is not on the {backend} backend:\n{}",
        show.stdout
    );
}

/// Two hosts whose daemons serve `rxe0` on the veth, host a on `backend_a` and host b
/// on `backend_b`.
pub fn hosts(backend_a: &str, backend_b: &str) -> Option<(TwoHosts, Daemon, Daemon)> {
    let net = two_hosts()?;
    let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
    for (d, ns, backend) in [(&da, &net.a, backend_a), (&db, &net.b, backend_b)] {
        if backend != "udp" {
            move_to(d, Some(ns), net.iface, backend);
        }
    }
    Some((net, da, db))
}

/// Runs `server` on host a and `client` (the same, plus a's address) on host b; both
/// must succeed.
pub fn pair(net: &TwoHosts, da: &Daemon, db: &Daemon, server: &[&str], client: &[&str]) -> Output {
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
            eprintln!("{}", d.stat_report(Some(ns), "rxe0"));
            let _ = Command::new("ip")
                .args(["netns", "exec", &ns.name, "nstat", "-az", "UdpRcvbufErrors"])
                .status();
        }
    }
    s.assert_success();
    c.assert_success();
    c
}

/// `program -d rxe0 -g GID -p PORT extra…` between the hosts, each side with its IPv4
/// GID; both must succeed. The client's output.
pub fn program_pair(
    net: &TwoHosts,
    da: &Daemon,
    db: &Daemon,
    program: &str,
    extra: &[&str],
) -> Output {
    let (gid_a, gid_b) = (
        da.ipv4_gid_index(Some(&net.a)),
        db.ipv4_gid_index(Some(&net.b)),
    );
    let port = PORT.to_string();
    let mut server = vec![program, "-d", "rxe0", "-g", &gid_a, "-p", &port];
    server.extend(extra);
    let mut client = vec![program, "-d", "rxe0", "-g", &gid_b, "-p", &port];
    client.extend(extra);
    pair(net, da, db, &server, &client)
}

/// An ibverbs pingpong between the hosts; the client must report its transfer.
pub fn pingpong(net: &TwoHosts, da: &Daemon, db: &Daemon, program: &str, extra: &[&str]) {
    let c = program_pair(net, da, db, program, extra);
    assert!(
        c.stdout.contains("iters in"),
        "no summary from `{}`:\n{}",
        c.argv,
        c.stdout
    );
}

/// A perftest program between the hosts; the client must print a result row, which is
/// returned.
pub fn perftest(net: &TwoHosts, da: &Daemon, db: &Daemon, program: &str, extra: &[&str]) -> String {
    let port = PORT.to_string();
    let mut args = vec![program, "-d", "rxe0", "-p", &port, "-F"];
    args.extend(extra);
    let c = pair(net, da, db, &args, &args);
    let rows: Vec<&str> = c
        .stdout
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"))
        .skip(1)
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u64>().is_ok())
        })
        .collect();
    assert!(
        !rows.is_empty(),
        "no result row from `{}`:\n{}",
        c.argv,
        c.stdout
    );
    rows[0].to_string()
}

/// No frame any backend dropped for a bad ICRC or as malformed, on either host.
pub fn assert_clean_receive(net: &TwoHosts, da: &Daemon, db: &Daemon) {
    for (d, ns) in [(da, &net.a), (db, &net.b)] {
        let stat = d.cli(Some(ns), &["stat", "rxe0"]);
        stat.assert_success();
        for name in [
            "icrc_errors",
            "packet_rx_icrc_errors",
            "packet_rx_malformed",
            "xdp_rx_icrc_errors",
            "xdp_rx_malformed",
            "xdp_rx_bad_descs",
        ] {
            if stat.stdout.split_whitespace().any(|w| w == name) {
                assert_eq!(d.counter(Some(ns), "rxe0", name), 0, "{name}");
            }
        }
    }
}

/// The index of the daemon's IPv6 link-local RoCE v2 GID, once duplicate address
/// detection let the kernel offer it (up to 10 s), as `ibv_devinfo -v` shows it.
pub fn link_local_gid_index(d: &Daemon, ns: &Netns) -> Option<String> {
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

/// Fields of every RoCE frame in `pcap`, one line each, as tshark prints them.
pub fn fields(pcap: &std::path::Path, names: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.args(TSHARK_FLAGS)
        .arg("-r")
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

/// Host a on `backend_a`, host b on `backend_b` (not both `udp`): runs a mix of RoCE
/// traffic between them while tcpdump captures host b's side of the veth (host a's when
/// b is on `xdp`, whose frames never pass that host's packet taps); checks that tshark
/// finds no malformed or error-level frame and that `rdma-emu decode` verifies every
/// ICRC, then that the frames of the hosts not on `udp` carry the header their backend
/// promises (DSCP 0 or, for `ib_write_bw --tclass=96`, 24; ECT(0); DF; TTL 64; IP IDs
/// counting up; UDP checksum 0; a real source MAC).
pub fn capture_shows_the_promised_header(backend_a: &str, backend_b: &str) {
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
    let Some((net, da, db)) = hosts(backend_a, backend_b) else {
        return;
    };
    let (net, da, db) = (&net, &da, &db);
    let on = if backend_b == "xdp" { &net.a } else { &net.b };
    let senders: Vec<&str> = [(backend_a, &net.addr_a), (backend_b, &net.addr_b)]
        .into_iter()
        .filter(|(b, _)| *b != "udp")
        .map(|(_, a)| a.as_str())
        .collect();
    let dir = TempDir::new("roce-capture");
    let pcap = dir.path().join("roce.pcap");
    let dump = Tcpdump::start(on, net.iface, "udp port 4791", &pcap);
    pingpong(net, da, db, "ibv_rc_pingpong", &["-n", "50"]);
    pingpong(net, da, db, "ibv_ud_pingpong", &["-n", "50", "-s", "512"]);
    // Traffic class 96 on both sides: every frame of this run carries DSCP 24.
    perftest(
        net,
        da,
        db,
        "ib_write_bw",
        &["-n", "50", "-s", "8192", "--tclass=96"],
    );
    perftest(net, da, db, "ib_read_bw", &["-n", "50", "-s", "8192"]);
    perftest(net, da, db, "ib_atomic_bw", &["-n", "50"]);
    std::thread::sleep(Duration::from_millis(300));
    dump.stop();

    let bad = Command::new("tshark")
        .args(TSHARK_FLAGS)
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
    let sent: Vec<&Vec<String>> = rows
        .iter()
        .filter(|r| senders.contains(&r[0].as_str()))
        .collect();
    assert!(
        sent.len() > 100 * senders.len(),
        "only {} RoCE frames from {senders:?} captured ({} in all)",
        sent.len(),
        rows.len()
    );
    let mut last_id: std::collections::HashMap<&str, u32> = Default::default();
    let mut increasing = 0;
    let mut dscp_24 = 0;
    for r in &sent {
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
        if let Some(prev) = last_id.insert(src, id) {
            if id == (prev + 1) % 0x10000 {
                increasing += 1;
            }
        }
    }
    // Each sender counts its IDs up by one per frame (tcpdump may miss none, see stop()).
    assert!(
        increasing + last_id.len() >= sent.len() * 9 / 10,
        "IP IDs do not count up: {increasing} of {} frames",
        sent.len()
    );
    assert!(
        dscp_24 >= 100,
        "only {dscp_24} frames of ib_write_bw --tclass=96 with DSCP 24"
    );
    assert_clean_receive(net, da, db);
}

/// The four ibverbs pingpongs (RC default, 64 KiB messages and with events; UC; UD; SRQ)
/// between two hosts both on `backend`; no frame dropped as bad, and each side received
/// what the other sent. The hosts are returned for further checks (`None`: skipped).
pub fn pingpongs_between(backend: &str) -> Option<(TwoHosts, Daemon, Daemon)> {
    let programs = [
        "ibv_rc_pingpong",
        "ibv_uc_pingpong",
        "ibv_ud_pingpong",
        "ibv_srq_pingpong",
    ];
    if missing(&programs) {
        return None;
    }
    let (net, da, db) = hosts(backend, backend)?;
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
    // The frames went through the backend: each side received what the other sent.
    for (d, ns) in [(&da, &net.a), (&db, &net.b)] {
        assert!(d.counter(Some(ns), "rxe0", "udp_rx_datagrams") > 1000);
    }
    Some((net, da, db))
}

/// perftest's bandwidth and latency programs (defaults, and `ib_write_bw` with 1 MiB
/// messages, whose result row is returned) between two hosts both on `backend`.
pub fn perftest_between(backend: &str) -> Option<String> {
    let programs = [
        "ib_write_bw",
        "ib_read_bw",
        "ib_send_bw",
        "ib_write_lat",
        "ib_send_lat",
        "ib_atomic_bw",
    ];
    if missing(&programs) {
        return None;
    }
    let (net, da, db) = hosts(backend, backend)?;
    for program in programs {
        perftest(&net, &da, &db, program, &[]);
    }
    let row = perftest(
        &net,
        &da,
        &db,
        "ib_write_bw",
        &["-s", "1048576", "-n", "100"],
    );
    assert_clean_receive(&net, &da, &db);
    Some(row)
}

/// RoCE over IPv6 between two hosts both on `backend`: `ibv_rc_pingpong` over the
/// link-local GIDs (frames with the UDP checksum IPv6 requires, next hops from neighbour
/// discovery, link-local sources scoped to the interface).
pub fn ipv6_link_local_pingpong(backend: &str) {
    if missing(&["ibv_rc_pingpong"]) {
        return;
    }
    let Some((net, da, db)) = hosts(backend, backend) else {
        return;
    };
    let (Some(gid_a), Some(gid_b)) = (
        link_local_gid_index(&da, &net.a),
        link_local_gid_index(&db, &net.b),
    ) else {
        panic!("no IPv6 link-local GID after 10 s");
    };
    let port = PORT.to_string();
    let args = |gid: &str| -> Vec<String> {
        [
            "ibv_rc_pingpong",
            "-d",
            "rxe0",
            "-g",
            gid,
            "-p",
            &port,
            "-n",
            "200",
        ]
        .map(str::to_string)
        .to_vec()
    };
    let (server, client) = (args(&gid_a), args(&gid_b));
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let client: Vec<&str> = client.iter().map(String::as_str).collect();
    let c = pair(&net, &da, &db, &server, &client);
    assert!(c.stdout.contains("iters in"), "{}", c.stdout);
    assert_clean_receive(&net, &da, &db);
    assert!(da.counter(Some(&net.a), "rxe0", "udp_rx_datagrams") >= 200);
}

/// Host a on `udp`, host b on `backend`: both directions work, and the UDP side's core
/// accepts the other side's nonzero IP IDs by solving for them (the kernel socket does not
/// show them), which proves the frames carried the backend's own headers.
pub fn interoperates_with_udp(backend: &str) {
    if missing(&[
        "ibv_rc_pingpong",
        "ibv_ud_pingpong",
        "ib_write_bw",
        "ib_read_bw",
    ]) {
        return;
    }
    let Some((net, da, db)) = hosts("udp", backend) else {
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
        "the UDP side solved only {solved} IP IDs of the {backend} side's frames"
    );
    // The other side hears the UDP side's kernel headers (ID 0) and verifies them whole.
    assert!(db.counter(Some(&net.b), "rxe0", "udp_rx_datagrams") > 100);
}

/// Frames corrupted on the way (`fault … corrupt` on the sender) between two hosts both
/// on `backend` are caught by the receiver's ICRC check over the real headers (counted in
/// `BACKEND_rx_icrc_errors`), never reach its core, and the connection recovers by
/// retransmission.
pub fn corrupted_frames_are_caught(backend: &str) {
    if missing(&["ibv_rc_pingpong"]) {
        return;
    }
    let Some((net, da, db)) = hosts(backend, backend) else {
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
    let caught = da.counter(Some(&net.a), "rxe0", &format!("{backend}_rx_icrc_errors"));
    assert!(caught > 0, "no corrupted frame caught");
    assert_eq!(da.counter(Some(&net.a), "rxe0", "icrc_errors"), 0);
    assert!(db.counter(Some(&net.b), "rxe0", "retransmitted_pkts") > 0);
}

/// A daemon on `lo` whose capability bounding set lacks `drop` (`setpriv --bounding-set
/// DROP`) refuses `rxe0` on `backend`, and both the CLI and its log name `cap`, the CLI
/// what to use instead. Returned with `rxe0` deleted, for more checks (`None`: skipped).
pub fn refused_without_capability(backend: &str, drop: &str, cap: &str) -> Option<(Netns, Daemon)> {
    if missing(&["setpriv"]) {
        return None;
    }
    let ns = loopback_ns(&format!("{backend}-cap"), false)?;
    let d = Daemon::start_under(
        Some(&ns),
        &["setpriv", "--bounding-set", drop, "--"],
        &[],
        &[],
    );
    d.cli(Some(&ns), &["link", "del", "rxe0"]).assert_success();
    let refused = link_add(&d, Some(&ns), "lo", backend);
    assert!(!refused.success(), "added on {backend} without {cap}");
    assert!(
        refused.stderr.contains(cap) && refused.stderr.contains("backend udp"),
        "the CLI does not say why:\n{}",
        refused.stderr
    );
    assert!(
        d.log_text().contains(cap),
        "the daemon's log does not say why:\n{}",
        d.log_text()
    );
    Some((ns, d))
}

/// Host a on `backend_a` receives `ib_write_bw` from host b on `backend_b` while an
/// nftables netdev rule marks 5% of the RoCE frames Congestion Experienced: on host a's
/// `ingress` (before a packet socket sees them), or on host b's `egress` (where the
/// kernel sends; a receiver on `xdp` takes the frames before any ingress hook). Host a's
/// backend reads the ECN field of the real IP header and answers with CNPs that all
/// reach the sender, whose DCQCN acts on every one.
pub fn ce_marks_are_answered_with_cnps(backend_a: &str, backend_b: &str, hook: &str) {
    if missing(&["ib_write_bw", "nft"]) {
        return;
    }
    let Some((net, da, db)) = hosts(backend_a, backend_b) else {
        return;
    };
    let ns = if hook == "ingress" { &net.a } else { &net.b };
    let mark = format!(
        "set -e
         ip netns exec {ns} nft add table netdev rdmaemu_ecn
         ip netns exec {ns} nft add chain netdev rdmaemu_ecn cemark '{{ type filter hook {hook} device {i} priority 0 ; }}'
         ip netns exec {ns} nft add rule netdev rdmaemu_ecn cemark udp dport 4791 numgen random mod 100 lt 5 ip ecn set ce",
        ns = ns.name,
        i = net.iface
    );
    if let Err(e) = sh(&mark) {
        let _ = cannot_run(&format!("nftables cannot mark on {hook}: {e}"));
        return;
    }
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

/// Open MPI's rsh launcher runs `AGENT HOST COMMAND...`: this agent runs the command in
/// the namespace that owns HOST's address, under `rdma-emu run` with that side's daemon.
pub fn mpi_launch_agent(dir: &Path, sides: &[(&str, &Netns, &Daemon)]) -> std::path::PathBuf {
    let mut cases = String::new();
    for (addr, ns, d) in sides {
        cases.push_str(&format!(
            "  {addr}) ns={}; sock={};;\n",
            ns.name,
            d.socket.display()
        ));
    }
    let script = format!(
        "#!/bin/sh\n\
         while [ \"${{1#-}}\" != \"$1\" ]; do shift; done\n\
         host=$1; shift\n\
         case \"$host\" in\n{cases}  *) echo \"unknown host $host\" >&2; exit 1;;\nesac\n\
         exec ip netns exec \"$ns\" env RDMA_EMU_SOCKET=\"$sock\" RDMA_EMU_LIB_DIR={lib} \
         {bin}/rdma-emu run -- sh -c \"$*\"\n",
        lib = lib_dir().display(),
        bin = bin_dir().display(),
    );
    let path = dir.join("netns-agent.sh");
    std::fs::write(&path, script).expect("agent script");
    let _ = Command::new("chmod").arg("755").arg(&path).status();
    path
}
