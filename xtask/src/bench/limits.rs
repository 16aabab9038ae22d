//! The machine's limits, measured in the same run as rdma-emu: single-core memcpy, UDP
//! throughput at RoCE datagram sizes (plain and GSO+GRO), and a busy-polling UDP round trip,
//! on loopback and between two namespaces over veth.
use super::figure::Figure;
use super::perftest::Placement;
use super::site::Net;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const MEASURE: Duration = Duration::from_secs(2);

/// Best of several 64 MiB copies on one core, in GB/s (10^9 bytes per second).
pub fn memcpy_gbps() -> f64 {
    const LEN: usize = 64 << 20;
    let src = vec![0x5au8; LEN];
    let mut dst = vec![0u8; LEN];
    let mut best = f64::MAX;
    for _ in 0..10 {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    LEN as f64 / best / 1e9
}

fn setsockopt_int(sock: &UdpSocket, level: i32, name: i32, value: i32) -> Result<(), String> {
    // SAFETY: the option value is a valid c_int that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "setsockopt({level}, {name}): {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// Binds a UDP socket to `addr` inside network namespace `ns` (`None`: this one). A socket
/// belongs to the namespace it was created in, so a thread enters the namespace, creates
/// it and ends; the socket is then used from any thread.
pub fn bind_in(ns: Option<&str>, addr: &str) -> Result<UdpSocket, String> {
    let Some(ns) = ns else {
        return UdpSocket::bind(addr).map_err(|e| format!("bind {addr}: {e}"));
    };
    let path = format!("/var/run/netns/{ns}");
    let addr = addr.to_string();
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: the descriptor is a namespace file that stays open through the call; only
        // this short-lived thread changes namespace.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(format!("setns {path}: {}", std::io::Error::last_os_error()));
        }
        UdpSocket::bind(&addr).map_err(|e| format!("bind {addr}: {e}"))
    })
    .join()
    .map_err(|_| "the namespace thread panicked".to_string())?
}

fn addr_of(s: &UdpSocket) -> Result<SocketAddr, String> {
    s.local_addr().map_err(|e| e.to_string())
}

/// One sender thread and one receiver thread for `MEASURE`; bytes received per second in
/// GB/s. Datagrams are `size` bytes; with `gso` the sender hands the kernel as many as fit
/// in one 64 KiB send (UDP_SEGMENT) and the receiver takes coalesced ones (UDP_GRO).
pub fn udp_throughput(rx: UdpSocket, tx: UdpSocket, size: usize, gso: bool) -> Result<f64, String> {
    tx.connect(addr_of(&rx)?).map_err(|e| e.to_string())?;
    setsockopt_int(&rx, libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20)?;
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| e.to_string())?;
    // A GSO send is one UDP datagram of at most 65507 bytes before segmentation.
    let batch = if gso { 65507 / size } else { 1 };
    if gso {
        setsockopt_int(&tx, libc::SOL_UDP, libc::UDP_SEGMENT, size as i32)?;
        setsockopt_int(&rx, libc::SOL_UDP, libc::UDP_GRO, 1)?;
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let sender = std::thread::spawn(move || {
        let buf = vec![7u8; size * batch];
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = tx.send(&buf);
        }
    });
    let mut buf = vec![0u8; 65536];
    let start = Instant::now();
    let mut bytes = 0usize;
    while start.elapsed() < MEASURE {
        if let Ok(n) = rx.recv(&mut buf) {
            bytes += n;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = sender.join();
    Ok(bytes as f64 / secs / 1e9)
}

/// Median round trip of a 2-byte UDP ping-pong between two threads that spin on
/// non-blocking sockets, in microseconds.
pub fn udp_busy_rtt_us(a: UdpSocket, b: UdpSocket) -> Result<f64, String> {
    a.connect(addr_of(&b)?).map_err(|e| e.to_string())?;
    b.connect(addr_of(&a)?).map_err(|e| e.to_string())?;
    a.set_nonblocking(true).map_err(|e| e.to_string())?;
    b.set_nonblocking(true).map_err(|e| e.to_string())?;
    const ROUNDS: usize = 20000;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 16];
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            if b.recv(&mut buf).is_ok() {
                let _ = b.send(&buf[..2]);
            }
        }
    });
    // A round whose reply has not come after 100 ms is counted as lost and left out (a
    // loaded machine can drop a datagram between namespaces: veth's backlog is finite);
    // a reply that comes later is taken by the next round, which then reads short, once.
    const LOST_AFTER: Duration = Duration::from_millis(100);
    let result = (|| {
        let mut samples = Vec::with_capacity(ROUNDS);
        let mut lost = 0;
        let mut buf = [0u8; 16];
        for _ in 0..ROUNDS {
            let t = Instant::now();
            a.send(&[1, 2]).map_err(|e| e.to_string())?;
            loop {
                if a.recv(&mut buf).is_ok() {
                    samples.push(t.elapsed().as_secs_f64() * 1e6);
                    break;
                }
                if t.elapsed() > LOST_AFTER {
                    lost += 1;
                    break;
                }
            }
            if lost > ROUNDS / 100 {
                return Err(format!("UDP ping-pong lost {lost} datagrams"));
            }
        }
        if lost > 0 {
            println!("UDP ping-pong: {lost} of {ROUNDS} rounds lost, left out");
        }
        samples.sort_by(f64::total_cmp);
        Ok(samples[samples.len() / 2])
    })();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = echo.join();
    result
}

