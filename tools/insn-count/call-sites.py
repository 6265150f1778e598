#!/usr/bin/env python3
"""Calls per ib_send_lat round trip from the MetaRoCE module to given kernel
functions, by call site (with the inlined callers of each site), from an
exp-lat-insns.sh run of a module built with debug information.

    python3 tools/insn-count/call-sites.py OUT-DIR MODULE.ko [memcpy memset ...]

Why: under emulation `memcpy` is a `rep movsb`, one instruction that an instruction
count weighs as one however many bytes it moves (tcg-cost.c: 2.9 ns a byte). A call
site is a block that ends in the call; the block's runs are the calls. Needs
llvm-objdump, llvm-nm and llvm-addr2line (tools/inroot)."""
import bisect
import collections
import importlib.util
import os
import re
import subprocess
import sys

spec = importlib.util.spec_from_file_location("fold", os.path.join(os.path.dirname(__file__), "fold.py"))
fold = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fold)


def main():
    out, ko = sys.argv[1], sys.argv[2]
    targets = sys.argv[3:] or ["memcpy", "memset", "memmove"]
    d, short, long_, labels = fold.read_run(out)
    addrs, names = fold.load_symbols(os.path.join(d, "kallsyms.txt"))
    sym_addr = {n: a for a, (n, m) in zip(addrs, names) if m == "rdma_metaroce"}
    offsets = {}
    for line in subprocess.run(["llvm-nm", "--defined-only", ko], capture_output=True, text=True).stdout.splitlines():
        p = line.split()
        if len(p) == 3 and p[1] in "tT":
            offsets[p[2]] = int(p[0], 16)
    # Instruction offsets, and which of them call a target (the call's relocation
    # follows its instruction in objdump's output).
    calls, insn_offs, last = {}, [], None
    pattern = re.compile(r"R_X86_64_PLT32\s+(" + "|".join(map(re.escape, targets)) + r")-")
    for line in subprocess.run(["llvm-objdump", "-dr", "--no-show-raw-insn", "-j", ".text", ko],
                               capture_output=True, text=True).stdout.splitlines():
        m = pattern.search(line)
        if m and last is not None:
            calls[last] = m.group(1)
            continue
        if "R_X86_64" in line:
            continue
        m = re.match(r"\s*([0-9a-f]+):\s", line)
        if m:
            last = int(m.group(1), 16)
            insn_offs.append(last)
    per_site = collections.Counter()
    for sign, delta in fold.run_deltas(out, labels, (short, long_), "mrc", {}):
        for (addr, insns), (runs, _) in delta.items():
            if addr < fold.KERNEL_START:
                continue
            name, mod = names[bisect.bisect_right(addrs, addr) - 1]
            if mod != "rdma_metaroce" or name not in offsets or name not in sym_addr:
                continue
            start = offsets[name] + addr - sym_addr[name]
            i = bisect.bisect_left(insn_offs, start)
            for off in insn_offs[i:i + insns]:
                if off in calls:
                    per_site[(off, calls[off])] += sign * runs
    total = 0.0
    print(f"module calls to {', '.join(targets)} per round trip, by site (innermost first)")
    for (off, fn), runs in sorted(per_site.items(), key=lambda x: -x[1]):
        per_rt = runs / (long_ - short)
        if per_rt < 0.05:
            continue
        total += per_rt
        lines = subprocess.run(["llvm-addr2line", "-e", ko, "-i", "-f", "-C", f"0x{off:x}"],
                               capture_output=True, text=True).stdout.splitlines()
        chain = " <- ".join(f"{lines[i].split('::')[-1]}@{os.path.basename(lines[i + 1])}"
                            for i in range(0, min(len(lines) - 1, 8), 2))
        print(f"  {per_rt:5.2f}  {fn:7}  {chain}")
    print(f"  {total:5.2f}  in all")


if __name__ == "__main__":
    main()
