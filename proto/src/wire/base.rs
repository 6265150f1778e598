//! The MetaRoCE base header (MRH), present at the start of every packet.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Ver  |  Rsv  |    Opcode     |     Flags     | Rsv   |PathId |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   Reserved    |          Destination QPN (24 bits)            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Path Sequence Number (PSN)                    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |              Transmission Sequence Number (TSN)               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Transmit Timestamp (ns, low 32)               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//! Spec: MR-3.2 (all clauses).

use super::{header_view, FieldIo, WireError};

/// The protocol version carried in the high nibble of byte 0 (MR-3.2.2).
pub const MRH_VERSION: u8 = 1;

/// Packet opcodes (MR-3.2.3). Values not listed are reserved and a receiver
/// MUST discard packets carrying them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Send (RC).
    Send = 0x01,
    /// Send with immediate data.
    SendImm = 0x02,
    /// Send with invalidate.
    SendInv = 0x03,
    /// RDMA write.
    Write = 0x04,
    /// RDMA write with immediate data.
    WriteImm = 0x05,
    /// RDMA read request.
    ReadReq = 0x06,
    /// Atomic compare-and-swap request.
    AtomicCas = 0x07,
    /// Atomic fetch-and-add request.
    AtomicFaa = 0x08,
    /// Atomic write request: 8 bytes stored as one unit (MR-4.4.6).
    AtomicWrite = 0x0a,
    /// Flush request: earlier placements made visible (MR-4.4.7).
    Flush = 0x0b,
    /// RDMA read response data.
    ReadResp = 0x10,
    /// Atomic response (original value).
    AtomicResp = 0x11,
    /// Acknowledgement or negative acknowledgement.
    Ack = 0x20,
    /// Path probe.
    Probe = 0x21,
    /// Unreliable datagram send.
    UdSend = 0x30,
    /// Unreliable datagram send with immediate data.
    UdSendImm = 0x31,
}

impl Opcode {
    /// Decodes a raw opcode.
    pub const fn from_u8(v: u8) -> Option<Opcode> {
        Some(match v {
            0x01 => Opcode::Send,
            0x02 => Opcode::SendImm,
            0x03 => Opcode::SendInv,
            0x04 => Opcode::Write,
            0x05 => Opcode::WriteImm,
            0x06 => Opcode::ReadReq,
            0x07 => Opcode::AtomicCas,
            0x08 => Opcode::AtomicFaa,
            0x0a => Opcode::AtomicWrite,
            0x0b => Opcode::Flush,
            0x10 => Opcode::ReadResp,
            0x11 => Opcode::AtomicResp,
            0x20 => Opcode::Ack,
            0x21 => Opcode::Probe,
            0x30 => Opcode::UdSend,
            0x31 => Opcode::UdSendImm,
            _ => return None,
        })
    }

    /// True for opcodes that carry a request header (MR-3.3).
    pub const fn is_request(self) -> bool {
        matches!(
            self,
            Opcode::Send
                | Opcode::SendImm
                | Opcode::SendInv
                | Opcode::Write
                | Opcode::WriteImm
                | Opcode::ReadReq
                | Opcode::AtomicCas
                | Opcode::AtomicFaa
                | Opcode::AtomicWrite
                | Opcode::Flush
        )
    }

    /// True for opcodes that carry a response header (MR-3.4).
    pub const fn is_response(self) -> bool {
        matches!(self, Opcode::ReadResp | Opcode::AtomicResp)
    }

    /// True for opcodes that occupy a TSN and are reliably delivered (MR-5.1.1).
    pub const fn is_reliable(self) -> bool {
        self.is_request() || self.is_response()
    }

    /// True for the requests a UC QP carries: SEND and WRITE messages (MR-4.6.1).
    pub const fn allowed_on_uc(self) -> bool {
        matches!(
            self,
            Opcode::Send | Opcode::SendImm | Opcode::SendInv | Opcode::Write | Opcode::WriteImm
        )
    }

    /// True if the request consumes a receive WQE at the responder (MR-4.2.3).
    pub const fn consumes_recv(self) -> bool {
        matches!(
            self,
            Opcode::Send | Opcode::SendImm | Opcode::SendInv | Opcode::WriteImm
        )
    }

    /// True for the atomic requests that carry an ATH and are answered with
    /// the original value (not ATOMIC_WRITE, whose operand is its payload).
    pub const fn is_atomic(self) -> bool {
        matches!(self, Opcode::AtomicCas | Opcode::AtomicFaa)
    }

    /// True if the request packet carries payload bytes.
    pub const fn carries_payload(self) -> bool {
        matches!(
            self,
            Opcode::Send
                | Opcode::SendImm
                | Opcode::SendInv
                | Opcode::Write
                | Opcode::WriteImm
                | Opcode::AtomicWrite
                | Opcode::ReadResp
                | Opcode::AtomicResp
                | Opcode::UdSend
                | Opcode::UdSendImm
        )
    }
}

