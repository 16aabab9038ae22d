//! RDMA CM multicast with Debian's unmodified `mckey` (rdmacm-utils): a receiver joins
//! `239.1.2.3` through `rdma_join_multicast_ex`, a sender joins too and sends its ten
//! UD messages to the group; the receiver gets all ten. On one host (one daemon on a
//! loopback with multicast) and on two (veth between network namespaces). The daemons run
//! in namespaces this test creates and removes.
use rdma_emu_tests::*;
use std::process::Command;
use std::time::{Duration, Instant};

const GROUP: &str = "239.1.2.3";

/// Waits until interface `iface` of `ns` is a member of IP group `group` (the daemon
/// joins it when a QP attaches, which the receiver's librdmacm does on MULTICAST_JOIN).
fn wait_group_joined(ns: &Netns, iface: &str, group: &str, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        let out = Command::new("ip")
            .args(["-n", &ns.name, "maddr", "show", "dev", iface])
            .output();
        if let Ok(o) = out {
            let text = String::from_utf8_lossy(&o.stdout);
            if text.split_whitespace().any(|w| w == group) {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// Receiver first (until its group is joined), then the sender: both succeed, and the
/// receiver got every message.
fn mckey_pair(
    receiver: (&Daemon, &Netns, &str, &str),
    sender: (&Daemon, &Netns, &str),
) -> (Output, Output) {
    let (rd, rns, raddr, riface) = receiver;
    let (sd, sns, saddr) = sender;
    let mut recv = rd.program(Some(rns), &["mckey", "-m", GROUP, "-b", raddr]);
    if !wait_group_joined(rns, riface, GROUP, Duration::from_secs(20)) {
        recv.kill9();
        let out = recv.wait(Duration::from_secs(5));
        panic!(
            "the receiver's group {GROUP} was never joined on {riface}:\n{}\n{}",
            out.stdout, out.stderr
        );
    }
    let send = sd
        .program(Some(sns), &["mckey", "-m", GROUP, "-b", saddr, "-s"])
        .wait(Duration::from_secs(60));
    let recv = recv.wait(Duration::from_secs(60));
    send.assert_success();
    assert!(
        send.stdout.contains("initiating data transfers")
            && send.stdout.contains("data transfers complete"),
        "{}",
        send.stdout
    );
    (recv, send)
}

fn assert_received(recv: &Output) {
    recv.assert_success();
    for line in [
        "mckey: joined dgid: ::ffff:239.1.2.3 mlid 0x0 sl 0",
        "receiving data transfers",
        "data transfers complete",
        "return status 0",
    ] {
        assert!(
            recv.stdout.contains(line),
            "no {line:?} in:\n{}",
            recv.stdout
        );
    }
}

#[test]
fn mckey_on_one_host_delivers_every_message_to_the_receiver() {
    let _s = serial();
    if missing(&["mckey"]) {
        return;
    }
    let Some(ns) = loopback_ns("cmmc", true) else {
        return;
    };
    let daemon = Daemon::start_with(Some(&ns), &[]);
    let (recv, _send) = mckey_pair(
        (&daemon, &ns, "127.0.0.1", "lo"),
        (&daemon, &ns, "127.0.0.1"),
    );
    assert_received(&recv);
}

#[test]
fn mckey_crosses_hosts_over_veth() {
    let _s = serial();
    if missing(&["mckey"]) {
        return;
    }
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
    let (recv, _send) = mckey_pair(
        (&db, &net.b, &net.addr_b, net.iface),
        (&da, &net.a, &net.addr_a),
    );
    assert_received(&recv);
}
