"""Place the nodes a spec asks for onto hypervisors.

Allocation is a pure function of the spec, what each hypervisor reported
(``inspect``) and the nodes already recorded, so it is easy to test and
to grow (aggregates, traits, weighers) without touching the flows.
"""

import random
import uuid as uuidlib

from tenks import exceptions
from tenks import names

NODE_SCHEDULED = 'scheduled'


class HostState:
    """What is left on one hypervisor while nodes are being placed.

    ``taken_ports`` ({address: ports}) is shared by all hosts: a port is
    unique per address, as Ironic dials address and port, whichever host
    serves it.
    """

    def __init__(self, facts, recorded, spec, taken_ports):
        self.name = facts['host']
        self.facts = facts
        self.bmc_address = facts['ipmi_address']
        self.prefix = facts['resource_prefix']
        mine = [n for n in recorded if n['hypervisor'] == self.name]
        self.free_memory_mb = facts['memory_mb'] - sum(
            n['memory_mb'] for n in mine)
        self.ports = range(spec['ipmi_port_range_start'],
                           spec['ipmi_port_range_end'] + 1)
        self.busy = set(facts['busy_ports']) | {n['bmc_port'] for n in mine}
        self.taken = taken_ports.setdefault(self.bmc_address, set())
        self.taken.update(n['bmc_port'] for n in recorded
                          if n['bmc_address'] == self.bmc_address)
        self.initially_free_ports = len(self.free_ports())

    def free_ports(self):
        return [port for port in self.ports
                if port not in self.busy and port not in self.taken]

    def refusal(self, node_type):
        """Why this host cannot take a node of ``node_type``, or None."""
        if self.facts['missing_interfaces']:
            return 'interface(s) %s missing' % ', '.join(
                source for _, source in self.facts['missing_interfaces'])
        if not self.free_ports():
            return 'no free IPMI port'
        if self.free_memory_mb < node_type['memory_mb']:
            return 'only %d MiB of memory left' % self.free_memory_mb
        return None

    def take(self, node_type):
        port = self.free_ports()[0]
        self.taken.add(port)
        self.free_memory_mb -= node_type['memory_mb']
        return port


def _free_names(prefix, taken):
    index = 0
    while True:
        name = names.node(prefix, index)
        if name not in taken:
            taken.add(name)
            yield name
        index += 1


def _new_mac(taken):
    while True:
        mac = '52:54:00:%02x:%02x:%02x' % tuple(
            random.randrange(256) for _ in range(3))
        if mac not in taken:
            taken.add(mac)
            return mac


def schedule(spec, facts, recorded):
    """Allocate the nodes of ``spec`` not recorded yet; return them.

    ``facts``: {host: inspect result}; ``recorded``: node records (dicts)
    of every cluster, which keep their names, MACs and ports.
    """
    taken_ports = {}
    hosts = [HostState(f, recorded, spec, taken_ports)
             for _, f in sorted(facts.items())]
    taken_names = {n['name'] for n in recorded}
    taken_macs = {nic['mac'] for n in recorded for nic in n['nics']}
    name_pools = {}
    nodes = []
    for index, entry in enumerate(spec['specs']):
        node_type = spec['node_types'][entry['type']]
        prefix = entry['node_name_prefix']
        pool = name_pools.setdefault(prefix, _free_names(prefix, taken_names))
        have = sum(1 for n in recorded if n['cluster'] == spec['cluster']
                   and n['spec_index'] == index)
        for _ in range(entry['count'] - have):
            refusals = {h.name: h.refusal(node_type) for h in hosts}
            usable = [h for h in hosts if refusals[h.name] is None]
            if not usable:
                _no_valid_host(spec, entry, hosts, refusals)
            host = max(usable, key=lambda h: h.free_memory_mb)
            port = host.take(node_type)
            name = next(pool)
            nodes.append({
                'uuid': str(uuidlib.uuid4()),
                'cluster': spec['cluster'],
                'name': name,
                'hypervisor': host.name,
                'node_type': entry['type'],
                'spec_index': index,
                'vcpus': node_type['vcpus'],
                'memory_mb': node_type['memory_mb'],
                'volumes': [
                    {'name': names.volume(name, entry['vol_name_prefix'], i),
                     'capacity': vol['capacity'], 'format': vol['format']}
                    for i, vol in enumerate(node_type['volumes'])],
                'nics': [
                    {'physnet': physnet, 'mac': _new_mac(taken_macs),
                     'bridge': names.bridge(spec, physnet, host.prefix),
                     'tap': names.tap(name, i)}
                    for i, physnet in enumerate(
                        node_type['physical_networks'])],
                'bmc_type': 'ipmi',
                'bmc_address': host.bmc_address,
                'bmc_port': port,
                'state': NODE_SCHEDULED,
            })
    return nodes


def _no_valid_host(spec, entry, hosts, refusals):
    what = 'a node of type %s (specs[%d])' % (
        entry['type'], spec['specs'].index(entry))
    if len(hosts) == 1 and not hosts[0].free_ports():
        host = hosts[0]
        needed = sum(e['count'] for e in spec['specs'])
        raise exceptions.PortRangeExhausted(
            start=spec['ipmi_port_range_start'],
            end=spec['ipmi_port_range_end'], host=host.name,
            needed=needed, free=host.initially_free_ports)
    raise exceptions.NoValidHost(what=what, reason='; '.join(
        '%s: %s' % item for item in sorted(refusals.items())))
