//! One side of a connection for the traffic tests: a client with a context, PD, MR, CQ and
//! QP, posting WQEs into its rings and polling its CQ ring as the shim does.

use super::*;
use emulator::client::Client;
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;
use wire::client::proto::Handle;
use wire::client::slot::{Cqe, CqeRepr, RecvWqeRepr, SendData, SendWqeRepr, Sge, SgeList};
use wire::client::verbs::{access, qp_attr_mask as m, qp_state, qp_type, send_flags, wr_opcode};
use wire::client::{
    AhAttr, GlobalRoute, QpAttr, QpCap, QpInitAttr, ReplyBody, RequestBody, SessionPage, SrqAttr,
};

pub const BUF: usize = 64 * 1024;

/// One side: a client with a context, PD, MR, CQ and RC QP.
pub struct Side {
    pub c: Client,
    pub ctx: Ctx,
    pub buf: Vec<u8>,
    pub lkey: u32,
    pub rkey: u32,
    /// The MR over `buf`.
    pub mr: Handle,
    pub pd: Handle,
    pub qp: Handle,
    pub qpn: u32,
    pub cq_h: Handle,
    pub cq: MappedRing,
    pub rings: MappedRing,
    pub gid: [u8; 16],
    /// The local GID index used in the path (`gid` is the entry at it).
    pub sgid_index: u8,
    /// Read end of the CQ's completion channel, if any.
    pub channel: Option<std::os::fd::OwnedFd>,
    pub qp_type: u32,
    /// The SRQ's ring, when receives go to an SRQ.
    pub srq_ring: Option<MappedRing>,
}

impl Side {
    pub fn new(d: &TestDaemon) -> Side {
        Side::with(d, qp_type::RC, false)
    }

    pub fn with(d: &TestDaemon, kind: u32, with_channel: bool) -> Side {
        Side::build(d, kind, with_channel, false)
    }

    pub fn build(d: &TestDaemon, kind: u32, with_channel: bool, with_srq: bool) -> Side {
        Side::build_at(&d.socket, kind, with_channel, with_srq)
    }

    /// A side on the daemon listening at `socket`.
    pub fn build_at(
        socket: &std::path::Path,
        kind: u32,
        with_channel: bool,
        with_srq: bool,
    ) -> Side {
        let mut c = Client::connect(socket).expect("connect").0;
        let ctx = open_device(&mut c);
        let ReplyBody::DeviceOpened { gids, .. } = &ctx.attrs else {
            unreachable!()
        };
        let gid = gids[0].gid;
        let ReplyBody::Pd { handle: pd } = c
            .call(RequestBody::AllocPd { ctx: ctx.handle }, &[])
            .unwrap()
            .0
        else {
            panic!()
        };
        let buf = vec![0u8; BUF];
        let acc = access::LOCAL_WRITE
            | access::REMOTE_WRITE
            | access::REMOTE_READ
            | access::REMOTE_ATOMIC
            | access::MW_BIND;
        let addr = buf.as_ptr() as u64;
        let reply = c
            .call(
                RequestBody::RegMr {
                    pd,
                    addr,
                    length: BUF as u64,
                    iova: addr,
                    access: acc,
                    shared: Vec::new(),
                },
                &[],
            )
            .unwrap()
            .0;
        let ReplyBody::Mr {
            handle: mr,
            lkey,
            rkey,
        } = reply
        else {
            panic!("{reply:?}")
        };
        let (channel, ch_handle) = if with_channel {
            let (r, w) = emulator::daemon::sys::pipe().unwrap();
            let ReplyBody::CompChannel { handle } = c
                .call(
                    RequestBody::CreateCompChannel { ctx: ctx.handle },
                    &[w.as_raw_fd()],
                )
                .unwrap()
                .0
            else {
                panic!()
            };
            (Some(r), Some(handle))
        } else {
            (None, None)
        };
        let (body, fds) = c
            .call(
                RequestBody::CreateCq {
                    ctx: ctx.handle,
                    cqe: 64,
                    channel: ch_handle,
                    comp_vector: 0,
                    timestamps: false,
                },
                &[],
            )
            .unwrap();
        let ReplyBody::Cq {
            handle: cq_h, ring, ..
        } = body
        else {
            panic!("{body:?}")
        };
        let cq = MappedRing::new(&fds[0], vec![ring]);
        let cap = QpCap {
            max_send_wr: 32,
            max_recv_wr: 32,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        };
        let (srq, srq_ring) = if with_srq {
            let attr = SrqAttr {
                max_wr: 64,
                max_sge: 1,
                srq_limit: 0,
            };
            let (body, fds) = c.call(RequestBody::CreateSrq { pd, attr }, &[]).unwrap();
            let ReplyBody::Srq { handle, ring, .. } = body else {
                panic!("{body:?}")
            };
            (Some(handle), Some(MappedRing::new(&fds[0], vec![ring])))
        } else {
            (None, None)
        };
        let init = QpInitAttr {
            send_cq: cq_h,
            recv_cq: cq_h,
            srq,
            cap,
            qp_type: kind,
            sq_sig_all: false,
        };
        let (body, fds) = c.call(RequestBody::CreateQp { pd, init }, &[]).unwrap();
        let ReplyBody::Qp {
            handle: qp,
            qpn,
            sq,
            rq,
            ..
        } = body
        else {
            panic!("{body:?}")
        };
        let rings = MappedRing::new(&fds[0], std::iter::once(sq).chain(rq).collect());
        Side {
            c,
            ctx,
            buf,
            lkey,
            rkey,
            mr,
            pd,
            qp,
            qpn,
            cq_h,
            cq,
            rings,
            gid,
            sgid_index: 0,
            channel,
            qp_type: kind,
            srq_ring,
        }
    }

