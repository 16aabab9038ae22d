//! Fault injection (`rdma-emu fault`, docs/faults.md): under each fault, unmodified
//! programs and a small C program see what real hardware would show them: recovery
//! within the retry budgets, RETRY_EXC_ERR / RNR_RETRY_EXC_ERR / REM_ACCESS_ERR beyond
//! them, PORT_ERR and PORT_ACTIVE on link changes, a flush after a QP is killed. Every test
//! runs one daemon with `rxe0` on loopback (the local path: each packet passes the
//! device's tx rules, then its rx rules).
//!
//! Loss in the pingpong tests is limited to SENDs: ibv_rc_pingpong exits after its last
//! completion, so a lost final ACK leaves the peer retrying to a destroyed QP until
//! RETRY_EXC_ERR, on hardware as here.

use rdma_emu_tests::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// `rdma-emu fault ARGS` must succeed; its output.
fn fault(daemon: &Daemon, args: &[&str]) -> String {
    let mut argv = vec!["fault"];
    argv.extend(args);
    let out = daemon.cli(None, &argv);
    out.assert_success();
    out.stdout
}

/// ibv_rc_pingpong server and client on one daemon, `iters` round trips.
fn pingpong(daemon: &Daemon, iters: &str) -> (Output, Output) {
    let gid = daemon.ipv4_gid_index(None);
    let server = [
        "ibv_rc_pingpong",
        "-d",
        "rxe0",
        "-g",
        &gid,
        "-n",
        iters,
        "-p",
        "18517",
    ];
    let mut client = server.to_vec();
    client.push("127.0.0.1");
    run_pair(daemon, None, &server, daemon, None, &client, 18517, LIMIT)
}

fn pingpong_succeeds(daemon: &Daemon, iters: &str) {
    let (s, c) = pingpong(daemon, iters);
    s.assert_success();
    c.assert_success();
    assert!(c.stdout.contains("iters in"), "no summary:\n{}", c.stdout);
}

/// The C program's single SEND with these budgets; the status it printed.
fn send_once(daemon: &Daemon, exe: &std::path::Path, retry: &str, rnr_retry: &str) -> String {
    let out = daemon
        .program(
            None,
            &[
                exe.to_str().expect("utf-8 path"),
                "rxe0",
                "send-once",
                retry,
                rnr_retry,
            ],
        )
        .wait(LIMIT);
    out.assert_success();
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("send status "))
        .unwrap_or_else(|| panic!("no status line:\n{}", out.stdout))
        .to_string()
}

fn skip() -> bool {
    missing(&["ibv_rc_pingpong"])
}

#[test]
fn lost_packets_are_retransmitted_within_the_budget() {
    let _s = serial();
    if skip() {
        return;
    }
    let daemon = Daemon::start();
    fault(
        &daemon,
        &[
            "add", "rxe0", "drop", "5%", "--opcode", "send", "--seed", "1",
        ],
    );
    pingpong_succeeds(&daemon, "300");
    assert!(daemon.counter(None, "rxe0", "fault_dropped") > 0);
    assert!(daemon.counter(None, "rxe0", "retransmitted_pkts") > 0);
}

#[test]
fn duplicated_reordered_delayed_and_corrupt_packets_do_not_break_a_connection() {
    let _s = serial();
    if skip() {
        return;
    }
    let daemon = Daemon::start();
    fault(&daemon, &["add", "rxe0", "duplicate", "10%", "--seed", "2"]);
    fault(&daemon, &["add", "rxe0", "reorder", "10%", "--seed", "3"]);
    fault(
        &daemon,
        &[
            "add", "rxe0", "delay", "1ms", "10%", "--dir", "rx", "--seed", "4",
        ],
    );
    fault(
        &daemon,
        &[
            "add", "rxe0", "corrupt", "3%", "--dir", "tx", "--opcode", "send", "--seed", "5",
        ],
    );
    pingpong_succeeds(&daemon, "300");
    for counter in [
        "fault_duplicated",
        "fault_reordered",
        "fault_delayed",
        "fault_corrupted",
        "duplicate_request",
    ] {
        assert!(
            daemon.counter(None, "rxe0", counter) > 0,
            "{counter} stayed 0"
        );
    }
    // Every corrupted packet was caught by the ICRC check (twice when it was also
    // duplicated), and nothing else failed it.
    let (bad, corrupted) = (
        daemon.counter(None, "rxe0", "icrc_errors"),
        daemon.counter(None, "rxe0", "fault_corrupted"),
    );
    assert!(
        (corrupted..=2 * corrupted).contains(&bad),
        "{bad} ICRC errors for {corrupted} corrupted packets"
    );
}

