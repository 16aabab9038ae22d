//! Debian's perftest, unmodified, on rdma-emu: every bandwidth and latency program,
//! default runs and `-a` (every size from 2 B to 8 MiB), on one host through one daemon and
//! across two daemons in two network namespaces. perftest picks the RoCE v2 GID itself, as
//! it does on rxe, so no `-x` is given.
use rdma_emu_tests::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(600);
const PORT: u16 = 18515;

/// Runs `program ARGS` as server and `program ARGS ADDRESS` as client; both must exit 0
/// and the client must print perftest's result table with at least `rows` result rows.
fn perftest(program: &str, args: &[&str], two_hosts: bool, rows: usize) {
    let _s = serial();
    if missing(&[program]) {
        return;
    }
    let port = PORT.to_string();
    let mut server = vec![program, "-d", "rxe0", "-p", &port, "-F"];
    server.extend(args);
    let (s, c) = if two_hosts {
        let Some(net) = rdma_emu_tests::two_hosts() else {
            return;
        };
        let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
        let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
        let mut client = server.clone();
        client.push(&net.addr_a);
        let (s, c) = run_pair(
            &da,
            Some(&net.a),
            &server,
            &db,
            Some(&net.b),
            &client,
            PORT,
            LIMIT,
        );
        if !(s.success() && c.success()) {
            // What the daemons counted (timeouts, retries, NAKs, drops).
            for (d, ns) in [(&da, &net.a), (&db, &net.b)] {
                eprintln!("{}", d.stat_report(Some(ns), "rxe0"));
            }
        }
        (s, c)
    } else {
        let daemon = Daemon::start();
        let mut client = server.clone();
        client.push("127.0.0.1");
        run_pair(&daemon, None, &server, &daemon, None, &client, PORT, LIMIT)
    };
    // The client first: when it fails, its server is given 3 s and fails too, and the
    // client's output says why.
    c.assert_success();
    s.assert_success();
    let table: Vec<&str> = c
        .stdout
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"))
        .skip(1)
        .take_while(|l| !l.starts_with("---"))
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u64>().is_ok())
        })
        .collect();
    assert!(
        table.len() >= rows,
        "expected {rows} result rows from `{}`, got {}:\n{}",
        c.argv,
        table.len(),
        c.stdout
    );
}

macro_rules! perftest_tests {
    ($($name:ident: $program:literal, [$($arg:literal),*], $two:literal, $rows:literal;)*) => {$(
        #[test]
        fn $name() {
            perftest($program, &[$($arg),*], $two, $rows);
        }
    )*};
}

// `-a` runs 23 sizes, 2 B to 8 MiB; -n bounds the iterations per size so that the whole
// sweep stays within the CI budget (perftest's default is 5000 for bandwidth). The atomic
// programs have no `-a`: perftest itself refuses it ("Message size cannot be changed for
// Atomic tests"), on any device. Latency sweeps across two hosts run 20 iterations per
// size: each is a round trip of up to 8 MiB at a 1024-byte path MTU.
perftest_tests! {
    send_bw_one_host: "ib_send_bw", [], false, 1;
    send_bw_one_host_all_sizes: "ib_send_bw", ["-a", "-n", "100"], false, 23;
    send_lat_one_host: "ib_send_lat", [], false, 1;
    send_lat_one_host_all_sizes: "ib_send_lat", ["-a", "-n", "100"], false, 23;
    write_bw_one_host: "ib_write_bw", [], false, 1;
    write_bw_one_host_all_sizes: "ib_write_bw", ["-a", "-n", "100"], false, 23;
    write_lat_one_host: "ib_write_lat", [], false, 1;
    write_lat_one_host_all_sizes: "ib_write_lat", ["-a", "-n", "100"], false, 23;
    read_bw_one_host: "ib_read_bw", [], false, 1;
    read_bw_one_host_all_sizes: "ib_read_bw", ["-a", "-n", "100"], false, 23;
    read_lat_one_host: "ib_read_lat", [], false, 1;
    read_lat_one_host_all_sizes: "ib_read_lat", ["-a", "-n", "100"], false, 23;
    atomic_bw_one_host: "ib_atomic_bw", [], false, 1;
    atomic_lat_one_host: "ib_atomic_lat", [], false, 1;
    send_bw_two_hosts: "ib_send_bw", [], true, 1;
    send_bw_two_hosts_all_sizes: "ib_send_bw", ["-a", "-n", "100"], true, 23;
    send_lat_two_hosts: "ib_send_lat", [], true, 1;
    send_lat_two_hosts_all_sizes: "ib_send_lat", ["-a", "-n", "20"], true, 23;
    write_bw_two_hosts: "ib_write_bw", [], true, 1;
    write_bw_two_hosts_all_sizes: "ib_write_bw", ["-a", "-n", "100"], true, 23;
    write_lat_two_hosts: "ib_write_lat", [], true, 1;
    write_lat_two_hosts_all_sizes: "ib_write_lat", ["-a", "-n", "20"], true, 23;
    read_bw_two_hosts: "ib_read_bw", [], true, 1;
    read_bw_two_hosts_all_sizes: "ib_read_bw", ["-a", "-n", "100"], true, 23;
    read_lat_two_hosts: "ib_read_lat", [], true, 1;
    read_lat_two_hosts_all_sizes: "ib_read_lat", ["-a", "-n", "20"], true, 23;
    atomic_bw_two_hosts: "ib_atomic_bw", [], true, 1;
    atomic_lat_two_hosts: "ib_atomic_lat", [], true, 1;
}

