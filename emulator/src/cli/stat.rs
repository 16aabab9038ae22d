//! `rdma-emu stat`: a device's or a QP's counters (named like rxe's hw_counters), as
//! iproute2's `rdma statistic` prints them or as JSON.

use super::control::call;
use std::path::Path;
use wire::client::{CounterSet, ReplyBody, RequestBody};

/// `rdma-emu stat [DEVICE] [--qp QPN] [--json]`.
pub(super) fn stat(
    socket: Option<&Path>,
    device: Option<&str>,
    qpn: Option<u32>,
    json: bool,
) -> Result<(), String> {
    let body = RequestBody::Stat {
        device: device.map(str::to_string),
        qpn,
    };
    match call(socket, body)? {
        ReplyBody::Stat(sets) => {
            print_stats(&sets, json);
            Ok(())
        }
        other => Err(format!("unexpected reply {other:?}")),
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn print_stats(sets: &[CounterSet], json: bool) {
    if json {
        let items: Vec<String> = sets
            .iter()
            .map(|s| {
                let counters: Vec<String> = s
                    .counters
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", json_str(k)))
                    .collect();
                let qp = s.qpn.map_or("null".to_string(), |q| q.to_string());
                format!(
                    "{{\"device\":{},\"qpn\":{qp},\"counters\":{{{}}}}}",
                    json_str(&s.device),
                    counters.join(",")
                )
            })
            .collect();
        println!("[{}]", items.join(","));
        return;
    }
    for s in sets {
        let head = match s.qpn {
            Some(q) => format!("link {}/1 qp {q}", s.device),
            None => format!("link {}/1", s.device),
        };
        let body: Vec<String> = s.counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("{head} {}", body.join(" "));
    }
}
