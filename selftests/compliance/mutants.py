#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Mutation score of the protocol core against this compliance suite.

cargo-mutants generates the mutants of ``proto/src`` (``--list --json
--diff``); this driver applies each one to a snapshot of the core (``git
archive HEAD``; the live tree is never touched), rebuilds
``proto-endpoint`` against it and runs the suite against the endpoint with
``--fail-fast``. Outcomes: caught (suite fails or times out), missed
(suite passes), unviable (does not build).

With ``--core-tests`` each mutant first runs the core's own tests
(``cargo test`` of the snapshot: unit, property, connection and simulator
tests); only a mutant they miss goes on to the suite, and the
outcome records which of the two caught it (``core:`` or the suite's TAP
line).

    selftests/compliance/mutants.py --file src/wire/base.rs --sample 40

Results: ``<out>/results.json`` and a per-file summary on stdout.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=isinstance(cmd, str), **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", action="append", default=[],
                    help="proto-relative source file(s) to mutate (default: all)")
    ap.add_argument("--sample", type=int, default=0, help="random sample size per file (0: all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                   "metaroce-mutants"))
    ap.add_argument("--timeout", type=int, default=120, help="suite timeout per mutant (s)")
    ap.add_argument("--build-timeout", type=int, default=300)
    ap.add_argument("--port", type=int, default=14792)
    ap.add_argument("--budget", type=int, default=0, help="stop after this many seconds")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--core-tests", action="store_true",
                    help="run the core's cargo tests first; the suite only for mutants they miss")
    ap.add_argument("--core-timeout", type=int, default=300)
    ap.add_argument("--rerun", action="append", default=[], metavar="ID",
                    help="with --resume or --retest: forget the result of mutant ID (its "
                         "index in mutants.json) and run it again; only the IDs given run")
    ap.add_argument("--retest", action="store_true",
                    help="re-run missed mutants of an earlier run with the current suite "
                         "and endpoint (after adding cases)")
    args = ap.parse_args()
    t_start = time.monotonic()

    work = args.work
    res_path = os.path.join(work, "results.json")
    results = {}
    if (args.resume or args.retest) and os.path.exists(res_path):
        results = json.load(open(res_path))
        for k in args.rerun:
            if k in results:
                results[k + "-before-rerun"] = results.pop(k)
        if args.retest:
            shutil.rmtree(os.path.join(work, "proto-endpoint"), ignore_errors=True)
            sh("git -C %s archive HEAD proto-endpoint | tar -x -C %s" % (ROOT, work), check=True)
            for k, r in list(results.items()):
                if k not in ("baseline", "core_baseline") and "-" not in k and \
                        r.get("outcome") in ("missed", "flaky"):
                    r["before_retest"] = r["outcome"]
                    del results[k]
            results.pop("baseline", None)
            results.pop("core_baseline", None)
            # The new tests, and the clause index their citations must match
            # (proto/tests/spec_clauses.rs).
            for d in ("proto/tests", "Documentation/metaroce"):
                shutil.rmtree(os.path.join(work, d), ignore_errors=True)
            sh("git -C %s archive HEAD proto/tests Documentation/metaroce | tar -x -C %s"
               % (ROOT, work), check=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        # Documentation/metaroce: the core's spec_clauses test reads it.
        sh("git -C %s archive HEAD proto proto-endpoint Documentation/metaroce | tar -x -C %s"
           % (ROOT, work), check=True)
        # The snapshot's target dir is shared by every mutant build.
    target = os.path.join(work, "target")
    env = dict(os.environ, CARGO_TARGET_DIR=target)
    proto = os.path.join(work, "proto")

    listing = os.path.join(work, "mutants.json")
    if not os.path.exists(listing):
        cmd = ["cargo", "mutants", "--list", "--json", "--diff", "-d", proto]
        for f in args.file:
            cmd += ["-f", f]
        out = sh(cmd, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            print(out.stderr)
            return 2
        open(listing, "w").write(out.stdout)
    mutants = json.load(open(listing))
    by_file = {}
    for i, m in enumerate(mutants):
        m["id"] = i
        by_file.setdefault(m["file"], []).append(m)
    chosen = []
    rnd = random.Random(args.seed)
    for f, ms in sorted(by_file.items()):
        if args.sample and len(ms) > args.sample:
            ms = rnd.sample(ms, args.sample)
        chosen += ms
    if args.rerun:
        chosen = [m for m in mutants if str(m["id"]) in args.rerun]
    print("# %d mutants listed, %d selected" % (len(mutants), len(chosen)), flush=True)

    ep_manifest = os.path.join(work, "proto-endpoint", "Cargo.toml")
    ep_bin = os.path.join(target, "debug", "metaroce-endpoint")
    suite = [sys.executable, os.path.join(HERE, "suite.py"), "--target", "userspace",
             "--endpoint", ep_bin, "--tester-ip", "127.0.3.1", "--dut-ip", "127.0.3.2",
             "--port", str(args.port), "--no-coverage", "--quiet", "--dut-log", ""]

    def build():
        return sh(["timeout", str(args.build_timeout), "cargo", "build", "-q", "-j1",
                   "--manifest-path", ep_manifest], env=env, capture_output=True, text=True)

    core_env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(work, "target-core"))
    # The test profile (opt-level 1, incremental) rebuilds a mutant in ~10 s;
    # --release would take ~30 s per mutant on the 2-core machine.
    core_cmd = ["cargo", "test", "-q", "--manifest-path",
                os.path.join(proto, "Cargo.toml"), "--lib", "--tests"]
    # Not a behavioural test: it compiles the sources with -D warnings, so a
    # mutant that merely adds a warning (a useless comparison, an unused
    # argument) would count as caught by it alone.
    core_skip = ["--", "--skip", "builds_as_a_path_module_in_a_no_std_crate"]

    def core_tests():
        """(outcome, first failing test) of the core's own tests."""
        b = sh(["timeout", str(args.build_timeout)] + core_cmd + ["--no-run"], env=core_env,
               capture_output=True, text=True)
        if b.returncode != 0:
            return "unviable", None
        # timeout(1) signals its whole process group: a hanging test binary
        # (cargo's child) must not outlive the limit and load the machine.
        r = sh(["timeout", "-k", "5", str(args.core_timeout)] + core_cmd + ["--no-fail-fast"] +
               core_skip, env=core_env, capture_output=True, text=True)
        if r.returncode in (124, 137):
            return "timeout", "core: timeout"
        if r.returncode == 0:
            return "missed", None
        fails, in_list = [], False
        for l in r.stdout.splitlines():     # -q: names under a "failures:" line
            if l.strip() == "failures:":
                in_list = True
            elif in_list and l.startswith("    ") and "::" not in l and \
                    l.strip().replace("_", "").isalnum():
                fails.append(l.strip())
            elif in_list and not l.strip() and fails:
                in_list = False
        return "caught", "core: " + (",".join(fails[:3]) if fails else "rc %d" % r.returncode)

    def run_suite(extra=()):
        t0 = time.monotonic()
        try:
            r = sh(suite + list(extra), capture_output=True, text=True, timeout=args.timeout)
            return r.returncode, r.stdout, time.monotonic() - t0
        except subprocess.TimeoutExpired as e:
            return "timeout", (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else "", \
                time.monotonic() - t0

    if args.core_tests and "core_baseline" not in results:
        o, why = core_tests()
        print("# core tests baseline: %s %s" % (o, why or ""), flush=True)
        if o != "missed":
            return 2
        results["core_baseline"] = dict(outcome="pass")
    if "baseline" not in results:
        b = build()
        if b.returncode != 0:
            print(b.stderr)
            return 2
        for _ in range(3):      # a baseline must pass; retry rare timing flakes
            rc, out, dt = run_suite()
            if rc == 0:
                break
        results["baseline"] = dict(rc=rc, secs=round(dt, 1),
                                   summary=[l for l in out.splitlines() if l.startswith("# ")][-1:])
        print("# baseline rc=%s in %.1fs %s" % (rc, dt, results["baseline"]["summary"]), flush=True)
        if rc != 0:
            print(out)
            return 2

    for m in chosen:
        key = str(m["id"])
        if key in results:
            continue
        if args.budget and time.monotonic() - t_start > args.budget:
            print("# budget exhausted", flush=True)
            break
        name = "%s:%s: %s" % (m["file"], m["span"]["start"]["line"], m.get("name") or
                              m.get("replacement"))
        diff = m["diff"]
        p = sh(["patch", "-s", "-p0", "-d", proto], input=diff, text=True, capture_output=True)
        if p.returncode != 0:
            results[key] = dict(name=name, file=m["file"], outcome="patch-failed")
            continue
        try:
            t0 = time.monotonic()
            core = core_tests() if args.core_tests else ("missed", None)
            b = build() if core[0] == "missed" else None
            if core[0] != "missed":
                outcome, caught_by = core
                dt = time.monotonic() - t0
            elif b.returncode != 0:
                outcome, caught_by, dt = "unviable", None, 0
            else:
                rc, out, dt = run_suite(["--fail-fast"])
                if rc == 0:
                    outcome, caught_by = "missed", None
                else:
                    outcome = "caught" if rc != "timeout" else "timeout"
                    fails = [l for l in out.splitlines() if l.startswith("not ok") and "# TODO" not in l]
                    caught_by = fails[0][:160] if fails else str(rc)
                    if fails and rc != "timeout":
                        # Confirm: the failing case must fail again on this mutant
                        # (a scripted peer on a loaded machine has rare timing flakes).
                        name_ = fails[0].split("] ", 1)[1].split(":", 1)[0]
                        rc2, _, _ = run_suite(["--only", "^%s$" % name_])
                        if rc2 == 0:
                            # Not reproducible alone: the mutant counts as caught only
                            # if a second full run fails too (the unmutated baseline
                            # passes full runs).
                            rc3, out3, _ = run_suite()
                            f3 = [l for l in out3.splitlines()
                                  if l.startswith("not ok") and "# TODO" not in l]
                            if rc3 == 0:
                                outcome, caught_by = "missed", "flaky " + name_
                            else:
                                outcome = "caught" if rc3 != "timeout" else "timeout"
                                caught_by = "twice: " + (f3[0][:140] if f3 else str(rc3))
        finally:
            sh(["patch", "-s", "-R", "-p0", "-d", proto], input=diff, text=True, capture_output=True)
        results[key] = dict(name=name, file=m["file"], function=(m.get("function") or {}).get(
            "function_name") if isinstance(m.get("function"), dict) else m.get("function"),
            outcome=outcome, caught_by=caught_by, secs=round(dt, 1))
        print("%-8s %s%s" % (outcome, name, "  <- " + caught_by if caught_by else ""), flush=True)
        json.dump(results, open(res_path, "w"), indent=1)
    json.dump(results, open(res_path, "w"), indent=1)

    summary = {}
    for k, r in results.items():
        if k in ("baseline", "core_baseline") or k.endswith("-before-rerun"):
            continue
        s_ = summary.setdefault(r["file"], {})
        o = "missed" if r["outcome"] == "flaky" else r["outcome"]
        s_[o] = s_.get(o, 0) + 1
    print("\n| file | caught | missed | unviable | timeout | score (caught+timeout / viable) |")
    print("|---|---|---|---|---|---|")
    for f, s_ in sorted(summary.items()):
        c, mi, u, to = (s_.get(x, 0) for x in ("caught", "missed", "unviable", "timeout"))
        v = c + mi + to
        print("| %s | %d | %d | %d | %d | %s |" % (f, c, mi, u, to,
                                                  "%.0f%%" % (100.0 * (c + to) / v) if v else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
