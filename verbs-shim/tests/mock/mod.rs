//! A scripted daemon speaking wire::client, for the shim's tests and for running real
//! programs (`ibv_devinfo -v`) against the shim without rdma-emud
//! (`cargo run -p verbs-shim --example mock_daemon -- SOCKET`). It answers the control
//! requests with fixed values and creates real ring memfds, but executes no work.
#![allow(dead_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use verbs_shim::client::{recv_with_fds, send_with_fds};
use wire::client::*;

pub const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];

fn memfd(len: usize) -> OwnedFd {
    // SAFETY: memfd_create with a static name; checked.
    let fd = unsafe { libc::memfd_create(c"ring".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: fresh descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sizing our own memfd.
    assert_eq!(
        unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) },
        0
    );
    fd
}

/// Ring memfds the mock created, for the test to look inside: (CQ, QP).
#[derive(Default)]
pub struct Rings {
    pub cq: Option<OwnedFd>,
    pub qp: Option<OwnedFd>,
    pub srq: Option<OwnedFd>,
    /// Write end of the async event pipe of the last opened context.
    pub async_w: Option<OwnedFd>,
    /// Write end of the last completion channel's pipe.
    pub channel_w: Option<OwnedFd>,
}

pub const CQ_RING: RingLayout = RingLayout {
    offset: 0,
    entries: 16,
    slot_size: 64,
};
pub const SQ_RING: RingLayout = RingLayout {
    offset: 0,
    entries: 16,
    slot_size: 128,
};
pub const RQ_RING: RingLayout = RingLayout {
    offset: 4096,
    entries: 16,
    slot_size: 64,
};

