//! Request, atomic, response and datagram headers (MR-3.3, MR-3.4, MR-3.6).
//!
//! Request header (REQH), after the base header of every request opcode:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Message Sequence Number (MSN)                 |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |              Receive Sequence Number (SSN)                    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Payload Offset in Message                     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                     Message Length                            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           Immediate Data / Invalidate R_Key                   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                         R_Key                                 |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Remote Virtual Address (64 bits)              |
//! +                                                               +
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Atomic header (ATH, 16 bytes) follows the REQH of atomic requests:
//! swap-or-add value (64), compare value (64).
//!
//! Response header (RSPH, 16 bytes): request MSN, offset, message length,
//! reserved.
//!
//! Datagram header (DGH, 12 bytes): Q_Key, source QPN, immediate data.

use super::{header_view, FieldIo, WireError};

header_view! {
    /// Zero-copy view of the 32-byte request header (MR-3.3.1).
    RequestHeader, 32, {
        /// Message sequence number (MR-4.1.1).
        msn / set_msn: u32 = 0;
        /// Receive sequence number; which receive WQE a recv-consuming
        /// message lands in (MR-4.2.3). Zero for other opcodes.
        ssn / set_ssn: u32 = 4;
        /// Byte offset of this packet's payload within the message.
        offset / set_offset: u32 = 8;
        /// Total message length in bytes.
        msg_len / set_msg_len: u32 = 12;
        /// Immediate data (SEND_IMM, WRITE_IMM) or R_Key to invalidate (SEND_INV).
        imm / set_imm: u32 = 16;
        /// R_Key of the remote region (WRITE*, READ_REQ, ATOMIC*).
        rkey / set_rkey: u32 = 20;
        /// Remote virtual address of byte 0 of the message.
        remote_va / set_remote_va: u64 = 24;
    }
}

/// Parsed request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestRepr {
    /// Message sequence number.
    pub msn: u32,
    /// Receive sequence number.
    pub ssn: u32,
    /// Payload offset within the message.
    pub offset: u32,
    /// Total message length.
    pub msg_len: u32,
    /// Immediate data or invalidate R_Key.
    pub imm: u32,
    /// R_Key.
    pub rkey: u32,
    /// Remote virtual address of the start of the message.
    pub remote_va: u64,
}

impl RequestRepr {
    /// Encoded length.
    pub const LEN: usize = 32;

    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(h: &RequestHeader<T>) -> Result<Self, WireError> {
        h.check_len()?;
        Ok(RequestRepr {
            msn: h.msn(),
            ssn: h.ssn(),
            offset: h.offset(),
            msg_len: h.msg_len(),
            imm: h.imm(),
            rkey: h.rkey(),
            remote_va: h.remote_va(),
        })
    }

    /// Emits into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        h: &mut RequestHeader<T>,
    ) -> Result<(), WireError> {
        if h.check_len().is_err() {
            return Err(WireError::BufferTooSmall);
        }
        h.set_msn(self.msn);
        h.set_ssn(self.ssn);
        h.set_offset(self.offset);
        h.set_msg_len(self.msg_len);
        h.set_imm(self.imm);
        h.set_rkey(self.rkey);
        h.set_remote_va(self.remote_va);
        Ok(())
    }
}

header_view! {
    /// Zero-copy view of the 16-byte atomic header (MR-3.3.4).
    AtomicHeader, 16, {
        /// Swap value (CAS) or addend (FAA).
        swap_add / set_swap_add: u64 = 0;
        /// Compare value (CAS); zero for FAA.
        compare / set_compare: u64 = 8;
    }
}

/// Parsed atomic header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicRepr {
    /// Swap value or addend.
    pub swap_add: u64,
    /// Compare value.
    pub compare: u64,
}

impl AtomicRepr {
    /// Encoded length.
    pub const LEN: usize = 16;
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicHeader<T>) -> Result<Self, WireError> {
        h.check_len()?;
        Ok(AtomicRepr {
            swap_add: h.swap_add(),
            compare: h.compare(),
        })
    }
    /// Emits into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        h: &mut AtomicHeader<T>,
    ) -> Result<(), WireError> {
        if h.check_len().is_err() {
            return Err(WireError::BufferTooSmall);
        }
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
        Ok(())
    }
}

header_view! {
    /// Zero-copy view of the 16-byte response header (MR-3.4.1).
    ResponseHeader, 16, {
        /// MSN of the READ or ATOMIC request this responds to.
        req_msn / set_req_msn: u32 = 0;
        /// Offset within the read buffer where this payload lands.
        offset / set_offset: u32 = 4;
        /// Total response length (read length, or 8 for atomics).
        msg_len / set_msg_len: u32 = 8;
        /// Reserved, sent as zero.
        reserved / set_reserved: u32 = 12;
    }
}

/// Parsed response header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResponseRepr {
    /// MSN of the request.
    pub req_msn: u32,
    /// Offset of this payload in the requester's buffer.
    pub offset: u32,
    /// Total response length.
    pub msg_len: u32,
}

impl ResponseRepr {
    /// Encoded length.
    pub const LEN: usize = 16;
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(h: &ResponseHeader<T>) -> Result<Self, WireError> {
        h.check_len()?;
        Ok(ResponseRepr {
            req_msn: h.req_msn(),
            offset: h.offset(),
            msg_len: h.msg_len(),
        })
    }
    /// Emits into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        h: &mut ResponseHeader<T>,
    ) -> Result<(), WireError> {
        if h.check_len().is_err() {
            return Err(WireError::BufferTooSmall);
        }
        h.set_req_msn(self.req_msn);
        h.set_offset(self.offset);
        h.set_msg_len(self.msg_len);
        h.set_reserved(0);
        Ok(())
    }
}

header_view! {
    /// Zero-copy view of the 12-byte datagram header (MR-3.6.1).
    UdHeader, 12, {
        /// Q_Key.
        qkey / set_qkey: u32 = 0;
        /// Source QPN (low 24 bits).
        src_qpn / set_src_qpn: u32 = 4;
        /// Immediate data (UD_SEND_IMM), zero otherwise.
        imm / set_imm: u32 = 8;
    }
}

/// Parsed datagram header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdRepr {
    /// Q_Key.
    pub qkey: u32,
    /// Source QPN.
    pub src_qpn: u32,
    /// Immediate data.
    pub imm: u32,
}

impl UdRepr {
    /// Encoded length.
    pub const LEN: usize = 12;
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(h: &UdHeader<T>) -> Result<Self, WireError> {
        h.check_len()?;
        Ok(UdRepr {
            qkey: h.qkey(),
            src_qpn: h.src_qpn() & 0x00ff_ffff,
            imm: h.imm(),
        })
    }
    /// Emits into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut UdHeader<T>) -> Result<(), WireError> {
        if h.check_len().is_err() {
            return Err(WireError::BufferTooSmall);
        }
        h.set_qkey(self.qkey);
        h.set_src_qpn(self.src_qpn & 0x00ff_ffff);
        h.set_imm(self.imm);
        Ok(())
    }
}
