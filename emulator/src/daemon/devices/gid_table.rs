//! A port's GID table with stable indices, kept the way the kernel's GID cache keeps one
//! (drivers/infiniband/core/cache.c): an entry keeps its index for as long as its address
//! exists, a new address takes the first free slot, and a removed address leaves its slot
//! empty (the zero GID) for the next new address. A program that chose a GID index (`-g`,
//! `ibv_query_gid`, an AH's `sgid_index`) thus keeps the address it chose while the
//! interface's other addresses come and go, e.g. when an IPv6 link-local address leaves
//! duplicate address detection a second after a veth comes up.
//!
//! Only the table built at start follows `netdev::gid_table`'s order (link-local, then
//! IPv4-mapped, then other IPv6); after that, slots are handed out first-free.

use std::net::IpAddr;

/// Entries of the table (`ibv_port_attr.gid_tbl_len`; rxe reports 1024). Indices are below.
pub const GID_TBL_LEN: usize = 1024;

/// Index → address (RoCE v2 GID); `None` is an empty slot. Trailing empty slots are not
/// stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GidTable {
    slots: Vec<Option<IpAddr>>,
}

impl GidTable {
    /// A table holding `addrs` at indices 0, 1, ... (duplicates once; at most
    /// [`GID_TBL_LEN`]).
    pub fn new(addrs: &[IpAddr]) -> GidTable {
        let mut t = GidTable::default();
        for &a in addrs {
            t.insert(a);
        }
        t
    }

    /// The address at `index`; `None` for an empty slot or past the end.
    pub fn get(&self, index: usize) -> Option<IpAddr> {
        self.slots.get(index).copied().flatten()
    }

    /// The index of `addr`, if it has one.
    pub fn index_of(&self, addr: IpAddr) -> Option<usize> {
        self.slots.iter().position(|s| *s == Some(addr))
    }

    pub fn contains(&self, addr: IpAddr) -> bool {
        self.index_of(addr).is_some()
    }

    /// Whether no slot is occupied.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The index `addr` would take if inserted now: its own, else the first free slot;
    /// `None` when the table is full.
    pub fn slot_for(&self, addr: IpAddr) -> Option<usize> {
        self.index_of(addr)
            .or_else(|| self.slots.iter().position(Option::is_none))
            .or_else(|| (self.slots.len() < GID_TBL_LEN).then_some(self.slots.len()))
    }

    /// Adds `addr` at [`GidTable::slot_for`]; its index, `None` when the table is full.
    pub fn insert(&mut self, addr: IpAddr) -> Option<usize> {
        let i = self.slot_for(addr)?;
        if i == self.slots.len() {
            self.slots.push(None);
        }
        self.slots[i] = Some(addr);
        Some(i)
    }

    /// Empties the slot of `addr`; the index it had.
    pub fn remove(&mut self, addr: IpAddr) -> Option<usize> {
        let i = self.index_of(addr)?;
        self.slots[i] = None;
        while self.slots.last() == Some(&None) {
            self.slots.pop();
        }
        Some(i)
    }

    /// Follows a new list of addresses: those no longer listed leave their slots empty,
    /// new ones take the first free slots in `present`'s order, the others stay where they
    /// are. Whether anything changed.
    pub fn follow(&mut self, present: &[IpAddr]) -> bool {
        let before = self.clone();
        for a in self.addrs() {
            if !present.contains(&a) {
                self.remove(a);
            }
        }
        for &a in present {
            self.insert(a);
        }
        *self != before
    }

