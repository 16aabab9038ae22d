//! siw devices on the smoltcp backend (`backend = "smoltcp"`, issue 8): their TCP is
//! smoltcp's, on an AF_PACKET socket, with an address of their own that the kernel does
//! not have. Two namespaces joined by veth (`two_hosts`, kernel addresses `.1` and `.2`);
//! a smoltcp device takes `.11` (host a) or `.12` (host b). Unmodified rping and perftest
//! with `-R` run
//!
//! - from a kernel-TCP siw device to a smoltcp one (with a tcpdump capture on the veth
//!   that tshark dissects without a malformed or error-level item and `rdma-emu decode`
//!   reads whole: MPA Request, Reply and every FPDU, no error; no
//!   RST; and `ss` in the smoltcp host shows that its kernel held no socket for it),
//! - from a smoltcp device to a kernel-TCP one,
//! - between two smoltcp devices (the client binds no address: the RDMA CM takes the
//!   device's own address beside the one the kernel's routing picks);
//! - over IPv6 (smoltcp answers neighbour solicitations), and `ucmatose -c 10` (ten
//!   handshakes to one listener at once).
//!
//! Also: a smoltcp device is refused an address the kernel has (EADDRINUSE) or none.
//! Needs root (namespaces, AF_PACKET), rping, perftest, ucmatose, tcpdump, tshark.
use rdma_emu_tests::*;
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
const RPING_PORT: u16 = 7174;
const PERFTEST_PORT: u16 = 18515;

/// Which TCP a host's siw device runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tcp {
    Kernel,
    Smoltcp,
}

/// The configuration of a host: `siw0` on `iface` over `tcp`.
fn config(tcp: Tcp, iface: &str, kernel_addr: &str) -> String {
    let head = format!("[[device]]\nname = \"siw0\"\ntype = \"siw\"\nnetdev = \"{iface}\"\n");
    match tcp {
        Tcp::Kernel => head,
        Tcp::Smoltcp => format!(
            "{head}backend = \"smoltcp\"\naddrs = [\"{}\"]\n",
            smoltcp_own_addr(kernel_addr)
        ),
    }
}

/// Daemons (server on host a, client on host b) and namespaces of one test; fields drop
/// in order (daemons before namespaces, the configuration folder last).
struct Setup {
    server_daemon: Daemon,
    client_daemon: Daemon,
    server: Tcp,
    /// The address the client connects to (the server's siw0).
    addr: String,
    net: TwoHosts,
    _dir: TempDir,
}

impl Setup {
    fn new(server: Tcp, client: Tcp) -> Option<Setup> {
        Setup::on(two_hosts()?, server, client)
    }

    /// As `new`, over IPv6: the kernels get `fd77:N::1/64` and `fd77:N::2/64` (no
    /// duplicate address detection), the smoltcp devices `::11` / `::12`.
    fn ipv6(server: Tcp, client: Tcp) -> Option<Setup> {
        let mut net = two_hosts()?;
        let n = std::process::id() % 250;
        let (a, b) = (format!("fd77:{n}::1"), format!("fd77:{n}::2"));
        sh(&format!(
            "set -e\nip -n {na} addr add {a}/64 dev {i} nodad\n\
             ip -n {nb} addr add {b}/64 dev {i} nodad",
            na = net.a.name,
            nb = net.b.name,
            i = net.iface
        ))
        .expect("IPv6 addresses");
        (net.addr_a, net.addr_b) = (a, b);
        Setup::on(net, server, client)
    }

    fn on(net: TwoHosts, server: Tcp, client: Tcp) -> Option<Setup> {
        let dir = TempDir::new("smolcfg");
        let (cfg_a, cfg_b) = (dir.path().join("a.toml"), dir.path().join("b.toml"));
        std::fs::write(&cfg_a, config(server, net.iface, &net.addr_a)).expect("config a");
        std::fs::write(&cfg_b, config(client, net.iface, &net.addr_b)).expect("config b");
        let a = cfg_a.display().to_string();
        let b = cfg_b.display().to_string();
        let server_daemon = Daemon::start_with(Some(&net.a), &["--config", &a]);
        let client_daemon = Daemon::start_with(Some(&net.b), &["--config", &b]);
        let addr = match server {
            Tcp::Kernel => net.addr_a.clone(),
            Tcp::Smoltcp => smoltcp_own_addr(&net.addr_a),
        };
        Some(Setup {
            server_daemon,
            client_daemon,
            server,
            addr,
            net,
            _dir: dir,
        })
    }

    /// Runs `server` on host a, waits until its RDMA CM id listens on `port` (and, on
    /// the kernel's TCP, its TCP listener is there too), runs `client` on host b.
    fn try_pair(&self, server: &[&str], client: &[&str], port: u16) -> (Output, Output) {
        let ns = Some(&self.net.a);
        run_pair_when(
            self.server_daemon.program(ns, server),
            || {
                wait_cm_listening(&self.server_daemon, ns, port, Duration::from_secs(20))
                    && (self.server == Tcp::Smoltcp
                        || wait_listening(ns, port, Duration::from_secs(5)))
            },
            &format!("siw0 (TCP port {port})"),
            || self.client_daemon.program(Some(&self.net.b), client),
            LIMIT,
        )
    }

