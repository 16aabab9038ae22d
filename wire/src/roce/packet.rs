//! A whole IB transport packet as RoCE v2 carries it in a UDP datagram: BTH, the
//! extension headers its opcode implies ([`Opcode::layout`]), payload, 0..=3 pad bytes,
//! ICRC (IBA 9.2, Annex A17.4).
//!
//! [`Packet`] is the view (lengths checked once by [`Packet::new_checked`]);
//! [`PacketRepr`] the parsed value. A repr has no opcode and no pad count field: both are
//! derived from its [`Body`] and payload when emitting, so a repr cannot name a RETH on
//! an opcode that has none.

use super::{
    aeth, atomic_ack_eth, atomic_eth, bth, cnp, deth, feth, ieth, immdt, reth, xrceth, AethRepr,
    AtomicAckEthRepr, AtomicEthRepr, DethRepr, Error, FethRepr, IethRepr, ImmDt, Layout, Op,
    Opcode, Pkey, Psn, Qpn, Result, RethRepr, Rkey, TransportType, XrcEthRepr, ICRC_LEN,
};

/// A view of a whole IB transport packet (BTH through ICRC).
///
/// After [`Packet::new_checked`] succeeds the opcode names a packet this module carries,
/// the buffer holds every header it implies plus the ICRC, the length is a multiple of 4,
/// and the pad count fits the payload: no accessor panics.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer, checking lengths, opcode and pad count.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The layout of the opcode, or why there is none.
    pub fn checked_layout(&self) -> Result<Layout> {
        let b = self.buffer.as_ref();
        if b.len() < bth::HEADER_LEN {
            return Err(Error::Truncated);
        }
        let op = Opcode(b[0]);
        match (op.transport(), op.layout()) {
            (t @ (TransportType::Rd | TransportType::Unknown(_)), _) => {
                Err(Error::UnsupportedTransport(t))
            }
            (_, Some(l)) => Ok(l),
            (_, None) => Err(Error::InvalidOpcode(op)),
        }
    }

    /// Checks everything [`Packet::new_checked`] promises.
    pub fn check_len(&self) -> Result<()> {
        let layout = self.checked_layout()?;
        let len = self.buffer.as_ref().len();
        let min = layout.header_len() + ICRC_LEN;
        if len < min {
            return Err(Error::Truncated);
        }
        if len % 4 != 0 {
            return Err(Error::Unaligned);
        }
        let body = len - min; // payload + pad
        let pad = usize::from(self.bth().pad_count());
        if !layout.payload && (body != 0 || pad != 0) {
            return Err(if body != 0 {
                Error::UnexpectedPayload
            } else {
                Error::BadPadCount
            });
        }
        if pad > body {
            return Err(Error::BadPadCount);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The BTH.
    pub fn bth(&self) -> bth::Packet<&[u8]> {
        bth::Packet::new_unchecked(self.buffer.as_ref())
    }

    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[0])
    }

    /// The layout of the opcode (valid after `new_checked`; a default layout otherwise).
    pub fn layout(&self) -> Layout {
        self.opcode().layout().unwrap_or_default()
    }

    /// Length of the BTH and the extension headers.
    pub fn header_len(&self) -> usize {
        self.layout().header_len()
    }

    /// The extension headers (between the BTH and the payload).
    pub fn ext_headers(&self) -> &[u8] {
        &self.buffer.as_ref()[bth::HEADER_LEN..self.header_len()]
    }

    /// The payload, without pad.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = b.len() - ICRC_LEN - usize::from(self.bth().pad_count());
        &b[self.header_len()..end]
    }

    /// Everything the ICRC covers after the pseudo header: BTH through pad.
    pub fn icrc_covered(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[..b.len() - ICRC_LEN]
    }

    /// The ICRC as stored (little-endian on the wire, as Linux rxe stores it).
    pub fn icrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        let n = b.len();
        u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Stores the ICRC (little-endian, as Linux rxe stores it).
    pub fn set_icrc(&mut self, v: u32) {
        let b = self.buffer.as_mut();
        let n = b.len();
        b[n - 4..].copy_from_slice(&v.to_le_bytes());
    }

    /// The payload, mutable (the pad count must already be written).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        let pad = usize::from(self.bth().pad_count());
        let b = self.buffer.as_mut();
        let end = b.len() - ICRC_LEN - pad;
        &mut b[start..end]
    }
}

