//! Whole-packet parse and emit: MRH, opcode headers, extension chain,
//! payload, in that order (MR-3.1.1); header sizes are fixed per opcode
//! (MR-3.1.4).

use super::ext::{emit_ext_header, ExtIter, EXT_HEADER_LEN, EXT_TYPE_ACK, EXT_TYPE_PAD};
use super::{
    AckHeader, AckRepr, AtomicHeader, AtomicRepr, BaseHeader, BaseRepr, Flags, Opcode, Payload,
    RequestHeader, RequestRepr, ResponseHeader, ResponseRepr, Syndrome, UdHeader, UdRepr,
    WireError, ACK_FLAG_PROBE,
};

/// Bytes a piggybacked acknowledgement adds to a data packet (MR-3.7.6).
pub const ACK_EXT_LEN: usize = EXT_HEADER_LEN + AckRepr::LEN;

/// The opcode-specific part of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<'a> {
    /// SEND*, WRITE*, READ_REQ, ATOMIC_*.
    Request {
        /// Request header.
        req: RequestRepr,
        /// Atomic header, present exactly for atomic opcodes.
        atomic: Option<AtomicRepr>,
        /// Payload bytes.
        payload: Payload<'a>,
    },
    /// READ_RESP, ATOMIC_RESP.
    Response {
        /// Response header.
        rsp: ResponseRepr,
        /// Payload bytes.
        payload: Payload<'a>,
    },
    /// ACK or NAK.
    Ack(AckRepr),
    /// Path probe (payload, if any, is padding and ignored).
    Probe,
    /// UD_SEND, UD_SEND_IMM.
    Datagram {
        /// Datagram header.
        ud: UdRepr,
        /// Payload bytes.
        payload: Payload<'a>,
    },
}

/// A parsed MetaRoCE packet: everything after the UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRepr<'a> {
    /// Base header.
    pub base: BaseRepr,
    /// Opcode-specific headers and payload.
    pub body: Body<'a>,
    /// An acknowledgement carried in the extension chain of a request or
    /// response (MR-3.7.6); `None` on every other packet.
    pub ack: Option<AckRepr>,
}

/// Spec: MR-3.7.2, MR-3.7.4, MR-3.7.6 — walks an extension chain: its length
/// and the piggybacked acknowledgement it carries, if any. `data_packet`: the
/// chain belongs to a request or response, the only packets that may carry
/// one.
fn parse_chain(bytes: &[u8], data_packet: bool) -> Result<(usize, Option<AckRepr>), WireError> {
    let mut it = ExtIter::new(bytes);
    let mut ack = None;
    for e in it.by_ref() {
        let e = e?;
        match e.ty {
            EXT_TYPE_PAD => {}
            EXT_TYPE_ACK => {
                if !data_packet || ack.is_some() || e.data.len() != AckRepr::LEN {
                    return Err(WireError::Malformed);
                }
                let a = AckRepr::parse(&AckHeader::new_checked(e.data)?)?;
                // A piggybacked acknowledgement is a plain ACK: never a NAK
                // (those go alone, MR-5.4.3) nor a probe answer.
                if a.syndrome != Some(Syndrome::Ack)
                    || a.rnr_timer != 0
                    || a.flags & ACK_FLAG_PROBE != 0
                {
                    return Err(WireError::Malformed);
                }
                ack = Some(a);
            }
            _ if e.critical => return Err(WireError::UnknownCriticalExtension),
            _ => {}
        }
    }
    Ok((it.consumed(), ack))
}

fn split(bytes: &[u8], at: usize) -> Result<(&[u8], &[u8]), WireError> {
    match (bytes.get(..at), bytes.get(at..)) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(WireError::Truncated),
    }
}

/// Where a datagram goes, read from its headers without parsing its body
/// ([`PacketRepr::route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Destination QPN, 24 bits.
    pub dest_qpn: u32,
    /// Opcode.
    pub opcode: Opcode,
    /// Path id.
    pub path_id: u8,
    /// The bytes a READ request asks for; 0 for every other opcode.
    pub read_len: u32,
}

