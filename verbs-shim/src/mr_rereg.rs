//! `ibv_rereg_mr`: libibverbs' own checks of the arguments, then the daemon's, which does
//! what the kernel's rxe does (the PD and the rights change in place, the keys stay, a
//! change of translation is EOPNOTSUPP).
//!
//! The return value says what became of the MR, as `enum ibv_rereg_mr_err_code`:
//! `IBV_REREG_MR_ERR_INPUT` (-1) when the arguments were refused here and the MR is as it
//! was, `IBV_REREG_MR_ERR_CMD` (-4) when the daemon refused; `errno` says why. rdma-core
//! tells the caller not to use the MR after ERR_CMD; the daemon in fact changes nothing
//! when it refuses (rxe's order of checks), so the MR still works as before.
use crate::abi::*;
use crate::context::Context;
use crate::ffi::{self, Errno};
use crate::objects::{obj, pd_of};
use crate::verbs::{Mr, ACCESS_OPTIONAL_RANGE};
use core::ffi::{c_int, c_uint, c_void};
use wire::client::verbs::rereg_flags::{CHANGE_ACCESS, CHANGE_PD, CHANGE_TRANSLATION};
use wire::client::{ReplyBody, RequestBody};

/// `IBV_REREG_MR_ERR_INPUT`: invalid input, the old MR is valid.
const ERR_INPUT: c_int = -1;
/// `IBV_REREG_MR_ERR_CMD`: the command failed.
const ERR_CMD: c_int = -4;

/// Why a rereg failed: the code to return and the errno to set.
type Failure = (c_int, Errno);

#[no_mangle]
pub extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    let failed = |(code, e): Failure| {
        ffi::set_errno(e);
        code
    };
    ffi::value(ERR_CMD, || {
        rereg(mr, flags, pd, addr, length, access).map_or_else(failed, |()| 0)
    })
}

fn rereg(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> Result<(), Failure> {
    let input = |e: Errno| (ERR_INPUT, e);
    // SAFETY: every ibv_mr the shim returns is the first field of an Mr.
    let m: &Mr = unsafe { obj(mr) }.map_err(input)?;
    let flags = flags as c_uint;
    // libibverbs' own checks (verbs.c), before any command.
    let known = CHANGE_TRANSLATION | CHANGE_PD | CHANGE_ACCESS;
    let translation = flags & CHANGE_TRANSLATION != 0;
    if flags & !known != 0
        || (translation && (length == 0 || addr.is_null()))
        || (access != 0 && flags & CHANGE_ACCESS == 0)
    {
        return Err(input(Errno::EINVAL));
    }
    let new_pd = if flags & CHANGE_PD != 0 {
        Some(pd_of(pd).map_err(input)?)
    } else {
        None
    };
    let cmd = |e: Errno| (ERR_CMD, e);
    let ctx: &Context = Context::from_ibv(m.mr.context).map_err(cmd)?;
    let reply = ctx
        .call(RequestBody::ReregMr {
            mr: m.handle,
            flags,
            pd: new_pd.map(|p| p.handle),
            addr: addr as u64,
            length: length as u64,
            access: access as c_uint & !ACCESS_OPTIONAL_RANGE,
        })
        .map_err(cmd)?;
    let ReplyBody::Mr { lkey, rkey, .. } = reply else {
        return Err(cmd(Errno::EIO));
    };
    apply(
        mr,
        new_pd.map(|_| pd),
        translation.then_some((addr, length)),
        lkey,
        rkey,
    );
    Ok(())
}

/// Writes what changed into the application's `ibv_mr`, as libibverbs and
/// `ibv_cmd_rereg_mr` do after a successful command.
fn apply(
    mr: *mut ibv_mr,
    pd: Option<*mut ibv_pd>,
    translation: Option<(*mut c_void, usize)>,
    lkey: u32,
    rkey: u32,
) {
    // SAFETY: `mr` is the live MR checked in `rereg`; the application does not use it
    // concurrently with a rereg (the verbs API's rule for every MR verb).
    let m = unsafe { &mut *mr };
    m.lkey = lkey;
    m.rkey = rkey;
    if let Some(pd) = pd {
        m.pd = pd;
        // SAFETY: `pd` is a live PD of this shim (checked by pd_of).
        m.context = unsafe { (*pd).context };
    }
    if let Some((addr, length)) = translation {
        m.addr = addr;
        m.length = length;
    }
}
