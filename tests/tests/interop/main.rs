//! rdma-emu against the Linux kernel's own Soft-RoCE (rxe): unmodified programs in pairs,
//! one side in a qemu guest running Debian's kernel on its rxe0, the other on the host on
//! rdma-emu, in both directions, every frame on the wire captured and checked.
//!
//! Layout (all inside one network namespace this test creates, removed afterwards):
//!
//! ```text
//!   host netns rdmaemu-interop-PID                   qemu guest (Debian 12 kernel)
//!   rdma-emud --netdev TAP  TAP 10.212.N.1/24  <==>  eth0 10.212.N.2/24  rxe0
//!   tcpdump -i TAP
//! ```
//!
//! `tests/interop/` holds the scripts: `prepare.sh` installs the host packages and builds
//! the guest image from Debian's packages when it is missing (cached in
//! `$RDMA_EMU_INTEROP_DIR`, default `~/.cache/rdma-emu-interop`), `netns.sh` makes the
//! namespace and the tap, `vm.sh` boots the guest, `guest/guest-main.sh` brings up rxe0 in
//! the guest and runs the jobs this test drops into the shared folder.
//!
//! `RDMA_EMU_SKIP_INTEROP=1` skips the suite; `RDMA_EMU_INTEROP_ONLY=ib_read_bw,...` runs
//! only the pairs of those programs (for debugging). Without root (or when the host packages or
//! the image cannot be had) it says why and returns, except under CI where that fails.
//! Every run leaves its outputs, the capture and the guest's console in
//! `$RDMA_EMU_INTEROP_DIR/runs/<time>/` (the last five runs are kept), with a
//! `results.md` table like the one in docs/interop.md.
//!
//! RDMA CM pairs (rping, `ib_write_bw -R`) wait for the server's LISTEN cm_id (`rdma res
//! show cm_id` in the guest, `rdma-emu res cm_id` on the host) instead of a TCP port.
//! Pending (issue 7; see docs/interop.md): iWARP pairs against the kernel's siw0 (a second
//! tap, `SIW=1` in the guest, with MPA CRC off and on). The guest image already carries
//! siw.ko and rdmacm-utils; such a pair is a new entry in [`PAIRS`] and a second `--tap`
//! for `vm.sh`.
mod harness;

use harness::*;
use rdma_emu_tests::*;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The whole suite, boot to power-off, stays within this (issue 12: about 10 minutes).
const SUITE_BUDGET: Duration = Duration::from_secs(540);
/// One pair, server and client.
const PAIR_LIMIT: Duration = Duration::from_secs(60);
/// Building the image from nothing took 446 s here (2 busy cores); a cached one, a second.
const PREPARE_LIMIT: Duration = Duration::from_secs(1500);

const TAP: &str = "rdmaemutap0";
/// Which side serves: the kernel's rxe in the guest, or rdma-emu on the host.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Direction {
    /// Server on the kernel's rxe0 in the guest, client on rdma-emu.
    KernelServes,
    /// Server on rdma-emu, client on the kernel's rxe0 in the guest.
    EmuServes,
}

impl Direction {
    fn label(self) -> &'static str {
        match self {
            Direction::KernelServes => "server kernel rxe, client rdma-emu",
            Direction::EmuServes => "server rdma-emu, client kernel rxe",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Direction::KernelServes => "kernel-serves",
            Direction::EmuServes => "emu-serves",
        }
    }
}

/// One program pair. `{gid}` in `args` becomes the GID index of the side that runs it
/// (each side passes its own: rxe0's and rdma-emu's GID tables differ).
struct Pair {
    name: &'static str,
    program: &'static str,
    args: &'static [&'static str],
    /// Extra arguments of the server and of the client only.
    server_args: &'static [&'static str],
    client_args: &'static [&'static str],
    /// The option before the server's address on the client's command line (`rping -a`),
    /// if the program does not take it as its last argument.
    addr_flag: Option<&'static str>,
    /// The server listens through RDMA CM (no TCP port: wait for its CM id instead).
    cm: bool,
    /// Whether the pair also runs with the server in the guest (see `ib_write_bw -R`).
    kernel_serves: bool,
    /// What the client prints when the transfer completed.
    done: Done,
}

