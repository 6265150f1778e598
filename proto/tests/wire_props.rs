//! Property tests: parse/emit round trips, and "no byte string panics" for
//! the parser and for the whole receive path (parse + state machine). The
//! latter is the bounded, deterministic stable-Rust counterpart of the
//! cargo-fuzz target in `fuzz/`.

mod common;
use common::{Rng, VecMemory};
use metaroce_proto::wire::*;
use metaroce_proto::{Config, Connection, Instant, RecvWr, SendWr};

fn random_repr<'a>(r: &mut Rng, payload: &'a [u8]) -> PacketRepr<'a> {
    let ops = [
        Opcode::Send,
        Opcode::SendImm,
        Opcode::SendInv,
        Opcode::Write,
        Opcode::WriteImm,
        Opcode::ReadReq,
        Opcode::AtomicCas,
        Opcode::AtomicFaa,
        Opcode::ReadResp,
        Opcode::AtomicResp,
        Opcode::Ack,
        Opcode::Probe,
        Opcode::UdSend,
        Opcode::UdSendImm,
    ];
    let op = ops[r.below(ops.len() as u64) as usize];
    let mut flags = Flags((r.next_u64() as u8) & !(Flags::RESERVED | Flags::EXT | Flags::LAST));
    let off = r.below(1 << 20) as u32;
    let body = if op.is_request() {
        let atomic = op.is_atomic().then(|| AtomicRepr {
            swap_add: r.next_u64(),
            compare: r.next_u64(),
        });
        let (payload, offset, msg_len) = if op.carries_payload() {
            let extra = if r.below(2) == 0 {
                0
            } else {
                r.below(5000) as u32
            };
            if extra == 0 {
                flags = flags.with(Flags::LAST, true);
            }
            (payload, off, off + payload.len() as u32 + extra)
        } else if atomic.is_some() {
            flags = flags.with(Flags::LAST, true);
            (&payload[..0], 0, 8)
        } else {
            flags = flags.with(Flags::LAST, true);
            (&payload[..0], 0, r.next_u64() as u32)
        };
        Body::Request {
            req: RequestRepr {
                msn: r.next_u64() as u32,
                ssn: r.next_u64() as u32,
                offset,
                msg_len,
                imm: r.next_u64() as u32,
                rkey: r.next_u64() as u32,
                remote_va: r.next_u64(),
            },
            atomic,
            payload: payload.into(),
        }
    } else if op.is_response() {
        let (payload, offset, msg_len) = if op == Opcode::AtomicResp {
            (&payload[..8.min(payload.len())], 0, 8)
        } else {
            (payload, off, off + payload.len() as u32)
        };
        if op == Opcode::AtomicResp && payload.len() != 8 {
            return random_repr(r, payload);
        }
        flags = flags.with(Flags::LAST, true);
        Body::Response {
            rsp: ResponseRepr {
                req_msn: r.next_u64() as u32,
                offset,
                msg_len,
            },
            payload: payload.into(),
        }
    } else if op == Opcode::Ack {
        Body::Ack(random_ack(r))
    } else if op == Opcode::Probe {
        Body::Probe
    } else {
        Body::Datagram {
            ud: UdRepr {
                qkey: r.next_u64() as u32,
                src_qpn: r.below(1 << 24) as u32,
                imm: r.next_u64() as u32,
            },
            payload: payload.into(),
        }
    };
    // Spec: MR-3.7.6 — requests and responses may carry a positive ACK.
    let data_packet = matches!(body, Body::Request { .. } | Body::Response { .. });
    let ack = (data_packet && r.below(2) == 0).then(|| AckRepr {
        syndrome: Some(Syndrome::Ack),
        rnr_timer: 0,
        flags: random_ack(r).flags & !ACK_FLAG_PROBE,
        ..random_ack(r)
    });
    PacketRepr {
        base: BaseRepr {
            opcode: op,
            // What the receiver sees: emit sets EXT exactly when a chain follows.
            flags: flags.with(Flags::EXT, ack.is_some()),
            path_id: r.below(16) as u8,
            dest_qpn: r.below(1 << 24) as u32,
            path_psn: r.next_u64() as u32,
            tsn: r.next_u64() as u32,
            timestamp: r.next_u64() as u32,
        },
        body,
        ack,
    }
}

