//! The `rdma-emu` command line: run programs on the emulated devices, manage devices,
//! read counters, capture and decode traffic, inject faults. This file holds the grammar
//! (clap) and the dispatch; each command group is a file of its own, and `control.rs`
//! is how they all reach the daemon.

mod capture;
mod control;
mod fault;
mod link;
mod pcap;
mod res;
mod run;
mod stat;
mod top;

use clap::{Parser, Subcommand};
use fault::FaultCmd;
use link::LinkAction;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "rdma-emu",
    version,
    about = "rdma-emu: a userspace RDMA NIC; run programs on it and manage it"
)]
struct Cli {
    /// The daemon's control socket (default: as rdma-emud finds it).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a program with the verbs shim first in its library path, and the devices under
    /// /dev/infiniband and /sys/class/infiniband as a host with rxe/siw shows them.
    Run {
        /// Leave /dev and /sys as they are (also: RDMA_EMU_DEVICE_VIEW=0).
        #[arg(long)]
        no_device_view: bool,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<String>,
    },
    /// Show, add or remove devices (like iproute2's `rdma link`).
    Link {
        #[command(subcommand)]
        action: Option<LinkAction>,
    },
    /// Counters of a device or a QP (named like rxe's hw_counters).
    Stat {
        device: Option<String>,
        #[arg(long)]
        qp: Option<u32>,
        #[arg(long)]
        json: bool,
    },
    /// Write every frame a device sends and receives to a pcap file (until Ctrl-C, or
    /// `--count` frames).
    Capture {
        device: String,
        file: PathBuf,
        /// Stop after this many frames.
        #[arg(short = 'c', long)]
        count: Option<u64>,
    },
    /// Decode a pcap/pcapng file, one line per frame, ICRC and CRCs checked.
    Decode(crate::decode::DecodeArgs),
    /// A live view of devices and QPs (state, peer, PSNs, in flight, rates, retransmits,
    /// RNRs), refreshed until Ctrl-C.
    Top {
        /// Only this device.
        device: Option<String>,
        /// Seconds between refreshes.
        #[arg(short = 'd', long, default_value_t = 1.0)]
        interval: f64,
        /// Print this many frames, then stop (no screen clearing).
        #[arg(short = 'n', long)]
        iterations: Option<u64>,
    },
    /// Inject faults into a device's traffic (docs/faults.md).
    Fault {
        #[command(subcommand)]
        action: FaultCmd,
    },
    /// Show resources (like iproute2's `rdma resource show`): `res cm_id` lists the
    /// RDMA CM ids of your processes.
    Res {
        #[arg(value_parser = ["cm_id", "qp"], default_value = "cm_id")]
        kind: String,
    },
}

/// Parses the command line, runs the command, and prints its error (exit status 1);
/// `decode` sets its own exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let socket = cli.socket.as_deref();
    let result = match &cli.command {
        Command::Decode(args) => return crate::decode::run(args),
        Command::Run {
            cmd,
            no_device_view,
        } => run::run(cmd, || crate::devview::before_exec(*no_device_view, socket)),
        Command::Link { action } => {
            link::link(socket, action.as_ref().unwrap_or(&LinkAction::Show))
        }
        Command::Stat { device, qp, json } => stat::stat(socket, device.as_deref(), *qp, *json),
        Command::Capture {
            device,
            file,
            count,
        } => capture::capture(socket, device, file, *count),
        Command::Fault { action } => fault::fault(socket, action),
        Command::Res { kind } if kind == "qp" => res::qps(socket),
        Command::Res { .. } => res::cm_ids(socket),
        Command::Top {
            device,
            interval,
            iterations,
        } => top::top(socket, device.as_deref(), *interval, *iterations),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdma-emu: {e}");
            ExitCode::FAILURE
        }
    }
}
