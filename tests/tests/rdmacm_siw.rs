//! Unmodified RDMA CM programs over iWARP (`siw0`): rping and perftest with `-R`, on one
//! host (a network namespace of its own, loopback only) and across two daemons in two
//! namespaces joined by veth, with siw0 on the kernel's TCP and on smoltcp (`_smoltcp`:
//! both daemons' siw0 on the smoltcp backend with an address of its own, `.11` and `.12`).
//!
//! Which device an address reaches is the kernel's rule: the first device serving it.
//! One host: `rxe0` serves loopback's own address, `siw0` is configured with
//! `addrs = ["127.0.0.2"]`, so the programs choose siw0 by the address they use.
//! Two hosts: `siw0` is listed before `rxe0` on the veth, so it serves its address.
//! The siw listener is a real TCP listener (the RDMA CM port is the TCP port), which
//! `ss` sees: that is how each test checks that iWARP, not RoCE, carried it.
//!
//! On one host the connections run over siw's local path (the daemon serves both ends,
//! `tcp_local_connections` counts them); `_kernel_tcp` runs a few programs with
//! `local_path = false`, where they go through the kernel's loopback TCP.
use rdma_emu_tests::*;
use std::time::Duration;

/// What a program may take: a bound that catches a hang, not a speed requirement. The
/// `-a` runs move 1.6 GiB each; through smoltcp on a 2-core machine with CPU hogs beside
/// them (`cargo xtask test --stress`) they took over 120 s (docs/reliability.md).
const LIMIT: Duration = Duration::from_secs(600);

/// Daemons and namespaces of one test; fields drop in order (daemons before namespaces,
/// the configuration folder last).
struct Setup {
    server_daemon: Daemon,
    client_daemon: Option<Daemon>,
    /// The address the client connects to (siw0's).
    addr: String,
    /// siw0 runs on the smoltcp backend (its TCP listener is not the kernel's).
    smoltcp: bool,
    /// One host: a namespace with loopback only.
    lo_ns: Option<Netns>,
    /// One host: whether the connections take siw's local path.
    local_path: Option<bool>,
    net: Option<TwoHosts>,
    _dir: TempDir,
}

impl Setup {
    fn new(place: Place) -> Option<Setup> {
        let dir = TempDir::new("siwcfg");
        let config = dir.path().join("rdma-emu.toml");
        if matches!(place, Place::OneHost | Place::OneHostKernelTcp) {
            let ns = loopback_ns("siw", false)?;
            write_rxe_siw_loopback_config(&config);
            let local_path = place == Place::OneHost;
            if !local_path {
                let text = std::fs::read_to_string(&config).expect("read the configuration");
                std::fs::write(&config, format!("local_path = false\n{text}"))
                    .expect("write the configuration");
            }
            let cfg = config.display().to_string();
            let server_daemon = Daemon::start_with(Some(&ns), &["--config", &cfg]);
            return Some(Setup {
                server_daemon,
                client_daemon: None,
                addr: "127.0.0.2".into(),
                smoltcp: false,
                lo_ns: Some(ns),
                local_path: Some(local_path),
                net: None,
                _dir: dir,
            });
        }
        let net = rdma_emu_tests::two_hosts()?;
        let smoltcp = place == Place::TwoHostsSmoltcp;
        // On smoltcp, siw0 serves an address of its own (`.11`, `.12`) and is the only
        // device: an unbound client's source is then the kernel's address, which no
        // device serves, so the RDMA CM lends it siw0's own (with rxe0 serving the
        // kernel's address, the CM would choose rxe0, as the kernel would).
        let host = |kernel_addr: &str, name: &str| {
            let i = net.iface;
            let siw = format!("[[device]]\nname = \"siw0\"\ntype = \"siw\"\nnetdev = \"{i}\"\n");
            let text = if smoltcp {
                format!(
                    "{siw}backend = \"smoltcp\"\naddrs = [\"{}\"]\n",
                    smoltcp_own_addr(kernel_addr)
                )
            } else {
                format!("{siw}\n[[device]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"{i}\"\n")
            };
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write the configuration");
            path.display().to_string()
        };
        let (cfg_a, cfg_b) = (host(&net.addr_a, "a.toml"), host(&net.addr_b, "b.toml"));
        let server_daemon = Daemon::start_with(Some(&net.a), &["--config", &cfg_a]);
        let client_daemon = Daemon::start_with(Some(&net.b), &["--config", &cfg_b]);
        let addr = if smoltcp {
            smoltcp_own_addr(&net.addr_a)
        } else {
            net.addr_a.clone()
        };
        Some(Setup {
            server_daemon,
            client_daemon: Some(client_daemon),
            addr,
            smoltcp,
            lo_ns: None,
            local_path: None,
            net: Some(net),
            _dir: dir,
        })
    }

