//! The minimum supported Rust version is real: the toolchain that runs the tests is not
//! older than `rust-version`, and every crate inherits `rust-version` so that clippy's
//! `incompatible_msrv` lint checks the standard-library APIs we call against it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent")
        .to_path_buf()
}

/// `major.minor[.patch]` as numbers; `None` if it is not a version.
fn parse_version(s: &str) -> Option<(u32, u32, u32)> {
    let mut it = s.trim().split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    let patch = match it.next() {
        // "0-beta.1" or "0": the numeric prefix.
        Some(p) => p
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap_or("0")
            .parse()
            .ok()?,
        None => 0,
    };
    Some((major, minor, patch))
}

/// The `rust-version` of the workspace's `Cargo.toml`.
fn workspace_rust_version() -> (u32, u32, u32) {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).expect("read Cargo.toml");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("rust-version"))
        .expect("the workspace sets rust-version");
    let value = line.split('"').nth(1).expect("rust-version = \"x.y\"");
    parse_version(value).expect("rust-version is a version")
}

#[test]
fn toolchain_is_not_older_than_rust_version() {
    let msrv = workspace_rust_version();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let out = Command::new(rustc)
        .arg("--version")
        .output()
        .expect("run rustc --version");
    let text = String::from_utf8_lossy(&out.stdout);
    // "rustc 1.95.0 (59807616e 2026-...)"
    let found = text
        .split_whitespace()
        .nth(1)
        .and_then(parse_version)
        .unwrap_or_else(|| panic!("cannot read a version from {text:?}"));
    assert!(
        found >= msrv,
        "rustc {found:?} is older than the workspace's rust-version {msrv:?}"
    );
}

#[test]
fn every_crate_inherits_rust_version_and_lints() {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).expect("read Cargo.toml");
    let members = text
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("workspace members");
    let names: Vec<&str> = members.split('"').skip(1).step_by(2).collect();
    assert!(names.len() >= 5, "members read: {names:?}");
    for m in names {
        let manifest = std::fs::read_to_string(root().join(m).join("Cargo.toml"))
            .unwrap_or_else(|e| panic!("{m}/Cargo.toml: {e}"));
        assert!(
            manifest.contains("rust-version.workspace = true"),
            "{m}/Cargo.toml must inherit rust-version (clippy's incompatible_msrv reads it)"
        );
        assert!(
            manifest.contains("[lints]\nworkspace = true"),
            "{m}/Cargo.toml must use the workspace lints"
        );
    }
}

#[test]
fn versions_compare_as_numbers() {
    assert_eq!(parse_version("1.85"), Some((1, 85, 0)));
    assert_eq!(parse_version("1.95.0"), Some((1, 95, 0)));
    assert_eq!(parse_version("1.96.0-beta.2"), Some((1, 96, 0)));
    assert!(parse_version("1.100.0") > parse_version("1.99.9"));
    assert_eq!(parse_version("nightly"), None);
}
