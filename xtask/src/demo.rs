//! The main job: the daemon plus a real, unmodified RDMA program over it.
//!
//! Starts `rdma-emud` on a private socket, then perftest's `ib_read_bw -a -d rxe0` as the
//! server and `ib_read_bw -a -d rxe0 127.0.0.1` as the client, both through `rdma-emu run`,
//! exactly as a newcomer types them on two hosts. Prints perftest's own table.
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PROGRAM: &str = "ib_read_bw";
const DEADLINE: Duration = Duration::from_secs(600);

pub fn run(args: &[String]) -> Result<(), String> {
    let program = args.first().map(String::as_str).unwrap_or(PROGRAM);
    crate::ensure_debian_packages(&["perftest", "iproute2", "gcc"])?;
    if Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        return Err(format!(
            "{program} is not installed: apt-get install perftest (it comes from Debian's perftest package)"
        ));
    }
    let (bin, lib) = crate::build_release()?;
    let dir = std::env::temp_dir().join(format!("rdma-emu-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let socket = dir.join("rdma-emud.sock");
    let log = dir.join("rdma-emud.log");

    let daemon = Guard(
        Command::new(bin.join("rdma-emud"))
            .arg("--socket")
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(file(&log)?)
            .spawn()
            .map_err(|e| format!("cannot start rdma-emud: {e}"))?,
    );
    wait_for(&socket, Duration::from_secs(20))
        .map_err(|e| format!("{e}; daemon log: {}", log.display()))?;
    println!(
        "rdma-emud is serving rxe0 on loopback (socket {})",
        socket.display()
    );

    let emu = bin.join("rdma-emu");
    let spawn = |extra: &[&str], out: Stdio| {
        Command::new(&emu)
            .arg("run")
            .arg("--")
            .arg(program)
            .args(["-a", "-d", "rxe0"])
            .args(extra)
            .env("RDMA_EMU_SOCKET", &socket)
            .env("RDMA_EMU_LIB_DIR", &lib)
            .stdout(out)
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))
    };
    let server_log = dir.join("server.txt");
    let mut server = Guard(spawn(&[], Stdio::from(file(&server_log)?))?);
    // perftest's server must be listening on its TCP port before the client connects.
    std::thread::sleep(Duration::from_secs(1));
    println!("$ {program} -a -d rxe0 127.0.0.1   (server: {program} -a -d rxe0)");
    let mut client = Guard(spawn(&["127.0.0.1"], Stdio::inherit())?);
    let client_status = wait(&mut client.0, DEADLINE)?;
    let server_status = wait(&mut server.0, Duration::from_secs(30))?;
    drop(daemon);
    if client_status && server_status {
        Ok(())
    } else {
        Err(format!(
            "{program} failed (client ok: {client_status}, server ok: {server_status}); server output: {}, daemon log: {}",
            server_log.display(),
            log.display()
        ))
    }
}

fn file(path: &Path) -> Result<std::fs::File, String> {
    std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn wait_for(path: &Path, limit: Duration) -> Result<(), String> {
    let start = Instant::now();
    while !path.exists() {
        if start.elapsed() > limit {
            return Err(format!(
                "rdma-emud did not create {} in {limit:?}",
                path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Waits for `child` at most `limit`; true when it exited with status 0.
fn wait(child: &mut Child, limit: Duration) -> Result<bool, String> {
    let start = Instant::now();
    loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) => return Ok(status.success()),
            None if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(false);
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Ends the process when dropped: SIGTERM first (the daemon flushes and exits 0), then
/// SIGKILL if it lingers.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.0.id().to_string()])
                .status();
            let _ = wait(&mut self.0, Duration::from_secs(5));
        }
    }
}
