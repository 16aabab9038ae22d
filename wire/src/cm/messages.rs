//! CM messages (IBA vol. 1 12.6), laid out after the 24-octet MAD header. Offsets below
//! are from the start of the message (MAD octet 24), as IBA tables 106–120 give them.
//! Private data fills each message to the end of the 256-octet MAD; on emit, shorter
//! private data is padded with zeros.

use super::mad::{MadHeader, HEADER_LEN, MAD_LEN, MGMT_CLASS_CM};
use super::{be16, be24, be32, be64, bits, put24, set_bits, Error, Result};
use crate::roce::{Pkey, Psn, Qkey, Qpn};

/// Length of a CM message (MAD minus its header).
pub const MESSAGE_LEN: usize = MAD_LEN - HEADER_LEN;

/// Attribute IDs of the CM messages (IBA table 104).
pub mod attr {
    /// ConnectRequest.
    pub const REQ: u16 = 0x0010;
    /// Message Receipt Acknowledgement.
    pub const MRA: u16 = 0x0011;
    /// Reject.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply.
    pub const DREP: u16 = 0x0016;
    /// Service ID Resolution Request.
    pub const SIDR_REQ: u16 = 0x0017;
    /// Service ID Resolution Response.
    pub const SIDR_REP: u16 = 0x0018;
}

/// One path of a REQ (primary at 52, alternate at 96; 44 octets each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmPath {
    /// Local port LID (0xffff, permissive, on RoCE).
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID.
    pub local_gid: [u8; 16],
    /// Remote port GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local.
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits).
    pub local_ack_timeout: u8,
}

/// Length of a path in a REQ.
const PATH_LEN: usize = 44;

impl CmPath {
    fn parse(b: &[u8]) -> CmPath {
        let mut local_gid = [0u8; 16];
        local_gid.copy_from_slice(&b[4..20]);
        let mut remote_gid = [0u8; 16];
        remote_gid.copy_from_slice(&b[20..36]);
        CmPath {
            local_lid: be16(&b[0..2]),
            remote_lid: be16(&b[2..4]),
            local_gid,
            remote_gid,
            flow_label: be32(&b[36..40]) >> 12,
            packet_rate: bits(b[39], 2, 6),
            traffic_class: b[40],
            hop_limit: b[41],
            sl: bits(b[42], 0, 4),
            subnet_local: bits(b[42], 4, 1) != 0,
            local_ack_timeout: bits(b[43], 0, 5),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        b[0..2].copy_from_slice(&self.local_lid.to_be_bytes());
        b[2..4].copy_from_slice(&self.remote_lid.to_be_bytes());
        b[4..20].copy_from_slice(&self.local_gid);
        b[20..36].copy_from_slice(&self.remote_gid);
        b[36..40].copy_from_slice(&((self.flow_label & 0xf_ffff) << 12).to_be_bytes());
        set_bits(&mut b[39], 2, 6, self.packet_rate);
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
        b[42] = 0;
        set_bits(&mut b[42], 0, 4, self.sl);
        set_bits(&mut b[42], 4, 1, u8::from(self.subnet_local));
        set_bits(&mut b[43], 0, 5, self.local_ack_timeout);
    }
}

/// ConnectRequest (IBA 12.6.5, table 106).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Req<'a> {
    /// Local Communication ID: the sender's handle for this connection.
    pub local_comm_id: u32,
    /// Vendor ID (24 bits).
    pub vendor_id: u32,
    /// Service ID of the listener asked for (RDMA CM: port space and port).
    pub service_id: u64,
    /// The sender's CA (node) GUID.
    pub local_ca_guid: u64,
    /// The sender's Q_Key (RD only; 0 otherwise).
    pub local_qkey: Qkey,
    /// The sender's QP number (24 bits).
    pub local_qpn: Qpn,
    /// RDMA READs/atomics the sender accepts at once as responder.
    pub responder_resources: u8,
    /// Local EE context number (24 bits).
    pub local_eecn: u32,
    /// RDMA READs/atomics the sender has outstanding at once as requester.
    pub initiator_depth: u8,
    /// Remote EE context number (24 bits; RD only).
    pub remote_eecn: u32,
    /// How long the recipient may take to answer (REP, MRA or REJ): 4.096 µs × 2^n
    /// (5 bits).
    pub remote_cm_response_timeout: u8,
    /// 2 bits: 0 RC, 1 UC, 2 RD, 3 extended (XRC).
    pub transport_service_type: u8,
    /// Whether the sender's receive queue generates end-to-end credits.
    pub end_to_end_flow_control: bool,
    /// The first PSN the sender will send.
    pub starting_psn: Psn,
    /// How long the sender may take to answer the recipient's messages (the RTU after a
    /// REP): 4.096 µs × 2^n (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retries after timeouts the recipient should make (3 bits).
    pub retry_count: u8,
    /// Partition key of the connection.
    pub pkey: Pkey,
    /// IBA MTU code (4 bits: 1 = 256 .. 5 = 4096).
    pub path_mtu: u8,
    /// Whether an RD channel exists (RD only).
    pub rdc_exists: bool,
    /// RNR NAK retries the recipient should make (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
    /// How often the CMs resend a message that is not answered before giving up (4 bits).
    pub max_cm_retries: u8,
    /// Whether the sender's QP receives from an SRQ.
    pub srq: bool,
    /// Extended transport type when `transport_service_type` is 3 (3 bits; 1 = XRC).
    pub extended_transport_type: u8,
    /// The primary path (RoCE: GIDs, flow label, traffic class, hop limit).
    pub primary_path: CmPath,
    /// The alternate path (all zero when there is none).
    pub alternate_path: CmPath,
    /// Whether the sender supports alternate paths (automatic path migration).
    pub sap_supported: bool,
    /// 92 octets (starts with the CMA header under RDMA CM).
    pub private_data: &'a [u8],
}

