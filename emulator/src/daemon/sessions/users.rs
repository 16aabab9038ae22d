//! One daemon for every local user, as a kernel RNIC serves every user: who a client is,
//! which requests are for administrators only, and how much one user may hold.
//!
//! - Identity is the kernel's word, taken when the connection is accepted
//!   (`SO_PEERCRED`: pid, uid, gid; `SO_PEERGROUPS`: supplementary groups). What a client
//!   says about itself is checked against it ([`is_own_pid`]).
//! - Requests that change the daemon for everyone ([`is_privileged`]) are for root, the
//!   daemon's own user and the members of the configured `admin_group`
//!   ([`is_admin`]); others get EACCES.
//! - Limits ([`UserLimits`]) hold per user over all of that user's sessions, as the kernel's
//!   rdma cgroup holds per cgroup: objects beyond `max_qps`/`max_cqs`/`max_mrs` are EAGAIN
//!   (`rdmacg_try_charge`), registered bytes beyond `max_mr_bytes` ENOMEM (what
//!   `ib_umem_get` returns past `RLIMIT_MEMLOCK`).

use crate::daemon::sessions::objects::Kind;
use serde::Deserialize;
use std::collections::HashMap;
use wire::client::fault::FaultRequest;
use wire::client::RequestBody;

/// Whether a client may change the daemon for everyone: root, the daemon's own user
/// (`daemon_uid`), or a member of `admin_group` (primary `gid` or one of `groups`).
pub fn is_admin(
    uid: u32,
    gid: u32,
    groups: &[u32],
    daemon_uid: u32,
    admin_group: Option<u32>,
) -> bool {
    uid == 0 || uid == daemon_uid || admin_group.is_some_and(|g| gid == g || groups.contains(&g))
}

/// Whether `claimed` is the own pid, as the client knows it, of the peer whose pid the
/// kernel reported as `peer_pid`: the same number, or, for a client in another PID
/// namespace (a container on a mounted socket), the innermost of the pids
/// `/proc/<peer_pid>/status` lists under `NSpid`.
pub fn is_own_pid(peer_pid: u32, claimed: u32) -> bool {
    if peer_pid == 0 {
        return false;
    }
    if claimed == peer_pid {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{peer_pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
            line.split_whitespace().last()?.parse::<u32>().ok()
        })
        == Some(claimed)
}

/// A group as the configuration names it: a number, or a name from the group database.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Group {
    Id(u32),
    Name(String),
}

impl Group {
    /// Reads `--admin-group`'s value: a number or a name.
    pub fn parse(text: &str) -> Group {
        text.parse()
            .map_or_else(|_| Group::Name(text.to_string()), Group::Id)
    }

    /// The group id; a name the group database does not know is an error.
    pub fn gid(&self) -> Result<u32, String> {
        let name = match self {
            Group::Id(gid) => return Ok(*gid),
            Group::Name(name) => name,
        };
        let unknown = || format!("admin_group {name:?}: no such group");
        let cname = std::ffi::CString::new(name.as_str()).map_err(|_| unknown())?;
        let mut grp: libc::group = empty_group();
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; `buf` is the scratch space getgrnam_r
        // fills `grp`'s strings into, and `found` is set to `&grp` or null.
        let r = unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                &mut grp,
                buf.as_mut_ptr(),
                buf.len(),
                &mut found,
            )
        };
        if r != 0 || found.is_null() {
            return Err(unknown());
        }
        Ok(grp.gr_gid)
    }
}

/// A `struct group` to be filled by `getgrnam_r`.
fn empty_group() -> libc::group {
    // SAFETY: `struct group` is plain data (an integer and pointers) for which all zero
    // bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// Requests that change the daemon for every user, or show every user's traffic:
/// devices added or removed, packet capture, fault rules and actions (`kill-qp`, link
/// down/up). Reading (`link show`, `stat`, `res`, `fault list`) is for everyone, as
/// `rdma link show` and `rdma statistic` are.
pub fn is_privileged(body: &RequestBody) -> bool {
    matches!(
        body,
        RequestBody::LinkAdd { .. }
            | RequestBody::LinkDel { .. }
            | RequestBody::Capture { .. }
            | RequestBody::Fault(FaultRequest::Add { .. } | FaultRequest::Clear { .. })
    )
}

/// What one user may hold at once, over all of its sessions (`[user_limits]` in the
/// configuration file). The defaults leave every program of the test suite and of
/// ordinary use far below them, and keep one user from taking a whole device (65536 QPs,
/// 16384 CQs, 262144 MRs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UserLimits {
    /// Queue pairs (EAGAIN beyond).
    pub max_qps: u32,
    /// Completion queues (EAGAIN beyond).
    pub max_cqs: u32,
    /// Memory regions (EAGAIN beyond).
    pub max_mrs: u32,
    /// Bytes under memory regions (ENOMEM beyond). Nothing is pinned: the bound is on
    /// what the daemon may be asked to reach and to map, 1 TiB by default.
    pub max_mr_bytes: u64,
}

impl Default for UserLimits {
    fn default() -> Self {
        UserLimits {
            max_qps: 16384,
            max_cqs: 8192,
            max_mrs: 65536,
            max_mr_bytes: 1 << 40,
        }
    }
}

/// A resource a user's objects are counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Qp,
    Cq,
    /// A memory region of this many bytes.
    Mr(u64),
}

