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

use super::config::Config;
use super::device::ServedDevice;
use super::engine::Engine;
use super::objects::Kind;
use super::sys;
use super::tokens::{udp_token, T_RELOAD};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Produces the configuration to switch to (the file again, with the flags over it).
pub type ConfigSource = Box<dyn FnMut() -> Result<Config, String> + Send>;

pub(super) struct Reload {
    wake: OwnedFd,
    source: ConfigSource,
}

impl Engine {
    /// Makes the engine reload from `source` whenever the returned eventfd is written
    /// (`sys::forward_sighup` points SIGHUP at it).
    pub fn enable_reload(&mut self, source: ConfigSource) -> io::Result<RawFd> {
        let wake = sys::eventfd()?;
        self.epoll.add(wake.as_raw_fd(), T_RELOAD)?;
        let fd = wake.as_raw_fd();
        self.reload = Some(Reload { wake, source });
        Ok(fd)
    }

    pub(super) fn reload(&mut self) {
        let Some(r) = self.reload.as_mut() else {
            return;
        };
        sys::drain_counter(r.wake.as_raw_fd());
        let new = match (r.source)() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!("config reload failed, keeping the running configuration: {e}");
                return;
            }
        };
        self.apply(new);
    }

    fn apply(&mut self, new: Config) {
        if new.socket != self.cfg.socket || new.socket_mode != self.cfg.socket_mode {
            tracing::warn!("config reload: socket and socket_mode apply at the next start");
        }
        self.cfg.poll = new.poll;
        self.cfg.spin = new.spin;
        self.cfg.local_path = new.local_path;
        // Who is an administrator and the per-user limits hold from the next request;
        // objects already made beyond new, lower limits stay.
        self.cfg.admin_group = new.admin_group;
        self.cfg.user_limits = new.user_limits;
        let mut kept = Vec::new();
        for old in std::mem::take(&mut self.cfg.devices) {
            if new.devices.iter().any(|d| d.name == old.name) {
                continue;
            }
            match self.remove_device(&old.name) {
                Ok(()) | Err(libc::ENODEV) => {}
                Err(_) => {
                    tracing::warn!(device = %old.name, "config reload: device in use, kept");
                    kept.push(old);
                }
            }
        }
        for spec in &new.devices {
            if let Some(i) = self.device_index(&spec.name) {
                let d = self.devices[i].as_ref().map(|d| &d.netdev.name);
                if d != Some(&spec.netdev) {
                    tracing::warn!(device = %spec.name, "config reload: a device's netdev changes only when it is removed and added again");
                }
                kept.push(spec.clone());
                continue;
            }
            match ServedDevice::open(spec, self.factory, self.cfg.seed, self.cfg.udp_src_port)
                .and_then(|d| self.add_device(d))
            {
                Ok(_) => kept.push(spec.clone()),
                Err(e) => {
                    tracing::error!(device = %spec.name, "config reload: device not added: {e}")
                }
            }
        }
        self.cfg.devices = kept;
        tracing::info!(poll = ?self.cfg.poll, devices = self.cfg.devices.len(), "config reloaded");
    }

    pub(super) fn follow_addresses(&mut self) {
        if let Some(fd) = &self.netlink {
            sys::drain_socket(fd.as_raw_fd());
        }
        for index in 0..self.devices.len() {
            let Some(d) = self.devices[index].as_mut() else {
                continue;
            };
            let Some(want) = d.wanted_gids() else {
                continue;
            };
            let change = d.follow_addrs(&want);
            // Sockets keep their GID index, hence their epoll token: only the closed and
            // the opened ones are touched.
            for s in &change.closed {
                self.epoll.remove(s.socket.as_raw_fd());
            }
            for &slot in &change.opened {
                let Some(fd) = d.udp.fd(slot) else {
                    continue;
                };
                if let Err(e) = self.epoll.add(fd, udp_token(index, slot)) {
                    tracing::error!(device = d.name(), "epoll: {e}");
                }
            }
            if change.changed() {
                let ctxs: Vec<_> = self
                    .objects
                    .iter()
                    .filter(|(_, o)| matches!(&o.kind, Kind::Ctx(c) if c.dev == index))
                    .map(|(h, _)| *h)
                    .collect();
                for ctx in ctxs {
                    super::notify::send_event(
                        &self.objects,
                        ctx,
                        wire::client::verbs::event_type::GID_CHANGE,
                        1,
                    );
                }
            }
        }
    }

    /// Removes a device no client has open (`link del`, reload): ENODEV, EBUSY.
    pub(super) fn remove_device(&mut self, name: &str) -> Result<(), i32> {
        let i = self.device_index(name).ok_or(libc::ENODEV)?;
        let d = self.devices[i].as_ref().ok_or(libc::ENODEV)?;
        if d.open_ctxs > 0 {
            return Err(libc::EBUSY);
        }
        for (_, fd) in d.udp.fds() {
            self.epoll.remove(fd);
        }
        self.cm_device_removed(i);
        tracing::info!(device = %name, "device removed");
        self.devices[i] = None;
        Ok(())
    }
}
