//! Addresses of CM ids: binding in a port space (`rdma_bind_addr`), address resolution
//! through the kernel's routing (`rdma_resolve_addr`) and route resolution
//! (`rdma_resolve_route`), as the kernel's CMA does them on RoCE.

use super::tables::{CmId, CmTables, IdState, EPHEMERAL};
use super::view::CmView;
use crate::daemon::devices::device::ServedDevice;
use crate::daemon::devices::netdev::canonical;
use crate::daemon::sessions::objects::{Object, SessionId};
use crate::daemon::siw::tcp_port_free;
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use wire::client::cm::{event, CmPath};
use wire::client::proto::Handle;

/// Ports below this need privilege (`PROT_SOCK`).
const PRIVILEGED_BELOW: u16 = 1024;

/// The CMA's packet lifetime exponent on RoCE paths (`CMA_IBOE_PACKET_LIFETIME`).
const IBOE_PACKET_LIFETIME: u8 = 16;

/// The IP hop limit the CMA puts in RoCE paths.
const HOP_LIMIT: u8 = 64;

fn is_link_local(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

fn scope_of(a: SocketAddr) -> u32 {
    match a {
        SocketAddr::V6(v6) => v6.scope_id(),
        SocketAddr::V4(_) => 0,
    }
}

/// `ip:port`, with `scope` when `ip` is IPv6 link-local.
fn with_scope(ip: IpAddr, port: u16, scope: u32) -> SocketAddr {
    match ip {
        IpAddr::V6(v6) if is_link_local(ip) => {
            SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope))
        }
        ip => SocketAddr::new(ip, port),
    }
}

fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EINVAL)
}

/// The source address the kernel's routing (in the daemon's network namespace) picks
/// for `dst`: a UDP socket connected to it says. Errors are the routing's
/// (ENETUNREACH, EHOSTUNREACH; an IPv6 link-local destination without a scope is
/// EADDRNOTAVAIL).
fn route_source(dst: SocketAddr) -> Result<SocketAddr, i32> {
    let any: SocketAddr = match dst {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    };
    let sock = UdpSocket::bind(any).map_err(|e| errno_of(&e))?;
    let mut to = dst;
    if to.port() == 0 {
        to.set_port(crate::daemon::link::datagram::ROCE_V2_PORT);
    }
    match sock.connect(to) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Err(libc::EADDRNOTAVAIL),
        Err(e) => return Err(errno_of(&e)),
    }
    sock.local_addr().map_err(|e| errno_of(&e))
}

/// Whether `ip` is an address of this host (in the daemon's namespace).
fn is_local_address(ip: IpAddr, scope: u32) -> bool {
    UdpSocket::bind(with_scope(ip, 0, scope)).is_ok()
}

/// The device serving `ip` (for IPv6 link-local, on interface `scope` if given) and the
/// device's interface index.
fn device_by_ip(devices: &[Option<ServedDevice>], ip: IpAddr, scope: u32) -> Option<(usize, u32)> {
    let ip = canonical(ip);
    devices.iter().enumerate().find_map(|(i, d)| {
        let d = d.as_ref()?;
        let scoped_ok = !is_link_local(ip) || scope == 0 || d.netdev.index == scope;
        (scoped_ok && d.gids.contains(ip)).then_some((i, d.netdev.index))
    })
}

/// Whether a bind to `ip` leaves the id without a device although a device serves it:
/// `ip` is a loopback address and the daemon also serves a non-loopback interface.
/// The loopback names then stand for the host, not for its loopback devices (the
/// default `rxe0`/`siw0`): libfabric's verbs provider binds "localhost" and keeps only
/// the bound device's endpoints, and a device on `lo` has no MSG endpoints there, so
/// every MSG and RDM endpoint would vanish (-61), as on a kernel with rxe on `lo`
/// beside rxe on `eth0`. A daemon serving only loopback devices binds them as the
/// kernel does. Listeners and resolution still reach the loopback devices by address.
fn loopback_is_host(devices: &[Option<ServedDevice>], ip: IpAddr) -> bool {
    canonical(ip).is_loopback()
        && devices.iter().flatten().any(|d| {
            d.gids
                .addrs()
                .into_iter()
                .any(|a| !canonical(a).is_loopback())
        })
}

