//! Receive-side statistics the driver exports as device counters: packets
//! placed out of order (MR-4.1.3) and CE marks (MR-2.5.2).

mod common;
use common::VecMemory;
use metaroce_proto::*;

#[test]
fn out_of_order_placements_and_ce_marks_are_counted() {
    let mut ca = Config::test_pair(1, 2);
    ca.mtu = 1024;
    ca.num_paths = 1;
    let mut cb = Config::test_pair(2, 1);
    cb.mtu = 1024;
    let (mut a, mut b) = (Connection::new(ca), Connection::new(cb));
    let (mut ma, mut mb) = (VecMemory::new(), VecMemory::new());
    ma.set_local(1, vec![7; 3000]);
    mb.add_region(0x77, 0x1000, 4096);
    a.post_send(SendWr::write(1, 3000, 0x1000, 0x77)).unwrap();
    let mut buf = vec![0u8; a.max_packet_len()];
    let mut pkts = Vec::new();
    while let Some(t) = a.poll_transmit(Instant(0), &mut buf, &mut ma) {
        pkts.push((t.src_port, buf[..t.len].to_vec()));
    }
    assert_eq!(pkts.len(), 3);
    // Last packet first (CE-marked), then the first, then the middle one.
    b.handle_datagram(Instant(1), pkts[2].0, true, &pkts[2].1, &mut mb);
    b.handle_datagram(Instant(1), pkts[0].0, false, &pkts[0].1, &mut mb);
    b.handle_datagram(Instant(1), pkts[1].0, false, &pkts[1].1, &mut mb);
    let s = b.stats();
    // Packet 2 is placed ahead of 0 and 1; packet 0 is the next expected and
    // packet 1 then is too: one out-of-order placement.
    assert_eq!(s.rx_out_of_order, 1);
    assert_eq!(s.rx_ce, 1);
    assert_eq!(&mb.region(0x77)[..3000], &[7u8; 3000][..]);
}
