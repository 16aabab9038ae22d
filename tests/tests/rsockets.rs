//! rsockets over rdma-emu, between two namespaces with one daemon each, on RoCE (`rxe0`)
//! and on iWARP (`siw0`): rdma-core's rstream, riostream, rcopy and udpong, and an
//! ordinary TCP program (iperf3) under Debian's unmodified librspreload, its bytes
//! counted on the devices.
use rdma_emu_tests::*;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(180);
const PRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Roce,
    Iwarp,
}

impl Kind {
    fn device(self) -> &'static str {
        match self {
            Kind::Roce => "rxe0",
            Kind::Iwarp => "siw0",
        }
    }
}

/// Two namespaces, each with a daemon serving one device on the veth; fields drop in
/// order (daemons before namespaces, the configuration folder last).
struct Setup {
    a: Daemon,
    b: Daemon,
    net: TwoHosts,
    kind: Kind,
    dir: TempDir,
}

/// The `over_roce` and `over_iwarp` tests of one scenario `fn(Kind)`.
macro_rules! on_both {
    ($scenario:ident: $roce:ident, $iwarp:ident) => {
        #[test]
        fn $roce() {
            $scenario(Kind::Roce);
        }

        #[test]
        fn $iwarp() {
            $scenario(Kind::Iwarp);
        }
    };
}

impl Setup {
    /// The serial lock and a set-up, unless a program in `needs` is missing or the
    /// namespaces cannot be made (each says why).
    fn for_test(kind: Kind, needs: &[&str]) -> Option<(MutexGuard<'static, ()>, Setup)> {
        let guard = serial();
        if missing(needs) {
            return None;
        }
        Some((guard, Setup::new(kind)?))
    }

    fn new(kind: Kind) -> Option<Setup> {
        let net = two_hosts()?;
        let dir = TempDir::new("rsock");
        let ty = match kind {
            Kind::Roce => "rxe",
            Kind::Iwarp => "siw",
        };
        let cfg = dir.path().join("rdma-emu.toml");
        std::fs::write(
            &cfg,
            format!(
                "[[device]]\nname = \"{}\"\ntype = \"{ty}\"\nnetdev = \"{}\"\n",
                kind.device(),
                net.iface
            ),
        )
        .expect("write the configuration");
        let cfg = cfg.display().to_string();
        let a = Daemon::start_with(Some(&net.a), &["--config", &cfg]);
        let b = Daemon::start_with(Some(&net.b), &["--config", &cfg]);
        Some(Setup {
            a,
            b,
            net,
            kind,
            dir,
        })
    }

    /// Server in namespace a, client in b; the server must listen (RDMA CM) on `port`.
    fn pair(&self, server: &[&str], client: &[&str], port: u16) -> (Output, Output) {
        let (s, c) = run_pair_when(
            self.a.program(Some(&self.net.a), server),
            || wait_cm_listening(&self.a, Some(&self.net.a), port, Duration::from_secs(20)),
            &format!("RDMA CM port {port}"),
            || self.b.program(Some(&self.net.b), client),
            LIMIT,
        );
        if !(s.success() && c.success()) {
            eprintln!("{}", self.report());
        }
        assert_both(&s, &c);
        (s, c)
    }

    fn counter(&self, d: &Daemon, ns: &Netns, name: &str) -> u64 {
        d.counter(Some(ns), self.kind.device(), name)
    }

    /// What both daemons counted for the device (drops, datagrams without a receive,
    /// retries), for a failure's message.
    fn report(&self) -> String {
        [(&self.a, &self.net.a), (&self.b, &self.net.b)]
            .iter()
            .map(|(d, ns)| d.stat_report(Some(ns), self.kind.device()))
            .collect()
    }
}

/// rstream's result rows: one per transfer size.
fn rstream_rows(out: &Output) -> usize {
    out.stdout
        .lines()
        .filter(|l| l.split_whitespace().count() == 8 && !l.starts_with("name"))
        .count()
}

