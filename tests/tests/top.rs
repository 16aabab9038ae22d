//! `rdma-emu top` in a real terminal (tmux) while ibv_rc_pingpong runs: the frame shows
//! the device, both QPs in RTS with their peer, and packet rates that are not zero.
use rdma_emu_tests::*;
use std::process::Command;
use std::time::{Duration, Instant};

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("tmux: {e}"));
    assert!(
        out.status.success(),
        "tmux {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Kills the tmux session on drop.
struct Session(String);

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .output();
    }
}

/// The QP rows of a captured frame (lines that start with a QP number).
fn qp_rows(screen: &str) -> Vec<Vec<String>> {
    screen
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|w| w.len() >= 17 && w[0].parse::<u32>().is_ok())
        .collect()
}

#[test]
fn top_shows_live_qps_in_a_terminal() {
    let _s = serial();
    if missing(&["ibv_rc_pingpong", "tmux"]) {
        return;
    }
    let daemon = Daemon::start();
    let gid = daemon.ipv4_gid_index(None);
    let server = [
        "ibv_rc_pingpong",
        "-d",
        "rxe0",
        "-g",
        &gid,
        "-n",
        "100000000",
        "-p",
        "18519",
    ];
    let mut client = server.to_vec();
    client.push("127.0.0.1");
    let mut srv = daemon.program(None, &server);
    assert!(wait_listening(None, 18519, Duration::from_secs(20)));
    let mut cli = daemon.program(None, &client);
    let name = format!("rdmaemu-top-{}", std::process::id());
    let command = format!(
        "{} --socket {} top --interval 0.3",
        bin_dir().join("rdma-emu").display(),
        daemon.socket.display()
    );
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &name,
        "-x",
        "200",
        "-y",
        "40",
        &command,
    ]);
    let _session = Session(name.clone());
    let start = Instant::now();
    let screen = loop {
        std::thread::sleep(Duration::from_millis(300));
        let screen = tmux(&["capture-pane", "-p", "-t", &name]);
        let rows = qp_rows(&screen);
        let live = rows.len() == 2
            && rows
                .iter()
                .all(|r| r[4] == "RTS" && r[13].parse::<u64>().is_ok_and(|v| v > 0));
        if live {
            break screen;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no live frame in 20 s:\n{screen}"
        );
    };
    srv.kill9();
    cli.kill9();
    let _ = (
        srv.wait(Duration::from_secs(5)),
        cli.wait(Duration::from_secs(5)),
    );
    assert!(
        screen.contains("rdma-emu top: 2 device(s), 2 QP(s)"),
        "{screen}"
    );
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("rxe0") && l.contains("ACTIVE")),
        "{screen}"
    );
    let rows = qp_rows(&screen);
    // Each QP's peer is the other one, at the device's own address.
    assert_eq!(rows[0][6], rows[1][0], "{screen}");
    assert_eq!(rows[1][6], rows[0][0], "{screen}");
    assert!(rows.iter().all(|r| r[5] == "127.0.0.1:4791"), "{screen}");
}
