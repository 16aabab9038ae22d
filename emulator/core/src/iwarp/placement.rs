//! What happens to received data before RDMAP sees it succeed: DDP placement into the
//! scatter list of a receive WR (RFC 5041 §3.4, checked as LOCAL_WRITE through the STag
//! table), and the Terminate cause (RFC 5040 §7, RFC 5041 §7) of each way placement, a
//! source STag or the parse of a segment can fail, with the WR status a Terminate from the
//! peer gives the requester, and the Terminate message that quotes the offending
//! segment. Pure functions over the STag table and memory; the receive side (`rx.rs`)
//! and the connection (`conn.rs`) call them.

use wire::iwarp::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use wire::iwarp::rdmap::READ_REQUEST_LEN;
use wire::iwarp::{Error as WireError, TerminateError, TerminateRepr};

use super::stags::{StagError, Stags};
use crate::attr::Sge;
use crate::memory::Memory;
use crate::types::{AccessFlags, WcStatus};

/// Which part of the offending segment a Terminate quotes (RFC 5040 §7: the DDP header,
/// and the RDMAP header of a Read Request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cite {
    Nothing,
    Ddp,
    Rdmap,
}

/// Why the receive side stopped the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// This side sends a Terminate with `error`, quoting the segment as told.
    Terminate(TerminateError, Cite),
    /// The peer sent a Terminate.
    Terminated(TerminateError),
}

/// The offending segment, for the Terminate's D and R fields.
#[derive(Clone, Copy)]
pub(super) struct Offender<'a> {
    pub ulpdu: &'a [u8],
    pub rdmap: bool,
}

/// The Terminate for `error` (RFC 5040 §7), quoting the DDP header of the offending
/// segment and, for a Read Request, its RDMAP header.
pub(super) fn terminate_repr(
    error: TerminateError,
    offender: Option<Offender<'_>>,
) -> TerminateRepr<'_> {
    let ddp = offender.and_then(|o| {
        let tagged = o.ulpdu.first().is_some_and(|c| c & 0x80 != 0);
        let hl = if tagged {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        o.ulpdu.get(..hl).map(|h| (o.ulpdu.len() as u16, h))
    });
    let rdmap_header = offender.filter(|o| o.rdmap).and_then(|o| {
        o.ulpdu
            .get(UNTAGGED_HEADER_LEN..UNTAGGED_HEADER_LEN + READ_REQUEST_LEN)
    });
    TerminateRepr {
        error,
        segment_length_valid: ddp.is_some(),
        ddp,
        rdmap_header,
    }
}

/// RFC 5041 §7.2 / RFC 5040 §7: errors of the data sink's tagged placement.
pub(super) fn tagged_error(e: StagError) -> TerminateError {
    match e {
        StagError::Invalid => TerminateError::DdpTaggedInvalidStag,
        StagError::NotAssociated => TerminateError::DdpTaggedStagNotAssociated,
        StagError::BaseBounds => TerminateError::DdpTaggedBaseBounds,
        // DDP has no access code (RFC 5041 §7.2); RDMAP checks rights (RFC 5040 §7.2).
        StagError::Access => TerminateError::RdmapAccessRights,
    }
}

/// RFC 5040 §7.2: errors of the data source (Read Request, Atomic Request).
pub(super) fn source_error(e: StagError) -> TerminateError {
    match e {
        StagError::Invalid => TerminateError::RdmapInvalidStag,
        StagError::NotAssociated => TerminateError::RdmapStagNotAssociated,
        StagError::BaseBounds => TerminateError::RdmapBaseBounds,
        StagError::Access => TerminateError::RdmapAccessRights,
    }
}

/// The Terminate cause of a segment the wire parser refused.
pub(super) fn parse_error(e: WireError, ulpdu: &[u8]) -> TerminateError {
    let tagged = ulpdu.first().is_some_and(|c| c & 0x80 != 0);
    match e {
        WireError::BadDdpVersion(_) if tagged => TerminateError::DdpTaggedInvalidVersion,
        WireError::BadDdpVersion(_) => TerminateError::DdpUntaggedInvalidVersion,
        WireError::BadRdmapVersion(_) => TerminateError::RdmapInvalidVersion,
        WireError::UnknownOpcode(_) | WireError::WrongBufferModel(_) => {
            TerminateError::RdmapUnexpectedOpcode
        }
        WireError::NotLastSegment => TerminateError::RdmapUnexpectedOpcode,
        WireError::BadQueueNumber(_) => TerminateError::DdpUntaggedInvalidQn,
        WireError::BadReadRequestLength(_) => TerminateError::RdmapOperationUnspecified,
        _ => TerminateError::DdpCatastrophic,
    }
}

/// Status of the requester's WR when the peer terminates (IBA 10.7.3.1 analogues).
pub(super) fn remote_status(e: TerminateError) -> WcStatus {
    use wire::iwarp::TermLayer;
    match e.fields() {
        (TermLayer::Rdmap, 1, _) | (TermLayer::Ddp, 1, _) => WcStatus::RemAccessErr,
        (TermLayer::Rdmap, 2, _) => WcStatus::RemOpErr,
        (TermLayer::Ddp, 2, _) => WcStatus::RemInvReqErr,
        _ => WcStatus::FatalErr,
    }
}

pub(super) enum ScatterError {
    TooLong,
    Protection,
}

/// Writes `data` at message offset `off` of the scatter list `sges` (LOCAL_WRITE).
pub(super) fn scatter<K: Stags + ?Sized, M: Memory + ?Sized>(
    keys: &K,
    mem: &mut M,
    conn_pd: crate::types::PdHandle,
    qpn: u32,
    sges: &[Sge],
    mut off: u64,
    mut data: &[u8],
) -> Result<(), ScatterError> {
    for s in sges {
        if data.is_empty() {
            return Ok(());
        }
        let len = u64::from(s.length);
        if off >= len {
            off -= len;
            continue;
        }
        let n = (len - off).min(data.len() as u64) as usize;
        let (space, host) = keys
            .resolve(
                s.lkey.0,
                conn_pd,
                qpn,
                s.addr.wrapping_add(off),
                n as u64,
                AccessFlags::LOCAL_WRITE,
                false,
            )
            .map_err(|_| ScatterError::Protection)?;
        mem.write(space, host, &data[..n])
            .map_err(|_| ScatterError::Protection)?;
        data = &data[n..];
        off = 0;
    }
    if data.is_empty() {
        Ok(())
    } else {
        Err(ScatterError::TooLong)
    }
}
