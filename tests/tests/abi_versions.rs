//! One program (`tests/c/abi_versions.c`) built against the headers of three rdma-core
//! releases, v44 (the system's), v57 and v59 (from pyverbs' source distributions on PyPI,
//! `tests/src/releases.rs`), and run on the shim. Each build must link only symbols the
//! shim exports under the version nodes that release's `libibverbs.map.in` gives them, and
//! pass the same checks: struct sizes the program passes, the inline functions that reach
//! through the library's structs, and v59's `ibv_reg_mr_ex` / `ibv_alloc_dmah`.
use rdma_emu_tests::releases::headers;
use rdma_emu_tests::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Builds the program with `include` (None: the system's headers) for `release`, linked
/// against the shim's libibverbs as a program of that release links its own.
fn build(release: u32, include: Option<&Path>, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/abi_versions.c");
    let exe = dir.join(format!("abi_versions_v{release}"));
    let mut gcc = Command::new("gcc");
    gcc.args(["-O2", "-Wall", "-Werror"])
        .arg(format!("-DRDMA_CORE_RELEASE={release}"));
    if let Some(inc) = include {
        gcc.arg("-I").arg(inc);
    }
    let out = gcc
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-L")
        .arg(lib_dir())
        .arg("-l:libibverbs.so.1")
        .output()
        .expect("cannot run gcc");
    assert!(
        out.status.success(),
        "gcc with rdma-core v{release}'s headers failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// symbol -> version node, from a libibverbs.map(.in): the public nodes only (the private
/// one's name is a build-time template).
fn map_nodes(map: &str) -> BTreeMap<String, String> {
    let mut nodes = BTreeMap::new();
    let mut node: Option<String> = None;
    for line in map.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_suffix('{').map(str::trim) {
            node = (!name.contains('@')).then(|| name.to_string());
        } else if line.starts_with('}') {
            node = None;
        } else if let (Some(n), Some(sym)) = (&node, line.strip_suffix(';')) {
            if !sym.contains(':') && !sym.contains('*') {
                nodes.insert(sym.trim().to_string(), n.clone());
            }
        }
    }
    nodes
}

/// (symbol, version node) of every versioned libibverbs symbol `exe` imports.
fn imports(exe: &Path) -> Vec<(String, String)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(exe)
        .output()
        .expect("cannot run objdump");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("*UND*") && l.contains("(IBVERBS_"))
        .filter_map(|l| {
            let node = l.split('(').nth(1)?.split(')').next()?.to_string();
            let sym = l.split_whitespace().last()?.to_string();
            Some((sym, node))
        })
        .collect()
}

fn run_checks(daemon: &Daemon, exe: &Path, release: u32) {
    let out = daemon
        .program(None, &[exe.to_str().expect("utf-8 path"), "rxe0"])
        .wait(Duration::from_secs(120));
    out.assert_success();
    let mut checks = vec![
        "ok device_ex",
        "ok port",
        "ok wr_api",
        "ok post",
        "ok in_order",
        "ok placement",
    ];
    if release >= 59 {
        checks.push("ok reg_mr_ex");
    }
    checks.push("all checks passed");
    for check in checks {
        assert!(
            out.stdout.contains(check),
            "v{release}: `{check}` missing:\n{}",
            out.stdout
        );
    }
}

#[test]
fn a_program_built_against_v44_v57_and_v59_headers_runs_on_the_shim() {
    let _s = serial();
    if missing(&["gcc", "objdump"]) {
        return;
    }
    if !lib_dir().join("libibverbs.so.1").exists()
        && cannot_run("the shim is not built (cargo xtask shim)")
    {
        return;
    }
    let dir = TempDir::new("abi-versions");
    let mut builds = vec![(44, build(44, None, dir.path()))];
    for release in [57, 59] {
        let Some(inc) = headers(release) else {
            return;
        };
        let exe = build(release, Some(&inc), dir.path());
        let map_path = inc.join("../rdma-core/libibverbs/libibverbs.map.in");
        let map = std::fs::read_to_string(&map_path)
            .unwrap_or_else(|e| panic!("{}: {e}", map_path.display()));
        let nodes = map_nodes(&map);
        let imported = imports(&exe);
        assert!(
            imported.iter().any(|(s, _)| s == "ibv_open_device"),
            "v{release}: objdump shows no versioned imports: {imported:?}"
        );
        for (sym, node) in &imported {
            assert_eq!(
                nodes.get(sym),
                Some(node),
                "v{release}: the shim gave {sym} version node {node}; that release's \
                 libibverbs.map.in says {:?}",
                nodes.get(sym)
            );
        }
        if release >= 59 {
            assert!(
                imported.contains(&("ibv_reg_mr_ex".into(), "IBVERBS_1.15".into())),
                "v59 build does not import ibv_reg_mr_ex@IBVERBS_1.15: {imported:?}"
            );
        }
        builds.push((release, exe));
    }
    let daemon = Daemon::start();
    for (release, exe) in &builds {
        run_checks(&daemon, exe, *release);
    }
}

#[test]
fn version_maps_are_read_node_by_node() {
    let map = "IBVERBS_1.0 {\n global:\n  ibv_get_device_list;\n local: *;\n};\n\
               IBVERBS_1.15 {\n\tglobal:\n\t\tibv_reg_mr_ex;\n} IBVERBS_1.14;\n\
               IBVERBS_PRIVATE_@IBVERBS_PABI_VERSION@ {\n global:\n  ibv_cmd_reg_mr;\n};\n";
    let nodes = map_nodes(map);
    assert_eq!(nodes["ibv_get_device_list"], "IBVERBS_1.0");
    assert_eq!(nodes["ibv_reg_mr_ex"], "IBVERBS_1.15");
    assert!(!nodes.contains_key("ibv_cmd_reg_mr"));
    assert_eq!(nodes.len(), 2);
}
