//! `exports.txt` (the shim's version script source) covers every libibverbs and
//! librdmacm symbol, at its version, that the installed RDMA programs import: they are
//! linked with immediate binding, so one missing symbol kills them before `main`.
use std::collections::BTreeSet;
use std::process::Command;

const PROGRAMS: &[&str] = &[
    "ibv_devices",
    "ibv_devinfo",
    "ibv_rc_pingpong",
    "ibv_uc_pingpong",
    "ibv_ud_pingpong",
    "ibv_srq_pingpong",
    "ibv_xsrq_pingpong",
    "ibv_asyncwatch",
    "ib_send_bw",
    "ib_send_lat",
    "ib_write_bw",
    "ib_write_lat",
    "ib_read_bw",
    "ib_read_lat",
    "ib_atomic_bw",
    "ib_atomic_lat",
    "raw_ethernet_bw",
    "raw_ethernet_lat",
    "rping",
    "ucmatose",
    "udaddy",
    "mckey",
    "rdma_server",
    "rdma_client",
    "rdma_xserver",
    "rdma_xclient",
    "rstream",
    "riostream",
    "cmtime",
    "udpong",
    "rcopy",
    "qperf",
];

fn exports() -> BTreeSet<(String, String)> {
    let text = include_str!("../exports.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .map(|(v, s)| (v.to_string(), s.trim().to_string()))
        .collect()
}

#[test]
fn exports_cover_every_symbol_the_installed_programs_import() {
    let exports = exports();
    let mut checked = 0;
    let mut missing = Vec::new();
    for prog in PROGRAMS {
        let path = std::path::Path::new("/usr/bin").join(prog);
        if !path.exists() {
            continue;
        }
        let Ok(out) = Command::new("objdump").arg("-T").arg(&path).output() else {
            eprintln!("skipped: objdump not available");
            return;
        };
        checked += 1;
        for line in String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("*UND*"))
        {
            let mut fields = line.split_whitespace().rev();
            let (Some(sym), Some(ver)) = (fields.next(), fields.next()) else {
                continue;
            };
            let ver = ver.trim_matches(|c| c == '(' || c == ')');
            let ours = ver.starts_with("IBVERBS_") || ver.starts_with("RDMACM_");
            if ours && !exports.contains(&(ver.to_string(), sym.to_string())) {
                missing.push(format!("{prog}: {sym}@{ver}"));
            }
        }
    }
    eprintln!("checked {checked} installed programs");
    assert!(missing.is_empty(), "not exported:\n{}", missing.join("\n"));
}