#[test]
fn retry_and_rnr_budgets_hold_and_run_out_as_on_hardware() {
    let _s = serial();
    let dir = TempDir::new("faults-c");
    let Some(exe) = compile_c("verbs_integrity", dir.path()) else {
        return;
    };
    let daemon = Daemon::start();
    // Two lost SENDs, three tries allowed: the third arrives.
    fault(
        &daemon,
        &["add", "rxe0", "drop", "--opcode", "send", "--count", "2"],
    );
    assert_eq!(send_once(&daemon, &exe, "3", "0"), "success (0)");
    fault(&daemon, &["clear"]);
    // Every ACK lost: the SEND arrives, its sender never hears of it.
    fault(&daemon, &["add", "rxe0", "drop", "--opcode", "ack"]);
    assert_eq!(
        send_once(&daemon, &exe, "2", "0"),
        "transport retry counter exceeded (12)"
    );
    fault(&daemon, &["clear"]);
    // Two RNR NAKs, three RNR retries allowed.
    fault(&daemon, &["add", "rxe0", "rnr", "--count", "2"]);
    assert_eq!(send_once(&daemon, &exe, "7", "3"), "success (0)");
    fault(&daemon, &["clear"]);
    // RNR NAKs without end, one retry allowed.
    fault(&daemon, &["add", "rxe0", "rnr"]);
    assert_eq!(
        send_once(&daemon, &exe, "7", "1"),
        "RNR retry counter exceeded (13)"
    );
    assert_eq!(daemon.counter(None, "rxe0", "fault_rnr_forced"), 4);
    assert_eq!(daemon.counter(None, "rxe0", "rnr_nak_retry_err"), 1);
    fault(&daemon, &["clear"]);
    // The port down: nothing passes, the retries run out.
    fault(&daemon, &["add", "rxe0", "link", "down"]);
    assert_eq!(
        send_once(&daemon, &exe, "2", "0"),
        "transport retry counter exceeded (12)"
    );
    assert!(daemon.counter(None, "rxe0", "link_down_drops") >= 3);
}

#[test]
fn rnr_naks_and_psn_sequence_naks_are_recovered_by_ibv_rc_pingpong() {
    let _s = serial();
    if skip() {
        return;
    }
    let daemon = Daemon::start();
    fault(&daemon, &["add", "rxe0", "rnr", "--count", "3"]);
    fault(&daemon, &["add", "rxe0", "nak", "psn-seq", "--count", "3"]);
    pingpong_succeeds(&daemon, "100");
    assert_eq!(daemon.counter(None, "rxe0", "rcvd_rnr_err"), 3);
    assert_eq!(daemon.counter(None, "rxe0", "fault_nak_forced"), 3);
    assert!(daemon.counter(None, "rxe0", "rcvd_seq_err") >= 3);
}

#[test]
fn a_remote_access_nak_fails_the_sender_and_flushes_the_responder() {
    let _s = serial();
    if skip() {
        return;
    }
    let daemon = Daemon::start();
    fault(
        &daemon,
        &[
            "add",
            "rxe0",
            "nak",
            "remote-access",
            "--opcode",
            "send",
            "--count",
            "1",
        ],
    );
    let (s, c) = pingpong(&daemon, "100");
    let both = format!("{}{}{}{}", s.stdout, s.stderr, c.stdout, c.stderr);
    assert!(
        !s.success() && !c.success(),
        "both sides must fail:\n{both}"
    );
    assert!(both.contains("remote access error (10)"), "{both}");
    assert!(both.contains("Work Request Flushed Error (5)"), "{both}");
}

#[test]
fn link_down_and_up_reach_applications_as_port_events() {
    let _s = serial();
    if missing(&["ibv_asyncwatch", "ibv_devinfo"]) {
        return;
    }
    let daemon = Daemon::start();
    let watch = daemon.program(None, &["ibv_asyncwatch", "-d", "rxe0"]);
    std::thread::sleep(Duration::from_millis(500));
    fault(&daemon, &["add", "rxe0", "link", "down"]);
    let info = daemon
        .program(None, &["ibv_devinfo", "-d", "rxe0"])
        .wait(LIMIT);
    info.assert_success();
    assert!(info.stdout.contains("PORT_DOWN"), "{}", info.stdout);
    let link = daemon.cli(None, &["link", "show"]);
    assert!(
        link.stdout
            .contains("link rxe0/1 state DOWN physical_state DISABLED"),
        "{}",
        link.stdout
    );
    fault(&daemon, &["add", "rxe0", "link", "up"]);
    std::thread::sleep(Duration::from_millis(500));
    let mut watch = watch;
    watch.kill9();
    let out = watch.wait(LIMIT);
    let err = out.stdout.find("IBV_EVENT_PORT_ERR (10), port 1");
    let active = out.stdout.find("IBV_EVENT_PORT_ACTIVE (9), port 1");
    assert!(
        matches!((err, active), (Some(e), Some(a)) if e < a),
        "PORT_ERR then PORT_ACTIVE expected:\n{}",
        out.stdout
    );
}

