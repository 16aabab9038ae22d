//! UD multicast (IBA 10.5, RoCE v2 Annex A17): the device's multicast group table,
//! `ibv_attach_mcast` / `ibv_detach_mcast`, and delivery of a packet sent to the multicast
//! QPN to every QP attached to the group its IP destination names.
//!
//! Behaviour follows the kernel (uverbs, `ib_attach_mcast`, rxe's `rxe_mcast.c` and
//! `rxe_recv.c`):
//! - attaching needs a UD QP and a multicast GID (EINVAL otherwise); the LID is ignored on
//!   RoCE but an attachment is remembered with it, so attaching again with the same GID
//!   and LID succeeds without a second attachment, and detaching needs the same pair;
//! - limits `max_mcast_grp`, `max_mcast_qp_attach`, `max_total_mcast_qp_attach` (ENOMEM);
//! - `ibv_destroy_qp` fails with EBUSY while the QP is attached; a client that goes away
//!   loses its attachments; a QP in RESET or INIT stays attached but receives nothing;
//! - a packet to QPN 0xFFFFFF reaches each attached UD QP in RTR or later whose Q_Key
//!   matches (each takes one receive WQE); the sender's own QP is not left out: rxe
//!   delivers whatever the IP layer loops back.

use std::collections::{BTreeMap, BTreeSet};

use wire::roce::{Body, PacketRepr, Qpn};

use crate::attr::*;
use crate::memory::Memory;
use crate::qp::Qp;
use crate::responder::ResponderParts;
use crate::types::*;

/// The destination QPN of multicast packets (IBA 10.5.2.2: the permissive QPN).
pub(crate) const MULTICAST_QPN: u32 = 0x00ff_ffff;

/// The multicast group table of one device.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    /// MGID → attached QPs, in attach order.
    members: BTreeMap<[u8; 16], Vec<Qpn>>,
    /// (QPN, MGID, LID) of every attachment as the verb named it.
    attachments: BTreeSet<(u32, [u8; 16], u16)>,
    /// QP attachments over all groups.
    total: u32,
}

impl Groups {
    /// Whether `qpn` is attached to any group.
    pub fn is_attached(&self, qpn: Qpn) -> bool {
        self.attachments
            .range((qpn.0, [0; 16], 0)..=(qpn.0, [0xff; 16], u16::MAX))
            .next()
            .is_some()
    }

    /// Removes every attachment of `qpn`.
    pub fn detach_all(&mut self, qpn: Qpn) {
        let mine: Vec<_> = self
            .attachments
            .range((qpn.0, [0; 16], 0)..=(qpn.0, [0xff; 16], u16::MAX))
            .copied()
            .collect();
        for a in &mine {
            self.attachments.remove(a);
        }
        let mut emptied = Vec::new();
        for (gid, qps) in &mut self.members {
            let before = qps.len();
            qps.retain(|q| *q != qpn);
            self.total -= (before - qps.len()) as u32;
            if qps.is_empty() {
                emptied.push(*gid);
            }
        }
        for gid in emptied {
            self.members.remove(&gid);
        }
    }

    /// `ibv_attach_mcast`: attaches UD QP `qpn` to the multicast group `gid`. `lid` is
    /// ignored on RoCE (IBA Annex A17) except that an attachment is named by both.
    pub fn attach(
        &mut self,
        qps: &U32Map<Qp>,
        limits: &DeviceLimits,
        qpn: Qpn,
        gid: Gid,
        lid: u16,
    ) -> Result<(), Errno> {
        let qp = qps.get(&qpn.0).ok_or(Errno::EINVAL)?;
        let key = (qpn.0, gid.0, lid);
        // uverbs: the same (GID, LID) again is a success with nothing to do.
        if self.attachments.contains(&key) {
            return Ok(());
        }
        // ib_attach_mcast.
        if !gid.is_multicast() || qp.qp_type != QpType::Ud {
            return Err(Errno::EINVAL);
        }
        let l = limits;
        if l.max_mcast_qp_attach == 0 {
            return Err(Errno::EINVAL);
        }
        let g = self;
        match g.members.get(&gid.0) {
            None if g.members.len() >= l.max_mcast_grp as usize => return Err(Errno::ENOMEM),
            Some(qps) if !qps.contains(&qpn) && qps.len() >= l.max_mcast_qp_attach as usize => {
                return Err(Errno::ENOMEM)
            }
            _ => {}
        }
        let qps = g.members.entry(gid.0).or_default();
        if !qps.contains(&qpn) {
            if g.total >= l.max_total_mcast_qp_attach {
                if qps.is_empty() {
                    g.members.remove(&gid.0);
                }
                return Err(Errno::ENOMEM);
            }
            qps.push(qpn);
            g.total += 1;
        }
        g.attachments.insert(key);
        Ok(())
    }

    /// `ibv_detach_mcast`: EINVAL unless `qpn` is attached to `gid` with `lid`.
    pub fn detach(&mut self, qps: &U32Map<Qp>, qpn: Qpn, gid: Gid, lid: u16) -> Result<(), Errno> {
        let qp = qps.get(&qpn.0).ok_or(Errno::EINVAL)?;
        if !gid.is_multicast() || qp.qp_type != QpType::Ud {
            return Err(Errno::EINVAL);
        }
        let g = self;
        if !g.attachments.remove(&(qpn.0, gid.0, lid)) {
            return Err(Errno::EINVAL);
        }
        // The QP leaves the group with its last attachment to it (one per LID).
        let still = g
            .attachments
            .range((qpn.0, gid.0, 0)..=(qpn.0, gid.0, u16::MAX))
            .next()
            .is_some();
        if !still {
            if let Some(qps) = g.members.get_mut(&gid.0) {
                let before = qps.len();
                qps.retain(|q| *q != qpn);
                g.total -= (before - qps.len()) as u32;
                if qps.is_empty() {
                    g.members.remove(&gid.0);
                }
            }
        }
        Ok(())
    }

    /// The groups at least one QP is attached to: the IP multicast groups the driver
    /// must have joined on the device's interface (a group's address is `Gid::to_ip`).
    pub fn groups(&self) -> Vec<Gid> {
        self.members.keys().map(|g| Gid(*g)).collect()
    }

    /// The QPs attached to `gid`, in attach order.
    pub fn members(&self, gid: Gid) -> Vec<Qpn> {
        self.members.get(&gid.0).cloned().unwrap_or_default()
    }

    /// A packet to the multicast QPN (rxe_rcv_mcast_pkt): every attached UD QP that may
    /// receive and whose Q_Key matches gets a copy.
    pub fn handle_mcast(
        &self,
        rx: &mut ResponderParts<'_>,
        d: &Datagram<'_>,
        repr: &PacketRepr<'_>,
        mem: &mut dyn Memory,
    ) {
        let gid = Gid::from_ip(d.dst.ip());
        let Body::Ud { deth, imm } = repr.body else {
            rx.o.counters.unknown_qp += 1;
            return;
        };
        let members = match self.members.get(&gid.0) {
            Some(m) if gid.is_multicast() => m.clone(),
            _ => {
                rx.o.counters.unknown_qp += 1;
                return;
            }
        };
        rx.o.counters.rcvd_pkts += 1;
        for qpn in members {
            let Some(qp) = rx.qps.get_mut(&qpn.0) else {
                continue;
            };
            if qp.qp_type != QpType::Ud
                || !matches!(
                    qp.state,
                    QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
                )
            {
                qp.counters.unknown_qp += 1;
                continue;
            }
            qp.counters.rcvd_pkts += 1;
            rx.ud_request(qpn.0, d, deth, imm, repr.payload, mem);
        }
    }
}
