//! Shared by the integration tests: reading the real captures.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use pcap_file::pcap::PcapReader;

/// The rxe corpus directory (`tests/corpora/rxe` in the repository).
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpora/rxe")
}

/// Every .pcap of rxe/ and rxe/nccl/.
pub fn corpus_files() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for dir in [corpus_dir(), corpus_dir().join("nccl")] {
        for e in std::fs::read_dir(&dir).expect("corpus directory").flatten() {
            if e.path().extension().is_some_and(|x| x == "pcap") {
                v.push(e.path());
            }
        }
    }
    v.sort();
    v
}

/// The frames of one capture.
pub fn frames(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).expect("read capture");
    let mut r = PcapReader::new(&bytes[..]).expect("pcap header");
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.expect("pcap record").data.into_owned());
    }
    out
}
