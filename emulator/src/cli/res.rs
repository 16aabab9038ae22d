//! `rdma-emu res`: the daemon's resources in the shape of iproute2's `rdma resource
//! show`: RDMA CM ids (`res cm_id`) and QPs (`res qp`).

use super::control::call;
use std::path::Path;
use wire::client::cm::{ps, CmIdSummary, CmReply, CmRequest};
use wire::client::{QpSummary, ReplyBody, RequestBody};

/// `rdma-emu res qp`.
pub(super) fn qps(socket: Option<&Path>) -> Result<(), String> {
    match call(socket, RequestBody::QpList { device: None })? {
        ReplyBody::Qps(qps) => {
            print_qps(&qps);
            Ok(())
        }
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// `rdma-emu res cm_id`.
pub(super) fn cm_ids(socket: Option<&Path>) -> Result<(), String> {
    match call(socket, RequestBody::Cm(CmRequest::ListIds))? {
        ReplyBody::Cm(CmReply::Ids(ids)) => {
            print_cm_ids(&ids);
            Ok(())
        }
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// One line per QP, in the shape of iproute2's `rdma resource show qp`.
fn print_qps(qps: &[QpSummary]) {
    for q in qps {
        let kind = match q.qp_type {
            2 => "RC",
            3 => "UC",
            4 => "UD",
            _ => "-",
        };
        let state = match q.state {
            0 => "RESET",
            1 => "INIT",
            2 => "RTR",
            3 => "RTS",
            4 => "SQD",
            5 => "SQE",
            6 => "ERR",
            _ => "-",
        };
        let mut line = format!(
            "link {}/1 lqpn {} type {kind} state {state}",
            q.device, q.qpn
        );
        if let Some(r) = q.dest_qpn {
            line += &format!(" rqpn {r}");
        }
        if let Some(p) = q.expected_psn {
            line += &format!(" rq-psn {p}");
        }
        if let Some(p) = q.next_psn {
            line += &format!(" sq-psn {p}");
        }
        if let Some(p) = q.peer {
            line += &format!(" dst-addr {}", p.ip());
        }
        println!("{line} pid {}", q.pid);
    }
}

/// One line per id, in the shape of iproute2's `rdma resource show cm_id`.
fn print_cm_ids(ids: &[CmIdSummary]) {
    for id in ids {
        let link = match &id.device {
            Some(d) => format!("{d}/{}", id.port_num),
            None => "-".into(),
        };
        let ps = match id.ps {
            ps::TCP => "TCP".to_string(),
            ps::UDP => "UDP".to_string(),
            ps::IB => "IB".to_string(),
            ps::IPOIB => "IPOIB".to_string(),
            other => format!("{other:#x}"),
        };
        let qp_type = match id.qp_type {
            2 => "RC",
            3 => "UC",
            4 => "UD",
            _ => "-",
        };
        let addr = |a: &Option<std::net::SocketAddr>| a.map_or("-".to_string(), |a| a.to_string());
        let qpn = id.qpn.map_or(String::new(), |q| format!(" lqpn {q}"));
        println!(
            "link {link} cm-idn {}{qpn} qp-type {qp_type} state {} ps {ps} pid {} src-addr {} dst-addr {}",
            id.id.0,
            id.state,
            id.pid,
            addr(&id.src),
            addr(&id.dst)
        );
    }
}
