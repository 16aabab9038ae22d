//! The `ibv_*` attribute structs of `<infiniband/verbs.h>` that cross the protocol,
//! field for field with the same names and numbering, so the shim copies them 1:1.
//!
//! With them is [`Handle`], the name of an object in the protocol. They live apart from
//! [`super::proto`], which re-exports every one of them, so that the requests' parts
//! (`cm.rs`, `fault.rs`) can name them without depending on the messages that carry
//! those parts.

use serde::{Deserialize, Serialize};

/// An object named in the protocol (device context, PD, MR, MW, CQ, SRQ, QP, AH,
/// completion channel). Allocated by the daemon, unique in the daemon's lifetime, and
/// only meaningful to the session that created the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Handle(pub u32);

/// `struct ibv_device_attr`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAttr {
    /// Firmware version string (`0.0.0`).
    pub fw_ver: String,
    /// The node GUID: EUI-64 of the interface's MAC address, as rxe makes it (hashed from
    /// the device name when the MAC is zero).
    pub node_guid: u64,
    /// The system image GUID (the node GUID).
    pub sys_image_guid: u64,
    /// Largest MR, in bytes.
    pub max_mr_size: u64,
    /// Page sizes supported (bit n set: 2^n bytes).
    pub page_size_cap: u64,
    /// IEEE OUI of the vendor (0xffffff, as rxe reports).
    pub vendor_id: u32,
    /// Vendor's part number (0).
    pub vendor_part_id: u32,
    /// Hardware version (0).
    pub hw_ver: u32,
    /// Most QPs the device holds.
    pub max_qp: i32,
    /// Most outstanding WRs in one send or receive queue; `CreateQp` checks it.
    pub max_qp_wr: i32,
    /// `IBV_DEVICE_*` capability bits.
    pub device_cap_flags: u32,
    /// Most SGEs in a send or receive WR; `CreateQp` checks it.
    pub max_sge: i32,
    /// Most SGEs in an RDMA READ's WR.
    pub max_sge_rd: i32,
    /// Most CQs.
    pub max_cq: i32,
    /// Most entries in one CQ; `CreateCq` checks it.
    pub max_cqe: i32,
    /// Most MRs.
    pub max_mr: i32,
    /// Most PDs.
    pub max_pd: i32,
    /// Most RDMA READs/atomics one QP accepts as responder.
    pub max_qp_rd_atom: i32,
    /// The same per EE context (0: no RD transport).
    pub max_ee_rd_atom: i32,
    /// Responder resources for READs/atomics, device-wide.
    pub max_res_rd_atom: i32,
    /// Most RDMA READs/atomics one QP issues as requester.
    pub max_qp_init_rd_atom: i32,
    /// The same per EE context (0).
    pub max_ee_init_rd_atom: i32,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: u32,
    /// Most EE contexts (0: no RD transport).
    pub max_ee: i32,
    /// Most RD domains (0).
    pub max_rdd: i32,
    /// Most memory windows.
    pub max_mw: i32,
    /// Most raw IPv6 QPs (0).
    pub max_raw_ipv6_qp: i32,
    /// Most raw Ethertype QPs (0).
    pub max_raw_ethy_qp: i32,
    /// Most multicast groups; `AttachMcast` checks it (ENOMEM).
    pub max_mcast_grp: i32,
    /// Most QPs in one multicast group; `AttachMcast` checks it.
    pub max_mcast_qp_attach: i32,
    /// Most QP attachments over all groups; `AttachMcast` checks it.
    pub max_total_mcast_qp_attach: i32,
    /// Most address handles.
    pub max_ah: i32,
    /// Most fast memory regions (0: FMRs are gone from rdma-core).
    pub max_fmr: i32,
    /// Remaps per FMR (0).
    pub max_map_per_fmr: i32,
    /// Most SRQs.
    pub max_srq: i32,
    /// Most WRs in one SRQ; `CreateSrq` checks it.
    pub max_srq_wr: i32,
    /// Most SGEs in one SRQ WR; `CreateSrq` checks it.
    pub max_srq_sge: i32,
    /// P_Key table length.
    pub max_pkeys: u16,
    /// The device's ACK delay exponent (4.096 µs × 2^n).
    pub local_ca_ack_delay: u8,
    /// Physical ports (1).
    pub phys_port_cnt: u8,
    /// On-demand paging capabilities (`ibv_query_device_ex`'s `odp_caps` and
    /// `xrc_odp_caps`); all zero on a device without ODP, which refuses
    /// `IBV_ACCESS_ON_DEMAND` with EOPNOTSUPP.
    pub odp_caps: OdpCaps,
}

