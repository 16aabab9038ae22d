//! The interop suite's guests, made ready before the suite starts.
//!
//! The interop tests (`tests/tests/interop/`) run `tests/interop/prepare.sh` themselves:
//! it installs the host's qemu and mmdebstrap and builds a guest image once, about five
//! minutes on a fresh 2-core machine, at `nice 19` so that it does not slow the tests
//! running beside it. Under the stress mode's hogs (which run at the normal priority) a
//! niced build gets almost no CPU: on a fresh machine the first stress run spent 582 s on
//! the host packages alone and ran out of the test's 1500 s bound in the image build.
//! Building is setup, as the release build and the Debian packages are, so
//! `cargo xtask test` does it before the hogs start; the tests then find the images in the
//! cache and only check them (under a second).

use std::process::Command;
use std::time::Instant;

/// `prepare.sh` with no argument (the 6.1 guest) and with `--backports-kernel` (the 6.12
/// guest of the ATOMIC_WRITE/FLUSH pair).
const IMAGES: &[&[&str]] = &[&[], &["--backports-kernel"]];

/// Whether the guests are prepared here: only for the whole suite (no `cargo test`
/// arguments, no `RDMA_EMU_INTEROP_ONLY` selection; a narrower run prepares what its tests
/// need, as before), not when the suite is skipped, and only as root (the tests say why
/// they cannot run otherwise).
pub fn wanted(test_args: &[String], skip: Option<&str>, only: Option<&str>, root: bool) -> bool {
    let skipped = skip.is_some_and(|v| !v.is_empty() && v != "0");
    test_args.is_empty() && !skipped && only.unwrap_or_default().is_empty() && root
}

/// Prepares both guests. A failure is printed and not fatal: the interop tests run
/// `prepare.sh` again and report it as theirs (skip, or fail under CI).
pub fn prepare(workspace: &std::path::Path) {
    let script = workspace.join("tests/interop/prepare.sh");
    for args in IMAGES {
        let t = Instant::now();
        let out = Command::new("bash").arg(&script).args(*args).output();
        let what = if args.is_empty() {
            "interop guest (kernel 6.1)"
        } else {
            "interop guest (kernel 6.12)"
        };
        match out {
            Ok(o) if o.status.success() => {
                eprintln!("xtask: {what} ready ({:.0} s)", t.elapsed().as_secs_f64());
            }
            Ok(o) => {
                let log = String::from_utf8_lossy(&o.stdout) + String::from_utf8_lossy(&o.stderr);
                let lines: Vec<&str> = log.lines().collect();
                eprintln!(
                    "xtask: preparing the {what} failed ({}); its tests will try again and \
                     say why. The end of prepare.sh's output:\n{}",
                    o.status,
                    lines[lines.len().saturating_sub(20)..].join("\n")
                );
            }
            Err(e) => eprintln!("xtask: cannot run {}: {e}", script.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::wanted;

    #[test]
    fn only_the_whole_suite_as_root_prepares_the_guests() {
        let none: Vec<String> = Vec::new();
        assert!(wanted(&none, None, None, true));
        assert!(wanted(&none, Some("0"), Some(""), true));
        assert!(!wanted(&none, None, None, false), "not root");
        assert!(!wanted(&none, Some("1"), None, true), "suite skipped");
        assert!(
            !wanted(&none, None, Some("ib_read_bw"), true),
            "a selection"
        );
        let filtered = vec!["-p".to_string(), "emu-core".to_string()];
        assert!(!wanted(&filtered, None, None, true), "a narrower run");
    }
}
