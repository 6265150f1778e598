//! Simulator tests: the figures promised by the spec (MR-11.3.1) and the
//! README.
//! Run `cargo test --release --test simulator -- --nocapture` to see the
//! table; `cargo run --release --example sim_table` prints it too.

mod common;
mod sim;

use metaroce_proto::Recovery;
use sim::scenarios::*;

#[test]
fn smoke_bulk_lossless() {
    let r = bulk(0, Recovery::Selective, 4, 4 << 20, None, 11);
    assert!(r.completed, "{r:?}");
    println!("lossless 4 MiB: {:.1} Gb/s", r.gbps());
}

#[test]
fn every_message_exactly_once_in_order_at_10pct_loss() {
    let r = mixed(100_000, 5_000, 20_000, 1_500, 21);
    assert!(r.all_ok(), "{:#?}", r);
}

#[test]
fn figures_table() {
    let (table, f) = table();
    println!("{table}");
    let ratio = f.lossy.gbps() / f.lossless.gbps();
    assert!(f.lossless.completed && f.lossy.completed);
    assert!(ratio >= 0.90, "1% loss goodput ratio {ratio:.3}");
    assert!(f.mix.all_ok(), "{:#?}", f.mix);
    assert!(f.bh.completed);
    let detect = f.bh.detect_ns.expect("black hole never detected");
    assert!(
        detect <= 10 * BASE_RTT_NS,
        "black hole detected after {detect} ns"
    );
    assert!(
        f.bh.max_gap_ns <= 20 * BASE_RTT_NS,
        "stall of {} ns",
        f.bh.max_gap_ns
    );
    assert!(f.inc.jain_permille >= 900, "Jain {}", f.inc.jain_permille);
    assert!(f.inc.max_queue <= 512 << 10, "queue {}", f.inc.max_queue);
    assert!(
        f.inc_nohint.max_queue <= 1 << 20,
        "queue {}",
        f.inc_nohint.max_queue
    );
    assert!(f.inc_nohint.jain_permille >= 900);
    assert!(f.mix.tail_checks > 0);
    assert_eq!(f.inc.drops, 0);
    assert!(f.gbn1.completed);
}

#[test]
fn repaths_away_from_a_hot_link() {
    let off = hotspot(false, 4_000_000, 31);
    let on = hotspot(true, 4_000_000, 31);
    println!("hotspot without repath: {off:?}\nhotspot with repath:    {on:?}");
    assert!(on.congestion_repaths >= 1, "{on:?}");
    // With the base RTT of MR-5.5.1 (a low percentile, not the minimum) the
    // per-path windows alone already leave the cross flow its full rate on the
    // hot link (95.94 Gbit/s either way; with the minimum RTT, 95.68 without
    // repathing and 96.73 with): repathing must not cost it anything.
    assert!(on.cross_gbps >= off.cross_gbps, "{on:?} vs {off:?}");
    assert!(on.cross_gbps >= 95.0, "{on:?}");
}

/// Exactly-once and ordering across many seeds and impairment mixes.
#[test]
fn exactly_once_across_seeds() {
    for seed in 0..12u64 {
        let loss = [0, 10_000, 50_000, 100_000, 200_000][(seed % 5) as usize];
        let r = mixed(loss, 10_000, 50_000, 400, 100 + seed);
        assert!(r.all_ok(), "seed {seed} loss {loss}: {:#?}", r);
    }
}

/// The same guarantees with small, jumbo and 60 KiB MTUs, 1 and 8 paths, and the
/// go-back-N comparison profile.
#[test]
fn exactly_once_across_configurations() {
    type Tweak = fn(&mut metaroce_proto::Config);
    let cases: [(&str, Tweak); 6] = [
        ("mtu 1024", |c| c.mtu = 1024),
        ("mtu 9000", |c| c.mtu = 9000),
        ("mtu 61440 (virtual link)", |c| c.mtu = 61440),
        ("1 path", |c| c.num_paths = 1),
        ("8 paths", |c| c.num_paths = 8),
        ("go-back-N", |c| c.recovery = Recovery::GoBackN),
    ];
    for (i, (name, tweak)) in cases.into_iter().enumerate() {
        let r = mixed_cfg(50_000, 5_000, 20_000, 300, 200 + i as u64, tweak);
        assert!(r.all_ok(), "{name}: {:#?}", r);
    }
}

