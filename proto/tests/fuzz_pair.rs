//! The `pair` fuzz driver under `cargo test`: every saved input of
//! `fuzz/regressions/pair/` (inputs that once broke a check, kept so that
//! they stay fixed) and a stream of pseudo-random scripts. The driver
//! (`fuzz/fuzz_targets/pair_driver.rs`) documents what it checks; the
//! coverage-guided run of the same driver is `fuzz/run-bounded.sh`.

mod common;
#[path = "../fuzz/fuzz_targets/pair_driver.rs"]
mod pair_driver;

use common::Rng;
use std::path::Path;

#[test]
fn saved_inputs_pass() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/pair");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("fuzz/regressions/pair exists")
        .map(|e| e.expect("readable directory").path())
        .collect();
    names.sort();
    let only = std::env::var("PAIR_INPUT").ok();
    for p in names {
        if only.as_deref().is_some_and(|o| !p.to_string_lossy().contains(o)) {
            continue;
        }
        let data = std::fs::read(&p).expect("readable input");
        eprintln!("replaying {}", p.display());
        pair_driver::run(&data);
    }
}

/// Scripts of random bytes: shallow compared with the coverage-guided run,
/// but on every `cargo test`, with no toolchain beyond stable.
#[test]
fn random_scripts_pass() {
    let mut r = Rng::new(0x9a1_5eed);
    for n in 0..3000 {
        let len = 16 + r.below(600) as usize;
        let data = r.bytes(len);
        let result = std::panic::catch_unwind(|| pair_driver::run(&data));
        if let Err(e) = result {
            let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
            panic!("random script {n} failed ({e:?}); input (hex): {hex}");
        }
    }
}
