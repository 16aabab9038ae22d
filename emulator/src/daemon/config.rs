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
//! faults = ["rxe0 drop 1% --seed 42"]   # in place at start (docs/faults.md)
//! admin_group = "rdma"       # may link add/del, capture, fault (beside root and the daemon's user)
//!
//! [user_limits]              # per user, over all its sessions (users.rs)
//! max_qps = 16384            # EAGAIN beyond, as the rdma cgroup's hca_object
//! max_mr_bytes = 1099511627776   # ENOMEM beyond, as RLIMIT_MEMLOCK in ib_umem_get
//!
//! [[device]]
//! name = "rxe0"
//! type = "rxe"
//! netdev = "lo"
//! backend = "udp"            # udp (default) | packet (AF_PACKET) | xdp (AF_XDP); docs/backends.md
//! default_tos = 0            # rxe only: RDMA CM traffic class where no RDMA_OPTION_ID_TOS
//! cnp_dscp = 48              # rxe only: the DSCP CNPs leave with (ConnectX's default)
//!
//! [[device]]
//! name = "siw0"
//! type = "siw"
//! netdev = "lo"
//! mpa_crc = true             # siw only: ask for MPA CRCs (default false, as Linux siw)
//! mpa_markers = false        # siw only: ask for MPA markers toward this device
//!
//! [[device]]
//! name = "siw1"
//! type = "siw"
//! netdev = "eth0"
//! backend = "smoltcp"        # siw: tcp (default) | smoltcp (AF_PACKET, CAP_NET_RAW)
//! addrs = ["10.0.0.11"]      # smoltcp: the device's own, not the kernel's (docs/backends.md)
//!
//! [device.dcqcn]             # rxe only: congestion control (docs/congestion.md)
//! enabled = true             # the DCQCN reaction point (default on; off: CNPs ignored)
//! max_rate_mbps = 0          # line rate; 0: start from the rate measured at the first CNP
//! cnp_interval_us = 50       # notification point: at most one CNP per QP per interval
//! ```
//!
//! Every DCQCN parameter of [`emu_core::DcqcnParams`] can be set in `[device.dcqcn]` under
//! its field name; unset ones keep their defaults.

use super::link::backend::Backend;
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
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    pub name: String,
    /// `rxe` (RoCE v2) or `siw` (iWARP).
    #[serde(rename = "type", default = "default_type")]
    pub link_type: String,
    pub netdev: String,
    /// Serve these addresses instead of the interface's (GID table order as given).
    /// Tests use distinct `127.x.y.z` so several daemons share one loopback. A siw device
    /// on smoltcp needs them: addresses of its own, which the kernel does not have.
    #[serde(default)]
    pub addrs: Option<Vec<std::net::IpAddr>>,
    /// siw only: ask for MPA CRCs (the C bit); unset is off. See [`MpaOptions::crc`].
    #[serde(default)]
    pub mpa_crc: Option<bool>,
    /// siw only: ask for MPA markers (the M bit); unset is off. See
    /// [`MpaOptions::markers`].
    #[serde(default)]
    pub mpa_markers: Option<bool>,
    /// rxe only: congestion control (`[device.dcqcn]`); unset: DCQCN on with its defaults.
    #[serde(default)]
    pub dcqcn: Option<DcqcnSpec>,
    /// The backend the device reaches the network through (`udp`, `packet` or `xdp` for rxe,
    /// `tcp` or `smoltcp` for siw); unset: the type's default. See [`Backend::choose`].
    #[serde(default)]
    pub backend: Option<String>,
    /// rxe only: the traffic class (IP TOS byte, ECN bits 0) RDMA CM gives an id that set
    /// none with `RDMA_OPTION_ID_TOS`, as mlx5's `default_roce_tos`; unset: 0.
    #[serde(default)]
    pub default_tos: Option<u8>,
    /// rxe only: the DSCP (0..=63) CNPs leave with; unset: [`emu_core::CNP_DSCP`] (48).
    #[serde(default)]
    pub cnp_dscp: Option<u8>,
}

/// `[device.dcqcn]`: the notification point's CNP interval and the reaction point's
/// parameters, each unset one at its default ([`emu_core::DcqcnParams::default`],
/// [`emu_core::CNP_INTERVAL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DcqcnSpec {
    pub enabled: Option<bool>,
    pub cnp_interval_us: Option<u32>,
    pub max_rate_mbps: Option<u32>,
    pub min_rate_mbps: Option<u32>,
    pub ai_rate_mbps: Option<u32>,
    pub hai_rate_mbps: Option<u32>,
    pub time_reset_us: Option<u32>,
    pub byte_reset: Option<u32>,
    pub threshold: Option<u32>,
    pub g: Option<u32>,
    pub alpha_period_us: Option<u32>,
    pub initial_alpha: Option<u32>,
    pub rate_reduce_monitor_period_us: Option<u32>,
}

