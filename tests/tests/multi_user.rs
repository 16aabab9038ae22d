//! Two users, one system daemon (issue 24; `docs/daemon.md`, "A daemon for every user").
//!
//! As root: one daemon in a private network namespace, its socket open to every user
//! (`--socket-mode 666`). Two unprivileged uids that have no account (61001, 61002; the
//! processes get them with `setpriv`) run `ibv_rc_pingpong` and `ib_write_bw` at once.
//! Meanwhile user A keeps a registered buffer with remote access and a QP, and a hostile
//! client of user B, speaking the wire protocol directly, tries A's pid, memory, handles,
//! QPN, rkey, lkey and address range, and its own rings gone wild: each attempt gets the
//! error a kernel RNIC gives (ENOENT for another client's handle, a remote access error
//! completion for A's rkey, retries exceeded towards A's unconnected QP), and A's buffer
//! and QP are unchanged afterwards. The privileged CLI commands are refused to B, allowed
//! to a member of the admin group and to root.
//!
//! The clients are this test binary run again as the other users (`spawned_role`), with
//! the protocol client of the daemon's own tests (`emulator/tests/common`).

#[path = "../../emulator/tests/common/mod.rs"]
mod common;

use common::side::{pattern, wqe, Side, BUF};
use common::{errno, read_record};
use rdma_emu_tests::*;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use wire::client::proto::Handle;
use wire::client::slot::Sge;
use wire::client::verbs::{
    access, event_type, qp_attr_mask, qp_state, qp_type, wc_status, wr_opcode,
};
use wire::client::{
    AhAttr, AsyncEventRecord, QpAttr, QpCap, QpInitAttr, Reply, ReplyBody, Request, RequestBody,
    MAX_MESSAGE_LEN, PROTOCOL_VERSION,
};

/// Which part a spawned copy of this binary plays (`victim` or `hostile`).
const ROLE: &str = "RDMA_EMU_MULTI_USER_ROLE";
/// The victim's line, handed to the hostile client.
const VICTIM: &str = "RDMA_EMU_MULTI_USER_VICTIM";
const USER_A: u32 = 61001;
const USER_B: u32 = 61002;
const USER_ADMIN: u32 = 61003;
const ADMIN_GROUP: u32 = 61010;
const SEED: u8 = 0xa5;

/// What user A's client holds, as it tells the test.
#[derive(Debug, Clone, Copy)]
struct Victim {
    pid: u32,
    ctx: u32,
    pd: u32,
    cq: u32,
    qp: u32,
    qpn: u32,
    lkey: u32,
    rkey: u32,
    addr: u64,
    gid: [u8; 16],
}

impl Victim {
    fn line(&self) -> String {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "VICTIM {} {} {} {} {} {} {} {} {} {gid}",
            self.pid,
            self.ctx,
            self.pd,
            self.cq,
            self.qp,
            self.qpn,
            self.lkey,
            self.rkey,
            self.addr
        )
    }

    fn parse(line: &str) -> Option<Victim> {
        let w: Vec<&str> = line.strip_prefix("VICTIM ")?.split(' ').collect();
        let n = |i: usize| w.get(i)?.parse::<u64>().ok();
        let hex = w.get(9)?;
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Victim {
            pid: n(0)? as u32,
            ctx: n(1)? as u32,
            pd: n(2)? as u32,
            cq: n(3)? as u32,
            qp: n(4)? as u32,
            qpn: n(5)? as u32,
            lkey: n(6)? as u32,
            rkey: n(7)? as u32,
            addr: n(8)?,
            gid,
        })
    }
}

/// Runs nothing unless this binary was spawned by `two_users_share_one_system_daemon` to
/// play a user's client.
#[test]
fn spawned_role() {
    match std::env::var(ROLE).as_deref() {
        Ok("victim") => victim(),
        Ok("hostile") => hostile(),
        _ => {}
    }
}

fn socket() -> std::path::PathBuf {
    std::env::var_os("RDMA_EMU_SOCKET")
        .expect("RDMA_EMU_SOCKET")
        .into()
}

