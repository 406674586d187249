"""Time whole-node requests (hostagent API 1.2) against the same work
done as single-thing driver calls, on real libvirt, netlink and the
IPMI host.

N nodes (1 GiB qcow2 volume, 1 NIC, 128 MiB) are made in parallel, one
thread per node, each way in turn; then ensure_node is sent again
unchanged, and the nodes are removed; last, made and removed one node
after another. Needs root and a running libvirtd;
uses IPMI ports 8500-8599 and names starting with ``bn<hex>``, and
removes all it makes.

    .venv/bin/python tools/bench_node_requests.py [--nodes 8] [--runs 3]
"""

import argparse
import concurrent.futures
import os
import secrets
import shutil
import statistics
import tempfile
import time
import uuid

from hostagent import manager
from hostagent import nodes as hostagent_nodes
from tenks import conf as tenks_conf
from tenks import constants

OWNER = 'tenks:bench:%s' % uuid.uuid4()


def parallel(function, items):
    """Seconds to run ``function`` on every item, one thread each."""
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(items)) as pool:
        list(pool.map(function, items))
    return time.monotonic() - start


def in_turn(function, items):
    """Seconds to run ``function`` on every item, one after another."""
    start = time.monotonic()
    for item in items:
        function(item)
    return time.monotonic() - start


class Bench:

    def __init__(self, count):
        self.prefix = 'bn' + secrets.token_hex(2)
        self.state = tempfile.mkdtemp(prefix=self.prefix)
        self.pool_dir = tempfile.mkdtemp(prefix=self.prefix, dir='/var/tmp')
        os.chmod(self.pool_dir, 0o711)
        conf = tenks_conf.new_conf()
        conf([], default_config_files=[])
        conf.set_override('state_dir', self.state)
        self.virt = manager.load_driver('tenks.virt_drivers', 'libvirt', conf)
        self.network = manager.load_driver('tenks.network_drivers',
                                           'linuxbridge', conf)
        self.bmc = manager.load_driver('tenks.bmc_drivers', 'virtualbmc',
                                       conf)
        self.redfish = manager.load_driver('tenks.redfish_drivers',
                                           'sushy-tools', conf)
        self.nodes = hostagent_nodes.Nodes(
            self.virt, {'linuxbridge': self.network}, self.bmc, self.redfish,
            conf.hostagent.host, manager.load_driver(
                'tenks.snmp_drivers', 'virtualpdu', conf))
        self.pool = self.prefix + '-pool'
        self.bridge = self.prefix + '-br'
        self.virt.ensure_pool(self.pool, os.path.join(self.pool_dir, 'p'),
                              OWNER)
        self.network.ensure_bridge(self.bridge, OWNER)
        self.node_list = [self.node(i) for i in range(count)]

    def node(self, index):
        name = '%s-n%d' % (self.prefix, index)
        return {
            'uuid': str(uuid.uuid4()), 'name': name, 'domain_type': 'qemu',
            'vcpus': 1, 'memory_mb': 128, 'console_log_enabled': False,
            'pool': self.pool,
            'volumes': [{'name': name + '-v0', 'capacity': constants.GIB,
                         'format': 'qcow2'}],
            'nics': [{'mac': '52:54:00:be:%02x:%02x' % (
                secrets.randbits(8), index),
                'tap': name + '-t0', 'bridge': self.bridge}],
            'bmc': {'address': '127.0.0.1', 'port': 8500 + index,
                    'username': 'admin', 'password': 'password'},
        }

    def raw(self, node):
        """The same work as one-thing driver calls (API 1.0 requests)."""
        vol, nic, bmc = node['volumes'][0], node['nics'][0], node['bmc']
        self.virt.ensure_volume(node['pool'], vol['name'], vol['capacity'],
                                vol['format'], OWNER)
        self.network.ensure_port(nic['bridge'], nic['tap'], OWNER)
        self.virt.ensure_domain(hostagent_nodes.domain(node), OWNER)
        self.bmc.ensure_bmc(node['name'], bmc['address'], bmc['port'],
                            bmc['username'], bmc['password'],
                            self.nodes.mark(OWNER))

    def ensure(self, node):
        assert self.nodes.ensure(node, OWNER, False)['power_state']

    def remove(self, node):
        self.nodes.remove(node, OWNER)

    def run(self):
        figures = {}
        for label, how, function in (
                ('raw driver calls', parallel, self.raw),
                ('remove_node (raw ones)', parallel, self.remove),
                ('ensure_node', parallel, self.ensure),
                ('ensure_node unchanged', parallel, self.ensure),
                ('remove_node', parallel, self.remove),
                ('ensure_node in turn', in_turn, self.ensure),
                ('remove_node in turn', in_turn, self.remove)):
            figures[label] = how(function, self.node_list)
        return figures

    def clean(self):
        for node in self.node_list:
            self.nodes.remove(node, OWNER)
        self.network.remove_bridge(self.bridge, OWNER)
        self.virt.remove_pool(self.pool, os.path.join(self.pool_dir, 'p'),
                              OWNER)
        shutil.rmtree(self.pool_dir, ignore_errors=True)
        shutil.rmtree(self.state, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--nodes', type=int, default=8)
    parser.add_argument('--runs', type=int, default=3)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        bench = Bench(args.nodes)
        try:
            runs.append(bench.run())
        finally:
            bench.clean()
    print('%d nodes in parallel, median of %d runs (s):'
          % (args.nodes, args.runs))
    for label in runs[0]:
        print('  %-22s %.3f' % (label, statistics.median(
            run[label] for run in runs)))


if __name__ == '__main__':
    main()
