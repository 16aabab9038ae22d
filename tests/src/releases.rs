//! Other rdma-core releases than the system's (Debian 12: v44), for ABI tests.
//!
//! PyPI's `pyverbs` source distributions carry rdma-core's whole tree of their release:
//! headers, version scripts and the test suite. They are the only source of other
//! releases this project may fetch. Each is pinned by its SHA-256 (from PyPI's index),
//! downloaded once next to the build (`bin_dir()/rdma-core-releases`), checked, and
//! unpacked. `RDMA_EMU_NO_PYPI=1` opts out, as for the AI movers.

use crate::{bin_dir, cannot_run};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// A release: its number, the sdist's URL on PyPI and its SHA-256.
pub struct Release {
    pub number: u32,
    url: &'static str,
    sha256: &'static str,
}

/// The releases tests build against besides the system's.
pub const RELEASES: [Release; 2] = [
    Release {
        number: 57,
        url: "https://files.pythonhosted.org/packages/20/71/c613d7a217002d046ad3964a7034a610b5bfd1ab6b75d5a0e140154bcc74/pyverbs-57.0.tar.gz",
        sha256: "6d3a452bf14b8c56dec9281d64101573a7574bc879471bf0d3521168755ca9fe",
    },
    Release {
        number: 59,
        url: "https://files.pythonhosted.org/packages/98/f5/c7f7425c53b313492f35cea6785fefe5d9b98040ce94a66a6f6354fc91ab/pyverbs-59.0.tar.gz",
        sha256: "b30d56bb620b3d3b4301876f9a04c964be1c76cc6553a451e1465f1c6ac9f20e",
    },
];

