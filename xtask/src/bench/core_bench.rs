//! The core alone: `cargo bench -p emu-core --bench rc_write` run, and the throughputs
//! its criterion report prints read back.

pub struct CoreBench {
    pub write_gbps: f64,
    pub small_mpps: f64,
    pub memcpy_gbps: f64,
}

/// Runs the core's criterion bench and reads its throughputs (middle estimates).
pub fn core_bench() -> Result<CoreBench, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(&cargo)
        .args([
            "bench", "-p", "emu-core", "--bench", "rc_write", "--", "--noplot",
        ])
        .current_dir(crate::workspace_root())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let thrpt = |name: &str| -> Option<(f64, String)> {
        let at = text.find(name)?;
        let line = text[at..].lines().find(|l| l.contains("thrpt:"))?;
        let inner = line.split('[').nth(1)?.trim_end_matches(']');
        let f: Vec<&str> = inner.split_whitespace().collect();
        Some((f.get(2)?.parse().ok()?, f.get(3)?.to_string()))
    };
    let bytes = |(v, unit): (f64, String)| -> f64 {
        match unit.as_str() {
            "GiB/s" => v * 1073741824.0 / 1e9,
            "MiB/s" => v * 1048576.0 / 1e9,
            "KiB/s" => v * 1024.0 / 1e9,
            _ => v,
        }
    };
    let elems = |(v, unit): (f64, String)| -> f64 {
        match unit.as_str() {
            "Melem/s" => v,
            "Kelem/s" => v / 1e3,
            "Gelem/s" => v * 1e3,
            _ => v / 1e6,
        }
    };
    let missing = || format!("no throughput in the core bench's output:\n{text}");
    Ok(CoreBench {
        write_gbps: bytes(thrpt("rc_write_64KiB_mtu4096_icrc").ok_or_else(missing)?),
        small_mpps: elems(thrpt("rc_write_256B_packets").ok_or_else(missing)?),
        memcpy_gbps: bytes(thrpt("memcpy_1MiB").ok_or_else(missing)?),
    })
}
