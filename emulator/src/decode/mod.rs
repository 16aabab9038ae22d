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

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;

use stream::Streams;

/// Arguments of `rdma-emu decode`.
#[derive(Debug, Clone, clap::Args)]
pub struct DecodeArgs {
    /// The capture to decode (pcap or pcapng).
    pub file: PathBuf,
    /// Print every header field under each frame.
    #[arg(short, long)]
    pub verbose: bool,
}

/// What decoding a capture found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Frames read.
    pub frames: usize,
    /// RoCE v2 packets whose ICRC verified.
    pub icrc_ok: usize,
    /// RoCE v2 packets whose ICRC did not.
    pub icrc_bad: usize,
    /// FPDUs whose CRC was checked and matched.
    pub crc_ok: usize,
    /// FPDUs whose CRC did not match.
    pub crc_bad: usize,
    /// Frames or stream units that could not be parsed.
    pub malformed: usize,
}

impl Summary {
    /// Whether any check failed.
    pub fn has_bad_checksum(&self) -> bool {
        self.icrc_bad > 0 || self.crc_bad > 0
    }
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
    let mut d = Decoder {
        verbose,
        summary: Summary::default(),
        streams: Streams::default(),
    };
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

struct Decoder {
    verbose: bool,
    summary: Summary,
    streams: Streams,
}

impl Decoder {
    fn frame(&mut self, link: DataLink, ts: Duration, data: &[u8], emit: &mut dyn FnMut(&str)) {
        self.summary.frames += 1;
        let mut line = format::timestamp(ts);
        let mut detail = Vec::new();
        let Some(ethernet) = as_ethernet(link, data) else {
            let _ = write!(
                line,
                " unsupported link type {link:?}, {} bytes",
                data.len()
            );
            emit(&line);
            return;
        };
        if let Some(frames) = gso::split(&ethernet) {
            self.summary.frames -= 1;
            for f in frames {
                self.frame(DataLink::ETHERNET, ts, &f, emit);
            }
            return;
        }
        match wire::frame::parse(&ethernet) {
            // ARP, LLDP and the like share the wire with RoCE and iWARP: not ours to judge.
            Err(wire::frame::Error::UnsupportedEtherType(t)) => {
                let _ = write!(line, " EtherType {t:#06x}, {} bytes (not IP)", data.len());
            }
            Err(e) => {
                self.summary.malformed += 1;
                let _ = write!(line, " [malformed frame: {e}]");
            }
            Ok(frame) => {
                format::frame(self, &frame, &mut line, &mut detail);
            }
        }
        emit(&line);
        for l in detail {
            emit(&l);
        }
    }
}

/// The frame as Ethernet II: captures on `any` (Linux cooked, SLL and SLL2) and raw IP
/// captures get a synthetic Ethernet header with zero addresses.
fn as_ethernet(link: DataLink, data: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    let synth = |ethertype: [u8; 2], payload: &[u8]| {
        let mut v = Vec::with_capacity(14 + payload.len());
        v.extend_from_slice(&[0u8; 12]);
        v.extend_from_slice(&ethertype);
        v.extend_from_slice(payload);
        std::borrow::Cow::Owned(v)
    };
    match link {
        DataLink::ETHERNET => Some(std::borrow::Cow::Borrowed(data)),
        DataLink::LINUX_SLL => {
            let t = data.get(14..16)?;
            Some(synth([t[0], t[1]], data.get(16..)?))
        }
        DataLink::LINUX_SLL2 => {
            let t = data.get(0..2)?;
            Some(synth([t[0], t[1]], data.get(20..)?))
        }
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => match data.first()? >> 4 {
            4 => Some(synth([0x08, 0x00], data)),
            6 => Some(synth([0x86, 0xdd], data)),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests;
