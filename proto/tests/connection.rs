//! Connection state-machine tests with hand-controlled packet delivery.

mod common;
use common::VecMemory;
use metaroce_proto::*;

struct Pair {
    a: Connection,
    b: Connection,
    ma: VecMemory,
    mb: VecMemory,
    now: u64,
    buf: Vec<u8>,
    /// Deliver each datagram in pieces (as a receiver's page fragments).
    scatter: bool,
}

/// Hands `d` to `c` in pieces: the first [`wire::HEADERS_MAX`] bytes, then
/// pieces of 1, 2, 3, ... bytes, with empty pieces in between.
fn deliver_scattered(c: &mut Connection, now: u64, port: u16, d: &[u8], m: &mut VecMemory) {
    let (first, mut rest) = d.split_at(d.len().min(wire::HEADERS_MAX));
    let mut pieces: Vec<&[u8]> = vec![];
    let mut n = 1;
    while !rest.is_empty() {
        let (a, b) = rest.split_at(rest.len().min(n));
        pieces.push(a);
        pieces.push(&[]);
        rest = b;
        n = n % 97 + 1;
    }
    c.handle_scattered(Instant(now), port, false, first, &pieces, m);
}

impl Pair {
    fn new(tweak: impl Fn(&mut Config)) -> Pair {
        let mut ca = Config::test_pair(1, 2);
        let mut cb = Config::test_pair(2, 1);
        tweak(&mut ca);
        tweak(&mut cb);
        let mut mb = VecMemory::new();
        mb.add_region(0x77, 0x1000, 1 << 16);
        Pair {
            a: Connection::new(ca),
            b: Connection::new(cb),
            ma: VecMemory::new(),
            mb,
            now: 1_000,
            buf: vec![0; 9200],
            scatter: false,
        }
    }
    fn out_a(&mut self) -> Vec<(u16, Vec<u8>)> {
        let mut v = vec![];
        while let Some(t) = self
            .a
            .poll_transmit(Instant(self.now), &mut self.buf, &mut self.ma)
        {
            v.push((t.src_port, self.buf[..t.len].to_vec()));
        }
        v
    }
    fn out_b(&mut self) -> Vec<(u16, Vec<u8>)> {
        let mut v = vec![];
        while let Some(t) = self
            .b
            .poll_transmit(Instant(self.now), &mut self.buf, &mut self.mb)
        {
            v.push((t.src_port, self.buf[..t.len].to_vec()));
        }
        v
    }
    fn deliver_b(&mut self, p: &(u16, Vec<u8>)) {
        if self.scatter {
            deliver_scattered(&mut self.b, self.now, p.0, &p.1, &mut self.mb);
        } else {
            self.b
                .handle_datagram(Instant(self.now), p.0, false, &p.1, &mut self.mb);
        }
    }
    fn deliver_a(&mut self, p: &(u16, Vec<u8>)) {
        if self.scatter {
            deliver_scattered(&mut self.a, self.now, p.0, &p.1, &mut self.ma);
        } else {
            self.a
                .handle_datagram(Instant(self.now), p.0, false, &p.1, &mut self.ma);
        }
    }
    /// Perfect network until quiet, advancing time and firing timers.
    fn run(&mut self, rounds: usize) {
        for _ in 0..rounds {
            self.round(1_000);
        }
    }
    /// One round on a perfect network: A's packets to B, B's to A, then `step`
    /// ns and the timers due. Returns whether any packet moved.
    fn round(&mut self, step: u64) -> bool {
        let pa = self.out_a();
        for p in &pa {
            self.deliver_b(p);
        }
        let pb = self.out_b();
        for p in &pb {
            self.deliver_a(p);
        }
        self.tick(step);
        !pa.is_empty() || !pb.is_empty()
    }
    fn tick(&mut self, ns: u64) {
        self.now += ns;
        let t = Instant(self.now);
        if self.a.poll_timeout().map(|d| d <= t).unwrap_or(false) {
            self.a.handle_timeout(t);
        }
        if self.b.poll_timeout().map(|d| d <= t).unwrap_or(false) {
            self.b.handle_timeout(t);
        }
    }
    /// Advances to the earliest of `a`'s and `b`'s next deadlines and `limit`
    /// (at least 1 ns), firing the timers that are due.
    fn advance_until(&mut self, limit: u64) {
        let next = [self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .map(|d| d.as_nanos())
            .fold(limit, u64::min)
            .max(self.now + 1);
        self.tick(next - self.now);
    }
    /// A pair (1 KiB MTU) where A has posted three multi-packet requests on
    /// `data` (5,000 bytes): WRITE 1 of all of it to B's region 0x77 at 0x1000,
    /// SEND 2 of its first 3,333 bytes into B's receive 60, and READ 3 of 4,500
    /// bytes from 0x1100, which that WRITE fills (`data[0x100..]`).
    fn write_send_read(data: &[u8]) -> Pair {
        let mut t = Pair::new(|c| c.mtu = 1024);
        t.ma.set_local(1, data.to_vec());
        t.ma.set_local(2, data[..3333].to_vec());
        t.mb.set_recv(60, 4000);
        t.b.post_recv(RecvWr {
            wr_id: 60,
            len: 4000,
        })
        .unwrap();
        t.a.post_send(SendWr::write(1, 5000, 0x1000, 0x77)).unwrap();
        t.a.post_send(SendWr::send(2, 3333)).unwrap();
        t.a.post_send(SendWr::read(3, 4500, 0x1100, 0x77)).unwrap();
        t
    }
    fn comps_a(&mut self) -> Vec<Completion> {
        std::iter::from_fn(|| self.a.poll_completion()).collect()
    }
    fn comps_b(&mut self) -> Vec<Completion> {
        std::iter::from_fn(|| self.b.poll_completion()).collect()
    }
}

/// The MRH path id of a datagram (low nibble of byte 3).
fn path_of(p: &(u16, Vec<u8>)) -> usize {
    (p.1[3] & 0x0f) as usize
}

fn is_data(p: &(u16, Vec<u8>)) -> bool {
    let op = p.1[1];
    op != 0x20 && op != 0x21
}

#[test]
fn last_packet_is_placed_last() {
    // Spec: MR-4.3.3.
    let mut t = Pair::new(|c| c.mtu = 1024);
    let data: Vec<u8> = (0..2500u32).map(|i| (i % 251) as u8 + 1).collect();
    t.ma.set_local(1, data.clone());
    t.a.post_send(SendWr::write(1, 2500, 0x1000, 0x77)).unwrap();
    let pkts: Vec<_> = t.out_a().into_iter().filter(is_data).collect();
    assert_eq!(pkts.len(), 3);
    t.deliver_b(&pkts[2]);
    let r = t.mb.region(0x77);
    assert_eq!(
        &r[2048..2500 - 64],
        &data[2048..2500 - 64],
        "head of the last packet placed at once"
    );
    assert!(
        r[2500 - 64..2500].iter().all(|b| *b == 0),
        "final bytes held back"
    );
    t.deliver_b(&pkts[0]);
    assert!(t.mb.region(0x77)[2499] == 0);
    t.deliver_b(&pkts[1]);
    assert_eq!(&t.mb.region(0x77)[..2500], &data[..]);
    t.run(3);
    let c = t.comps_a();
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].opcode),
        (1, WcStatus::Success, WcOpcode::RdmaWrite)
    );
}

/// WRITE, SEND and READ of several packets each, with every datagram handed in
/// as one buffer or in many pieces: the same bytes land in the same places and
/// the same completions follow.
#[test]
fn datagrams_received_in_pieces_place_the_same_bytes() {
    let run = |scatter: bool| {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 253) as u8 + 1).collect();
        let mut t = Pair::write_send_read(&data);
        t.scatter = scatter;
        t.run(40);
        let (ca, cb) = (t.comps_a(), t.comps_b());
        let read_back = t.ma.local[&3].clone();
        (
            t.mb.region(0x77)[..6000].to_vec(),
            t.mb.recv[&60].clone(),
            read_back,
            ca,
            cb,
            data,
        )
    };
    let whole = run(false);
    let pieces = run(true);
    let (region, recv, read, ca, cb, data) = &pieces;
    // (`assert!` on the buffers: a mismatch would print thousands of bytes.)
    assert!(region[..5000] == data[..], "WRITE placed");
    assert!(recv[..3333] == data[..3333], "SEND placed");
    assert!(
        read.get(..4500) == data.get(0x100..0x100 + 4500),
        "READ response placed"
    );
    assert_eq!(ca.len(), 3, "{ca:?}");
    assert!(ca.iter().all(|c| c.status == WcStatus::Success), "{ca:?}");
    assert_eq!(cb.len(), 1, "{cb:?}");
    assert!(whole == pieces, "the same bytes and completions either way");
}

#[test]
fn write_with_imm_completes_after_earlier_writes() {
    // Spec: MR-4.3.2 — NCCL's write chain + write-with-imm.
    let mut t = Pair::new(|c| c.mtu = 1024);
    t.ma.set_local(1, vec![7; 3000]);
    t.ma.set_local(2, vec![9; 10]);
    t.mb.set_recv(50, 0);
    t.b.post_recv(RecvWr { wr_id: 50, len: 0 }).unwrap();
    t.a.post_send(SendWr::write(1, 3000, 0x1000, 0x77)).unwrap();
    t.a.post_send(SendWr::write_imm(2, 10, 0x3000, 0x77, 0xfeed))
        .unwrap();
    let pkts: Vec<_> = t.out_a().into_iter().filter(is_data).collect();
    assert_eq!(pkts.len(), 4);
    // The write-with-imm arrives first, then the tail of the write.
    t.deliver_b(&pkts[3]);
    t.deliver_b(&pkts[2]);
    assert!(
        t.comps_b().is_empty(),
        "no completion before the earlier write is placed"
    );
    assert_eq!(
        t.mb.region(0x77)[0x2000 + 9],
        0,
        "write-imm tail held back too"
    );
    t.deliver_b(&pkts[0]);
    t.deliver_b(&pkts[1]);
    let c = t.comps_b();
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].wr_id, c[0].opcode, c[0].imm, c[0].byte_len),
        (50, WcOpcode::RecvRdmaWithImm, Some(0xfeed), 10)
    );
    assert!(t.mb.region(0x77)[..3000].iter().all(|b| *b == 7));
    assert!(t.mb.region(0x77)[0x2000..0x2000 + 10]
        .iter()
        .all(|b| *b == 9));
}

#[test]
fn duplicates_are_suppressed_and_atomics_run_once() {
    // Spec: MR-5.2.2, MR-5.6.1.
    let mut t = Pair::new(|_| {});
    t.a.post_send(SendWr::faa(1, 0x1000, 0x77, 5)).unwrap();
    t.a.post_send(SendWr::cas(2, 0x1008, 0x77, 0, 42)).unwrap();
    for _ in 0..4 {
        let pa = t.out_a();
        for p in pa.iter().chain(pa.iter()) {
            t.deliver_b(p);
        }
        let pb = t.out_b();
        for p in pb.iter().chain(pb.iter()).chain(pb.iter()) {
            t.deliver_a(p);
        }
        t.tick(1_000);
    }
    assert_eq!(t.mb.atomics_executed, 2);
    let c = t.comps_a();
    assert_eq!(c.iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(
        u64::from_ne_bytes(t.mb.region(0x77)[..8].try_into().unwrap()),
        5
    );
    assert_eq!(
        u64::from_ne_bytes(t.mb.region(0x77)[8..16].try_into().unwrap()),
        42
    );
    assert_eq!(
        u64::from_ne_bytes(t.ma.local[&1][..8].try_into().unwrap()),
        0
    );
    assert!(t.b.stats().rx_dup >= 2);
}

#[test]
fn lost_atomic_response_is_replayed_from_cache() {
    // Spec: MR-5.6.2 — the response is retransmitted, the atomic is not re-run.
    let mut t = Pair::new(|_| {});
    t.a.post_send(SendWr::faa(1, 0x1000, 0x77, 1)).unwrap();
    let pa = t.out_a();
    for p in &pa {
        t.deliver_b(p);
    }
    let _dropped = t.out_b(); // ACK + ATOMIC_RESP lost
    t.run(400);
    assert_eq!(t.mb.atomics_executed, 1);
    let c = t.comps_a();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].status, WcStatus::Success);
    assert!(t.b.stats().tx_retx >= 1);
}

#[test]
fn zero_length_reads_and_writes_are_not_checked() {
    // Spec: MR-9.2.1 — a READ or WRITE of zero bytes accesses no memory, so
    // its R_Key and address are not checked (an unknown key, an address far
    // outside the region, one that would wrap); an atomic always is.
    let mut t = Pair::new(|_| {});
    t.ma.set_local(9, vec![7; 8]);
    t.a.post_send(SendWr::write(1, 0, u64::MAX, 0xbad)).unwrap();
    t.a.post_send(SendWr::read(2, 0, 0xdead_0000, 0xbad)).unwrap();
    t.a.post_send(SendWr::write_imm(3, 0, 0, 0, 0x1234)).unwrap();
    t.a.post_send(SendWr::write(4, 8, 0x1000, 0x77)).unwrap();
    t.mb.set_recv(60, 0);
    t.b.post_recv(RecvWr { wr_id: 60, len: 0 }).unwrap();
    t.ma.set_local(4, vec![7; 8]);
    t.run(5);
    let st: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
    let ok = WcStatus::Success;
    assert_eq!(st, vec![(1, ok), (2, ok), (3, ok), (4, ok)]);
    let recv: Vec<_> = t.comps_b().iter().map(|c| (c.wr_id, c.status, c.imm)).collect();
    assert_eq!(recv, vec![(60, ok, Some(0x1234))]);
    assert_eq!(&t.mb.region(0x77)[..8], &[7; 8]);
    assert_eq!(t.mb.writes, 1, "only the 8-byte WRITE touched memory");
    // Once the READ has completed (a fatal NAK flushes a READ whose response
    // has not arrived, MR-7.3.3), an atomic with the same key fails.
    t.a.post_send(SendWr::faa(5, 0xdead_0000, 0xbad, 1)).unwrap();
    t.run(5);
    let st: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st, vec![(5, WcStatus::RemAccessErr)]);
}

