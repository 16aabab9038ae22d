//! Creating the queues: CQs, SRQs and QPs with their rings in sealed memfds, and the
//! counters `rdma-emu stat` reads.

use crate::daemon::devices::device::{index_of, ServedDevice};
use crate::daemon::devices::memory::ProcMem;
use crate::daemon::devices::nic::QpCreate;
use crate::daemon::sessions::clients::{Clients, DaemonCounters, Session};
use crate::daemon::sessions::objects::{Cq, Kind, Object, Qp, Ring, SessionId, Srq};
use crate::daemon::sessions::users::Users;
use crate::daemon::sys::{self, Mapping};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use wire::client::proto::Handle;
use wire::client::slot::{recv_slot_size, send_slot_size, CQE_LEN};
use wire::client::verbs::qp_type;
use wire::client::{Consumer, CounterSet, Producer, QpInitAttr, ReplyBody, RingLayout, RingView};

use crate::daemon::sessions::answer::{ok, Answer};

/// A sealed memfd holding rings, mapped; its length rounded up to a page.
pub(in crate::daemon) fn ring_memfd(name: &str, end: u64) -> Result<(OwnedFd, Mapping), i32> {
    let len = usize::try_from(end.next_multiple_of(4096)).map_err(|_| libc::ENOMEM)?;
    let fd = sys::sealed_memfd(name, len).map_err(|_| libc::ENOMEM)?;
    let map = Mapping::new(&fd, len).map_err(|_| libc::ENOMEM)?;
    Ok((fd, map))
}

fn entries_for(depth: u32) -> Result<u32, i32> {
    depth.max(1).checked_next_power_of_two().ok_or(libc::EINVAL)
}

pub(in crate::daemon) fn create_cq(
    clients: &mut Clients<'_>,
    session: SessionId,
    ctx: Handle,
    cqe: u32,
    channel: Option<Handle>,
    timestamps: bool,
) -> Answer {
    let d = clients.device_of(session, ctx)?;
    if cqe == 0 || cqe > d.nic.limits().max_cqe {
        return Err(libc::EINVAL);
    }
    if let Some(ch) = channel {
        match clients.lookup(session, ch)? {
            Object {
                kind: Kind::Channel(_),
                ctx: c,
                ..
            } if *c == ctx => {}
            _ => return Err(libc::EINVAL),
        }
    }
    let d = clients.device_of(session, ctx)?;
    let (id, depth) = d.nic.create_cq(ctx.0, cqe)?;
    let layout = RingLayout {
        offset: 0,
        entries: entries_for(depth)?,
        slot_size: CQE_LEN as u32,
    };
    let built = ring_memfd("rdma-emu-cq", layout.end());
    let (fd, map) = match built {
        Ok(x) => x,
        Err(e) => {
            let _ = d.nic.destroy_cq(id);
            return Err(e);
        }
    };
    let cq = Cq {
        id,
        map,
        ring: Ring::new(layout),
        channel,
        overflowed: Cell::new(false),
        timestamps,
    };
    let handle = clients.insert_or_undo(session, ctx, Kind::Cq(cq), |d| {
        let _ = d.nic.destroy_cq(id);
    })?;
    if let Some(Object {
        kind: Kind::Channel(ch),
        ..
    }) = channel.and_then(|c| clients.objects.get(&c))
    {
        ch.users.set(ch.users.get() + 1);
    }
    clients.device_of(session, ctx)?.cq_by_id.insert(id, handle);
    Ok((
        ReplyBody::Cq {
            handle,
            cqe: depth,
            ring: layout,
        },
        vec![fd],
    ))
}

