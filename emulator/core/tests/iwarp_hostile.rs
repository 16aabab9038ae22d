//! Hostile peers against one iWARP engine in full operation, through the driver of the
//! `ddp_reassembly` and `rdmap_responder` fuzz targets (`fuzz/drivers/iwarp/`), so the
//! fuzz targets' logic runs in a plain `cargo test`: every seed of the committed corpus,
//! random scripts (proptest), and named scenarios with the exact Terminate each gets.
//!
//! The driver checks its invariants itself (memory outside the writable regions
//! untouched, placement, well-formed output, completions, a Terminate before every
//! close) and panics on a violation; the tests below add what each scenario must end with.
//!
//! The seed files are these scenarios' scripts; after a change of the script format
//! rewrite them with
//! `cargo test -p emu-core --test iwarp_hostile -- --ignored write_seed_corpus`.

#[path = "../../../fuzz/drivers/iwarp/mod.rs"]
mod driver;

use std::path::PathBuf;

use driver::script::{AtomicFlags, Script, Setup};
use driver::{run, Outcome, Target};
use proptest::prelude::*;
use wire::iwarp::TerminateError;

use Target::{DdpReassembly as Ddp, RdmapResponder as Rdmap};

/// SGE operand selectors (see `fuzz/drivers/iwarp/ops.rs`).
const LOCAL: u8 = 0;
const BAD_LKEY: u8 = 7;
/// Region selectors of Write / Read Request / Atomic operands.
const ALL: u8 = 0;
const READ_ONLY: u8 = 2;
const OTHER_PD: u8 = 4;
const UNKNOWN_STAG: u8 = 5;
/// Perturbation octets: 192 + which field to break.
const EXACT: u8 = 0;
const MSN_PLUS_ONE: u8 = 192;
const QN_3: u8 = 197;
/// Atomic Request kinds.
const FETCH_ADD: AtomicFlags = AtomicFlags {
    cmpswap: false,
    misalign: false,
    compare_current: false,
};
const CMP_SWAP: AtomicFlags = AtomicFlags {
    cmpswap: true,
    ..FETCH_ADD
};
const CMP_SWAP_CURRENT: AtomicFlags = AtomicFlags {
    compare_current: true,
    ..CMP_SWAP
};
const MISALIGNED: AtomicFlags = AtomicFlags {
    misalign: true,
    ..FETCH_ADD
};
/// `ibv_wr_opcode` values.
const WR_SEND: u8 = 2;
const WR_READ: u8 = 4;

fn corpus_dir(target: Target) -> PathBuf {
    let name = match target {
        Ddp => "ddp_reassembly",
        Rdmap => "rdmap_responder",
    };
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(name)
}

/// Peer-to-peer with a Write RTR, CRCs and markers both ways, 7-octet pieces.
fn framed() -> Setup {
    Setup {
        crc: true,
        markers: true,
        peer_markers: true,
        peer_to_peer: true,
        rtr: 0b010,
        chunk: 6,
        ..Setup::default()
    }
}

fn ext() -> Setup {
    Setup {
        extensions: true,
        ..Setup::default()
    }
}

