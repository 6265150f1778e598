#!/usr/bin/env bash
# experiment: A/B module builds on the bench's multipath part (four ECMP paths of
# 20 Mbit/s, healthy then path 1 at 5% loss; ib_write_bw 1 and 4 QPs), MetaRoCE only,
# the builds alternating run by run in one VM.
#   tools/vm --flavour plain -- env AB_KOS="OLD.ko NEW.ko" bash selftests/bench/exp-multipath-ab.sh
# AB_ROUNDS (default 3) repeats the pair. Each build's runs land in the run's
# out/vm-*/mp-<build>-<round>/ (bench.sh's own output: bench.csv and
# mp-path-packets.txt, the packets each of the four links carried per run).
HERE=$(cd "$(dirname "$0")" && pwd)
OUTD=${METAROCE_OUT:?run under tools/vm}
for round in $(seq "${AB_ROUNDS:-3}"); do
    for ko in ${AB_KOS:?AB_KOS="OLD.ko NEW.ko"}; do
        name=$(basename "$ko" .ko)
        dir=$OUTD/mp-$name-$round
        mkdir -p "$dir"
        METAROCE_KO=$ko BENCH_PARTS=mp BENCH_TRANSPORTS=metaroce BENCH_REPEATS=1 \
            bash "$HERE/bench.sh" "$dir" > "$dir/stdout.log" 2>&1
        echo "=== $name round $round"
        # part,transport,case,cond,repeat,value,...; then the packets per link
        awk -F, '$1 == "mp" { printf "  %s %s: %s %s\n", $3, $4, $6, $8 }' "$dir/bench.csv"
        sed 's/^/  links: /' "$dir/mp-path-packets.txt"
        for f in "$dir"/bench-logs/mp-metaroce-*.counters; do
            echo "  $(basename "$f" .counters): $(grep -E 'repaths|path_timeouts ' "$f" | tr '\n' ' ')"
        done
    done
done
