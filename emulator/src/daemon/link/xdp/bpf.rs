//! The XDP program of the xdp backend, written here as eBPF instructions (no compiler, no
//! libbpf), and the bpf(2) calls that create its maps, load it and attach it to the
//! interface through a BPF link, which the kernel detaches when its last descriptor
//! closes (so a daemon that dies leaves no program behind).
//!
//! The program redirects to the AF_XDP socket of the frame's receive queue (an XSKMAP
//! keyed by queue index) every Ethernet frame carrying, without VLAN tag:
//! - IPv4 with a 20-byte header (no options), not a fragment, protocol UDP, or IPv6 with
//!   UDP as its first next header;
//! - UDP destination port 4791 (IBA Annex A17.2.1);
//! - an IP destination in the address map (IPv6 or IPv4-mapped IPv6, RFC 4291 2.5.5.2:
//!   the device's addresses).
//!
//! Everything else goes to the kernel (`XDP_PASS`), and so does a frame whose queue has no
//! socket (`bpf_redirect_map`'s fallback action).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One eBPF instruction (`struct bpf_insn`, linux/bpf.h): opcode, destination and source
/// registers (4 bits each), signed offset, signed immediate.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    regs: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        // The C bit fields `dst_reg:4, src_reg:4` fill a byte from its low bits on
        // little-endian machines and from its high bits on big-endian ones.
        let regs = if cfg!(target_endian = "little") {
            (src << 4) | (dst & 0xf)
        } else {
            (dst << 4) | (src & 0xf)
        };
        Insn {
            code,
            regs,
            off,
            imm,
        }
    }

    pub fn dst(&self) -> u8 {
        if cfg!(target_endian = "little") {
            self.regs & 0xf
        } else {
            self.regs >> 4
        }
    }

    pub fn src(&self) -> u8 {
        if cfg!(target_endian = "little") {
            self.regs >> 4
        } else {
            self.regs & 0xf
        }
    }
}

// Registers: R0 return value, R1–R5 arguments (clobbered by calls), R6–R9 kept across
// calls, R10 the read-only frame pointer.
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R5: u8 = 5;
const R6: u8 = 6;
const R7: u8 = 7;
const R10: u8 = 10;

// Opcodes (linux/bpf_common.h, linux/bpf.h): class | size/operation | source.
pub const LDX_W: u8 = 0x61;
pub const LDX_H: u8 = 0x69;
pub const LDX_B: u8 = 0x71;
pub const STX_W: u8 = 0x63;
pub const ST_W: u8 = 0x62;
pub const ST_DW: u8 = 0x7a;
pub const MOV64_K: u8 = 0xb7;
pub const MOV64_X: u8 = 0xbf;
pub const ADD64_K: u8 = 0x07;
pub const JA: u8 = 0x05;
pub const JEQ_K: u8 = 0x15;
pub const JNE_K: u8 = 0x55;
pub const JSET_K: u8 = 0x45;
pub const JGT_X: u8 = 0x2d;
pub const CALL: u8 = 0x85;
pub const EXIT: u8 = 0x95;
pub const LD_IMM64: u8 = 0x18;
/// `src_reg` of a 64-bit immediate load whose immediate is a map's descriptor.
const PSEUDO_MAP_FD: u8 = 1;

// Helpers (enum bpf_func_id).
const MAP_LOOKUP_ELEM: i32 = 1;
const REDIRECT_MAP: i32 = 51;

/// XDP verdicts (enum xdp_action).
const XDP_PASS: i32 = 2;

// struct xdp_md.
const MD_DATA: i16 = 0;
const MD_DATA_END: i16 = 4;
const MD_RX_QUEUE_INDEX: i16 = 16;

/// A jump target, placed later with [`Asm::bind`].
#[derive(Debug, Clone, Copy)]
struct Label(usize);

