//! Byte-exact fixtures for every header (spec chapter 3 diagrams); these are
//! the normative test vectors of MR-3.8.1.

use metaroce_proto::wire::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const BASE_HEX: &str = "10 04 88 03  00 12 34 56  01 02 03 04  a0 b0 c0 d0  de ad be ef";
const REQ_HEX: &str = "00000011 00000022 00001000 00002000 cafebabe 0badf00d 00007f00 12345678";

fn base(op: Opcode, flags: u8) -> BaseRepr {
    BaseRepr {
        opcode: op,
        flags: Flags(flags),
        path_id: 3,
        dest_qpn: 0x123456,
        path_psn: 0x01020304,
        tsn: 0xa0b0c0d0,
        timestamp: 0xdeadbeef,
    }
}

#[test]
fn base_header_fixture() {
    let b = base(Opcode::Write, Flags::LAST | Flags::ACK_REQ);
    let mut buf = [0u8; 20];
    b.emit(&mut BaseHeader::new_unchecked(&mut buf[..]))
        .unwrap();
    assert_eq!(buf.to_vec(), hex(BASE_HEX));
    let v = BaseHeader::new_checked(&buf[..]).unwrap();
    assert_eq!(v.version(), 1);
    assert_eq!(v.dest_qpn(), 0x123456);
    assert_eq!(BaseRepr::parse(&v).unwrap(), b);
}

#[test]
fn request_header_fixture() {
    let r = RequestRepr {
        msn: 0x11,
        ssn: 0x22,
        offset: 0x1000,
        msg_len: 0x2000,
        imm: 0xcafebabe,
        rkey: 0x0badf00d,
        remote_va: 0x0000_7f00_1234_5678,
    };
    let mut buf = [0u8; 32];
    r.emit(&mut RequestHeader::new_unchecked(&mut buf[..]))
        .unwrap();
    assert_eq!(buf.to_vec(), hex(REQ_HEX));
    assert_eq!(
        RequestRepr::parse(&RequestHeader::new_checked(&buf[..]).unwrap()).unwrap(),
        r
    );
}

#[test]
fn write_packet_fixture() {
    // A WRITE carrying the last 4 bytes of an 8196-byte message at offset 8192.
    let bytes = hex(&format!(
        "{BASE_HEX} 00000011 00000000 00002000 00002004 00000000 0badf00d 00007f00 12345678 61626364"
    ));
    let p = PacketRepr::parse(&bytes).unwrap();
    let Body::Request {
        req,
        atomic,
        payload,
    } = p.body
    else {
        panic!("not a request")
    };
    assert_eq!(req.offset, 0x2000);
    assert_eq!(req.msg_len, 0x2004);
    assert!(atomic.is_none());
    assert_eq!(payload.as_slice(), Some(&b"abcd"[..]));
    let mut out = vec![0u8; p.buffer_len()];
    assert_eq!(p.emit(&mut out).unwrap(), bytes.len());
    assert_eq!(out, bytes);
}

#[test]
fn atomic_packet_fixture() {
    let bytes = hex("10 07 88 03 00123456 01020304 a0b0c0d0 deadbeef \
         00000005 00000000 00000000 00000008 00000000 0badf00d 00007f00 12345678 \
         0102030405060708 1112131415161718");
    let p = PacketRepr::parse(&bytes).unwrap();
    assert_eq!(p.base.opcode, Opcode::AtomicCas);
    let Body::Request {
        atomic: Some(a),
        payload,
        ..
    } = p.body
    else {
        panic!()
    };
    assert_eq!(
        a,
        AtomicRepr {
            swap_add: 0x0102030405060708,
            compare: 0x1112131415161718
        }
    );
    assert!(payload.is_empty());
    let mut out = vec![0u8; p.buffer_len()];
    p.emit(&mut out).unwrap();
    assert_eq!(out, bytes);
}

#[test]
fn response_packet_fixture() {
    let bytes = hex("10 10 08 01 00000042 00000007 00000100 00000000 \
                     00000005 00001000 00001004 00000000 deadbeef");
    let p = PacketRepr::parse(&bytes).unwrap();
    assert_eq!(p.base.opcode, Opcode::ReadResp);
    let Body::Response { rsp, payload } = p.body else {
        panic!()
    };
    assert_eq!(
        rsp,
        ResponseRepr {
            req_msn: 5,
            offset: 0x1000,
            msg_len: 0x1004
        }
    );
    assert_eq!(payload.as_slice(), Some(&[0xde, 0xad, 0xbe, 0xef][..]));
    let mut out = vec![0u8; p.buffer_len()];
    p.emit(&mut out).unwrap();
    assert_eq!(out, bytes);
}

