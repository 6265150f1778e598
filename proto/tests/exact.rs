//! Exact-value tests of helpers and rarely taken branches, added where the
//! mutation run (selftests/compliance/mutation.md) found behaviour no other
//! test pinned down.

mod common;
use common::VecMemory;
use metaroce_proto::cc::{AckSignal, PathCc};
use metaroce_proto::sack::Bits256;
use metaroce_proto::wire::*;
use metaroce_proto::*;

#[test]
fn rnr_timer_code_is_the_smallest_code_not_below_the_delay() {
    // Spec: MR-3.5.6 — 0x0c is 3 us, 0x28 is 32 us.
    assert_eq!(rnr_timer_ns(0x0c), 3_000);
    assert_eq!(rnr_timer_ns(0x28), 32_000);
    assert_eq!(rnr_timer_code(0), 0);
    assert_eq!(rnr_timer_code(1_000), 0);
    assert_eq!(rnr_timer_code(1_001), 1);
    assert_eq!(rnr_timer_code(3_000), 0x0c);
    assert_eq!(rnr_timer_code(32_000), 0x28);
    assert_eq!(rnr_timer_code(32_001), 0x29);
    assert_eq!(rnr_timer_code(u64::MAX), 159);
    for c in 0..160u8 {
        assert_eq!(rnr_timer_code(rnr_timer_ns(c)), c, "code {c:#x}");
    }
}

#[test]
fn sack_bit_reads_every_word() {
    // Spec: MR-3.5.4 — bit i is byte i/8, bit i%8, i.e. word i/64 LE.
    for i in [0usize, 1, 63, 64, 65, 127, 128, 200, 255] {
        let mut a = AckRepr {
            cum_tsn: 0,
            syndrome: Some(Syndrome::Ack),
            rnr_timer: 0,
            echo_path: 0,
            flags: 0,
            msn: 0,
            nak_tsn: 0,
            echo_psn: 0,
            echo_ts: 0,
            ack_delay: 0,
            ce_count: 0,
            rcv_count: 0,
            credit_hint: 0,
            sack: [0; 4],
        };
        a.sack[i / 64] = 1 << (i % 64);
        for j in 0..260usize {
            assert_eq!(a.sack_bit(j), j == i, "bit {j} with only {i} set");
        }
    }
}

#[test]
fn bits256_truncate_keeps_exactly_the_low_bits() {
    let all = Bits256([u64::MAX; 4]);
    for n in 0..=260u32 {
        let t = all.truncate(n);
        let count: u32 = t.0.iter().map(|w| w.count_ones()).sum();
        assert_eq!(count, n.min(256), "truncate({n})");
        for i in 0..n.min(256) {
            assert_eq!(
                (t.0[(i / 64) as usize] >> (i % 64)) & 1,
                1,
                "bit {i} of truncate({n})"
            );
        }
    }
}

#[test]
fn rtt_equal_to_the_target_is_not_congestion() {
    // Spec: MR-8.3.3 — decrease only when the RTT *exceeds* min_rtt + target.
    let cfg = CcConfig::default();
    let s = |rtt: u32| AckSignal {
        acked_bytes: 4096,
        rtt_ns: Some(rtt),
        srtt_ns: 10_000,
        base_rtt_ns: 10_000,
        ce: 0,
        rcvd: 1,
        total_cwnd: 65_536,
    };
    let target = 10_000 + cfg.target_qdelay_ns;
    let mut p = PathCc::new(65_536);
    p.on_ack(&cfg, 1_000_000, &s(target), 4096);
    assert_eq!(
        p.cwnd,
        65_536 + 4096 * 4096 / 65_536,
        "increase at rtt == target"
    );
    assert_eq!(p.last_decrease, 0);
    let mut p = PathCc::new(65_536);
    p.on_ack(&cfg, 1_000_000, &s(target + 1), 4096);
    assert!(p.cwnd < 65_536, "decrease above the target");
    assert_eq!(p.last_decrease, 1_000_000);
}

fn out(c: &mut Connection, now: u64, m: &mut VecMemory) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 9200];
    let mut v = vec![];
    while let Some(t) = c.poll_transmit(Instant(now), &mut buf, m) {
        v.push(buf[..t.len].to_vec());
    }
    v
}

fn is_data(p: &[u8]) -> bool {
    p[1] != 0x20 && p[1] != 0x21
}

