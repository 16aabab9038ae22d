//! Arbitrary packets from the network into a device whose RC, UC or UD QP is established
//! and has receives, READs and SENDs outstanding: the core never panics, and never writes
//! application memory outside a registered range (the memory asserts every write).
//!
//! Input: byte 0 picks the transport; the rest is a sequence of packets, each a length
//! byte then that many bytes of BTH onwards. Every packet gets a valid ICRC (so it
//! reaches the transport, not just the integrity check); the fuzzer owns every other
//! field, QPN, PSN, opcode, keys and addresses included.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use emu_core::sim::*;
use emu_core::*;
use libfuzzer_sys::fuzz_target;
use wire::roce::icrc;

struct Checked<'a> {
    inner: &'a mut VecMemory,
    space: AddrSpace,
    base: u64,
    len: u64,
}

impl Memory for Checked<'_> {
    fn read(&mut self, space: AddrSpace, addr: u64, buf: &mut [u8]) -> Result<(), MemoryFault> {
        self.inner.read(space, addr, buf)
    }
    fn write(&mut self, space: AddrSpace, addr: u64, data: &[u8]) -> Result<(), MemoryFault> {
        let end = addr
            .checked_add(data.len() as u64)
            .expect("write range wraps");
        assert!(
            space == self.space && addr >= self.base && end <= self.base + self.len,
            "write outside the registered range: {space:?} {addr:#x}+{}",
            data.len()
        );
        self.inner.write(space, addr, data)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, mut rest)) = data.split_first() else {
        return;
    };
    let qp_type = [QpType::Rc, QpType::Uc, QpType::Ud][usize::from(kind % 3)];
    let opts = ConnOpts {
        qp_type,
        mtu: Mtu::Mtu256,
        buf_len: 1 << 14,
        timeout: 3,
        retry_cnt: 1,
        rnr_retry: 1,
        // FLUSH reaches the execution path, not only the access check.
        access: ConnOpts::default().access | AccessFlags::FLUSH_GLOBAL,
        ..ConnOpts::default()
    };
    let mut f = Fabric::new(u64::from(kind), 2, Mtu::Mtu1024, LinkModel::default());
    let (a, b) = connect(&mut f, &opts);
    for i in 0..4u64 {
        let sge = Sge {
            addr: b.base + i * 512,
            length: 512,
            lkey: b.mr.lkey,
        };
        let wr = RecvWr {
            wr_id: WrId(i),
            sg_list: vec![sge],
        };
        f.nodes[1]
            .dev
            .post_recv(b.qpn, wr)
            .expect("post_recv on an established QP");
    }
    if qp_type == QpType::Rc {
        for i in 0..2u64 {
            let op = if i == 0 {
                WrOpcode::RdmaRead
            } else {
                WrOpcode::Send
            };
            let mut wr = SendWr::new(WrId(100 + i), op);
            wr.sg_list = vec![Sge {
                addr: b.base + 4096 + i * 1024,
                length: 700,
                lkey: b.mr.lkey,
            }];
            wr.rdma = RdmaInfo {
                remote_addr: a.base,
                rkey: a.mr.rkey,
            };
            let now = f.now;
            let n = &mut f.nodes[1];
            n.dev
                .post_send(now, b.qpn, wr, &mut n.mem)
                .expect("post_send on an established QP");
        }
    }
    let src = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 0xc123);
    let dst = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4791);
    let (space, base, len) = (AddrSpace(b.client.0), b.base, b.len);
    while let Some((&n, tail)) = rest.split_first() {
        let n = usize::from(n).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        let mut pkt = body.to_vec();
        let c = icrc::for_udp4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            src.port(),
            4791,
            &pkt,
        );
        pkt.extend_from_slice(&c.to_le_bytes());
        let now = f.now;
        let node = &mut f.nodes[1];
        let mut mem = Checked {
            inner: &mut node.mem,
            space,
            base,
            len,
        };
        node.dev.handle_datagram(
            now,
            &Datagram {
                src,
                dst,
                payload: &pkt,
            },
            &mut mem,
        );
        let mut buf = Vec::new();
        while node.dev.poll_transmit(now, &mut mem, &mut buf).is_some() {}
        while node.dev.poll_completion().is_some() {}
        while node.dev.poll_event().is_some() {}
        f.now += Duration::from_millis(1);
        let now = f.now;
        node.dev.handle_timeout(now, &mut mem);
    }
});
