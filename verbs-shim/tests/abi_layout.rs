//! Every `#[repr(C)]` mirror in `verbs_shim::abi` and `verbs_shim::cm::abi` has the size
//! and field offsets of the system's `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>`: a C
//! program compiled with gcc against the installed headers prints them, and this test
//! compares them with Rust's.
#![allow(non_camel_case_types)]

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::process::Command;
use verbs_shim::abi::*;

/// (C struct name, Rust size, [(C field name, Rust offset)]).
type Layout = (&'static str, usize, Vec<(&'static str, usize)>);

macro_rules! layouts {
    ($($s:ident { $($f:ident),* $(,)? })*) => {
        vec![$(
            (stringify!($s), size_of::<$s>(), vec![$(
                (c_name(stringify!($f)), offset_of!($s, $f)),
            )*]),
        )*]
    };
}

/// Rust field names that clash with keywords carry a trailing underscore.
fn c_name(rust: &'static str) -> &'static str {
    rust.strip_suffix('_').unwrap_or(rust)
}

fn rust_layouts() -> Vec<Layout> {
    layouts! {
        ibv_gid { raw }
        ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex }
        ibv_device_attr { fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap,
            vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge,
            max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom,
            max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee,
            max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp,
            max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr,
            max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt }
        ibv_device_attr_ex { orig_attr, comp_mask, odp_caps, completion_timestamp_mask,
            hca_core_clock, device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq,
            packet_pacing_caps, raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size,
            pci_atomic_caps, xrc_odp_caps, phys_port_cnt_ex }
        ibv_port_attr { state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz,
            bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl,
            subnet_timeout, init_type_reply, active_width, active_speed, phys_state,
            link_layer, flags, port_cap_flags2 }
        ibv_async_event { element, event_type }
        ibv_wc { wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp,
            wc_flags, pkey_index, slid, sl, dlid_path_bits }
        ibv_mw_bind_info { mr, addr, length, mw_access_flags }
        ibv_pd { context, handle }
        ibv_mr { context, pd, addr, length, handle, lkey, rkey }
        ibv_mw { context, pd, rkey, handle, type_ }
        ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
        ibv_grh { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid }
        ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
        ibv_srq_attr { max_wr, max_sge, srq_limit }
        ibv_srq_init_attr { srq_context, attr }
        ibv_srq_init_attr_ex { srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap }
        ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
        ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
        ibv_qp_init_attr_ex { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all,
            comp_mask, pd, xrcd, create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf,
            source_qpn, send_ops_flags }
        ibv_qp_attr { qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn,
            dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index,
            alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic,
            max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
            alt_port_num, alt_timeout, rate_limit }
        ibv_sge { addr, length, lkey }
        ibv_data_buf { addr, length }
        ibv_send_wr { wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr,
            qp_type, bind_mw }
        ibv_recv_wr { wr_id, next, sg_list, num_sge }
        ibv_mw_bind { wr_id, send_flags, bind_info }
        ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed }
        ibv_qp { context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state,
            qp_type, mutex, cond, events_completed }
        ibv_qp_ex { qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp,
            wr_atomic_fetch_add, wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write,
            wr_rdma_write_imm, wr_send, wr_send_imm, wr_send_inv, wr_send_tso,
            wr_set_ud_addr, wr_set_xrc_srqn, wr_set_inline_data, wr_set_inline_data_list,
            wr_set_sge, wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write }
        ibv_comp_channel { context, fd, refcnt }
        ibv_cq { context, channel, cq_context, handle, cqe, mutex, cond,
            comp_events_completed, async_events_completed }
        ibv_cq_ex { context, channel, cq_context, handle, cqe, mutex, cond,
            comp_events_completed, async_events_completed, comp_mask, status, wr_id,
            start_poll, next_poll, end_poll, read_opcode, read_vendor_err, read_byte_len,
            read_imm_data, read_qp_num, read_src_qp, read_wc_flags, read_slid, read_sl,
            read_dlid_path_bits, read_completion_ts, read_cvlan, read_flow_tag, read_tm_info,
            read_completion_wallclock_ns }
        ibv_poll_cq_attr { comp_mask }
        ibv_values_ex { comp_mask, raw_clock }
        ibv_cq_init_attr_ex { cqe, cq_context, channel, comp_vector, wc_flags, comp_mask,
            flags, parent_domain }
        ibv_ah { context, pd, handle }
        ibv_device { _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path }
        ibv_context_ops { _compat_query_device, _compat_query_port, alloc_mw, bind_mw,
            dealloc_mw, poll_cq, req_notify_cq, post_srq_recv, post_send, post_recv,
            _compat_async_event }
        ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
        verbs_context { query_port, advise_mr, alloc_null_mr, read_counters,
            attach_counters_point_flow, create_counters, destroy_counters, reg_dm_mr,
            alloc_dm, free_dm, modify_flow_action_esp, destroy_flow_action,
            create_flow_action_esp, modify_qp_rate_limit, alloc_parent_domain, dealloc_td,
            alloc_td, modify_cq, post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table,
            destroy_wq, modify_wq, create_wq, query_rt_values, create_cq_ex, priv_,
            query_device_ex, ibv_destroy_flow, ABI_placeholder2, ibv_create_flow,
            ABI_placeholder1, open_qp, create_qp_ex, get_srq_num, create_srq_ex, open_xrcd,
            close_xrcd, _ABI_placeholder3, sz, context }
    }
}

