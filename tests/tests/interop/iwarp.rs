//! The iWARP half of the capture checks: every TCP connection of the siw pairs, as
//! `rdma-emu decode` reassembles and deframes it (MPA Request/Reply, FPDUs with their CRC
//! checked) and as tshark's `iwarp_mpa` dissector sees it ("Good CRC32"), split by pair
//! (each pair has a server port of its own).
use rdma_emu_tests::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// What the capture holds of the connections to or from one server port.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PortTraffic {
    /// The C flag of every MPA Request and of every MPA Reply (R=0 or not).
    pub request_crc: Vec<bool>,
    pub reply_crc: Vec<bool>,
    /// MPA Replies with R=1 (connection rejected).
    pub rejected: usize,
    /// FPDUs by `rdma-emu decode`'s verdict on their CRC.
    pub crc_ok: usize,
    pub crc_off: usize,
    pub crc_bad: usize,
    /// MPA stream errors and DDP/RDMAP headers decode could not parse.
    pub errors: usize,
    /// FPDUs sent by the guest (the kernel's siw) and by the host (rdma-emu).
    pub from_kernel: usize,
    pub from_emu: usize,
    /// tshark: MPA Requests, and FPDUs whose CRC it found good or bad.
    pub tshark_requests: usize,
    pub tshark_good: usize,
    pub tshark_bad: usize,
}

impl PortTraffic {
    /// Checks the connections of one pair: every MPA exchange accepted with CRCs
    /// `crc` (both flags in the Reply: RFC 5044 §7.1, CRCs when either side asks), FPDUs
    /// in both directions, each with the CRC state the exchange set, all CRCs good for
    /// both tools, and the two tools agreeing. A one-line summary or what is wrong.
    pub fn verdict(&self, crc: bool) -> Result<String, String> {
        let mut wrong = Vec::new();
        let connections = self.request_crc.len();
        if connections == 0 {
            wrong.push("no MPA Request".to_string());
        }
        if self.reply_crc.len() != connections || self.rejected > 0 {
            wrong.push(format!(
                "{} MPA Requests, {} Replies ({} rejecting)",
                connections,
                self.reply_crc.len(),
                self.rejected
            ));
        }
        if self.reply_crc.iter().any(|&c| c != crc) {
            wrong.push(format!(
                "MPA Reply C flags {:?} (Requests {:?}), expected C={}",
                self.reply_crc,
                self.request_crc,
                u8::from(crc)
            ));
        }
        let (used, unused) = if crc {
            (self.crc_ok, self.crc_off)
        } else {
            (self.crc_off, self.crc_ok)
        };
        if used == 0 || unused > 0 {
            wrong.push(format!(
                "FPDUs with CRC checked {}, without {} (expected CRC {})",
                self.crc_ok,
                self.crc_off,
                if crc { "on" } else { "off" }
            ));
        }
        if self.crc_bad > 0 || self.errors > 0 {
            wrong.push(format!(
                "{} bad CRCs, {} MPA/DDP/RDMAP errors",
                self.crc_bad, self.errors
            ));
        }
        if self.from_kernel == 0 || self.from_emu == 0 {
            wrong.push(format!(
                "FPDUs from the kernel {}, from rdma-emu {}",
                self.from_kernel, self.from_emu
            ));
        }
        if self.tshark_requests != connections
            || self.tshark_bad > 0
            || self.tshark_good != self.crc_ok
        {
            wrong.push(format!(
                "tshark: {} MPA Requests, Good CRC32 {}, Bad CRC32 {} (rdma-emu decode: {} Requests, {} CRCs ok)",
                self.tshark_requests, self.tshark_good, self.tshark_bad, connections, self.crc_ok
            ));
        }
        if !wrong.is_empty() {
            return Err(wrong.join("; "));
        }
        Ok(format!(
            "{connections} MPA connection(s), C={}; {} FPDUs ({} from the kernel, {} from rdma-emu), {}",
            u8::from(crc),
            self.from_kernel + self.from_emu,
            self.from_kernel,
            self.from_emu,
            if crc {
                format!("every CRC good (decode and tshark: {})", self.crc_ok)
            } else {
                "no CRC".to_string()
            }
        ))
    }

