//! Links the shim libraries.
//!
//! rustc's `cdylib` output loses symbol versions, and unmodified programs bind to
//! versioned symbols (`ibv_reg_mr@IBVERBS_1.1`), so verbs-shim is built as a
//! `staticlib` and linked here by `gcc -shared` with a version script generated from
//! `verbs-shim/exports.txt`. One object serves both sonames: `libibverbs.so.1` is
//! the file, `librdmacm.so.1` a symlink to it (glibc's loader recognises the same
//! file and maps it once, so the two libraries share their state). The vendor
//! stand-ins `libmlx5.so.1` and `libefa.so.1` (perftest, pyverbs, UCX and libfabric
//! link them) are compiled from `verbs-shim/stubs/*.c` (see `stubs.rs`).
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const OUT_DIR_NAME: &str = "rdma-emu-lib";

/// Builds the shim libraries; returns the folder that holds them.
pub fn build(release: bool) -> Result<PathBuf, String> {
    let root = workspace_root();
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_absolute() { p } else { root.join(p) })
        .unwrap_or_else(|| root.join("target"));
    let profile = if release { "release" } else { "debug" };

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root).args(["build", "-p", "verbs-shim"]);
    if release {
        cmd.arg("--release");
    }
    run(&mut cmd)?;

    let staticlib = target_dir.join(profile).join("libverbs_shim.a");
    let out = target_dir.join(profile).join(OUT_DIR_NAME);
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;

    let shim_dir = root.join("verbs-shim");
    let exports = std::fs::read_to_string(shim_dir.join("exports.txt"))
        .map_err(|e| format!("verbs-shim/exports.txt: {e}"))?;
    let map = out.join("libibverbs.map");
    write(&map, &version_script(&exports)?)?;

    let lib = out.join("libibverbs.so.1");
    let mut link = Command::new("gcc");
    link.arg("-shared")
        .arg("-o")
        .arg(&lib)
        .arg("-Wl,-soname,libibverbs.so.1")
        .arg("-Wl,--whole-archive")
        .arg(&staticlib)
        .arg("-Wl,--no-whole-archive")
        .arg(format!("-Wl,--version-script={}", map.display()))
        .arg("-Wl,--no-undefined-version")
        .arg("-Wl,-z,now")
        .args([
            "-lgcc_s",
            "-lpthread",
            "-ldl",
            "-lrt",
            "-lutil",
            "-lm",
            "-lc",
        ]);
    run(&mut link)?;
    symlink("libibverbs.so.1", &out.join("librdmacm.so.1"))?;
    symlink("libibverbs.so.1", &out.join("libibverbs.so"))?;
    symlink("librdmacm.so.1", &out.join("librdmacm.so"))?;

    for (name, soname, _) in crate::stubs::STUBS {
        compile_stub(name, soname, &out)?;
    }
    println!("{}", out.display());
    Ok(out)
}

/// Compiles the vendor stand-in `verbs-shim/stubs/NAME.c` into `dir/SONAME` with the
/// version nodes of `NAME.map`; a name of the map that the C file lacks fails the link.
pub fn compile_stub(name: &str, soname: &str, dir: &Path) -> Result<(), String> {
    let stubs = workspace_root().join("verbs-shim").join("stubs");
    let mut cc = Command::new("gcc");
    cc.args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(dir.join(soname))
        .arg(format!("-Wl,-soname,{soname}"))
        .arg(format!(
            "-Wl,--version-script={}",
            stubs.join(format!("{name}.map")).display()
        ))
        .arg("-Wl,--no-undefined-version")
        .arg(stubs.join(format!("{name}.c")));
    run(&mut cc)
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// (family, numeric version) -> (node name, symbols); sorted so `_1.10` follows `_1.9`.
type Nodes<'a> = BTreeMap<(String, Vec<u32>), (String, Vec<&'a str>)>;

/// Turns `NODE SYMBOL` lines into a GNU ld version script: every node of a family
/// inherits from the previous one, as rdma-core's own maps do, and everything not
/// listed (the Rust runtime) stays local.
fn version_script(exports: &str) -> Result<String, String> {
    let mut nodes: Nodes<'_> = BTreeMap::new();
    let mut add = |node: &str| -> Result<(), String> {
        nodes
            .entry(crate::stubs::node_key(node)?)
            .or_insert_with(|| (node.to_string(), Vec::new()));
        Ok(())
    };
    // Every node the real libraries define (rdma-core has no IBVERBS_1.2..1.4; v59 added
    // 1.15).
    for v in [0, 1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
        add(&format!("IBVERBS_1.{v}"))?;
    }
    for v in 0..=3 {
        add(&format!("RDMACM_1.{v}"))?;
    }
    let mut entries = Vec::new();
    for (n, line) in exports.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut it = line.split_whitespace();
        let (Some(node), Some(sym), None) = (it.next(), it.next(), it.next()) else {
            return Err(format!("exports.txt:{}: expected `NODE SYMBOL`", n + 1));
        };
        add(node)?;
        entries.push((node, sym));
    }
    for (node, sym) in entries {
        if let Some((_, syms)) = nodes.values_mut().find(|(name, _)| name == node) {
            syms.push(sym);
        }
    }
    let mut s = String::new();
    let mut prev: Option<(&str, &str)> = None;
    for (i, ((family, _), (name, syms))) in nodes.iter().enumerate() {
        let _ = writeln!(s, "{name} {{");
        if !syms.is_empty() {
            let _ = writeln!(s, "  global:");
            for sym in syms {
                let _ = writeln!(s, "    {sym};");
            }
        }
        if i == 0 {
            let _ = writeln!(s, "  local: *;");
        }
        match prev {
            Some((pf, pn)) if pf == family && !family.ends_with("PRIVATE") => {
                let _ = writeln!(s, "}} {pn};");
            }
            _ => s.push_str("};\n"),
        }
        prev = Some((family, name));
    }
    Ok(s)
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn symlink(target: &str, link: &Path) -> Result<(), String> {
    let _ = std::fs::remove_file(link);
    std::os::unix::fs::symlink(target, link).map_err(|e| format!("{}: {e}", link.display()))
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed: {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_script_chains_nodes_in_numeric_order() {
        let s = version_script("IBVERBS_1.1 ibv_open_device\nIBVERBS_1.10 ibv_import_device\n")
            .expect("valid list");
        let n9 = s.find("IBVERBS_1.9 {").expect("1.9 defined");
        let n10 = s.find("IBVERBS_1.10 {").expect("1.10 defined");
        assert!(n9 < n10);
        assert!(s.contains("} IBVERBS_1.9;"));
        assert!(s.contains("ibv_open_device;"));
        assert_eq!(s.matches("local: *;").count(), 1);
        assert!(!s.contains("IBVERBS_1.2 {"));
    }
}
