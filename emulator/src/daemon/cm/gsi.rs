//! QP1 (the GSI) on a device, sending: the CM agent's MADs leave as GSI packets
//! (`emu_core::cm::gsi`) through the same transmit path as every other packet (local
//! delivery, captures, sendmmsg). Received MADs the core routes to QP1
//! (`emu_core::cm::gsi_route`, in `ServedDevice::deliver`) go to the device's CM agent,
//! REQs for a service nobody listens on yet after a grace (`devices/parked.rs`).

use crate::daemon::devices::nic::TxMeta;
use crate::daemon::link::datagram::ROCE_V2_PORT;
use emu_core::cm::gsi;
use emu_core::cm::CmAgent;
use emu_core::Psn;
use std::net::SocketAddr;

/// Stages the MADs a device's agent `cm` has queued, as many as `bufs` holds, as GSI
/// packets from the device's socket for the MAD's source address to the peer's port 4791;
/// `gsi_psn` is the PSN of QP1's next packet. Returns how many were staged (0: none left);
/// the caller sends them.
pub(in crate::daemon) fn stage_gsi_transmits(
    cm: &mut CmAgent,
    gsi_psn: &mut u32,
    bufs: &mut [Vec<u8>],
    meta: &mut Vec<TxMeta>,
) -> usize {
    meta.clear();
    for buf in bufs.iter_mut() {
        let Some(t) = cm.poll_transmit() else {
            break;
        };
        buf.clear();
        buf.resize(gsi::GSI_PACKET_LEN, 0);
        let psn = Psn::new(*gsi_psn);
        *gsi_psn = gsi_psn.wrapping_add(1) & 0xff_ffff;
        // Our sockets send from 4791: the ICRC must cover that source port.
        gsi::encapsulate_from(t.src, t.dst, ROCE_V2_PORT, psn, &t.mad, buf);
        // MADs leave with DSCP 0: the connection's traffic class is for its own QP.
        meta.push(TxMeta {
            src: SocketAddr::new(t.src, ROCE_V2_PORT),
            dst: SocketAddr::new(t.dst, ROCE_V2_PORT),
            traffic_class: 0,
        });
    }
    meta.len()
}