/// A RoCE v2 packet at a 4096-byte path MTU: BTH (12) + RETH (16) + payload + ICRC (4).
pub const ROCE_DATAGRAM_LO: usize = 4096 + 12 + 16 + 4;

/// The same at veth's 1024-byte path MTU (interface MTU 1500).
pub const ROCE_DATAGRAM_VETH: usize = 1024 + 12 + 16 + 4;

/// The limits measured in this run.
pub struct Limits {
    pub memcpy: f64,
    pub udp_lo: Figure,
    pub udp_lo_gso: Figure,
    pub rtt_lo: Figure,
    pub udp_veth: Figure,
    pub udp_veth_gso: Figure,
    pub rtt_veth: Figure,
}

impl Limits {
    pub fn udp_gso(&self, p: Placement) -> &Figure {
        match p {
            Placement::OneHost => &self.udp_lo_gso,
            Placement::TwoNamespaces => &self.udp_veth_gso,
        }
    }
    pub fn rtt(&self, p: Placement) -> &Figure {
        match p {
            Placement::OneHost => &self.rtt_lo,
            Placement::TwoNamespaces => &self.rtt_veth,
        }
    }
}

pub fn measure_limits() -> Limits {
    let memcpy = memcpy_gbps();
    println!("memcpy 64 MiB, one core: {memcpy:.2} GB/s");
    let lo = || -> Result<_, String> {
        Ok((bind_in(None, "127.0.0.1:0")?, bind_in(None, "127.0.0.1:0")?))
    };
    let udp_lo = lo().and_then(|(a, b)| udp_throughput(a, b, ROCE_DATAGRAM_LO, false));
    let udp_lo_gso = lo().and_then(|(a, b)| udp_throughput(a, b, ROCE_DATAGRAM_LO, true));
    let rtt_lo = lo().and_then(|(a, b)| udp_busy_rtt_us(a, b));
    println!("UDP loopback {ROCE_DATAGRAM_LO} B: {udp_lo:.2?} GB/s, GSO+GRO {udp_gso:.2?} GB/s, busy RTT {rtt_lo:.2?} us", udp_gso = udp_lo_gso);
    let (udp_veth, udp_veth_gso, rtt_veth) = match Net::veth("limits") {
        Ok(net) => {
            let pair = |port: u16| -> Result<_, String> {
                Ok((
                    bind_in(Some(net.name(0)), &format!("{}:{port}", net.addrs[0]))?,
                    bind_in(Some(net.name(1)), &format!("{}:{port}", net.addrs[1]))?,
                ))
            };
            (
                pair(0).and_then(|(a, b)| udp_throughput(a, b, ROCE_DATAGRAM_VETH, false)),
                pair(0).and_then(|(a, b)| udp_throughput(a, b, ROCE_DATAGRAM_VETH, true)),
                pair(0).and_then(|(a, b)| udp_busy_rtt_us(a, b)),
            )
        }
        Err(e) => (Err(e.clone()), Err(e.clone()), Err(e)),
    };
    println!("UDP veth {ROCE_DATAGRAM_VETH} B: {udp_veth:.2?} GB/s, GSO+GRO {udp_veth_gso:.2?} GB/s, busy RTT {rtt_veth:.2?} us");
    Limits {
        memcpy,
        udp_lo,
        udp_lo_gso,
        rtt_lo,
        udp_veth,
        udp_veth_gso,
        rtt_veth,
    }
}
