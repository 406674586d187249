"""Time the CLI's start-up, and deploy, no-change re-run and teardown of
real clusters.

Start-up: medians of a bare Python start, ``tenks --version``, ``tenks
--help`` and a read-only command (``node list`` in embedded mode, on an
existing state database), with how much each costs over the bare start
and the budget it must keep.

Then the raw floor: the volumes, taps, domains and BMCs of the largest
size made by direct driver calls, one node after another. Then runs the
``tenks`` command (embedded mode, real libvirt, virtualbmc and Linux
bridges) the way a user does, for each cluster size, and prints medians
of the whole command's wall-clock time and of the time inside the
command (the operation, from its record: without Python's start-up,
imports and exit), with the budgets of issue 9, next to the Ansible-based
Tenks measured on the same kind of machine; the cost of each extra node;
and the SQL statements of a deploy and of a no-change re-run (counted
in-process), with the flows the re-run persisted. Needs root and
tools/setup.sh done (not for --startup-only).

    .venv/bin/python tools/benchmark.py [--sizes 1 8] [--runs 3]
    .venv/bin/python tools/benchmark.py --startup-only
"""

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

TENKS = os.path.join(os.path.dirname(sys.executable), 'tenks')

# Ansible Tenks on these machines (seconds): deploy, re-run, teardown.
ANSIBLE = {1: (37, None, None), 8: (66, 54, 40)}

# Seconds the whole command may take (issue 9), 8 nodes.
BUDGET = {(8, 'deploy'): 1.5, (8, 're-run'): 0.5, (8, 'teardown'): 1.0}

# Seconds each may take over a bare Python start (issue 8).
STARTUP_BUDGET = {'--version': 0.15, '--help': 0.15, 'node list': 0.4}


def spec(size, cluster):
    return {
        'cluster': cluster,
        'node_types': {'bench': {
            'memory_mb': 128, 'vcpus': 1,
            'volumes': [{'capacity': '1GiB'}],
            'physical_networks': ['physnet1'],
        }},
        'specs': [{'type': 'bench', 'count': size,
                   'node_name_prefix': 'bn'}],
        'physical_networks': ['physnet1'],
        'bridge_prefix': 'brbench',
        'ipmi_port_range_start': 7300,
        'ipmi_port_range_end': 7399,
    }


def timed(*args):
    """(wall-clock s of the command, s it reports itself)."""
    started = time.monotonic()
    result = subprocess.run([TENKS, *args], capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if result.returncode:
        sys.exit('tenks %s failed:\n%s' % (' '.join(args), result.stderr))
    inside = float(re.search(r' in ([0-9.]+) s\.', result.stdout).group(1))
    return elapsed, inside


def wall(command, runs, env):
    """Median, min and max wall-clock seconds of ``command``."""
    times = []
    for _ in range(runs):
        started = time.monotonic()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL,
                       env=env)
        times.append(time.monotonic() - started)
    return statistics.median(times), min(times), max(times)


def startup(tmp, runs):
    """Print the start-up figures of the CLI."""
    # A state database as a first deploy leaves it (with no nodes).
    from tenks.db import api as db_api
    from tenks.db import migration
    state = os.path.join(tmp, 'startup-state')
    os.makedirs(state, mode=0o700)
    migration.upgrade(db_api.create_engine(db_api.default_url(state)))
    # Embedded mode, whatever this shell says.
    env = dict(os.environ)
    env.pop('TENKS_TRANSPORT_URL', None)
    commands = {
        'python -c pass': [sys.executable, '-c', 'pass'],
        '--version': [TENKS, '--version'],
        '--help': [TENKS, '--help'],
        'node list': [TENKS, '--state-dir', state, 'node', 'list'],
    }
    print('%-16s %8s %11s %8s %8s' % ('start-up', 'median s', 'min-max s',
                                      'over s', 'budget'))
    bare = None
    for name, command in commands.items():
        median, low, high = wall(command, runs, env)
        bare = median if bare is None else bare
        budget = STARTUP_BUDGET.get(name)
        print('%-16s %8.3f %5.3f-%-5.3f %8.3f %8s' % (
            name if name.startswith('python') else 'tenks ' + name,
            median, low, high, median - bare,
            '%.2f' % budget if budget else '-'))
    print()


def operation_seconds(state_dir):
    """Seconds the newest operation took, from its record: the work
    inside the command, without Python's start, imports and exit."""
    import datetime
    import sqlite3
    db = sqlite3.connect(os.path.join(state_dir, 'state.sqlite'))
    try:
        created, finished = db.execute(
            'SELECT created_at, finished_at FROM tenks_operations '
            'ORDER BY created_at DESC LIMIT 1').fetchone()
    finally:
        db.close()
    parse = datetime.datetime.fromisoformat
    return (parse(finished) - parse(created)).total_seconds()