#[derive(Clone, Copy)]
enum Done {
    /// ibverbs-utils' pingpong summary (`... iters in ... seconds`), on both sides.
    Pingpong,
    /// A perftest result row (`#bytes #iterations ...` numbers) from the client.
    Perftest,
    /// `rping -v`: this many `ping data:` lines from the client.
    Rping(usize),
}

const PAIRS: &[Pair] = &[
    Pair {
        name: "ibv_rc_pingpong -c",
        program: "ibv_rc_pingpong",
        args: &["-d", "rxe0", "-g", "{gid}", "-c", "-n", "500"],
        server_args: &[],
        client_args: &[],
        addr_flag: None,
        cm: false,
        kernel_serves: true,
        done: Done::Pingpong,
    },
    Pair {
        // UD messages are bounded by the path MTU: 1024 on a 1500-byte tap.
        name: "ibv_ud_pingpong -c",
        program: "ibv_ud_pingpong",
        args: &["-d", "rxe0", "-g", "{gid}", "-c", "-s", "1024", "-n", "500"],
        server_args: &[],
        client_args: &[],
        addr_flag: None,
        cm: false,
        kernel_serves: true,
        done: Done::Pingpong,
    },
    Pair {
        name: "ib_write_bw",
        program: "ib_write_bw",
        args: &[
            "-d", "rxe0", "-x", "{gid}", "-F", "-s", "65536", "-n", "500",
        ],
        server_args: &[],
        client_args: &[],
        addr_flag: None,
        cm: false,
        kernel_serves: true,
        done: Done::Perftest,
    },
    Pair {
        // `-u 18`: a 1 s local ACK timeout instead of perftest's 67 ms (timeout 14). The
        // kernel's rxe under TCG stalls for half a second at times (seen: 550 ms with not
        // one response while the host's two cores were busy), longer than eight 67 ms
        // timeouts, and rdma-emu counts retry_cnt=7 as seven retries as the IBA says
        // (this rxe retries forever). Answers to duplicate READs no longer use up the
        // retries (docs/interop.md, "Findings"), but a silent peer still must.
        name: "ib_read_bw -u 18",
        program: "ib_read_bw",
        args: &[
            "-d", "rxe0", "-x", "{gid}", "-F", "-s", "65536", "-n", "500", "-u", "18",
        ],
        server_args: &[],
        client_args: &[],
        addr_flag: None,
        cm: false,
        kernel_serves: true,
        done: Done::Perftest,
    },
    Pair {
        name: "ib_send_lat",
        program: "ib_send_lat",
        args: &["-d", "rxe0", "-x", "{gid}", "-F", "-n", "500"],
        server_args: &[],
        client_args: &[],
        addr_flag: None,
        cm: false,
        kernel_serves: true,
        done: Done::Perftest,
    },
    Pair {
        name: "ib_atomic_bw",
        program: "ib_atomic_bw",
        args: &["-d", "rxe0", "-x", "{gid}", "-F", "-n", "500"],
        server_args: &[],
        client_args: &[],
        addr_flag: None,
        cm: false,
        kernel_serves: true,
        done: Done::Perftest,
    },
    Pair {
        // RDMA CM: REQ/REP/RTU on QP1 between the kernel's CM and rdma-emu's.
        name: "rping -C 100",
        program: "rping",
        args: &["-v", "-C", "100"],
        server_args: &["-s"],
        client_args: &["-c", "-V"],
        addr_flag: Some("-a"),
        cm: true,
        kernel_serves: true,
        done: Done::Rping(100),
    },
    Pair {
        // Only with rdma-emu serving: perftest's -R client connects a second time right
        // after its first connection, while the server closes its listener and listens
        // anew; the guest's perftest under TCG re-listens later than rdma-emu's REQ
        // arrives, and the kernel's CM rejects it (REJ 8, no listener), as it must
        // (docs/interop.md, "Findings"). rping covers that direction.
        name: "ib_write_bw -R",
        program: "ib_write_bw",
        args: &["-d", "rxe0", "-R", "-F", "-s", "65536", "-n", "500"],
        server_args: &[],
        client_args: &[],
        addr_flag: None,
        cm: true,
        kernel_serves: false,
        done: Done::Perftest,
    },
];

