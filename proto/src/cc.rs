//! Per-path congestion control (MR-8).
//!
//! Window-based, one window per path, driven by three signals: delay (RTT
//! above `base_rtt + target_qdelay`), ECN (a DCTCP-style marked fraction
//! `alpha`), and the receiver's credit hint, which caps the sum of the path
//! windows (applied by the connection). Increase is coupled across paths:
//! an ACK for `b` bytes grows its path by `ai * b / total_window`, so a
//! connection as a whole gains about `ai` bytes per RTT however many paths
//! it sprays over, and competes with a single-path flow as one flow
//! (MR-8.5.1). Random loss is not treated as congestion (MR-8.3.4); only a
//! retransmission timeout collapses a path window.
//!
//! All arithmetic is integer: fractions are Q16 (65536 = 1.0).
//!
//! The delay signal is measured against a path's *base RTT* ([`BaseRtt`]), a low
//! percentile of its RTT samples rather than their minimum: a few packets that
//! take a faster way (a reordering link lets some skip a delay) would otherwise
//! set a minimum the other 99% never come near, and every sample would read as
//! queueing.

/// Congestion-control parameters (MR-8.6.1, defaults in the spec table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcConfig {
    /// Initial window of the whole connection in bytes, split over paths.
    pub init_window: u32,
    /// Largest window of one path in bytes.
    pub max_window: u32,
    /// Queueing delay target above the path's minimum RTT, ns.
    pub target_qdelay_ns: u32,
    /// Additive increase per RTT for the whole connection, bytes.
    pub ai_bytes: u32,
    /// Delay multiplicative-decrease gain (Q16).
    pub beta_q16: u32,
    /// Largest single decrease (Q16 fraction of the window).
    pub max_mdf_q16: u32,
    /// ECN EWMA gain as a right shift (4 means g = 1/16).
    pub ecn_gain_shift: u8,
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            init_window: 128 * 1024,
            max_window: 4 * 1024 * 1024,
            target_qdelay_ns: 6_000,
            ai_bytes: 4096,
            beta_q16: 52_429,
            max_mdf_q16: 32_768,
            ecn_gain_shift: 4,
        }
    }
}

/// Rank of the sample a run's base RTT estimate is (the 8th smallest).
pub const BASE_RTT_RANK: usize = 8;
/// Samples in one run of the base RTT estimate.
pub const BASE_RTT_RUN: u8 = 64;

/// Spec: MR-5.5.1 — the base RTT of a path (40 bytes).
///
/// Until the first run of [`BASE_RTT_RUN`] samples completes it is the smallest
/// sample; from then on it is the smallest, over the completed runs, of each run's
/// [`BASE_RTT_RANK`]th smallest sample. Fewer than that many fast samples in a run
/// (1% of packets skipping a delay puts 0.64 in a run on average; 8 or more happen
/// with probability below 1e-6) cannot lower it; it never rises, as a standing
/// queue would otherwise become part of it (a repathed route starts a new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseRtt {
    value: u32,
    /// The smallest samples of the current run, ascending; `u32::MAX` fills the rest.
    lows: [u32; BASE_RTT_RANK],
    /// Samples taken in the current run.
    taken: u8,
    /// A run has completed (the value is a run estimate, not the smallest sample).
    settled: bool,
}

impl BaseRtt {
    /// A path's estimate from its first sample.
    pub const fn new(first: u32) -> Self {
        let mut lows = [u32::MAX; BASE_RTT_RANK];
        lows[0] = first;
        BaseRtt {
            value: first,
            lows,
            taken: 1,
            settled: false,
        }
    }

    /// The base RTT (ns).
    pub const fn get(&self) -> u32 {
        self.value
    }

    /// Takes one RTT sample (ns). O(`BASE_RTT_RANK`).
    pub fn sample(&mut self, rtt: u32) {
        // Keep the run's smallest samples sorted: insert, dropping the largest.
        let mut v = rtt;
        for slot in self.lows.iter_mut() {
            if v < *slot {
                core::mem::swap(slot, &mut v);
            }
        }
        self.taken = self.taken.saturating_add(1);
        if !self.settled {
            self.value = self.value.min(rtt);
        }
        if self.taken >= BASE_RTT_RUN {
            let estimate = self.lows[BASE_RTT_RANK - 1];
            self.value = if self.settled {
                self.value.min(estimate)
            } else {
                estimate
            };
            self.settled = true;
            self.lows = [u32::MAX; BASE_RTT_RANK];
            self.taken = 0;
        }
    }
}

/// Congestion state of one path (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathCc {
    /// Congestion window in bytes.
    pub cwnd: u32,
    /// ECN marked-fraction estimate, Q16.
    pub alpha: u32,
    /// Time of the last multiplicative decrease (ns).
    pub last_decrease: u64,
}

