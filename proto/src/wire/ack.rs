//! Acknowledgement / negative acknowledgement header (MR-3.5.1).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Cumulative TSN (next expected)                |  0
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   Syndrome    |   RNR Timer   | Rsv   |EchoPth|   AckFlags    |  4
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |        MSN (NAK: offending message; ACK: next to deliver)     |  8
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 NAK TSN (offending packet; 0 for ACK)         | 12
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           Echo PSN (highest PSN received on echo path)        | 16
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           Echo Timestamp (of the newest packet on echo path)  | 20
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           ACK Delay (ns from that packet's arrival to now)    | 24
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |        CE Count               |       Received Count          | 28
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |      Credit Hint (256 B)      |     SACK Length (bytes) = 32  | 32
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                                                               | 36
//! +              SACK bitmap, 256 bits (32 bytes)                 +
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Bit `i` of the SACK bitmap (byte `i / 8`, bit `i % 8` counting from the
//! least significant bit) is set when TSN `cum_tsn + 1 + i` has been received
//! (MR-3.5.4).

use super::{header_view, FieldIo, WireError};

/// Width of the SACK bitmap in packets (MR-3.5.4).
pub const SACK_BITS: usize = 256;
/// Width of the SACK bitmap in bytes.
pub const SACK_BYTES: usize = SACK_BITS / 8;

/// ACK/NAK syndrome (MR-3.5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Syndrome {
    /// Positive acknowledgement.
    Ack = 0,
    /// Sequence error: a TSN outside the receive window, or (go-back-N
    /// mode) out of order (MR-3.5.5).
    NakSequence = 1,
    /// Receiver not ready: no receive WQE; retry after the RNR timer.
    NakRnr = 2,
    /// Remote access error (R_Key, bounds or permission check failed).
    NakAccess = 3,
    /// Invalid request (malformed, unsupported, length error).
    NakInvalid = 4,
    /// Remote operational error (responder could not complete the request).
    NakRemoteOp = 5,
}

impl Syndrome {
    /// Decodes a syndrome byte.
    pub const fn from_u8(v: u8) -> Option<Syndrome> {
        Some(match v {
            0 => Syndrome::Ack,
            1 => Syndrome::NakSequence,
            2 => Syndrome::NakRnr,
            3 => Syndrome::NakAccess,
            4 => Syndrome::NakInvalid,
            5 => Syndrome::NakRemoteOp,
            _ => return None,
        })
    }

    /// True for the fatal NAKs that move the QP to the error state (MR-7.3.2).
    pub const fn is_fatal(self) -> bool {
        matches!(
            self,
            Syndrome::NakAccess | Syndrome::NakInvalid | Syndrome::NakRemoteOp
        )
    }
}

header_view! {
    /// Zero-copy view of the 68-byte ACK/NAK header.
    AckHeader, 68, {
        /// Cumulative TSN: every TSN before it has been received.
        cum_tsn / set_cum_tsn: u32 = 0;
        /// Raw syndrome.
        syndrome_raw / set_syndrome_raw: u8 = 4;
        /// Encoded RNR timer (MR-3.5.6).
        rnr_timer / set_rnr_timer: u8 = 5;
        /// Echo path byte (low nibble).
        echo_path_byte / set_echo_path_byte: u8 = 6;
        /// ACK flags.
        ack_flags / set_ack_flags: u8 = 7;
        /// MSN.
        msn / set_msn: u32 = 8;
        /// NAK TSN.
        nak_tsn / set_nak_tsn: u32 = 12;
        /// Highest PSN received on the echo path.
        echo_psn / set_echo_psn: u32 = 16;
        /// Echoed transmit timestamp.
        echo_ts / set_echo_ts: u32 = 20;
        /// ACK delay in ns.
        ack_delay / set_ack_delay: u32 = 24;
        /// CE-marked packets on the echo path since the previous ACK for it.
        ce_count / set_ce_count: u16 = 28;
        /// Packets received on the echo path since the previous ACK for it.
        rcv_count / set_rcv_count: u16 = 30;
        /// Receiver credit hint in units of 256 bytes, 0xFFFF = no limit.
        credit_hint / set_credit_hint: u16 = 32;
        /// SACK length in bytes.
        sack_len / set_sack_len: u16 = 34;
    }
}

impl<T: AsRef<[u8]>> AckHeader<T> {
    /// The SACK bitmap bytes (empty if the buffer is short).
    pub fn sack_bytes(&self) -> &[u8] {
        self.buffer.as_ref().get(36..36 + SACK_BYTES).unwrap_or(&[])
    }
}

/// ACK flag: CE seen on the echo path since the previous ACK (ECN echo).
pub const ACK_FLAG_ECE: u8 = 0x01;
/// ACK flag: this ACK answers a PROBE.
pub const ACK_FLAG_PROBE: u8 = 0x02;
/// ACK flag: triggered by a duplicate packet.
pub const ACK_FLAG_DUP: u8 = 0x04;
/// ACK flag: the receiver asks for the echo path to be moved to a new source
/// port (MR-6.3.5).
pub const ACK_FLAG_MOVE: u8 = 0x08;

/// Parsed ACK/NAK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckRepr {
    /// Cumulative TSN (next expected).
    pub cum_tsn: u32,
    /// Syndrome, `None` is never produced by `parse` (unknown values are
    /// rejected) but is handy as a default.
    pub syndrome: Option<Syndrome>,
    /// Encoded RNR timer.
    pub rnr_timer: u8,
    /// Echo path id.
    pub echo_path: u8,
    /// ACK flags (`ACK_FLAG_*`).
    pub flags: u8,
    /// MSN.
    pub msn: u32,
    /// NAK TSN.
    pub nak_tsn: u32,
    /// Echo PSN.
    pub echo_psn: u32,
    /// Echo timestamp.
    pub echo_ts: u32,
    /// ACK delay (ns).
    pub ack_delay: u32,
    /// CE count.
    pub ce_count: u16,
    /// Received count.
    pub rcv_count: u16,
    /// Credit hint (256-byte units, 0xFFFF = none).
    pub credit_hint: u16,
    /// SACK bitmap: word `w` bit `b` is TSN `cum_tsn + 1 + 64 w + b`.
    pub sack: [u64; 4],
}

