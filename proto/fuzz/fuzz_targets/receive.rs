//! Receive-path fuzz target: parse + connection state machine. The input is
//! a sequence of records `[len: u16][ctl: u8][len bytes]`; each record is a
//! datagram delivered to a live connection (with posted receives, a
//! registered region and work of its own in flight), `ctl` advances virtual
//! time, sets CE and fires timers. Nothing may panic (spec MR-3.1.6).
#![no_main]
use libfuzzer_sys::fuzz_target;
use metaroce_proto::*;

#[path = "../../tests/common/mod.rs"]
mod common;
use common::VecMemory;

fuzz_target!(|data: &[u8]| {
    let mut c = Connection::new(Config::test_pair(2, 1));
    let mut m = VecMemory::new();
    m.add_region(0x77, 0x1000, 1 << 16);
    for i in 0..8u64 {
        m.set_recv(100 + i, 8192);
        let _ = c.post_recv(RecvWr { wr_id: 100 + i, len: 8192 });
    }
    m.set_local(1, vec![1; 20_000]);
    let _ = c.post_send(SendWr::write(1, 20_000, 0x1000, 0x77));
    let _ = c.post_send(SendWr::read(2, 5_000, 0x1000, 0x77));
    let _ = c.post_send(SendWr::faa(3, 0x1000, 0x77, 1));
    let mut buf = vec![0u8; c.max_packet_len()];
    let mut now = 1_000u64;
    while c.poll_transmit(Instant(now), &mut buf, &mut m).is_some() {}
    let mut rest = data;
    while rest.len() >= 3 {
        let len = (u16::from_be_bytes([rest[0], rest[1]]) as usize) % 9_200;
        let ctl = rest[2];
        rest = &rest[3..];
        let (pkt, r) = rest.split_at(len.min(rest.len()));
        rest = r;
        now += (ctl >> 2) as u64 * 1_000;
        c.handle_datagram(Instant(now), 0xC000 | ctl as u16, ctl & 1 != 0, pkt, &mut m);
        if ctl & 2 != 0 {
            c.handle_timeout(Instant(now));
        }
        while c.poll_transmit(Instant(now), &mut buf, &mut m).is_some() {}
        while c.poll_completion().is_some() {}
        let _ = c.poll_timeout();
    }
});
