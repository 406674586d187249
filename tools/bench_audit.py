"""Time ``tenks audit`` of an embedded cluster (real libvirt, IPMI host
and Linux bridges): the audit in a process that has the conductor
loaded (what a test suite pays after each case), and the whole command,
start-up included, beside a no-change ``tenks deploy`` of the same
cluster (the same start-up and one read of the hypervisor), as this
machine's speed varies by the hour. Needs root and tools/setup.sh done.

    .venv/bin/python tools/bench_audit.py [--size 10] [--runs 7]
"""

import argparse
import os
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


def figures(times):
    return '%.3f s median (%.3f-%.3f)' % (statistics.median(times),
                                          min(times), max(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--size', type=int, default=10)
    parser.add_argument('--runs', type=int, default=7)
    args = parser.parse_args()

    from tenks import conf as tenks_conf
    from tenks import runtime
    from tenks import spec as tenks_spec
    from tenks.cli import embedded
    runtime.use_threads()
    with tempfile.TemporaryDirectory(prefix='tenks-bench-') as tmp:
        conf = tenks_conf.new_conf()
        conf([], default_config_files=[])
        conf.set_override('state_dir', os.path.join(tmp, 'state'))
        with embedded.embedded(conf) as conductor:
            conductor.deploy(tenks_spec.validate(spec(args.size)))
            try:
                inside = []
                for _ in range(args.runs):
                    started = time.monotonic()
                    report = conductor.audit()
                    inside.append(time.monotonic() - started)
                    if report['drift']:
                        sys.exit('the cluster drifted: %s' % report['drift'])
                path = os.path.join(tmp, 'bench-audit.yaml')
                with open(path, 'w') as f:
                    yaml.safe_dump(spec(args.size), f)
                commands = {'audit': ['audit', 'bench-audit'],
                            'deploy': ['deploy', path]}
                times = {name: [] for name in commands}
                for _ in range(args.runs):
                    for name, command in commands.items():
                        started = time.monotonic()
                        subprocess.run([TENKS, '--state-dir', conf.state_dir,
                                        *command], check=True,
                                       capture_output=True)
                        times[name].append(time.monotonic() - started)
            finally:
                conductor.teardown('bench-audit')
    print('audit of %d nodes, in-process: %s' % (args.size, figures(inside)))
    print('tenks audit bench-audit: %s' % figures(times['audit']))
    print('tenks deploy, nothing to change: %s' % figures(times['deploy']))


if __name__ == '__main__':
    main()
