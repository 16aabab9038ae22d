//! The vendor stand-ins: `libmlx5.so.1` and `libefa.so.1`.
//!
//! pyverbs, perftest, UCX's `libuct_ib` and libfabric link rdma-core's direct-verbs
//! libraries, and the loader refuses a program whose versioned symbols
//! (`mlx5dv_reserved_qpn_alloc@MLX5_1.18`) a library lacks. The real libraries cannot
//! be used beside the shim (they bind to libibverbs' private ABI), so the shim ships
//! stand-ins that export every name of the real ones under the same version nodes and
//! answer as the real ones answer for a device of another vendor
//! (`verbs-shim/stubs/common.h` says how).
//!
//! `cargo xtask stub-maps TREE...` writes `verbs-shim/stubs/*.map` from the version
//! scripts of one or more rdma-core source trees (the union of their nodes, so a
//! program built against any of those releases loads); the tests below check the built
//! stand-ins against those maps and against the real libraries installed on the host.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// (stand-in source name, soname, the real library's version script in an rdma-core tree).
pub const STUBS: &[(&str, &str, &str)] = &[
    ("mlx5", "libmlx5.so.1", "providers/mlx5/libmlx5.map"),
    ("efa", "libefa.so.1", "providers/efa/libefa.map"),
];

/// One version node of a map: its name, the node it inherits from, its symbols.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Node {
    pub parent: Option<String>,
    pub symbols: Vec<String>,
}

/// Node name -> node, sorted by (family, numeric version) so `_1.10` follows `_1.9`.
pub type Map = BTreeMap<(String, Vec<u32>), (String, Node)>;

/// (family, numeric version) of a version node name such as `MLX5_1.18`.
pub fn node_key(name: &str) -> Result<(String, Vec<u32>), String> {
    let (family, ver) = name
        .rsplit_once('_')
        .ok_or_else(|| format!("bad version node {name}"))?;
    let ver = ver
        .split('.')
        .map(|p| {
            p.parse::<u32>()
                .map_err(|_| format!("bad version node {name}"))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    Ok((family.to_string(), ver))
}

/// Parses a GNU ld version script of the shape rdma-core writes.
pub fn parse_map(text: &str) -> Result<Map, String> {
    // Drop /* */ comments, then read tokens separated by white space, `{`, `}` and `;`.
    let mut clean = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        clean.push_str(&rest[..start]);
        let end = rest[start..]
            .find("*/")
            .ok_or("unterminated comment in version script")?;
        rest = &rest[start + end + 2..];
    }
    clean.push_str(rest);
    let spaced = clean
        .replace('{', " { ")
        .replace('}', " } ")
        .replace(';', " ; ");
    let mut tokens = spaced.split_whitespace().peekable();
    let mut map = Map::new();
    while let Some(name) = tokens.next() {
        if tokens.next() != Some("{") {
            return Err(format!("expected `{{` after {name}"));
        }
        let mut node = Node::default();
        let mut local = false;
        loop {
            match tokens.next() {
                Some("}") => break,
                Some("global:") => local = false,
                Some("local:") => local = true,
                Some(";") => {}
                Some(sym) if !local => node.symbols.push(sym.to_string()),
                Some(_) => {}
                None => return Err(format!("node {name} not closed")),
            }
        }
        match tokens.next() {
            Some(";") => {}
            Some(parent) => {
                node.parent = Some(parent.to_string());
                if tokens.next() != Some(";") {
                    return Err(format!("expected `;` after node {name}"));
                }
            }
            None => return Err(format!("node {name} not terminated")),
        }
        map.insert(node_key(name)?, (name.to_string(), node));
    }
    Ok(map)
}

/// Adds `other`'s nodes and symbols to `map` (releases only ever add to a map).
pub fn merge(map: &mut Map, other: Map) {
    for (key, (name, node)) in other {
        let (_, mine) = map.entry(key).or_insert_with(|| (name, Node::default()));
        if mine.parent.is_none() {
            mine.parent = node.parent;
        }
        for sym in node.symbols {
            if !mine.symbols.contains(&sym) {
                mine.symbols.push(sym);
            }
        }
    }
}

/// Writes `map` as a version script; the first node keeps everything else local.
pub fn render_map(map: &Map, header: &str) -> String {
    let mut s = String::from("/*\n");
    for line in header.lines() {
        let _ = writeln!(s, " * {line}");
    }
    s.push_str(" */\n");
    for (i, (name, node)) in map.values().enumerate() {
        let _ = write!(s, "{name} {{");
        if !node.symbols.is_empty() {
            s.push_str(" global:");
            for sym in &node.symbols {
                let _ = write!(s, " {sym};");
            }
        }
        if i == 0 {
            s.push_str(" local: *;");
        }
        match &node.parent {
            Some(p) => {
                let _ = writeln!(s, " }} {p};");
            }
            None => s.push_str(" };\n"),
        }
    }
    s
}

/// True when `name` is a `static inline` function of the provider's headers: rdma-core's
/// maps list a few such names (efadv_wc_read_sgid) that the library never defines.
fn defined_inline(headers: &[String], name: &str) -> bool {
    headers.iter().any(|h| {
        let mut from = 0;
        while let Some(pos) = h[from..].find(name) {
            let at = from + pos;
            from = at + name.len();
            let after = h[from..].trim_start();
            let before_ok = h[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            if !before_ok || !after.starts_with('(') {
                continue;
            }
            let decl_start = h[..at].rfind([';', '{', '}']).map_or(0, |p| p + 1);
            if h[decl_start..at].contains("static inline") {
                return true;
            }
        }
        false
    })
}

/// `cargo xtask stub-maps TREE...`: regenerates `verbs-shim/stubs/*.map`.
pub fn generate_maps(trees: &[String]) -> Result<(), String> {
    if trees.is_empty() {
        return Err("usage: cargo xtask stub-maps RDMA_CORE_TREE...".into());
    }
    let stubs = crate::workspace_root().join("verbs-shim/stubs");
    for (name, soname, map_path) in STUBS {
        let mut map = Map::new();
        let mut headers = Vec::new();
        let mut sources = Vec::new();
        for tree in trees {
            let tree = Path::new(tree);
            let path = tree.join(map_path);
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            merge(&mut map, parse_map(&text)?);
            let dir = path.parent().unwrap_or(tree);
            let release = std::fs::read_to_string(tree.join("CMakeLists.txt"))
                .ok()
                .and_then(|c| {
                    let line = c.lines().find(|l| l.contains("set(PACKAGE_VERSION"))?;
                    Some(line.split('"').nth(1)?.to_string())
                })
                .unwrap_or_else(|| tree.display().to_string());
            sources.push(release);
            for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
                let p = entry.map_err(|e| e.to_string())?.path();
                if p.extension().is_some_and(|e| e == "h") {
                    headers.push(std::fs::read_to_string(&p).unwrap_or_default());
                }
            }
        }
        for (_, node) in map.values_mut() {
            node.symbols.retain(|s| !defined_inline(&headers, s));
        }
        let header = format!(
            "Version script of the {soname} stand-in: the union of rdma-core's own {map_path}\n\
             of releases {}, less the names its headers define inline.\n\
             Generated by `cargo xtask stub-maps`; do not edit.",
            sources.join(", ")
        );
        let out = stubs.join(format!("{name}.map"));
        std::fs::write(&out, render_map(&map, &header))
            .map_err(|e| format!("{}: {e}", out.display()))?;
        println!("{}", out.display());
    }
    Ok(())
}

#[cfg(test)]
#[path = "stubs_tests.rs"]
mod tests;