/// Extra checks on members of the unions inside `struct ibv_send_wr`.
fn send_wr_union_members() -> Vec<(&'static str, usize)> {
    vec![
        (
            "ibv_send_wr.wr.rdma.remote_addr",
            offset_of!(ibv_send_wr, wr.rdma.remote_addr),
        ),
        (
            "ibv_send_wr.wr.rdma.rkey",
            offset_of!(ibv_send_wr, wr.rdma.rkey),
        ),
        (
            "ibv_send_wr.wr.atomic.remote_addr",
            offset_of!(ibv_send_wr, wr.atomic.remote_addr),
        ),
        (
            "ibv_send_wr.wr.atomic.compare_add",
            offset_of!(ibv_send_wr, wr.atomic.compare_add),
        ),
        (
            "ibv_send_wr.wr.atomic.swap",
            offset_of!(ibv_send_wr, wr.atomic.swap),
        ),
        (
            "ibv_send_wr.wr.atomic.rkey",
            offset_of!(ibv_send_wr, wr.atomic.rkey),
        ),
        ("ibv_send_wr.wr.ud.ah", offset_of!(ibv_send_wr, wr.ud.ah)),
        (
            "ibv_send_wr.wr.ud.remote_qpn",
            offset_of!(ibv_send_wr, wr.ud.remote_qpn),
        ),
        (
            "ibv_send_wr.wr.ud.remote_qkey",
            offset_of!(ibv_send_wr, wr.ud.remote_qkey),
        ),
        (
            "ibv_send_wr.bind_mw.mw",
            offset_of!(ibv_send_wr, bind_mw.bind_mw.mw),
        ),
        (
            "ibv_send_wr.bind_mw.rkey",
            offset_of!(ibv_send_wr, bind_mw.bind_mw.rkey),
        ),
        (
            "ibv_send_wr.bind_mw.bind_info",
            offset_of!(ibv_send_wr, bind_mw.bind_mw.bind_info),
        ),
        (
            "ibv_send_wr.tso.hdr",
            offset_of!(ibv_send_wr, bind_mw.tso.hdr),
        ),
        (
            "ibv_send_wr.tso.hdr_sz",
            offset_of!(ibv_send_wr, bind_mw.tso.hdr_sz),
        ),
        (
            "ibv_send_wr.tso.mss",
            offset_of!(ibv_send_wr, bind_mw.tso.mss),
        ),
    ]
}

/// `struct rdma_cm_id`'s and `struct rdma_cm_event`'s nested and union members.
fn cm_nested_members() -> Vec<(&'static str, usize)> {
    use verbs_shim::cm::abi::*;
    vec![
        (
            "rdma_cm_id.route.addr.dst_addr",
            offset_of!(rdma_cm_id, route.addr.dst_addr),
        ),
        (
            "rdma_cm_id.route.addr.addr.ibaddr.dgid",
            offset_of!(rdma_cm_id, route.addr.addr.dgid),
        ),
        (
            "rdma_cm_id.route.addr.addr.ibaddr.pkey",
            offset_of!(rdma_cm_id, route.addr.addr.pkey),
        ),
        (
            "rdma_cm_id.route.path_rec",
            offset_of!(rdma_cm_id, route.path_rec),
        ),
        (
            "rdma_cm_id.route.num_paths",
            offset_of!(rdma_cm_id, route.num_paths),
        ),
        (
            "rdma_cm_event.param.conn.private_data_len",
            offset_of!(rdma_cm_event, param.conn.private_data_len),
        ),
        (
            "rdma_cm_event.param.conn.qp_num",
            offset_of!(rdma_cm_event, param.conn.qp_num),
        ),
        (
            "rdma_cm_event.param.ud.ah_attr",
            offset_of!(rdma_cm_event, param.ud.ah_attr),
        ),
        (
            "rdma_cm_event.param.ud.qkey",
            offset_of!(rdma_cm_event, param.ud.qkey),
        ),
    ]
}

