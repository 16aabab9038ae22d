//! Every long-running command ends cleanly on SIGTERM and on SIGINT, exit 0, with its
//! output complete: `rdma-emu capture` (the pcap readable to its last frame, as many
//! frames as it said it wrote), `rdma-emu top` (on a pipe and in a terminal), and the
//! daemon itself.
use rdma_emu_tests::*;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a command may take to end after the signal: generous for a loaded machine;
/// a command that ignores the signal never ends.
const END_LIMIT: Duration = Duration::from_secs(20);

/// Sends `sig` to `child` and waits for it to end (killed and failed past [`END_LIMIT`]).
fn signal_and_wait(child: &mut Child, sig: libc::c_int, what: &str) -> std::process::ExitStatus {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        if start.elapsed() > END_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {END_LIMIT:?} of signal {sig}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `rdma-emu ARGS` against `daemon` in `ns`, stdout and stderr piped.
fn cli(daemon: &Daemon, ns: &Netns, args: &[&str]) -> Child {
    let mut argv = ns.exec_prefix();
    argv.push(bin_dir().join("rdma-emu").display().to_string());
    argv.push("--socket".into());
    argv.push(daemon.socket.display().to_string());
    argv.extend(args.iter().map(|s| s.to_string()));
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run rdma-emu")
}

fn read_all(r: Option<impl Read>) -> String {
    let mut s = String::new();
    if let Some(mut r) = r {
        let _ = r.read_to_string(&mut s);
    }
    s
}

/// A ping-pong of 200 checked iterations (`-c`: the data is validated) on rxe0.
fn pingpong(daemon: &Daemon, ns: &Netns) {
    let gid = daemon.ipv4_gid_index(Some(ns));
    let server = [
        "ibv_rc_pingpong",
        "-d",
        "rxe0",
        "-g",
        &gid,
        "-n",
        "200",
        "-c",
        "-p",
        "18531",
    ];
    let mut client = server.to_vec();
    client.push("127.0.0.1");
    let (s, c) = run_pair(
        daemon,
        Some(ns),
        &server,
        daemon,
        Some(ns),
        &client,
        18531,
        Duration::from_secs(120),
    );
    assert_both(&s, &c);
}

fn capture_ends_on(sig: libc::c_int) {
    let _s = serial();
    if missing(&["ibv_rc_pingpong", "tshark"]) {
        return;
    }
    let Some(ns) = loopback_ns("sigcap", false) else {
        return;
    };
    let daemon = Daemon::start_with(Some(&ns), &[]);
    let dir = TempDir::new("sigcap");
    let pcap = dir.path().join("c.pcap");
    let mut cap = cli(
        &daemon,
        &ns,
        &["capture", "rxe0", &pcap.display().to_string()],
    );
    // The file exists once the daemon accepted the capture (the header comes first).
    let start = Instant::now();
    while std::fs::metadata(&pcap).map_or(0, |m| m.len()) < 24 {
        assert!(start.elapsed() < END_LIMIT, "capture never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    pingpong(&daemon, &ns);
    let status = signal_and_wait(&mut cap, sig, "rdma-emu capture");
    let err = read_all(cap.stderr.take());
    assert!(status.success(), "capture: {status}\n{err}");
    let written: usize = err
        .split_whitespace()
        .skip_while(|w| *w != "rdma-emu:")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no frame count in: {err}"));
    // 200 round trips of a Send and its ACK each way, at least.
    assert!(written >= 800, "only {written} frames:\n{err}");
    // tshark reads every frame, and the file does not end in the middle of one.
    let out = Command::new("tshark")
        .args(["-r", &pcap.display().to_string()])
        .output()
        .expect("tshark -r");
    let tshark_err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark: {tshark_err}");
    assert!(!tshark_err.contains("cut short"), "{tshark_err}");
    let frames = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(frames, written, "tshark read {frames} of {written} frames");
}

#[test]
fn capture_ends_on_sigterm_with_every_frame_readable() {
    capture_ends_on(libc::SIGTERM);
}

#[test]
fn capture_ends_on_sigint_with_every_frame_readable() {
    capture_ends_on(libc::SIGINT);
}

/// `top` on a pipe: frames keep coming until the signal, then exit 0 with the last
/// frame whole.
fn top_ends_on(sig: libc::c_int) {
    let _s = serial();
    let Some(ns) = loopback_ns("sigtop", false) else {
        return;
    };
    let daemon = Daemon::start_with(Some(&ns), &[]);
    let mut top = cli(&daemon, &ns, &["top", "--interval", "0.2"]);
    let out = top.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || read_all(Some(out)));
    // Let it draw a few frames (each asks the daemon; a loaded machine is slow).
    std::thread::sleep(Duration::from_secs(2));
    let status = signal_and_wait(&mut top, sig, "rdma-emu top");
    let text = reader.join().unwrap_or_default();
    let err = read_all(top.stderr.take());
    assert!(status.success(), "top: {status}\n{err}");
    let frames = text.matches("rdma-emu top:").count();
    assert!(frames >= 1, "no frame:\n{text}\n{err}");
    assert!(text.lines().any(|l| l.starts_with("rxe0")), "{text}");
}

#[test]
fn top_ends_on_sigterm_with_exit_0() {
    top_ends_on(libc::SIGTERM);
}

#[test]
fn top_ends_on_sigint_with_exit_0() {
    top_ends_on(libc::SIGINT);
}

fn daemon_ends_on(sig: libc::c_int) {
    let _s = serial();
    let Some(ns) = loopback_ns("sigd", false) else {
        return;
    };
    let dir = TempDir::new("sigd");
    let socket = dir.path().join("s.sock");
    let mut argv = ns.exec_prefix();
    argv.push(bin_dir().join("rdma-emud").display().to_string());
    argv.extend(["--socket".to_string(), socket.display().to_string()]);
    let mut d = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rdma-emud");
    let start = Instant::now();
    while !socket.exists() {
        assert!(start.elapsed() < END_LIMIT, "rdma-emud never served");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = signal_and_wait(&mut d, sig, "rdma-emud");
    let log = read_all(d.stderr.take());
    assert!(status.success(), "rdma-emud: {status}\n{log}");
    assert!(log.contains("shutting down"), "{log}");
    assert!(!socket.exists(), "the socket was left behind");
}

#[test]
fn daemon_ends_on_sigterm_with_exit_0() {
    daemon_ends_on(libc::SIGTERM);
}

#[test]
fn daemon_ends_on_sigint_with_exit_0() {
    daemon_ends_on(libc::SIGINT);
}