#[test]
fn responses_before_a_failed_message_go_out_before_its_nak() {
    // Spec: MR-7.3.2, MR-7.3.3 — the responder executed the READ and the
    // atomic before the failing WRITE: their responses are acknowledged
    // before the fatal NAK is sent, so both complete successfully, with their
    // data, and only the WRITE fails (as on InfiniBand, where the responses
    // precede the NAK on the wire).
    let mut t = Pair::new(|_| {});
    t.mb.range(0x77, 0x1000, 8).unwrap().copy_from_slice(&[9; 8]);
    t.ma.set_local(2, vec![0; 64]);
    t.ma.set_local(4, vec![1; 16]);
    t.a.post_send(SendWr::read(2, 64, 0x1000, 0x77)).unwrap();
    t.a.post_send(SendWr::faa(3, 0x1100, 0x77, 1)).unwrap();
    t.a.post_send(SendWr::write(4, 16, 0xdead_0000, 0xbad)).unwrap();
    t.a.post_send(SendWr::send(5, 0)).unwrap();
    // The responder finds the WRITE in error before any response is
    // acknowledged: it sends the responses, but no NAK yet.
    let out = t.out_a();
    for p in &out {
        t.deliver_b(p);
    }
    assert_eq!(t.b.state(), QpState::Rts);
    let answers = t.out_b();
    let naks = answers.iter().filter(|p| matches!(wire::PacketRepr::parse(&p.1).map(|r| r.body),
        Ok(wire::Body::Ack(a)) if a.syndrome.is_some_and(|s| s.is_fatal()))).count();
    assert_eq!(naks, 0, "a fatal NAK before the responses were acknowledged");
    for p in &answers {
        t.deliver_a(p);
    }
    t.run(10);
    let st: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        st,
        vec![(2, WcStatus::Success), (3, WcStatus::Success), (4, WcStatus::RemAccessErr), (5, WcStatus::WrFlushErr)]
    );
    assert_eq!(&t.ma.local[&2][..8], &[9; 8]);
    assert_eq!(t.b.state(), QpState::Error);
}

#[test]
fn access_error_naks_and_flushes() {
    // Spec: MR-7.3.2, MR-7.3.3.
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, vec![1; 100]);
    t.ma.set_local(2, vec![1; 100]);
    t.ma.set_local(3, vec![1; 100]);
    t.a.post_send(SendWr::write(1, 100, 0x1000, 0x77)).unwrap();
    t.a.post_send(SendWr::write(2, 100, 0x1000, 0xbad)).unwrap();
    t.a.post_send(SendWr::write(3, 100, 0x1000, 0x77)).unwrap();
    t.run(5);
    let c = t.comps_a();
    let st: Vec<_> = c.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        st,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::RemAccessErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(t.a.state(), QpState::Error);
    assert_eq!(t.b.state(), QpState::Error);
    // Posting to an errored QP completes with flush.
    t.a.post_send(SendWr::send(4, 0)).unwrap();
    assert_eq!(t.a.poll_completion().unwrap().status, WcStatus::WrFlushErr);
}

#[test]
fn uc_carries_sends_and_writes_only() {
    // Spec: MR-4.6.1.
    let mut t = Pair::new(|c| c.uc = true);
    for wr in [
        SendWr::read(1, 8, 0x1000, 0x77),
        SendWr::faa(2, 0x1000, 0x77, 1),
        SendWr::cas(3, 0x1000, 0x77, 0, 1),
    ] {
        assert_eq!(t.a.post_send(wr), Err(PostError::Invalid));
    }
    t.ma.set_local(4, vec![4; 100]);
    t.ma.set_local(5, b"uc send".to_vec());
    t.mb.set_recv(9, 64);
    t.b.post_recv(RecvWr { wr_id: 9, len: 64 }).unwrap();
    t.a.post_send(SendWr::write(4, 100, 0x1000, 0x77)).unwrap();
    t.a.post_send(SendWr::send(5, 7)).unwrap();
    t.run(5);
    let st: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st, vec![(4, WcStatus::Success), (5, WcStatus::Success)]);
    assert_eq!(&t.mb.region(0x77)[..100], &[4; 100][..]);
    let r = t.comps_b();
    assert_eq!((r.len(), r[0].wr_id, r[0].byte_len), (1, 9, 7));
}

#[test]
fn uc_drops_a_write_it_cannot_place_and_goes_on() {
    // Spec: MR-4.6.2 — no NAK, both QPs stay up, the requester completes it.
    let mut t = Pair::new(|c| c.uc = true);
    t.ma.set_local(1, vec![1; 100]);
    t.ma.set_local(2, vec![2; 100]);
    t.ma.set_local(3, vec![3; 100]);
    t.a.post_send(SendWr::write(1, 100, 0x1000, 0xbad)).unwrap();
    t.a.post_send(SendWr::write(2, 100, 0x1000 + (1 << 16) - 50, 0x77)).unwrap();
    t.a.post_send(SendWr::write(3, 100, 0x1000, 0x77)).unwrap();
    t.run(5);
    let st: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st, vec![(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]);
    assert_eq!((t.a.state(), t.b.state()), (QpState::Rts, QpState::Rts));
    assert_eq!(t.b.stats().uc_dropped, 2);
    assert_eq!(&t.mb.region(0x77)[..100], &[3; 100][..]);
    assert!(t.mb.region(0x77)[(1 << 16) - 50..].iter().all(|b| *b == 0));
    // The same on RC is a fatal NAK (access_error_naks_and_flushes).
}

#[test]
fn uc_drops_a_long_write_whose_first_packet_fails() {
    // Spec: MR-4.6.2 — an eight-packet WRITE to an unknown key fails at its
    // first packet and is dropped at once; its other packets arrive after that
    // and must still be acknowledged.
    let mut t = Pair::new(|c| {
        c.uc = true;
        c.mtu = 1024;
    });
    let long = 8 * 1024;
    t.ma.set_local(1, vec![1; long]);
    t.ma.set_local(2, vec![2; 100]);
    t.a.post_send(SendWr::write(1, long as u32, 0x1000, 0xbad)).unwrap();
    t.a.post_send(SendWr::write(2, 100, 0x1000, 0x77)).unwrap();
    t.run(50);
    let st: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st, vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!((t.a.state(), t.b.state()), (QpState::Rts, QpState::Rts));
    assert_eq!(t.b.stats().uc_dropped, 1);
    assert_eq!(t.a.stats().rto, 0);
    assert_eq!(&t.mb.region(0x77)[..100], &[2; 100][..]);
}

/// Runs `t` with timers until both sides are quiet (a round moves no packet
/// and neither has a deadline), resuming `b`'s delivery each round as a driver
/// does once a fault is served.
fn run_serving_faults(t: &mut Pair) {
    for _ in 0..10_000 {
        t.b.resume_delivery(Instant(t.now), &mut t.mb);
        t.a.resume_delivery(Instant(t.now), &mut t.ma);
        let moved = t.round(1_000);
        if !moved && t.a.poll_timeout().is_none() && t.b.poll_timeout().is_none() {
            return;
        }
        t.advance_until(t.now + 1_000_000_000);
    }
    panic!("no quiet");
}

#[test]
fn responder_faults_are_retried_never_failed() {
    // Spec: MR-9.2.5 — packets whose memory is not resident are refused as if
    // lost and resent; nothing fails, every byte lands once.
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    for faults in [1, 2, 5, 9] {
        let mut t = Pair::write_send_read(&data);
        t.mb.faults = faults;
        run_serving_faults(&mut t);
        let st: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(st, vec![(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)], "faults {faults}");
        assert_eq!(&t.mb.region(0x77)[..5000], &data[..]);
        assert_eq!(&t.mb.recv[&60][..3333], &data[..3333]);
        assert_eq!(&t.ma.local[&3][..4500], &data[0x100..0x100 + 4500]);
        assert_eq!(t.mb.faulted, faults);
        let s = t.b.stats();
        assert!(s.rx_faults + s.tx_faults + s.delivery_faults >= 1);
        assert_eq!((t.a.state(), t.b.state()), (QpState::Rts, QpState::Rts));
    }
}

#[test]
fn requester_faults_are_retried_never_failed() {
    // Spec: MR-9.2.5 — a payload that cannot be gathered now, and READ data
    // that cannot be scattered now, are resent.
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 13) as u8).collect();
    for faults in [1, 3, 6] {
        let mut t = Pair::write_send_read(&data);
        t.ma.faults = faults;
        run_serving_faults(&mut t);
        let st: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(st, vec![(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)], "faults {faults}");
        assert_eq!(&t.mb.region(0x77)[..5000], &data[..]);
        assert_eq!(&t.ma.local[&3][..4500], &data[0x100..0x100 + 4500]);
        assert_eq!(t.a.stats().tx_faults, u64::from(faults));
        assert_eq!((t.a.state(), t.b.state()), (QpState::Rts, QpState::Rts));
    }
}

#[test]
fn an_atomic_on_absent_memory_waits_for_resume_and_runs_once() {
    // Spec: MR-9.2.5, MR-5.6.1 — delivery stops at the atomic until resumed;
    // the atomic then executes exactly once.
    let mut t = Pair::new(|_| {});
    t.mb.regions.get_mut(&0x77).unwrap().1[..8].copy_from_slice(&5u64.to_ne_bytes());
    t.a.post_send(SendWr::faa(1, 0x1000, 0x77, 3)).unwrap();
    t.mb.faults = 1;
    t.run(5);
    assert_eq!(t.b.stats().delivery_faults, 1);
    assert!(t.comps_a().is_empty());
    assert_eq!(t.mb.atomics_executed, 0);
    t.b.resume_delivery(Instant(t.now), &mut t.mb);
    t.run(5);
    let c = t.comps_a();
    assert_eq!((c.len(), c[0].status), (1, WcStatus::Success));
    assert_eq!(t.mb.atomics_executed, 1);
    assert_eq!(&t.ma.local[&1][..8], &5u64.to_ne_bytes());
    assert_eq!(&t.mb.region(0x77)[..8], &8u64.to_ne_bytes());
}

#[test]
fn delivery_waits_for_copies_still_under_way() {
    // Spec: MR-10.1.3 — while the responder's copies are not done, no message
    // is delivered: no tail placed (MR-4.3.3), no receive completion, no
    // atomic executed, no delivery reported to the requester; all of it once
    // delivery resumes.
    let mut t = Pair::new(|_| {});
    t.mb.regions.get_mut(&0x77).unwrap().1[0x800..0x808].copy_from_slice(&5u64.to_ne_bytes());
    t.ma.set_local(1, vec![1; 300]);
    t.ma.set_local(2, vec![2; 10]);
    t.mb.set_recv(60, 100);
    t.b.post_recv(RecvWr { wr_id: 60, len: 100 }).unwrap();
    t.a.post_send(SendWr::write(1, 300, 0x1000, 0x77)).unwrap();
    t.a.post_send(SendWr::send(2, 10)).unwrap();
    t.a.post_send(SendWr::faa(3, 0x1800, 0x77, 3)).unwrap();
    t.mb.unplaced = true;
    t.run(5);
    assert!(t.comps_a().is_empty());
    assert!(t.comps_b().is_empty());
    assert_eq!(t.mb.atomics_executed, 0);
    // Everything but the WRITE's last 64 bytes is in (placed on arrival).
    assert_eq!(&t.mb.region(0x77)[..236], &[1; 236][..]);
    assert!(t.mb.region(0x77)[236..300].iter().all(|b| *b == 0));
    t.mb.unplaced = false;
    t.b.resume_delivery(Instant(t.now), &mut t.mb);
    t.run(5);
    let st: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st, vec![(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]);
    assert_eq!(t.comps_b().len(), 1);
    assert_eq!(&t.mb.region(0x77)[..300], &[1; 300][..]);
    assert_eq!(t.mb.atomics_executed, 1);
    assert_eq!(&t.mb.region(0x77)[0x800..0x808], &8u64.to_ne_bytes());
    assert_eq!(t.b.stats().delivery_faults, 0);
}

#[test]
fn out_of_bounds_and_misaligned_requests() {
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, vec![1; 100]);
    t.a.post_send(SendWr::write(1, 100, u64::MAX - 10, 0x77))
        .unwrap();
    t.run(5);
    assert_eq!(t.comps_a()[0].status, WcStatus::RemAccessErr);
    let mut t = Pair::new(|_| {});
    assert_eq!(
        t.a.post_send(SendWr::faa(1, 0x1001, 0x77, 1)),
        Err(PostError::Invalid)
    );
}

#[test]
fn receive_length_error() {
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, vec![1; 100]);
    t.mb.set_recv(9, 10);
    t.b.post_recv(RecvWr { wr_id: 9, len: 10 }).unwrap();
    t.a.post_send(SendWr::send(1, 100)).unwrap();
    t.run(5);
    assert_eq!(t.comps_a()[0].status, WcStatus::RemInvReqErr);
    assert_eq!(t.comps_b()[0].status, WcStatus::LocLenErr);
}

#[test]
fn rnr_then_success() {
    // Spec: MR-4.2.4, MR-4.2.5.
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, b"late".to_vec());
    t.a.post_send(SendWr::send(1, 4)).unwrap();
    t.run(3);
    assert!(t.b.stats().rnr_naks >= 1);
    assert!(t.comps_a().is_empty());
    t.mb.set_recv(9, 16);
    t.b.post_recv(RecvWr { wr_id: 9, len: 16 }).unwrap();
    t.run(200);
    assert_eq!(t.comps_a()[0].status, WcStatus::Success);
    assert_eq!(&t.mb.recv[&9][..4], b"late");
}

#[test]
fn rnr_retry_exceeded() {
    let mut t = Pair::new(|c| c.rnr_retry = 2);
    t.ma.set_local(1, b"x".to_vec());
    t.a.post_send(SendWr::send(1, 1)).unwrap();
    t.run(2_000);
    let c = t.comps_a();
    assert_eq!(c[0].status, WcStatus::RnrRetryExcErr);
}

/// Runs the pair's network and timers for `ns` of simulated time in `step` increments.
fn run_for(t: &mut Pair, ns: u64, step: u64) {
    let end = t.now + ns;
    while t.now < end {
        t.round(step);
    }
}

#[test]
fn rnr_waits_do_not_use_up_transport_retries() {
    // Spec: MR-4.2.5, MR-5.5.3 — a receiver without a receive WQE answers with
    // RNR NAKs for far longer than the connection RTO times `retry_cnt`: with
    // infinite RNR retries the requester waits, resends, and never reports
    // RETRY_EXC_ERR, whether the RNR timer is shorter or longer than the RTO.
    // (rdma-core's test_rc_srq_traffic met "Retry exceeded" this way.)
    for code in [40u8, metaroce_proto::wire::rnr_timer_code(2_000_000)] {
        let mut t = Pair::new(|c| {
            c.retry_cnt = 1;
            c.rnr_retry = 7;
            c.min_rnr_timer = code;
        });
        t.ma.set_local(1, b"patient".to_vec());
        t.a.post_send(SendWr::send(1, 7)).unwrap();
        // 50 ms: 250 minimum RTOs, many backed-off ones, many RNR cycles.
        run_for(&mut t, 50_000_000, 20_000);
        assert!(t.b.stats().rnr_naks >= 10, "code {code}: {:?}", t.b.stats());
        assert_eq!(
            t.comps_a(),
            vec![],
            "code {code}: the send must still be waiting"
        );
        assert_eq!(t.a.state(), QpState::Rts, "code {code}");
        t.mb.set_recv(9, 16);
        t.b.post_recv(RecvWr { wr_id: 9, len: 16 }).unwrap();
        run_for(&mut t, 10_000_000, 20_000);
        let c = t.comps_a();
        assert_eq!(c.len(), 1, "code {code}");
        assert_eq!(
            (c[0].wr_id, c[0].status),
            (1, WcStatus::Success),
            "code {code}"
        );
        assert_eq!(&t.mb.recv[&9][..7], b"patient");
        assert_eq!(t.comps_b()[0].status, WcStatus::Success);
    }
}

