#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Stack frames of a built module: one TAP point per .ko, failed if any function's
# frame is larger than LIMIT bytes (default 8192, half of x86-64's 16 KiB kernel and
# IRQ stacks). The kernel's FRAME_WARN only looks at C; a Rust value built by value
# (an array of structs, a whole connection) lands in its function's frame, and the
# receive path runs on the softirq stack below the network stack's own frames.
# The five largest frames are printed as TAP diagnostics, so growth shows.
#   stack-frames.sh [--limit BYTES] LABEL=MODULE.ko...
set -u
limit=8192
if [ "${1:-}" = --limit ]; then limit=$2; shift 2; fi
objdump=objdump
command -v objdump > /dev/null || objdump="$(dirname "$0")/../tools/inroot objdump"

echo "TAP version 13"
echo "1..$#"
n=0
rc=0
for spec in "$@"; do
    n=$((n + 1))
    label=${spec%%=*}; ko=${spec#*=}
    if [ ! -f "$ko" ]; then
        echo "not ok $n - $label: $ko not found"; rc=1
        continue
    fi
    # A function's frame is the first `sub $N,%rsp` after its label (the prologue):
    # the kernel's Rust target has no stack probes, so one `sub` allocates the whole
    # frame (with probes the first would be a page, and this would undercount). The
    # hexadecimal size is decoded by the shell (Debian's awk is mawk).
    frames=$($objdump -d -C --no-show-raw-insn "$ko" | awk '
        /^[0-9a-f]+ <.*>:$/ { fn = substr($0, index($0, "<") + 1); sub(/>:$/, "", fn); seen = 0; next }
        !seen && /sub +\$0x[0-9a-f]+,%rsp/ {
            seen = 1; match($0, /\$0x[0-9a-f]+/); print substr($0, RSTART + 1, RLENGTH - 1), fn
        }' | while read -r hex fn; do echo "$((hex)) $fn"; done | sort -rn)
    if [ -z "$frames" ]; then
        echo "not ok $n - $label: no function prologue found in $ko"; rc=1
        continue
    fi
    read -r top fn <<< "$(head -n 1 <<< "$frames")"
    over=$(awk -v l="$limit" '$1 > l' <<< "$frames" | wc -l)
    if [ "$over" -eq 0 ]; then
        echo "ok $n - $label: largest stack frame $top bytes ($fn), limit $limit"
    else
        echo "not ok $n - $label: $over functions with a stack frame over $limit bytes, largest $top ($fn)"; rc=1
    fi
    head -n 5 <<< "$frames" | sed 's/^/#   /'
done
exit $rc