/// A device with addresses of its own (a siw device on smoltcp, which the kernel's
/// routing does not know) on the interface that has `ip`, the source the kernel's
/// routing picked: that device's first address of `ip`'s family stands in for it, so
/// an unbound id reaches the device's peers from the device's address.
fn device_beside(devices: &[Option<ServedDevice>], ip: IpAddr) -> Option<(IpAddr, usize, u32)> {
    devices.iter().enumerate().find_map(|(i, d)| {
        let d = d.as_ref()?;
        if d.spec.backend() != Ok(crate::daemon::link::backend::Backend::Smoltcp)
            || !d.netdev.addrs.contains(&ip)
        {
            return None;
        }
        let own = d
            .gids
            .addrs()
            .into_iter()
            .find(|a| a.is_ipv4() == ip.is_ipv4())?;
        Some((own, i, d.netdev.index))
    })
}

/// The kernel CMA's `cma_check_port`: may `h` hold `addr` in `(ps, port)`?
/// EADDRINUSE for the same address, EADDRNOTAVAIL when either side is a wildcard.
pub(super) fn check_port(
    tables: &CmTables,
    h: Handle,
    ps: u32,
    addr: SocketAddr,
    reuseaddr: bool,
    afonly: bool,
) -> Result<(), i32> {
    let Some(owners) = tables.ports.get(&(ps, addr.port())) else {
        return Ok(());
    };
    for &o in owners {
        let Some(cur) = tables.ids.get(&o).filter(|_| o != h) else {
            continue;
        };
        if reuseaddr && cur.reuseaddr {
            continue;
        }
        let Some(cur_addr) = cur.src else {
            continue;
        };
        if afonly && cur.afonly && addr.is_ipv4() != cur_addr.is_ipv4() {
            continue;
        }
        if addr.ip().is_unspecified() || cur_addr.ip().is_unspecified() {
            return Err(libc::EADDRNOTAVAIL);
        }
        if canonical(addr.ip()) == canonical(cur_addr.ip()) {
            return Err(libc::EADDRINUSE);
        }
    }
    Ok(())
}

/// What binding and resolving an id touch, lent by the engine: the CM tables, the
/// objects (to check the id's handle) and the devices (read-only: their addresses).
pub(super) struct Addressing<'a> {
    pub(super) tables: &'a mut CmTables,
    pub(super) objects: &'a BTreeMap<Handle, Object>,
    pub(super) devices: &'a [Option<ServedDevice>],
}