/// Spec: MR-9.2.5 — with 5% of all memory accesses at both ends finding their
/// memory not resident, on top of loss, duplication and reordering, every
/// message still completes exactly once, in order, with its data intact and
/// every atomic executed once; faults cost only retransmissions.
#[test]
fn exactly_once_with_memory_faults() {
    for (seed, loss) in [(300u64, 0u64), (301, 10_000), (302, 50_000)] {
        let r = mixed_faulting(loss, 5_000, 20_000, 400, seed, |_| {}, |_, m| m.m.fault_ppm = 50_000);
        assert!(r.all_ok(), "seed {seed} loss {loss}: {:#?}", r);
        assert!(r.mem_faults > 40, "seed {seed}: only {} faults", r.mem_faults);
    }
}

/// Spec: MR-10.1.3 — copies that finish after the call (a driver copying
/// outside the connection's lock) change nothing a consumer sees: every
/// completion exactly once and in order, data in place at each completion,
/// earlier WRITEs placed at a receive completion, last bytes last (MR-4.3.3).
#[test]
fn exactly_once_with_copies_finished_late() {
    for (seed, loss) in [(310u64, 0u64), (311, 10_000), (312, 50_000)] {
        let r = mixed_faulting(loss, 5_000, 20_000, 400, seed, |_| {}, |_, m| m.late_ppm = 300_000);
        assert!(r.all_ok(), "seed {seed} loss {loss}: {:#?}", r);
        assert!(r.late_copies > 100, "seed {seed}: only {} late copies", r.late_copies);
    }
}

/// Sequence numbers wrap: both directions start 40 TSNs below 2^32.
#[test]
fn tsn_wraparound() {
    let r = mixed_cfg(20_000, 0, 10_000, 400, 300, |c| {
        c.initial_tsn = u32::MAX - 40;
        c.peer_initial_tsn = u32::MAX - 40;
    });
    assert!(r.all_ok(), "{:#?}", r);
}

#[test]
fn cross_path_reordering_causes_no_spurious_retransmission() {
    let r = asymmetric(41);
    println!(
        "asymmetric paths: {:.1} Gb/s, {} retransmissions",
        r.gbps(),
        r.retx
    );
    assert!(r.completed);
    assert_eq!(r.retx, 0, "{r:?}");
}

/// Spec: MR-3.5.1, MR-8.2.1 — ACK feedback belongs to the path named by
/// `EchoPth`. Every ACK returns with MRH path id 0 over one link; the
/// forward links differ in delay by several microseconds, so each path's
/// smoothed RTT must follow its own forward link, and the CE marks of one
/// forward link must shrink that path's window only.
#[test]
fn ack_feedback_follows_the_echo_path_not_the_return_path() {
    let delay = [2_000u64, 6_000, 10_000, 14_000];
    let r = echo_path_return(delay, None, 51);
    println!("echo path, RTT only: {r:?}");
    assert!(r.completed, "{r:?}");
    assert_eq!(r.rx_invalid, 0);
    for q in 1..4 {
        // Each path's RTT exceeds path 0's by about its extra forward delay
        // (queueing adds a little; a shared estimate would not separate them).
        let extra = r.srtt_ns[q] as i64 - r.srtt_ns[0] as i64;
        let want = (delay[q] - delay[0]) as i64;
        assert!(
            extra >= want * 3 / 4 && extra <= want * 2,
            "path {q}: srtt {} vs path 0 {}, expected about +{want} ns: {r:?}",
            r.srtt_ns[q],
            r.srtt_ns[0]
        );
    }

    let r = echo_path_return([2_000; 4], Some(2), 52);
    println!("echo path, CE on link 2: {r:?}");
    assert!(r.completed, "{r:?}");
    assert_eq!(r.rx_invalid, 0);
    for q in [0, 1, 3] {
        assert!(
            r.cwnd[2] * 4 <= r.cwnd[q],
            "CE-marked path 2 window {} not far below path {q}'s {}: {r:?}",
            r.cwnd[2],
            r.cwnd[q]
        );
    }
}

