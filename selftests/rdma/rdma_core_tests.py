#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Helper of rdma_core_tests.sh: runs rdma-core's own Python test suite (tests/ of
rdma-core, as installed under /usr/share/doc/rdma-core/tests) against one device, one
JSON record per test, and compares two such runs.

  rdma_core_tests.py run --tests-dir DIR --dev DEV --gid N --results FILE.jsonl
                         [--timeout S] [--only ID-PREFIX...]
      Runs every test not yet finished in FILE.jsonl (so a run that died can be
      resumed: the test it died in is recorded as an error and skipped). Writes a
      "start" record before and an "end" record after each test (outcome pass, skip,
      fail, error, xfail, upass; the exception's first line, the traceback and the
      test's captured stdout/stderr, children included). A test is interrupted
      (SIGALRM, an error) after --timeout seconds; if that does not stop it, a
      watchdog thread that needs no interpreter lock (faulthandler) dumps the stacks
      and ends the process 30 s later. Exit 0 once every test has an end record.

  rdma_core_tests.py compare --ref NAME=FILE.jsonl --dut NAME=FILE.jsonl --json OUT
      Prints, one per line, "PASS|FAIL|SKIP<TAB>test id<TAB>detail" for every test
      that passed on the reference device, then "#"-lines of diagnostics (counts,
      the failures, skip reasons); writes the summary to OUT. SKIP: the device under
      test lacks a feature listed in ABSENT and the test says so (EOPNOTSUPP, "not
      supported"); anything else that passed on the reference is FAIL.
"""
import argparse
import collections
import faulthandler
import importlib.util
import json
import os
import re
import signal
import sys
import time
import traceback
import unittest

HARD_GRACE = 30

# Features MetaRoCE does not offer (rdma_metaroce(4)), as rdma-core's tests that
# need them: (regular expression on the test id without "tests.", feature). A test
# that passes on the reference but not on MetaRoCE is a skip only if it is listed
# here AND its result says the operation is unsupported; a new feature that a test
# finds missing fails until it is named here.
# (Empty since on-demand paging came, 2026-12-03: every feature rxe passes a test
# of is offered.)
ABSENT = []


def first_line(text):
    for line in (text or '').splitlines():
        if line.strip():
            return line.strip()
    return ''


def load_records(path):
    """test id -> its end record; and the ids started but never ended."""
    ends, started = {}, []
    if not os.path.exists(path):
        return ends, started
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a record cut by a crash
            if rec.get('event') == 'start':
                started.append(rec['id'])
            elif rec.get('event') == 'end':
                ends[rec['id']] = rec
    return ends, [t for t in started if t not in ends]


def flatten(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from flatten(t)
        else:
            yield t


def selected(test_id, prefixes):
    if not prefixes:
        return True
    for p in prefixes:
        if not p.startswith('tests.'):
            p = 'tests.' + p
        if test_id == p or test_id.startswith(p + '.'):
            return True
    return False


class TestTimeout(Exception):
    pass


class RecordingResult(unittest.TestResult):
    """Writes a start and an end record per test; captures fds 1 and 2 per test."""

    def __init__(self, out, log, timeout, capfile):
        super().__init__()
        self.out, self.log, self.timeout, self.capfile = out, log, timeout, capfile
        self.cur = None

    def _write(self, rec):
        self.out.write(json.dumps(rec) + '\n')
        self.out.flush()
        os.fsync(self.out.fileno())

    def startTest(self, test):
        super().startTest(test)
        tid = test.id()
        self.cur = {'event': 'end', 'id': tid, 'outcome': 'pass', 'error': '',
                    'traceback': '', 'output': '', 't0': time.time()}
        self._write({'event': 'start', 'id': tid, 'time': self.cur['t0']})
        self.log.write(f'=== {tid}\n')
        self.log.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        # Everything the test (and any process it forks) prints goes to a file, which
        # a resumed run reads back if this process dies in the test.
        self.cap = open(self.capfile, 'w+b')
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(self.cap.fileno(), 1)
        os.dup2(self.cap.fileno(), 2)
        signal.alarm(self.timeout)
        faulthandler.dump_traceback_later(self.timeout + HARD_GRACE, exit=True, file=self.log)

    def _outcome(self, outcome, err=None, reason=''):
        cur = self.cur
        if cur is None:  # an error outside a test (class or module fixture)
            return
        # The first failure wins (a later tearDown error does not hide it).
        if cur['outcome'] in ('fail', 'error') and outcome in ('fail', 'error'):
            return
        cur['outcome'] = outcome
        if err is not None:
            exc_type, value, _ = err
            cur['error'] = first_line(''.join(traceback.format_exception_only(exc_type, value)))
            cur['traceback'] = ''.join(traceback.format_exception(*err))
        if reason:
            cur['error'] = first_line(str(reason)) or str(reason)

    def addSuccess(self, test):
        super().addSuccess(test)

    def addError(self, test, err):
        super().addError(test, err)
        if self.cur is None or test.id() != self.cur['id']:
            # setUpClass/tearDownClass and friends: a record of their own.
            self._write({'event': 'end', 'id': test.id(), 'outcome': 'error',
                         'error': first_line(''.join(traceback.format_exception_only(err[0], err[1]))),
                         'traceback': ''.join(traceback.format_exception(*err)),
                         'output': '', 'duration': 0})
            return
        self._outcome('error', err)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._outcome('fail', err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        if self.cur is None or test.id() != self.cur['id']:
            self._write({'event': 'end', 'id': test.id(), 'outcome': 'skip',
                         'error': str(reason), 'traceback': '', 'output': '', 'duration': 0})
            return
        self._outcome('skip', reason=reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._outcome('xfail', err)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._outcome('upass')

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._outcome('fail' if issubclass(err[0], test.failureException) else 'error', err)

    def stopTest(self, test):
        signal.alarm(0)
        faulthandler.cancel_dump_traceback_later()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved:
            os.close(fd)
        self.cap.seek(0)
        output = self.cap.read().decode(errors='replace')
        self.cap.close()
        os.unlink(self.capfile)
        cur, self.cur = self.cur, None
        cur['duration'] = round(time.time() - cur.pop('t0'), 3)
        cur['output'] = output[-4000:]
        if output:
            self.log.write(output if output.endswith('\n') else output + '\n')
        if cur['traceback']:
            self.log.write(cur['traceback'])
        self.log.write(f'--- {cur["outcome"]} {cur["id"]} ({cur["duration"]} s)'
                       f'{": " + cur["error"] if cur["error"] else ""}\n')
        self.log.flush()
        self._write(cur)
        super().stopTest(test)


def cmd_run(a):
    # The log is our own descriptor: fds 1 and 2 are redirected during each test.
    log = os.fdopen(os.dup(1), 'w')
    capfile = a.results + '.output'
    ends, dangling = load_records(a.results)
    out = open(a.results, 'a')
    for tid in dangling:
        # A previous runner died inside this test: hard timeout, crash, or killed.
        output = ''
        if os.path.exists(capfile):
            with open(capfile, 'rb') as f:
                output = f.read().decode(errors='replace')[-4000:]
            os.unlink(capfile)
        rec = {'event': 'end', 'id': tid, 'outcome': 'error', 'duration': None,
               'error': f'the test process died during this test (no result within '
                        f'{a.timeout}+{HARD_GRACE} s, or a crash; stacks in the raw log)',
               'traceback': '', 'output': output}
        out.write(json.dumps(rec) + '\n')
        ends[tid] = rec
    out.flush()

    sys.path.insert(0, a.tests_dir)
    from args_parser import parser  # rdma-core's own option parser (tests/args_parser.py)
    sys.argv = [sys.argv[0], '--dev', a.dev, '--port', str(a.port), '--gid', str(a.gid)]
    parser.parse_args()
    spec = importlib.util.spec_from_file_location(
        'tests', os.path.join(a.tests_dir, '__init__.py'),
        submodule_search_locations=[a.tests_dir])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules['tests'] = pkg
    spec.loader.exec_module(pkg)
    all_tests = list(flatten(unittest.TestLoader().loadTestsFromModule(pkg)))
    todo = [t for t in all_tests if selected(t.id(), a.only) and t.id() not in ends]
    log.write(f'# {len(all_tests)} tests loaded, {len(todo)} to run on {a.dev} '
              f'(port {a.port}, gid {a.gid})\n')
    log.flush()

    def on_alarm(signum, frame):
        raise TestTimeout(f'test timed out after {a.timeout} s (SIGALRM)')
    signal.signal(signal.SIGALRM, on_alarm)
    faulthandler.enable(file=log)
    result = RecordingResult(out, log, a.timeout, capfile)
    unittest.TestSuite(todo).run(result)
    log.write(f'# run finished: {result.testsRun} tests run\n')
    return 0


def cmd_compare(a):
    ref_name, ref_path = a.ref.split('=', 1)
    dut_name, dut_path = a.dut.split('=', 1)
    ref, _ = load_records(ref_path)
    dut, _ = load_records(dut_path)

    def counts(recs):
        c = collections.Counter(r['outcome'] for r in recs.values())
        return {k: c.get(k, 0) for k in ('pass', 'skip', 'fail', 'error', 'xfail', 'upass')}

    def unsupported(rec):
        """The sign in the test's result that an operation is unsupported, if any."""
        text = (rec.get('error', '') + '\n' + rec.get('output', '')).lower()
        for sign in ('errno: 95', 'operation not supported', 'eopnotsupp',
                     'errno: 93', 'protocol not supported',
                     'not supported', "doesn't support", 'does not support', 'unsupported'):
            if sign in text:
                return sign
        return None

    def absent_feature(short):
        for pattern, feature in ABSENT:
            if re.search(pattern, short):
                return feature
        return None

    def missing_feature(short, rec):
        """The reason to count the test as skipped: a listed absent feature, and the
        test says the operation is unsupported. None otherwise (a failure)."""
        feature, sign = absent_feature(short), unsupported(rec)
        if feature and sign:
            return f'{feature} not offered by {dut_name} ({rec["outcome"]}: {detail(rec)})'
        return None

    def detail(rec):
        d = rec.get('error', '')
        # rdma_cm tests run their two sides in child processes, which only print.
        players = [l.strip() for l in rec.get('output', '').splitlines() if l.startswith('Player ')]
        if players:
            d += ' [' + '; '.join(players[:2]) + ']'
        return d

    regressions, lines = [], []
    for tid in sorted(ref):
        if ref[tid]['outcome'] != 'pass':
            continue
        rec = dut.get(tid)
        short = tid[len('tests.'):] if tid.startswith('tests.') else tid
        if rec is None:
            lines.append(('FAIL', short, f'not run on {dut_name}'))
            regressions.append({'id': tid, 'outcome': 'not run', 'error': '', 'todo': None})
        elif rec['outcome'] == 'pass':
            lines.append(('PASS', short, ''))
        else:
            why = missing_feature(short, rec)
            if why:
                lines.append(('SKIP', short, why))
            else:
                note = ''
                if unsupported(rec) and not absent_feature(short):
                    note = ' [unsupported, but not a feature listed as absent (ABSENT)]'
                elif absent_feature(short):
                    note = f' [{absent_feature(short)} is listed as absent, but the test did not say unsupported]'
                lines.append(('FAIL', short, f'{rec["outcome"]}: {detail(rec)}{note}'))
            regressions.append({'id': tid, 'outcome': rec['outcome'], 'error': detail(rec),
                                'absent_feature': absent_feature(short) if why else None,
                                'duration': rec.get('duration')})
    for kind, tid, d in lines:
        print(f'{kind}\t{tid}\t{d}')

    skips = collections.defaultdict(list)
    for tid, rec in sorted(dut.items()):
        if rec['outcome'] == 'skip':
            skips[rec['error']].append(tid)
    dut_only = sorted(t for t, r in dut.items()
                      if r['outcome'] == 'pass' and ref.get(t, {}).get('outcome') != 'pass')
    summary = {
        'devices': {ref_name: counts(ref), dut_name: counts(dut)},
        'reference': ref_name, 'device_under_test': dut_name,
        f'pass_on_{ref_name}_not_on_{dut_name}': regressions,
        f'pass_on_{dut_name}_not_on_{ref_name}': dut_only,
        f'skip_reasons_{dut_name}': {k: v for k, v in sorted(skips.items(), key=lambda kv: -len(kv[1]))},
        'outcomes': {tid: {ref_name: ref.get(tid, {}).get('outcome'),
                           dut_name: dut.get(tid, {}).get('outcome')}
                     for tid in sorted(set(ref) | set(dut))},
    }
    with open(a.json, 'w') as f:
        json.dump(summary, f, indent=1)

    for name in (ref_name, dut_name):
        c = summary['devices'][name]
        print(f'# {name}: {c["pass"]} passed, {c["skip"]} skipped, {c["fail"]} failed, '
              f'{c["error"]} errored (of {sum(c.values())})')
    absent = collections.Counter(r['absent_feature'] for r in regressions if r['absent_feature'])
    print(f'# {len(regressions)} tests pass on {ref_name} but not on {dut_name}, '
          f'{sum(absent.values())} of them for features {dut_name} does not offer:')
    for feature, n in absent.most_common():
        print(f'#   {n:3d}  {feature}')
    others = [r for r in regressions if not r['absent_feature']]
    if others:
        print(f'# {len(others)} failures:')
    for r in others:
        print(f'#   {r["id"]}: {r["outcome"]}: {r["error"]}')
    print(f'# {len(dut_only)} tests pass on {dut_name} but not on {ref_name}'
          + (': ' + ' '.join(dut_only) if dut_only else ''))
    print(f'# skip reasons on {dut_name} (tests):')
    for reason, tids in summary[f'skip_reasons_{dut_name}'].items():
        print(f'#   {len(tids):3d}  {reason}')
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest='cmd', required=True)
    r = sub.add_parser('run')
    r.add_argument('--tests-dir', required=True)
    r.add_argument('--dev', required=True)
    r.add_argument('--port', type=int, default=1)
    r.add_argument('--gid', type=int, required=True)
    r.add_argument('--results', required=True)
    r.add_argument('--timeout', type=int, default=60)
    r.add_argument('--only', nargs='*', default=[])
    c = sub.add_parser('compare')
    c.add_argument('--ref', required=True)
    c.add_argument('--dut', required=True)
    c.add_argument('--json', required=True)
    a = ap.parse_args()
    return cmd_run(a) if a.cmd == 'run' else cmd_compare(a)


if __name__ == '__main__':
    sys.exit(main())
