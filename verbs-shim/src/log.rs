//! Logging only when asked: `RDMA_EMU_LOG=1` (any non-empty value other than `0`)
//! writes lines to stderr. No subscriber is installed in the host process.
use std::io::Write;
use std::sync::OnceLock;

/// Environment variable that turns the shim's diagnostics on.
pub const LOG_ENV: &str = "RDMA_EMU_LOG";

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(LOG_ENV).is_some_and(|v| !v.is_empty() && v != "0"))
}

pub fn log(args: std::fmt::Arguments<'_>) {
    if enabled() {
        let _ = writeln!(
            std::io::stderr(),
            "rdma-emu shim[{}]: {args}",
            std::process::id()
        );
    }
}

macro_rules! shim_log {
    ($($t:tt)*) => { $crate::log::log(format_args!($($t)*)) };
}
pub(crate) use shim_log;
