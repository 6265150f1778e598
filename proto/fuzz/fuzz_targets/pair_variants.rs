//! Coverage-guided entry of the `pair` driver with its variants
//! (`pair_driver::run_variants`): the input's first byte switches on
//! unsignaled work requests, shared receive queues, a responder left in RTR
//! and reconnection with the same QP numbers; the rest is a `pair` script.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/mod.rs"]
mod common;
mod pair_driver;

fuzz_target!(|data: &[u8]| pair_driver::run_variants(data));