/// What one side of a pair did.
struct Side {
    rc: Option<i32>,
    output: String,
}

impl From<Output> for Side {
    /// A host program; killed by a signal reads as exit -1, timed out as `None`.
    fn from(o: Output) -> Side {
        Side {
            rc: o.status.map(|st| st.code().unwrap_or(-1)),
            output: format!("{}{}", o.stdout, o.stderr),
        }
    }
}

impl Side {
    fn ok(&self) -> bool {
        self.rc == Some(0)
    }

    fn status(&self) -> String {
        self.rc.map_or("timed out".into(), |c| format!("exit {c}"))
    }
}

fn completed(done: Done, output: &str) -> bool {
    match done {
        Done::Pingpong => output.contains("iters in"),
        Done::Rping(n) => {
            output
                .lines()
                .filter(|l| l.starts_with("ping data: rdma-ping-"))
                .count()
                >= n
        }
        Done::Perftest => output.lines().any(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            t.len() >= 4 && t[..2].iter().all(|x| x.parse::<u64>().is_ok())
        }),
    }
}

fn argv(pair: &Pair, gid: &str, port: u16) -> Vec<String> {
    let mut v = vec![pair.program.to_string()];
    v.extend(pair.args.iter().map(|a| a.replace("{gid}", gid)));
    v.extend(["-p".to_string(), port.to_string()]);
    v
}