impl DcqcnSpec {
    /// The reaction point's parameters: the defaults with what is set.
    pub fn params(&self) -> emu_core::DcqcnParams {
        let d = emu_core::DcqcnParams::default();
        emu_core::DcqcnParams {
            enabled: self.enabled.unwrap_or(d.enabled),
            max_rate_mbps: self.max_rate_mbps.unwrap_or(d.max_rate_mbps),
            min_rate_mbps: self.min_rate_mbps.unwrap_or(d.min_rate_mbps),
            ai_rate_mbps: self.ai_rate_mbps.unwrap_or(d.ai_rate_mbps),
            hai_rate_mbps: self.hai_rate_mbps.unwrap_or(d.hai_rate_mbps),
            time_reset_us: self.time_reset_us.unwrap_or(d.time_reset_us),
            byte_reset: self.byte_reset.unwrap_or(d.byte_reset),
            threshold: self.threshold.unwrap_or(d.threshold),
            g: self.g.unwrap_or(d.g),
            alpha_period_us: self.alpha_period_us.unwrap_or(d.alpha_period_us),
            initial_alpha: self.initial_alpha.unwrap_or(d.initial_alpha),
            rate_reduce_monitor_period_us: self
                .rate_reduce_monitor_period_us
                .unwrap_or(d.rate_reduce_monitor_period_us),
        }
    }

    /// The notification point's minimum time between two CNPs of one QP.
    pub fn cnp_interval(&self) -> Duration {
        self.cnp_interval_us.map_or(emu_core::CNP_INTERVAL, |us| {
            Duration::from_micros(u64::from(us))
        })
    }
}

impl DeviceSpec {
    /// A device of `link_type` on `netdev` serving the interface's addresses, with the
    /// default MPA options.
    pub fn new(name: &str, link_type: &str, netdev: &str) -> DeviceSpec {
        DeviceSpec {
            name: name.into(),
            link_type: link_type.into(),
            netdev: netdev.into(),
            addrs: None,
            mpa_crc: None,
            mpa_markers: None,
            dcqcn: None,
            backend: None,
            default_tos: None,
            cnp_dscp: None,
        }
    }

    /// The traffic class RDMA CM ids get without `RDMA_OPTION_ID_TOS`.
    pub fn default_tos(&self) -> u8 {
        self.default_tos.unwrap_or(0)
    }

    /// The DSCP CNPs leave with.
    pub fn cnp_dscp(&self) -> u8 {
        self.cnp_dscp.unwrap_or(emu_core::CNP_DSCP)
    }

    /// Checks `default_tos` (ECN bits clear: ECN is the NIC's) and `cnp_dscp` (six bits).
    fn validate_traffic_class(&self) -> Result<(), String> {
        if self
            .default_tos
            .is_some_and(|t| t & emu_core::ECN_MASK != 0)
        {
            return Err(format!(
                "device {}: default_tos {} has ECN bits set; give DSCP << 2 \
                 (the NIC sends ECT(0) itself)",
                self.name,
                self.default_tos()
            ));
        }
        if self.cnp_dscp.is_some_and(|d| d > 63) {
            return Err(format!(
                "device {}: cnp_dscp {} is out of range (0..=63)",
                self.name,
                self.cnp_dscp()
            ));
        }
        Ok(())
    }

    /// Congestion control of an rxe device: the reaction point's parameters and the
    /// notification point's CNP interval (the defaults where unset).
    pub fn congestion(&self) -> (emu_core::DcqcnParams, Duration) {
        let spec = self.dcqcn.unwrap_or_default();
        (spec.params(), spec.cnp_interval())
    }

    /// The MPA options of a siw device (off where unset).
    pub fn mpa(&self) -> MpaOptions {
        MpaOptions {
            crc: self.mpa_crc.unwrap_or(false),
            markers: self.mpa_markers.unwrap_or(false),
        }
    }

    /// The backend the spec names, or its type's default.
    pub fn backend(&self) -> Result<Backend, String> {
        Backend::choose(&self.link_type, self.backend.as_deref())
            .map_err(|e| format!("device {}: {e}", self.name))
    }

