//! The RDMAP responder of one iWARP engine in full operation: every RDMAP message
//! (the Send kinds, Write, Read Request, Read Response, Terminate) and the RFC 7306
//! extensions it supports (Atomic Request/Response, Immediate Data, Send with
//! Immediate), interleaved with local `post_send` / `post_recv` verbs.
//!
//! Input and checks: `fuzz/drivers/iwarp/` (the same driver runs in
//! `emulator/core/tests/iwarp_hostile.rs`): nothing panics, memory outside the
//! registered regions is untouched, everything the engine transmits deframes and parses
//! with the wire crate, Read and Atomic Responses answer the requests in order, and the
//! engine closes only after a Terminate.
#![no_main]

#[path = "../drivers/iwarp/mod.rs"]
mod iwarp;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    iwarp::run(iwarp::Target::RdmapResponder, data);
});
