#!/usr/bin/env bash
# Bounded coverage-guided runs of the fuzz targets (libFuzzer, through the
# libfuzzer-sys crate), on the stable toolchain. cargo-fuzz's instrumentation
# is SanitizerCoverage, which stable rustc enables with -C flags; only its
# sanitizers need nightly, and the core has no unsafe code for them to check.
# Overflow checks and debug assertions are on: the kernel builds the core with
# CONFIG_RUST_OVERFLOW_CHECKS, where an overflow is a BUG.
#
# Usage: proto/fuzz/run-bounded.sh [seconds-per-target] [target...]
#   (default 30 s; targets: pair pair_variants receive parse)
#   METAROCE_FUZZ_CORPUS=DIR  keeps each target's corpus in DIR/<target> from
#                             run to run (default: a fresh temporary one)
#   METAROCE_FUZZ_ARTIFACTS=DIR  where a failing input is written (default
#                             proto/fuzz/artifacts/<target>)
# Seeds: fuzz/regressions/<target>/ (inputs that once failed). Exit status:
# 0 nothing found; 1 a target failed (its input saved, and printed in hex);
# 2 the targets did not build.
set -euo pipefail
secs="${1:-30}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(pair pair_variants receive parse)
cd "$(dirname "$0")"
fuzz_dir=$PWD
host=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$fuzz_dir/target}"
# The flags cargo-fuzz passes (minus -Zsanitizer); --target keeps them off
# build scripts.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
echo "fuzz: building ${targets[*]} ($host)"
bins=()
for t in "${targets[@]}"; do bins+=(--bin "$t"); done
if ! CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" cargo build --quiet --release --target "$host" "${bins[@]}"; then
    echo "fuzz: build failed"
    exit 2
fi
# Per input: an input a driver bounds may still run long on a loaded machine.
input_timeout=60
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for t in "${targets[@]}"; do
    corpus="${METAROCE_FUZZ_CORPUS:+$METAROCE_FUZZ_CORPUS/$t}"
    corpus="${corpus:-$tmp/corpus-$t}"
    artifacts="${METAROCE_FUZZ_ARTIFACTS:-$fuzz_dir/artifacts}/$t"
    mkdir -p "$corpus" "$artifacts"
    seeds=()
    [ -d "regressions/$t" ] && seeds=("regressions/$t")
    # A kept corpus grows run by run, and libFuzzer replays all of it before it
    # looks at the clock: past 3,000 inputs, keep only those that add coverage.
    if [ "$(find "$corpus" -type f | wc -l)" -gt 3000 ]; then
        rm -rf "$corpus.min" && mkdir -p "$corpus.min"
        if "$CARGO_TARGET_DIR/$host/release/$t" -merge=1 -timeout=$input_timeout "$corpus.min" "$corpus" > "$tmp/$t.merge.log" 2>&1; then
            echo "fuzz: $t corpus merged: $(find "$corpus" -type f | wc -l) -> $(find "$corpus.min" -type f | wc -l) inputs"
            rm -rf "$corpus" && mv "$corpus.min" "$corpus"
        else
            rm -rf "$corpus.min"
        fi
    fi
    echo "fuzz: $t for ${secs} s (corpus $corpus: $(find "$corpus" -type f | wc -l) inputs)"
    log="$tmp/$t.log"
    if "$CARGO_TARGET_DIR/$host/release/$t" "$corpus" "${seeds[@]}" -max_total_time="$secs" \
        -max_len=4096 -timeout=$input_timeout -print_final_stats=1 -artifact_prefix="$artifacts/" > "$log" 2>&1; then
        grep -E '^stat::(number_of_executed_units|new_units_added)' "$log" | tr '\n' ' ' | sed 's/^/fuzz: /; s/ $/\n/'
    else
        status=1
        echo "fuzz: $t FAILED"
        grep -E "panicked at|^(thread|SUMMARY|==[0-9]+== ERROR)" -A2 "$log" | head -n 20
        for a in "$artifacts"/*; do
            [ -f "$a" ] || continue
            echo "fuzz: failing input $a (hex; add it under proto/fuzz/regressions/$t/ once fixed):"
            od -An -tx1 -v "$a" | tr -d ' \n' | fold -w 120
            echo
        done
    fi
done
[ $status = 0 ] && echo "fuzz: nothing found"
exit $status
