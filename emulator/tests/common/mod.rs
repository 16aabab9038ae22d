//! A small client of the rdma-emud protocol for the integration tests: starts a daemon on
//! a private socket and loopback address, opens the device, maps rings.
#![allow(dead_code)]

pub mod side;

use emulator::client::{CallError, Client};
use emulator::daemon::sys::Mapping;
use emulator::daemon::{Config, Daemon, DeviceSpec, PollMode};
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use wire::client::proto::Handle;
use wire::client::{Consumer, Producer, ReplyBody, RequestBody, RingLayout, RingView};

static NEXT: AtomicU32 = AtomicU32::new(1);

/// A daemon on its own socket and its own 127.x.y.z (so tests run in parallel).
pub struct TestDaemon {
    pub daemon: Option<Daemon>,
    pub socket: PathBuf,
    pub addr: IpAddr,
    dir: PathBuf,
}

impl TestDaemon {
    pub fn start() -> TestDaemon {
        Self::start_with(emulator::daemon::default_factory())
    }

    pub fn start_with(factory: emulator::daemon::devices::device::NicFactory) -> TestDaemon {
        Self::start_configured(factory, |_| {})
    }

    /// A daemon whose configuration `tweak` changed (beyond the socket and device).
    pub fn start_configured(
        factory: emulator::daemon::devices::device::NicFactory,
        tweak: impl Fn(&mut Config),
    ) -> TestDaemon {
        // Another test process may hold the same 127.x.y.z: move on to the next one.
        let mut last = None;
        for _ in 0..64 {
            let n = NEXT.fetch_add(1, Ordering::SeqCst);
            let pid = std::process::id();
            let dir = std::env::temp_dir().join(format!("rdma-emu-test-{pid}-{n}"));
            let socket = dir.join("s.sock");
            let addr = IpAddr::V4(Ipv4Addr::new(
                127,
                1 + (pid % 250) as u8,
                (n % 250) as u8,
                7,
            ));
            let cfg = Config {
                socket: socket.clone(),
                poll: std::env::var("RDMA_EMU_TEST_POLL")
                    .ok()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(PollMode::Adaptive),
                devices: vec![DeviceSpec {
                    addrs: Some(vec![addr]),
                    ..DeviceSpec::new("rxe0", "rxe", "lo")
                }],
                ..Config::default()
            };
            let mut cfg = cfg;
            tweak(&mut cfg);
            match Daemon::start_with(cfg, factory) {
                Ok(daemon) => {
                    return TestDaemon {
                        daemon: Some(daemon),
                        socket,
                        addr,
                        dir,
                    }
                }
                Err(e) => last = Some(e),
            }
        }
        panic!("no daemon could start: {last:?}");
    }

    pub fn connect(&self) -> Client {
        Client::connect(&self.socket).expect("connect").0
    }

    pub fn stop(mut self) {
        if let Some(d) = self.daemon.take() {
            d.stop().expect("clean stop");
        }
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        drop(self.daemon.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn proc_self_mem() -> OwnedFd {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")
        .expect("open /proc/self/mem")
        .into()
}

/// An opened device context with its descriptors.
pub struct Ctx {
    pub handle: Handle,
    pub async_fd: OwnedFd,
    pub doorbell: OwnedFd,
    pub page: Mapping,
    pub attrs: ReplyBody,
}

pub fn open_device(c: &mut Client) -> Ctx {
    let mem = proc_self_mem();
    let (body, mut fds) = c
        .call(
            RequestBody::OpenDevice {
                name: "rxe0".into(),
            },
            &[mem.as_raw_fd()],
        )
        .expect("open device");
    assert_eq!(fds.len(), 3, "async pipe, doorbell, session page");
    let page_fd = fds.pop().unwrap();
    let doorbell = fds.pop().unwrap();
    let async_fd = fds.pop().unwrap();
    let ReplyBody::DeviceOpened { ctx, .. } = &body else {
        panic!("unexpected {body:?}")
    };
    let page = Mapping::new(&page_fd, 4096).expect("map session page");
    Ctx {
        handle: *ctx,
        async_fd,
        doorbell,
        page,
        attrs: body,
    }
}

pub fn errno<T: std::fmt::Debug>(r: Result<T, CallError>) -> i32 {
    match r {
        Err(CallError::Errno(e)) => e,
        other => panic!("expected an errno, got {other:?}"),
    }
}

/// A ring mapped on the client side.
pub struct MappedRing {
    pub map: Mapping,
    pub layouts: Vec<RingLayout>,
}

impl MappedRing {
    pub fn new(fd: &OwnedFd, layouts: Vec<RingLayout>) -> MappedRing {
        let end = layouts.iter().map(|l| l.end()).max().unwrap();
        let len = end.next_multiple_of(4096) as usize;
        MappedRing {
            map: Mapping::new(fd, len).expect("map ring"),
            layouts,
        }
    }

    pub fn view(&self, i: usize) -> RingView<'_> {
        RingView::new(self.map.words(), self.layouts[i]).expect("ring fits")
    }

    pub fn producer(&self, i: usize) -> Producer<'_> {
        Producer::new(self.view(i))
    }

    pub fn consumer(&self, i: usize) -> Consumer<'_> {
        Consumer::new(self.view(i))
    }
}

/// Waits up to `timeout` for `f` to return Some.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Reads one 8-byte record from a (blocking or not) pipe within `timeout`.
pub fn read_record(fd: &OwnedFd, timeout: Duration) -> Option<[u8; 8]> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
    if n <= 0 {
        return None;
    }
    let mut rec = [0u8; 8];
    // SAFETY: reads 8 bytes into a local buffer.
    let got = unsafe { libc::read(fd.as_raw_fd(), rec.as_mut_ptr().cast(), 8) };
    (got == 8).then_some(rec)
}