/// Every named scenario: (seed file name, target, script, the Terminate it must get).
fn scenarios() -> Vec<(&'static str, Target, Script, Option<TerminateError>)> {
    use TerminateError::*;
    let d = || Script::new(Ddp, Setup::default());
    let r = || Script::new(Rdmap, Setup::default());
    vec![
        (
            "seed-send-in-three-segments",
            Ddp,
            d().send(0, false, false, 50, EXACT, 0)
                .send(0, false, false, 50, EXACT, 0)
                .send(0, false, true, 28, EXACT, 0),
            None,
        ),
        (
            "seed-send-framed-chunked",
            Ddp,
            Script::new(Ddp, framed())
                .send(2, false, false, 100, EXACT, 0)
                .send(2, false, true, 28, EXACT, 0)
                .write(ALL, 100, 220, true, 0)
                .send(0, false, true, 128, EXACT, 0),
            None,
        ),
        (
            "seed-send-to-two-sges",
            Ddp,
            d().send(0, false, true, 1, EXACT, 0)
                .send(0, false, true, 2, EXACT, 0)
                .send(0, false, false, 100, EXACT, 0)
                .send(0, false, true, 156, EXACT, 0),
            None,
        ),
        (
            "seed-read-response-in-segments",
            Ddp,
            d().zero(3)
                .read_response(120, EXACT)
                .read_response(80, EXACT)
                .answer()
                .write(ALL, 0, 40, false, 0)
                .write(ALL, 40, 40, true, 0),
            None,
        ),
        (
            "seed-initiator-read-rtr",
            Ddp,
            Script::new(
                Ddp,
                Setup {
                    initiator: true,
                    peer_to_peer: true,
                    rtr: 0b100,
                    ord: 2,
                    ird: 2,
                    ..Setup::default()
                },
            )
            .answer()
            .answer()
            .send(0, false, true, 64, EXACT, 0),
            None,
        ),
        (
            // Found by the fuzzer (a driver bug): a Read whose two SGEs overlap; the
            // later octets win where both name an address.
            "seed-read-into-overlapping-sges",
            Rdmap,
            r().zero(3)
                .answer()
                .post_send(
                    WR_READ,
                    true,
                    false,
                    &[(1, 0xfd, 0x40), (0, 0xf1, 0x40)],
                    0,
                    1,
                )
                .answer(),
            None,
        ),
        (
            "seed-read-response-nobody-asked-for",
            Rdmap,
            r().zero(3).answer().read_response(10, EXACT),
            Some(RdmapUnexpectedOpcode),
        ),
        (
            "seed-write-beyond-the-region",
            Ddp,
            d().write(ALL, 2040, 16, true, 0),
            Some(DdpTaggedBaseBounds),
        ),
        (
            "seed-write-unknown-stag",
            Ddp,
            d().write(UNKNOWN_STAG, 0, 16, true, 0x7777),
            Some(DdpTaggedInvalidStag),
        ),
        (
            "seed-write-other-pd",
            Ddp,
            d().write(OTHER_PD, 0, 16, true, 0),
            Some(DdpTaggedStagNotAssociated),
        ),
        (
            "seed-write-read-only-region",
            Ddp,
            d().write(READ_ONLY, 0, 16, true, 0),
            Some(RdmapAccessRights),
        ),
        (
            "seed-send-too-long",
            Ddp,
            d().send(0, false, true, 129, EXACT, 0),
            Some(DdpUntaggedTooLong),
        ),
        (
            "seed-send-wrong-msn",
            Ddp,
            d().send(0, false, true, 10, MSN_PLUS_ONE, 0),
            Some(DdpUntaggedMsnRange),
        ),
        (
            "seed-send-queue-3",
            Ddp,
            d().send(0, false, true, 10, QN_3, 0),
            Some(DdpUntaggedInvalidQn),
        ),
        (
            "seed-send-without-receive",
            Rdmap,
            r().send(0, false, true, 10, EXACT, 0)
                .send(0, false, true, 10, EXACT, 0)
                .send(0, false, true, 10, EXACT, 0),
            Some(DdpUntaggedNoBuffer),
        ),
        (
            "seed-garbage-after-mpa",
            Ddp,
            d().garbage(&[0x00, 0x02, 0xff, 0xff]),
            Some(DdpCatastrophic),
        ),
        (
            "seed-corrupted-crc",
            Ddp,
            Script::new(
                Ddp,
                Setup {
                    crc: true,
                    ..Setup::default()
                },
            )
            .corrupt(35, 0x10),
            Some(MpaCrc),
        ),
        (
            "seed-read-requests-beyond-ird",
            Rdmap,
            Script::new(
                Rdmap,
                Setup {
                    chunk: 15,
                    ..Setup::default()
                },
            )
            .read_request(READ_ONLY, 0, 16, EXACT)
            .read_request(READ_ONLY, 16, 16, EXACT)
            .read_request(READ_ONLY, 32, 16, EXACT)
            .read_request(READ_ONLY, 48, 16, EXACT),
            Some(DdpUntaggedMsnRange),
        ),
        (
            "seed-read-request-read-only-region",
            Rdmap,
            r().read_request(READ_ONLY, 100, 700, EXACT)
                .read_request(ALL, 0, 3000, EXACT),
            Some(RdmapBaseBounds),
        ),
        (
            "seed-terminate-from-the-peer",
            Rdmap,
            r().terminate([0x02, 0x06, 0x00], &[], true, false),
            None,
        ),
        (
            "seed-atomics",
            Rdmap,
            Script::new(Rdmap, ext())
                .atomic_request(FETCH_ADD, ALL, 3, 5, EXACT)
                .atomic_request(CMP_SWAP_CURRENT, ALL, 3, 9, EXACT)
                .atomic_request(CMP_SWAP, ALL, 3, 1, EXACT)
                .post_send(5, true, false, &[(LOCAL, 0, 4)], 0, 1)
                .answer()
                .answer()
                .immediate(false, 7, EXACT),
            None,
        ),
        (
            // Found by the fuzzer (a driver bug): Writes and an Atomic on the same
            // target delivered in one batch; the Atomic sees the written value.
            "seed-atomic-after-writes-in-one-batch",
            Rdmap,
            Script::new(Rdmap, Setup { chunk: 15, ..ext() })
                .post_recv(&[(LOCAL, 0, 0), (0x30, 0, 0), (LOCAL, 0, 7)])
                .write(ALL, 0, 1, true, 0)
                .write(ALL, 0, 66, true, 0)
                .atomic_request(FETCH_ADD, ALL, 0, 0, EXACT),
            None,
        ),
        (
            "seed-misaligned-atomic",
            Rdmap,
            Script::new(Rdmap, ext()).atomic_request(MISALIGNED, ALL, 3, 5, EXACT),
            Some(RdmapBaseBounds),
        ),
        (
            "seed-extension-not-negotiated",
            Rdmap,
            r().immediate(false, 1, EXACT),
            Some(RdmapUnexpectedOpcode),
        ),
        (
            "seed-local-send-bad-lkey",
            Rdmap,
            r().zero(3)
                .post_send(WR_SEND, true, false, &[(BAD_LKEY, 0, 8)], 0, 0),
            Some(RdmapCatastrophic),
        ),
        (
            "seed-local-verbs",
            Rdmap,
            Script::new(Rdmap, ext())
                .post_recv(&[(LOCAL, 10, 20), (LOCAL, 40, 20)])
                .post_send(0, true, false, &[(LOCAL, 0, 40)], 0, 3)
                .post_send(0x13, true, false, &[(3, 0, 40)], 0, 4)
                .post_send(0x22, false, false, &[], 30, 5)
                .post_send(4, true, true, &[(LOCAL, 0, 50)], 0, 6)
                .post_send(1, true, false, &[(3, 8, 8)], 0, 7)
                .zero(3)
                .answer()
                .answer()
                .send(1, false, true, 16, EXACT, 7),
            None,
        ),
    ]
}

