//! libfabric's verbs provider (Debian's libfabric-bin, unmodified) between two network
//! namespaces with one daemon each: `fi_info` lists MSG endpoints for `verbs` and RDM ones
//! for `verbs;ofi_rxm`, and `fi_pingpong` runs over MSG, RDM (ofi_rxm) and DGRAM.
//!
//! Each daemon keeps its default devices (rxe0 and siw0 on `lo`) and gets rxe1 and siw1 on
//! the namespace's interface with `rdma-emu link add`, as a host with rxe gets them with
//! `rdma link add` (siw1 alone for the iWARP tests: see [`setup_iwarp`]). libfabric offers MSG endpoints only for devices on non-loopback
//! interfaces and binds "localhost" to find them, which the loopback devices must not
//! answer (docs/cm.md, "Binding"; docs/compatibility.md, "libfabric").
use rdma_emu_tests::*;
use std::time::Duration;

/// fi_pingpong's control port (its `-B`/`-P` default).
const CTRL_PORT: u16 = 47592;
const ITERATIONS: &str = "100";

/// Two namespaces with a daemon each, serving its defaults on `lo` plus rxe1 and siw1 on
/// `eth0`.
fn setup() -> Option<(TwoHosts, Daemon, Daemon)> {
    setup_with(&[("rxe1", "rxe"), ("siw1", "siw")])
}

/// As [`setup`] with siw1 the only device on `eth0`. libfabric finds MSG devices by
/// binding each interface address with the RDMA CM, which the first device on the
/// interface answers (rxe1 when both are there, as the kernel's rdma_cm picks one), and by
/// GIDs with a non-zero interface identifier, which siw's MAC-based GID does not have (as
/// on the kernel's siw). So an iWARP device is libfabric's when it has its interface to
/// itself, as on a host whose NIC is an iWARP RNIC.
fn setup_iwarp() -> Option<(TwoHosts, Daemon, Daemon)> {
    setup_with(&[("siw1", "siw")])
}

fn setup_with(links: &[(&str, &str)]) -> Option<(TwoHosts, Daemon, Daemon)> {
    if missing(&["fi_info", "fi_pingpong"]) {
        return None;
    }
    let hosts = two_hosts()?;
    let da = Daemon::start_with(Some(&hosts.a), &[]);
    let db = Daemon::start_with(Some(&hosts.b), &[]);
    for ns in [&hosts.a, &hosts.b] {
        link_local_ready(ns, hosts.iface);
    }
    for (d, ns) in [(&da, &hosts.a), (&db, &hosts.b)] {
        for &(name, kind) in links {
            d.cli(
                Some(ns),
                &["link", "add", name, "type", kind, "netdev", hosts.iface],
            )
            .assert_success();
        }
        let devices = d
            .program(Some(ns), &["ibv_devices"])
            .wait(Duration::from_secs(60));
        devices.assert_success();
        for name in ["rxe0", "siw0"]
            .into_iter()
            .chain(links.iter().map(|l| l.0))
        {
            assert!(
                devices.stdout.contains(name),
                "{name} missing:\n{}",
                devices.stdout
            );
        }
    }
    Some((hosts, da, db))
}

