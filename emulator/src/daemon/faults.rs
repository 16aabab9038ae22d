//! `rdma-emu fault add|list|clear` and the faults a daemon starts with: the requests that
//! change the devices' fault rules (`link/fault.rs` holds the rules of one device, the
//! `Faulty` layer of its link stack applies them to its packets). A handler borrows the
//! parts of the engine it touches ([`FaultCtx`]) and answers the request.

use crate::daemon::datapath::notify::send_event;
use crate::daemon::devices::device::{index_of, ServedDevice};
use crate::daemon::link::fault::{default_seed, FAULTS_ENV};
use crate::daemon::sessions::answer::{ok, Answer};
use crate::daemon::sessions::objects::{Kind, Object};
use std::collections::BTreeMap;
use std::io;
use std::time::Instant;
use wire::client::fault::{parse_list, FaultAction, FaultInfo, FaultRequest, FaultRule, FaultSpec};
use wire::client::proto::Handle;
use wire::client::verbs::event_type;
use wire::client::ReplyBody;

/// The rule ids of fault injection: the one part of it that is the daemon's rather than a
/// device's (each device's rules, link state and held packets are its `faults()`).
#[derive(Debug)]
pub(in crate::daemon) struct FaultIds {
    /// The id the next rule gets (`rdma-emu fault add`), unique in the daemon.
    next: u32,
}

impl FaultIds {
    pub(in crate::daemon) fn new() -> Self {
        FaultIds { next: 1 }
    }
}

/// What a fault request touches, borrowed from the engine for one call: the devices (their
/// rule tables, link state and QPs), the objects (whom to tell about a port or QP event),
/// the rule ids, and the daemon's seed (rules without a seed derive theirs from it).
pub(in crate::daemon) struct FaultCtx<'a> {
    pub(in crate::daemon) devices: &'a mut [Option<ServedDevice>],
    pub(in crate::daemon) objects: &'a BTreeMap<Handle, Object>,
    pub(in crate::daemon) ids: &'a mut FaultIds,
    pub(in crate::daemon) seed: u64,
}

impl FaultCtx<'_> {
    /// `rdma-emu fault add|list|clear`.
    pub(in crate::daemon) fn request(&mut self, now: Instant, req: FaultRequest) -> Answer {
        match req {
            FaultRequest::Add { device, spec } => {
                let dev = index_of(self.devices, &device).ok_or(libc::ENODEV)?;
                match spec {
                    FaultSpec::Rule(rule) => {
                        let info = self.add_rule(dev, rule)?;
                        ok(ReplyBody::Faults(vec![info]))
                    }
                    FaultSpec::Action(action) => {
                        self.action(now, dev, action)?;
                        ok(ReplyBody::Faults(Vec::new()))
                    }
                }
            }
            FaultRequest::List { device } => {
                let mut out = Vec::new();
                for d in self.devices.iter().flatten() {
                    if device.as_deref().is_none_or(|n| n == d.name()) {
                        out.extend(d.faults().list(d.name()));
                    }
                }
                if out.is_empty()
                    && device
                        .as_deref()
                        .is_some_and(|n| index_of(self.devices, n).is_none())
                {
                    return Err(libc::ENODEV);
                }
                ok(ReplyBody::Faults(out))
            }
            FaultRequest::Clear { device, id } => {
                if device
                    .as_deref()
                    .is_some_and(|n| index_of(self.devices, n).is_none())
                {
                    return Err(libc::ENODEV);
                }
                let mut out = Vec::new();
                for d in self.devices.iter_mut().flatten() {
                    if device.as_deref().is_none_or(|n| n == d.name()) {
                        let name = d.name().to_string();
                        out.extend(d.faults_mut().clear(&name, id));
                    }
                }
                if id.is_some() && out.is_empty() {
                    return Err(libc::ENOENT);
                }
                ok(ReplyBody::Faults(out))
            }
        }
    }

    /// Adds a packet rule to device `dev`. Packet rules act on RoCE datagrams: an iWARP
    /// device's packets are the kernel's TCP segments (EOPNOTSUPP).
    fn add_rule(&mut self, dev: usize, rule: FaultRule) -> Result<FaultInfo, i32> {
        let id = self.ids.next;
        let seed = default_seed(self.seed, id);
        let d = self
            .devices
            .get_mut(dev)
            .and_then(Option::as_mut)
            .ok_or(libc::ENODEV)?;
        if d.is_siw() {
            return Err(libc::EOPNOTSUPP);
        }
        self.ids.next += 1;
        d.faults_mut().add(id, rule, seed);
        tracing::info!(device = d.name(), id, rule = %rule, "fault added");
        let name = d.name().to_string();
        Ok(d.faults().list(&name).pop().expect("just added"))
    }

    /// Link down/up and QP kills happen at once.
    fn action(&mut self, now: Instant, dev: usize, action: FaultAction) -> Result<(), i32> {
        let d = self
            .devices
            .get_mut(dev)
            .and_then(Option::as_mut)
            .ok_or(libc::ENODEV)?;
        match action {
            FaultAction::LinkDown | FaultAction::LinkUp => {
                let down = action == FaultAction::LinkDown;
                if d.faults().link_down == down {
                    return Ok(());
                }
                d.faults_mut().link_down = down;
                tracing::info!(device = d.name(), down, "link state changed by a fault");
                let event = if down {
                    event_type::PORT_ERR
                } else {
                    event_type::PORT_ACTIVE
                };
                for (h, obj) in self.objects {
                    if let Kind::Ctx(c) = &obj.kind {
                        if c.dev == dev {
                            send_event(self.objects, *h, event, 1);
                        }
                    }
                }
            }
            FaultAction::KillQp(qpn) => {
                let h = *d.qp_by_qpn.get(&qpn).ok_or(libc::ENOENT)?;
                d.nic.qp_to_error(now, qpn);
                tracing::info!(device = d.name(), qpn, "QP killed by a fault");
                if let Some(obj) = self.objects.get(&h) {
                    send_event(self.objects, obj.ctx, event_type::QP_FATAL, h.0);
                }
            }
        }
        Ok(())
    }

    /// Applies the configuration's `faults` (`configured`), then `RDMA_EMU_FAULTS` (a
    /// daemon starting with faults in place).
    pub(in crate::daemon) fn initial(
        &mut self,
        configured: Vec<(String, FaultSpec)>,
    ) -> io::Result<()> {
        self.apply_faults("faults", configured)?;
        if let Ok(text) = std::env::var(FAULTS_ENV) {
            let parsed = parse_list(&text).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("{FAULTS_ENV}: {e}"))
            })?;
            self.apply_faults(FAULTS_ENV, parsed)?;
        }
        Ok(())
    }

    fn apply_faults(&mut self, origin: &str, faults: Vec<(String, FaultSpec)>) -> io::Result<()> {
        let bad =
            |msg: String| io::Error::new(io::ErrorKind::InvalidInput, format!("{origin}: {msg}"));
        let now = Instant::now();
        for (device, spec) in faults {
            let dev = index_of(self.devices, &device)
                .ok_or_else(|| bad(format!("no device {device}")))?;
            let result = match spec {
                FaultSpec::Rule(rule) => self.add_rule(dev, rule).map(drop),
                FaultSpec::Action(action) => self.action(now, dev, action),
            };
            result.map_err(|e| bad(format!("{device}: {}", io::Error::from_raw_os_error(e))))?;
        }
        Ok(())
    }
}
