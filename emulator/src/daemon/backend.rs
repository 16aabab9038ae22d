//! Which backend a device reaches the network through (`rdma-emu link add … backend B`).
//!
//! RoCE (rxe) devices: `udp`, the kernel's UDP sockets (the default, no capability
//! needed), or `packet`, an AF_PACKET socket on the interface with Ethernet/IP/UDP headers
//! written by the daemon (CAP_NET_RAW; `packet.rs`). iWARP (siw) devices: `tcp`, the
//! kernel's TCP, or `smoltcp`, smoltcp's TCP on an AF_PACKET socket with an address of
//! the device's own (CAP_NET_RAW; `siw/smol.rs`). `xdp` (AF_XDP) is a name the design
//! reserves; this build does not have it, and says so instead of pretending.

use std::fmt;

/// A backend this daemon can run a device on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// Kernel UDP sockets on 4791 (RoCE v2).
    #[default]
    Udp,
    /// AF_PACKET on the interface (RoCE v2).
    Packet,
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

    /// The backend `word` names for a device of `link_type` (`None`: the type's default).
    pub fn choose(link_type: &str, word: Option<&str>) -> Result<Backend, BackendError> {
        let Some(word) = word else {
            return Ok(Backend::default_for(link_type));
        };
        let fits = |b: Backend| {
            if (link_type == "siw") == matches!(b, Backend::Tcp | Backend::Smoltcp) {
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
            "tcp" => fits(Backend::Tcp),
            "smoltcp" => fits(Backend::Smoltcp),
            // Reserved by the design, not built: say so, unless it is the other type's.
            "xdp" if link_type != "siw" => Err(BackendError::NotBuilt("xdp")),
            "xdp" => Err(BackendError::WrongType {
                backend: "xdp",
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
    /// A backend of the other device type (`packet` for siw, `tcp` for rxe…).
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
            BackendError::NotBuilt("xdp") => write!(
                f,
                "backend xdp (AF_XDP) is not built in this rdma-emu; use backend udp or packet"
            ),
            BackendError::NotBuilt(b) => write!(
                f,
                "backend {b} is not built in this rdma-emu; use backend tcp (the kernel's TCP)"
            ),
            BackendError::WrongType { backend, link_type } => {
                let ok = if link_type == "siw" {
                    "tcp or smoltcp"
                } else {
                    "udp or packet"
                };
                write!(
                    f,
                    "backend {backend} does not serve {link_type} devices; use backend {ok}"
                )
            }
            BackendError::Unknown(b) => write!(
                f,
                "unknown backend {b:?}: rxe devices take udp or packet, siw devices tcp or smoltcp"
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
        assert_eq!(Backend::choose("siw", Some("tcp")), Ok(Backend::Tcp));
        assert_eq!(
            Backend::choose("siw", Some("smoltcp")),
            Ok(Backend::Smoltcp)
        );
        let wrong = Backend::choose("siw", Some("packet")).unwrap_err();
        assert_eq!(wrong.errno(), libc::EINVAL);
        assert!(wrong.to_string().contains("use backend tcp"), "{wrong}");
        let wrong = Backend::choose("rxe", Some("tcp")).unwrap_err();
        assert!(
            wrong.to_string().contains("use backend udp or packet"),
            "{wrong}"
        );
    }

    #[test]
    fn xdp_is_refused_as_not_built_and_smoltcp_serves_only_siw() {
        let xdp = Backend::choose("rxe", Some("xdp")).unwrap_err();
        assert_eq!(xdp, BackendError::NotBuilt("xdp"));
        assert_eq!(xdp.errno(), libc::EOPNOTSUPP);
        assert!(xdp.to_string().contains("not built"), "{xdp}");
        assert!(xdp.to_string().contains("udp or packet"), "{xdp}");
        let smol = Backend::choose("rxe", Some("smoltcp")).unwrap_err();
        assert_eq!(smol.errno(), libc::EINVAL);
        assert!(smol.to_string().contains("udp or packet"), "{smol}");
        assert!(matches!(
            Backend::choose("rxe", Some("dpdk")),
            Err(BackendError::Unknown(_))
        ));
    }
}