/// Waits (at most 10 s) for `iface`'s IPv6 link-local address in `ns`, so that both hosts'
/// rxe1 start with the same GID order (link-local at index 0, then the IPv4-mapped GID).
/// libfabric's DGRAM endpoints send from GID index 0 (`FI_VERBS_GID_IDX`): an IPv4 GID on
/// one side and a link-local one on the other mix the families in every address handle,
/// which `ibv_create_ah` refuses (as on rxe), and `fi_av_insert` inserts nothing.
fn link_local_ready(ns: &Netns, iface: &str) {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let out = std::process::Command::new("ip")
            .args(["-n", &ns.name, "-6", "addr", "show", "dev", iface])
            .args(["scope", "link", "-tentative"])
            .output();
        if out.is_ok_and(|o| o.status.success() && !o.stdout.trim_ascii().is_empty()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `(provider, endpoint type)` of every `fi_info` entry.
fn fi_info_entries(out: &str) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let mut provider = None;
    for line in out.lines().map(str::trim) {
        if let Some(p) = line.strip_prefix("provider: ") {
            provider = Some(p.to_string());
        } else if let Some(t) = line.strip_prefix("type: ") {
            if let Some(p) = provider.take() {
                entries.push((p, t.to_string()));
            }
        }
    }
    entries
}

#[test]
fn fi_info_lists_verbs_msg_and_rxm_rdm_endpoints() {
    let _s = serial();
    let Some((hosts, da, _db)) = setup() else {
        return;
    };
    let verbs = da
        .program(Some(&hosts.a), &["fi_info", "-p", "verbs"])
        .wait(Duration::from_secs(120));
    verbs.assert_success();
    let entries = fi_info_entries(&verbs.stdout);
    for want in ["FI_EP_MSG", "FI_EP_DGRAM"] {
        assert!(
            entries.iter().any(|(p, t)| p == "verbs" && t == want),
            "no verbs {want} endpoint:\n{}",
            verbs.stdout
        );
    }
    assert!(
        verbs.stdout.contains("domain: rxe1\n"),
        "MSG domain rxe1 missing:\n{}",
        verbs.stdout
    );
    let rxm = da
        .program(Some(&hosts.a), &["fi_info", "-p", "verbs;ofi_rxm"])
        .wait(Duration::from_secs(120));
    rxm.assert_success();
    assert!(
        fi_info_entries(&rxm.stdout)
            .iter()
            .any(|(p, t)| p == "verbs;ofi_rxm" && t == "FI_EP_RDM"),
        "no verbs;ofi_rxm RDM endpoint:\n{}",
        rxm.stdout
    );
}

/// Checks one side's result table: a `bytes #sent #ack total time MB/sec usec/xfer
/// Mxfers/sec` line for `size` with every iteration sent and acknowledged.
fn assert_pingpong_table(out: &Output, size: &str) {
    out.assert_success();
    assert!(
        out.stdout.contains("bytes   #sent   #ack"),
        "`{}`: no result table:\n{}\n{}",
        out.argv,
        out.stdout,
        out.stderr
    );
    let row: Vec<&str> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&size))
        .unwrap_or_else(|| panic!("`{}`: no {size} row:\n{}", out.argv, out.stdout));
    assert_eq!(row.len(), 8, "`{}`: row {row:?}", out.argv);
    assert_eq!(row[1], ITERATIONS, "`{}`: sent {row:?}", out.argv);
    assert_eq!(
        row[2],
        format!("={ITERATIONS}"),
        "`{}`: acked {row:?}",
        out.argv
    );
    let mbps: f64 = row[5].parse().expect("MB/sec is a number");
    let usec: f64 = row[6].parse().expect("usec/xfer is a number");
    assert!(mbps > 0.0 && usec > 0.0, "`{}`: row {row:?}", out.argv);
    println!("{}: {}", out.argv, row.join(" "));
}

/// Runs `fi_pingpong` with messages of `bytes` (printed as `size`) on both sides, with
/// `extra` options.
fn pingpong(provider: &str, endpoint: &str, bytes: &str, size: &str, extra: &[&str]) {
    let _s = serial();
    let Some((hosts, da, db)) = setup() else {
        return;
    };
    pingpong_on(&hosts, &da, &db, provider, endpoint, bytes, size, extra);
}

#[allow(clippy::too_many_arguments)]
fn pingpong_on(
    hosts: &TwoHosts,
    da: &Daemon,
    db: &Daemon,
    provider: &str,
    endpoint: &str,
    bytes: &str,
    size: &str,
    extra: &[&str],
) {
    let mut argv = vec![
        "fi_pingpong",
        "-p",
        provider,
        "-e",
        endpoint,
        "-I",
        ITERATIONS,
        "-S",
        bytes,
    ];
    argv.extend(extra);
    let mut client = argv.clone();
    client.push(hosts.addr_a.as_str());
    let (server, client) = run_pair(
        da,
        Some(&hosts.a),
        &argv,
        db,
        Some(&hosts.b),
        &client,
        CTRL_PORT,
        Duration::from_secs(300),
    );
    assert_pingpong_table(&server, size);
    assert_pingpong_table(&client, size);
}

