//! `docs/performance.png`: bandwidth against message size, drawn by matplotlib (Debian's
//! python3-matplotlib, installed by the bench like perftest) from a script this module
//! writes. rdma-emu's curves are points joined by lines; the limits are horizontal lines.
use std::fmt::Write as _;
use std::path::Path;

/// A curve: a label and (message size in bytes, GB/s) points.
pub struct Curve {
    pub label: String,
    pub points: Vec<(u64, f64)>,
    /// Dashed for two namespaces.
    pub dashed: bool,
}

/// Draws `curves` and the horizontal `limits` (label, GB/s) into `out`.
pub fn draw(
    title: &str,
    curves: &[Curve],
    limits: &[(String, f64)],
    dir: &Path,
    out: &Path,
) -> Result<(), String> {
    let mut py = String::from(
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n\
         fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)\n",
    );
    for c in curves.iter().filter(|c| !c.points.is_empty()) {
        let xs: Vec<String> = c.points.iter().map(|p| p.0.to_string()).collect();
        let ys: Vec<String> = c.points.iter().map(|p| format!("{:.4}", p.1)).collect();
        let _ = writeln!(
            py,
            "ax.plot([{}], [{}], marker='o', linestyle='{}', label={:?})",
            xs.join(", "),
            ys.join(", "),
            if c.dashed { "--" } else { "-" },
            c.label
        );
    }
    for (i, (label, gbps)) in limits.iter().enumerate() {
        let _ = writeln!(
            py,
            "ax.axhline({gbps:.4}, color='C{}', linestyle=':', linewidth=2, label={label:?})",
            curves.len() + i
        );
    }
    let _ = writeln!(
        py,
        "ax.set_xscale('log', base=2)\nax.set_yscale('log')\n\
         ax.set_xticks([64, 4096, 65536, 1048576])\n\
         ax.set_xticklabels(['64 B', '4 KiB', '64 KiB', '1 MiB'])\n\
         ax.set_xlabel('message size')\nax.set_ylabel('GB/s (10^9 bytes per second)')\n\
         ax.set_title({title:?})\nax.grid(True, which='both', alpha=0.3)\n\
         ax.legend(fontsize=8, loc='lower right')\nfig.tight_layout()\nfig.savefig({:?})",
        out.display().to_string()
    );
    let script = dir.join("plot.py");
    std::fs::write(&script, py).map_err(|e| format!("{}: {e}", script.display()))?;
    // Debian's interpreter, which python3-matplotlib installs into (a python3 earlier in
    // PATH, e.g. pyenv's, lacks it).
    let o = std::process::Command::new("/usr/bin/python3")
        .arg(&script)
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "matplotlib failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}
