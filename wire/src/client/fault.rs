//! Fault injection (`rdma-emu fault`): the rules a device applies to its packets, the
//! one-shot actions (link down/up, a QP killed), and their text form, shared by the CLI,
//! the daemon's configuration file and the `RDMA_EMU_FAULTS` environment variable.
//!
//! The text form, after the device name:
//!
//! ```text
//! drop|duplicate|reorder|corrupt|rnr [P%] [FILTERS]
//! delay DURATION [P%] [FILTERS]            DURATION: 200us, 5ms, 1s
//! nak SYNDROME [P%] [FILTERS]              SYNDROME: psn-seq|invalid-request|remote-access|remote-op
//! link down | link up
//! kill-qp QPN
//! FILTERS: --qp N --opcode CLASS|NUMBER --dir rx|tx --addr IP --count N --seed N
//! ```
//!
//! A rule without `P%` fires on every matching packet. `--count N` stops it after N
//! firings. Each rule draws from its own generator, seeded by `--seed` (or by the daemon),
//! once per matching packet: the same seed gives the same decisions for the same sequence
//! of matching packets.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

/// Probabilities are in parts per million: exact, and the same on every machine.
pub const PPM_ALL: u32 = 1_000_000;

/// What a rule does to a packet it fires on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FaultKind {
    /// The packet is lost.
    Drop,
    /// The packet arrives twice.
    Duplicate,
    /// The packet is held back and passes after the next packet in the same direction
    /// (or after 10 ms when none follows).
    Reorder,
    /// The packet is held for this long.
    Delay(Duration),
    /// One bit of the ICRC flips: the receiver drops the packet as corrupt.
    Corrupt,
    /// The responder answers this request with an RNR NAK instead of executing it, as when
    /// no receive WQE is posted. Fires on received requests that would consume a receive
    /// WQE (SEND First/Only, RDMA WRITE Only with Immediate) of RC QPs.
    Rnr,
    /// The responder answers this request with a NAK of this kind instead of executing it.
    /// Fires on received RC requests that start a message (First or Only).
    Nak(NakKind),
}

/// The NAK syndromes a rule can force (IBA 9.7.5.2.4, Table 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NakKind {
    /// PSN sequence error: the requester goes back and retransmits.
    PsnSequenceError,
    /// Invalid request: fatal, `IBV_WC_REM_INV_REQ_ERR`.
    InvalidRequest,
    /// Remote access error: fatal, `IBV_WC_REM_ACCESS_ERR`.
    RemoteAccessError,
    /// Remote operational error: fatal, `IBV_WC_REM_OP_ERR`.
    RemoteOperationalError,
}

/// The packets a rule looks at. Fields left `None` match everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FaultFilter {
    /// A local QP number: received packets addressed to it, sent packets that it sends.
    pub qp: Option<u32>,
    /// The BTH opcode's operation.
    pub opcode: Option<OpcodeClass>,
    /// Only received or only sent packets.
    pub dir: Option<Direction>,
    /// Only packets to or from this address (the peer's).
    pub addr: Option<IpAddr>,
}

/// Which way a packet goes through the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    /// Packets arriving from the network, before the device handles them.
    Rx,
    /// Packets the device sends, before they reach the network.
    Tx,
}

/// Groups of BTH opcodes a filter names (any transport), or one opcode byte exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpcodeClass {
    /// SEND First/Middle/Last/Only, with immediate or invalidate.
    Send,
    /// RDMA WRITE First/Middle/Last/Only, with immediate.
    Write,
    /// RDMA READ Request.
    ReadRequest,
    /// RDMA READ Response First/Middle/Last/Only.
    ReadResponse,
    /// Acknowledge (ACK or NAK).
    Ack,
    /// Compare & Swap, Fetch & Add.
    Atomic,
    /// Atomic Acknowledge.
    AtomicAck,
    /// Congestion Notification Packet.
    Cnp,
    /// This opcode byte.
    Exact(u8),
}

