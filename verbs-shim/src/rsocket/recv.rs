//! The receive side's bookkeeping of a stream rsocket, apart from any verbs so a test can
//! play a hostile peer: which byte counts the peer announced (`RS_OP_DATA`), in order,
//! and how much of the receive buffer they fill. The peer may only write into the
//! halves of the buffer we granted; a message that claims more than fits, more messages
//! than receive credits, or a zero-length write is a protocol violation and ends the
//! connection with EPROTO instead of letting a later read run past what was written.
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Violation;

/// Announced, unread data in a ring of `size` bytes.
pub struct RecvRing {
    size: u32,
    max_msgs: usize,
    msgs: VecDeque<u32>,
    unread: u64,
    offset: u32,
}

impl RecvRing {
    pub fn new(size: u32, rq_size: u16) -> RecvRing {
        RecvRing {
            size,
            // rsocket.c keeps rq_size + 1 entries.
            max_msgs: usize::from(rq_size) + 1,
            msgs: VecDeque::new(),
            unread: 0,
            offset: 0,
        }
    }

    /// The peer wrote `len` bytes after the last ones.
    pub fn on_data(&mut self, len: u32) -> Result<(), Violation> {
        if len == 0
            || self.msgs.len() >= self.max_msgs
            || self.unread + u64::from(len) > u64::from(self.size)
        {
            return Err(Violation);
        }
        self.msgs.push_back(len);
        self.unread += u64::from(len);
        Ok(())
    }

    pub fn has_data(&self) -> bool {
        !self.msgs.is_empty()
    }

    /// Takes up to `max` bytes: the (offset, length) pieces of the ring to copy (two when
    /// the data wraps), and how many messages were fully consumed.
    pub fn take(&mut self, max: usize) -> (Vec<(usize, usize)>, u32) {
        let mut pieces = Vec::new();
        let mut left = max;
        let mut done = 0;
        while left > 0 {
            let Some(front) = self.msgs.front_mut() else {
                break;
            };
            let n = (*front as usize).min(left);
            if n == *front as usize {
                self.msgs.pop_front();
                done += 1;
            } else {
                *front -= n as u32;
            }
            left -= n;
            self.unread -= n as u64;
            let mut n = n;
            while n > 0 {
                let end = (self.size - self.offset) as usize;
                let part = n.min(end);
                pieces.push((self.offset as usize, part));
                self.offset = ((self.offset as usize + part) % self.size as usize) as u32;
                n -= part;
            }
        }
        (pieces, done)
    }

    /// What [`take`](Self::take) would return, without consuming (MSG_PEEK).
    pub fn peek(&self, max: usize) -> Vec<(usize, usize)> {
        let mut copy = RecvRing {
            size: self.size,
            max_msgs: self.max_msgs,
            msgs: self.msgs.clone(),
            unread: self.unread,
            offset: self.offset,
        };
        copy.take(max).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_beyond_the_granted_buffer_is_refused() {
        let mut r = RecvRing::new(4096, 16);
        assert!(r.on_data(4000).is_ok());
        assert_eq!(r.on_data(97), Err(Violation));
        assert!(r.on_data(96).is_ok());
        // A hostile 29-bit length.
        let mut r = RecvRing::new(4096, 16);
        assert_eq!(r.on_data(0x1fff_ffff), Err(Violation));
        assert_eq!(r.on_data(0), Err(Violation));
    }

    #[test]
    fn more_messages_than_credits_are_refused() {
        let mut r = RecvRing::new(1 << 20, 16);
        for _ in 0..17 {
            assert!(r.on_data(1).is_ok());
        }
        assert_eq!(r.on_data(1), Err(Violation));
    }

    #[test]
    fn reads_wrap_and_stay_inside_the_ring() {
        let mut r = RecvRing::new(100, 16);
        r.on_data(70).unwrap();
        assert_eq!(r.take(70), (vec![(0, 70)], 1));
        r.on_data(60).unwrap();
        assert_eq!(r.peek(100), vec![(70, 30), (0, 30)]);
        assert_eq!(r.take(10), (vec![(70, 10)], 0));
        assert_eq!(r.take(100), (vec![(80, 20), (0, 30)], 1));
        assert!(!r.has_data());
        for (off, len) in r.take(5).0 {
            assert!(off + len <= 100);
        }
    }
}
