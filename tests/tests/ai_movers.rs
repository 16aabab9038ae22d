//! AI data movers on CPU memory over rdma-emu, and what they need from `rdma-emu run`:
//! wheels that carry their own rdma-core under a hashed file name (NIXL's UCX, for
//! example) reach the shim because `rdma-emu run` preloads it.

use rdma_emu_tests::{bin_dir, cannot_run, lib_dir, loopback_ns, serial, Daemon, TempDir};
use std::path::Path;
use std::process::Command;

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