/// The classic first test exactly as a newcomer types it: no port, no GID, no flags but
/// `-a` and the device.
#[test]
fn classic_read_bw_all_sizes_as_typed() {
    let _s = serial();
    if missing(&["ib_read_bw"]) {
        return;
    }
    let daemon = Daemon::start();
    let (s, c) = run_pair(
        &daemon,
        None,
        &["ib_read_bw", "-a", "-d", "rxe0"],
        &daemon,
        None,
        &["ib_read_bw", "-a", "-d", "rxe0", "127.0.0.1"],
        PORT,
        Duration::from_secs(900),
    );
    // The client first: when it fails, its server is given 3 s and fails too, and the
    // client's output says why.
    c.assert_success();
    s.assert_success();
    assert!(c.stdout.contains("8388608"), "no 8 MiB row:\n{}", c.stdout);
}

/// More QP pairs between two daemons than the device once bound send sockets for (256):
/// every pair hashes to its own UDP source port, and a packet from a port that was not
/// bound left from 4791 and failed its ICRC at the peer (which covers the source port), so
/// `ib_write_bw -q 1000` ended in retry-exceeded completions. perftest makes one CQ of
/// `-t` × `-q` entries (`-t 64`: 19200, within rxe's `max_cqe` too). `-u 20` (a 4 s ACK
/// timeout) keeps this about the ports: 300 QPs × 64 writes queue more than perftest's
/// default 67 ms between the daemons, and the core has no congestion control to drain
/// that queue before the timer fires (docs/performance.md).
#[test]
fn write_bw_300_qps_two_hosts_every_source_port_bound() {
    let _s = serial();
    if missing(&["ib_write_bw"]) {
        return;
    }
    let Some(net) = rdma_emu_tests::two_hosts() else {
        return;
    };
    let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
    let port = PORT.to_string();
    let server = [
        "ib_write_bw",
        "-d",
        "rxe0",
        "-p",
        &port,
        "-F",
        "-q",
        "300",
        "-t",
        "64",
        "-s",
        "4096",
        "-n",
        "16",
        "-u",
        "20",
    ];
    let mut client = server.to_vec();
    client.push(&net.addr_a);
    let (s, c) = run_pair(
        &da,
        Some(&net.a),
        &server,
        &db,
        Some(&net.b),
        &client,
        PORT,
        LIMIT,
    );
    // The client first: when it fails, its server is given 3 s and fails too, and the
    // client's output says why.
    c.assert_success();
    s.assert_success();
    assert!(c.stdout.contains(" 4096 "), "no 4096 B row:\n{}", c.stdout);
    for (d, ns) in [(&da, &net.a), (&db, &net.b)] {
        assert_eq!(d.counter(Some(ns), "rxe0", "icrc_errors"), 0);
        assert_eq!(d.counter(Some(ns), "rxe0", "retry_exceeded_err"), 0);
    }
}
