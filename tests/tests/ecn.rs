//! ECN and the notification point end to end (issue 10): two daemons in two namespaces,
//! RoCE packets leave ECN-capable (ECT(0)), an nftables rule in the sender's namespace marks
//! 5% of them Congestion Experienced (this kernel has no ECN-marking queue discipline:
//! red, fq_codel, codel, pie are all compiled out), and `ib_write_bw` runs across. The
//! receiver answers marked packets with CNPs, at most one per QP per 50 µs; the sender
//! receives every one. tcpdump on the veth: every data packet ECT(0) or CE, every CNP
//! shaped as a ConnectX CNP (opcode 0x81, P_Key 0xffff, BECN, PSN 0, 16 zero octets, 74
//! octets on the wire) with a valid ICRC (`rdma-emu decode`), nothing malformed (tshark).
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
    let received = db.counter(Some(&net.b), "rxe0", "rp_cnp_ignored");
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
