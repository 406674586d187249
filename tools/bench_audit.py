"""Time ``tenks audit`` of an embedded cluster (real libvirt, IPMI host
and Linux bridges): the whole command as a user times it (process start
to exit) for the cluster, and with no cluster (a state directory that
records none); the audit in a process that has the conductor loaded
(what a test suite pays after each case); and, as this machine's speed
varies by the hour, a no-change ``tenks deploy`` of the same cluster
(the same start-up and one read of the hypervisor) and ``tenks node
list`` (start-up and the state database alone) beside them, each with
its CPU time (user and system), which load on the machine moves less.
Needs root and tools/setup.sh done.

    .venv/bin/python tools/bench_audit.py [--size 10] [--runs 7]
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

TENKS = os.path.join(os.path.dirname(sys.executable), 'tenks')


def spec(size):
    return {
        'cluster': 'bench-audit',
        'node_types': {'bench': {
            'memory_mb': 128, 'vcpus': 1,
            'volumes': [{'capacity': '64MiB'}],
            'physical_networks': ['physnet1'],
        }},
        'specs': [{'type': 'bench', 'count': size,
                   'node_name_prefix': 'ba'}],
        'physical_networks': ['physnet1'],
        'bridge_prefix': 'braudit',
        'ipmi_port_range_start': 7400,
        'ipmi_port_range_end': 7499,
    }


def run(env, state_dir, command):
    done = subprocess.run([TENKS, '--state-dir', state_dir, *command],
                          env=env, capture_output=True, text=True)
    # An audit exits 1 on drift: with no cluster of its own it may see
    # what others left on this machine.
    if done.returncode not in (0, 1) or (done.returncode and command[0]
                                         != 'audit'):
        sys.exit('tenks %s failed: %s' % (' '.join(command), done.stderr))


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def figures(times, cpu=None):
    return '%.3f s median (%.3f-%.3f)%s' % (
        statistics.median(times), min(times), max(times),
        ', CPU %.3f s' % statistics.median(cpu) if cpu else '')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--size', type=int, default=10)
    parser.add_argument('--runs', type=int, default=7)
    args = parser.parse_args()

    from conductor import audit as audits
    from tenks import conf as tenks_conf
    from tenks import runtime
    from tenks import spec as tenks_spec
    from tenks.cli import embedded
    runtime.use_threads()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix='tenks-bench-') as tmp:
        conf = tenks_conf.new_conf()
        conf([], default_config_files=[])
        conf.set_override('state_dir', os.path.join(tmp, 'state'))
        with embedded.embedded(conf) as conductor:
            conductor.deployments.deploy(tenks_spec.validate(spec(args.size)))
            try:
                inside = []
                for _ in range(args.runs):
                    started = time.monotonic()
                    report = audits.audit(conductor)
                    inside.append(time.monotonic() - started)
                    if report['drift']:
                        sys.exit('the cluster drifted: %s' % report['drift'])
                path = os.path.join(tmp, 'bench-audit.yaml')
                with open(path, 'w') as f:
                    yaml.safe_dump(spec(args.size), f)
                empty = os.path.join(tmp, 'empty')
                commands = {
                    'audit': (conf.state_dir, ['audit', 'bench-audit']),
                    'audit, no cluster': (empty, ['audit']),
                    'deploy': (conf.state_dir, ['deploy', path]),
                    'node list': (conf.state_dir, ['node', 'list']),
                }
                # Creates the empty state directory's database; and each
                # command once, so that its bytecode is cached (as a
                # user's shell runs it, PYTHONDONTWRITEBYTECODE unset).
                env = dict(os.environ)
                env.pop('PYTHONDONTWRITEBYTECODE', None)
                for state_dir, command in commands.values():
                    run(env, state_dir, command)
                times = {name: [] for name in commands}
                cpu = {name: [] for name in commands}
                for _ in range(args.runs):
                    for name, (state_dir, command) in commands.items():
                        used = children_cpu()
                        started = time.monotonic()
                        run(env, state_dir, command)
                        times[name].append(time.monotonic() - started)
                        cpu[name].append(children_cpu() - used)
            finally:
                conductor.teardowns.teardown('bench-audit')
    print('audit of %d nodes, in-process: %s' % (args.size, figures(inside)))
    for name, title in (
            ('audit', 'tenks audit bench-audit (%d nodes)' % args.size),
            ('audit, no cluster', 'tenks audit, no cluster'),
            ('deploy', 'tenks deploy, nothing to change'),
            ('node list', 'tenks node list')):
        print('%s: %s' % (title, figures(times[name], cpu[name])))
    print('load average before and after: %.1f, %.1f' % (
        load, os.getloadavg()[0]))


if __name__ == '__main__':
    main()