fn random_ack(r: &mut Rng) -> AckRepr {
    AckRepr {
        cum_tsn: r.next_u64() as u32,
        syndrome: Some(Syndrome::from_u8(r.below(6) as u8).unwrap()),
        rnr_timer: r.next_u64() as u8,
        echo_path: r.below(16) as u8,
        flags: r.next_u64() as u8,
        msn: r.next_u64() as u32,
        nak_tsn: r.next_u64() as u32,
        echo_psn: r.next_u64() as u32,
        echo_ts: r.next_u64() as u32,
        ack_delay: r.next_u64() as u32,
        ce_count: r.next_u64() as u16,
        rcv_count: r.next_u64() as u16,
        credit_hint: r.next_u64() as u16,
        sack: [r.next_u64(), r.next_u64(), r.next_u64(), r.next_u64()],
    }
}

#[test]
fn roundtrip_random_packets() {
    let mut r = Rng::new(1);
    for _ in 0..20_000 {
        let n = r.below(300) as usize;
        let payload = r.bytes(n.max(8));
        let p = random_repr(&mut r, &payload);
        let mut buf = vec![0u8; p.buffer_len()];
        let len = p.emit(&mut buf).expect("emit");
        assert_eq!(len, buf.len());
        let back = PacketRepr::parse(&buf).unwrap_or_else(|e| panic!("{e:?} for {p:?}"));
        assert_eq!(back, p);
        // The same datagram in pieces: any split after the headers parses to
        // the same packet; a split inside them is Truncated, never a panic.
        let cut = r.below(len as u64 + 1) as usize;
        let (first, rest) = buf.split_at(cut);
        let mut pieces: Vec<&[u8]> = vec![];
        let mut rest = rest;
        while !rest.is_empty() {
            let (a, b) = rest.split_at(rest.len().min(1 + r.below(40) as usize));
            pieces.push(a);
            rest = b;
        }
        let route = PacketRepr::route(first);
        match PacketRepr::parse_scattered(first, &pieces) {
            Ok(q) => {
                assert_eq!(route, Ok(routed(&q)), "{q:?}");
                assert!(
                    cut >= p.header_len(),
                    "headers split at {cut} parsed: {q:?}"
                );
                assert_eq!(q, p);
            }
            Err(e) => {
                assert_eq!(route, Err(WireError::Truncated), "a split at {cut} of {p:?}");
                assert!(cut < p.header_len(), "{e:?} for a split at {cut} of {p:?}");
                assert_eq!(e, WireError::Truncated);
            }
        }
        // Emitting into a short buffer fails cleanly.
        if len > 0 {
            assert_eq!(p.emit(&mut buf[..len - 1]), Err(WireError::BufferTooSmall));
        }
    }
}

/// The route a parsed packet should have had.
fn routed(p: &PacketRepr<'_>) -> Route {
    Route {
        dest_qpn: p.base.dest_qpn,
        opcode: p.base.opcode,
        path_id: p.base.path_id,
        read_len: match p.body {
            Body::Request { req, .. } if p.base.opcode == Opcode::ReadReq => req.msg_len,
            _ => 0,
        },
    }
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut r = Rng::new(2);
    for i in 0..200_000u64 {
        let n = r.below(if i % 2 == 0 { 40 } else { 200 }) as usize;
        let mut b = r.bytes(n);
        if let Some(x) = b.first_mut() {
            // Bias towards version 1 so deeper layers are reached.
            if i % 3 != 0 {
                *x = 0x10;
            }
        }
        if b.len() > 1 && i % 2 == 0 {
            b[1] = [0x01, 0x04, 0x06, 0x07, 0x10, 0x11, 0x20, 0x21, 0x30][(i % 9) as usize];
        }
        // Routing agrees with the parse: what parses routes where it parses
        // to, and what does not route does not parse.
        match (PacketRepr::parse(&b), PacketRepr::route(&b)) {
            (Ok(p), route) => assert_eq!(route, Ok(routed(&p))),
            (Err(_), _) => {}
        }
        // Views are total even on short buffers.
        let h = BaseHeader::new_unchecked(&b[..]);
        let _ = (h.tsn(), h.path_psn(), h.dest_qpn(), h.timestamp());
        let a = AckHeader::new_unchecked(&b[..]);
        let _ = (a.cum_tsn(), a.sack_bytes(), a.credit_hint());
        for e in ExtIter::new(&b) {
            let _ = e;
        }
    }
}