    /// Occupied slots: (index, address), by index.
    pub fn iter(&self) -> impl Iterator<Item = (usize, IpAddr)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.map(|a| (i, a)))
    }

    /// The addresses, by index.
    pub fn addrs(&self) -> Vec<IpAddr> {
        self.iter().map(|(_, a)| a).collect()
    }

    /// Every slot up to the last occupied one (the core's table: empty slots are zero GIDs).
    pub fn slots(&self) -> &[Option<IpAddr>] {
        &self.slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn start_order_is_kept_and_indices_are_dense() {
        let t = GidTable::new(&[ip("fe80::1"), ip("10.0.0.1"), ip("fd00::1"), ip("10.0.0.1")]);
        assert_eq!(
            t.addrs(),
            vec![ip("fe80::1"), ip("10.0.0.1"), ip("fd00::1")]
        );
        assert_eq!(t.index_of(ip("fd00::1")), Some(2));
        assert_eq!(t.get(3), None);
    }

    #[test]
    fn removed_address_leaves_its_slot_empty_and_others_keep_theirs() {
        let mut t = GidTable::new(&[ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::1")]);
        assert!(t.follow(&[ip("10.0.0.1"), ip("fd00::1")]));
        assert_eq!(t.get(0), Some(ip("10.0.0.1")));
        assert_eq!(t.get(1), None, "the removed address's slot is empty");
        assert_eq!(
            t.get(2),
            Some(ip("fd00::1")),
            "the entry after it did not move"
        );
        assert_eq!(
            t.slots(),
            &[Some(ip("10.0.0.1")), None, Some(ip("fd00::1"))]
        );
    }

    #[test]
    fn new_address_takes_the_first_free_slot() {
        let mut t = GidTable::new(&[ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3")]);
        t.follow(&[ip("10.0.0.3")]);
        assert_eq!(t.slots(), &[None, None, Some(ip("10.0.0.3"))]);
        assert!(t.follow(&[ip("10.0.0.3"), ip("fd00::9")]));
        assert_eq!(t.index_of(ip("fd00::9")), Some(0));
        assert_eq!(t.insert(ip("10.0.0.4")), Some(1));
        assert_eq!(
            t.insert(ip("10.0.0.5")),
            Some(3),
            "appended when no slot is free"
        );
    }

    #[test]
    fn readded_address_returns_to_its_slot_when_it_is_still_free() {
        let mut t = GidTable::new(&[ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::1")]);
        t.follow(&[ip("10.0.0.1"), ip("fd00::1")]);
        assert!(t.follow(&[ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::1")]));
        assert_eq!(t.index_of(ip("10.0.0.2")), Some(1));
        assert!(
            !t.follow(&[ip("fd00::1"), ip("10.0.0.2"), ip("10.0.0.1")]),
            "order is ignored"
        );
        assert_eq!(
            t.addrs(),
            vec![ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::1")]
        );
    }

    #[test]
    fn link_local_leaving_dad_does_not_move_the_ipv4_entry() {
        // A veth just brought up: its link-local address is tentative (not bindable), so the
        // table starts with the IPv4 address alone, and a program picks index 0.
        let v4 = ip("10.1.2.1");
        let ll = ip("fe80::8c2f:1ff:fe02:301");
        let mut t = GidTable::new(&[v4]);
        assert_eq!(t.index_of(v4), Some(0));
        // DAD ends: netdev::gid_table would now list the link-local address first.
        assert!(t.follow(&crate::daemon::devices::netdev::gid_table(&[v4, ll])));
        assert_eq!(
            t.index_of(v4),
            Some(0),
            "the IPv4 GID keeps the index it had"
        );
        assert_eq!(t.index_of(ll), Some(1));
        // And when the link-local address goes again, its slot empties.
        assert!(t.follow(&[v4]));
        assert_eq!(t.slots(), &[Some(v4)], "trailing empty slots are not kept");
    }

    #[test]
    fn tentative_link_local_at_start_trailing_removal_and_trimming() {
        let mut t = GidTable::new(&[ip("fe80::1"), ip("10.0.0.1")]);
        t.remove(ip("10.0.0.1"));
        assert_eq!(t.slots(), &[Some(ip("fe80::1"))]);
        t.remove(ip("fe80::1"));
        assert!(t.is_empty());
        assert_eq!(t.remove(ip("fe80::1")), None);
        assert!(!t.follow(&[]));
    }

    #[test]
    fn the_table_is_bounded() {
        let addrs: Vec<IpAddr> = (0..GID_TBL_LEN as u32 + 5)
            .map(|i| IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i)))
            .collect();
        let mut t = GidTable::new(&addrs);
        assert_eq!(t.addrs().len(), GID_TBL_LEN);
        assert_eq!(t.insert(addrs[GID_TBL_LEN]), None, "full");
        assert_eq!(
            t.insert(addrs[3]),
            Some(3),
            "an address already in keeps its index"
        );
        t.remove(addrs[7]);
        assert_eq!(t.insert(addrs[GID_TBL_LEN + 1]), Some(7));
    }
}
