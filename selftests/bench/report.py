#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turn bench.sh's bench.csv into the tables (bench.txt, bench.md), bench.json and the
goodput-vs-loss chart (bench.png).

   report.py OUTDIR      (reads OUTDIR/bench.csv and OUTDIR/bench-params.txt)

Each cell is the median over its repeated runs; "(k/n)" marks a cell where only k
of n runs produced a figure. Ratios are plain value ratios (A/B): for bandwidth
higher is better, for latency lower is better. A ratio needs both cells measured.
The issue #5 targets are checked on the medians and printed as pass/miss; a target
whose inputs are missing reads "n/a", and one that rests on a cell with failed runs
names that cell ("median of fewer runs: siw send_lat loss0 2/3 runs"). Each target
also shows the range of the runs on both sides and whether the ranges overlap (some
pairing of single runs would give the other verdict)."""
import csv
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chart  # noqa: E402

TRANSPORTS = [("tcp", "TCP"), ("rxe", "rxe"), ("siw", "siw"), ("metaroce", "MetaRoCE")]
NAMES = dict(TRANSPORTS)
RATIOS = [("metaroce", "rxe"), ("metaroce", "siw"), ("metaroce", "tcp")]
CASE_NAMES = {"write_bw_q1": "ib_write_bw 1 QP", "write_bw_q4": "ib_write_bw 4 QP",
              "read_bw_q1": "ib_read_bw 1 QP", "read_bw_q4": "ib_read_bw 4 QP",
              "send_lat": "ib_send_lat 8 B"}
BW_CASES = ["write_bw_q1", "write_bw_q4", "read_bw_q1", "read_bw_q4"]
COLORS = {"tcp": (60, 60, 60), "rxe": (31, 100, 200), "siw": (230, 130, 0), "metaroce": (210, 30, 40)}
MARKERS = {"tcp": 0, "rxe": 1, "siw": 2, "metaroce": 3}


def cond_label(c):
    if c == "clean":
        return "no netem"
    if c.startswith("loss"):
        return c[4:] + "%"
    if c.startswith("reorder"):
        return "reord " + c[7:] + "%"
    return c


def fnum(v):
    if v is None:
        return None
    return "%.0f" % v if abs(v) >= 1000 else "%.1f" % v if abs(v) >= 10 else "%.2f" % v


def fmt_table(header, lines):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]
    fmt = "  ".join("%%-%ds" % w for w in widths)
    return [(fmt % tuple(header)).rstrip(), fmt % tuple("-" * w for w in widths)] + \
        [(fmt % tuple(line)).rstrip() for line in lines]


def md_table(header, lines):
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)] + \
        ["| " + " | ".join(str(x) for x in line) + " |" for line in lines]


class Results:
    def __init__(self, rows):
        self.runs = {}
        self.order = {}
        for r in rows:
            key = (r["part"], r["transport"], r["case"], r["cond"])
            self.runs.setdefault(key, []).append(r)
            self.order.setdefault(r["part"], {"cases": [], "conds": []})
            for k, f in (("cases", "case"), ("conds", "cond")):
                if r[f] not in self.order[r["part"]][k]:
                    self.order[r["part"]][k].append(r[f])

    def values(self, part, tr, case, cond, field="value"):
        """The figures of the cell's runs that produced one, in run order."""
        return [float(r[field]) for r in self.runs.get((part, tr, case, cond), [])
                if r["status"] == "ok" and r[field]]

    def cell(self, part, tr, case, cond, field="value"):
        """(median or None, ok runs, runs, status of the first run)"""
        rs = self.runs.get((part, tr, case, cond), [])
        vals = self.values(part, tr, case, cond, field)
        ok = sum(1 for r in rs if r["status"] == "ok")
        return (statistics.median(vals) if vals else None, ok, len(rs),
                rs[0]["status"] if rs else "missing")

    def value(self, part, tr, case, cond, field="value"):
        return self.cell(part, tr, case, cond, field)[0]

    def show(self, part, tr, case, cond, field="value"):
        v, ok, n, status = self.cell(part, tr, case, cond, field)
        if v is None:
            return "-" if status == "ok" else status
        return fnum(v) + ("" if ok == n else " (%d/%d)" % (ok, n))


