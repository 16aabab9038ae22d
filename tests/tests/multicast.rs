//! UD multicast end to end: `tests/c/mcast_ud.c` (compiled against the system's
//! libibverbs, run on the shim) attaches UD QPs in two processes to one group; a third
//! process sends to the group; both receive byte for byte; after `ibv_detach_mcast`
//! nothing more arrives. On one host (one daemon, loopback) and on two (veth between
//! network namespaces). The daemons run in namespaces this test creates and removes.
use rdma_emu_tests::*;
use std::path::Path;
use std::time::Duration;

const GROUP: &str = "239.1.2.3";

/// Two receivers (`(daemon, netns)` each) and a sender: both get the message, then
/// detach and get nothing more.
fn exchange(exe: &Path, receivers: [(&Daemon, &Netns); 2], sender: (&Daemon, &Netns)) {
    let dir = TempDir::new("mcast");
    let d = dir.path().to_str().expect("utf-8 path");
    let exe = exe.to_str().expect("utf-8 path");
    let recv: Vec<Program> = receivers
        .iter()
        .enumerate()
        .map(|(i, (daemon, ns))| {
            daemon.program(Some(ns), &[exe, "recv", GROUP, d, &format!("r{i}")])
        })
        .collect();
    let send = sender
        .0
        .program(Some(sender.1), &[exe, "send", GROUP, d, "2"])
        .wait(Duration::from_secs(90));
    let outs: Vec<Output> = recv
        .into_iter()
        .map(|p| p.wait(Duration::from_secs(60)))
        .collect();
    send.assert_success();
    for o in &outs {
        o.assert_success();
        assert!(
            o.stdout.contains("ok received byte for byte"),
            "{}",
            o.stdout
        );
        assert!(o.stdout.contains("ok nothing after detach"), "{}", o.stdout);
    }
}

#[test]
fn ud_multicast_on_one_host_reaches_both_receivers_until_they_detach() {
    let _s = serial();
    let dir = TempDir::new("mcast-c");
    let Some(exe) = compile_c("mcast_ud", dir.path()) else {
        return;
    };
    let Some(ns) = loopback_ns("mc", true) else {
        return;
    };
    let daemon = Daemon::start_with(Some(&ns), &[]);
    let errs = daemon
        .program(Some(&ns), &[exe.to_str().expect("utf-8"), "errors", GROUP])
        .wait(Duration::from_secs(30));
    errs.assert_success();
    assert!(
        errs.stdout
            .contains("max_mcast_grp 8192 max_mcast_qp_attach 56 max_total_mcast_qp_attach 458752"),
        "{}",
        errs.stdout
    );
    exchange(&exe, [(&daemon, &ns), (&daemon, &ns)], (&daemon, &ns));
}

#[test]
fn ud_multicast_crosses_hosts_over_veth() {
    let _s = serial();
    let dir = TempDir::new("mcast-c");
    let Some(exe) = compile_c("mcast_ud", dir.path()) else {
        return;
    };
    let Some(net) = two_hosts() else {
        return;
    };
    for ns in [&net.a, &net.b] {
        if let Err(e) = sh(&format!(
            "ip -n {} route add 224.0.0.0/4 dev {}",
            ns.name, net.iface
        )) {
            let _ = cannot_run(&format!("cannot add a multicast route: {e}"));
            return;
        }
    }
    let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
    // One receiver on each host; the sender on host a.
    exchange(&exe, [(&da, &net.a), (&db, &net.b)], (&da, &net.a));
}
