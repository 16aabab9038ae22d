//! Daemon configuration: command-line flags over an optional TOML file.
//!
//! ```toml
//! socket = "/run/user/1000/rdma-emu/rdma-emud.sock"
//! poll = "adaptive"          # busy | adaptive | sleep
//! spin_us = 50               # adaptive: how long to spin without work before sleeping
//! socket_mode = 0o600        # 0o660 to let the socket's group in
//! cm_response_timeout = 20   # CM response timeout exponent (4.096 us x 2^N) in REQs
//! cm_max_retries = 15        # CM retransmissions before UNREACHABLE / a timed-out DREQ
//! udp_src_port = "hash"      # hash (of the QP pair, 0xC000..=0xFFFF) | fixed (4791)
//!
//! [[device]]
//! name = "rxe0"
//! type = "rxe"
//! netdev = "lo"
//! ```

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How the engine waits for work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PollMode {
    /// Never sleeps: lowest latency, one core at 100 %.
    Busy,
    /// Spins while there is work and a bounded time after, then sleeps in epoll.
    #[default]
    Adaptive,
    /// Sleeps in epoll whenever nothing is immediately ready.
    Sleep,
}

impl std::str::FromStr for PollMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "busy" => Ok(PollMode::Busy),
            "adaptive" => Ok(PollMode::Adaptive),
            "sleep" => Ok(PollMode::Sleep),
            _ => Err(format!(
                "unknown poll mode {s:?} (expected busy, adaptive or sleep)"
            )),
        }
    }
}

/// Which UDP source port packets leave from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SrcPortMode {
    /// A hash of the QP pair in 0xC000..=0xFFFF, as rxe does (RoCE v2 ECMP entropy).
    #[default]
    Hash,
    /// Always 4791, for firewalls that want RoCE on 4791 both ways.
    Fixed,
}

impl std::str::FromStr for SrcPortMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hash" => Ok(SrcPortMode::Hash),
            "fixed" => Ok(SrcPortMode::Fixed),
            _ => Err(format!(
                "unknown UDP source port mode {s:?} (expected hash or fixed)"
            )),
        }
    }
}

/// One device to serve.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DeviceSpec {
    pub name: String,
    /// `rxe` (RoCE v2) or `siw` (iWARP).
    #[serde(rename = "type", default = "default_type")]
    pub link_type: String,
    pub netdev: String,
    /// Serve these addresses instead of the interface's (GID table order as given).
    /// Tests use distinct `127.x.y.z` so several daemons share one loopback.
    #[serde(default)]
    pub addrs: Option<Vec<std::net::IpAddr>>,
}

fn default_type() -> String {
    "rxe".into()
}

/// The TOML file's shape.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    socket: Option<PathBuf>,
    poll: Option<PollMode>,
    spin_us: Option<u64>,
    local_path: Option<bool>,
    socket_mode: Option<u32>,
    seed: Option<u64>,
    cm_response_timeout: Option<u8>,
    cm_max_retries: Option<u8>,
    udp_src_port: Option<SrcPortMode>,
    #[serde(default)]
    device: Vec<DeviceSpec>,
}

/// Everything the daemon needs to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub socket: PathBuf,
    pub socket_mode: u32,
    pub poll: PollMode,
    pub spin: Duration,
    /// Packets between QPs of one device go from its transmit queue straight to its
    /// receive path, skipping the kernel (still captured). Off: every packet goes through
    /// the UDP socket, as between two daemons.
    pub local_path: bool,
    pub devices: Vec<DeviceSpec>,
    pub seed: u64,
    /// The connection manager's CM response timeout exponent (4.096 µs × 2^N, sent in
    /// REQs and setting the retransmission interval with twice the packet lifetime).
    /// Default 20, the CMA's.
    pub cm_response_timeout: u8,
    /// Retransmissions of REQ/REP/DREQ/SIDR_REQ before the connection manager gives up
    /// (UNREACHABLE, or a DREQ that timed out). Default 15, the CMA's; at most 15.
    pub cm_max_retries: u8,
    /// `Some(4791)`: every packet leaves from 4791 (`udp_src_port = "fixed"`); `None`: from
    /// the port the core hashes from the QP pair.
    pub udp_src_port: Option<u16>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: wire::client::socket_path(),
            socket_mode: 0o600,
            poll: PollMode::Adaptive,
            spin: Duration::from_micros(50),
            local_path: true,
            devices: vec![
                DeviceSpec {
                    name: "rxe0".into(),
                    link_type: "rxe".into(),
                    netdev: "lo".into(),
                    addrs: None,
                },
                // iWARP next to RoCE on the same interface (DESIGN decision 7).
                DeviceSpec {
                    name: "siw0".into(),
                    link_type: "siw".into(),
                    netdev: "lo".into(),
                    addrs: None,
                },
            ],
            seed: 0x5eed,
            cm_response_timeout: 20,
            cm_max_retries: 15,
            udp_src_port: None,
        }
    }
}

