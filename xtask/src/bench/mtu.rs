//! Two namespaces over veth at MTU 1500 and at MTU 9000 (RoCE path MTU 1024 and 4096, as
//! rxe derives them): RoCE `ib_write_bw` 64 KiB with the udp backend's GSO and GRO on (the
//! default) and off (`RDMA_EMU_UDP_OFFLOAD=0` in the daemons), next to UDP at the RoCE
//! packet size of that MTU, one datagram per send and GSO+GRO; iWARP `ib_write_bw` 64 KiB
//! next to a single kernel TCP stream on the same path (iperf3, iWARP's limit); and the CPU
//! seconds per GB moved of the two daemons (64 KiB WRITE) and of iperf3's sender and
//! receiver together, on the same path.

use super::figure::{ratio, show_ratio, Figure, Notes};
use super::limits;
use super::perftest::{bw_iterations, parse_bw_avg, PERFTEST_LIMIT};
use super::scale::cpu_seconds;
use super::site::{ip, Net, Site};
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The interface MTUs measured.
pub const MTUS: [u32; 2] = [1500, 9000];
const SIZE: u64 = 65536;
/// How long the kernel TCP stream runs.
const TCP_SECONDS: u32 = 3;

/// One MTU's figures.
pub struct MtuRow {
    pub mtu: u32,
    /// UDP at the RoCE packet size, one datagram per send, and with GSO+GRO (GB/s).
    pub udp: Figure,
    pub udp_gso: Figure,
    /// RoCE ib_write_bw 64 KiB with GSO/GRO (the default) and without (GB/s), and the
    /// default's daemon CPU seconds per GB.
    pub roce: Figure,
    pub roce_plain: Figure,
    pub roce_cpu: Figure,
    /// iWARP ib_write_bw 64 KiB (GB/s) and its daemons' CPU seconds per GB.
    pub iwarp: Figure,
    pub iwarp_cpu: Figure,
    /// One kernel TCP stream (GB/s) and iperf3's sender + receiver CPU seconds per GB.
    pub tcp: Figure,
    pub tcp_cpu: Figure,
}

/// The RoCE v2 packet at the path MTU rxe derives from interface MTU `mtu`: BTH (12) +
/// RETH (16) + payload + ICRC (4).
fn roce_packet(mtu: u32) -> usize {
    let path_mtu = [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|&p| p + 12 + 16 + 4 + 8 + 20 <= mtu as usize)
        .unwrap_or(256);
    path_mtu + 12 + 16 + 4
}

/// Two namespaces over veth with interface MTU `mtu`.
fn veth(tag: &str, mtu: u32) -> Result<Net, String> {
    let net = Net::veth(tag)?;
    let m = mtu.to_string();
    for i in 0..2 {
        ip(&["-n", net.name(i), "link", "set", net.iface[i], "mtu", &m])?;
    }
    Ok(net)
}

/// ib_write_bw 64 KiB at `site`: GB/s and the daemons' CPU seconds per GB moved.
fn write_bw(site: &Site) -> (Figure, Figure) {
    let cpu = || -> Result<f64, String> {
        site.daemons
            .iter()
            .map(|d| cpu_seconds(d.pid()))
            .sum::<Result<f64, String>>()
    };
    let before = cpu();
    let n = bw_iterations(SIZE);
    let (s, ns) = (SIZE.to_string(), n.to_string());
    let bw = site
        .perftest("ib_write_bw", &["-s", &s, "-n", &ns], PERFTEST_LIMIT)
        .and_then(|out| {
            parse_bw_avg(&out, SIZE)
                .map(|mib| mib * 1048576.0 / 1e9)
                .ok_or_else(|| format!("no {SIZE} B row in the output"))
        });
    let gb = (SIZE * n) as f64 / 1e9;
    let per_gb = match (&bw, before, cpu()) {
        (Ok(_), Ok(b), Ok(a)) => Ok((a - b) / gb),
        (Err(e), _, _) => Err(e.clone()),
        (_, Err(e), _) | (_, _, Err(e)) => Err(e),
    };
    (bw, per_gb)
}

/// A number after `"key":` in iperf3's JSON, searched from `from`.
pub(super) fn json_number(text: &str, from: &str, key: &str) -> Option<f64> {
    let at = text.find(from)?;
    let rest = &text[at..];
    let k = rest.find(&format!("\"{key}\""))?;
    let v = rest[k..].split_once(':')?.1.trim_start();
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+')))
        .unwrap_or(v.len());
    v[..end].parse().ok()
}