/// Message Receipt Acknowledgement (IBA 12.6.6, table 107).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mra<'a> {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// Which message is acknowledged (2 bits: 0 REQ, 1 REP, 2 LAP).
    pub message_mraed: u8,
    /// Service timeout (5 bits).
    pub service_timeout: u8,
    /// 222 octets.
    pub private_data: &'a [u8],
}

/// Reject (IBA 12.6.7, table 108).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rej<'a> {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// Which message is rejected (2 bits: 0 REQ, 1 REP, 2 no message).
    pub message_rejected: u8,
    /// Length of the valid part of `ari` (7 bits).
    pub rejected_info_length: u8,
    /// Reason (IBA table 109; 28 = consumer reject).
    pub reason: u16,
    /// Additional Rejection Information (72 octets).
    pub ari: &'a [u8],
    /// 148 octets.
    pub private_data: &'a [u8],
}

/// ConnectReply (IBA 12.6.8, table 110).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rep<'a> {
    /// Local Communication ID: the replier's handle for this connection.
    pub local_comm_id: u32,
    /// Remote Communication ID: the REQ's local one.
    pub remote_comm_id: u32,
    /// The replier's Q_Key (RD only; 0 otherwise).
    pub local_qkey: Qkey,
    /// The replier's QP number (24 bits).
    pub local_qpn: Qpn,
    /// Local EE context number (24 bits; RD only).
    pub local_eecn: u32,
    /// The first PSN the replier will send.
    pub starting_psn: Psn,
    /// Vendor ID: octets 15, 19 and 23 (high, middle, low).
    pub vendor_id: u32,
    /// RDMA READs/atomics the replier accepts at once as responder.
    pub responder_resources: u8,
    /// RDMA READs/atomics the replier has outstanding at once as requester.
    pub initiator_depth: u8,
    /// The replier's CA ACK delay: 4.096 µs × 2^n (5 bits).
    pub target_ack_delay: u8,
    /// The answer to the REQ's alternate path (2 bits: 0 accepted).
    pub failover_accepted: u8,
    /// Whether the replier's receive queue generates end-to-end credits.
    pub end_to_end_flow_control: bool,
    /// RNR NAK retries the REQ's sender should make (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
    /// Whether the replier's QP receives from an SRQ.
    pub srq: bool,
    /// The replier's CA (node) GUID.
    pub local_ca_guid: u64,
    /// 196 octets.
    pub private_data: &'a [u8],
}