#[test]
fn is_idle_follows_queued_work() {
    let mut a = Connection::new(Config::test_pair(1, 2));
    let mut b = Connection::new(Config::test_pair(2, 1));
    let (mut ma, mut mb) = (VecMemory::new(), VecMemory::new());
    mb.add_region(0x77, 0x1000, 4096);
    assert!(a.is_idle());
    ma.set_local(1, vec![1; 10]);
    a.post_send(SendWr::write(1, 10, 0x1000, 0x77)).unwrap();
    assert!(!a.is_idle(), "posted WR");
    assert!(!a.in_flight(), "posted, not sent");
    let pkts = out(&mut a, 1_000, &mut ma);
    assert!(!a.is_idle(), "in flight");
    assert!(a.in_flight());
    for p in &pkts {
        b.handle_datagram(Instant(2_000), 0xC000, false, p, &mut mb);
    }
    for p in out(&mut b, 2_000, &mut mb) {
        a.handle_datagram(Instant(3_000), 0xC000, false, &p, &mut ma);
    }
    assert!(!a.in_flight(), "acknowledged");
    assert!(!a.is_idle(), "completion not polled yet");
    assert!(a.poll_completion().is_some());
    assert!(a.is_idle());
}

#[test]
fn go_back_n_resends_from_the_hole_on_nak_sequence() {
    // Comparison profile (MR-3.5.5, MR-11.1.3): a NAK-SEQUENCE makes the
    // sender resend everything from the NAK'd TSN at once, without a timer.
    let gbn = |c: &mut Config| {
        c.recovery = Recovery::GoBackN;
        c.mtu = 1024;
    };
    let mut ca = Config::test_pair(1, 2);
    let mut cb = Config::test_pair(2, 1);
    gbn(&mut ca);
    gbn(&mut cb);
    let mut a = Connection::new(ca);
    let mut b = Connection::new(cb);
    let (mut ma, mut mb) = (VecMemory::new(), VecMemory::new());
    mb.add_region(0x77, 0x1000, 8192);
    ma.set_local(1, vec![7; 4096]);
    a.post_send(SendWr::write(1, 4096, 0x1000, 0x77)).unwrap();
    let pkts: Vec<_> = out(&mut a, 1_000, &mut ma)
        .into_iter()
        .filter(|p| is_data(p))
        .collect();
    assert_eq!(pkts.len(), 4);
    let tsn = |p: &[u8]| u32::from_be_bytes(p[12..16].try_into().unwrap());
    for p in [&pkts[0], &pkts[2], &pkts[3]] {
        b.handle_datagram(Instant(2_000), 0xC000, false, p, &mut mb);
    }
    let acks = out(&mut b, 2_000, &mut mb);
    assert!(
        acks.iter().any(|k| k[1] == 0x20 && k[20 + 4] == 1),
        "no NAK-SEQUENCE"
    );
    for k in &acks {
        a.handle_datagram(Instant(3_000), 0xC000, false, k, &mut ma);
    }
    let again: Vec<u32> = out(&mut a, 3_000, &mut ma)
        .iter()
        .filter(|p| is_data(p))
        .map(|p| tsn(p))
        .collect();
    assert_eq!(again, vec![tsn(&pkts[1]), tsn(&pkts[2]), tsn(&pkts[3])]);
    assert_eq!(a.stats().tx_retx, 3);
}

#[test]
fn tail_loss_probe_moves_the_in_flight_bytes_of_its_path() {
    // Spec: MR-5.3.4 — the TLP resends the newest packet on another path;
    // its bytes leave the old path's in-flight count for the new one's.
    let mut a = Connection::new(Config::test_pair(1, 2));
    let mut ma = VecMemory::new();
    for w in 0..2 {
        ma.set_local(w, vec![1; 100]);
        a.post_send(SendWr::write(w, 100, 0x1000, 0x77)).unwrap();
    }
    let pkts = out(&mut a, 1_000, &mut ma);
    assert_eq!(pkts.len(), 2);
    let paths: Vec<usize> = pkts.iter().map(|p| (p[3] & 0x0f) as usize).collect();
    assert_ne!(
        paths[1], 0,
        "the newest packet must not be on path 0 for this test"
    );
    let infl =
        |a: &Connection| -> Vec<u32> { (0..4).map(|q| a.path_info(q).unwrap().inflight).collect() };
    let before = infl(&a);
    let mut now = 1_000;
    let probe = loop {
        now = a.poll_timeout().expect("a timer").as_nanos().max(now + 1);
        a.handle_timeout(Instant(now));
        let o = out(&mut a, now, &mut ma);
        if !o.is_empty() {
            break o;
        }
    };
    assert_eq!(a.stats().tlp, 1, "expected a tail loss probe first");
    assert_eq!(probe.len(), 1);
    let to = (probe[0][3] & 0x0f) as usize;
    assert_ne!(to, paths[1]);
    let after = infl(&a);
    let len = before[paths[1]];
    assert!(len > 0);
    let mut want = before.clone();
    want[paths[1]] -= len;
    want[to] += len;
    assert_eq!(after, want, "in flight per path before {before:?}");
}