    fn server_ns(&self) -> Option<&Netns> {
        self.net.as_ref().map(|n| &n.a).or(self.lo_ns.as_ref())
    }

    fn client_ns(&self) -> Option<&Netns> {
        self.net.as_ref().map(|n| &n.b).or(self.lo_ns.as_ref())
    }

    fn client_daemon(&self) -> &Daemon {
        self.client_daemon.as_ref().unwrap_or(&self.server_daemon)
    }

    /// Runs `server`, waits until its RDMA CM id listens on `port` and siw0's TCP
    /// listener is there too, runs `client`; both must exit 0.
    fn pair(&self, server: &[&str], client: &[&str], port: u16) -> (Output, Output) {
        let (s, c) = self.try_pair(server, client, port);
        assert_both(&s, &c);
        (s, c)
    }

    /// perftest's pair: as `pair`, but a run that perftest itself could not report
    /// because its clock calibration failed is run again (`perftest_retrying`).
    fn perftest_pair(&self, server: &[&str], client: &[&str], port: u16) -> (Output, Output) {
        perftest_retrying(|| self.try_pair(server, client, port))
    }

    fn try_pair(&self, server: &[&str], client: &[&str], port: u16) -> (Output, Output) {
        let (s, c) = self.run_pair(server, client, port);
        if !(s.success() && c.success()) {
            self.report(&s, &c);
        } else if let Some(local_path) = self.local_path {
            let ns = self.server_ns();
            let local = self
                .server_daemon
                .counter(ns, "siw0", "tcp_local_connections");
            assert_eq!(
                local > 0,
                local_path,
                "with local_path = {local_path}, {local} connections took the local path\n{}",
                self.server_daemon.stat_report(ns, "siw0")
            );
        }
        (s, c)
    }

    /// What each side's daemon counted for siw0 and for each QP its program printed as
    /// its own ("local address: … QPN 0x…"): terminates, FPDUs, and Sends waiting for a
    /// receive WR (`recv_waits`, `recv_waiting`).
    fn report(&self, s: &Output, c: &Output) {
        let sides = [
            (&self.server_daemon, self.server_ns(), s),
            (self.client_daemon(), self.client_ns(), c),
        ];
        for (daemon, ns, out) in sides {
            let name = ns.map_or("host", |n| n.name.as_str());
            eprintln!("{}", daemon.stat_report(ns, "siw0"));
            let qpns = out
                .stdout
                .lines()
                .filter(|l| l.contains("local address"))
                .filter_map(|l| l.split("QPN 0x").nth(1))
                .filter_map(|h| u32::from_str_radix(h.split_whitespace().next()?, 16).ok());
            for qpn in qpns {
                let q = qpn.to_string();
                let stat = daemon.cli(ns, &["stat", "siw0", "--qp", &q]).stdout;
                eprintln!("--- QP {qpn} of {name} ---\n{stat}");
            }
        }
    }

    fn run_pair(&self, server: &[&str], client: &[&str], port: u16) -> (Output, Output) {
        let ns = self.server_ns();
        run_pair_when(
            self.server_daemon.program(ns, server),
            || {
                wait_cm_listening(&self.server_daemon, ns, port, Duration::from_secs(20))
                    && (self.smoltcp || wait_listening(ns, port, Duration::from_secs(5)))
            },
            &format!("siw0 (TCP port {port})"),
            || self.client_daemon().program(self.client_ns(), client),
            LIMIT,
        )
    }
}

fn rping(place: Place) {
    let _s = serial();
    if missing(&["rping"]) {
        return;
    }
    let Some(setup) = Setup::new(place) else {
        return;
    };
    let addr = setup.addr.clone();
    let (_, c) = setup.pair(
        &["rping", "-s", "-a", &addr, "-p", "7174", "-v", "-C", "100"],
        &[
            "rping", "-c", "-a", &addr, "-p", "7174", "-v", "-V", "-C", "100",
        ],
        7174,
    );
    assert_eq!(rping_pings(&c), 100, "client output:\n{}", c.stdout);
}