impl Addressing<'_> {
    /// The same parts, read-only, for the handle checks.
    fn view(&self) -> CmView<'_> {
        CmView {
            tables: self.tables,
            objects: self.objects,
            devices: self.devices,
        }
    }

    /// A CM id of the session, to change (errnos as [`CmView::id`]).
    fn id_mut(&mut self, session: SessionId, h: Handle) -> Result<&mut CmId, i32> {
        super::view::id_mut(self.tables, self.objects, session, h)
    }

    /// `rdma_bind_addr` (also the implicit binds of resolve and listen): a specific
    /// address must be served by a device (EADDRNOTAVAIL: not an address of this host;
    /// ENODEV: one no device serves), except a loopback address, which binds without a
    /// device when no device serves it or when it names the host
    /// ([`loopback_is_host`]); port 0 takes a free ephemeral port of the port space, a
    /// port below 1024 needs a `privileged` session (EACCES).
    pub(super) fn bind(
        &mut self,
        session: SessionId,
        h: Handle,
        addr: SocketAddr,
        privileged: bool,
    ) -> Result<(), i32> {
        let id = self.view().id(session, h)?;
        let (ps, reuseaddr, afonly) = (id.ps, id.reuseaddr, id.afonly);
        let ip = canonical(addr.ip());
        let (dev, addr) = if ip.is_unspecified() {
            (None, addr)
        } else {
            let serving = device_by_ip(self.devices, ip, scope_of(addr))
                .filter(|_| !loopback_is_host(self.devices, ip));
            match serving {
                Some((d, ifindex)) => (Some(d), with_scope(ip, addr.port(), ifindex)),
                // A loopback address no device serves, or one naming the host, binds
                // without a device, as a wildcard does: libfabric's verbs provider probes
                // "localhost" this way and then takes the addresses of the devices on
                // real interfaces.
                None if ip.is_loopback() => (None, addr),
                None if is_local_address(ip, scope_of(addr)) => return Err(libc::ENODEV),
                None => return Err(libc::EADDRNOTAVAIL),
            }
        };
        let port = if addr.port() == 0 {
            // An iWARP id's port is its TCP connection's source port too: a port the
            // kernel's TCP holds unshareably (another program's connection, even in
            // TIME_WAIT) would make rdma_connect fail with EADDRINUSE, so it is skipped.
            let tcp = ps == wire::client::cm::ps::TCP;
            let ip = addr.ip();
            ephemeral_port(self.tables, ps, |p| !tcp || tcp_port_free(ip, p))
                .ok_or(libc::EADDRNOTAVAIL)?
        } else {
            if addr.port() < PRIVILEGED_BELOW && !privileged {
                return Err(libc::EACCES);
            }
            check_port(self.tables, h, ps, addr, reuseaddr, afonly)?;
            addr.port()
        };
        let mut addr = addr;
        addr.set_port(port);
        self.tables.ports.entry((ps, port)).or_default().push(h);
        let id = self.id_mut(session, h)?;
        id.src = Some(addr);
        id.dev = dev;
        id.state = IdState::AddrBound;
        tracing::debug!(id = h.0, %addr, "cm bound");
        Ok(())
    }

    /// `rdma_resolve_addr`: binds if needed, picks the source address by routing when
    /// the id is unbound or bound to a wildcard, finds the device serving it, and queues
    /// ADDR_RESOLVED or ADDR_ERROR (with -ENETUNREACH, -EHOSTUNREACH, -EADDRNOTAVAIL or
    /// -ENODEV). `privileged` as for [`Addressing::bind`].
    pub(super) fn resolve_addr(
        &mut self,
        session: SessionId,
        h: Handle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        privileged: bool,
    ) -> Result<(), i32> {
        let id = self.view().id(session, h)?;
        if !matches!(
            id.state,
            IdState::Idle | IdState::AddrBound | IdState::AddrResolved
        ) {
            return Err(libc::EINVAL);
        }
        if id.state == IdState::Idle {
            let any = match dst {
                SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
                SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
            };
            self.bind(session, h, src.unwrap_or(any), privileged)?;
        }
        let id = self.view().id(session, h)?;
        let bound = id.src.ok_or(libc::EINVAL)?;
        if bound.is_ipv4() != dst.is_ipv4() {
            return Err(libc::EINVAL);
        }
        // An unscoped link-local destination takes the bound address's interface.
        let mut dst = dst;
        if let SocketAddr::V6(d) = &mut dst {
            if d.scope_id() == 0 && is_link_local(IpAddr::V6(*d.ip())) {
                d.set_scope_id(scope_of(bound));
            }
        }
        // A wildcard destination is this host (the CMA's loopback resolution).
        if dst.ip().is_unspecified() {
            dst.set_ip(match dst {
                SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        // A destination a device of this daemon serves is reached over the loopback, and
        // the kernel's address resolution then takes the device from the destination
        // (`rdma_set_src_addr_rcu` on an IFF_LOOPBACK route): the destination is also the
        // source. Routing would pick lo's primary address (127.0.0.1 for 127.0.0.2),
        // which may belong to another device.
        let local_dst = device_by_ip(self.devices, dst.ip(), scope_of(dst))
            .map(|_| (canonical(dst.ip()), scope_of(dst)));
        let source = if bound.ip().is_unspecified() {
            local_dst
                .map(Ok)
                .unwrap_or_else(|| route_source(dst).map(|s| (canonical(s.ip()), scope_of(s))))
        } else {
            Ok((canonical(bound.ip()), scope_of(bound)))
        };
        let found = source.and_then(|(ip, scope)| {
            device_by_ip(self.devices, ip, scope)
                .map(|(d, ifindex)| (ip, d, ifindex))
                .or_else(|| {
                    bound
                        .ip()
                        .is_unspecified()
                        .then(|| device_beside(self.devices, ip))
                        .flatten()
                })
                .ok_or(libc::ENODEV)
        });
        let id = self.id_mut(session, h)?;
        match found {
            Ok((ip, dev, ifindex)) => {
                id.src = Some(with_scope(ip, bound.port(), ifindex));
                id.dst = Some(dst);
                id.dev = Some(dev);
                id.path = None;
                id.state = IdState::AddrResolved;
                tracing::debug!(id = h.0, src = ?id.src, %dst, "cm address resolved");
                self.tables.simple_event(h, event::ADDR_RESOLVED, 0);
            }
            Err(e) => {
                id.state = IdState::AddrBound;
                tracing::debug!(id = h.0, %dst, errno = e, "cm address not resolved");
                self.tables.simple_event(h, event::ADDR_ERROR, -e);
            }
        }
        Ok(())
    }

    /// `rdma_resolve_route` on RoCE (an id on a siw device resolves in `iwarp.rs`): the
    /// path is the CMA's (flow label hashed from the ports, hop limit 64, the device's
    /// MTU, packet lifetime 16); ROUTE_RESOLVED, or ROUTE_ERROR -ENODEV when the device
    /// went away.
    pub(super) fn resolve_route(&mut self, session: SessionId, h: Handle) -> Result<(), i32> {
        let id = self.view().id(session, h)?;
        if id.state != IdState::AddrResolved {
            return Err(libc::EINVAL);
        }
        let (Some(src), Some(dst)) = (id.src, id.dst) else {
            return Err(libc::EINVAL);
        };
        let tos = self.view().tos(id);
        let mtu = id
            .dev
            .and_then(|d| self.devices.get(d))
            .and_then(Option::as_ref)
            .map(|d| d.cm.config().active_mtu as u32);
        let id = self.id_mut(session, h)?;
        match mtu {
            Some(mtu) => {
                let route = emu_core::cm::Route::tcp(src.ip(), dst.ip(), src.port(), dst.port());
                id.path = Some(CmPath {
                    flow_label: route.flow_label(),
                    hop_limit: HOP_LIMIT,
                    traffic_class: tos,
                    sl: 0,
                    mtu,
                    rate: 0,
                    packet_life_time: IBOE_PACKET_LIFETIME,
                });
                id.state = IdState::RouteResolved;
                self.tables.simple_event(h, event::ROUTE_RESOLVED, 0);
            }
            None => self
                .tables
                .simple_event(h, event::ROUTE_ERROR, -libc::ENODEV),
        }
        Ok(())
    }
}

/// A port of the ephemeral range no id of port space `ps` holds.
/// The next ephemeral port of port space `ps` no id holds and `free` accepts, in turn
/// from where the last one was taken; None when every one is taken.
fn ephemeral_port(tables: &mut CmTables, ps: u32, free: impl Fn(u16) -> bool) -> Option<u16> {
    let (lo, hi) = (*EPHEMERAL.start(), *EPHEMERAL.end());
    let n = hi - lo + 1;
    for _ in 0..n {
        let p = tables.next_port;
        tables.next_port = if p >= hi { lo } else { p + 1 };
        if !(lo..=hi).contains(&p) {
            continue;
        }
        if tables.ports.get(&(ps, p)).is_none_or(Vec::is_empty) && free(p) {
            return Some(p);
        }
    }
    None
}

/// Drops an id from its port's owners.
pub(super) fn unbind(tables: &mut CmTables, h: Handle) {
    let Some(id) = tables.ids.get(&h) else {
        return;
    };
    let Some(src) = id.src else {
        return;
    };
    let key = (id.ps, src.port());
    if let Some(owners) = tables.ports.get_mut(&key) {
        owners.retain(|o| *o != h);
        if owners.is_empty() {
            tables.ports.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ephemeral_ports_skip_those_held_and_those_refused() {
        let mut t = CmTables::new(0);
        let first = ephemeral_port(&mut t, 1, |_| true).unwrap();
        t.ports.entry((1, first + 1)).or_default().push(Handle(7));
        let refused = first + 2;
        let next = ephemeral_port(&mut t, 1, |p| p != refused).unwrap();
        assert_eq!(next, first + 3);
        // Another port space does not share the first's holders.
        t.next_port = first + 1;
        assert_eq!(ephemeral_port(&mut t, 2, |_| true), Some(first + 1));
        assert_eq!(ephemeral_port(&mut t, 1, |_| false), None);
    }
}
