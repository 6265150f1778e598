#!/usr/bin/env python3
"""Self and inclusive samples per function from `perf script -F comm,ip,sym -g`
output (gzipped), with rdma_metaroce's addresses that perf left unresolved named
from a saved copy of its /proc/kallsyms lines.

    perf-fold.py RUN.script.gz module-kallsyms.txt [TOP]

Prints the TOP (default 40) functions by inclusive share of the samples, with
their self share; a function counts once per sample however often it recurs.
"""
import bisect
import gzip
import re
import sys
from collections import Counter


def load_kallsyms(path):
    syms = []
    for line in open(path):
        f = line.split()
        if len(f) >= 3:
            syms.append((int(f[0], 16), f[2]))
    syms.sort()
    return [a for a, _ in syms], [n for _, n in syms]


def samples(path):
    """Yields each sample's frames, innermost first, as (address, symbol)."""
    frames = []
    with gzip.open(path, "rt", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                if frames:
                    yield frames
                frames = []
                continue
            if not line.startswith((" ", "\t")):
                continue  # the sample's header line (comm)
            m = re.match(r"\s+([0-9a-f]+)\s+(\S+)", line)
            if m:
                frames.append((int(m.group(1), 16), m.group(2)))
    if frames:
        yield frames


def main():
    script, ksyms = sys.argv[1], sys.argv[2]
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    addrs, names = load_kallsyms(ksyms)
    lo = addrs[0] if addrs else 0

    def name(addr, sym):
        if sym not in ("[unknown]",) and not sym.startswith("0x"):
            return re.sub(r"\+0x[0-9a-f]+$", "", sym)
        if addrs and addr >= lo:
            i = bisect.bisect_right(addrs, addr) - 1
            if i >= 0 and addr - addrs[i] < 0x10000:
                return "mrc:" + names[i]
        return "?%x" % addr

    incl, own, n = Counter(), Counter(), 0
    for frames in samples(script):
        n += 1
        named = [name(a, s) for a, s in frames]
        own[named[0]] += 1
        for fn in set(named):
            incl[fn] += 1
    print(f"{n} samples")
    for fn, c in incl.most_common(top):
        print(f"{100 * c / n:6.2f}% {100 * own[fn] / n:6.2f}%  {fn[:110]}")


if __name__ == "__main__":
    main()