    /// Checks the name, the type, the backend, and that MPA options are set on siw
    /// devices only.
    pub fn validate(&self) -> Result<(), String> {
        validate_device_name(&self.name)?;
        if matches!(self.link_type.as_str(), "rxe" | "siw") {
            self.backend()?;
        }
        match self.link_type.as_str() {
            "siw" if self.default_tos.is_some() || self.cnp_dscp.is_some() => Err(format!(
                "device {}: default_tos and cnp_dscp are RoCE options; a siw device has none",
                self.name
            )),
            "siw" if self.dcqcn.is_some() => Err(format!(
                "device {}: dcqcn is RoCE congestion control; a siw device has none \
                 (TCP's applies)",
                self.name
            )),
            "siw" if self.backend() == Ok(Backend::Smoltcp) => {
                let addrs = self.addrs.as_deref().unwrap_or_default();
                // Whether the kernel has them too is seen when the device opens.
                super::link::backend::check_smoltcp_addrs(&self.name, &self.netdev, addrs, |_| {
                    false
                })
                .map_err(|e| e.to_string())
            }
            "siw" => Ok(()),
            "rxe" if self.mpa_crc.is_some() || self.mpa_markers.is_some() => Err(format!(
                "device {}: mpa_crc and mpa_markers are iWARP (MPA) options; \
                 an rxe device has none",
                self.name
            )),
            "rxe" => {
                self.validate_traffic_class()?;
                self.congestion()
                    .0
                    .validate()
                    .map_err(|e| format!("device {}: dcqcn: {e}", self.name))
            }
            other => Err(format!(
                "device {}: unknown type {other:?} (expected rxe or siw)",
                self.name
            )),
        }
    }
}

