//! The traffic two daemons exchange, captured by the kernel on the veth between two
//! network namespaces (not by rdma-emu itself), must be what a RoCE v2 NIC sends:
//! Wireshark dissects every frame without a malformed or error-level item, and
//! `rdma-emu decode` verifies every ICRC. The same holds for the connection manager's
//! MADs on QP1 when `rping` connects through RDMA CM.
use rdma_emu_tests::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Starts tshark on `net.b`'s end of the veth, writing `pcap`; returns once it captures.
fn start_capture(net: &TwoHosts, pcap: &std::path::Path) -> std::process::Child {
    let capture = Command::new("ip")
        .args([
            "netns",
            "exec",
            &net.b.name,
            "tshark",
            "-q",
            "-i",
            net.iface,
        ])
        .args(["-f", "udp port 4791", "-w"])
        .arg(pcap)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start tshark");
    let start = std::time::Instant::now();
    while !pcap.exists() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    capture
}

/// Stops tshark so that it flushes and closes the file.
fn stop_capture(mut capture: std::process::Child) {
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on our own child's pid; SIGINT makes tshark flush and close the file.
    unsafe { libc::kill(capture.id() as libc::pid_t, libc::SIGINT) };
    let _ = capture.wait();
}

/// tshark's summary lines of `pcap` matching `filter`.
fn tshark_lines(pcap: &std::path::Path, filter: &str) -> Vec<String> {
    let out = Command::new("tshark")
        .args(TSHARK_FLAGS)
        .arg("-r")
        .arg(pcap)
        .args(["-Y", filter])
        .output()
        .expect("tshark -r");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// `rping` between two daemons through RDMA CM: the CM's REQ, REP, RTU, DREQ and DREP
/// dissect as CM messages with nothing malformed, and every ICRC verifies.
#[test]
fn rdma_cm_mads_dissect_as_cm_messages_and_verify() {
    let _s = serial();
    if missing(&["tshark", "rping"]) {
        return;
    }
    let Some(net) = two_hosts() else { return };
    let dir = TempDir::new("capture-cm");
    let pcap = dir.path().join("cm.pcap");
    let capture = start_capture(&net, &pcap);
    let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
    let srv = da.program(
        Some(&net.a),
        &["rping", "-s", "-a", &net.addr_a, "-p", "7174", "-C", "10"],
    );
    assert!(
        wait_cm_listening(&da, Some(&net.a), 7174, Duration::from_secs(20)),
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
                "7174",
                "-C",
                "10",
                "-V",
            ],
        )
        .wait(Duration::from_secs(60));
    let s = srv.wait(Duration::from_secs(30));
    c.assert_success();
    s.assert_success();
    stop_capture(capture);

    let cm = tshark_lines(&pcap, "infiniband");
    let text = cm.join("\n");
    for message in [
        "CM: ConnectRequest",
        "CM: ConnectReply",
        "CM: ReadyToUse",
        "CM: DisconnectRequest",
        "CM: DisconnectReply",
    ] {
        assert!(text.contains(message), "no {message} captured:\n{text}");
    }
    let bad = tshark_lines(&pcap, "_ws.malformed || _ws.expert.severity >= \"error\"");
    assert!(
        bad.is_empty(),
        "malformed or error-level frames:\n{}",
        bad.join("\n")
    );
    let decode = Command::new(bin_dir().join("rdma-emu"))
        .arg("decode")
        .arg(&pcap)
        .output()
        .expect("rdma-emu decode");
    let out = String::from_utf8_lossy(&decode.stdout);
    assert!(
        decode.status.success(),
        "rdma-emu decode: bad ICRC or frame:\n{out}"
    );
    for message in ["CM ConnectRequest", "CM ConnectReply", "CM ReadyToUse"] {
        assert!(out.contains(message), "decode shows no {message}:\n{out}");
    }
}

#[test]
fn two_host_traffic_dissects_cleanly_and_every_icrc_verifies() {
    let _s = serial();
    if missing(&[
        "tshark",
        "ibv_rc_pingpong",
        "ib_write_bw",
        "ib_read_bw",
        "ib_atomic_bw",
    ]) {
        return;
    }
    let Some(net) = two_hosts() else { return };
    let dir = TempDir::new("capture");
    let pcap = dir.path().join("roce.pcap");
    // tshark runs in host b's namespace and sees every frame on its end of the veth.
    let capture = start_capture(&net, &pcap);

    let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
    // Each host uses its own GID index (the tables can differ, see ipv4_gid_index).
    let (gid_a, gid_b) = (
        da.ipv4_gid_index(Some(&net.a)),
        db.ipv4_gid_index(Some(&net.b)),
    );
    for (server, mut client) in runs(&gid_a).into_iter().zip(runs(&gid_b)) {
        client.push(&net.addr_a);
        let (s, c) = run_pair(
            &da,
            Some(&net.a),
            &server,
            &db,
            Some(&net.b),
            &client,
            18515,
            Duration::from_secs(120),
        );
        s.assert_success();
        c.assert_success();
    }
    stop_capture(capture);

    let count = Command::new("tshark")
        .args(TSHARK_FLAGS)
        .arg("-r")
        .arg(&pcap)
        .args(["-Y", "infiniband"])
        .output()
        .expect("tshark -r");
    let frames = String::from_utf8_lossy(&count.stdout).lines().count();
    assert!(frames > 200, "only {frames} RoCE frames captured");

    let bad = Command::new("tshark")
        .args(TSHARK_FLAGS)
        .arg("-r")
        .arg(&pcap)
        .args(["-Y", "_ws.malformed || _ws.expert.severity >= \"error\""])
        .output()
        .expect("tshark -r");
    let bad_text = String::from_utf8_lossy(&bad.stdout);
    assert!(
        bad.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(
        bad_text.trim().is_empty(),
        "malformed or error-level frames:\n{bad_text}"
    );

    let decode = Command::new(bin_dir().join("rdma-emu"))
        .arg("decode")
        .arg(&pcap)
        .output()
        .expect("rdma-emu decode");
    let text = String::from_utf8_lossy(&decode.stdout);
    assert!(
        decode.status.success(),
        "rdma-emu decode found a bad ICRC ({}):\n{}{}",
        decode.status,
        text.lines()
            .filter(|l| l.to_lowercase().contains("bad"))
            .take(20)
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&decode.stderr)
    );
    assert!(
        text.lines().count() >= frames,
        "decode printed fewer lines than frames"
    );
}

/// The pairs this test runs, with `gid` as the local GID index where a program takes one.
fn runs(gid: &str) -> Vec<Vec<&str>> {
    vec![
        vec!["ibv_rc_pingpong", "-d", "rxe0", "-g", gid, "-n", "20"],
        vec![
            "ibv_ud_pingpong",
            "-d",
            "rxe0",
            "-g",
            gid,
            "-n",
            "20",
            "-s",
            "512",
        ],
        vec!["ib_write_bw", "-d", "rxe0", "-F", "-n", "50", "-s", "8192"],
        vec!["ib_read_bw", "-d", "rxe0", "-F", "-n", "50", "-s", "8192"],
        vec!["ib_atomic_bw", "-d", "rxe0", "-F", "-n", "50"],
    ]
}
