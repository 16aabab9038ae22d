//! The `virtio_net_hdr` of packet sockets (`PACKET_VNET_HDR`): how the AF_PACKET backend
//! learns that a received frame is a UDP GSO super-frame and where to cut it.

/// The `virtio_net_hdr` a packet socket with `PACKET_VNET_HDR` puts before each frame
/// (linux/virtio_net.h): flags, gso_type, hdr_len, gso_size, csum_start, csum_offset.
pub const VNET_HDR_LEN: usize = 10;
/// `PACKET_VNET_HDR` (linux/if_packet.h).
pub const PACKET_VNET_HDR: libc::c_int = 15;
/// `VIRTIO_NET_HDR_GSO_UDP_L4`: a UDP GSO super-frame, cut at `gso_size`.
pub const VNET_GSO_UDP_L4: u8 = 5;

/// The segment size of a received frame's `virtio_net_hdr` when it is a UDP GSO
/// super-frame (a kernel UDP sender's `UDP_SEGMENT` datagram that veth or loopback passed
/// on whole).
pub fn gso_size_of(vnet: &[u8]) -> Option<usize> {
    let gso_type = *vnet.get(1)? & 0x7f;
    let size = u16::from_le_bytes([*vnet.get(4)?, *vnet.get(5)?]);
    (gso_type == VNET_GSO_UDP_L4 && size > 0).then_some(usize::from(size))
}