/// An assembler for straight-line programs with forward and backward jumps to labels.
#[derive(Debug, Default)]
struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    /// Jumps waiting for their label's position: (instruction index, label).
    fixups: Vec<(usize, Label)>,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.insns.len());
    }

    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push(Insn::new(code, dst, src, off, imm));
    }

    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.fixups.push((self.insns.len(), to));
        self.op(code, dst, src, 0, imm);
    }

    /// `dst = map` (two instruction slots).
    fn load_map(&mut self, dst: u8, map: RawFd) {
        self.op(LD_IMM64, dst, PSEUDO_MAP_FD, 0, map);
        self.op(0, 0, 0, 0, 0);
    }

    /// The program, every jump resolved (offsets count from the next instruction).
    fn finish(mut self) -> Result<Vec<Insn>, String> {
        for (at, l) in std::mem::take(&mut self.fixups) {
            let to = self.labels[l.0].ok_or_else(|| format!("label {} not bound", l.0))?;
            let off = to as i64 - at as i64 - 1;
            self.insns[at].off =
                i16::try_from(off).map_err(|_| format!("jump at {at} too far ({off})"))?;
        }
        Ok(self.insns)
    }
}

/// A 16-bit field as the program loads it: the wire's big-endian bytes read as a host
/// integer.
fn be16(v: u16) -> i32 {
    i32::from(u16::from_ne_bytes(v.to_be_bytes()))
}

/// The XDP program redirecting RoCE v2 frames to the device's addresses (`addrs`, a hash
/// map keyed by 16-byte address) into the sockets of `xsks` (an XSKMAP).
pub fn roce_redirect(addrs: RawFd, xsks: RawFd) -> Vec<Insn> {
    const ETH_LEN: i32 = 14;
    let mut a = Asm::default();
    let pass = a.label();
    let v4 = a.label();
    let v6 = a.label();
    let lookup = a.label();
    a.op(MOV64_X, R6, R1, 0, 0);
    a.op(LDX_W, R2, R6, MD_DATA, 0);
    a.op(LDX_W, R3, R6, MD_DATA_END, 0);
    // R7: the IP header, after 14 bytes of Ethernet.
    a.op(MOV64_X, R7, R2, 0, 0);
    a.op(ADD64_K, R7, 0, 0, ETH_LEN);
    a.jump(JGT_X, R7, R3, 0, pass);
    a.op(LDX_H, R4, R2, 12, 0);
    a.jump(JEQ_K, R4, 0, be16(0x0800), v4);
    a.jump(JEQ_K, R4, 0, be16(0x86dd), v6);
    a.jump(JA, 0, 0, 0, pass);

    // IPv4 (RFC 791): version 4 with IHL 5, no MF, fragment offset 0, UDP, port 4791.
    // The key: ::ffff:a.b.c.d at R10 - 16.
    a.bind(v4);
    a.op(MOV64_X, R5, R7, 0, 0);
    a.op(ADD64_K, R5, 0, 0, 20 + 8);
    a.jump(JGT_X, R5, R3, 0, pass);
    a.op(LDX_B, R4, R7, 0, 0);
    a.jump(JNE_K, R4, 0, 0x45, pass);
    a.op(LDX_B, R4, R7, 9, 0);
    a.jump(JNE_K, R4, 0, 17, pass);
    a.op(LDX_H, R4, R7, 6, 0);
    a.jump(JSET_K, R4, 0, be16(0x3fff), pass);
    a.op(LDX_H, R4, R7, 20 + 2, 0);
    a.jump(JNE_K, R4, 0, be16(wire::roce::ROCE_V2_UDP_PORT), pass);
    a.op(ST_DW, R10, 0, -16, 0);
    a.op(ST_W, R10, 0, -8, i32::from_ne_bytes([0, 0, 0xff, 0xff]));
    a.op(LDX_W, R4, R7, 16, 0);
    a.op(STX_W, R10, R4, -4, 0);
    a.jump(JA, 0, 0, 0, lookup);

    // IPv6 (RFC 8200): UDP as the first next header, port 4791; the key is the
    // destination address.
    a.bind(v6);
    a.op(MOV64_X, R5, R7, 0, 0);
    a.op(ADD64_K, R5, 0, 0, 40 + 8);
    a.jump(JGT_X, R5, R3, 0, pass);
    a.op(LDX_B, R4, R7, 6, 0);
    a.jump(JNE_K, R4, 0, 17, pass);
    a.op(LDX_H, R4, R7, 40 + 2, 0);
    a.jump(JNE_K, R4, 0, be16(wire::roce::ROCE_V2_UDP_PORT), pass);
    for i in 0..4i16 {
        a.op(LDX_W, R4, R7, 24 + 4 * i, 0);
        a.op(STX_W, R10, R4, -16 + 4 * i, 0);
    }

    // One of the device's addresses: to the socket of this queue, else to the kernel.
    a.bind(lookup);
    a.load_map(R1, addrs);
    a.op(MOV64_X, R2, R10, 0, 0);
    a.op(ADD64_K, R2, 0, 0, -16);
    a.op(CALL, 0, 0, 0, MAP_LOOKUP_ELEM);
    a.jump(JEQ_K, R0, 0, 0, pass);
    a.op(LDX_W, R2, R6, MD_RX_QUEUE_INDEX, 0);
    a.load_map(R1, xsks);
    a.op(MOV64_K, R3, 0, 0, XDP_PASS);
    a.op(CALL, 0, 0, 0, REDIRECT_MAP);
    a.op(EXIT, 0, 0, 0, 0);

    a.bind(pass);
    a.op(MOV64_K, R0, 0, 0, XDP_PASS);
    a.op(EXIT, 0, 0, 0, 0);
    a.finish()
        .expect("the program's labels are all bound and near")
}

