//! What the CM touches of the engine, lent for one call ([`Cm`]), and the small
//! accessors every part of the CM shares.

use super::addr::Addressing;
use super::tables::{CmId, CmTables};
use super::view::{self, CmView};
use crate::daemon::config::Config;
use crate::daemon::devices::nic::TxMeta;
use crate::daemon::sessions::clients::Clients;
use crate::daemon::sessions::objects::SessionId;
use emu_core::cm as core_cm;
use wire::client::proto::Handle;

/// The CM's tables and the parts of the engine its requests, events and timers touch:
/// the clients (sessions, objects, devices, memory), the configuration, and the staging
/// buffers of the QP1 packets it sends. The engine lends them for one call
/// (`Served::cm`). Every part of the CM is a set of functions over it: requests come in
/// through [`super::cm_request`], the agents are driven by [`super::drive_cm`].
pub(in crate::daemon) struct Cm<'a> {
    pub(in crate::daemon) tables: &'a mut CmTables,
    pub(in crate::daemon) clients: Clients<'a>,
    pub(in crate::daemon) cfg: &'a Config,
    pub(in crate::daemon) tx_bufs: &'a mut [Vec<u8>],
    pub(in crate::daemon) tx_meta: &'a mut Vec<TxMeta>,
}

impl Cm<'_> {
    /// The CM's state and what it names, lent read-only ([`CmView`]).
    pub(super) fn cm_view(&self) -> CmView<'_> {
        CmView {
            tables: self.tables,
            objects: &*self.clients.objects,
            devices: &*self.clients.devices,
        }
    }

    /// What binding and resolving ids touch ([`Addressing`]).
    pub(super) fn cm_addressing(&mut self) -> Addressing<'_> {
        Addressing {
            tables: self.tables,
            objects: &*self.clients.objects,
            devices: &*self.clients.devices,
        }
    }

    /// Whether the session may bind a port below 1024: its user is root or the daemon's.
    pub(super) fn cm_privileged(&self, session: SessionId) -> bool {
        self.clients
            .sessions
            .get(&session)
            .is_some_and(|s| s.uid == 0 || s.uid == crate::daemon::sys::euid())
    }

    pub(super) fn cm_id_mut(&mut self, session: SessionId, h: Handle) -> Result<&mut CmId, i32> {
        view::id_mut(self.tables, &*self.clients.objects, session, h)
    }

    /// Runs `f` on the agent of device `dev`.
    pub(super) fn with_agent<T>(
        &mut self,
        dev: usize,
        f: impl FnOnce(&mut core_cm::CmAgent) -> Result<T, emu_core::Errno>,
    ) -> Result<T, i32> {
        let d = self
            .clients
            .devices
            .get_mut(dev)
            .and_then(Option::as_mut)
            .ok_or(libc::ENODEV)?;
        f(&mut d.cm).map_err(|e| e.0)
    }

    /// Forgets the connection of an id once the agent has dropped it (rejected,
    /// unreachable, time wait over), so the agent may reuse its communication ID.
    pub(super) fn cm_sync_conn(&mut self, h: Handle) {
        let Some(id) = self.tables.ids.get(&h) else {
            return;
        };
        let (Some(dev), Some(conn)) = (id.dev, id.conn) else {
            return;
        };
        let alive = self
            .clients
            .devices
            .get(dev)
            .and_then(Option::as_ref)
            .is_some_and(|d| d.cm.state(conn).is_some());
        if !alive {
            if self.tables.conns.get(&(dev, conn)) == Some(&h) {
                self.tables.conns.remove(&(dev, conn));
            }
            if let Some(id) = self.tables.ids.get_mut(&h) {
                id.conn = None;
            }
        }
    }
}