/// The BTH fields a [`PacketRepr`] does not derive (opcode, pad count and TVer are
/// derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// SE: Solicited Event.
    pub solicited: bool,
    /// M: MigReq.
    pub mig_req: bool,
    /// P_Key.
    pub pkey: Pkey,
    /// FECN (congestion experienced).
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// DestQP.
    pub dest_qp: Qpn,
    /// A: AckReq.
    pub ack_req: bool,
    /// PSN.
    pub psn: Psn,
}

impl Header {
    /// A header with the default P_Key and every flag clear.
    pub const fn new(dest_qp: Qpn, psn: Psn) -> Self {
        Header {
            solicited: false,
            mig_req: false,
            pkey: Pkey::DEFAULT,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }
}

/// Segments of an RC/XRC SEND message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum SendSeg {
    First,
    Middle,
    Last,
    LastImm(ImmDt),
    LastInv(Rkey),
    Only,
    OnlyImm(ImmDt),
    OnlyInv(Rkey),
}

/// Segments of a UC SEND message (UC has no SEND with Invalidate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum UcSendSeg {
    First,
    Middle,
    Last,
    LastImm(ImmDt),
    Only,
    OnlyImm(ImmDt),
}

impl From<UcSendSeg> for SendSeg {
    fn from(s: UcSendSeg) -> Self {
        match s {
            UcSendSeg::First => SendSeg::First,
            UcSendSeg::Middle => SendSeg::Middle,
            UcSendSeg::Last => SendSeg::Last,
            UcSendSeg::LastImm(i) => SendSeg::LastImm(i),
            UcSendSeg::Only => SendSeg::Only,
            UcSendSeg::OnlyImm(i) => SendSeg::OnlyImm(i),
        }
    }
}

/// Segments of an RDMA WRITE message; the RETH rides on First and Only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum WriteSeg {
    First(RethRepr),
    Middle,
    Last,
    LastImm(ImmDt),
    Only(RethRepr),
    OnlyImm(RethRepr, ImmDt),
}

/// Segments of an RDMA READ response; the AETH rides on First, Last and Only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum ReadRespSeg {
    First(AethRepr),
    Middle,
    Last(AethRepr),
    Only(AethRepr),
}

/// An RC or XRC request packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    /// SEND (payload: the data).
    Send(SendSeg),
    /// RDMA WRITE (payload: the data).
    Write(WriteSeg),
    /// RDMA READ Request (no payload).
    Read(RethRepr),
    /// ATOMIC CmpSwap (no payload).
    CompareSwap(AtomicEthRepr),
    /// ATOMIC FetchAdd (no payload).
    FetchAdd(AtomicEthRepr),
    /// FLUSH (Memory Placement Extensions; no payload): what to make visible or
    /// persistent, and the range or the region (the RETH's R_Key).
    Flush(FethRepr, RethRepr),
    /// ATOMIC WRITE (Memory Placement Extensions; payload: the 8 bytes, written as one).
    AtomicWrite(RethRepr),
}

/// An RC or XRC response packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Response {
    /// RDMA READ response (payload: the data).
    ReadResponse(ReadRespSeg),
    /// Acknowledge: ACK, RNR NAK or NAK (no payload).
    Ack(AethRepr),
    /// ATOMIC Acknowledge (no payload).
    AtomicAck(AethRepr, AtomicAckEthRepr),
}

/// A UC request packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UcRequest {
    /// SEND.
    Send(UcSendSeg),
    /// RDMA WRITE.
    Write(WriteSeg),
}

/// What follows the BTH: transport, operation and the extension headers that come with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Body {
    /// An RC request.
    RcRequest(Request),
    /// An RC response.
    RcResponse(Response),
    /// A UC request.
    Uc(UcRequest),
    /// A UD SEND Only, with immediate data when `imm` is set.
    Ud {
        /// The DETH.
        deth: DethRepr,
        /// Immediate data.
        imm: Option<ImmDt>,
    },
    /// An XRC request, with the XRCETH naming the target XRC SRQ.
    XrcRequest {
        /// The XRCETH.
        xrceth: XrcEthRepr,
        /// The request.
        request: Request,
    },
    /// An XRC response.
    XrcResponse(Response),
    /// A RoCE v2 Congestion Notification Packet (opcode 0x81).
    Cnp,
}

