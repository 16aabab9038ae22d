//! UCX 1.13 and Open MPI 4.1 (Debian's unmodified packages) between two network
//! namespaces with one daemon each, found through the device view `rdma-emu run` gives
//! them (`/dev/infiniband/uverbsN`, `/sys/class/infiniband/...`).
//!
//! UCX_TLS names the verbs transports (`rc_v` = rc_verbs with ud_verbs for wireup, `ud_v`
//! = ud_verbs), as a user of a real RNIC does to keep UCX off shared memory between two
//! processes of one machine; everything else is UCX's default, the DGID check of
//! ud_verbs included.

use rdma_emu_tests::{
    bin_dir, lib_dir, missing, serial, two_host::mpi_launch_agent, two_hosts, wait_listening,
    Daemon, Output, TempDir, TwoHosts,
};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::MutexGuard;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

/// Two namespaces with a daemon each, the end-to-end lock held (dropped last).
fn hosts(programs: &[&str]) -> Option<(MutexGuard<'static, ()>, TwoHosts, Daemon, Daemon)> {
    if missing(programs) {
        return None;
    }
    let guard = serial();
    let net = two_hosts()?;
    let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
    Some((guard, net, da, db))
}

/// The block of `ucx_info -d` for one memory domain.
fn domain<'a>(info: &'a str, md: &str) -> &'a str {
    let head = format!("# Memory domain: {md}\n");
    let Some(at) = info.find(&head) else {
        return "";
    };
    let rest = &info[at + head.len()..];
    let end = rest.find("# Memory domain:").unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn ucx_info_lists_rc_verbs_and_ud_verbs_on_the_rxe_device() {
    let Some((_s, net, da, _db)) = hosts(&["ucx_info"]) else {
        return;
    };
    let out = da
        .program(Some(&net.a), &["ucx_info", "-d"])
        .wait(Duration::from_secs(60));
    out.assert_success();
    let rxe = domain(&out.stdout, "rxe0");
    for tl in ["rc_verbs", "ud_verbs"] {
        assert!(
            rxe.contains(&format!("#      Transport: {tl}\n#         Device: rxe0:1")),
            "no {tl} on rxe0 in:\n{}",
            out.stdout
        );
    }
    // Without the view UCX finds no IB memory domain at all: the view is what does it.
    let bare = Command::new("ip")
        .args(["netns", "exec", &net.a.name])
        .arg(bin_dir().join("rdma-emu"))
        .args(["run", "--no-device-view", "--", "ucx_info", "-d"])
        .env("RDMA_EMU_SOCKET", &da.socket)
        .env("RDMA_EMU_LIB_DIR", lib_dir())
        .stdin(Stdio::null())
        .output()
        .expect("cannot run ucx_info");
    let bare = String::from_utf8_lossy(&bare.stdout);
    assert!(bare.contains("# Memory domain: "), "{bare}");
    assert!(!bare.contains("Transport: rc_verbs"), "{bare}");
}

/// `ucx_perftest` server in A, client in B; returns the client's output.
fn perftest(tls: &str, test: &str, extra: &[&str], port: u16) -> Option<Output> {
    let (_s, net, da, db) = hosts(&["ucx_perftest"])?;
    let port_s = port.to_string();
    let mut args = vec!["env", tls, "ucx_perftest", "-p", &port_s];
    let server = args.clone();
    args.extend([net.addr_a.as_str(), "-t", test]);
    args.extend(extra);
    let srv = da.program(Some(&net.a), &server);
    assert!(
        wait_listening(Some(&net.a), port, Duration::from_secs(30)),
        "ucx_perftest server never listened:\n{:?}",
        srv.wait(Duration::from_millis(100))
    );
    let c = db.program(Some(&net.b), &args).wait(LIMIT);
    let s = srv.wait(if c.success() {
        LIMIT
    } else {
        Duration::from_secs(3)
    });
    s.assert_success();
    c.assert_success();
    Some(c)
}

/// The figures of the `Final:` line: iterations, then latency and bandwidth columns.
fn final_line(out: &Output) -> Vec<f64> {
    let line = out
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("Final:"))
        .unwrap_or_else(|| panic!("no Final: line in:\n{}\n{}", out.stdout, out.stderr));
    println!("{}: {line}", out.argv);
    line.split_whitespace()
        .skip(1)
        .map(|w| w.parse().expect("a number"))
        .collect()
}