/// `ibv_resize_cq`. The hand-over, which loses and repeats no completion:
///
/// 1. The client holds its CQ lock for the whole call, so it consumes nothing and its
///    published consumer index is where it stopped. The daemon is single-threaded: while
///    it serves this request it writes no completion.
/// 2. The daemon copies the slots from that consumer index up to its own producer index
///    into a new ring (starting at index 0), with the `arm` word, in order.
/// 3. The core checks the depth against what was copied (rxe's EINVAL below it); only
///    then does the CQ take the new ring, and every later completion goes there.
/// 4. The client maps the new ring from the reply, starts consuming at 0, and lets go
///    of the lock. On any error the old ring stays, untouched.
///
/// A consumer index more than a ring away from the daemon's producer index (a client
/// that wrote its ring) is EINVAL.
pub(in crate::daemon) fn resize_cq(
    clients: &mut Clients<'_>,
    session: SessionId,
    cq: Handle,
    cqe: u32,
) -> Answer {
    let ctx = clients.lookup(session, cq)?.ctx;
    let d = clients.device_of(session, ctx)?;
    // Before the memfd: a hostile `cqe` must not size one.
    if cqe == 0 || cqe > d.nic.limits().max_cqe {
        return Err(libc::EINVAL);
    }
    let layout = RingLayout {
        offset: 0,
        entries: entries_for(cqe)?,
        slot_size: CQE_LEN as u32,
    };
    let (fd, map) = ring_memfd("rdma-emu-cq", layout.end())?;
    let (id, queued) = match clients.lookup(session, cq)? {
        Object {
            kind: Kind::Cq(c), ..
        } => (c.id, copy_unpolled(c, &map, layout)?),
        _ => return Err(libc::EINVAL),
    };
    let depth = clients
        .device_of(session, ctx)?
        .nic
        .resize_cq(id, cqe, queued)?;
    let Some(Object {
        kind: Kind::Cq(c), ..
    }) = clients.objects.get_mut(&cq)
    else {
        return Err(libc::EINVAL);
    };
    let ring = Ring::new(layout);
    ring.index.set(u64::from(queued));
    c.ring = ring;
    c.map = map;
    tracing::debug!(session, cq = cq.0, cqe = depth, queued, "CQ resized");
    Ok((
        ReplyBody::Cq {
            handle: cq,
            cqe: depth,
            ring: layout,
        },
        vec![fd],
    ))
}

/// Copies the completions of `c`'s ring past the client's published consumer index into
/// the fresh ring `layout` of `map`, in order, with the `arm` word, and publishes them
/// there (nobody reads that ring yet). Returns how many; EINVAL when the indices are
/// more than a ring apart or the client wrote our producer index.
fn copy_unpolled(c: &Cq, map: &Mapping, layout: RingLayout) -> Result<u32, i32> {
    let old = c.ring.view(&c.map).ok_or(libc::EIO)?;
    let new = RingView::new(map.words(), layout).map_err(|_| libc::EIO)?;
    let consumer = old.consumer_index();
    let queued = c.ring.index.get().wrapping_sub(consumer);
    if queued > u64::from(c.ring.layout.entries) {
        return Err(libc::EINVAL);
    }
    let mut from = Consumer::with_index(old, consumer);
    let mut to = Producer::with_index(new, 0);
    let mut slot = [0u8; CQE_LEN];
    for _ in 0..queued {
        if !from.peek(&mut slot).map_err(|_| libc::EINVAL)? {
            return Err(libc::EINVAL);
        }
        from.take();
        // Full only when the new ring is smaller than what is queued, which the
        // core refuses anyway (rxe's EINVAL).
        to.stage(&slot).map_err(|_| libc::EINVAL)?;
    }
    to.publish();
    new.set_arm(old.arm());
    u32::try_from(queued).map_err(|_| libc::EINVAL)
}

pub(in crate::daemon) fn create_srq(
    clients: &mut Clients<'_>,
    session: SessionId,
    pd: Handle,
    attr: wire::client::SrqAttr,
) -> Answer {
    let (ctx, pd_id) = clients.pd(session, pd)?;
    let d = clients.device_of(session, ctx)?;
    let l = d.nic.limits();
    // max_sge 0 is the device's to raise (rxe makes it 1).
    if attr.max_wr == 0 || attr.max_wr > l.max_srq_wr || attr.max_sge > l.max_srq_sge {
        return Err(libc::EINVAL);
    }
    let (id, actual) = d.nic.create_srq(ctx.0, pd_id, &attr)?;
    let (handle, layout, fd) =
        record_srq(clients, session, ctx, id, actual.max_sge, actual.max_wr)?;
    Ok((
        ReplyBody::Srq {
            handle,
            attr: actual,
            ring: layout,
        },
        vec![fd],
    ))
}