#[test]
fn fi_pingpong_verbs_msg() {
    // Several packets on the 1024-byte path MTU of a veth.
    pingpong("verbs", "msg", "4096", "4k", &[]);
}

/// ofi_rxm sizes its verbs CQ for every peer it may connect: (128 receives + 128 sends) ×
/// FI_UNIVERSE_SIZE (1024 unless set), 262144 entries. rxe's max_cqe of 32767 refuses that
/// (fi_enable -22, on the kernel's rxe too); rdma-emu's devices report ConnectX's 4194303,
/// so this runs with libfabric's defaults.
/// libfabric over iWARP: fi_info lists siw1's MSG endpoints in the "Ethernet-iWARP"
/// fabric, and fi_pingpong runs over them (RDMA CM connections on TCP, siw's MPA).
#[test]
fn fi_pingpong_verbs_msg_over_iwarp() {
    let _s = serial();
    let Some((hosts, da, db)) = setup_iwarp() else {
        return;
    };
    let verbs = da
        .program(
            Some(&hosts.a),
            &["fi_info", "-p", "verbs", "-t", "FI_EP_MSG"],
        )
        .wait(Duration::from_secs(120));
    verbs.assert_success();
    assert!(
        verbs.stdout.contains("domain: siw1\n")
            && verbs.stdout.contains("fabric: Ethernet-iWARP\n")
            && verbs.stdout.contains("protocol: FI_PROTO_IWARP\n"),
        "no iWARP MSG endpoint on siw1:\n{}",
        verbs.stdout
    );
    pingpong_on(
        &hosts,
        &da,
        &db,
        "verbs",
        "msg",
        "4096",
        "4k",
        &["-d", "siw1"],
    );
}

#[test]
fn fi_pingpong_verbs_rxm_rdm() {
    pingpong("verbs;ofi_rxm", "rdm", "4096", "4k", &[]);
}

/// A datagram holds at most the path MTU (1024 on a veth's 1500 bytes). libfabric lists a
/// DGRAM domain for every device, in device order, without looking at addresses, and
/// fi_pingpong takes the first: rxe0's on `lo`, whose address the peer cannot reach. So
/// the domain is named, as on any host with several RDMA devices.
#[test]
fn fi_pingpong_verbs_dgram() {
    pingpong("verbs", "dgram", "1024", "1k", &["-d", "rxe1-dgram"]);
}

/// Beside the interface devices a loopback address binds without a device (what libfabric
/// needs), yet one machine's RDMA CM programs still meet on it: the listener listens on
/// the devices serving 127.0.0.1, the connection gets rxe0, and a second listener on the
/// same port after the first one's end finds the port free again.
#[test]
fn rping_on_loopback_beside_interface_devices() {
    let _s = serial();
    let Some((hosts, da, _db)) = setup() else {
        return;
    };
    if missing(&["rping"]) {
        return;
    }
    for round in 0..2 {
        let srv = da.program(
            Some(&hosts.a),
            &["rping", "-s", "-a", "127.0.0.1", "-p", "7176", "-C", "5"],
        );
        let (s, c) = run_pair_when(
            srv,
            || wait_cm_listening(&da, Some(&hosts.a), 7176, Duration::from_secs(20)),
            "RDMA CM port 7176",
            || {
                da.program(
                    Some(&hosts.a),
                    &[
                        "rping",
                        "-c",
                        "-a",
                        "127.0.0.1",
                        "-p",
                        "7176",
                        "-v",
                        "-C",
                        "5",
                    ],
                )
            },
            Duration::from_secs(120),
        );
        s.assert_success();
        c.assert_success();
        let pings = rping_pings(&c);
        assert_eq!(pings, 5, "round {round}:\n{}", c.stdout);
    }
}
