//! The CI recipe (`ci/rdma-emu-ci.sh`, docs/ci.md), as a CI job runs it: build and install
//! into a fresh prefix, start a private daemon, run unmodified programs under it with
//! faults from the start, hand back their exit status. Runs in a namespace of its own so
//! its daemon has loopback's UDP port 4791 to itself.
use rdma_emu_tests::*;
use std::path::PathBuf;
use std::process::Command;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ci/rdma-emu-ci.sh")
}

/// Runs the script inside `ns` with `args`; (status code, stdout, stderr).
fn recipe(ns: &Netns, prefix: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    // The tests' binaries live in $CARGO_TARGET_DIR/release: the script's build is then a
    // check that finds everything up to date.
    let target = bin_dir()
        .parent()
        .expect("the release folder has a parent")
        .to_path_buf();
    let mut argv = ns.exec_prefix();
    argv.push(script().display().to_string());
    argv.extend(["--prefix".to_string(), prefix.display().to_string()]);
    argv.extend(args.iter().map(|s| s.to_string()));
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .env("CARGO_TARGET_DIR", target)
        .env_remove("RDMA_EMU_SOCKET")
        .env_remove("RDMA_EMU_LIB_DIR")
        .output()
        .expect("sh runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_ci_script_installs_runs_programs_under_faults_and_returns_their_status() {
    let _s = serial();
    require_build();
    if missing(&["ibv_rc_pingpong", "ibv_devinfo", "cargo"]) {
        return;
    }
    let Some(ns) = loopback_ns("ci", false) else {
        return;
    };
    let prefix = TempDir::new("ci-prefix");
    let pair = "ibv_rc_pingpong -g 0 -n 200 -p 18521 & sleep 1; \
                ibv_rc_pingpong -g 0 -n 200 -p 18521 127.0.0.1 && wait $!";
    let (code, out, err) = recipe(
        &ns,
        prefix.path(),
        &[
            "--faults",
            "rxe0 drop 5% --opcode send --seed 9",
            "--",
            "sh",
            "-c",
            pair,
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(out.matches("200 iters in").count(), 2, "{out}\n{err}");
    for f in [
        "bin/rdma-emud",
        "bin/rdma-emu",
        "lib/rdma-emu/libibverbs.so.1",
        "lib/rdma-emu/librdmacm.so.1",
    ] {
        assert!(prefix.path().join(f).exists(), "{f} not installed");
    }
    // The command's failure is the script's, with the daemon's log to explain it.
    let (code, _, err) = recipe(
        &ns,
        prefix.path(),
        &["--", "sh", "-c", "ibv_devinfo -d rxe0 && exit 3"],
    );
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("the daemon's log") && err.contains("rdma-emud serving"),
        "{err}"
    );
    // Usage errors say what is wrong.
    let (code, _, err) = recipe(&ns, prefix.path(), &["--bogus"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown option --bogus"), "{err}");
}
