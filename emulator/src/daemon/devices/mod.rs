//! The served devices: each with its interface (addresses, MTU, GID table, next hops),
//! its transport engine behind the [`nic::Nic`] trait (the RoCE core in [`core_nic`]; the
//! iWARP one is `siw`), its datagrams in and out (`io`), its multicast memberships
//! (`mcast`), and the clients' memory as its DMA engine reaches it ([`memory`],
//! [`shared_pages`], [`odp`]).

pub mod core_nic;
pub mod device;
pub mod gid_table;
pub(in crate::daemon) mod io;
pub(in crate::daemon) mod mcast;
pub mod memory;
pub mod neigh;
pub mod netdev;
pub mod nic;
pub mod odp;
pub(in crate::daemon) mod parked;
pub mod shared_pages;