/// User A: a buffer with remote access, a QP left in RESET; tells the test about them,
/// waits, then checks that nothing of it changed.
fn victim() {
    let mut a = Side::build_at(&socket(), qp_type::RC, false, false);
    a.fill(0, BUF, SEED);
    let v = Victim {
        pid: std::process::id(),
        ctx: a.ctx.handle.0,
        pd: a.pd.0,
        cq: a.cq_h.0,
        qp: a.qp.0,
        qpn: a.qpn,
        lkey: a.lkey,
        rkey: a.rkey,
        addr: a.addr(0),
        gid: a.gid,
    };
    println!("{}", v.line());
    std::io::stdout().flush().expect("stdout");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("stdin");
    assert!(
        a.read(0, BUF) == pattern(BUF, SEED),
        "user A's buffer changed"
    );
    let body =
        a.c.call(RequestBody::QueryQp { qp: a.qp, mask: 0 }, &[])
            .expect("A's QP is still A's")
            .0;
    let ReplyBody::QpAttrs { attr, .. } = body else {
        panic!("{body:?}")
    };
    assert_eq!(attr.qp_state, qp_state::RESET, "user A's QP was moved");
    println!("VICTIM-UNCHANGED");
}

/// Sends one request on a raw connection and returns the daemon's answer.
fn raw_call(sock: &std::os::fd::OwnedFd, body: RequestBody) -> Result<ReplyBody, i32> {
    let bytes = Request { seq: 1, body }.encode().expect("encode");
    emulator::daemon::sys::send_msg(sock.as_raw_fd(), &bytes, &[]).expect("send");
    let mut buf = vec![0u8; MAX_MESSAGE_LEN];
    let got = common::wait_for(Duration::from_secs(10), || {
        emulator::daemon::sys::recv_msg(sock.as_raw_fd(), &mut buf)
            .expect("recv")
            .map(|g| g.len)
    })
    .expect("a reply");
    Reply::decode(&buf[..got]).expect("reply").result
}

fn qp_init(cq: Handle) -> QpInitAttr {
    QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: qp_type::RC,
        sq_sig_all: false,
    }
}

/// Two of user B's QPs connected to each other.
fn pair_of_b() -> (Side, Side) {
    let mut x = Side::build_at(&socket(), qp_type::RC, false, false);
    let mut y = Side::build_at(&socket(), qp_type::RC, false, false);
    let (xq, xg, yq, yg) = (x.qpn, x.gid, y.qpn, y.gid);
    x.connect(yq, yg);
    y.connect(xq, xg);
    (x, y)
}

