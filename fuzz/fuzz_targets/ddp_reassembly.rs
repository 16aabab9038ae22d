//! DDP placement and reassembly of one iWARP engine in full operation: tagged Writes
//! and Read Responses by STag and TO, untagged Sends by queue, MSN and MO into posted
//! receives, messages of many segments, the L bit; each segment a well-framed FPDU
//! whose fields the fuzzer keeps as the engine expects or breaks on purpose.
//!
//! Input and checks: `fuzz/drivers/iwarp/` (the same driver runs in
//! `emulator/core/tests/iwarp_hostile.rs`): nothing panics, no write lands outside a
//! valid writable region, completed receives and Reads hold what was sent, the engine's
//! output parses, and it closes only after a Terminate.
#![no_main]

#[path = "../drivers/iwarp/mod.rs"]
mod iwarp;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    iwarp::run(iwarp::Target::DdpReassembly, data);
});
