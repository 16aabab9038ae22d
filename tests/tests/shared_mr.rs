//! Shared memory regions (the default; `RDMA_EMU_SHARED_MR=0` turns them off): the shim
//! moves the whole pages of each registered buffer onto a memfd and the daemon copies
//! through its own mapping of it. Unmodified programs must run and move correct data
//! exactly as on the descriptor path, and the daemon's counters must show which path the
//! bytes took.
use rdma_emu_tests::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(300);
const PORT: u16 = 18515;
/// Turns shared memory regions off: every byte through the descriptor.
const OFF: &str = "RDMA_EMU_SHARED_MR=0";

/// (bytes through shared maps, bytes through the descriptor, refused memfds).
fn memory_counters(daemon: &Daemon) -> (u64, u64, u64) {
    (
        daemon.counter(None, "rxe0", "memory_shared_bytes"),
        daemon.counter(None, "rxe0", "memory_fd_bytes"),
        daemon.counter(None, "rxe0", "memory_shared_refused"),
    )
}

/// `verbs_integrity rxe0 mmap` (buffers that start 100 bytes into their mappings), with
/// shared regions on (the default) or off; the checks it printed and the daemon's counters.
fn verbs_integrity(shared: bool) -> Option<(String, (u64, u64, u64))> {
    let dir = TempDir::new("c");
    let exe = compile_c("verbs_integrity", dir.path())?;
    let exe = exe.to_str().expect("utf-8 path");
    let daemon = Daemon::start();
    let mut argv = vec!["env"];
    if !shared {
        argv.push(OFF);
    }
    argv.extend([exe, "rxe0", "mmap"]);
    let out = daemon.program(None, &argv).wait(Duration::from_secs(120));
    out.assert_success();
    Some((out.stdout.clone(), memory_counters(&daemon)))
}

#[test]
fn verbs_checks_pass_on_shared_regions_split_with_the_descriptor_and_fork_safe() {
    let _s = serial();
    let Some((stdout, (shared, fd, refused))) = verbs_integrity(true) else {
        return;
    };
    for check in [
        "ok write_three_sges",
        "ok inline_send_with_imm",
        "ok read_back",
        "ok fork_child_gets_a_private_copy",
        "ok remote_access_error",
        "ok flush",
        "all checks passed",
    ] {
        assert!(stdout.contains(check), "`{check}` missing:\n{stdout}");
    }
    // Whole pages went through the shared maps, the partial first and last pages of each
    // buffer through the descriptor; no memfd was refused.
    assert!(shared > 0, "no byte through a shared map");
    assert!(fd > 0, "no byte through the descriptor (partial pages)");
    assert!(shared > fd, "shared {shared} B vs descriptor {fd} B");
    assert_eq!(refused, 0);
}

#[test]
fn turned_off_every_byte_takes_the_descriptor() {
    let _s = serial();
    let Some((stdout, (shared, fd, refused))) = verbs_integrity(false) else {
        return;
    };
    assert!(stdout.contains("all checks passed"), "{stdout}");
    assert_eq!((shared, refused), (0, 0));
    assert!(fd > 0);
}

/// Runs `program ARGS` as server and client on one host with the defaults; both must
/// exit 0, the client must print `want`, and the daemon must have moved most bytes
/// through shared maps. `gid`: pass the IPv4 GID index with `-g` (ibverbs-utils do not
/// pick one themselves).
fn shared_pair(program: &str, args: &[&str], want: &str, gid: bool) {
    let _s = serial();
    if missing(&[program]) {
        return;
    }
    let daemon = Daemon::start();
    let port = PORT.to_string();
    let gid_index = if gid {
        daemon.ipv4_gid_index(None)
    } else {
        String::new()
    };
    let mut server = vec![program, "-d", "rxe0", "-p", &port];
    if gid {
        server.extend(["-g", &gid_index]);
    }
    server.extend(args);
    let mut client = server.clone();
    client.push("127.0.0.1");
    let (s, c) = run_pair(&daemon, None, &server, &daemon, None, &client, PORT, LIMIT);
    s.assert_success();
    c.assert_success();
    assert!(
        c.stdout.contains(want),
        "`{want}` missing in:\n{}",
        c.stdout
    );
    let (shared, fd, refused) = memory_counters(&daemon);
    assert_eq!(refused, 0);
    assert!(
        shared > 10 * fd,
        "shared {shared} B vs descriptor {fd} B: the fast path was not used"
    );
}

/// rc_pingpong allocates its 1 MiB buffer page-aligned (mmap'd by malloc) and `-c` checks
/// every byte it receives.
#[test]
fn rc_pingpong_validates_its_buffer_on_shared_regions() {
    let args = ["-s", "1048576", "-n", "100", "-c"];
    shared_pair("ibv_rc_pingpong", &args, "iters in", true);
}

#[test]
fn write_bw_on_shared_regions() {
    shared_pair("ib_write_bw", &["-F", "-n", "1000"], "65536", false);
}

#[test]
fn read_bw_on_shared_regions() {
    shared_pair("ib_read_bw", &["-F", "-n", "1000"], "65536", false);
}

#[test]
fn send_bw_on_shared_regions() {
    shared_pair("ib_send_bw", &["-F", "-n", "1000"], "65536", false);
}

/// perftest's buffer for 64-byte messages is small enough for `malloc` to take it from the
/// brk heap: those pages move too (the message-rate path).
#[test]
fn write_bw_small_messages_from_the_heap_on_shared_regions() {
    shared_pair(
        "ib_write_bw",
        &["-F", "-s", "64", "-n", "20000"],
        " 64 ",
        false,
    );
}