/// One ACK's worth of congestion feedback for a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckSignal {
    /// Bytes newly acknowledged that were sent on this path.
    pub acked_bytes: u32,
    /// RTT sample (ns), if the ACK carried a valid echo.
    pub rtt_ns: Option<u32>,
    /// Smoothed RTT of the path (ns).
    pub srtt_ns: u32,
    /// Base RTT of the path (ns, [`BaseRtt`]).
    pub base_rtt_ns: u32,
    /// CE-marked packets reported.
    pub ce: u16,
    /// Packets reported.
    pub rcvd: u16,
    /// Sum of the windows of all usable paths of the connection.
    pub total_cwnd: u32,
}

impl PathCc {
    /// A fresh path with `cwnd` bytes.
    pub const fn new(cwnd: u32) -> Self {
        PathCc {
            cwnd,
            alpha: 0,
            last_decrease: 0,
        }
    }

    /// Applies one ACK (MR-8.2.1 pseudocode). `min_cwnd` is one MTU.
    pub fn on_ack(&mut self, cfg: &CcConfig, now_ns: u64, s: &AckSignal, min_cwnd: u32) {
        // Spec: MR-8.3.1 — ECN: alpha <- (1-g) alpha + g F.
        if s.rcvd > 0 {
            let f = ((s.ce.min(s.rcvd) as u64) << 16) / s.rcvd as u64;
            let a = self.alpha as u64;
            let g = cfg.ecn_gain_shift as u32;
            self.alpha = (a - a.checked_shr(g).unwrap_or(0) + f.checked_shr(g).unwrap_or(0))
                .min(65_536) as u32;
        }
        let can_decrease = now_ns.saturating_sub(self.last_decrease) >= s.srtt_ns as u64;
        let target = s.base_rtt_ns as u64 + cfg.target_qdelay_ns as u64;
        let rtt = s.rtt_ns.map(|r| r as u64);
        let cwnd = self.cwnd as u64;
        if s.ce > 0 {
            if can_decrease {
                // Spec: MR-8.3.2 — cwnd <- cwnd (1 - alpha/2), once per RTT.
                let dec = (cwnd * self.alpha as u64) >> 17;
                self.cwnd = cwnd.saturating_sub(dec.max(1)) as u32;
                self.last_decrease = now_ns;
            }
        } else if let Some(r) = rtt.filter(|r| *r > target && *r > 0) {
            if can_decrease {
                // Spec: MR-8.3.3 — cwnd <- cwnd (1 - beta (rtt - target)/rtt).
                let f = ((cfg.beta_q16 as u64 * (r - target)) / r).min(cfg.max_mdf_q16 as u64);
                self.cwnd = cwnd.saturating_sub((cwnd * f) >> 16) as u32;
                self.last_decrease = now_ns;
            }
        } else {
            // Spec: MR-8.5.1 — coupled additive increase, at least one MTU per
            // RTT (MR-8.6.1): a window counts whole packets, so a smaller step
            // would take many round trips to admit one more.
            let total = (s.total_cwnd as u64).max(1);
            let ai = cfg.ai_bytes.max(min_cwnd) as u64;
            let inc = (ai * s.acked_bytes as u64) / total;
            self.cwnd = (cwnd + inc.max(1)).min(u32::MAX as u64) as u32;
        }
        self.clamp(cfg, min_cwnd);
    }

    /// A path retransmission timeout (MR-8.3.5): window to one MTU.
    pub fn on_timeout(&mut self, min_cwnd: u32, now_ns: u64) {
        self.cwnd = min_cwnd;
        self.last_decrease = now_ns;
    }

    fn clamp(&mut self, cfg: &CcConfig, min_cwnd: u32) {
        self.cwnd = self.cwnd.clamp(min_cwnd, cfg.max_window.max(min_cwnd));
    }
}

#[cfg(test)]
mod base_rtt_tests {
    use super::*;

    #[test]
    fn before_a_run_completes_it_is_the_smallest_sample() {
        let mut b = BaseRtt::new(500);
        for r in [700, 300, 900] {
            b.sample(r);
        }
        assert_eq!(b.get(), 300);
    }

    #[test]
    fn fewer_fast_samples_than_the_rank_do_not_lower_it() {
        // Spec: MR-5.5.1 — 6 or 7 fast samples in every run of 64.
        let mut b = BaseRtt::new(2_000);
        for i in 1..(10 * BASE_RTT_RUN as u32) {
            b.sample(if i % 10 == 0 { 1_000 } else { 2_000 + i % 50 });
        }
        assert!(b.get() >= 2_000, "{}", b.get());
    }

    #[test]
    fn a_run_with_as_many_fast_samples_as_the_rank_lowers_it_for_good() {
        let mut b = BaseRtt::new(2_000);
        for _ in 1..BASE_RTT_RUN {
            b.sample(2_000);
        }
        assert_eq!(b.get(), 2_000);
        for i in 0..BASE_RTT_RUN as usize {
            b.sample(if i < BASE_RTT_RANK { 1_000 } else { 2_000 });
        }
        assert_eq!(b.get(), 1_000);
        // It never rises (a standing queue must not become part of it).
        for _ in 0..4 * BASE_RTT_RUN as usize {
            b.sample(5_000);
        }
        assert_eq!(b.get(), 1_000);
    }
}
