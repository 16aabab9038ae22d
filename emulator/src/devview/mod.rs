//! The device view: what a host with the kernel's rxe/siw shows programs that probe for
//! RDMA hardware instead of (or before) asking libibverbs. UCX opens only devices whose
//! `/dev/infiniband/uverbsN` is a read-write character device and reads
//! `/sys/class/infiniband/<dev>/ports/N/gid_attrs/ndevs/M`; pyverbs, ibdev2netdev and
//! topology discovery read the same tree.
//!
//! `rdma-emu run` asks the daemon about its devices ([`query`]), generates the tree
//! ([`tree`]) and shows it to the program alone in a private mount namespace ([`mount`]),
//! where iproute2's `rdma` answers from the daemon too ([`rdma_tool`]).
//! The host's other processes see nothing change; the namespace dies with the program.

pub mod mount;
mod query;
pub mod rdma_tool;
pub mod tree;

pub use query::query;
use std::path::Path;

/// The environment variable that turns the view off (`0`), as `--no-device-view` does.
pub const ENV: &str = "RDMA_EMU_DEVICE_VIEW";

/// Whether the environment leaves the view on.
pub fn enabled_by_env() -> bool {
    !matches!(
        std::env::var(ENV).as_deref(),
        Ok("0" | "no" | "off" | "false")
    )
}

/// `rdma-emu run`'s hook: the view unless `opt_out` or [`ENV`] says no, the daemon at
/// `socket` (else where the shim looks for it). A view that cannot be made is reported
/// on stderr, and the program runs without it.
pub fn before_exec(opt_out: bool, socket: Option<&Path>) {
    if opt_out || !enabled_by_env() {
        return;
    }
    let socket = socket.map_or_else(wire::client::socket_path, Path::to_path_buf);
    if let Err(e) = enter(&socket) {
        eprintln!("rdma-emu: running without the device view: {e}");
    }
}

/// Shows the daemon's devices to this process and its future children. Call it just
/// before `exec`, single-threaded.
pub fn enter(socket: &Path) -> Result<mount::Mode, String> {
    let devices = query(socket)?;
    let tree = tree::tree(&devices);
    let mode = mount::unshare().map_err(|e| {
        format!(
            "cannot make a mount namespace ({e}): as an ordinary user this needs user \
             namespaces (user.max_user_namespaces > 0, and not restricted by \
             kernel.unprivileged_userns_clone or AppArmor)"
        )
    })?;
    mount::install(&tree).map_err(|e| format!("cannot build the device view: {e}"))?;
    // iproute2's `rdma` asks the kernel, which has no RDMA here: rdma-emu answers as it.
    if let Err(e) = mount::stand_in_for("rdma") {
        eprintln!("rdma-emu: `rdma` in the device view is the host's tool: {e}");
    }
    Ok(mode)
}
