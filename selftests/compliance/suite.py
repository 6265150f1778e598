#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""MetaRoCE compliance suite runner: TAP output and clause coverage table.

Usually started by ``selftests/compliance/run``.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import logging  # noqa: E402
logging.getLogger("scapy").setLevel(logging.ERROR)

from dut import DutError, LineDut, NeedsSetup, Skip  # noqa: E402
import lib  # noqa: E402
import cases  # noqa: E402

CLAUSE_INDEX = os.path.join(HERE, "..", "..", "Documentation", "metaroce", "clause-index.rst")


def load_index(path):
    text = open(path).read()
    rows = re.findall(r"\* - (MR-[\d.]+)\n\s+- (.*)\n\s+- (.*)\n", text)
    return [(c, lvl.strip()) for c, _, lvl in rows]


def clause_key(c):
    return tuple(int(x) for x in c[3:].split("."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", choices=["userspace", "kernel"], default="userspace")
    ap.add_argument("--endpoint", help="path of the metaroce-endpoint binary (userspace)")
    ap.add_argument("--dut-cmd", help="command line of the DUT control helper (kernel target: "
                    "dut_verbs.py, started in the DUT's network namespace)")
    ap.add_argument("--tester-ip", default="127.0.0.1")
    ap.add_argument("--dut-ip", default="127.0.0.2")
    ap.add_argument("--port", type=int, default=4792)
    ap.add_argument("--only", help="regex of case names to run")
    ap.add_argument("--dut-setup", help="kernel target: shell command that sets the whole "
                    "DUT up for a configuration ({conf}: create_qp keys of the helper's setup=, "
                    "'k=v k=v'), e.g. reloads the module with other parameters; cases the "
                    "first DUT's configuration skips run again at the end on DUTs set up for "
                    "them ({conf} in --dut-cmd too; empty for the first DUT)")
    ap.add_argument("--wait-scale", type=float, default=1.0,
                    help="stretch waits for expected packets and completions (slow DUT)")
    ap.add_argument("--no-coverage", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="no tracebacks (mutation runs)")
    ap.add_argument("--fail-fast", action="store_true",
                    help="stop at the first failing case (mutation runs)")
    ap.add_argument("--index", default=CLAUSE_INDEX)
    ap.add_argument("--dut-log", default=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                      "metaroce-endpoint.log"),
                    help="file for the DUT helper's stderr ('' to discard)")
    args = ap.parse_args()

    sel = [c for c in cases.CASES if not args.only or re.search(args.only, c.name)]
    known = {c for c, _ in load_index(args.index)}
    for c in sel:
        for cl in c.clauses:
            if cl not in known:
                print("# warning: %s cites unknown clause %s" % (c.name, cl))

    out = sys.stdout
    out.write("TAP version 13\n1..%d\n" % (len(sel) + (0 if args.no_coverage else 1)))
    out.flush()
    t_start = time.monotonic()

    def start_dut(conf=None):
        """The DUT helper (the DUT set up for `conf` first, if given), or
        (None, (what happened: "refused" or "failed", why))."""
        if args.target == "kernel":
            words = conf_words(conf or {})
            if conf is not None:
                r = subprocess.run(args.dut_setup.format(conf=words), shell=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if r.returncode != 0:
                    # rc 2: the DUT refuses these values (a documented range).
                    what = "refused" if r.returncode == 2 else "failed"
                    return None, (what, "DUT set-up with %s %s (rc=%d): %s" % (
                        words, what, r.returncode, r.stdout.strip().replace("\n", " | ")))
            argv = shlex.split(args.dut_cmd.format(conf=words))
        else:
            argv = [args.endpoint, "--addr", args.dut_ip, "--port", str(args.port)]
        try:
            log = open(args.dut_log, "a" if conf is not None else "w") if args.dut_log \
                else subprocess.DEVNULL
            # pyverbs in an emulated guest can take a while to import.
            dut = LineDut(argv, stderr=log, start_timeout=10.0 if args.target == "userspace"
                          else 120.0)
        except (DutError, OSError) as e:
            return None, ("failed", str(e))
        dut.wait_scale = args.wait_scale
        out.write("# DUT: %s\n" % " ".join("%s=%s" % kv for kv in dut.info.items()))
        return dut, None

    dut = None
    skip_all = None
    crashed = None
    if args.target == "kernel" and not args.dut_cmd:
        skip_all = ("kernel target: runs in the VM tier (selftests/rdma/metaroce_compliance.sh "
                    "starts dut_verbs.py next to an rdma_metaroce device)")
    else:
        dut, why = start_dut()
        if dut is None:
            why = why[1]
            if args.target == "userspace":
                skip_all = "userspace endpoint did not start: %s" % why
                print("# " + skip_all)
            else:       # the VM tier set the kernel target up: not starting is a failure
                crashed = "kernel DUT helper did not start: %s" % why
    # Cases that need the DUT set up otherwise (kernel target: the module reloaded
    # with other parameters) run again at the end, grouped by that configuration.
    deferred = {}    # sorted (key, value) pairs -> cases
    # One tester (its sockets on the MetaRoCE port) for every DUT of the run.
    T = lib.Tester(dut, args.tester_ip, args.port, args.dut_ip) if dut is not None else None

    results = {}
    counts = dict.fromkeys(("pass", "fail", "skip", "todo"), 0)
    number = 0

    def run_case(c, dut, note="", failed=None, skipped=None):
        """Runs case `c` on `dut` (or reports it failed or skipped for the reason
        given) and writes its TAP line."""
        nonlocal crashed, skip_all, number
        tag = "[%s] %s: %s%s" % (" ".join(c.clauses), c.name, c.desc, note)
        failed, skipped = failed or crashed, skipped or skip_all
        if failed or skipped:
            number += 1
            if failed:
                out.write("not ok %d - %s\n#   %s\n" % (number, tag, failed))
                results[c.name] = "fail"
            else:
                out.write("ok %d - %s # SKIP %s\n" % (number, tag, skipped))
                results[c.name] = "skip"
            counts[results[c.name]] += 1
            return
        T.dut = dut
        t0 = time.monotonic()
        trace = []
        try:
            c.fn(T)
            status, msg = "pass", None
        except NeedsSetup as e:
            if not note and args.dut_setup:
                deferred.setdefault(tuple(sorted(e.conf.items())), []).append(c)
                return
            status, msg = "skip", str(e)
        except Skip as e:
            status, msg = "skip", str(e)
        except lib.Fail as e:
            status, msg = "fail", str(e)
        except Exception as e:  # noqa: BLE001 - a crash is a failure
            status, msg = "fail", "%s: %s" % (type(e).__name__, e)
            if not args.quiet:
                trace = traceback.format_exc().splitlines()
        dt = time.monotonic() - t0
        number += 1
        for ln in trace:
            out.write("#   %s\n" % ln)
        if status == "fail" and c.todo:
            status = "todo"
        results[c.name] = status
        counts[status] += 1
        if status == "pass":
            out.write("ok %d - %s (%.2fs)\n" % (number, tag, dt))
        elif status == "skip":
            out.write("ok %d - %s # SKIP %s\n" % (number, tag, msg))
        elif status == "todo":
            out.write("not ok %d - %s (%.2fs) # TODO %s\n#   %s\n" % (number, tag, dt, c.todo, msg))
        else:
            out.write("not ok %d - %s (%.2fs)\n#   %s\n" % (number, tag, dt, msg))
            if dut is not None and dut.has("diag"):
                try:
                    out.write("#   DUT: %s\n" % " ".join(
                        "%s=%s" % kv for kv in dut.cmd("diag").items()))
                except (DutError, OSError) as e:    # e.g. the helper died
                    out.write("#   DUT diag: %s\n" % e)
            if args.fail_fast:
                skip_all = "fail-fast after %s" % c.name
        out.flush()
        if dut is not None and dut.p.poll() is not None and not crashed:
            crashed = "DUT helper exited (rc=%s) during %s" % (dut.p.returncode, c.name)
            out.write("# %s\n" % crashed)

    for c in sel:
        run_case(c, dut)
    for key, group in deferred.items():
        conf = dict(key)
        words = conf_words(conf)
        if dut is not None:
            dut.close()
        out.write("# again on the DUT set up with %s: %s\n"
                  % (words, " ".join(c.name for c in group)))
        dut, why = start_dut(conf)
        # A fresh helper: one that died under an earlier group's case fails
        # that group's later cases, not this group's.
        crashed = None
        failed = skipped = None
        if dut is None and why[0] == "refused":
            skipped = why[1]
        elif dut is None:
            failed = "kernel DUT helper set up with %s did not start: %s" % (words, why[1])
        for c in group:
            run_case(c, dut, " [DUT set up with %s]" % words, failed, skipped)

    if dut is not None:
        dut.close()
    npass, nfail, ntodo, nskip = counts["pass"], counts["fail"], counts["todo"], counts["skip"]

    cov_ok = True
    if not args.no_coverage:
        cov_ok = coverage(out, load_index(args.index), sel, results, len(sel) + 1)
    out.write("# %d passed, %d failed, %d known core bugs (TODO), %d skipped in %.1fs\n"
              % (npass, nfail, ntodo, nskip, time.monotonic() - t_start))
    return 0 if nfail == 0 and cov_ok else 1


def conf_words(conf):
    """A DUT configuration as --dut-setup and --dut-cmd take it: 'k=v k=v', sorted."""
    return " ".join("%s=%d" % kv for kv in sorted(conf.items()))


def coverage(out, index, sel, results, n):
    by_clause = {}
    for c in sel:
        for cl in c.clauses:
            by_clause.setdefault(cl, []).append(c.name)
    out.write("#\n# Clause coverage (MUST/SHOULD clauses of the clause index)\n")
    out.write("# %-10s %-7s %-8s %s\n" % ("clause", "level", "result", "tests / reason"))
    missing_must = []
    counts = {"MUST": [0, 0, 0], "SHOULD": [0, 0, 0]}   # covered, n/a, total
    for cl, lvl in sorted(index, key=lambda x: clause_key(x[0])):
        if lvl not in ("MUST", "SHOULD"):
            continue
        counts[lvl][2] += 1
        tests = by_clause.get(cl, [])
        if tests:
            st = [results.get(t, "-") for t in tests]
            res = ("fail" if "fail" in st else "todo" if "todo" in st else
                   "pass" if "pass" in st else "skip")
            counts[lvl][0] += 1
            out.write("# %-10s %-7s %-8s %s\n" % (cl, lvl, res, " ".join(tests)))
        elif cl in cases.NOT_WIRE_TESTABLE:
            counts[lvl][1] += 1
            out.write("# %-10s %-7s %-8s %s\n" % (cl, lvl, "n/a", cases.NOT_WIRE_TESTABLE[cl]))
        else:
            out.write("# %-10s %-7s %-8s %s\n" % (cl, lvl, "UNCOVERED", "-"))
            if lvl == "MUST":
                missing_must.append(cl)
    for lvl, (cov, na, tot) in counts.items():
        out.write("# %s clauses: %d covered by tests, %d not testable from the wire "
                  "(reason given), %d uncovered, of %d\n" % (lvl, cov, na, tot - cov - na, tot))
    if missing_must:
        out.write("not ok %d - coverage: MUST clauses without a test: %s\n"
                  % (n, " ".join(missing_must)))
        return False
    out.write("ok %d - coverage: every MUST clause is covered by a test or justified n/a\n" % n)
    return True


if __name__ == "__main__":
    sys.exit(main())
