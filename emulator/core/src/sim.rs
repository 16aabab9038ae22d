//! Deterministic simulation: N devices on a seeded lossy fabric, time jumping to the next
//! event. Tests drive real `Device`s through it; a failing run prints its seed.
//!
//! # Example: an RDMA WRITE across a lossy link
//!
//! ```
//! use std::time::Duration;
//! use emu_core::sim::*;
//! use emu_core::*;
//!
//! // Two nodes; one packet in ten is lost, so the requester must retransmit.
//! let link = LinkModel { loss: 0.1, ..LinkModel::default() };
//! let mut f = Fabric::new(42, 2, Mtu::Mtu1024, link);
//! let (a, b) = connect(&mut f, &ConnOpts::default());
//!
//! let data: Vec<u8> = (0..8192u32).map(|i| i as u8).collect();
//! let n0 = &mut f.nodes[0];
//! n0.mem.slice_mut(AddrSpace(a.client.0), a.base, data.len()).copy_from_slice(&data);
//! let mut wr = write_wr(1, &a, &b, data.len() as u32);
//! wr.send_flags = SendFlags::SIGNALED;
//! let now = f.now;
//! n0.dev.post_send(now, a.qpn, wr, &mut n0.mem)?;
//!
//! // Step simulated time until the completion arrives (bounded: `run` gives up).
//! assert!(f.run(Duration::from_secs(10)), "seed {}", f.seed);
//! let (_cq, wc) = f.nodes[0].dev.poll_completion().expect("a completion");
//! assert_eq!((wc.wr_id, wc.status), (WrId(1), WcStatus::Success));
//! let landed = f.nodes[1].mem.slice(AddrSpace(b.client.0), b.base, data.len());
//! assert_eq!(landed, &data[..]);
//! # Ok::<(), Errno>(())
//! ```

mod checked;
mod fabric;
pub mod incast;
mod paging;
mod queue;
mod rng;

pub use checked::{inject, Checked};
pub use fabric::{
    bring_up, connect, connect_nodes, make_end, node_config, write_wr, ConnOpts, End, Fabric,
    LinkModel, Node,
};
pub use paging::{Paged, Paging};
pub use queue::{MarkingQueue, QueueStats};
pub use rng::{seed_range, start_psn, Rng};