/// One kernel TCP stream from namespace 1 to namespace 0 with iperf3: GB/s and sender +
/// receiver CPU seconds per GB (iperf3's own CPU accounting of both ends).
fn tcp_stream(net: &Net) -> (Figure, Figure) {
    let run = || -> Result<(f64, f64), String> {
        let mut server = Command::new("ip")
            .args([
                "netns",
                "exec",
                net.name(0),
                "iperf3",
                "-s",
                "-1",
                "-p",
                "5211",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("iperf3: {e}"))?;
        std::thread::sleep(Duration::from_millis(800));
        let t = TCP_SECONDS.to_string();
        let out = Command::new("timeout")
            .args([
                "60",
                "ip",
                "netns",
                "exec",
                net.name(1),
                "iperf3",
                "-J",
                "-p",
                "5211",
            ])
            .args(["-t", &t, "-c", net.addrs[0]])
            .output()
            .map_err(|e| format!("iperf3: {e}"));
        let _ = server.kill();
        let _ = server.wait();
        let out = out?;
        let text = String::from_utf8_lossy(&out.stdout);
        let got = |from, key| {
            json_number(&text, from, key).ok_or_else(|| format!("iperf3 printed no {key}"))
        };
        let bytes = got("\"sum_received\"", "bytes")?;
        let secs = got("\"sum_received\"", "seconds")?;
        let host = got("\"cpu_utilization_percent\"", "host_total")?;
        let remote = got("\"cpu_utilization_percent\"", "remote_total")?;
        let gb = bytes / 1e9;
        Ok((gb / secs, (host + remote) / 100.0 * secs / gb))
    };
    match run() {
        Ok((bw, cpu)) => (Ok(bw), Ok(cpu)),
        Err(e) => (Err(e.clone()), Err(e)),
    }
}

/// A RoCE site on `net` whose daemons have GSO/GRO on (`plain` false) or off.
fn roce_site(bin: &Path, lib: &Path, net: &Net, dir: &Path, plain: bool) -> Result<Site, String> {
    if plain {
        // The daemons inherit it; nothing else runs in this process meanwhile.
        std::env::set_var("RDMA_EMU_UDP_OFFLOAD", "0");
    }
    let site = Site::start(bin, lib, net, "rxe0", dir);
    std::env::remove_var("RDMA_EMU_UDP_OFFLOAD");
    site
}

/// `cargo xtask bench mtu`: measures the MTU table alone and prints it (nothing written).
pub fn run_alone() -> Result<(), String> {
    let (bin, lib) = crate::build_release()?;
    let dir = std::env::temp_dir().join(format!("rdma-emu-bench-mtu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let rows = measure(&bin, &lib, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let (mut d, mut notes) = (String::new(), Notes::default());
    report(&mut d, &mut notes, &rows);
    for (i, n) in notes.0.iter().enumerate() {
        let _ = writeln!(d, "\n[{}] {n}", i + 1);
    }
    println!("{d}");
    Ok(())
}

/// Measures every MTU.
pub fn measure(bin: &Path, lib: &Path, dir: &Path) -> Vec<MtuRow> {
    MTUS.iter()
        .map(|&mtu| {
            let failed = |e: String| MtuRow {
                mtu,
                udp: Err(e.clone()),
                udp_gso: Err(e.clone()),
                roce: Err(e.clone()),
                roce_plain: Err(e.clone()),
                roce_cpu: Err(e.clone()),
                iwarp: Err(e.clone()),
                iwarp_cpu: Err(e.clone()),
                tcp: Err(e.clone()),
                tcp_cpu: Err(e),
            };
            let net = match veth(&format!("mtu{mtu}"), mtu) {
                Ok(n) => n,
                Err(e) => return failed(e),
            };
            let size = roce_packet(mtu);
            let pair = || -> Result<_, String> {
                Ok((
                    limits::bind_in(Some(net.name(0)), &format!("{}:0", net.addrs[0]))?,
                    limits::bind_in(Some(net.name(1)), &format!("{}:0", net.addrs[1]))?,
                ))
            };
            let udp = pair().and_then(|(a, b)| limits::udp_throughput(a, b, size, false));
            let udp_gso = pair().and_then(|(a, b)| limits::udp_throughput(a, b, size, true));
            let (tcp, tcp_cpu) = tcp_stream(&net);
            let tag = |t: &str| dir.join(format!("mtu{mtu}-{t}"));
            let (roce, roce_cpu) = roce_site(bin, lib, &net, &tag("rxe"), false)
                .map_or_else(|e| (Err(e.clone()), Err(e)), |s| write_bw(&s));
            let (roce_plain, _) = roce_site(bin, lib, &net, &tag("rxe-plain"), true)
                .map_or_else(|e| (Err(e.clone()), Err(e)), |s| write_bw(&s));
            let (iwarp, iwarp_cpu) = Site::start(bin, lib, &net, "siw0", &tag("siw"))
                .map_or_else(|e| (Err(e.clone()), Err(e)), |s| write_bw(&s));
            println!(
                "MTU {mtu}: UDP {size} B {udp:.3?} / GSO+GRO {udp_gso:.3?} GB/s; RoCE \
                 ib_write_bw 64 KiB {roce:.3?} GB/s ({roce_cpu:.2?} CPU s/GB), without GSO/GRO \
                 {roce_plain:.3?}; iWARP {iwarp:.3?} ({iwarp_cpu:.2?} CPU s/GB); TCP \
                 {tcp:.3?} GB/s ({tcp_cpu:.2?} CPU s/GB)"
            );
            MtuRow {
                mtu,
                udp,
                udp_gso,
                roce,
                roce_plain,
                roce_cpu,
                iwarp,
                iwarp_cpu,
                tcp,
                tcp_cpu,
            }
        })
        .collect()
}

/// The table: each MTU's figures with their ratios to the limits of the same path.
pub fn report(d: &mut String, notes: &mut Notes, rows: &[MtuRow]) {
    let _ = writeln!(
        d,
        "\n### Two namespaces at MTU 1500 and 9000: UDP GSO/GRO, iWARP's TCP limit, CPU per GB\n\n\
         RoCE path MTU as rxe derives it (1024 and 4096). `ib_write_bw` 64 KiB; \"without \
         GSO/GRO\" is the same daemon with `RDMA_EMU_UDP_OFFLOAD=0`. CPU is user + system \
         seconds per GB moved: both daemons for RoCE and iWARP, iperf3's sender and receiver \
         for kernel TCP.\n\n\
         | MTU | UDP, one datagram per send | UDP GSO+GRO | RoCE, GSO/GRO | RoCE, without | \
         kernel TCP, one stream | iWARP | CPU s/GB: RoCE / iWARP / kernel TCP |\n\
         |---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let cpu = |f: &Figure, notes: &mut Notes| notes.fig(f, 2, "s");
        let _ = writeln!(
            d,
            "| {} ({} B packets) | {} | {} | {}{} | {}{} | {} | {}{} | {} / {} / {} |",
            r.mtu,
            roce_packet(r.mtu),
            notes.fig(&r.udp, 3, "GB/s"),
            notes.fig(&r.udp_gso, 3, "GB/s"),
            notes.fig(&r.roce, 3, "GB/s"),
            show_ratio(ratio(&r.roce, &r.udp_gso), "of UDP GSO+GRO"),
            notes.fig(&r.roce_plain, 3, "GB/s"),
            show_ratio(ratio(&r.roce_plain, &r.udp_gso), "of UDP GSO+GRO"),
            notes.fig(&r.tcp, 3, "GB/s"),
            notes.fig(&r.iwarp, 3, "GB/s"),
            show_ratio(ratio(&r.iwarp, &r.tcp), "of TCP"),
            cpu(&r.roce_cpu, notes),
            cpu(&r.iwarp_cpu, notes),
            cpu(&r.tcp_cpu, notes),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roce_packet_follows_the_path_mtu_rxe_derives() {
        assert_eq!(roce_packet(1500), 1024 + 32);
        assert_eq!(roce_packet(9000), 4096 + 32);
        assert_eq!(roce_packet(4200), 4096 + 32);
        assert_eq!(roce_packet(4000), 2048 + 32);
    }

    #[test]
    fn iperf3_json_numbers_are_found_under_their_section() {
        let j = r#"{"end": {"sum_sent": {"bytes": 5, "seconds": 1.0},
            "sum_received": {"seconds": 3.0001, "bytes": 1234567890, "bits_per_second": 3.2e9},
            "cpu_utilization_percent": {"host_total": 55.5, "remote_total": 40}}}"#;
        assert_eq!(
            json_number(j, "\"sum_received\"", "bytes"),
            Some(1234567890.0)
        );
        assert_eq!(json_number(j, "\"sum_received\"", "seconds"), Some(3.0001));
        assert_eq!(
            json_number(j, "\"cpu_utilization_percent\"", "remote_total"),
            Some(40.0)
        );
        assert_eq!(json_number(j, "\"nothing\"", "bytes"), None);
    }
}
