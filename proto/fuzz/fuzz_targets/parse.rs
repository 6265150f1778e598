//! Parser fuzz target: any byte string must parse or be rejected without
//! panicking, and anything accepted must re-emit to a packet that parses to
//! the same representation (spec MR-3.1.6).
#![no_main]
use libfuzzer_sys::fuzz_target;
use metaroce_proto::wire::PacketRepr;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = PacketRepr::parse(data) {
        let mut out = vec![0u8; p.buffer_len()];
        let n = p.emit(&mut out).expect("emit of a parsed packet");
        let q = PacketRepr::parse(&out[..n]).expect("re-parse");
        assert_eq!(p.base.opcode, q.base.opcode);
        assert_eq!(p.payload(), q.payload());
    }
});
