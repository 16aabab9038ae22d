//! Which backend a device reaches the network through (`rdma-emu link add … backend B`).
//!
//! RoCE (rxe) devices: `udp`, the kernel's UDP sockets (the default, no capability
//! needed), `packet`, an AF_PACKET socket on the interface with Ethernet/IP/UDP headers
//! written by the daemon (CAP_NET_RAW; `packet.rs`), or `xdp`, the same frames through
//! an XDP program and AF_XDP sockets (CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW; `xdp/`).
//! iWARP (siw) devices: `tcp`, the kernel's TCP. `smoltcp` (a userspace TCP) is a name
//! the design reserves; this build does not have it, and says so instead of pretending.

use std::fmt;

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
}

impl Backend {
    /// The name `link add` and `link show` use.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Udp => "udp",
            Backend::Packet => "packet",
            Backend::Xdp => "xdp",
            Backend::Tcp => "tcp",
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

    /// The backend `word` names for a device of `link_type` (`None`: the type's default).
    pub fn choose(link_type: &str, word: Option<&str>) -> Result<Backend, BackendError> {
        let Some(word) = word else {
            return Ok(Backend::default_for(link_type));
        };
        let fits = |b: Backend| {
            if (link_type == "siw") == (b == Backend::Tcp) {
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
            // Reserved by the design, not built: say so, unless it is the other type's.
            "smoltcp" if link_type == "siw" => Err(BackendError::NotBuilt("smoltcp")),
            "smoltcp" => Err(BackendError::WrongType {
                backend: "smoltcp",
                link_type: link_type.to_string(),
            }),
            other => Err(BackendError::Unknown(other.to_string())),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a backend cannot be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendError {
    /// A backend the design names but this build does not have.
    NotBuilt(&'static str),
    /// A backend of the other device type (`packet` or `xdp` for siw, `tcp` for rxe…).
    WrongType {
        backend: &'static str,
        link_type: String,
    },
    /// No such backend.
    Unknown(String),
}

impl BackendError {
    /// The errno the daemon answers with: a backend it does not build is EOPNOTSUPP,
    /// a request that cannot make sense EINVAL.
    pub fn errno(&self) -> i32 {
        match self {
            BackendError::NotBuilt(_) => libc::EOPNOTSUPP,
            _ => libc::EINVAL,
        }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::NotBuilt(b) => write!(
                f,
                "backend {b} is not built in this rdma-emu; use backend tcp (the kernel's TCP)"
            ),
            BackendError::WrongType { backend, link_type } => {
                let ok = if link_type == "siw" {
                    "tcp"
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
                "unknown backend {b:?}: rxe devices take udp, packet or xdp, siw devices tcp"
            ),
        }
    }
}

impl std::error::Error for BackendError {}

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
        let wrong = Backend::choose("siw", Some("packet")).unwrap_err();
        assert_eq!(wrong.errno(), libc::EINVAL);
        assert!(wrong.to_string().contains("use backend tcp"), "{wrong}");
        let wrong = Backend::choose("rxe", Some("tcp")).unwrap_err();
        assert!(
            wrong.to_string().contains("use backend udp, packet or xdp"),
            "{wrong}"
        );
        let wrong = Backend::choose("siw", Some("xdp")).unwrap_err();
        assert_eq!(wrong.errno(), libc::EINVAL);
        assert!(wrong.to_string().contains("use backend tcp"), "{wrong}");
    }

    #[test]
    fn smoltcp_is_refused_as_not_built_with_what_to_use() {
        let smol = Backend::choose("siw", Some("smoltcp")).unwrap_err();
        assert_eq!(smol, BackendError::NotBuilt("smoltcp"));
        assert!(smol.to_string().contains("use backend tcp"), "{smol}");
        assert_eq!(
            Backend::choose("rxe", Some("smoltcp")).unwrap_err().errno(),
            libc::EINVAL
        );
        assert!(matches!(
            Backend::choose("rxe", Some("dpdk")),
            Err(BackendError::Unknown(_))
        ));
    }
}