/// Accepts one client on `listener`.
pub fn accept(listener: &OwnedFd) -> OwnedFd {
    // SAFETY: accept on our listening socket.
    let conn = unsafe {
        libc::accept(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    assert!(conn >= 0);
    // SAFETY: fresh descriptor.
    unsafe { OwnedFd::from_raw_fd(conn) }
}

/// Serves one client session until it closes.
pub fn serve(conn: OwnedFd, rings: Arc<Mutex<Rings>>) {
    let mut keep = Vec::new();
    let mut next_qp = 100;
    while let Ok((buf, fds)) = recv_with_fds(conn.as_raw_fd()) {
        let req = Request::decode(&buf).expect("request decodes");
        let mut out_fds: Vec<OwnedFd> = Vec::new();
        let result = match req.body {
            RequestBody::Hello { .. } => Ok(ReplyBody::Hello {
                version: PROTOCOL_VERSION,
                devices: vec![DeviceSummary {
                    name: "rxe0".into(),
                    node_guid: 0x0200_00ff_fe00_0001,
                    transport: 0,
                    node_type: 1,
                }],
            }),
            RequestBody::OpenDevice { name } => {
                assert_eq!(name, "rxe0");
                assert_eq!(fds.len(), 1, "/proc/self/mem travels with OpenDevice");
                let mut p = [0; 2];
                // SAFETY: pipe into a local array.
                assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
                // SAFETY: fresh descriptors.
                let (r, w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
                rings.lock().unwrap().async_w = Some(w.try_clone().unwrap());
                keep.push(w);
                // SAFETY: eventfd; checked.
                let ev = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
                assert!(ev >= 0);
                // SAFETY: fresh descriptor.
                out_fds = vec![r, unsafe { OwnedFd::from_raw_fd(ev) }, memfd(4096)];
                Ok(ReplyBody::DeviceOpened {
                    ctx: Handle(1),
                    device_attr: DeviceAttr {
                        fw_ver: "0.1.0".into(),
                        vendor_id: 0xffffff,
                        max_qp_wr: 1 << 20,
                        max_sge: 32,
                        phys_port_cnt: 1,
                        ..Default::default()
                    },
                    ports: vec![port()],
                    gids: vec![GidEntry {
                        index: 0,
                        port_num: 1,
                        gid: GID,
                        gid_type: 2,
                    }],
                })
            }
            RequestBody::QueryPort { port: 1, .. } => Ok(ReplyBody::PortAttr(port())),
            // One GID at index 0; the other slots are empty (the zero GID).
            RequestBody::QueryGid { port: 1, index, .. } => Ok(ReplyBody::Gid(GidEntry {
                index,
                port_num: 1,
                gid: if index == 0 { GID } else { [0; 16] },
                gid_type: if index == 0 { 2 } else { 0 },
            })),
            RequestBody::QueryPort { .. } => Err(libc::EINVAL),
            RequestBody::AllocPd { .. } => Ok(ReplyBody::Pd { handle: Handle(2) }),
            RequestBody::RegMr { .. } => Ok(ReplyBody::Mr {
                handle: Handle(3),
                lkey: 0x100,
                rkey: 0x200,
            }),
            RequestBody::CreateCq { cqe, .. } => {
                let ring = RingLayout {
                    offset: 0,
                    entries: cqe.max(1).next_power_of_two(),
                    slot_size: 64,
                };
                let fd = memfd(page_round(ring.end()));
                rings.lock().unwrap().cq = Some(fd.try_clone().unwrap());
                out_fds = vec![fd];
                Ok(ReplyBody::Cq {
                    handle: Handle(4),
                    cqe,
                    ring,
                })
            }
            RequestBody::CreateQp { init, .. } => {
                let c = init.cap;
                let sq = RingLayout {
                    offset: 0,
                    entries: c.max_send_wr.max(1).next_power_of_two(),
                    slot_size: slot::send_slot_size(c.max_send_sge, c.max_inline_data).unwrap(),
                };
                let rq = RingLayout {
                    offset: page_round(sq.end()) as u64,
                    entries: c.max_recv_wr.max(1).next_power_of_two(),
                    slot_size: slot::recv_slot_size(c.max_recv_sge).unwrap(),
                };
                let fd = memfd(page_round(rq.end()));
                rings.lock().unwrap().qp = Some(fd.try_clone().unwrap());
                out_fds = vec![fd];
                Ok(ReplyBody::Qp {
                    handle: Handle({
                        next_qp += 1;
                        next_qp
                    }),
                    qpn: 17,
                    cap: init.cap,
                    sq,
                    rq: Some(rq),
                })
            }
            RequestBody::ModifyQp { .. }
            | RequestBody::DestroyQp { .. }
            | RequestBody::DestroyCq { .. }
            | RequestBody::DeregMr { .. }
            | RequestBody::DeallocPd { .. }
            | RequestBody::CloseDevice { .. } => Ok(ReplyBody::Ok),
            RequestBody::CreateCompChannel { .. } => {
                assert_eq!(
                    fds.len(),
                    1,
                    "the pipe's write end travels with CreateCompChannel"
                );
                rings.lock().unwrap().channel_w = fds.into_iter().next();
                Ok(ReplyBody::CompChannel { handle: Handle(6) })
            }
            RequestBody::CreateSrq { attr, .. } => {
                let ring = RingLayout {
                    offset: 0,
                    entries: attr.max_wr.max(1).next_power_of_two(),
                    slot_size: slot::recv_slot_size(attr.max_sge).unwrap(),
                };
                let fd = memfd(page_round(ring.end()));
                rings.lock().unwrap().srq = Some(fd.try_clone().unwrap());
                out_fds = vec![fd];
                Ok(ReplyBody::Srq {
                    handle: Handle(8),
                    attr,
                    ring,
                })
            }
            RequestBody::DestroySrq { .. } => Ok(ReplyBody::Ok),
            RequestBody::CreateAh { .. } => Ok(ReplyBody::Ah { handle: Handle(7) }),
            RequestBody::DestroyAh { .. } | RequestBody::DestroyCompChannel { .. } => {
                Ok(ReplyBody::Ok)
            }
            _ => Err(libc::EOPNOTSUPP),
        };
        let reply = Reply {
            seq: req.seq,
            result,
        }
        .encode()
        .unwrap();
        let raw: Vec<i32> = out_fds.iter().map(|f| f.as_raw_fd()).collect();
        send_with_fds(conn.as_raw_fd(), &reply, &raw).unwrap();
    }
}

fn port() -> PortAttr {
    PortAttr {
        state: 4,
        max_mtu: 5,
        active_mtu: 3,
        gid_tbl_len: 4,
        link_layer: 2,
        pkey_tbl_len: 1,
        ..Default::default()
    }
}

fn page_round(len: u64) -> usize {
    (len as usize).next_multiple_of(4096)
}

pub fn listen(path: &std::path::Path) -> OwnedFd {
    // SAFETY: plain socket/bind/listen on a sockaddr_un we fill.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0);
        assert!(fd >= 0);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr
            .sun_path
            .iter_mut()
            .zip(path.as_os_str().as_encoded_bytes())
        {
            *d = *s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        assert_eq!(
            libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len),
            0
        );
        assert_eq!(libc::listen(fd, 4), 0);
        OwnedFd::from_raw_fd(fd)
    }
}
