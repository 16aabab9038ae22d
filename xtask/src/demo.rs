//! The main job: the daemon plus a real, unmodified RDMA program over it.
//!
//! Starts `rdma-emud` on a private socket, then perftest's `ib_read_bw -a -d rxe0` as the
//! server and `ib_read_bw -a -d rxe0 127.0.0.1` as the client, both through `rdma-emu run`,
//! exactly as a newcomer types them on two hosts. Prints perftest's own table.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PROGRAM: &str = "ib_read_bw";
const DEADLINE: Duration = Duration::from_secs(900);

pub fn run(args: &[String]) -> Result<(), String> {
    let program = args.first().map(String::as_str).unwrap_or(PROGRAM);
    crate::ensure_debian_packages(&["perftest", "iproute2", "gcc"])?;
    let (bin, lib) = crate::build_release()?;
    let perf = Perftest::start(&bin, &lib)?;
    println!(
        "rdma-emud is serving rxe0 on loopback (socket {})",
        perf.socket.display()
    );
    println!("$ {program} -a -d rxe0 127.0.0.1   (server: {program} -a -d rxe0)");
    perf.pair(program, &["-a"], false, DEADLINE).map(|_| ())
}

/// A daemon on a private socket, and perftest pairs run over it.
pub struct Perftest {
    daemon: Option<Guard>,
    socket: PathBuf,
    dir: PathBuf,
    emu: PathBuf,
    lib: PathBuf,
}

impl Perftest {
    pub fn start(bin: &Path, lib: &Path) -> Result<Perftest, String> {
        let dir = std::env::temp_dir().join(format!("rdma-emu-xtask-{}", std::process::id()));
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
        Ok(Perftest {
            daemon: Some(daemon),
            socket,
            dir,
            emu: bin.join("rdma-emu"),
            lib: lib.to_path_buf(),
        })
    }

    fn spawn(&self, program: &str, args: &[&str], out: Stdio) -> Result<Child, String> {
        Command::new(&self.emu)
            .arg("run")
            .arg("--")
            .arg(program)
            .args(["-d", "rxe0", "-F"])
            .args(args)
            .env("RDMA_EMU_SOCKET", &self.socket)
            .env("RDMA_EMU_LIB_DIR", &self.lib)
            .stdout(out)
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))
    }

    /// Runs `program ARGS` as server and `program ARGS 127.0.0.1` as client; returns
    /// what the client printed when `capture`, else shows it on stdout.
    pub fn pair(
        &self,
        program: &str,
        args: &[&str],
        capture: bool,
        limit: Duration,
    ) -> Result<String, String> {
        let server_log = self.dir.join("server.txt");
        let mut server = Guard(self.spawn(program, args, Stdio::from(file(&server_log)?))?);
        // perftest's server must be listening on its TCP port before the client connects.
        std::thread::sleep(Duration::from_millis(700));
        let client_log = self.dir.join("client.txt");
        // Captured through a file, so the program never blocks on a full pipe.
        let out = if capture {
            Stdio::from(file(&client_log)?)
        } else {
            Stdio::inherit()
        };
        let mut cargs = args.to_vec();
        cargs.push("127.0.0.1");
        let mut client = Guard(self.spawn(program, &cargs, out)?);
        let client_ok = wait(&mut client.0, limit)?;
        let server_ok = wait(&mut server.0, Duration::from_secs(30))?;
        if !(client_ok && server_ok) {
            return Err(format!(
                "{program} failed (client ok: {client_ok}, server ok: {server_ok}); server output: {}, daemon log: {}",
                server_log.display(),
                self.dir.join("rdma-emud.log").display()
            ));
        }
        Ok(std::fs::read_to_string(&client_log).unwrap_or_default())
    }
}

impl Drop for Perftest {
    fn drop(&mut self) {
        // Stop the daemon before its folder goes.
        drop(self.daemon.take());
        let _ = std::fs::remove_dir_all(&self.dir);
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