/// A pair's name as a file name: `ib_write_bw -R` → `ib_write_bw_-R` (two pairs of one
/// program must not share the guest's job files or the run folder's outputs).
fn slug(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn server_argv(pair: &Pair, gid: &str, port: u16) -> Vec<String> {
    let mut v = argv(pair, gid, port);
    v.extend(pair.server_args.iter().map(|a| a.to_string()));
    v
}

fn client_argv(pair: &Pair, gid: &str, port: u16, server: &str) -> Vec<String> {
    let mut v = argv(pair, gid, port);
    v.extend(pair.client_args.iter().map(|a| a.to_string()));
    v.extend(pair.addr_flag.map(str::to_string));
    v.push(server.to_string());
    v
}

fn shell_quote(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The host namespace's UDP receive-buffer drops (`Udp: RcvbufErrors` in /proc/net/snmp):
/// datagrams the kernel dropped before rdma-emud could read them.
fn host_udp_rcvbuf_errors(netns: &Netns) -> Option<u64> {
    let out = Command::new("ip")
        .args(["netns", "exec", &netns.name, "cat", "/proc/net/snmp"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let names: Vec<&str> = udp.next()?.split_whitespace().collect();
    let values: Vec<&str> = udp.next()?.split_whitespace().collect();
    let i = names.iter().position(|n| *n == "RcvbufErrors")?;
    values.get(i)?.parse().ok()
}

/// The outcome of one pair in one direction.
struct Outcome {
    pass: bool,
    note: String,
    seconds: f64,
}

struct Setup<'a> {
    daemon: &'a Daemon,
    netns: &'a Netns,
    guest: &'a Guest,
    host_ip: String,
    guest_ip: String,
    host_gid: String,
    run_dir: PathBuf,
}

fn run_one(s: &Setup, pair: &Pair, dir: Direction, port: u16) -> Outcome {
    let drops_before = host_udp_rcvbuf_errors(s.netns);
    let mut outcome = run_one_inner(s, pair, dir, port);
    if let (Some(a), Some(b)) = (drops_before, host_udp_rcvbuf_errors(s.netns)) {
        if b > a {
            let _ = write!(outcome.note, " (host UDP RcvbufErrors +{})", b - a);
        }
    }
    outcome
}

fn run_one_inner(s: &Setup, pair: &Pair, dir: Direction, port: u16) -> Outcome {
    let start = Instant::now();
    let secs = PAIR_LIMIT.as_secs() - 5;
    let guest_gid = s.guest.get("rxe0_gid_index");
    let job_name = format!("{}-{}", slug(pair.name), dir.tag());
    let (server, client) = match dir {
        Direction::KernelServes => {
            let srv = server_argv(pair, guest_gid, port);
            let wait = if pair.cm { "cm_listening" } else { "listening" };
            let job = s.guest.job(
                &job_name,
                &format!(
                    "timeout {secs} {} & p=$!\n{wait} {port}\nwait $p\n",
                    shell_quote(&srv)
                ),
            );
            if !job.wait_listening(Duration::from_secs(30)) {
                let (rc, output) = job.wait(Duration::from_secs(2));
                let out = Side { rc, output };
                return finish(
                    s,
                    pair,
                    dir,
                    start,
                    out,
                    Side {
                        rc: None,
                        output: "not started: the guest's server never listened".into(),
                    },
                );
            }
            let cli = client_argv(pair, &s.host_gid, port, &s.guest_ip);
            let refs: Vec<&str> = cli.iter().map(String::as_str).collect();
            let c = s.daemon.program(Some(s.netns), &refs).wait(PAIR_LIMIT);
            let (rc, output) = job.wait(if c.success() {
                PAIR_LIMIT
            } else {
                Duration::from_secs(5)
            });
            (Side { rc, output }, Side::from(c))
        }
        Direction::EmuServes => {
            let srv = server_argv(pair, &s.host_gid, port);
            let refs: Vec<&str> = srv.iter().map(String::as_str).collect();
            let server = s.daemon.program(Some(s.netns), &refs);
            let listening = if pair.cm {
                wait_cm_listening(s.daemon, Some(s.netns), port, Duration::from_secs(20))
            } else {
                wait_listening(Some(s.netns), port, Duration::from_secs(20))
            };
            if !listening {
                let out = Side::from(server.wait(Duration::from_millis(100)));
                return finish(
                    s,
                    pair,
                    dir,
                    start,
                    out,
                    Side {
                        rc: None,
                        output: "not started: rdma-emu's server never listened".into(),
                    },
                );
            }
            let cli = client_argv(pair, s.guest.get("rxe0_gid_index"), port, &s.host_ip);
            let job = s.guest.job(
                &job_name,
                &format!("timeout {secs} {}\n", shell_quote(&cli)),
            );
            let (rc, output) = job.wait(PAIR_LIMIT);
            let c = Side { rc, output };
            let o = server.wait(if c.ok() {
                PAIR_LIMIT
            } else {
                Duration::from_secs(5)
            });
            (Side::from(o), c)
        }
    };
    finish(s, pair, dir, start, server, client)
}

fn finish(
    s: &Setup,
    pair: &Pair,
    dir: Direction,
    start: Instant,
    server: Side,
    client: Side,
) -> Outcome {
    let (emu, kernel) = match dir {
        Direction::KernelServes => (&client, &server),
        Direction::EmuServes => (&server, &client),
    };
    let file = s
        .run_dir
        .join(format!("{}-{}.txt", slug(pair.name), dir.tag()));
    let _ = std::fs::write(
        &file,
        format!(
            "{} — {}\n--- kernel rxe side ({}) ---\n{}\n--- rdma-emu side ({}) ---\n{}\n--- rdma-emud log (tail) ---\n{}\n",
            pair.name,
            dir.label(),
            kernel.status(),
            kernel.output,
            emu.status(),
            emu.output,
            tail(&s.daemon.log_text(), 40)
        ),
    );
    let done = completed(pair.done, &client.output);
    let pass = server.ok() && client.ok() && done;
    let note = if pass {
        client
            .output
            .lines()
            .rev()
            .find(|l| completed(pair.done, l))
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        format!(
            "kernel side {}, rdma-emu side {}{}; see {}",
            kernel.status(),
            emu.status(),
            if done { "" } else { ", no result printed" },
            file.display()
        )
    };
    Outcome {
        pass,
        note,
        seconds: start.elapsed().as_secs_f64(),
    }
}

#[test]
fn rdma_emu_and_kernel_rxe_interoperate_both_ways() {
    let _s = serial();
    if std::env::var_os("RDMA_EMU_SKIP_INTEROP").is_some_and(|v| !v.is_empty() && v != "0") {
        eprintln!("SKIPPED: interop suite skipped (RDMA_EMU_SKIP_INTEROP is set)");
        return;
    }
    if !is_root() {
        let _ = cannot_run(
            "the interop suite needs root (apt-get, mmdebstrap, a network namespace and a tap)",
        );
        return;
    }
    let programs: Vec<&str> = PAIRS
        .iter()
        .map(|p| p.program)
        .chain(["tshark", "ss"])
        .collect();
    if missing(&programs) {
        return;
    }
    require_build();
    let suite_start = Instant::now();
    let runs = cache_dir().join("runs");
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let run_dir = runs.join(stamp.to_string());
    std::fs::create_dir_all(&run_dir).expect("run folder");
    prune_runs(&runs, 5);

    // 1. Host packages and the guest image (built once, then cached).
    let t = Instant::now();
    let (code, log) = run_bounded(
        Command::new("bash").arg(interop_scripts().join("prepare.sh")),
        PREPARE_LIMIT,
        &run_dir.join("prepare.log"),
    );
    if code != Some(0) {
        let _ = cannot_run(&format!(
            "cannot prepare the interop guest (prepare.sh {}):\n{}",
            code.map_or("timed out".into(), |c| format!("exit {c}")),
            tail(&log, 20)
        ));
        return;
    }
    let prepare_secs = t.elapsed().as_secs_f64();

    // 2. The namespace and its tap; deleted (with the tap) when `netns` drops.
    let id = std::process::id() % 250;
    let netns = Netns {
        name: format!("rdmaemu-interop-{}", std::process::id()),
    };
    let host_ip = format!("10.212.{id}.1");
    let guest_ip = format!("10.212.{id}.2");
    let up = Command::new("bash")
        .arg(interop_scripts().join("netns.sh"))
        .args(["up", &netns.name, TAP, &format!("{host_ip}/24")])
        .output()
        .expect("netns.sh");
    if !up.status.success() {
        let _ = cannot_run(&format!(
            "cannot create the network namespace: {}",
            String::from_utf8_lossy(&up.stderr).trim()
        ));
        return;
    }

    // 3. Every frame on the tap.
    let pcap = run_dir.join("tap.pcap");
    let mut tcpdump = Capture(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &netns.name,
                "tcpdump",
                "-i",
                TAP,
                "-U",
                "-s",
                "0",
                "-w",
            ])
            .arg(&pcap)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(run_dir.join("tcpdump.log")).expect("log"))
            .spawn()
            .expect("cannot start tcpdump"),
    );

    // 4. The guest.
    let t = Instant::now();
    let vm_timeout = SUITE_BUDGET.saturating_sub(suite_start.elapsed()) + Duration::from_secs(60);
    let guest = match Guest::boot(
        &netns,
        &run_dir.join("share"),
        TAP,
        &format!("{guest_ip}/24"),
        vm_timeout,
    ) {
        Ok(g) => g,
        Err(e) => {
            tcpdump.stop();
            panic!("the interop guest did not come up: {e}");
        }
    };
    let boot_secs = t.elapsed().as_secs_f64();
    assert!(
        !guest.get("rxe0_gid_index").is_empty(),
        "the guest has no RoCE v2 GID on rxe0: {:?}\n{}",
        guest.ready,
        tail(&guest.console(), 30)
    );

    // 5. rdma-emu serving rxe0 on the tap.
    let daemon = Daemon::start_with(Some(&netns), &["--netdev", TAP]);
    let info = daemon
        .program(Some(&netns), &["ibv_devinfo", "-v"])
        .wait(Duration::from_secs(60));
    info.assert_success();
    let host_gid = roce_v2_ipv4_gid_index(&info.stdout)
        .expect("an IPv4 RoCE v2 GID on rdma-emu's rxe0")
        .to_string();
    let setup = Setup {
        daemon: &daemon,
        netns: &netns,
        guest: &guest,
        host_ip: host_ip.clone(),
        guest_ip: guest_ip.clone(),
        host_gid,
        run_dir: run_dir.clone(),
    };

    // 6. Every pair, both directions.
    let mut results: Vec<(&Pair, Direction, Option<Outcome>)> = Vec::new();
    let mut port = 18600;
    let only = std::env::var("RDMA_EMU_INTEROP_ONLY").unwrap_or_default();
    for pair in PAIRS
        .iter()
        .filter(|p| only.is_empty() || only.split(',').any(|o| o == p.program))
    {
        for dir in [Direction::KernelServes, Direction::EmuServes] {
            if dir == Direction::KernelServes && !pair.kernel_serves {
                continue;
            }
            port += 1;
            let left = SUITE_BUDGET.saturating_sub(suite_start.elapsed());
            let outcome = (left > PAIR_LIMIT + Duration::from_secs(20))
                .then(|| run_one(&setup, pair, dir, port));
            if let Some(o) = &outcome {
                eprintln!(
                    "interop: {} ({}): {} in {:.1} s",
                    pair.name,
                    dir.label(),
                    if o.pass { "pass" } else { "FAIL" },
                    o.seconds
                );
            }
            results.push((pair, dir, outcome));
        }
    }

    // 7. Power off, stop the capture, check it.
    drop(setup);
    let _ = std::fs::write(run_dir.join("rdma-emud.log"), daemon.log_text());
    drop(daemon);
    let stats = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ip -n {ns} -s -s link show {TAP}; echo; ip netns exec {ns} cat /proc/net/snmp",
            ns = netns.name
        ))
        .output();
    if let Ok(o) = stats {
        let _ = std::fs::write(run_dir.join("host-net-stats.txt"), o.stdout);
    }
    let kernel_abi = guest.get("kernel").to_string();
    let kernel = format!("{kernel_abi} ({})", guest.get("kernel_package"));
    let versions = format!(
        "guest: {kernel}, rdma-core {}, perftest {}",
        guest.get("rdma_core"),
        guest.get("perftest")
    );
    let share = guest.share.clone();
    guest.stop();
    std::thread::sleep(Duration::from_millis(500));
    tcpdump.stop();
    drop(netns);
    let capture = check_capture(&pcap, &host_ip, &guest_ip);

    let mut table = String::new();
    let _ = writeln!(
        table,
        "{versions}; host: rdma-emu on {TAP} in a network namespace"
    );
    let _ = writeln!(
        table,
        "prepare {prepare_secs:.0} s, boot to rxe0 ready {boot_secs:.0} s, whole suite {:.0} s\n",
        suite_start.elapsed().as_secs_f64()
    );
    let _ = writeln!(
        table,
        "| pair | direction | result | kernel | time | notes |"
    );
    let _ = writeln!(table, "|---|---|---|---|---|---|");
    let mut failures = 0;
    for (pair, dir, outcome) in &results {
        let (result, secs, note) = match outcome {
            Some(o) if o.pass => ("pass", format!("{:.1} s", o.seconds), o.note.clone()),
            Some(o) => {
                failures += 1;
                ("FAIL", format!("{:.1} s", o.seconds), o.note.clone())
            }
            None => {
                failures += 1;
                ("not run", "-".into(), "suite time budget spent".into())
            }
        };
        let _ = writeln!(
            table,
            "| {} | {} | {result} | {} | {secs} | {note} |",
            pair.name,
            dir.label(),
            kernel_abi,
        );
    }
    let _ = writeln!(table, "\ncapture {}:\n{}", pcap.display(), capture.text);
    let _ = std::fs::write(run_dir.join("results.md"), &table);
    eprintln!(
        "{table}\nrun folder: {} (guest console: {})",
        run_dir.display(),
        share.join("console.log").display()
    );
    assert!(
        failures == 0 && capture.ok,
        "{failures} interop pair runs failed or did not run, capture check {}:\n{table}",
        if capture.ok { "clean" } else { "FAILED" }
    );
}
