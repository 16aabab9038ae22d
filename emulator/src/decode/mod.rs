//! `rdma-emu decode FILE`: one line per frame of a pcap/pcapng file, the way tcpdump
//! prints, with every RoCE ICRC and MPA CRC checked.
//!
//! Exit status: 0 when every check passed, 1 when any ICRC or MPA CRC is wrong, 2 (with
//! a one-line error) when the file is not a readable pcap/pcapng capture. Nothing in
//! the file can make it panic.
//!
//! iWARP streams are reassembled per TCP flow by sequence number and fed to the MPA
//! deframer; the MPA Request/Reply frames tell which FPDUs carry CRCs and markers.

mod format;
mod gso;
mod stream;
mod summary;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};

use format::Decoder;
pub use summary::Summary;

/// Arguments of `rdma-emu decode`.
#[derive(Debug, Clone, clap::Args)]
pub struct DecodeArgs {
    /// The capture to decode (pcap or pcapng).
    pub file: PathBuf,
    /// Print every header field under each frame.
    #[arg(short, long)]
    pub verbose: bool,
}

/// Why a capture could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Runs `rdma-emu decode` and prints to stdout; errors go to stderr.
pub fn run(args: &DecodeArgs) -> ExitCode {
    let bytes = match std::fs::read(&args.file) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rdma-emu decode: {}: {e}", args.file.display());
            return ExitCode::from(2);
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match decode_bytes(&bytes, args.verbose, &mut |line| {
        let _ = writeln!(out, "{line}");
    }) {
        Ok(summary) if summary.has_bad_checksum() => ExitCode::from(1),
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = out.flush();
            eprintln!("rdma-emu decode: {}: {e}", args.file.display());
            ExitCode::from(2)
        }
    }
}

/// Decodes a whole capture held in memory, calling `emit` with each output line.
pub fn decode_bytes(
    bytes: &[u8],
    verbose: bool,
    emit: &mut dyn FnMut(&str),
) -> Result<Summary, DecodeError> {
    let mut d = Decoder::new(verbose);
    let magic = bytes
        .get(..4)
        .ok_or_else(|| DecodeError("not a pcap or pcapng file (too short)".into()))?;
    let err = |e: pcap_file::PcapError| DecodeError(format!("truncated or corrupt capture: {e}"));
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(bytes).map_err(err)?;
        while let Some(block) = r.next_block() {
            let block = block.map_err(err)?;
            let (iface, ts, data) = match &block {
                Block::EnhancedPacket(p) => (p.interface_id as usize, p.timestamp, p.data.to_vec()),
                Block::SimplePacket(p) => (0, Duration::ZERO, p.data.to_vec()),
                _ => continue,
            };
            drop(block);
            let link = r
                .interfaces()
                .get(iface)
                .map(|i| i.linktype)
                .ok_or_else(|| DecodeError(format!("packet names missing interface {iface}")))?;
            d.frame(link, ts, &data, emit);
        }
    } else {
        let pcap_magic = [
            [0xd4, 0xc3, 0xb2, 0xa1],
            [0xa1, 0xb2, 0xc3, 0xd4],
            [0x4d, 0x3c, 0xb2, 0xa1],
            [0xa1, 0xb2, 0x3c, 0x4d],
        ];
        if !pcap_magic.iter().any(|m| m == magic) {
            return Err(DecodeError("not a pcap or pcapng file".into()));
        }
        let mut r = PcapReader::new(bytes).map_err(err)?;
        let link = r.header().datalink;
        while let Some(p) = r.next_packet() {
            let p = p.map_err(err)?;
            d.frame(link, p.timestamp, &p.data, emit);
        }
    }
    Ok(d.summary)
}

#[cfg(test)]
mod tests;
