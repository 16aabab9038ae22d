//! Lossless mode on the AF_PACKET backend: IEEE 802.3 PAUSE and 802.1Qbb PFC frames
//! received from the link partner stop the device's transmissions.
//!
//! - One more AF_PACKET socket per `backend packet` device, bound to EtherType 0x8808
//!   (MAC Control) on the interface, with a classic BPF filter passing only frames to
//!   01-80-C2-00-00-01, and that address added to the interface's multicast list. (A real
//!   NIC usually consumes pause frames in hardware and never shows them to the host; on
//!   veth and most virtual links they arrive like any frame.)
//! - Each frame is parsed by [`wire::mac_control`]; a PAUSE stops every priority, a PFC
//!   frame the priorities its enable vector names, each for its quanta of 512 bit times
//!   at the link's speed: `/sys/class/net/IFACE/speed` when the device is added (a veth
//!   reports 10000), or when the interface reports none (down, tun, loopback) the device's
//!   `[device.dcqcn] max_rate_mbps` when set, else [`DEFAULT_LINK_BPS`] (10 Gbit/s: 65535
//!   quanta ≈ 3.36 ms). Quanta 0 resumes at once; a new frame restarts the priority's
//!   timer. A pause is timed from when the daemon reads the frame.
//! - What to stop is the core's business (`emu_core::Device::pause_priority`): it holds the
//!   packets of the QPs in a paused priority (DSCP >> 3) and lets the others go on.
//!
//! Frames that are short, of another MAC Control opcode, or misaddressed are counted and
//! ignored.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};
use wire::mac_control::{self, Repr, QUANTUM_BITS};

/// The link speed pause quanta are timed at when the interface reports none.
pub const DEFAULT_LINK_BPS: u64 = 10_000_000_000;

/// The epoll slot index of a device's pause socket (just below the multicast sockets'
/// range, far above any GID index).
pub const PAUSE_SOCKET: usize = super::datagram::MCAST_BASE - 1;

/// The Linux protocol number of MAC Control frames (`ETH_P_PAUSE`).
const ETH_P_PAUSE: u16 = mac_control::ETHERTYPE;

/// What pause frames did to the device (`rdma-emu stat`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PauseCounters {
    /// 802.3 PAUSE frames received (opcode 0x0001).
    pub rx_pause: u64,
    /// 802.1Qbb PFC frames received (opcode 0x0101).
    pub rx_pfc: u64,
    /// MAC Control frames ignored: short, misaddressed or of another opcode.
    pub rx_malformed: u64,
    /// Time at least one priority was paused, in microseconds.
    pub paused_us: u64,
}

/// The link speed `netdev` reports (`/sys/class/net/NAME/speed`, in Mbit/s), if any.
pub fn link_speed_bps(netdev: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{netdev}/speed")).ok()?;
    // Links that are down, tun and others report -1 (SPEED_UNKNOWN) or fail to read.
    match s.trim().parse::<i64>() {
        Ok(mbps) if mbps > 0 => Some(mbps as u64 * 1_000_000),
        _ => None,
    }
}

/// Which priorities are paused and until when, as this device's receiver of pause
/// frames saw them; and the counters.
#[derive(Debug)]
pub struct PauseState {
    /// Duration of one quantum, in nanoseconds (512 bit times).
    quantum_ns: u64,
    until: [Option<Instant>; 8],
    /// Paused time is counted up to here.
    counted_to: Instant,
    paused_ns: u128,
    counters: PauseCounters,
}

impl PauseState {
    /// State for a link of `link_bps` bits per second, nothing paused.
    pub fn new(link_bps: u64, now: Instant) -> PauseState {
        PauseState {
            quantum_ns: (QUANTUM_BITS * 1_000_000_000).div_ceil(link_bps.max(1)),
            until: [None; 8],
            counted_to: now,
            paused_ns: 0,
            counters: PauseCounters::default(),
        }
    }

    /// How long `quanta` pause quanta last.
    pub fn duration(&self, quanta: u16) -> Duration {
        Duration::from_nanos(self.quantum_ns * u64::from(quanta))
    }

    /// The paused time from the last count to `now`: until the latest of the running
    /// pauses' ends (or `now`), as every running pause started at or before that count.
    fn uncounted_ns(&self, now: Instant) -> u128 {
        let end = self.until.iter().flatten().map(|&u| u.min(now)).max();
        end.filter(|&e| e > self.counted_to)
            .map_or(0, |e| (e - self.counted_to).as_nanos())
    }