#[test]
fn a_killed_qp_flushes_its_work_requests() {
    let _s = serial();
    if skip() {
        return;
    }
    let daemon = Daemon::start();
    let gid = daemon.ipv4_gid_index(None);
    let server = [
        "ibv_rc_pingpong",
        "-d",
        "rxe0",
        "-g",
        &gid,
        "-n",
        "100000000",
        "-p",
        "18518",
    ];
    let mut client = server.to_vec();
    client.push("127.0.0.1");
    let srv = daemon.program(None, &server);
    assert!(wait_listening(None, 18518, Duration::from_secs(20)));
    let cli = daemon.program(None, &client);
    // The QPs exist once `stat --qp` finds them; the server's is created first.
    let start = std::time::Instant::now();
    let qpn = loop {
        let found = (1..200u32).find(|q| {
            daemon
                .cli(None, &["stat", "rxe0", "--qp", &q.to_string()])
                .success()
        });
        if let Some(q) = found {
            break q;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no QP appeared");
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(300));
    fault(&daemon, &["add", "rxe0", "kill-qp", &qpn.to_string()]);
    let s = srv.wait(Duration::from_secs(20));
    let mut cli = cli;
    cli.kill9();
    let c = cli.wait(LIMIT);
    assert!(!s.success(), "the killed side must fail:\n{}", s.stdout);
    assert!(
        s.stderr.contains("Work Request Flushed Error (5)")
            || s.stdout.contains("Work Request Flushed Error (5)"),
        "{}\n{}\n(client: {})",
        s.stdout,
        s.stderr,
        c.stdout
    );
    let missing = daemon.cli(None, &["fault", "add", "rxe0", "kill-qp", "99999"]);
    assert!(!missing.success());
    assert!(missing.stderr.contains("no QP 99999"), "{}", missing.stderr);
}

/// The rule's `pattern` from `fault list` (decisions for the first 64 matching packets).
fn pattern(daemon: &Daemon) -> String {
    let list = fault(daemon, &["list"]);
    let words: Vec<&str> = list.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "pattern")
        .expect("a pattern");
    words[at + 1].to_string()
}

#[test]
fn the_same_seed_gives_the_same_fault_pattern() {
    let _s = serial();
    if skip() {
        return;
    }
    let mut patterns = Vec::new();
    for seed in ["7", "7", "8"] {
        let daemon = Daemon::start();
        fault(
            &daemon,
            &[
                "add", "rxe0", "drop", "10%", "--opcode", "send", "--seed", seed,
            ],
        );
        pingpong_succeeds(&daemon, "100");
        patterns.push(pattern(&daemon));
    }
    assert_eq!(patterns[0], patterns[1], "same seed, same decisions");
    assert_ne!(patterns[0], patterns[2], "another seed, other decisions");
    assert_ne!(patterns[0], "0x0000000000000000");
    // Without --seed, the daemon's seed and the rule's id decide: the same on every
    // daemon started alike, and `fault list` shows it for a replay.
    let first = fault(&Daemon::start(), &["add", "rxe0", "drop", "1%"]);
    let second = fault(&Daemon::start(), &["add", "rxe0", "drop", "1%"]);
    assert_eq!(first, second);
}

