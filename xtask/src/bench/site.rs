//! Where the bench runs rdma-emu: network namespaces it creates, daemons in them, and
//! programs run against those daemons with a time limit.
//!
//! One host is a namespace with loopback only (the daemon binds UDP 4791 on 127.0.0.1, which
//! other daemons on a shared machine may hold). Two hosts are two namespaces joined by a
//! veth pair, one daemon in each. Everything is removed when dropped: programs first, then
//! daemons, then namespaces.
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A network namespace this run created; deleted when dropped.
pub struct Netns(pub String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.0])
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs `ip ARGS`; an error naming the command when it fails.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {} (needs root)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The network a placement uses: one loopback namespace, or two joined by veth.
pub struct Net {
    /// `a` (the server's side) and, for two hosts, `b` (the client's side).
    pub ns: Vec<Netns>,
    /// The veth interface name in each namespace (two hosts only).
    pub iface: [&'static str; 2],
    /// The IPv4 addresses on the veth (two hosts only).
    pub addrs: [&'static str; 2],
}

impl Net {
    /// A namespace with loopback only.
    pub fn loopback(tag: &str) -> Result<Net, String> {
        let name = format!("emubench-{}-{tag}", std::process::id());
        ip(&["netns", "add", &name])?;
        let ns = Netns(name);
        ip(&["-n", &ns.0, "link", "set", "lo", "up"])?;
        Ok(Net {
            ns: vec![ns],
            iface: ["lo", "lo"],
            addrs: ["127.0.0.1", "127.0.0.1"],
        })
    }

    /// Two namespaces joined by veth (MTU 1500, so RoCE's path MTU is 1024).
    pub fn veth(tag: &str) -> Result<Net, String> {
        let pid = std::process::id();
        let mut ns = Vec::new();
        for side in ["a", "b"] {
            let name = format!("emubench-{pid}-{tag}-{side}");
            ip(&["netns", "add", &name])?;
            ns.push(Netns(name));
        }
        let iface = ["ebva", "ebvb"];
        let addrs = ["10.213.0.1", "10.213.0.2"];
        ip(&[
            "link", "add", iface[0], "netns", &ns[0].0, "type", "veth", "peer", "name", iface[1],
            "netns", &ns[1].0,
        ])?;
        for i in 0..2 {
            let n = &ns[i].0;
            // No duplicate address detection: the link-local address is usable at once, so
            // the GID table is [link-local, IPv4-mapped] when the daemon starts.
            let _ = Command::new("ip")
                .args(["netns", "exec", n, "sysctl", "-qw"])
                .arg(format!("net.ipv6.conf.{}.accept_dad=0", iface[i]))
                .status();
            ip(&[
                "-n",
                n,
                "addr",
                "add",
                &format!("{}/24", addrs[i]),
                "dev",
                iface[i],
            ])?;
            ip(&["-n", n, "link", "set", iface[i], "up"])?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        Ok(Net { ns, iface, addrs })
    }

    /// The namespace of side `i` (0 = server, 1 = client); one host has one for both.
    pub fn name(&self, i: usize) -> &str {
        &self.ns[i.min(self.ns.len() - 1)].0
    }

    pub fn two_hosts(&self) -> bool {
        self.ns.len() == 2
    }
}

/// A daemon in a namespace; SIGTERM then SIGKILL when dropped.
pub struct Daemon {
    child: Child,
    pub socket: PathBuf,
    pub ns: String,
}

impl Daemon {
    /// Starts `rdma-emud --socket DIR/NAME.sock ARGS` in namespace `ns`, waits for its socket.
    pub fn start(
        bin: &Path,
        ns: &str,
        dir: &Path,
        name: &str,
        args: &[&str],
    ) -> Result<Daemon, String> {
        let socket = dir.join(format!("{name}.sock"));
        let log = dir.join(format!("{name}.log"));
        let log_file =
            std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        // `ip netns exec` execs the program, so the child's pid is the daemon's.
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(bin.join("rdma-emud"))
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .stdout(Stdio::null())
            .stderr(log_file)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("rdma-emud: {e}"))?;
        let mut d = Daemon {
            child,
            socket,
            ns: ns.to_string(),
        };
        let t = Instant::now();
        while !d.socket.exists() {
            if let Ok(Some(st)) = d.child.try_wait() {
                return Err(format!(
                    "rdma-emud exited ({st}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default().trim()
                ));
            }
            if t.elapsed() > Duration::from_secs(20) {
                return Err(format!("rdma-emud did not create {}", d.socket.display()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(d)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill has no memory preconditions; the pid is our own unreaped child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        if !wait_limit(&mut self.child, Duration::from_secs(5)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits at most `limit` for `child`; true when it exited (any status).
fn wait_limit(child: &mut Child, limit: Duration) -> bool {
    let t = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if t.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            _ => return false,
        }
    }
}

/// A program started against a daemon, in its own process group; killed when dropped.
/// Its stdout and stderr go to two files: perftest's stdout is block-buffered into a file
/// and its stderr is not, so in one file the error (printed during the run) came before
/// the table header (flushed at exit) and a failure's last lines showed only the header.
pub struct Program {
    child: Child,
    pub out: PathBuf,
    pub err: PathBuf,
}

impl Program {
    /// Starts `argv` in the daemon's namespace through `rdma-emu run`, stdout to `out`.
    pub fn start(
        bin: &Path,
        lib: &Path,
        daemon: &Daemon,
        argv: &[&str],
        out: PathBuf,
    ) -> Result<Program, String> {
        let file = std::fs::File::create(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        let err = out.with_extension("err");
        let err_file =
            std::fs::File::create(&err).map_err(|e| format!("{}: {e}", err.display()))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &daemon.ns])
            .arg(bin.join("rdma-emu"))
            .arg("run")
            .arg("--")
            .args(argv)
            .env("RDMA_EMU_SOCKET", &daemon.socket)
            .env("RDMA_EMU_LIB_DIR", lib)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err_file))
            .process_group(0)
            .spawn()
            .map_err(|e| format!("{}: {e}", argv.join(" ")))?;
        Ok(Program { child, out, err })
    }

    /// Waits at most `limit`; `Ok(true)` on exit status 0, `Ok(false)` on another status,
    /// an error (after killing the process group) on timeout.
    pub fn finish(&mut self, limit: Duration) -> Result<bool, String> {
        if wait_limit(&mut self.child, limit) {
            return Ok(self
                .child
                .try_wait()
                .ok()
                .flatten()
                .is_some_and(|s| s.success()));
        }
        self.kill();
        Err(format!("timed out after {} s", limit.as_secs()))
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// What the program wrote to stderr.
    pub fn errors(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: signals the process group this run created for the child.
            unsafe { libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = self.child.wait();
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A placement with its daemons: the server's daemon and the client's (the same one on
/// one host), the device the programs use, and the address the client connects to.
pub struct Site {
    pub daemons: Vec<Daemon>,
    pub device: &'static str,
    /// perftest's `-R` (RDMA CM), which iWARP needs.
    pub rdma_cm: bool,
    pub addr: String,
    pub dir: PathBuf,
    bin: PathBuf,
    lib: PathBuf,
}

/// perftest's TCP port for its out-of-band exchange (and the RDMA CM port with `-R`).
const PORT: &str = "18515";

impl Site {
    /// Daemons on `net` serving `device` (`rxe0` over RoCE, `siw0` over iWARP).
    pub fn start(
        bin: &Path,
        lib: &Path,
        net: &Net,
        device: &'static str,
        dir: &Path,
    ) -> Result<Site, String> {
        Site::start_on(bin, lib, net, device, dir, None)
    }

    /// [`Site::start`] with `rxe0` on `backend` (`udp`, `packet`, `xdp`; `None`: the
    /// default) in every daemon.
    pub fn start_on(
        bin: &Path,
        lib: &Path,
        net: &Net,
        device: &'static str,
        dir: &Path,
        backend: Option<&str>,
    ) -> Result<Site, String> {
        let rxe_backend = backend.map_or_else(String::new, |b| format!("backend = \"{b}\"\n"));
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let rdma_cm = device == "siw0";
        let sides = if net.two_hosts() { 2 } else { 1 };
        let mut daemons = Vec::new();
        for i in 0..sides {
            let iface = net.iface[i];
            // The first device serving an address is the one RDMA CM resolves it to: on
            // one host siw0 gets 127.0.0.2 of its own, on two hosts it is listed first.
            let config = if !rdma_cm {
                format!(
                    "[[device]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"{iface}\"\n{rxe_backend}"
                )
            } else if net.two_hosts() {
                format!(
                    "[[device]]\nname = \"siw0\"\ntype = \"siw\"\nnetdev = \"{iface}\"\n\n\
                     [[device]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"{iface}\"\n"
                )
            } else {
                "[[device]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"lo\"\n\n\
                 [[device]]\nname = \"siw0\"\ntype = \"siw\"\nnetdev = \"lo\"\n\
                 addrs = [\"127.0.0.2\"]\n"
                    .to_string()
            };
            let name = format!("{device}-{i}");
            let path = dir.join(format!("{name}.toml"));
            std::fs::write(&path, config).map_err(|e| format!("{}: {e}", path.display()))?;
            let cfg = path.to_str().ok_or("non-UTF-8 path")?;
            daemons.push(Daemon::start(
                bin,
                net.name(i),
                dir,
                &name,
                &["--config", cfg],
            )?);
        }
        let addr = match (net.two_hosts(), rdma_cm) {
            (true, _) => net.addrs[0].to_string(),
            (false, true) => "127.0.0.2".into(),
            (false, false) => "127.0.0.1".into(),
        };
        Ok(Site {
            daemons,
            device,
            rdma_cm,
            addr,
            dir: dir.to_path_buf(),
            bin: bin.to_path_buf(),
            lib: lib.to_path_buf(),
        })
    }

    /// The server's daemon.
    pub fn server_daemon(&self) -> &Daemon {
        &self.daemons[0]
    }

    fn client_daemon(&self) -> &Daemon {
        self.daemons.last().unwrap_or(&self.daemons[0])
    }

    /// Starts any program against the server's daemon.
    pub fn program(&self, argv: &[&str], out: &str) -> Result<Program, String> {
        Program::start(
            &self.bin,
            &self.lib,
            self.server_daemon(),
            argv,
            self.dir.join(out),
        )
    }

    /// Runs perftest `program` with `args` as server, then as client; the client's output
    /// when both exit 0 within `limit`.
    pub fn perftest(
        &self,
        program: &str,
        args: &[&str],
        limit: Duration,
    ) -> Result<String, String> {
        self.perftest_env(&[], program, args, limit)
    }

    /// [`Site::perftest`] with `VAR=value` settings in both programs' environment.
    pub fn perftest_env(
        &self,
        env: &[&str],
        program: &str,
        args: &[&str],
        limit: Duration,
    ) -> Result<String, String> {
        let mut argv = if env.is_empty() {
            Vec::new()
        } else {
            let mut v = vec!["env"];
            v.extend_from_slice(env);
            v
        };
        argv.extend([program, "-d", self.device, "-F", "-p", PORT]);
        if self.rdma_cm {
            argv.push("-R");
        }
        argv.extend_from_slice(args);
        let mut server = Program::start(
            &self.bin,
            &self.lib,
            self.server_daemon(),
            &argv,
            self.dir.join("server.txt"),
        )?;
        // perftest's server must listen (TCP, or its RDMA CM id) before the client connects.
        std::thread::sleep(Duration::from_millis(1200));
        let mut cargv = argv.clone();
        cargv.push(&self.addr);
        let mut client = Program::start(
            &self.bin,
            &self.lib,
            self.client_daemon(),
            &cargv,
            self.dir.join("client.txt"),
        )?;
        let client_ok = client.finish(limit);
        let server_ok = server.finish(Duration::from_secs(10));
        // stderr's last lines (perftest's errors), else stdout's.
        let tail = |p: &Program| {
            let err = p.errors();
            let out = if err.trim().is_empty() {
                p.output()
            } else {
                err
            };
            let lines: Vec<&str> = out
                .lines()
                .filter(|l| !l.trim().is_empty())
                .rev()
                .take(3)
                .collect();
            lines.into_iter().rev().collect::<Vec<_>>().join(" / ")
        };
        match (client_ok, server_ok) {
            (Ok(true), Ok(true)) => Ok(client.output()),
            (c, s) => Err(format!(
                "client {}, server {}; client said: {}",
                describe(c),
                describe(s),
                tail(&client)
            )),
        }
    }
}

fn describe(r: Result<bool, String>) -> String {
    match r {
        Ok(true) => "ok".into(),
        Ok(false) => "failed".into(),
        Err(e) => e,
    }
}
