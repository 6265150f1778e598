//! MR-7.1.5: a responder left in RTR (no `sq_psn`) answers READs and atomics
//! from the QPN-derived TSN, and a requester that allows it adopts that start.

mod common;
use common::VecMemory;
use metaroce_proto::*;

fn shuttle(a: &mut Connection, b: &mut Connection, ma: &mut VecMemory, mb: &mut VecMemory) {
    let mut buf = vec![0u8; a.max_packet_len().max(b.max_packet_len())];
    let mut now = Instant(0);
    for _ in 0..20 {
        while let Some(t) = a.poll_transmit(now, &mut buf, ma) {
            b.handle_datagram(now, t.src_port, false, &buf[..t.len], mb);
        }
        while let Some(t) = b.poll_transmit(now, &mut buf, mb) {
            a.handle_datagram(now, t.src_port, false, &buf[..t.len], ma);
        }
        now = now + Duration::from_micros(5);
        a.handle_timeout(now);
        b.handle_timeout(now);
    }
}

/// Requester `a` (QPN 0x10) was told some random peer TSN; responder `b` (QPN
/// 0x20) never got an `sq_psn` and starts at the derived TSN.
fn pair(allow: bool) -> (Connection, Connection, VecMemory, VecMemory) {
    let mut ca = Config::new(0x10, 0x20, 1000, 0x00ab_cdef);
    ca.accept_derived_peer_tsn = allow;
    ca.mtu = 1024;
    let mut cb = Config::new(0x20, 0x10, qpn_derived_tsn(0x20, 0x10, 1000), 1000);
    cb.mtu = 1024;
    let (mut ma, mut mb) = (VecMemory::new(), VecMemory::new());
    mb.add_region(0x77, 0x1000, 4096);
    ma.set_local(1, vec![0; 3000]);
    ma.set_local(2, vec![0; 8]);
    (Connection::new(ca), Connection::new(cb), ma, mb)
}

#[test]
fn requester_adopts_the_derived_tsn_of_an_rtr_only_responder() {
    let (mut a, mut b, mut ma, mut mb) = pair(true);
    a.post_send(SendWr::read(1, 3000, 0x1000, 0x77)).unwrap();
    a.post_send(SendWr::faa(2, 0x1000, 0x77, 5)).unwrap();
    shuttle(&mut a, &mut b, &mut ma, &mut mb);
    let c1 = a.poll_completion().unwrap();
    let c2 = a.poll_completion().unwrap();
    assert_eq!((c1.wr_id, c1.status), (1, WcStatus::Success));
    assert_eq!((c2.wr_id, c2.status), (2, WcStatus::Success));
    assert_eq!(mb.region(0x77)[0], 5);
}

#[test]
fn without_the_allowance_responses_from_elsewhere_are_not_accepted() {
    let (mut a, mut b, mut ma, mut mb) = pair(false);
    a.post_send(SendWr::read(1, 3000, 0x1000, 0x77)).unwrap();
    shuttle(&mut a, &mut b, &mut ma, &mut mb);
    assert!(a
        .poll_completion()
        .is_none_or(|c| c.status != WcStatus::Success));
}

#[test]
fn derived_tsns_differ_by_direction_pair_and_requester_tsn() {
    assert_ne!(qpn_derived_tsn(1, 2, 7), qpn_derived_tsn(2, 1, 7));
    assert_ne!(qpn_derived_tsn(1, 2, 7), qpn_derived_tsn(1, 3, 7));
    assert_ne!(qpn_derived_tsn(1, 2, 7), qpn_derived_tsn(1, 2, 8));
    // Only the 24-bit QPNs matter.
    assert_eq!(qpn_derived_tsn(0xff00_0001, 2, 7), qpn_derived_tsn(1, 2, 7));
}

/// The example of MR-7.1.5, worked through: sender 0x000123, receiver 0x000456,
/// receiver's initial TSN 0x00abcdef.
#[test]
fn the_specification_example() {
    assert_eq!(qpn_derived_tsn(0x123, 0x456, 0x00ab_cdef), SPEC_EXAMPLE);
}
const SPEC_EXAMPLE: u32 = 0x4cbd_af76;

