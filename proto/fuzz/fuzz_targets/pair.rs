//! Coverage-guided entry of the `pair` driver (`pair_driver.rs`): two
//! connections, a network and verbs the input scripts, and the checks the
//! driver's documentation lists.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/mod.rs"]
mod common;
mod pair_driver;

fuzz_target!(|data: &[u8]| pair_driver::run(data));
