//! [`CmView`]: what answering a question about one session's CM ids reads, lent by the
//! engine: the CM tables, the objects (a handle of no object of the session is ENOENT,
//! one of another kind EINVAL) and the devices the ids are bound to.

use super::tables::{CmId, CmTables, EventChannel};
use crate::daemon::devices::device::ServedDevice;
use crate::daemon::devices::netdev::{canonical, gid_of};
use crate::daemon::sessions::clients::lookup;
use crate::daemon::sessions::objects::{Object, SessionId};
use emu_core::cm::ConnId;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use wire::client::cm::CmIdInfo;
use wire::client::proto::Handle;

/// The CM's state and what it names, read-only, for one request or one pass.
#[derive(Clone, Copy)]
pub(super) struct CmView<'a> {
    pub(super) tables: &'a CmTables,
    pub(super) objects: &'a BTreeMap<Handle, Object>,
    pub(super) devices: &'a [Option<ServedDevice>],
}

/// A CM id of the session, to change, found with one lookup (errnos as [`CmView::id`]).
pub(super) fn id_mut<'a>(
    tables: &'a mut CmTables,
    objects: &BTreeMap<Handle, Object>,
    session: SessionId,
    h: Handle,
) -> Result<&'a mut CmId, i32> {
    match tables.ids.get_mut(&h) {
        Some(id) if id.session == session => Ok(id),
        _ => {
            lookup(objects, session, h)?;
            Err(libc::EINVAL)
        }
    }
}

impl<'a> CmView<'a> {
    /// A CM id of the session (ENOENT: none; EINVAL: another kind of object).
    pub(super) fn id(self, session: SessionId, h: Handle) -> Result<&'a CmId, i32> {
        match self.tables.ids.get(&h) {
            Some(id) if id.session == session => Ok(id),
            _ => {
                lookup(self.objects, session, h)?;
                Err(libc::EINVAL)
            }
        }
    }

    /// An event channel of the session (ENOENT: none; EINVAL: another kind of object).
    pub(super) fn channel(self, session: SessionId, h: Handle) -> Result<&'a EventChannel, i32> {
        match self.tables.channels.get(&h) {
            Some(ch) if ch.session == session => Ok(ch),
            _ => {
                lookup(self.objects, session, h)?;
                Err(libc::EINVAL)
            }
        }
    }

    /// The device an id is bound to, if it is still there.
    fn device_of(self, id: &CmId) -> Option<&'a ServedDevice> {
        id.dev
            .and_then(|d| self.devices.get(d))
            .and_then(Option::as_ref)
    }

    /// The traffic class of an id's route: its `RDMA_OPTION_ID_TOS`, else its device's
    /// `default_tos` (as mlx5's `default_roce_tos`), else 0.
    pub(super) fn tos(self, id: &CmId) -> u8 {
        id.tos
            .unwrap_or_else(|| self.device_of(id).map_or(0, |d| d.spec.default_tos()))
    }

    /// The device and connection of an id that has one (EINVAL otherwise, as the CMA
    /// answers a verb on an id without an IB CM id).
    pub(super) fn conn(self, session: SessionId, h: Handle) -> Result<(usize, ConnId), i32> {
        let id = self.id(session, h)?;
        match (id.dev, id.conn) {
            (Some(d), Some(c)) if self.devices.get(d).is_some_and(Option::is_some) => Ok((d, c)),
            _ => Err(libc::EINVAL),
        }
    }

    /// What the shim shows of an id (`rdma_cm_id` fields).
    pub(super) fn info(self, h: Handle) -> CmIdInfo {
        let Some(id) = self.tables.ids.get(&h) else {
            return CmIdInfo::default();
        };
        let d = self.device_of(id);
        let gid = |a: Option<SocketAddr>| a.map(|a| gid_of(canonical(a.ip()))).unwrap_or_default();
        let sgid_index = match (d, id.src) {
            (Some(d), Some(src)) => d.gids.index_of(canonical(src.ip())).unwrap_or(0) as u8,
            _ => 0,
        };
        CmIdInfo {
            device: d.map(|d| d.name().to_string()),
            node_guid: d.map_or(0, |d| d.node_guid),
            port_num: u8::from(d.is_some()),
            src: id.src,
            dst: id.dst,
            sgid: gid(id.src),
            dgid: gid(id.dst),
            pkey: 0xffff,
            sgid_index,
            num_paths: i32::from(id.path.is_some()),
            path: id.path.clone(),
        }
    }
}