fn request_op(r: &Request) -> Op {
    match r {
        Request::Send(s) => send_op(*s),
        Request::Write(w) => write_op(w),
        Request::Read(_) => Op::ReadRequest,
        Request::CompareSwap(_) => Op::CompareSwap,
        Request::FetchAdd(_) => Op::FetchAdd,
        Request::Flush(..) => Op::Flush,
        Request::AtomicWrite(_) => Op::AtomicWrite,
    }
}

fn send_op(s: SendSeg) -> Op {
    match s {
        SendSeg::First => Op::SendFirst,
        SendSeg::Middle => Op::SendMiddle,
        SendSeg::Last => Op::SendLast,
        SendSeg::LastImm(_) => Op::SendLastImm,
        SendSeg::LastInv(_) => Op::SendLastInv,
        SendSeg::Only => Op::SendOnly,
        SendSeg::OnlyImm(_) => Op::SendOnlyImm,
        SendSeg::OnlyInv(_) => Op::SendOnlyInv,
    }
}

fn write_op(w: &WriteSeg) -> Op {
    match w {
        WriteSeg::First(_) => Op::WriteFirst,
        WriteSeg::Middle => Op::WriteMiddle,
        WriteSeg::Last => Op::WriteLast,
        WriteSeg::LastImm(_) => Op::WriteLastImm,
        WriteSeg::Only(_) => Op::WriteOnly,
        WriteSeg::OnlyImm(..) => Op::WriteOnlyImm,
    }
}

fn response_op(r: &Response) -> Op {
    match r {
        Response::ReadResponse(ReadRespSeg::First(_)) => Op::ReadResponseFirst,
        Response::ReadResponse(ReadRespSeg::Middle) => Op::ReadResponseMiddle,
        Response::ReadResponse(ReadRespSeg::Last(_)) => Op::ReadResponseLast,
        Response::ReadResponse(ReadRespSeg::Only(_)) => Op::ReadResponseOnly,
        Response::Ack(_) => Op::Acknowledge,
        Response::AtomicAck(..) => Op::AtomicAcknowledge,
    }
}

impl Body {
    /// The opcode this body is sent with.
    pub fn opcode(&self) -> Opcode {
        match self {
            Body::RcRequest(r) => Opcode::new(TransportType::Rc, request_op(r)),
            Body::RcResponse(r) => Opcode::new(TransportType::Rc, response_op(r)),
            Body::Uc(UcRequest::Send(s)) => Opcode::new(TransportType::Uc, send_op((*s).into())),
            Body::Uc(UcRequest::Write(w)) => Opcode::new(TransportType::Uc, write_op(w)),
            Body::Ud { imm: None, .. } => Opcode::new(TransportType::Ud, Op::SendOnly),
            Body::Ud { imm: Some(_), .. } => Opcode::new(TransportType::Ud, Op::SendOnlyImm),
            Body::XrcRequest { request, .. } => {
                Opcode::new(TransportType::Xrc, request_op(request))
            }
            Body::XrcResponse(r) => Opcode::new(TransportType::Xrc, response_op(r)),
            Body::Cnp => Opcode::CNP,
        }
    }

    /// Length of the BTH and extension headers this body is sent with.
    pub fn header_len(&self) -> usize {
        // Every opcode a Body derives is in the table.
        self.opcode().layout().unwrap_or_default().header_len()
    }

    /// Whether the opcode carries a payload.
    pub fn has_payload(&self) -> bool {
        self.opcode().layout().is_some_and(|l| l.payload)
    }

    fn emit_ext(&self, buf: &mut [u8]) {
        let mut out = Out(buf);
        match self {
            Body::RcRequest(r) => emit_request(&mut out, r),
            Body::RcResponse(r) | Body::XrcResponse(r) => emit_response(&mut out, r),
            Body::Uc(UcRequest::Send(s)) => emit_request(&mut out, &Request::Send((*s).into())),
            Body::Uc(UcRequest::Write(w)) => emit_write(&mut out, w),
            Body::Ud { deth: d, imm } => {
                d.emit(&mut deth::Packet::new_unchecked(out.take(deth::HEADER_LEN)));
                if let Some(i) = imm {
                    i.emit(&mut immdt::Packet::new_unchecked(
                        out.take(immdt::HEADER_LEN),
                    ));
                }
            }
            Body::XrcRequest { xrceth: x, request } => {
                x.emit(&mut xrceth::Packet::new_unchecked(
                    out.take(xrceth::HEADER_LEN),
                ));
                emit_request(&mut out, request);
            }
            Body::Cnp => {
                cnp::CnpRepr.emit(&mut cnp::Packet::new_unchecked(out.take(cnp::HEADER_LEN)))
            }
        }
    }
}

