//! `cargo xtask <task>`: what cargo alone cannot do.
//!
//! - `shim [--debug]`: build verbs-shim and link it into libibverbs.so.1 / librdmacm.so.1
//!   (with rdma-core's symbol versions) and the stand-in vendor libraries, in
//!   `target/<profile>/rdma-emu-lib/`.
mod shim;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("shim") => shim::build(!args.iter().any(|a| a == "--debug")).map(|_| ()),
        _ => {
            eprintln!("usage: cargo xtask shim [--debug]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