#[test]
fn named_scenarios_end_as_the_rfcs_say() {
    for (name, target, script, want) in scenarios() {
        let o = run(target, script.bytes());
        assert!(o.established, "{name}: not established");
        assert_eq!(o.terminate_sent, want, "{name}: {o:?}");
        assert_eq!(
            o.closed_by_engine,
            want.is_some() || o.terminate_received.is_some(),
            "{name}"
        );
    }
}

#[test]
fn reassembly_scenarios_place_and_complete() {
    let find = |n: &str| {
        let (_, t, s, _) = scenarios()
            .into_iter()
            .find(|e| e.0 == n)
            .expect("scenario");
        run(t, s.bytes())
    };
    let o = find("seed-send-in-three-segments");
    assert_eq!((o.recvs_ok, o.segments_in), (1, 3));
    let o = find("seed-send-framed-chunked");
    assert_eq!(o.recvs_ok, 2);
    let o = find("seed-send-to-two-sges");
    assert_eq!(o.recvs_ok, 3);
    // Both Reads complete: the first in two segments, the second answered whole.
    let o = find("seed-read-response-in-segments");
    assert_eq!(o.sends_ok, 2);
    let o = find("seed-initiator-read-rtr");
    assert_eq!((o.sends_ok, o.recvs_ok), (2, 1));
    let o = find("seed-terminate-from-the-peer");
    assert_eq!(
        o.terminate_received,
        Some(TerminateError::RdmapUnexpectedOpcode)
    );
    let o = find("seed-atomics");
    assert_eq!((o.terminate_sent, o.sends_ok, o.recvs_ok), (None, 2, 1));
    let o = find("seed-read-into-overlapping-sges");
    assert_eq!((o.terminate_sent, o.sends_ok), (None, 2));
    let o = find("seed-local-verbs");
    assert_eq!(o.terminate_sent, None);
    assert!(o.sends_ok >= 4, "{o:?}");
}

#[test]
fn committed_seeds_are_the_scenarios() {
    for (name, target, script, _) in scenarios() {
        let path = corpus_dir(target).join(name);
        let got = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            got,
            script.bytes(),
            "{name} is stale: rewrite the seeds (see the file's doc)"
        );
    }
}

#[test]
#[ignore = "writes fuzz/corpus/*/seed-*"]
fn write_seed_corpus() {
    for (name, target, script, _) in scenarios() {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).expect("corpus directory");
        std::fs::write(dir.join(name), script.bytes()).expect("seed written");
    }
}

/// Every `seed-*` file of a target's corpus (the committed ones; what a local fuzzing
/// run adds is not read).
fn seeds(target: Target) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(corpus_dir(target))
        .expect("corpus directory")
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            name.starts_with("seed-")
                .then(|| (name, std::fs::read(e.path()).expect("seed readable")))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn seed_corpus_runs_clean_through_both_targets() {
    for target in [Ddp, Rdmap] {
        let s = seeds(target);
        assert!(s.len() >= 5, "{target:?}: {} seeds", s.len());
        for (name, bytes) in &s {
            // A seed of one target is a valid script of the other, too.
            for t in [Ddp, Rdmap] {
                let o: Outcome = run(t, bytes);
                assert!(o.established, "{name} through {t:?}");
            }
        }
    }
}

/// Octets that keep most fields as the engine expects (a perturbation octet from 192
/// breaks one), so random scripts get past the first segment.
fn script_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(prop_oneof![3 => 0u8..192, 1 => any::<u8>()], 3..600)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_ddp_scripts_keep_every_invariant(data in script_bytes()) {
        run(Ddp, &data);
    }

    #[test]
    fn random_rdmap_scripts_keep_every_invariant(data in script_bytes()) {
        run(Rdmap, &data);
    }
}