    /// rping -C 100 -V: the client verifies 100 pings.
    fn rping(&self) {
        let port = RPING_PORT.to_string();
        let addr = self.addr.as_str();
        let (s, c) = self.try_pair(
            &["rping", "-s", "-a", addr, "-p", &port, "-v", "-C", "100"],
            &[
                "rping", "-c", "-a", addr, "-p", &port, "-v", "-V", "-C", "100",
            ],
            RPING_PORT,
        );
        assert_both(&s, &c);
        assert_eq!(rping_pings(&c), 100, "client output:\n{}", c.stdout);
    }

    /// perftest `program -R -d siw0`; the client prints a result row.
    fn perftest(&self, program: &str) -> Output {
        let port = PERFTEST_PORT.to_string();
        let server = vec![program, "-R", "-d", "siw0", "-p", &port, "-n", "200"];
        let mut client = server.clone();
        client.push(&self.addr);
        let (_, c) = perftest_retrying(|| self.try_pair(&server, &client, PERFTEST_PORT));
        assert!(
            c.stdout.contains("#bytes"),
            "`{}` printed no results:\n{}",
            c.argv,
            c.stdout
        );
        c
    }

    /// The TCP sockets the kernel of host a holds on `port` (`ss -tan`, any state).
    fn kernel_sockets_a(&self, port: u16) -> Vec<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.net.a.name, "ss", "-Htan"])
            .output()
            .expect("ss");
        let port = format!(":{port}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.split_whitespace().any(|w| w.ends_with(&port)))
            .map(str::to_string)
            .collect()
    }
}

#[test]
fn rping_from_kernel_tcp_to_smoltcp_leaves_the_kernel_out_and_decodes_whole() {
    let _s = serial();
    if missing(&["rping", "tcpdump", "tshark"]) {
        return;
    }
    let Some(setup) = Setup::new(Tcp::Smoltcp, Tcp::Kernel) else {
        return;
    };
    let links = setup
        .server_daemon
        .cli(Some(&setup.net.a), &["link", "show"]);
    links.assert_success();
    assert!(
        links.stdout.contains("backend smoltcp"),
        "link show:\n{}",
        links.stdout
    );
    let dir = TempDir::new("smolcap");
    let pcap = dir.path().join("siw.pcap");
    let dump = Tcpdump::start(&setup.net.a, setup.net.iface, "tcp", &pcap);
    setup.rping();
    // Let the FIN exchange finish before the capture ends.
    std::thread::sleep(Duration::from_millis(500));
    dump.stop();

    // The kernel of host a never held a socket for the connection (no listener, no
    // TIME_WAIT); and nobody reset anything.
    let kernel = setup.kernel_sockets_a(RPING_PORT);
    assert!(kernel.is_empty(), "host a's kernel sockets: {kernel:?}");
    // smoltcp took the frames, and every TCP checksum it was asked to check held.
    let ns = Some(&setup.net.a);
    let counter = |name| setup.server_daemon.counter(ns, "siw0", name);
    assert!(counter("smoltcp_rx_frames") > 100);
    assert!(counter("smoltcp_tx_frames") > 100);
    assert_eq!(counter("smoltcp_rx_bad_checksum"), 0);
    let rst = Command::new("tcpdump")
        .args(["-nr"])
        .arg(&pcap)
        .arg("tcp[tcpflags] & tcp-rst != 0")
        .output()
        .expect("tcpdump -r");
    let resets = String::from_utf8_lossy(&rst.stdout).into_owned();
    assert!(resets.trim().is_empty(), "RST on the wire:\n{resets}");

    let text = decode(&pcap);
    for unit in ["MPA Request", "MPA Reply"] {
        assert_eq!(text.matches(unit).count(), 1, "{unit} in:\n{text}");
    }
    assert!(
        !text.contains("stream error") && !text.contains("[DDP/RDMAP"),
        "decode could not read every FPDU:\n{text}"
    );
    let fpdus = text.matches(" | FPDU ").count();
    // 100 pings: each a Send and RDMA Reads/Writes both ways.
    assert!(fpdus > 100, "only {fpdus} FPDUs captured:\n{text}");
    // tshark dissects the whole capture (smoltcp's TCP included) without a malformed or
    // error-level item, and finds the MPA exchange.
    let shown = |filter: &str| tshark(&pcap, &["-Y", filter]);
    let bad = shown("_ws.malformed || _ws.expert.severity >= \"error\"");
    assert!(
        bad.trim().is_empty(),
        "malformed or error-level frames:\n{bad}"
    );
    assert_eq!(shown("iwarp_mpa.req").lines().count(), 1);
    assert_eq!(shown("iwarp_mpa.rep").lines().count(), 1);
    // The smoltcp side's segments come from its own address.
    let own = format!("{}.{RPING_PORT}", setup.addr);
    let from_smoltcp = Command::new("tcpdump")
        .args(["-nr"])
        .arg(&pcap)
        .arg(format!("src host {} and src port {RPING_PORT}", setup.addr))
        .output()
        .expect("tcpdump -r");
    let lines = String::from_utf8_lossy(&from_smoltcp.stdout);
    assert!(
        lines.lines().count() > 50 && lines.contains(&own),
        "segments from {own}:\n{lines}"
    );
}

