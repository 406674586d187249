"""Time the filter scheduler: 10,000 nodes on 1,000 hypervisors with
mixed traits, availability zones and aggregates, in memory (no
libvirt, no bus), and show how evenly the weighers spread them.

    .venv/bin/python tools/bench_scheduler.py [--hosts 1000]
        [--nodes 10000] [--runs 3]

Prints the best time of ``--runs`` for spreading (the default
multipliers) and for packing (negative ones), then how the nodes
spread: the share of each hypervisor's MEMORY_MB capacity they use, the
nodes per hypervisor, and for each spec entry how many of the hosts it
may use got its nodes.
"""

import argparse
import random
import statistics
import time

from conductor import aggregates
from tenks import conf as tenks_conf
from tenks import constants
from tenks import exceptions
from tenks import resources
from tenks import scheduler
from tenks import spec as tenks_spec
from tenks.scheduler import host_state

ZONES = ('az1', 'az2', 'az3', 'az4')


def hypervisors(count, rng):
    """Facts and the conductor's views of ``count`` hosts: four zones of
    aggregates of 50 hosts, a quarter with SSDs, a tenth with GPUs, of
    three sizes, one in 97 disabled."""
    facts = {}
    for i in range(count):
        host = 'hv%04d' % i
        size = (1, 2, 4)[i % 3]
        traits = ['CUSTOM_SSD'] if i % 4 == 0 else []
        if i % 10 == 0:
            traits.append('CUSTOM_GPU')
        facts[host] = {
            'host': host, 'cpus': 16 * size, 'memory_mb': 65536 * size,
            'disk_gb': 1000 * size, 'traits': traits, 'inventory': {},
            'cpu_arch': 'x86_64', 'busy_ports': [],
            'missing_interfaces': [], 'pool_dir': '/p',
            'ipmi_address': '10.%d.%d.1' % (i // 250, i % 250),
            'resource_prefix': '', 'physnet_mappings': {'physnet1': 'e1'},
            'pool_free_bytes': 1000 * size * constants.GIB,
            'network_driver': 'linuxbridge', 'foreign_interfaces': []}
    hosts = sorted(facts)
    rng.shuffle(hosts)
    aggs = []
    for n, start in enumerate(range(0, count, 50)):
        aggs.append({
            'id': n, 'uuid': 'agg%d-uuid' % n, 'name': 'agg%d' % n,
            'availability_zone': ZONES[n % len(ZONES)],
            'hosts': hosts[start:start + 50],
            'metadata': {'rack': 'r%d' % (n % 5)}})
    views = aggregates.host_views(
        aggs, [{'host': h, 'enabled': i % 97 != 0}
               for i, h in enumerate(sorted(facts))], 'nova')
    return facts, views


def cluster_spec(nodes):
    share = nodes // 10
    return tenks_spec.validate({
        'cluster': 'bench',
        'node_types': {
            'small': {'memory_mb': 2048, 'vcpus': 1,
                      'volumes': [{'capacity': '10GiB'}],
                      'physical_networks': ['physnet1']},
            'big': {'memory_mb': 8192, 'vcpus': 4,
                    'volumes': [{'capacity': '40GiB'}],
                    'physical_networks': ['physnet1']},
        },
        'specs': [
            {'type': 'small', 'count': 4 * share, 'node_name_prefix': 'a'},
            {'type': 'small', 'count': 2 * share, 'node_name_prefix': 'b',
             'availability_zone': 'az1'},
            {'type': 'big', 'count': 2 * share, 'node_name_prefix': 'c',
             'required_traits': ['CUSTOM_SSD'],
             'forbidden_traits': ['CUSTOM_GPU']},
            {'type': 'small', 'count': share, 'node_name_prefix': 'd',
             'aggregate_metadata': {'rack': 'r3'}},
            {'type': 'big', 'count': nodes - 9 * share,
             'node_name_prefix': 'e', 'required_traits': ['CUSTOM_GPU']},
        ],
        'physical_networks': ['physnet1'],
        'ipmi_port_range_end': 6230 + nodes,
    })


def evenness(spec, facts, views, nodes, options):
    """How the nodes are spread: the share of its memory each enabled
    hypervisor gives them, and per spec entry, over how many of the
    hosts it may use they went."""
    by_host = {}
    for node in nodes:
        by_host.setdefault(node['hypervisor'], []).append(node)
    enabled = [h for h in sorted(facts) if views[h]['enabled']]
    share = [resources.usages(by_host.get(h, ()))['MEMORY_MB']
             / resources.capacity(resources.inventories(facts[h])[
                 'MEMORY_MB']) for h in enabled]
    counts = [len(by_host.get(h, ())) for h in enabled]
    lines = ['  memory use per enabled hypervisor: %.1f%% min, %.1f%% '
             'mean, %.1f%% max, stdev %.1f%%; nodes per hypervisor: %d '
             'min, %.1f mean, %d max' % (
                 100 * min(share), 100 * statistics.mean(share),
                 100 * max(share), 100 * statistics.pstdev(share),
                 min(counts), statistics.mean(counts), max(counts))]
    states = host_state.host_states(spec, facts, [], views)
    for index, entry in enumerate(spec['specs']):
        request = host_state.Request(spec, index, entry)
        usable = {h.name for h in states if all(
            f.host_passes(h, request) for f in options.filters)}
        used = {n['hypervisor'] for n in nodes if n['spec_index'] == index}
        lines.append('  specs[%d] %5d %-5s nodes: on %3d of the %3d hosts '
                     'it may use' % (index, entry['count'], entry['type'],
                                     len(used), len(usable)))
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--hosts', type=int, default=1000)
    parser.add_argument('--nodes', type=int, default=10000)
    parser.add_argument('--runs', type=int, default=3)
    args = parser.parse_args()
    facts, views = hypervisors(args.hosts, random.Random(42))
    spec = cluster_spec(args.nodes)
    modes = {
        'spread': scheduler.default_options(),
        'pack': scheduler.load_options(weight_multipliers=dict.fromkeys(
            tenks_conf.SCHEDULER_WEIGHERS, -1.0)),
    }
    print('%d nodes, %d hypervisors (%d disabled), %d aggregates in %d '
          'zones' % (args.nodes, args.hosts, sum(
              not p['enabled'] for p in views.values()),
                     (args.hosts + 49) // 50, len(ZONES)))
    for mode, options in modes.items():
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            try:
                nodes = scheduler.schedule(spec, facts, [], views,
                                           options)
            except exceptions.NoValidHost as e:
                print('%s: %s' % (mode, str(e)[:300]))
                break
            times.append(time.perf_counter() - start)
        else:
            print('%s: best %.3f s of %d runs (%.1f us per node)' % (
                mode, min(times), args.runs, 1e6 * min(times) / args.nodes))
            print('\n'.join(evenness(spec, facts, views, nodes,
                                     options)))
    # A re-run that adds a tenth more nodes to what is recorded.
    more = cluster_spec(args.nodes + args.nodes // 10)
    start = time.perf_counter()
    added = scheduler.schedule(more, facts, nodes, views,
                               scheduler.default_options())
    print('%d more nodes with %d recorded: %.3f s' % (
        len(added), len(nodes), time.perf_counter() - start))


if __name__ == '__main__':
    main()
