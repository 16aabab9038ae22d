//! The marking switch port of the simulated fabric, and what it saw.

use std::collections::BTreeMap;

/// A switch egress port in front of one node: every packet to that node (from another
/// node) waits here, leaves at the port's rate, is dropped when the queue is full
/// (drop-tail) and is marked Congestion Experienced by RED-style ECN marking, as the DCQCN
/// paper's switches do: never below `kmin` bytes queued, with a probability rising
/// linearly from 0 to `pmax` between `kmin` and `kmax`, always above `kmax`. Marked packets
/// reach the node's [`crate::Device::congestion_experienced`] after
/// [`crate::Device::handle_datagram`].
#[derive(Debug, Clone, Copy)]
pub struct MarkingQueue {
    /// The node behind the port.
    pub to: usize,
    /// Bytes per second the port sends.
    pub rate: u64,
    /// Bytes the queue holds.
    pub capacity: usize,
    /// Queue depth (bytes) where marking starts.
    pub kmin: usize,
    /// Queue depth (bytes) from which every packet is marked.
    pub kmax: usize,
    /// Marking probability at `kmax`.
    pub pmax: f64,
}

/// What a [`MarkingQueue`] saw.
#[derive(Debug, Clone, Default)]
pub struct QueueStats {
    /// Packets that arrived.
    pub arrived: u64,
    /// Packets dropped because the queue was full.
    pub dropped: u64,
    /// Packets marked CE.
    pub marked: u64,
    /// The deepest the queue was, in bytes (seen by arriving packets).
    pub max_depth: usize,
    /// Sum of the depths arriving packets saw (for the mean).
    pub depth_sum: u64,
    /// Bytes let into the queue (they leave in order at the port rate), by sending node.
    pub sent_by: BTreeMap<usize, u64>,
}

impl QueueStats {
    /// The mean depth arriving packets saw, in bytes.
    pub fn mean_depth(&self) -> u64 {
        self.depth_sum.checked_div(self.arrived).unwrap_or(0)
    }
}