/// Spec: MR-5.3.3 — with one packet per path window (large packets, small
/// windows), a lost packet is the last in flight on its path; a later packet
/// acknowledged on another path exposes it, so losses are repaired without
/// waiting for path timeouts (which would also reset the path's window).
#[test]
fn one_packet_path_windows_recover_losses_without_path_timeouts() {
    let (r, st) = sim::scenarios::bulk_over(
        |l| l.loss_ppm = 10_000,
        Recovery::Selective,
        4,
        32 << 20,
        None,
        77,
        |c| {
            c.mtu = 32768;
            c.cc.init_window = 4 * 32768;
            c.cc.max_window = 32768;
        },
    );
    assert!(r.completed, "{r:?}");
    assert!(st.lost_detected > 0, "no loss detected: {st:?}");
    assert!(
        st.path_timeouts * 4 <= st.lost_detected,
        "path timeouts {} for {} losses detected: {st:?}",
        st.path_timeouts,
        st.lost_detected
    );
}

/// Spec: MR-5.3.3 — a path that delivered and then black-holes is failed because
/// the other paths' later packets keep being acknowledged ahead of its own, well
/// before its RTO; the counter tells that rule's timeouts apart.
#[test]
fn a_black_hole_is_exposed_by_other_paths_overtaking_it() {
    let (r, st) = sim::scenarios::bulk_over(
        |_| {},
        Recovery::Selective,
        4,
        8 << 20,
        Some(500_000),
        6,
        |_| {},
    );
    assert!(r.completed, "{r:?}");
    assert!(st.path_timeouts_overtaken >= 1, "{st:?}");
    assert!(st.path_timeouts_overtaken <= st.path_timeouts, "{st:?}");
}

/// Spec: MR-5.3.3, MR-5.3.6 — paths whose packets are now and then held for a few
/// RTTs (a receiving CPU's backlog, when receive steering spreads the paths over
/// CPUs) are overtaken by the other paths' packets without being lost. The
/// duplicates the peer reports show it; from then on it takes more overtaken
/// packets in a row to fail a path, and overtaken packets get more time, so a few
/// spurious retransmissions do not turn into path timeouts that resend a path's
/// whole window and collapse it. Before this, the same run had 20 path timeouts
/// (all by overtaking) and 412 retransmissions for 4096 packets, 15.8 Gbit/s; a
/// first version that stopped overtaking from failing any path while reordering
/// was seen never noticed the black hole below.
#[test]
fn stalling_paths_are_not_failed_by_overtaking() {
    let run = |black_hole: Option<u64>| {
        sim::scenarios::bulk_over(
            |l| {
                l.stall_period_ns = 20 * BASE_RTT_NS;
                l.stall_ns = 4 * BASE_RTT_NS;
            },
            Recovery::Selective,
            4,
            16 << 20,
            black_hole,
            83,
            |c| c.min_path_rto = metaroce_proto::Duration::from_nanos(10 * BASE_RTT_NS),
        )
    };
    let (r, st) = run(None);
    println!("stalls: {:.2} Gbit/s, {st:?}", r.gbps());
    assert!(r.completed, "{r:?}");
    assert!(st.path_timeouts_overtaken <= 4, "{st:?}");
    assert!(st.tx_retx * 10 <= st.tx_data, "{st:?}");
    // A path that really fails while the others stall is still given up on,
    // sooner than the path RTO floor (10 base RTTs) allows twice over.
    let (r, st) = run(Some(2_000_000));
    println!(
        "stalls and a black hole: {:.2} Gbit/s, {r:?}, {st:?}",
        r.gbps()
    );
    assert!(r.completed, "{r:?}");
    let detect = r.detect_ns.expect("black hole never detected");
    assert!(
        detect <= 20 * BASE_RTT_NS,
        "black hole detected after {detect} ns"
    );
}