impl OpcodeClass {
    const NAMES: [(&'static str, OpcodeClass); 8] = [
        ("send", OpcodeClass::Send),
        ("write", OpcodeClass::Write),
        ("read", OpcodeClass::ReadRequest),
        ("read-response", OpcodeClass::ReadResponse),
        ("ack", OpcodeClass::Ack),
        ("atomic", OpcodeClass::Atomic),
        ("atomic-ack", OpcodeClass::AtomicAck),
        ("cnp", OpcodeClass::Cnp),
    ];

    /// Whether the BTH opcode byte `op` belongs to the class.
    pub fn matches(self, op: u8) -> bool {
        use crate::roce::{Op, Opcode};
        let code = Opcode(op);
        if let OpcodeClass::Exact(b) = self {
            return b == op;
        }
        if self == OpcodeClass::Cnp {
            return code == Opcode::CNP;
        }
        if code == Opcode::CNP {
            return false;
        }
        matches!(
            (self, code.op()),
            (
                OpcodeClass::Send,
                Op::SendFirst
                    | Op::SendMiddle
                    | Op::SendLast
                    | Op::SendLastImm
                    | Op::SendOnly
                    | Op::SendOnlyImm
                    | Op::SendLastInv
                    | Op::SendOnlyInv
            ) | (
                OpcodeClass::Write,
                Op::WriteFirst
                    | Op::WriteMiddle
                    | Op::WriteLast
                    | Op::WriteLastImm
                    | Op::WriteOnly
                    | Op::WriteOnlyImm
            ) | (OpcodeClass::ReadRequest, Op::ReadRequest)
                | (
                    OpcodeClass::ReadResponse,
                    Op::ReadResponseFirst
                        | Op::ReadResponseMiddle
                        | Op::ReadResponseLast
                        | Op::ReadResponseOnly
                )
                | (OpcodeClass::Ack, Op::Acknowledge)
                | (OpcodeClass::Atomic, Op::CompareSwap | Op::FetchAdd)
                | (OpcodeClass::AtomicAck, Op::AtomicAcknowledge)
        )
    }
}

/// A packet rule: what, how often, to which packets, how many times, with which seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRule {
    /// What happens to a packet the rule fires on.
    pub kind: FaultKind,
    /// Probability per matching packet, in parts per million.
    pub ppm: u32,
    /// Which packets the rule considers.
    pub filter: FaultFilter,
    /// Fire at most this many times.
    pub count: Option<u64>,
    /// The generator's seed (`None`: the daemon picks one and `fault list` shows it).
    pub seed: Option<u64>,
}

/// Something that happens once, now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FaultAction {
    /// The port goes down: packets stop both ways, `IBV_EVENT_PORT_ERR` to every context.
    LinkDown,
    /// The port comes back: `IBV_EVENT_PORT_ACTIVE`.
    LinkUp,
    /// The QP moves to the error state as after a fatal local error: `IBV_EVENT_QP_FATAL`,
    /// outstanding work requests flushed.
    KillQp(u32),
}

/// A parsed `rdma-emu fault add` argument list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FaultSpec {
    /// A rule applied to packets from now on.
    Rule(FaultRule),
    /// An event applied once, at once.
    Action(FaultAction),
}

/// `rdma-emu fault …` requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FaultRequest {
    /// Add a rule or perform an action on `device`. Reply `Faults` with the new rule
    /// (empty for an action).
    Add {
        /// The device's name (`rxe0`).
        device: String,
        /// The rule or the action.
        spec: FaultSpec,
    },
    /// Reply `Faults` with every rule (of one device).
    List {
        /// Only this device's rules; `None` for every device.
        device: Option<String>,
    },
    /// Remove rules: all, a device's, or one by id. Reply `Faults` with the removed ones.
    Clear {
        /// Only this device's rules; `None` for every device.
        device: Option<String>,
        /// Only the rule with this id (as `fault list` shows it).
        id: Option<u32>,
    },
}

