// SPDX-License-Identifier: GPL-2.0

//! Spec: MR-6.3.5 — how one connection's received paths are spread over this
//! host's CPUs, and which path to ask the peer to move when they crowd one CPU.
//!
//! A link that spreads received packets over CPUs (a NIC's RSS, or RPS) picks the
//! CPU from a hash of the UDP ports, so each path's source port also picks the CPU
//! that copies its payloads and acknowledges them. With a few paths per connection
//! the draw is often uneven: under emulation a 1-QP stream whose paths sat six or
//! more of eight on one of two CPUs ran a quarter slower, the other CPU spinning in
//! the application's poll loop. A new source port is a new draw.

use core::sync::atomic::{AtomicU16, AtomicU32, Ordering::Relaxed};

use crate::proto::connection::MAX_PATHS;

/// Data packets between two looks at the spread (and so at most one move request
/// per this many packets of a connection).
pub(crate) const CHECK_EVERY: u32 = 1024;

/// No packet seen on the path yet.
const UNSEEN: u16 = u16::MAX;

/// The CPU that handled each path's latest data packet, written in the receive
/// softirq without a lock (a stale entry only delays a request).
pub(crate) struct RxSpread {
    path_cpu: [AtomicU16; MAX_PATHS],
    packets: AtomicU32,
}

impl RxSpread {
    pub(crate) const fn new() -> Self {
        Self { path_cpu: [const { AtomicU16::new(UNSEEN) }; MAX_PATHS], packets: AtomicU32::new(0) }
    }

    /// Notes a data packet of path `path` handled on CPU `cpu`; every
    /// [`CHECK_EVERY`] packets, returns the path to ask the peer to move, if one
    /// CPU is crowded ([`crowded_path`]) among the `cpus()` CPUs the link spreads
    /// packets over (asked only then: 1 or less for a link that does not spread).
    pub(crate) fn note(&self, path: usize, cpu: u32, cpus: impl FnOnce() -> u32) -> Option<usize> {
        self.path_cpu.get(path)?.store(cpu.min(u32::from(UNSEEN) - 1) as u16, Relaxed);
        let n = self.packets.fetch_add(1, Relaxed).wrapping_add(1);
        if n % CHECK_EVERY != 0 {
            return None;
        }
        let mut seen = [UNSEEN; MAX_PATHS];
        for (s, c) in seen.iter_mut().zip(&self.path_cpu) {
            *s = c.load(Relaxed);
        }
        crowded_path(&seen, cpus())
    }
}

/// Of the paths seen (`path_cpu[p]`, the CPU of path `p`'s latest packet, or
/// [`UNSEEN`]), one on a CPU that handles at least two paths more than an even
/// share over `cpus` CPUs (rounded up): the highest-numbered path of the most
/// crowded CPU. None with fewer than two CPUs or two paths.
fn crowded_path(path_cpu: &[u16; MAX_PATHS], cpus: u32) -> Option<usize> {
    let seen = path_cpu.iter().filter(|&&c| c != UNSEEN).count() as u32;
    if cpus < 2 || seen < 2 {
        return None;
    }
    let share = seen.div_ceil(cpus);
    let on = |cpu: u16| path_cpu.iter().filter(|&&c| c == cpu).count() as u32;
    let (crowded, n) = path_cpu
        .iter()
        .filter(|&&c| c != UNSEEN)
        .map(|&c| (c, on(c)))
        .max_by_key(|&(_, n)| n)?;
    if n < share + 2 {
        return None;
    }
    path_cpu.iter().rposition(|&c| c == crowded)
}

#[kernel::prelude::kunit_tests(rdma_metaroce_spread)]
mod tests {
    use super::*;

    #[test]
    fn a_crowded_cpu_gives_up_a_path_and_an_even_spread_none() {
        const U: u16 = UNSEEN;
        // Six of eight paths on CPU 0 of two: share 4, 6 >= 4 + 2.
        assert_eq!(crowded_path(&[0, 0, 1, 0, 0, 1, 0, 0], 2), Some(7));
        // Five of eight: not crowded enough to ask.
        assert_eq!(crowded_path(&[0, 1, 0, 1, 0, 1, 0, 0], 2), None);
        // All on one CPU of a link that spreads: one move at a time.
        assert_eq!(crowded_path(&[3; MAX_PATHS], 2), Some(7));
        // One CPU only, or a single path seen: nothing to ask.
        assert_eq!(crowded_path(&[0; MAX_PATHS], 1), None);
        assert_eq!(crowded_path(&[U, U, 1, U, U, U, U, U], 4), None);
        // Many CPUs: three paths of four on one is crowded (share 1).
        assert_eq!(crowded_path(&[5, 5, 5, 2, U, U, U, U], 16), Some(2));
    }

    #[test]
    fn the_spread_is_looked_at_every_check_every_packets() {
        let s = RxSpread::new();
        let mut asked = 0;
        for i in 0..2 * CHECK_EVERY {
            // Paths 0-7 round robin, 0-5 on CPU 0 and 6-7 on CPU 1.
            let p = (i % 8) as usize;
            if s.note(p, u32::from(p >= 6), || 2).is_some() {
                asked += 1;
            }
        }
        assert_eq!(asked, 2);
        assert_eq!(s.note(MAX_PATHS, 0, || 2), None);
        // The same crowding on a link that does not spread: nothing to ask.
        let mut asked = 0;
        for i in 0..CHECK_EVERY {
            let p = (i % 8) as usize;
            if s.note(p, u32::from(p >= 6), || 1).is_some() {
                asked += 1;
            }
        }
        assert_eq!(asked, 0);
    }
}