/// Spec: MR-5.5.1, MR-8.3.3, MR-5.3.6 — a link that lets 1% of packets skip its
/// delay (netem `delay 200us reorder 1%`) gives a few RTT samples far below the
/// rest and packets that overtake others on their path. The delay signal is
/// measured from the base RTT, a low percentile those few samples cannot set, to
/// which an echoed packet gives one sample however many late ACKs repeat it;
/// duplicates the peer reports switch the PSN-gap rule off and widen the
/// reordering window. Before these, this run kept 6% of the throughput it has
/// over the same delay without the fast packets (0.54 of 8.39 Gbit/s, 725
/// spurious retransmissions); with them 59% (4.91 Gbit/s, 30 retransmissions).
/// The rest is not explained yet, so the bar is half.
#[test]
fn a_few_fast_packets_do_not_set_the_base_rtt() {
    let run = |skip_ppm: u64| {
        sim::scenarios::bulk_over(
            |l| {
                l.delay_ns = 200_000;
                l.skip_delay_ppm = skip_ppm;
            },
            Recovery::Selective,
            4,
            64 << 20,
            None,
            91,
            |c| c.initial_rtt = metaroce_proto::Duration::from_micros(500),
        )
    };
    let (steady, _) = run(0);
    let (skipping, st) = run(10_000);
    assert!(
        steady.completed && skipping.completed,
        "{steady:?} {skipping:?}"
    );
    assert!(
        st.tx_retx * 100 <= st.tx_data,
        "spurious retransmissions: {st:?}"
    );
    assert!(
        skipping.gbps() >= 0.5 * steady.gbps(),
        "{:.2} Gbit/s with 1% of packets skipping the delay, {:.2} without: {st:?}",
        skipping.gbps(),
        steady.gbps()
    );
}

/// Spec: MR-5.3.4 — in a request/response exchange a lost message is the last
/// packet in flight, with nothing behind it for SACK to notice: its tail-loss
/// probe (2 srtt + ack_delay) recovers it, not a path timeout (10 ms at least),
/// so even the 99th percentile of the round trips stays under a millisecond at
/// 1% loss on every fabric link.
#[test]
fn request_response_tail_losses_are_recovered_by_tail_probes() {
    let r = sim::scenarios::request_response(10_000, 20_000, 7);
    let (a, b) = (r.requester.unwrap(), r.responder.unwrap());
    assert_eq!(r.round_trips.len(), 20_000, "{a:?} {b:?}");
    let lossless = sim::scenarios::request_response(0, 1_000, 7);
    println!(
        "round trip: lossless median {} us; at 1% loss median {} us, p99 {} us, max {} us; \
         tail probes {} + {}, path timeouts {} + {}",
        lossless.quantile(0.5) / 1000,
        r.quantile(0.5) / 1000,
        r.quantile(0.99) / 1000,
        r.quantile(1.0) / 1000,
        a.tlp,
        b.tlp,
        a.path_timeouts,
        b.path_timeouts
    );
    assert!(a.tlp + b.tlp >= 100, "{a:?} {b:?}");
    assert!(
        10 * (a.path_timeouts + b.path_timeouts) < a.tlp + b.tlp,
        "{a:?} {b:?}"
    );
    assert!(r.quantile(0.99) < 1_000_000, "p99 {} ns", r.quantile(0.99));
    assert_eq!(r.quantile(0.5), lossless.quantile(0.5));
}