/// A write cursor over the extension-header area.
struct Out<'b>(&'b mut [u8]);

impl<'b> Out<'b> {
    fn take(&mut self, n: usize) -> &'b mut [u8] {
        let b = core::mem::take(&mut self.0);
        let (h, rest) = b.split_at_mut(n);
        self.0 = rest;
        h
    }
}

fn emit_request(out: &mut Out<'_>, r: &Request) {
    match r {
        Request::Send(SendSeg::LastImm(i) | SendSeg::OnlyImm(i)) => i.emit(
            &mut immdt::Packet::new_unchecked(out.take(immdt::HEADER_LEN)),
        ),
        Request::Send(SendSeg::LastInv(k) | SendSeg::OnlyInv(k)) => {
            IethRepr { rkey: *k }.emit(&mut ieth::Packet::new_unchecked(out.take(ieth::HEADER_LEN)))
        }
        Request::Send(_) => {}
        Request::Write(w) => emit_write(out, w),
        Request::Read(r) | Request::AtomicWrite(r) => {
            r.emit(&mut reth::Packet::new_unchecked(out.take(reth::HEADER_LEN)))
        }
        Request::Flush(f, r) => {
            f.emit(&mut feth::Packet::new_unchecked(out.take(feth::HEADER_LEN)));
            r.emit(&mut reth::Packet::new_unchecked(out.take(reth::HEADER_LEN)));
        }
        Request::CompareSwap(a) | Request::FetchAdd(a) => a.emit(
            &mut atomic_eth::Packet::new_unchecked(out.take(atomic_eth::HEADER_LEN)),
        ),
    }
}

fn emit_response(out: &mut Out<'_>, r: &Response) {
    let aeth_out = |a: &AethRepr, out: &mut Out<'_>| {
        a.emit(&mut aeth::Packet::new_unchecked(out.take(aeth::HEADER_LEN)))
    };
    match r {
        Response::ReadResponse(
            ReadRespSeg::First(a) | ReadRespSeg::Last(a) | ReadRespSeg::Only(a),
        )
        | Response::Ack(a) => aeth_out(a, out),
        Response::ReadResponse(ReadRespSeg::Middle) => {}
        Response::AtomicAck(a, x) => {
            aeth_out(a, out);
            x.emit(&mut atomic_ack_eth::Packet::new_unchecked(
                out.take(atomic_ack_eth::HEADER_LEN),
            ));
        }
    }
}

fn emit_write(out: &mut Out<'_>, w: &WriteSeg) {
    match w {
        WriteSeg::First(r) | WriteSeg::Only(r) => {
            r.emit(&mut reth::Packet::new_unchecked(out.take(reth::HEADER_LEN)))
        }
        WriteSeg::LastImm(i) => i.emit(&mut immdt::Packet::new_unchecked(
            out.take(immdt::HEADER_LEN),
        )),
        WriteSeg::OnlyImm(r, i) => {
            r.emit(&mut reth::Packet::new_unchecked(out.take(reth::HEADER_LEN)));
            i.emit(&mut immdt::Packet::new_unchecked(
                out.take(immdt::HEADER_LEN),
            ));
        }
        WriteSeg::Middle | WriteSeg::Last => {}
    }
}

/// Pad bytes needed after `payload_len` bytes to reach a multiple of 4 (IBA 9.2.4).
pub const fn pad_count(payload_len: usize) -> u8 {
    ((4 - payload_len % 4) % 4) as u8
}