/// User B: everything of A's it can name, through every door it has.
fn hostile() {
    let v = Victim::parse(&std::env::var(VICTIM).expect("the victim's line")).expect("victim");
    // Claims about itself: A's pid, A's memory.
    let sock = emulator::daemon::sys::seqpacket_connect(&socket()).expect("connect");
    let hello = RequestBody::Hello {
        version: PROTOCOL_VERSION,
        pid: v.pid,
    };
    assert_eq!(
        raw_call(&sock, hello).err(),
        Some(libc::EPERM),
        "Hello as A"
    );
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{}/mem", v.pid));
    assert!(mem.is_err(), "the kernel lets B open A's memory");

    // A's handles, each where a request takes one: as if they did not exist.
    let mut b = Side::build_at(&socket(), qp_type::RC, false, false);
    let h = Handle;
    let attempts = [
        ("QueryDevice", RequestBody::QueryDevice { ctx: h(v.ctx) }),
        ("AllocPd", RequestBody::AllocPd { ctx: h(v.ctx) }),
        (
            "CreateCq in A's context",
            RequestBody::CreateCq {
                ctx: h(v.ctx),
                cqe: 4,
                channel: None,
                comp_vector: 0,
                timestamps: false,
            },
        ),
        (
            "RegMr in A's PD",
            RequestBody::RegMr {
                pd: h(v.pd),
                addr: b.addr(0),
                length: 4096,
                iova: b.addr(0),
                access: access::LOCAL_WRITE | access::REMOTE_WRITE,
                shared: Vec::new(),
            },
        ),
        (
            "CreateQp in A's PD",
            RequestBody::CreateQp {
                pd: h(v.pd),
                init: qp_init(b.cq_h),
            },
        ),
        (
            "CreateQp on A's CQ",
            RequestBody::CreateQp {
                pd: b.pd,
                init: qp_init(h(v.cq)),
            },
        ),
        (
            "CreateAh in A's PD",
            RequestBody::CreateAh {
                pd: h(v.pd),
                attr: AhAttr::default(),
            },
        ),
        (
            "ModifyQp of A's QP",
            RequestBody::ModifyQp {
                qp: h(v.qp),
                attr: QpAttr {
                    qp_state: qp_state::ERR,
                    ..QpAttr::default()
                },
                mask: qp_attr_mask::STATE,
            },
        ),
        (
            "QueryQp of A's QP",
            RequestBody::QueryQp {
                qp: h(v.qp),
                mask: 0,
            },
        ),
        ("DestroyQp", RequestBody::DestroyQp { qp: h(v.qp) }),
        ("DestroyCq", RequestBody::DestroyCq { cq: h(v.cq) }),
        ("DeallocPd", RequestBody::DeallocPd { pd: h(v.pd) }),
        ("CloseDevice", RequestBody::CloseDevice { ctx: h(v.ctx) }),
    ];
    for (what, req) in attempts {
        assert_eq!(errno(b.c.call(req, &[])), libc::ENOENT, "{what}");
    }
    // A's memory range in B's own registration reaches B's address space only: nothing
    // is mapped there in B (EFAULT), or it is B's own memory.
    let own = b.c.call(
        RequestBody::RegMr {
            pd: b.pd,
            addr: v.addr,
            length: BUF as u64,
            iova: v.addr,
            access: access::LOCAL_WRITE | access::REMOTE_WRITE,
            shared: Vec::new(),
        },
        &[],
    );
    println!("HOSTILE RegMr over A's addresses in B: {own:?}");

    // A's QPN: B's QP connected to it. A's QP is not connected (RESET), so it drops
    // what B sends, as an RNIC does, and B's requester runs out of retries.
    b.connect_with(v.qpn, v.gid, 8, 1);
    let sge = [Sge {
        addr: b.addr(0),
        length: 64,
        lkey: b.lkey,
    }];
    let mut w = wqe(1, wr_opcode::RDMA_WRITE, &sge);
    w.remote_addr = v.addr;
    w.rkey = v.rkey;
    b.post_send(w);
    assert_eq!(
        b.poll().status,
        wc_status::RETRY_EXC_ERR,
        "write to A's QPN"
    );

    // A's rkey over B's own connection: the responder finds no such key in B's PD.
    let (x, _y) = pair_of_b();
    let own = sge_of(&x);
    let mut w = wqe(2, wr_opcode::RDMA_WRITE, &own);
    w.remote_addr = v.addr;
    w.rkey = v.rkey;
    x.post_send(w);
    assert_eq!(
        x.poll().status,
        wc_status::REM_ACCESS_ERR,
        "write with A's rkey"
    );
    let (x, _y) = pair_of_b();
    let own = sge_of(&x);
    let mut r = wqe(3, wr_opcode::RDMA_READ, &own);
    r.remote_addr = v.addr;
    r.rkey = v.rkey;
    x.post_send(r);
    assert_eq!(
        x.poll().status,
        wc_status::REM_ACCESS_ERR,
        "read with A's rkey"
    );
    // A's lkey and address in a local gather list: a local protection error.
    let (x, _y) = pair_of_b();
    let stolen = [Sge {
        addr: v.addr,
        length: 64,
        lkey: v.lkey,
    }];
    x.post_send(wqe(4, wr_opcode::SEND, &stolen));
    assert_eq!(
        x.poll().status,
        wc_status::LOC_PROT_ERR,
        "send from A's lkey"
    );

    // B's own ring indices gone wild: B's QP, and only it, goes to error.
    let z = Side::build_at(&socket(), qp_type::RC, false, false);
    z.rings.map.words()[(z.rings.layouts[0].offset / 8) as usize]
        .store(1 << 40, std::sync::atomic::Ordering::Release);
    emulator::daemon::sys::eventfd_signal(z.ctx.doorbell.as_raw_fd()).expect("doorbell");
    let rec = read_record(&z.ctx.async_fd, Duration::from_secs(10)).expect("an async event");
    assert_eq!(
        AsyncEventRecord::from_bytes(rec),
        AsyncEventRecord {
            event_type: event_type::QP_FATAL,
            element: z.qp.0
        }
    );
    println!("HOSTILE-DONE");
}

