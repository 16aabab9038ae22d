//! A stand-in transport engine used until (and where) the real core is not wired: it
//! keeps objects and answers verbs, completes nothing and sends nothing. The control
//! path, rings and sessions are exercised against it.

use super::nic::{AppMemory, Errno, EventElement, Limits, Nic, Owner, QpCreate};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;
use wire::client::slot::{CqeRepr, SendWqeRepr, SgeList};
use wire::client::{AhAttr, QpAttr, QpCap, SrqAttr};

#[derive(Default)]
pub struct StubNic {
    limits: Limits,
    next: u32,
    pds: HashMap<u32, Owner>,
    qps: HashMap<u32, (Owner, QpAttr)>,
    rx_datagrams: u64,
}

/// A [`super::device::NicFactory`] building a [`StubNic`].
pub fn factory(
    _name: &str,
    _gids: &[IpAddr],
    _mtu: u32,
    _port: Option<u16>,
    limits: Limits,
    _seed: u64,
) -> Box<dyn Nic + Send> {
    Box::new(StubNic {
        limits,
        next: 0x10,
        ..StubNic::default()
    })
}

impl StubNic {
    fn id(&mut self) -> u32 {
        self.next += 1;
        self.next
    }
}

impl Nic for StubNic {
    fn limits(&self) -> Limits {
        self.limits
    }
    fn alloc_pd(&mut self, owner: Owner) -> Result<u32, Errno> {
        let id = self.id();
        self.pds.insert(id, owner);
        Ok(id)
    }
    fn dealloc_pd(&mut self, pd: u32) -> Result<(), Errno> {
        self.pds.remove(&pd).map(|_| ()).ok_or(libc::EINVAL)
    }
    fn reg_mr(
        &mut self,
        _: Owner,
        pd: u32,
        _: u64,
        length: u64,
        _: u64,
        _: u32,
    ) -> Result<(u32, u32), Errno> {
        if !self.pds.contains_key(&pd) || length == 0 {
            return Err(libc::EINVAL);
        }
        let k = self.id() << 8;
        Ok((k, k))
    }
    fn dereg_mr(&mut self, _: u32) -> Result<(), Errno> {
        Ok(())
    }
    fn alloc_mw(&mut self, _: Owner, _: u32, _: u32) -> Result<(u32, u32), Errno> {
        let id = self.id();
        Ok((id, id << 8))
    }
    fn dealloc_mw(&mut self, _: u32) -> Result<(), Errno> {
        Ok(())
    }
    fn create_cq(&mut self, _: Owner, cqe: u32) -> Result<(u32, u32), Errno> {
        Ok((self.id(), cqe))
    }
    fn destroy_cq(&mut self, _: u32) -> Result<(), Errno> {
        Ok(())
    }
    fn create_srq(&mut self, _: Owner, _: u32, attr: &SrqAttr) -> Result<(u32, SrqAttr), Errno> {
        Ok((self.id(), *attr))
    }
    fn modify_srq(&mut self, _: u32, _: &SrqAttr, _: u32) -> Result<(), Errno> {
        Ok(())
    }
    fn query_srq(&self, _: u32) -> Result<SrqAttr, Errno> {
        Ok(SrqAttr::default())
    }
    fn destroy_srq(&mut self, _: u32) -> Result<(), Errno> {
        Ok(())
    }
    fn post_srq_recv(&mut self, _: u32, _: u64, _: SgeList<'_>) -> Result<(), Errno> {
        Ok(())
    }
    fn create_ah(&mut self, _: u32, attr: &AhAttr) -> Result<u32, Errno> {
        if attr.is_global == 0 {
            return Err(libc::EINVAL);
        }
        Ok(self.id())
    }
    fn destroy_ah(&mut self, _: u32) -> Result<(), Errno> {
        Ok(())
    }
    fn create_qp(&mut self, owner: Owner, init: &QpCreate) -> Result<(u32, QpCap), Errno> {
        let qpn = self.id();
        self.qps.insert(qpn, (owner, QpAttr::default()));
        let mut cap = init.cap;
        cap.max_inline_data = cap.max_inline_data.max(64);
        Ok((qpn, cap))
    }
    fn modify_qp(&mut self, _: Instant, qpn: u32, attr: &QpAttr, mask: u32) -> Result<(), Errno> {
        let (_, cur) = self.qps.get_mut(&qpn).ok_or(libc::EINVAL)?;
        if mask & 1 != 0 {
            cur.qp_state = attr.qp_state;
        }
        Ok(())
    }
    fn query_qp(&self, qpn: u32) -> Result<QpAttr, Errno> {
        self.qps.get(&qpn).map(|(_, a)| *a).ok_or(libc::EINVAL)
    }
    fn destroy_qp(&mut self, qpn: u32) -> Result<(), Errno> {
        self.qps.remove(&qpn).map(|_| ()).ok_or(libc::EINVAL)
    }
    fn post_send(
        &mut self,
        _: Instant,
        qpn: u32,
        _: &SendWqeRepr<'_>,
        _: Option<u32>,
        _: &mut dyn AppMemory,
    ) -> Result<(), Errno> {
        self.qps.get(&qpn).map(|_| ()).ok_or(libc::EINVAL)
    }
    fn post_recv(&mut self, qpn: u32, _: u64, _: SgeList<'_>) -> Result<(), Errno> {
        self.qps.get(&qpn).map(|_| ()).ok_or(libc::EINVAL)
    }
    fn bind_mw_type1(&mut self, _: u32, wqe: &SendWqeRepr<'_>) -> Result<u32, Errno> {
        Ok(wqe.imm_data)
    }
    fn qp_to_error(&mut self, _: Instant, qpn: u32) {
        if let Some((_, a)) = self.qps.get_mut(&qpn) {
            a.qp_state = 6;
        }
    }
    fn release_client(&mut self, _: Instant, owner: Owner) {
        self.qps.retain(|_, (o, _)| *o != owner);
        self.pds.retain(|_, o| *o != owner);
    }
    fn handle_datagram(
        &mut self,
        _: Instant,
        _: SocketAddr,
        _: SocketAddr,
        _: &[u8],
        _: &mut dyn AppMemory,
    ) {
        self.rx_datagrams += 1;
    }
    fn handle_timeout(&mut self, _: Instant, _: &mut dyn AppMemory) {}
    fn poll_transmit(
        &mut self,
        _: Instant,
        _: &mut dyn AppMemory,
        _: &mut Vec<u8>,
    ) -> Option<super::nic::TxMeta> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn poll_completion(&mut self) -> Option<(u32, CqeRepr)> {
        None
    }
    fn poll_event(&mut self) -> Option<(Owner, u32, EventElement)> {
        None
    }
    fn counters(&self) -> Vec<(String, u64)> {
        vec![("rcvd_pkts".into(), self.rx_datagrams)]
    }
    fn qp_counters(&self, qpn: u32) -> Option<Vec<(String, u64)>> {
        self.qps.get(&qpn).map(|_| Vec::new())
    }
}