#[test]
fn rping_over_ipv6_from_kernel_tcp_to_smoltcp() {
    let _s = serial();
    if missing(&["rping"]) {
        return;
    }
    if let Some(setup) = Setup::ipv6(Tcp::Smoltcp, Tcp::Kernel) {
        assert!(setup.addr.ends_with("::11"), "{}", setup.addr);
        setup.rping();
    }
}

#[test]
fn rping_from_smoltcp_to_kernel_tcp() {
    let _s = serial();
    if missing(&["rping"]) {
        return;
    }
    if let Some(setup) = Setup::new(Tcp::Kernel, Tcp::Smoltcp) {
        setup.rping();
    }
}

#[test]
fn rping_between_two_smoltcp_devices() {
    let _s = serial();
    if missing(&["rping"]) {
        return;
    }
    if let Some(setup) = Setup::new(Tcp::Smoltcp, Tcp::Smoltcp) {
        setup.rping();
        assert!(setup.kernel_sockets_a(RPING_PORT).is_empty());
    }
}

/// ucmatose with 10 connections at once from a kernel-TCP device to a smoltcp one: ten
/// handshakes to one listener under way together.
#[test]
fn ucmatose_10_connections_to_smoltcp() {
    let _s = serial();
    if missing(&["ucmatose"]) {
        return;
    }
    let Some(setup) = Setup::new(Tcp::Smoltcp, Tcp::Kernel) else {
        return;
    };
    let addr = setup.addr.as_str();
    let (s, c) = setup.try_pair(
        &["ucmatose", "-b", addr, "-c", "10", "-C", "10"],
        &["ucmatose", "-s", addr, "-c", "10", "-C", "10"],
        7471,
    );
    assert_both(&s, &c);
    assert_complete(&[&s, &c]);
}

/// perftest from a kernel-TCP device to a smoltcp one and between two smoltcp devices.
fn perftest(program: &str) {
    let _s = serial();
    if missing(&[program]) {
        return;
    }
    for client in [Tcp::Kernel, Tcp::Smoltcp] {
        let Some(setup) = Setup::new(Tcp::Smoltcp, client) else {
            return;
        };
        let c = setup.perftest(program);
        eprintln!(
            "{program} -R, smoltcp server, {client:?} client:\n{}",
            c.stdout
        );
        assert!(setup.kernel_sockets_a(PERFTEST_PORT).is_empty());
    }
}

#[test]
fn ib_write_bw_r_smoltcp() {
    perftest("ib_write_bw");
}

#[test]
fn ib_read_bw_r_smoltcp() {
    perftest("ib_read_bw");
}

#[test]
fn ib_send_bw_r_smoltcp() {
    perftest("ib_send_bw");
}

#[test]
fn a_smoltcp_device_is_refused_the_kernels_address_or_none() {
    let _s = serial();
    let Some(net) = two_hosts() else {
        return;
    };
    let dir = TempDir::new("smolref");
    let cfg = dir.path().join("none.toml");
    std::fs::write(&cfg, "").expect("config");
    let daemon = Daemon::start_with(Some(&net.a), &["--config", &cfg.display().to_string()]);
    let add = |extra: &[&str]| {
        let mut args = vec![
            "link", "add", "siw1", "type", "siw", "netdev", net.iface, "backend", "smoltcp",
        ];
        args.extend_from_slice(extra);
        daemon.cli(Some(&net.a), &args)
    };
    let taken = add(&["addr", &net.addr_a]);
    assert!(!taken.success());
    assert!(
        taken.stderr.contains("the kernel has that address too"),
        "{}",
        taken.stderr
    );
    let none = add(&[]);
    assert!(!none.success());
    assert!(
        none.stderr.contains("needs an address of its own"),
        "{}",
        none.stderr
    );
    // On loopback there is no Ethernet to own an address on.
    let lo = daemon.cli(
        Some(&net.a),
        &[
            "link",
            "add",
            "siw2",
            "type",
            "siw",
            "netdev",
            "lo",
            "backend",
            "smoltcp",
            "addr",
            "10.99.0.1",
        ],
    );
    assert!(!lo.success(), "{}", lo.stdout);
    let own = smoltcp_own_addr(&net.addr_a);
    add(&["addr", &own]).assert_success();
    let links = daemon.cli(Some(&net.a), &["link", "show"]);
    assert!(
        links
            .stdout
            .lines()
            .any(|l| l.contains("siw1/1") && l.contains("backend smoltcp")),
        "link show:\n{}",
        links.stdout
    );
}