#[test]
fn ack_nak_fixture() {
    let mut sack = [0u64; 4];
    sack[0] = 1 | (1 << 9);
    sack[3] = 1 << 63;
    let a = AckRepr {
        cum_tsn: 0x100,
        syndrome: Some(Syndrome::NakRnr),
        rnr_timer: 0x0c,
        echo_path: 2,
        flags: ACK_FLAG_ECE,
        msn: 7,
        nak_tsn: 0x100,
        echo_psn: 9,
        echo_ts: 0x11223344,
        ack_delay: 500,
        ce_count: 1,
        rcv_count: 4,
        credit_hint: 0xffff,
        sack,
    };
    let expect = hex(
        "00000100 02 0c 02 01 00000007 00000100 00000009 11223344 000001f4 0001 0004 ffff 0020 \
         0102000000000000 0000000000000000 0000000000000000 0000000000000080",
    );
    let mut buf = [0u8; 68];
    a.emit(&mut AckHeader::new_unchecked(&mut buf[..])).unwrap();
    assert_eq!(buf.to_vec(), expect);
    let back = AckRepr::parse(&AckHeader::new_checked(&buf[..]).unwrap()).unwrap();
    assert_eq!(back, a);
    assert!(back.sack_bit(0) && back.sack_bit(9) && back.sack_bit(255) && !back.sack_bit(1));
    assert_eq!(rnr_timer_ns(0x0c), 3_000);
    assert!(rnr_timer_ns(rnr_timer_code(1_000_000)) >= 1_000_000);
}

#[test]
fn probe_and_ud_fixture() {
    let probe = hex("10 21 00 05 00000042 00000000 00000000 00000001");
    let p = PacketRepr::parse(&probe).unwrap();
    assert_eq!(p.body, Body::Probe);
    assert_eq!(p.base.path_id, 5);
    let ud = hex("10 31 00 00 00000042 00000000 00000000 00000001 11111111 00000abc 0000beef 7a");
    let p = PacketRepr::parse(&ud).unwrap();
    let Body::Datagram { ud: u, payload } = p.body else {
        panic!()
    };
    assert_eq!(
        u,
        UdRepr {
            qkey: 0x11111111,
            src_qpn: 0xabc,
            imm: 0xbeef
        }
    );
    assert_eq!(payload.as_slice(), Some(&b"z"[..]));
    let mut out = vec![0u8; p.buffer_len()];
    p.emit(&mut out).unwrap();
    assert_eq!(out, ud);
}

#[test]
fn extension_chain() {
    // A non-critical unknown extension (type 5, 2 words) then a PAD: skipped.
    let bytes = hex("10 01 0c 00 00000042 00000000 00000000 00000001 \
         00000000 00000000 00000000 00000002 00000000 00000000 0000000000000000 \
         85 02 00 00 aabbccdd  00 01 00 00  6869");
    let p = PacketRepr::parse(&bytes).unwrap();
    assert_eq!(p.payload().as_slice(), Some(&b"hi"[..]));
    // The same with the unknown extension marked critical: rejected.
    let mut crit = bytes.clone();
    crit[20 + 32 + 2] = EXT_FLAG_CRITICAL;
    assert_eq!(
        PacketRepr::parse(&crit),
        Err(WireError::UnknownCriticalExtension)
    );
}

#[test]
fn rejections() {
    let good = hex(&format!("{BASE_HEX} {REQ_HEX}"));
    // Version 2 is not v1.
    let mut v2 = good.clone();
    v2[0] = 0x20;
    assert_eq!(PacketRepr::parse(&v2), Err(WireError::BadVersion));
    let mut op = good.clone();
    op[1] = 0x7f;
    assert_eq!(PacketRepr::parse(&op), Err(WireError::BadOpcode));
    assert_eq!(PacketRepr::parse(&good[..30]), Err(WireError::Truncated));
    // LAST set but the payload does not end the message.
    assert_eq!(PacketRepr::parse(&good), Err(WireError::Malformed));
    // READ with payload.
    let mut rd = hex(&format!("{BASE_HEX} {REQ_HEX} 00"));
    rd[1] = Opcode::ReadReq as u8;
    assert_eq!(PacketRepr::parse(&rd), Err(WireError::Malformed));
}

