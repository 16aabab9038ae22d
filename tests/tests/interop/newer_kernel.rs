//! The pair that needs a newer kernel than Debian 12's 6.1: "atomic_write+flush", rdma-emu
//! posting ATOMIC_WRITE (opcode 0x1D) and FLUSH (0x1C) to the kernel's rxe0 as responder.
//! Both came to rxe in Linux 6.2, so this pair boots a second guest
//! (`build-image.sh --backports-kernel`: bookworm with linux-image-amd64 from
//! bookworm-backports, 6.12) on a RoCE tap of its own, after the main suite's guest.
//!
//! The guest compiles `tests/interop/c/flush_responder.c` (its rdma-core v44 headers lack
//! the FLUSH access flags: the program carries their values) and runs it on rxe0: a region
//! with remote write/read/atomic and FLUSH_GLOBAL rights (FLUSH_PERSISTENT too if rxe lets
//! it: only on persistent memory), a new QP per TCP connection. The host runs
//! `flush_requester.c`, built against rdma-core v59's headers, on rdma-emu's rxe0 through
//! the shim, once per phase, each on its own QP:
//!
//! - `atomic_write`: two ATOMIC_WRITEs, each read back with an RDMA READ; the guest then
//!   reports exactly those 16 bytes changed in its region;
//! - `flush`: FLUSH GLOBAL of a range, of the whole region, of a second range, then FLUSH
//!   PERSISTENT, which rxe must refuse with a NAK when the region lacks that right.
//!
//! Every ATOMIC_WRITE and FLUSH on the wire must have the kernel's answer to its PSN on its
//! QP, every ICRC must be good (`rdma-emu decode`) and tshark must find nothing malformed.
//!
//! One finding keeps FLUSH from being answered (docs/interop.md, "Findings"):
//! [`RXE_TAKES_IBA_FLUSH`] (the kernel's FLUSH ICRC check covers the wrong bytes, so it
//! drops every FLUSH whose ICRC is the IBA's; the `flush-unanswered` phase then checks
//! exactly that, with a kretprobe on the guest's `rxe_icrc_check`). rxe answers an
//! ATOMIC_WRITE with a zero-length READ response, which rdma-emu's completer takes since
//! this pair found it did not.
use crate::harness::*;
use rdma_emu_tests::releases::headers;
use rdma_emu_tests::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The pair's name, as `RDMA_EMU_INTEROP_ONLY` and the results table give it.
pub const PAIR: &str = "atomic_write+flush";
/// The RoCE tap of this boot (in its own namespace, as the main suite's).
const TAP: &str = "rdmaemutap0";
/// The guest's TCP port for the QP exchange.
const PORT: u16 = 18700;
/// Boot, compile in the guest, the phases, power-off.
const BUDGET: Duration = Duration::from_secs(420);
/// From the job to the responder listening: gcc under TCG (measured 21-25 s).
const COMPILE_LIMIT: Duration = Duration::from_secs(120);
/// Building the 6.12 image from nothing took 390 s here; a cached one, a second.
const PREPARE_LIMIT: Duration = Duration::from_secs(1500);
/// One phase of the host's requester (a dropped FLUSH takes 8 tries of 1.07 s).
const PHASE_LIMIT: Duration = Duration::from_secs(90);
/// The 8 bytes of the requester's first and second ATOMIC_WRITE, at offsets 64 and 136.
const FIRST: &str = "1122334455667788";
const SECOND: &str = "deadbeef01234567";
/// How often rdma-emu sends a request nobody answers: once and retry_cnt (7) times more.
const SENDS_UNANSWERED: usize = 8;

/// Whether the guest kernel's rxe takes a FLUSH whose ICRC is computed as the IBA says.
/// Linux 6.12's `rxe_opcode.c` gives `IB_OPCODE_RC_FLUSH` no payload offset, so
/// `rxe_icrc_check` covers BTH, FETH and RETH a second time as "payload" and refuses every
/// FLUSH from an IBA-conformant requester (rxe to rxe works: both sides are wrong alike).
/// While false the test runs the `flush-unanswered` phase: one FLUSH, which must go
/// unanswered (`IBV_WC_RETRY_EXC_ERR`) with every copy refused by `rxe_icrc_check`.
const RXE_TAKES_IBA_FLUSH: bool = false;

