//! Host micro-benchmark of the protocol core's per-message cost at low load:
//! two connections wired back-to-back, exchanging 8-byte SENDs one at a time
//! (what `ib_send_lat` does). Each side runs the way the kernel module's engine
//! does on every event: handle the datagram, poll transmissions, completions
//! and the next timeout. Prints CPU time per round trip; run it under
//! `valgrind --tool=callgrind` for an instruction count that does not depend
//! on the machine's load.
//!
//! `cargo run --release --example pingpong [round_trips]`

#[path = "../tests/common/mod.rs"]
mod common;

use common::VecMemory;
use metaroce_proto::{Config, Connection, Instant, RecvWr, SendWr};

/// One side: its connection, memory and a transmit buffer.
struct Side {
    conn: Box<Connection>,
    mem: VecMemory,
    buf: Vec<u8>,
}

impl Side {
    fn new(local: u32, remote: u32) -> Self {
        let conn = Box::new(Connection::new(Config::test_pair(local, remote)));
        let buf = vec![0u8; conn.max_packet_len()];
        Self {
            conn,
            mem: VecMemory::new(),
            buf,
        }
    }

    /// Posts a receive for the next message (as the latency test does after
    /// each completion).
    fn post_recv(&mut self, wr_id: u64) {
        self.mem.set_recv(wr_id, 64);
        self.conn
            .post_recv(RecvWr { wr_id, len: 64 })
            .expect("receive queue has room");
    }

    /// Sends everything due now into `wire`; returns the completions seen.
    fn run(&mut self, now: u64, wire: &mut Vec<(u16, Vec<u8>)>) -> (u32, u32) {
        while let Some(t) = self
            .conn
            .poll_transmit(Instant(now), &mut self.buf, &mut self.mem)
        {
            wire.push((t.src_port, self.buf[..t.len].to_vec()));
        }
        let (mut sends, mut recvs) = (0, 0);
        while let Some(c) = self.conn.poll_completion() {
            if c.opcode.is_recv() {
                recvs += 1;
            } else {
                sends += 1;
            }
        }
        let _ = self.conn.poll_timeout();
        (sends, recvs)
    }
}

fn main() {
    let round_trips: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let (mut a, mut b) = (Side::new(1, 2), Side::new(2, 1));
    let mut now = 0u64;
    let mut wire = Vec::new();
    let (mut a_recvs, mut b_recvs) = (0u64, 0u64);
    let mut next_wr = 1u64;
    a.post_recv(0);
    b.post_recv(0);
    let start = std::time::Instant::now();
    // A sends; every message B receives is answered; every answer A receives
    // starts the next round trip. The wire delivers each packet 10 µs later.
    a.mem.set_local(next_wr, vec![1; 8]);
    a.conn
        .post_send(SendWr::send(next_wr, 8))
        .expect("send queue has room");
    a.run(now, &mut wire);
    let mut to_b = core::mem::take(&mut wire);
    let mut to_a = Vec::new();
    while a_recvs < round_trips {
        now += 10_000;
        for (port, pkt) in to_b.drain(..) {
            b.conn
                .handle_datagram(Instant(now), port, false, &pkt, &mut b.mem);
            let (_, r) = b.run(now, &mut wire);
            for _ in 0..r {
                b_recvs += 1;
                b.post_recv(b_recvs);
                next_wr += 1;
                b.mem.set_local(next_wr, vec![2; 8]);
                b.conn
                    .post_send(SendWr::send(next_wr, 8))
                    .expect("send queue has room");
                b.run(now, &mut wire);
            }
        }
        to_a.append(&mut wire);
        now += 10_000;
        for (port, pkt) in to_a.drain(..) {
            a.conn
                .handle_datagram(Instant(now), port, false, &pkt, &mut a.mem);
            let (_, r) = a.run(now, &mut wire);
            for _ in 0..r {
                a_recvs += 1;
                a.post_recv(a_recvs);
                next_wr += 1;
                a.mem.set_local(next_wr, vec![1; 8]);
                a.conn
                    .post_send(SendWr::send(next_wr, 8))
                    .expect("send queue has room");
                a.run(now, &mut wire);
            }
        }
        to_b.append(&mut wire);
        // Timers that came due (delayed ACKs) run as the engine's work would.
        for s in [&mut a, &mut b] {
            if s.conn.poll_timeout().is_some_and(|t| t.as_nanos() <= now) {
                s.conn.handle_timeout(Instant(now));
                s.run(now, &mut wire);
            }
        }
        to_b.append(&mut wire);
    }
    let el = start.elapsed().as_nanos() as f64;
    let (sa, sb) = (a.conn.stats(), b.conn.stats());
    println!(
        "{round_trips} round trips of 8-byte SENDs: {:.0} ns per round trip (both ends); \
         packets sent {} + {}",
        el / round_trips as f64,
        sa.tx_packets,
        sb.tx_packets,
    );
}