    /// Counts what `rdma-emu decode` printed after a frame's TCP header: the ` | `
    /// separated MPA frames and FPDUs the frame completed. `from_kernel`: the guest sent it.
    fn add_decoded(&mut self, units: &str, from_kernel: bool) {
        for unit in units.split(" | ") {
            let flag = |name: &str| unit.split_whitespace().any(|w| w == format!("{name}=1"));
            if unit.starts_with("MPA Request") {
                self.request_crc.push(flag("C"));
            } else if unit.starts_with("MPA Reply") {
                if flag("R") {
                    self.rejected += 1;
                }
                self.reply_crc.push(flag("C"));
            } else if unit.starts_with("FPDU CRC BAD") {
                self.crc_bad += 1;
            } else if unit.starts_with("FPDU ") {
                if unit.contains(" CRC ok") {
                    self.crc_ok += 1;
                } else if unit.contains(" CRC off") {
                    self.crc_off += 1;
                }
                if unit.contains("[DDP/RDMAP:") {
                    self.errors += 1;
                }
                if from_kernel {
                    self.from_kernel += 1;
                } else {
                    self.from_emu += 1;
                }
            } else if unit.starts_with("MPA stream error") {
                self.errors += 1;
            }
        }
    }
}

/// `IP.PORT` of tcpdump's notation: (IP, port).
fn endpoint(word: &str) -> Option<(&str, u16)> {
    let (ip, port) = word.trim_end_matches(':').rsplit_once('.')?;
    Some((ip, port.parse().ok()?))
}

/// One `rdma-emu decode` line of a TCP frame: (source IP, source port, destination port,
/// what follows the TCP header), or `None` for other lines.
fn decoded_tcp(line: &str) -> Option<(&str, u16, u16, &str)> {
    let mut words = line.split_whitespace();
    let (_time, src, arrow, dst) = (words.next()?, words.next()?, words.next()?, words.next()?);
    if arrow != ">" {
        return None;
    }
    let ((src_ip, src_port), (_, dst_port)) = (endpoint(src)?, endpoint(dst)?);
    let units = line.split_once(" | ").map_or("", |(_, u)| u);
    Some((src_ip, src_port, dst_port, units))
}

/// Adds tshark's `-O iwarp_mpa` view: per frame, its TCP ports (the summary line), then
/// the MPA Requests and FPDU CRC verdicts it dissected.
fn count_tshark(text: &str, traffic: &mut BTreeMap<u16, PortTraffic>) {
    let mut ports: Option<(u16, u16)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Transmission Control Protocol, Src Port: ") {
            let mut parts = rest.split(", Dst Port: ");
            let src = parts.next().and_then(|p| p.trim().parse().ok());
            let dst = parts
                .next()
                .and_then(|p| p.split(',').next())
                .and_then(|p| p.trim().parse().ok());
            ports = src.zip(dst);
            continue;
        }
        let Some((src, dst)) = ports else {
            continue;
        };
        let key = if traffic.contains_key(&src) { src } else { dst };
        let Some(t) = traffic.get_mut(&key) else {
            continue;
        };
        let line = line.trim();
        if line == "Request frame header" {
            t.tshark_requests += 1;
        } else if line.contains("(Good CRC32)") {
            t.tshark_good += 1;
        } else if line.contains("(Bad CRC32") {
            t.tshark_bad += 1;
        }
    }
}

/// The whole iWARP capture and each port's share of it.
pub struct IwarpCapture {
    /// Whether the capture as a whole is clean.
    pub ok: bool,
    pub text: String,
    pub ports: BTreeMap<u16, PortTraffic>,
}

