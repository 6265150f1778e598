#!/usr/bin/env python3
"""Instructions per ib_send_lat round trip, by function, from an exp-lat-insns.sh run.

    python3 tools/insn-count/fold.py OUT-DIR [--top N] [--lines MODULE.ko]

OUT-DIR is the tools/vm run's directory (it holds snap-K.txt from the plugin and
insns/ from the guest). For each transport, the counts of its short run are taken from
those of its long run and divided by the difference in round trips: what one round
trip costs in the steady state, both hosts together. Kernel addresses are named from
the guest's /proc/kallsyms; user space is one bucket (its busy polling depends on
timing, unlike the kernel's paths).

--lines MODULE.ko (the module the guest ran, built with debug information, e.g.
KRUSTFLAGS=-Cdebuginfo=2): the MetaRoCE module's instructions are also given by
source function with inlined calls resolved, inclusive (a function and what was
inlined into it) and by line; needs llvm-objdump and llvm-addr2line (tools/inroot)."""
import bisect
import collections
import os
import re
import subprocess
import sys

KERNEL_START = 0xFFFF800000000000


def load_snapshot(path):
    counts = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            fields = line.split()
            samples = int(fields[3]) if len(fields) > 3 else 0
            counts[(int(fields[0], 16), int(fields[1]))] = (int(fields[2]), samples)
    return counts


def load_symbols(path):
    addrs, names = [], []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 3 or parts[1] not in "tTwW":
                continue
            addr = int(parts[0], 16)
            if addr == 0:
                continue
            mod = parts[3].strip("[]") if len(parts) > 3 else "kernel"
            addrs.append(addr)
            names.append((parts[2], mod))
    order = sorted(range(len(addrs)), key=addrs.__getitem__)
    return [addrs[i] for i in order], [names[i] for i in order]


def read_run(out):
    """What exp-lat-insns.sh wrote: its directory, the short and long runs' round
    trips, and the snapshot numbers by (transport, round trips, "start"/"end")."""
    d = os.path.join(out, "insns")
    short, long_ = (int(x) for x in open(os.path.join(d, "iters.txt")).read().split()[1::2])
    labels = {}
    for line in open(os.path.join(d, "snapshots.txt")):
        k, t, n, edge = line.split()
        labels[(t, int(n), edge)] = int(k)
    return d, short, long_, labels


def run_deltas(out, labels, runs, t, cache):
    """(sign, window) for transport `t`'s short run (-1) and long run (+1): summed,
    the counts of the long run less those of the short one. `cache` keeps the
    snapshots read, by number."""
    deltas = []
    for sign, n in zip((-1, 1), runs):
        ks, ke = labels[(t, n, "start")], labels[(t, n, "end")]
        for k in (ks, ke):
            if k not in cache:
                cache[k] = load_snapshot(os.path.join(out, f"snap-{k}.txt"))
        deltas.append((sign, window(cache, ks, ke)))
    return deltas


def window(snaps, k_start, k_end):
    """Per block: (runs, samples) between two snapshots."""
    a, b = snaps[k_start], snaps[k_end]
    out = {}
    for key, (runs, samples) in b.items():
        r0, s0 = a.get(key, (0, 0))
        if runs != r0 or samples != s0:
            out[key] = (runs - r0, samples - s0)
    return out


