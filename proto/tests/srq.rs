//! Shared receive queues (MR-4.2.3): responders whose receive WQEs come from
//! one pool take a WQE only when a message that needs one arrives, so the
//! WQEs go to whichever connection's message comes first and no idle
//! connection holds them. Modelled on rdma-core's test_rc_srq_traffic (two
//! QPs on one SRQ, one WQE reposted per message received).

mod common;
use common::{SharedRecvQueue as Pool, VecMemory};
use metaroce_proto::*;

/// Requester `a` (plain memory) and responder `b` on the shared pool.
struct Link {
    a: Connection,
    b: Connection,
    ma: VecMemory,
    mb: VecMemory,
}

impl Link {
    fn new(qa: u32, qb: u32, pool: &Pool) -> Link {
        let mut ca = Config::test_pair(qa, qb);
        let mut cb = Config::test_pair(qb, qa);
        ca.mtu = 1024;
        cb.mtu = 1024;
        let mut mb = VecMemory::new();
        mb.shared = Some(pool.clone());
        mb.add_region(0x77, 0x1000, 4096);
        Link {
            a: Connection::new(ca),
            b: Connection::new(cb),
            ma: VecMemory::new(),
            mb,
        }
    }
    fn out_a(&mut self, now: u64, buf: &mut [u8]) -> Vec<(u16, Vec<u8>)> {
        let mut v = vec![];
        while let Some(t) = self.a.poll_transmit(Instant(now), buf, &mut self.ma) {
            v.push((t.src_port, buf[..t.len].to_vec()));
        }
        v
    }
    fn deliver_b(&mut self, now: u64, p: &(u16, Vec<u8>)) {
        self.b
            .handle_datagram(Instant(now), p.0, false, &p.1, &mut self.mb);
    }
    /// One round: everything each side has to send is delivered, timers fire.
    fn round(&mut self, now: u64, buf: &mut [u8]) {
        for p in self.out_a(now, buf) {
            self.deliver_b(now, &p);
        }
        while let Some(t) = self.b.poll_transmit(Instant(now), buf, &mut self.mb) {
            self.a
                .handle_datagram(Instant(now), t.src_port, false, &buf[..t.len], &mut self.ma);
        }
        for c in [&mut self.a, &mut self.b] {
            if c.poll_timeout().is_some_and(|d| d.as_nanos() <= now) {
                c.handle_timeout(Instant(now));
            }
        }
    }
}

fn comps(c: &mut Connection) -> Vec<Completion> {
    std::iter::from_fn(|| c.poll_completion()).collect()
}

#[test]
fn two_connections_share_two_receive_wqes() {
    // Spec: MR-4.2.3 — test_rc_srq_traffic: the pool holds two WQEs, one per
    // connection; every message received is answered by posting one more.
    let pool = Pool::default();
    let mut links = [Link::new(0x11, 0x21, &pool), Link::new(0x12, 0x22, &pool)];
    let mut buf = vec![0u8; 9200];
    let mut now = 1_000u64;
    let mut next_wqe = 100u64;
    let mut sent = [vec![], vec![]];
    for _ in 0..2 {
        pool.borrow_mut().push_back(RecvWr {
            wr_id: next_wqe,
            len: 64,
        });
        next_wqe += 1;
    }
    for iter in 0..100u64 {
        for (i, l) in links.iter_mut().enumerate() {
            let msg = format!("message {iter} on {i}").into_bytes();
            let wr = 1000 + iter;
            l.ma.set_local(wr, msg.clone());
            l.a.post_send(SendWr::send(wr, msg.len() as u32)).unwrap();
            // An RDMA WRITE and the ACK traffic need no receive WQE: they take none.
            l.ma.set_local(wr + 5000, vec![iter as u8; 16]);
            l.a.post_send(SendWr::write(wr + 5000, 16, 0x1000, 0x77))
                .unwrap();
            let mut got = vec![];
            for _ in 0..50 {
                l.round(now, &mut buf);
                now += 2_000;
                got.extend(comps(&mut l.b));
                sent[i].extend(comps(&mut l.a));
                if !got.is_empty() {
                    break;
                }
            }
            assert_eq!(got.len(), 1, "iteration {iter}, connection {i}: {got:?}");
            assert_eq!(got[0].status, WcStatus::Success);
            assert_eq!(&l.mb.recv[&got[0].wr_id][..msg.len()], &msg[..]);
            // The consumer reposts one WQE per message, as the test does.
            pool.borrow_mut().push_back(RecvWr {
                wr_id: next_wqe,
                len: 64,
            });
            next_wqe += 1;
        }
    }
    for (i, l) in links.iter_mut().enumerate() {
        for _ in 0..10 {
            l.round(now, &mut buf);
            now += 2_000;
        }
        let mut c = std::mem::take(&mut sent[i]);
        c.extend(comps(&mut l.a));
        assert_eq!(c.len(), 200, "connection {i}");
        assert!(
            c.iter().all(|c| c.status == WcStatus::Success),
            "connection {i}"
        );
        assert_eq!(
            l.mb.taken.len(),
            100,
            "connection {i}: one WQE per message, none held"
        );
        assert_eq!(l.b.stats().rnr_naks, 0, "connection {i}");
    }
    assert_eq!(
        pool.borrow().len(),
        2,
        "both WQEs stay in the pool between messages"
    );
}