/// One download and unpack at a time (tests of one binary run in parallel).
static FETCH: Mutex<()> = Mutex::new(());

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The SHA-256 of `file` as `sha256sum` prints it.
fn sha256(file: &Path) -> Result<String, String> {
    let out = Command::new("sha256sum")
        .arg(file)
        .output()
        .map_err(|e| format!("sha256sum: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .next()
        .map(str::to_string)
        .ok_or_else(|| format!("sha256sum printed nothing for {}", file.display()))
}

/// Where the source distributions are fetched and unpacked.
fn releases_dir() -> PathBuf {
    bin_dir().join("rdma-core-releases")
}

impl Release {
    /// The source distribution's tarball, once fetched.
    fn tarball(&self) -> PathBuf {
        releases_dir().join(format!("pyverbs-{}.0.tar.gz", self.number))
    }

    /// The unpacked rdma-core tree of this release, fetched if need be.
    ///
    /// Two test processes may fetch at once from one target folder (two runs of the
    /// suite side by side, as a stress run started twice did), and `FETCH` only orders
    /// the threads of one process, so nothing here is done in place: the download goes
    /// to a file of this process and the tree is unpacked into a folder of this
    /// process, each then renamed into place, which is atomic. A process that finds
    /// the tree there uses it; one that loses the race to rename uses the winner's.
    fn tree(&self) -> Result<PathBuf, String> {
        let _one = FETCH.lock().unwrap_or_else(|p| p.into_inner());
        let dir = releases_dir();
        let name = format!("pyverbs-{}.0", self.number);
        let unpacked = dir.join(&name);
        let tree = unpacked.join("rdma-core");
        if tree.join("libibverbs/verbs.h").exists() {
            return Ok(tree);
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let tarball = self.tarball();
        if !tarball.exists() || sha256(&tarball)? != self.sha256 {
            let part = tarball.with_extension(format!("part.{}", std::process::id()));
            run(Command::new("curl")
                .args(["-fsSL", "--retry", "3", "-o"])
                .arg(&part)
                .arg(self.url))?;
            let got = sha256(&part)?;
            if got != self.sha256 {
                let _ = std::fs::remove_file(&part);
                return Err(format!(
                    "{}: SHA-256 {got}, expected {}",
                    self.url, self.sha256
                ));
            }
            std::fs::rename(&part, &tarball).map_err(|e| format!("{}: {e}", tarball.display()))?;
        }
        let staging = dir.join(format!(".unpack-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
        let unpack = run(Command::new("tar")
            .arg("xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(&staging));
        let fresh = staging.join(&name);
        let placed = unpack.and_then(|()| {
            if !fresh.join("rdma-core/libibverbs/verbs.h").exists() {
                return Err(format!(
                    "{} has no rdma-core/libibverbs/verbs.h",
                    tarball.display()
                ));
            }
            // A folder left half-unpacked by an older, in-place version of this code.
            if unpacked.exists() && !tree.join("libibverbs/verbs.h").exists() {
                let _ = std::fs::remove_dir_all(&unpacked);
            }
            match std::fs::rename(&fresh, &unpacked) {
                Ok(()) => Ok(()),
                Err(_) if tree.join("libibverbs/verbs.h").exists() => Ok(()),
                Err(e) => Err(format!("{}: {e}", unpacked.display())),
            }
        });
        let _ = std::fs::remove_dir_all(&staging);
        placed.map(|()| tree)
    }

    /// An include folder laid out as rdma-core installs its public headers
    /// (`publish_headers` in its CMake files): `infiniband/` and `rdma/`.
    pub fn include_dir(&self) -> Result<PathBuf, String> {
        let tree = self.tree()?;
        let inc = tree.join("../include");
        // Built beside and renamed into place, as the tree (see `tree`).
        if inc.join("rdma/rsocket.h").exists() {
            return Ok(inc);
        }
        let staging = tree.join(format!("../.include-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        let copies: [(&str, &[&str], &str); 4] = [
            (
                "libibverbs",
                &[
                    "arch.h",
                    "opcode.h",
                    "sa-kern-abi.h",
                    "sa.h",
                    "verbs.h",
                    "verbs_api.h",
                    "tm_types.h",
                ],
                "infiniband",
            ),
            (
                "kernel-headers/rdma",
                &["ib_user_ioctl_verbs.h"],
                "infiniband",
            ),
            ("librdmacm", &["acm.h", "ib.h"], "infiniband"),
            (
                "librdmacm",
                &["rdma_cma.h", "rdma_cma_abi.h", "rdma_verbs.h", "rsocket.h"],
                "rdma",
            ),
        ];
        for (from, files, to) in copies {
            let dest = staging.join(to);
            std::fs::create_dir_all(&dest).map_err(|e| format!("{}: {e}", dest.display()))?;
            for f in files {
                let src = tree.join(from).join(f);
                std::fs::copy(&src, dest.join(f)).map_err(|e| format!("{}: {e}", src.display()))?;
            }
        }
        // A folder left half-built by an older, in-place version of this code.
        if inc.exists() && !inc.join("rdma/rsocket.h").exists() {
            let _ = std::fs::remove_dir_all(&inc);
        }
        let placed = match std::fs::rename(&staging, &inc) {
            Ok(()) => Ok(inc),
            Err(_) if inc.join("rdma/rsocket.h").exists() => Ok(inc),
            Err(e) => Err(format!("{}: {e}", inc.display())),
        };
        let _ = std::fs::remove_dir_all(&staging);
        placed
    }
}

/// Whether the user opted out of PyPI downloads (`RDMA_EMU_NO_PYPI=1`), said once per
/// caller with what is skipped.
fn opted_out(what: &str) -> bool {
    if std::env::var_os("RDMA_EMU_NO_PYPI").is_some_and(|v| !v.is_empty() && v != "0") {
        eprintln!("SKIPPED: RDMA_EMU_NO_PYPI is set: {what} comes from PyPI");
        return true;
    }
    false
}

fn release(number: u32) -> &'static Release {
    RELEASES
        .iter()
        .find(|r| r.number == number)
        .unwrap_or_else(|| panic!("rdma-core v{number} is not in RELEASES"))
}

/// The unpacked rdma-core tree of release `number` and its source distribution's
/// tarball, or `None` with the reason said (a failure under CI) when they cannot be had.
pub fn tree(number: u32) -> Option<(PathBuf, PathBuf)> {
    if opted_out(&format!("rdma-core v{number}")) {
        return None;
    }
    let r = release(number);
    match r.tree() {
        Ok(t) => Some((t, r.tarball())),
        Err(e) => {
            let _ = cannot_run(&format!(
                "cannot fetch rdma-core v{number} from PyPI (RDMA_EMU_NO_PYPI=1 skips it): {e}"
            ));
            None
        }
    }
}

/// The include folder of release `number`, or `None` with the reason said (a failure
/// under CI) when it cannot be had.
pub fn headers(number: u32) -> Option<PathBuf> {
    if opted_out(&format!("rdma-core v{number}'s headers")) {
        return None;
    }
    match release(number).include_dir() {
        Ok(p) => Some(p),
        Err(e) => {
            let _ = cannot_run(&format!(
                "cannot fetch rdma-core v{number} from PyPI (RDMA_EMU_NO_PYPI=1 skips it): {e}"
            ));
            None
        }
    }
}
