//! XRC through librdmacm: Debian's unmodified `rdma_xserver` and `rdma_xclient` with
//! `-c x` between two daemons in two network namespaces. The server's id gets an XRC
//! target QP and an XRC SRQ in librdmacm's private domain (`rdma_create_qp_ex`,
//! `rdma_create_srq`), the client's an XRC initiator; the REQ and REP carry the XRC
//! transport type and the target's QPN, the REP's private data the SRQ number the
//! client's Send names. `-c r` (RC) still passes.
use rdma_emu_tests::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// The value `rdma-emu stat` shows for counter `name` (`… name value …`).
fn counter(stat: &str, name: &str) -> Option<u64> {
    let mut words = stat.split_whitespace();
    words.find(|w| *w == name)?;
    words.next()?.parse().ok()
}

/// `rdma_xserver -c kind` in namespace a, `rdma_xclient -c kind` in b: both print
/// `end 0` and exit 0; no XRC request or CM REQ was refused on either side.
fn xserver_xclient_two_hosts(kind: &str, port: u16) {
    let _s = serial();
    if missing(&["rdma_xserver", "rdma_xclient"]) {
        return;
    }
    let Some(net) = two_hosts() else {
        return;
    };
    let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
    let p = port.to_string();
    let (s, c) = run_pair_when(
        da.program(Some(&net.a), &["rdma_xserver", "-p", &p, "-c", kind]),
        || wait_cm_listening(&da, Some(&net.a), port, Duration::from_secs(20)),
        &format!("RDMA CM port {port}"),
        || {
            db.program(
                Some(&net.b),
                &["rdma_xclient", "-s", &net.addr_a, "-p", &p, "-c", kind],
            )
        },
        LIMIT,
    );
    c.assert_success();
    s.assert_success();
    for out in [&s, &c] {
        assert!(
            out.stdout.contains("end 0"),
            "`{}` output:\n{}\n{}",
            out.argv,
            out.stdout,
            out.stderr
        );
    }
    for (d, ns) in [(&da, &net.a), (&db, &net.b)] {
        let stat = d.cli(Some(ns), &["stat", "rxe0"]).stdout;
        assert_eq!(counter(&stat, "cm_rx_bad_transport"), Some(0), "{stat}");
        assert_eq!(counter(&stat, "cm_rx_qp_type_mismatch"), Some(0), "{stat}");
        assert!(counter(&stat, "cm_rx").is_some_and(|n| n > 0), "{stat}");
        if kind == "x" {
            assert_eq!(counter(&stat, "xrc_srq_errors"), Some(0), "{stat}");
        }
    }
    // The server's Send arrived through its XRC target QP: its daemon received data.
    let stat = da.cli(Some(&net.a), &["stat", "rxe0"]).stdout;
    assert!(counter(&stat, "rcvd_pkts").is_some_and(|n| n > 0), "{stat}");
}

#[test]
fn rdma_xserver_xclient_xrc_two_hosts() {
    xserver_xclient_two_hosts("x", 7481);
}

#[test]
fn rdma_xserver_xclient_rc_two_hosts() {
    xserver_xclient_two_hosts("r", 7482);
}
