//! `link add`'s words: what each device type takes and how the rest is refused.

use super::*;

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

#[test]
fn link_add_takes_mpa_options_for_siw_devices() {
    let add = |s: &str| link_add_request("siw1", &words(s));
    assert_eq!(
        add("type siw netdev eth0"),
        Ok(RequestBody::LinkAdd {
            name: "siw1".into(),
            link_type: "siw".into(),
            netdev: "eth0".into(),
            mpa_crc: None,
            mpa_markers: None,
            backend: None,
            default_tos: None,
            cnp_dscp: None,
            addrs: None,
        })
    );
    assert_eq!(
        add("netdev lo crc on type siw markers off"),
        Ok(RequestBody::LinkAdd {
            name: "siw1".into(),
            link_type: "siw".into(),
            netdev: "lo".into(),
            mpa_crc: Some(true),
            mpa_markers: Some(false),
            backend: None,
            default_tos: None,
            cnp_dscp: None,
            addrs: None,
        })
    );
}

#[test]
fn link_add_takes_traffic_class_settings_for_rxe_devices_only() {
    let add = |s: &str| link_add_request("rxe1", &words(s));
    match add("type rxe netdev eth0 tos 96 cnp_dscp 26") {
        Ok(RequestBody::LinkAdd {
            default_tos,
            cnp_dscp,
            ..
        }) => assert_eq!((default_tos, cnp_dscp), (Some(96), Some(26))),
        other => panic!("{other:?}"),
    }
    for (line, wanted) in [
        ("type rxe netdev eth0 tos 97", "ECN bits"),
        ("type rxe netdev eth0 tos 256", "0..=255"),
        ("type rxe netdev eth0 cnp_dscp 64", "0..=63"),
        ("type rxe netdev eth0 tos 32 tos 32", "given twice"),
        ("type siw netdev eth0 cnp_dscp 48", "RoCE options"),
    ] {
        let e = add(line).unwrap_err();
        assert!(e.contains(wanted), "{line}: {e}");
    }
}

#[test]
fn link_add_takes_a_backend_and_refuses_what_is_not_built() {
    let add = |s: &str| link_add_request("rxe1", &words(s));
    match add("type rxe netdev eth0 backend packet") {
        Ok(RequestBody::LinkAdd { backend, .. }) => {
            assert_eq!(backend.as_deref(), Some("packet"))
        }
        other => panic!("{other:?}"),
    }
    match add("type rxe netdev eth0 backend xdp") {
        Ok(RequestBody::LinkAdd { backend, .. }) => {
            assert_eq!(backend.as_deref(), Some("xdp"))
        }
        other => panic!("{other:?}"),
    }
    let e = add("type siw netdev eth0 backend smoltcp").unwrap_err();
    assert!(e.contains("needs an address of its own"), "{e}");
    match add("type siw netdev eth0 backend smoltcp addr 10.0.0.11 addr fd00::11") {
        Ok(RequestBody::LinkAdd { backend, addrs, .. }) => {
            assert_eq!(backend.as_deref(), Some("smoltcp"));
            let want: Vec<std::net::IpAddr> =
                vec!["10.0.0.11".parse().unwrap(), "fd00::11".parse().unwrap()];
            assert_eq!(addrs, Some(want));
        }
        other => panic!("{other:?}"),
    }
    let e = add("type siw netdev eth0 backend smoltcp addr 10.0.0.300").unwrap_err();
    assert!(e.contains("IP address"), "{e}");
    let e = add("type siw netdev eth0 addr 10.0.0.11 addr 10.0.0.11").unwrap_err();
    assert!(e.contains("twice"), "{e}");
    let e = add("type siw netdev eth0 backend packet").unwrap_err();
    assert!(e.contains("use backend tcp"), "{e}");
    assert!(add("type rxe netdev lo backend udp backend packet")
        .unwrap_err()
        .contains("twice"));
}

#[test]
fn link_add_refuses_mpa_options_on_rxe_and_bad_words() {
    let add = |s: &str| link_add_request("x", &words(s)).unwrap_err();
    let e = add("type rxe netdev lo crc on");
    assert!(e.contains("siw devices") && e.contains("rxe"), "{e}");
    assert!(add("type rxe netdev lo markers off").contains("siw devices"));
    assert!(add("type siw netdev lo crc yes").contains("on or off"));
    assert!(add("type siw netdev lo crc").contains("has no value"));
    assert!(add("type siw netdev lo crc on crc off").contains("twice"));
    assert!(add("type siw netdev lo mtu 9000").contains("unknown key"));
    assert!(add("type siw crc on markers on").starts_with("usage:"));
}