#[test]
fn responses_of_an_earlier_responder_with_the_same_numbers_are_refused() {
    // QP numbers are reused. A READ responder left in RTR, destroyed with a
    // response still in the network, and a new pair with the same QPNs whose
    // requester chose another initial TSN (as every verbs program does): the
    // straggler must not be taken as the new responder's answer (MR-7.1.5).
    let (mut old_a, mut old_b, mut old_ma, mut old_mb) = pair(true);
    old_mb.regions.get_mut(&0x77).unwrap().1.fill(0xee);
    old_a.post_send(SendWr::read(1, 3000, 0x1000, 0x77)).unwrap();
    let mut buf = vec![0u8; old_a.max_packet_len().max(old_b.max_packet_len())];
    let now = Instant(0);
    while let Some(t) = old_a.poll_transmit(now, &mut buf, &mut old_ma) {
        old_b.handle_datagram(now, t.src_port, false, &buf[..t.len], &mut old_mb);
    }
    let mut stragglers = vec![];
    while let Some(t) = old_b.poll_transmit(now, &mut buf, &mut old_mb) {
        stragglers.push((t.src_port, buf[..t.len].to_vec()));
    }
    assert!(!stragglers.is_empty(), "the old responder answered nothing");

    // The new pair: same QPNs, the requester starts at 5000 instead of 1000.
    let mut ca = Config::new(0x10, 0x20, 5000, 0x00ab_cdef);
    ca.accept_derived_peer_tsn = true;
    ca.mtu = 1024;
    let mut cb = Config::new(0x20, 0x10, qpn_derived_tsn(0x20, 0x10, 5000), 5000);
    cb.mtu = 1024;
    let (mut a, mut b) = (Connection::new(ca), Connection::new(cb));
    let (mut ma, mut mb) = (VecMemory::new(), VecMemory::new());
    mb.add_region(0x77, 0x1000, 4096);
    mb.regions.get_mut(&0x77).unwrap().1.fill(0x11);
    ma.set_local(1, vec![0; 3000]);
    a.post_send(SendWr::read(1, 3000, 0x1000, 0x77)).unwrap();
    while a.poll_transmit(now, &mut buf, &mut ma).is_some() {}
    for (port, p) in &stragglers {
        a.handle_datagram(now, *port, false, p, &mut ma);
    }
    assert!(a.poll_completion().is_none(), "the old responder's answer completed the new READ");
    assert!(ma.local[&1].iter().all(|&b| b == 0), "the old responder's data was placed");
    // Refused by their TSNs, before the first the new requester expects or
    // beyond its window: none answered as a duplicate (MR-5.2.2). (The ACKs
    // they carry are refused too, and counted of rx_invalid as well.)
    let st = a.stats();
    assert_eq!((st.rx_invalid - st.rx_acks_beyond_sent, st.rx_dup), (stragglers.len() as u64, 0));
    // The new responder's own answer is still taken.
    shuttle(&mut a, &mut b, &mut ma, &mut mb);
    let c = a.poll_completion().expect("the new READ completes");
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
    assert!(ma.local[&1].iter().all(|&b| b == 0x11));
}

#[test]
fn no_adoption_once_a_packet_from_the_peer_was_accepted() {
    // Spec: MR-7.1.5 — the derived TSN may be adopted only until the first
    // packet from the peer is accepted. Here `a` first accepts an
    // out-of-order WRITE at the TSN it was told (+1, so its cumulative point
    // does not move); the READ response from the derived TSN must then be
    // outside its window.
    let (mut a, mut b, mut ma, mut mb) = pair(true);
    ma.add_region(0x55, 0x2000, 64);
    let mut c = Connection::new(Config::new(0x20, 0x10, 0x00ab_cdef, 1000));
    let mut mc = VecMemory::new();
    let mut buf = vec![0u8; c.max_packet_len()];
    for w in 0..2 {
        mc.set_local(w, vec![0x5a; 8]);
        c.post_send(SendWr::write(w, 8, 0x2000 + 8 * w, 0x55))
            .unwrap();
    }
    let mut pkts = vec![];
    while let Some(t) = c.poll_transmit(Instant(0), &mut buf, &mut mc) {
        pkts.push((t.src_port, buf[..t.len].to_vec()));
    }
    let second = pkts
        .iter()
        .find(|p| u32::from_be_bytes(p.1[12..16].try_into().unwrap()) == 0x00ab_cdf0)
        .expect("the second WRITE");
    a.handle_datagram(Instant(0), second.0, false, &second.1, &mut ma);
    assert_eq!(a.stats().rx_dup, 0);
    // Accepted: it is in the receive record, so a copy is a duplicate.
    a.handle_datagram(Instant(0), second.0, false, &second.1, &mut ma);
    assert_eq!(
        a.stats().rx_dup,
        1,
        "the out-of-order WRITE was not accepted"
    );
    a.post_send(SendWr::read(1, 3000, 0x1000, 0x77)).unwrap();
    shuttle(&mut a, &mut b, &mut ma, &mut mb);
    assert!(
        a.poll_completion()
            .is_none_or(|c| c.status != WcStatus::Success),
        "READ response from the derived TSN accepted after a packet at the told TSN"
    );
}
