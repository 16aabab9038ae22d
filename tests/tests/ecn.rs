//! ECN and the notification point end to end (issue 10): two daemons in two namespaces,
//! RoCE packets leave ECN-capable (ECT(0)), an nftables rule in the sender's namespace marks
//! 5% of them Congestion Experienced (this kernel has no ECN-marking queue discipline:
//! red, fq_codel, codel, pie are all compiled out), and `ib_write_bw` runs across. The
//! receiver answers marked packets with CNPs, at most one per QP per 50 µs; the sender
//! receives every one. tcpdump on the veth: every data packet ECT(0) or CE, every CNP
//! shaped as a ConnectX CNP (opcode 0x81, P_Key 0xffff, BECN, PSN 0, 16 zero octets, 74
//! octets on the wire) with a valid ICRC (`rdma-emu decode`), nothing malformed (tshark).
//! The sender asks for traffic class 96 (`--tclass=96`): its data packets carry DSCP 24,
//! the receiver's ACKs its own QP's DSCP 0, the CNPs DSCP 48 as ConnectX's.
//!
//! Then the reaction point: two `ib_write_bw` senders share a link shaped by tc's token
//! bucket (`tbf`), and an nftables meter marks CE whatever exceeds a rate below the
//! link's (a virtual queue standing in for a switch's marking threshold). With DCQCN on
//! the senders handle the CNPs and cut their rates, and share the link; with it off the
//! CNPs are ignored and the token bucket's queue overflows into retransmissions.
use rdma_emu_tests::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn tshark_fields(pcap: &std::path::Path, filter: &str, fields: &[&str]) -> Vec<String> {
    let mut args = vec![
        "-r".to_string(),
        pcap.display().to_string(),
        "-Y".into(),
        filter.into(),
        "-T".into(),
        "fields".into(),
    ];
    for f in fields {
        args.push("-e".into());
        args.push(f.to_string());
    }
    let out = std::process::Command::new("tshark")
        .args(&args)
        .output()
        .expect("tshark runs");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn congestion_experienced_packets_are_answered_with_cnps() {
    let _s = serial();
    if missing(&["ib_write_bw", "nft", "tcpdump", "tshark"]) {
        return;
    }
    let Some(net) = two_hosts() else { return };
    let mark = format!(
        "set -e
         ip netns exec {b} nft add table ip rdmaemu_ecn
         ip netns exec {b} nft add chain ip rdmaemu_ecn post '{{ type filter hook postrouting priority 0 ; }}'
         ip netns exec {b} nft add rule ip rdmaemu_ecn post udp dport 4791 numgen random mod 100 lt 5 ip ecn set ce",
        b = net.b.name
    );
    sh(&mark).expect("nftables marks CE");
    let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
    let dir = TempDir::new("ecn");
    let pcap = dir.path().join("ecn.pcap");
    let dump = Tcpdump::start(&net.a, net.iface, "udp port 4791", &pcap);
    let (gid_a, gid_b) = (
        da.ipv4_gid_index(Some(&net.a)),
        db.ipv4_gid_index(Some(&net.b)),
    );
    let server = [
        "ib_write_bw",
        "-d",
        "rxe0",
        "-x",
        &gid_a,
        "-F",
        "-s",
        "65536",
        "-n",
        "300",
        "-p",
        "18610",
    ];
    let mut client = vec![
        "ib_write_bw",
        "-d",
        "rxe0",
        "-x",
        &gid_b,
        "-F",
        "-s",
        "65536",
        "-n",
        "300",
        "-p",
        "18610",
        "--tclass=96",
    ];
    client.push(&net.addr_a);
    let (s, c) = run_pair(
        &da,
        Some(&net.a),
        &server,
        &db,
        Some(&net.b),
        &client,
        18610,
        LIMIT,
    );
    s.assert_success();
    c.assert_success();
    std::thread::sleep(Duration::from_millis(300));
    dump.stop();
    let marked = da.counter(Some(&net.a), "rxe0", "np_ecn_marked_roce_packets");
    let sent = da.counter(Some(&net.a), "rxe0", "np_cnp_sent");
    let received = db.counter(Some(&net.b), "rxe0", "rp_cnp_handled");
    assert!(marked > 0 && sent > 0, "marked {marked}, CNPs sent {sent}");
    assert!(sent <= marked);
    assert_eq!(received, sent, "every CNP reaches the sender over veth");
    // On the wire: data ECT(0) or CE, never Not-ECT.
    let data_ecn = tshark_fields(
        &pcap,
        &format!("infiniband.bth.opcode != 129 && ip.src == {}", net.addr_b),
        &["ip.dsfield.ecn"],
    );
    assert!(data_ecn.len() > 1000, "{} data packets", data_ecn.len());
    let ce = data_ecn.iter().filter(|e| *e == "3").count();
    assert!(
        data_ecn.iter().all(|e| e == "2" || e == "3"),
        "Not-ECT data seen"
    );
    assert!(
        ce as u64 >= marked,
        "tshark saw {ce} CE packets, the daemon {marked}"
    );
    // DSCP: the sender's traffic class 96 on its requests; the receiver's ACKs carry the
    // responder QP's own (0), its CNPs the device's CNP DSCP (48).
    let dscp_of = |filter: String| {
        let mut seen = tshark_fields(&pcap, &filter, &["ip.dsfield.dscp"]);
        seen.sort();
        seen.dedup();
        seen
    };
    assert_eq!(
        dscp_of(format!(
            "infiniband.bth.opcode != 129 && ip.src == {}",
            net.addr_b
        )),
        ["24"],
        "requests"
    );
    assert_eq!(
        dscp_of(format!(
            "infiniband.bth.opcode != 129 && ip.src == {}",
            net.addr_a
        )),
        ["0"],
        "ACKs"
    );
    assert_eq!(
        dscp_of("infiniband.bth.opcode == 129".into()),
        ["48"],
        "CNPs"
    );
    let cnp_ecn = tshark_fields(&pcap, "infiniband.bth.opcode == 129", &["ip.dsfield.ecn"]);
    assert!(cnp_ecn.iter().all(|e| e == "2"), "CNPs leave ECT(0)");
    let links = da.cli(Some(&net.a), &["link", "show"]);
    assert!(
        links.stdout.contains(
            "tos default 0, DSCP = traffic class >> 2, ECN ECT(0), CNP DSCP 48, SL unmapped"
        ),
        "{}",
        links.stdout
    );
    // Every CNP: the ConnectX shape, from the receiver to the sender's RoCE port.
    let cnps = tshark_fields(
        &pcap,
        "infiniband.bth.opcode == 129",
        &["frame.len", "udp.dstport", "udp.payload"],
    );
    assert_eq!(cnps.len() as u64, sent, "CNPs on the wire");
    for cnp in &cnps {
        let f: Vec<&str> = cnp.split('\t').collect();
        assert_eq!(f[0], "74", "{cnp}");
        assert_eq!(f[1], "4791", "{cnp}");
        let p = f[2];
        assert!(p.starts_with("8100ffff40"), "opcode, P_Key, BECN: {cnp}");
        assert_eq!(&p[16..24], "00000000", "A bit and PSN 0: {cnp}");
        assert_eq!(&p[24..56], "0".repeat(32), "16 reserved octets: {cnp}");
    }
    let malformed = tshark_fields(
        &pcap,
        "_ws.malformed || _ws.expert.severity >= 8",
        &["frame.number"],
    );
    assert!(malformed.is_empty(), "{malformed:?}");
    let decode = std::process::Command::new(bin_dir().join("rdma-emu"))
        .arg("decode")
        .arg(&pcap)
        .output()
        .expect("rdma-emu decode runs");
    let text = String::from_utf8_lossy(&decode.stdout);
    let decoded_cnps = text.lines().filter(|l| l.contains("RoCEv2 CNP")).count();
    assert_eq!(
        decoded_cnps as u64,
        sent,
        "{}",
        String::from_utf8_lossy(&decode.stderr)
    );
    assert!(text
        .lines()
        .filter(|l| l.contains("RoCEv2"))
        .all(|l| l.ends_with("ICRC ok")));
}

/// A device's `default_tos` is the traffic class of RDMA CM connections whose id set none
/// (as mlx5's `default_roce_tos`): `ib_write_bw -R` between two daemons configured with
/// `default_tos = 32` sends its data and ACKs with DSCP 8, the CM MADs (QP1) with DSCP 0,
/// and `rdma-emu link show` says so.
#[test]
fn rdma_cm_connections_take_the_device_default_tos() {
    let _s = serial();
    if missing(&["ib_write_bw", "tcpdump", "tshark"]) {
        return;
    }
    let Some(net) = two_hosts() else { return };
    let dir = TempDir::new("default-tos");
    let config = dir.path().join("tos.toml");
    std::fs::write(
        &config,
        format!(
            "[[device]]\nname = \"rxe0\"\nnetdev = \"{}\"\ndefault_tos = 32\ncnp_dscp = 26\n",
            net.iface
        ),
    )
    .unwrap();
    let args = ["--config", config.to_str().unwrap()];
    let da = Daemon::start_with(Some(&net.a), &args);
    let db = Daemon::start_with(Some(&net.b), &args);
    let pcap = dir.path().join("tos.pcap");
    let dump = Tcpdump::start(&net.a, net.iface, "udp port 4791", &pcap);
    let server = [
        "ib_write_bw",
        "-R",
        "-d",
        "rxe0",
        "-s",
        "8192",
        "-n",
        "20",
        "-p",
        "18612",
    ];
    let mut client = server.to_vec();
    client.push(&net.addr_a);
    let (s, c) = run_pair_when(
        da.program(Some(&net.a), &server),
        || wait_cm_listening(&da, Some(&net.a), 18612, Duration::from_secs(20)),
        "RDMA CM port 18612",
        || db.program(Some(&net.b), &client),
        LIMIT,
    );
    c.assert_success();
    s.assert_success();
    std::thread::sleep(Duration::from_millis(300));
    dump.stop();
    let dscp_of = |filter: &str| {
        let mut seen = tshark_fields(&pcap, filter, &["ip.dsfield.dscp"]);
        assert!(!seen.is_empty(), "no packets match {filter}");
        seen.sort();
        seen.dedup();
        seen
    };
    assert_eq!(
        dscp_of("infiniband.bth.destqp != 1"),
        ["8"],
        "data and ACKs"
    );
    assert_eq!(dscp_of("infiniband.bth.destqp == 1"), ["0"], "CM MADs");
    let links = da.cli(Some(&net.a), &["link", "show"]);
    assert!(
        links.stdout.contains("tos default 32,") && links.stdout.contains("CNP DSCP 26,"),
        "{}",
        links.stdout
    );
}

/// ib_write_bw's average bandwidth in MB/s (its report's `BW average[MB/sec]` column).
fn average_mb_s(out: &Output) -> f64 {
    let mut lines = out.stdout.lines();
    lines
        .by_ref()
        .find(|l| l.contains("BW average[MB/sec]"))
        .unwrap_or_else(|| panic!("no report in:\n{}", out.stdout));
    lines
        .next()
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no average in:\n{}", out.stdout))
}

/// What one two-sender run gave: each sender's MB/s and the counters.
#[derive(Debug)]
struct Incast {
    mb_s: [f64; 2],
    cnp_sent: u64,
    handled: u64,
    ignored: u64,
    cuts: u64,
    retransmitted: u64,
    sent: u64,
}

/// Where the two-sender runs' rate traces go: the path in `RDMA_EMU_DCQCN_CSV`, if set
/// (`docs/congestion_plot.py --e2e` draws docs/congestion_e2e.png from it).
fn trace_csv() -> Option<std::path::PathBuf> {
    std::env::var_os("RDMA_EMU_DCQCN_CSV").map(Into::into)
}

/// Bin width of the rate traces.
const TRACE_BIN_MS: f64 = 100.0;

/// Appends each sender's rate on the wire, per [`TRACE_BIN_MS`], to `csv` as
/// `config,sender,time_ms,mbps` rows: from a capture of the senders' link (after the token
/// bucket), the senders told apart by their destination QP, time from the first packet.
fn write_trace(pcap: &std::path::Path, src: &str, config: &str, csv: &std::path::Path) {
    use std::collections::BTreeMap;
    use std::io::Write;
    let rows = tshark_fields(
        pcap,
        &format!("ip.src == {src} && infiniband.bth.opcode != 129"),
        &["frame.time_epoch", "infiniband.bth.destqp", "frame.len"],
    );
    let mut senders: Vec<String> = Vec::new();
    // (sender, bin) → bytes
    let mut bins: BTreeMap<(usize, u64), u64> = BTreeMap::new();
    let mut t0 = None;
    let mut last_bin = 0;
    for row in &rows {
        let f: Vec<&str> = row.split('\t').collect();
        let (Some(t), Some(qp), Some(len)) = (
            f.first().and_then(|t| t.parse::<f64>().ok()),
            f.get(1),
            f.get(2).and_then(|l| l.parse::<u64>().ok()),
        ) else {
            continue;
        };
        let start = *t0.get_or_insert(t);
        let sender = match senders.iter().position(|s| s == qp) {
            Some(i) => i,
            None => {
                senders.push(qp.to_string());
                senders.len() - 1
            }
        };
        let bin = ((t - start) * 1000.0 / TRACE_BIN_MS) as u64;
        last_bin = last_bin.max(bin);
        *bins.entry((sender, bin)).or_default() += len;
    }
    assert_eq!(
        senders.len(),
        2,
        "the capture holds two senders' QPs: {senders:?}"
    );
    let new = !csv.exists();
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(csv)
        .expect("the trace CSV opens");
    if new {
        writeln!(out, "config,sender,time_ms,mbps").expect("CSV written");
    }
    for sender in 0..senders.len() {
        for bin in 0..=last_bin {
            let bytes = bins.get(&(sender, bin)).copied().unwrap_or(0);
            let mbps = bytes as f64 * 8.0 / (TRACE_BIN_MS * 1000.0);
            let time_ms = bin as f64 * TRACE_BIN_MS;
            writeln!(out, "{config},{sender},{time_ms:.0},{mbps:.2}").expect("CSV written");
        }
    }
}

/// Two `ib_write_bw` pairs at once from `b` (the senders) to `a`, for 4 s; with
/// `RDMA_EMU_DCQCN_CSV` set, their rate traces are appended to it as `config`.
fn two_senders(net: &TwoHosts, args: &[&str], config: &str) -> Incast {
    let da = Daemon::start_with(Some(&net.a), args);
    let db = Daemon::start_with(Some(&net.b), args);
    let trace = trace_csv().map(|csv| {
        let dir = TempDir::new("dcqcn-trace");
        let pcap = dir.path().join("senders.pcap");
        let dump = Tcpdump::start(&net.b, net.iface, "udp port 4791", &pcap);
        (csv, dir, pcap, dump)
    });
    let (gid_a, gid_b) = (
        da.ipv4_gid_index(Some(&net.a)),
        db.ipv4_gid_index(Some(&net.b)),
    );
    let ports = ["18620", "18621"];
    let bw = |gid: &str, port: &str| -> Vec<String> {
        [
            "ib_write_bw",
            "-d",
            "rxe0",
            "-x",
            gid,
            "-F",
            "-s",
            "65536",
            "-D",
            "4",
            "-p",
            port,
        ]
        .map(str::to_string)
        .to_vec()
    };
    let servers: Vec<Program> = ports
        .iter()
        .map(|p| {
            let argv = bw(&gid_a, p);
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            da.program(Some(&net.a), &argv)
        })
        .collect();
    for p in ports {
        assert!(
            wait_listening(Some(&net.a), p.parse().unwrap(), Duration::from_secs(20)),
            "ib_write_bw listens on {p}"
        );
    }
    let clients: Vec<Program> = ports
        .iter()
        .map(|p| {
            let mut argv = bw(&gid_b, p);
            argv.push(net.addr_a.clone());
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            db.program(Some(&net.b), &argv)
        })
        .collect();
    let clients: Vec<Output> = clients.into_iter().map(|c| c.wait(LIMIT)).collect();
    for s in servers {
        s.wait(LIMIT).assert_success();
    }
    for c in &clients {
        c.assert_success();
    }
    if let Some((csv, _dir, pcap, dump)) = trace {
        std::thread::sleep(Duration::from_millis(300));
        dump.stop();
        write_trace(&pcap, &net.addr_b, config, &csv);
    }
    Incast {
        mb_s: [average_mb_s(&clients[0]), average_mb_s(&clients[1])],
        cnp_sent: da.counter(Some(&net.a), "rxe0", "np_cnp_sent"),
        handled: db.counter(Some(&net.b), "rxe0", "rp_cnp_handled"),
        ignored: db.counter(Some(&net.b), "rxe0", "rp_cnp_ignored"),
        cuts: db.counter(Some(&net.b), "rxe0", "rp_rate_cuts"),
        retransmitted: db.counter(Some(&net.b), "rxe0", "retransmitted_pkts"),
        sent: db.counter(Some(&net.b), "rxe0", "sent_pkts"),
    }
}

#[test]
fn dcqcn_slows_two_senders_down_and_off_they_overflow_the_link() {
    let _s = serial();
    if missing(&["ib_write_bw", "nft", "tc"]) {
        return;
    }
    let Some(net) = two_hosts() else { return };
    // The senders' link: 200 Mbit/s with 256 KB of queue (less than the two QPs' windows);
    // CE on whatever RoCE traffic exceeds 12 MB/s (about half the link), as a switch marks
    // above its threshold, and on 0.2% of the rest, so the run without DCQCN (which
    // collapses to less after its drops) still gets CNPs to ignore.
    let shape = format!(
        "set -e
         ip netns exec {b} tc qdisc add dev {i} root tbf rate 200mbit burst 32kb limit 256kb
         ip netns exec {b} nft add table ip rdmaemu_dcqcn
         ip netns exec {b} nft add chain ip rdmaemu_dcqcn post '{{ type filter hook postrouting priority 0 ; }}'
         ip netns exec {b} nft add rule ip rdmaemu_dcqcn post udp dport 4791 limit rate over 12 mbytes/second burst 64 kbytes ip ecn set ce
         ip netns exec {b} nft add rule ip rdmaemu_dcqcn post udp dport 4791 numgen random mod 1000 lt 2 ip ecn set ce",
        b = net.b.name,
        i = net.iface,
    );
    if let Err(e) = sh(&shape) {
        let _ = cannot_run(&format!("cannot shape the link (tc tbf, nftables): {e}"));
        return;
    }
    if let Some(csv) = trace_csv() {
        assert!(
            !missing(&["tcpdump", "tshark"]),
            "RDMA_EMU_DCQCN_CSV: the rate traces need tcpdump and tshark"
        );
        // A fresh trace: both runs are appended below.
        let _ = std::fs::remove_file(csv);
    }
    let on = two_senders(&net, &["--netdev", net.iface], "dcqcn");
    let dir = TempDir::new("dcqcn");
    let off_config = dir.path().join("off.toml");
    std::fs::write(
        &off_config,
        format!(
            "[[device]]\nname = \"rxe0\"\nnetdev = \"{}\"\n[device.dcqcn]\nenabled = false\n",
            net.iface
        ),
    )
    .unwrap();
    let off = two_senders(&net, &["--config", off_config.to_str().unwrap()], "off");
    eprintln!("DCQCN on: {on:?}\nDCQCN off: {off:?}");
    // On: every CNP handled, rates cut, the link shared.
    assert!(on.cnp_sent > 0 && on.cuts > 0, "{on:?}");
    assert!(
        on.handled <= on.cnp_sent && on.handled * 10 >= on.cnp_sent * 9,
        "{on:?}"
    );
    assert_eq!(on.ignored, 0, "{on:?}");
    let (lo, hi) = (on.mb_s[0].min(on.mb_s[1]), on.mb_s[0].max(on.mb_s[1]));
    assert!(lo > 0.0 && lo * 2.0 >= hi, "senders share the link: {on:?}");
    // Retransmissions near zero: the burst before the first CNPs arrive overflows the
    // token bucket (there is no PFC), then DCQCN keeps it from overflowing.
    assert!(on.retransmitted * 100 < on.sent, "{on:?}");
    // Off: the CNPs ignored, the token bucket overflows, packets are retransmitted.
    assert!(off.cnp_sent > 0 && off.ignored > 0, "{off:?}");
    assert_eq!((off.handled, off.cuts), (0, 0), "{off:?}");
    assert!(off.retransmitted > 0, "{off:?}");
}