def main():
    out = sys.argv[1]
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 30
    d, short, long_, labels = read_run(out)
    addrs, names = load_symbols(os.path.join(d, "kallsyms.txt"))
    cache = {}

    def symbol(addr):
        """(name, module) of the function holding `addr`, and whether `addr` is its
        first instruction."""
        if addr < KERNEL_START:
            return ("(user space)", "user"), False
        i = bisect.bisect_right(addrs, addr) - 1
        return (names[i], addrs[i] == addr) if i >= 0 else (("?", "kernel"), False)

    per_rt = {}
    calls = {}  # blocks that start at a function's first instruction: its calls
    time_us = {}
    sample_us = sample_interval(out)
    module_blocks = {}
    for t in sorted({t for t, _, _ in labels}):
        by_fn = collections.Counter()
        blocks = collections.Counter()
        block_samples = collections.Counter()
        entries = collections.Counter()
        sampled = collections.Counter()
        for sign, delta in run_deltas(out, labels, (short, long_), t, cache):
            for (addr, insns), (runs, samples) in delta.items():
                fn, entry = symbol(addr)
                by_fn[fn] += sign * insns * runs
                sampled[fn] += sign * samples
                if entry:
                    entries[fn] += sign * runs
                if fn[1] == "rdma_metaroce":
                    blocks[(addr, insns, fn[0])] += sign * runs
                    block_samples[(addr, insns, fn[0])] += sign * samples
        per_rt[t] = {k: v / (long_ - short) for k, v in by_fn.items()}
        calls[t] = {k: v / (long_ - short) for k, v in entries.items()}
        # Host time per round trip (vCPU time, both vCPUs), from the samples.
        time_us[t] = {k: v * sample_us / (long_ - short) for k, v in sampled.items()}
        module_blocks[t] = {k: (v / (long_ - short), block_samples[k] * sample_us / (long_ - short)) for k, v in blocks.items()}

    def group(fn):
        name, mod = fn
        if mod == "user":
            return "user space (polling included)"
        if mod in ("rdma_metaroce", "siw"):
            return "the transport's module"
        if name in ("queued_spin_lock_slowpath", "native_queued_spin_lock_slowpath"):
            return "kernel: spinning on a lock"
        return "kernel, other"

    print(f"instructions per round trip (both hosts; runs of {long_} minus {short} round trips)\n")
    ts = sorted(per_rt)
    print(f"{'':36}" + "".join(f"{t:>14}" for t in ts))
    groups = sorted({group(fn) for t in ts for fn in per_rt[t]})
    for g in groups:
        print(f"{g:36}" + "".join(f"{sum(v for fn, v in per_rt[t].items() if group(fn) == g):14,.0f}" for t in ts))
    print(f"{'total':36}" + "".join(f"{sum(per_rt[t].values()):14,.0f}" for t in ts))
    if sample_us:
        print(f"\nvCPU time per round trip, us (both vCPUs; sampled every {sample_us} us of host time)\n")
        for g in groups:
            print(f"{g:36}" + "".join(f"{sum(v for fn, v in time_us[t].items() if group(fn) == g):14,.1f}" for t in ts))
        print(f"{'total':36}" + "".join(f"{sum(time_us[t].values()):14,.1f}" for t in ts))
    print(f"{'total without user space':36}" + "".join(
        f"{sum(v for fn, v in per_rt[t].items() if fn[1] != 'user'):14,.0f}" for t in ts))
    for t in ts:
        print(f"\n{t}: top {top} functions (kernel and module), instructions per round trip")
        rows = sorted(((v, fn) for fn, v in per_rt[t].items() if fn[1] != "user"), reverse=True)
        print(f"  {'insns':>10}  {'calls':>6}  {'us':>6}")
        for v, (name, mod) in rows[:top]:
            n = calls[t].get((name, mod), 0)
            us = time_us[t].get((name, mod), 0)
            print(f"  {v:10,.0f}  {n:6.1f}  {us:6.2f}  {name}{'' if mod == 'kernel' else ' [' + mod + ']'}")
        if sample_us:
            print(f"\n{t}: top {top} functions by sampled time (kernel and module), us per round trip")
            print(f"  {'us':>6}  {'insns':>10}  {'ns/insn':>7}")
            rows = sorted(((v, fn) for fn, v in time_us[t].items() if fn[1] != "user"), reverse=True)
            for v, (name, mod) in rows[:top]:
                n = per_rt[t].get((name, mod), 0)
                rate = f"{v * 1000 / n:7.1f}" if n > 0 else f"{'-':>7}"
                print(f"  {v:6.2f}  {n:10,.0f}  {rate}  {name}{'' if mod == 'kernel' else ' [' + mod + ']'}")

    proc_deltas(d, labels, short, long_)
    if "--lines" in sys.argv:
        ko = sys.argv[sys.argv.index("--lines") + 1]
        sym_addr = {name: a for a, (name, mod) in zip(addrs, names) if mod == "rdma_metaroce"}
        by_lines(ko, sym_addr, module_blocks.get("mrc", {}), top)


def sample_interval(out):
    """The plugin's sample_us, from the plugin options tools/vm noted (0: none)."""
    try:
        cmd = open(os.path.join(out, ".qemu-opts")).read()
    except OSError:
        return 0
    m = re.search(r"sample_us=(\d+)", cmd)
    return int(m.group(1)) if m else 0


def read_proc(path):
    """Per-CPU counters of one snapshot: interrupts by kind, softirqs by kind,
    /proc/stat's cpuN times (user nice system idle iowait irq softirq, in ticks)
    and its ctxt line."""
    vals = {}
    section = "irq"
    for line in open(path):
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "CPU0":
            section = "irq" if section == "irq" and not vals else "softirq"
            continue
        if parts[0].startswith("cpu") and parts[0] != "cpu":
            for name, v in zip(("user", "nice", "system", "idle", "iowait", "irq", "softirq"), parts[1:8]):
                vals[(f"time {name}", parts[0])] = int(v)
            continue
        if parts[0] == "ctxt":
            vals[("ctxt", "all")] = int(parts[1])
            continue
        if parts[0].endswith(":") and len(parts) >= 3 and parts[1].isdigit() and parts[2].isdigit():
            name = parts[0].rstrip(":")
            desc = " ".join(p for p in parts[3:] if not p.isdigit())[:30]
            vals[(f"{section} {name} {desc}".strip(), "cpu0")] = int(parts[1])
            vals[(f"{section} {name} {desc}".strip(), "cpu1")] = int(parts[2])
    return vals