/// A rule as the daemon holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultInfo {
    /// The rule's id, unique in the daemon, for `fault clear --id`.
    pub id: u32,
    /// The device the rule applies to.
    pub device: String,
    /// The rule as it was added.
    pub rule: FaultRule,
    /// The seed in use (the rule's, or the one the daemon picked).
    pub seed: u64,
    /// Packets the filter matched.
    pub matched: u64,
    /// Packets the rule fired on.
    pub fired: u64,
    /// The decisions for the first 64 matching packets, bit i for the i-th (1 = fired).
    pub pattern: u64,
}

/// Why a fault's text did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError(msg.into()))
}

/// `200us`, `5ms`, `1s`, `150ns`; at most 10 s.
pub fn parse_duration(s: &str) -> Result<Duration, ParseError> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        ParseError(format!(
            "`{s}`: a duration is a number and a unit (us, ms, s)"
        ))
    })?;
    let d = match unit {
        "ns" => Duration::from_nanos(n),
        "us" | "µs" => Duration::from_micros(n),
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        _ => return err(format!("`{s}`: the unit is one of ns, us, ms, s")),
    };
    if d > Duration::from_secs(10) {
        return err(format!("`{s}`: a delay is at most 10 s"));
    }
    Ok(d)
}

/// `1%`, `0.5%`, `100%` (at most six decimals) in parts per million.
pub fn parse_percent(s: &str) -> Result<u32, ParseError> {
    let bad = || {
        ParseError(format!(
            "`{s}`: a probability is a percentage such as 1% or 0.5%"
        ))
    };
    let num = s.strip_suffix('%').ok_or_else(bad)?;
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() || frac.len() > 4 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let int: u32 = int.parse().map_err(|_| bad())?;
    let mut frac_ppm = 0u32;
    for (i, b) in frac.bytes().enumerate() {
        frac_ppm += u32::from(b - b'0') * 10u32.pow(3 - i as u32);
    }
    let ppm = int
        .checked_mul(10_000)
        .and_then(|p| p.checked_add(frac_ppm))
        .ok_or_else(bad)?;
    if ppm > PPM_ALL {
        return err(format!("`{s}`: more than 100%"));
    }
    Ok(ppm)
}

fn parse_nak(s: &str) -> Result<NakKind, ParseError> {
    Ok(match s {
        "psn-seq" | "psn-sequence-error" => NakKind::PsnSequenceError,
        "invalid-request" => NakKind::InvalidRequest,
        "remote-access" | "remote-access-error" => NakKind::RemoteAccessError,
        "remote-op" | "remote-operational-error" => NakKind::RemoteOperationalError,
        _ => {
            return err(format!(
                "`{s}`: a NAK syndrome is one of psn-seq, invalid-request, remote-access, remote-op"
            ))
        }
    })
}

fn parse_opcode(s: &str) -> Result<OpcodeClass, ParseError> {
    if let Some((_, c)) = OpcodeClass::NAMES.iter().find(|(n, _)| *n == s) {
        return Ok(*c);
    }
    let n = if let Some(hex) = s.strip_prefix("0x") {
        u8::from_str_radix(hex, 16).ok()
    } else {
        s.parse().ok()
    };
    n.map(OpcodeClass::Exact).ok_or_else(|| {
        let names: Vec<_> = OpcodeClass::NAMES.iter().map(|(n, _)| *n).collect();
        ParseError(format!(
            "`{s}`: an opcode is one of {} or a BTH opcode byte (0..255, 0x..)",
            names.join(", ")
        ))
    })
}