    /// Counts the paused time up to `now` and forgets the pauses over by then.
    fn count_time(&mut self, now: Instant) {
        if now <= self.counted_to {
            return;
        }
        self.paused_ns += self.uncounted_ns(now);
        for u in &mut self.until {
            if u.is_some_and(|t| t <= now) {
                *u = None;
            }
        }
        self.counted_to = now;
    }

    /// One frame received at `now`: the (priority, end of its pause) pairs it sets, an end
    /// at `now` meaning resume; nothing when it is not a pause frame.
    pub fn receive(&mut self, now: Instant, frame: &[u8]) -> Vec<(u8, Instant)> {
        self.count_time(now);
        let repr = match mac_control::parse_frame(frame) {
            Ok(r) => r,
            Err(e) => {
                tracing::trace!(?e, "MAC Control frame ignored");
                self.counters.rx_malformed += 1;
                return Vec::new();
            }
        };
        match repr {
            Repr::Pause { .. } => self.counters.rx_pause += 1,
            Repr::Pfc { .. } => self.counters.rx_pfc += 1,
        }
        let mut out = Vec::new();
        for (p, quanta) in repr.per_priority().into_iter().enumerate() {
            let Some(q) = quanta else { continue };
            let end = now + self.duration(q);
            self.until[p] = (q > 0).then_some(end);
            out.push((p as u8, end));
        }
        tracing::trace!(?repr, "pause frame");
        out
    }

    /// The counters, paused time counted up to `now`.
    pub fn counters(&self, now: Instant) -> PauseCounters {
        PauseCounters {
            paused_us: ((self.paused_ns + self.uncounted_ns(now)) / 1000) as u64,
            ..self.counters
        }
    }
}

/// The socket pause frames arrive on, and what they said.
#[derive(Debug)]
pub struct PauseReceiver {
    fd: OwnedFd,
    state: PauseState,
}

/// The filter passing frames to 01-80-C2-00-00-01 of EtherType 0x8808 (the socket's
/// protocol already selects the EtherType; checked again, as it costs nothing).
fn pause_filter() -> Vec<libc::sock_filter> {
    use super::packet::{insn, JEQ_K, LDH_ABS, LDW_ABS, RET_K};
    let m = mac_control::MULTICAST;
    vec![
        insn(LDH_ABS, 0, 0, 12),
        insn(JEQ_K, 0, 5, u32::from(mac_control::ETHERTYPE)),
        insn(LDW_ABS, 0, 0, 0),
        insn(JEQ_K, 0, 3, u32::from_be_bytes([m[0], m[1], m[2], m[3]])),
        insn(LDH_ABS, 0, 0, 4),
        insn(JEQ_K, 0, 1, u32::from(u16::from_be_bytes([m[4], m[5]]))),
        insn(RET_K, 0, 0, 128),
        insn(RET_K, 0, 0, 0),
    ]
}

