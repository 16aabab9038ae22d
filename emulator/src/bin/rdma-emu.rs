//! `rdma-emu`: run programs on the emulated devices, manage devices, read counters.

use clap::{Parser, Subcommand};
use emulator::client::{CallError, Client};
use emulator::daemon::backend::Backend;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;
use wire::client::cm::{ps, CmIdSummary, CmReply, CmRequest};
use wire::client::fault::{FaultAction, FaultInfo, FaultRequest, FaultSpec};
use wire::client::{CounterSet, LinkInfo, QpSummary, ReplyBody, RequestBody};

#[derive(Parser, Debug)]
#[command(
    name = "rdma-emu",
    version,
    about = "rdma-emu: a userspace RDMA NIC; run programs on it and manage it"
)]
struct Cli {
    /// The daemon's control socket (default: as rdma-emud finds it).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a program with the verbs shim first in its library path, and the devices under
    /// /dev/infiniband and /sys/class/infiniband as a host with rxe/siw shows them.
    Run {
        /// Leave /dev and /sys as they are (also: RDMA_EMU_DEVICE_VIEW=0).
        #[arg(long)]
        no_device_view: bool,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<String>,
    },
    /// Show, add or remove devices (like iproute2's `rdma link`).
    Link {
        #[command(subcommand)]
        action: Option<LinkAction>,
    },
    /// Counters of a device or a QP (named like rxe's hw_counters).
    Stat {
        device: Option<String>,
        #[arg(long)]
        qp: Option<u32>,
        #[arg(long)]
        json: bool,
    },
    /// Write every frame a device sends and receives to a pcap file (until Ctrl-C, or
    /// `--count` frames).
    Capture {
        device: String,
        file: PathBuf,
        /// Stop after this many frames.
        #[arg(short = 'c', long)]
        count: Option<u64>,
    },
    /// Decode a pcap/pcapng file, one line per frame, ICRC and CRCs checked.
    Decode(emulator::decode::DecodeArgs),
    /// A live view of devices and QPs (state, peer, PSNs, in flight, rates, retransmits,
    /// RNRs), refreshed until Ctrl-C.
    Top {
        /// Only this device.
        device: Option<String>,
        /// Seconds between refreshes.
        #[arg(short = 'd', long, default_value_t = 1.0)]
        interval: f64,
        /// Print this many frames, then stop (no screen clearing).
        #[arg(short = 'n', long)]
        iterations: Option<u64>,
    },
    /// Inject faults into a device's traffic (docs/faults.md).
    Fault {
        #[command(subcommand)]
        action: FaultCmd,
    },
    /// Show resources (like iproute2's `rdma resource show`): `res cm_id` lists the
    /// RDMA CM ids of your processes.
    Res {
        #[arg(value_parser = ["cm_id", "qp"], default_value = "cm_id")]
        kind: String,
    },
}

#[derive(Subcommand, Debug)]
enum FaultCmd {
    /// `fault add DEVICE drop|duplicate|reorder|corrupt|rnr [P%] [FILTERS]`,
    /// `delay DURATION …`, `nak SYNDROME …`, `link down|up`, `kill-qp QPN`.
    /// FILTERS: --qp N --opcode CLASS --dir rx|tx --addr IP --count N --seed N.
    Add {
        device: String,
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            required = true,
            value_name = "FAULT"
        )]
        words: Vec<String>,
    },
    /// The rules in place, with their seeds and how often they fired.
    List { device: Option<String> },
    /// Remove every rule, a device's, or one (`fault clear DEVICE ID`).
    Clear {
        device: Option<String>,
        id: Option<u32>,
    },
}

#[derive(Subcommand, Debug)]
enum LinkAction {
    Show,
    /// `link add NAME type rxe|siw netdev IFACE [crc on|off] [markers on|off]` (crc and
    /// markers: what a siw device asks for in MPA; off by default, as Linux siw)
    Add {
        name: String,
        #[arg(num_args = 4.., value_name = "KEY VALUE")]
        rest: Vec<String>,
    },
    /// `link del NAME`
    Del {
        name: String,
    },
}

fn connect(cli: &Cli) -> Result<Client, String> {
    let path = cli.socket.clone().unwrap_or_else(wire::client::socket_path);
    Client::connect(&path).map(|(c, _)| c).map_err(|e| {
        format!(
            "cannot reach rdma-emud at {}: {e} (is the daemon running?)",
            path.display()
        )
    })
}