fn parse_num<T: std::str::FromStr>(what: &str, s: Option<&str>) -> Result<T, ParseError> {
    let s = s.ok_or_else(|| ParseError(format!("{what} needs a value")))?;
    let parsed = if let Some(hex) = s.strip_prefix("0x") {
        u64::from_str_radix(hex, 16)
            .ok()
            .and_then(|v| v.to_string().parse().ok())
    } else {
        s.parse().ok()
    };
    parsed.ok_or_else(|| ParseError(format!("{what} {s}: not a number in range")))
}

impl FaultSpec {
    /// Parses the words after the device name (see the module documentation).
    pub fn parse<S: AsRef<str>>(words: &[S]) -> Result<FaultSpec, ParseError> {
        let mut w = words.iter().map(AsRef::as_ref);
        let Some(what) = w.next() else {
            return err(
                "no fault given: drop, duplicate, reorder, delay, corrupt, rnr, nak, link, kill-qp",
            );
        };
        let kind = match what {
            "link" => {
                let action = match (w.next(), w.next()) {
                    (Some("down"), None) => FaultAction::LinkDown,
                    (Some("up"), None) => FaultAction::LinkUp,
                    _ => return err("`link` takes `down` or `up`"),
                };
                return Ok(FaultSpec::Action(action));
            }
            "kill-qp" => {
                let qpn = parse_num("kill-qp", w.next())?;
                if let Some(extra) = w.next() {
                    return err(format!("kill-qp QPN: unexpected `{extra}`"));
                }
                return Ok(FaultSpec::Action(FaultAction::KillQp(qpn)));
            }
            "drop" => FaultKind::Drop,
            "duplicate" => FaultKind::Duplicate,
            "reorder" => FaultKind::Reorder,
            "corrupt" => FaultKind::Corrupt,
            "rnr" => FaultKind::Rnr,
            "delay" => FaultKind::Delay(parse_duration(
                w.next().ok_or_else(|| ParseError("delay needs a duration".into()))?,
            )?),
            "nak" => FaultKind::Nak(parse_nak(
                w.next().ok_or_else(|| ParseError("nak needs a syndrome".into()))?,
            )?),
            other => {
                return err(format!(
                    "unknown fault `{other}`: drop, duplicate, reorder, delay, corrupt, rnr, nak, link, kill-qp"
                ))
            }
        };
        let mut rule = FaultRule {
            kind,
            ppm: PPM_ALL,
            filter: FaultFilter::default(),
            count: None,
            seed: None,
        };
        let mut ppm_seen = false;
        while let Some(word) = w.next() {
            match word {
                "--qp" => rule.filter.qp = Some(parse_num("--qp", w.next())?),
                "--opcode" => {
                    rule.filter.opcode =
                        Some(parse_opcode(w.next().ok_or_else(|| {
                            ParseError("--opcode needs a value".into())
                        })?)?)
                }
                "--dir" => {
                    rule.filter.dir = Some(match w.next() {
                        Some("rx") => Direction::Rx,
                        Some("tx") => Direction::Tx,
                        _ => return err("--dir takes rx or tx"),
                    })
                }
                "--addr" => {
                    let a = w
                        .next()
                        .ok_or_else(|| ParseError("--addr needs an address".into()))?;
                    rule.filter.addr = Some(
                        a.parse()
                            .map_err(|_| ParseError(format!("--addr {a}: not an IP address")))?,
                    );
                }
                "--count" => rule.count = Some(parse_num("--count", w.next())?),
                "--seed" => rule.seed = Some(parse_num("--seed", w.next())?),
                p if p.ends_with('%') && !ppm_seen => {
                    rule.ppm = parse_percent(p)?;
                    ppm_seen = true;
                }
                other => return err(format!("unexpected `{other}`")),
            }
        }
        if matches!(rule.kind, FaultKind::Rnr | FaultKind::Nak(_))
            && rule.filter.dir == Some(Direction::Tx)
        {
            return err("rnr and nak act on received requests: --dir tx makes no sense");
        }
        Ok(FaultSpec::Rule(rule))
    }
}

