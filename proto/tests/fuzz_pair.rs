//! The `pair` fuzz driver under `cargo test`: every saved input of
//! `fuzz/regressions/pair/` and `fuzz/regressions/pair_variants/` (inputs
//! that once broke a check, kept so that they stay fixed) and streams of
//! pseudo-random scripts for both entries. The driver
//! (`fuzz/fuzz_targets/pair_driver.rs`) documents what it checks; the
//! coverage-guided run of the same driver is `fuzz/run-bounded.sh`.

mod common;
#[path = "../fuzz/fuzz_targets/pair_driver.rs"]
mod pair_driver;

use common::Rng;
use std::path::Path;

/// Replays every saved input of `fuzz/regressions/<target>/` through `run`
/// (`PAIR_INPUT=<part of a name>` replays only those).
fn replay_saved(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions").join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut names: Vec<_> = entries.map(|e| e.expect("readable directory").path()).collect();
    names.sort();
    let only = std::env::var("PAIR_INPUT").ok();
    for p in names {
        if only.as_deref().is_some_and(|o| !p.to_string_lossy().contains(o)) {
            continue;
        }
        let data = std::fs::read(&p).expect("readable input");
        eprintln!("replaying {}", p.display());
        run(&data);
    }
}

#[test]
fn saved_inputs_pass() {
    assert!(Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/pair").is_dir());
    replay_saved("pair", pair_driver::run);
    replay_saved("pair_variants", pair_driver::run_variants);
}

/// `count` scripts of random bytes through `run`: shallow compared with the
/// coverage-guided run, but on every `cargo test`, with no toolchain beyond
/// stable.
fn random_scripts(seed: u64, count: u32, run: fn(&[u8])) {
    let mut r = Rng::new(seed);
    for n in 0..count {
        let len = 16 + r.below(600) as usize;
        let data = r.bytes(len);
        let result = std::panic::catch_unwind(|| run(&data));
        if let Err(e) = result {
            let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
            panic!("random script {n} failed ({e:?}); input (hex): {hex}");
        }
    }
}

#[test]
fn random_scripts_pass() {
    random_scripts(0x9a1_5eed, 3000, pair_driver::run);
}

#[test]
fn random_variant_scripts_pass() {
    random_scripts(0x7a1_a115, 3000, pair_driver::run_variants);
}