#[test]
fn empty_pool_refuses_with_rnr_until_a_wqe_is_posted() {
    // Spec: MR-4.2.3, MR-4.2.4, MR-4.2.5.
    let pool = Pool::default();
    let mut l = Link::new(0x11, 0x21, &pool);
    let mut buf = vec![0u8; 9200];
    let mut now = 1_000u64;
    l.ma.set_local(1, b"wait for it".to_vec());
    l.a.post_send(SendWr::send(1, 11)).unwrap();
    for _ in 0..20 {
        l.round(now, &mut buf);
        now += 50_000;
    }
    assert!(l.b.stats().rnr_naks >= 2);
    assert!(comps(&mut l.a).is_empty() && comps(&mut l.b).is_empty());
    pool.borrow_mut().push_back(RecvWr { wr_id: 7, len: 32 });
    for _ in 0..20 {
        l.round(now, &mut buf);
        now += 50_000;
    }
    let c = comps(&mut l.b);
    assert_eq!(
        (c.len(), c[0].wr_id, c[0].status),
        (1, 7, WcStatus::Success)
    );
    assert_eq!(&l.mb.recv[&7][..11], b"wait for it");
    assert_eq!(comps(&mut l.a)[0].status, WcStatus::Success);
}

#[test]
fn a_later_message_arriving_first_binds_wqes_in_ssn_order() {
    // Spec: MR-4.2.3 — message SSN s uses the s-th WQE, also when it is taken
    // from the pool because a later message arrived first.
    let pool = Pool::default();
    let mut l = Link::new(0x11, 0x21, &pool);
    let mut buf = vec![0u8; 9200];
    for (wr, id) in [(1u64, 50u64), (2, 51), (3, 52)] {
        pool.borrow_mut().push_back(RecvWr { wr_id: id, len: 32 });
        l.ma.set_local(wr, format!("msg{wr}").into_bytes());
        l.a.post_send(SendWr::send(wr, 4)).unwrap();
    }
    let pkts = l.out_a(1_000, &mut buf);
    let data: Vec<_> = pkts
        .iter()
        .filter(|p| p.1[1] != 0x20 && p.1[1] != 0x21)
        .cloned()
        .collect();
    assert_eq!(data.len(), 3);
    l.deliver_b(1_000, &data[1]);
    assert_eq!(
        l.mb.taken,
        vec![50, 51],
        "the first message's WQE is taken with the second's"
    );
    l.deliver_b(1_000, &data[0]);
    l.deliver_b(1_000, &data[2]);
    assert_eq!(l.mb.taken, vec![50, 51, 52]);
    let mut now = 1_000;
    for _ in 0..10 {
        now += 2_000;
        l.round(now, &mut buf);
    }
    let c = comps(&mut l.b);
    assert_eq!(
        c.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![50, 51, 52]
    );
    for (id, text) in [(50u64, b"msg1"), (51, b"msg2"), (52, b"msg3")] {
        assert_eq!(&l.mb.recv[&id][..4], text);
    }
    assert!(comps(&mut l.a)
        .iter()
        .all(|c| c.status == WcStatus::Success));
}