/// The messages made of two communication IDs and private data (RTU, DREP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CommIds<'a> {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// 224 octets.
    pub private_data: &'a [u8],
}

/// DisconnectRequest (IBA 12.6.10, table 112).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dreq<'a> {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// The remote QPN (or EECN).
    pub remote_qpn: Qpn,
    /// 220 octets.
    pub private_data: &'a [u8],
}

/// Service ID Resolution Request (IBA 12.11.1, table 119).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrReq<'a> {
    /// Request ID.
    pub request_id: u32,
    /// Partition key.
    pub pkey: Pkey,
    /// Service ID.
    pub service_id: u64,
    /// 216 octets.
    pub private_data: &'a [u8],
}

/// Service ID Resolution Response (IBA 12.11.2, table 120).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrRep<'a> {
    /// Request ID: the SIDR_REQ's, echoed.
    pub request_id: u32,
    /// 0 = valid QP, 1 = Service ID not supported, 2 = rejected by the service, 3 = no
    /// QP, 4 = redirect, 5 = unsupported class version.
    pub status: u8,
    /// Length of the valid part of `additional_info`.
    pub additional_info_length: u8,
    /// Vendor ID: octets 6, 7 and 11.
    pub vendor_id: u32,
    /// The QP that serves the Service ID (24 bits; valid with status 0).
    pub qpn: Qpn,
    /// The Service ID resolved, echoed.
    pub service_id: u64,
    /// The Q_Key datagrams to `qpn` must carry.
    pub qkey: Qkey,
    /// 72 octets.
    pub additional_info: &'a [u8],
    /// 136 octets.
    pub private_data: &'a [u8],
}

