//! Unreliable datagram (UD) helpers (MR-2.2.2, MR-3.6).
//!
//! UD needs no connection state: one packet per message, no TSN, no
//! acknowledgement. The driver calls [`emit_datagram`] to build a packet and
//! [`accept_datagram`] to validate a received one against the destination
//! QP before placing it in the next receive WQE.

use super::time::Instant;
use super::wire::{BaseRepr, Body, Flags, Opcode, PacketRepr, UdRepr, WireError};

/// Q_Key values with this bit set in a work request mean "use the QP's own
/// Q_Key" (verbs semantics, MR-3.6.2).
pub const QKEY_USE_QP: u32 = 0x8000_0000;

/// Destination QPN of a datagram sent to a multicast group (MR-3.6.3); never
/// the number of a QP.
pub const MULTICAST_QPN: u32 = 0x00ff_ffff;

/// Why a received datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdDrop {
    /// Not a well-formed MetaRoCE datagram.
    Wire(WireError),
    /// Not a UD opcode.
    NotDatagram,
    /// Destination QPN is not this QP.
    WrongQpn,
    /// Q_Key mismatch.
    BadQkey,
    /// No receive WQE posted.
    NoRecv,
    /// Payload longer than the receive WQE.
    TooLong,
}

/// A validated received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDatagram<'a> {
    /// Sender's QPN.
    pub src_qpn: u32,
    /// Immediate data, for UD_SEND_IMM.
    pub imm: Option<u32>,
    /// Solicited flag.
    pub solicited: bool,
    /// Payload.
    pub payload: &'a [u8],
}

/// Validates a received UD packet for QP `qpn` with Q_Key `qkey`, given the
/// length of the next posted receive buffer (`None` if none is posted).
/// A datagram to [`MULTICAST_QPN`] is accepted as addressed to `qpn`: the
/// caller hands such a datagram only to the QPs attached to its group.
/// Spec: MR-3.6.2, MR-3.6.3.
pub fn accept_datagram<'a>(
    bytes: &'a [u8],
    qpn: u32,
    qkey: u32,
    recv_len: Option<u32>,
) -> Result<UdDatagram<'a>, UdDrop> {
    let p = PacketRepr::parse(bytes).map_err(UdDrop::Wire)?;
    let Body::Datagram { ud, payload } = p.body else {
        return Err(UdDrop::NotDatagram);
    };
    // Parsed from one buffer, so the payload is one slice.
    let payload = payload
        .as_slice()
        .ok_or(UdDrop::Wire(WireError::Truncated))?;
    if p.base.dest_qpn != qpn & 0x00ff_ffff && p.base.dest_qpn != MULTICAST_QPN {
        return Err(UdDrop::WrongQpn);
    }
    if ud.qkey != qkey {
        return Err(UdDrop::BadQkey);
    }
    let room = recv_len.ok_or(UdDrop::NoRecv)?;
    if payload.len() as u64 > room as u64 {
        return Err(UdDrop::TooLong);
    }
    Ok(UdDatagram {
        src_qpn: ud.src_qpn,
        imm: if p.base.opcode == Opcode::UdSendImm {
            Some(ud.imm)
        } else {
            None
        },
        solicited: p.base.flags.has(Flags::SOLICITED),
        payload,
    })
}

/// Parameters of one outgoing datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdSend<'a> {
    /// Destination QPN.
    pub dest_qpn: u32,
    /// Q_Key from the work request (or [`QKEY_USE_QP`] bit set).
    pub qkey: u32,
    /// The sending QP's own Q_Key.
    pub qp_qkey: u32,
    /// The sending QP's QPN.
    pub src_qpn: u32,
    /// Immediate data.
    pub imm: Option<u32>,
    /// Solicited event.
    pub solicited: bool,
    /// Payload (at most one MTU; the caller enforces the MTU).
    pub payload: &'a [u8],
}

/// Writes a UD packet (everything after the UDP header) into `buf` and
/// returns its length. Spec: MR-3.6.1; TSN and PSN are zero (MR-3.2.7).
pub fn emit_datagram(buf: &mut [u8], now: Instant, d: &UdSend<'_>) -> Result<usize, WireError> {
    let qkey = if d.qkey & QKEY_USE_QP != 0 {
        d.qp_qkey
    } else {
        d.qkey
    };
    let repr = PacketRepr {
        base: BaseRepr {
            opcode: if d.imm.is_some() {
                Opcode::UdSendImm
            } else {
                Opcode::UdSend
            },
            flags: Flags(0).with(Flags::SOLICITED, d.solicited),
            path_id: 0,
            dest_qpn: d.dest_qpn & 0x00ff_ffff,
            path_psn: 0,
            tsn: 0,
            timestamp: now.wire_ts(),
        },
        body: Body::Datagram {
            ud: UdRepr {
                qkey,
                src_qpn: d.src_qpn & 0x00ff_ffff,
                imm: d.imm.unwrap_or(0),
            },
            payload: d.payload.into(),
        },
        ack: None,
    };
    repr.emit(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ud_roundtrip_and_checks() {
        let mut buf = [0u8; 128];
        let d = UdSend {
            dest_qpn: 0x42,
            qkey: QKEY_USE_QP,
            qp_qkey: 0x1111,
            src_qpn: 0x7,
            imm: Some(5),
            solicited: true,
            payload: b"hi",
        };
        let n = emit_datagram(&mut buf, Instant(1), &d).unwrap();
        let r = accept_datagram(&buf[..n], 0x42, 0x1111, Some(8)).unwrap();
        assert_eq!(
            (r.src_qpn, r.imm, r.solicited, r.payload),
            (7, Some(5), true, &b"hi"[..])
        );
        assert_eq!(
            accept_datagram(&buf[..n], 0x43, 0x1111, Some(8)),
            Err(UdDrop::WrongQpn)
        );
        assert_eq!(
            accept_datagram(&buf[..n], 0x42, 0x2222, Some(8)),
            Err(UdDrop::BadQkey)
        );
        assert_eq!(
            accept_datagram(&buf[..n], 0x42, 0x1111, None),
            Err(UdDrop::NoRecv)
        );
        assert_eq!(
            accept_datagram(&buf[..n], 0x42, 0x1111, Some(1)),
            Err(UdDrop::TooLong)
        );
        // Spec: MR-3.6.3 — to a group: any attached QP takes it, Q_Key still checked.
        let m = UdSend { dest_qpn: MULTICAST_QPN, ..d };
        let n = emit_datagram(&mut buf, Instant(1), &m).unwrap();
        assert_eq!(accept_datagram(&buf[..n], 0x43, 0x1111, Some(8)).map(|r| r.src_qpn), Ok(7));
        assert_eq!(
            accept_datagram(&buf[..n], 0x43, 0x2222, Some(8)),
            Err(UdDrop::BadQkey)
        );
    }
}
