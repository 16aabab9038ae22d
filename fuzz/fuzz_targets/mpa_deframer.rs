//! An MPA byte stream through the deframer: nothing panics, and the frames and errors
//! that come out are the same whether the stream arrives whole or in pieces.
//!
//! Input: byte 0 picks the phase (request / reply / full operation) and the
//! negotiated CRC and marker flags, byte 1 the chunk size; the rest is the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::iwarp::deframer::{Deframed, Deframer};
use wire::iwarp::FpduConfig;

#[derive(Debug, PartialEq)]
enum Unit {
    Mpa(Vec<u8>),
    Fpdu(u64, Vec<u8>),
    Err(wire::iwarp::Error),
}

fn run(stream: &[u8], chunk: usize, mode: u8) -> Vec<Unit> {
    let cfg = FpduConfig {
        crc: mode & 4 != 0,
        markers: mode & 8 != 0,
    };
    let mut d = match mode & 3 {
        0 => Deframer::expecting_request(),
        1 => Deframer::expecting_reply(),
        _ => Deframer::in_full_operation(cfg),
    };
    let mut out = Vec::new();
    for piece in stream.chunks(chunk.max(1)) {
        d.read(piece);
        while let Some(u) = d.pop() {
            out.push(match u {
                Ok(Deframed::Mpa(m)) => Unit::Mpa(m.private_data.to_vec()),
                Ok(Deframed::Fpdu {
                    ulpdu,
                    stream_offset,
                    ..
                }) => Unit::Fpdu(stream_offset, ulpdu.to_vec()),
                Err(e) => Unit::Err(e),
            });
            if d.is_negotiating() {
                d.set_config(cfg);
            }
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (mode, chunk, stream) = (data[0], usize::from(data[1]), &data[2..]);
    let whole = run(stream, stream.len(), mode);
    let pieces = run(stream, chunk, mode);
    assert_eq!(whole, pieces);
    for u in &whole {
        if let Unit::Fpdu(_, ulpdu) = u {
            let _ = wire::iwarp::RdmapMessage::parse(ulpdu);
        }
    }
});