/// `struct ibv_odp_caps` and `xrc_odp_caps` ([`super::verbs::odp`] bits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OdpCaps {
    /// `IBV_ODP_SUPPORT`, `IBV_ODP_SUPPORT_IMPLICIT`.
    pub general_caps: u64,
    /// `IBV_ODP_SUPPORT_*` for RC.
    pub rc_odp_caps: u32,
    /// The same for UC.
    pub uc_odp_caps: u32,
    /// The same for UD.
    pub ud_odp_caps: u32,
    /// The same for XRC.
    pub xrc_odp_caps: u32,
}

/// `struct ibv_port_attr`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortAttr {
    /// `enum ibv_port_state`.
    pub state: u32,
    /// `enum ibv_mtu`.
    pub max_mtu: u32,
    /// `enum ibv_mtu`: the largest that fits the interface's MTU.
    pub active_mtu: u32,
    /// GID table entries (`QueryGid` indexes below it).
    pub gid_tbl_len: i32,
    /// `IBV_PORT_*` capability bits (rxe: CM_SUP and IP_BASED_GIDS).
    pub port_cap_flags: u32,
    /// Largest message, in bytes.
    pub max_msg_sz: u32,
    /// Packets dropped for a bad P_Key (0).
    pub bad_pkey_cntr: u32,
    /// Packets dropped for a bad Q_Key (0).
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// The port's LID (0: Ethernet has none).
    pub lid: u16,
    /// The subnet manager's LID (0).
    pub sm_lid: u16,
    /// LID mask control (0).
    pub lmc: u8,
    /// Data virtual lanes, encoded as in PortInfo (1: VL0 only).
    pub max_vl_num: u8,
    /// The subnet manager's SL (0).
    pub sm_sl: u8,
    /// Subnet propagation delay exponent (0).
    pub subnet_timeout: u8,
    /// InitTypeReply from the SM (0).
    pub init_type_reply: u8,
    /// Link width (`IBV_WIDTH_*`).
    pub active_width: u8,
    /// Per-lane speed (`IBV_SPEED_*`).
    pub active_speed: u8,
    /// Physical state (5 LinkUp, 3 Disabled while a fault holds the link down).
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*` ([`super::verbs::link_layer`]): Ethernet.
    pub link_layer: u8,
    /// `IBV_QPF_*` port flags (0).
    pub flags: u8,
    /// `IBV_PORT_*2` capability bits (0).
    pub port_cap_flags2: u16,
    /// Extended per-lane speed (0: `active_speed` holds it).
    pub active_speed_ex: u32,
}

/// One GID table entry (`ibv_query_gid_ex`'s `struct ibv_gid_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GidEntry {
    /// Index in the port's GID table.
    pub index: u32,
    /// The port (1).
    pub port_num: u8,
    /// The GID, network order: rxe, an IPv4-mapped or IPv6 address of the interface; siw,
    /// the MAC address in the first 6 bytes; zero for an empty slot.
    pub gid: [u8; 16],
    /// IB = 0, RoCE v1 = 1, RoCE v2 = 2 ([`super::verbs::gid_type`]).
    pub gid_type: u32,
}

/// `struct ibv_qp_cap`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpCap {
    /// Outstanding send WRs; the SQ ring has at least this many slots.
    pub max_send_wr: u32,
    /// Outstanding receive WRs (0 with an SRQ); the shim refuses more (ENOMEM).
    pub max_recv_wr: u32,
    /// SGEs per send WR; the daemon completes a WQE with more in error.
    pub max_send_sge: u32,
    /// SGEs per receive WR; the daemon completes a WQE with more in error.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR; sizes the SQ slots.
    pub max_inline_data: u32,
}

