//! `rdma-emud`: the software RDMA NIC. Serves RoCE v2 and iWARP devices (default `rxe0`
//! and `siw0` on the loopback interface) to applications running on the verbs shim.

use clap::Parser;
use emulator::daemon::{self, Config, PollMode};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "rdma-emud",
    version,
    about = "rdma-emu daemon: a userspace RDMA NIC (RoCE v2 over UDP)"
)]
struct Args {
    /// Control socket path (default: $RDMA_EMU_SOCKET, else $XDG_RUNTIME_DIR/rdma-emu/rdma-emud.sock,
    /// else /run/rdma-emu/rdma-emud.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// TOML configuration file (see docs/daemon.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Detach from the terminal and run in the background.
    #[arg(long)]
    daemonize: bool,
    /// Write the daemon's pid to this file.
    #[arg(long)]
    pid_file: Option<PathBuf>,
    /// How the engine waits for work: busy, adaptive or sleep.
    #[arg(long)]
    poll: Option<PollMode>,
    /// Deliver packets between QPs of one device without the kernel: on (default) or off.
    #[arg(long, value_parser = parse_on_off)]
    local_path: Option<bool>,
    /// Serve the default devices rxe0 and siw0 on this interface instead of lo.
    #[arg(long)]
    netdev: Option<String>,
    /// Socket file mode, octal (default 600; 660 lets the socket's group in).
    #[arg(long, value_parser = parse_mode)]
    socket_mode: Option<u32>,
    /// CM response timeout exponent N (4.096 us x 2^N; default 20 as the kernel's CMA).
    /// Smaller values make connection attempts to a dead peer fail sooner.
    #[arg(long, value_name = "EXP")]
    cm_response_timeout: Option<u8>,
    /// CM retransmissions before giving up (default 15 as the kernel's CMA, at most 15).
    #[arg(long, value_name = "N")]
    cm_max_retries: Option<u8>,
    /// UDP source port: hash (of the QP pair, 0xC000..=0xFFFF, default) or fixed (4791).
    #[arg(long)]
    udp_src_port: Option<daemon::SrcPortMode>,
    /// A group (name or number) whose members may use link add/del, capture and fault,
    /// beside root and the daemon's own user.
    #[arg(long, value_name = "GROUP")]
    admin_group: Option<String>,
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: expected on or off")),
    }
}

fn parse_mode(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s.trim_start_matches("0o"), 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!("{s:?} is not an octal permission mode")),
    }
}

fn config(args: &Args) -> Result<Config, String> {
    let mut cfg = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    if let Some(s) = &args.socket {
        cfg.socket = s.clone();
    }
    if let Some(p) = args.poll {
        cfg.poll = p;
    }
    if let Some(l) = args.local_path {
        cfg.local_path = l;
    }
    if let Some(m) = args.socket_mode {
        cfg.socket_mode = m;
    }
    if let Some(t) = args.cm_response_timeout {
        cfg.cm_response_timeout = t;
    }
    if let Some(r) = args.cm_max_retries {
        cfg.cm_max_retries = r;
    }
    if let Some(m) = args.udp_src_port {
        cfg.set_src_port_mode(m);
    }
    if let Some(g) = &args.admin_group {
        cfg.admin_group = Some(daemon::sessions::users::Group::parse(g).gid()?);
    }
    if let Some(n) = &args.netdev {
        // Moves every device when they share one interface (the defaults rxe0 and siw0
        // on lo, or a single configured device).
        match cfg.devices.first().map(|d| d.netdev.clone()) {
            Some(first) if cfg.devices.iter().all(|d| d.netdev == first) => {
                cfg.devices.iter_mut().for_each(|d| d.netdev = n.clone());
            }
            _ => return Err(
                "--netdev applies when all devices share one interface; use the config file for several"
                    .into(),
            ),
        }
    }
    cfg.validate()?;
    Ok(cfg)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cfg = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rdma-emud: {e}");
            return ExitCode::from(2);
        }
    };
    let shutdown = match daemon::Shutdown::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rdma-emud: {e}");
            return ExitCode::FAILURE;
        }
    };
    match daemon::sys::raise_descriptor_limit() {
        Ok(n) => tracing::debug!(descriptors = n, "descriptor limit"),
        Err(e) => tracing::warn!("descriptor limit not raised: {e}"),
    }
    let socket = cfg.socket.clone();
    let mut engine = match daemon::Engine::new(cfg, daemon::default_factory(), shutdown.clone()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("rdma-emud: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.daemonize {
        if let Err(e) = daemon::sys::daemonize(args.pid_file.as_deref()) {
            eprintln!("rdma-emud: daemonize: {e}");
            return ExitCode::FAILURE;
        }
    }
    if let Some(pid_file) = args.pid_file.as_ref().filter(|_| !args.daemonize) {
        if let Err(e) = std::fs::write(pid_file, format!("{}\n", std::process::id())) {
            tracing::error!("pid file {}: {e}", pid_file.display());
            return ExitCode::FAILURE;
        }
    }
    if let Err(e) =
        daemon::sys::forward_signals(shutdown.wake_fd(), &[libc::SIGTERM, libc::SIGINT], &[])
    {
        tracing::error!("signals: {e}");
        return ExitCode::FAILURE;
    }
    let reload_args = args.clone();
    let reload = engine
        .enable_reload(Box::new(move || config(&reload_args)))
        .and_then(daemon::sys::forward_sighup);
    if let Err(e) = reload {
        tracing::error!("SIGHUP: {e}");
        return ExitCode::FAILURE;
    }
    tracing::info!(socket = %socket.display(), "rdma-emud serving");
    let result = engine.run();
    if let Some(pid_file) = &args.pid_file {
        let _ = std::fs::remove_file(pid_file);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