/// Writes the BTH and extension headers of `header`/`body` for a payload of
/// `payload_len` bytes into the start of `buf`, and returns their length.
///
/// For callers that place the payload themselves (the transport core reads it from
/// application memory straight into the packet buffer): after this, the payload goes at
/// `buf[len..len + payload_len]`, then [`pad_count`] zero bytes, then the 4-byte ICRC.
///
/// # Panics
/// If `buf` is shorter than `body.header_len()`.
pub fn emit_headers(header: &Header, body: &Body, payload_len: usize, buf: &mut [u8]) -> usize {
    let len = body.header_len();
    let bth_repr = bth::BthRepr {
        opcode: body.opcode(),
        solicited: header.solicited,
        mig_req: header.mig_req,
        pad_count: pad_count(payload_len),
        tver: 0,
        pkey: header.pkey,
        fecn: header.fecn,
        becn: header.becn,
        dest_qp: header.dest_qp,
        ack_req: header.ack_req,
        psn: header.psn,
    };
    bth_repr.emit(&mut bth::Packet::new_unchecked(&mut buf[..bth::HEADER_LEN]));
    body.emit_ext(&mut buf[bth::HEADER_LEN..len]);
    len
}

/// A parsed IB transport packet.
///
/// `payload` is empty for opcodes without payload ([`Body::has_payload`]); emitting a
/// non-empty payload with such a body writes a packet [`PacketRepr::parse`] rejects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketRepr<'a> {
    /// The BTH fields not derived from the body.
    pub header: Header,
    /// Transport, operation and extension headers.
    pub body: Body,
    /// The payload, without pad.
    pub payload: &'a [u8],
}

impl<'a> PacketRepr<'a> {
    /// Parses a checked packet. Fails on a non-zero TVer and a reserved AETH syndrome;
    /// everything else was checked by [`Packet::new_checked`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &'a Packet<&'a T>) -> Result<Self> {
        p.check_len()?;
        let bth_v = p.bth();
        if bth_v.tver() != 0 {
            return Err(Error::BadTransportVersion(bth_v.tver()));
        }
        let header = Header {
            solicited: bth_v.solicited(),
            mig_req: bth_v.mig_req(),
            pkey: bth_v.pkey(),
            fecn: bth_v.fecn(),
            becn: bth_v.becn(),
            dest_qp: bth_v.dest_qp(),
            ack_req: bth_v.ack_req(),
            psn: bth_v.psn(),
        };
        let opcode = p.opcode();
        let ext = p.ext_headers();
        let body = parse_body(opcode, ext)?;
        Ok(PacketRepr {
            header,
            body,
            payload: p.payload(),
        })
    }

    /// Total length: headers, payload, pad and ICRC.
    pub fn buffer_len(&self) -> usize {
        self.body.header_len()
            + self.payload.len()
            + usize::from(pad_count(self.payload.len()))
            + ICRC_LEN
    }

    /// Writes headers, payload and zero pad into a buffer of exactly
    /// [`PacketRepr::buffer_len`] bytes; the ICRC is written as 0 (compute it with
    /// [`super::icrc`] over [`Packet::icrc_covered`] and store it with
    /// [`Packet::set_icrc`]).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let buf = p.buffer.as_mut();
        let h = emit_headers(&self.header, &self.body, self.payload.len(), buf);
        let end = h + self.payload.len();
        buf[h..end].copy_from_slice(self.payload);
        let n = buf.len();
        buf[end..n].fill(0);
    }
}

