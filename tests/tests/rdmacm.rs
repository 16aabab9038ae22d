//! Debian's rdmacm-utils and perftest's `-R` mode, unmodified, connecting through RDMA CM
//! on rdma-emu: on one host through one daemon, and across two daemons in two network
//! namespaces joined by veth.
use rdma_emu_tests::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// Where a server program runs and where its client finds it.
/// Fields drop in order: the daemons stop before their namespaces go.
struct Setup {
    server_daemon: Daemon,
    client_daemon: Option<Daemon>,
    /// The address the client connects to.
    addr: String,
    net: Option<TwoHosts>,
}

impl Setup {
    /// One daemon on loopback (`two_hosts` false), or two daemons in two namespaces.
    /// `None` when two hosts cannot be made here (skipped with a message).
    fn new(two_hosts: bool) -> Option<Setup> {
        if !two_hosts {
            return Some(Setup {
                server_daemon: Daemon::start(),
                client_daemon: None,
                addr: "127.0.0.1".into(),
                net: None,
            });
        }
        let net = rdma_emu_tests::two_hosts()?;
        let server_daemon = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
        let client_daemon = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
        Some(Setup {
            server_daemon,
            client_daemon: Some(client_daemon),
            addr: net.addr_a.clone(),
            net: Some(net),
        })
    }

    fn server_ns(&self) -> Option<&Netns> {
        self.net.as_ref().map(|n| &n.a)
    }

    fn client_ns(&self) -> Option<&Netns> {
        self.net.as_ref().map(|n| &n.b)
    }

    fn client_daemon(&self) -> &Daemon {
        self.client_daemon.as_ref().unwrap_or(&self.server_daemon)
    }

    /// Runs `server`, waits until it listens on RDMA CM `port`, runs `client`; both must
    /// exit 0. Returns (server, client) output.
    fn pair(&self, server: &[&str], client: &[&str], port: u16) -> (Output, Output) {
        let ns = self.server_ns();
        let (s, c) = run_pair_when(
            self.server_daemon.program(ns, server),
            || wait_cm_listening(&self.server_daemon, ns, port, Duration::from_secs(20)),
            &format!("RDMA CM port {port}"),
            || self.client_daemon().program(self.client_ns(), client),
            LIMIT,
        );
        c.assert_success();
        s.assert_success();
        (s, c)
    }
}

fn rping(two_hosts: bool) {
    let _s = serial();
    if missing(&["rping"]) {
        return;
    }
    let Some(setup) = Setup::new(two_hosts) else {
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
    let pings = rping_pings(&c);
    assert_eq!(pings, 100, "client output:\n{}", c.stdout);
}

fn ucmatose(two_hosts: bool, connections: &str) {
    let _s = serial();
    if missing(&["ucmatose"]) {
        return;
    }
    let Some(setup) = Setup::new(two_hosts) else {
        return;
    };
    let addr = setup.addr.clone();
    let (s, c) = setup.pair(
        &["ucmatose", "-c", connections, "-C", "10"],
        &["ucmatose", "-s", &addr, "-c", connections, "-C", "10"],
        7471,
    );
    assert_complete(&[&s, &c]);
}

fn udaddy(two_hosts: bool) {
    let _s = serial();
    if missing(&["udaddy"]) {
        return;
    }
    let Some(setup) = Setup::new(two_hosts) else {
        return;
    };
    let addr = setup.addr.clone();
    let (s, c) = setup.pair(&["udaddy"], &["udaddy", "-s", &addr], 7174);
    assert_complete(&[&s, &c]);
}

fn rdma_server_client(two_hosts: bool, server: &str, client: &str) {
    let _s = serial();
    if missing(&[server, client]) {
        return;
    }
    let Some(setup) = Setup::new(two_hosts) else {
        return;
    };
    let addr = setup.addr.clone();
    let (s, c) = setup.pair(
        &[server, "-p", "7471"],
        &[client, "-s", &addr, "-p", "7471"],
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

/// perftest with `-R`: the connection goes through RDMA CM on port 18515.
fn perftest_rdma_cm(two_hosts: bool, program: &str, extra: &[&str]) {
    let _s = serial();
    if missing(&[program]) {
        return;
    }
    let Some(setup) = Setup::new(two_hosts) else {
        return;
    };
    let addr = setup.addr.clone();
    let mut server = vec![program, "-R", "-d", "rxe0", "-p", "18515"];
    server.extend(extra);
    let mut client = server.clone();
    client.push(&addr);
    let (_, c) = setup.pair(&server, &client, 18515);
    // The client reports (a READ latency server measures nothing); both exited 0.
    assert!(
        c.stdout.contains("#bytes"),
        "`{}` printed no results:\n{}",
        c.argv,
        c.stdout
    );
}

macro_rules! both {
    ($($one:ident, $two:ident => $body:expr;)*) => {$(
        #[test]
        fn $one() {
            let two_hosts = false;
            $body(two_hosts)
        }
        #[test]
        fn $two() {
            let two_hosts = true;
            $body(two_hosts)
        }
    )*};
}

both! {
    rping_one_host, rping_two_hosts => rping;
    ucmatose_one_host, ucmatose_two_hosts => |t| ucmatose(t, "1");
    ucmatose_10_one_host, ucmatose_10_two_hosts => |t| ucmatose(t, "10");
    udaddy_one_host, udaddy_two_hosts => udaddy;
    rdma_server_one_host, rdma_server_two_hosts =>
        |t| rdma_server_client(t, "rdma_server", "rdma_client");
    rdma_xserver_one_host, rdma_xserver_two_hosts =>
        |t| rdma_server_client(t, "rdma_xserver", "rdma_xclient");
    ib_send_bw_r_one_host, ib_send_bw_r_two_hosts =>
        |t| perftest_rdma_cm(t, "ib_send_bw", &["-n", "200"]);
    ib_write_bw_r_one_host, ib_write_bw_r_two_hosts =>
        |t| perftest_rdma_cm(t, "ib_write_bw", &["-n", "200"]);
    ib_read_lat_r_one_host, ib_read_lat_r_two_hosts =>
        |t| perftest_rdma_cm(t, "ib_read_lat", &["-n", "200"]);
    ib_send_lat_r_one_host, ib_send_lat_r_two_hosts =>
        |t| perftest_rdma_cm(t, "ib_send_lat", &["-n", "200"]);
}
