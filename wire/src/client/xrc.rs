//! XRC's control messages (`ibv_open_xrcd`, `ibv_close_xrcd`, `ibv_create_srq_ex` with
//! `IBV_SRQT_XRC`, `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`), carried in
//! [`RequestBody::Xrc`](super::RequestBody::Xrc) and [`ReplyBody::Xrc`](super::ReplyBody::Xrc).
//! An XRC initiator (`IBV_QPT_XRC_SEND`) is an ordinary `CreateQp` whose `recv_cq` is its
//! `send_cq` and which gets no receive queue. Devices without XRC (siw) answer EOPNOTSUPP.

use super::attr::Handle;
use super::attr::SrqAttr;
use super::ring::RingLayout;
use serde::{Deserialize, Serialize};

/// A request about XRC objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum XrcRequest {
    /// `ibv_open_xrcd`. With `file`, `fd[0]` is the file the domain is tied to: every
    /// open of the same file (device and inode) on one device of the daemon, by any of
    /// its clients, gets the same domain. Without, a new private domain. Reply `Xrcd`.
    Open {
        /// The device context.
        ctx: Handle,
        /// Whether `fd[0]` names a file (`ibv_xrcd_init_attr.fd` other than -1).
        file: bool,
        /// With a file, as the kernel's uverbs: a file with no domain yet gets one only
        /// with `O_CREAT` (EAGAIN otherwise); `O_EXCL` on a file that has one is EINVAL.
        oflags: u32,
    },
    /// `ibv_close_xrcd`: EBUSY on the last close while SRQs or target QPs remain.
    Close {
        /// The domain as this session opened it.
        xrcd: Handle,
    },
    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`. Reply `Srq`, with the ring's memfd.
    CreateSrq {
        /// The PD whose memory the SRQ's receives (and RDMA at its targets) use.
        pd: Handle,
        /// The domain (opened by this session, on the PD's context).
        xrcd: Handle,
        /// The CQ receives complete on (of the PD's context).
        cq: Handle,
        /// As for `CreateSrq`.
        attr: SrqAttr,
    },
    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: a target QP in the domain. Reply
    /// `Qp` (the memfd holds an empty send queue ring; no receive queue).
    CreateTgtQp {
        /// The domain.
        xrcd: Handle,
    },
}

/// Answers to [`XrcRequest`]s.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum XrcReply {
    /// Answers `Open`.
    Xrcd {
        /// This session's handle of the domain.
        handle: Handle,
    },
    /// Answers `CreateSrq`. `fd[0]`: the ring memfd.
    Srq {
        /// The new SRQ.
        handle: Handle,
        /// The SRQ's actual attributes.
        attr: SrqAttr,
        /// The SRQ ring's place in the memfd.
        ring: RingLayout,
        /// The SRQ number senders put in the XRCETH (`ibv_get_srq_num`; 24 bits).
        srqn: u32,
    },
}
