//! Lossless mode on the packet and xdp backends (issue 10): 802.1Qbb PFC frames received on
//! the interface stop the device's transmissions in the paused priority, and only there.
//!
//! Two namespaces joined by veth; host b's `rxe0` is on the backend under test and runs
//! `ib_write_bw` to host a with traffic class 96 (DSCP 24: priority 3) and an ACK timeout
//! of ≈ 0.54 s. A tiny AF_PACKET sender in host a (Python, real-time scheduled) sends PFC
//! frames with the maximum quanta (65535, ≈ 3.4 ms at veth's 10 Gbit/s) every
//! millisecond, then one with quanta 0 (resume). While priority 0 is paused the transfer
//! goes on; while priority 3 is, it stops, and it recovers after. Nothing is lost or
//! retransmitted, no ACK timer runs out, and the counters saw it all.
use rdma_emu_tests::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);
const PORT: u16 = 18630;

/// Sends PFC frames (priority-enable vector `enable`, every time 65535 quanta) on `iface`
/// every millisecond for `secs`, then one with all times 0.
const SENDER: &str = r#"
import socket, struct, sys, time
iface, enable, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
src = bytes.fromhex(open("/sys/class/net/%s/address" % iface).read().strip().replace(":", ""))
def frame(q):
    f = bytes.fromhex("0180c2000001") + src + struct.pack("!HHH8H", 0x8808, 0x0101, enable, *([q] * 8))
    return f + bytes(60 - len(f))
pause, resume = frame(0xffff), frame(0)
print("sending", flush=True)
end = time.monotonic() + secs
n = 0
while time.monotonic() < end:
    s.send(pause)
    n += 1
    time.sleep(0.001)
s.send(resume)
print(n + 1)
"#;

/// A PFC sender that has started sending.
struct PfcSender {
    child: Child,
    out: BufReader<ChildStdout>,
}

/// Starts the sender, real-time scheduled (`chrt -f`), as the daemons and ib_write_bw
/// busy-poll both cores: a sender woken late lets a pause run out, as a switch never
/// would. Returns once it says it is sending, so the test's measuring window starts from
/// the pause, not from a guess at how long a loaded machine takes to start Python.
fn pfc_sender(ns: &Netns, iface: &str, enable: u8, secs: f64) -> PfcSender {
    let mut child = Command::new("ip")
        .args([
            "netns", "exec", &ns.name, "chrt", "-f", "50", "python3", "-c", SENDER,
        ])
        .arg(iface)
        .arg(enable.to_string())
        .arg(secs.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    out.read_line(&mut line)
        .expect("the PFC sender's first line");
    assert_eq!(line.trim(), "sending", "the PFC sender did not start");
    PfcSender { child, out }
}

/// Frames a sender sent (it prints the count at its end).
fn frames_sent(mut p: PfcSender) -> u64 {
    let mut line = String::new();
    p.out.read_line(&mut line).expect("the PFC sender's count");
    let status = p.child.wait().expect("the PFC sender ends");
    assert!(status.success(), "PFC sender failed");
    line.trim().parse().expect("a frame count")
}

/// Packets b's device sent per second over `span`, from counter samples at its ends.
struct Sampler<'a> {
    d: &'a Daemon,
    ns: &'a Netns,
}

impl Sampler<'_> {
    fn sample(&self) -> (Instant, u64) {
        let n = self.d.counter(Some(self.ns), "rxe0", "sent_pkts");
        (Instant::now(), n)
    }

    /// Packets sent per second between `span`'s start and end (the first `skip` ignored).
    fn rate(&self, skip: Duration, span: Duration) -> f64 {
        std::thread::sleep(skip);
        let (t0, a) = self.sample();
        std::thread::sleep(span);
        let (t1, b) = self.sample();
        (b - a) as f64 / (t1 - t0).as_secs_f64()
    }
}

#[test]
fn pfc_frames_stop_the_paused_priority_only_and_nothing_is_lost() {
    pfc_scenario("packet");
}

#[test]
fn pfc_frames_stop_the_paused_priority_on_the_xdp_backend_too() {
    pfc_scenario("xdp");
}