def ratio(a, b):
    return a / b if a is not None and b else None


def main():
    outdir = sys.argv[1]
    rows = list(csv.DictReader(open(os.path.join(outdir, "bench.csv"))))
    params = {}
    if os.path.exists(os.path.join(outdir, "bench-params.txt")):
        for line in open(os.path.join(outdir, "bench-params.txt")):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                params[k] = v
    res = Results(rows)
    trs = [t for t, _ in TRANSPORTS if any(r["transport"] == t for r in rows)]
    header_tr = [NAMES[t] for t in trs]
    ratios = [(a, b) for a, b in RATIOS if a in trs and b in trs]
    header_ratio = ["%s/%s" % (NAMES[a], NAMES[b]) for a, b in ratios]
    result = {"generated": time.strftime("%Y-%m-%dT%H:%M:%S"), "params": params,
              "link": [], "multipath": [], "qp_memory": [], "cpu": [], "targets": []}
    out = ["MetaRoCE bench %s: kernel %s, %s vCPUs, %s MiB; %s"
           % (result["generated"], params.get("kernel", "?"), params.get("cpus", "?"),
              int(params.get("mem_kb", 0)) // 1024,
              "QUICK run (BENCH_QUICK=1)" if params.get("quick") == "1" else "full run"),
           "each cell: median of %s run(s); bandwidth runs measure %s s (perftest -D with 1 s margins, "
           "iperf3 -O 1), latency runs %s round trips"
           % (params.get("repeats", "?"), params.get("window_s", "?"), params.get("lat_iters", "?")),
           ""]
    md = []

    # --- one link ---
    link = res.order.get("link", {"cases": [], "conds": []})
    lines = []
    for case in link["cases"]:
        for cond in link["conds"]:
            fields = [("value", "")] if case != "send_lat" else [("value", " median"), ("p99", " p99")]
            for field, suffix in fields:
                line = [CASE_NAMES.get(case, case) + suffix, cond_label(cond)]
                line += [res.show("link", t, case, cond, field) for t in trs]
                for a, b in ratios:
                    rv = ratio(res.value("link", a, case, cond, field), res.value("link", b, case, cond, field))
                    line.append("%.2f" % rv if rv is not None else "-")
                    result["link"].append({"case": case, "cond": cond, "stat": field,
                                           "ratio": "%s/%s" % (a, b), "value": rv})
                lines.append(line)
                for t in trs:
                    v, ok, n, status = res.cell("link", t, case, cond, field)
                    runs = res.runs.get(("link", t, case, cond), [])
                    result["link"].append({
                        "case": case, "cond": cond, "stat": field, "transport": t, "median": v,
                        "unit": "us" if case == "send_lat" else "Mbit/s", "ok_runs": ok, "runs": n,
                        "status": status if v is None else "ok",
                        "values": [float(r[field]) for r in runs if r["status"] == "ok" and r[field]],
                        "notes": sorted({r["note"] for r in runs if r["note"]})})
    if lines:
        header = ["test", "link"] + header_tr + header_ratio
        out += [f"One link (veth, MTU {params.get('link_mtu', '1500')}, netem on both ends, "
                "0% included, except 'no netem'; "
                f"RPS {'on for bandwidth' if params.get('rps', '0') == '1' else 'off'}; "
                f"MetaRoCE rc_mtu={params.get('rc_mtu', '0')}"
                + (f" {params['mrc_args']}" if params.get('mrc_args', 'none') != 'none' else "") + "). "
                "Bandwidth: goodput in Mbit/s, higher is better; "
                "latency: one-way (RTT/2) in us, lower is better.", ""] + fmt_table(header, lines) + [""]
        md += md_table(header, lines) + [""]

    # --- CPU cost ---
    lines = []
    for case in [c for c in link["cases"] if c in BW_CASES]:
        cond = "loss0" if "loss0" in link["conds"] else (link["conds"] or ["?"])[0]
        line = [CASE_NAMES[case], cond_label(cond)]
        for t in trs:
            tot = res.value("link", t, case, cond, "cpu_s_per_gb")
            ker = res.value("link", t, case, cond, "kcpu_s_per_gb")
            line.append("%s (%s)" % (fnum(tot), fnum(ker)) if tot is not None else "-")
            result["cpu"].append({"case": case, "cond": cond, "transport": t,
                                  "cpu_s_per_gb": tot, "kernel_cpu_s_per_gb": ker})
        lines.append(line)
    if lines:
        out += ["Guest CPU cost: CPU-seconds per GB moved, all guest CPUs, total (kernel: system+irq+softirq); "
                "perftest busy-polls its CQ, so total includes polling.", ""]
        out += fmt_table(["test", "link"] + header_tr, lines) + [""]
        md += md_table(["CPU s/GB, total (kernel)", "link"] + header_tr, lines) + [""]

    # --- multipath ---
    mp = res.order.get("mp", {"cases": [], "conds": []})
    lines = []
    for case in mp["cases"]:
        for st in mp["conds"]:
            line = [CASE_NAMES.get(case, case), st] + [res.show("mp", t, case, st) for t in trs]
            for a, b in ratios:
                rv = ratio(res.value("mp", a, case, st), res.value("mp", b, case, st))
                line.append("%.2f" % rv if rv is not None else "-")
            lines.append(line)
            for t in trs:
                v, ok, n, status = res.cell("mp", t, case, st)
                result["multipath"].append({"case": case, "state": st, "transport": t, "median": v,
                                            "unit": "Mbit/s", "ok_runs": ok, "runs": n})
        if "healthy" in mp["conds"] and "degraded" in mp["conds"]:
            line = [CASE_NAMES.get(case, case), "degraded/healthy"]
            for t in trs:
                rv = ratio(res.value("mp", t, case, "degraded"), res.value("mp", t, case, "healthy"))
                line.append("%.2f" % rv if rv is not None else "-")
            lines.append(line + [""] * len(ratios))
    if lines:
        out += ["Multipath: %s equal-cost routed paths (ECMP, L4 hash), each rate-limited to %s; "
                "degraded = path 1 also has netem %s. Aggregate goodput, Mbit/s."
                % (params.get("mp_paths", "?"), params.get("mp_rate", "?"), params.get("mp_degrade", "?")),
                ""] + fmt_table(["test", "paths"] + header_tr + header_ratio, lines) + [""]
        md += md_table(["multipath", "paths"] + header_tr + header_ratio, lines) + [""]
        spread = os.path.join(outdir, "mp-path-packets.txt")
        if os.path.exists(spread):
            out += ["packets per path (both directions) in each multipath run:"]
            for line in open(spread):
                f = line.strip().split(",")
                if len(f) == 5:
                    out.append("  %-8s %-12s %-8s run %s: %s" % (NAMES.get(f[0], f[0]), f[1], f[2], f[3], f[4]))
            out.append("")

    # --- QP memory ---
    lines = []
    # "idle": the veths' default MTU (1500); "idle_mtuN": the one-link cases' MTU.
    mem_conds = sorted({r["cond"] for r in rows if r["part"] == "qpmem"},
                       key=lambda c: (c != "idle", c))
    for cond in mem_conds:
        where = "" if cond == "idle" else ", veth MTU " + cond[len("idle_mtu"):]
        for metric, label in (("qp_slab", "Slab"), ("qp_vmalloc", "VmallocUsed"),
                              ("qp_kernel", "Slab+Vmalloc+Percpu"), ("qp_memfree", "MemFree drop")):
            vals = {t: res.value("qpmem", t, metric, cond) for t in ("rxe", "metaroce")}
            if all(v is None for v in vals.values()):
                continue
            line = [label + where] + [res.show("qpmem", t, metric, cond) for t in ("rxe", "metaroce")]
            rv = ratio(vals["metaroce"], vals["rxe"])
            line.append("%.2f" % rv if rv is not None else "-")
            lines.append(line)
            result["qp_memory"].append({"metric": metric, "cond": cond, "bytes_per_qp": vals})
    qnotes = sorted({r["note"] for r in rows if r["part"] == "qpmem" and r["status"] != "ok" and r["note"]})
    if lines or qnotes:
        out += ["Kernel memory per idle connected RC QP, bytes (%s QP pairs, 16 send/16 recv WRs each):"
                % params.get("qp_pairs", "?"), ""]
        if lines:
            out += fmt_table(["memory", "rxe", "MetaRoCE", "MetaRoCE/rxe"], lines)
            md += md_table(["bytes per QP", "rxe", "MetaRoCE", "MetaRoCE/rxe"], lines) + [""]
        out += ["  " + n for n in qnotes] + [""]

    # --- targets ---
    tg = []

    # The cells each target's value and threshold were read from (`cell_value`
    # notes them; `target` takes and clears the list).
    looked = []

    def cell_value(part, tr, case, cond, field="value"):
        looked.append((part, tr, case, cond))
        return res.value(part, tr, case, cond, field)

    def runs(part, tr, case, cond, field="value", scale=1.0):
        return [x * scale for x in res.values(part, tr, case, cond, field)]

    def target(name, value, threshold, better="ge", value_runs=(), threshold_runs=()):
        cells = sorted(set(looked))
        looked.clear()
        if value is None or threshold is None:
            verdict = "n/a"
        else:
            verdict = "pass" if (value >= threshold if better == "ge" else value <= threshold) else "miss"
        # How far the runs behind the two medians agree with the verdict: "clear" when
        # every run of MetaRoCE's is on the same side of every run of the threshold's,
        # "overlap" when some pairing of runs would give the other verdict (the
        # verdict is still the medians'; this only says how much it rests on them).
        spread, overlap = "-", None
        if value_runs and threshold_runs:
            lo, hi, tlo, thi = min(value_runs), max(value_runs), min(threshold_runs), max(threshold_runs)
            if better == "ge":
                overlap = not (lo >= thi or hi < tlo)
            else:
                overlap = not (hi <= tlo or lo > thi)
            spread = "%s-%s; %s-%s, %s" % (fnum(lo), fnum(hi), fnum(tlo), fnum(thi),
                                           "overlap" if overlap else "clear")
        # A median over fewer runs than were made (a run failed) is weaker evidence: the
        # verdict names the cells it rests on that lack runs, and JSON keeps them.
        partial = []
        for part, tr, case, cond in cells:
            _, ok, n, _ = res.cell(part, tr, case, cond)
            if 0 < ok < n:
                partial.append("%s %s %s %d/%d runs" % (NAMES.get(tr, tr), case, cond, ok, n))
        if partial and verdict != "n/a":
            verdict += " (median of fewer runs: %s)" % "; ".join(partial)
        tg.append([name, fnum(value) or "-", ("%s %s" % (">=" if better == "ge" else "<=", fnum(threshold)))
                   if threshold is not None else "-", verdict, spread])
        result["targets"].append({"target": name, "value": value, "threshold": threshold,
                                  "compare": better, "result": verdict.split(" ")[0],
                                  "partial_cells": partial, "value_runs": list(value_runs),
                                  "threshold_runs": list(threshold_runs), "runs_overlap": overlap})

    def v(tr, case, cond, field="value"):
        return cell_value("link", tr, case, cond, field)
    for case in [c for c in link["cases"] if c in BW_CASES]:
        target("MetaRoCE >= TCP, %s, 0%% (Mbit/s)" % CASE_NAMES[case], v("metaroce", case, "loss0"),
               v("tcp", case, "loss0"), "ge", runs("link", "metaroce", case, "loss0"),
               runs("link", "tcp", case, "loss0"))
    for cond, share in (("loss1", 0.9), ("loss5", 0.6)):
        for case in [c for c in link["cases"] if c in BW_CASES]:
            own = v("metaroce", case, "loss0")
            target("MetaRoCE at %s >= %d%% of own 0%%, %s" % (cond_label(cond), share * 100, CASE_NAMES[case]),
                   v("metaroce", case, cond), own * share if own is not None else None, "ge",
                   runs("link", "metaroce", case, cond), runs("link", "metaroce", case, "loss0", scale=share))
    if "send_lat" in link["cases"]:
        for field, what in (("value", "median"), ("p99", "p99")):
            target("MetaRoCE latency %s <= siw, 0%% (us)" % what, v("metaroce", "send_lat", "loss0", field),
                   v("siw", "send_lat", "loss0", field), "le", runs("link", "metaroce", "send_lat", "loss0", field),
                   runs("link", "siw", "send_lat", "loss0", field))
    for case in mp["cases"]:
        h = cell_value("mp", "metaroce", case, "healthy")
        target("MetaRoCE, 1 of %s paths degraded >= 75%% of healthy, %s"
               % (params.get("mp_paths", "?"), CASE_NAMES.get(case, case)),
               cell_value("mp", "metaroce", case, "degraded"), h * 0.75 if h is not None else None, "ge",
               runs("mp", "metaroce", case, "degraded"), runs("mp", "metaroce", case, "healthy", scale=0.75))
    if tg:
        header = ["target", "MetaRoCE", "threshold", "result", "runs: MetaRoCE; threshold"]
        out += ["Issue #5 targets (on the medians above; the last column gives the range of",
                "each side's runs and whether the ranges overlap):", ""] + fmt_table(header, tg) + [""]
        md += md_table(header, tg) + [""]

    notes = sorted({"%s %s %s: %s" % (NAMES.get(r["transport"], r["transport"]), r["case"], r["cond"], r["note"])
                    for r in rows if r["status"] != "ok" and r["note"] and r["part"] != "qpmem"})
    if notes:
        out += ["not measured:"] + ["  " + n for n in notes] + [""]
    method = {}
    for r in rows:
        if r["status"] == "ok" and r["note"] and r["part"] == "link":
            cases = method.setdefault((NAMES.get(r["transport"], r["transport"]), r["note"]), [])
            if CASE_NAMES.get(r["case"], r["case"]) not in cases:
                cases.append(CASE_NAMES.get(r["case"], r["case"]))
    out += ["method:"] + ["  %s %s: %s" % (t, ", ".join(c), n) for (t, n), c in sorted(method.items())]

    # --- chart: goodput vs loss ---
    loss_conds = sorted([c for c in link["conds"] if c.startswith("loss")], key=lambda c: float(c[4:]))
    panels = []
    for case in [c for c in link["cases"] if c in BW_CASES]:
        series = [(NAMES[t], COLORS[t], MARKERS[t], [v(t, case, c) for c in loss_conds]) for t in trs]
        panels.append((CASE_NAMES[case], [cond_label(c) for c in loss_conds], series))
    if panels and loss_conds:
        chart.chart(os.path.join(outdir, "bench.png"),
                    "GOODPUT VS LOSS (MBIT/S, LOG SCALE)%s" % (" - QUICK RUN" if params.get("quick") == "1" else ""),
                    panels, [(NAMES[t], COLORS[t], MARKERS[t]) for t in trs], "NETEM LOSS (BOTH WAYS)")
        out += ["", "chart: bench.png"]

    text = "\n".join(out) + "\n"
    open(os.path.join(outdir, "bench.txt"), "w").write(text)
    open(os.path.join(outdir, "bench.md"), "w").write("\n".join(md) + "\n")
    json.dump(result, open(os.path.join(outdir, "bench.json"), "w"), indent=1)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