impl PauseReceiver {
    /// Opens the pause socket on interface `ifindex`, timing quanta at `link_bps`.
    pub fn open(ifindex: u32, link_bps: u64) -> io::Result<PauseReceiver> {
        let fd = super::packet::open_filtered(ifindex, ETH_P_PAUSE, &mut pause_filter())?;
        // The reserved address on the interface's multicast list, so that a NIC that
        // filters multicast passes the frames up (packet(7) PACKET_ADD_MEMBERSHIP).
        // Failure is not fatal: veth passes every frame.
        // SAFETY: packet_mreq is plain old data; all zeroes is valid.
        let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mreq.mr_ifindex = ifindex as i32;
        mreq.mr_type = libc::PACKET_MR_MULTICAST as u16;
        mreq.mr_alen = 6;
        mreq.mr_address[..6].copy_from_slice(&mac_control::MULTICAST);
        // SAFETY: passes a live packet_mreq and its size.
        let _ = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                (&mreq as *const libc::packet_mreq).cast(),
                std::mem::size_of::<libc::packet_mreq>() as u32,
            )
        };
        Ok(PauseReceiver {
            fd,
            state: PauseState::new(link_bps, Instant::now()),
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Reads the frames waiting (at most 64) and returns the (priority, pause end)
    /// pairs they set, in order.
    pub fn receive(&mut self, now: Instant) -> Vec<(u8, Instant)> {
        let mut out = Vec::new();
        let mut buf = [0u8; 128];
        for _ in 0..64 {
            // SAFETY: the kernel writes at most `buf.len()` bytes into the live `buf`.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                break;
            }
            out.extend(self.state.receive(now, &buf[..n as usize]));
        }
        out
    }

    pub fn counters(&self, now: Instant) -> PauseCounters {
        self.state.counters(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::mac_control::emit_frame;

    const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 9];

    fn pfc(enabled: u8, quanta: [u16; 8]) -> Vec<u8> {
        emit_frame(&Repr::Pfc { enabled, quanta }, MAC)
    }

    #[test]
    fn a_quantum_is_512_bit_times_at_the_link_speed() {
        let t0 = Instant::now();
        let s = PauseState::new(DEFAULT_LINK_BPS, t0);
        assert_eq!(
            s.duration(1),
            Duration::from_nanos(52),
            "51.2 ns, rounded up"
        );
        assert_eq!(
            PauseState::new(100_000_000_000, t0).duration(0xffff),
            Duration::from_nanos(6 * 0xffff)
        );
        assert_eq!(
            PauseState::new(1_000_000_000, t0).duration(0xffff),
            Duration::from_nanos(512 * 0xffff),
            "33.5 ms at 1 Gbit/s"
        );
        assert_eq!(s.duration(0), Duration::ZERO);
    }

    #[test]
    fn pfc_pauses_the_enabled_priorities_and_pause_all_of_them() {
        let t0 = Instant::now();
        let mut s = PauseState::new(1_000_000_000, t0);
        let got = s.receive(t0, &pfc(0b0000_1000, [7, 0, 0, 1000, 0, 0, 0, 0]));
        assert_eq!(got, vec![(3, t0 + Duration::from_nanos(512_000))]);
        let all = s.receive(t0, &emit_frame(&Repr::Pause { quanta: 10 }, MAC));
        assert_eq!(all.len(), 8);
        assert!(all
            .iter()
            .enumerate()
            .all(|(i, &(p, end))| p as usize == i && end == t0 + Duration::from_nanos(5120)));
        let c = s.counters(t0);
        assert_eq!((c.rx_pause, c.rx_pfc, c.rx_malformed), (1, 1, 0));
    }

    #[test]
    fn paused_time_counts_until_expiry_restart_or_resume() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = PauseState::new(1_000_000_000, t0);
        // 0xffff quanta at 1 Gbit/s ≈ 33.55 ms; the pause expires on its own.
        s.receive(t0, &pfc(1, [0xffff, 0, 0, 0, 0, 0, 0, 0]));
        assert_eq!(s.counters(t0 + ms(10)).paused_us, 10_000);
        assert_eq!(s.counters(t0 + ms(100)).paused_us, 33_553);
        // A new frame restarts the timer; quanta 0 resumes at once.
        let t1 = t0 + ms(200);
        s.receive(t1, &pfc(1, [0xffff, 0, 0, 0, 0, 0, 0, 0]));
        s.receive(t1 + ms(20), &pfc(1, [0xffff, 0, 0, 0, 0, 0, 0, 0]));
        let got = s.receive(t1 + ms(30), &pfc(1, [0; 8]));
        assert_eq!(got, vec![(0, t1 + ms(30))], "resume: the end is now");
        assert_eq!(s.counters(t1 + ms(500)).paused_us, 33_553 + 30_000);
        // Overlapping priorities count once.
        let t2 = t0 + ms(1000);
        s.receive(t2, &emit_frame(&Repr::Pause { quanta: 0xffff }, MAC));
        assert_eq!(
            s.counters(t2 + ms(1000)).paused_us,
            (2 * 33_553_920 + 30_000_000) / 1000
        );
    }

    #[test]
    fn short_and_unknown_frames_are_ignored_and_counted() {
        let t0 = Instant::now();
        let mut s = PauseState::new(DEFAULT_LINK_BPS, t0);
        let f = pfc(0xff, [0xffff; 8]);
        assert!(s.receive(t0, &f[..20]).is_empty());
        let mut other = f.clone();
        other[15] = 0x02;
        assert!(s.receive(t0, &other).is_empty());
        assert!(s.receive(t0, &[]).is_empty());
        let c = s.counters(t0 + Duration::from_secs(1));
        assert_eq!((c.rx_pfc, c.rx_malformed, c.paused_us), (0, 3, 0));
    }

    #[test]
    fn the_filter_accepts_then_drops_and_jumps_inside() {
        let prog = pause_filter();
        let n = prog.len();
        for (i, ins) in prog.iter().enumerate() {
            if ins.jf != 0 {
                assert_eq!(i + 1 + usize::from(ins.jf), n - 1, "instruction {i}");
            }
        }
        assert_eq!(prog[n - 1].k, 0);
    }
}