/// Two connections over two paths, path 1 black-holed from `a` to `b` (data and
/// probes), path 0 perfect; `a` keeps four 8 KiB WRITEs outstanding so that
/// acknowledgements keep arriving (no tail loss probe) and path 1 carries data
/// until it times out.
struct Path1BlackHoled {
    a: Connection,
    b: Connection,
    ma: VecMemory,
    mb: VecMemory,
    posted: u64,
    done: u64,
    now: u64,
}

impl Path1BlackHoled {
    fn new() -> Self {
        let tweak = |c: &mut Config| {
            c.num_paths = 2;
            c.mtu = 1024;
            c.min_path_rto = Duration::from_micros(200);
        };
        let (mut ca, mut cb) = (Config::test_pair(1, 2), Config::test_pair(2, 1));
        tweak(&mut ca);
        tweak(&mut cb);
        let (ma, mut mb) = (VecMemory::new(), VecMemory::new());
        mb.add_region(0x77, 0x1000, 1 << 16);
        Self {
            a: Connection::new(ca),
            b: Connection::new(cb),
            ma,
            mb,
            posted: 0,
            done: 0,
            now: 1_000,
        }
    }

    /// Tops up the WRITEs and exchanges everything due now; `dropped` sees each
    /// packet `a` sent on path 1.
    fn exchange(&mut self, mut dropped: impl FnMut(&[u8], u64)) {
        let now = self.now;
        while self.a.poll_completion().is_some() {
            self.done += 1;
        }
        while self.posted - self.done < 4 {
            self.ma.set_local(self.posted, vec![3; 8192]);
            self.a
                .post_send(SendWr::write(self.posted, 8192, 0x1000, 0x77))
                .unwrap();
            self.posted += 1;
        }
        for p in out(&mut self.a, now, &mut self.ma) {
            if p[3] & 0x0f == 1 {
                dropped(&p, now);
            } else {
                self.b
                    .handle_datagram(Instant(now), 0xC000, false, &p, &mut self.mb);
            }
        }
        for p in out(&mut self.b, now, &mut self.mb) {
            self.a
                .handle_datagram(Instant(now), 0xC000, false, &p, &mut self.ma);
        }
    }

