//! Debian's ibverbs-utils, unmodified, on rdma-emu: device listing and the pingpong
//! programs, on one host through one daemon and across two daemons in two network
//! namespaces joined by veth.
use rdma_emu_tests::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn devinfo_v(daemon: &Daemon, ns: Option<&Netns>) -> String {
    let out = daemon.program(ns, &["ibv_devinfo", "-v"]).wait(LIMIT);
    out.assert_success();
    out.stdout
}

#[test]
fn ibv_devices_lists_rxe0() {
    let _s = serial();
    if missing(&["ibv_devices"]) {
        return;
    }
    let daemon = Daemon::start();
    let out = daemon.program(None, &["ibv_devices"]).wait(LIMIT);
    out.assert_success();
    assert!(out.stdout.contains("rxe0"), "no rxe0 in:\n{}", out.stdout);
}

#[test]
fn ibv_devinfo_shows_an_active_roce_port() {
    let _s = serial();
    if missing(&["ibv_devinfo"]) {
        return;
    }
    let daemon = Daemon::start();
    let out = daemon.program(None, &["ibv_devinfo"]).wait(LIMIT);
    out.assert_success();
    for want in [
        "hca_id:\trxe0",
        "PORT_ACTIVE",
        "link_layer:\t\tEthernet",
        "transport:\t\t\tInfiniBand",
    ] {
        assert!(
            out.stdout.contains(want),
            "`{want}` missing in:\n{}",
            out.stdout
        );
    }
    let verbose = devinfo_v(&daemon, None);
    for want in [
        "max_qp_wr:\t\t\t",
        "max_sge:\t\t\t32",
        "max_cqe:\t\t\t",
        "active_mtu:",
        "::ffff:127.0.0.1, RoCE v2",
    ] {
        assert!(verbose.contains(want), "`{want}` missing in:\n{verbose}");
    }
}

/// One pingpong run per argument set, server then client, both must exit 0 and the
/// client must report its transfer.
fn pingpong(program: &str, extra: &[&str], two_hosts: bool) {
    let _s = serial();
    if missing(&[program]) {
        return;
    }
    let port = "18515";
    if two_hosts {
        let Some(net) = rdma_emu_tests::two_hosts() else {
            return;
        };
        let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
        let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
        let (gid_a, gid_b) = (
            da.ipv4_gid_index(Some(&net.a)),
            db.ipv4_gid_index(Some(&net.b)),
        );
        let mut server = vec![program, "-d", "rxe0", "-g", &gid_a, "-p", port];
        server.extend(extra);
        let mut client = vec![program, "-d", "rxe0", "-g", &gid_b, "-p", port];
        client.extend(extra);
        client.push(&net.addr_a);
        let (s, c) = run_pair(
            &da,
            Some(&net.a),
            &server,
            &db,
            Some(&net.b),
            &client,
            18515,
            LIMIT,
        );
        s.assert_success();
        c.assert_success();
        assert!(
            c.stdout.contains("iters in"),
            "no summary from the client:\n{}",
            c.stdout
        );
    } else {
        let daemon = Daemon::start();
        let gid = roce_v2_ipv4_gid_index(&devinfo_v(&daemon, None))
            .expect("an IPv4 RoCE v2 GID")
            .to_string();
        let mut server = vec![program, "-d", "rxe0", "-g", &gid, "-p", port];
        server.extend(extra);
        let mut client = server.clone();
        client.push("127.0.0.1");
        let (s, c) = run_pair(&daemon, None, &server, &daemon, None, &client, 18515, LIMIT);
        s.assert_success();
        c.assert_success();
        assert!(
            c.stdout.contains("iters in"),
            "no summary from the client:\n{}",
            c.stdout
        );
    }
}

macro_rules! pingpong_tests {
    ($($name:ident: $program:literal, [$($arg:literal),*], $two:literal;)*) => {$(
        #[test]
        fn $name() {
            pingpong($program, &[$($arg),*], $two);
        }
    )*};
}

pingpong_tests! {
    rc_pingpong_one_host: "ibv_rc_pingpong", [], false;
    rc_pingpong_one_host_64k: "ibv_rc_pingpong", ["-s", "65536", "-n", "1000"], false;
    rc_pingpong_one_host_events: "ibv_rc_pingpong", ["-e"], false;
    rc_pingpong_two_hosts: "ibv_rc_pingpong", [], true;
    rc_pingpong_two_hosts_64k: "ibv_rc_pingpong", ["-s", "65536", "-n", "1000"], true;
    rc_pingpong_two_hosts_events: "ibv_rc_pingpong", ["-e"], true;
    uc_pingpong_one_host: "ibv_uc_pingpong", [], false;
    uc_pingpong_one_host_64k: "ibv_uc_pingpong", ["-s", "65536", "-n", "1000"], false;
    uc_pingpong_one_host_events: "ibv_uc_pingpong", ["-e"], false;
    uc_pingpong_two_hosts: "ibv_uc_pingpong", [], true;
    uc_pingpong_two_hosts_64k: "ibv_uc_pingpong", ["-s", "65536", "-n", "1000"], true;
    uc_pingpong_two_hosts_events: "ibv_uc_pingpong", ["-e"], true;
    // UD messages are bounded by the path MTU (1024 on a 1500-byte netdev, 4096 on lo):
    // ibv_ud_pingpong itself refuses -s larger than the MTU, so 1000-byte messages here.
    ud_pingpong_one_host: "ibv_ud_pingpong", [], false;
    ud_pingpong_one_host_many: "ibv_ud_pingpong", ["-s", "1000", "-n", "1000"], false;
    ud_pingpong_one_host_events: "ibv_ud_pingpong", ["-e"], false;
    // The veth MTU of 1500 gives an active MTU of 1024, below the default 2048-byte size.
    ud_pingpong_two_hosts: "ibv_ud_pingpong", ["-s", "1024"], true;
    ud_pingpong_two_hosts_many: "ibv_ud_pingpong", ["-s", "1000", "-n", "1000"], true;
    ud_pingpong_two_hosts_events: "ibv_ud_pingpong", ["-s", "1024", "-e"], true;
    srq_pingpong_one_host: "ibv_srq_pingpong", [], false;
    srq_pingpong_one_host_64k: "ibv_srq_pingpong", ["-s", "65536", "-n", "1000"], false;
    srq_pingpong_one_host_events: "ibv_srq_pingpong", ["-e"], false;
    srq_pingpong_two_hosts: "ibv_srq_pingpong", [], true;
    srq_pingpong_two_hosts_64k: "ibv_srq_pingpong", ["-s", "65536", "-n", "1000"], true;
    srq_pingpong_two_hosts_events: "ibv_srq_pingpong", ["-e"], true;
}