def raw_floor(size, runs):
    """Median seconds of the raw operations under a deploy of ``size``
    nodes: each node's volume, tap, domain and BMC made by direct driver
    calls, one node after another, no conductor, bus or records."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_node_requests as nodes_bench
    times = []
    for _ in range(runs):
        bench = nodes_bench.Bench(size)
        try:
            times.append(nodes_bench.in_turn(bench.raw, bench.node_list))
        finally:
            bench.clean()
    return statistics.median(times)


def sql_statements(tmp, size):
    """SQL statements a deploy of ``size`` nodes sends to the state
    database, and those of a no-change re-run, counted in-process on the
    embedded conductor; and the flows the re-run persisted."""
    import sqlalchemy as sa

    from tenks import conf as tenks_conf
    from tenks import runtime
    from tenks import spec as tenks_spec
    from tenks.cli import embedded
    runtime.use_threads()
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    conf.set_override('state_dir', os.path.join(tmp, 'sql-state'))
    cluster = 'bench-sql-%d' % size
    data = spec(size, cluster)
    data['bridge_prefix'] = 'brbsql'
    cluster_spec = tenks_spec.validate(data)
    with embedded.embedded(conf) as conductor:
        # The local hostagent registers beside the deploy: not its work.
        deadline = time.monotonic() + 30
        while not conductor.registry.list_hypervisors():
            if time.monotonic() > deadline:
                sys.exit('the embedded hostagent did not register')
            time.sleep(0.01)
        engine = conductor.db.engine
        counted = []
        sa.event.listen(engine, 'before_cursor_execute',
                        lambda *args: counted.append(1))
        conductor.deployments.deploy(cluster_spec)
        deploy = len(counted)
        with engine.connect() as connection:
            books = connection.exec_driver_sql(
                'SELECT count(*) FROM logbooks').scalar()
        del counted[:]
        conductor.deployments.deploy(cluster_spec)
        rerun = len(counted)
        with engine.connect() as connection:
            books_after = connection.exec_driver_sql(
                'SELECT count(*) FROM logbooks').scalar()
        conductor.teardowns.teardown(cluster)
    return deploy, rerun, books_after - books


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sizes', type=int, nargs='+', default=[1, 8])
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--startup-runs', type=int, default=11)
    parser.add_argument('--startup-only', action='store_true',
                        help='Only the start-up figures (no root needed).')
    args = parser.parse_args()

    # The interpreter matters: a build without PGO and LTO is slower.
    print('Python %s, %s' % (platform.python_version(),
                             os.path.realpath(sys._base_executable)))
    with tempfile.TemporaryDirectory(prefix='tenks-bench-') as tmp:
        startup(tmp, args.startup_runs)
    if args.startup_only:
        return
    largest = max(args.sizes)
    floor = raw_floor(largest, args.runs)
    print('raw floor: %d nodes made by direct driver calls, one after '
          'another: %.2f s' % (largest, floor))
    print()
    print('%-6s %-10s %10s %10s %10s %8s  %s' % (
        'nodes', 'phase', 'command s', 'min-max s', 'inside s', 'budget',
        'Ansible Tenks s'))
    medians = {}
    with tempfile.TemporaryDirectory(prefix='tenks-bench-') as tmp:
        state_dir = os.path.join(tmp, 'state')
        state = ['--state-dir', state_dir]
        for size in args.sizes:
            path = os.path.join(tmp, 'bench-%d.yaml' % size)
            cluster = 'bench-%d' % size
            with open(path, 'w') as f:
                yaml.safe_dump(spec(size, cluster), f)
            figures = {'deploy': [], 're-run': [], 'teardown': []}
            for _ in range(args.runs):
                for phase, command in (('deploy', ['deploy', path]),
                                       ('re-run', ['deploy', path]),
                                       ('teardown', ['teardown', cluster])):
                    wall, _ = timed(*state, *command)
                    figures[phase].append(
                        (wall, operation_seconds(state_dir)))
            for index, (phase, values) in enumerate(figures.items()):
                ansible = ANSIBLE.get(size, (None,) * 3)[index]
                wall = [w for w, _ in values]
                medians[(size, phase)] = statistics.median(wall)
                print('%-6d %-10s %10.2f %4.2f-%-5.2f %10.2f %8s  %s' % (
                    size, phase, statistics.median(wall), min(wall),
                    max(wall), statistics.median(i for _, i in values),
                    BUDGET.get((size, phase), '-'),
                    ansible if ansible else '-'))
        smallest = min(args.sizes)
        if largest > smallest:
            extra = (medians[(largest, 'deploy')]
                     - medians[(smallest, 'deploy')]) / (largest - smallest)
            print()
            print('each extra node adds %.0f ms to a deploy (budget 45 ms)'
                  % (extra * 1000))
        print()
        deploy, rerun, flows = sql_statements(tmp, largest)
        print('SQL statements: deploy of %d nodes %d (%.1f per node, budget '
              '10); no-change re-run %d, flows it persisted: %d' % (
                  largest, deploy, deploy / largest, rerun, flows))


if __name__ == '__main__':
    main()