impl AckRepr {
    /// Encoded length.
    pub const LEN: usize = 68;

    /// Flag constants re-exported for convenience.
    pub const FLAG_ECE: u8 = ACK_FLAG_ECE;
    /// See [`ACK_FLAG_PROBE`].
    pub const FLAG_PROBE: u8 = ACK_FLAG_PROBE;
    /// See [`ACK_FLAG_DUP`].
    pub const FLAG_DUP: u8 = ACK_FLAG_DUP;
    /// See [`ACK_FLAG_MOVE`].
    pub const FLAG_MOVE: u8 = ACK_FLAG_MOVE;

    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(h: &AckHeader<T>) -> Result<Self, WireError> {
        h.check_len()?;
        let syndrome = Syndrome::from_u8(h.syndrome_raw()).ok_or(WireError::Malformed)?;
        if h.sack_len() as usize != SACK_BYTES {
            return Err(WireError::Malformed);
        }
        let mut sack = [0u64; 4];
        let bytes = h.sack_bytes();
        for (w, chunk) in sack.iter_mut().zip(bytes.chunks(8)) {
            let mut b = [0u8; 8];
            for (d, s) in b.iter_mut().zip(chunk) {
                *d = *s;
            }
            *w = u64::from_le_bytes(b);
        }
        Ok(AckRepr {
            cum_tsn: h.cum_tsn(),
            syndrome: Some(syndrome),
            rnr_timer: h.rnr_timer(),
            echo_path: h.echo_path_byte() & 0x0f,
            flags: h.ack_flags(),
            msn: h.msn(),
            nak_tsn: h.nak_tsn(),
            echo_psn: h.echo_psn(),
            echo_ts: h.echo_ts(),
            ack_delay: h.ack_delay(),
            ce_count: h.ce_count(),
            rcv_count: h.rcv_count(),
            credit_hint: h.credit_hint(),
            sack,
        })
    }

    /// Emits into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        h: &mut AckHeader<T>,
    ) -> Result<(), WireError> {
        if h.check_len().is_err() {
            return Err(WireError::BufferTooSmall);
        }
        h.set_cum_tsn(self.cum_tsn);
        h.set_syndrome_raw(self.syndrome.unwrap_or(Syndrome::Ack) as u8);
        h.set_rnr_timer(self.rnr_timer);
        h.set_echo_path_byte(self.echo_path & 0x0f);
        h.set_ack_flags(self.flags);
        h.set_msn(self.msn);
        h.set_nak_tsn(self.nak_tsn);
        h.set_echo_psn(self.echo_psn);
        h.set_echo_ts(self.echo_ts);
        h.set_ack_delay(self.ack_delay);
        h.set_ce_count(self.ce_count);
        h.set_rcv_count(self.rcv_count);
        h.set_credit_hint(self.credit_hint);
        h.set_sack_len(SACK_BYTES as u16);
        if let Some(dst) = h.buffer.as_mut().get_mut(36..36 + SACK_BYTES) {
            for (chunk, w) in dst.chunks_mut(8).zip(self.sack.iter()) {
                chunk.copy_from_slice(&w.to_le_bytes());
            }
        }
        Ok(())
    }

    /// True if TSN `cum_tsn + 1 + i` is marked in the bitmap.
    pub fn sack_bit(&self, i: usize) -> bool {
        match self.sack.get(i / 64) {
            Some(w) => (w >> (i % 64)) & 1 == 1,
            None => false,
        }
    }
}

/// Decodes the RNR timer byte into nanoseconds (MR-3.5.6): a 3-bit mantissa
/// `m` (low bits) and 5-bit exponent `e`; delay = `(8 + m) << e` / 8 us,
/// with `e` clamped to 19 (about one second).
pub const fn rnr_timer_ns(code: u8) -> u64 {
    let m = (code & 7) as u64;
    let mut e = (code >> 3) as u64;
    if e > 19 {
        e = 19;
    }
    (((8 + m) << e) * 1000) / 8
}

/// Encodes a delay into the smallest RNR timer code whose delay is at least
/// `ns` (saturating at the largest code).
pub const fn rnr_timer_code(ns: u64) -> u8 {
    let mut c: u8 = 0;
    while c < 159 {
        if rnr_timer_ns(c) >= ns {
            return c;
        }
        c += 1;
    }
    159
}
