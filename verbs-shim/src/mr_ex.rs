//! rdma-core v59's `IBVERBS_1.15` verbs: `ibv_reg_mr_ex` and DMA handles; and
//! `ibv_advise_mr` (an inline of `verbs.h` that calls `verbs_context.advise_mr`).
//!
//! A program built against v59's headers links these by name, so a library without them
//! stops it at load time even if it never calls them. `ibv_reg_mr_ex` registers by
//! address (with an optional IOVA) like `ibv_reg_mr_iova2`; a dma-buf (`IBV_REG_MR_MASK_FD`)
//! or a DMA handle is EOPNOTSUPP, as `ibv_reg_dmabuf_mr` and `ibv_alloc_dmah` are here and
//! on the kernel's rxe and siw (whose providers have neither operation).

use crate::abi::{ibv_context, ibv_mr, ibv_pd, ibv_sge};
use crate::context::Context;
use crate::ffi::{self, Errno};
use crate::objects::pd_of;
use core::ffi::{c_int, c_uint, c_void};
use wire::client::{AdviseRange, RequestBody};

/// `IBV_REG_MR_MASK_IOVA`: `iova` is the address the region is known by on the wire.
pub const REG_MR_MASK_IOVA: u64 = 1 << 0;
/// `IBV_REG_MR_MASK_ADDR`: `addr` is the region's start in the caller's memory.
pub const REG_MR_MASK_ADDR: u64 = 1 << 1;
/// `IBV_REG_MR_MASK_FD`: the region is a dma-buf (`fd`).
pub const REG_MR_MASK_FD: u64 = 1 << 2;
/// `IBV_REG_MR_MASK_FD_OFFSET`: `fd_offset` is the region's offset in the dma-buf.
pub const REG_MR_MASK_FD_OFFSET: u64 = 1 << 3;
/// `IBV_REG_MR_MASK_DMAH`: `dmah` is a DMA handle (TLP processing hints).
pub const REG_MR_MASK_DMAH: u64 = 1 << 4;

/// `struct ibv_mr_init_attr` (rdma-core v59 `verbs.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mr_init_attr {
    /// Bytes to register.
    pub length: usize,
    /// `IBV_ACCESS_*` flags.
    pub access: c_int,
    /// Which of the fields below are valid (`IBV_REG_MR_MASK_*`).
    pub comp_mask: u64,
    /// The region's address on the wire (with `IBV_REG_MR_MASK_IOVA`).
    pub iova: u64,
    /// The region's start (with `IBV_REG_MR_MASK_ADDR`).
    pub addr: *mut c_void,
    /// A dma-buf (with `IBV_REG_MR_MASK_FD`).
    pub fd: c_int,
    /// The offset in the dma-buf (with `IBV_REG_MR_MASK_FD_OFFSET`).
    pub fd_offset: u64,
    /// A DMA handle (with `IBV_REG_MR_MASK_DMAH`).
    pub dmah: *mut c_void,
}

/// What `ibv_reg_mr_ex` registers for `attr`: the address, length, IOVA and access of a
/// plain registration, or the errno the request gets.
pub fn plain_registration(
    attr: &ibv_mr_init_attr,
) -> Result<(*mut c_void, usize, u64, u32), Errno> {
    let known = REG_MR_MASK_IOVA
        | REG_MR_MASK_ADDR
        | REG_MR_MASK_FD
        | REG_MR_MASK_FD_OFFSET
        | REG_MR_MASK_DMAH;
    if attr.comp_mask & !known != 0 {
        return Err(Errno::EINVAL);
    }
    if attr.comp_mask & (REG_MR_MASK_FD | REG_MR_MASK_FD_OFFSET | REG_MR_MASK_DMAH) != 0 {
        // dma-buf regions and DMA handles are not implemented (docs/compatibility.md).
        return Err(Errno::EOPNOTSUPP);
    }
    if attr.comp_mask & REG_MR_MASK_ADDR == 0 {
        // Without a dma-buf the address is the region; rdma-core's kernel path rejects
        // a request that names neither.
        return Err(Errno::EINVAL);
    }
    let iova = if attr.comp_mask & REG_MR_MASK_IOVA != 0 {
        attr.iova
    } else {
        attr.addr as u64
    };
    Ok((attr.addr, attr.length, iova, attr.access as u32))
}