/// Valid packets produced by a real exchange, then mutated (bit flips,
/// truncation, splices, field rewrites) and fed to a live connection's
/// receive path. Nothing may panic and the connection must stay usable.
#[test]
fn receive_path_mutation_fuzz() {
    let mut seeds: Vec<Vec<u8>> = Vec::new();
    let mut a = Connection::new(Config::test_pair(1, 2));
    let mut b = Connection::new(Config::test_pair(2, 1));
    let (mut ma, mut mb) = (VecMemory::new(), VecMemory::new());
    mb.add_region(0x55, 0x1000, 1 << 16);
    for i in 0..8u64 {
        ma.set_local(i, vec![i as u8; 5000]);
        mb.set_recv(100 + i, 8192);
        b.post_recv(RecvWr {
            wr_id: 100 + i,
            len: 8192,
        })
        .unwrap();
    }
    a.post_send(SendWr::send(0, 5000)).unwrap();
    a.post_send(SendWr::write(1, 5000, 0x1000, 0x55)).unwrap();
    a.post_send(SendWr::read(2, 3000, 0x1000, 0x55)).unwrap();
    a.post_send(SendWr::faa(3, 0x1008, 0x55, 5)).unwrap();
    a.post_send(SendWr::cas(4, 0x1010, 0x55, 0, 9)).unwrap();
    a.post_send(SendWr::write_imm(5, 10, 0x1000, 0x55, 7))
        .unwrap();
    let mut buf = vec![0u8; 9100];
    let now = Instant(1000);
    for _ in 0..6 {
        while let Some(t) = a.poll_transmit(now, &mut buf, &mut ma) {
            seeds.push(buf[..t.len].to_vec());
            b.handle_datagram(now, t.src_port, false, &buf[..t.len], &mut mb);
        }
        while let Some(t) = b.poll_transmit(now, &mut buf, &mut mb) {
            seeds.push(buf[..t.len].to_vec());
            a.handle_datagram(now, t.src_port, false, &buf[..t.len], &mut ma);
        }
    }
    assert!(seeds.len() > 10);
    let mut r = Rng::new(3);
    let mut victims = [
        Connection::new(Config::test_pair(2, 1)),
        Connection::new(Config::test_pair(1, 2)),
    ];
    let mut mem = mb.clone();
    for i in 0..8u64 {
        mem.set_local(i, vec![i as u8; 5000]);
    }
    for v in victims.iter_mut() {
        arm(v, &mut buf, &mut mem);
    }
    for i in 0..60_000u64 {
        let mut p = seeds[r.below(seeds.len() as u64) as usize].clone();
        match r.below(6) {
            0 => {
                for _ in 0..1 + r.below(4) {
                    let k = r.below(p.len() as u64) as usize;
                    p[k] ^= 1 << r.below(8);
                }
            }
            1 => p.truncate(r.below(p.len() as u64 + 1) as usize),
            2 => {
                // Rewrite a 32-bit field with an extreme value.
                let k = (r.below((p.len() / 4) as u64) * 4) as usize;
                let v = [0u32, 1, 0x7fff_ffff, 0x8000_0000, u32::MAX][r.below(5) as usize];
                if k + 4 <= p.len() {
                    p[k..k + 4].copy_from_slice(&v.to_be_bytes());
                }
            }
            3 => {
                let other = &seeds[r.below(seeds.len() as u64) as usize];
                let cut = r.below(p.len().min(other.len()) as u64) as usize;
                p = [&p[..cut], &other[cut..]].concat();
            }
            4 => {
                let n = r.below(64) as usize;
                p.extend(r.bytes(n))
            }
            _ => {}
        }
        let v = &mut victims[(i % 2) as usize];
        let t = Instant(1000 + i * 100);
        v.handle_datagram(t, 0xC000, r.below(4) == 0, &p, &mut mem);
        if i % 7 == 0 {
            v.handle_timeout(t);
        }
        while v.poll_transmit(t, &mut buf, &mut mem).is_some() {}
        while v.poll_completion().is_some() {}
        if i % 5_000 == 4_999 {
            // Fresh victims now and then, with work in flight again.
            let cfg = *v.config();
            v.reset(cfg);
            arm(v, &mut buf, &mut mem);
        }
    }
}

