//! A fixed 256-bit set used for receive tracking and SACK processing
//! (MR-3.5.4, MR-5.2). All operations are O(words) = O(4) and never panic.

/// 256 bits, word `w` bit `b` is bit `64 w + b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bits256(pub [u64; 4]);

impl Bits256 {
    /// Number of bits.
    pub const BITS: u32 = 256;

    /// The empty set.
    pub const fn new() -> Self {
        Bits256([0; 4])
    }

    /// Tests bit `i` (taken modulo 256).
    pub fn get(&self, i: u32) -> bool {
        let i = i % Self::BITS;
        match self.0.get((i / 64) as usize) {
            Some(w) => (w >> (i % 64)) & 1 == 1,
            None => false,
        }
    }

    /// Sets bit `i` (modulo 256).
    pub fn set(&mut self, i: u32) {
        let i = i % Self::BITS;
        if let Some(w) = self.0.get_mut((i / 64) as usize) {
            *w |= 1u64 << (i % 64);
        }
    }

    /// Clears bit `i` (modulo 256).
    pub fn clear(&mut self, i: u32) {
        let i = i % Self::BITS;
        if let Some(w) = self.0.get_mut((i / 64) as usize) {
            *w &= !(1u64 << (i % 64));
        }
    }

    /// True if no bit is set.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    /// Bit `i` of the result is bit `(i + n) mod 256` of `self`: rotates so
    /// that position `n` becomes position 0.
    pub fn rotate_down(&self, n: u32) -> Bits256 {
        let n = n % Self::BITS;
        if n == 0 {
            return *self;
        }
        let words = (n / 64) as usize;
        let bits = n % 64;
        let mut out = [0u64; 4];
        for (i, o) in out.iter_mut().enumerate() {
            let lo = self.0[(i + words) % 4];
            let hi = self.0[(i + words + 1) % 4];
            *o = if bits == 0 {
                lo
            } else {
                (lo >> bits) | (hi << (64 - bits))
            };
        }
        Bits256(out)
    }

    /// Inverse of [`Self::rotate_down`].
    pub fn rotate_up(&self, n: u32) -> Bits256 {
        self.rotate_down((Self::BITS - n % Self::BITS) % Self::BITS)
    }

    /// `self & !other`.
    pub fn and_not(&self, other: &Bits256) -> Bits256 {
        let mut o = self.0;
        for (a, b) in o.iter_mut().zip(other.0.iter()) {
            *a &= !*b;
        }
        Bits256(o)
    }

    /// `self & other`.
    pub fn and(&self, other: &Bits256) -> Bits256 {
        let mut o = self.0;
        for (a, b) in o.iter_mut().zip(other.0.iter()) {
            *a &= *b;
        }
        Bits256(o)
    }

    /// Keeps only bits `0..n` (n clamped to 256).
    pub fn truncate(&self, n: u32) -> Bits256 {
        let mut o = self.0;
        for (i, w) in o.iter_mut().enumerate() {
            let lo = (i as u32) * 64;
            if n <= lo {
                *w = 0;
            } else if n < lo + 64 {
                *w &= (1u64 << (n - lo)) - 1;
            }
        }
        Bits256(o)
    }

    /// Iterates over set bit positions in increasing order.
    pub fn ones(&self) -> Ones {
        Ones {
            words: self.0,
            idx: 0,
        }
    }
}

/// Iterator over set bits of a [`Bits256`].
#[derive(Debug, Clone)]
pub struct Ones {
    words: [u64; 4],
    idx: usize,
}

impl Iterator for Ones {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        while self.idx < 4 {
            let w = &mut self.words[self.idx];
            if *w != 0 {
                let b = w.trailing_zeros();
                *w &= *w - 1;
                return Some(self.idx as u32 * 64 + b);
            }
            self.idx += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn rotate_roundtrip() {
        let mut b = Bits256::new();
        for i in [0u32, 1, 63, 64, 100, 200, 255] {
            b.set(i);
        }
        for n in 0..256 {
            let r = b.rotate_down(n);
            for i in 0..256 {
                assert_eq!(r.get(i), b.get((i + n) % 256));
            }
            assert_eq!(r.rotate_up(n), b);
        }
        assert_eq!(b.ones().count(), 7);
        assert_eq!(b.truncate(64).ones().count(), 3);
    }
}
