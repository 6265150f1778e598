//! Prints a packet-level trace of a small exchange for the spec's example
//! appendix: a 4-packet RDMA WRITE sprayed over 4 paths where the second
//! packet is lost, the ACKs (per-path echo, SACK), loss detection on the
//! path with the gap, and selective retransmission on another path.
//!
//! `cargo run --example trace`

#[path = "../tests/common/mod.rs"]
mod common;

use common::VecMemory;
use metaroce_proto::wire::{Body, PacketRepr, Syndrome};
use metaroce_proto::{Config, Connection, Instant, SendWr};

fn describe(dir: &str, t: u64, port: u16, bytes: &[u8], fate: &str) {
    let p = PacketRepr::parse(bytes).unwrap();
    let b = p.base;
    let what = match p.body {
        Body::Request { req, .. } => format!(
            "{:?} tsn={} msn={} off={} len={} of {}{}",
            b.opcode,
            b.tsn % 1000,
            req.msn,
            req.offset,
            p.payload().len(),
            req.msg_len,
            if b.flags.has(metaroce_proto::wire::Flags::LAST) {
                " LAST"
            } else {
                ""
            }
        ),
        Body::Ack(a) => {
            let sacked: Vec<u32> = (0..255)
                .filter(|i| a.sack_bit(*i as usize))
                .map(|i| (a.cum_tsn + 1 + i) % 1000)
                .collect();
            format!(
                "{} cum={} sack={:?} echo_path={} echo_psn={} msn={}",
                if a.syndrome == Some(Syndrome::Ack) {
                    "ACK"
                } else {
                    "NAK"
                },
                a.cum_tsn % 1000,
                sacked,
                a.echo_path,
                a.echo_psn % 1000,
                a.msn
            )
        }
        _ => format!("{:?}", b.opcode),
    };
    println!(
        "{t:>6} ns  {dir}  path={} psn={:<3} sport={port:#06x}  {what}{fate}",
        b.path_id,
        b.path_psn % 1000
    );
}

fn main() {
    let mut ca = Config::test_pair(1, 2);
    let mut cb = Config::test_pair(2, 1);
    for c in [&mut ca, &mut cb] {
        c.mtu = 1024;
        c.initial_tsn = 1000;
        c.peer_initial_tsn = 1000;
    }
    let mut a = Connection::new(ca);
    let mut b = Connection::new(cb);
    let (mut ma, mut mb) = (VecMemory::new(), VecMemory::new());
    mb.add_region(0x77, 0x1000, 8192);
    ma.set_local(1, vec![7; 4096]);
    a.post_send(SendWr::write(1, 4096, 0x1000, 0x77)).unwrap();
    ma.set_local(2, vec![8; 4096]);
    a.post_send(SendWr::write(2, 4096, 0x1000, 0x77)).unwrap();
    let mut buf = vec![0u8; a.max_packet_len()];
    const ONE_WAY: u64 = 3_000;
    // (arrival time, to_b, source port, bytes)
    let mut wire: Vec<(u64, bool, u16, Vec<u8>)> = Vec::new();
    let mut now = 0u64;
    let mut sent_a = 0;
    println!("PSNs and TSNs are shown modulo 1000; one-way delay 3 us; B acknowledges");
    println!(
        "within ack_delay = 2 us. A -> B: two 4 KiB WRITEs, MTU 1024; A's second packet is lost."
    );
    for _ in 0..200 {
        while let Some(t) = a.poll_transmit(Instant(now), &mut buf, &mut ma) {
            sent_a += 1;
            let lost = sent_a == 2;
            describe(
                "A->B",
                now,
                t.src_port,
                &buf[..t.len],
                if lost { "   [lost]" } else { "" },
            );
            if !lost {
                wire.push((now + ONE_WAY, true, t.src_port, buf[..t.len].to_vec()));
            }
        }
        while let Some(t) = b.poll_transmit(Instant(now), &mut buf, &mut mb) {
            describe("B->A", now, t.src_port, &buf[..t.len], "");
            wire.push((now + ONE_WAY, false, t.src_port, buf[..t.len].to_vec()));
        }
        while let Some(c) = a.poll_completion() {
            println!("{now:>6} ns  A completes wr_id={} {:?}", c.wr_id, c.status);
        }
        let next = wire
            .iter()
            .map(|w| w.0)
            .chain(a.poll_timeout().map(|d| d.as_nanos()))
            .chain(b.poll_timeout().map(|d| d.as_nanos()))
            .min();
        let Some(next) = next else { break };
        if a.is_idle() && wire.is_empty() {
            break;
        }
        now = next.max(now);
        let (due, rest): (Vec<_>, Vec<_>) = wire.into_iter().partition(|w| w.0 <= now);
        wire = rest;
        for (_, to_b, port, p) in due {
            if to_b {
                b.handle_datagram(Instant(now), port, false, &p, &mut mb);
            } else {
                a.handle_datagram(Instant(now), port, false, &p, &mut ma);
            }
        }
        for c in [&mut a, &mut b] {
            if c.poll_timeout()
                .map(|d| d.as_nanos() <= now)
                .unwrap_or(false)
            {
                c.handle_timeout(Instant(now));
            }
        }
    }
}