#[test]
fn retry_exceeded_when_peer_is_gone() {
    // Spec: MR-5.5.3.
    let mut t = Pair::new(|c| c.retry_cnt = 3);
    t.ma.set_local(1, vec![0; 10]);
    t.a.post_send(SendWr::write(1, 10, 0x1000, 0x77)).unwrap();
    t.a.post_send(SendWr::write(2, 0, 0x1000, 0x77)).unwrap();
    for _ in 0..100_000 {
        let _ = t.out_a();
        let Some(d) = t.a.poll_timeout() else { break };
        t.now = d.as_nanos().max(t.now);
        t.a.handle_timeout(Instant(t.now));
    }
    let c = t.comps_a();
    assert_eq!(
        c.iter().map(|c| c.status).collect::<Vec<_>>(),
        vec![WcStatus::RetryExcErr, WcStatus::WrFlushErr]
    );
    assert!(t.a.stats().rto >= 3);
}

#[test]
fn fence_waits_for_reads() {
    // Spec: MR-4.4.3.
    let mut t = Pair::new(|_| {});
    t.a.post_send(SendWr::read(1, 64, 0x1000, 0x77)).unwrap();
    t.ma.set_local(2, vec![3; 8]);
    t.a.post_send(SendWr::write(2, 8, 0x1000, 0x77).with_flags(WR_SIGNALED | WR_FENCE))
        .unwrap();
    let first = t.out_a();
    assert_eq!(
        first.iter().filter(|p| is_data(p)).count(),
        1,
        "fenced write must wait"
    );
    for p in &first {
        t.deliver_b(p);
    }
    t.run(5);
    let c = t.comps_a();
    assert_eq!(c.iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![1, 2]);
    assert!(
        t.ma.local[&1].iter().all(|b| *b == 0),
        "read saw memory before the fenced write"
    );
}

#[test]
fn read_observes_earlier_write() {
    // Spec: MR-4.4.1 — reads execute at their turn in message order.
    let mut t = Pair::new(|c| c.mtu = 1024);
    t.ma.set_local(1, vec![5; 2000]);
    t.a.post_send(SendWr::write(1, 2000, 0x1000, 0x77)).unwrap();
    t.a.post_send(SendWr::read(2, 2000, 0x1000, 0x77)).unwrap();
    let pkts: Vec<_> = t.out_a().into_iter().filter(is_data).collect();
    assert_eq!(pkts.len(), 3);
    t.deliver_b(&pkts[2]);
    t.deliver_b(&pkts[1]);
    t.deliver_b(&pkts[0]);
    t.run(5);
    assert_eq!(t.ma.local[&2], vec![5; 2000]);
}

#[test]
fn send_with_invalidate_and_solicited() {
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, vec![1; 4]);
    t.mb.set_recv(9, 16);
    t.b.post_recv(RecvWr { wr_id: 9, len: 16 }).unwrap();
    let mut wr = SendWr::send(1, 4);
    wr.opcode = WrOpcode::SendInv;
    wr.imm = 0x1234;
    wr.flags |= WR_SOLICITED;
    t.a.post_send(wr).unwrap();
    t.run(4);
    let c = t.comps_b();
    assert_eq!(
        (c[0].invalidated_rkey, c[0].solicited),
        (Some(0x1234), true)
    );
    assert_eq!(t.mb.invalidated, vec![0x1234]);
}

#[test]
fn read_response_rebuilt_after_the_requester_invalidated_its_rkey() {
    // Spec: MR-5.6.5 — the requester completed a READ (its ACKs of the responses
    // were lost) and invalidated the R_Key with a SEND_INV; the responder's
    // retransmission of the responses can no longer read the memory. It NAKs
    // instead, without failing, and the requester discards that NAK: the
    // connection goes on and the retransmission is acknowledged by the next ACK.
    let mut t = Pair::new(|c| {
        c.mtu = 1024;
        c.ack_every = 1;
    });
    t.mb.regions.get_mut(&0x77).unwrap().1[..2000].fill(7);
    t.mb.set_recv(9, 16);
    t.b.post_recv(RecvWr { wr_id: 9, len: 16 }).unwrap();
    t.a.post_send(SendWr::read(1, 2000, 0x1000, 0x77)).unwrap();
    for p in t.out_a() {
        t.deliver_b(&p);
    }
    let rsp = t.out_b();
    assert_eq!(rsp.iter().filter(|p| is_data(p)).count(), 2);
    for p in &rsp {
        t.deliver_a(p);
    }
    let c = t.comps_a();
    assert_eq!((c.len(), c[0].wr_id, c[0].status), (1, 1, WcStatus::Success));
    assert_eq!(t.ma.local[&1], vec![7; 2000]);
    // A's ACKs of the responses (one per packet: none is left to ride on the
    // SEND_INV) are lost.
    let lost_acks = t.out_a();
    assert!(!lost_acks.is_empty() && lost_acks.iter().all(|p| !is_data(p)));
    t.ma.set_local(2, vec![1; 4]);
    let mut wr = SendWr::send(2, 4);
    wr.opcode = WrOpcode::SendInv;
    wr.imm = 0x77;
    t.a.post_send(wr).unwrap();
    for p in t.out_a() {
        t.deliver_b(&p);
    }
    assert_eq!(t.mb.invalidated, vec![0x77], "the SEND_INV was not delivered");
    // The responses' retransmission (a tail probe, a path timeout or the RTO)
    // comes due; it and everything after it are delivered from here on.
    let resends = |c: &Connection| c.stats().tlp + c.stats().path_timeouts + c.stats().rto;
    let end = t.now + 2_000_000_000;
    while resends(&t.b) == 0 && t.now < end {
        t.advance_until(end);
        for p in t.out_b() {
            t.deliver_a(&p);
        }
        for p in t.out_a() {
            t.deliver_b(&p);
        }
    }
    assert!(resends(&t.b) > 0, "the responses were never retransmitted");
    t.run(20);
    assert!(t.a.stats().rx_stale_naks >= 1, "the requester saw no stale NAK");
    // The requester answers the stale NAK with an ACK covering the responses:
    // with every packet delivered and timers firing for a second, nothing is
    // resent again (without that ACK the path times out and resends).
    let end = t.now + 1_000_000_000;
    for _ in 0..100 {
        t.advance_until(end);
        t.run(1);
    }
    let b = t.b.stats();
    assert_eq!((b.stale_read_naks, b.path_timeouts), (1, 0), "resent after the stale NAK");
    assert_eq!(t.b.state(), QpState::Rts, "the responder failed");
    assert_eq!(t.a.state(), QpState::Rts, "the requester failed");
    let c = t.comps_a();
    assert_eq!(c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(2, WcStatus::Success)]);
    let c = t.comps_b();
    assert_eq!(c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(9, WcStatus::Success)]);
    // Nothing is left to retransmit: a later WRITE completes on a quiet link.
    t.ma.set_local(3, vec![3; 8]);
    t.mb.add_region(0x78, 0x2000, 64);
    t.a.post_send(SendWr::write(3, 8, 0x2000, 0x78)).unwrap();
    t.run(10);
    let c = t.comps_a();
    assert_eq!(c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(3, WcStatus::Success)]);
    assert_eq!(&t.mb.region(0x78)[..8], &[3; 8]);
}

#[test]
fn read_response_rebuild_failure_fails_a_waiting_requester() {
    // Spec: MR-5.6.5 — the other case: the responses were lost and the
    // responder's memory went away before their retransmission. The requester
    // still waits for the READ, so the NAK fails it with a remote access error.
    let mut t = Pair::new(|c| c.mtu = 1024);
    t.a.post_send(SendWr::read(1, 2000, 0x1000, 0x77)).unwrap();
    for p in t.out_a() {
        t.deliver_b(&p);
    }
    let lost = t.out_b();
    assert_eq!(lost.iter().filter(|p| is_data(p)).count(), 2);
    t.mb.regions.remove(&0x77);
    let end = t.now + 2_000_000_000;
    while t.a.state() == QpState::Rts && t.now < end {
        t.advance_until(end);
        t.run(1);
    }
    let c = t.comps_a();
    assert_eq!(c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(1, WcStatus::RemAccessErr)]);
    assert_eq!((t.b.stats().stale_read_naks, t.a.stats().rx_stale_naks), (1, 0));
}

#[test]
fn set_error_flushes_receives() {
    let mut t = Pair::new(|_| {});
    t.b.post_recv(RecvWr { wr_id: 1, len: 4 }).unwrap();
    t.b.post_recv(RecvWr { wr_id: 2, len: 4 }).unwrap();
    t.b.set_error();
    let c = t.comps_b();
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
}

#[test]
fn foreign_qpn_and_bad_path_are_ignored() {
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, vec![1; 4]);
    t.a.post_send(SendWr::write(1, 4, 0x1000, 0x77)).unwrap();
    let p = t.out_a();
    let mut wrong = p[0].1.clone();
    wrong[7] ^= 1; // destination QPN
    t.b.handle_datagram(Instant(t.now), 1, false, &wrong, &mut t.mb);
    let mut badpath = p[0].1.clone();
    badpath[3] = 9; // path 9 >= num_paths
    t.b.handle_datagram(Instant(t.now), 1, false, &badpath, &mut t.mb);
    assert_eq!(t.b.stats().rx_invalid, 2);
    assert_eq!(t.b.stats().rx_malformed, 0, "well formed, misaddressed");
    assert_eq!(t.mb.writes, 0);
}

#[test]
fn sprays_over_all_paths_with_distinct_ports() {
    // Spec: MR-6.1.1, MR-6.2.2.
    let mut t = Pair::new(|c| c.mtu = 1024);
    t.ma.set_local(1, vec![1; 16 * 1024]);
    t.a.post_send(SendWr::write(1, 16 * 1024, 0x1000, 0x77))
        .unwrap();
    let p = t.out_a();
    let mut ports: Vec<u16> = p.iter().map(|p| p.0).collect();
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), 4);
    assert!(ports.iter().all(|p| *p >= 0xC000 && *p != 4791));
    assert_eq!(UDP_PORT, 4792);
}

#[test]
fn reset_in_place_reuses_a_connection() {
    // Spec: MR-10.2.2.
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, vec![4; 100]);
    t.a.post_send(SendWr::write(1, 100, 0x1000, 0x77)).unwrap();
    t.b.set_error();
    t.run(3);
    assert_eq!(t.a.state(), QpState::Rts);
    t.a.reset(Config::test_pair(1, 2));
    t.b.reset(Config::test_pair(2, 1));
    let _ = t.comps_b();
    t.a.post_send(SendWr::write(1, 100, 0x1000, 0x77)).unwrap();
    t.run(3);
    assert_eq!(t.comps_a().last().unwrap().status, WcStatus::Success);
    assert_eq!(t.mb.region(0x77)[99], 4);
}

#[test]
fn short_probe_is_ignored_padded_probe_answered() {
    // Spec: MR-9.3.3, MR-6.4.2.
    let mut t = Pair::new(|_| {});
    let mut probe = vec![0u8; 88];
    probe[..20].copy_from_slice(&[
        0x10, 0x21, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9,
    ]);
    t.b.handle_datagram(Instant(t.now), 0xC001, false, &probe[..20], &mut t.mb);
    assert!(t.out_b().is_empty());
    t.b.handle_datagram(Instant(t.now), 0xC001, false, &probe, &mut t.mb);
    let r = t.out_b();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, 0xC001, "reply mirrors the probe's source port");
    assert_eq!(r[0].1.len(), 88);
}

