//! On-demand paging with Debian's unmodified `ibv_rc_pingpong` between two network
//! namespaces: `-o` (an ODP MR over the buffer), `-O` (an implicit ODP MR, the whole
//! address space) and `-o -P` (with `ibv_advise_mr` prefetch), and what `ibv_devinfo -v`
//! says of each device's ODP capabilities.
use rdma_emu_tests::two_host;
use rdma_emu_tests::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// `ibv_rc_pingpong` with `extra` between a daemon in each namespace: both sides exit 0,
/// the client reports its transfer, and did not print `refused` (a message the program
/// prints and then carries on after).
fn rc_pingpong_two_hosts(extra: &[&str], refused: &str) {
    let _s = serial();
    if missing(&["ibv_rc_pingpong"]) {
        return;
    }
    let Some((net, da, db)) = two_host::hosts("udp", "udp") else {
        return;
    };
    let c = two_host::program_pair(&net, &da, &db, "ibv_rc_pingpong", extra);
    assert!(c.stdout.contains("iters in"), "no summary:\n{}", c.stdout);
    assert!(
        !c.stderr.contains(refused),
        "`{}` printed `{refused}`:\n{}",
        c.argv,
        c.stderr
    );
}

#[test]
fn rc_pingpong_odp_two_hosts() {
    rc_pingpong_two_hosts(&["-o"], "ODP");
}

#[test]
fn rc_pingpong_implicit_odp_two_hosts() {
    rc_pingpong_two_hosts(&["-O"], "implicit ODP");
}

#[test]
fn rc_pingpong_odp_prefetch_two_hosts() {
    // A failed ibv_advise_mr is reported ("Couldn't prefetch MR(errno)") and ignored.
    rc_pingpong_two_hosts(&["-o", "-P"], "Couldn't prefetch");
}

#[test]
fn rc_pingpong_odp_prefetch_large_buffer_two_hosts() {
    rc_pingpong_two_hosts(
        &["-o", "-P", "-s", "1048576", "-n", "50"],
        "Couldn't prefetch",
    );
}

/// The text of one `ibv_devinfo -v` section (`name:` up to the next line of its depth).
fn section<'a>(devinfo: &'a str, name: &str) -> &'a str {
    let Some(start) = devinfo.find(name) else {
        panic!("no `{name}` in:\n{devinfo}");
    };
    let rest = &devinfo[start + name.len()..];
    let end = rest.find(":\n").unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn devinfo_shows_odp_on_rxe0_and_none_on_siw0() {
    let _s = serial();
    if missing(&["ibv_devinfo"]) {
        return;
    }
    // In a namespace of its own where possible: the default devices bind the RoCE port
    // on loopback, which another daemon on this host may hold.
    let ns = loopback_ns("odpinfo", false);
    let daemon = Daemon::start_with(ns.as_ref(), &[]);
    let rxe = daemon
        .program(ns.as_ref(), &["ibv_devinfo", "-v", "-d", "rxe0"])
        .wait(LIMIT);
    rxe.assert_success();
    let general = section(&rxe.stdout, "general_odp_caps:");
    assert!(
        general.contains("ODP_SUPPORT\n") && general.contains("ODP_SUPPORT_IMPLICIT"),
        "{}",
        rxe.stdout
    );
    let rc = section(&rxe.stdout, "rc_odp_caps:");
    for cap in [
        "SUPPORT_SEND",
        "SUPPORT_RECV",
        "SUPPORT_WRITE",
        "SUPPORT_READ",
        "SUPPORT_ATOMIC",
        "SUPPORT_SRQ",
    ] {
        assert!(rc.contains(cap), "rc_odp_caps lacks {cap}:\n{}", rxe.stdout);
    }
    let siw = daemon
        .program(ns.as_ref(), &["ibv_devinfo", "-v", "-d", "siw0"])
        .wait(LIMIT);
    siw.assert_success();
    let general = section(&siw.stdout, "general_odp_caps:");
    assert!(
        !general.contains("ODP_SUPPORT"),
        "siw0 reports ODP:\n{}",
        siw.stdout
    );
}
