//! AI data movers on CPU memory over rdma-emu, between two network namespaces with one
//! daemon each, installed from PyPI into a virtual environment (`RDMA_EMU_NO_PYPI=1`
//! skips them on machines without network; `RDMA_EMU_AI_VENV=DIR` names the environment,
//! default `ai-venv/` in the build folder, reused when its packages import).
//!
//! The daemons serve `rxe0` only: Mooncake's discovery takes every device it finds and
//! pairs them across hosts, and an iWARP device refuses a QP moved to RTS without an
//! iWARP connection (the kernel's siw says EINVAL too), so a host with rxe and siw both
//! loaded fails the same way. Everything else is found: devices through the device view,
//! the shim through `rdma-emu run`'s preload (NIXL's wheel bundles its own rdma-core).

use rdma_emu_tests::{
    bin_dir, cannot_run, lib_dir, loopback_ns, serial, two_host::mpi_launch_agent, two_hosts,
    Daemon, Netns, Output, Program, TempDir, TwoHosts,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{MutexGuard, OnceLock};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(600);
const MIB64: u64 = 64 << 20;

/// The packages as tested, with torch's pure-Python dependencies.
const PACKAGES: &[&str] = &[
    "mooncake-transfer-engine-non-cuda==0.3.13.post1",
    "numpy",
    "mpi4py",
    "filelock",
    "typing-extensions>=4.13",
    "sympy>=1.13.3",
    "networkx",
    "jinja2",
    "fsspec",
];
/// Installed without their dependencies. NIXL's pull torch; its DRAM path needs only
/// numpy. PyPI's torch is a CUDA build whose libraries link to these CUDA libraries, so
/// it cannot be imported without them even on a machine with no GPU (about 1.9 GB, with
/// torch's own 0.5 GB); the rest of what it requires (the CUDA toolkit's other parts,
/// triton, cuda-bindings) is loaded only on first use of a GPU or the compiler.
const NO_DEPS: &[&str] = &[
    "nixl-cu12==1.5.1",
    "torch==2.15.0",
    "nvidia-cuda-runtime==13.2.86.*",
    "nvidia-cublas==13.4.1.3.*",
    "nvidia-cuda-nvrtc==13.2.86.*",
    "nvidia-cuda-cupti==13.2.86.*",
    "nvidia-cufft==12.2.0.57.*",
    "nvidia-cufile==1.17.1.22.*",
    "nvidia-cusparse==12.7.10.12.*",
    "nvidia-nvjitlink==13.2.86.*",
    "nvidia-cudnn-cu13==9.26.0.51",
    "nvidia-cusparselt-cu13==0.8.1",
    "nvidia-nccl-cu13==2.30.7",
    "nvidia-nvshmem-cu13==3.7.2",
];
const IMPORTS: &str =
    "import mooncake.engine, nixl_cu12._api, mpi4py, numpy, torch.distributed.rpc";

fn make_venv(dir: &Path) -> Result<(), String> {
    let python = dir.join("bin/python");
    let imports = |python: &Path| {
        Command::new(python)
            .args(["-c", IMPORTS])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if imports(&python) {
        return Ok(());
    }
    let run = |argv: &[&str]| -> Result<(), String> {
        let out = Command::new(argv[0])
            .args(&argv[1..])
            .output()
            .map_err(|e| format!("{}: {e}", argv[0]))?;
        if out.status.success() {
            return Ok(());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        Err(format!("{}: {}", argv.join(" "), tail.join(" / ")))
    };
    let d = dir.display().to_string();
    let pip = format!("{d}/bin/pip");
    run(&["python3", "-m", "venv", &d])?;
    let quiet = ["install", "-q", "--disable-pip-version-check"];
    run(&[&[pip.as_str()], &quiet[..], PACKAGES].concat())?;
    run(&[&[pip.as_str()], &quiet[..], &["--no-deps"], NO_DEPS].concat())?;
    if imports(&python) {
        Ok(())
    } else {
        Err(format!("{IMPORTS} fails in {d}"))
    }
}

/// The environment's python, made once per run; `None` (the reason printed) when the
/// user opted out or, outside CI, when PyPI cannot be reached.
fn python() -> Option<PathBuf> {
    if std::env::var_os("RDMA_EMU_NO_PYPI").is_some_and(|v| !v.is_empty() && v != "0") {
        eprintln!(
            "SKIPPED: RDMA_EMU_NO_PYPI is set: the AI movers need packages from PyPI \
             (about 2.5 GB to download, most of it torch's CUDA libraries)"
        );
        return None;
    }
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let venv = VENV.get_or_init(|| {
        let dir = std::env::var_os("RDMA_EMU_AI_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| bin_dir().join("ai-venv"));
        make_venv(&dir).map(|()| dir.join("bin/python"))
    });
    match venv {
        Ok(p) => Some(p.clone()),
        Err(e) => {
            let _ = cannot_run(&format!(
                "cannot install the AI movers from PyPI (RDMA_EMU_NO_PYPI=1 skips them): {e}"
            ));
            None
        }
    }
}

/// Two namespaces with a daemon each serving rxe0 only, the end-to-end lock held.
fn hosts() -> Option<(MutexGuard<'static, ()>, TwoHosts, Daemon, Daemon)> {
    let guard = serial();
    let net = two_hosts()?;
    let da = Daemon::start_with(Some(&net.a), &["--netdev", net.iface]);
    let db = Daemon::start_with(Some(&net.b), &["--netdev", net.iface]);
    for (d, ns) in [(&da, &net.a), (&db, &net.b)] {
        d.cli(Some(ns), &["link", "del", "siw0"]).assert_success();
    }
    Some((guard, net, da, db))
}

fn pkts(d: &Daemon, ns: &Netns) -> (u64, u64) {
    (
        d.counter(Some(ns), "rxe0", "sent_pkts"),
        d.counter(Some(ns), "rxe0", "rcvd_pkts"),
    )
}

/// The packets `a` sent and received since `before` carry at least `sent`/`rcvd` bytes:
/// no RoCE packet carries more than 4096 bytes of payload.
fn assert_moved(d: &Daemon, ns: &Netns, before: (u64, u64), sent: u64, rcvd: u64) {
    let now = pkts(d, ns);
    let (s, r) = (now.0 - before.0, now.1 - before.1);
    assert!(
        s * 4096 >= sent && r * 4096 >= rcvd,
        "the daemon in {} sent {s} and received {r} packets: too few for {sent} and {rcvd} bytes",
        ns.name
    );
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/examples/kv-cache-mooncake")
        .join(name)
        .display()
        .to_string()
}

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/ai_movers")
        .join(name)
        .display()
        .to_string()
}

/// Runs `server` in a and `client` in b (each under `rdma-emu run`); both must succeed
/// and print `ok`.
fn server_client(
    net: &TwoHosts,
    da: &Daemon,
    db: &Daemon,
    server: &[&str],
    client: &[&str],
) -> (Output, Output) {
    let s: Program = da.program(Some(&net.a), server);
    let c = db.program(Some(&net.b), client).wait(LIMIT);
    let s = s.wait(LIMIT);
    for o in [&s, &c] {
        assert!(
            o.success() && o.stdout.contains(": ok"),
            "{}:\n{}\n{}",
            o.argv,
            o.stdout,
            o.stderr
        );
    }
    (s, c)
}

/// A library linked against a renamed copy of rdma-core, as auditwheel leaves them.
const MOVER_C: &str = r#"
#include <infiniband/verbs.h>
#include <stdio.h>
int mover_devices(char *names, int len)
{
    int n = 0, at = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l)
        return -1;
    names[0] = 0;
    for (int i = 0; i < n && at < len - 1; i++)
        at += snprintf(names + at, len - at, "%s ", ibv_get_device_name(l[i]));
    ibv_free_device_list(l);
    return n;
}
"#;

/// With LINKED, linked to libibverbs.so.1 as usual; loads the renamed copy (directly and
/// through the mover) and calls through each. Without, like Python loading a wheel.
const MAIN_C: &str = r#"
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    struct ibv_device **l;
#ifdef LINKED
    int n = 0;
    l = ibv_get_device_list(&n);
    printf("linked: %d %s\n", n, l && n ? ibv_get_device_name(l[0]) : "-");
    if (l)
        ibv_free_device_list(l);
#endif
    void *copy = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!copy) {
        printf("dlopen copy: %s\n", dlerror());
        return 1;
    }
    struct ibv_device **(*list)(int *) = (struct ibv_device **(*)(int *))dlsym(copy, "ibv_get_device_list");
    void (*free_list)(struct ibv_device **) = (void (*)(struct ibv_device **))dlsym(copy, "ibv_free_device_list");
    if (!list || !free_list) {
        printf("dlsym copy: %s\n", dlerror());
        return 1;
    }
    int m = -1;
    l = list(&m);
    printf("copy's own: %s %d\n", l ? "list" : "null", m);
    if (l)
        free_list(l);
    void *mover = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!mover) {
        printf("dlopen mover: %s\n", dlerror());
        return 1;
    }
    int (*devices)(char *, int) = (int (*)(char *, int))dlsym(mover, "mover_devices");
    char names[256];
    int k = devices ? devices(names, sizeof names) : -2;
    printf("mover: %d %s\n", k, k > 0 ? names : "-");
    dlclose(mover);
    dlclose(copy);
    return 0;
}
"#;

