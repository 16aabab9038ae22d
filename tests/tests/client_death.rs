//! A client process killed with SIGKILL in the middle of a transfer: the daemon releases
//! what it held, its peer sees an error completion (never a hang), and the daemon goes on
//! serving everyone else.
use rdma_emu_tests::*;
use std::time::{Duration, Instant};

#[test]
fn peer_of_a_killed_client_fails_cleanly_and_the_daemon_keeps_serving() {
    let _s = serial();
    if missing(&["ib_write_bw", "ibv_rc_pingpong", "ibv_devinfo"]) {
        return;
    }
    let daemon = Daemon::start();
    // The client WRITEs into the server's memory for 30 s; the server is only the target
    // of one-sided operations, so killing it leaves the client's WRITEs unanswered.
    let argv = ["ib_write_bw", "-d", "rxe0", "-p", "18517", "-F", "-D", "30"];
    let mut server = daemon.program(None, &argv);
    assert!(
        wait_listening(None, 18517, Duration::from_secs(20)),
        "server never listened"
    );
    let mut client_argv = argv.to_vec();
    client_argv.push("127.0.0.1");
    let client = daemon.program(None, &client_argv);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        server.running(),
        "the server ended before it could be killed"
    );
    server.kill9();
    let killed = Instant::now();
    let _ = server.wait(Duration::from_secs(10));

    // The client's next WRITEs go to a QP that no longer exists: they are retried and fail
    // with retry exceeded within its budget (retry_cnt 7 x 4.096 us x 2^14 ~ 0.5 s).
    let out = client.wait(Duration::from_secs(25));
    assert!(
        out.status.is_some(),
        "the client hung after its peer died:\n{}",
        out.stderr
    );
    assert!(
        !out.success(),
        "the client cannot succeed without its peer:\n{}",
        out.stdout
    );
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        all.contains("error"),
        "the client should report a completion error:\n{all}"
    );
    eprintln!(
        "client failed {:?} after its peer was killed",
        killed.elapsed()
    );

    // The daemon still serves: a fresh pair completes.
    let info = daemon
        .program(None, &["ibv_devinfo", "-v"])
        .wait(Duration::from_secs(60));
    info.assert_success();
    let gid = roce_v2_ipv4_gid_index(&info.stdout)
        .expect("IPv4 GID")
        .to_string();
    let argv = ["ibv_rc_pingpong", "-d", "rxe0", "-g", &gid, "-p", "18518"];
    let mut client_argv = argv.to_vec();
    client_argv.push("127.0.0.1");
    let (s, c) = run_pair(
        &daemon,
        None,
        &argv,
        &daemon,
        None,
        &client_argv,
        18518,
        Duration::from_secs(60),
    );
    s.assert_success();
    c.assert_success();
}