impl fmt::Display for NakKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NakKind::PsnSequenceError => "psn-seq",
            NakKind::InvalidRequest => "invalid-request",
            NakKind::RemoteAccessError => "remote-access",
            NakKind::RemoteOperationalError => "remote-op",
        })
    }
}

impl fmt::Display for OpcodeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpcodeClass::Exact(b) => write!(f, "{b:#04x}"),
            c => {
                let name = OpcodeClass::NAMES
                    .iter()
                    .find(|(_, k)| k == c)
                    .map_or("?", |(n, _)| n);
                f.write_str(name)
            }
        }
    }
}

fn fmt_duration(d: Duration, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let ns = d.as_nanos();
    for (unit, name) in [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")] {
        if ns / unit * unit == ns {
            return write!(f, "{}{name}", ns / unit);
        }
    }
    write!(f, "{ns}ns")
}

/// The text `FaultSpec::parse` reads back (the seed included when set).
impl fmt::Display for FaultRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FaultKind::Drop => f.write_str("drop")?,
            FaultKind::Duplicate => f.write_str("duplicate")?,
            FaultKind::Reorder => f.write_str("reorder")?,
            FaultKind::Corrupt => f.write_str("corrupt")?,
            FaultKind::Rnr => f.write_str("rnr")?,
            FaultKind::Delay(d) => {
                f.write_str("delay ")?;
                fmt_duration(d, f)?;
            }
            FaultKind::Nak(k) => write!(f, "nak {k}")?,
        }
        if self.ppm != PPM_ALL {
            let (int, frac) = (self.ppm / 10_000, self.ppm % 10_000);
            if frac == 0 {
                write!(f, " {int}%")?;
            } else {
                let frac = format!("{frac:04}");
                write!(f, " {int}.{}%", frac.trim_end_matches('0'))?;
            }
        }
        if let Some(q) = self.filter.qp {
            write!(f, " --qp {q}")?;
        }
        if let Some(o) = self.filter.opcode {
            write!(f, " --opcode {o}")?;
        }
        match self.filter.dir {
            Some(Direction::Rx) => f.write_str(" --dir rx")?,
            Some(Direction::Tx) => f.write_str(" --dir tx")?,
            None => {}
        }
        if let Some(a) = self.filter.addr {
            write!(f, " --addr {a}")?;
        }
        if let Some(c) = self.count {
            write!(f, " --count {c}")?;
        }
        if let Some(s) = self.seed {
            write!(f, " --seed {s}")?;
        }
        Ok(())
    }
}

/// A packet rule from its text (`"drop 1% --qp 17"`); an action is an error here.
impl std::str::FromStr for FaultRule {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<FaultRule, ParseError> {
        let words: Vec<&str> = s.split_whitespace().collect();
        match FaultSpec::parse(&words)? {
            FaultSpec::Rule(r) => Ok(r),
            FaultSpec::Action(_) => err(format!("`{s}` is an action, not a packet rule")),
        }
    }
}

