//! Records the daemon writes into event pipes.
//!
//! - The async event pipe of a device context (read end handed over in `DeviceOpened`):
//!   one 8-byte [`AsyncEventRecord`] per event.
//! - A completion channel (write end handed over in `CreateCompChannel`): one 8-byte
//!   [`CompEventRecord`] per completion event, naming the CQ.
//!
//! 8-byte records are below `PIPE_BUF`, so each is written and read whole.

use super::attr::Handle;

/// Bytes of each record.
pub const EVENT_RECORD_LEN: usize = 8;

/// An asynchronous event (`struct ibv_async_event`): `event_type` numbered as
/// `enum ibv_event_type`; `element` the [`Handle`] of the QP, CQ or SRQ it concerns, the
/// port number for port events, 0 for device events (`IBV_EVENT_DEVICE_FATAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEventRecord {
    /// The event, numbered as `enum ibv_event_type`.
    pub event_type: u32,
    /// What the event concerns: a QP, CQ or SRQ handle, a port number, or 0.
    pub element: u32,
}

impl AsyncEventRecord {
    /// The record as the daemon writes it on the event socket (little-endian).
    pub fn to_bytes(&self) -> [u8; EVENT_RECORD_LEN] {
        let mut b = [0u8; EVENT_RECORD_LEN];
        b[..4].copy_from_slice(&self.event_type.to_le_bytes());
        b[4..].copy_from_slice(&self.element.to_le_bytes());
        b
    }

    /// The record from the octets the daemon wrote; any octets are a record.
    pub fn from_bytes(b: [u8; EVENT_RECORD_LEN]) -> Self {
        let [a0, a1, a2, a3, e0, e1, e2, e3] = b;
        AsyncEventRecord {
            event_type: u32::from_le_bytes([a0, a1, a2, a3]),
            element: u32::from_le_bytes([e0, e1, e2, e3]),
        }
    }
}

/// A completion event: the CQ's handle as a little-endian u64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompEventRecord {
    /// The CQ that has a completion for an armed notification.
    pub cq: Handle,
}

impl CompEventRecord {
    /// The record as the daemon writes it on the completion channel.
    pub fn to_bytes(&self) -> [u8; EVENT_RECORD_LEN] {
        u64::from(self.cq.0).to_le_bytes()
    }

    /// `None` if the upper half is nonzero (not a handle the daemon wrote).
    pub fn from_bytes(b: [u8; EVENT_RECORD_LEN]) -> Option<Self> {
        u32::try_from(u64::from_le_bytes(b))
            .ok()
            .map(|h| CompEventRecord { cq: Handle(h) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_record_is_type_then_element_little_endian() {
        let r = AsyncEventRecord {
            event_type: 8,
            element: 0x0102_0304,
        };
        assert_eq!(r.to_bytes(), [8, 0, 0, 0, 4, 3, 2, 1]);
        assert_eq!(AsyncEventRecord::from_bytes(r.to_bytes()), r);
    }

    #[test]
    fn comp_record_is_the_cq_handle_as_u64() {
        let r = CompEventRecord { cq: Handle(77) };
        assert_eq!(r.to_bytes(), [77, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(CompEventRecord::from_bytes(r.to_bytes()), Some(r));
        assert_eq!(CompEventRecord::from_bytes([0, 0, 0, 0, 1, 0, 0, 0]), None);
    }
}
