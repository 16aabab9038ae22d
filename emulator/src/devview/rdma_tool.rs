//! iproute2's `rdma` tool as a host with the kernel's rxe/siw answers it, inside the device
//! view.
//!
//! `rdma link show` and `rdma dev show` ask the kernel over `NETLINK_RDMA`, which a host
//! without the kernel's RDMA core does not have ("Failed to open NETLINK_RDMA socket").
//! Programs use them to find a device's network interface: rdma-core's pyverbs suite
//! (since v57) runs `rdma link show -j` for every RoCE test. In the view, `rdma-emu run`
//! binds its own executable over the host's `rdma`, and run under that name it answers
//! `link` and `dev` from what the daemon reports, in the tool's text and JSON formats
//! (iproute2 `rdma/link.c`, `rdma/dev.c`). Other objects (`res`, `stat`, `system`, link
//! add/delete) are not emulated: they exit 1 saying so.

use super::query::query;
use super::tree::ViewDevice;
use std::fmt::Write as _;
use std::process::ExitCode;

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ask {
    json: bool,
    details: bool,
    object: Object,
    /// `DEV` or `DEV/PORT`.
    filter: Option<(String, Option<u32>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Object {
    Link,
    Dev,
}

/// Parses `rdma [OPTIONS] OBJECT [show|list] [DEV[/PORT]]` as iproute2 does: options
/// anywhere (GNU getopt permutes them: pyverbs runs `rdma link show -j`), objects and the
/// `show` command matched by prefix.
fn parse(args: &[String]) -> Result<Ask, String> {
    let mut json = false;
    let mut details = false;
    let mut words = Vec::new();
    for a in args {
        let Some(flag) = a.strip_prefix('-').filter(|f| !f.is_empty()) else {
            words.push(a.as_str());
            continue;
        };
        match flag.trim_start_matches('-') {
            "j" | "json" => json = true,
            "d" | "details" => details = true,
            "p" | "pretty" | "n" | "no-nice-names" | "r" | "raw" => {}
            "V" | "Version" => return Err("version".into()),
            _ => return Err(format!("Unknown option \"{a}\"")),
        }
    }
    let mut rest = words.into_iter();
    let object = match rest.next() {
        Some(o) if !o.is_empty() && "link".starts_with(o) => Object::Link,
        Some(o) if !o.is_empty() && "dev".starts_with(o) => Object::Dev,
        Some(o) => {
            return Err(format!(
                "`rdma {o}` is not available in rdma-emu's device view (it answers `link` \
                 and `dev`)"
            ))
        }
        None => return Err("Usage: rdma [ OPTIONS ] OBJECT { COMMAND | help }".into()),
    };
    let mut next = rest.next();
    if let Some(c) = next {
        if !c.is_empty() && ("show".starts_with(c) || "list".starts_with(c)) {
            next = rest.next();
        } else if !c.contains('/') && matches!(c, "add" | "delete" | "set" | "help") {
            return Err(format!(
                "`rdma {} {c}` is not available in rdma-emu's device view: devices are \
                 managed with `rdma-emu link`",
                if object == Object::Link {
                    "link"
                } else {
                    "dev"
                }
            ));
        }
    }
    let filter = match next {
        None => None,
        Some(f) => {
            let (dev, port) = match f.split_once('/') {
                Some((d, p)) => (
                    d,
                    Some(p.parse().map_err(|_| format!("Wrong port index \"{p}\""))?),
                ),
                None => (f, None),
            };
            Some((dev.to_string(), port))
        }
    };
    if let Some(extra) = rest.next() {
        return Err(format!("Unknown parameter '{extra}'."));
    }
    Ok(Ask {
        json,
        details,
        object,
        filter,
    })
}

/// A string as a JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn port_state(s: u32) -> &'static str {
    ["NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"]
        .get(s as usize)
        .copied()
        .unwrap_or("UNKNOWN")
}

fn phys_state(s: u8) -> &'static str {
    [
        "NOP",
        "SLEEP",
        "POLLING",
        "DISABLED",
        "ARMED",
        "LINK_UP",
        "LINK_ERROR_RECOVER",
        "PHY_TEST",
    ]
    .get(usize::from(s))
    .copied()
    .unwrap_or("UNKNOWN")
}

fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// One printed record: (JSON key, text form, JSON value) per field, in the tool's order.
type Record = Vec<(&'static str, String, String)>;

/// The records `ask` selects. `index` is the device's index (the shim's: its place in
/// name order, as `ibv_get_device_index`), `ifindex` the interface index of a netdev.
fn records(
    ask: &Ask,
    devices: &[ViewDevice],
    ifindex: &dyn Fn(&str) -> u32,
) -> Result<Vec<Record>, String> {
    let mut names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    names.sort_unstable();
    let index = |n: &str| names.iter().position(|x| *x == n).unwrap_or(0);
    if let Some((dev, _)) = &ask.filter {
        if !devices.iter().any(|d| &d.name == dev) {
            return Err("Wrong device name".to_string());
        }
    }
    let mut out = Vec::new();
    for d in devices {
        if ask.filter.as_ref().is_some_and(|(n, _)| *n != d.name) {
            continue;
        }
        let idx = index(&d.name).to_string();
        match ask.object {
            Object::Dev => {
                let node = ["unknown", "ca", "switch", "router", "rnic"]
                    .get(d.node_type as usize)
                    .copied()
                    .unwrap_or("unknown");
                let proto = if d.node_type == 4 { "iw" } else { "roce" };
                let mut r: Record = vec![
                    ("ifindex", format!("{idx}: "), idx.clone()),
                    ("ifname", format!("{}: ", d.name), json_str(&d.name)),
                    ("node_type", format!("node_type {node} "), json_str(node)),
                    ("protocol", format!("protocol {proto} "), json_str(proto)),
                ];
                if !d.attr.fw_ver.is_empty() {
                    r.push((
                        "fw",
                        format!("fw {} ", d.attr.fw_ver),
                        json_str(&d.attr.fw_ver),
                    ));
                }
                let (ng, sg) = (guid(d.attr.node_guid), guid(d.attr.sys_image_guid));
                r.push(("node_guid", format!("node_guid {ng} "), json_str(&ng)));
                r.push((
                    "sys_image_guid",
                    format!("sys_image_guid {sg} "),
                    json_str(&sg),
                ));
                if d.node_type != 4 && !d.netdev.is_empty() {
                    r.push((
                        "parent",
                        format!("parent {} ", d.netdev),
                        json_str(&d.netdev),
                    ));
                }
                out.push(r);
            }
            Object::Link => {
                for (i, p) in d.ports.iter().enumerate() {
                    let port = (i + 1) as u32;
                    if ask
                        .filter
                        .as_ref()
                        .is_some_and(|(_, want)| want.is_some_and(|w| w != port))
                    {
                        continue;
                    }
                    let st = port_state(p.state);
                    let ph = phys_state(p.phys_state);
                    let mut r: Record = vec![
                        ("ifindex", String::new(), idx.clone()),
                        ("ifname", format!("link {}/", d.name), json_str(&d.name)),
                        ("port", format!("{port} "), port.to_string()),
                        ("state", format!("state {st} "), json_str(st)),
                        (
                            "physical_state",
                            format!("physical_state {ph} "),
                            json_str(ph),
                        ),
                    ];
                    if !d.netdev.is_empty() {
                        let ni = ifindex(&d.netdev);
                        r.push((
                            "netdev",
                            format!("netdev {} ", d.netdev),
                            json_str(&d.netdev),
                        ));
                        let text = if ask.details {
                            format!("netdev_index {ni} ")
                        } else {
                            String::new()
                        };
                        r.push(("netdev_index", text, ni.to_string()));
                    }
                    out.push(r);
                }
            }
        }
    }
    Ok(out)
}

/// The records as the tool prints them: one line each, or one JSON array.
fn render(json: bool, records: &[Record]) -> String {
    let mut s = String::new();
    if json {
        s.push('[');
        for (i, r) in records.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push('{');
            for (j, (key, _, value)) in r.iter().enumerate() {
                if j > 0 {
                    s.push(',');
                }
                let _ = write!(s, "{}:{value}", json_str(key));
            }
            s.push('}');
        }
        s.push_str("]\n");
    } else {
        for r in records {
            for (_, text, _) in r {
                s.push_str(text);
            }
            s.push('\n');
        }
    }
    s
}

