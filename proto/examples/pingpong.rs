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

/// One side: its connection, memory, a transmit buffer and the messages it
/// has received.
struct Side {
    conn: Box<Connection>,
    mem: VecMemory,
    buf: Vec<u8>,
    recvs: u64,
}

impl Side {
    fn new(local: u32, remote: u32) -> Self {
        let conn = Box::new(Connection::new(Config::test_pair(local, remote)));
        let buf = vec![0u8; conn.max_packet_len()];
        Self {
            conn,
            mem: VecMemory::new(),
            buf,
            recvs: 0,
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

    /// Posts an 8-byte SEND and transmits what is due.
    fn send(&mut self, now: u64, wr_id: u64, wire: &mut Vec<(u16, Vec<u8>)>) {
        self.mem.set_local(wr_id, vec![wr_id as u8; 8]);
        self.conn
            .post_send(SendWr::send(wr_id, 8))
            .expect("send queue has room");
        self.run(now, wire);
    }

    /// Takes the packets that reached this side and answers every message
    /// received with one of its own (numbered from `next_wr`); then runs the
    /// timers that came due (delayed ACKs), as the engine's work would.
    fn receive(
        &mut self,
        now: u64,
        packets: &mut Vec<(u16, Vec<u8>)>,
        wire: &mut Vec<(u16, Vec<u8>)>,
        next_wr: &mut u64,
    ) {
        for (port, pkt) in packets.drain(..) {
            self.conn
                .handle_datagram(Instant(now), port, false, &pkt, &mut self.mem);
            for _ in 0..self.run(now, wire) {
                self.recvs += 1;
                self.post_recv(self.recvs);
                *next_wr += 1;
                self.send(now, *next_wr, wire);
            }
        }
        if self
            .conn
            .poll_timeout()
            .is_some_and(|t| t.as_nanos() <= now)
        {
            self.conn.handle_timeout(Instant(now));
            self.run(now, wire);
        }
    }

    /// Sends everything due now into `wire`; returns the messages received.
    fn run(&mut self, now: u64, wire: &mut Vec<(u16, Vec<u8>)>) -> u32 {
        while let Some(t) = self
            .conn
            .poll_transmit(Instant(now), &mut self.buf, &mut self.mem)
        {
            wire.push((t.src_port, self.buf[..t.len].to_vec()));
        }
        let mut recvs = 0;
        while let Some(c) = self.conn.poll_completion() {
            recvs += u32::from(c.opcode.is_recv());
        }
        // The engine asks for its next deadline after every run: count its cost.
        let _ = self.conn.poll_timeout();
        recvs
    }
}

fn main() {
    let round_trips: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let (mut a, mut b) = (Side::new(1, 2), Side::new(2, 1));
    let (mut to_a, mut to_b) = (Vec::new(), Vec::new());
    let mut next_wr = 1u64;
    a.post_recv(0);
    b.post_recv(0);
    let start = std::time::Instant::now();
    // A sends; every message B receives is answered; every answer A receives
    // starts the next round trip. The wire delivers each packet 10 µs later.
    let mut now = 0u64;
    a.send(now, next_wr, &mut to_b);
    while a.recvs < round_trips {
        now += 10_000;
        b.receive(now, &mut to_b, &mut to_a, &mut next_wr);
        now += 10_000;
        a.receive(now, &mut to_a, &mut to_b, &mut next_wr);
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
