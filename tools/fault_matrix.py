"""The full fault-injection matrix (tests/functional/fault_suite.py): for
each operation, a failure injected into each of its tasks and a kill at
each task boundary, each case checked by the audit; prints a table of
cases, outcome and time. Needs root and tools/setup.sh done; the CI
runs a reduced matrix (tests/functional/test_faults.py).

    .venv/bin/python tools/fault_matrix.py [--operation deploy ...]
        [--kind fail|kill] [--case PATTERN] [--port-base 9860]
"""

import argparse
import fnmatch
import os
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))


def main():
    from tests.functional import fault_suite as fs
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--operation', action='append',
                        choices=sorted(fs.OPERATIONS),
                        help='(default: all)')
    parser.add_argument('--kind', action='append',
                        choices=(fs.FAIL, fs.KILL), help='(default: both)')
    parser.add_argument('--case', default='*',
                        help='only the cases whose fault (fail:<task>, '
                             'kill:<k>) matches this pattern')
    parser.add_argument('--port-base', type=int, default=9860,
                        help='IPMI ports: 20 from there')
    args = parser.parse_args()

    from tenks import runtime
    runtime.use_threads()
    import pathlib
    rows = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix='tenks-faults-') as tmp:
        tmp = pathlib.Path(tmp)
        with fs.Bystanders(tmp / 'bystanders', args.port_base + 10) as by:
            for name in args.operation or fs.OPERATIONS:
                operation = fs.OPERATIONS[name]
                reference = fs.Reference(operation, tmp / name / 'ref',
                                         args.port_base)
                for i, (kind, argument) in enumerate(fs.cases(
                        reference.tasks, args.kind or (fs.FAIL, fs.KILL))):
                    fault = '%s:%s' % (kind, argument)
                    if not fnmatch.fnmatchcase(fault, args.case):
                        continue
                    rows.append(run(fs, operation, reference, kind,
                                    argument, tmp / name / str(i),
                                    args.port_base, by))
                    print('%-9s %-44s %-28s %6.1f' % rows[-1][:4],
                          flush=True)
                    if rows[-1][4]:
                        print(rows[-1][4], flush=True)
    failed = [row for row in rows if row[2] == 'FAILED']
    print('\n%d case(s), %d failed, in %.0f s' % (
        len(rows), len(failed), time.monotonic() - started))
    for row in failed:
        print('%s %s: %s' % (row[0], row[1], row[4]))
    sys.exit(1 if failed else 0)


def run(fs, operation, reference, kind, argument, tmp, port_base,
        bystanders):
    """(operation, fault, outcome, seconds, error)"""
    started = time.monotonic()
    try:
        outcome = fs.run_case(operation, reference, kind, argument, tmp,
                              port_base, bystanders)
        error = ''
    except Exception as e:
        outcome = 'FAILED'
        error = '%s\n%s' % (e, traceback.format_exc(limit=-3))
    return (operation.name, '%s:%s' % (kind, argument), outcome,
            time.monotonic() - started, error)


if __name__ == '__main__':
    main()