impl Resource {
    /// The resource an object of `kind` takes, if it is one that is counted.
    pub fn of(kind: &Kind) -> Option<Resource> {
        match kind {
            Kind::Qp(_) => Some(Resource::Qp),
            Kind::Cq(_) => Some(Resource::Cq),
            Kind::Mr { length, .. } => Some(Resource::Mr(*length)),
            _ => None,
        }
    }
}

/// What one user holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub qps: u32,
    pub cqs: u32,
    pub mrs: u32,
    pub mr_bytes: u64,
}

/// Every user's usage; users holding nothing are forgotten.
#[derive(Debug, Default)]
pub struct Users {
    usage: HashMap<u32, Usage>,
    /// Objects refused because their user was at a limit.
    pub refusals: u64,
}

impl Users {
    /// Counts `r` for `uid`, or refuses it: EAGAIN for an object beyond its count,
    /// ENOMEM for bytes beyond `max_mr_bytes`.
    pub fn charge(&mut self, limits: &UserLimits, uid: u32, r: Resource) -> Result<(), i32> {
        let u = self.usage.entry(uid).or_default();
        let over = match r {
            Resource::Qp => (u.qps >= limits.max_qps).then_some(libc::EAGAIN),
            Resource::Cq => (u.cqs >= limits.max_cqs).then_some(libc::EAGAIN),
            Resource::Mr(bytes) => {
                if u.mrs >= limits.max_mrs {
                    Some(libc::EAGAIN)
                } else if u
                    .mr_bytes
                    .checked_add(bytes)
                    .is_none_or(|b| b > limits.max_mr_bytes)
                {
                    Some(libc::ENOMEM)
                } else {
                    None
                }
            }
        };
        if let Some(errno) = over {
            self.refusals += 1;
            if *u == Usage::default() {
                self.usage.remove(&uid);
            }
            tracing::info!(uid, resource = ?r, errno, "per-user limit reached");
            return Err(errno);
        }
        match r {
            Resource::Qp => u.qps += 1,
            Resource::Cq => u.cqs += 1,
            Resource::Mr(bytes) => {
                u.mrs += 1;
                u.mr_bytes += bytes;
            }
        }
        Ok(())
    }

    /// Gives back what [`Users::charge`] counted.
    pub fn release(&mut self, uid: u32, r: Resource) {
        let Some(u) = self.usage.get_mut(&uid) else {
            return;
        };
        match r {
            Resource::Qp => u.qps = u.qps.saturating_sub(1),
            Resource::Cq => u.cqs = u.cqs.saturating_sub(1),
            Resource::Mr(bytes) => {
                u.mrs = u.mrs.saturating_sub(1);
                u.mr_bytes = u.mr_bytes.saturating_sub(bytes);
            }
        }
        if *u == Usage::default() {
            self.usage.remove(&uid);
        }
    }

    /// What `uid` holds now.
    pub fn usage(&self, uid: u32) -> Usage {
        self.usage.get(&uid).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_per_user_and_give_back() {
        let limits = UserLimits {
            max_qps: 1,
            max_cqs: 1,
            max_mrs: 2,
            max_mr_bytes: 100,
        };
        let mut users = Users::default();
        assert_eq!(users.charge(&limits, 7, Resource::Qp), Ok(()));
        assert_eq!(users.charge(&limits, 7, Resource::Qp), Err(libc::EAGAIN));
        assert_eq!(
            users.charge(&limits, 8, Resource::Qp),
            Ok(()),
            "another user"
        );
        assert_eq!(users.charge(&limits, 7, Resource::Mr(60)), Ok(()));
        assert_eq!(
            users.charge(&limits, 7, Resource::Mr(41)),
            Err(libc::ENOMEM)
        );
        assert_eq!(users.charge(&limits, 7, Resource::Mr(40)), Ok(()));
        assert_eq!(users.charge(&limits, 7, Resource::Mr(0)), Err(libc::EAGAIN));
        assert_eq!(
            users.charge(&limits, 7, Resource::Mr(u64::MAX)),
            Err(libc::EAGAIN)
        );
        assert_eq!(users.refusals, 4);
        users.release(7, Resource::Mr(60));
        assert_eq!(users.usage(7).mr_bytes, 40);
        users.release(7, Resource::Mr(40));
        users.release(7, Resource::Qp);
        assert_eq!(users.usage(7), Usage::default());
        assert!(!users.usage.contains_key(&7), "an idle user is forgotten");
        assert_eq!(users.charge(&limits, 7, Resource::Cq), Ok(()));
        assert_eq!(users.charge(&limits, 7, Resource::Cq), Err(libc::EAGAIN));
    }

    #[test]
    fn admins_are_root_the_daemon_user_and_the_admin_group() {
        assert!(is_admin(0, 0, &[], 1000, None));
        assert!(is_admin(1000, 1000, &[], 1000, None));
        assert!(!is_admin(1001, 1001, &[], 1000, None));
        assert!(!is_admin(1001, 1001, &[27], 1000, None));
        assert!(is_admin(1001, 1001, &[27], 1000, Some(27)));
        assert!(is_admin(1001, 27, &[], 1000, Some(27)));
        assert!(!is_admin(1001, 1001, &[28], 1000, Some(27)));
    }

    #[test]
    fn a_pid_claim_must_be_the_peers_own() {
        let me = std::process::id();
        assert!(is_own_pid(me, me));
        assert!(!is_own_pid(me, me + 1));
        assert!(!is_own_pid(me, 1));
        assert!(!is_own_pid(0, 0), "a peer the kernel could not name");
    }
}