/// `struct ibv_global_route`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobalRoute {
    /// Destination GID, network order (on RoCE v2 an IPv4-mapped or IPv6 address).
    pub dgid: [u8; 16],
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// Index of the source GID in the port's table.
    pub sgid_index: u8,
    /// IPv6 hop limit / IPv4 TTL.
    pub hop_limit: u8,
    /// IPv6 traffic class / IPv4 TOS byte (DSCP << 2 | ECN).
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AhAttr {
    /// The global route; used when `is_global` is set.
    pub grh: GlobalRoute,
    /// Destination LID (unused on Ethernet).
    pub dlid: u16,
    /// Service level (unused on RoCE).
    pub sl: u8,
    /// Source path bits (unused on Ethernet).
    pub src_path_bits: u8,
    /// Injection rate limit (`enum ibv_rate`).
    pub static_rate: u8,
    /// Nonzero: `grh` is valid (required on RoCE).
    pub is_global: u8,
    /// The local port (1).
    pub port_num: u8,
}

/// `struct ibv_qp_attr`. Only the fields named by the accompanying mask are meaningful.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpAttr {
    /// `enum ibv_qp_state`.
    pub qp_state: u32,
    /// `enum ibv_qp_state`: the state the caller believes the QP is in.
    pub cur_qp_state: u32,
    /// `enum ibv_mtu`.
    pub path_mtu: u32,
    /// `enum ibv_mig_state`.
    pub path_mig_state: u32,
    /// UD: the Q_Key received datagrams must carry.
    pub qkey: u32,
    /// The first PSN the responder expects (24 bits; higher bits ignored).
    pub rq_psn: u32,
    /// The first PSN the requester sends (24 bits; higher bits ignored).
    pub sq_psn: u32,
    /// RC/UC: the remote QP number (24 bits).
    pub dest_qp_num: u32,
    /// `IBV_ACCESS_REMOTE_*` bits: what the responder lets peers do.
    pub qp_access_flags: u32,
    /// The QP's capabilities; `QueryQp` reports those it was created with.
    pub cap: QpCap,
    /// The primary path to the remote QP (RC/UC).
    pub ah_attr: AhAttr,
    /// The alternate path (automatic path migration).
    pub alt_ah_attr: AhAttr,
    /// P_Key table index (0).
    pub pkey_index: u16,
    /// P_Key index of the alternate path.
    pub alt_pkey_index: u16,
    /// Nonzero: raise IBV_EVENT_SQ_DRAINED when the QP in SQD has drained.
    pub en_sqd_async_notify: u8,
    /// Answers only: nonzero while a QP in SQD still has sends in flight.
    pub sq_draining: u8,
    /// RDMA READs/atomics this QP has outstanding as requester.
    pub max_rd_atomic: u8,
    /// RDMA READs/atomics this QP accepts at once as responder.
    pub max_dest_rd_atomic: u8,
    /// The RNR NAK timer code this responder's RNR NAKs carry (1 = 0.01 ms … 31 =
    /// 491.52 ms, 0 = 655.36 ms).
    pub min_rnr_timer: u8,
    /// The port (1).
    pub port_num: u8,
    /// Local ACK timeout: 4.096 µs × 2^timeout (0 = infinite).
    pub timeout: u8,
    /// Retransmissions after timeouts or sequence NAKs before IBV_WC_RETRY_EXC_ERR
    /// (0..=7).
    pub retry_cnt: u8,
    /// Retries after RNR NAKs before IBV_WC_RNR_RETRY_EXC_ERR (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// The alternate path's port.
    pub alt_port_num: u8,
    /// The alternate path's local ACK timeout.
    pub alt_timeout: u8,
    /// Packet pacing rate in kbit/s (0 = unlimited).
    pub rate_limit: u32,
}

/// `struct ibv_srq_attr`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SrqAttr {
    /// Outstanding receive WRs; the shim refuses more (ENOMEM).
    pub max_wr: u32,
    /// SGEs per receive WR; sizes the ring's slots.
    pub max_sge: u32,
    /// Arms IBV_EVENT_SRQ_LIMIT_REACHED for when posted receives drop below it (0:
    /// disarmed); the event disarms it.
    pub srq_limit: u32,
}

// ---- one field list for every layer -------------------------------------------------------
//
// `ibv_qp_attr`, `ibv_ah_attr` and `ibv_qp_cap` are restated at three layers: the C structs of
// the shim, the protocol structs above, and the core's typed ones. Most fields have the
// same name, type and meaning in all three; only a few change type on the way (a state enum,
// a PSN, a bool). These macros name the shared fields once, so that every conversion states
// only what it converts and a field added to the protocol is copied everywhere or nowhere.

