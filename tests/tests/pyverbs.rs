//! rdma-core's own test suite, from Debian's python3-pyverbs (the tests rdma-core and its
//! drivers are checked with), unmodified under `rdma-emu run` on rxe0 and on siw0; and
//! rdma-core v59's suite with pyverbs built from its PyPI source distribution, which
//! binds v59's symbols (`IBVERBS_1.15`, `IBVERBS_PRIVATE_59`) and asks `rdma link show -j`
//! for a device's interface, with the same verdicts.
//!
//! Every test must pass or skip. Each skip reason the suite prints must be one that
//! docs/compatibility.md lists (section "rdma-core's pyverbs suite"), so a skip cannot
//! hide a regression: a verb that starts failing with EOPNOTSUPP prints a new reason.
use rdma_emu_tests::releases;
use rdma_emu_tests::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where python3-pyverbs puts the suite (some files gzipped, as Debian compresses docs).
const SUITE: &str = "/usr/share/doc/rdma-core/tests";
/// Debian's pyverbs is built for Debian's python3.
const PYTHON: &str = "/usr/bin/python3";
const LIMIT: Duration = Duration::from_secs(900);

/// The CQE timestamp test that runs on any device (test_mlx5_timestamp.py, despite its
/// name): RC traffic on CQs created with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`,
/// each stamp read with `ibv_wc_read_completion_wallclock_ns`. On siw0 it skips with the
/// other traffic tests (docs/compatibility.md).
const TIMESTAMP_TEST: &str = "test_timestamp_real_time_rc_traffic";

/// What one run of the suite printed, read from unittest's verbose output.
#[derive(Debug, Default)]
struct Summary {
    ran: usize,
    failures: usize,
    errors: usize,
    skipped: usize,
    /// The reason of every skipped test, as printed.
    skip_reasons: Vec<String>,
    /// (`ERROR: test` or `FAIL: test`, the last line of its traceback).
    problems: Vec<(String, String)>,
    /// The method names of the tests that passed.
    passed: Vec<String>,
}

fn count(line: &str, key: &str) -> usize {
    line.split(['(', ',', ')'])
        .filter_map(|p| p.trim().strip_prefix(key)?.strip_prefix('='))
        .find_map(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Parses `python3 -m unittest -v` output (unittest writes it all to stderr).
fn parse(out: &str) -> Summary {
    let mut s = Summary::default();
    let lines: Vec<&str> = out.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = line.split(" ... skipped ").nth(1) {
            // A Python repr: quoted with ' unless the text holds one, then with ".
            let r = rest.trim();
            s.skip_reasons
                .push(r.get(1..r.len().saturating_sub(1)).unwrap_or(r).to_string());
        }
        if let Some(test) = line.strip_suffix(" ... ok") {
            // A test with a docstring prints its name on a line of its own, then the
            // docstring's first line with the verdict.
            let name_line = i
                .checked_sub(1)
                .map(|p| lines[p])
                .filter(|l| !l.contains(" ... ") && l.contains(" (") && l.ends_with(')'))
                .unwrap_or(test);
            let name = name_line.split_whitespace().next().unwrap_or_default();
            s.passed.push(name.to_string());
        }
        if let Some(n) = line.strip_prefix("Ran ") {
            s.ran = n
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        }
        if line.starts_with("OK") || line.starts_with("FAILED") {
            s.failures = count(line, "failures");
            s.errors = count(line, "errors");
            s.skipped = count(line, "skipped");
        }
        if line.starts_with("ERROR: ") || line.starts_with("FAIL: ") {
            let last = lines[i + 1..]
                .iter()
                .take_while(|l| !l.starts_with("=====") && !l.starts_with("Ran "))
                .filter(|l| !l.trim().is_empty() && !l.starts_with("-----"))
                .last()
                .copied()
                .unwrap_or("");
            s.problems.push((line.to_string(), last.trim().to_string()));
        }
    }
    s
}

/// The skip reasons docs/compatibility.md lists: the first cell, in backticks, of each
/// table row of its pyverbs section.
fn documented_reasons() -> (Vec<String>, String) {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/compatibility.md");
    let text = std::fs::read_to_string(&doc).expect("docs/compatibility.md");
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("rdma-core's pyverbs suite"))
        .expect("docs/compatibility.md has a section \"rdma-core's pyverbs suite\"")
        .to_string();
    let reasons = section
        .lines()
        .filter_map(|l| {
            l.strip_prefix("| `")?
                .split_once("` |")
                .map(|(r, _)| r.to_string())
        })
        .collect();
    (reasons, section)
}