fn sge_of(s: &Side) -> [Sge; 1] {
    [Sge {
        addr: s.addr(0),
        length: 64,
        lkey: s.lkey,
    }]
}

/// `setpriv` arguments that make the rest of the command line run as `uid` (its own
/// primary group, and `groups` as supplementary groups).
fn as_user(uid: u32, groups: &[u32]) -> Vec<String> {
    let mut argv = vec![
        "setpriv".to_string(),
        format!("--reuid={uid}"),
        format!("--regid={uid}"),
    ];
    if groups.is_empty() {
        argv.push("--clear-groups".into());
    } else {
        let list: Vec<String> = groups.iter().map(u32::to_string).collect();
        argv.push(format!("--groups={}", list.join(",")));
    }
    argv
}

/// What the test's other users run (`rdma-emu`, the shim, this test binary for its
/// roles), copied into a folder every user may enter and removed with it: the build
/// folder may lie under one only root can enter (a checkout in a `mktemp -d` folder,
/// mode 0700), where another uid's exec fails with EACCES.
struct Staged(TempDir);

impl Staged {
    fn new() -> Staged {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new("multi-user-bin");
        let open = |p: &std::path::Path| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
                .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()))
        };
        open(dir.path());
        let copy = |from: &std::path::Path, to: &str| {
            std::fs::copy(from, dir.path().join(to))
                .unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
        };
        copy(&bin_dir().join("rdma-emu"), "rdma-emu");
        copy(&std::env::current_exe().expect("own path"), "multi_user");
        let lib = dir.path().join("lib");
        let out = Command::new("cp")
            .arg("-a")
            .arg(lib_dir())
            .arg(&lib)
            .output()
            .expect("cp");
        assert!(
            out.status.success(),
            "cp -a {}: {out:?}",
            lib_dir().display()
        );
        open(&lib);
        Staged(dir)
    }

    fn rdma_emu(&self) -> String {
        self.0.path().join("rdma-emu").display().to_string()
    }

    fn lib(&self) -> std::path::PathBuf {
        self.0.path().join("lib")
    }

    fn exe(&self) -> std::path::PathBuf {
        self.0.path().join("multi_user")
    }
}

/// An unmodified program run by `uid` in `ns` against the daemon, through `rdma-emu run`.
fn user_program(st: &Staged, ns: &Netns, d: &Daemon, uid: u32, argv: &[&str]) -> Child {
    let mut full = ns.exec_prefix();
    // A program that hangs is killed, and its pair then fails, instead of the test hanging.
    full.extend(["timeout".into(), "300".into()]);
    full.extend(as_user(uid, &[]));
    full.push(st.rdma_emu());
    full.extend(["run".into(), "--no-device-view".into(), "--".into()]);
    full.extend(argv.iter().map(|s| s.to_string()));
    Command::new(&full[0])
        .args(&full[1..])
        .env("RDMA_EMU_SOCKET", &d.socket)
        .env("RDMA_EMU_LIB_DIR", st.lib())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {argv:?}: {e}"))
}