#[no_mangle]
pub extern "C" fn ibv_reg_mr_ex(pd: *mut ibv_pd, attr: *mut ibv_mr_init_attr) -> *mut ibv_mr {
    if attr.is_null() {
        return ffi::ptr(|| Err(Errno::EINVAL));
    }
    // SAFETY: the caller passes a valid ibv_mr_init_attr (the verbs API's contract).
    let a = unsafe { *attr };
    match plain_registration(&a) {
        // Sets errno itself on failure.
        Ok((addr, length, iova, access)) => {
            crate::verbs::ibv_reg_mr_iova2(pd, addr, length, iova, access)
        }
        Err(e) => ffi::ptr(|| Err(e)),
    }
}

/// `verbs_context.advise_mr`, which `ibv_advise_mr` calls: prefetch ranges of ODP MRs.
/// Returns 0 or the errno (positive), as rdma-core's providers do; the daemon checks the
/// advice, flags and keys and touches the pages (`wire::client::RequestBody::AdviseMr`).
///
/// # Safety
/// `sg_list` points to `num_sge` elements (the verbs API's contract).
pub unsafe extern "C" fn vctx_advise_mr(
    pd: *mut ibv_pd,
    advice: c_uint,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    ffi::errno(|| {
        let p = pd_of(pd)?;
        let sges = if num_sge == 0 || sg_list.is_null() {
            &[][..]
        } else {
            // SAFETY: the caller passes num_sge elements at sg_list.
            unsafe { core::slice::from_raw_parts(sg_list, num_sge as usize) }
        };
        let ranges = sges
            .iter()
            .map(|s| AdviseRange {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            })
            .collect();
        Context::from_ibv(p.pd.context)?.call(RequestBody::AdviseMr {
            pd: p.handle,
            advice,
            flags,
            sg_list: ranges,
        })?;
        Ok(())
    })
}

/// NULL with errno EOPNOTSUPP: TLP processing hints have no meaning for a software
/// device (rdma-core's answer for a provider without `alloc_dmah`).
#[no_mangle]
pub extern "C" fn ibv_alloc_dmah(_context: *mut ibv_context, _attr: *mut c_void) -> *mut c_void {
    ffi::ptr(|| Err(Errno::EOPNOTSUPP))
}

/// EOPNOTSUPP: no DMA handle is ever allocated here.
#[no_mangle]
pub extern "C" fn ibv_dealloc_dmah(_dmah: *mut c_void) -> c_int {
    ffi::errno(|| Err(Errno::EOPNOTSUPP))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(comp_mask: u64) -> ibv_mr_init_attr {
        ibv_mr_init_attr {
            length: 4096,
            access: 1,
            comp_mask,
            iova: 0x1000,
            addr: 0x7000_0000usize as *mut c_void,
            fd: -1,
            fd_offset: 0,
            dmah: core::ptr::null_mut(),
        }
    }

    #[test]
    fn the_layout_is_v59s() {
        // size_t, int (+4 padding), u64, u64, void *, int (+4), u64, void *.
        assert_eq!(core::mem::size_of::<ibv_mr_init_attr>(), 64);
        assert_eq!(core::mem::offset_of!(ibv_mr_init_attr, comp_mask), 16);
        assert_eq!(core::mem::offset_of!(ibv_mr_init_attr, fd), 40);
        assert_eq!(core::mem::offset_of!(ibv_mr_init_attr, dmah), 56);
    }

    #[test]
    fn an_address_registers_with_its_iova_or_its_own_address() {
        let (_, len, iova, access) = plain_registration(&attr(REG_MR_MASK_ADDR)).unwrap();
        assert_eq!((len, iova, access), (4096, 0x7000_0000, 1));
        let (_, _, iova, _) =
            plain_registration(&attr(REG_MR_MASK_ADDR | REG_MR_MASK_IOVA)).unwrap();
        assert_eq!(iova, 0x1000);
    }

    #[test]
    fn dma_bufs_handles_and_unknown_bits_are_refused() {
        for m in [REG_MR_MASK_FD, REG_MR_MASK_FD_OFFSET, REG_MR_MASK_DMAH] {
            assert_eq!(
                plain_registration(&attr(REG_MR_MASK_ADDR | m)).unwrap_err(),
                Errno::EOPNOTSUPP
            );
        }
        assert_eq!(plain_registration(&attr(0)).unwrap_err(), Errno::EINVAL);
        assert_eq!(
            plain_registration(&attr(REG_MR_MASK_ADDR | 1 << 5)).unwrap_err(),
            Errno::EINVAL
        );
    }
}