fn cm_layouts() -> Vec<Layout> {
    use verbs_shim::cm::abi::*;
    layouts! {
        rdma_event_channel { fd }
        rdma_ib_addr { sgid, dgid, pkey }
        rdma_addr { src_addr, dst_addr, addr }
        rdma_route { addr, path_rec, num_paths }
        rdma_cm_id { verbs, channel, context, qp, route, ps, port_num, event,
            send_cq_channel, send_cq, recv_cq_channel, recv_cq, srq, pd, qp_type }
        rdma_conn_param { private_data, private_data_len, responder_resources,
            initiator_depth, flow_control, retry_count, rnr_retry_count, srq, qp_num }
        rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey }
        rdma_cm_event { id, listen_id, event, status, param }
        rdma_addrinfo { ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len,
            ai_dst_len, ai_src_addr, ai_dst_addr, ai_src_canonname, ai_dst_canonname,
            ai_route_len, ai_route, ai_connect_len, ai_connect, ai_next }
        rdma_cm_join_mc_attr_ex { comp_mask, join_flags, addr }
        ibv_sa_path_rec { dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit,
            traffic_class, reversible, numb_path, pkey, sl, mtu_selector, mtu, rate_selector,
            rate, packet_life_time_selector, packet_life_time, preference }
        ibv_ece { vendor_id, options, comp_mask }
    }
}

/// A C program printing `sizeof`/`offsetof` of every layout (and of the `extra`
/// `struct.member.path` entries) as seen through `header`.
fn c_program(header: &str, layouts: &[Layout], extra: &[(&'static str, usize)]) -> String {
    let mut c = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include <{header}>\nint main(void) {{\n"
    );
    for (s, _, fields) in layouts {
        // `union ibv_gid` is the one union mirrored as a struct.
        let kind = if *s == "ibv_gid" { "union" } else { "struct" };
        c += &format!("  printf(\"{s} %zu\\n\", sizeof({kind} {s}));\n");
        for (f, _) in fields {
            c += &format!("  printf(\"{s}.{f} %zu\\n\", offsetof({kind} {s}, {f}));\n");
        }
    }
    for (path, _) in extra {
        let (s, member) = path.split_once('.').expect("struct.member");
        c += &format!("  printf(\"{path} %zu\\n\", offsetof(struct {s}, {member}));\n");
    }
    c += "  return 0;\n}\n";
    c
}

/// Compiles the program for `header`, runs it, and compares every number with Rust's.
fn check_against(header: &str, name: &str, layouts: &[Layout], extra: &[(&'static str, usize)]) {
    let path = std::path::Path::new("/usr/include").join(header);
    if !path.exists() {
        eprintln!(
            "skipped: {} not installed (libibverbs-dev, librdmacm-dev)",
            path.display()
        );
        return;
    }
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("abi_layout");
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let src = dir.join(format!("{name}.c"));
    let bin = dir.join(name);
    std::fs::write(&src, c_program(header, layouts, extra)).expect("write C source");
    let cc = Command::new("gcc")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("run gcc");
    assert!(
        cc.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&bin).output().expect("run layout program");
    let c: BTreeMap<String, usize> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_string(), v.parse().expect("number")))
        .collect();

    let mut rust = BTreeMap::new();
    for (s, size, fields) in layouts {
        rust.insert(s.to_string(), *size);
        for (f, off) in fields {
            rust.insert(format!("{s}.{f}"), *off);
        }
    }
    for (k, v) in extra {
        rust.insert(k.to_string(), *v);
    }
    let mismatches: Vec<String> = rust
        .iter()
        .filter(|(k, v)| c.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: rust {v}, C {:?}", c.get(k)))
        .collect();
    assert!(
        mismatches.is_empty(),
        "layout mismatches:\n{}",
        mismatches.join("\n")
    );
}

#[test]
fn abi_mirrors_match_the_system_verbs_header() {
    check_against(
        "infiniband/verbs.h",
        "layout",
        &rust_layouts(),
        &send_wr_union_members(),
    );
}

#[test]
fn rdma_cm_mirrors_match_the_system_rdma_cma_header() {
    check_against(
        "rdma/rdma_cma.h",
        "cm_layout",
        &cm_layouts(),
        &cm_nested_members(),
    );
}