#[test]
fn timers_never_spin() {
    // After handle_timeout(now) and draining poll_transmit, the next
    // deadline is strictly in the future: a driver never busy-loops.
    let mut rng = common::Rng::new(77);
    let mut t = Pair::new(|c| c.mtu = 1024);
    for i in 0..8u64 {
        t.ma.set_local(i, vec![i as u8; 5000]);
        t.mb.set_recv(100 + i, 8192);
        t.b.post_recv(RecvWr {
            wr_id: 100 + i,
            len: 8192,
        })
        .unwrap();
    }
    for i in 0..8u64 {
        let wr = match i % 4 {
            0 => SendWr::write(i, 5000, 0x1000, 0x77),
            1 => SendWr::send(i, 5000),
            2 => SendWr::read(i, 3000, 0x1000, 0x77),
            _ => SendWr::faa(i, 0x1000, 0x77, 1),
        };
        t.a.post_send(wr).unwrap();
    }
    let (mut held_a, mut held_b) = (vec![], vec![]);
    for _ in 0..20_000 {
        let mut pa = std::mem::take(&mut held_a);
        pa.extend(t.out_a());
        for p in &pa {
            if rng.below(4) != 0 {
                t.deliver_b(p);
            }
        }
        let mut pb = std::mem::take(&mut held_b);
        pb.extend(t.out_b());
        for p in &pb {
            if rng.below(4) != 0 {
                t.deliver_a(p);
            }
        }
        let next = [t.a.poll_timeout(), t.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = next else { break };
        t.now = next.as_nanos().max(t.now + 1);
        let now = Instant(t.now);
        for c in [&mut t.a, &mut t.b] {
            c.handle_timeout(now);
        }
        held_a = t.out_a();
        held_b = t.out_b();
        for c in [&t.a, &t.b] {
            if let Some(d) = c.poll_timeout() {
                assert!(d > now, "deadline {d:?} not after {now:?}");
            }
        }
    }
    let c = t.comps_a();
    assert_eq!(c.len(), 8, "{c:?}");
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
}

#[test]
fn peers_with_different_path_counts() {
    // Spec: MR-7.1.4 — each direction sprays over its sender's path count.
    let mut t = Pair::new(|_| {});
    let mut ca = Config::test_pair(1, 2);
    ca.num_paths = 8;
    ca.peer_num_paths = 2;
    let mut cb = Config::test_pair(2, 1);
    cb.num_paths = 2;
    cb.peer_num_paths = 8;
    t.a.reset(ca);
    t.b.reset(cb);
    t.ma.set_local(1, vec![9; 32 * 1024]);
    t.a.post_send(SendWr::write(1, 32 * 1024, 0x1000, 0x77))
        .unwrap();
    t.mb.set_local(2, vec![3; 32 * 1024]);
    t.mb.add_region(0x77, 0x1000, 1 << 16);
    t.ma.add_region(0x77, 0x1000, 1 << 16);
    t.b.post_send(SendWr::write(2, 32 * 1024, 0x1000, 0x77))
        .unwrap();
    t.run(20);
    assert_eq!(t.comps_a()[0].status, WcStatus::Success);
    assert_eq!(t.comps_b()[0].status, WcStatus::Success);
    assert_eq!(t.b.stats().rx_invalid, 0);
    assert_eq!(t.a.stats().rx_invalid, 0);
    assert!(t.mb.region(0x77)[..32 * 1024].iter().all(|b| *b == 9));
}

#[test]
fn max_rd_atomic_limits_outstanding_reads() {
    // Spec: MR-4.4.2, MR-7.1.4.
    let mut t = Pair::new(|c| c.max_rd_atomic = 2);
    for i in 0..4 {
        t.a.post_send(SendWr::read(i, 8, 0x1000, 0x77)).unwrap();
    }
    let first: Vec<_> = t.out_a().into_iter().filter(is_data).collect();
    assert_eq!(first.len(), 2, "only two READs may be outstanding");
    for p in &first {
        t.deliver_b(p);
    }
    t.run(6);
    assert_eq!(t.comps_a().len(), 4);
}

#[test]
fn discarded_packets_leave_no_trace() {
    // Spec: MR-5.2.4, MR-4.1.3, MR-9.4.2 — no answer, no ACK-state change.
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, vec![1; 10]);
    t.a.post_send(SendWr::write(1, 10, 0x1000, 0x77)).unwrap();
    let p = t.out_a().into_iter().find(is_data).unwrap();
    let tsn = u32::from_be_bytes(p.1[12..16].try_into().unwrap());
    let mut far = p.clone();
    far.1[12..16].copy_from_slice(&tsn.wrapping_add(300).to_be_bytes());
    t.deliver_b(&far);
    let mut msn_far = p.clone();
    msn_far.1[20..24].copy_from_slice(&1000u32.to_be_bytes()); // MSN outside the window
    t.deliver_b(&msn_far);
    assert!(t.out_b().is_empty(), "a discarded packet was answered");
    assert_eq!(t.mb.writes, 0);
    t.deliver_b(&p);
    let acks = t.out_b();
    assert_eq!(acks.len(), 1);
    // Received Count covers only the kept packet.
    assert_eq!(
        u16::from_be_bytes([acks[0].1[20 + 30], acks[0].1[20 + 31]]),
        1
    );
}

#[test]
fn disagreeing_packet_fails_the_message_with_nak_invalid() {
    // Spec: MR-4.1.4, MR-7.3.2.
    let mut t = Pair::new(|c| c.mtu = 1024);
    t.ma.set_local(1, vec![1; 3000]);
    t.a.post_send(SendWr::write(1, 3000, 0x1000, 0x77)).unwrap();
    let mut pkts: Vec<_> = t.out_a().into_iter().filter(is_data).collect();
    pkts[1].1[20 + 20] ^= 0xff; // R_Key of the second packet disagrees
    for p in &pkts {
        t.deliver_b(p);
    }
    t.run(4);
    assert_eq!(t.comps_a()[0].status, WcStatus::RemInvReqErr);
    assert_eq!(t.b.state(), QpState::Error);
}

#[test]
fn nak_names_a_packet_of_the_failed_message() {
    // Spec: MR-3.5.3 — errors found at the delivery turn (atomic execution).
    let mut t = Pair::new(|_| {});
    t.a.post_send(SendWr::faa(1, 0x1000, 0xbad, 1)).unwrap();
    let p = t.out_a().into_iter().find(is_data).unwrap();
    let tsn = u32::from_be_bytes(p.1[12..16].try_into().unwrap());
    t.deliver_b(&p);
    let out = t.out_b();
    let nak = out
        .iter()
        .find(|x| x.1[1] == 0x20 && x.1[24] != 0)
        .expect("a NAK");
    assert_eq!(nak.1[24], 3, "NAK-ACCESS");
    assert_eq!(u32::from_be_bytes(nak.1[32..36].try_into().unwrap()), tsn);
}

#[test]
fn data_path_ids_are_checked_against_the_peer_path_count() {
    // Spec: MR-7.1.4, MR-9.3.1 — a receiver accepts path ids below the
    // peer's advertised count (not its own), and only those.
    for (ours, peer, path, ok) in [
        (2u8, 8u8, 6u8, true),
        (8, 3, 3, false),
        (8, 3, 2, true),
        (2, 0, 2, false),
    ] {
        let mut t = Pair::new(|_| {});
        let mut ca = Config::test_pair(1, 2);
        ca.num_paths = 8;
        let mut cb = Config::test_pair(2, 1);
        cb.num_paths = ours;
        cb.peer_num_paths = peer;
        t.a.reset(ca);
        t.b.reset(cb);
        t.ma.set_local(1, vec![5; 10]);
        t.a.post_send(SendWr::write(1, 10, 0x1000, 0x77)).unwrap();
        let mut p = t.out_a().into_iter().find(is_data).unwrap();
        p.1[3] = (p.1[3] & 0xf0) | path;
        t.deliver_b(&p);
        let acks = t.out_b();
        assert_eq!(
            acks.len(),
            usize::from(ok),
            "ours {ours} peer {peer} path {path}"
        );
        assert_eq!(t.b.stats().rx_invalid, u64::from(!ok));
        assert_eq!(t.mb.writes, u64::from(ok));
    }
}

#[test]
fn ack_with_an_echo_path_beyond_our_paths_is_discarded() {
    // Spec: MR-3.5.1, MR-9.3.1 — EchoPth names one of our send paths.
    let mut t = Pair::new(|c| c.num_paths = 2);
    t.ma.set_local(1, vec![1; 10]);
    t.a.post_send(SendWr::write(1, 10, 0x1000, 0x77)).unwrap();
    let p = t.out_a().into_iter().find(is_data).unwrap();
    t.deliver_b(&p);
    let ack = t.out_b().pop().unwrap();
    for bad in [2u8, 7, 15] {
        let mut a = ack.clone();
        a.1[20 + 6] = (a.1[20 + 6] & 0xf0) | bad;
        t.deliver_a(&a);
        assert!(t.comps_a().is_empty(), "echo path {bad} accepted");
    }
    assert_eq!(t.a.stats().rx_invalid, 3);
    t.deliver_a(&ack);
    assert_eq!(t.comps_a().len(), 1);
}

#[test]
fn ack_echo_fields_update_the_echo_path_not_the_mrh_path() {
    // Spec: MR-3.5.1 — an ACK for path 1 carried with MRH path id 0: the RTT
    // sample belongs to path 1; path 0 keeps its initial estimate.
    let mut t = Pair::new(|c| c.num_paths = 2);
    let init0 = t.a.path_info(0).unwrap().srtt_ns;
    let init1 = t.a.path_info(1).unwrap().srtt_ns;
    t.ma.set_local(1, vec![1; 10]);
    t.a.post_send(SendWr::write(1, 10, 0x1000, 0x77)).unwrap();
    let p = t.out_a().into_iter().find(is_data).unwrap();
    let q = path_of(&p);
    t.deliver_b(&p);
    let mut ack = t.out_b().pop().unwrap();
    assert_eq!(ack.1[20 + 6] & 0x0f, q as u8);
    ack.1[3] = (ack.1[3] & 0xf0) | (1 - q) as u8; // travels on the other path
    t.now += 500_000;
    t.deliver_a(&ack);
    assert_eq!(t.comps_a().len(), 1);
    let s = [
        t.a.path_info(0).unwrap().srtt_ns,
        t.a.path_info(1).unwrap().srtt_ns,
    ];
    assert!(s[q] >= 490_000, "echo path {q} srtt {}", s[q]);
    assert_eq!(
        s[1 - q],
        [init0, init1][1 - q],
        "MRH path {} took the sample",
        1 - q
    );
}

#[test]
fn no_data_on_a_suspect_or_failed_path_while_an_active_one_exists() {
    // Spec: MR-6.3.1, MR-6.3.2, MR-6.2.2 — once path 1 has timed out
    // (suspect, then failed), neither new data nor retransmissions go to it
    // while other paths are active; only probes do. Everything sent on path
    // 1 is black-holed, the other three paths are perfect.
    let mut t = Pair::new(|c| c.mtu = 1024);
    let mut posted = 0u64;
    let post = |t: &mut Pair, posted: &mut u64| {
        t.ma.set_local(*posted, vec![*posted as u8; 4096]);
        t.a.post_send(SendWr::write(*posted, 4096, 0x1000, 0x77))
            .unwrap();
        *posted += 1;
    };
    for _ in 0..4 {
        post(&mut t, &mut posted);
    }
    let (mut done, mut seen_suspect, mut seen_failed) = (0u64, false, false);
    let (mut data_after, mut probes) = (0usize, 0usize);
    for round in 0..20_000 {
        // The status path 1 had when the packets of this round were chosen.
        let down = t.a.path_info(1).unwrap().status != PathStatus::Active;
        let others_active = [0, 2, 3]
            .iter()
            .any(|&q| t.a.path_info(q).unwrap().status == PathStatus::Active);
        for p in t.out_a() {
            if path_of(&p) != 1 {
                if down && is_data(&p) {
                    data_after += 1;
                }
                t.deliver_b(&p);
                continue;
            }
            if !is_data(&p) {
                probes += 1;
            }
            assert!(
                !(down && others_active && is_data(&p)),
                "round {round}: data packet (opcode {:#x}) on {:?} path 1 \
                 while another path is active",
                p.1[1],
                t.a.path_info(1).unwrap().status
            );
        }
        for p in t.out_b() {
            t.deliver_a(&p);
        }
        let st = t.a.path_info(1).unwrap().status;
        seen_suspect |= st == PathStatus::Suspect;
        seen_failed |= st == PathStatus::Failed;
        for c in t.comps_a() {
            assert_eq!(c.status, WcStatus::Success);
            done += 1;
        }
        // Keep new data coming while path 1 is down.
        if seen_suspect && posted < 40 && posted - done < 4 {
            post(&mut t, &mut posted);
        }
        if done == 40 {
            break;
        }
        // Next event: the earlier of 2 us and a's or b's next deadline.
        t.advance_until(t.now + 2_000);
    }
    assert_eq!(done, 40, "transfers did not complete");
    assert!(seen_suspect && seen_failed, "path 1 never timed out");
    assert!(probes > 0, "path 1 was never probed");
    assert!(data_after > 0, "no data was sent while path 1 was down");
    // Path 1 never delivered, so it has no RTT: overtaking alone does not fail a
    // path without one (MR-5.3.3); its own timer did.
    let st = t.a.stats();
    assert!(
        st.path_timeouts >= 1 && st.path_timeouts_overtaken == 0,
        "{st:?}"
    );
}

fn is_ack(p: &(u16, Vec<u8>)) -> bool {
    p.1[1] == 0x20
}

/// `n` request/response exchanges: A sends 8 bytes, B answers with 8 bytes
/// `turnaround` ns after A's request arrived, and so on. Every send must
/// complete by the time its answer is in. Returns the pair and the
/// standalone ACKs each side sent.
fn conversation(reply_wait_ns: u64, n: u64, turnaround: u64) -> (Pair, usize, usize) {
    let mut t = Pair::new(|c| {
        c.ack_delay = Duration::from_micros(100);
        c.reply_wait = Duration::from_nanos(reply_wait_ns);
    });
    let (mut acks_a, mut acks_b) = (0, 0);
    for i in 0..n {
        t.mb.set_recv(100 + i, 8);
        t.b.post_recv(RecvWr {
            wr_id: 100 + i,
            len: 8,
        })
        .unwrap();
        t.ma.set_recv(200 + i, 8);
        t.a.post_recv(RecvWr {
            wr_id: 200 + i,
            len: 8,
        })
        .unwrap();
        t.ma.set_local(i, vec![i as u8; 8]);
        t.a.post_send(SendWr::send(i, 8)).unwrap();
        for p in t.out_a() {
            acks_a += is_ack(&p) as usize;
            t.deliver_b(&p);
        }
        let mut got: Vec<_> = t.comps_b().iter().map(|c| (c.wr_id, c.status)).collect();
        // With the request comes the ACK of B's previous answer when B waited
        // for one (else it came alone, at once).
        got.retain(|g| i == 0 || *g != (1000 + i - 1, WcStatus::Success));
        assert_eq!(
            got,
            [(100 + i, WcStatus::Success)],
            "B received request {i}"
        );
        t.tick(turnaround);
        t.mb.set_local(1000 + i, vec![!(i as u8); 8]);
        t.b.post_send(SendWr::send(1000 + i, 8)).unwrap();
        for p in t.out_b() {
            acks_b += is_ack(&p) as usize;
            t.deliver_a(&p);
        }
        let mut got: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
        got.sort_by_key(|g| g.0);
        assert_eq!(
            got,
            [(i, WcStatus::Success), (200 + i, WcStatus::Success)],
            "A's send {i} completed with the answer"
        );
        t.tick(turnaround);
    }
    for p in t.out_a() {
        acks_a += is_ack(&p) as usize;
        t.deliver_b(&p);
    }
    (t, acks_a, acks_b)
}

#[test]
fn a_conversation_carries_its_acks_in_the_answers() {
    // Spec: MR-5.4.6, MR-3.7.6.
    let (t, acks_a, acks_b) = conversation(20_000, 50, 2_000);
    // B's first answer is acknowledged at once (B had sent nothing yet);
    // from then on every ACK rides on the next request or answer.
    assert!(acks_a + acks_b <= 1, "standalone ACKs: {acks_a} + {acks_b}");
    assert!(t.a.stats().tx_piggybacked >= 49 && t.b.stats().tx_piggybacked >= 49);
    assert_eq!(t.a.stats().tx_data + t.b.stats().tx_data, 100);
    // Without deferral every message is acknowledged alone.
    // Without deferral almost every message is acknowledged alone (a data
    // packet carries only an ACK that was already waiting for `ack_delay`).
    let (t0, acks_a, acks_b) = conversation(0, 50, 2_000);
    let carried = t0.a.stats().tx_piggybacked + t0.b.stats().tx_piggybacked;
    assert_eq!(acks_a + acks_b + carried as usize, 100);
    assert!(
        acks_a + acks_b >= 95,
        "standalone ACKs: {acks_a} + {acks_b}"
    );
}