impl Config {
    /// Reads a TOML file over the defaults. Errors name the file and the problem.
    pub fn from_file(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Config::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn from_toml(text: &str) -> Result<Config, String> {
        let file: FileConfig = toml::from_str(text).map_err(|e| one_line(text, &e))?;
        let mut cfg = Config::default();
        if let Some(s) = file.socket {
            cfg.socket = s;
        }
        if let Some(p) = file.poll {
            cfg.poll = p;
        }
        if let Some(l) = file.local_path {
            cfg.local_path = l;
        }
        if let Some(us) = file.spin_us {
            cfg.spin = Duration::from_micros(us);
        }
        if let Some(m) = file.socket_mode {
            if m & !0o777 != 0 {
                return Err(format!("socket_mode {m:o} is not a permission mode"));
            }
            cfg.socket_mode = m;
        }
        if let Some(s) = file.seed {
            cfg.seed = s;
        }
        if let Some(t) = file.cm_response_timeout {
            cfg.cm_response_timeout = t;
        }
        if let Some(r) = file.cm_max_retries {
            cfg.cm_max_retries = r;
        }
        if let Some(m) = file.udp_src_port {
            cfg.set_src_port_mode(m);
        }
        if !file.device.is_empty() {
            cfg.devices = file.device;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks device names and types, and the CM's timer values (the REQ's 5-bit
    /// response timeout and 4-bit retry count fields).
    pub fn set_src_port_mode(&mut self, mode: SrcPortMode) {
        self.udp_src_port = match mode {
            SrcPortMode::Hash => None,
            SrcPortMode::Fixed => Some(super::udp::ROCE_V2_PORT),
        };
    }

    /// Checks device names and types.
    pub fn validate(&self) -> Result<(), String> {
        if self.cm_response_timeout > 31 {
            return Err(format!(
                "cm_response_timeout {} is not an exponent 0..=31",
                self.cm_response_timeout
            ));
        }
        if self.cm_max_retries > 15 {
            return Err(format!(
                "cm_max_retries {} is more than 15",
                self.cm_max_retries
            ));
        }
        for (i, d) in self.devices.iter().enumerate() {
            validate_device_name(&d.name)?;
            if d.link_type != "rxe" && d.link_type != "siw" {
                return Err(format!(
                    "device {}: unknown type {:?} (expected rxe or siw)",
                    d.name, d.link_type
                ));
            }
            if self.devices[..i].iter().any(|o| o.name == d.name) {
                return Err(format!("device {} configured twice", d.name));
            }
        }
        Ok(())
    }
}

/// A TOML error as one log line: `line L, column C: message` (toml's own text spans lines).
fn one_line(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

/// Device names as `rdma link add` accepts them: 1..=63 bytes of `[A-Za-z0-9_.-]`.
pub fn validate_device_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() < 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!("invalid device name {name:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_overrides_defaults() {
        let cfg = Config::from_toml(
            "poll = \"busy\"\nspin_us = 7\n[[device]]\nname = \"rxe1\"\nnetdev = \"eth0\"\n",
        )
        .unwrap();
        assert_eq!(cfg.poll, PollMode::Busy);
        assert_eq!(cfg.spin, Duration::from_micros(7));
        assert!(cfg.local_path, "the local path is on by default");
        assert!(!Config::from_toml("local_path = false").unwrap().local_path);
        assert_eq!(cfg.udp_src_port, None, "hashed source ports by default");
        let fixed = Config::from_toml("udp_src_port = \"fixed\"").unwrap();
        assert_eq!(fixed.udp_src_port, Some(4791));
        assert_eq!(
            cfg.devices,
            vec![DeviceSpec {
                name: "rxe1".into(),
                link_type: "rxe".into(),
                netdev: "eth0".into(),
                addrs: None
            }]
        );
    }

    #[test]
    fn bad_config_is_an_error_not_a_panic() {
        assert!(Config::from_toml("poll = \"fast\"").is_err());
        assert!(Config::from_toml("bogus = 1").is_err());
        assert!(Config::from_toml("[[device]]\nname = \"a/b\"\nnetdev = \"lo\"").is_err());
        assert!(
            Config::from_toml("[[device]]\nname = \"x\"\ntype = \"ib\"\nnetdev = \"lo\"").is_err()
        );
        assert!(Config::from_toml("socket_mode = 4096").is_err());
        assert!(Config::from_toml("cm_response_timeout = 32").is_err());
        assert!(Config::from_toml("cm_max_retries = 16").is_err());
        let cm = Config::from_toml("cm_response_timeout = 8\ncm_max_retries = 2").unwrap();
        assert_eq!((cm.cm_response_timeout, cm.cm_max_retries), (8, 2));
        let e = Config::from_toml("poll = \"busy\"\n[[device]\n").unwrap_err();
        assert!(!e.contains('\n'), "errors are one line: {e}");
        assert!(e.starts_with("line 2, column 9: "), "{e}");
    }
}