fn check_lat(out: &Output, iters: f64) {
    let f = final_line(out);
    assert_eq!(f[0], iters, "{}", out.stdout);
    // 50th percentile, average and overall latency, in microseconds.
    assert!(f[1..4].iter().all(|&us| us > 0.0), "{}", out.stdout);
}

fn check_bw(out: &Output, iters: f64) {
    let f = final_line(out);
    assert_eq!(f[0], iters, "{}", out.stdout);
    // Average and overall bandwidth, MB/s.
    assert!(f[4] > 0.0 && f[5] > 0.0, "{}", out.stdout);
}

#[test]
fn ucx_perftest_tag_lat_over_rc_verbs() {
    if let Some(c) = perftest("UCX_TLS=rc_v", "tag_lat", &["-n", "2000"], 13801) {
        check_lat(&c, 2000.0);
    }
}

#[test]
fn ucx_perftest_tag_bw_over_rc_verbs() {
    if let Some(c) = perftest(
        "UCX_TLS=rc_v",
        "tag_bw",
        &["-n", "2000", "-s", "65536"],
        13802,
    ) {
        check_bw(&c, 2000.0);
    }
}

#[test]
fn ucx_perftest_put_bw_zcopy_over_rc_verbs() {
    // UCT level: `-x rc_verbs -d rxe0:1`, put with zero copy from registered memory.
    let args = [
        "-x", "rc_verbs", "-d", "rxe0:1", "-D", "zcopy", "-s", "65536",
    ];
    let mut all = args.to_vec();
    all.extend(["-n", "1000"]);
    if let Some(c) = perftest("UCX_TLS=rc_v", "put_bw", &all, 13803) {
        check_bw(&c, 1000.0);
    }
}

#[test]
fn ucx_perftest_tag_lat_over_ud_verbs_with_the_dgid_check() {
    if let Some(c) = perftest("UCX_TLS=ud_v", "tag_lat", &["-n", "2000"], 13804) {
        check_lat(&c, 2000.0);
    }
}

#[test]
fn ucx_perftest_tag_bw_over_ud_verbs_with_the_dgid_check() {
    if let Some(c) = perftest(
        "UCX_TLS=ud_v",
        "tag_bw",
        &["-n", "2000", "-s", "65536"],
        13805,
    ) {
        check_bw(&c, 2000.0);
    }
}

