//! On-demand paging through the daemon's control socket: ODP registrations skip the
//! EFAULT probe and never take shared pages, and `AdviseMr` answers with the kernel rxe's
//! errnos and faults pages in through `/proc/PID/mem`.

mod common;

use common::*;
use wire::client::proto::Handle;
use wire::client::verbs::{access, advise};
use wire::client::{AdviseRange, ReplyBody, RequestBody, SharedPages};

const ODP: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::ON_DEMAND;

fn pd(c: &mut emulator::client::Client, ctx: Handle) -> Handle {
    match c.call(RequestBody::AllocPd { ctx }, &[]).unwrap().0 {
        ReplyBody::Pd { handle } => handle,
        other => panic!("{other:?}"),
    }
}

/// `RegMr` of `[addr, addr + length)`: (lkey) or the errno.
fn reg(
    c: &mut emulator::client::Client,
    pd: Handle,
    addr: u64,
    length: u64,
    access: u32,
) -> Result<u32, i32> {
    let body = RequestBody::RegMr {
        pd,
        addr,
        length,
        iova: addr,
        access,
        shared: Vec::new(),
    };
    match c.call(body, &[]) {
        Ok((ReplyBody::Mr { lkey, .. }, _)) => Ok(lkey),
        Ok((other, _)) => panic!("{other:?}"),
        Err(emulator::client::CallError::Errno(e)) => Err(e),
        Err(e) => panic!("{e}"),
    }
}

fn advise_mr(
    c: &mut emulator::client::Client,
    pd: Handle,
    advice: u32,
    flags: u32,
    sg_list: Vec<AdviseRange>,
) -> Result<(), i32> {
    let body = RequestBody::AdviseMr {
        pd,
        advice,
        flags,
        sg_list,
    };
    match c.call(body, &[]) {
        Ok((ReplyBody::Ok, _)) => Ok(()),
        Ok((other, _)) => panic!("{other:?}"),
        Err(emulator::client::CallError::Errno(e)) => Err(e),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn odp_regions_skip_the_probe_and_prefetch_answers_as_rxe() {
    let d = TestDaemon::start();
    let mut c = d.connect();
    let ctx = open_device(&mut c);
    let pd = pd(&mut c, ctx.handle);
    // An unmapped range: EFAULT without ODP, registered with it.
    let unmapped = 0x10_0000;
    assert_eq!(reg(&mut c, pd, unmapped, 8192, 7), Err(libc::EFAULT));
    let hole = reg(&mut c, pd, unmapped, 8192, ODP).expect("ODP over unmapped memory");
    // Shared pages are refused for an ODP region.
    let buf = vec![1u8; 3 * 4096];
    let body = RequestBody::RegMr {
        pd,
        addr: buf.as_ptr() as u64,
        length: buf.len() as u64,
        iova: buf.as_ptr() as u64,
        access: ODP,
        shared: vec![SharedPages {
            addr: buf.as_ptr() as u64,
            len: 4096,
            offset: 0,
        }],
    };
    assert!(matches!(
        c.call(body, &[]),
        Err(emulator::client::CallError::Errno(libc::EINVAL))
    ));
    let lkey = reg(&mut c, pd, buf.as_ptr() as u64, buf.len() as u64, ODP).unwrap();
    let implicit = reg(&mut c, pd, 0, u64::MAX, ODP).expect("implicit ODP");
    let pinned = reg(&mut c, pd, buf.as_ptr() as u64, buf.len() as u64, 7).unwrap();
    let range = |addr: u64, length: u32, lkey: u32| vec![AdviseRange { addr, length, lkey }];
    let at = buf.as_ptr() as u64;
    let sync = advise::FLAG_FLUSH;
    for advice in [
        advise::PREFETCH,
        advise::PREFETCH_WRITE,
        advise::PREFETCH_NO_FAULT,
    ] {
        assert_eq!(
            advise_mr(&mut c, pd, advice, sync, range(at, 8192, lkey)),
            Ok(())
        );
        assert_eq!(
            advise_mr(&mut c, pd, advice, 0, range(at, 8192, lkey)),
            Ok(())
        );
    }
    // The implicit region reaches any mapped address of this process.
    let stack = 0u64;
    let here = &stack as *const u64 as u64;
    assert_eq!(
        advise_mr(&mut c, pd, 0, sync, range(here, 8, implicit)),
        Ok(())
    );
    // Unmapped pages: EFAULT when synchronous, ignored otherwise; NO_FAULT touches nothing.
    assert_eq!(
        advise_mr(&mut c, pd, 1, sync, range(unmapped, 100, hole)),
        Err(libc::EFAULT)
    );
    assert_eq!(
        advise_mr(&mut c, pd, 1, 0, range(unmapped, 100, hole)),
        Ok(())
    );
    assert_eq!(
        advise_mr(&mut c, pd, 2, sync, range(unmapped, 100, hole)),
        Ok(())
    );
    // Outside the region: EFAULT when synchronous (the async path checks keys only).
    assert_eq!(
        advise_mr(&mut c, pd, 0, sync, range(at + 8192, 8192, lkey)),
        Err(libc::EFAULT)
    );
    assert_eq!(
        advise_mr(&mut c, pd, 0, 0, range(at + 8192, 8192, lkey)),
        Ok(())
    );
    // Bad flags, no range, an unknown advice, a region without ODP.
    assert_eq!(
        advise_mr(&mut c, pd, 0, 2, range(at, 1, lkey)),
        Err(libc::EINVAL)
    );
    assert_eq!(
        advise_mr(&mut c, pd, 0, sync, Vec::new()),
        Err(libc::EINVAL)
    );
    assert_eq!(
        advise_mr(&mut c, pd, 3, sync, range(at, 1, lkey)),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(
        advise_mr(&mut c, pd, 0, sync, range(at, 1, pinned)),
        Err(libc::EINVAL)
    );
    assert_eq!(
        advise_mr(&mut c, pd, 0, 0, range(at, 1, pinned)),
        Err(libc::EINVAL)
    );
    d.stop();
}

#[test]
fn odp_regions_count_no_bytes_toward_max_mr_bytes() {
    let d = TestDaemon::start_configured(emulator::daemon::default_factory(), |cfg| {
        cfg.user_limits.max_mr_bytes = 4096;
    });
    let mut c = d.connect();
    let ctx = open_device(&mut c);
    let pd = pd(&mut c, ctx.handle);
    let buf = vec![1u8; 3 * 4096];
    let at = buf.as_ptr() as u64;
    assert_eq!(reg(&mut c, pd, at, 8192, 7), Err(libc::ENOMEM));
    assert!(reg(&mut c, pd, at, 8192, ODP).is_ok());
    assert!(reg(&mut c, pd, 0, u64::MAX, ODP).is_ok());
    d.stop();
}