/// Parses the extension headers of a valid opcode.
fn parse_body(opcode: Opcode, mut ext: &[u8]) -> Result<Body> {
    macro_rules! take {
        ($m:ident, $repr:ty) => {{
            let (h, rest) = ext.split_at($m::HEADER_LEN.min(ext.len()));
            ext = rest;
            <$repr>::parse(&$m::Packet::new_checked(h)?)?
        }};
    }
    let op = opcode.op();
    let transport = opcode.transport();
    let xrceth = if transport == TransportType::Xrc && op.is_request() {
        Some(take!(xrceth, XrcEthRepr))
    } else {
        None
    };
    let deth_repr = if transport == TransportType::Ud {
        Some(take!(deth, DethRepr))
    } else {
        None
    };
    let send = match op {
        Op::SendFirst => Some(SendSeg::First),
        Op::SendMiddle => Some(SendSeg::Middle),
        Op::SendLast => Some(SendSeg::Last),
        Op::SendLastImm => Some(SendSeg::LastImm(take!(immdt, ImmDt))),
        Op::SendLastInv => Some(SendSeg::LastInv(take!(ieth, IethRepr).rkey)),
        Op::SendOnly => Some(SendSeg::Only),
        Op::SendOnlyImm => Some(SendSeg::OnlyImm(take!(immdt, ImmDt))),
        Op::SendOnlyInv => Some(SendSeg::OnlyInv(take!(ieth, IethRepr).rkey)),
        _ => None,
    };
    let write = match op {
        Op::WriteFirst => Some(WriteSeg::First(take!(reth, RethRepr))),
        Op::WriteMiddle => Some(WriteSeg::Middle),
        Op::WriteLast => Some(WriteSeg::Last),
        Op::WriteLastImm => Some(WriteSeg::LastImm(take!(immdt, ImmDt))),
        Op::WriteOnly => Some(WriteSeg::Only(take!(reth, RethRepr))),
        Op::WriteOnlyImm => {
            let r = take!(reth, RethRepr);
            Some(WriteSeg::OnlyImm(r, take!(immdt, ImmDt)))
        }
        _ => None,
    };
    let request = match (send, write, op) {
        (Some(s), _, _) => Some(Request::Send(s)),
        (_, Some(w), _) => Some(Request::Write(w)),
        (_, _, Op::ReadRequest) => Some(Request::Read(take!(reth, RethRepr))),
        (_, _, Op::CompareSwap) => Some(Request::CompareSwap(take!(atomic_eth, AtomicEthRepr))),
        (_, _, Op::FetchAdd) => Some(Request::FetchAdd(take!(atomic_eth, AtomicEthRepr))),
        (_, _, Op::Flush) => {
            let f = take!(feth, FethRepr);
            Some(Request::Flush(f, take!(reth, RethRepr)))
        }
        (_, _, Op::AtomicWrite) => Some(Request::AtomicWrite(take!(reth, RethRepr))),
        _ => None,
    };
    let response = match op {
        Op::ReadResponseFirst => Some(Response::ReadResponse(ReadRespSeg::First(take!(
            aeth, AethRepr
        )))),
        Op::ReadResponseMiddle => Some(Response::ReadResponse(ReadRespSeg::Middle)),
        Op::ReadResponseLast => Some(Response::ReadResponse(ReadRespSeg::Last(take!(
            aeth, AethRepr
        )))),
        Op::ReadResponseOnly => Some(Response::ReadResponse(ReadRespSeg::Only(take!(
            aeth, AethRepr
        )))),
        Op::Acknowledge => Some(Response::Ack(take!(aeth, AethRepr))),
        Op::AtomicAcknowledge => {
            let a = take!(aeth, AethRepr);
            Some(Response::AtomicAck(
                a,
                take!(atomic_ack_eth, AtomicAckEthRepr),
            ))
        }
        _ => None,
    };
    let _ = ext;
    let invalid = Error::InvalidOpcode(opcode);
    Ok(match transport {
        TransportType::Cnp if opcode == Opcode::CNP => Body::Cnp,
        TransportType::Rc => match (request, response) {
            (Some(r), _) => Body::RcRequest(r),
            (_, Some(r)) => Body::RcResponse(r),
            _ => return Err(invalid),
        },
        TransportType::Xrc => match (request, response, xrceth) {
            (Some(r), _, Some(x)) => Body::XrcRequest {
                xrceth: x,
                request: r,
            },
            (_, Some(r), None) => Body::XrcResponse(r),
            _ => return Err(invalid),
        },
        TransportType::Uc => match request {
            Some(Request::Write(w)) => Body::Uc(UcRequest::Write(w)),
            Some(Request::Send(s)) => Body::Uc(UcRequest::Send(match s {
                SendSeg::First => UcSendSeg::First,
                SendSeg::Middle => UcSendSeg::Middle,
                SendSeg::Last => UcSendSeg::Last,
                SendSeg::LastImm(i) => UcSendSeg::LastImm(i),
                SendSeg::Only => UcSendSeg::Only,
                SendSeg::OnlyImm(i) => UcSendSeg::OnlyImm(i),
                SendSeg::LastInv(_) | SendSeg::OnlyInv(_) => return Err(invalid),
            })),
            _ => return Err(invalid),
        },
        TransportType::Ud => match (request, deth_repr) {
            (Some(Request::Send(SendSeg::Only)), Some(d)) => Body::Ud { deth: d, imm: None },
            (Some(Request::Send(SendSeg::OnlyImm(i))), Some(d)) => Body::Ud {
                deth: d,
                imm: Some(i),
            },
            _ => return Err(invalid),
        },
        TransportType::Rd | TransportType::Unknown(_) => {
            return Err(Error::UnsupportedTransport(transport))
        }
        TransportType::Cnp => return Err(invalid),
    })
}