    pub fn addr(&self, off: usize) -> u64 {
        self.buf.as_ptr() as u64 + off as u64
    }

    pub fn modify(&mut self, attr: QpAttr, mask: u32) {
        self.c
            .call(
                RequestBody::ModifyQp {
                    qp: self.qp,
                    attr,
                    mask,
                },
                &[],
            )
            .unwrap_or_else(|e| panic!("modify_qp {mask:#x}: {e}"));
    }

    /// RESET → INIT → RTR → RTS towards `peer`, as ibv_rc_pingpong does.
    pub fn connect(&mut self, peer_qpn: u32, peer_gid: [u8; 16]) {
        self.connect_with(peer_qpn, peer_gid, 14, 7);
    }

    pub fn connect_with(&mut self, peer_qpn: u32, peer_gid: [u8; 16], timeout: u8, retry_cnt: u8) {
        if self.qp_type == qp_type::UD {
            self.modify(
                QpAttr {
                    qp_state: qp_state::INIT,
                    port_num: 1,
                    qkey: 0x1111_1111,
                    ..QpAttr::default()
                },
                m::STATE | m::PKEY_INDEX | m::PORT | m::QKEY,
            );
            self.modify(
                QpAttr {
                    qp_state: qp_state::RTR,
                    ..QpAttr::default()
                },
                m::STATE,
            );
            self.modify(
                QpAttr {
                    qp_state: qp_state::RTS,
                    sq_psn: 0,
                    ..QpAttr::default()
                },
                m::STATE | m::SQ_PSN,
            );
            return;
        }
        let acc = access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
        self.modify(
            QpAttr {
                qp_state: qp_state::INIT,
                port_num: 1,
                qp_access_flags: acc,
                ..QpAttr::default()
            },
            m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS,
        );
        let ah = AhAttr {
            grh: GlobalRoute {
                dgid: peer_gid,
                sgid_index: self.sgid_index,
                hop_limit: 1,
                ..GlobalRoute::default()
            },
            is_global: 1,
            port_num: 1,
            ..AhAttr::default()
        };
        let rtr = QpAttr {
            qp_state: qp_state::RTR,
            path_mtu: 3,
            dest_qp_num: peer_qpn,
            rq_psn: 0,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            ah_attr: ah,
            ..QpAttr::default()
        };
        let rtr_mask = m::STATE | m::AV | m::PATH_MTU | m::DEST_QPN | m::RQ_PSN;
        let rc_rtr = if self.qp_type == qp_type::RC {
            m::MAX_DEST_RD_ATOMIC | m::MIN_RNR_TIMER
        } else {
            0
        };
        self.modify(rtr, rtr_mask | rc_rtr);
        let rts = QpAttr {
            qp_state: qp_state::RTS,
            timeout,
            retry_cnt,
            rnr_retry: 7,
            sq_psn: 0,
            max_rd_atomic: 4,
            ..QpAttr::default()
        };
        let rc_rts = if self.qp_type == qp_type::RC {
            m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY | m::MAX_QP_RD_ATOMIC
        } else {
            0
        };
        self.modify(rts, m::STATE | m::SQ_PSN | rc_rts);
    }

