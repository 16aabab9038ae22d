//! The `rdma-emud` and `rdma-emu` executables: start, serve, stop on SIGTERM, and refuse bad
//! input with a message instead of a panic.

mod common;

use common::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use wire::client::verbs::event_type;
use wire::client::AsyncEventRecord;

const EMUD: &str = env!("CARGO_BIN_EXE_rdma-emud");
const EMU: &str = env!("CARGO_BIN_EXE_rdma-emu");

struct Running {
    child: Child,
    dir: std::path::PathBuf,
    socket: std::path::PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start(tag: &str, third_octet: u8) -> Running {
    let dir = std::env::temp_dir().join(format!("rdma-emu-bin-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("s.sock");
    let cfg = dir.join("emud.toml");
    let addr = format!("127.{}.{third_octet}.9", 1 + std::process::id() % 250);
    std::fs::write(
        &cfg,
        format!("[[device]]\nname = \"rxe0\"\nnetdev = \"lo\"\naddrs = [\"{addr}\"]\n"),
    )
    .unwrap();
    let child = Command::new(EMUD)
        .arg("--socket")
        .arg(&socket)
        .arg("--config")
        .arg(&cfg)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rdma-emud");
    let up = wait_for(Duration::from_secs(10), || {
        Path::new(&socket).exists().then_some(())
    });
    assert!(up.is_some(), "socket appears");
    Running { child, dir, socket }
}

#[test]
fn rdma_emud_exits_zero_on_sigterm_and_tells_clients_device_fatal() {
    let mut r = start("sigterm", 201);
    let (mut c, _) = emulator::client::Client::connect(&r.socket).unwrap();
    let ctx = open_device(&mut c);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(r.child.id() as i32, libc::SIGTERM) };
    let rec = read_record(&ctx.async_fd, Duration::from_secs(10)).expect("DEVICE_FATAL");
    assert_eq!(
        AsyncEventRecord::from_bytes(rec).event_type,
        event_type::DEVICE_FATAL
    );
    let status = r.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(!r.socket.exists(), "socket removed");
}

#[test]
fn rdma_emu_link_show_and_stat_talk_to_the_daemon() {
    let r = start("cli", 202);
    let out = Command::new(EMU)
        .arg("--socket")
        .arg(&r.socket)
        .args(["link", "show"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("link rxe0/1 state ACTIVE"), "{text}");
    assert!(text.contains("gid 0 ::ffff:127."), "{text}");
    let out = Command::new(EMU)
        .arg("--socket")
        .arg(&r.socket)
        .args(["stat", "rxe0", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("[{\"device\":\"rxe0\"") && text.contains("\"sent_pkts\":0"),
        "{text}"
    );
    let out = Command::new(EMU)
        .arg("--socket")
        .arg(&r.socket)
        .args(["link", "del", "nope"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("No such device"));
    let out = Command::new(EMU)
        .arg("--socket")
        .arg(&r.socket)
        .args(["link", "add", "rxe1", "type", "rxe", "netdev", "no-such-if"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn bad_arguments_and_config_are_reported_not_panicked() {
    let out = Command::new(EMUD)
        .args(["--poll", "fast"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(EMUD)
        .args(["--config", "/nonexistent/emud.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/emud.toml"));
    let out = Command::new(EMU)
        .args(["--socket", "/nonexistent/s.sock", "link"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is the daemon running?"));
    for out in [
        Command::new(EMUD).arg("--bogus").output().unwrap(),
        Command::new(EMU).arg("frobnicate").output().unwrap(),
    ] {
        assert!(!out.status.success());
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}

#[test]
fn rdma_emu_run_prefixes_the_shim_folder_or_says_where_it_looked() {
    let dir = std::env::temp_dir().join(format!("rdma-emu-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(EMU)
        .env("RDMA_EMU_LIB_DIR", &dir)
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cargo xtask shim"));
    std::fs::write(dir.join("libibverbs.so.1"), b"").unwrap();
    let out = Command::new(EMU)
        .env("RDMA_EMU_LIB_DIR", &dir)
        .env("LD_LIBRARY_PATH", "/old")
        .args(["run", "--", "sh", "-c", "echo $LD_LIBRARY_PATH"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{}:/old", dir.display())
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn idle_daemon_with_100_clients_uses_under_one_percent_cpu() {
    let r = start("idle", 203);
    let mut clients = Vec::new();
    for _ in 0..100 {
        let (mut c, _) = emulator::client::Client::connect(&r.socket).unwrap();
        let ctx = open_device(&mut c);
        clients.push((c, ctx));
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = cpu_ticks(r.child.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(r.child.id()) - before;
    // 2 s at 100 ticks/s: 1 % is 2 ticks.
    assert!(used <= 2, "{used} ticks in 2 s");
}

#[test]
fn daemonize_writes_the_pid_file_before_returning() {
    let dir = std::env::temp_dir().join(format!("rdma-emu-bin-{}-daemonize", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (socket, cfg, pid_file) = (
        dir.join("s.sock"),
        dir.join("emud.toml"),
        dir.join("emud.pid"),
    );
    let addr = format!("127.{}.204.9", 1 + std::process::id() % 250);
    std::fs::write(
        &cfg,
        format!("[[device]]\nname = \"rxe0\"\nnetdev = \"lo\"\naddrs = [\"{addr}\"]\n"),
    )
    .unwrap();
    let status = Command::new(EMUD)
        .arg("--socket")
        .arg(&socket)
        .arg("--config")
        .arg(&cfg)
        .arg("--daemonize")
        .arg("--pid-file")
        .arg(&pid_file)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("pid file exists")
        .trim()
        .parse()
        .unwrap();
    assert!(socket.exists());
    emulator::client::Client::connect(&socket).expect("the background daemon serves");
    // SAFETY: signalling the daemon we started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let gone = wait_for(Duration::from_secs(10), || {
        (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    });
    assert!(gone.is_some(), "stops on SIGTERM");
    assert!(!pid_file.exists(), "pid file removed");
    let _ = std::fs::remove_dir_all(&dir);
}
