//! What programs see without a daemon: librdmacm fails as the real one does with no
//! RDMA device, and the helper strings match rdma-core's.
use std::ffi::CStr;
use verbs_shim::cm::device::rdma_get_devices;
use verbs_shim::cm::event::rdma_event_str;
use verbs_shim::cm::id::{rdma_create_event_channel, rdma_create_id};
use verbs_shim::misc::*;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn s(p: *const std::ffi::c_char) -> &'static str {
    // SAFETY: the shim returns static NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap()
}

#[test]
fn rdmacm_without_a_daemon_fails_with_enodev() {
    let nowhere = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-cm-daemon.sock");
    let _ = std::fs::remove_file(&nowhere);
    std::env::set_var(wire::client::SOCKET_ENV, &nowhere);
    assert!(rdma_create_event_channel().is_null());
    assert_eq!(errno(), libc::ENODEV);
    let mut id = std::ptr::null_mut();
    let ps_tcp = 0x0106;
    let rc = rdma_create_id(std::ptr::null_mut(), &mut id, std::ptr::null_mut(), ps_tcp);
    assert_eq!(rc, -1);
    assert_eq!(errno(), libc::ENODEV);
    assert!(id.is_null());
    let mut n = 5;
    assert!(rdma_get_devices(&mut n).is_null());
    assert_eq!(n, 0);
    assert_eq!(s(rdma_event_str(4)), "RDMA_CM_EVENT_CONNECT_REQUEST");
    assert_eq!(s(rdma_event_str(99)), "UNKNOWN EVENT");
}

#[test]
fn helper_strings_and_rates_match_rdma_core() {
    assert_eq!(s(ibv_wc_status_str(0)), "success");
    assert_eq!(s(ibv_wc_status_str(5)), "Work Request Flushed Error");
    assert_eq!(s(ibv_wc_status_str(12)), "transport retry counter exceeded");
    assert_eq!(s(ibv_wc_status_str(1000)), "unknown");
    assert_eq!(s(ibv_node_type_str(1)), "InfiniBand channel adapter");
    assert_eq!(s(ibv_node_type_str(4)), "iWARP NIC");
    assert_eq!(s(ibv_node_type_str(-1)), "unknown");
    assert_eq!(s(ibv_port_state_str(4)), "active");
    assert_eq!(s(ibv_event_type_str(0)), "CQ error");
    assert_eq!(ibv_rate_to_mult(3), 4); // IBV_RATE_10_GBPS
    assert_eq!(mult_to_ibv_rate(4), 3);
    assert_eq!(ibv_rate_to_mbps(16), 103125); // IBV_RATE_100_GBPS
    assert_eq!(mbps_to_ibv_rate(25781), 15);
    assert_eq!(ibv_rate_to_mult(0), -1);
}
