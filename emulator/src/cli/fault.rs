//! `rdma-emu fault`: fault rules on a device's traffic (docs/faults.md) added, listed and
//! cleared, each rule printed with its seed and how often it fired.

use super::control::call;
use clap::Subcommand;
use std::path::Path;
use wire::client::fault::{FaultAction, FaultInfo, FaultRequest, FaultSpec};
use wire::client::{ReplyBody, RequestBody};

#[derive(Subcommand, Debug)]
pub(super) enum FaultCmd {
    /// `fault add DEVICE drop|duplicate|reorder|corrupt|rnr [P%] [FILTERS]`,
    /// `delay DURATION …`, `nak SYNDROME …`, `link down|up`, `kill-qp QPN`.
    /// FILTERS: --qp N --opcode CLASS --dir rx|tx --addr IP --count N --seed N.
    Add {
        device: String,
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            required = true,
            value_name = "FAULT"
        )]
        words: Vec<String>,
    },
    /// The rules in place, with their seeds and how often they fired.
    List { device: Option<String> },
    /// Remove every rule, a device's, or one (`fault clear DEVICE ID`).
    Clear {
        device: Option<String>,
        id: Option<u32>,
    },
}

/// `rdma-emu fault …`.
pub(super) fn fault(socket: Option<&Path>, action: &FaultCmd) -> Result<(), String> {
    let request = match action {
        FaultCmd::Add { device, words } => {
            let spec = FaultSpec::parse(words).map_err(|e| format!("fault add: {e}"))?;
            let rule = matches!(spec, FaultSpec::Rule(_));
            let killed = match spec {
                FaultSpec::Action(FaultAction::KillQp(q)) => Some(q),
                _ => None,
            };
            let reply = call(
                socket,
                RequestBody::Fault(FaultRequest::Add {
                    device: device.clone(),
                    spec,
                }),
            );
            return match reply {
                Ok(ReplyBody::Faults(rules)) => {
                    print_faults(&rules);
                    Ok(())
                }
                Ok(other) => Err(format!("unexpected reply {other:?}")),
                Err(e) if rule && e.contains("not supported") => Err(format!(
                    "{device}: {e}: packet faults act on RoCE (rxe) devices; an iWARP device's \
                     packets are the kernel's TCP segments (use `link down` or `kill-qp`, or \
                     tc netem on its interface)"
                )),
                Err(e) if e.contains("No such file") && killed.is_some() => {
                    Err(format!("{device}: no QP {}", killed.unwrap_or_default()))
                }
                Err(e) => Err(format!("{device}: {e}")),
            };
        }
        FaultCmd::List { device } => FaultRequest::List {
            device: device.clone(),
        },
        FaultCmd::Clear { device, id } => FaultRequest::Clear {
            device: device.clone(),
            id: *id,
        },
    };
    match call(socket, RequestBody::Fault(request))? {
        ReplyBody::Faults(rules) => {
            print_faults(&rules);
            Ok(())
        }
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// One line per rule: its id and device, what `fault add` would take back, then its
/// state: the seed, packets matched and fired on, and the decisions for the first 64
/// matching packets (bit i set: the rule fired on the i-th).
fn print_faults(rules: &[FaultInfo]) {
    for r in rules {
        println!(
            "{} {} {} seed {} matched {} fired {} pattern {:#018x}",
            r.id, r.device, r.rule, r.seed, r.matched, r.fired, r.pattern
        );
    }
}