const SYSTEM_VERBS: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

/// Copies the system's libibverbs under a new soname of the same length (the bytes of the
/// old one replaced in place), as a wheel's bundled copy carries.
fn renamed_copy(dir: &Path) -> std::path::PathBuf {
    let mut bytes = std::fs::read(SYSTEM_VERBS).expect("read libibverbs");
    let (old, new) = (b"libibverbs.so.1\0", b"libibverbs-Q.so\0");
    let mut at = 0;
    let mut replaced = 0;
    while let Some(i) = bytes[at..].windows(old.len()).position(|w| w == old) {
        bytes[at + i..at + i + new.len()].copy_from_slice(new);
        at += i + new.len();
        replaced += 1;
    }
    assert!(replaced > 0, "no soname in {SYSTEM_VERBS}");
    let path = dir.join("libibverbs-Q.so");
    std::fs::write(&path, bytes).expect("write the copy");
    path
}

fn gcc(args: &[&str]) {
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror"])
        .args(args)
        .output()
        .expect("cannot run gcc");
    assert!(
        out.status.success(),
        "gcc {args:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A program that loads rdma-core twice: the linked copy and a renamed one (its
/// constructors run), and a library linked against the renamed one. Under `rdma-emu run`
/// the linked name and the renamed one both reach the daemon's devices; the renamed
/// copy's own entry points still run (they find no kernel device) without crashing.
#[test]
fn a_second_copy_of_rdma_core_reaches_the_shim_through_the_preload() {
    if !Path::new(SYSTEM_VERBS).exists() || !Path::new("/usr/include/infiniband/verbs.h").exists() {
        let _ = cannot_run("libibverbs-dev is not installed (apt-get install libibverbs-dev)");
        return;
    }
    let _s = serial();
    let dir = TempDir::new("twocopies");
    let copy = renamed_copy(dir.path());
    let d = dir.path().display().to_string();
    let mover = format!("{d}/libmover.so");
    let exe = format!("{d}/twocopies");
    std::fs::write(dir.path().join("mover.c"), MOVER_C).expect("mover.c");
    std::fs::write(dir.path().join("main.c"), MAIN_C).expect("main.c");
    gcc(&[
        "-shared",
        "-fPIC",
        "-o",
        &mover,
        &format!("{d}/mover.c"),
        &format!("-L{d}"),
        "-l:libibverbs-Q.so",
        "-Wl,-rpath,$ORIGIN",
    ]);
    let main_c = format!("{d}/main.c");
    gcc(&["-DLINKED", "-o", &exe, &main_c, "-libverbs", "-ldl"]);
    let exe_dl = format!("{d}/twocopies-dl");
    gcc(&["-o", &exe_dl, &main_c, "-ldl"]);
    let needed = Command::new("objdump")
        .args(["-p", &mover])
        .output()
        .expect("objdump");
    assert!(
        String::from_utf8_lossy(&needed.stdout).contains("NEEDED               libibverbs-Q.so"),
        "the mover is not linked against the renamed copy"
    );
    let Some(ns) = loopback_ns("twocopies", false) else {
        return;
    };
    let daemon = Daemon::start_with(Some(&ns), &[]);
    let copy_s = copy.display().to_string();
    let emu = bin_dir().join("rdma-emu").display().to_string();
    let run = |exe: &str, preload: &str| {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                &emu,
                "run",
                "--no-device-view",
                "--",
            ])
            .args([exe, &copy_s, &mover])
            .env("RDMA_EMU_SOCKET", &daemon.socket)
            .env("RDMA_EMU_LIB_DIR", lib_dir())
            .env("RDMA_EMU_PRELOAD", preload)
            .output()
            .expect("cannot run rdma-emu");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{:?}:\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let out = run(&exe, "1");
    assert!(out.contains("linked: 2 rxe0"), "{out}");
    assert!(out.contains("copy's own: "), "{out}");
    assert!(out.contains("mover: 2 rxe0 siw0"), "{out}");
    // A program that does not link libibverbs itself (Python importing a wheel): only
    // the preload brings the mover to the shim.
    let out = run(&exe_dl, "1");
    assert!(out.contains("mover: 2 rxe0 siw0"), "{out}");
    let out = run(&exe_dl, "0");
    assert!(out.contains("copy's own: "), "{out}");
    assert!(!out.contains("mover: 2 rxe0"), "{out}");
}

/// Mooncake's Python API, discovering its devices (no topology file, no device name) and
/// meeting its peer by P2P handshake (no metadata server): 64 MiB written, 64 MiB read and
/// 256 x 256 KiB written in one batch, each checked by SHA-256.
#[test]
fn mooncake_python_writes_reads_and_batches_over_rdma() {
    let Some(py) = python() else { return };
    let Some((_s, net, da, db)) = hosts() else {
        return;
    };
    let py = py.display().to_string();
    let mover = example("mooncake_mover.py");
    let before = pkts(&da, &net.a);
    let (_, c) = server_client(
        &net,
        &da,
        &db,
        &[&py, &mover, "server", &net.addr_a, "17021"],
        &[&py, &mover, "client", &net.addr_b, &net.addr_a, "17021"],
    );
    eprintln!("{}", c.stdout);
    assert!(c.stdout.contains("read matches"), "{}", c.stdout);
    // a received the write and the batch and sent the read's responses.
    assert_moved(&da, &net.a, before, MIB64, 2 * MIB64);
}

/// Mooncake's C++ benchmark from the wheel, by auto discovery: a target in a and an
/// initiator in b writing for a few seconds.
#[test]
fn mooncake_transfer_engine_bench_over_rdma() {
    let Some(py) = python() else { return };
    // Run by the environment's python rather than through its `#!` line, which names
    // the folder pip made the environment in (a moved build folder keeps the packages
    // importable but not the scripts' interpreter paths).
    let bench = py
        .with_file_name("transfer_engine_bench")
        .display()
        .to_string();
    let py = py.display().to_string();
    let Some((_s, net, da, db)) = hosts() else {
        return;
    };
    let common = [
        "--metadata_server=P2PHANDSHAKE".to_string(),
        "--auto_discovery".to_string(),
        "--buffer_size=134217728".to_string(),
    ];
    let name_a = format!("--local_server_name={}", net.addr_a);
    let mut target: Vec<&str> = vec![&py, &bench, "--mode=target", &name_a];
    target.extend(common.iter().map(String::as_str));
    let mut t = da.program(Some(&net.a), &target);
    let mut found = None;
    let start = std::time::Instant::now();
    while found.is_none() && start.elapsed() < LIMIT && t.running() {
        std::thread::sleep(Duration::from_millis(200));
        found = listener(&net.a);
    }
    let Some((port, pid)) = found else {
        t.kill9();
        panic!("the target never listened:\n{}", t.wait(LIMIT).stderr);
    };
    let seg = format!("--segment_id={}:{port}", net.addr_a);
    let name_b = format!("--local_server_name={}", net.addr_b);
    let before = pkts(&da, &net.a);
    let mut init: Vec<&str> = vec![
        &py,
        &bench,
        "--mode=initiator",
        &name_b,
        &seg,
        "--operation=write",
        "--duration=5",
        "--threads=2",
        "--report_unit=MB",
    ];
    init.extend(common.iter().map(String::as_str));
    let c = db.program(Some(&net.b), &init).wait(LIMIT);
    // The target serves until stopped; `rdma-emu run` may have forked it off (device view).
    // SAFETY: kill(2) on the process this test started; no memory is involved.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let _ = t.wait(LIMIT);
    c.assert_success();
    let line = c
        .stderr
        .lines()
        .find(|l| l.contains("Test completed"))
        .unwrap_or_else(|| panic!("no result in:\n{}", c.stderr));
    eprintln!("{line}");
    let mb: f64 = line
        .rsplit("throughput ")
        .next()
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(mb > 0.0, "{line}");
    assert_moved(&da, &net.a, before, 0, (mb * 1e6) as u64);
}

/// The TCP port and the pid of the one process listening in `ns` (the target's handshake
/// server: its port is its own pick).
fn listener(ns: &Netns) -> Option<(u16, i32)> {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, "ss", "-Hltnp"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let local = l.split_whitespace().nth(3)?;
        let port = local.rsplit(':').next()?.parse().ok()?;
        let pid = l.split("pid=").nth(1)?.split(',').next()?.parse().ok()?;
        Some((port, pid))
    })
}