fn call(cli: &Cli, body: RequestBody) -> Result<ReplyBody, String> {
    let mut c = connect(cli)?;
    c.call(body, &[]).map(|(b, _)| b).map_err(|e| match e {
        CallError::Errno(n) => emulator::client::errno_text(n),
        e => e.to_string(),
    })
}

fn gid_text(gid: &[u8; 16]) -> String {
    let ip = std::net::Ipv6Addr::from(*gid);
    match ip.to_ipv4_mapped() {
        Some(v4) => format!("::ffff:{v4}"),
        None => ip.to_string(),
    }
}

const LINK_ADD_USAGE: &str = "usage: rdma-emu link add NAME type rxe|siw netdev IFACE \
     [backend udp|packet|xdp (rxe), tcp|smoltcp (siw)] [addr IP (repeatable; required with \
     smoltcp)] [crc on|off] [markers on|off] [tos 0..=255, ECN bits 0 (rxe)] \
     [cnp_dscp 0..=63 (rxe)]";

/// The `LinkAdd` request for `link add NAME WORDS...`, where WORDS are key/value pairs as
/// iproute2 takes them: `type` and `netdev` (required), `backend` (`udp`, the default,
/// `packet` or `xdp` for rxe; `tcp`, the default, or `smoltcp` for siw), `addr` (an
/// address the device serves instead of the interface's; may be repeated; a smoltcp
/// device needs one of its own), and for siw devices `crc` and `markers` (`on`|`off`), for
/// rxe devices `tos` (the RDMA CM default traffic class) and `cnp_dscp`. Errors say what
/// is wrong, then the usage.
fn link_add_request(name: &str, words: &[String]) -> Result<RequestBody, String> {
    let mut link_type = None;
    let mut netdev = None;
    let mut mpa_crc = None;
    let mut mpa_markers = None;
    let mut backend = None;
    let mut default_tos = None;
    let mut cnp_dscp = None;
    let mut addrs: Vec<std::net::IpAddr> = Vec::new();
    for pair in words.chunks(2) {
        let [key, value] = pair else {
            return Err(format!("{:?} has no value\n{LINK_ADD_USAGE}", pair[0]));
        };
        let on_off = |v: &str| match v {
            "on" => Ok(true),
            "off" => Ok(false),
            _ => Err(format!(
                "{key} takes on or off, not {v:?}\n{LINK_ADD_USAGE}"
            )),
        };
        let byte = |v: &str, max: u8| match v.parse::<u8>() {
            Ok(b) if b <= max => Ok(b),
            _ => Err(format!(
                "{key} takes 0..={max}, not {v:?}\n{LINK_ADD_USAGE}"
            )),
        };
        let (slot_taken, what) = match key.as_str() {
            "type" => (link_type.replace(value.clone()).is_some(), "type"),
            "netdev" => (netdev.replace(value.clone()).is_some(), "netdev"),
            "crc" => (mpa_crc.replace(on_off(value)?).is_some(), "crc"),
            "markers" => (mpa_markers.replace(on_off(value)?).is_some(), "markers"),
            "backend" => (backend.replace(value.clone()).is_some(), "backend"),
            "tos" => (default_tos.replace(byte(value, 255)?).is_some(), "tos"),
            "cnp_dscp" => (cnp_dscp.replace(byte(value, 63)?).is_some(), "cnp_dscp"),
            "addr" => {
                let a = value.parse().map_err(|_| {
                    format!("addr takes an IP address, not {value:?}\n{LINK_ADD_USAGE}")
                })?;
                (addrs.contains(&a), "this addr")
            }
            other => return Err(format!("unknown key {other:?}\n{LINK_ADD_USAGE}")),
        };
        if slot_taken {
            return Err(format!("{what} given twice\n{LINK_ADD_USAGE}"));
        }
        if key == "addr" {
            addrs.extend(value.parse::<std::net::IpAddr>());
        }
    }
    let (Some(link_type), Some(netdev)) = (link_type, netdev) else {
        return Err(LINK_ADD_USAGE.into());
    };
    if link_type != "siw" && (mpa_crc.is_some() || mpa_markers.is_some()) {
        return Err(format!(
            "crc and markers are MPA (iWARP) options of siw devices; {link_type} devices have none"
        ));
    }
    if link_type == "siw" && (default_tos.is_some() || cnp_dscp.is_some()) {
        return Err(
            "tos and cnp_dscp are RoCE options of rxe devices; siw devices have none".into(),
        );
    }
    if default_tos.is_some_and(|t| t & 0b11 != 0) {
        return Err(format!(
            "tos carries the DSCP (DSCP << 2); its ECN bits must be 0\n{LINK_ADD_USAGE}"
        ));
    }
    if matches!(link_type.as_str(), "rxe" | "siw") {
        let b = Backend::choose(&link_type, backend.as_deref()).map_err(|e| e.to_string())?;
        if b == Backend::Smoltcp && addrs.is_empty() {
            return Err(format!(
                "backend smoltcp needs an address of its own, one the kernel does not have \
                 on {netdev}: add addr IP\n{LINK_ADD_USAGE}"
            ));
        }
    }
    Ok(RequestBody::LinkAdd {
        name: name.to_string(),
        link_type,
        netdev,
        mpa_crc,
        mpa_markers,
        backend,
        default_tos,
        cnp_dscp,
        addrs: (!addrs.is_empty()).then_some(addrs),
    })
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn print_links(links: &[LinkInfo]) {
    for l in links {
        // As iproute2 prints them: a port taken down (`fault add DEV link down`) is
        // DISABLED physically too.
        let (state, phys) = if l.state == 4 {
            ("ACTIVE", "LINK_UP")
        } else {
            ("DOWN", "DISABLED")
        };
        let mtu = wire::client::verbs::mtu::to_bytes(l.active_mtu).unwrap_or(0);
        let mut mpa = String::new();
        if let Some(crc) = l.mpa_crc {
            mpa += &format!(" crc {}", on_off(crc));
        }
        if let Some(markers) = l.mpa_markers {
            mpa += &format!(" markers {}", on_off(markers));
        }
        println!("link {}/1 state {state} physical_state {phys} netdev {} type {} backend {} mtu {mtu} netdev_mtu {}{mpa}", l.name, l.netdev, l.link_type, l.backend, l.netdev_mtu);
        for g in &l.gids {
            let kind = match g.gid_type {
                wire::client::verbs::gid_type::ROCE_V2 => " RoCE v2",
                wire::client::verbs::gid_type::ROCE_V1 => " RoCE v1",
                _ => "", // siw: the MAC as GID, no RoCE type
            };
            println!("    gid {} {}{kind}", g.index, gid_text(&g.gid));
        }
        if let (Some(tos), Some(cnp)) = (l.default_tos, l.cnp_dscp) {
            // RoCE v2 has no SL on the wire: it would map to a VLAN's 802.1p priority,
            // which a UDP socket cannot set (docs/congestion.md). PFC frames (packet
            // backend) pause the priority DSCP >> 3.
            println!(
                "    tos default {tos}, DSCP = traffic class >> 2, ECN ECT(0), CNP DSCP {cnp}, SL unmapped, PFC priority = DSCP >> 3"
            );
        }
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn print_stats(sets: &[CounterSet], json: bool) {
    if json {
        let items: Vec<String> = sets
            .iter()
            .map(|s| {
                let counters: Vec<String> = s
                    .counters
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", json_str(k)))
                    .collect();
                let qp = s.qpn.map_or("null".to_string(), |q| q.to_string());
                format!(
                    "{{\"device\":{},\"qpn\":{qp},\"counters\":{{{}}}}}",
                    json_str(&s.device),
                    counters.join(",")
                )
            })
            .collect();
        println!("[{}]", items.join(","));
        return;
    }
    for s in sets {
        let head = match s.qpn {
            Some(q) => format!("link {}/1 qp {q}", s.device),
            None => format!("link {}/1", s.device),
        };
        let body: Vec<String> = s.counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("{head} {}", body.join(" "));
    }
}

/// The folder holding the shim's libibverbs.so.1: $RDMA_EMU_LIB_DIR, else
/// `<dir of this executable>/rdma-emu-lib`.
fn lib_dir() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("RDMA_EMU_LIB_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate rdma-emu: {e}"))?;
    Ok(exe
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join("rdma-emu-lib"))
}

fn run(cmd: &[String], before_exec: impl FnOnce()) -> Result<(), String> {
    let dir = lib_dir()?;
    if !dir.join("libibverbs.so.1").exists() {
        return Err(format!(
            "the verbs shim is not in {} (build it with `cargo xtask shim`, or set RDMA_EMU_LIB_DIR)",
            dir.display()
        ));
    }
    let mut path = dir.clone().into_os_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let (prog, args) = cmd.split_first().ok_or("nothing to run")?;
    let mut command = std::process::Command::new(prog);
    command.args(args).env("LD_LIBRARY_PATH", path);
    // Programs and wheels that carry their own rdma-core (under a hashed file name, found
    // through their RPATH) never look in LD_LIBRARY_PATH. Preloading the shim puts its
    // ibv_*/rdma_* symbols first in every lookup, so their calls land here anyway.
    // RDMA_EMU_PRELOAD=0 leaves LD_PRELOAD alone.
    if std::env::var_os("RDMA_EMU_PRELOAD").is_none_or(|v| v != "0") {
        let shim = dir.join("libibverbs.so.1");
        // The loader splits LD_PRELOAD at spaces and colons: such a path cannot be named.
        let bytes = shim.as_os_str().as_encoded_bytes();
        if bytes.iter().any(|b| matches!(b, b' ' | b':')) {
            eprintln!(
                "rdma-emu: not preloading {} (a space or colon in the path); \
                 programs with their own libibverbs will not reach the shim",
                shim.display()
            );
        } else {
            let mut preload = shim.into_os_string();
            if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
                preload.push(":");
                preload.push(old);
            }
            command.env("LD_PRELOAD", preload);
        }
    }
    before_exec();
    let err = command.exec();
    Err(format!("{prog}: {err}"))
}

