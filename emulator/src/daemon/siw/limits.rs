//! Limits of Linux siw (`siw.h`, `rdma/siw-abi.h`): what the device reports and what
//! `SiwNic` enforces when objects are created.

use crate::daemon::devices::nic::Limits;

pub const MAX_QP: u32 = 1024 * 100;
pub const MAX_QP_WR: u32 = 1024 * 32;
pub const MAX_ORD: u32 = 128;
pub const MAX_IRD: u32 = 128;
pub const MAX_SGE: u32 = 6;
pub const MAX_SGE_RD: u32 = 1;
pub const MAX_CQ: u32 = 1024 * 100;
pub const MAX_CQE: u32 = MAX_QP_WR * 100;
pub const MAX_MR: u32 = MAX_QP * 10;
pub const MAX_PD: u32 = MAX_QP;
pub const MAX_SRQ: u32 = MAX_QP;
pub const MAX_SRQ_WR: u32 = MAX_QP_WR * 10;
/// siw's `SIW_MAX_INLINE` is 80 octets; the daemon's send slots carry 512 and
/// perftest asks for more than 80, so this device accepts up to 512.
pub const MAX_INLINE: u32 = 512;

/// The limits this device reports (and enforces at creation).
pub fn siw_limits() -> Limits {
    Limits {
        max_qp: MAX_QP,
        max_qp_wr: MAX_QP_WR,
        max_sge: MAX_SGE,
        max_cq: MAX_CQ,
        max_cqe: MAX_CQE,
        max_mr: MAX_MR,
        max_pd: MAX_PD,
        max_qp_rd_atom: MAX_ORD,
        max_res_rd_atom: MAX_QP * MAX_IRD,
        max_srq: MAX_SRQ,
        max_srq_wr: MAX_SRQ_WR,
        max_srq_sge: MAX_SGE,
        max_ah: 0,
        max_mw: 0,
        max_inline: MAX_INLINE,
        max_msg_sz: u32::MAX,
    }
}
