//! What the daemon says about its devices, as the device view and `rdma` show them.

use super::tree::ViewDevice;
use crate::client::{CallError, Client};
use std::path::Path;
use wire::client::{ReplyBody, RequestBody};

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