// bpf(2) commands, map and program types, attach types (linux/bpf.h).
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const MAP_TYPE_HASH: u32 = 1;
const MAP_TYPE_XSKMAP: u32 = 17;
const PROG_TYPE_XDP: u32 = 6;
const ATTACH_XDP: u32 = 37;
/// XDP attach modes (linux/if_link.h).
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// `union bpf_attr`, as much of it as these commands use (the rest stays zero).
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }

    fn u32(&mut self, at: usize, v: u32) -> &mut Attr {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }

    fn u64(&mut self, at: usize, v: u64) -> &mut Attr {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }

    fn name(&mut self, at: usize, name: &str) -> &mut Attr {
        let n = name.len().min(15);
        self.0[at..at + n].copy_from_slice(&name.as_bytes()[..n]);
        self
    }
}

/// bpf(2); the descriptor or value it returns.
fn bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<i64> {
    // SAFETY: `attr` is a live, zero-padded `union bpf_attr` prefix of the size passed;
    // pointers inside it are set by the callers to buffers live for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.0.as_mut_ptr(),
            std::mem::size_of::<Attr>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: the kernel just returned this new descriptor; nobody else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// A map of `max` entries.
pub fn map_create(kind: &str, key: u32, value: u32, max: u32) -> io::Result<OwnedFd> {
    let (map_type, name) = match kind {
        "xskmap" => (MAP_TYPE_XSKMAP, "rdma_emu_xsks"),
        _ => (MAP_TYPE_HASH, "rdma_emu_addrs"),
    };
    let mut a = Attr::new();
    a.u32(0, map_type)
        .u32(4, key)
        .u32(8, value)
        .u32(12, max)
        .name(28, name);
    bpf(BPF_MAP_CREATE, &mut a).map(owned)
}

/// Sets `key` to `value` in a map.
pub fn map_update(map: &OwnedFd, key: &[u8], value: &[u8]) -> io::Result<()> {
    let mut a = Attr::new();
    a.u32(0, map.as_raw_fd() as u32)
        .u64(8, key.as_ptr() as u64)
        .u64(16, value.as_ptr() as u64);
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(drop)
}

/// Removes `key` from a map.
pub fn map_delete(map: &OwnedFd, key: &[u8]) -> io::Result<()> {
    let mut a = Attr::new();
    a.u32(0, map.as_raw_fd() as u32).u64(8, key.as_ptr() as u64);
    bpf(BPF_MAP_DELETE_ELEM, &mut a).map(drop)
}

/// Loads an XDP program; a refusal carries the verifier's log.
pub fn prog_load(insns: &[Insn]) -> io::Result<OwnedFd> {
    let license = c"MIT OR Apache-2.0";
    let mut log = vec![0u8; 64 * 1024];
    let mut a = Attr::new();
    a.u32(0, PROG_TYPE_XDP)
        .u32(4, insns.len() as u32)
        .u64(8, insns.as_ptr() as u64)
        .u64(16, license.as_ptr() as u64)
        .u32(24, 1)
        .u32(28, log.len() as u32)
        .u64(32, log.as_mut_ptr() as u64)
        .name(48, "rdma_emu_roce")
        .u32(68, ATTACH_XDP);
    bpf(BPF_PROG_LOAD, &mut a).map(owned).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]);
        // The end of the log says what the verifier refused.
        let tail: String = text
            .lines()
            .rev()
            .take(12)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        if tail.is_empty() {
            e
        } else {
            io::Error::new(e.kind(), format!("{e}; verifier log:\n{tail}"))
        }
    })
}

