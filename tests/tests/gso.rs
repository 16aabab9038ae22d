//! GSO and GRO on the udp backend between two namespaces joined by veth: a RoCE message
//! leaves as UDP GSO super-datagrams and arrives through GRO (the counters say so, and no
//! ICRC needed its IP ID solved for), and the packets the kernel cuts from those
//! super-datagrams carry, on the wire, an ICRC that verifies over their real IP header
//! (the ID counts up per segment): a capture taken on the peer's veth verifies every ICRC.
use rdma_emu_tests::two_host::{assert_clean_receive, hosts, perftest};
use rdma_emu_tests::*;
use std::process::Command;

#[test]
fn ib_write_bw_between_two_namespaces_goes_through_gso_and_gro() {
    let _s = serial();
    if missing(&["ib_write_bw"]) {
        return;
    }
    let Some((net, da, db)) = hosts("udp", "udp") else {
        return;
    };
    let row = perftest(&net, &da, &db, "ib_write_bw", &["-s", "65536", "-n", "300"]);
    assert!(row.split_whitespace().count() >= 4, "{row}");
    // The client (host b) writes, the server (host a) receives.
    let sent = db.counter(Some(&net.b), "rxe0", "udp_tx_gso_datagrams");
    let in_them = db.counter(Some(&net.b), "rxe0", "udp_tx_gso_packets");
    let received = da.counter(Some(&net.a), "rxe0", "udp_rx_gro_datagrams");
    let split = da.counter(Some(&net.a), "rxe0", "udp_rx_gro_packets");
    assert!(
        sent > 0 && in_them >= 2 * sent,
        "GSO: {sent} datagrams, {in_them} packets"
    );
    assert!(
        received > 0 && split >= 2 * received,
        "GRO: {received}, {split} packets"
    );
    // 300 messages of 64 packets (path MTU 1024) went, all in super-datagrams.
    assert!(in_them >= 300 * 64, "{in_them} packets in GSO datagrams");
    assert_eq!(db.counter(Some(&net.b), "rxe0", "udp_tx_gso_refused"), 0);
    // Each segment's ICRC was moved to its wire ID and back: verified for ID 0 directly.
    assert_eq!(da.counter(Some(&net.a), "rxe0", "icrc_solved_ip_id"), 0);
    assert_clean_receive(&net, &da, &db);
}

#[test]
fn segments_captured_on_the_peer_veth_verify_every_icrc() {
    let _s = serial();
    if missing(&["ib_write_bw", "tcpdump", "ethtool"]) {
        return;
    }
    let Some((net, da, db)) = hosts("udp", "udp") else {
        return;
    };
    // Host b's veth segments in software (as a NIC without UDP segmentation offload
    // does), so host a's end sees the packets the wire would carry, not super-frames.
    if let Err(e) = sh(&format!(
        "ip netns exec {} ethtool -K {} tx-udp-segmentation off",
        net.b.name, net.iface
    )) {
        let _ = cannot_run(&format!("cannot turn UDP segmentation off on veth: {e}"));
        return;
    }
    let dir = TempDir::new("gso-capture");
    let pcap = dir.path().join("segments.pcap");
    let capture = Tcpdump::start(&net.a, net.iface, "udp port 4791", &pcap);
    perftest(&net, &da, &db, "ib_write_bw", &["-s", "65536", "-n", "50"]);
    capture.stop();
    assert!(db.counter(Some(&net.b), "rxe0", "udp_tx_gso_datagrams") > 0);

    let decode = Command::new(bin_dir().join("rdma-emu"))
        .arg("decode")
        .arg(&pcap)
        .output()
        .expect("rdma-emu decode");
    let text = String::from_utf8_lossy(&decode.stdout);
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("BAD"))
        .take(10)
        .collect();
    assert!(
        decode.status.success() && bad.is_empty(),
        "rdma-emu decode found a bad ICRC ({}):\n{}",
        decode.status,
        bad.join("\n")
    );
    // 50 messages of 64 packets each, every one a segment of its own on this wire.
    let writes = text.lines().filter(|l| l.contains("Rc Write")).count();
    assert!(
        writes >= 50 * 64,
        "only {writes} WRITE packets decoded:\n{text:.2000}"
    );
    let ok = text.lines().filter(|l| l.contains("ICRC ok")).count();
    assert!(
        ok >= writes,
        "{ok} ICRCs verified for {writes} WRITE packets"
    );
    // The segments after the first carried IP IDs 1, 2, …, their ICRCs computed for
    // those: the receiver, which cannot see the ID, solved for it (or, had veth coalesced
    // them again, GRO's split moved them back to ID 0).
    let solved = da.counter(Some(&net.a), "rxe0", "icrc_solved_ip_id");
    let coalesced = da.counter(Some(&net.a), "rxe0", "udp_rx_gro_datagrams");
    assert!(
        solved > 0 || coalesced > 0,
        "solved {solved}, coalesced {coalesced}"
    );
    assert_clean_receive(&net, &da, &db);
}
