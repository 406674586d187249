"""Real Redfish nodes at scale: deploy, no-change re-run, grow by 10 %,
shrink back, teardown, for each cluster size.

The nodes are real (a 10 GiB qcow2 volume, a tap on one bridge, a libvirt
domain defined and never started), served by one sushy-tools emulator and
not enrolled. The ``tenks`` command runs in embedded mode as a user runs
it, with the hostagent options a large cluster needs (written to a
config file and printed): thin_volumes, and VCPU and MEMORY_MB
allocation ratios that let the cluster's nodes be defined on this
machine. Prints each phase's wall-clock time and the time inside the
command (the operation, from its record), the cost per node, and the
hypervisor memory each node takes (MemAvailable before the deploy less
after, over the nodes). On Open vSwitch, also the teardown's floor:
ovs-vswitchd removing as many ports with no Tenks (taps and a bridge of
the benchmark's own). Needs root and tools/setup.sh done.

With --distributed, the command runs against a tenks-conductor and a
tenks-hostagent on this machine's RabbitMQ instead (started as the
functional tests start them, the options in their configuration files):
no start-up in the command, and two processes' CPU.

With --ipmi, the IPMI BMCs instead: tools/bench_ipmi.py at each size (one
IPMI host serving them all, each BMC asked once), and from the growth
between the sizes the memory and CPU each BMC costs and how many fit in
a GiB ([hostagent] ipmi_bmc_memory_kib).

    .venv/bin/python tools/scale.py [--sizes 100 1000] [--redfish-port 8790]
        [--distributed]
    .venv/bin/python tools/scale.py --ipmi [--sizes 100 1000]
"""

import argparse
import contextlib
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent import futures

import yaml
from benchmark import operation_seconds

from tenks.scheduler import filters

TENKS = os.path.join(os.path.dirname(sys.executable), 'tenks')
# Targets on a 2-vCPU machine (issue 23), at 1,000 nodes.
TARGETS = {'deploy': 30, 're-run': 1.5, 'teardown': 15}
GROWTH = 0.1
NODE_MEMORY_MB = 128


def spec(size, cluster, redfish_port, bridge_type):
    return {
        'cluster': cluster,
        'bridge_type': bridge_type,
        'default_ironic_driver': 'redfish',
        'redfish_port': redfish_port,
        'node_types': {'scale': {
            'memory_mb': NODE_MEMORY_MB, 'vcpus': 1,
            'volumes': [{'capacity': '10GiB'}],
            'physical_networks': ['physnet1'],
        }},
        'specs': [{'type': 'scale', 'count': size,
                   'node_name_prefix': 'rs'}],
        'physical_networks': ['physnet1'],
        'bridge_prefix': 'brrs',
    }