/// Attaches `prog` to interface `ifindex` in mode `flags` through a BPF link; the program
/// stays attached while the returned descriptor is open.
pub fn link_create(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u32(0, prog.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, ATTACH_XDP)
        .u32(12, flags);
    bpf(BPF_LINK_CREATE, &mut a).map(owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_encode_as_the_kernel_lays_them_out() {
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        // r2 = *(u32 *)(r6 + 4)
        let i = Insn::new(LDX_W, R2, R6, 4, 0);
        // SAFETY: Insn is 8 bytes of plain data.
        let bytes: [u8; 8] = unsafe { std::mem::transmute(i) };
        if cfg!(target_endian = "little") {
            assert_eq!(bytes, [0x61, 0x62, 4, 0, 0, 0, 0, 0]);
        }
        assert_eq!((i.dst(), i.src()), (R2, R6));
        // r0 = 2: an immediate in the last four bytes.
        let i = Insn::new(MOV64_K, R0, 0, 0, XDP_PASS);
        // SAFETY: as above.
        let bytes: [u8; 8] = unsafe { std::mem::transmute(i) };
        if cfg!(target_endian = "little") {
            assert_eq!(bytes, [0xb7, 0x00, 0, 0, 2, 0, 0, 0]);
        }
    }

    #[test]
    fn jumps_resolve_forward_and_backward_from_the_next_instruction() {
        let mut a = Asm::default();
        let back = a.label();
        let fwd = a.label();
        a.bind(back);
        a.op(MOV64_K, R0, 0, 0, 0); // 0
        a.jump(JEQ_K, R0, 0, 1, fwd); // 1 → 4: off 2
        a.jump(JA, 0, 0, 0, back); // 2 → 0: off -3
        a.op(MOV64_K, R0, 0, 0, 1); // 3
        a.bind(fwd);
        a.op(EXIT, 0, 0, 0, 0); // 4
        let p = a.finish().unwrap();
        assert_eq!(p[1].off, 2);
        assert_eq!(p[2].off, -3);
        let mut a = Asm::default();
        let l = a.label();
        a.jump(JA, 0, 0, 0, l);
        assert!(a.finish().unwrap_err().contains("not bound"));
    }

    #[test]
    fn the_program_loads_both_maps_ends_in_exits_and_jumps_inside() {
        let p = roce_redirect(7, 9);
        let n = p.len();
        assert_eq!(p[n - 1].code, EXIT);
        assert_eq!((p[n - 2].code, p[n - 2].imm), (MOV64_K, XDP_PASS));
        let maps: Vec<i32> = p
            .iter()
            .filter(|i| i.code == LD_IMM64)
            .inspect(|i| assert_eq!(i.src(), PSEUDO_MAP_FD))
            .map(|i| i.imm)
            .collect();
        assert_eq!(maps, [7, 9]);
        let calls: Vec<i32> = p.iter().filter(|i| i.code == CALL).map(|i| i.imm).collect();
        assert_eq!(calls, [MAP_LOOKUP_ELEM, REDIRECT_MAP]);
        for (at, i) in p.iter().enumerate() {
            if matches!(i.code, JA | JEQ_K | JNE_K | JSET_K | JGT_X) {
                let to = at as i64 + 1 + i64::from(i.off);
                assert!(to > at as i64 && to < n as i64, "jump at {at} to {to}");
                // Every jump lands on an instruction, not inside a 64-bit load.
                assert_ne!(p[to as usize - 1].code, LD_IMM64, "jump at {at}");
            }
        }
        // The port is compared as the wire carries it: 4791 = 0x12b7.
        let port = be16(4791);
        assert_eq!(port.to_ne_bytes()[..2], [0x12, 0xb7]);
        assert!(p.iter().any(|i| i.code == JNE_K && i.imm == port));
    }
}
