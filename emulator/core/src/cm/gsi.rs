//! CM MADs on the wire: a UD SEND_ONLY from QP1 to QP1 (the GSI, IBA ch. 13), as rxe sends
//! them over RoCE v2 (checked against `tests/corpora/rxe/rdma_cm.pcap`):
//! BTH (opcode 0x64, P_Key 0xffff, destination QP 1, AckReq set, PSN of QP1's send
//! queue), DETH (Q_Key 0x80010000, source QP 1), the 256-octet MAD, ICRC; UDP source
//! port 0xd872 on both sides (rxe derives a QP's port from its number, and QP1 is QP1
//! everywhere), destination 4791.

use std::net::IpAddr;

use wire::roce::{bth, deth, icrc, packet, Opcode, Pkey, Psn, Qkey, Qpn, ICRC_LEN};

/// QP1, the General Services Interface.
pub const GSI_QPN: Qpn = Qpn(1);
/// The well-known Q_Key of QP1 (IBA ch. 13).
pub const GSI_QKEY: Qkey = Qkey(0x8001_0000);
/// UD SEND_ONLY.
pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
/// The UDP source port rxe sends QP1 packets from (0xc000 + hash_32(1, 14)).
pub const GSI_UDP_SRC_PORT: u16 = 0xd872;
/// The RoCE v2 UDP port.
pub const ROCE_V2_PORT: u16 = 4791;
/// Length of a GSI packet: BTH + DETH + MAD + ICRC.
pub const GSI_PACKET_LEN: usize = bth::HEADER_LEN + deth::HEADER_LEN + wire::cm::MAD_LEN + ICRC_LEN;

/// Writes the RoCE v2 UDP payload (BTH through ICRC) carrying `mad` from `src` to `dst`
/// with `psn`, the ICRC computed as a kernel UDP socket with DF sends it (IPv4 ID 0).
/// `buf` must hold [`GSI_PACKET_LEN`] octets; returns that length.
pub fn encapsulate(
    src: IpAddr,
    dst: IpAddr,
    psn: Psn,
    mad: &[u8; wire::cm::MAD_LEN],
    buf: &mut [u8],
) -> usize {
    encapsulate_from(src, dst, GSI_UDP_SRC_PORT, psn, mad, buf)
}

/// [`encapsulate`] for a packet that leaves from UDP port `src_port` instead of rxe's
/// QP1 port (the ICRC covers the UDP ports: a daemon whose socket is bound to 4791 sends
/// from 4791).
pub fn encapsulate_from(
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    psn: Psn,
    mad: &[u8; wire::cm::MAD_LEN],
    buf: &mut [u8],
) -> usize {
    let b = &mut buf[..GSI_PACKET_LEN];
    b.fill(0);
    {
        let mut h = bth::Packet::new_unchecked(&mut b[..bth::HEADER_LEN]);
        h.set_opcode(UD_SEND_ONLY);
        h.set_flags(false, false, 0, 0);
        h.set_pkey(Pkey::DEFAULT);
        h.set_dest_qp(GSI_QPN);
        h.set_ack_req(true);
        h.set_psn(psn);
    }
    {
        let mut d = deth::Packet::new_unchecked(
            &mut b[bth::HEADER_LEN..bth::HEADER_LEN + deth::HEADER_LEN],
        );
        d.set_qkey(GSI_QKEY);
        d.set_src_qp(GSI_QPN);
    }
    let at = bth::HEADER_LEN + deth::HEADER_LEN;
    b[at..at + wire::cm::MAD_LEN].copy_from_slice(mad);
    let covered = &b[..GSI_PACKET_LEN - ICRC_LEN];
    let crc = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => icrc::for_udp4(s, d, src_port, ROCE_V2_PORT, covered),
        (s, d) => icrc::for_udp6(to_v6(s), to_v6(d), src_port, ROCE_V2_PORT, covered),
    };
    packet::Packet::new_unchecked(&mut b[..]).set_icrc(crc);
    GSI_PACKET_LEN
}

fn to_v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The MAD inside a RoCE v2 UDP payload, if it is a UD SEND_ONLY to QP1 with the GSI
/// Q_Key. The ICRC is not checked here (the driver verifies it as for every packet).
pub fn decapsulate(payload: &[u8]) -> Option<&[u8]> {
    if payload.len() < GSI_PACKET_LEN {
        return None;
    }
    let h = bth::Packet::new_checked(payload).ok()?;
    if h.opcode() != UD_SEND_ONLY || h.dest_qp() != GSI_QPN {
        return None;
    }
    let d = deth::Packet::new_checked(&payload[bth::HEADER_LEN..]).ok()?;
    if d.qkey() != GSI_QKEY {
        return None;
    }
    let at = bth::HEADER_LEN + deth::HEADER_LEN;
    Some(&payload[at..at + wire::cm::MAD_LEN])
}