/// Streams the daemon's pcap records for `device` into `file`, whole records only, until
/// `count` frames, the daemon's end, or SIGINT/SIGTERM; on a signal what the pipe already
/// holds is written first, so the file ends with the last whole frame received.
fn capture(
    cli: &Cli,
    device: &str,
    file: &std::path::Path,
    count: Option<u64>,
) -> Result<(), String> {
    use emulator::daemon::sys;
    use emulator::signals::{Stop, Woken};
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let mut out = std::fs::File::create(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let (r, w) = sys::pipe().map_err(|e| e.to_string())?;
    let mut c = connect(cli)?;
    // Before the request, so that a signal during it is not lost.
    let stop = Stop::install().map_err(|e| e.to_string())?;
    c.call(
        RequestBody::Capture {
            device: device.to_string(),
        },
        &[w.as_raw_fd()],
    )
    .map_err(|e| match e {
        CallError::Errno(n) => std::io::Error::from_raw_os_error(n).to_string(),
        e => e.to_string(),
    })?;
    drop(w);
    let pipe = std::fs::File::from(r);
    let mut records = PcapRecords::default();
    let mut chunk = vec![0u8; 1 << 16];
    let write_err = |e: std::io::Error| format!("{}: {e}", file.display());
    let mut stopping = false;
    loop {
        if !stopping {
            match stop.wait_readable(Some(pipe.as_raw_fd()), None) {
                Woken::Stop => stopping = true,
                Woken::Readable | Woken::Timeout => {}
            }
        }
        // Never blocks: on a stop, only what the daemon already wrote is taken.
        let n = match read_nonblocking(&pipe, &mut chunk) {
            Ok(Some(0)) => break,
            Ok(Some(n)) => n,
            Ok(None) if stopping => break,
            Ok(None) => continue,
            Err(e) => return Err(e.to_string()),
        };
        let whole = records.push(&chunk[..n], count);
        out.write_all(whole).map_err(write_err)?;
        records.consumed();
        if count.is_some_and(|c| records.frames >= c) {
            break;
        }
    }
    out.flush().map_err(write_err)?;
    out.sync_all().map_err(write_err)?;
    eprintln!(
        "rdma-emu: {} frames written to {}",
        records.frames,
        file.display()
    );
    Ok(())
}

/// One read(2) of a pipe without blocking: `None` when nothing is there yet.
fn read_nonblocking(pipe: &std::fs::File, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
    use std::os::fd::AsRawFd;
    // SAFETY: reads at most `buf.len()` bytes into `buf`.
    let n = unsafe {
        let fd = pipe.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags & libc::O_NONBLOCK == 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        libc::read(fd, buf.as_mut_ptr().cast(), buf.len())
    };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = std::io::Error::last_os_error();
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(None),
        _ => Err(e),
    }
}

