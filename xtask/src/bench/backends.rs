//! The RoCE backends side by side (issue 8): `udp`, `packet` and `xdp` between two daemons
//! in two namespaces joined by veth, ib_write_bw at 64 KiB and ib_send_lat at 2 B, next to
//! plain UDP throughput and the busy-polling UDP round trip over the same kind of veth
//! measured in the same run.
//!
//! The three sites run at once (a pair of namespaces each) and the programs go round
//! robin, [`ROUNDS`] times, so a burst of load on the shared machine falls on every backend
//! alike; each cell is the median of its rounds.

use super::figure::{median, ratio, show_ratio, Figure, Notes};
use super::limits::Limits;
use super::perftest::{bw_iterations, parse_bw_avg, parse_lat_typical, PERFTEST_LIMIT};
use super::site::{Net, Site};
use std::fmt::Write as _;
use std::path::Path;

/// The backends compared, in table order.
pub const BACKENDS: [&str; 3] = ["udp", "packet", "xdp"];
/// Runs of each program per backend.
const ROUNDS: usize = 3;
const BW_SIZE: u64 = 65536;
const LAT_SIZE: u64 = 2;

/// One backend's figures: ib_write_bw 64 KiB (GB/s) and ib_send_lat 2 B (µs typical).
pub struct BackendRow {
    pub backend: &'static str,
    pub write_bw: Figure,
    pub send_lat: Figure,
}

fn write_bw(site: &Site) -> Figure {
    let (s, n) = (BW_SIZE.to_string(), bw_iterations(BW_SIZE).to_string());
    site.perftest("ib_write_bw", &["-s", &s, "-n", &n], PERFTEST_LIMIT)
        .and_then(|out| {
            parse_bw_avg(&out, BW_SIZE)
                .map(|mib| mib * 1048576.0 / 1e9)
                .ok_or_else(|| format!("no {BW_SIZE} B row in the output"))
        })
}

fn send_lat(site: &Site) -> Figure {
    let s = LAT_SIZE.to_string();
    site.perftest("ib_send_lat", &["-s", &s, "-n", "1000"], PERFTEST_LIMIT)
        .and_then(|out| {
            parse_lat_typical(&out, LAT_SIZE)
                .ok_or_else(|| format!("no {LAT_SIZE} B row in the output"))
        })
}

/// Measures every backend; a backend whose daemons cannot start gets rows with the reason.
pub fn measure(bin: &Path, lib: &Path, dir: &Path) -> Vec<BackendRow> {
    let sites: Vec<Result<(Site, Net), String>> = BACKENDS
        .iter()
        .map(|b| {
            let tag = format!("be-{b}");
            let net = Net::veth(&tag)?;
            let site = Site::start_on(bin, lib, &net, "rxe0", &dir.join(&tag), Some(b))?;
            Ok((site, net))
        })
        .collect();
    let mut runs: Vec<(Vec<Figure>, Vec<Figure>)> = vec![Default::default(); BACKENDS.len()];
    for round in 0..ROUNDS {
        for (i, backend) in BACKENDS.iter().enumerate() {
            let (bw, lat) = match &sites[i] {
                Ok((site, _)) => (write_bw(site), send_lat(site)),
                Err(e) => (Err(e.clone()), Err(e.clone())),
            };
            match (&bw, &lat) {
                (Ok(g), Ok(u)) => println!(
                    "backend {backend}, round {}: ib_write_bw 64 KiB {g:.3} GB/s, ib_send_lat 2 B {u:.2} us",
                    round + 1
                ),
                _ => println!(
                    "backend {backend}, round {}: ib_write_bw {bw:.3?}, ib_send_lat {lat:.2?}",
                    round + 1
                ),
            }
            runs[i].0.push(bw);
            runs[i].1.push(lat);
        }
    }
    // The sites' daemons go before their namespaces: `Site` is the first of each pair.
    drop(sites);
    BACKENDS
        .iter()
        .zip(runs)
        .map(|(&backend, (bw, lat))| BackendRow {
            backend,
            write_bw: median(bw),
            send_lat: median(lat),
        })
        .collect()
}

/// The table: each backend's figures, their ratios to the veth limits and to `udp`.
pub fn report(d: &mut String, notes: &mut Notes, limits: &Limits, rows: &[BackendRow]) {
    let _ = writeln!(
        d,
        "\n### RoCE backends, two daemons in two namespaces over veth (median of {ROUNDS} rounds)\n\n\
         | backend | ib_write_bw 64 KiB | ÷ udp | ib_send_lat 2 B | ÷ udp |\n|---|---|---|---|---|"
    );
    let udp = rows.iter().find(|r| r.backend == "udp");
    for r in rows {
        let vs_udp = |f: &Figure, base: Option<&Figure>| {
            base.and_then(|b| ratio(f, b))
                .map_or_else(String::new, |x| format!("{x:.2}"))
        };
        let _ = writeln!(
            d,
            "| {} | {}{} | {} | {}{} | {} |",
            r.backend,
            notes.fig(&r.write_bw, 3, "GB/s"),
            show_ratio(ratio(&r.write_bw, &limits.udp_veth), "of UDP"),
            vs_udp(&r.write_bw, udp.map(|u| &u.write_bw)),
            notes.fig(&r.send_lat, 2, "µs"),
            show_ratio(ratio(&r.send_lat, &limits.rtt_veth), "× RTT"),
            vs_udp(&r.send_lat, udp.map(|u| &u.send_lat)),
        );
    }
}
