//! Extension chain (MR-3.7).
//!
//! When the base header's `EXT` flag is set, a chain of extension headers
//! follows the opcode-specific headers and precedes the payload:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |M|    Type     |  Length (words)|  Ext Flags   |   Reserved    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |            Extension data ((Length - 1) * 4 bytes)            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! `M` (more) is set on every extension but the last. `Length` counts 4-byte
//! words including the 4-byte extension header and is at least 1. Ext flag
//! bit 0 marks the extension *critical*: a receiver that does not understand
//! a critical extension MUST discard the packet; non-critical unknown
//! extensions MUST be skipped.

use super::WireError;

/// Extension flag: the extension is critical (MR-3.7.4).
pub const EXT_FLAG_CRITICAL: u8 = 0x01;
/// Maximum total length of an extension chain in bytes (MR-3.7.3).
pub const EXT_MAX_TOTAL: usize = 256;
/// Extension type 0: padding / no-op, understood by every implementation
/// (MR-3.7.5). Extensions carry optional information (MR-3.7.1, MR-2.7.3).
pub const EXT_TYPE_PAD: u8 = 0;
/// Extension type 1: an acknowledgement carried by a data packet (MR-3.7.6).
pub const EXT_TYPE_ACK: u8 = 1;
/// Bytes of an extension header.
pub const EXT_HEADER_LEN: usize = 4;

/// Writes an extension header into `buf[..4]`: type `ty`, `len` bytes in all
/// (header included, a multiple of 4), `more` if another extension follows.
pub(crate) fn emit_ext_header(
    buf: &mut [u8],
    ty: u8,
    len: usize,
    more: bool,
    critical: bool,
) -> Result<(), WireError> {
    if !len.is_multiple_of(4) || !(EXT_HEADER_LEN..=EXT_MAX_TOTAL).contains(&len) {
        return Err(WireError::Malformed);
    }
    let h = buf
        .get_mut(..EXT_HEADER_LEN)
        .ok_or(WireError::BufferTooSmall)?;
    h[0] = (ty & 0x7f) | if more { 0x80 } else { 0 };
    h[1] = (len / 4) as u8;
    h[2] = if critical { EXT_FLAG_CRITICAL } else { 0 };
    h[3] = 0;
    Ok(())
}

/// One extension of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extension<'a> {
    /// Type (7 bits).
    pub ty: u8,
    /// Critical flag.
    pub critical: bool,
    /// Extension data (after its 4-byte header).
    pub data: &'a [u8],
}

/// Iterator over an extension chain. Yields `Err` once and then stops if the
/// chain is malformed.
#[derive(Debug, Clone)]
pub struct ExtIter<'a> {
    rest: &'a [u8],
    done: bool,
    total: usize,
}

impl<'a> ExtIter<'a> {
    /// Starts iterating at the first extension header in `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        ExtIter {
            rest: bytes,
            done: false,
            total: 0,
        }
    }

    /// Bytes consumed so far.
    pub fn consumed(&self) -> usize {
        self.total
    }
}

impl<'a> Iterator for ExtIter<'a> {
    type Item = Result<Extension<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let (b0, words, fl) = match self.rest.get(0..4) {
            Some(h) => (h[0], h[1] as usize, h[2]),
            None => {
                self.done = true;
                return Some(Err(WireError::Truncated));
            }
        };
        let len = words * 4;
        if words == 0 || self.total + len > EXT_MAX_TOTAL {
            self.done = true;
            return Some(Err(WireError::Malformed));
        }
        let (this, rest) = match (self.rest.get(..len), self.rest.get(len..)) {
            (Some(a), Some(b)) => (a, b),
            _ => {
                self.done = true;
                return Some(Err(WireError::Truncated));
            }
        };
        self.rest = rest;
        self.total += len;
        if b0 & 0x80 == 0 {
            self.done = true;
        }
        Some(Ok(Extension {
            ty: b0 & 0x7f,
            critical: fl & EXT_FLAG_CRITICAL != 0,
            data: this.get(4..).unwrap_or(&[]),
        }))
    }
}