/// ucmatose (`-c` connections) and rdma_server/rdma_client over siw0.
fn ucmatose(place: Place, connections: &str) {
    let _s = serial();
    if missing(&["ucmatose"]) {
        return;
    }
    let Some(setup) = Setup::new(place) else {
        return;
    };
    let addr = setup.addr.clone();
    let (s, c) = setup.pair(
        &["ucmatose", "-b", &addr, "-c", connections, "-C", "10"],
        &["ucmatose", "-s", &addr, "-c", connections, "-C", "10"],
        7471,
    );
    assert_complete(&[&s, &c]);
}

fn rdma_server_client(place: Place) {
    let _s = serial();
    if missing(&["rdma_server", "rdma_client"]) {
        return;
    }
    let Some(setup) = Setup::new(place) else {
        return;
    };
    let addr = setup.addr.clone();
    let (s, c) = setup.pair(
        &["rdma_server", "-s", &addr, "-p", "7471"],
        &["rdma_client", "-s", &addr, "-p", "7471"],
        7471,
    );
    for out in [&s, &c] {
        assert!(
            out.stdout.contains("end 0"),
            "`{}` output:\n{}",
            out.argv,
            out.stdout
        );
    }
}

/// perftest with `-R -d siw0 -a -n 100`: every size from 2 octets to 8 MiB, one result
/// row each (23).
fn perftest_all_sizes(place: Place, program: &str) {
    let _s = serial();
    if missing(&[program]) {
        return;
    }
    let Some(setup) = Setup::new(place) else {
        return;
    };
    let addr = setup.addr.clone();
    let server = vec![
        program, "-R", "-d", "siw0", "-p", "18515", "-a", "-n", "100",
    ];
    let mut client = server.clone();
    client.push(&addr);
    let (_, c) = setup.perftest_pair(&server, &client, 18515);
    let rows = c
        .stdout
        .lines()
        .filter(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            t.len() >= 4 && t[0].parse::<u64>().is_ok() && t[1] == "100"
        })
        .count();
    assert_eq!(rows, 23, "`{}` output:\n{}", c.argv, c.stdout);
}

/// perftest with `-R -d siw0`: the connection goes through RDMA CM on port 18515.
fn perftest(place: Place, program: &str) {
    let _s = serial();
    if missing(&[program]) {
        return;
    }
    let Some(setup) = Setup::new(place) else {
        return;
    };
    let addr = setup.addr.clone();
    let server = vec![program, "-R", "-d", "siw0", "-p", "18515", "-n", "200"];
    let mut client = server.clone();
    client.push(&addr);
    let (_, c) = setup.perftest_pair(&server, &client, 18515);
    assert!(
        c.stdout.contains("#bytes"),
        "`{}` printed no results:\n{}",
        c.argv,
        c.stdout
    );
}

/// `ib_send_bw -R -d siw0 --use-srq -q QPS -n ITERS` plus `extra`: every QP of the
/// receiving side takes its receives from one SRQ (siw's SRQs); `rows` result rows, each
/// of ITERS × QPS messages, on both sides.
fn perftest_srq(place: Place, qps: u32, iters: u32, extra: &[&str], rows: usize) {
    let _s = serial();
    if missing(&["ib_send_bw"]) {
        return;
    }
    let Some(setup) = Setup::new(place) else {
        return;
    };
    let addr = setup.addr.clone();
    let (qps_arg, iters_arg) = (qps.to_string(), iters.to_string());
    let mut server = vec![
        "ib_send_bw",
        "-R",
        "-d",
        "siw0",
        "-p",
        "18516",
        "-n",
        &iters_arg,
        "--use-srq",
        "-q",
        &qps_arg,
    ];
    server.extend_from_slice(extra);
    let mut client = server.clone();
    client.push(&addr);
    let (s, c) = setup.perftest_pair(&server, &client, 18516);
    let iterations = (iters * qps).to_string();
    for out in [&s, &c] {
        let text = &out.stdout;
        assert!(
            text.contains("Using SRQ      : ON") && text.contains("Transport type : IW"),
            "`{}` did not run on siw0 with an SRQ:\n{text}",
            out.argv
        );
        assert!(
            text.contains(&format!("Number of qps   : {qps}")),
            "`{}`:\n{text}",
            out.argv
        );
        let results = text
            .lines()
            .filter(|l| {
                let t: Vec<&str> = l.split_whitespace().collect();
                t.len() >= 4 && t[0].parse::<u64>().is_ok() && t[1] == iterations
            })
            .count();
        assert_eq!(results, rows, "`{}` output:\n{text}", out.argv);
    }
}