fn rstream(kind: Kind) {
    let Some((_s, st)) = Setup::for_test(kind, &["rstream"]) else {
        return;
    };
    let addr = st.net.addr_a.clone();
    let runs: &[&[&str]] = &[
        &["-S", "1", "-C", "200"],
        &["-S", "1000000", "-C", "20"],
        &["-T", "a", "-S", "65536", "-C", "100"],
        &["-T", "b", "-S", "4096", "-C", "200"],
        &["-T", "n", "-S", "100000", "-C", "50"],
        &["-T", "a", "-T", "v", "-S", "300000", "-C", "10"],
    ];
    for (i, extra) in runs.iter().enumerate() {
        let port = (7600 + i) as u16;
        let p = port.to_string();
        let mut server = vec!["rstream", "-b", &addr, "-p", &p];
        server.extend_from_slice(extra);
        let mut client = vec!["rstream", "-s", &addr, "-p", &p];
        client.extend_from_slice(extra);
        let (s, c) = st.pair(&server, &client, port);
        assert_eq!(rstream_rows(&s), 1, "{extra:?} server:\n{}", s.stdout);
        assert_eq!(rstream_rows(&c), 1, "{extra:?} client:\n{}", c.stdout);
    }
}

on_both!(rstream: rstream_over_roce, rstream_over_iwarp);

fn riostream(kind: Kind) {
    let Some((_s, st)) = Setup::for_test(kind, &["riostream"]) else {
        return;
    };
    let addr = st.net.addr_a.clone();
    for (i, size) in ["64", "65536", "1000000"].iter().enumerate() {
        let port = (7620 + i) as u16;
        let p = port.to_string();
        let (s, c) = st.pair(
            &["riostream", "-b", &addr, "-p", &p, "-S", size, "-C", "20"],
            &["riostream", "-s", &addr, "-p", &p, "-S", size, "-C", "20"],
            port,
        );
        assert_eq!(rstream_rows(&s), 1, "server:\n{}", s.stdout);
        assert_eq!(rstream_rows(&c), 1, "client:\n{}", c.stdout);
    }
}

on_both!(riostream: riostream_over_roce, riostream_over_iwarp);

/// Bytes that differ from one offset to the next (a pattern a shifted or repeated chunk
/// would break).
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn rcopy(kind: Kind) {
    let Some((_s, st)) = Setup::for_test(kind, &["rcopy"]) else {
        return;
    };
    let src = st.dir.path().join("source.bin");
    let dst = st.dir.path().join("copy.bin");
    let data = pattern(3 * 1024 * 1024 + 777);
    std::fs::write(&src, &data).expect("write the source file");
    let target = format!("{}:{}", st.net.addr_a, dst.display());
    // The rcopy server serves copies until killed.
    let mut server = st.a.program(Some(&st.net.a), &["rcopy", "-p", "7640"]);
    assert!(
        wait_cm_listening(&st.a, Some(&st.net.a), 7640, Duration::from_secs(20)),
        "rcopy never listened"
    );
    let src_arg = src.display().to_string();
    let c =
        st.b.program(Some(&st.net.b), &["rcopy", &src_arg, &target, "-p", "7640"])
            .wait(LIMIT);
    server.kill9();
    let s = server.wait(Duration::from_secs(5));
    assert!(
        c.success() && c.stdout.contains("done"),
        "client:\n{}\n{}\nserver:\n{}",
        c.stdout,
        c.stderr,
        s.stdout
    );
    let copy = std::fs::read(&dst).expect("read the copy");
    assert_eq!(copy.len(), data.len());
    assert!(copy == data, "the copy differs from the source");
}

on_both!(rcopy: rcopy_over_roce, rcopy_over_iwarp);