impl<'a> PacketRepr<'a> {
    /// Spec: MR-3.1.1, MR-3.1.4, MR-3.7.2 — reads where an untrusted
    /// datagram goes without parsing it: the MRH is checked (version,
    /// opcode) and every header the opcode has, with the extension chain's,
    /// must lie in `bytes` (else [`WireError::Truncated`]); nothing after the
    /// MRH is checked otherwise. A receiver routes on this and parses the
    /// packet in full ([`Self::parse_scattered`]) before it acts on it. A
    /// packet that parses routes to the QPN, opcode and path it parses to; one
    /// that does not route does not parse.
    pub fn route(bytes: &[u8]) -> Result<Route, WireError> {
        let base = BaseRepr::parse(&BaseHeader::new_checked(bytes)?)?;
        let op = base.opcode;
        let opcode_len = if op.is_request() {
            RequestRepr::LEN + if op.is_atomic() { AtomicRepr::LEN } else { 0 }
        } else if op.is_response() {
            ResponseRepr::LEN
        } else {
            match op {
                Opcode::Ack => AckRepr::LEN,
                Opcode::Probe => 0,
                _ => UdRepr::LEN,
            }
        };
        let (_, rest) = split(bytes, BaseRepr::LEN)?;
        let (headers, after) = split(rest, opcode_len)?;
        if base.flags.has(Flags::EXT) {
            // The chain's bytes must be here; what they say is the parse's.
            for e in ExtIter::new(after) {
                e?;
            }
        }
        let read_len = if op == Opcode::ReadReq {
            RequestHeader::new_unchecked(headers).msg_len()
        } else {
            0
        };
        Ok(Route {
            dest_qpn: base.dest_qpn,
            opcode: op,
            path_id: base.path_id,
            read_len,
        })
    }