/// siw0 reports siw's SRQ limits, and `ibv_srq_pingpong` on it gets its SRQ and its 16
/// QPs on it, and stops where an iWARP QP must have a TCP connection (the RDMA CM) to
/// reach RTS: unmodified, it connects QPs by QP numbers as on InfiniBand, which the
/// kernel's siw refuses in the same place (`siw_qp_modify`: no socket, EINVAL).
/// docs/compatibility.md says so.
#[test]
fn ibv_srq_pingpong_on_siw0_stops_only_at_rts() {
    let _s = serial();
    if missing(&["ibv_srq_pingpong"]) {
        return;
    }
    let Some(setup) = Setup::new(Place::OneHost) else {
        return;
    };
    let ns = setup.server_ns();
    // siw's SRQ limits (SIW_MAX_SRQ, SIW_MAX_SRQ_WR, SIW_MAX_SGE), as siw reports them.
    let info = setup
        .server_daemon
        .program(ns, &["ibv_devinfo", "-v", "-d", "siw0"])
        .wait(Duration::from_secs(60));
    info.assert_success();
    let words: Vec<&str> = info.stdout.split_whitespace().collect();
    let value = |key: &str| words.windows(2).find(|w| w[0] == key).map(|w| w[1]);
    assert_eq!(
        [
            value("max_srq:"),
            value("max_srq_wr:"),
            value("max_srq_sge:")
        ],
        [Some("102400"), Some("327680"), Some("6")],
        "{}",
        info.stdout
    );
    let argv = ["ibv_srq_pingpong", "-d", "siw0", "-g", "0", "-p", "18517"];
    let srv = setup.server_daemon.program(ns, &argv);
    assert!(
        wait_listening(ns, 18517, Duration::from_secs(20)),
        "ibv_srq_pingpong never listened"
    );
    let mut client_argv = argv.to_vec();
    client_argv.push(&setup.addr);
    let mut client = setup.server_daemon.program(ns, &client_argv);
    let s = srv.wait(Duration::from_secs(60));
    // The client waits for the server's addresses, which never come.
    client.kill9();
    let _ = client.wait(Duration::from_secs(5));
    assert!(!s.success(), "the server cannot reach RTS:\n{}", s.stdout);
    assert!(
        s.stderr.contains("Failed to modify QP[0] to RTS"),
        "server:\n{}\n{}",
        s.stdout,
        s.stderr
    );
    // It made its SRQ and 16 QPs on it (one address line per QP; the killed client's
    // buffered output is lost).
    let qps = s.stdout.matches("local address:").count();
    assert_eq!(qps, 16, "server:\n{}\n{}", s.stdout, s.stderr);
    assert!(!s.stderr.contains("SRQ"), "{}", s.stderr);
}

/// Where the two programs run: one host (siw0 on `127.0.0.2`), two hosts with siw0 on the
/// kernel's TCP, or two hosts with siw0 on smoltcp (an address of its own, issue 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    OneHost,
    /// One host with `local_path = false`: the kernel's loopback TCP carries siw0.
    OneHostKernelTcp,
    TwoHosts,
    TwoHostsSmoltcp,
}

macro_rules! all {
    ($($one:ident, $two:ident, $smol:ident => $body:expr;)*) => {$(
        #[test]
        fn $one() {
            $body(Place::OneHost)
        }
        #[test]
        fn $two() {
            $body(Place::TwoHosts)
        }
        #[test]
        fn $smol() {
            $body(Place::TwoHostsSmoltcp)
        }
    )*};
}

all! {
    rping_siw_one_host, rping_siw_two_hosts, rping_siw_smoltcp => rping;
    ucmatose_siw_one_host, ucmatose_siw_two_hosts, ucmatose_siw_smoltcp =>
        |t| ucmatose(t, "1");
    ucmatose_10_siw_one_host, ucmatose_10_siw_two_hosts, ucmatose_10_siw_smoltcp =>
        |t| ucmatose(t, "10");
    rdma_server_siw_one_host, rdma_server_siw_two_hosts, rdma_server_siw_smoltcp =>
        rdma_server_client;
}

