#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turn bench.sh's bench.csv into the human table (bench.txt) and bench.json.

   report.py CSV OUTDIR

Ratios are plain value ratios (A/B): for the *_bw rows higher is better, for the
*_lat rows lower is better. A ratio needs both cells measured; otherwise it is "-".
"""
import csv
import json
import os
import platform
import sys
import time

TRANSPORTS = [("tcp", "TCP"), ("rxe", "rxe"), ("metaroce", "MetaRoCE")]
RATIOS = [("metaroce", "rxe"), ("metaroce", "tcp"), ("rxe", "tcp")]
NAMES = dict(TRANSPORTS)


def main():
    src, outdir = sys.argv[1], sys.argv[2]
    rows = list(csv.DictReader(open(src)))
    cells = {}
    tests = []
    for r in rows:
        key = (r["test"], r["loss_pct"])
        if key not in tests:
            tests.append(key)
        cells[(r["transport"],) + key] = r

    def value(tr, test, loss):
        r = cells.get((tr, test, loss))
        if r and r["status"] == "ok" and r["value"]:
            return float(r["value"]), r["unit"]
        return None, (r or {}).get("status", "missing")

    header = ["test", "loss"] + [n for _, n in TRANSPORTS] + ["%s/%s" % (NAMES[a], NAMES[b]) for a, b in RATIOS]
    table = []
    result = {"generated": time.strftime("%Y-%m-%dT%H:%M:%S"), "kernel": platform.release(),
              "cpus": os.cpu_count(), "results": [], "ratios": []}
    for test, loss in sorted(tests, key=lambda k: (int(k[1]), k[0])):
        line = [test, loss + "%"]
        for tr, _ in TRANSPORTS:
            v, unit = value(tr, test, loss)
            line.append("%.2f %s" % (v, unit) if v is not None else unit)
            r = cells.get((tr, test, loss), {})
            result["results"].append({"transport": tr, "test": test, "loss_pct": int(loss),
                                      "value": v, "unit": r.get("unit") or None,
                                      "status": r.get("status", "missing"), "note": r.get("note", "")})
        for a, b in RATIOS:
            va, _ = value(a, test, loss)
            vb, _ = value(b, test, loss)
            ratio = va / vb if va is not None and vb else None
            line.append("%.3f" % ratio if ratio is not None else "-")
            result["ratios"].append({"test": test, "loss_pct": int(loss), "ratio": "%s/%s" % (a, b), "value": ratio})
        table.append(line)

    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    fmt = "  ".join("%%-%ds" % w for w in widths)
    out = ["MetaRoCE bench %s: %s, %s vCPUs; hostA veth0 198.18.0.1 -> hostB veth1 198.18.0.2, netem loss on both veths"
           % (result["generated"], result["kernel"], result["cpus"]),
           "bandwidth: Mbit/s (higher is better); latency: one-way median, us (lower is better); ratios are A/B of the values",
           "", (fmt % tuple(header)).rstrip(), fmt % tuple("-" * w for w in widths)]
    out += [(fmt % tuple(line)).rstrip() for line in table]
    notes = sorted({"%s: %s" % (NAMES[r["transport"]], r["note"]) for r in rows
                    if r["status"] != "ok" and r["note"]})
    if notes:
        out += ["", "not measured:"] + ["  " + n for n in notes]
    out += ["", "method:"] + sorted({"  %s %s: %s" % (NAMES[r["transport"]], r["test"], r["note"])
                                     for r in rows if r["status"] == "ok" and r["note"]})
    text = "\n".join(out) + "\n"
    open(os.path.join(outdir, "bench.txt"), "w").write(text)
    json.dump(result, open(os.path.join(outdir, "bench.json"), "w"), indent=1)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