/// Whether `RDMA_EMU_INTEROP_ONLY` (empty: everything) picks this pair.
pub fn chosen(only: &str) -> bool {
    only.is_empty()
        || only
            .split(',')
            .any(|o| o == PAIR || o == "flush" || o == "atomic_write" || o == "rxe0")
}

/// One RoCE v2 packet as `rdma-emu decode` prints it: sender, opcode, destination QP, PSN.
struct Frame {
    from_emu: bool,
    op: String,
    qp: u32,
    psn: u32,
    line: String,
}

fn frames(decoded: &str, host_ip: &str) -> Vec<Frame> {
    decoded
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let src = w.nth(1)?;
            let rest: Vec<&str> = w.collect();
            let at = rest.iter().position(|t| *t == "RoCEv2")?;
            let field = |name: &str| rest.iter().find_map(|t| t.strip_prefix(name));
            Some(Frame {
                from_emu: src.starts_with(&format!("{host_ip}.")),
                op: rest.get(at + 2)?.to_string(),
                qp: u32::from_str_radix(field("QP=0x")?, 16).ok()?,
                psn: field("PSN=")?.parse().ok()?,
                line: l.to_string(),
            })
        })
        .collect()
}

/// What a phase must show on the wire, request by request in PSN order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Answer {
    /// Answered with an AETH ACK (rxe: a zero-length RDMA READ Response Only).
    Ack,
    /// Answered with a NAK.
    Nak,
    /// Never answered; sent [`SENDS_UNANSWERED`] times.
    None,
}