#[test]
fn faults_from_the_environment_are_in_place_at_start() {
    let _s = serial();
    let daemon = Daemon::start_env(
        None,
        &[],
        &[(
            "RDMA_EMU_FAULTS",
            "rxe0 drop 1% --seed 3; rxe0 delay 200us --dir rx",
        )],
    );
    let list = fault(&daemon, &["list"]);
    assert!(list.contains("1 rxe0 drop 1% --seed 3 seed 3"), "{list}");
    assert!(list.contains("2 rxe0 delay 200us --dir rx seed"), "{list}");
    let removed = fault(&daemon, &["clear", "rxe0", "1"]);
    assert!(removed.starts_with("1 rxe0 drop"), "{removed}");
    assert!(!fault(&daemon, &["list"]).contains("drop"));
    drop(daemon);
    // The configuration file's come first, then the environment's.
    let dir = TempDir::new("faults-config");
    let config = dir.path().join("rdma-emud.toml");
    std::fs::write(
        &config,
        "faults = [\"rxe0 rnr --count 2\", \"rxe0 duplicate 1%; rxe0 link down\"]\n",
    )
    .expect("config written");
    let daemon = Daemon::start_env(
        None,
        &["--config", config.to_str().expect("utf-8 path")],
        &[("RDMA_EMU_FAULTS", "rxe0 corrupt 1%")],
    );
    let list = fault(&daemon, &["list"]);
    let rules: Vec<&str> = list.lines().collect();
    assert_eq!(rules.len(), 3, "{list}");
    assert!(rules[0].starts_with("1 rxe0 rnr --count 2 "), "{list}");
    assert!(rules[1].starts_with("2 rxe0 duplicate 1% "), "{list}");
    assert!(rules[2].starts_with("3 rxe0 corrupt 1% "), "{list}");
    let link = daemon.cli(None, &["link", "show"]);
    assert!(
        link.stdout.contains("link rxe0/1 state DOWN"),
        "{}",
        link.stdout
    );
}

#[test]
fn bad_fault_requests_are_refused_with_a_reason() {
    let _s = serial();
    let daemon = Daemon::start();
    for (args, says) in [
        (&["add", "rxe0", "drop", "200%"][..], "more than 100%"),
        (&["add", "rxe0", "explode"], "unknown fault"),
        (&["add", "nodev", "drop"], "No such device"),
        (&["add", "siw0", "drop", "1%"], "packet faults act on RoCE"),
        (&["clear", "rxe0", "42"], "No such file"),
    ] {
        let mut argv = vec!["fault"];
        argv.extend(args);
        let out = daemon.cli(None, &argv);
        assert!(!out.success(), "{args:?} must fail");
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    drop(daemon);
    // A daemon refuses to start with faults it cannot parse, and says why.
    let dir = TempDir::new("faults-env");
    let out = std::process::Command::new(bin_dir().join("rdma-emud"))
        .arg("--socket")
        .arg(dir.path().join("s"))
        .env("RDMA_EMU_FAULTS", "rxe0 drop 1%; rxe0 explode")
        .output()
        .expect("rdma-emud runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("RDMA_EMU_FAULTS") && err.contains("explode"),
        "{err}"
    );
}

#[test]
fn ib_write_bw_and_rping_complete_through_lost_packets() {
    let _s = serial();
    if missing(&["ib_write_bw", "rping"]) {
        return;
    }
    let daemon = Daemon::start();
    fault(
        &daemon,
        &[
            "add", "rxe0", "drop", "1%", "--opcode", "write", "--seed", "11",
        ],
    );
    let server = [
        "ib_write_bw",
        "-d",
        "rxe0",
        "-p",
        "18522",
        "-F",
        "-s",
        "65536",
        "-n",
        "2000",
    ];
    let mut client = server.to_vec();
    client.push("127.0.0.1");
    let (s, c) = run_pair(&daemon, None, &server, &daemon, None, &client, 18522, LIMIT);
    s.assert_success();
    c.assert_success();
    assert!(c.stdout.contains("65536      2000"), "{}", c.stdout);
    assert!(daemon.counter(None, "rxe0", "fault_dropped") > 0);
    assert!(daemon.counter(None, "rxe0", "retransmitted_pkts") > 0);
    fault(&daemon, &["clear"]);
    // rping through RDMA CM: its SENDs and the READs' responses lost now and then, every
    // ping still verified.
    fault(
        &daemon,
        &[
            "add", "rxe0", "drop", "3%", "--opcode", "send", "--seed", "12",
        ],
    );
    fault(
        &daemon,
        &[
            "add",
            "rxe0",
            "drop",
            "3%",
            "--opcode",
            "read-response",
            "--seed",
            "13",
        ],
    );
    let srv = daemon.program(
        None,
        &["rping", "-s", "-a", "127.0.0.1", "-p", "7175", "-C", "50"],
    );
    let (_, c) = run_pair_when(
        srv,
        || wait_cm_listening(&daemon, None, 7175, Duration::from_secs(20)),
        "RDMA CM port 7175",
        || {
            daemon.program(
                None,
                &[
                    "rping",
                    "-c",
                    "-a",
                    "127.0.0.1",
                    "-p",
                    "7175",
                    "-v",
                    "-V",
                    "-C",
                    "50",
                ],
            )
        },
        LIMIT,
    );
    c.assert_success();
    let pings = rping_pings(&c);
    assert_eq!(pings, 50, "{}", c.stdout);
    assert!(daemon.counter(None, "rxe0", "fault_dropped") > 0);
}