/// Compiles `tests/c/mpi_pingpong.c` with mpicc.
fn mpi_program(dir: &Path) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/mpi_pingpong.c");
    let exe = dir.join("mpi_pingpong");
    let out = Command::new("mpicc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cannot run mpicc");
    assert!(
        out.status.success(),
        "mpicc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// `mpirun -np 2`, rank 0 in A (where mpirun runs) and rank 1 in B, pml ucx.
fn mpi_pingpong_allreduce(tls: &str) {
    let Some((_s, net, da, db)) = hosts(&["mpirun", "mpicc"]) else {
        return;
    };
    let dir = TempDir::new("mpi");
    let exe = mpi_program(dir.path());
    let agent = mpi_launch_agent(
        dir.path(),
        &[(&net.addr_a, &net.a, &da), (&net.addr_b, &net.b, &db)],
    );
    let hosts = format!("{},{}", net.addr_a, net.addr_b);
    let tls_env = format!("UCX_TLS={tls}");
    let exe_s = exe.display().to_string();
    let agent_s = agent.display().to_string();
    let argv = [
        "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "2",
        "--host",
        &hosts,
        "--mca",
        "plm_rsh_agent",
        &agent_s,
        "--mca",
        "plm_rsh_no_tree_spawn",
        "1",
        "--mca",
        "oob_tcp_if_include",
        net.iface,
        "--mca",
        "pml",
        "ucx",
        "--mca",
        "btl",
        "self",
        "-x",
        &tls_env,
        &exe_s,
    ];
    let out = da.program(Some(&net.a), &argv).wait(LIMIT);
    out.assert_success();
    for rank in 0..2 {
        for what in ["pingpong ok 55", "allreduce ok"] {
            let line = format!("rank {rank}: {what}");
            assert!(
                out.stdout.contains(&line),
                "no `{line}` in:\n{}\n{}",
                out.stdout,
                out.stderr
            );
        }
    }
}

#[test]
fn open_mpi_pingpong_and_allreduce_over_rc_verbs() {
    mpi_pingpong_allreduce("rc_v");
}

#[test]
fn open_mpi_pingpong_and_allreduce_over_ud_verbs() {
    mpi_pingpong_allreduce("ud_v");
}

/// The view as root: the files UCX and pyverbs read, and nothing changed for the host.
#[test]
fn device_view_shows_the_daemons_devices_and_leaves_the_host_alone() {
    let Some((_s, net, da, _db)) = hosts(&[]) else {
        return;
    };
    let before = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let script = "stat -c '%F' /dev/infiniband/uverbs0 /dev/infiniband/rdma_cm; \
                  cat /sys/class/infiniband_verbs/uverbs0/ibdev \
                  /sys/class/infiniband/rxe0/node_type \
                  /sys/class/infiniband/rxe0/ports/1/state \
                  /sys/class/infiniband/rxe0/ports/1/link_layer; \
                  for i in 0 1 2 3; do f=/sys/class/infiniband/rxe0/ports/1/gid_attrs; \
                  [ -e $f/ndevs/$i ] && echo \"$(cat $f/types/$i) $(cat $f/ndevs/$i)\"; done; \
                  ls /sys/class/net; ls -d /dev/pts /dev/shm";
    let out = da
        .program(Some(&net.a), &["sh", "-c", script])
        .wait(Duration::from_secs(60));
    out.assert_success();
    let s = &out.stdout;
    assert!(
        s.starts_with(
            "character special file\ncharacter special file\nrxe0\n1: CA\n4: ACTIVE\nEthernet\n"
        ),
        "{s}"
    );
    assert!(s.contains("RoCE v2 eth0\n"), "{s}");
    // The class entries and /dev submounts are the host's (seen from namespace A).
    assert!(s.contains("eth0\nlo\n/dev/pts\n/dev/shm"), "{s}");
    // A program killed with the view in place takes it along: the namespace was its own.
    let mut held = da.program(Some(&net.a), &["sleep", "120"]);
    let mounts = format!("/proc/{}/mountinfo", held.pid());
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(&mounts).is_ok_and(|m| m.contains(" /dev/infiniband/uverbs0 ")) {
        assert!(held.running(), "the program under the view exited");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no view in {mounts}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    held.kill9();
    let _ = held.wait(Duration::from_secs(10));
    let after = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert_eq!(before, after, "the host's mount table changed");
    assert!(!Path::new("/dev/infiniband").exists());
    assert!(!Path::new("/sys/class/infiniband_verbs").exists());
}

/// An ordinary user gets the view through a user namespace (when the kernel allows one).
#[test]
fn device_view_works_for_an_ordinary_user() {
    let Some((_s, net, da, _db)) = hosts(&["setpriv"]) else {
        return;
    };
    // The daemon is root's; let the user reach its socket, and the tool (the build tree
    // may be closed to other users). `sh` loads no libibverbs: an empty stand-in will do.
    let sock_dir = da.socket.parent().expect("socket dir");
    let _ = Command::new("chmod").arg("755").arg(sock_dir).status();
    let _ = Command::new("chmod").arg("666").arg(&da.socket).status();
    let dir = TempDir::new("userview");
    let tool = dir.path().join("rdma-emu");
    std::fs::copy(bin_dir().join("rdma-emu"), &tool).expect("copy rdma-emu");
    std::fs::write(dir.path().join("libibverbs.so.1"), b"").expect("stand-in");
    let _ = Command::new("chmod")
        .arg("755")
        .arg(dir.path())
        .arg(&tool)
        .status();
    let out = Command::new("ip")
        .args(["netns", "exec", &net.a.name])
        .args(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&tool)
        .args(["run", "--", "sh", "-c"])
        .arg("id -u; stat -c '%F' /dev/infiniband/uverbs0; cat /sys/class/infiniband_verbs/uverbs0/ibdev")
        .env("RDMA_EMU_SOCKET", &da.socket)
        .env("RDMA_EMU_LIB_DIR", dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("cannot run setpriv");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("cannot make a mount namespace") {
        // The kernel refuses user namespaces here: that is the documented requirement.
        let _ = rdma_emu_tests::cannot_run(&format!("no user namespaces: {stderr}"));
        return;
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "65534\ncharacter special file\nrxe0\n", "{stderr}");
}