/// A pcap stream cut into whole records: the 24-octet file header, then records of a
/// 16-octet header and `incl_len` octets.
#[derive(Default)]
struct PcapRecords {
    buf: Vec<u8>,
    header_done: bool,
    /// Octets of `buf` handed out by the last `push`.
    whole: usize,
    frames: u64,
}

impl PcapRecords {
    /// Takes `bytes`; returns the whole header and records now complete (at most
    /// `count` records in all). Call [`PcapRecords::consumed`] once they are written.
    fn push(&mut self, bytes: &[u8], count: Option<u64>) -> &[u8] {
        self.buf.extend_from_slice(bytes);
        let mut at = 0;
        if !self.header_done && self.buf.len() >= 24 {
            at = 24;
            self.header_done = true;
        }
        while self.header_done && self.buf.len() >= at + 16 {
            let b = &self.buf[at + 8..at + 12];
            let incl = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
            if self.buf.len() < at + 16 + incl || count.is_some_and(|c| self.frames >= c) {
                break;
            }
            at += 16 + incl;
            self.frames += 1;
        }
        self.whole = at;
        &self.buf[..at]
    }

    fn consumed(&mut self) {
        self.buf.drain(..self.whole);
        self.whole = 0;
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Decode(args) = &cli.command {
        return emulator::decode::run(args);
    }
    let result = match &cli.command {
        Command::Decode(_) => Ok(()),
        Command::Run {
            cmd,
            no_device_view,
        } => run(cmd, || {
            emulator::devview::before_exec(*no_device_view, cli.socket.as_deref())
        }),
        Command::Link { action } => match action.as_ref().unwrap_or(&LinkAction::Show) {
            LinkAction::Show => call(&cli, RequestBody::LinkShow).and_then(|b| match b {
                ReplyBody::Links(l) => {
                    print_links(&l);
                    Ok(())
                }
                other => Err(format!("unexpected reply {other:?}")),
            }),
            LinkAction::Add { name, rest } => link_add_request(name, rest).and_then(|body| {
                let raw = match &body {
                    RequestBody::LinkAdd {
                        backend: Some(b), ..
                    } => b.clone(),
                    _ => String::new(),
                };
                call(&cli, body).map(|_| ()).map_err(|e| {
                    let is = |errno| e == std::io::Error::from_raw_os_error(errno).to_string();
                    let eperm = is(libc::EPERM);
                    match raw.as_str() {
                        "packet" | "smoltcp" if eperm => format!(
                            "{e}: backend {raw} needs CAP_NET_RAW in rdma-emud (root, or \
                                 setcap cap_net_raw+ep); backend {} needs none",
                            if raw == "packet" { "udp" } else { "tcp" }
                        ),
                        "smoltcp" if is(libc::EADDRINUSE) => format!(
                            "{e}: the kernel has that address too, and its TCP would answer the \
                                 device's peers with RST; give the device an address of its own"
                        ),
                        "xdp" if eperm => format!(
                            "{e}: backend xdp needs CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW in \
                                 rdma-emud (root, or setcap); use backend udp or packet"
                        ),
                        "xdp" if is(libc::EBUSY) => format!(
                            "{e}: the interface already has an XDP program or AF_XDP socket \
                                 (ip -d link show); use backend packet or udp"
                        ),
                        "xdp" if is(libc::EINVAL) => format!(
                            "{e}: backend xdp takes an interface MTU of at most {} (rdma-emud's \
                                 log says why this one was refused)",
                            emulator::daemon::xdp::MAX_NETDEV_MTU
                        ),
                        _ => e,
                    }
                })
            }),
            LinkAction::Del { name } => {
                call(&cli, RequestBody::LinkDel { name: name.clone() }).map(|_| ())
            }
        },
        Command::Stat { device, qp, json } => call(
            &cli,
            RequestBody::Stat {
                device: device.clone(),
                qpn: *qp,
            },
        )
        .and_then(|b| match b {
            ReplyBody::Stat(sets) => {
                print_stats(&sets, *json);
                Ok(())
            }
            other => Err(format!("unexpected reply {other:?}")),
        }),
        Command::Capture {
            device,
            file,
            count,
        } => capture(&cli, device, file, *count),
        Command::Fault { action } => fault(&cli, action),
        Command::Res { kind } if kind == "qp" => call(&cli, RequestBody::QpList { device: None })
            .and_then(|b| match b {
                ReplyBody::Qps(qps) => {
                    print_qps(&qps);
                    Ok(())
                }
                other => Err(format!("unexpected reply {other:?}")),
            }),
        Command::Top {
            device,
            interval,
            iterations,
        } => top(&cli, device.as_deref(), *interval, *iterations),
        Command::Res { .. } => {
            call(&cli, RequestBody::Cm(CmRequest::ListIds)).and_then(|b| match b {
                ReplyBody::Cm(CmReply::Ids(ids)) => {
                    print_cm_ids(&ids);
                    Ok(())
                }
                other => Err(format!("unexpected reply {other:?}")),
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdma-emu: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `rdma-emu fault …`.
fn fault(cli: &Cli, action: &FaultCmd) -> Result<(), String> {
    let request = match action {
        FaultCmd::Add { device, words } => {
            let spec = FaultSpec::parse(words).map_err(|e| format!("fault add: {e}"))?;
            let rule = matches!(spec, FaultSpec::Rule(_));
            let killed = match spec {
                FaultSpec::Action(FaultAction::KillQp(q)) => Some(q),
                _ => None,
            };
            let reply = call(
                cli,
                RequestBody::Fault(FaultRequest::Add {
                    device: device.clone(),
                    spec,
                }),
            );
            return match reply {
                Ok(ReplyBody::Faults(rules)) => {
                    print_faults(&rules);
                    Ok(())
                }
                Ok(other) => Err(format!("unexpected reply {other:?}")),
                Err(e) if rule && e.contains("not supported") => Err(format!(
                    "{device}: {e}: packet faults act on RoCE (rxe) devices; an iWARP device's \
                     packets are the kernel's TCP segments (use `link down` or `kill-qp`, or \
                     tc netem on its interface)"
                )),
                Err(e) if e.contains("No such file") && killed.is_some() => {
                    Err(format!("{device}: no QP {}", killed.unwrap_or_default()))
                }
                Err(e) => Err(format!("{device}: {e}")),
            };
        }
        FaultCmd::List { device } => FaultRequest::List {
            device: device.clone(),
        },
        FaultCmd::Clear { device, id } => FaultRequest::Clear {
            device: device.clone(),
            id: *id,
        },
    };
    match call(cli, RequestBody::Fault(request))? {
        ReplyBody::Faults(rules) => {
            print_faults(&rules);
            Ok(())
        }
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// One line per rule: its id and device, what `fault add` would take back, then its
/// state: the seed, packets matched and fired on, and the decisions for the first 64
/// matching packets (bit i set: the rule fired on the i-th).
fn print_faults(rules: &[FaultInfo]) {
    for r in rules {
        println!(
            "{} {} {} seed {} matched {} fired {} pattern {:#018x}",
            r.id, r.device, r.rule, r.seed, r.matched, r.fired, r.pattern
        );
    }
}

/// One line per QP, in the shape of iproute2's `rdma resource show qp`.
fn print_qps(qps: &[QpSummary]) {
    for q in qps {
        let kind = match q.qp_type {
            2 => "RC",
            3 => "UC",
            4 => "UD",
            _ => "-",
        };
        let state = match q.state {
            0 => "RESET",
            1 => "INIT",
            2 => "RTR",
            3 => "RTS",
            4 => "SQD",
            5 => "SQE",
            6 => "ERR",
            _ => "-",
        };
        let mut line = format!(
            "link {}/1 lqpn {} type {kind} state {state}",
            q.device, q.qpn
        );
        if let Some(r) = q.dest_qpn {
            line += &format!(" rqpn {r}");
        }
        if let Some(p) = q.expected_psn {
            line += &format!(" rq-psn {p}");
        }
        if let Some(p) = q.next_psn {
            line += &format!(" sq-psn {p}");
        }
        if let Some(p) = q.peer {
            line += &format!(" dst-addr {}", p.ip());
        }
        println!("{line} pid {}", q.pid);
    }
}

/// `rdma-emu top`: one frame per interval, the screen cleared between frames on a
/// terminal.
fn top(
    cli: &Cli,
    device: Option<&str>,
    interval: f64,
    iterations: Option<u64>,
) -> Result<(), String> {
    use std::io::{IsTerminal, Write};
    if !(0.05..=3600.0).contains(&interval) {
        return Err(format!(
            "top: an interval of {interval} s is out of 0.05..3600"
        ));
    }
    let device = device.map(str::to_string);
    // SIGINT (Ctrl-C) and SIGTERM end the loop between frames, exit 0.
    let stop = emulator::signals::Stop::install().map_err(|e| e.to_string())?;
    let mut history = emulator::top::History::default();
    let clear = std::io::stdout().is_terminal() && iterations.is_none();
    let mut shown = 0u64;
    loop {
        let links = match call(cli, RequestBody::LinkShow)? {
            ReplyBody::Links(l) => l
                .into_iter()
                .filter(|l| device.as_ref().is_none_or(|d| *d == l.name))
                .collect::<Vec<_>>(),
            other => return Err(format!("unexpected reply {other:?}")),
        };
        if let Some(d) = &device {
            if links.is_empty() {
                return Err(format!("top: no device {d}"));
            }
        }
        let stats = match call(
            cli,
            RequestBody::Stat {
                device: device.clone(),
                qpn: None,
            },
        )? {
            ReplyBody::Stat(s) => s,
            other => return Err(format!("unexpected reply {other:?}")),
        };
        let qps = match call(
            cli,
            RequestBody::QpList {
                device: device.clone(),
            },
        )? {
            ReplyBody::Qps(q) => q,
            other => return Err(format!("unexpected reply {other:?}")),
        };
        let frame = emulator::top::Frame {
            at: std::time::Instant::now(),
            links,
            stats,
            qps,
        };
        let header = format!(
            "rdma-emu top: {} device(s), {} QP(s), every {interval} s (Ctrl-C quits)",
            frame.links.len(),
            frame.qps.len()
        );
        let text = history.render(&frame, &header);
        let mut out = std::io::stdout().lock();
        let written = if clear {
            write!(out, "\x1b[H\x1b[2J{text}")
        } else {
            writeln!(out, "{text}")
        };
        if written.and_then(|()| out.flush()).is_err() {
            return Ok(()); // the reader went away (a closed pipe)
        }
        shown += 1;
        if iterations.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        if stop.sleep(std::time::Duration::from_secs_f64(interval)) {
            if clear {
                // Leave the terminal with the last frame on it and the cursor below.
                let _ = writeln!(out);
            }
            return Ok(());
        }
    }
}

/// One line per id, in the shape of iproute2's `rdma resource show cm_id`.
fn print_cm_ids(ids: &[CmIdSummary]) {
    for id in ids {
        let link = match &id.device {
            Some(d) => format!("{d}/{}", id.port_num),
            None => "-".into(),
        };
        let ps = match id.ps {
            ps::TCP => "TCP".to_string(),
            ps::UDP => "UDP".to_string(),
            ps::IB => "IB".to_string(),
            ps::IPOIB => "IPOIB".to_string(),
            other => format!("{other:#x}"),
        };
        let qp_type = match id.qp_type {
            2 => "RC",
            3 => "UC",
            4 => "UD",
            _ => "-",
        };
        let addr = |a: &Option<std::net::SocketAddr>| a.map_or("-".to_string(), |a| a.to_string());
        let qpn = id.qpn.map_or(String::new(), |q| format!(" lqpn {q}"));
        println!(
            "link {link} cm-idn {}{qpn} qp-type {qp_type} state {} ps {ps} pid {} src-addr {} dst-addr {}",
            id.id.0,
            id.state,
            id.pid,
            addr(&id.src),
            addr(&id.dst)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn link_add_takes_mpa_options_for_siw_devices() {
        let add = |s: &str| link_add_request("siw1", &words(s));
        assert_eq!(
            add("type siw netdev eth0"),
            Ok(RequestBody::LinkAdd {
                name: "siw1".into(),
                link_type: "siw".into(),
                netdev: "eth0".into(),
                mpa_crc: None,
                mpa_markers: None,
                backend: None,
                default_tos: None,
                cnp_dscp: None,
                addrs: None,
            })
        );
        assert_eq!(
            add("netdev lo crc on type siw markers off"),
            Ok(RequestBody::LinkAdd {
                name: "siw1".into(),
                link_type: "siw".into(),
                netdev: "lo".into(),
                mpa_crc: Some(true),
                mpa_markers: Some(false),
                backend: None,
                default_tos: None,
                cnp_dscp: None,
                addrs: None,
            })
        );
    }

    #[test]
    fn link_add_takes_traffic_class_settings_for_rxe_devices_only() {
        let add = |s: &str| link_add_request("rxe1", &words(s));
        match add("type rxe netdev eth0 tos 96 cnp_dscp 26") {
            Ok(RequestBody::LinkAdd {
                default_tos,
                cnp_dscp,
                ..
            }) => assert_eq!((default_tos, cnp_dscp), (Some(96), Some(26))),
            other => panic!("{other:?}"),
        }
        for (line, wanted) in [
            ("type rxe netdev eth0 tos 97", "ECN bits"),
            ("type rxe netdev eth0 tos 256", "0..=255"),
            ("type rxe netdev eth0 cnp_dscp 64", "0..=63"),
            ("type rxe netdev eth0 tos 32 tos 32", "given twice"),
            ("type siw netdev eth0 cnp_dscp 48", "RoCE options"),
        ] {
            let e = add(line).unwrap_err();
            assert!(e.contains(wanted), "{line}: {e}");
        }
    }

    #[test]
    fn link_add_takes_a_backend_and_refuses_what_is_not_built() {
        let add = |s: &str| link_add_request("rxe1", &words(s));
        match add("type rxe netdev eth0 backend packet") {
            Ok(RequestBody::LinkAdd { backend, .. }) => {
                assert_eq!(backend.as_deref(), Some("packet"))
            }
            other => panic!("{other:?}"),
        }
        match add("type rxe netdev eth0 backend xdp") {
            Ok(RequestBody::LinkAdd { backend, .. }) => {
                assert_eq!(backend.as_deref(), Some("xdp"))
            }
            other => panic!("{other:?}"),
        }
        let e = add("type siw netdev eth0 backend smoltcp").unwrap_err();
        assert!(e.contains("needs an address of its own"), "{e}");
        match add("type siw netdev eth0 backend smoltcp addr 10.0.0.11 addr fd00::11") {
            Ok(RequestBody::LinkAdd { backend, addrs, .. }) => {
                assert_eq!(backend.as_deref(), Some("smoltcp"));
                let want: Vec<std::net::IpAddr> =
                    vec!["10.0.0.11".parse().unwrap(), "fd00::11".parse().unwrap()];
                assert_eq!(addrs, Some(want));
            }
            other => panic!("{other:?}"),
        }
        let e = add("type siw netdev eth0 backend smoltcp addr 10.0.0.300").unwrap_err();
        assert!(e.contains("IP address"), "{e}");
        let e = add("type siw netdev eth0 addr 10.0.0.11 addr 10.0.0.11").unwrap_err();
        assert!(e.contains("twice"), "{e}");
        let e = add("type siw netdev eth0 backend packet").unwrap_err();
        assert!(e.contains("use backend tcp"), "{e}");
        assert!(add("type rxe netdev lo backend udp backend packet")
            .unwrap_err()
            .contains("twice"));
    }

    #[test]
    fn link_add_refuses_mpa_options_on_rxe_and_bad_words() {
        let add = |s: &str| link_add_request("x", &words(s)).unwrap_err();
        let e = add("type rxe netdev lo crc on");
        assert!(e.contains("siw devices") && e.contains("rxe"), "{e}");
        assert!(add("type rxe netdev lo markers off").contains("siw devices"));
        assert!(add("type siw netdev lo crc yes").contains("on or off"));
        assert!(add("type siw netdev lo crc").contains("has no value"));
        assert!(add("type siw netdev lo crc on crc off").contains("twice"));
        assert!(add("type siw netdev lo mtu 9000").contains("unknown key"));
        assert!(add("type siw crc on markers on").starts_with("usage:"));
    }
}