#[test]
fn a_deferred_ack_goes_alone_when_no_answer_comes() {
    // Spec: MR-5.4.6 — a deferred ACK is sent by its deadline.
    let wait = 20_000;
    let (mut t, ..) = conversation(wait, 2, 2_000);
    // A one-way message: B is in a conversation, so it waits for an answer.
    t.ma.set_local(7, vec![7; 8]);
    t.mb.set_recv(77, 8);
    t.b.post_recv(RecvWr { wr_id: 77, len: 8 }).unwrap();
    t.a.post_send(SendWr::send(7, 8)).unwrap();
    let arrival = t.now;
    for p in t.out_a() {
        t.deliver_b(&p);
    }
    assert!(t.out_b().is_empty(), "no ACK before the deadline");
    assert_eq!(t.b.poll_timeout(), Some(Instant(arrival + wait)));
    t.tick(wait);
    let acks = t.out_b();
    assert_eq!(acks.len(), 1);
    assert!(is_ack(&acks[0]));
    t.deliver_a(&acks[0]);
    assert_eq!(t.comps_a()[0].wr_id, 7);
}

#[test]
fn reply_wait_is_bounded_by_ack_delay() {
    // Spec: MR-5.4.6 — at most `ack_delay`.
    let mut c = Config::test_pair(1, 2);
    c.reply_wait = Duration::from_millis(5);
    assert_eq!(Connection::new(c).config().reply_wait, c.ack_delay);
}

#[test]
fn tail_loss_probes_do_not_keep_a_black_holed_path_from_timing_out() {
    // Spec: MR-5.3.4, MR-5.3.3, MR-5.3.5 — path 2 is black-holed from the
    // start, the other three deliver with a 250 us one-way delay. Once their
    // packets are acknowledged, path 2's are the whole flight, and a tail
    // loss probe every 2 srtt + ack_delay moves its newest packet to another
    // path, where it is acknowledged. Each such packet was overtaken on path
    // 2, so three of them in a row time the path out, long before its 200 ms
    // path RTO. (Core defect 8 of the compliance suite: the probes took path
    // 2's packets away one at a time, its oldest never reached the path RTO,
    // and path 2 took new data again and again.)
    let prto = 200_000_000;
    let mut t = Pair::new(|c| {
        c.mtu = 1024;
        c.min_path_rto = Duration::from_nanos(prto);
        c.min_rto = Duration::from_millis(2000);
        c.max_rto = Duration::from_millis(4000);
        c.initial_rtt = Duration::from_millis(5);
        c.cc.init_window = 4 * 8 * 1024;
    });
    let len = 600 * 1024;
    t.mb.add_region(0x78, 0x10_0000, len);
    t.ma.set_local(1, vec![0x5a; len]);
    t.a.post_send(SendWr::write(1, len as u32, 0x10_0000, 0x78))
        .unwrap();
    let one_way = 250_000;
    // (arrival time, to b?, packet)
    let mut wire: Vec<(u64, bool, (u16, Vec<u8>))> = vec![];
    let mut down_at = None;
    let mut done = false;
    let mut data_on_2_while_down = 0;
    while t.now < 3_000_000_000 && !done {
        let down = t.a.path_info(2).unwrap().status != PathStatus::Active;
        for p in t.out_a() {
            if path_of(&p) == 2 {
                if down && is_data(&p) {
                    data_on_2_while_down += 1;
                }
                continue;
            }
            wire.push((t.now + one_way, true, p));
        }
        for p in t.out_b() {
            wire.push((t.now + one_way, false, p));
        }
        if down && down_at.is_none() {
            down_at = Some(t.now);
        }
        for c in t.comps_a() {
            assert_eq!(c.status, WcStatus::Success);
            done = true;
        }
        // Deliver what is due; otherwise advance to the next event.
        let now = t.now;
        let due: Vec<_> = wire.iter().filter(|w| w.0 <= now).cloned().collect();
        wire.retain(|w| w.0 > now);
        for (_, to_b, p) in &due {
            if *to_b {
                t.deliver_b(p);
            } else {
                t.deliver_a(p);
            }
        }
        if !due.is_empty() {
            continue;
        }
        let arrival = wire.iter().map(|w| w.0).min().unwrap_or(u64::MAX);
        t.advance_until(arrival);
    }
    assert!(done, "the transfer did not complete around path 2");
    let st = t.a.stats();
    let down_at = down_at.expect("path 2 never timed out");
    assert!(
        down_at < 1_000 + prto / 2,
        "path 2 timed out only at {} ms; {st:?}",
        down_at / 1_000_000
    );
    assert!(st.tlp >= 3 && st.path_timeouts_overtaken >= 1, "{st:?}");
    // Path 2 stays down (it never answers a probe) while the others are
    // active: no data goes to it (MR-6.3.2).
    assert_eq!(data_on_2_while_down, 0, "{st:?}");
}

#[test]
fn a_probe_copy_acknowledged_through_the_original_path_is_no_loss_there() {
    // Spec: MR-5.3.4 — only a probe copy acknowledged by an ACK that does not
    // echo the original's path says the original was overtaken. Here every
    // message is one packet; those sent on path 1 are held until the tail
    // loss probe resends them on path 0, then delivered before the copy: the
    // ACK that takes each off the books echoes path 1, which delivered it.
    // However many times that happens, path 1 is not timed out.
    let mut t = Pair::new(|c| {
        c.mtu = 1024;
        c.num_paths = 2;
        c.min_path_rto = Duration::from_millis(1000);
        c.min_rto = Duration::from_millis(2000);
        c.max_rto = Duration::from_millis(4000);
    });
    let mut rescued = 0;
    for m in 0..60u64 {
        t.ma.set_local(m, vec![m as u8; 512]);
        t.a.post_send(SendWr::write(m, 512, 0x1000, 0x77)).unwrap();
        let (mut held, mut sent, mut done) = (vec![], 0, false);
        for _ in 0..1000 {
            for p in t.out_a() {
                if !is_data(&p) {
                    t.deliver_b(&p);
                    continue;
                }
                sent += 1;
                if sent == 1 && path_of(&p) == 1 {
                    held.push(p);
                    continue;
                }
                if sent > 1 && !held.is_empty() {
                    // The probe's copy: the original arrives first and is
                    // acknowledged (on its own path), then the copy.
                    assert_eq!(path_of(&p), 0, "the probe went to the other path");
                    rescued += 1;
                    for h in held.drain(..) {
                        t.deliver_b(&h);
                    }
                    for q in t.out_b() {
                        t.deliver_a(&q);
                    }
                }
                t.deliver_b(&p);
            }
            for q in t.out_b() {
                t.deliver_a(&q);
            }
            if !t.comps_a().is_empty() {
                done = true;
                break;
            }
            t.advance_until(t.now + 1_000_000);
        }
        assert!(done, "message {m} did not complete");
        assert_eq!(
            t.a.path_info(1).unwrap().status,
            PathStatus::Active,
            "path 1 failed after {rescued} probes whose originals it delivered; {:?}",
            t.a.stats()
        );
    }
    let st = t.a.stats();
    assert!(
        rescued >= 6,
        "only {rescued} messages went to path 1 and were probed: {st:?}"
    );
    assert_eq!(st.path_timeouts, 0, "{st:?}");
}

/// Memory that, like a driver sending payload pages by reference, never writes
/// the payload into the packet buffer: it leaves poison there and notes where
/// the bytes belong and what they are; the test puts them in before the packet
/// leaves (MR-10.1.1).
struct ByReference {
    inner: VecMemory,
    /// Address of the packet buffer being built.
    base: usize,
    /// (offset in the packet, bytes) of the payload asked for.
    noted: Option<(usize, Vec<u8>)>,
}

impl ByReference {
    fn note(&mut self, out: &mut [u8], real: Vec<u8>) {
        assert!(self.noted.is_none(), "one payload per packet");
        self.noted = Some((out.as_ptr() as usize - self.base, real));
        out.fill(0xEE);
    }
}

impl Responder for ByReference {
    fn write_remote(&mut self, rkey: u32, va: u64, data: &[u8]) -> Result<(), MemError> {
        self.inner.write_remote(rkey, va, data)
    }
    fn read_remote(&mut self, rkey: u32, va: u64, out: &mut [u8]) -> Result<(), MemError> {
        let mut real = vec![0; out.len()];
        self.inner.read_remote(rkey, va, &mut real)?;
        self.note(out, real);
        Ok(())
    }
    fn atomic_remote(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        self.inner.atomic_remote(rkey, va, op)
    }
    fn write_recv(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError> {
        self.inner.write_recv(wr_id, offset, data)
    }
    fn invalidate(&mut self, rkey: u32) -> Result<(), MemError> {
        self.inner.invalidate(rkey)
    }
}

impl LocalMemory for ByReference {
    fn read_local(&mut self, wr_id: u64, offset: u32, out: &mut [u8]) -> Result<(), MemError> {
        let mut real = vec![0; out.len()];
        self.inner.read_local(wr_id, offset, &mut real)?;
        self.note(out, real);
        Ok(())
    }
    fn write_local(&mut self, wr_id: u64, offset: u32, data: &[u8]) -> Result<(), MemError> {
        self.inner.write_local(wr_id, offset, data)
    }
}

/// Builds `c`'s packets with `m`, filling each payload in only after
/// `poll_transmit` returned: it must be the packet's last bytes.
fn out_by_reference(c: &mut Connection, now: u64, m: &mut ByReference) -> Vec<(u16, Vec<u8>)> {
    let mut buf = vec![0u8; 9200];
    let mut v = vec![];
    loop {
        m.base = buf.as_ptr() as usize;
        let Some(t) = c.poll_transmit(Instant(now), &mut buf, m) else {
            break;
        };
        let mut pkt = buf[..t.len].to_vec();
        if let Some((at, real)) = m.noted.take() {
            assert_eq!(at + real.len(), t.len, "the payload ends the packet");
            pkt[at..].copy_from_slice(&real);
        }
        v.push((t.src_port, pkt));
    }
    v
}

/// Spec: MR-10.1.1 — the payload asked of the memory is the end of the packet
/// and is never read back while the packet is built: WRITE, SEND and READ
/// whose payload is put in after `poll_transmit` returned complete exactly as
/// when the memory copies it in.
#[test]
fn a_payload_filled_in_after_the_packet_is_built_moves_the_same_bytes() {
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 11 % 251) as u8 + 1).collect();
    let mut copied = Pair::write_send_read(&data);
    copied.run(40);
    let mut t = Pair::write_send_read(&data);
    let mut ma = ByReference {
        inner: std::mem::take(&mut t.ma),
        base: 0,
        noted: None,
    };
    let mut mb = ByReference {
        inner: std::mem::take(&mut t.mb),
        base: 0,
        noted: None,
    };
    for _ in 0..40 {
        for p in out_by_reference(&mut t.a, t.now, &mut ma) {
            t.b.handle_datagram(Instant(t.now), p.0, false, &p.1, &mut mb);
        }
        for p in out_by_reference(&mut t.b, t.now, &mut mb) {
            t.a.handle_datagram(Instant(t.now), p.0, false, &p.1, &mut ma);
        }
        t.tick(1_000);
    }
    let (ca, cb) = (t.comps_a(), t.comps_b());
    assert_eq!(ca.len(), 3, "{ca:?}");
    assert!(ca.iter().all(|c| c.status == WcStatus::Success), "{ca:?}");
    assert_eq!((ca, cb), (copied.comps_a(), copied.comps_b()));
    assert!(mb.inner.region(0x77)[..5000] == data[..], "WRITE placed");
    assert!(mb.inner.recv[&60][..3333] == data[..3333], "SEND placed");
    assert!(
        ma.inner.local[&3][..4500] == data[0x100..0x100 + 4500],
        "READ response placed"
    );
    assert!(mb.inner.region(0x77) == copied.mb.region(0x77));
}

/// Spec: MR-10.3.4 — `Transmit::ack` marks exactly the ACK packets: the data,
/// READ responses and ACKs of a WRITE, SEND and READ exchange each say what
/// they are, so a driver may send ACKs outside the order of the rest.
#[test]
fn transmits_say_which_packets_are_acks() {
    let data: Vec<u8> = (0..5000u32).map(|i| (i % 249) as u8 + 1).collect();
    let mut t = Pair::write_send_read(&data);
    let (mut acks, mut others) = (0, 0);
    for _ in 0..20 {
        for from_a in [true, false] {
            loop {
                let (conn, mem) = if from_a {
                    (&mut t.a, &mut t.ma)
                } else {
                    (&mut t.b, &mut t.mb)
                };
                let Some(tx) = conn.poll_transmit(Instant(t.now), &mut t.buf, mem) else {
                    break;
                };
                let p = (tx.src_port, t.buf[..tx.len].to_vec());
                assert_eq!(tx.ack, is_ack(&p), "opcode {:#x}", p.1[1]);
                if tx.ack {
                    acks += 1;
                } else {
                    others += 1;
                }
                if from_a {
                    t.deliver_b(&p);
                } else {
                    t.deliver_a(&p);
                }
            }
        }
        t.tick(10_000);
    }
    assert!(acks > 0 && others > 0, "{acks} ACKs, {others} others");
    assert_eq!(t.comps_a().len(), 3);
}

/// `p` (a request packet) with its request header changed by `f`, re-emitted.
fn with_request(p: &[u8], payload: Option<&[u8]>, f: impl Fn(&mut wire::RequestRepr)) -> Vec<u8> {
    let mut r = wire::PacketRepr::parse(p).expect("a packet of ours");
    match &mut r.body {
        wire::Body::Request { req, payload: pl, .. } => {
            f(req);
            if let Some(bytes) = payload {
                *pl = wire::Payload::contiguous(bytes);
            }
        }
        _ => panic!("not a request"),
    }
    let mut buf = vec![0; r.buffer_len()];
    let n = r.emit(&mut buf).expect("emit");
    buf.truncate(n);
    buf
}

#[test]
fn atomic_write_is_stored_whole_at_its_delivery_turn() {
    // Spec: MR-4.4.6 — an ATOMIC_WRITE that overtakes the WRITE before it is
    // stored after that WRITE, not on arrival.
    let mut t = Pair::new(|_| {});
    let value = 0x1122_3344_5566_7788u64.to_ne_bytes();
    t.ma.set_local(1, vec![0xaa; 100]);
    t.ma.set_local(2, value.to_vec());
    t.a.post_send(SendWr::write(1, 100, 0x1000, 0x77)).unwrap();
    t.a.post_send(SendWr::atomic_write(2, 0x1008, 0x77)).unwrap();
    let pa = t.out_a();
    assert_eq!(pa.len(), 2);
    let kinds: Vec<_> = pa.iter().map(|p| wire::PacketRepr::parse(&p.1).unwrap().base.opcode).collect();
    assert_eq!(kinds, vec![wire::Opcode::Write, wire::Opcode::AtomicWrite]);
    t.deliver_b(&pa[1]);
    assert_eq!(&t.mb.region(0x77)[8..16], &[0; 8], "not stored before its turn");
    t.deliver_b(&pa[0]);
    assert_eq!(&t.mb.region(0x77)[8..16], &value, "stored after the WRITE before it");
    assert!(t.mb.region(0x77)[16..100].iter().all(|b| *b == 0xaa));
    t.run(5);
    let c: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.opcode, c.status, c.byte_len)).collect();
    assert_eq!(
        c,
        vec![
            (1, WcOpcode::RdmaWrite, WcStatus::Success, 100),
            (2, WcOpcode::AtomicWrite, WcStatus::Success, 8)
        ]
    );
    assert!(t.comps_b().is_empty(), "an ATOMIC_WRITE consumes no receive");
}

