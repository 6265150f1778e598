//! A packet's payload as it was received: the bytes after the headers in the
//! datagram's first buffer, then the datagram's further buffers, if any.
//!
//! A receiver whose network stack hands it a datagram in pieces (page fragments
//! after a linear head) need not copy them together before the packet is placed:
//! parsing only needs the headers to be contiguous ([`HEADERS_MAX`] bytes at most),
//! and placement copies each piece straight to its destination.

use super::{AckRepr, AtomicRepr, BaseRepr, RequestRepr, EXT_MAX_TOTAL};

/// The most bytes of headers a packet can carry in front of its payload: the
/// MRH, the largest opcode-specific headers and the longest extension chain
/// (MR-3.1.1, MR-3.7.2). A receiver that has this many bytes of a datagram (or
/// all of it, if shorter) in its first buffer can parse any packet.
pub const HEADERS_MAX: usize = BaseRepr::LEN + opcode_headers_max() + EXT_MAX_TOTAL;

const fn opcode_headers_max() -> usize {
    let request = RequestRepr::LEN + AtomicRepr::LEN;
    if request > AckRepr::LEN {
        request
    } else {
        AckRepr::LEN
    }
}

/// The payload bytes of one packet, in order: `first`, then each of `more`.
///
/// Equality compares the bytes, not how they are split.
#[derive(Debug, Clone, Copy)]
pub struct Payload<'a> {
    first: &'a [u8],
    more: &'a [&'a [u8]],
}

impl<'a> Payload<'a> {
    /// No payload.
    pub const EMPTY: Payload<'static> = Payload {
        first: &[],
        more: &[],
    };

    /// A payload held in one buffer.
    pub const fn contiguous(bytes: &'a [u8]) -> Self {
        Self {
            first: bytes,
            more: &[],
        }
    }

    /// A payload that starts in `first` and goes on in each of `more`.
    pub const fn scattered(first: &'a [u8], more: &'a [&'a [u8]]) -> Self {
        Self { first, more }
    }

    /// Its pieces in order (empty ones included).
    pub fn pieces(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        core::iter::once(self.first).chain(self.more.iter().copied())
    }

    /// Number of payload bytes.
    pub fn len(&self) -> usize {
        self.pieces().map(<[u8]>::len).sum()
    }

    /// True if there are no payload bytes.
    pub fn is_empty(&self) -> bool {
        self.pieces().all(<[u8]>::is_empty)
    }

    /// The payload as one slice, if it lies in one piece (or is empty).
    pub fn as_slice(&self) -> Option<&'a [u8]> {
        let mut it = self.pieces().filter(|p| !p.is_empty());
        match (it.next(), it.next()) {
            (None, _) => Some(&[]),
            (Some(p), None) => Some(p),
            _ => None,
        }
    }

    /// Calls `f(offset, piece)` for the non-empty parts of bytes `start..end`,
    /// in order, `offset` counting from `start`; stops at the first error.
    /// Bytes past the payload's end are not visited.
    pub fn for_each_in<E>(
        &self,
        start: usize,
        end: usize,
        mut f: impl FnMut(usize, &'a [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut at = 0usize;
        for p in self.pieces() {
            let (lo, hi) = (at, at.saturating_add(p.len()));
            at = hi;
            let (a, b) = (start.max(lo), end.min(hi));
            if a < b {
                if let Some(s) = p.get(a - lo..b - lo) {
                    f(a - start, s)?;
                }
            }
            if at >= end {
                break;
            }
        }
        Ok(())
    }

    /// Copies bytes `start..start + out.len()` into `out`; false (with `out`
    /// partly written) if the payload is shorter than that.
    pub fn copy_to(&self, start: usize, out: &mut [u8]) -> bool {
        let end = start.saturating_add(out.len());
        let mut copied = 0;
        let r: Result<(), ()> = self.for_each_in(start, end, |off, s| {
            if let Some(d) = out.get_mut(off..off + s.len()) {
                d.copy_from_slice(s);
                copied += s.len();
            }
            Ok(())
        });
        r.is_ok() && copied == out.len()
    }
}

impl<'a> From<&'a [u8]> for Payload<'a> {
    fn from(bytes: &'a [u8]) -> Self {
        Self::contiguous(bytes)
    }
}

impl PartialEq for Payload<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .pieces()
                .flat_map(|p| p.iter())
                .eq(other.pieces().flat_map(|p| p.iter()))
    }
}

impl Eq for Payload<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    const DATA: &[u8] = b"0123456789abcdef";

    fn split3() -> (&'static [u8], [&'static [u8]; 3]) {
        (&DATA[..3], [&DATA[3..3], &DATA[3..10], &DATA[10..]])
    }

    #[test]
    fn a_scattered_payload_reads_as_its_bytes_in_order() {
        let (first, more) = split3();
        let p = Payload::scattered(first, &more);
        assert_eq!(p.len(), DATA.len());
        assert!(!p.is_empty());
        assert_eq!(p, Payload::contiguous(DATA));
        assert_eq!(p.as_slice(), None);
        for start in 0..=DATA.len() {
            for end in start..=DATA.len() {
                let mut out = [0u8; 16];
                assert!(p.copy_to(start, &mut out[..end - start]));
                assert_eq!(&out[..end - start], &DATA[start..end]);
                let mut seen = [0u8; 16];
                let mut last = 0;
                let r: Result<(), ()> = p.for_each_in(start, end, |off, s| {
                    assert_eq!(off, last, "pieces come in order, without gaps");
                    assert!(!s.is_empty());
                    seen[off..off + s.len()].copy_from_slice(s);
                    last = off + s.len();
                    Ok(())
                });
                assert!(r.is_ok());
                assert_eq!(last, end - start);
                assert_eq!(&seen[..last], &DATA[start..end]);
            }
        }
        let mut out = [0u8; 4];
        assert!(!p.copy_to(DATA.len() - 2, &mut out), "past the end");
    }

    #[test]
    fn empty_pieces_make_an_empty_or_contiguous_payload() {
        let empty: [&[u8]; 2] = [&[], &[]];
        let p = Payload::scattered(&[], &empty);
        assert!(p.is_empty());
        assert_eq!(p, Payload::EMPTY);
        assert_eq!(p.as_slice(), Some(&[][..]));
        let one: [&[u8]; 2] = [&[], DATA];
        assert_eq!(Payload::scattered(&[], &one).as_slice(), Some(DATA));
    }

    #[test]
    fn for_each_in_stops_at_the_first_error() {
        let (first, more) = split3();
        let p = Payload::scattered(first, &more);
        let mut calls = 0;
        let r = p.for_each_in(0, DATA.len(), |_, _| {
            calls += 1;
            Err(())
        });
        assert!(r.is_err());
        assert_eq!(calls, 1);
    }

    #[test]
    fn headers_max_covers_the_longest_header_chain() {
        assert_eq!(HEADERS_MAX, 20 + 68 + 256);
    }
}