all! {
    ib_send_bw_r_siw_one_host, ib_send_bw_r_siw_two_hosts, ib_send_bw_r_siw_smoltcp =>
        |t| perftest(t, "ib_send_bw");
    ib_write_bw_r_siw_one_host, ib_write_bw_r_siw_two_hosts, ib_write_bw_r_siw_smoltcp =>
        |t| perftest(t, "ib_write_bw");
    ib_read_bw_r_siw_one_host, ib_read_bw_r_siw_two_hosts, ib_read_bw_r_siw_smoltcp =>
        |t| perftest(t, "ib_read_bw");
    ib_send_lat_r_siw_one_host, ib_send_lat_r_siw_two_hosts, ib_send_lat_r_siw_smoltcp =>
        |t| perftest(t, "ib_send_lat");
    ib_write_lat_r_siw_one_host, ib_write_lat_r_siw_two_hosts, ib_write_lat_r_siw_smoltcp =>
        |t| perftest(t, "ib_write_lat");
    ib_read_lat_r_siw_one_host, ib_read_lat_r_siw_two_hosts, ib_read_lat_r_siw_smoltcp =>
        |t| perftest(t, "ib_read_lat");
}

// The same with `-a`. These once stalled until the limit (issue 7): perftest posts its
// receives, then tells the client to start over its second connection; the daemon takes
// receive WRs from the ring 64 per pass, so the client's Sends could arrive before the
// last receives reached the device, which terminated the connection for "no buffer".
// A Send now waits for its receive (`emu_core::iwarp::RECV_WAIT`,
// emulator/tests/siw_stall.rs).
all! {
    ib_send_bw_r_a_siw_one_host, ib_send_bw_r_a_siw_two_hosts, ib_send_bw_r_a_siw_smoltcp =>
        |t| perftest_all_sizes(t, "ib_send_bw");
    ib_write_bw_r_a_siw_one_host, ib_write_bw_r_a_siw_two_hosts, ib_write_bw_r_a_siw_smoltcp =>
        |t| perftest_all_sizes(t, "ib_write_bw");
    ib_read_bw_r_a_siw_one_host, ib_read_bw_r_a_siw_two_hosts, ib_read_bw_r_a_siw_smoltcp =>
        |t| perftest_all_sizes(t, "ib_read_bw");
    ib_send_lat_r_a_siw_one_host, ib_send_lat_r_a_siw_two_hosts, ib_send_lat_r_a_siw_smoltcp =>
        |t| perftest_all_sizes(t, "ib_send_lat");
    ib_write_lat_r_a_siw_one_host, ib_write_lat_r_a_siw_two_hosts,
        ib_write_lat_r_a_siw_smoltcp => |t| perftest_all_sizes(t, "ib_write_lat");
    ib_read_lat_r_a_siw_one_host, ib_read_lat_r_a_siw_two_hosts, ib_read_lat_r_a_siw_smoltcp =>
        |t| perftest_all_sizes(t, "ib_read_lat");
}

// Shared receive queues on siw0 (siw's SRQs): perftest's `--use-srq`, one QP and four
// QPs on one SRQ, every size with `-a`.
all! {
    ib_send_bw_r_srq_siw_one_host, ib_send_bw_r_srq_siw_two_hosts,
        ib_send_bw_r_srq_siw_smoltcp => |t| perftest_srq(t, 1, 200, &[], 1);
    ib_send_bw_r_srq_q4_siw_one_host, ib_send_bw_r_srq_q4_siw_two_hosts,
        ib_send_bw_r_srq_q4_siw_smoltcp => |t| perftest_srq(t, 4, 200, &[], 1);
    ib_send_bw_r_srq_a_siw_one_host, ib_send_bw_r_srq_a_siw_two_hosts,
        ib_send_bw_r_srq_a_siw_smoltcp => |t| perftest_srq(t, 2, 50, &["-a"], 23);
}

/// One host with `local_path = false`: the kernel's loopback TCP between the two ends,
/// which was the only way before the local path and stays the way when it is off.
#[test]
fn rping_siw_one_host_kernel_tcp() {
    rping(Place::OneHostKernelTcp);
}

#[test]
fn ucmatose_10_siw_one_host_kernel_tcp() {
    ucmatose(Place::OneHostKernelTcp, "10");
}

#[test]
fn ib_write_bw_r_siw_one_host_kernel_tcp() {
    perftest(Place::OneHostKernelTcp, "ib_write_bw");
}