pub(in crate::daemon) fn create_qp(
    clients: &mut Clients<'_>,
    session: SessionId,
    pd: Handle,
    init: QpInitAttr,
) -> Answer {
    let (ctx, pd_id) = clients.pd(session, pd)?;
    let send_cq = clients.cq_in(session, init.send_cq, ctx)?;
    let recv_cq = clients.cq_in(session, init.recv_cq, ctx)?;
    let srq = match init.srq {
        Some(h) => match clients.lookup(session, h)? {
            Object {
                kind: Kind::Srq(s),
                ctx: c,
                ..
            } if *c == ctx => Some(s.id),
            _ => return Err(libc::EINVAL),
        },
        None => None,
    };
    if !matches!(
        init.qp_type,
        qp_type::RC | qp_type::UC | qp_type::UD | qp_type::XRC_SEND
    ) {
        return Err(libc::EOPNOTSUPP);
    }
    // An XRC initiator has no receive side.
    let xrc = init.qp_type == qp_type::XRC_SEND;
    let init = if xrc {
        QpInitAttr {
            cap: wire::client::QpCap {
                max_recv_wr: 0,
                max_recv_sge: 0,
                ..init.cap
            },
            srq: None,
            ..init
        }
    } else {
        init
    };
    let d = clients.device_of(session, ctx)?;
    let l = d.nic.limits();
    let c = init.cap;
    let rq_ok = srq.is_some() || (c.max_recv_wr <= l.max_qp_wr && c.max_recv_sge <= l.max_sge);
    if c.max_send_wr > l.max_qp_wr
        || c.max_send_sge > l.max_sge
        || c.max_inline_data > l.max_inline
        || !rq_ok
    {
        return Err(libc::EINVAL);
    }
    let create = QpCreate {
        pd: pd_id,
        send_cq,
        recv_cq,
        srq,
        cap: c,
        qp_type: init.qp_type,
        sq_sig_all: init.sq_sig_all,
    };
    let (qpn, cap) = d.nic.create_qp(ctx.0, &create)?;
    let sq_slot = send_slot_size(cap.max_send_sge, cap.max_inline_data).ok_or(libc::EINVAL);
    let rq_slot = recv_slot_size(cap.max_recv_sge).ok_or(libc::EINVAL);
    let layouts = sq_slot.and_then(|sq_slot| {
        let sq = RingLayout {
            offset: 0,
            entries: entries_for(cap.max_send_wr)?,
            slot_size: sq_slot,
        };
        let rq = match srq {
            Some(_) => None,
            None if xrc => None,
            None => Some(RingLayout {
                offset: sq.end(),
                entries: entries_for(cap.max_recv_wr)?,
                slot_size: rq_slot?,
            }),
        };
        Ok((sq, rq))
    });
    let built = layouts.and_then(|(sq, rq)| {
        ring_memfd("rdma-emu-qp", rq.map_or(sq.end(), |r| r.end())).map(|m| (sq, rq, m))
    });
    let (sq, rq, (fd, map)) = match built {
        Ok(x) => x,
        Err(e) => {
            let _ = d.nic.destroy_qp(qpn);
            return Err(e);
        }
    };
    let qp = Qp {
        qpn,
        qp_type: init.qp_type,
        cap,
        map,
        sq: Ring::new(sq),
        rq: rq.map(Ring::new),
        send_cq: init.send_cq,
        recv_cq: init.recv_cq,
        srq: init.srq,
        sq_sig_all: init.sq_sig_all,
    };
    let handle = clients.insert_or_undo(session, ctx, Kind::Qp(qp), |d| {
        let _ = d.nic.destroy_qp(qpn);
    })?;
    clients.rings.insert(handle);
    clients
        .device_of(session, ctx)?
        .qp_by_qpn
        .insert(qpn, handle);
    tracing::debug!(session, qpn, "QP created");
    Ok((
        ReplyBody::Qp {
            handle,
            qpn,
            cap,
            sq,
            rq,
        },
        vec![fd],
    ))
}

/// Records the new SRQ `id` of the engine (`max_sge`, `max_wr` as it made them) as an
/// object of the session with its ring in a fresh memfd: (handle, ring, memfd). On
/// failure the engine's SRQ is destroyed.
pub(in crate::daemon) fn record_srq(
    clients: &mut Clients<'_>,
    session: SessionId,
    ctx: Handle,
    id: u32,
    max_sge: u32,
    max_wr: u32,
) -> Result<(Handle, RingLayout, OwnedFd), i32> {
    let built = recv_slot_size(max_sge)
        .ok_or(libc::EINVAL)
        .and_then(|slot| {
            let layout = RingLayout {
                offset: 0,
                entries: entries_for(max_wr)?,
                slot_size: slot,
            };
            ring_memfd("rdma-emu-srq", layout.end()).map(|m| (layout, m))
        });
    let (layout, (fd, map)) = match built {
        Ok(x) => x,
        Err(e) => {
            let _ = clients
                .device_of(session, ctx)
                .map(|d| d.nic.destroy_srq(id));
            return Err(e);
        }
    };
    let srq = Srq {
        id,
        map,
        ring: Ring::new(layout),
        max_sge,
    };
    let handle = clients.insert_or_undo(session, ctx, Kind::Srq(srq), |d| {
        let _ = d.nic.destroy_srq(id);
    })?;
    clients.rings.insert(handle);
    clients
        .device_of(session, ctx)?
        .srq_by_id
        .insert(id, handle);
    Ok((handle, layout, fd))
}

