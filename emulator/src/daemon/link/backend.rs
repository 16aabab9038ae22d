//! Which backend a device reaches the network through (`rdma-emu link add … backend B`).
//!
//! RoCE (rxe) devices: `udp`, the kernel's UDP sockets (the default, no capability
//! needed), `packet`, an AF_PACKET socket on the interface with Ethernet/IP/UDP headers
//! written by the daemon (CAP_NET_RAW; `packet.rs`), or `xdp`, the same frames through
//! an XDP program and AF_XDP sockets (CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW; `xdp/`).
//! iWARP (siw) devices: `tcp`, the kernel's TCP, or `smoltcp`, smoltcp's TCP on an
//! AF_PACKET socket with an address of the device's own (CAP_NET_RAW; `siw/smol.rs`).

use std::fmt;
use std::io;
use std::net::IpAddr;

/// A backend this daemon can run a device on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// Kernel UDP sockets on 4791 (RoCE v2).
    #[default]
    Udp,
    /// AF_PACKET on the interface (RoCE v2).
    Packet,
    /// An XDP program and AF_XDP sockets on the interface (RoCE v2).
    Xdp,
    /// Kernel TCP (iWARP).
    Tcp,
    /// smoltcp on AF_PACKET (iWARP).
    Smoltcp,
}

impl Backend {
    /// The name `link add` and `link show` use.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Udp => "udp",
            Backend::Packet => "packet",
            Backend::Xdp => "xdp",
            Backend::Tcp => "tcp",
            Backend::Smoltcp => "smoltcp",
        }
    }

    /// The default backend of a device type (`rxe`: udp, `siw`: tcp).
    pub fn default_for(link_type: &str) -> Backend {
        if link_type == "siw" {
            Backend::Tcp
        } else {
            Backend::Udp
        }
    }

    /// Whether this is a backend of siw (iWARP) devices.
    fn serves_iwarp(self) -> bool {
        matches!(self, Backend::Tcp | Backend::Smoltcp)
    }

    /// The backend `word` names for a device of `link_type` (`None`: the type's default).
    pub fn choose(link_type: &str, word: Option<&str>) -> Result<Backend, BackendError> {
        let Some(word) = word else {
            return Ok(Backend::default_for(link_type));
        };
        let fits = |b: Backend| {
            if (link_type == "siw") == b.serves_iwarp() {
                Ok(b)
            } else {
                Err(BackendError::WrongType {
                    backend: b.name(),
                    link_type: link_type.to_string(),
                })
            }
        };
        match word {
            "udp" => fits(Backend::Udp),
            "packet" => fits(Backend::Packet),
            "xdp" => fits(Backend::Xdp),
            "tcp" => fits(Backend::Tcp),
            "smoltcp" => fits(Backend::Smoltcp),
            other => Err(BackendError::Unknown(other.to_string())),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a backend cannot be chosen (the daemon answers EINVAL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendError {
    /// A backend of the other device type (`packet` or `xdp` for siw, `tcp` for rxe…).
    WrongType {
        backend: &'static str,
        link_type: String,
    },
    /// No such backend.
    Unknown(String),
}

impl BackendError {
    /// The errno the daemon answers with: a request that cannot make sense.
    pub fn errno(&self) -> i32 {
        libc::EINVAL
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::WrongType { backend, link_type } => {
                let ok = if link_type == "siw" {
                    "tcp or smoltcp"
                } else {
                    "udp, packet or xdp"
                };
                write!(
                    f,
                    "backend {backend} does not serve {link_type} devices; use backend {ok}"
                )
            }
            BackendError::Unknown(b) => write!(
                f,
                "unknown backend {b:?}: rxe devices take udp, packet or xdp, siw devices tcp or smoltcp"
            ),
        }
    }
}

impl std::error::Error for BackendError {}

/// Most addresses a smoltcp device serves (smoltcp's interface holds two).
pub const SMOLTCP_MAX_ADDRS: usize = 2;

/// Checks the addresses of a siw device on smoltcp: its own (given), unicast, at most
/// [`SMOLTCP_MAX_ADDRS`], none of them one the kernel has (`kernel_has`), whose TCP
/// would answer the device's peers with RST. The error says what to do.
pub fn check_smoltcp_addrs(
    device: &str,
    netdev: &str,
    addrs: &[IpAddr],
    kernel_has: impl Fn(IpAddr) -> bool,
) -> Result<(), io::Error> {
    let invalid = |msg: String| Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
    if addrs.is_empty() {
        return invalid(format!(
            "device {device}: backend smoltcp needs an address of its own, one the kernel              does not have: link add {device} … addr IP, or addrs = [\"IP\"] in the config"
        ));
    }
    if addrs.len() > SMOLTCP_MAX_ADDRS {
        return invalid(format!(
            "device {device}: backend smoltcp serves at most {SMOLTCP_MAX_ADDRS} addresses"
        ));
    }
    for &a in addrs {
        if a.is_unspecified() || a.is_multicast() || a.is_loopback() {
            return invalid(format!(
                "device {device}: {a} cannot be a device's address (unicast only)"
            ));
        }
        if kernel_has(a) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "device {device}: {a} is also an address of the kernel (on {netdev} or \
                     another interface), whose TCP would answer the device's peers with RST; \
                     give the smoltcp device an address of its own on {netdev}'s subnet"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_device_type_takes_its_own_backends_and_defaults() {
        assert_eq!(Backend::choose("rxe", None), Ok(Backend::Udp));
        assert_eq!(Backend::choose("siw", None), Ok(Backend::Tcp));
        assert_eq!(Backend::choose("rxe", Some("udp")), Ok(Backend::Udp));
        assert_eq!(Backend::choose("rxe", Some("packet")), Ok(Backend::Packet));
        assert_eq!(Backend::choose("rxe", Some("xdp")), Ok(Backend::Xdp));
        assert_eq!(Backend::choose("siw", Some("tcp")), Ok(Backend::Tcp));
        assert_eq!(
            Backend::choose("siw", Some("smoltcp")),
            Ok(Backend::Smoltcp)
        );
    }

    #[test]
    fn a_backend_of_the_other_type_or_none_at_all_is_refused_with_what_to_use() {
        for (link_type, word, hint) in [
            ("siw", "packet", "use backend tcp or smoltcp"),
            ("siw", "xdp", "use backend tcp or smoltcp"),
            ("rxe", "tcp", "use backend udp, packet or xdp"),
            ("rxe", "smoltcp", "use backend udp, packet or xdp"),
        ] {
            let wrong = Backend::choose(link_type, Some(word)).unwrap_err();
            assert_eq!(wrong.errno(), libc::EINVAL);
            assert!(wrong.to_string().contains(hint), "{wrong}");
        }
        let unknown = Backend::choose("rxe", Some("dpdk")).unwrap_err();
        assert!(matches!(unknown, BackendError::Unknown(_)));
        assert!(unknown.to_string().contains("tcp or smoltcp"), "{unknown}");
    }
}
