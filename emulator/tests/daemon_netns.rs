//! Two daemons in two network namespaces joined by a veth pair, as two hosts: RC traffic
//! between a client of each, over IPv4 and over IPv6 link-local GIDs. Skips (with a
//! message) where network namespaces cannot be made (not root, no `ip`).

mod common;

use common::side::*;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use wire::client::slot::Sge;
use wire::client::verbs::{qp_type, wc_opcode, wc_status, wr_opcode};

const EMUD: &str = env!("CARGO_BIN_EXE_rdma-emud");

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Two namespaces with a veth pair, two daemons; removed on drop.
struct TwoHosts {
    ns: [String; 2],
    daemons: Vec<Child>,
    sockets: [PathBuf; 2],
    dir: PathBuf,
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        for ns in &self.ns {
            ip(&["netns", "del", ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn two_hosts(tag: &str) -> Option<TwoHosts> {
    let pid = std::process::id();
    let ns = [format!("remu-{pid}-{tag}-a"), format!("remu-{pid}-{tag}-b")];
    let dir = std::env::temp_dir().join(format!("rdma-emu-netns-{pid}-{tag}"));
    std::fs::create_dir_all(&dir).ok()?;
    let sockets = [dir.join("a.sock"), dir.join("b.sock")];
    let mut hosts = TwoHosts {
        ns: ns.clone(),
        daemons: Vec::new(),
        sockets,
        dir,
    };
    let (a, b) = (ns[0].as_str(), ns[1].as_str());
    let net = 10 + (pid % 200) as u8;
    let (addr_a, addr_b) = (format!("10.{net}.77.1/24"), format!("10.{net}.77.2/24"));
    let ok = ip(&["netns", "add", a])
        && ip(&["netns", "add", b])
        && ip(&["-n", a, "link", "set", "lo", "up"])
        && ip(&["-n", b, "link", "set", "lo", "up"])
        && ip(&[
            "link", "add", "vemu0", "netns", a, "type", "veth", "peer", "name", "vemu1", "netns", b,
        ])
        && ip(&["-n", a, "addr", "add", &addr_a, "dev", "vemu0"])
        && ip(&["-n", b, "addr", "add", &addr_b, "dev", "vemu1"])
        && ip(&["-n", a, "link", "set", "vemu0", "up"])
        && ip(&["-n", b, "link", "set", "vemu1", "up"]);
    if !ok {
        eprintln!(
            "SKIP: cannot create network namespaces and a veth pair (needs root and iproute2)"
        );
        return None;
    }
    // Wait for IPv6 duplicate address detection, so the link-local GID is served too.
    for n in [a, b] {
        let dev = if n == a { "vemu0" } else { "vemu1" };
        let settled = wait_for(Duration::from_secs(5), || {
            let out = Command::new("ip")
                .args(["-n", n, "-6", "addr", "show", "dev", dev, "tentative"])
                .output()
                .ok()?;
            out.stdout.is_empty().then_some(())
        });
        if settled.is_none() {
            eprintln!("note: IPv6 DAD still running in {n}");
        }
    }
    for (i, (n, dev)) in [(a, "vemu0"), (b, "vemu1")].into_iter().enumerate() {
        let child = Command::new("ip")
            .args(["netns", "exec", n, EMUD, "--netdev", dev, "--socket"])
            .arg(&hosts.sockets[i])
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        hosts.daemons.push(child);
        let up = wait_for(Duration::from_secs(10), || {
            Path::new(&hosts.sockets[i]).exists().then_some(())
        });
        assert!(up.is_some(), "daemon in {n} starts");
    }
    Some(hosts)
}

fn is_v4_mapped(g: &[u8; 16]) -> bool {
    g[..10] == [0; 10] && g[10..12] == [0xff, 0xff]
}

fn is_link_local(g: &[u8; 16]) -> bool {
    g[0] == 0xfe && g[1] & 0xc0 == 0x80
}

fn rc_between_hosts(h: &TwoHosts, pick: fn(&[u8; 16]) -> bool) -> bool {
    let mut a = Side::build_at(&h.sockets[0], qp_type::RC, false, false);
    let mut b = Side::build_at(&h.sockets[1], qp_type::RC, false, false);
    if !a.use_gid(pick) || !b.use_gid(pick) {
        return false;
    }
    let (aq, ag, bq, bg) = (a.qpn, a.gid, b.qpn, b.gid);
    a.connect(bq, bg);
    b.connect(aq, ag);
    b.post_recv(1, 0, 8192);
    a.fill(0, 5000, 3);
    let sge = [Sge {
        addr: a.addr(0),
        length: 5000,
        lkey: a.lkey,
    }];
    a.post_send(wqe(1, wr_opcode::SEND, &sge));
    let rc = b.poll();
    assert_eq!((rc.status, rc.byte_len), (wc_status::SUCCESS, 5000));
    assert_eq!(a.poll().status, wc_status::SUCCESS);
    assert_eq!(b.read(0, 5000), pattern(5000, 3));
    b.fill(16384, 7000, 4);
    let sge = [Sge {
        addr: a.addr(32768),
        length: 7000,
        lkey: a.lkey,
    }];
    let mut r = wqe(2, wr_opcode::RDMA_READ, &sge);
    r.remote_addr = b.addr(16384);
    r.rkey = b.rkey;
    a.post_send(r);
    let c = a.poll();
    assert_eq!(
        (c.status, c.opcode),
        (wc_status::SUCCESS, wc_opcode::RDMA_READ)
    );
    assert_eq!(a.read(32768, 7000), pattern(7000, 4));
    true
}

#[test]
fn two_daemons_in_two_namespaces_talk_rc_over_ipv4_and_ipv6_link_local() {
    let Some(h) = two_hosts("rc") else { return };
    assert!(
        rc_between_hosts(&h, is_v4_mapped),
        "both daemons serve an IPv4-mapped GID"
    );
    if !rc_between_hosts(&h, is_link_local) {
        eprintln!("note: no IPv6 link-local GID served (DAD not finished); IPv6 part skipped");
    }
}