/// A server/client pair of `program` run by `uid` on `port`; panics unless both succeed.
fn user_pair(st: &Staged, ns: &Netns, d: &Daemon, uid: u32, port: u16, program: &[&str]) {
    let p = port.to_string();
    let mut server: Vec<&str> = program.to_vec();
    server.extend(["-p", &p]);
    let srv = user_program(st, ns, d, uid, &server);
    assert!(
        wait_listening(Some(ns), port, Duration::from_secs(30)),
        "{program:?} of uid {uid} never listened"
    );
    let mut client = server.clone();
    client.push("127.0.0.1");
    let c = user_program(st, ns, d, uid, &client)
        .wait_with_output()
        .expect("client");
    let s = srv.wait_with_output().expect("server");
    for (what, out) in [("server", &s), ("client", &c)] {
        assert!(
            out.status.success(),
            "{program:?} {what} of uid {uid} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// This test binary again, as `uid`, playing `role`.
fn spawn_role(st: &Staged, d: &Daemon, uid: u32, role: &str, victim: Option<&str>) -> Child {
    let mut cmd = Command::new(st.exe());
    cmd.args(["--exact", "spawned_role", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env("RDMA_EMU_SOCKET", &d.socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .uid(uid)
        .gid(uid);
    if let Some(v) = victim {
        cmd.env(VICTIM, v);
    }
    cmd.spawn().expect("spawn a role")
}

/// `rdma-emu ARGS` as `uid` (with supplementary `groups`), or as root (`None`).
fn cli_as(
    st: &Staged,
    d: &Daemon,
    who: Option<(u32, &[u32])>,
    args: &[&str],
) -> std::process::Output {
    let mut argv: Vec<String> = who.map(|(u, g)| as_user(u, g)).unwrap_or_default();
    argv.push(st.rdma_emu());
    argv.extend(["--socket".into(), d.socket.display().to_string()]);
    argv.extend(args.iter().map(|s| s.to_string()));
    Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .expect("rdma-emu")
}

#[test]
fn two_users_share_one_system_daemon() {
    if std::env::var_os(ROLE).is_some() {
        return;
    }
    let _s = serial();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let _ = cannot_run("several users need root (setuid to unused uids)");
        return;
    }
    if missing(&["ibv_rc_pingpong", "ib_write_bw", "setpriv"]) {
        return;
    }
    let Some(ns) = loopback_ns("mu", false) else {
        return;
    };
    let st = Staged::new();
    let admin_group = ADMIN_GROUP.to_string();
    let d = Daemon::start_with(
        Some(&ns),
        &["--socket-mode", "666", "--admin-group", &admin_group],
    );

    // User A's victim client, then B's hostile one while both users' programs run.
    let mut victim = spawn_role(&st, &d, USER_A, "victim", None);
    let mut lines = BufReader::new(victim.stdout.take().expect("stdout")).lines();
    // The test harness may print its own words before the role's on the same line.
    let Some(line) = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.find("VICTIM ").map(|at| l[at..].to_string()))
    else {
        let out = victim.wait_with_output().expect("victim");
        panic!(
            "the victim said nothing:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let v = Victim::parse(&line).expect("the victim's line");
    let hostile = spawn_role(&st, &d, USER_B, "hostile", Some(&line));
    std::thread::scope(|scope| {
        let a = scope.spawn(|| {
            user_pair(
                &st,
                &ns,
                &d,
                USER_A,
                18611,
                &["ibv_rc_pingpong", "-d", "rxe0", "-g", "0", "-n", "200"],
            )
        });
        let b = scope.spawn(|| {
            user_pair(
                &st,
                &ns,
                &d,
                USER_B,
                18612,
                &["ib_write_bw", "-d", "rxe0", "-F"],
            )
        });
        a.join().expect("user A's ibv_rc_pingpong");
        b.join().expect("user B's ib_write_bw");
    });
    let out = hostile.wait_with_output().expect("hostile");
    assert!(
        out.status.success(),
        "user B's hostile client reached something of A's, or failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("HOSTILE-DONE"));

    // Privileged commands: refused to B, with the reason, and counted.
    let b: Option<(u32, &[u32])> = Some((USER_B, &[]));
    let kill = v.qpn.to_string();
    let refused = [
        vec!["link", "add", "siw9", "type", "siw", "netdev", "lo"],
        vec!["link", "del", "rxe0"],
        vec!["fault", "add", "rxe0", "drop", "100%"],
        vec!["fault", "add", "rxe0", "kill-qp", &kill],
        vec!["fault", "add", "rxe0", "link", "down"],
        vec!["fault", "clear"],
    ];
    for args in &refused {
        let out = cli_as(&st, &d, b, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("a privileged command"),
            "`rdma-emu {}` as user B: {} {err}",
            args.join(" "),
            out.status
        );
    }
    let pcap = std::env::temp_dir().join(format!("rdma-emu-mu-{}.pcap", std::process::id()));
    let out = cli_as(
        &st,
        &d,
        b,
        &["capture", "rxe0", &pcap.display().to_string(), "-c", "1"],
    );
    assert!(!out.status.success(), "capture as user B");
    let _ = std::fs::remove_file(&pcap);
    assert_eq!(
        d.counter(Some(&ns), "rxe0", "refused_privileged"),
        refused.len() as u64 + 1,
        "every refusal is counted, the capture's too"
    );
    // The hostile client's Hello as A.
    assert_eq!(d.counter(Some(&ns), "rxe0", "refused_credentials"), 1);
    // Reading is for everyone.
    assert!(cli_as(&st, &d, b, &["link", "show"]).status.success());
    assert!(cli_as(&st, &d, b, &["fault", "list"]).status.success());

    // Nothing of A's changed: its buffer and its QP's state.
    let mut stdin = victim.stdin.take().expect("stdin");
    writeln!(stdin, "check").expect("tell the victim");
    drop(stdin);
    let said: Vec<String> = lines.map_while(Result::ok).collect();
    let status = victim.wait().expect("victim");
    assert!(
        status.success() && said.iter().any(|l| l.contains("VICTIM-UNCHANGED")),
        "user A's objects changed ({status}):\n{}",
        said.join("\n")
    );

    // A member of the admin group, and root, may.
    let admin: Option<(u32, &[u32])> = Some((USER_ADMIN, &[ADMIN_GROUP]));
    for (who, name) in [(admin, "siw8"), (None, "siw9")] {
        for args in [
            vec!["link", "add", name, "type", "siw", "netdev", "lo"],
            vec!["link", "del", name],
            vec!["fault", "add", "rxe0", "delay", "1ms"],
            vec!["fault", "clear"],
        ] {
            let out = cli_as(&st, &d, who, &args);
            assert!(
                out.status.success(),
                "`rdma-emu {}` as {who:?}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    assert!(!d.log_text().contains("panicked"), "{}", d.log_text());
}

/// A system daemon at `/run/rdma-emu/rdma-emud.sock`, started without `--socket`
/// (systemd gives system services no `XDG_RUNTIME_DIR`), creates its directory so that
/// every user may reach the socket, and a user's program finds it with no setting.
#[test]
fn a_system_daemon_is_found_by_any_user_without_settings() {
    if std::env::var_os(ROLE).is_some() {
        return;
    }
    let _s = serial();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let _ = cannot_run("the system daemon's directory /run/rdma-emu needs root");
        return;
    }
    let dir = std::path::Path::new(wire::client::SYSTEM_SOCKET_DIR);
    if dir.exists() {
        let _ = cannot_run("/run/rdma-emu exists: a system daemon may run here; not touching it");
        return;
    }
    let Some(ns) = loopback_ns("mus", false) else {
        return;
    };
    let st = Staged::new();
    let mut argv = ns.exec_prefix();
    argv.extend(["env", "-u", "RDMA_EMU_SOCKET", "-u", "XDG_RUNTIME_DIR"].map(String::from));
    argv.push(bin_dir().join("rdma-emud").display().to_string());
    argv.extend(["--socket-mode", "666"].map(String::from));
    let mut daemon = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("rdma-emud");
    let socket = dir.join(wire::client::SOCKET_FILE);
    let up = common::wait_for(Duration::from_secs(20), || socket.exists().then_some(()));
    let mode = std::fs::metadata(dir).map(|m| {
        use std::os::unix::fs::PermissionsExt;
        m.permissions().mode() & 0o777
    });
    let mut user = as_user(USER_B, &[]);
    user.extend(["env", "-u", "RDMA_EMU_SOCKET"].map(String::from));
    user.push(format!("XDG_RUNTIME_DIR=/run/user/{USER_B}"));
    user.push(st.rdma_emu());
    user.extend(["link", "show"].map(String::from));
    let out = Command::new(&user[0]).args(&user[1..]).output();
    // SAFETY: kill(2) on our own child's pid; SIGTERM makes it remove its socket.
    unsafe { libc::kill(daemon.id() as libc::pid_t, libc::SIGTERM) };
    let _ = daemon.wait();
    let _ = std::fs::remove_dir(dir);
    assert!(
        up.is_some(),
        "the daemon made no socket at {}",
        socket.display()
    );
    assert_eq!(
        mode.ok(),
        Some(0o711),
        "searchable by all, listable by none"
    );
    let out = out.expect("rdma-emu");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("rxe0"),
        "user B did not reach the system daemon: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A per-user limit as an unmodified program meets it: with `max_qps = 3`, a user's
/// `ibv_rc_pingpong` pair (two QPs) runs, the same user's `ib_write_bw -q 4` cannot create
/// its QPs (EAGAIN, as the kernel's rdma cgroup answers) and ends with an error instead of
/// hanging, the refusal is counted, and the QPs it did create come back when it exits:
/// the pair runs again.
#[test]
fn a_per_user_limit_refuses_an_unmodified_program() {
    if std::env::var_os(ROLE).is_some() {
        return;
    }
    let _s = serial();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let _ = cannot_run("running as another user needs root");
        return;
    }
    if missing(&["ibv_rc_pingpong", "ib_write_bw", "setpriv"]) {
        return;
    }
    let Some(ns) = loopback_ns("mul", false) else {
        return;
    };
    let st = Staged::new();
    let dir = TempDir::new("user-limits");
    let cfg = dir.path().join("limits.toml");
    std::fs::write(&cfg, "[user_limits]\nmax_qps = 3\n").expect("write the configuration");
    let cfg = cfg.display().to_string();
    let d = Daemon::start_with(Some(&ns), &["--socket-mode", "666", "--config", &cfg]);
    let pingpong = ["ibv_rc_pingpong", "-d", "rxe0", "-g", "0", "-n", "100"];
    user_pair(&st, &ns, &d, USER_A, 18561, &pingpong);
    let before = d.counter(Some(&ns), "rxe0", "user_limit_refusals");
    let server = ["ib_write_bw", "-d", "rxe0", "-q", "4", "-p", "18562"];
    let srv = user_program(&st, &ns, &d, USER_A, &server);
    assert!(
        wait_listening(Some(&ns), 18562, Duration::from_secs(30)),
        "ib_write_bw never listened"
    );
    let mut client = server.to_vec();
    client.push("127.0.0.1");
    let c = user_program(&st, &ns, &d, USER_A, &client)
        .wait_with_output()
        .expect("client");
    let s = srv.wait_with_output().expect("server");
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert!(
        !s.status.success() || !c.status.success(),
        "ib_write_bw -q 4 ran past max_qps = 3:\n{}\n{}",
        text(&s),
        text(&c)
    );
    assert!(
        text(&s).contains("Unable to create QP") || text(&c).contains("Unable to create QP"),
        "ib_write_bw should say it could not create a QP:\n{}\n{}",
        text(&s),
        text(&c)
    );
    assert!(
        d.counter(Some(&ns), "rxe0", "user_limit_refusals") > before,
        "the refusal was not counted"
    );
    user_pair(&st, &ns, &d, USER_A, 18563, &pingpong);
}
