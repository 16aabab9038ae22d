//! No file of the repository reads or names a path outside it.
//!
//! A fresh clone with nothing beside it must pass its own tests, so no tracked file may
//! point at a sibling folder of the checkout or at the home or work folder of one machine.
//! System paths (`/usr`, `/proc`, `/sys`, `/dev`, `/run`, `/tmp`, ...) are fine: every
//! Linux host has them. The scan covers every file `git ls-files` lists (or, outside a git
//! checkout, every file below the root except `target/`), skipping binary files.

use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// The workspace root (this crate lives one level below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent")
        .to_path_buf()
}

/// The files to scan, relative to the root.
fn tracked_files(root: &Path) -> Vec<PathBuf> {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output();
    if let Ok(out) = out {
        if out.status.success() {
            return out
                .stdout
                .split(|&b| b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| PathBuf::from(String::from_utf8_lossy(s).into_owned()))
                .collect();
        }
    }
    // Not a git checkout (an unpacked archive): walk the tree.
    let mut v = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(root.join(&rel)) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let r = rel.join(&name);
            let skip = name == "target" || name == ".git";
            match e.file_type() {
                Ok(t) if t.is_dir() && !skip => stack.push(r),
                Ok(t) if t.is_file() => v.push(r),
                _ => {}
            }
        }
    }
    v
}

/// Fragments that name a folder of one machine or one outside the checkout. Built from
/// pieces so that this file does not name them itself.
fn forbidden() -> Vec<String> {
    let s = "shared";
    vec![
        format!("../{s}/"),
        format!("../{s}\""),
        format!("{s}/corpora"),
        format!("{s}/DESIGN.md"),
        format!("{s}/CONVENTIONS.md"),
        format!("/{}/", "work"),
        format!("/{}/", "root"),
    ]
}

/// `/home/<user>` paths that are fine: the CI container's own user, which `ci/Dockerfile`
/// creates inside the image.
const HOME_ALLOWED: &[&str] = &["/home/ci/", "/home/ci\n", "/home/ci\""];

/// The problems of one file's text: (line number, what was found).
fn scan_text(rel: &Path, text: &str, root: &Path) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let manifest_relative = text.contains("CARGO_MANIFEST_DIR");
    let forbidden = forbidden();
    for (n, line) in text.lines().enumerate() {
        for f in &forbidden {
            if line.contains(f.as_str()) {
                found.push((n + 1, format!("`{f}`")));
            }
        }
        for (i, _) in line.match_indices("/home/") {
            let rest = &line[i..];
            let rest_nl = format!("{rest}\n");
            if !HOME_ALLOWED.iter().any(|a| rest_nl.starts_with(a)) {
                found.push((n + 1, "a `/home/<user>` path".to_string()));
            }
        }
        if rel.extension().is_some_and(|e| e == "rs") {
            for lit in relative_literals(line) {
                // `#[path]` and `include_*!` resolve against the file's folder.
                let file_relative = line.contains("#[path") || line.contains("include_");
                if escapes(root, rel, &lit, manifest_relative && !file_relative) {
                    found.push((
                        n + 1,
                        format!("relative path `{lit}` leaves the repository"),
                    ));
                }
            }
        }
    }
    found
}

/// String literals of a line that begin with `../`.
fn relative_literals(line: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("\"../") {
        let tail = &rest[i + 1..];
        let end = tail.find('"').unwrap_or(tail.len());
        v.push(tail[..end].to_string());
        rest = &tail[end..];
        if rest.is_empty() {
            break;
        }
        rest = &rest[1..];
    }
    v
}

/// Whether `lit` leaves the root, resolved against the file's crate folder (where
/// `CARGO_MANIFEST_DIR` points) when `manifest_relative`, else against the file's own
/// folder (where `#[path]` and `include_str!` resolve).
fn escapes(root: &Path, rel: &Path, lit: &str, manifest_relative: bool) -> bool {
    let file_dir = rel.parent().unwrap_or(Path::new("")).to_path_buf();
    let mut crate_dir = file_dir.clone();
    loop {
        if root.join(&crate_dir).join("Cargo.toml").is_file() {
            break;
        }
        if !crate_dir.pop() {
            break;
        }
    }
    let outside = |base: &Path| {
        let mut depth: isize = base.components().count() as isize;
        for c in Path::new(lit).components() {
            match c {
                Component::ParentDir => depth -= 1,
                Component::Normal(_) => depth += 1,
                _ => {}
            }
            if depth < 0 {
                return true;
            }
        }
        false
    };
    if manifest_relative {
        outside(&crate_dir)
    } else {
        outside(&file_dir)
    }
}

#[test]
fn no_tracked_file_names_a_path_outside_the_repository() {
    let root = root();
    let files = tracked_files(&root);
    assert!(
        files.len() > 50,
        "the scan sees the repository: {} files",
        files.len()
    );
    let me = Path::new("xtask/tests/repo_paths.rs");
    let mut problems = Vec::new();
    for rel in &files {
        if rel == me {
            continue;
        }
        let Ok(bytes) = std::fs::read(root.join(rel)) else {
            continue; // listed but absent (deleted in the work tree)
        };
        if bytes.contains(&0) {
            continue; // binary: captures, images
        }
        let text = String::from_utf8_lossy(&bytes);
        for (line, what) in scan_text(rel, &text, &root) {
            problems.push(format!("{}:{line}: {what}", rel.display()));
        }
    }
    assert!(
        problems.is_empty(),
        "files that name a path outside the repository:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_scan_catches_what_it_must() {
    let root = root();
    let rs = Path::new("wire/src/x.rs");
    let bad = [
        format!("let p = \"../../{}/corpora/rxe\";", "shared"),
        format!("see /{}/shared/corpora", "work"),
        format!("/{}/x/.cargo", "root"),
        format!("/{}/alice/src", "home"),
        "Path::new(env!(\"CARGO_MANIFEST_DIR\")).join(\"../../elsewhere\")".to_string(),
    ];
    for b in &bad {
        assert!(!scan_text(rs, b, &root).is_empty(), "must flag: {b}");
    }
    let good = [
        "std::fs::read(\"/proc/net/route\")",
        "/sys/class/net/lo and /dev/infiniband and /run/rdma-emu and /tmp/x and /usr/lib",
        "Path::new(env!(\"CARGO_MANIFEST_DIR\")).join(\"../tests/corpora/rxe\")",
        "COPY . /home/ci/rdma-emu",
        "shared memory, the shared-MR path, shared/ as a word",
        "include_str!(\"../../README.md\")",
        "#[path = \"../../fuzz/drivers/mod.rs\"] // CARGO_MANIFEST_DIR",
        "default `~/.cache/rdma-emu-interop`",
    ];
    for g in &good {
        assert!(scan_text(rs, g, &root).is_empty(), "must pass: {g}");
    }
}