/// `rdma-emu top`, `res qp`: every QP of the devices asked for, with its owner's pid.
pub(in crate::daemon) fn qp_list(
    devices: &[Option<ServedDevice>],
    objects: &BTreeMap<Handle, Object>,
    sessions: &HashMap<SessionId, Session>,
    device: Option<String>,
) -> Answer {
    if device
        .as_deref()
        .is_some_and(|n| index_of(devices, n).is_none())
    {
        return Err(libc::ENODEV);
    }
    let mut out = Vec::new();
    for d in devices.iter().flatten() {
        if device.as_deref().is_some_and(|n| n != d.name()) {
            continue;
        }
        for mut q in d.nic.qp_summaries() {
            let owner = wire::client::proto::Handle(q.pid);
            q.pid = objects
                .get(&owner)
                .and_then(|o| sessions.get(&o.session))
                .map_or(0, |s| s.pid);
            q.device = d.name().to_string();
            out.push(q);
        }
    }
    ok(ReplyBody::Qps(out))
}

/// `rdma-emu stat`: the counters of the devices asked for (and the daemon's own), or of
/// one QP.
pub(in crate::daemon) fn stat(
    devices: &[Option<ServedDevice>],
    daemon: &DaemonCounters,
    users: &Users,
    mem: &ProcMem,
    device: Option<String>,
    qpn: Option<u32>,
) -> Answer {
    let mut sets = Vec::new();
    for d in devices.iter().flatten() {
        if device.as_deref().is_some_and(|n| n != d.name()) {
            continue;
        }
        match qpn {
            Some(q) => {
                if let Some(counters) = d.nic.qp_counters(q) {
                    sets.push(CounterSet {
                        device: d.name().into(),
                        qpn: Some(q),
                        counters,
                    });
                }
            }
            None => {
                let mut counters = d.nic.counters();
                counters.push(("udp_rx_datagrams".into(), d.rx_datagrams));
                counters.push(("udp_tx_datagrams".into(), d.tx_datagrams));
                counters.push(("udp_tx_errors".into(), d.tx_errors));
                counters.push(("udp_rx_truncated".into(), d.rx_truncated));
                counters.extend(d.port().counters());
                if let Some(p) = &d.pause {
                    // `packet_…` or `xdp_…`, as the backend's other counters.
                    let b = d.port().backend().name();
                    let c = p.counters(std::time::Instant::now());
                    let all = [
                        ("rx_pause_frames", c.rx_pause),
                        ("rx_pfc_frames", c.rx_pfc),
                        ("rx_pause_malformed", c.rx_malformed),
                        ("paused_us", c.paused_us),
                    ];
                    counters.extend(all.into_iter().map(|(k, v)| (format!("{b}_{k}"), v)));
                }
                counters.push(("bad_client_requests".into(), daemon.bad_requests));
                counters.push(("bad_wqes".into(), daemon.bad_wqes));
                counters.push(("broken_rings".into(), daemon.broken_rings));
                let c = daemon;
                counters.push(("refused_privileged".into(), c.refused_privileged));
                counters.push(("refused_credentials".into(), c.refused_credentials));
                counters.push(("user_limit_refusals".into(), users.refusals));
                counters.push(("memory_faults".into(), mem.faults));
                let m = mem.counters;
                counters.push(("memory_shared_bytes".into(), m.shared_bytes));
                counters.push(("memory_fd_bytes".into(), m.fd_bytes));
                counters.push(("memory_shared_refused".into(), m.shared_refused));
                let cm = d.cm.counters();
                counters.push(("cm_tx".into(), cm.tx));
                counters.push(("cm_tx_retries".into(), cm.tx_retries));
                counters.push(("cm_rx".into(), cm.rx));
                counters.push(("cm_rx_duplicates".into(), cm.rx_duplicates));
                counters.push(("cm_rx_dropped".into(), cm.rx_dropped + d.gsi_rx_dropped));
                counters.push(("cm_rx_bad_transport".into(), cm.rx_bad_transport));
                counters.push(("cm_rx_qp_type_mismatch".into(), cm.rx_qp_type_mismatch));
                counters.push(("cm_connections".into(), d.cm.connection_count() as u64));
                counters.extend(
                    d.faults()
                        .counter_list()
                        .iter()
                        .map(|&(n, v)| (n.to_string(), v)),
                );
                sets.push(CounterSet {
                    device: d.name().into(),
                    qpn: None,
                    counters,
                });
            }
        }
    }
    if sets.is_empty() && (device.is_some() || qpn.is_some()) {
        return Err(if qpn.is_some() {
            libc::ENOENT
        } else {
            libc::ENODEV
        });
    }
    ok(ReplyBody::Stat(sets))
}