def options(largest):
    """{section: its lines} of the options a cluster of ``largest``
    nodes needs on this machine: tasks in flight, its volumes counted
    thin, and ratios that let its nodes' vCPUs and memory be allocated
    (they are defined, not run)."""
    cpus = os.cpu_count()
    memory_mb = os.sysconf('SC_PHYS_PAGES') * os.sysconf(
        'SC_PAGE_SIZE') // 1024 ** 2
    return {'conductor': 'workers = 64\n',
            'hostagent': 'thin_volumes = true\n'
                         'vcpu_inventory = allocation_ratio:%d\n'
                         'memory_mb_inventory = allocation_ratio:%d\n' % (
                             -(-largest // cpus),
                             -(-largest * NODE_MEMORY_MB // memory_mb))}


def config(largest):
    return ''.join('[%s]\n%s' % item for item in options(largest).items())


def rcu_expedited():
    """Whether the kernel expedites RCU grace periods: ovs-vswitchd
    waits one for each port it removes (README, Scale)."""
    try:
        with open('/sys/kernel/rcu_expedited') as f:
            return 'on' if f.read().strip() == '1' else 'off'
    except OSError:
        return 'unknown'


def ovs_floor(size):
    """Seconds ovs-vswitchd takes, with no Tenks, to remove a bridge of
    ``size`` tap ports (``ovs-vsctl del-br``, which waits for it): the
    floor of a teardown on Open vSwitch. Its userspace datapath closes
    each port's packet socket in turn, and each close waits for a grace
    period of the kernel's RCU (README, Scale). The taps and the bridge
    are made here, and refused if their names are taken."""
    bridge = 'brtkfloor'
    taps = ['tkfloor%d' % i for i in range(size)]
    taken = [name for name in (bridge, *taps)
             if os.path.exists('/sys/class/net/' + name)]
    if taken or subprocess.run(['ovs-vsctl', 'br-exists', bridge]
                               ).returncode != 2:
        raise RuntimeError('%s exists already: not measuring the Open '
                           'vSwitch floor' % (taken or [bridge])[0])
    try:
        ip_batch('tuntap add dev %s mode tap' % tap for tap in taps)
        add = ['add-br', bridge, '--', 'set', 'bridge', bridge,
               'datapath_type=netdev']
        for tap in taps:
            add += ['--', 'add-port', bridge, tap]
        vsctl(*add)
        started = time.monotonic()
        vsctl('del-br', bridge)
        return time.monotonic() - started
    finally:
        subprocess.run(['ovs-vsctl', '--if-exists', 'del-br', bridge],
                       check=True)
        # Sixteen at a time: each deletion waits for a grace period too,
        # and those waiting together share one.
        with futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda some: ip_batch(
                ('link del %s' % tap for tap in some), force=True),
                [taps[i::16] for i in range(16)]))


def vsctl(*args):
    subprocess.run(['ovs-vsctl', '--timeout=300', *args], check=True,
                   stdout=subprocess.DEVNULL)


def ip_batch(commands, force=False):
    """``ip -batch`` of ``commands``; with ``force``, on past errors
    (a tap that is not there) and quietly."""
    subprocess.run(['ip', *(['-force'] if force else []), '-batch', '-'],
                   input='\n'.join(commands) + '\n', text=True,
                   check=not force,
                   stderr=subprocess.DEVNULL if force else None)


def available_kib():
    with open('/proc/meminfo') as f:
        for line in f:
            if line.startswith('MemAvailable:'):
                return int(line.split()[1])
    raise RuntimeError('no MemAvailable in /proc/meminfo')


class Embedded:
    """The ``tenks`` command as a user runs it on its own: the options in
    ``conf_path``, a state directory for each size under ``tmp``."""

    def __init__(self, tmp, conf_path):
        self.tmp = tmp
        self.conf_path = conf_path
        self.env = None

    def state_dir(self, size):
        return os.path.join(self.tmp, 'state-%d' % size)

    def args(self, size):
        return ['--config-file', self.conf_path, '--state-dir',
                self.state_dir(size)]


class Distributed:
    """The ``tenks`` command against a running tenks-conductor and
    tenks-hostagent (tests/functional/distributed_fixtures)."""

    def __init__(self, deployment):
        self.deployment = deployment
        self.env = dict(os.environ, TENKS_TRANSPORT_URL=deployment.url)

    def state_dir(self, size):
        return str(self.deployment.tmp / self.deployment.conductor_host)

    def args(self, size):
        return []


@contextlib.contextmanager
def distributed(tmp, largest):
    """A Distributed whose services have the ``options``."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    # futurist imports eventlet, which warns that it is deprecated
    # although Tenks never uses it.
    warnings.filterwarnings('ignore', message='(?s).*Eventlet is deprecated')
    from tests.functional import distributed_fixtures as df
    deployment = df.Deployment(pathlib.Path(tmp) / 'services', agents=1,
                               agent_timeout=300)
    for name, service in deployment.services.items():
        # tenks-conductor's [conductor], tenks-hostagent's [hostagent].
        section = name.split('-')[0]
        header = '[%s]\n' % section
        path = pathlib.Path(service.config)
        path.write_text(path.read_text().replace(
            header, header + options(largest)[section], 1))
    with deployment:
        yield Distributed(deployment)


def run(tenks, *args):
    """Wall-clock seconds of ``tenks args`` (``tenks``: an Embedded or a
    Distributed)."""
    started = time.monotonic()
    done = subprocess.run([TENKS, *args], capture_output=True, text=True,
                          env=tenks.env)
    elapsed = time.monotonic() - started
    if done.returncode:
        raise RuntimeError('tenks %s failed:\n%s%s' % (
            ' '.join(args), done.stdout[-2000:], done.stderr[-4000:]))
    return elapsed


def measure(tmp, size, redfish_port, tenks):
    """{phase: (wall s, inside s)}, memory KiB per node of ``size`` and,
    on Open vSwitch, the teardown's floor (ovs_floor)."""
    state_dir = tenks.state_dir(size)
    cluster = 'rscale-%d' % size
    common = tenks.args(size)
    paths = {}
    grown = size + int(size * GROWTH)
    # A Linux bridge holds 1,022 nodes (the kernel's limit on its ports).
    bridge_type = ('linuxbridge' if grown <= filters.LINUX_BRIDGE_NODES
                   else 'openvswitch')
    print('%d nodes: bridge_type %s' % (size, bridge_type), flush=True)
    for name, count in (('base', size), ('grown', grown)):
        paths[name] = os.path.join(tmp, '%s-%d.yaml' % (name, size))
        with open(paths[name], 'w') as f:
            yaml.safe_dump(spec(count, cluster, redfish_port, bridge_type),
                           f)
    figures = {}
    before = available_kib()
    try:
        for phase, args in (
                ('deploy', ['deploy', paths['base']]),
                ('re-run', ['deploy', paths['base']]),
                ('grow 10 %', ['deploy', paths['grown']]),
                ('shrink 10 %', ['deploy', paths['base']]),
                ('teardown', ['teardown', cluster])):
            if phase == 'teardown':
                memory = (before - available_kib()) / size
            wall = run(tenks, *common, *args)
            figures[phase] = (wall, operation_seconds(state_dir))
    except BaseException:
        subprocess.run([TENKS, *common, 'teardown', cluster],
                       capture_output=True, env=tenks.env)
        raise
    floor = ovs_floor(size) if bridge_type == 'openvswitch' else None
    return figures, memory, floor


def ipmi_figures(size):
    """{figure: number} of tools/bench_ipmi.py for ``size`` BMCs."""
    bench = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         'bench_ipmi.py')
    done = subprocess.run([sys.executable, bench, '--bmcs', str(size),
                           '--idle', '10', '--port', '21000'],
                          capture_output=True, text=True, check=True)
    wanted = {'PSS, all, after': 'pss_mib',
              'CPU idle': 'idle_percent',
              'CPU of the BMC processes per request': 'request_ms',
              'ensure_bmc, each new (serial)': 'ensure_ms'}
    figures = {}
    for line in done.stdout.splitlines():
        label, _, value = line.strip().rpartition('  ')
        if label.strip() in wanted:
            # '113 ms', '0.02% of a core'
            figures[wanted[label.strip()]] = float(
                value.split()[0].rstrip('%'))
    return figures


def ipmi(sizes):
    print('%-6s %12s %14s %16s %18s' % (
        'BMCs', 'PSS MiB', 'idle CPU %', 'CPU ms/request', 'ensure ms each'))
    found = {}
    for size in sizes:
        found[size] = ipmi_figures(size)
        print('%-6d %12.1f %14.2f %16.1f %18.1f' % (
            size, found[size]['pss_mib'], found[size]['idle_percent'],
            found[size]['request_ms'], found[size]['ensure_ms']))
    if len(found) > 1:
        low, high = min(found), max(found)
        per_bmc = (found[high]['pss_mib'] - found[low]['pss_mib']) * 1024 / (
            high - low)
        base = found[low]['pss_mib'] - per_bmc * low / 1024
        print()
        print('each IPMI BMC: %.1f KiB (one IPMI host of %.1f MiB serves '
              'them all): %d BMCs per GiB' % (
                  per_bmc, base, (1024 * 1024 - base * 1024) // per_bmc))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sizes', type=int, nargs='+', default=[100, 1000])
    parser.add_argument('--redfish-port', type=int, default=8790)
    parser.add_argument('--ipmi', action='store_true',
                        help='Measure IPMI BMCs instead.')
    parser.add_argument('--distributed', action='store_true',
                        help='Run the command against a tenks-conductor '
                        'and a tenks-hostagent on RabbitMQ.')
    args = parser.parse_args()
    if args.ipmi:
        ipmi(args.sizes)
        return
    largest = max(args.sizes) + int(max(args.sizes) * GROWTH)
    with tempfile.TemporaryDirectory(prefix='tenks-scale-') as tmp, (
            distributed(tmp, largest) if args.distributed
            else contextlib.nullcontext()) as services:
        conf_path = os.path.join(tmp, 'tenks.conf')
        with open(conf_path, 'w') as f:
            f.write(config(largest))
        tenks = services or Embedded(tmp, conf_path)
        print('Options (%s%s):\n  %s' % (
            conf_path, ', in the services\' configuration files'
            if services else '', re.sub(
                '\n', '\n  ', config(largest).strip())))
        print('The command runs %s' % (
            'against a tenks-conductor and a tenks-hostagent on RabbitMQ'
            if services else 'in embedded mode'))
        print('%d vCPU, %d MiB of memory; the kernel\'s expedited RCU '
              'grace periods %s' % (
                  os.cpu_count(), os.sysconf('SC_PHYS_PAGES') * os.sysconf(
                      'SC_PAGE_SIZE') // 1024 ** 2, rcu_expedited()))
        print()
        print('%-6s %-12s %9s %9s %12s %8s' % (
            'nodes', 'phase', 'command s', 'inside s', 'ms per node',
            'target'))
        per_node = {}
        for size in args.sizes:
            figures, memory, floor = measure(tmp, size, args.redfish_port,
                                             tenks)
            for phase, (wall, inside) in figures.items():
                changed = (int(size * GROWTH) if '10 %' in phase
                           else size)
                target = TARGETS.get(phase) if size == 1000 else None
                print('%-6d %-12s %9.2f %9.2f %12s %8s' % (
                    size, phase, wall, inside,
                    '-' if phase == 're-run' else '%.1f' % (
                        wall / changed * 1000),
                    '%.1f' % target if target else '-'))
            per_node[size] = figures['deploy'][0] / size
            print('%-6d hypervisor memory per node: %.0f KiB' % (size,
                                                                 memory))
            if floor is not None:
                print('%-6d Open vSwitch alone removing %d ports (ovs-vsctl '
                      'del-br, no Tenks): %.2f s, the teardown\'s floor' % (
                          size, size, floor))
        if len(per_node) > 1:
            smallest, biggest = min(per_node), max(per_node)
            print()
            print('deploy cost per node at %d / at %d: %.2f (target <= '
                  '1.3)' % (biggest, smallest,
                            per_node[biggest] / per_node[smallest]))


if __name__ == '__main__':
    main()
