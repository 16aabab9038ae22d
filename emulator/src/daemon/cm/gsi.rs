//! QP1 (the GSI) on a device: received RoCE v2 datagrams to QP1 go to the device's CM
//! agent instead of the transport core, and the agent's MADs leave as GSI packets
//! (`emu_core::cm::gsi`) through the same transmit path as every other packet (local
//! delivery, captures, sendmmsg).

use crate::daemon::device::Device;
use crate::daemon::memory::ProcMem;
use crate::daemon::nic::AppMemory;
use crate::daemon::udp::ROCE_V2_PORT;
use emu_core::cm::gsi;
use emu_core::Psn;
use std::net::SocketAddr;
use std::time::Instant;
use wire::roce::{bth, icrc};

/// Whether a RoCE v2 UDP payload is addressed to QP1.
fn is_gsi(payload: &[u8]) -> bool {
    bth::Packet::new_checked(payload).is_ok_and(|h| h.dest_qp() == gsi::GSI_QPN)
}

/// IPv4-mapped socket addresses as IPv4 (the ICRC and the agent use the IP form).
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(super::addr::canonical(a.ip()), a.port())
}

/// The ICRC check every received packet gets (an IPv4 ID that makes it match is solved
/// for, as rxe sends non-zero IDs).
fn icrc_ok(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> bool {
    match (src, dst) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => !matches!(
            icrc::verify_udp4_any_id(*s.ip(), *d.ip(), s.port(), d.port(), payload),
            icrc::IcrcCheck::Invalid
        ),
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            icrc::verify_udp6(*s.ip(), *d.ip(), s.port(), d.port(), payload)
        }
        _ => false,
    }
}

impl Device {
    /// A received RoCE v2 datagram: QP1 traffic to the CM agent, the rest to the core.
    pub(in crate::daemon) fn deliver(
        &mut self,
        now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        payload: &[u8],
        mem: &mut dyn AppMemory,
    ) {
        if !is_gsi(payload) {
            self.nic.handle_datagram(now, src, dst, payload, mem);
            return;
        }
        let (src, dst) = (canonical(src), canonical(dst));
        if !icrc_ok(src, dst, payload) {
            self.gsi_rx_dropped += 1;
            tracing::trace!(%src, "GSI packet with a bad ICRC dropped");
            return;
        }
        match gsi::decapsulate(payload) {
            Some(mad) => self.cm.handle_mad(now, src.ip(), dst.ip(), mad),
            None => {
                self.gsi_rx_dropped += 1;
                tracing::trace!(%src, "QP1 packet that is not a GSI MAD dropped");
            }
        }
    }
}

/// Sends every MAD the device's agent has queued, as GSI packets from the device's
/// socket for the MAD's source address to the peer's port 4791. Whether any left.
pub(in crate::daemon) fn stage_gsi_transmits(
    d: &mut Device,
    bufs: &mut [Vec<u8>],
    meta: &mut Vec<(SocketAddr, SocketAddr)>,
    local_path: bool,
    now: Instant,
    mem: &mut ProcMem,
) -> bool {
    let mut sent = false;
    loop {
        meta.clear();
        for buf in bufs.iter_mut() {
            let Some(t) = d.cm.poll_transmit() else {
                break;
            };
            buf.clear();
            buf.resize(gsi::GSI_PACKET_LEN, 0);
            let psn = Psn::new(d.gsi_psn);
            d.gsi_psn = d.gsi_psn.wrapping_add(1) & 0xff_ffff;
            // Our sockets send from 4791: the ICRC must cover that source port.
            gsi::encapsulate_from(t.src, t.dst, ROCE_V2_PORT, psn, &t.mad, buf);
            meta.push((
                SocketAddr::new(t.src, ROCE_V2_PORT),
                SocketAddr::new(t.dst, ROCE_V2_PORT),
            ));
        }
        let staged = meta.len();
        if staged == 0 {
            return sent;
        }
        sent = true;
        crate::daemon::datapath::transmit(d, &bufs[..staged], meta, local_path, now, mem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    #[test]
    fn gsi_packets_are_recognised_and_checked() {
        let src: IpAddr = "10.0.0.1".parse().unwrap();
        let dst: IpAddr = "10.0.0.2".parse().unwrap();
        let mut buf = vec![0u8; gsi::GSI_PACKET_LEN];
        let mad = [7u8; wire::cm::MAD_LEN];
        gsi::encapsulate_from(src, dst, ROCE_V2_PORT, Psn::new(5), &mad, &mut buf);
        assert!(is_gsi(&buf));
        let (s, d) = (
            SocketAddr::new(src, ROCE_V2_PORT),
            SocketAddr::new(dst, ROCE_V2_PORT),
        );
        assert!(icrc_ok(s, d, &buf));
        assert!(!icrc_ok(SocketAddr::new(src, 0xd872), d, &buf));
        buf[40] ^= 1;
        assert!(!icrc_ok(s, d, &buf));
        assert!(!is_gsi(&buf[..8]));
    }
}