/// A CM message, by attribute ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage<'a> {
    /// ConnectRequest.
    Req(Req<'a>),
    /// Message Receipt Acknowledgement.
    Mra(Mra<'a>),
    /// Reject.
    Rej(Rej<'a>),
    /// ConnectReply.
    Rep(Rep<'a>),
    /// ReadyToUse.
    Rtu(CommIds<'a>),
    /// DisconnectRequest.
    Dreq(Dreq<'a>),
    /// DisconnectReply.
    Drep(CommIds<'a>),
    /// Service ID Resolution Request.
    SidrReq(SidrReq<'a>),
    /// Service ID Resolution Response.
    SidrRep(SidrRep<'a>),
    /// Any other attribute (ClassPortInfo, LAP, APR, ...): the raw 232 octets.
    Other {
        /// Attribute ID.
        attribute_id: u16,
        /// The message octets.
        data: &'a [u8],
    },
}

impl CmMessage<'_> {
    /// The attribute ID this message is sent with.
    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
            CmMessage::Other { attribute_id, .. } => *attribute_id,
        }
    }

    /// The message's name as IBA and Wireshark spell it.
    pub fn name(&self) -> &'static str {
        match self {
            CmMessage::Req(_) => "ConnectRequest",
            CmMessage::Mra(_) => "MsgRcptAck",
            CmMessage::Rej(_) => "ConnectReject",
            CmMessage::Rep(_) => "ConnectReply",
            CmMessage::Rtu(_) => "ReadyToUse",
            CmMessage::Dreq(_) => "DisconnectRequest",
            CmMessage::Drep(_) => "DisconnectReply",
            CmMessage::SidrReq(_) => "ServiceIDResReq",
            CmMessage::SidrRep(_) => "ServiceIDResReqResp",
            CmMessage::Other { .. } => "Other",
        }
    }
}

/// A whole CM MAD: header and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMad<'a> {
    /// The common MAD header (its attribute ID is derived from `message` on emit).
    pub header: MadHeader,
    /// The message.
    pub message: CmMessage<'a>,
}

impl<'a> CmMad<'a> {
    /// Parses a 256-octet CM MAD (longer buffers: the rest is ignored).
    pub fn parse(b: &'a [u8]) -> Result<CmMad<'a>> {
        if b.len() < MAD_LEN {
            return Err(Error::Truncated);
        }
        let header = MadHeader::parse(b)?;
        if header.mgmt_class != MGMT_CLASS_CM {
            return Err(Error::NotCmClass(header.mgmt_class));
        }
        let m = &b[HEADER_LEN..MAD_LEN];
        let message = match header.attribute_id {
            attr::REQ => CmMessage::Req(Req {
                local_comm_id: be32(&m[0..4]),
                vendor_id: be24(&m[5..8]),
                service_id: be64(&m[8..16]),
                local_ca_guid: be64(&m[16..24]),
                local_qkey: Qkey(be32(&m[28..32])),
                local_qpn: Qpn(be24(&m[32..35])),
                responder_resources: m[35],
                local_eecn: be24(&m[36..39]),
                initiator_depth: m[39],
                remote_eecn: be24(&m[40..43]),
                remote_cm_response_timeout: bits(m[43], 0, 5),
                transport_service_type: bits(m[43], 5, 2),
                end_to_end_flow_control: bits(m[43], 7, 1) != 0,
                starting_psn: Psn::new(be24(&m[44..47])),
                local_cm_response_timeout: bits(m[47], 0, 5),
                retry_count: bits(m[47], 5, 3),
                pkey: Pkey(be16(&m[48..50])),
                path_mtu: bits(m[50], 0, 4),
                rdc_exists: bits(m[50], 4, 1) != 0,
                rnr_retry_count: bits(m[50], 5, 3),
                max_cm_retries: bits(m[51], 0, 4),
                srq: bits(m[51], 4, 1) != 0,
                extended_transport_type: bits(m[51], 5, 3),
                primary_path: CmPath::parse(&m[52..52 + PATH_LEN]),
                alternate_path: CmPath::parse(&m[96..96 + PATH_LEN]),
                sap_supported: bits(m[139], 5, 1) != 0,
                private_data: &m[140..],
            }),
            attr::MRA => CmMessage::Mra(Mra {
                local_comm_id: be32(&m[0..4]),
                remote_comm_id: be32(&m[4..8]),
                message_mraed: bits(m[8], 0, 2),
                service_timeout: bits(m[9], 0, 5),
                private_data: &m[10..],
            }),
            attr::REJ => CmMessage::Rej(Rej {
                local_comm_id: be32(&m[0..4]),
                remote_comm_id: be32(&m[4..8]),
                message_rejected: bits(m[8], 0, 2),
                rejected_info_length: bits(m[9], 0, 7),
                reason: be16(&m[10..12]),
                ari: &m[12..84],
                private_data: &m[84..],
            }),
            attr::REP => CmMessage::Rep(Rep {
                local_comm_id: be32(&m[0..4]),
                remote_comm_id: be32(&m[4..8]),
                local_qkey: Qkey(be32(&m[8..12])),
                local_qpn: Qpn(be24(&m[12..15])),
                local_eecn: be24(&m[16..19]),
                starting_psn: Psn::new(be24(&m[20..23])),
                vendor_id: (u32::from(m[15]) << 16) | (u32::from(m[19]) << 8) | u32::from(m[23]),
                responder_resources: m[24],
                initiator_depth: m[25],
                target_ack_delay: bits(m[26], 0, 5),
                failover_accepted: bits(m[26], 5, 2),
                end_to_end_flow_control: bits(m[26], 7, 1) != 0,
                rnr_retry_count: bits(m[27], 0, 3),
                srq: bits(m[27], 3, 1) != 0,
                local_ca_guid: be64(&m[28..36]),
                private_data: &m[36..],
            }),
            attr::RTU | attr::DREP => {
                let ids = CommIds {
                    local_comm_id: be32(&m[0..4]),
                    remote_comm_id: be32(&m[4..8]),
                    private_data: &m[8..],
                };
                if header.attribute_id == attr::RTU {
                    CmMessage::Rtu(ids)
                } else {
                    CmMessage::Drep(ids)
                }
            }
            attr::DREQ => CmMessage::Dreq(Dreq {
                local_comm_id: be32(&m[0..4]),
                remote_comm_id: be32(&m[4..8]),
                remote_qpn: Qpn(be24(&m[8..11])),
                private_data: &m[12..],
            }),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReq {
                request_id: be32(&m[0..4]),
                pkey: Pkey(be16(&m[4..6])),
                service_id: be64(&m[8..16]),
                private_data: &m[16..],
            }),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRep {
                request_id: be32(&m[0..4]),
                status: m[4],
                additional_info_length: m[5],
                vendor_id: (u32::from(be16(&m[6..8])) << 8) | u32::from(m[11]),
                qpn: Qpn(be24(&m[8..11])),
                service_id: be64(&m[12..20]),
                qkey: Qkey(be32(&m[20..24])),
                additional_info: &m[24..96],
                private_data: &m[96..],
            }),
            attribute_id => CmMessage::Other {
                attribute_id,
                data: m,
            },
        };
        Ok(CmMad { header, message })
    }

    /// Length of the emitted MAD (always 256).
    pub fn buffer_len(&self) -> usize {
        MAD_LEN
    }

    /// Writes the MAD into `buf[..256]`. Fixed-size areas given shorter are padded with
    /// zeros, longer are cut.
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..MAD_LEN];
        b.fill(0);
        let mut header = self.header;
        header.attribute_id = self.message.attribute_id();
        header.emit(b);
        let m = &mut b[HEADER_LEN..];
        fn put(dst: &mut [u8], src: &[u8]) {
            let n = dst.len().min(src.len());
            dst[..n].copy_from_slice(&src[..n]);
        }
        match &self.message {
            CmMessage::Req(r) => {
                m[0..4].copy_from_slice(&r.local_comm_id.to_be_bytes());
                put24(&mut m[5..8], r.vendor_id);
                m[8..16].copy_from_slice(&r.service_id.to_be_bytes());
                m[16..24].copy_from_slice(&r.local_ca_guid.to_be_bytes());
                m[28..32].copy_from_slice(&r.local_qkey.0.to_be_bytes());
                put24(&mut m[32..35], r.local_qpn.0);
                m[35] = r.responder_resources;
                put24(&mut m[36..39], r.local_eecn);
                m[39] = r.initiator_depth;
                put24(&mut m[40..43], r.remote_eecn);
                set_bits(&mut m[43], 0, 5, r.remote_cm_response_timeout);
                set_bits(&mut m[43], 5, 2, r.transport_service_type);
                set_bits(&mut m[43], 7, 1, u8::from(r.end_to_end_flow_control));
                put24(&mut m[44..47], r.starting_psn.value());
                set_bits(&mut m[47], 0, 5, r.local_cm_response_timeout);
                set_bits(&mut m[47], 5, 3, r.retry_count);
                m[48..50].copy_from_slice(&r.pkey.0.to_be_bytes());
                set_bits(&mut m[50], 0, 4, r.path_mtu);
                set_bits(&mut m[50], 4, 1, u8::from(r.rdc_exists));
                set_bits(&mut m[50], 5, 3, r.rnr_retry_count);
                set_bits(&mut m[51], 0, 4, r.max_cm_retries);
                set_bits(&mut m[51], 4, 1, u8::from(r.srq));
                set_bits(&mut m[51], 5, 3, r.extended_transport_type);
                r.primary_path.emit(&mut m[52..52 + PATH_LEN]);
                r.alternate_path.emit(&mut m[96..96 + PATH_LEN]);
                set_bits(&mut m[139], 5, 1, u8::from(r.sap_supported));
                put(&mut m[140..], r.private_data);
            }
            CmMessage::Mra(r) => {
                m[0..4].copy_from_slice(&r.local_comm_id.to_be_bytes());
                m[4..8].copy_from_slice(&r.remote_comm_id.to_be_bytes());
                set_bits(&mut m[8], 0, 2, r.message_mraed);
                set_bits(&mut m[9], 0, 5, r.service_timeout);
                put(&mut m[10..], r.private_data);
            }
            CmMessage::Rej(r) => {
                m[0..4].copy_from_slice(&r.local_comm_id.to_be_bytes());
                m[4..8].copy_from_slice(&r.remote_comm_id.to_be_bytes());
                set_bits(&mut m[8], 0, 2, r.message_rejected);
                set_bits(&mut m[9], 0, 7, r.rejected_info_length);
                m[10..12].copy_from_slice(&r.reason.to_be_bytes());
                put(&mut m[12..84], r.ari);
                put(&mut m[84..], r.private_data);
            }
            CmMessage::Rep(r) => {
                m[0..4].copy_from_slice(&r.local_comm_id.to_be_bytes());
                m[4..8].copy_from_slice(&r.remote_comm_id.to_be_bytes());
                m[8..12].copy_from_slice(&r.local_qkey.0.to_be_bytes());
                put24(&mut m[12..15], r.local_qpn.0);
                m[15] = (r.vendor_id >> 16) as u8;
                put24(&mut m[16..19], r.local_eecn);
                m[19] = (r.vendor_id >> 8) as u8;
                put24(&mut m[20..23], r.starting_psn.value());
                m[23] = r.vendor_id as u8;
                m[24] = r.responder_resources;
                m[25] = r.initiator_depth;
                set_bits(&mut m[26], 0, 5, r.target_ack_delay);
                set_bits(&mut m[26], 5, 2, r.failover_accepted);
                set_bits(&mut m[26], 7, 1, u8::from(r.end_to_end_flow_control));
                set_bits(&mut m[27], 0, 3, r.rnr_retry_count);
                set_bits(&mut m[27], 3, 1, u8::from(r.srq));
                m[28..36].copy_from_slice(&r.local_ca_guid.to_be_bytes());
                put(&mut m[36..], r.private_data);
            }
            CmMessage::Rtu(r) | CmMessage::Drep(r) => {
                m[0..4].copy_from_slice(&r.local_comm_id.to_be_bytes());
                m[4..8].copy_from_slice(&r.remote_comm_id.to_be_bytes());
                put(&mut m[8..], r.private_data);
            }
            CmMessage::Dreq(r) => {
                m[0..4].copy_from_slice(&r.local_comm_id.to_be_bytes());
                m[4..8].copy_from_slice(&r.remote_comm_id.to_be_bytes());
                put24(&mut m[8..11], r.remote_qpn.0);
                put(&mut m[12..], r.private_data);
            }
            CmMessage::SidrReq(r) => {
                m[0..4].copy_from_slice(&r.request_id.to_be_bytes());
                m[4..6].copy_from_slice(&r.pkey.0.to_be_bytes());
                m[8..16].copy_from_slice(&r.service_id.to_be_bytes());
                put(&mut m[16..], r.private_data);
            }
            CmMessage::SidrRep(r) => {
                m[0..4].copy_from_slice(&r.request_id.to_be_bytes());
                m[4] = r.status;
                m[5] = r.additional_info_length;
                m[6..8].copy_from_slice(&((r.vendor_id >> 8) as u16).to_be_bytes());
                put24(&mut m[8..11], r.qpn.0);
                m[11] = r.vendor_id as u8;
                m[12..20].copy_from_slice(&r.service_id.to_be_bytes());
                m[20..24].copy_from_slice(&r.qkey.0.to_be_bytes());
                put(&mut m[24..96], r.additional_info);
                put(&mut m[96..], r.private_data);
            }
            CmMessage::Other { data, .. } => put(m, data),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtu_layout_and_round_trip() {
        let pd = [0u8; 224];
        let mad = CmMad {
            header: MadHeader::cm(attr::RTU, 0x1122),
            message: CmMessage::Rtu(CommIds {
                local_comm_id: 0xaabbccdd,
                remote_comm_id: 0x11223344,
                private_data: &pd,
            }),
        };
        let mut b = [0u8; MAD_LEN];
        mad.emit(&mut b);
        assert_eq!(&b[..4], &[1, 7, 2, 3]);
        assert_eq!(&b[16..18], &[0, 0x14]);
        assert_eq!(&b[24..28], &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(CmMad::parse(&b).unwrap(), mad);
    }

    #[test]
    fn short_mad_is_truncated() {
        assert_eq!(CmMad::parse(&[1u8; 255]), Err(Error::Truncated));
    }

    #[test]
    fn other_class_is_rejected() {
        let mut b = [0u8; MAD_LEN];
        b[0] = 1;
        b[1] = 0x03;
        assert_eq!(CmMad::parse(&b), Err(Error::NotCmClass(3)));
    }

    #[test]
    fn wrong_base_version_is_rejected() {
        let b = [0u8; MAD_LEN];
        assert_eq!(CmMad::parse(&b), Err(Error::BadBaseVersion(0)));
    }
}