#[test]
fn atomic_write_needs_eight_aligned_bytes() {
    // Spec: MR-4.4.6 (the requester refuses to post), MR-3.3.4 (a receiver
    // discards a packet of another size), MR-4.4.5 (a misaligned address is an
    // invalid request).
    let mut t = Pair::new(|_| {});
    assert_eq!(t.a.post_send(SendWr::atomic_write(1, 0x1004, 0x77)), Err(PostError::Invalid));
    let long = SendWr { len: 16, ..SendWr::atomic_write(1, 0x1000, 0x77) };
    assert_eq!(t.a.post_send(long), Err(PostError::Invalid));
    t.ma.set_local(2, vec![5; 8]);
    t.a.post_send(SendWr::atomic_write(2, 0x1000, 0x77)).unwrap();
    let pa = t.out_a();
    let sixteen = with_request(&pa[0].1, Some(&[5; 16]), |r| r.msg_len = 16);
    assert_eq!(wire::PacketRepr::parse(&sixteen), Err(wire::WireError::Malformed));
    let before = t.b.stats().rx_invalid;
    t.deliver_b(&(pa[0].0, sixteen));
    assert_eq!(t.b.stats().rx_invalid, before + 1, "counted");
    assert_eq!(t.b.stats().rx_malformed, 1, "as malformed");
    assert!(t.out_b().is_empty(), "discarded, not answered");
    let misaligned = with_request(&pa[0].1, None, |r| r.remote_va = 0x1004);
    t.deliver_b(&(pa[0].0, misaligned));
    t.run(5);
    let c = t.comps_a();
    assert_eq!((c[0].wr_id, c[0].status), (2, WcStatus::RemInvReqErr));
    assert_eq!(&t.mb.region(0x77)[..16], &[0; 16], "nothing stored");
    assert_eq!(t.b.state(), QpState::Error);
}

#[test]
fn atomic_write_to_a_key_without_access_is_a_remote_access_error() {
    // Spec: MR-4.4.6, MR-7.3.2.
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, vec![3; 8]);
    t.a.post_send(SendWr::atomic_write(1, 0x1000, 0xbad)).unwrap();
    t.run(5);
    let c = t.comps_a();
    assert_eq!((c[0].wr_id, c[0].opcode, c[0].status), (1, WcOpcode::AtomicWrite, WcStatus::RemAccessErr));
    assert_eq!(t.b.state(), QpState::Error);
}

#[test]
fn flush_executes_at_its_delivery_turn_and_checks_its_rights() {
    // Spec: MR-4.4.7 — a FLUSH that overtakes the WRITE before it is carried out
    // only after that WRITE has been placed; MR-3.3.5 — its bits travel in the
    // request header.
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, vec![0xaa; 100]);
    let global = Flush { global: true, ..Flush::default() };
    t.a.post_send(SendWr::write(1, 100, 0x1000, 0x77)).unwrap();
    t.a.post_send(SendWr::flush(2, 0x1000, 0x77, 100, global)).unwrap();
    let pa = t.out_a();
    assert_eq!(pa.len(), 2);
    match wire::PacketRepr::parse(&pa[1].1).unwrap().body {
        wire::Body::Request { req, payload, .. } => {
            assert_eq!((req.imm, req.msg_len, payload.len()), (Flush::GLOBAL, 100, 0));
        }
        b => panic!("{b:?}"),
    }
    t.deliver_b(&pa[1]);
    assert!(t.mb.flushes.is_empty(), "not before its turn");
    t.deliver_b(&pa[0]);
    assert_eq!(t.mb.flushes, vec![(0x77, 0x1000, 100, global)]);
    t.run(5);
    let c: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.opcode, c.status)).collect();
    assert_eq!(
        c,
        vec![(1, WcOpcode::RdmaWrite, WcStatus::Success), (2, WcOpcode::Flush, WcStatus::Success)]
    );
    // The whole region: no range to check.
    let whole = Flush { global: true, whole_region: true, ..Flush::default() };
    t.a.post_send(SendWr::flush(3, 0, 0x77, 12_345_678, whole)).unwrap();
    t.run(5);
    assert_eq!(t.comps_a()[0].status, WcStatus::Success);
    // A type the region cannot give is an access error, fatal to both ends.
    let persistent = Flush { persistent: true, ..Flush::default() };
    t.a.post_send(SendWr::flush(4, 0x1000, 0x77, 8, persistent)).unwrap();
    t.run(5);
    assert_eq!(t.comps_a()[0].status, WcStatus::RemAccessErr);
    assert_eq!(t.b.state(), QpState::Error);
    assert_eq!(t.mb.flushes.len(), 2);
}

#[test]
fn flush_without_a_placement_type_is_refused_and_discarded() {
    // Spec: MR-3.3.5.
    let mut t = Pair::new(|_| {});
    let none = SendWr { imm: 0, ..SendWr::flush(1, 0x1000, 0x77, 8, Flush::default()) };
    assert_eq!(t.a.post_send(none), Err(PostError::Invalid));
    let reserved = SendWr { imm: Flush::GLOBAL | 0x4, ..none };
    assert_eq!(t.a.post_send(reserved), Err(PostError::Invalid));
    let global = Flush { global: true, ..Flush::default() };
    t.a.post_send(SendWr::flush(2, 0x1000, 0x77, 8, global)).unwrap();
    let pa = t.out_a();
    for (imm, payload, offset) in [(0, None, 0), (Flush::GLOBAL | 0x4, None, 0), (Flush::GLOBAL, Some(&[1u8; 8][..]), 0), (Flush::GLOBAL, None, 8)] {
        let bad = with_request(&pa[0].1, payload, |r| {
            r.imm = imm;
            r.offset = offset;
        });
        assert_eq!(wire::PacketRepr::parse(&bad), Err(wire::WireError::Malformed), "imm {imm:#x} offset {offset}");
        let before = t.b.stats().rx_invalid;
        t.deliver_b(&(pa[0].0, bad));
        assert_eq!(t.b.stats().rx_invalid, before + 1);
    }
    assert!(t.out_b().is_empty());
    t.deliver_b(&pa[0]);
    t.run(5);
    assert_eq!(t.comps_a()[0].status, WcStatus::Success);
}

#[test]
fn duplicate_reports_raise_the_reordering_multiplier_once_per_srtt() {
    // Spec: MR-5.3.6 — each WRITE reaches B three times over a 40 us round
    // trip, so A gets ACKs with DUP together; it raises m by one at most once
    // per largest srtt, up to 4, and reports it.
    let mut t = Pair::new(|c| c.num_paths = 1);
    assert_eq!(t.a.reordering_multiplier(), 0);
    let round = |t: &mut Pair, id: u64| {
        t.ma.set_local(id, vec![1; 10]);
        t.a.post_send(SendWr::write(id, 10, 0x1000, 0x77)).unwrap();
        let pa = t.out_a();
        assert!(!pa.is_empty());
        t.tick(20_000);
        let mut acks = vec![];
        for _ in 0..3 {
            for p in &pa {
                t.deliver_b(p);
            }
            acks.extend(t.out_b());
        }
        assert!(acks.len() >= 2, "{} ACKs", acks.len());
        t.tick(20_000);
        for p in &acks {
            t.deliver_a(p);
        }
        t.run(5);
        t.a.reordering_multiplier()
    };
    assert_eq!(round(&mut t, 1), 1, "several DUP reports within one srtt");
    let p = t.a.path_info(0).unwrap();
    assert!(p.srtt_ns >= 30_000 && p.rttvar_ns > 0, "{p:?}");
    let m: Vec<u8> = (2..7).map(|id| round(&mut t, id)).collect();
    assert_eq!(m, [2, 3, 4, 4, 4]);
    assert!(t.b.stats().rx_dup >= 12);
    assert_eq!(t.comps_a().len(), 6);
}

/// Spec: MR-5.4.1 — an ACK whose cumulative TSN is beyond every packet another
/// path has accepted since its last ACK stands in for that path's delayed ACK;
/// one that is not keeps it.
#[test]
fn an_ack_covering_another_paths_packets_replaces_its_delayed_ack() {
    let mut t = Pair::new(|c| {
        c.mtu = 1024;
        c.ack_delay = Duration::from_micros(100);
    });
    let acks = |v: &[(u16, Vec<u8>)]| v.iter().filter(|p| is_ack(p)).map(path_of).collect::<Vec<_>>();
    // A two-packet message arriving in order: one ACK, on the last packet's
    // path (ACK_REQ and delivery), and none from the first packet's path once
    // its delayed-ACK deadline has passed.
    t.ma.set_local(1, vec![5; 2048]);
    t.a.post_send(SendWr::write(1, 2048, 0x1000, 0x77)).unwrap();
    let data: Vec<_> = t.out_a().into_iter().filter(is_data).collect();
    assert_eq!(data.len(), 2);
    assert_ne!(path_of(&data[0]), path_of(&data[1]));
    for p in &data {
        t.deliver_b(p);
    }
    let out = t.out_b();
    assert_eq!(acks(&out), [path_of(&data[1])]);
    t.tick(200_000);
    assert_eq!(acks(&t.out_b()), [] as [usize; 0], "a delayed ACK followed the covering one");
    assert_eq!(t.b.poll_timeout(), None);
    for p in &out {
        t.deliver_a(p);
    }
    assert_eq!(t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(1, WcStatus::Success)]);
    // Three packets, the first one late: the last one's ACK (cumulative TSN
    // still at the first) does not cover the second's path, which is
    // acknowledged when its delay is up; the first one's arrival delivers the
    // message and is acknowledged at once.
    t.ma.set_local(2, vec![6; 3072]);
    t.a.post_send(SendWr::write(2, 3072, 0x1000, 0x77)).unwrap();
    let data: Vec<_> = t.out_a().into_iter().filter(is_data).collect();
    assert_eq!(data.len(), 3);
    t.deliver_b(&data[1]);
    t.deliver_b(&data[2]);
    assert_eq!(acks(&t.out_b()), [path_of(&data[2])]);
    t.tick(200_000);
    assert_eq!(acks(&t.out_b()), [path_of(&data[1])]);
    t.deliver_b(&data[0]);
    assert_eq!(acks(&t.out_b()), [path_of(&data[0])]);
    assert_eq!(&t.mb.region(0x77)[..3072], &[6; 3072][..]);
}

/// The base header of a datagram.
fn base_of(p: &(u16, Vec<u8>)) -> wire::BaseRepr {
    wire::BaseRepr::parse(&wire::BaseHeader::new_unchecked(&p.1[..])).expect("a valid base header")
}

#[test]
fn read_response_acknowledges_its_request() {
    // Spec: MR-5.2.5, MR-5.4.5 — a READ request goes without ACK_REQ; the
    // responder sends its response and no ACK of its own (ack_delay is far
    // off), and the READ completes when the response arrives.
    let mut t = Pair::new(|c| c.ack_delay = Duration::from_micros(500));
    t.mb.range(0x77, 0x1000, 64).unwrap().copy_from_slice(&[7; 64]);
    t.ma.set_local(1, vec![0; 64]);
    t.a.post_send(SendWr::read(1, 64, 0x1000, 0x77)).unwrap();
    let req = t.out_a();
    assert_eq!(req.len(), 1);
    assert!(!base_of(&req[0]).flags.has(wire::Flags::ACK_REQ), "READ request asked for an ACK");
    t.deliver_b(&req[0]);
    let answer = t.out_b();
    assert_eq!(answer.len(), 1, "the response and nothing else: {:?}", answer.iter().map(|p| p.1[1]).collect::<Vec<_>>());
    assert!(!is_ack(&answer[0]));
    t.deliver_a(&answer[0]);
    let c = t.comps_a();
    assert_eq!(c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(1, WcStatus::Success)]);
    assert_eq!(t.ma.local[&1], vec![7; 64]);
    assert!(!t.a.in_flight(), "the request is still in flight");
    // The requester acknowledges the response. Whatever the responder sends
    // later (its delayed ACK, unless the small response carried it) is no
    // data and changes nothing.
    for p in t.out_a() {
        t.deliver_b(&p);
    }
    t.now += 600_000;
    t.b.handle_timeout(Instant(t.now));
    let late: Vec<_> = t.out_b();
    assert!(late.iter().all(is_ack), "the responder sent data again: {late:?}");
    for p in &late {
        t.deliver_a(p);
    }
    assert!(t.comps_a().is_empty());
    assert!(!t.b.in_flight());
}

#[test]
fn read_request_lost_is_resent_with_ack_req() {
    // Spec: MR-5.4.5 — a retransmitted READ request asks for an ACK.
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, vec![0; 64]);
    t.a.post_send(SendWr::read(1, 64, 0x1000, 0x77)).unwrap();
    let first = t.out_a();
    assert_eq!(first.len(), 1);
    let mut resent = vec![];
    for _ in 0..200 {
        t.now += 100_000;
        if let Some(d) = t.a.poll_timeout() {
            if d.as_nanos() <= t.now {
                t.a.handle_timeout(Instant(t.now));
            }
        }
        resent = t.out_a().into_iter().filter(is_data).collect();
        if !resent.is_empty() {
            break;
        }
    }
    assert!(!resent.is_empty(), "the lost READ request was never resent");
    let b = base_of(&resent[0]);
    assert!(b.flags.has(wire::Flags::ACK_REQ) && b.flags.has(wire::Flags::RETX));
    t.deliver_b(&resent[0]);
    t.run(5);
    assert_eq!(t.comps_a().iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![1]);
}

