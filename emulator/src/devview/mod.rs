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
pub mod rdma_tool;
pub mod tree;

use crate::client::{CallError, Client};
use std::path::Path;
use tree::ViewDevice;
use wire::client::{ReplyBody, RequestBody};

/// The environment variable that turns the view off (`0`), as `--no-device-view` does.
pub const ENV: &str = "RDMA_EMU_DEVICE_VIEW";

/// Whether the environment leaves the view on.
pub fn enabled_by_env() -> bool {
    !matches!(
        std::env::var(ENV).as_deref(),
        Ok("0" | "no" | "off" | "false")
    )
}

fn call(c: &mut Client, body: RequestBody) -> Result<ReplyBody, String> {
    c.call(body, &[]).map(|(b, _)| b).map_err(|e| e.to_string())
}

/// What the daemon at `socket` says about its devices, in the order the verbs shim
/// numbers them.
pub fn query(socket: &Path) -> Result<Vec<ViewDevice>, String> {
    let (mut c, hello) = Client::connect(socket)
        .map_err(|e| format!("cannot reach rdma-emud at {}: {e}", socket.display()))?;
    let ReplyBody::Hello { devices, .. } = hello else {
        return Err("unexpected reply to Hello".into());
    };
    let ReplyBody::Links(links) = call(&mut c, RequestBody::LinkShow)? else {
        return Err("unexpected reply to LinkShow".into());
    };
    // Opening a device takes the opener's memory; this process's own is harmless to hand
    // over, and the context goes away with CloseDevice (or with the session).
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")
        .map_err(|e| format!("/proc/self/mem: {e}"))?;
    let mut out = Vec::new();
    for d in devices {
        use std::os::fd::AsRawFd;
        let opened = c.call(
            RequestBody::OpenDevice {
                name: d.name.clone(),
            },
            &[mem.as_raw_fd()],
        );
        let (ctx, attr, ports, gids) = match opened {
            Ok((
                ReplyBody::DeviceOpened {
                    ctx,
                    device_attr,
                    ports,
                    gids,
                },
                _fds,
            )) => (ctx, device_attr, ports, gids),
            // Removed between Hello and now.
            Err(CallError::Errno(_)) => continue,
            Ok(_) => return Err("unexpected reply to OpenDevice".into()),
            Err(e) => return Err(e.to_string()),
        };
        let _ = call(&mut c, RequestBody::CloseDevice { ctx });
        let netdev = links
            .iter()
            .find(|l| l.name == d.name)
            .map_or_else(String::new, |l| l.netdev.clone());
        out.push(ViewDevice {
            name: d.name,
            node_type: d.node_type,
            attr,
            ports,
            gids,
            netdev,
        });
    }
    Ok(out)
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
