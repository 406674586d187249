"""The full fault-injection matrix (tests/functional/fault_suite.py): for
each operation (deploy, grow, shrink, teardown embedded; host
maintenance on RabbitMQ), a failure injected into each of its tasks and
a kill at each task boundary, and for the first four a takeover (three
conductors on a Redis jobboard and PostgreSQL: the one that runs the
operation killed at each task boundary, another finishing it), each
case checked by the audit; prints a table of cases, outcome and time.
Needs root and tools/setup.sh done; the CI runs a reduced matrix
(tests/functional/test_faults.py).

    .venv/bin/python tools/fault_matrix.py [--operation deploy ...]
        [--kind fail|kill|takeover] [--case PATTERN]
        [--jobboard redis|zookeeper] [--port-base 9860]
"""

import argparse
import fnmatch
import functools
import os
import pathlib
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
                        choices=sorted(fs.OPERATIONS) + ['maintenance'],
                        help='(default: all; maintenance runs a conductor '
                             'and two hostagents on RabbitMQ)')
    parser.add_argument('--kind', action='append',
                        choices=(fs.FAIL, fs.KILL, fs.TAKEOVER),
                        help='(default: all; takeover runs three '
                             'conductors on a jobboard and PostgreSQL, '
                             'for every operation but maintenance)')
    parser.add_argument('--case', default='*',
                        help='only the cases whose fault (fail:<task>, '
                             'kill:<k>, takeover:<k>) matches this '
                             'pattern')
    parser.add_argument('--jobboard', default='redis',
                        choices=sorted(fs.Conductors.NAMESPACES),
                        help="the takeover cases' jobboard server (default: "
                             "redis)")
    parser.add_argument('--port-base', type=int, default=9860,
                        help='IPMI ports: 20 from there')
    args = parser.parse_args()

    from tenks import runtime
    from tests.functional import cluster_fixtures
    runtime.use_threads()
    cluster_fixtures.interrupt_on_sigterm()
    rows = []
    started = time.monotonic()
    kinds = args.kind or (fs.FAIL, fs.KILL, fs.TAKEOVER)
    # Those of one process, embedded or a conductor on RabbitMQ.
    alone = [kind for kind in kinds if kind != fs.TAKEOVER]
    names = args.operation or [*fs.OPERATIONS, 'maintenance']
    operations = [name for name in names if name != 'maintenance']

    def each(name, reference, case, kinds):
        for i, (kind, argument) in enumerate(fs.cases(reference.tasks,
                                                      kinds)):
            fault = '%s:%s' % (kind, argument)
            if not fnmatch.fnmatchcase(fault, args.case):
                continue
            started = time.monotonic()
            try:
                outcome, error = case(kind, argument,
                                      tmp / name / kind / str(i)), ''
            except Exception as e:
                outcome = 'FAILED'
                error = '%s\n%s' % (e, traceback.format_exc(limit=-3))
            rows.append((name, fault, outcome, time.monotonic() - started,
                         error))
            print('%-11s %-44s %-28s %6.1f' % rows[-1][:4], flush=True)
            if error:
                print(error, flush=True)

    print('%-11s %-44s %-28s %6s' % ('operation', 'case', 'outcome',
                                     'time (s)'), flush=True)
    with tempfile.TemporaryDirectory(prefix='tenks-faults-') as tmp:
        tmp = pathlib.Path(tmp)
        with fs.Bystanders(tmp / 'bystanders', args.port_base + 10) as by:
            for name in operations if alone else ():
                operation = fs.OPERATIONS[name]
                reference = fs.Reference(operation, tmp / name / 'ref',
                                         args.port_base)
                each(name, reference, functools.partial(
                    fs.run_case, operation, reference,
                    port_base=args.port_base, bystanders=by), alone)
            if fs.TAKEOVER in kinds and operations:
                with fs.Conductors(tmp / 'conductors',
                                   backend=args.jobboard) as conductors:
                    for name in operations:
                        operation = fs.OPERATIONS[name]
                        reference = fs.TakeoverReference(
                            conductors, operation,
                            tmp / name / 'takeover-ref', args.port_base)
                        each(name, reference, functools.partial(
                            _takeover, conductors, operation, reference,
                            port_base=args.port_base, bystanders=by),
                            (fs.TAKEOVER,))
        if 'maintenance' in names and alone:
            with fs.TwoHosts(tmp / 'two-hosts') as hosts:
                reference = fs.MaintenanceReference(
                    hosts, tmp / 'maintenance' / 'ref', args.port_base)
                each('maintenance', reference, functools.partial(
                    fs.run_maintenance_case, hosts, reference,
                    port_base=args.port_base), alone)
    print()
    summary(rows, time.monotonic() - started)
    failed = [row for row in rows if row[2] == 'FAILED']
    for row in failed:
        print('%s %s: %s' % (row[0], row[1], row[4].splitlines()[0]))
    sys.exit(1 if failed else 0)


def _takeover(conductors, operation, reference, kind, boundary, tmp_path,
              port_base, bystanders):
    from tests.functional import fault_suite as fs
    return fs.run_takeover_case(conductors, operation, reference, boundary,
                                tmp_path, port_base, bystanders)


def summary(rows, total):
    """Print the cases, passed and time of each operation and fault
    kind, and of all (``total``: the wall time, references included)."""
    print('%-11s %-8s %6s %7s %8s' % ('operation', 'fault', 'cases',
                                      'passed', 'time (s)'))
    groups = {}
    for name, fault, outcome, seconds, _ in rows:
        group = groups.setdefault((name, fault.split(':')[0]), [0, 0, 0.0])
        group[0] += 1
        group[1] += outcome != 'FAILED'
        group[2] += seconds
    for (name, kind), (count, passed, seconds) in groups.items():
        print('%-11s %-8s %6d %7d %8.0f' % (name, kind, count, passed,
                                            seconds))
    print('%-20s %6d %7d %8.0f' % (
        'all', len(rows), sum(row[2] != 'FAILED' for row in rows), total))


if __name__ == '__main__':
    main()