/// A private copy of the suite with its gzipped files unpacked.
fn suite_copy(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(SUITE) else {
        return !cannot_run(&format!("{SUITE} is missing (Debian's python3-pyverbs)"));
    };
    for e in entries.flatten() {
        let from = e.path();
        let name = e.file_name();
        std::fs::copy(&from, dir.join(&name)).expect("copy a file of the suite");
        if from.extension().is_some_and(|x| x == "gz") {
            let status = Command::new("gunzip")
                .arg("-f")
                .arg(dir.join(&name))
                .status()
                .expect("gunzip runs");
            assert!(status.success(), "gunzip {}", name.to_string_lossy());
        }
    }
    true
}

/// Debian's suite (v44) with Debian's pyverbs, on `dev`.
fn run_suite(dev: &str) -> Option<Summary> {
    let _s = serial();
    if missing(&[PYTHON, "gunzip"]) {
        return None;
    }
    let probe = Command::new(PYTHON)
        .args(["-c", "import pyverbs.device"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        let _ = cannot_run("Debian's python3-pyverbs is not installed");
        return None;
    }
    let dir = TempDir::new("pyverbs");
    if !suite_copy(dir.path()) {
        return None;
    }
    Some(run_script(
        dev,
        Path::new(PYTHON),
        &dir.path().join("run_tests.py"),
    ))
}

/// Runs `script` (a suite's `run_tests.py`) with `python` on `dev` under `rdma-emu run`.
fn run_script(dev: &str, python: &Path, script: &Path) -> Summary {
    // In a namespace of its own where possible: the default devices bind the RoCE port
    // on loopback, which another daemon on this host may hold.
    let ns = loopback_ns(&format!("pyv{dev}"), false);
    let daemon = Daemon::start_with(ns.as_ref(), &[]);
    let python = python.to_string_lossy();
    let script = script.to_string_lossy();
    let out = daemon
        .program(ns.as_ref(), &[&python, &script, "--dev", dev, "-v"])
        .wait(LIMIT);
    let text = format!("{}\n{}", out.stdout, out.stderr);
    let s = parse(&text);
    assert!(
        s.ran > 200,
        "the suite did not load on {dev} (ran {}):\n{text}",
        s.ran
    );
    eprintln!(
        "{dev}: ran {}, failures {}, errors {}, skipped {}",
        s.ran, s.failures, s.errors, s.skipped
    );
    s
}

/// pyverbs v59, built once from its PyPI source distribution into a virtual environment
/// next to the build (Debian's python3, cmake, cython from PyPI), and v59's suite:
/// (python, the suite's `run_tests.py`).
fn v59() -> Option<(PathBuf, PathBuf)> {
    if missing(&[PYTHON, "cmake", "gcc", "pkg-config"]) {
        return None;
    }
    let (tree, tarball) = releases::tree(59)?;
    let venv = bin_dir().join("pyverbs-v59-venv");
    let python = venv.join("bin/python");
    let built = |venv: &Path| {
        std::fs::read_dir(venv.join("lib"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|py| py.path().join("site-packages/pyverbs/__init__.py").exists())
    };
    if !built(&venv) {
        let run = |cmd: &mut Command| -> Result<(), String> {
            let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
            if out.status.success() {
                return Ok(());
            }
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(8).collect();
            Err(format!("{cmd:?} failed: {}", tail.join(" / ")))
        };
        let pip = venv.join("bin/pip");
        let made = run(Command::new(PYTHON).args(["-m", "venv"]).arg(&venv))
            .and_then(|()| {
                // pyverbs 59's .pyx files need Cython 3.0 (3.3 rejects mlx5dv_flow.pyx).
                run(Command::new(&pip).args([
                    "install",
                    "-q",
                    "cython>=3.0.12,<3.1",
                    "scikit-build-core>=0.10",
                    "setuptools_scm",
                ]))
            })
            .and_then(|()| {
                // rdma-core is a few hundred C and Cython files: build on every core.
                let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
                run(Command::new(&pip)
                    .args(["install", "-q", "--no-build-isolation"])
                    .arg(&tarball)
                    .env("CMAKE_BUILD_PARALLEL_LEVEL", cores.to_string()))
            });
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(&venv);
            let _ = cannot_run(&format!("cannot build pyverbs v59 from its sdist: {e}"));
            return None;
        }
    }
    Some((python, tree.join("tests/run_tests.py")))
}

/// Asserts every skip reason is documented and returns how many passed.
fn check(dev: &str, s: &Summary, allowed_errors: &[&str]) -> usize {
    let (documented, section) = documented_reasons();
    let mut unknown: Vec<&String> = s
        .skip_reasons
        .iter()
        .filter(|r| !documented.contains(r))
        .collect();
    unknown.sort();
    unknown.dedup();
    assert!(
        unknown.is_empty(),
        "{dev}: skip reasons docs/compatibility.md does not list: {unknown:#?}"
    );
    assert_eq!(
        s.skip_reasons.len(),
        s.skipped,
        "{dev}: every skip has its reason"
    );
    for allowed in allowed_errors {
        assert!(
            section.contains(allowed),
            "docs/compatibility.md explains `{allowed}`"
        );
    }
    let unexplained: Vec<_> = s
        .problems
        .iter()
        .filter(|(head, last)| {
            !(head.starts_with("ERROR: ") && allowed_errors.iter().any(|a| last.ends_with(a)))
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "{dev}: failures and errors: {unexplained:#?}"
    );
    assert_eq!(
        s.problems.len(),
        s.failures + s.errors,
        "{dev}: every failure and error was read"
    );
    s.ran - s.skipped - s.failures - s.errors
}

/// Asserts that `tests` ran and passed on `dev`: the FLUSH, ATOMIC WRITE and CQE
/// timestamp tests, which skip on a device without them (and "Extended QP is not supported
/// on this device" is a documented reason on siw0, so the skip table alone would not
/// notice).
fn assert_passed(dev: &str, s: &Summary, tests: &[&str]) {
    for t in tests {
        assert!(
            s.passed.iter().any(|p| p == t),
            "{dev}: `{t}` did not pass (it ran and failed, or skipped)"
        );
    }
}

#[test]
fn rdma_core_pyverbs_suite_passes_on_rxe0() {
    let Some(s) = run_suite("rxe0") else { return };
    assert_eq!(s.errors, 0, "{:#?}", s.problems);
    let passed = check("rxe0", &s, &[]);
    assert_passed("rxe0", &s, &["test_qp_ex_rc_atomic_write", TIMESTAMP_TEST]);
    // The kernel's rxe passes 86 of this suite; rdma-emu passes what it does.
    assert!(passed >= 80, "rxe0: only {passed} tests passed");
}

#[test]
fn rdma_core_pyverbs_suite_passes_on_siw0() {
    let Some(s) = run_suite("siw0") else { return };
    assert_eq!(s.errors + s.failures, 0, "{:#?}", s.problems);
    let passed = check("siw0", &s, &[]);
    assert!(passed >= 20, "siw0: only {passed} tests passed");
}

#[test]
fn rdma_core_v59_pyverbs_suite_passes_on_rxe0() {
    let _s = serial();
    let Some((python, script)) = v59() else {
        return;
    };
    let s = run_script("rxe0", &python, &script);
    assert_eq!(s.errors, 0, "{:#?}", s.problems);
    let passed = check("rxe0", &s, &[]);
    assert_passed(
        "rxe0 (v59)",
        &s,
        &[
            "test_qp_ex_rc_atomic_write",
            "test_qp_ex_rc_flush",
            "test_qp_ex_rc_flush_type_violate",
            TIMESTAMP_TEST,
        ],
    );
    assert!(passed >= 80, "rxe0 (v59): only {passed} tests passed");
}

#[test]
fn rdma_core_v59_pyverbs_suite_passes_on_siw0() {
    let _s = serial();
    let Some((python, script)) = v59() else {
        return;
    };
    let s = run_script("siw0", &python, &script);
    assert_eq!(s.errors + s.failures, 0, "{:#?}", s.problems);
    let passed = check("siw0", &s, &[]);
    assert!(passed >= 20, "siw0 (v59): only {passed} tests passed");
}

#[test]
fn unittest_output_is_read_whole() {
    let out = "test_a (tests.t.T.test_a) ... ok\n\
               Doc line of b ... skipped 'Create XRCD is not supported'\n\
               test_c (tests.t.T.test_c) ... skipped \"Device rxe0 doesn't have net interface\"\n\
               test_d (tests.t.T.test_d) ... ERROR\n\
               test_e (tests.t.T.test_e)\n\
               Doc line of e ... ok\n\
               \n======================================================================\n\
               ERROR: test_d (tests.t.T.test_d)\n\
               ----------------------------------------------------------------------\n\
               Traceback (most recent call last):\n  File \"x\", line 1\n\
               pyverbs.pyverbs_error.PyverbsRDMAError: boom\n\
               \n----------------------------------------------------------------------\n\
               Ran 5 tests in 0.1s\n\nFAILED (errors=1, skipped=2)\n";
    let s = parse(out);
    assert_eq!((s.ran, s.failures, s.errors, s.skipped), (5, 0, 1, 2));
    assert_eq!(
        s.skip_reasons,
        [
            "Create XRCD is not supported",
            "Device rxe0 doesn't have net interface"
        ]
    );
    assert_eq!(s.problems.len(), 1);
    assert!(s.problems[0].1.ends_with("boom"));
    assert_eq!(s.passed, ["test_a", "test_e"]);
}