    /// Moves time to the next timer of either side and runs both.
    fn advance(&mut self) {
        self.now = [self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .map(|d| d.as_nanos())
            .fold(self.now + 1_000_000, u64::min)
            .max(self.now + 1);
        self.a.handle_timeout(Instant(self.now));
        self.b.handle_timeout(Instant(self.now));
    }
}

#[test]
fn a_failed_path_is_not_reprobed_before_its_backoff_interval() {
    // Spec: MR-6.4.3, MR-6.4.4 — when a probe goes unanswered the path is
    // failed and repathed, and its next probe waits the backoff interval
    // (at least max(2 srtt, min_path_rto)); it is not sent at once. This
    // pins the reference core's reading: the interval is counted from the
    // unanswered probe's deadline (its path RTO), not from the probe. Path
    // 1 is black-holed (data and probes), path 0 is perfect.
    let mut h = Path1BlackHoled::new();
    let min_path_rto = h.a.config().min_path_rto.as_nanos();
    let mut probes = vec![];
    let mut failed_at = vec![];
    while h.now < 50_000_000 && probes.len() < 4 {
        h.exchange(|p, now| {
            if p[1] == 0x21 {
                probes.push(now);
            }
        });
        let (r, t) = (h.a.stats().repaths, h.a.stats().path_timeouts);
        h.advance();
        if h.a.stats().repaths > r && h.a.stats().path_timeouts == t {
            failed_at.push(h.now); // an unanswered probe's deadline
        }
    }
    assert!(probes.len() >= 3, "probes at {probes:?}");
    assert!(!failed_at.is_empty(), "path 1 never failed");
    let mut checked = 0;
    for f in &failed_at {
        if let Some(next) = probes.iter().find(|t| **t >= *f) {
            checked += 1;
            assert!(
                next - f >= min_path_rto,
                "re-probed {} ns after the probe deadline at {f} (probes {probes:?})",
                next - f
            );
        }
    }
    assert!(
        checked >= 2,
        "failed at {failed_at:?}, probes at {probes:?}"
    );
}

#[test]
fn bits256_rotations_take_any_count_modulo_256() {
    // rotate_down/rotate_up document "bit i of the result is bit (i + n) mod
    // 256": that holds for every n, not only for n < 256.
    let mut b = Bits256::new();
    for i in [0u32, 1, 63, 64, 100, 200, 255] {
        b.set(i);
    }
    for n in [
        255u32,
        256,
        257,
        511,
        1000,
        u32::MAX - 255,
        u32::MAX - 1,
        u32::MAX,
    ] {
        assert_eq!(b.rotate_down(n), b.rotate_down(n % 256), "rotate_down({n})");
        assert_eq!(b.rotate_up(n), b.rotate_up(n % 256), "rotate_up({n})");
    }
}

#[test]
fn bits256_and_not_clears_exactly_the_other_bits() {
    let a = Bits256([u64::MAX, 0xf0f0, 1 << 63, 5]);
    let b = Bits256([0xff, 0xff00, 1 << 63, 4]);
    assert_eq!(a.and_not(&b), Bits256([!0xff, 0x00f0, 0, 1]));
    assert_eq!(a.and_not(&Bits256::new()), a);
    assert_eq!(a.and_not(&a), Bits256::new());
}

#[test]
fn a_path_timeout_collapses_that_path_window_to_one_mtu() {
    // Spec: MR-8.3.5, MR-6.3.2 — path 1 is black-holed until it times out;
    // its window is then one MTU, the other path's is untouched.
    let mut h = Path1BlackHoled::new();
    while h.a.stats().path_timeouts == 0 && h.now < 50_000_000 {
        h.exchange(|_, _| {});
        h.advance();
    }
    let a = &h.a;
    assert_eq!(a.stats().path_timeouts, 1, "path 1 never timed out");
    assert_eq!(a.path_info(1).unwrap().status, PathStatus::Suspect);
    assert_eq!(
        a.path_info(1).unwrap().cwnd,
        1024,
        "timed-out path's window"
    );
    assert!(
        a.path_info(0).unwrap().cwnd > 1024,
        "path 0's window {}",
        a.path_info(0).unwrap().cwnd
    );
}

#[test]
fn verbs_min_rnr_timer_maps_to_a_wait_at_least_as_long() {
    // Spec: MR-7.1.2 — the verbs code is IBTA's table, not MR-3.5.6's encoding:
    // rdma_cm leaves 0 (655.36 ms), rdma-core's tests use 12 (0.64 ms).
    assert_eq!(verbs_rnr_timer_ns(0), 655_360_000);
    assert_eq!(verbs_rnr_timer_ns(1), 10_000);
    assert_eq!(verbs_rnr_timer_ns(12), 640_000);
    assert_eq!(verbs_rnr_timer_ns(31), 491_520_000);
    for code in 0..32u8 {
        let want = verbs_rnr_timer_ns(code);
        let c = rnr_timer_code_for_verbs(code);
        assert!(rnr_timer_ns(c) >= want, "verbs code {code}");
        assert!(
            c == 0 || rnr_timer_ns(c - 1) < want,
            "verbs code {code}: not the smallest"
        );
        assert!(
            rnr_timer_ns(c) <= want + want / 8,
            "verbs code {code}: within 12.5 %"
        );
        if code > 1 {
            assert!(
                want > verbs_rnr_timer_ns(code - 1),
                "the table increases from 1 to 31"
            );
        }
    }
}

#[test]
fn additive_increase_is_at_least_one_mtu_per_rtt() {
    // Spec: MR-8.5.1, MR-8.6.1 — `ai` (4096 B) or one MTU, whichever is larger.
    let cfg = CcConfig::default();
    let s = AckSignal {
        acked_bytes: 32_768,
        rtt_ns: Some(10_000),
        srtt_ns: 10_000,
        base_rtt_ns: 10_000,
        ce: 0,
        rcvd: 1,
        total_cwnd: 131_072,
    };
    let mut big = PathCc::new(32_768);
    big.on_ack(&cfg, 1_000_000, &s, 32_768);
    assert_eq!(big.cwnd, 32_768 + 32_768 * 32_768 / 131_072);
    let mut small = PathCc::new(32_768);
    small.on_ack(&cfg, 1_000_000, &s, 1_024);
    assert_eq!(small.cwnd, 32_768 + 4096 * 32_768 / 131_072);
}