/// Posts receives and some work of the victim's own, and sends it, so forged
/// ACKs, NAKs and responses reach the requester logic too.
fn arm(v: &mut Connection, buf: &mut [u8], mem: &mut VecMemory) {
    for i in 0..8u64 {
        let _ = v.post_recv(RecvWr {
            wr_id: 100 + i,
            len: 8192,
        });
    }
    let _ = v.post_send(SendWr::write(0, 5000, 0x1000, 0x55));
    let _ = v.post_send(SendWr::read(1, 3000, 0x1000, 0x55));
    let _ = v.post_send(SendWr::faa(2, 0x1008, 0x55, 1));
    let _ = v.post_send(SendWr::send(3, 100));
    while v.poll_transmit(Instant(900), buf, mem).is_some() {}
}

/// Spec: MR-3.7.6 — the ACK extension rides only on requests and responses,
/// once, as a plain ACK; anything else is discarded.
#[test]
fn piggybacked_ack_is_checked() {
    let mut r = Rng::new(3);
    let payload = [5u8; 16];
    let mut ack = random_ack(&mut r);
    ack.syndrome = Some(Syndrome::Ack);
    ack.rnr_timer = 0;
    ack.flags &= !ACK_FLAG_PROBE;
    let send = PacketRepr {
        base: BaseRepr {
            opcode: Opcode::Send,
            flags: Flags(0).with(Flags::LAST, true).with(Flags::EXT, true),
            path_id: 1,
            dest_qpn: 7,
            path_psn: 1,
            tsn: 1,
            timestamp: 1,
        },
        body: Body::Request {
            req: RequestRepr {
                msn: 0,
                ssn: 0,
                offset: 0,
                msg_len: 16,
                imm: 0,
                rkey: 0,
                remote_va: 0,
            },
            atomic: None,
            payload: Payload::contiguous(&payload),
        },
        ack: Some(ack),
    };
    let mut buf = vec![0u8; send.buffer_len()];
    send.emit(&mut buf).unwrap();
    assert_eq!(PacketRepr::parse(&buf), Ok(send));
    let ext = BaseRepr::LEN + RequestRepr::LEN;
    assert_eq!(
        (buf[ext] & 0x7f, buf[ext + 1], buf[ext + 2]),
        (EXT_TYPE_ACK, 18, EXT_FLAG_CRITICAL)
    );
    // A NAK, an RNR timer or a probe answer may not ride along.
    for (at, val) in [(4, Syndrome::NakRnr as u8), (5, 3), (7, ACK_FLAG_PROBE)] {
        let mut b = buf.clone();
        b[ext + EXT_HEADER_LEN + at] |= val;
        assert_eq!(
            PacketRepr::parse(&b),
            Err(WireError::Malformed),
            "field at {at}"
        );
    }
    // Nor a shorter one.
    let mut b = buf.clone();
    b[ext + 1] = 17;
    assert!(PacketRepr::parse(&b).is_err());
    // Not on an ACK packet: emit refuses, parse discards.
    let bare = PacketRepr {
        body: Body::Ack(ack),
        ack: Some(ack),
        ..send
    };
    assert_eq!(bare.emit(&mut [0u8; 512]), Err(WireError::Malformed));
    let mut plain = PacketRepr {
        body: Body::Ack(ack),
        ack: None,
        ..send
    };
    plain.base.opcode = Opcode::Ack;
    let mut b = vec![0u8; plain.buffer_len() + ACK_EXT_LEN];
    plain.emit(&mut b).unwrap();
    b[BaseRepr::LEN + AckRepr::LEN..].copy_from_slice(&buf[ext..ext + ACK_EXT_LEN]);
    b[2] |= Flags::EXT; // the MRH flags byte (MR-3.2.4)
    assert_eq!(PacketRepr::parse(&b), Err(WireError::Malformed));
}
