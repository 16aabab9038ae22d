//! The machine's limits, measured in the same run as rdma-emu: single-core memcpy, UDP
//! throughput at RoCE datagram sizes (plain and GSO+GRO), and a busy-polling UDP round trip,
//! on loopback and between two namespaces over veth.
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
