//! The mount namespace that shows the generated tree to one program and its children.
//!
//! `/sys/class/infiniband*` and `/dev/infiniband` do not exist on a host without RDMA
//! modules, so there is no directory to mount on. Each parent (`/sys/class`, `/dev`) is
//! covered with a tmpfs in a private mount namespace, and every entry that was there is
//! bound back (directories recursively, so `/dev/pts`, `/dev/shm`, `/dev/mqueue` stay the
//! host's); symbolic links are recreated. Nothing propagates to the host (the whole tree is
//! made private first), and nothing outlives the namespace: it dies with its last process,
//! taking the tmpfs with it.
//!
//! As root this needs only `unshare(CLONE_NEWNS)`. An ordinary user gets a user namespace
//! in which it is mapped to itself (same uid and gid), which the kernel allows unless
//! `user.max_user_namespaces` is 0, `kernel.unprivileged_userns_clone` is 0 (Debian's
//! older kernels) or AppArmor's `kernel.apparmor_restrict_unprivileged_userns` is 1.

use super::tree::Node;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// How the namespace was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A mount namespace (root, or CAP_SYS_ADMIN).
    Root,
    /// A user namespace mapping the caller to itself, and a mount namespace inside it.
    UserNs,
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn mount(
    src: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let src = src.map(cstr).transpose()?;
    let target = cstr(target)?;
    let fstype = fstype.map(|s| CString::new(s).unwrap_or_default());
    let data = data.map(|s| CString::new(s).unwrap_or_default());
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is null or a NUL-terminated string that outlives the call.
    check(unsafe {
        libc::mount(
            ptr(&src),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    })
}

fn detach(target: &Path) {
    if let Ok(t) = cstr(target) {
        // SAFETY: a NUL-terminated path; failure leaves the mount in place, which only
        // this private namespace sees.
        unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Enters a private mount namespace (and a user namespace when not privileged). The
/// process must be single-threaded (a user namespace requires it).
pub fn unshare() -> io::Result<Mode> {
    // SAFETY: unshare(2) takes flags only.
    let mode = if unsafe { libc::unshare(libc::CLONE_NEWNS) } == 0 {
        Mode::Root
    } else {
        // SAFETY: getuid/getgid take nothing and cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        // SAFETY: unshare(2) takes flags only.
        check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) })?;
        // An unprivileged process may map only itself, after giving up setgroups(2).
        fs::write("/proc/self/setgroups", "deny")?;
        fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
        fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
        Mode::UserNs
    };
    // Nothing done from here on may reach the host's mount table.
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    Ok(mode)
}

/// A directory covered by a tmpfs that holds its old entries bound back.
struct Cover {
    dir: PathBuf,
}

impl Cover {
    /// Covers `dir`, leaving out the entries named in `replace` (the view supplies them).
    fn new(dir: &Path, replace: &[&str]) -> io::Result<Cover> {
        let old: OwnedFd = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_PATH)
            .open(dir)?
            .into();
        let entries: Vec<(std::ffi::OsString, fs::FileType)> = fs::read_dir(dir)?
            .filter_map(Result::ok)
            .filter_map(|e| Some((e.file_name(), e.file_type().ok()?)))
            .collect();
        mount(
            Some(Path::new("tmpfs")),
            dir,
            Some("tmpfs"),
            libc::MS_NOSUID,
            Some("mode=0755"),
        )?;
        let cover = Cover {
            dir: dir.to_path_buf(),
        };
        let from = PathBuf::from(format!("/proc/self/fd/{}", old.as_raw_fd()));
        for (name, ty) in entries {
            if replace.iter().any(|r| name.as_bytes() == r.as_bytes()) {
                continue;
            }
            let src = from.join(&name);
            let dst = dir.join(&name);
            if ty.is_symlink() {
                std::os::unix::fs::symlink(fs::read_link(&src)?, &dst)?;
                continue;
            }
            if ty.is_dir() {
                fs::create_dir(&dst)?;
            } else {
                fs::File::create(&dst)?;
            }
            mount(Some(&src), &dst, None, libc::MS_BIND | libc::MS_REC, None)?;
        }
        Ok(cover)
    }

    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Cover {
    /// On failure: take the tmpfs (and every bind under it) away, which shows the
    /// directory as it was.
    fn drop(&mut self) {
        detach(&self.dir);
    }
}

/// Builds `tree` (paths relative to `/`) in the current, already private, mount
/// namespace. On error the namespace is left as it was found.
pub fn install(tree: &[(String, Node)]) -> io::Result<()> {
    let sys = Cover::new(Path::new("/sys/class"), &["infiniband", "infiniband_verbs"])?;
    let dev = Cover::new(Path::new("/dev"), &["infiniband"])?;
    // Most files repeat one another (a 1024-entry GID table is mostly the zero GID): each
    // text is written once and linked under its other names, a quarter of the syscalls.
    let mut written: std::collections::HashMap<&str, PathBuf> = std::collections::HashMap::new();
    for (path, node) in tree {
        let p = Path::new("/").join(path);
        match node {
            Node::Dir => fs::create_dir_all(&p)?,
            Node::File(text) => match written.get(text.as_str()) {
                Some(first) => fs::hard_link(first, &p)?,
                None => {
                    fs::write(&p, text)?;
                    written.insert(text, p);
                }
            },
            Node::CharDev => {
                fs::File::create(&p)?;
                mount(Some(Path::new("/dev/null")), &p, None, libc::MS_BIND, None)?;
            }
        }
    }
    // The class directory is read-only like sysfs (the binds under it keep their flags).
    mount(
        None,
        Path::new("/sys/class"),
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID,
        None,
    )?;
    sys.keep();
    dev.keep();
    Ok(())
}

/// Binds this executable over the program `name` found on `PATH` (iproute2's `rdma`), so
/// that in the view running `name` runs rdma-emu under that name. `Ok(None)` when the
/// host has no such program (nothing to stand in for).
pub fn stand_in_for(name: &str) -> io::Result<Option<PathBuf>> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let Some(target) = std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
    else {
        return Ok(None);
    };
    let me = std::env::current_exe()?;
    mount(Some(&me), &target, None, libc::MS_BIND, None)?;
    Ok(Some(target))
}