/// Spec: MR-5.3.5, MR-5.3.3 — wherever in the stall cycle a path black-holes,
/// it times out within two path RTO floors: the stalls make the run of
/// MR-5.3.3 that fails a path 15 losses long, and each loss of the run takes
/// the path's oldest packet off it, so the run's first packet, not the oldest
/// packet still in flight, starts its clock. (With the clock restarting at
/// every loss, 62 of these 120 start times took longer, up to 67 base RTTs
/// (471 us); the single start time of
/// `stalling_paths_are_not_failed_by_overtaking` was a lucky one. Now the
/// slowest takes 15.)
#[test]
fn black_holes_among_stalling_paths_time_out_at_any_phase() {
    let mut worst = 0;
    for k in 1..=120u64 {
        let at = 1_000_000 + k * 29_000;
        let (r, _) = sim::scenarios::bulk_over(
            |l| {
                l.stall_period_ns = 20 * BASE_RTT_NS;
                l.stall_ns = 4 * BASE_RTT_NS;
            },
            Recovery::Selective,
            4,
            16 << 20,
            Some(at),
            83,
            |c| c.min_path_rto = metaroce_proto::Duration::from_nanos(10 * BASE_RTT_NS),
        );
        assert!(r.completed, "black hole at {at} ns: {r:?}");
        let detect = r.detect_ns.expect("black hole never detected");
        assert!(
            detect <= 20 * BASE_RTT_NS,
            "black hole at {at} ns detected after {detect} ns"
        );
        worst = worst.max(detect);
    }
    println!("black holes among stalling paths: detected within {worst} ns");
}

/// `ib_read_bw -q 4` on one connection: 64 KiB READs of 16 packets each, 32 in
/// flight, through duplication and reordering (and, for some seeds, loss): every
/// READ completes in order with its data, and no response is refused as invalid.
#[test]
fn many_large_reads_in_flight() {
    for seed in 0..8u64 {
        let loss = [0, 0, 5_000, 20_000][(seed % 4) as usize];
        let r = reads(loss, 5_000, 100_000, 3_000, 200, 64 << 10, 32, 500 + seed, |c| {
            c.num_paths = 8;
            c.mtu = 4096;
        });
        println!("seed {seed} loss {loss}: {} in {} us, responder retx {}, requester rx_invalid {}",
            r.completed, r.ns / 1000, r.retx_responder, r.rx_invalid_requester);
        assert!(r.completed == 200 && r.data_ok, "seed {seed} loss {loss}: {r:#?}");
        assert_eq!(r.rx_invalid_requester, 0, "seed {seed} loss {loss}: {r:#?}");
    }
}

/// [`many_large_reads_in_flight`] with the kernel driver's timers (RTO floors of
/// 10 and 50 ms, 500 us ACK delay and first RTT) and reordering by up to 2 ms, as a
/// loaded emulated guest delays packets.
#[test]
fn many_large_reads_in_flight_with_the_drivers_timers() {
    use metaroce_proto::Duration;
    for seed in 0..6u64 {
        let loss = [0, 0, 10_000][(seed % 3) as usize];
        let r = reads(loss, 5_000, 200_000, 2_000_000, 200, 64 << 10, 32, 600 + seed, |c| {
            c.num_paths = 8;
            c.mtu = 4096;
            c.ack_delay = Duration::from_micros(500);
            c.initial_rtt = Duration::from_micros(500);
            c.min_path_rto = Duration::from_millis(10);
            c.min_rto = Duration::from_millis(50);
            c.max_rto = Duration::from_millis(500);
        });
        println!("seed {seed} loss {loss}: {} in {} us, responder retx {}, requester rx_invalid {}",
            r.completed, r.ns / 1000, r.retx_responder, r.rx_invalid_requester);
        assert!(r.completed == 200 && r.data_ok, "seed {seed} loss {loss}: {r:#?}");
        assert_eq!(r.rx_invalid_requester, 0, "seed {seed} loss {loss}: {r:#?}");
    }
}