/// NIXL with its UCX backend (the wheel's own UCX and rdma-core): 64 MiB written and read
/// between DRAM segments of two agents, checked by SHA-256, no setting at all.
#[test]
fn nixl_ucx_writes_and_reads_dram_over_rdma() {
    let Some(py) = python() else { return };
    let Some((_s, net, da, db)) = hosts() else {
        return;
    };
    let py = py.display().to_string();
    let mover = script("nixl_mover.py");
    let before = pkts(&da, &net.a);
    let (_, c) = server_client(
        &net,
        &da,
        &db,
        &[&py, &mover, "target", &net.addr_a, "17022"],
        &[&py, &mover, "initiator", &net.addr_a, "17022"],
    );
    eprintln!("{}", c.stdout);
    assert!(c.stdout.contains("read matches"), "{}", c.stdout);
    assert_moved(&da, &net.a, before, MIB64, MIB64);
}

/// mpi4py over Debian's Open MPI with the UCX PML, one rank per namespace: Allreduce,
/// Bcast and Alltoall of numpy arrays from 8 B to 32 MiB, checked. UCX keeps its defaults
/// but for shared memory, which two processes of one machine would otherwise use.
#[test]
fn mpi4py_collectives_over_open_mpi_and_ucx() {
    let Some(py) = python() else { return };
    if rdma_emu_tests::missing(&["mpirun"]) {
        return;
    }
    let Some((_s, net, da, db)) = hosts() else {
        return;
    };
    let dir = TempDir::new("mpi4py");
    let agent = mpi_launch_agent(
        dir.path(),
        &[(&net.addr_a, &net.a, &da), (&net.addr_b, &net.b, &db)],
    );
    let hosts = format!("{},{}", net.addr_a, net.addr_b);
    let py = py.display().to_string();
    let prog = script("mpi_collectives.py");
    let agent = agent.display().to_string();
    let before = pkts(&da, &net.a);
    #[rustfmt::skip]
    let argv = [
        "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "--host", &hosts,
        "--mca", "plm_rsh_agent", &agent, "--mca", "plm_rsh_no_tree_spawn", "1",
        "--mca", "oob_tcp_if_include", net.iface, "--mca", "pml", "ucx", "--mca", "btl", "self",
        "-x", "UCX_TLS=^shm,cma", &py, &prog,
    ];
    let out = da.program(Some(&net.a), &argv).wait(LIMIT);
    eprintln!("{}", out.stdout);
    out.assert_success();
    for rank in 0..2 {
        let line = format!("rank {rank}: ok");
        assert!(
            out.stdout.contains(&line),
            "no `{line}` in:\n{}\n{}",
            out.stdout,
            out.stderr
        );
    }
    // 32 MiB Allreduce and Bcast alone move more than 32 MiB each way.
    assert_moved(&da, &net.a, before, 32 << 20, 32 << 20);
}

/// torch.distributed.rpc over TensorPipe's ibv transport only, the tensors carried by its
/// basic channel through the transport (see the script for why both are named): worker1
/// in b sends 16 MiB of int32 to worker0 in a, which returns them plus one; checked
/// element by element, then a small call.
#[test]
fn torch_rpc_round_trip_over_tensorpipe_ibv() {
    let Some(py) = python() else { return };
    let Some((_s, net, da, db)) = hosts() else {
        return;
    };
    let py = py.display().to_string();
    let prog = script("torch_rpc.py");
    let before = pkts(&da, &net.a);
    let (_, c) = server_client(
        &net,
        &da,
        &db,
        &[&py, &prog, "0", &net.addr_a, "17023", net.iface, "16"],
        &[&py, &prog, "1", &net.addr_a, "17023", net.iface, "16"],
    );
    eprintln!("{}", c.stdout);
    assert!(
        c.stdout.contains("returned plus one, checked"),
        "{}",
        c.stdout
    );
    assert_moved(&da, &net.a, before, 16 << 20, 16 << 20);
}