#[test]
fn connection_parameter_block_fixture() {
    // Spec: MR-7.1.3.
    let p = ConnParams {
        version: 1,
        paths: 4,
        qpn: 0x000123,
        initial_tsn: 0x89abcdef,
        mtu: 4096,
        udp_port: 4792,
        max_rd_atomic: 16,
        flags: PARAMS_FLAG_CREDIT,
    };
    let mut buf = [0xffu8; 24];
    p.emit(&mut ParamsBlock::new_unchecked(&mut buf[..]))
        .unwrap();
    assert_eq!(
        buf.to_vec(),
        hex("4d52 01 04 00000123 89abcdef 1000 12b8 10 01 0000 00000000")
    );
    assert_eq!(
        ConnParams::parse(&ParamsBlock::new_checked(&buf[..]).unwrap()).unwrap(),
        p
    );
    let mut bad = buf;
    bad[3] = 9;
    assert_eq!(
        ConnParams::parse(&ParamsBlock::new_unchecked(&bad[..])),
        Err(WireError::Malformed)
    );
    let other = ConnParams {
        mtu: 1024,
        max_rd_atomic: 8,
        ..p
    };
    assert_eq!(ConnParams::agree(&p, &other), (1024, 8));
}

/// A valid parameter block's fields, for tests that vary one of them.
const PLAIN_PARAMS: ConnParams = ConnParams {
    version: 1,
    paths: 4,
    qpn: 7,
    initial_tsn: 1,
    mtu: 4096,
    udp_port: 4792,
    max_rd_atomic: 4,
    flags: 0,
};

/// Emits `p` into a block and parses it back (MR-7.1.3).
fn params_round_trip(p: ConnParams) -> Result<ConnParams, WireError> {
    let mut buf = [0u8; 24];
    p.emit(&mut ParamsBlock::new_unchecked(&mut buf[..]))
        .unwrap();
    ConnParams::parse(&ParamsBlock::new_unchecked(&buf[..]))
}

#[test]
fn connection_parameter_block_mtu_range() {
    // Spec: MR-2.6.1 (256..=65000), MR-7.1.3 (a block outside it is refused).
    let parse_mtu = |mtu: u16| {
        params_round_trip(ConnParams {
            mtu,
            ..PLAIN_PARAMS
        })
        .map(|q| q.mtu)
    };
    for ok in [MIN_MTU, 4096, 9000, 9001, 61440, MAX_MTU] {
        assert_eq!(parse_mtu(ok), Ok(ok), "MTU {ok}");
    }
    for bad in [0, 255, 65001, u16::MAX] {
        assert_eq!(parse_mtu(bad), Err(WireError::Malformed), "MTU {bad}");
    }
    assert_eq!((MIN_MTU, MAX_MTU), (256, 65000));
}

#[test]
fn connection_parameter_block_rd_atomic_range() {
    // Spec: MR-7.1.3 (Max RD Atomic 1..=32, a block outside it is refused),
    // MR-7.1.4 (both ends use the smaller).
    let parse_rd = |max_rd_atomic: u8| {
        params_round_trip(ConnParams {
            max_rd_atomic,
            ..PLAIN_PARAMS
        })
        .map(|q| q.max_rd_atomic)
    };
    for ok in [1, 16, 17, MAX_RD_ATOMIC] {
        assert_eq!(parse_rd(ok), Ok(ok), "Max RD Atomic {ok}");
    }
    for bad in [0, MAX_RD_ATOMIC + 1, u8::MAX] {
        assert_eq!(parse_rd(bad), Err(WireError::Malformed), "Max RD Atomic {bad}");
    }
    assert_eq!(MAX_RD_ATOMIC, 32);
    let (v1_peer, ours) = (
        ConnParams {
            max_rd_atomic: 16,
            ..PLAIN_PARAMS
        },
        ConnParams {
            max_rd_atomic: MAX_RD_ATOMIC,
            ..PLAIN_PARAMS
        },
    );
    assert_eq!(ConnParams::agree(&ours, &v1_peer), (4096, 16));
}