/// What a siw device asks for in the MPA Request it sends as initiator and the Reply it
/// sends as responder (RFC 5044 §7.1). Both off by default, as in Linux siw (its
/// `mpa_crc_required` module parameter is off; it implements no markers).
///
/// Whatever this device asks for, it uses CRCs when the peer asks for them (the RFC's
/// "MUST", and siw's default `mpa_crc_strict = false`), and inserts markers into the
/// stream it sends when the peer asks for them: a device with both off interoperates
/// with any peer, and each option only adds a wish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MpaOptions {
    /// C bit: CRC32c on every FPDU, both directions, on every connection of the device
    /// (Linux siw's `mpa_crc_required = Y` asks the same).
    pub crc: bool,
    /// M bit: markers every 512 octets in the stream the peer sends to this device.
    /// Linux siw refuses a Request or Reply with the M bit: a siw peer cannot connect.
    pub markers: bool,
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
    admin_group: Option<crate::daemon::sessions::users::Group>,
    user_limits: Option<crate::daemon::sessions::users::UserLimits>,
    #[serde(default)]
    faults: Vec<String>,
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
    /// Faults in place from the start (`faults = ["DEVICE KIND …", …]`), before those of
    /// `RDMA_EMU_FAULTS`.
    pub faults: Vec<(String, wire::client::fault::FaultSpec)>,
    /// Members of this group may use the privileged requests (`users::is_privileged`)
    /// beside root and the daemon's own user.
    pub admin_group: Option<u32>,
    /// What one user may hold at once (`users.rs`).
    pub user_limits: crate::daemon::sessions::users::UserLimits,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: wire::client::daemon_socket_path(),
            socket_mode: 0o600,
            poll: PollMode::Adaptive,
            spin: Duration::from_micros(50),
            local_path: true,
            devices: vec![
                DeviceSpec::new("rxe0", "rxe", "lo"),
                // iWARP next to RoCE on the same interface (DESIGN decision 7).
                DeviceSpec::new("siw0", "siw", "lo"),
            ],
            seed: 0x5eed,
            cm_response_timeout: 20,
            cm_max_retries: 15,
            udp_src_port: None,
            faults: Vec::new(),
            admin_group: None,
            user_limits: crate::daemon::sessions::users::UserLimits::default(),
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
        if let Some(g) = file.admin_group {
            cfg.admin_group = Some(g.gid()?);
        }
        if let Some(l) = file.user_limits {
            cfg.user_limits = l;
        }
        if !file.device.is_empty() {
            cfg.devices = file.device;
        }
        for text in &file.faults {
            let parsed =
                wire::client::fault::parse_list(text).map_err(|e| format!("faults: {e}"))?;
            cfg.faults.extend(parsed);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Sets where UDP packets leave from (`udp_src_port`).
    pub fn set_src_port_mode(&mut self, mode: SrcPortMode) {
        self.udp_src_port = match mode {
            SrcPortMode::Hash => None,
            SrcPortMode::Fixed => Some(wire::roce::ROCE_V2_UDP_PORT),
        };
    }

    /// Checks the CM's timer values (the REQ's 5-bit response timeout and 4-bit retry
    /// count fields) and every device ([`DeviceSpec::validate`], names unique).
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
        for (device, _) in &self.faults {
            if !self.devices.iter().any(|d| d.name == *device) {
                return Err(format!("faults: no device {device}"));
            }
        }
        for (i, d) in self.devices.iter().enumerate() {
            d.validate()?;
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
        assert_eq!(cfg.devices, vec![DeviceSpec::new("rxe1", "rxe", "eth0")]);
    }

    #[test]
    fn mpa_options_are_off_by_default_and_set_per_siw_device() {
        let defaults = Config::default();
        assert!(defaults
            .devices
            .iter()
            .all(|d| d.mpa() == MpaOptions::default()));
        assert_eq!(
            MpaOptions::default(),
            MpaOptions {
                crc: false,
                markers: false
            },
            "like Linux siw: CRC and markers off"
        );
        let cfg = Config::from_toml(
            "[[device]]\nname = \"siw0\"\ntype = \"siw\"\nnetdev = \"lo\"\nmpa_crc = true\n\
             [[device]]\nname = \"siw1\"\ntype = \"siw\"\nnetdev = \"lo\"\n\
             mpa_crc = true\nmpa_markers = true\n\
             [[device]]\nname = \"siw2\"\ntype = \"siw\"\nnetdev = \"lo\"\n",
        )
        .unwrap();
        let mpa: Vec<MpaOptions> = cfg.devices.iter().map(DeviceSpec::mpa).collect();
        assert_eq!(
            mpa,
            vec![
                MpaOptions {
                    crc: true,
                    markers: false
                },
                MpaOptions {
                    crc: true,
                    markers: true
                },
                MpaOptions::default(),
            ]
        );
    }

    #[test]
    fn mpa_options_on_an_rxe_device_are_refused_by_name() {
        for key in ["mpa_crc = true", "mpa_markers = false"] {
            let e = Config::from_toml(&format!(
                "[[device]]\nname = \"rxe0\"\ntype = \"rxe\"\nnetdev = \"lo\"\n{key}\n"
            ))
            .unwrap_err();
            assert!(
                e.contains("rxe0") && e.contains("mpa_crc and mpa_markers"),
                "{key}: {e}"
            );
        }
        let e = Config::from_toml(
            "[[device]]\nname = \"siw0\"\ntype = \"siw\"\nnetdev = \"lo\"\nmpa_crc = \"yes\"",
        )
        .unwrap_err();
        assert!(e.starts_with("line 5, column "), "{e}");
        let e = Config::from_toml(
            "[[device]]\nname = \"siw0\"\ntype = \"siw\"\nnetdev = \"lo\"\ncrc = true",
        )
        .unwrap_err();
        assert!(
            e.contains("unknown field `crc`"),
            "a misspelt key is an error: {e}"
        );
    }

    #[test]
    fn backend_is_chosen_per_device_and_checked_against_its_type() {
        let cfg = Config::from_toml(
            "[[device]]\nname = \"rxe0\"\nnetdev = \"lo\"\nbackend = \"packet\"\n\
             [[device]]\nname = \"rxe1\"\nnetdev = \"lo\"\n\
             [[device]]\nname = \"rxe2\"\nnetdev = \"lo\"\nbackend = \"xdp\"\n\
             [[device]]\nname = \"siw0\"\ntype = \"siw\"\nnetdev = \"lo\"\nbackend = \"tcp\"\n",
        )
        .unwrap();
        let chosen: Vec<_> = cfg.devices.iter().map(|d| d.backend().unwrap()).collect();
        assert_eq!(
            chosen,
            [Backend::Packet, Backend::Udp, Backend::Xdp, Backend::Tcp]
        );
        let smol = Config::from_toml(
            "[[device]]\nname = \"siw1\"\ntype = \"siw\"\nnetdev = \"eth0\"\n\
             backend = \"smoltcp\"\naddrs = [\"10.0.0.11\"]\n",
        )
        .unwrap();
        assert_eq!(smol.devices[0].backend(), Ok(Backend::Smoltcp));
        for (dev, wanted) in [
            ("name = \"rxe0\"\nbackend = \"tcp\"", "rxe0"),
            (
                "name = \"siw0\"\ntype = \"siw\"\nbackend = \"packet\"",
                "siw0",
            ),
            ("name = \"siw0\"\ntype = \"siw\"\nbackend = \"xdp\"", "siw0"),
            (
                "name = \"siw1\"\ntype = \"siw\"\nbackend = \"smoltcp\"",
                "needs an address of its own",
            ),
            (
                "name = \"siw1\"\ntype = \"siw\"\nbackend = \"smoltcp\"\naddrs = [\"0.0.0.0\"]",
                "unicast only",
            ),
            ("name = \"rxe0\"\nbackend = \"dpdk\"", "dpdk"),
        ] {
            let err =
                Config::from_toml(&format!("[[device]]\n{dev}\nnetdev = \"lo\"\n")).unwrap_err();
            assert!(err.contains(wanted), "{dev}: {err}");
        }
    }

    #[test]
    fn dcqcn_is_on_by_default_and_set_per_rxe_device() {
        let defaults = Config::default();
        let rxe0 = &defaults.devices[0];
        assert_eq!(
            rxe0.congestion(),
            (emu_core::DcqcnParams::default(), emu_core::CNP_INTERVAL)
        );
        assert!(rxe0.congestion().0.enabled);
        let cfg = Config::from_toml(
            "[[device]]\nname = \"rxe0\"\nnetdev = \"lo\"\n\
             [device.dcqcn]\nenabled = false\ncnp_interval_us = 4\nmax_rate_mbps = 1000\n\
             [[device]]\nname = \"rxe1\"\nnetdev = \"lo\"\n\
             [device.dcqcn]\nai_rate_mbps = 40\nthreshold = 5\n",
        )
        .unwrap();
        let (p0, i0) = cfg.devices[0].congestion();
        assert_eq!(
            (p0.enabled, p0.max_rate_mbps, i0),
            (false, 1000, Duration::from_micros(4))
        );
        assert_eq!(
            p0.ai_rate_mbps,
            emu_core::DcqcnParams::default().ai_rate_mbps
        );
        let (p1, i1) = cfg.devices[1].congestion();
        assert_eq!(
            (p1.enabled, p1.ai_rate_mbps, p1.threshold, i1),
            (true, 40, 5, emu_core::CNP_INTERVAL)
        );
    }

    #[test]
    fn traffic_class_settings_default_to_connectx_and_are_checked() {
        let defaults = Config::default();
        assert_eq!(
            (
                defaults.devices[0].default_tos(),
                defaults.devices[0].cnp_dscp()
            ),
            (0, 48)
        );
        let cfg = Config::from_toml(
            "[[device]]\nname = \"rxe0\"\nnetdev = \"lo\"\ndefault_tos = 96\ncnp_dscp = 26\n",
        )
        .unwrap();
        assert_eq!(
            (cfg.devices[0].default_tos(), cfg.devices[0].cnp_dscp()),
            (96, 26)
        );
        for (keys, wanted) in [
            ("default_tos = 97", "ECN bits"),
            ("cnp_dscp = 64", "out of range"),
            ("default_tos = 256", "line 4"),
            ("cnp_dscp = -1", "line 4"),
            ("type = \"siw\"\ncnp_dscp = 48", "RoCE options"),
            ("type = \"siw\"\ndefault_tos = 32", "RoCE options"),
        ] {
            let err = Config::from_toml(&format!(
                "[[device]]\nname = \"rxe0\"\nnetdev = \"lo\"\n{keys}\n"
            ))
            .unwrap_err();
            assert!(err.contains(wanted), "{keys}: {err}");
        }
    }

    #[test]
    fn bad_dcqcn_settings_are_refused_by_name() {
        for (table, wanted) in [
            ("g = 0", "rxe0: dcqcn: g 0"),
            (
                "min_rate_mbps = 10\nmax_rate_mbps = 5",
                "rxe0: dcqcn: max_rate_mbps 5",
            ),
            ("rate = 5", "unknown field `rate`"),
        ] {
            let e = Config::from_toml(&format!(
                "[[device]]\nname = \"rxe0\"\nnetdev = \"lo\"\n[device.dcqcn]\n{table}\n"
            ))
            .unwrap_err();
            assert!(e.contains(wanted), "{table}: {e}");
        }
        let e = Config::from_toml(
            "[[device]]\nname = \"siw0\"\ntype = \"siw\"\nnetdev = \"lo\"\n\
             [device.dcqcn]\nenabled = true\n",
        )
        .unwrap_err();
        assert!(e.contains("siw0: dcqcn is RoCE"), "{e}");
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