/// iperf3 under librspreload, server and client: a fixed amount (`-n`) crosses, and
/// both devices count it. (OpenBSD netcat cannot
/// serve this way: it accepts with accept4, which Debian's librspreload 44 does not
/// intercept, so its listening descriptor is /dev/null to the kernel: ENOTSOCK.)
fn iperf3(kind: Kind) {
    if !std::path::Path::new(PRELOAD).exists() {
        let _ = cannot_run("librspreload (librdmacm1) is missing");
        return;
    }
    let Some((_s, st)) = Setup::for_test(kind, &["iperf3"]) else {
        return;
    };
    let bytes: u64 = 64 << 20;
    // RoCE counts packets (at least one per 4 KiB), iWARP counts stream bytes.
    let (tx, rx, min) = match kind {
        Kind::Roce => ("sent_pkts", "rcvd_pkts", bytes / 4096),
        Kind::Iwarp => ("tx_bytes", "rx_bytes", bytes),
    };
    let (sent_before, rcvd_before) = (
        st.counter(&st.b, &st.net.b, tx),
        st.counter(&st.a, &st.net.a, rx),
    );
    let preload = format!("LD_PRELOAD={PRELOAD}");
    let addr = st.net.addr_a.clone();
    let n = bytes.to_string();
    let (s, c) = st.pair(
        &[
            "env", &preload, "iperf3", "-s", "-1", "-B", &addr, "-p", "7650",
        ],
        &[
            "env", &preload, "iperf3", "-c", &addr, "-p", "7650", "-n", &n,
        ],
        7650,
    );
    for out in [&s, &c] {
        assert!(
            out.stdout.contains("receiver"),
            "`{}`:\n{}",
            out.argv,
            out.stdout
        );
    }
    let sent = st.counter(&st.b, &st.net.b, tx) - sent_before;
    let rcvd = st.counter(&st.a, &st.net.a, rx) - rcvd_before;
    assert!(
        sent >= min && rcvd >= min,
        "{tx} {sent}, {rx} {rcvd}; want >= {min}"
    );
}

on_both!(
    iperf3: iperf3_under_librspreload_over_roce,
    iperf3_under_librspreload_over_iwarp
);