/// Checks `pcap` (the siw tap): `rdma-emu decode` must exit 0 with no bad CRC and no
/// MPA/DDP/RDMAP error, tshark must find no malformed or error-level frame, and both must
/// count the same good CRCs; `ports` are the server ports of the pairs that ran.
pub fn check_iwarp_capture(pcap: &Path, guest_ip: &str, ports: &[u16]) -> IwarpCapture {
    let mut traffic: BTreeMap<u16, PortTraffic> =
        ports.iter().map(|&p| (p, PortTraffic::default())).collect();
    let mut text = String::new();
    let mut ok = true;
    // FPDUs whose CRC `rdma-emu decode` checked and found good, in the whole capture
    let mut decode_good = None;
    match Command::new(bin_dir().join("rdma-emu"))
        .arg("decode")
        .arg(pcap)
        .output()
    {
        Ok(d) => {
            let out = String::from_utf8_lossy(&d.stdout);
            let mut all = PortTraffic::default();
            for (src_ip, src_port, dst_port, units) in out.lines().filter_map(decoded_tcp) {
                let from_kernel = src_ip == guest_ip;
                all.add_decoded(units, from_kernel);
                let port = if traffic.contains_key(&src_port) {
                    src_port
                } else {
                    dst_port
                };
                if let Some(t) = traffic.get_mut(&port) {
                    t.add_decoded(units, from_kernel);
                }
            }
            let a = &all;
            let _ = writeln!(
                text,
                "rdma-emu decode: exit {}, {} MPA connections, {} FPDUs ({} from the kernel, {} from rdma-emu): CRC ok {}, off {}, BAD {}; {} MPA/DDP/RDMAP errors",
                d.status.code().unwrap_or(-1),
                a.request_crc.len(),
                a.from_kernel + a.from_emu,
                a.from_kernel,
                a.from_emu,
                a.crc_ok,
                a.crc_off,
                a.crc_bad,
                a.errors
            );
            for l in out
                .lines()
                .filter(|l| {
                    l.contains("CRC BAD") || l.contains("stream error") || l.contains("[DDP/RDMAP:")
                })
                .take(10)
            {
                let _ = writeln!(text, "  {l}");
            }
            if !d.status.success() || a.crc_bad > 0 || a.errors > 0 {
                ok = false;
            }
            decode_good = Some(a.crc_ok);
        }
        Err(e) => {
            ok = false;
            let _ = writeln!(text, "cannot run rdma-emu decode: {e}");
        }
    }
    let bad = Command::new("tshark")
        .args(TSHARK_FLAGS)
        .arg("-r")
        .arg(pcap)
        .args(["-Y", "_ws.malformed || _ws.expert.severity >= \"error\""])
        .output();
    match bad {
        Ok(b) => {
            let out = String::from_utf8_lossy(&b.stdout);
            let lines: Vec<&str> = out.lines().collect();
            let _ = writeln!(
                text,
                "tshark: exit {}, {} malformed or error-level frames",
                b.status.code().unwrap_or(-1),
                lines.len()
            );
            for l in lines.iter().take(10) {
                let _ = writeln!(text, "  {l}");
            }
            if !b.status.success() || !lines.is_empty() {
                ok = false;
            }
        }
        Err(e) => {
            ok = false;
            let _ = writeln!(text, "cannot run tshark: {e}");
        }
    }
    match Command::new("tshark")
        .args(TSHARK_FLAGS)
        .arg("-r")
        .arg(pcap)
        .args(["-Y", "iwarp_mpa", "-O", "iwarp_mpa"])
        .output()
    {
        Ok(v) if v.status.success() => {
            let out = String::from_utf8_lossy(&v.stdout);
            count_tshark(&out, &mut traffic);
            let good = out.matches("(Good CRC32)").count();
            let bad = out.matches("(Bad CRC32").count();
            let _ = writeln!(
                text,
                "tshark iwarp_mpa: {} MPA Requests, Good CRC32 {good}, Bad CRC32 {bad}",
                out.lines()
                    .filter(|l| l.trim() == "Request frame header")
                    .count()
            );
            if bad > 0 || decode_good != Some(good) {
                ok = false;
            }
        }
        Ok(v) => {
            ok = false;
            let _ = writeln!(
                text,
                "tshark -O iwarp_mpa: exit {}: {}",
                v.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&v.stderr).trim()
            );
        }
        Err(e) => {
            ok = false;
            let _ = writeln!(text, "cannot run tshark: {e}");
        }
    }
    IwarpCapture {
        ok,
        text,
        ports: traffic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rdma-emu decode` lines of one CRC-on connection to port 7501 (the guest initiates),
    /// and a frame of another connection.
    const DECODED: &str = "\
20:48:00.531251 10.213.7.2.33677 > 10.213.7.1.7501: TCP [P.] seq 1 ack 1 win 502 length 24 | MPA Request M=0 C=1 R=0 rev=2 pd_len=4 IRD=1 ORD=1
20:48:00.541698 10.213.7.1.7501 > 10.213.7.2.33677: TCP [P.] seq 1 ack 25 win 64 length 24 | MPA Reply M=0 C=1 R=0 rev=2 pd_len=4 IRD=1 ORD=1
20:48:00.551698 10.213.7.2.33677 > 10.213.7.1.7501: TCP [P.] seq 25 ack 25 win 64 length 80 | FPDU ulpdu=34 pad=0 markers=0 CRC ok; RDMAP Send MSN=1 MO=0 L=1 len=16 | FPDU ulpdu=34 pad=0 markers=0 CRC ok; RDMAP Send MSN=2 MO=0 L=1 len=16
20:48:00.561698 10.213.7.1.7501 > 10.213.7.2.33677: TCP [P.] seq 25 ack 105 win 64 length 40 | FPDU ulpdu=34 pad=0 markers=0 CRC ok; RDMAP Send MSN=1 MO=0 L=1 len=16
20:48:00.571698 10.213.7.1.7501 > 10.213.7.2.33677: TCP [.] seq 65 ack 105 win 64 length 0
20:48:01.000000 10.213.7.1.40000 > 10.213.7.2.7502: TCP [P.] seq 1 ack 1 win 64 length 24 | MPA Request M=0 C=0 R=0 rev=2 pd_len=4 IRD=1 ORD=1
20:48:01.000001 [malformed frame: unsupported EtherType 0x0806]
";

    /// tshark's `-O iwarp_mpa` view of the same connection.
    const TSHARK: &str = "\
Frame 1: 90 bytes on wire (720 bits), 90 bytes captured (720 bits)
Transmission Control Protocol, Src Port: 33677, Dst Port: 7501, Seq: 1, Ack: 1, Len: 24
iWARP Marker Protocol data unit Aligned framing
    Request frame header
        .1.. .... = CRC flag: True
Frame 3: 146 bytes on wire (1168 bits), 146 bytes captured (1168 bits)
Transmission Control Protocol, Src Port: 33677, Dst Port: 7501, Seq: 25, Ack: 25, Len: 80
iWARP Marker Protocol data unit Aligned framing
    FPDU
        CRC check: 0x47a228f1 (Good CRC32)
iWARP Marker Protocol data unit Aligned framing
    FPDU
        CRC check: 0x2fd8886e (Good CRC32)
Frame 4: 106 bytes on wire (848 bits), 106 bytes captured (848 bits)
Transmission Control Protocol, Src Port: 7501, Dst Port: 33677, Seq: 25, Ack: 105, Len: 40
iWARP Marker Protocol data unit Aligned framing
    FPDU
        CRC check: 0x5ae208e4 (Good CRC32)
";

    fn traffic() -> BTreeMap<u16, PortTraffic> {
        let mut t: BTreeMap<u16, PortTraffic> = [(7501, PortTraffic::default())].into();
        for (ip, sport, dport, units) in DECODED.lines().filter_map(decoded_tcp) {
            let port = if t.contains_key(&sport) { sport } else { dport };
            if let Some(p) = t.get_mut(&port) {
                p.add_decoded(units, ip == "10.213.7.2");
            }
        }
        count_tshark(TSHARK, &mut t);
        t
    }

    #[test]
    fn a_connection_is_counted_by_its_server_port_and_sender() {
        let t = &traffic()[&7501];
        assert_eq!(t.request_crc, [true]);
        assert_eq!(t.reply_crc, [true]);
        assert_eq!((t.crc_ok, t.crc_off, t.crc_bad, t.errors), (3, 0, 0, 0));
        assert_eq!((t.from_kernel, t.from_emu), (2, 1));
        assert_eq!((t.tshark_requests, t.tshark_good, t.tshark_bad), (1, 3, 0));
    }

    #[test]
    fn the_verdict_wants_the_expected_crc_on_every_fpdu() {
        let t = traffic().remove(&7501).unwrap_or_default();
        let ok = t.verdict(true).expect("CRC on everywhere");
        assert!(ok.contains("C=1") && ok.contains("3 FPDUs"), "{ok}");
        let off = t.verdict(false).expect_err("CRC was on");
        assert!(off.contains("expected C=0"), "{off}");
        let mut bad = t.clone();
        bad.crc_bad = 1;
        bad.tshark_good = 2;
        let why = bad.verdict(true).expect_err("a bad CRC");
        assert!(
            why.contains("1 bad CRCs") && why.contains("Good CRC32 2"),
            "{why}"
        );
        let one_sided = PortTraffic {
            from_emu: 0,
            ..t.clone()
        };
        assert!(one_sided.verdict(true).is_err());
        assert!(PortTraffic::default().verdict(false).is_err());
    }
}