/// Checks the ATOMIC_WRITE and FLUSH requests rdma-emu sent to the guest's QP `qp` (one
/// phase) against `want` ((opcode, answer) in PSN order) and the kernel's answers to them
/// (to rdma-emu's QP `host_qp`, matched by PSN). Returns (ok, one line of counts, then the
/// problems).
fn check_phase(all: &[Frame], qp: u32, host_qp: u32, want: &[(&str, Answer)]) -> (bool, String) {
    let mut order: Vec<(u32, &str)> = Vec::new();
    let mut copies: BTreeMap<u32, usize> = BTreeMap::new();
    for f in all
        .iter()
        .filter(|f| f.from_emu && f.qp == qp && (f.op == "AtomicWrite" || f.op == "Flush"))
    {
        let n = copies.entry(f.psn).or_default();
        if *n == 0 {
            order.push((f.psn, f.op.as_str()));
        }
        *n += 1;
    }
    let mut ok = order.len() == want.len();
    let mut problems = String::new();
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    for (i, (psn, op)) in order.iter().enumerate() {
        let answer = all
            .iter()
            .find(|f| !f.from_emu && f.qp == host_qp && f.psn == *psn && f.line.contains("AETH"));
        let got = match answer {
            Some(a) if a.line.contains("Nak") => Answer::Nak,
            Some(_) => Answer::Ack,
            None => Answer::None,
        };
        if let Some(a) = answer {
            let kind = if got == Answer::Nak { "NAK" } else { "ACK" };
            *answers.entry(format!("{} ({kind})", a.op)).or_default() += 1;
        }
        let sent = copies[psn];
        let expected = want.get(i).copied();
        let fine = expected.is_some_and(|(wop, wans)| {
            wop == *op && wans == got && (got != Answer::None || sent == SENDS_UNANSWERED)
        });
        if !fine {
            ok = false;
            let _ = writeln!(
                problems,
                "  {op} PSN {psn} (sent {sent} times): answer {got:?}, expected {expected:?}"
            );
        }
    }
    if order.len() != want.len() {
        let _ = writeln!(
            problems,
            "  {} ATOMIC_WRITE/FLUSH requests to QP {qp}, expected {}",
            order.len(),
            want.len()
        );
    }
    let count = |o: &str| order.iter().filter(|(_, op)| *op == o).count();
    let sent: usize = copies.values().sum();
    let line = format!(
        "{} ATOMIC_WRITE (0x1D) and {} FLUSH (0x1C) requests in {sent} frames; the kernel's answers: {}",
        count("AtomicWrite"),
        count("Flush"),
        if answers.is_empty() {
            "none".to_string()
        } else {
            answers
                .iter()
                .map(|(op, n)| format!("{n} {op}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    (ok, format!("{line}\n{problems}"))
}

/// One run of the host's requester, on its own QP.
struct Phase {
    /// The requester's PHASE argument (and the guest's output prefix).
    name: &'static str,
    /// What the wire must show.
    want: Vec<(&'static str, Answer)>,
}

/// The phases this run goes through. rxe answers an ATOMIC_WRITE with a zero-length RDMA
/// READ Response Only (opcode 0x10, AETH ACK), which rdma-emu's completer takes as its
/// answer (`emulator/core/src/completer.rs`, `read_response`).
fn phases(persistent: bool) -> Vec<Phase> {
    let mut list = vec![Phase {
        name: "atomic_write",
        want: vec![("AtomicWrite", Answer::Ack), ("AtomicWrite", Answer::Ack)],
    }];
    if RXE_TAKES_IBA_FLUSH {
        let last = if persistent { Answer::Ack } else { Answer::Nak };
        list.push(Phase {
            name: "flush",
            want: vec![
                ("Flush", Answer::Ack),
                ("Flush", Answer::Ack),
                ("Flush", Answer::Ack),
                ("Flush", last),
            ],
        });
    } else {
        list.push(Phase {
            name: "flush-unanswered",
            want: vec![("Flush", Answer::None)],
        });
    }
    list
}

/// Builds the host's requester against rdma-core v59's headers, linked to the shim.
fn build_requester(dir: &Path) -> Option<PathBuf> {
    let inc = headers(59)?;
    let src = interop_scripts().join("c/flush_requester.c");
    let exe = dir.join("flush_requester");
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-I"])
        .arg(&inc)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-L")
        .arg(lib_dir())
        .arg("-l:libibverbs.so.1")
        .output()
        .expect("cannot run gcc");
    assert!(
        out.status.success(),
        "gcc failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

/// A value `key VALUE` (or `key=VALUE`) the responder printed.
fn value<'a>(output: &'a str, key: &str) -> Option<&'a str> {
    output.lines().find_map(|l| {
        l.strip_prefix(key)
            .and_then(|r| r.strip_prefix(' ').or_else(|| r.strip_prefix('=')))
    })
}

#[test]
fn kernel_6_12_rxe_answers_rdma_emus_atomic_write_and_flush() {
    let _s = serial();
    if !chosen(&std::env::var("RDMA_EMU_INTEROP_ONLY").unwrap_or_default()) {
        eprintln!("SKIPPED: {PAIR} is not in RDMA_EMU_INTEROP_ONLY");
        return;
    }
    if !interop_wanted() {
        return;
    }
    if missing(&["gcc", "tshark", "tcpdump"]) {
        return;
    }
    require_build();
    let start = Instant::now();
    let run_dir = new_run_dir("-newer-kernel");
    let Some(requester) = build_requester(&run_dir) else {
        return;
    };

    // 1. The second guest's image (built once, beside the 6.1 one).
    let Some(prepare_secs) = prepare(&run_dir, &["--backports-kernel"], PREPARE_LIMIT) else {
        return;
    };
    let image = cache_dir().join("bpo-kernel");

    // 2. Namespace, tap, capture, guest (rxe0 on eth0 only).
    let id = std::process::id() % 250;
    let netns = Netns {
        name: format!("rdmaemu-interop-k-{}", std::process::id()),
    };
    let host_ip = format!("10.214.{id}.1");
    let guest_ip = format!("10.214.{id}.2");
    let up = Command::new("bash")
        .arg(interop_scripts().join("netns.sh"))
        .args(["up", &netns.name, TAP, &format!("{host_ip}/24")])
        .output()
        .expect("netns.sh");
    assert!(
        up.status.success(),
        "cannot create the network namespace: {}",
        String::from_utf8_lossy(&up.stderr).trim()
    );
    let pcap = run_dir.join("tap.pcap");
    let mut capture = capture(&netns, TAP, &pcap, &run_dir.join("tcpdump.log"));
    let share = run_dir.join("share");
    std::fs::create_dir_all(&share).expect("share");
    for file in ["flush_responder.c", "exchange.h"] {
        std::fs::copy(interop_scripts().join("c").join(file), share.join(file))
            .unwrap_or_else(|e| panic!("copy {file} into the share: {e}"));
    }
    let t = Instant::now();
    let guest = match Guest::boot_image(
        &netns,
        &share,
        &[(TAP, format!("{guest_ip}/24"))],
        &[],
        BUDGET + Duration::from_secs(60),
        Some(&image),
    ) {
        Ok(g) => g,
        Err(e) => {
            capture.stop();
            panic!("the guest with the backports kernel did not come up: {e}");
        }
    };
    let boot_secs = t.elapsed().as_secs_f64();
    let kernel = guest.get("kernel").to_string();
    let guest_gid = guest.get("rxe0_gid_index").to_string();
    assert!(
        !guest_gid.is_empty(),
        "the guest has no RoCE v2 GID on rxe0: {:?}\n{}",
        guest.ready,
        tail(&guest.console(), 30)
    );

    // 3. rdma-emu's rxe0 on the tap.
    let config = run_dir.join("rdma-emud.toml");
    std::fs::write(
        &config,
        format!("[[device]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"{TAP}\"\n"),
    )
    .expect("daemon configuration");
    let daemon = Daemon::start_with(Some(&netns), &["--config", &config.display().to_string()]);
    let info = daemon
        .program(Some(&netns), &["ibv_devinfo", "-v", "-d", "rxe0"])
        .wait(Duration::from_secs(60));
    info.assert_success();
    let host_gid = roce_v2_ipv4_gid_index(&info.stdout)
        .expect("an IPv4 RoCE v2 GID on rdma-emu's rxe0")
        .to_string();

    // 4. The guest compiles its responder and serves one connection per phase; a
    //    kretprobe counts what rxe_icrc_check says of every packet rxe0 receives.
    let plan = phases(false);
    let job = guest.job(
        "flush-responder",
        &format!(
            "T=/sys/kernel/tracing\n\
             mountpoint -q $T || mount -t tracefs tracefs $T\n\
             if echo 'r:rdmaemu/icrc rdma_rxe:rxe_icrc_check ret=$retval:s32' >>$T/kprobe_events &&\n\
                echo 1 >$T/events/rdmaemu/icrc/enable; then echo 'icrc_probe on'; else echo 'icrc_probe off'; fi\n\
             t0=$(cut -d' ' -f1 /proc/uptime)\n\
             gcc -O2 -Wall -o /tmp/flush_responder /mnt/host/flush_responder.c -libverbs || exit 90\n\
             echo \"compiled in $(awk -v t0=\"$t0\" '{{print $1 - t0}}' /proc/uptime) s\"\n\
             timeout 300 /tmp/flush_responder rxe0 {guest_gid} {PORT} {} & p=$!\n\
             listening {PORT}\n\
             wait $p; rc=$?\n\
             echo \"icrc_check ok $(grep -c 'ret=0$' $T/trace) refused $(grep -c 'ret=-' $T/trace)\"\n\
             exit $rc\n",
            plan.len()
        ),
    );
    let t = Instant::now();
    let listening = job.wait_listening(COMPILE_LIMIT);
    let compile_secs = t.elapsed().as_secs_f64();
    // The responder says before it listens whether rxe let it give its region
    // FLUSH_PERSISTENT (only on persistent memory).
    let early = std::fs::read_to_string(share.join("jobs/flush-responder.out")).unwrap_or_default();
    let persistent = value(&early, "persistent_mr") == Some("ok");
    let plan = phases(persistent);
    let t = Instant::now();
    let port = PORT.to_string();
    let mut host_runs: Vec<(&Phase, Output)> = Vec::new();
    if listening {
        for phase in &plan {
            let argv = [
                requester.to_str().expect("utf-8 path"),
                "rxe0",
                &host_gid,
                &guest_ip,
                &port,
                phase.name,
            ];
            let out = daemon.program(Some(&netns), &argv).wait(PHASE_LIMIT);
            let ok = out.success();
            host_runs.push((phase, out));
            if !ok {
                break;
            }
        }
    }
    let pair_secs = t.elapsed().as_secs_f64();
    let (rc, guest_out) = job.wait(Duration::from_secs(if listening { 60 } else { 5 }));

    // 5. Power off, stop the capture, check it.
    let _ = std::fs::write(run_dir.join("rdma-emud.log"), daemon.log_text());
    drop(daemon);
    let versions = format!(
        "guest: {kernel} ({}), rdma-core {}",
        guest.get("kernel_package"),
        guest.get("rdma_core")
    );
    guest.stop();
    std::thread::sleep(Duration::from_millis(500));
    capture.stop();
    drop(netns);
    // The kernel must have spoken RoCE only if some request was to be answered.
    let answers_due = plan
        .iter()
        .any(|p| p.want.iter().any(|(_, a)| *a != Answer::None));
    let report = check_capture(&pcap, &host_ip, &guest_ip, answers_due);
    let decoded = Command::new(bin_dir().join("rdma-emu"))
        .arg("decode")
        .arg(&pcap)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let all = frames(&decoded, &host_ip);
    let counters = std::fs::read_to_string(share.join("rxe0-counters.txt")).unwrap_or_default();
    let rcvd = value(&counters, "rcvd_pkts").unwrap_or("?");
    let icrc = value(&guest_out, "icrc_check").unwrap_or("unknown");

    let mut pass = report.ok && rc == Some(0) && listening && host_runs.len() == plan.len();
    let mut table = String::new();
    let mut details = String::new();
    let _ = writeln!(
        table,
        "{versions}; host: rdma-emu's rxe0 on {TAP}\nprepare {prepare_secs:.0} s, boot to ready {boot_secs:.0} s, guest compile to listening {compile_secs:.0} s, phases {pair_secs:.1} s, whole {:.0} s\n",
        start.elapsed().as_secs_f64()
    );
    let _ = writeln!(
        table,
        "| pair | phase | direction | result | kernel | notes |\n|---|---|---|---|---|---|"
    );
    for (phase, out) in &host_runs {
        let tag = format!("[{}]", phase.name);
        let qp = value(&guest_out, &format!("{tag} connected: local qpn"))
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let host_qp = value(&out.stdout, "host qpn")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let (wire_ok, wire) = check_phase(&all, qp, host_qp, &phase.want);
        let mem = |off: u32| value(&guest_out, &format!("{tag} mr[{off}]"));
        let unchanged = value(&guest_out, &format!("{tag} mr_unchanged"));
        let (guest_ok, guest_note) = match phase.name {
            "atomic_write" => (
                mem(64) == Some(FIRST) && mem(136) == Some(SECOND) && unchanged == Some("30"),
                format!(
                    "guest region: [64] {}, [136] {}, {} other words unchanged",
                    mem(64).unwrap_or("-"),
                    mem(136).unwrap_or("-"),
                    unchanged.unwrap_or("?")
                ),
            ),
            "flush-unanswered" => {
                // Every copy of the FLUSH reached rxe and was refused at its ICRC check.
                let refused: usize = icrc
                    .split_whitespace()
                    .skip_while(|w| *w != "refused")
                    .nth(1)
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                (
                    refused == SENDS_UNANSWERED,
                    format!("rxe_icrc_check: {icrc} (rxe0 rcvd_pkts {rcvd})"),
                )
            }
            _ => (
                true,
                format!(
                    "guest: persistent_mr {}",
                    value(&early, "persistent_mr").unwrap_or("?")
                ),
            ),
        };
        let host_ok = out.success() && out.stdout.contains("all checks passed");
        let ok = host_ok && guest_ok && wire_ok;
        pass &= ok;
        let _ = writeln!(
            table,
            "| {PAIR} | {} | server kernel rxe, client rdma-emu | {} | {kernel} | {}; {guest_note} |",
            phase.name,
            if ok { "pass" } else { "FAIL" },
            wire.lines().next().unwrap_or_default(),
        );
        let _ = writeln!(
            details,
            "--- phase {} (QP {qp}): wire {wire}--- rdma-emu (flush_requester, {:?}) ---\n{}{}",
            phase.name, out.status, out.stdout, out.stderr
        );
    }
    let _ = writeln!(table, "\ncapture {}:\n{}", pcap.display(), report.text);
    let _ = writeln!(
        table,
        "{details}--- kernel rxe (flush_responder, exit {rc:?}) ---\n{guest_out}"
    );
    let _ = std::fs::write(run_dir.join("results.md"), &table);
    eprintln!("{table}\nrun folder: {}", run_dir.display());
    assert!(pass, "{PAIR} on {kernel} failed:\n{table}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: &str, qp: u32, psn: u32) -> String {
        format!("t 10.214.1.1.5 > 10.214.1.2.4791: RoCEv2 Rc {op} QP=0x{qp:06x} PSN={psn} A RETH ICRC ok\n")
    }

    fn ans(psn: u32, aeth: &str) -> String {
        format!("t 10.214.1.2.5 > 10.214.1.1.4791: RoCEv2 Rc ReadResponseOnly QP=0x000012 PSN={psn} AETH {aeth} MSN=1 len=0 ICRC ok\n")
    }

    #[test]
    fn every_request_needs_the_kernels_answer_as_the_phase_expects() {
        let host = "10.214.1.1";
        let ack = "Ack(CreditCode(31))";
        let mut d = String::new();
        for (i, op) in ["Flush", "Flush", "Flush", "Flush"].iter().enumerate() {
            d.push_str(&req(op, 0x11, i as u32));
        }
        for i in 0..3 {
            d.push_str(&ans(i, ack));
        }
        let want = [
            ("Flush", Answer::Ack),
            ("Flush", Answer::Ack),
            ("Flush", Answer::Ack),
            ("Flush", Answer::Nak),
        ];
        // The PERSISTENT FLUSH unanswered: fails.
        assert!(!check_phase(&frames(&d, host), 0x11, 0x12, &want).0);
        let mut nak = d.clone();
        nak.push_str(&ans(3, "Nak(RemoteAccessError)"));
        let (ok, text) = check_phase(&frames(&nak, host), 0x11, 0x12, &want);
        assert!(ok, "{text}");
        assert!(
            text.starts_with("0 ATOMIC_WRITE (0x1D) and 4 FLUSH (0x1C) requests in 4 frames"),
            "{text}"
        );
        // Another QP's requests are not this phase's.
        assert!(!check_phase(&frames(&nak, host), 0x12, 0x12, &want).0);
        // An ACK where a NAK was due fails.
        let mut wrong = d;
        wrong.push_str(&ans(3, ack));
        assert!(!check_phase(&frames(&wrong, host), 0x11, 0x12, &want).0);
    }

    #[test]
    fn an_unanswered_request_must_have_been_sent_eight_times() {
        let host = "10.214.1.1";
        let want = [("Flush", Answer::None)];
        let mut d = String::new();
        for _ in 0..SENDS_UNANSWERED - 1 {
            d.push_str(&req("Flush", 0x11, 7));
        }
        assert!(!check_phase(&frames(&d, host), 0x11, 0x12, &want).0);
        d.push_str(&req("Flush", 0x11, 7));
        let (ok, text) = check_phase(&frames(&d, host), 0x11, 0x12, &want);
        assert!(ok, "{text}");
        assert!(text.contains("the kernel's answers: none"), "{text}");
        // An answer with that PSN to another QP of rdma-emu's is not this phase's.
        let mut other = d.clone();
        other.push_str(&ans(7, "Ack(CreditCode(31))").replace("QP=0x000012", "QP=0x000013"));
        assert!(check_phase(&frames(&other, host), 0x11, 0x12, &want).0);
        d.push_str(&ans(7, "Ack(CreditCode(31))"));
        assert!(!check_phase(&frames(&d, host), 0x11, 0x12, &want).0);
    }

    #[test]
    fn the_phases_follow_the_two_findings() {
        let names: Vec<&str> = phases(false).iter().map(|p| p.name).collect();
        let flush = if RXE_TAKES_IBA_FLUSH {
            "flush"
        } else {
            "flush-unanswered"
        };
        assert_eq!(names, ["atomic_write", flush]);
    }
}