/// A list of `DEVICE WORDS…` entries separated by `;` (the `RDMA_EMU_FAULTS` variable).
pub fn parse_list(text: &str) -> Result<Vec<(String, FaultSpec)>, ParseError> {
    let mut out = Vec::new();
    for entry in text.split(';') {
        let words: Vec<&str> = entry.split_whitespace().collect();
        let Some((device, rest)) = words.split_first() else {
            continue;
        };
        let spec =
            FaultSpec::parse(rest).map_err(|e| ParseError(format!("`{}`: {e}", entry.trim())))?;
        out.push(((*device).to_string(), spec));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> FaultRule {
        text.parse().unwrap()
    }

    #[test]
    fn rules_parse_and_print_back_the_same() {
        for text in [
            "drop",
            "drop 1%",
            "drop 0.5% --qp 17 --dir rx",
            "duplicate 12.25% --opcode send",
            "reorder --opcode 0x0a --addr 10.0.0.1",
            "delay 200us 50% --dir tx",
            "delay 5ms",
            "corrupt 0.0001% --seed 42",
            "rnr --qp 3 --count 3",
            "nak remote-access --count 1",
            "nak psn-seq 10% --opcode write --addr fe80::1",
        ] {
            let r = rule(text);
            assert_eq!(r.to_string(), text, "{r:?}");
            assert_eq!(rule(&r.to_string()), r);
        }
    }

    #[test]
    fn numbers_are_exact() {
        assert_eq!(parse_percent("1%").unwrap(), 10_000);
        assert_eq!(parse_percent("0.5%").unwrap(), 5_000);
        assert_eq!(parse_percent("0.0001%").unwrap(), 1);
        assert_eq!(parse_percent("100%").unwrap(), PPM_ALL);
        assert_eq!(parse_duration("200us").unwrap(), Duration::from_micros(200));
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
    }

    #[test]
    fn actions_parse() {
        assert_eq!(
            FaultSpec::parse(&["link", "down"]).unwrap(),
            FaultSpec::Action(FaultAction::LinkDown)
        );
        assert_eq!(
            FaultSpec::parse(&["link", "up"]).unwrap(),
            FaultSpec::Action(FaultAction::LinkUp)
        );
        assert_eq!(
            FaultSpec::parse(&["kill-qp", "17"]).unwrap(),
            FaultSpec::Action(FaultAction::KillQp(17))
        );
    }

    #[test]
    fn bad_text_is_an_error_that_says_why() {
        for (text, says) in [
            ("", "no fault"),
            ("explode", "unknown fault"),
            ("drop 101%", "more than 100%"),
            ("drop 1.00001%", "percentage"),
            ("drop -1%", "percentage"),
            ("drop 1% 2%", "unexpected"),
            ("delay", "needs a duration"),
            ("delay 20", "unit"),
            ("delay 11s", "at most 10 s"),
            ("nak bogus", "syndrome"),
            ("rnr --dir tx", "received requests"),
            ("drop --qp", "needs a value"),
            ("drop --qp x", "not a number"),
            ("drop --qp 99999999999", "not a number"),
            ("drop --opcode foo", "an opcode is one of"),
            ("drop --dir up", "rx or tx"),
            ("drop --addr nowhere", "not an IP"),
            ("link sideways", "down"),
            ("kill-qp", "needs a value"),
            ("kill-qp 3 4", "unexpected"),
        ] {
            let words: Vec<&str> = text.split_whitespace().collect();
            let e = FaultSpec::parse(&words).unwrap_err();
            assert!(e.0.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn lists_split_on_semicolons() {
        let l = parse_list("rxe0 drop 1% --dir rx; rxe1 link down;").unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].0, "rxe0");
        assert_eq!(
            l[1],
            ("rxe1".into(), FaultSpec::Action(FaultAction::LinkDown))
        );
        assert!(parse_list("rxe0 drop 1%; rxe0 melt")
            .unwrap_err()
            .0
            .contains("melt"));
    }

    #[test]
    fn opcode_classes_match_their_opcodes() {
        assert!(OpcodeClass::Send.matches(0x04)); // RC SEND Only
        assert!(OpcodeClass::Send.matches(0x64)); // UD SEND Only
        assert!(OpcodeClass::Write.matches(0x0a)); // RC WRITE Only
        assert!(OpcodeClass::ReadRequest.matches(0x0c));
        assert!(OpcodeClass::ReadResponse.matches(0x10));
        assert!(OpcodeClass::Ack.matches(0x11));
        assert!(OpcodeClass::AtomicAck.matches(0x12));
        assert!(OpcodeClass::Atomic.matches(0x13));
        assert!(OpcodeClass::Cnp.matches(0x81));
        assert!(!OpcodeClass::Send.matches(0x81));
        assert!(!OpcodeClass::Ack.matches(0x04));
        assert!(OpcodeClass::Exact(0x0a).matches(0x0a));
    }
}