/// The flags byte (MR-3.2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Flags(pub u8);

impl Flags {
    /// Acknowledge request: the receiver SHOULD acknowledge immediately.
    pub const ACK_REQ: u8 = 0x80;
    /// Solicited event (verbs `IBV_SEND_SOLICITED`).
    pub const SOLICITED: u8 = 0x40;
    /// This transmission is a retransmission (informational).
    pub const RETX: u8 = 0x20;
    /// Fence indicator of the work request (informational).
    pub const FENCE: u8 = 0x10;
    /// Last packet of the message.
    pub const LAST: u8 = 0x08;
    /// An extension chain follows the opcode headers (MR-3.7).
    pub const EXT: u8 = 0x04;
    /// Reserved bits: MUST be sent as zero and ignored on receipt.
    pub const RESERVED: u8 = 0x03;

    /// Tests a bit.
    pub const fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
    /// Returns a copy with `bit` set or cleared.
    pub const fn with(self, bit: u8, on: bool) -> Flags {
        if on {
            Flags(self.0 | bit)
        } else {
            Flags(self.0 & !bit)
        }
    }
}

header_view! {
    /// Zero-copy view of the 20-byte base header (MR-3.2.1).
    BaseHeader, 20, {
        /// Byte 0: version (high nibble) and reserved nibble.
        ver_byte / set_ver_byte: u8 = 0;
        /// Raw opcode byte.
        opcode_raw / set_opcode_raw: u8 = 1;
        /// Raw flags byte.
        flags_raw / set_flags_raw: u8 = 2;
        /// Byte 3: path id in the low nibble.
        path_byte / set_path_byte: u8 = 3;
        /// Destination QPN word (upper 8 bits reserved).
        qpn_word / set_qpn_word: u32 = 4;
        /// Path sequence number.
        path_psn / set_path_psn: u32 = 8;
        /// Transmission sequence number.
        tsn / set_tsn: u32 = 12;
        /// Transmit timestamp (low 32 bits of the sender's ns clock).
        timestamp / set_timestamp: u32 = 16;
    }
}

impl<T: AsRef<[u8]>> BaseHeader<T> {
    /// The version nibble.
    pub fn version(&self) -> u8 {
        self.ver_byte() >> 4
    }
    /// The path id (0..=15).
    pub fn path_id(&self) -> u8 {
        self.path_byte() & 0x0f
    }
    /// The 24-bit destination QPN.
    pub fn dest_qpn(&self) -> u32 {
        self.qpn_word() & 0x00ff_ffff
    }
}

/// Parsed base header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Flags.
    pub flags: Flags,
    /// Path id, 0..=15 (MR-6.1.2, MR-3.2.6).
    pub path_id: u8,
    /// Destination QPN, 24 bits.
    pub dest_qpn: u32,
    /// Per-path sequence number (MR-6.2.1).
    pub path_psn: u32,
    /// Connection transmission sequence number (MR-5.1.1); zero on
    /// unreliable opcodes.
    pub tsn: u32,
    /// Sender timestamp, echoed in acknowledgements (MR-3.2.8).
    pub timestamp: u32,
}

impl BaseRepr {
    /// Encoded length.
    pub const LEN: usize = 20;

    /// Parses a checked view. Reserved bits are ignored (MR-3.2.5, MR-2.7.2).
    pub fn parse<T: AsRef<[u8]>>(h: &BaseHeader<T>) -> Result<BaseRepr, WireError> {
        h.check_len()?;
        // Spec: MR-2.7.1 — unknown versions are discarded.
        if h.version() != MRH_VERSION {
            return Err(WireError::BadVersion);
        }
        let opcode = Opcode::from_u8(h.opcode_raw()).ok_or(WireError::BadOpcode)?;
        Ok(BaseRepr {
            opcode,
            flags: Flags(h.flags_raw() & !Flags::RESERVED),
            path_id: h.path_id(),
            dest_qpn: h.dest_qpn(),
            path_psn: h.path_psn(),
            tsn: h.tsn(),
            timestamp: h.timestamp(),
        })
    }

    /// Writes the header; reserved bits are emitted as zero (MR-2.7.2).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        h: &mut BaseHeader<T>,
    ) -> Result<(), WireError> {
        if h.check_len().is_err() {
            return Err(WireError::BufferTooSmall);
        }
        h.set_ver_byte(MRH_VERSION << 4);
        h.set_opcode_raw(self.opcode as u8);
        h.set_flags_raw(self.flags.0 & !Flags::RESERVED);
        h.set_path_byte(self.path_id & 0x0f);
        h.set_qpn_word(self.dest_qpn & 0x00ff_ffff);
        h.set_path_psn(self.path_psn);
        h.set_tsn(self.tsn);
        h.set_timestamp(self.timestamp);
        Ok(())
    }
}