    /// Parses and validates an untrusted datagram payload. Never panics
    /// (MR-3.1.6); every rejection is a [`WireError`].
    pub fn parse(bytes: &'a [u8]) -> Result<PacketRepr<'a>, WireError> {
        Self::parse_scattered(bytes, &[])
    }

    /// [`Self::parse`] of a datagram received in pieces: `bytes`, then each of
    /// `more`. The headers must lie in `bytes` (a receiver that has the first
    /// [`super::HEADERS_MAX`] bytes there can parse any packet); what follows
    /// them, in `bytes` and `more`, is the payload.
    pub fn parse_scattered(
        bytes: &'a [u8],
        more: &'a [&'a [u8]],
    ) -> Result<PacketRepr<'a>, WireError> {
        let base = BaseRepr::parse(&BaseHeader::new_checked(bytes)?)?;
        let (_, rest) = split(bytes, BaseRepr::LEN)?;
        let op = base.opcode;
        let data_packet = op.is_request() || op.is_response();
        let mut ack = None;
        // Spec: MR-3.7.2 — the extension chain follows the opcode headers.
        let mut skip_ext = |after: &'a [u8]| -> Result<&'a [u8], WireError> {
            if base.flags.has(Flags::EXT) {
                let (n, a) = parse_chain(after, data_packet)?;
                ack = a;
                Ok(split(after, n)?.1)
            } else {
                Ok(after)
            }
        };
        let body = if op.is_request() {
            let req = RequestRepr::parse(&RequestHeader::new_checked(rest)?)?;
            let (_, mut rest) = split(rest, RequestRepr::LEN)?;
            let atomic = if op.is_atomic() {
                let a = AtomicRepr::parse(&AtomicHeader::new_checked(rest)?)?;
                rest = split(rest, AtomicRepr::LEN)?.1;
                // Spec: MR-3.3.4 — atomics operate on exactly 8 bytes.
                if req.msg_len != 8 || req.offset != 0 {
                    return Err(WireError::Malformed);
                }
                Some(a)
            } else {
                None
            };
            let payload = Payload::scattered(skip_ext(rest)?, more);
            if !op.carries_payload() {
                // Spec: MR-3.3.3 — READ_REQ and atomics carry no payload.
                if !payload.is_empty() {
                    return Err(WireError::Malformed);
                }
                if matches!(op, Opcode::ReadReq | Opcode::Flush) && req.offset != 0 {
                    return Err(WireError::Malformed);
                }
                // Spec: MR-3.3.5 — a FLUSH names a placement type and a known selectivity.
                if op == Opcode::Flush && super::super::verbs::Flush::from_bits(req.imm).is_none() {
                    return Err(WireError::Malformed);
                }
            } else {
                check_extent(req.offset, payload.len(), req.msg_len, base.flags)?;
                // Spec: MR-3.3.4 — an ATOMIC_WRITE is one packet of exactly 8 bytes.
                if op == Opcode::AtomicWrite && (req.msg_len != 8 || req.offset != 0 || payload.len() != 8) {
                    return Err(WireError::Malformed);
                }
            }
            Body::Request {
                req,
                atomic,
                payload,
            }
        } else if op.is_response() {
            let rsp = ResponseRepr::parse(&ResponseHeader::new_checked(rest)?)?;
            let payload = Payload::scattered(skip_ext(split(rest, ResponseRepr::LEN)?.1)?, more);
            if op == Opcode::AtomicResp
                && (rsp.msg_len != 8 || rsp.offset != 0 || payload.len() != 8)
            {
                return Err(WireError::Malformed);
            }
            check_extent(rsp.offset, payload.len(), rsp.msg_len, base.flags)?;
            Body::Response { rsp, payload }
        } else {
            match op {
                Opcode::Ack => {
                    let ack = AckRepr::parse(&AckHeader::new_checked(rest)?)?;
                    skip_ext(split(rest, AckRepr::LEN)?.1)?;
                    Body::Ack(ack)
                }
                Opcode::Probe => {
                    skip_ext(rest)?;
                    Body::Probe
                }
                _ => {
                    // UdSend / UdSendImm
                    let ud = UdRepr::parse(&UdHeader::new_checked(rest)?)?;
                    let payload = Payload::scattered(skip_ext(split(rest, UdRepr::LEN)?.1)?, more);
                    Body::Datagram { ud, payload }
                }
            }
        };
        Ok(PacketRepr { base, body, ack })
    }

    /// Length of the headers `emit` writes: the MRH, the opcode headers and
    /// the extension chain (a piggybacked acknowledgement, if any).
    pub fn header_len(&self) -> usize {
        BaseRepr::LEN
            + if self.ack.is_some() { ACK_EXT_LEN } else { 0 }
            + match self.body {
                Body::Request { atomic, .. } => {
                    RequestRepr::LEN + if atomic.is_some() { AtomicRepr::LEN } else { 0 }
                }
                Body::Response { .. } => ResponseRepr::LEN,
                Body::Ack(_) => AckRepr::LEN,
                Body::Probe => 0,
                Body::Datagram { .. } => UdRepr::LEN,
            }
    }

    /// The payload of the body (empty for ACK and PROBE).
    pub fn payload(&self) -> Payload<'a> {
        match self.body {
            Body::Request { payload, .. }
            | Body::Response { payload, .. }
            | Body::Datagram { payload, .. } => payload,
            Body::Ack(_) | Body::Probe => Payload::EMPTY,
        }
    }

    /// Total encoded length (headers plus payload).
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload().len()
    }

    /// Emits headers only; returns their length. The caller fills the
    /// payload in place after them (zero-copy transmit).
    pub fn emit_headers(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let hl = self.header_len();
        if buf.len() < hl {
            return Err(WireError::BufferTooSmall);
        }
        let data_packet = matches!(self.body, Body::Request { .. } | Body::Response { .. });
        if self.ack.is_some() && !data_packet {
            return Err(WireError::Malformed);
        }
        let mut base = self.base;
        base.flags = base.flags.with(Flags::EXT, self.ack.is_some());
        base.emit(&mut BaseHeader::new_unchecked(&mut *buf))?;
        let rest = buf
            .get_mut(BaseRepr::LEN..)
            .ok_or(WireError::BufferTooSmall)?;
        let opcode_len = match self.body {
            Body::Request { req, atomic, .. } => {
                req.emit(&mut RequestHeader::new_unchecked(&mut *rest))?;
                if let Some(a) = atomic {
                    let r = rest
                        .get_mut(RequestRepr::LEN..)
                        .ok_or(WireError::BufferTooSmall)?;
                    a.emit(&mut AtomicHeader::new_unchecked(r))?;
                    RequestRepr::LEN + AtomicRepr::LEN
                } else {
                    RequestRepr::LEN
                }
            }
            Body::Response { rsp, .. } => {
                rsp.emit(&mut ResponseHeader::new_unchecked(&mut *rest))?;
                ResponseRepr::LEN
            }
            Body::Ack(a) => {
                a.emit(&mut AckHeader::new_unchecked(&mut *rest))?;
                AckRepr::LEN
            }
            Body::Probe => 0,
            Body::Datagram { ud, .. } => {
                ud.emit(&mut UdHeader::new_unchecked(&mut *rest))?;
                UdRepr::LEN
            }
        };
        if let Some(a) = self.ack {
            // Spec: MR-3.7.6 — one critical ACK extension, the whole chain.
            let ext = rest
                .get_mut(opcode_len..opcode_len + ACK_EXT_LEN)
                .ok_or(WireError::BufferTooSmall)?;
            emit_ext_header(ext, EXT_TYPE_ACK, ACK_EXT_LEN, false, true)?;
            let data = ext
                .get_mut(EXT_HEADER_LEN..)
                .ok_or(WireError::BufferTooSmall)?;
            a.emit(&mut AckHeader::new_unchecked(data))?;
        }
        Ok(hl)
    }

    /// Emits the whole packet; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let hl = self.emit_headers(buf)?;
        let p = self.payload();
        let end = hl.checked_add(p.len()).ok_or(WireError::BufferTooSmall)?;
        let dst = buf.get_mut(hl..end).ok_or(WireError::BufferTooSmall)?;
        if !p.copy_to(0, dst) {
            return Err(WireError::BufferTooSmall);
        }
        Ok(end)
    }
}

/// Spec: MR-3.3.2 — payload lies within the message and `LAST` is set
/// exactly on the packet that ends it.
fn check_extent(offset: u32, len: usize, msg_len: u32, flags: Flags) -> Result<(), WireError> {
    let len = u32::try_from(len).map_err(|_| WireError::Malformed)?;
    let end = offset.checked_add(len).ok_or(WireError::Malformed)?;
    if end > msg_len {
        return Err(WireError::Malformed);
    }
    if flags.has(Flags::LAST) != (end == msg_len) {
        return Err(WireError::Malformed);
    }
    Ok(())
}
