//! Changes while the daemon runs: SIGHUP re-reads the configuration, and the GID tables
//! follow the addresses of their interfaces.
//!
//! ## SIGHUP
//!
//! What can change without disturbing live QPs is applied: devices added by the file are
//! opened and served, devices the file no longer names are removed as `rdma-emu link del`
//! removes them (refused while a client has one open: it stays, with a warning), and the
//! poll mode, spin time and local path take effect on the next pass. The socket, its mode
//! and the seed stay as they were at start. A file that does not parse or validate is
//! reported in one error line and changes nothing.
//!
//! ## Addresses
//!
//! An rtnetlink socket subscribed to RTMGRP_IPV4_IFADDR and RTMGRP_IPV6_IFADDR sits in the
//! engine's epoll set; its messages are only a cue: the engine then re-reads every
//! following device's addresses with getifaddrs (the one source of truth, as at start) and
//! binds or closes sockets to match, with stable GID indices (`gid_table.rs`: an address
//! that stays keeps its index, a new one takes the first free slot, a removed one leaves its
//! slot empty), so a GID index a program chose keeps naming the same address.
//! Clients of a device whose table changed get `IBV_EVENT_GID_CHANGE`, as rxe's do.

use crate::daemon::config::{Config, DeviceSpec};
use crate::daemon::datapath::notify::send_event;
use crate::daemon::devices::device::ServedDevice;
use crate::daemon::sessions::objects::{Kind, Object};
use crate::daemon::sys::{self, Epoll};
use crate::daemon::tokens::udp_token;
use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use wire::client::proto::Handle;

/// Produces the configuration to switch to (the file again, with the flags over it).
pub type ConfigSource = Box<dyn FnMut() -> Result<Config, String> + Send>;

/// SIGHUP's eventfd and where a new configuration comes from.
pub(in crate::daemon) struct Reload {
    wake: OwnedFd,
    source: ConfigSource,
}

impl Reload {
    /// A reload from `source` whenever the eventfd ([`Reload::fd`]) is written
    /// (`sys::forward_sighup` points SIGHUP at it).
    pub(in crate::daemon) fn new(source: ConfigSource) -> io::Result<Reload> {
        Ok(Reload {
            wake: sys::eventfd()?,
            source,
        })
    }

    pub(in crate::daemon) fn fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// The configuration to switch to, once the eventfd fired; `None` (logged) when it
    /// does not parse or validate, and then nothing changes.
    pub(in crate::daemon) fn take(&mut self) -> Option<Config> {
        sys::drain_counter(self.wake.as_raw_fd());
        (self.source)()
            .map_err(|e| {
                tracing::error!("config reload failed, keeping the running configuration: {e}")
            })
            .ok()
    }
}

/// What a new configuration asks of the device list, for the engine to carry out.
pub(in crate::daemon) struct DevicePlan {
    /// Devices the new file no longer names (removed unless a client has one open).
    pub(in crate::daemon) remove: Vec<DeviceSpec>,
    /// The new file's devices in its order, each with whether it must be opened (false:
    /// already served, kept as it is).
    pub(in crate::daemon) wanted: Vec<(DeviceSpec, bool)>,
}

/// Applies to `cfg` what changes without disturbing live QPs and returns what the new
/// device list asks. `devices` are the ones served now.
pub(in crate::daemon) fn apply(
    cfg: &mut Config,
    new: Config,
    devices: &[Option<ServedDevice>],
) -> DevicePlan {
    if new.socket != cfg.socket || new.socket_mode != cfg.socket_mode {
        tracing::warn!("config reload: socket and socket_mode apply at the next start");
    }
    cfg.poll = new.poll;
    cfg.spin = new.spin;
    cfg.local_path = new.local_path;
    // Who is an administrator and the per-user limits hold from the next request;
    // objects already made beyond new, lower limits stay.
    cfg.admin_group = new.admin_group;
    cfg.user_limits = new.user_limits;
    let remove = std::mem::take(&mut cfg.devices)
        .into_iter()
        .filter(|old| !new.devices.iter().any(|d| d.name == old.name))
        .collect();
    let wanted = new
        .devices
        .into_iter()
        .map(|spec| {
            let served = crate::daemon::devices::device::index_of(devices, &spec.name).and_then(|i| devices[i].as_ref());
            if let Some(d) = served {
                if d.netdev.name != spec.netdev {
                    tracing::warn!(device = %spec.name, "config reload: a device's netdev changes only when it is removed and added again");
                }
            }
            let open = served.is_none();
            (spec, open)
        })
        .collect();
    DevicePlan { remove, wanted }
}

/// Re-reads every following device's addresses after rtnetlink's cue and binds or closes
/// sockets to match; the clients of a device whose table changed get GID_CHANGE.
pub(in crate::daemon) fn follow_addresses(
    devices: &mut [Option<ServedDevice>],
    epoll: &Epoll,
    objects: &BTreeMap<Handle, Object>,
) {
    for (index, d) in devices.iter_mut().enumerate() {
        let Some(d) = d.as_mut() else {
            continue;
        };
        let Some(want) = d.wanted_gids() else {
            continue;
        };
        let change = d.follow_addrs(&want);
        // Sockets keep their GID index, hence their epoll token: only the closed and
        // the opened ones are touched.
        for s in &change.closed {
            epoll.remove(s.socket.as_raw_fd());
        }
        for &slot in &change.opened {
            let Some(fd) = d.port().fd(slot) else {
                continue;
            };
            if let Err(e) = epoll.add(fd, udp_token(index, slot)) {
                tracing::error!(device = d.name(), "epoll: {e}");
            }
        }
        if change.changed() {
            for (h, _) in objects
                .iter()
                .filter(|(_, o)| matches!(&o.kind, Kind::Ctx(c) if c.dev == index))
            {
                send_event(objects, *h, wire::client::verbs::event_type::GID_CHANGE, 1);
            }
        }
    }
}