def proc_deltas(d, labels, short, long_):
    """Interrupts, softirqs, context switches and CPU time per 1,000 round trips,
    the same difference of the two runs as the instruction counts."""
    if not os.path.exists(os.path.join(d, "proc-1.txt")):
        return
    rows = {}
    for t in sorted({t for t, _, _ in labels}):
        per = collections.Counter()
        for sign, n in ((-1, short), (1, long_)):
            a = read_proc(os.path.join(d, f"proc-{labels[(t, n, 'start')]}.txt"))
            b = read_proc(os.path.join(d, f"proc-{labels[(t, n, 'end')]}.txt"))
            for k in b:
                per[k] += sign * (b[k] - a.get(k, 0))
        rows[t] = {k: v * 1000 / (long_ - short) for k, v in per.items()}
    ts = sorted(rows)
    keys = sorted({k for t in ts for k, v in rows[t].items() if abs(v) >= 0.5})
    print("\nper 1,000 round trips (interrupts, softirqs, context switches, CPU time in ticks)")
    print(f"{'':44}" + "".join(f"{t:>12}" for t in ts))
    for k in keys:
        print(f"{k[0][:36]:36} {k[1]:>7}" + "".join(f"{rows[t].get(k, 0):12.1f}" for t in ts))


def by_lines(ko, sym_addr, blocks, top):
    """The module's instructions per round trip by source function (inlined calls
    resolved) and by line, each executed instruction looked up on its own."""
    offsets = {}
    for line in subprocess.run(["llvm-nm", "--defined-only", ko], capture_output=True, text=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tT":
            offsets[parts[2]] = int(parts[0], 16)
    insn_offs = []
    for line in subprocess.run(["llvm-objdump", "-d", "--no-show-raw-insn", "-j", ".text", ko],
                               capture_output=True, text=True).stdout.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s", line)
        if m:
            insn_offs.append(int(m.group(1), 16))
    per_insn = collections.Counter()
    per_insn_us = collections.Counter()  # a block's sampled time, at its first instruction
    for (addr, insns, name), (runs, us) in blocks.items():
        if name not in offsets or name not in sym_addr:
            continue
        start = offsets[name] + (addr - sym_addr[name])
        i = bisect.bisect_left(insn_offs, start)
        for off in insn_offs[i:i + insns]:
            per_insn[off] += runs
        if i < len(insn_offs):
            per_insn_us[insn_offs[i]] += us
    wanted = sorted(per_insn)
    out = subprocess.run(["llvm-addr2line", "-e", ko, "-i", "-f", "-C", "--output-style=JSON"],
                         input="".join(f"0x{o:x}\n" for o in wanted), capture_output=True, text=True).stdout
    import json
    inclusive, exclusive, lines = collections.Counter(), collections.Counter(), collections.Counter()
    inclusive_us = collections.Counter()
    for off, rec in zip(wanted, (json.loads(l) for l in out.splitlines() if l.strip())):
        n = per_insn[off]
        frames = rec.get("Symbol", [])
        if not frames:
            continue
        clean = [re.sub(r"::h[0-9a-f]{16}$", "", f["FunctionName"]) for f in frames]
        exclusive[clean[0]] += n
        lines[f"{os.path.basename(frames[0]['FileName'])}:{frames[0]['Line']} ({clean[0].split('::')[-1]})"] += n
        for fn in set(clean):
            inclusive[fn] += n
            inclusive_us[fn] += per_insn_us.get(off, 0)
    total = sum(exclusive.values())
    print(f"\nMetaRoCE module by source function, inlining resolved ({total:,.0f} instructions per round trip)")
    print(f"\n  inclusive (the function and what was inlined into it), top {top}:")
    for fn, n in inclusive.most_common(top):
        print(f"  {n:10,.0f}  {fn}")
    if any(inclusive_us.values()):
        print(f"\n  inclusive by sampled time, us per round trip, top {top}:")
        for fn, us in inclusive_us.most_common(top):
            print(f"  {us:8.2f}  {inclusive[fn]:10,.0f}  {fn}")
    print(f"\n  exclusive, top {top}:")
    for fn, n in exclusive.most_common(top):
        print(f"  {n:10,.0f}  {fn}")
    print(f"\n  by line, top {top}:")
    for fn, n in lines.most_common(top):
        print(f"  {n:10,.0f}  {fn}")


if __name__ == "__main__":
    main()
