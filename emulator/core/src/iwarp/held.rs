//! What the data sink holds of a message before placing it: the receive WR an untagged
//! message fills ([`RxSend`]) and the tagged Write in progress ([`WriteRun`]). Where the
//! memory asks for runs ([`Memory::prefers_runs`]), the octets of a message's middle
//! segments are held and placed in runs of up to [`HOLD`] octets, one memory access each.

use wire::iwarp::TerminateError;

use super::placement::{scatter, tagged_error, Cite, ScatterError, Stop};
use super::Stags;
use crate::attr::RecvWr;
use crate::execute::{hold, HOLD};
use crate::memory::Memory;
use crate::types::{AccessFlags, AddrSpace, PdHandle};

/// The receive WR being filled by an untagged message on queue 0.
#[derive(Debug)]
pub(super) struct RxSend {
    pub(super) wr: RecvWr,
    /// The PD its SGEs are checked against: the QP's, or its SRQ's.
    pub(super) pd: PdHandle,
    pub(super) len: u64,
    /// Octets of the message accepted and not yet placed, from message offset `held_at`
    /// (as [`WriteRun`]: placed at the last segment, before a segment that does not
    /// continue them, and before any ULPDU not on untagged queue 0).
    pub(super) held: Vec<u8>,
    held_at: u64,
    /// Whether the sink wants runs, asked once per message.
    runs: Option<bool>,
}

impl RxSend {
    /// `held` is a buffer to reuse (empty).
    pub(super) fn new(wr: RecvWr, pd: PdHandle, held: Vec<u8>) -> RxSend {
        RxSend {
            wr,
            pd,
            len: 0,
            held,
            held_at: 0,
            runs: None,
        }
    }

    /// Scatters the held octets into the WR's buffers.
    pub(super) fn place<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        keys: &K,
        mem: &mut M,
        qpn: u32,
    ) -> Result<(), ScatterError> {
        if self.held.is_empty() {
            return Ok(());
        }
        let r = scatter(
            keys,
            mem,
            self.pd,
            qpn,
            &self.wr.sg_list,
            self.held_at,
            &self.held,
        );
        self.held.clear();
        r
    }

    /// Takes the segment of `payload` at message offset `off`: holds it (a middle
    /// segment, where the memory asks for runs), or places it with what is held. A held
    /// run the segment does not continue is placed first.
    pub(super) fn take<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        keys: &K,
        mem: &mut M,
        qpn: u32,
        off: u64,
        payload: &[u8],
        last: bool,
    ) -> Result<(), ScatterError> {
        if !self.held.is_empty() && self.held_at + self.held.len() as u64 != off {
            self.place(keys, mem, qpn)?;
        }
        let holds = !last
            && self.held.len() + payload.len() < HOLD
            && match self.runs {
                Some(r) => r,
                None => *self.runs.insert(self.wants_runs(keys, mem, qpn, off)),
            };
        if !holds && self.held.is_empty() {
            return scatter(keys, mem, self.pd, qpn, &self.wr.sg_list, off, payload);
        }
        if self.held.is_empty() {
            self.held_at = off;
        }
        hold(&mut self.held, payload);
        if holds {
            Ok(())
        } else {
            self.place(keys, mem, qpn)
        }
    }

    /// Whether the buffer at message offset `off` asks for runs.
    fn wants_runs<K: Stags + ?Sized, M: Memory + ?Sized>(
        &self,
        keys: &K,
        mem: &M,
        qpn: u32,
        mut off: u64,
    ) -> bool {
        for s in &self.wr.sg_list {
            let len = u64::from(s.length);
            if off >= len {
                off -= len;
                continue;
            }
            let at = keys.resolve(
                s.lkey.0,
                self.pd,
                qpn,
                s.addr.wrapping_add(off),
                1,
                AccessFlags::LOCAL_WRITE,
                false,
            );
            return at.is_ok_and(|(space, host)| mem.prefers_runs(space, host));
        }
        false
    }
}

