//! Host micro-benchmark of the protocol core: two connections wired
//! back-to-back by a perfect zero-delay wire, one streaming 64 KiB RDMA
//! WRITEs to the other. Prints CPU time per data packet for both ends
//! together (ACK generation and processing included), once with a memory
//! that copies payloads and once with one that does not (protocol work only).
//!
//! `cargo run --release --example bench`

#[path = "../tests/common/mod.rs"]
mod common;

use common::VecMemory;
use metaroce_proto::{
    AtomicOp, Config, Connection, Instant, LocalMemory, MemError, Memory, Responder, SendWr,
};

/// Accepts everything, copies nothing.
struct NullMem;
impl Responder for NullMem {
    fn write_remote(&mut self, _: u32, _: u64, _: &[u8]) -> Result<(), MemError> {
        Ok(())
    }
    fn read_remote(&mut self, _: u32, _: u64, _: &mut [u8]) -> Result<(), MemError> {
        Ok(())
    }
    fn atomic_remote(&mut self, _: u32, _: u64, _: AtomicOp) -> Result<u64, MemError> {
        Ok(0)
    }
    fn write_recv(&mut self, _: u64, _: u32, _: &[u8]) -> Result<(), MemError> {
        Ok(())
    }
    fn invalidate(&mut self, _: u32) -> Result<(), MemError> {
        Ok(())
    }
}
impl LocalMemory for NullMem {
    fn read_local(&mut self, _: u64, _: u32, _: &mut [u8]) -> Result<(), MemError> {
        Ok(())
    }
    fn write_local(&mut self, _: u64, _: u32, _: &[u8]) -> Result<(), MemError> {
        Ok(())
    }
}

fn run<M: Memory>(ma: &mut M, mb: &mut M) -> (u64, f64) {
    let mut a = Box::new(Connection::new(Config::test_pair(1, 2)));
    let mut b = Box::new(Connection::new(Config::test_pair(2, 1)));
    const MSG: u32 = 64 << 10;
    let total_msgs = 4096u64; // 256 MiB
    let mut buf = vec![0u8; a.max_packet_len()];
    let mut buf2 = vec![0u8; a.max_packet_len()];
    let (mut posted, mut done) = (0u64, 0u64);
    let mut now = 0u64;
    let start = std::time::Instant::now();
    while done < total_msgs {
        while posted < total_msgs && posted - done < 16 {
            let wr = SendWr::write(posted % 16, MSG, 0x1000 + (posted % 16) * MSG as u64, 0x77);
            a.post_send(wr).unwrap();
            posted += 1;
        }
        while let Some(t) = a.poll_transmit(Instant(now), &mut buf, ma) {
            b.handle_datagram(Instant(now), t.src_port, false, &buf[..t.len], mb);
            while let Some(t) = b.poll_transmit(Instant(now), &mut buf2, mb) {
                a.handle_datagram(Instant(now), t.src_port, false, &buf2[..t.len], ma);
            }
        }
        while a.poll_completion().is_some() {
            done += 1;
        }
        now += 1_000;
    }
    let el = start.elapsed().as_nanos() as f64;
    let data = a.stats().tx_data;
    (data, el / data as f64)
}

fn main() {
    let (mut ma, mut mb) = (VecMemory::new(), VecMemory::new());
    mb.add_region(0x77, 0x1000, 16 << 16);
    for w in 0..16 {
        ma.set_local(w, vec![w as u8; 64 << 10]);
    }
    let (n, copy) = run(&mut ma, &mut mb);
    let (_, proto) = run(&mut NullMem, &mut NullMem);
    println!(
        "{n} data packets of 4 KiB: {copy:.0} ns per packet with payload copies, \
         {proto:.0} ns per packet of protocol work (both ends, ACKs included)"
    );
}