#[test]
fn full_packet_read_is_acknowledged_by_its_response_then_by_a_delayed_ack() {
    // Spec: MR-5.2.5, MR-5.4.1 — full-MTU responses have no room for the ACK
    // (MR-5.4.6): the responder's delayed ACK reports the request's path later.
    let mut t = Pair::new(|c| {
        c.mtu = 1024;
        c.ack_delay = Duration::from_micros(500);
    });
    t.mb.range(0x77, 0x1000, 2048).unwrap().copy_from_slice(&[9; 2048]);
    t.ma.set_local(1, vec![0; 2048]);
    t.a.post_send(SendWr::read(1, 2048, 0x1000, 0x77)).unwrap();
    let req = t.out_a();
    assert_eq!(req.len(), 1);
    t.deliver_b(&req[0]);
    let answer = t.out_b();
    assert_eq!(answer.len(), 2);
    assert!(answer.iter().all(is_data), "an ACK went before or with the response");
    for p in &answer {
        t.deliver_a(p);
    }
    assert_eq!(t.comps_a().iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(t.ma.local[&1], vec![9; 2048]);
    for p in t.out_a() {
        t.deliver_b(&p);
    }
    t.now += 600_000;
    t.b.handle_timeout(Instant(t.now));
    let late = t.out_b();
    assert_eq!(late.len(), 1, "one delayed ACK: {late:?}");
    assert!(is_ack(&late[0]));
    t.deliver_a(&late[0]);
    assert!(!t.a.in_flight() && !t.b.in_flight());
}

/// A's SEND of 10 bytes whose packet B has acknowledged but not delivered:
/// B's copies are still under way (MR-10.1.3, `unplaced`), so nothing is in
/// flight at A and its SEND waits for B's delivery report (MR-5.5.4).
fn send_acknowledged_not_delivered(tweak: impl Fn(&mut Config)) -> Pair {
    let mut t = Pair::new(tweak);
    t.ma.set_local(1, vec![1; 10]);
    t.mb.set_recv(60, 100);
    t.b.post_recv(RecvWr { wr_id: 60, len: 100 }).unwrap();
    t.a.post_send(SendWr::send(1, 10)).unwrap();
    t.mb.unplaced = true;
    t.run(5);
    assert!(t.comps_a().is_empty() && !t.a.in_flight(), "the SEND's packet is acknowledged, not delivered");
    t
}

#[test]
fn a_lost_delivery_report_is_asked_for_again() {
    // Spec: MR-5.5.4 — the responder's copies finish after its ACK of the
    // SEND's packet (MR-10.1.3), and the ACK reporting the delivery is lost.
    // Nothing is in flight at the requester, whose SEND waits for that report:
    // after a connection RTO it probes, and the probe's answer reports it.
    let mut t = send_acknowledged_not_delivered(|_| {});
    t.mb.unplaced = false;
    t.b.resume_delivery(Instant(t.now), &mut t.mb);
    let report = t.out_b();
    assert!(!report.is_empty() && report.iter().all(is_ack), "no delivery report: {report:?}");
    assert_eq!(t.comps_b().len(), 1);
    // The report is lost. The requester must not wait for ever.
    let mut probe = vec![];
    for _ in 0..10 {
        let deadline = t.a.poll_timeout().expect("the requester waits for a report with no timer");
        t.now = t.now.max(deadline.as_nanos());
        t.a.handle_timeout(Instant(t.now));
        probe = t.out_a();
        if !probe.is_empty() {
            break;
        }
    }
    assert!(probe.len() == 1 && probe[0].1[1] == 0x21, "no PROBE: {probe:?}");
    t.deliver_b(&probe[0]);
    for p in t.out_b() {
        t.deliver_a(&p);
    }
    assert_eq!(t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(1, WcStatus::Success)]);
    assert!(t.a.poll_timeout().is_none(), "a timer still armed with nothing to wait for");
}

/// A ping-pong's tail (ibv_rc_pingpong's last iteration): A's SEND reaches B,
/// whose ACK of it is lost; B answers with its own SEND, which A receives and
/// acknowledges. Returns the pair with B's work complete and A's SEND still
/// waiting for the report of its delivery.
fn ping_pong_tail_with_the_report_lost() -> Pair {
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, vec![1; 8]);
    t.mb.set_local(2, vec![2; 8]);
    t.ma.set_recv(70, 8);
    t.mb.set_recv(60, 8);
    t.a.post_recv(RecvWr { wr_id: 70, len: 8 }).unwrap();
    t.b.post_recv(RecvWr { wr_id: 60, len: 8 }).unwrap();
    t.a.post_send(SendWr::send(1, 8)).unwrap();
    for p in t.out_a() {
        t.deliver_b(&p);
    }
    let report = t.out_b();
    assert!(!report.is_empty() && report.iter().all(is_ack), "{report:?}");
    assert_eq!(t.comps_b().iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![60]);
    t.now += 1_000;
    t.b.post_send(SendWr::send(2, 8)).unwrap();
    for p in t.out_b() {
        t.deliver_a(&p);
    }
    for p in t.out_a() {
        t.deliver_b(&p);
    }
    assert_eq!(t.comps_b().iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(2, WcStatus::Success)]);
    assert_eq!(t.comps_a().iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![70], "A's SEND completed without its report");
    t
}

#[test]
fn the_last_word_reports_a_delivery_whose_ack_was_lost() {
    // Spec: MR-5.4.7 — B is done and destroys its QP, which would leave A's
    // retransmissions unanswered and A's delivered SEND to fail its retries.
    // B's last word repeats its ACK, which reports the delivery.
    let mut t = ping_pong_tail_with_the_report_lost();
    t.now += 1_000;
    t.b.close();
    let last = t.out_b();
    assert!(last.len() == 1 && is_ack(&last[0]), "no last word: {last:?}");
    t.deliver_a(&last[0]);
    assert_eq!(t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(1, WcStatus::Success)]);
    assert!(!t.a.in_flight() && t.a.poll_timeout().is_none());
    // Said once: closing again (destroy after a move to the error state)
    // sends nothing, and nothing comes after it.
    t.b.close();
    t.b.post_send(SendWr::send(2, 8)).ok();
    assert!(t.out_b().is_empty());
}

#[test]
fn the_last_word_is_the_ack_of_the_latest_arrival_and_only_a_receiver_says_it() {
    // Spec: MR-5.4.7 — B's SEND reaches A, whose ACK of it is lost; A is done
    // and closes. Its last word is that ACK again, on the path where the SEND
    // arrived, and B's SEND completes.
    let mut t = Pair::new(|_| {});
    t.mb.set_local(2, vec![2; 8]);
    t.ma.set_recv(70, 8);
    t.a.post_recv(RecvWr { wr_id: 70, len: 8 }).unwrap();
    t.b.post_send(SendWr::send(2, 8)).unwrap();
    let send = t.out_b();
    assert_eq!(send.len(), 1);
    t.deliver_a(&send[0]);
    let lost = t.out_a();
    assert!(lost.len() == 1 && is_ack(&lost[0]), "{lost:?}");
    assert_eq!(t.comps_a().iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![70]);
    t.now += 1_000;
    t.a.close();
    let last = t.out_a();
    assert!(last.len() == 1 && is_ack(&last[0]), "{last:?}");
    assert_eq!(path_of(&last[0]), path_of(&send[0]));
    t.deliver_b(&last[0]);
    assert_eq!(t.comps_b().iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), vec![(2, WcStatus::Success)]);
    assert!(!t.b.in_flight());
    // B received nothing: closing, it has nothing to say, and its work (none
    // left here; a new SEND) is flushed.
    t.b.post_send(SendWr::send(3, 0)).unwrap();
    t.b.close();
    assert!(t.out_b().is_empty(), "a QP that received nothing sent a last word");
    assert_eq!(t.comps_b().iter().map(|c| c.status).collect::<Vec<_>>(), vec![WcStatus::WrFlushErr]);
}

#[test]
fn a_path_moves_when_its_receiver_asks_once_per_64_rtts() {
    // Spec: MR-6.3.5 — B asks A to move path 0; A's next packet on it leaves
    // from a new source port. Asked again at once, A keeps the port.
    let mut t = Pair::new(|c| c.num_paths = 1);
    for w in 1..=4 {
        t.ma.set_local(w, vec![w as u8; 8]);
    }
    let send = |t: &mut Pair, w: u64, ask: bool| -> u16 {
        t.a.post_send(SendWr::write(w, 8, 0x1000, 0x77)).unwrap();
        let out = t.out_a();
        assert_eq!(out.len(), 1);
        t.now += 5_000; // one way: an RTT of 10 us, so 64 RTTs are 640 us
        t.deliver_b(&out[0]);
        if ask {
            t.b.ask_to_move(0);
        }
        let acks = t.out_b();
        t.now += 5_000;
        for p in acks {
            t.deliver_a(&p);
        }
        out[0].0
    };
    let first = send(&mut t, 1, false);
    assert_eq!(send(&mut t, 2, true), first, "moved before the ACK that asks");
    assert_eq!(t.a.stats().moved_paths, 1);
    let moved = send(&mut t, 3, true);
    assert_ne!(moved, first, "path 0 kept its source port");
    assert_eq!(send(&mut t, 4, false), moved, "moved twice within 64 RTTs");
    assert_eq!(t.a.stats().moved_paths, 1);
    assert_eq!(t.comps_a().len(), 4);
}

#[test]
fn an_ack_from_an_earlier_qp_with_the_same_number_is_ignored() {
    // Spec: MR-5.2.3, MR-9.3.1 — QP numbers are reused and the same QPN pair
    // derives the same TSNs (MR-7.1.5): an ACK of the QP that had these numbers
    // before may still be on its way. Its cumulative TSN lies beyond what the new
    // QP has sent; taken as acknowledging everything sent, it released packets the
    // peer never got (seen in `ib_read_bw -q 4` runs back to back in the VM).
    let mut old = Pair::new(|_| {});
    let mut last_ack = None;
    for i in 0..40u64 {
        old.mb.set_recv(100 + i, 8);
        old.b.post_recv(RecvWr { wr_id: 100 + i, len: 8 }).unwrap();
        old.ma.set_local(i, vec![i as u8; 8]);
        old.a.post_send(SendWr::send(i, 8)).unwrap();
        for p in old.out_a() {
            old.deliver_b(&p);
        }
        for p in old.out_b() {
            if is_ack(&p) {
                last_ack = Some(p.clone());
            }
            old.deliver_a(&p);
        }
    }
    assert_eq!(old.comps_a().len(), 40);
    let stale = last_ack.expect("B acknowledged");
    // The new pair: one SEND in flight, not yet delivered.
    let mut t = Pair::new(|_| {});
    t.mb.set_recv(7, 8);
    t.b.post_recv(RecvWr { wr_id: 7, len: 8 }).unwrap();
    t.ma.set_local(1, vec![1; 8]);
    t.a.post_send(SendWr::send(1, 8)).unwrap();
    let sent = t.out_a();
    assert_eq!(sent.len(), 1);
    t.deliver_a(&stale);
    assert_eq!(t.a.stats().rx_acks_beyond_sent, 1);
    assert!(t.comps_a().is_empty(), "the stale ACK completed the new SEND");
    assert!(t.a.in_flight(), "the stale ACK released the packet in flight");
    // The packet (lost, say) is still the new QP's to resend, and the real ACK
    // completes it.
    t.run(200);
    let c = t.comps_a();
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::Success));
    assert_eq!(t.comps_b().len(), 1);
}

#[test]
fn a_nak_of_an_earlier_qp_whose_tsns_lay_behind_is_ignored() {
    // Spec: MR-5.2.3, MR-9.3.1 — the twin of the case above: the earlier QP's
    // TSNs lay *behind* the new one's, so its late fatal NAK carries a
    // cumulative TSN before the first the new QP sent. Taken as an old ACK of
    // the new QP, its NAK failed the new QP (found by the `pair_variants`
    // driver, which reconnects with the same QP numbers while the earlier
    // pair's packets are still in the network). Its delivery report (MSN)
    // would likewise have completed messages never delivered.
    let tsn0 = |c: &mut Config| c.initial_tsn = 0x1000_0000;
    let mut old = Pair::new(|c| {
        if c.local_qpn == 1 {
            tsn0(c)
        } else {
            c.peer_initial_tsn = 0x1000_0000
        }
    });
    old.ma.set_local(1, vec![1; 8]);
    old.ma.set_local(2, vec![2; 8]);
    old.a.post_send(SendWr::write(1, 8, 0x1000, 0x77)).unwrap();
    old.a.post_send(SendWr::write(2, 8, 0x1000, 0xbad)).unwrap();
    for p in old.out_a() {
        old.deliver_b(&p);
    }
    let nak = old
        .out_b()
        .into_iter()
        .find(|p| {
            matches!(wire::PacketRepr::parse(&p.1).map(|r| r.body),
                Ok(wire::Body::Ack(a)) if a.syndrome == Some(wire::Syndrome::NakAccess))
        })
        .expect("B refused the second WRITE");
    // The new pair starts 2^24 TSNs later; A has sent two messages, one
    // delivered and acknowledged.
    let mut t = Pair::new(|c| {
        if c.local_qpn == 1 {
            c.initial_tsn = 0x1100_0000
        } else {
            c.peer_initial_tsn = 0x1100_0000
        }
    });
    t.mb.set_recv(7, 8);
    t.b.post_recv(RecvWr { wr_id: 7, len: 8 }).unwrap();
    t.ma.set_local(1, vec![1; 8]);
    t.ma.set_local(2, vec![2; 8]);
    t.a.post_send(SendWr::write(1, 8, 0x1000, 0x77)).unwrap();
    t.a.post_send(SendWr::send(2, 8)).unwrap();
    let sent = t.out_a();
    t.deliver_b(&sent[0]);
    for p in t.out_b() {
        t.deliver_a(&p);
    }
    assert_eq!(t.comps_a().len(), 1);
    t.deliver_a(&nak);
    assert_eq!(t.a.state(), QpState::Rts, "the earlier QP's NAK failed the new one");
    assert_eq!(t.a.stats().rx_acks_beyond_sent, 1);
    assert!(t.comps_a().is_empty());
    t.run(200);
    let c = t.comps_a();
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].status), (2, WcStatus::Success));
}

