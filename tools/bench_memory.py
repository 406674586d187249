"""Memory of a conductor and its hostagents over many failed deploys.

Starts a distributed Tenks on this machine as test_memory does (a
tenks-conductor and two tenks-hostagent processes on RabbitMQ,
127.0.0.1:5672, guest/guest, in a private vhost; real libvirt and Linux
bridges), deploys a one-node cluster whose volume image does not exist
again and again (each deploy fails and is rolled back), and prints the
resident memory (RSS) of each process after the first deploy and every
--every deploys. With --heap the services run in
tests/functional/memory_probe and their Python heap is printed too (the
tracing makes them slower, and larger by the traces).

The processes' environment is this one's: the services tune glibc's
malloc themselves (tenks.runtime.tune_malloc) unless it sets
MALLOC_ARENA_MAX or GLIBC_TUNABLES; run it with, e.g.,
MALLOC_ARENA_MAX=16 to see RSS with glibc's defaults. Needs root and
tools/setup.sh done; uses IPMI ports 9690-9699 and tears everything down
at the end.

    .venv/bin/python tools/bench_memory.py [--deploys 500] [--every 100]
        [--heap]
"""
# ruff: noqa: E402

import argparse
import os
import pathlib
import sys
import tempfile
import time
import warnings

# futurist and oslo.service import eventlet, which warns that it is
# deprecated although Tenks never uses it (as in tenks/cli/main.py).
warnings.filterwarnings('ignore', message='(?s).*Eventlet is deprecated')

# The fixtures of the functional tests start the services.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df

MIB = 1024 * 1024


def rss(pid):
    """Resident memory of process ``pid`` in bytes."""
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) * 1024
    raise RuntimeError('no VmRSS for process %d' % pid)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--deploys', type=int, default=500)
    parser.add_argument('--every', type=int, default=100)
    parser.add_argument('--heap', action='store_true',
                        help='print the Python heap of each service too')
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix='bench-memory-') as tmp:
        tmp = pathlib.Path(tmp)
        with df.Deployment(tmp / 'services', probe=args.heap) as d:
            env = cf.ClusterEnv(tmp, port_base=9690,
                                state_dirs=d.state_dirs.values())
            with cf.checked(env):
                run(d, env, tmp, args)


def run(d, env, tmp, args):
    spec = env.spec(count=1)
    spec['node_types']['small']['volumes'] = [{
        'capacity': '64MiB', 'format': 'qcow2',
        'image': str(tmp / 'missing.qcow2')}]
    pids = {d.conductor_host: d.conductor.process.pid,
            **{host: d.agent(host).process.pid for host in d.hosts}}
    print('%7s %8s  %s' % ('deploys', 'seconds', '  '.join(
        '%-22s' % host for host in pids)))
    print('%7s %8s  %s' % ('', '', '  '.join(
        '%-22s' % ('RSS MiB / heap MiB' if args.heap else 'RSS MiB')
        for _ in pids)))
    start = time.monotonic()
    for done in range(1, args.deploys + 1):
        operation = d.wait(d.api.deploy_cluster(df.ADMIN, spec))
        if operation['state'] != 'failed':
            raise SystemExit('deploy %d: %s, not failed' % (
                done, operation['state']))
        if done == 1 or done % args.every == 0 or done == args.deploys:
            heaps = d.python_heaps() if args.heap else {}
            print('%7d %8.0f  %s' % (done, time.monotonic() - start, '  '.join(
                '%-22s' % ('%.1f' % (rss(pid) / MIB) + (
                    ' / %.2f' % (heaps[host] / MIB) if heaps else ''))
                for host, pid in pids.items())), flush=True)
    print('last error: %s' % operation['error'])


if __name__ == '__main__':
    main()