/// Payload of the tagged Write in progress accepted and not yet placed: where the memory
/// asks for runs ([`Memory::prefers_runs`]), the middle segments of a Write are placed in
/// runs of up to [`HOLD`] octets, one memory access each, instead of one per FPDU (on the
/// daemon's descriptor path a `pwrite` costs a page walk and a bounce page per call). The
/// run is placed at the message's last segment, before a segment that does not continue
/// it, and before any other ULPDU is processed, so everything that can observe the
/// memory (a later Send's completion, a Read Request, an Immediate Data) comes after it.
/// Each segment's STag is checked when it arrives, and the run's range again when it is
/// placed, so a region deregistered or invalidated in between is never written.
#[derive(Debug, Default)]
pub(super) struct WriteRun {
    stag: u32,
    /// The tagged offset of the first held octet.
    offset: u64,
    bytes: Vec<u8>,
    /// Whether the sink wants runs, asked once per message.
    runs: Option<bool>,
}

/// Whose keys a held Write is checked with: the connection's PD and QP.
#[derive(Debug, Clone, Copy)]
pub(super) struct Owner {
    pub(super) pd: PdHandle,
    pub(super) qpn: u32,
}

impl WriteRun {
    /// Takes a segment of `payload` at tagged `offset` of `stag`, which resolved to
    /// `host` in `space`: holds it (a middle segment, where the memory asks for runs), or
    /// places it with what is held. A held run the segment does not continue is placed
    /// first.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn take<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        keys: &K,
        owner: Owner,
        (stag, offset): (u32, u64),
        (space, host): (AddrSpace, u64),
        payload: &[u8],
        last: bool,
        mem: &mut M,
    ) -> Result<(), Stop> {
        let continues = stag == self.stag && self.offset + self.bytes.len() as u64 == offset;
        if !self.bytes.is_empty() && !continues {
            self.place(keys, owner, mem)?;
        }
        let holds = !last
            && self.bytes.len() + payload.len() < HOLD
            && *self
                .runs
                .get_or_insert_with(|| mem.prefers_runs(space, host));
        if !holds && self.bytes.is_empty() {
            return mem
                .write(space, host, payload)
                .map_err(|_| Stop::Terminate(TerminateError::DdpCatastrophic, Cite::Ddp));
        }
        if self.bytes.is_empty() {
            (self.stag, self.offset) = (stag, offset);
        }
        hold(&mut self.bytes, payload);
        if holds {
            Ok(())
        } else {
            self.place(keys, owner, mem)
        }
    }

    /// The Write's last segment was taken: everything is placed, and the next Write asks
    /// the memory again.
    pub(super) fn end_message<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        keys: &K,
        owner: Owner,
        mem: &mut M,
    ) -> Result<(), Stop> {
        self.runs = None;
        self.place(keys, owner, mem)
    }

    /// Places the held octets where their STag points now. A range the STag no longer
    /// covers gets the Terminate its segments would have got; a memory that cannot take
    /// them is a catastrophic error of the data sink (as for a single segment).
    pub(super) fn place<K: Stags + ?Sized, M: Memory + ?Sized>(
        &mut self,
        keys: &K,
        owner: Owner,
        mem: &mut M,
    ) -> Result<(), Stop> {
        if self.bytes.is_empty() {
            return Ok(());
        }
        let len = self.bytes.len() as u64;
        let at = keys.resolve(
            self.stag,
            owner.pd,
            owner.qpn,
            self.offset,
            len,
            AccessFlags::REMOTE_WRITE,
            true,
        );
        let r = match at {
            Ok((space, host)) => mem
                .write(space, host, &self.bytes)
                .map_err(|_| Stop::Terminate(TerminateError::DdpCatastrophic, Cite::Ddp)),
            Err(e) => Err(Stop::Terminate(tagged_error(e), Cite::Ddp)),
        };
        self.bytes.clear();
        r
    }
}