/// Builds a `struct ibv_qp_cap`-shaped value of type `$ty` from `$src`: all five capacities
/// are the same `u32`s at every layer.
///
/// ```
/// use wire::client::proto::QpCap;
/// let c = QpCap { max_send_wr: 16, max_inline_data: 64, ..QpCap::default() };
/// let copy: QpCap = wire::qp_cap_fields!(QpCap, c);
/// assert_eq!(copy, c);
/// ```
#[macro_export]
macro_rules! qp_cap_fields {
    ($ty:path, $src:expr) => {{
        let s = &$src;
        $ty {
            max_send_wr: s.max_send_wr,
            max_recv_wr: s.max_recv_wr,
            max_send_sge: s.max_send_sge,
            max_recv_sge: s.max_recv_sge,
            max_inline_data: s.max_inline_data,
        }
    }};
}

/// Builds a `struct ibv_ah_attr`-shaped value of type `$ty` (its GRH of type `$grh`) from
/// `$src`. The caller converts the two fields whose type differs between layers, the
/// destination GID and `is_global`; the rest is copied.
///
/// ```
/// use wire::client::proto::{AhAttr, GlobalRoute};
/// let a = AhAttr { dlid: 3, is_global: 1, ..AhAttr::default() };
/// let copy = wire::ah_attr_fields!(AhAttr, GlobalRoute, a, dgid: a.grh.dgid, is_global: a.is_global);
/// assert_eq!(copy, a);
/// ```
#[macro_export]
macro_rules! ah_attr_fields {
    ($ty:path, $grh:path, $src:expr, dgid: $dgid:expr, is_global: $global:expr $(,)?) => {{
        // Aliases: a `path` fragment cannot name a struct literal nested in another.
        type Ah = $ty;
        type Grh = $grh;
        let s = &$src;
        Ah {
            grh: Grh {
                dgid: $dgid,
                flow_label: s.grh.flow_label,
                sgid_index: s.grh.sgid_index,
                hop_limit: s.grh.hop_limit,
                traffic_class: s.grh.traffic_class,
            },
            dlid: s.dlid,
            sl: s.sl,
            src_path_bits: s.src_path_bits,
            static_rate: s.static_rate,
            is_global: $global,
            port_num: s.port_num,
        }
    }};
}

/// Builds a `struct ibv_qp_attr`-shaped value of type `$ty` from `$src`. The caller gives
/// the fields it converts in `{ field: expr, ... }`, and may name in `copy [..]` further
/// fields that keep their type across its boundary; the path and retry fields, the same
/// at every layer, are copied.
///
/// ```
/// use wire::client::proto::{AhAttr, GlobalRoute, QpAttr, QpCap};
/// let a = QpAttr { retry_cnt: 7, qkey: 0x1111_0000, ..QpAttr::default() };
/// let copy = wire::qp_attr_fields!(QpAttr, a, {
///     qp_state: a.qp_state,
///     cur_qp_state: a.cur_qp_state,
///     path_mtu: a.path_mtu,
///     path_mig_state: a.path_mig_state,
///     cap: wire::qp_cap_fields!(QpCap, a.cap),
///     ah_attr: a.ah_attr,
///     alt_ah_attr: a.alt_ah_attr,
/// }, copy [qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, en_sqd_async_notify, sq_draining]);
/// assert_eq!(copy, a);
/// ```
#[macro_export]
macro_rules! qp_attr_fields {
    ($ty:path, $src:expr, { $($field:ident : $value:expr),* $(,)? }
        $(, copy [$($same:ident),* $(,)?])? $(,)?) => {{
        let s = &$src;
        $ty {
            $($field: $value,)*
            $($($same: s.$same,)*)?
            pkey_index: s.pkey_index,
            alt_pkey_index: s.alt_pkey_index,
            max_rd_atomic: s.max_rd_atomic,
            max_dest_rd_atomic: s.max_dest_rd_atomic,
            min_rnr_timer: s.min_rnr_timer,
            port_num: s.port_num,
            timeout: s.timeout,
            retry_cnt: s.retry_cnt,
            rnr_retry: s.rnr_retry,
            alt_port_num: s.alt_port_num,
            alt_timeout: s.alt_timeout,
            rate_limit: s.rate_limit,
        }
    }};
}