/// The scenario with b's `rxe0` on `backend` (`packet` or `xdp`; its counters carry the
/// backend's name).
fn pfc_scenario(backend: &str) {
    let _s = serial();
    if missing(&["ib_write_bw", "python3", "chrt"]) {
        return;
    }
    let Some(net) = two_hosts() else { return };
    let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
    db.cli(Some(&net.b), &["link", "del", "rxe0"])
        .assert_success();
    db.cli(
        Some(&net.b),
        &[
            "link", "add", "rxe0", "type", "rxe", "netdev", net.iface, "backend", backend,
        ],
    )
    .assert_success();
    let links = db.cli(Some(&net.b), &["link", "show"]);
    assert!(
        links.stdout.contains("PFC priority = DSCP >> 3"),
        "{}",
        links.stdout
    );
    let (gid_a, gid_b) = (
        da.ipv4_gid_index(Some(&net.a)),
        db.ipv4_gid_index(Some(&net.b)),
    );
    let port = PORT.to_string();
    let args = |gid: &str| {
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
            "10",
            // Local ACK timeout 4.096 µs × 2^17 ≈ 0.54 s instead of perftest's 67 ms: on
            // this loaded two-core machine the receiving daemon is now and then late by
            // more than 67 ms (about 1 run in 5 saw ACK timeouts seconds after the last
            // pause, with every packet received; docs/congestion.md). The pauses here are
            // longer than either.
            "-u",
            "17",
            "-p",
            &port,
            "--tclass=96",
        ]
        .map(str::to_string)
        .to_vec()
    };
    let server_argv = args(&gid_a);
    let server_argv: Vec<&str> = server_argv.iter().map(String::as_str).collect();
    let server = da.program(Some(&net.a), &server_argv);
    assert!(
        wait_listening(Some(&net.a), PORT, Duration::from_secs(20)),
        "ib_write_bw listens"
    );
    let mut client_argv = args(&gid_b);
    client_argv.push(net.addr_a.clone());
    let client_argv: Vec<&str> = client_argv.iter().map(String::as_str).collect();
    let client = db.program(Some(&net.b), &client_argv);
    let s = Sampler { d: &db, ns: &net.b };
    let start = Instant::now();
    while s.sample().1 < 2000 {
        assert!(start.elapsed() < Duration::from_secs(20), "no traffic");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ms = Duration::from_millis;
    let before = s.rate(ms(0), ms(600));
    // Priority 0 paused: the transfer in priority 3 goes on.
    let other = pfc_sender(&net.a, net.iface, 0b0000_0001, 0.8);
    let during_other = s.rate(ms(100), ms(500));
    let mut frames = frames_sent(other);
    // Priority 3 paused for 1.2 s: it stops.
    let own = pfc_sender(&net.a, net.iface, 0b0000_1000, 1.2);
    let paused = s.rate(ms(200), ms(800));
    frames += frames_sent(own);
    let after = s.rate(ms(100), ms(600));
    eprintln!(
        "{backend}: packets/s: before {before:.0}, priority 0 paused {during_other:.0}, \
         priority 3 paused {paused:.0}, after {after:.0}; {frames} PFC frames"
    );
    let c = client.wait(LIMIT);
    let sv = server.wait(LIMIT);
    c.assert_success();
    sv.assert_success();
    let counter = |name: &str| db.counter(Some(&net.b), "rxe0", name);
    let (rx_pfc, paused_us, held) = (
        counter(&format!("{backend}_rx_pfc_frames")),
        counter(&format!("{backend}_paused_us")),
        counter("pfc_held"),
    );
    let (retransmitted, timeouts) = (
        counter("retransmitted_pkts"),
        counter("completer_retry_err"),
    );
    eprintln!(
        "{backend}: rx_pfc {rx_pfc}, paused {paused_us} µs, held {held}, retransmitted \
         {retransmitted}, ACK timeouts {timeouts}"
    );
    assert!(before > 1000.0, "the transfer runs: {before:.0} packets/s");
    // Wide tolerances: this machine is shared and noisy.
    assert!(
        during_other > before / 4.0,
        "another priority's pause slowed priority 3 down: {during_other:.0} vs {before:.0}"
    );
    assert!(
        paused < before / 20.0,
        "priority 3 went on while paused: {paused:.0} vs {before:.0} packets/s"
    );
    assert!(
        after > before / 4.0,
        "no recovery: {after:.0} vs {before:.0}"
    );
    assert_eq!(rx_pfc, frames, "every PFC frame counted");
    assert_eq!(counter(&format!("{backend}_rx_pause_malformed")), 0);
    // Both pauses (0.8 s and 1.2 s), as the daemon read the frames: under load it reads
    // some late, after a pause ran out (the one in priority 0 did not stop this QP).
    assert!(
        (1_000_000..=2_500_000).contains(&paused_us),
        "{paused_us} µs paused"
    );
    assert!(held > 0);
    assert_eq!(
        (retransmitted, timeouts),
        (0, 0),
        "nothing lost or timed out"
    );
}
