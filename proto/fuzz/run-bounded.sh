#!/usr/bin/env bash
# Short bounded cargo-fuzz run of both targets, for CI.
# Usage: proto/fuzz/run-bounded.sh [seconds-per-target]   (default 30)
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`);
# without them it says so and exits 0, since `cargo test` already runs the
# deterministic stable-Rust mutation fuzz of the same receive path.
set -euo pipefail
secs="${1:-30}"
cd "$(dirname "$0")/.."
if ! cargo +nightly --version >/dev/null 2>&1 || ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: nightly toolchain or cargo-fuzz missing; skipped (cargo test covers the bounded stable fuzz)"
    exit 0
fi
for t in parse receive; do
    echo "fuzz: $t for ${secs}s"
    CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}" cargo +nightly fuzz run "$t" -- \
        -max_total_time="$secs" -print_final_stats=1 2>&1 | grep -E "^(Done|stat::number_of_executed_units|==|SUMMARY)" || true
    if ls fuzz/artifacts/"$t"/crash-* >/dev/null 2>&1; then
        echo "fuzz: $t found a crash:"; ls fuzz/artifacts/"$t"/
        exit 1
    fi
done
echo "fuzz: no crash"