    /// Publishes a slot, then rings the doorbell if the engine sleeps (the shim's rule).
    pub fn publish(&self, ring: usize, slot: &[u8]) {
        match (&self.srq_ring, ring) {
            (Some(srq), 1) => srq.producer(0).push(slot),
            _ => self.rings.producer(ring).push(slot),
        }
        .expect("ring has room");
        fence(Ordering::SeqCst);
        if SessionPage::new(self.ctx.page.words()).unwrap().sleeping() {
            emulator::daemon::sys::eventfd_signal(self.ctx.doorbell.as_raw_fd()).unwrap();
        }
    }

    pub fn post_recv(&self, wr_id: u64, off: usize, len: u32) {
        let sge = [Sge {
            addr: self.addr(off),
            length: len,
            lkey: self.lkey,
        }];
        let size = self
            .srq_ring
            .as_ref()
            .map_or(&self.rings, |r| r)
            .layouts
            .last()
            .unwrap()
            .slot_size;
        let mut slot = vec![0u8; size as usize];
        RecvWqeRepr {
            wr_id,
            sg_list: SgeList::Slice(&sge),
        }
        .emit(&mut slot)
        .unwrap();
        self.publish(1, &slot);
    }

    pub fn post_send(&self, wqe: SendWqeRepr<'_>) {
        let mut slot = vec![0u8; self.rings.layouts[0].slot_size as usize];
        wqe.emit(&mut slot).unwrap();
        self.publish(0, &slot);
    }

    pub fn poll(&self) -> CqeRepr {
        let mut cons = self.cq.consumer(0);
        let mut buf = [0u8; 64];
        wait_for(Duration::from_secs(10), || {
            cons.pop(&mut buf).unwrap().then_some(())
        })
        .expect("a completion within 10 s");
        CqeRepr::parse(&Cqe::new_checked(&buf[..]).unwrap()).unwrap()
    }

    /// The next completion if one is there now.
    pub fn poll_once(&self) -> Option<CqeRepr> {
        let mut buf = [0u8; 64];
        self.cq.consumer(0).pop(&mut buf).unwrap().then_some(())?;
        Some(CqeRepr::parse(&Cqe::new_checked(&buf[..]).unwrap()).unwrap())
    }

    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        fence(Ordering::SeqCst);
        // SAFETY: in-bounds reads of our own buffer, which the daemon wrote through
        // /proc/self/mem; volatile so the compiler does not assume it unchanged.
        (off..off + len)
            .map(|i| unsafe { std::ptr::read_volatile(self.buf.as_ptr().add(i)) })
            .collect()
    }

    pub fn fill(&mut self, off: usize, len: usize, seed: u8) {
        for (i, b) in self.buf[off..off + len].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
        }
    }
}

pub fn wqe<'a>(wr_id: u64, opcode: u8, sges: &'a [Sge]) -> SendWqeRepr<'a> {
    SendWqeRepr {
        wr_id,
        opcode,
        send_flags: send_flags::SIGNALED,
        imm_data: 0,
        remote_addr: 0,
        rkey: 0,
        remote_qpn: 0,
        compare_add: 0,
        swap: 0,
        ah: 0,
        remote_qkey: 0,
        data: SendData::Sges(SgeList::Slice(sges)),
    }
}

pub fn pair(d: &TestDaemon, kind: u32, channel: bool) -> (Side, Side) {
    let mut a = Side::with(d, kind, channel);
    let mut b = Side::with(d, kind, channel);
    let (aq, ag, bq, bg) = (a.qpn, a.gid, b.qpn, b.gid);
    a.connect(bq, bg);
    b.connect(aq, ag);
    (a, b)
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Binds window `mw_rkey` of `side` to `[off, off + len)` of its MR through its SQ.
pub fn bind(side: &Side, wr_id: u64, mw_rkey: u32, new_rkey: u32, off: usize, len: u64) -> CqeRepr {
    let mut w = wqe(wr_id, wr_opcode::BIND_MW, &[]);
    w.remote_addr = side.addr(off);
    w.compare_add = len;
    w.rkey = mw_rkey;
    w.swap = u64::from(side.lkey);
    w.imm_data = new_rkey;
    w.remote_qpn = access::REMOTE_WRITE | access::REMOTE_READ;
    side.post_send(w);
    side.poll()
}

impl Side {
    /// Uses the first GID entry of the daemon's table that `pick` accepts.
    pub fn use_gid(&mut self, pick: impl Fn(&[u8; 16]) -> bool) -> bool {
        let ReplyBody::DeviceOpened { gids, .. } = &self.ctx.attrs else {
            return false;
        };
        match gids.iter().find(|g| pick(&g.gid)) {
            Some(g) => {
                self.gid = g.gid;
                self.sgid_index = g.index as u8;
                true
            }
            None => false,
        }
    }
}