/// Waits until a UDP socket in `ns` is bound to `port` (udpong's server opens no TCP
/// port and no RDMA CM id before its first datagram).
fn wait_udp_bound(ns: &Netns, port: u16) -> bool {
    let start = Instant::now();
    let mut argv = ns.exec_prefix();
    argv.extend(["ss".into(), "-Hlun".into(), format!("sport = :{port}")]);
    while start.elapsed() < Duration::from_secs(20) {
        if let Ok(o) = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
        {
            if o.status.success() && !o.stdout.trim_ascii().is_empty() {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// Sends `bytes` as one UDP datagram from namespace `ns` to `addr:port`.
fn send_udp(ns: &Netns, addr: &str, port: u16, bytes: &[u8]) {
    let esc: String = bytes.iter().map(|b| format!("\\x{b:02x}")).collect();
    let mut argv = ns.exec_prefix();
    argv.extend([
        "bash".into(),
        "-c".into(),
        format!("printf '{esc}' > /dev/udp/{addr}/{port}"),
    ]);
    let st = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .status()
        .expect("bash");
    assert!(st.success(), "sending a datagram failed");
}

/// Datagrams a hostile or confused peer sends to a datagram rsocket's UDP port: too
/// short, a wrong tag, an IPv6 header from an IPv4 sender, a wrong header length, and a
/// well-formed `RS_OP_DATA` naming a QP that does not exist (its payload is a udpong
/// data message, which the server only counts).
const HOSTILE_DATAGRAMS: [&[u8]; 5] = [
    &[0x55, 0x55],
    &[0x12, 0x34, 0x56, 0x78, 4, 0, 16, 0, 0, 0, 0, 1, 10, 0, 0, 2],
    &[0x55, 0x55, 0x55, 0x55, 6, 0, 28, 0, 0, 0, 0, 1, 10, 0, 0, 2],
    &[
        0x55, 0x55, 0x55, 0x55, 4, 0, 200, 0, 0, 0, 0, 1, 10, 0, 0, 2,
    ],
    &[
        0x55, 0x55, 0x55, 0x55, 4, 0, 16, 0, 0, 0xab, 0xcd, 0xef, 10, 0, 0, 2, 2, 0, 0, 0, 0, 0, 0,
        0,
    ],
];

/// rdma-core's udpong (datagram rsockets over UD), unmodified, several sizes and modes
/// (`-T e` echo, `-T b` blocking, `-T a` rpoll before each call), the first server
/// after [`HOSTILE_DATAGRAMS`]. The server serves until killed; the client must finish with exit 0 and print its result row, and the
/// devices must count at least one packet per datagram. On iWARP there is no UD QP:
/// the client's `rconnect` fails with EOPNOTSUPP, as rdma-core's does on the kernel's
/// siw (see docs/compatibility.md).
fn udpong(kind: Kind) {
    let Some((_s, st)) = Setup::for_test(kind, &["udpong"]) else {
        return;
    };
    let addr = st.net.addr_a.clone();
    let runs: &[(&str, &str, &[&str])] = &[
        ("64", "1000", &[]),
        ("1000", "500", &[]),
        ("512", "200", &["-T", "e"]),
        ("300", "300", &["-T", "b"]),
        ("100", "200", &["-T", "a", "-T", "e"]),
    ];
    for (i, (size, count, extra)) in runs.iter().enumerate() {
        let p = (7670 + i).to_string();
        let mut server = vec!["udpong", "-b", &addr, "-p", &p];
        server.extend_from_slice(extra);
        let mut client = vec!["udpong", "-s", &addr, "-p", &p, "-S", size, "-C", count];
        client.extend_from_slice(extra);
        let before = match kind {
            Kind::Roce => (
                st.counter(&st.b, &st.net.b, "sent_pkts"),
                st.counter(&st.a, &st.net.a, "rcvd_pkts"),
            ),
            Kind::Iwarp => (0, 0),
        };
        let mut srv = st.a.program(Some(&st.net.a), &server);
        if !wait_udp_bound(&st.net.a, 7670 + i as u16) {
            srv.kill9();
            let s = srv.wait(Duration::from_secs(5));
            panic!("udpong never bound:\n{}\n{}", s.stdout, s.stderr);
        }
        if i == 0 {
            // The server must shrug these off and then serve the client.
            for d in HOSTILE_DATAGRAMS {
                send_udp(&st.net.b, &addr, 7670, d);
            }
        }
        let c = st.b.program(Some(&st.net.b), &client).wait(LIMIT);
        srv.kill9();
        let s = srv.wait(Duration::from_secs(5));
        if kind == Kind::Iwarp {
            assert!(
                !c.success() && c.stderr.contains("rconnect: Operation not supported"),
                "client:\n{}\n{}",
                c.stdout,
                c.stderr
            );
            return;
        }
        // One row: `custom SIZE XFERS TOTAL TIMEs GBPS USEC`.
        let rows = c
            .stdout
            .lines()
            .filter(|l| l.starts_with("custom") && l.split_whitespace().count() == 7)
            .count();
        assert!(
            c.success() && rows == 1,
            "{extra:?} client ({rows} rows):\n{}\n{}\nserver:\n{}\n{}\n{}",
            c.stdout,
            c.stderr,
            s.stdout,
            s.stderr,
            st.report()
        );
        let sent = st.counter(&st.b, &st.net.b, "sent_pkts") - before.0;
        let rcvd = st.counter(&st.a, &st.net.a, "rcvd_pkts") - before.1;
        let want: u64 = count.parse().expect("a count");
        assert!(
            sent >= want && rcvd >= want,
            "{extra:?}: {sent} packets sent, {rcvd} received; want >= {want}"
        );
    }
    // A datagram whose header (8 bytes) takes it past the path MTU (1024 on veth):
    // EMSGSIZE, which udpong reports (and then exits 0).
    let mut srv =
        st.a.program(Some(&st.net.a), &["udpong", "-b", &addr, "-p", "7679"]);
    assert!(wait_udp_bound(&st.net.a, 7679), "udpong never bound");
    let c =
        st.b.program(
            Some(&st.net.b),
            &[
                "udpong", "-s", &addr, "-p", "7679", "-S", "1017", "-C", "10",
            ],
        )
        .wait(LIMIT);
    srv.kill9();
    assert!(
        c.stderr.contains("rsend: Message too long"),
        "client:\n{}\n{}",
        c.stdout,
        c.stderr
    );
}

on_both!(udpong: udpong_over_roce, udpong_over_iwarp);

/// Compiles `tests/c/NAME.c` against librdmacm (its rsocket API) and libibverbs.
fn compile_rsock(name: &str, dir: &std::path::Path) -> Option<String> {
    if !std::path::Path::new("/usr/include/rdma/rsocket.h").exists() {
        let _ = cannot_run("librdmacm-dev is not installed");
        return None;
    }
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("c/{name}.c"));
    let exe = dir.join(name);
    let out = std::process::Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .expect("cannot run gcc");
    assert!(
        out.status.success(),
        "gcc {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe.display().to_string())
}

/// `SO_KEEPALIVE` with `TCP_KEEPIDLE` 1 s sends control messages on an idle connection
/// (rsocket.c's `tcp_svc`): over the same idle time, the client's device sends at
/// least two packets more than with keepalive off.
fn keepalive(kind: Kind) {
    let Some((_s, st)) = Setup::for_test(kind, &[]) else {
        return;
    };
    let Some(exe) = compile_rsock("rsock_keepalive", st.dir.path()) else {
        return;
    };
    // RoCE counts packets; iWARP counts stream bytes (a keepalive is tens of bytes).
    let tx = match kind {
        Kind::Roce => "sent_pkts",
        Kind::Iwarp => "tx_bytes",
    };
    let addr = st.net.addr_a.clone();
    let mut sent = Vec::new();
    for (port, mode) in [(7680u16, "off"), (7681, "on")] {
        let p = port.to_string();
        let before = st.counter(&st.b, &st.net.b, tx);
        let (s, c) = st.pair(
            &[&exe, "server", &addr, &p],
            &[&exe, "client", &addr, &p, "4", mode],
            port,
        );
        assert!(c.stdout.contains("done") && s.stdout.contains("done"));
        sent.push(st.counter(&st.b, &st.net.b, tx) - before);
    }
    let (off, on) = (sent[0], sent[1]);
    let more = match kind {
        Kind::Roce => 2,
        Kind::Iwarp => 2 * 20,
    };
    assert!(on >= off + more, "{tx}: {on} with keepalive, {off} without");
}

on_both!(keepalive: keepalive_over_roce, keepalive_over_iwarp);

/// Random rsend/rwrite/rwritev against random rrecv/rread/MSG_PEEK/MSG_WAITALL sizes,
/// blocking or non-blocking with rpoll: the server checks every byte of the stream.
/// `faults`: rules added to the client's device first (RoCE only: iWARP's TCP
/// retransmits below the device).
fn stream_property(kind: Kind, faults: &[&[&str]]) {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let Some((_s, st)) = Setup::for_test(kind, &[]) else {
        return;
    };
    let Some(exe) = compile_rsock("rsock_stream", st.dir.path()) else {
        return;
    };
    for rule in faults {
        let mut argv = vec!["fault", "add", kind.device()];
        argv.extend_from_slice(rule);
        st.b.cli(Some(&st.net.b), &argv).assert_success();
    }
    let mut runner = TestRunner::new(Config {
        cases: 6,
        failure_persistence: None,
        ..Config::default()
    });
    let port = std::cell::Cell::new(7700u16);
    let strategy = (
        any::<u32>(),
        1usize..3_000_000,
        1usize..300_000,
        any::<bool>(),
    );
    runner
        .run(&strategy, |(seed, total, chunk, nonblock)| {
            let p = port.get();
            port.set(p + 1);
            let ps = p.to_string();
            let args = |role: &'static str| {
                vec![
                    exe.clone(),
                    role.to_string(),
                    st.net.addr_a.clone(),
                    ps.clone(),
                    seed.to_string(),
                    total.to_string(),
                    chunk.to_string(),
                    u8::from(nonblock).to_string(),
                ]
            };
            let (sa, ca) = (args("server"), args("client"));
            let sa: Vec<&str> = sa.iter().map(String::as_str).collect();
            let ca: Vec<&str> = ca.iter().map(String::as_str).collect();
            let (s, c) = st.pair(&sa, &ca, p);
            prop_assert!(
                s.stdout.contains(&format!("{total} bytes ok")),
                "{}",
                s.stdout
            );
            prop_assert!(
                c.stdout.contains(&format!("{total} bytes ok")),
                "{}",
                c.stdout
            );
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    if !faults.is_empty() {
        let fired = st.counter(&st.b, &st.net.b, "fault_dropped")
            + st.counter(&st.b, &st.net.b, "fault_reordered");
        assert!(fired > 0, "no fault fired");
    }
}

#[test]
fn stream_property_over_roce() {
    stream_property(Kind::Roce, &[]);
}

#[test]
fn stream_property_over_iwarp() {
    stream_property(Kind::Iwarp, &[]);
}

#[test]
fn stream_property_over_roce_with_loss_and_reordering() {
    stream_property(Kind::Roce, &[&["drop", "1%"], &["reorder", "3%"]]);
}

/// A hostile peer (raw librdmacm and verbs, `tests/c/rsock_hostile.c`) against an rsocket
/// server: malformed private data is rejected; an RDMA WRITE past the granted receive
/// buffer fails at the NIC (remote access error, status 10); an announcement of more
/// bytes than granted ends the server's connection (ECONNRESET) instead of a read past
/// what was written. The server process survives to report it.
#[test]
fn hostile_peer_is_refused() {
    let Some((_s, st)) = Setup::for_test(Kind::Roce, &[]) else {
        return;
    };
    let Some(stream) = compile_rsock("rsock_stream", st.dir.path()) else {
        return;
    };
    let Some(exe) = compile_rsock("rsock_hostile", st.dir.path()) else {
        return;
    };
    let addr = st.net.addr_a.clone();
    for (port, mode, line) in [
        (7660u16, "outside", "write outside the buffer: status 10"),
        (7661, "oversized", "oversized announcement: status 0"),
    ] {
        let p = port.to_string();
        let server = st.a.program(
            Some(&st.net.a),
            &[&stream, "server", &addr, &p, "1", "1000", "100", "0"],
        );
        assert!(
            wait_cm_listening(&st.a, Some(&st.net.a), port, Duration::from_secs(20)),
            "the rsocket server never listened"
        );
        let c =
            st.b.program(Some(&st.net.b), &[&exe, &addr, &p, mode])
                .wait(LIMIT);
        let s = server.wait(LIMIT);
        for refused in [
            "short private data: refused",
            "version 2: refused",
            "target sgl of 1000 entries: refused",
            "well-formed: accepted",
            line,
        ] {
            assert!(
                c.stdout.contains(refused),
                "{mode}: no `{refused}` in:\n{}\n{}",
                c.stdout,
                c.stderr
            );
        }
        // The server saw its connection end (no bytes, no crash): exit status 1.
        assert_eq!(
            s.status.and_then(|x| x.code()),
            Some(1),
            "{mode} server:\n{}\n{}",
            s.stdout,
            s.stderr
        );
        if mode == "oversized" {
            assert!(s.stderr.contains("rrecv"), "{mode} server:\n{}", s.stderr);
        }
    }
}