/// The interface index of `name` in this network namespace (0 if it has none).
fn if_index(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

/// `rdma ARGS` (the arguments after the program name).
pub fn main(args: &[String]) -> ExitCode {
    let ask = match parse(args) {
        Ok(a) => a,
        Err(e) if e == "version" => {
            println!("rdma utility, rdma-emu {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let socket = wire::client::socket_path();
    let devices = match query(&socket) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rdma (rdma-emu's device view): {e}");
            return ExitCode::FAILURE;
        }
    };
    match records(&ask, &devices, &if_index) {
        Ok(r) => {
            print!("{}", render(ask.json, &r));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::client::{DeviceAttr, PortAttr};

    fn dev(name: &str, node_type: u32, netdev: &str) -> ViewDevice {
        ViewDevice {
            name: name.into(),
            node_type,
            attr: DeviceAttr {
                fw_ver: "1.0.0".into(),
                node_guid: 0x0200_00ff_fe00_0001,
                sys_image_guid: 0x0200_00ff_fe00_0001,
                ..DeviceAttr::default()
            },
            ports: vec![PortAttr {
                state: 4,
                phys_state: 5,
                ..PortAttr::default()
            }],
            gids: Vec::new(),
            netdev: netdev.into(),
        }
    }

    fn args(a: &str) -> Vec<String> {
        a.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn link_show_json_is_what_pyverbs_reads() {
        let devices = [dev("siw0", 4, "lo"), dev("rxe0", 1, "lo")];
        // Options anywhere, as GNU getopt permutes them.
        assert_eq!(parse(&args("link show -j")), parse(&args("-j link show")));
        let ask = parse(&args("link show -j")).unwrap();
        let out = render(ask.json, &records(&ask, &devices, &|_| 1).unwrap());
        assert_eq!(
            out,
            "[{\"ifindex\":1,\"ifname\":\"siw0\",\"port\":1,\"state\":\"ACTIVE\",\
             \"physical_state\":\"LINK_UP\",\"netdev\":\"lo\",\"netdev_index\":1},\
             {\"ifindex\":0,\"ifname\":\"rxe0\",\"port\":1,\"state\":\"ACTIVE\",\
             \"physical_state\":\"LINK_UP\",\"netdev\":\"lo\",\"netdev_index\":1}]\n"
        );
    }

    #[test]
    fn text_forms_follow_the_tool() {
        let devices = [dev("rxe0", 1, "eth0")];
        let ask = parse(&args("link")).unwrap();
        assert_eq!(
            render(false, &records(&ask, &devices, &|_| 2).unwrap()),
            "link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0 \n"
        );
        let ask = parse(&args("-d l s rxe0/1")).unwrap();
        assert!(render(false, &records(&ask, &devices, &|_| 2).unwrap())
            .ends_with("netdev eth0 netdev_index 2 \n"));
        let ask = parse(&args("dev")).unwrap();
        assert_eq!(
            render(false, &records(&ask, &devices, &|_| 2).unwrap()),
            "0: rxe0: node_type ca protocol roce fw 1.0.0 node_guid 0200:00ff:fe00:0001 \
             sys_image_guid 0200:00ff:fe00:0001 parent eth0 \n"
        );
    }

    #[test]
    fn filters_and_refusals() {
        let devices = [dev("rxe0", 1, "lo")];
        let ask = parse(&args("link show rxe0/2")).unwrap();
        assert!(records(&ask, &devices, &|_| 1).unwrap().is_empty());
        let ask = parse(&args("link show mlx5_0")).unwrap();
        assert!(records(&ask, &devices, &|_| 1).is_err());
        assert!(parse(&args("res show qp")).is_err());
        assert!(parse(&args("link add rxe1 type rxe netdev eth0")).is_err());
        assert!(parse(&args("link show rxe0/x")).is_err());
        assert!(parse(&args("--bogus link")).is_err());
        assert!(parse(&[]).is_err());
    }
}