#[test]
fn an_ack_echoing_a_psn_never_sent_does_not_make_later_packets_lost() {
    // Spec: MR-5.3.2, MR-5.3.3, MR-9.3.1 — the highest PSN acknowledged on a
    // path decides which of its packets were overtaken. Taken from an ACK
    // (a late one of an earlier QP, or a forgery) that echoes a PSN this path
    // never sent, it made every later packet on the path overtaken and lost
    // a fraction of an RTT after it left: a retransmission storm (found by the
    // `pair_variants` driver as a path resending every nanosecond).
    let mut t = Pair::new(|c| c.num_paths = 1);
    t.ma.set_local(1, vec![1; 8]);
    t.a.post_send(SendWr::write(1, 8, 0x1000, 0x77)).unwrap();
    // The first WRITE's ACK comes back 5 us after it left (the RTT); the later
    // ones' 8 us after: late enough, with this jitter, for a packet taken as
    // overtaken to be declared lost first, and not for any other timer.
    let sent = t.out_a();
    t.tick(5_000);
    for p in sent {
        t.deliver_b(&p);
    }
    let acks = t.out_b();
    assert_eq!(acks.len(), 1);
    for p in &acks {
        t.deliver_a(p);
    }
    assert_eq!(t.comps_a().len(), 1);
    let repr = wire::PacketRepr::parse(&acks[0].1).expect("an ACK");
    let mut bogus = repr.clone();
    if let wire::Body::Ack(ref mut a) = bogus.body {
        a.echo_psn = a.echo_psn.wrapping_add(1_000);
    }
    let mut buf = vec![0; 256];
    let n = bogus.emit(&mut buf).expect("emits");
    t.deliver_a(&(acks[0].0, buf[..n].to_vec()));
    for w in 2..6u64 {
        t.ma.set_local(w, vec![w as u8; 8]);
        t.a.post_send(SendWr::write(w, 8, 0x1000, 0x77)).unwrap();
        let sent = t.out_a();
        t.tick(8_000);
        for p in sent {
            t.deliver_b(&p);
        }
        t.run(1);
    }
    t.run(20);
    assert_eq!(t.comps_a().len(), 4);
    let st = t.a.stats();
    assert_eq!((st.lost_detected, st.tx_retx), (0, 0), "packets declared lost on a lossless path");
}

#[test]
fn a_read_nak_reaches_a_requester_with_fewer_paths() {
    // Spec: MR-3.2.6, MR-3.5.3 — the NAK of a READ the responder cannot serve
    // names one of the requester's paths. B answers over 8 paths, A asks over
    // one; a NAK sent with the path id of the response's own path (one of B's)
    // was dropped by A as naming no path of its, and A waited for the response
    // for ever (found by the `pair` fuzz driver). The READs before the bad one
    // move B's choice of path round.
    for good in 0..9u64 {
        let mut t = Pair::new(|c| {
            c.num_paths = if c.local_qpn == 1 { 1 } else { 8 };
            c.peer_num_paths = if c.local_qpn == 1 { 8 } else { 1 };
        });
        for i in 0..good {
            t.a.post_send(SendWr::read(i, 64, 0x1000, 0x77)).unwrap();
        }
        t.a.post_send(SendWr::read(99, 64, 0x1000 + (1 << 16), 0x77)).unwrap();
        t.run(8);
        let mut want: Vec<_> = (0..good).map(|i| (i, WcStatus::Success)).collect();
        want.push((99, WcStatus::RemAccessErr));
        let got: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(got, want, "after {good} good READs");
        assert_eq!(t.a.state(), QpState::Error);
    }
}

/// Fires A's timers, nothing it sends answered, until it has no timer left (at
/// most 1,000 firings); returns how many packets A sent meanwhile.
fn fire_unanswered(t: &mut Pair) -> usize {
    let mut sent = 0;
    for _ in 0..1000 {
        let Some(deadline) = t.a.poll_timeout() else { break };
        t.now = t.now.max(deadline.as_nanos());
        t.a.handle_timeout(Instant(t.now));
        sent += t.out_a().len();
    }
    sent
}

#[test]
fn a_report_wait_fails_only_when_the_peer_stops_answering() {
    // Spec: MR-5.5.4 — A's SEND is acknowledged but its delivery not reported
    // (B's copies are still under way, MR-10.1.3).
    let setup = || send_acknowledged_not_delivered(|c| c.retry_cnt = 3);
    // B is there and answers every probe, but stays slow: A waits (a peer that
    // answers counts no retry), far beyond `retry_cnt` probes.
    let mut t = setup();
    let mut probes = 0;
    for _ in 0..40 {
        let deadline = t.a.poll_timeout().expect("the requester waits for a report with no timer");
        t.now = t.now.max(deadline.as_nanos());
        t.a.handle_timeout(Instant(t.now));
        for p in t.out_a() {
            probes += 1;
            t.deliver_b(&p);
        }
        for p in t.out_b() {
            t.deliver_a(&p);
        }
    }
    assert!(probes > 10, "{probes} probes");
    assert!(t.comps_a().is_empty(), "a SEND whose peer answers must keep waiting");
    assert_eq!(t.a.state(), QpState::Rts);
    // B goes silent (taken out of service, or gone): A's probes go unanswered,
    // each counts a retry, and the SEND fails as MR-5.5.3's would. (It probed
    // for ever, and the QP never failed, until the `pair` fuzz driver found it.)
    let mut t = setup();
    let probes = fire_unanswered(&mut t);
    let got: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(got, vec![(1, WcStatus::RetryExcErr)], "after {probes} probes");
    assert_eq!(t.a.state(), QpState::Error);
    assert!(probes > 3, "{probes} probes: one, then one per retry at least");
}

#[test]
fn a_message_out_of_its_receive_turn_is_refused_not_completed_twice() {
    // Spec: MR-4.2.3 — a SEND_IMM rewritten to claim SSN 0, the WRITE_IMM's
    // before it (a forged packet, or a peer that numbers wrongly), arrives
    // first. Both messages were bound to the first receive WQE, and each
    // completed it: the same wr_id twice, and the second WQE never (found by
    // the `pair` fuzz driver). Now the SEND_IMM, at its turn, does not hold the
    // next WQE: NAK-INVALID, the QP fails, and every WQE completes once.
    let mut t = Pair::new(|_| {});
    t.ma.set_local(1, vec![1; 64]);
    t.ma.set_local(2, vec![2; 16]);
    for w in [60, 61] {
        t.mb.set_recv(w, 32);
        t.b.post_recv(RecvWr { wr_id: w, len: 32 }).unwrap();
    }
    t.a.post_send(SendWr::write_imm(1, 64, 0x1000, 0x77, 5)).unwrap();
    t.a.post_send(SendWr::send_imm(2, 16, 6)).unwrap();
    let out = t.out_a();
    assert_eq!(out.len(), 2, "{out:?}");
    let mut forged = vec![0u8; out[1].1.len()];
    let mut repr = wire::PacketRepr::parse(&out[1].1).unwrap();
    match &mut repr.body {
        wire::Body::Request { req, .. } => {
            assert_eq!(req.ssn, 1);
            req.ssn = 0;
        }
        b => panic!("not a request: {b:?}"),
    }
    let n = repr.emit(&mut forged).unwrap();
    t.deliver_b(&(out[1].0, forged[..n].to_vec()));
    t.deliver_b(&out[0]);
    let got: Vec<_> = t.comps_b().iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(got, vec![(60, WcStatus::Success), (61, WcStatus::WrFlushErr)]);
    assert_eq!(t.b.state(), QpState::Error);
    let nak = t.out_b().into_iter().find_map(|p| match wire::PacketRepr::parse(&p.1).ok()?.body {
        wire::Body::Ack(a) => a.syndrome.filter(|s| *s != wire::Syndrome::Ack),
        _ => None,
    });
    assert_eq!(nak, Some(wire::Syndrome::NakInvalid));
}

/// Two pairs with the same QP numbers, the earlier one's requester starting at
/// TSN 0x1000_0000, the later one's at 0x1100_0000, 300 ms later: the earlier
/// requester's first packet (a late one, for the later pair) and the later pair.
fn earlier_qp_packet_and_later_pair() -> ((u16, Vec<u8>), Pair) {
    let initial = |tsn: u32| {
        move |c: &mut Config| {
            if c.local_qpn == 1 {
                c.initial_tsn = tsn
            } else {
                c.peer_initial_tsn = tsn
            }
        }
    };
    let mut old = Pair::new(initial(0x1000_0000));
    old.ma.set_local(1, vec![1; 8]);
    old.a.post_send(SendWr::write(1, 8, 0x1000, 0x77)).unwrap();
    let mut stale = old.out_a();
    assert_eq!(stale.len(), 1);
    let mut t = Pair::new(initial(0x1100_0000));
    t.now = 300_000_000;
    (stale.remove(0), t)
}

#[test]
fn a_late_request_of_an_earlier_qp_is_discarded_without_response() {
    // Spec: MR-5.2.2, MR-7.1.5 — QP numbers are reused: a request the earlier
    // QP sent, arriving late at the later pair's responder, lies before the
    // first TSN that responder expects. It was answered as a duplicate, with
    // DUP, which raised the later requester's reordering multiplier (its loss
    // detection waiting longer, MR-5.3.6) for reordering there never was.
    let (stale, mut t) = earlier_qp_packet_and_later_pair();
    t.deliver_b(&stale);
    assert!(t.out_b().is_empty(), "the late request was answered");
    assert_eq!((t.b.stats().rx_invalid, t.b.stats().rx_dup), (1, 0));
    // Once the later pair has exchanged messages, the same packet is still not
    // its own; a real duplicate still is, and is answered with DUP.
    t.ma.set_local(1, vec![2; 8]);
    t.a.post_send(SendWr::write(1, 8, 0x1000, 0x77)).unwrap();
    let sent = t.out_a();
    for p in &sent {
        t.deliver_b(p);
    }
    for p in t.out_b() {
        t.deliver_a(&p);
    }
    assert_eq!(t.comps_a().len(), 1);
    t.deliver_b(&stale);
    assert!(t.out_b().is_empty(), "the late request was answered");
    assert_eq!(t.b.stats().rx_invalid, 2);
    t.deliver_b(&sent[0]);
    let answer = t.out_b();
    assert_eq!(t.b.stats().rx_dup, 1);
    assert!(answer.iter().any(|p| {
        matches!(wire::PacketRepr::parse(&p.1), Ok(r) if matches!(r.body, wire::Body::Ack(a) if a.flags & wire::ACK_FLAG_DUP != 0))
    }));
    assert_eq!(t.a.reordering_multiplier(), 0);
}

#[test]
fn an_echo_of_an_earlier_qp_gives_no_rtt_sample() {
    // Spec: MR-5.5.1, MR-9.3.1 — a peer that answers a late request of an
    // earlier QP with the same numbers (one without MR-5.2.2's rule, or a
    // packet whose TSN falls among those the later pair has received) echoes
    // the earlier QP's timestamp. Taken as a path's first RTT sample, it set
    // the path's srtt to the 300 ms between the two QPs (and its RTO and loss
    // timer with it); one real sample later the srtt was still 262 ms. Here B's
    // ACK of A's first packet is made to echo the earlier packet's timestamp.
    let (stale, mut t) = earlier_qp_packet_and_later_pair();
    let old_ts = wire::PacketRepr::parse(&stale.1).unwrap().base.timestamp;
    let srtt = |c: &Connection| (0..MAX_PATHS).filter_map(|q| c.path_info(q)).map(|p| p.srtt_ns).collect::<Vec<_>>();
    let unsampled = srtt(&t.a);
    t.ma.set_local(9, vec![2; 8]);
    t.a.post_send(SendWr::write(9, 8, 0x1000, 0x77)).unwrap();
    for p in t.out_a() {
        t.deliver_b(&p);
    }
    for (port, bytes) in t.out_b() {
        let mut r = wire::PacketRepr::parse(&bytes).unwrap();
        if let wire::Body::Ack(ref mut a) = r.body {
            a.echo_ts = old_ts;
        }
        let mut forged = vec![0u8; r.buffer_len()];
        r.emit(&mut forged).unwrap();
        t.deliver_a(&(port, forged));
    }
    assert_eq!(t.comps_a().len(), 1, "the ACK itself is good");
    assert_eq!(srtt(&t.a), unsampled, "the earlier QP's timestamp was taken as an RTT sample");
    // The pair exchanges a message on every path: each has its RTT.
    for k in 0..MAX_PATHS as u64 {
        t.ma.set_local(k, vec![2; 8]);
        t.a.post_send(SendWr::write(k, 8, 0x1000, 0x77)).unwrap();
    }
    let sent = t.out_a();
    t.now += 20_000;
    for p in &sent {
        t.deliver_b(p);
    }
    for p in t.out_b() {
        t.deliver_a(&p);
    }
    assert_eq!(t.comps_a().len(), MAX_PATHS);
    let sampled = srtt(&t.a);
    assert!(sampled.iter().all(|&r| r == 20_000), "{sampled:?}");
}

#[test]
fn a_report_wait_fails_when_no_path_is_free_to_probe() {
    // Spec: MR-5.5.4, MR-6.4.3 — A has one path, and its SEND is acknowledged
    // but its delivery not reported. A's probes for the report go unanswered,
    // which takes the path out of service (probed on its own from then on); an
    // ACK that revives nothing (a repeat, reporting no packets) comes after
    // that; then B is silent. Later waits find no path free to probe, and only
    // a probe of the wait's own counted a retry: A probed the path for ever,
    // backing off, and never failed the work (found by the `pair_variants`
    // driver: a READ waiting for the responses of a responder in the error
    // state, 7,820 probes).
    let mut t = Pair::new(|c| {
        c.retry_cnt = 3;
        c.num_paths = 1;
    });
    t.ma.set_local(1, vec![1; 10]);
    t.mb.set_recv(60, 100);
    t.b.post_recv(RecvWr { wr_id: 60, len: 100 }).unwrap();
    t.a.post_send(SendWr::send(1, 10)).unwrap();
    t.mb.unplaced = true;
    for p in t.out_a() {
        t.deliver_b(&p);
    }
    let acks = t.out_b();
    assert_eq!(acks.len(), 1);
    t.deliver_a(&acks[0]);
    assert!(t.comps_a().is_empty() && !t.a.in_flight(), "acknowledged, not delivered");
    // The same ACK again, reporting no packets received.
    let mut repeat = wire::PacketRepr::parse(&acks[0].1).unwrap();
    match &mut repeat.body {
        wire::Body::Ack(a) => a.rcv_count = 0,
        b => panic!("not an ACK: {b:?}"),
    }
    let mut bytes = vec![0u8; acks[0].1.len()];
    let n = repeat.emit(&mut bytes).unwrap();
    let repeat = (acks[0].0, bytes[..n].to_vec());
    // Waits and probes, none answered, until the path is out of service.
    let mut probes = 0;
    while t.a.path_info(0).unwrap().status == PathStatus::Active {
        let deadline = t.a.poll_timeout().expect("the requester waits for a report with no timer");
        t.now = t.now.max(deadline.as_nanos());
        t.a.handle_timeout(Instant(t.now));
        probes += t.out_a().len();
        assert!(probes < 100 && t.a.state() == QpState::Rts, "the path stayed in service ({probes} probes)");
    }
    t.deliver_a(&repeat);
    assert_eq!(t.a.state(), QpState::Rts);
    probes += fire_unanswered(&mut t);
    let got: Vec<_> = t.comps_a().iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(got, vec![(1, WcStatus::RetryExcErr)], "after {probes} probes");
    assert_eq!(t.a.state(), QpState::Error);
}
