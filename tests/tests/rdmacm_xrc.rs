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

/// `rdma_xserver -c kind` and `rdma_xclient -c kind`: in namespaces a and b with a
/// daemon each (`two`), or both on one daemon over loopback. Both print `end 0` and exit
/// 0; no CM REQ and no XRC request was refused.
fn xserver_xclient(two: bool, kind: &str, port: u16) {
    let _s = serial();
    if missing(&["rdma_xserver", "rdma_xclient"]) {
        return;
    }
    let net = if two {
        match two_hosts() {
            Some(n) => Some(n),
            None => return,
        }
    } else {
        None
    };
    let (ns_a, ns_b) = (net.as_ref().map(|n| &n.a), net.as_ref().map(|n| &n.b));
    let iface: Vec<&str> = net
        .as_ref()
        .map_or(Vec::new(), |n| vec!["--netdev", n.iface]);
    let da = Daemon::start_with(ns_a, &iface);
    let db = net.as_ref().map(|n| Daemon::start_with(Some(&n.b), &iface));
    let dc = db.as_ref().unwrap_or(&da);
    let addr = net.as_ref().map_or("127.0.0.1", |n| n.addr_a.as_str());
    let p = port.to_string();
    let (s, c) = run_pair_when(
        da.program(ns_a, &["rdma_xserver", "-p", &p, "-c", kind]),
        || wait_cm_listening(&da, ns_a, port, Duration::from_secs(20)),
        &format!("RDMA CM port {port}"),
        || dc.program(ns_b, &["rdma_xclient", "-s", addr, "-p", &p, "-c", kind]),
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
    let daemons = [(&da, ns_a), (dc, ns_b)];
    for (d, ns) in &daemons[..if two { 2 } else { 1 }] {
        let stat = d.cli(*ns, &["stat", "rxe0"]).stdout;
        assert_eq!(counter(&stat, "cm_rx_bad_transport"), Some(0), "{stat}");
        assert_eq!(counter(&stat, "cm_rx_qp_type_mismatch"), Some(0), "{stat}");
        assert!(counter(&stat, "cm_rx").is_some_and(|n| n > 0), "{stat}");
        assert_eq!(counter(&stat, "xrc_srq_errors"), Some(0), "{stat}");
        // The client's Send arrived (through the XRC target QP with `-c x`).
        assert!(counter(&stat, "rcvd_pkts").is_some_and(|n| n > 0), "{stat}");
    }
}

#[test]
fn rdma_xserver_xclient_xrc_two_hosts() {
    xserver_xclient(true, "x", 7481);
}

#[test]
fn rdma_xserver_xclient_rc_two_hosts() {
    xserver_xclient(true, "r", 7482);
}

#[test]
fn rdma_xserver_xclient_xrc_one_host() {
    xserver_xclient(false, "x", 7483);
}
