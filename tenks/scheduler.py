"""Place the nodes a spec asks for onto hypervisors.

Allocation is a pure function of the spec, what each hypervisor reported
(``inspect``) and the nodes already recorded, so it is easy to test and
to grow (aggregates, traits, weighers) without touching the flows.
"""

import random
import uuid as uuidlib

from tenks import exceptions
from tenks import names
from tenks import states

# The emulator of each Ironic driver's BMCs when the spec's bmc_emulators
# names none, and the type of BMC each emulator serves.
DEFAULT_EMULATORS = {'ipmi': 'virtualbmc', 'redfish': 'sushy-tools'}
EMULATOR_BMC_TYPES = {'virtualbmc': 'ipmi', 'sushy-tools': 'redfish'}


def redfish_endpoint(spec):
    """The spec's (redfish_address, redfish_port) for the hostagents to
    check, or (None, None) when no node type of it is Redfish."""
    if any(bmc_type(spec, name) == 'redfish' for name in spec['node_types']):
        return spec['redfish_address'], spec['redfish_port']
    return None, None


def bmc_type(spec, type_name):
    """'ipmi' or 'redfish': the BMC of the nodes of node type
    ``type_name``, as its ironic_driver (or the spec's
    default_ironic_driver) and bmc_emulators choose."""
    driver = spec['node_types'][type_name].get(
        'ironic_driver', spec['default_ironic_driver'])
    emulator = spec.get('bmc_emulators', {}).get(
        driver, DEFAULT_EMULATORS[driver])
    return EMULATOR_BMC_TYPES[emulator]


class HostState:
    """What is left on one hypervisor while nodes are being placed.

    ``taken_endpoints`` ({(address, port): host}), shared too, holds
    the Redfish endpoints this schedule gives nodes, so that two hosts
    never serve the cluster at one endpoint.

    ``taken_ports`` ({address: ports}) is shared by all hosts: a port is
    unique per address, as Ironic dials address and port, whichever host
    serves it.
    """

    def __init__(self, facts, recorded, spec, taken_ports,
                 taken_endpoints):
        self.name = facts['host']
        self.facts = facts
        self.bmc_address = facts['ipmi_address']
        self.prefix = facts['resource_prefix']
        mine = [n for n in recorded if n['hypervisor'] == self.name]
        self.free_memory_mb = facts['memory_mb'] - sum(
            n['memory_mb'] for n in mine)
        self.ports = range(spec['ipmi_port_range_start'],
                           spec['ipmi_port_range_end'] + 1)
        ipmi = [n for n in recorded if n['bmc_type'] == 'ipmi']
        self.busy = set(facts['busy_ports']) | {
            n['bmc_port'] for n in ipmi if n['hypervisor'] == self.name}
        self.taken = taken_ports.setdefault(self.bmc_address, set())
        self.taken.update(n['bmc_port'] for n in ipmi
                          if n['bmc_address'] == self.bmc_address)
        self.initially_free_ports = len(self.free_ports())
        self.free_bytes = facts['pool_free_bytes']
        self.initially_free_bytes = self.free_bytes
        self.network_driver = facts['network_driver']
        # The cluster's Redfish endpoint here, and who else has it: a
        # Redfish node of another cluster, or of this one on another
        # host (Ironic would reach one emulator for both).
        self.redfish = (facts.get('redfish_address'),
                        facts.get('redfish_port'))
        self.redfish_users = {
            'cluster %s on %s' % (n['cluster'], n['hypervisor'])
            for n in recorded if n['bmc_type'] == 'redfish'
            and (n['bmc_address'], n['bmc_port']) == self.redfish
            and (n['cluster'] != spec['cluster']
                 or n['hypervisor'] != self.name)}
        self.taken_endpoints = taken_endpoints

    def free_ports(self):
        return [port for port in self.ports
                if port not in self.busy and port not in self.taken]

    def refusal(self, spec, node_type, kind='ipmi'):
        """Why this host cannot take a node of ``node_type`` with a BMC
        of type ``kind``, or None."""
        if self.network_driver != spec['bridge_type']:
            return ('its network driver is %s, not the spec\'s bridge_type '
                    '%s' % (self.network_driver, spec['bridge_type']))
        if self.facts['missing_interfaces']:
            return 'interface(s) %s missing' % ', '.join(
                source for _, source in self.facts['missing_interfaces'])
        if kind == 'ipmi' and not self.free_ports():
            return 'no free IPMI port'
        if kind == 'redfish' and self.redfish_holders(spec):
            return 'its Redfish endpoint %s:%d is used by %s' % (
                self.redfish + (', '.join(self.redfish_holders(spec)),))
        if self.free_memory_mb < node_type['memory_mb']:
            return 'only %d MiB of memory left' % self.free_memory_mb
        if self.free_bytes < volume_bytes(node_type):
            return 'its pool has %s free, a node of this type needs %s' % (
                show_bytes(self.free_bytes),
                show_bytes(volume_bytes(node_type)))
        return None

    def redfish_holders(self, spec):
        """Who else has this host's Redfish endpoint: recorded nodes,
        and nodes of this schedule on another host."""
        holders = set(self.redfish_users)
        host = self.taken_endpoints.get(self.redfish)
        if host not in (None, self.name):
            holders.add('cluster %s on %s' % (spec['cluster'], host))
        return sorted(holders)

    def take(self, node_type, kind='ipmi'):
        """Take room for a node; return its BMC's (address, port)."""
        self.free_memory_mb -= node_type['memory_mb']
        self.free_bytes -= volume_bytes(node_type)
        if kind == 'redfish':
            self.taken_endpoints[self.redfish] = self.name
            return self.redfish
        port = self.free_ports()[0]
        self.taken.add(port)
        return self.bmc_address, port


def show_bytes(size):
    return '%.1f GiB (%d bytes)' % (size / 1024 ** 3, size)


def volume_bytes(node_type):
    """Bytes a node's volumes may take (qcow2 ones grow to it)."""
    return sum(vol['capacity'] for vol in node_type['volumes'])


def _free_names(prefix, taken):
    index = 0
    while True:
        name = names.node(prefix, index)
        if name not in taken:
            taken.add(name)
            yield name
        index += 1


def new_mac(taken):
    """A random MAC of QEMU's range not in ``taken`` (added to it)."""
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
    taken_endpoints = {}
    hosts = [HostState(f, recorded, spec, taken_ports, taken_endpoints)
             for _, f in sorted(facts.items())]
    taken_names = {n['name'] for n in recorded}
    taken_macs = {nic['mac'] for n in recorded for nic in n['nics']}
    # Volume names are unique per cluster (its pool). spec.validate
    # proves the cluster's own names distinct, but only for node indices
    # below its count: names taken by other clusters push indices
    # higher, so a name whose volumes clash is passed over here.
    taken_volumes = {vol['name'] for n in recorded
                     if n['cluster'] == spec['cluster']
                     for vol in n['volumes']}
    name_pools = {}
    nodes = []
    for index, entry in enumerate(spec['specs']):
        node_type = spec['node_types'][entry['type']]
        prefix = entry['node_name_prefix']
        pool = name_pools.setdefault(prefix, _free_names(prefix, taken_names))
        have = sum(1 for n in recorded if n['cluster'] == spec['cluster']
                   and n['spec_index'] == index)
        kind = bmc_type(spec, entry['type'])
        for _ in range(entry['count'] - have):
            refusals = {h.name: h.refusal(spec, node_type, kind)
                        for h in hosts}
            usable = [h for h in hosts if refusals[h.name] is None]
            if not usable:
                _no_valid_host(spec, entry, hosts, refusals, recorded)
            host = max(usable, key=lambda h: h.free_memory_mb)
            address, port = host.take(node_type, kind)
            while True:
                name = next(pool)
                volumes = [names.volume(name, entry['vol_name_prefix'], i)
                           for i in range(len(node_type['volumes']))]
                if taken_volumes.isdisjoint(volumes):
                    taken_volumes.update(volumes)
                    break
            node_uuid = str(uuidlib.uuid4())
            nodes.append({
                'uuid': node_uuid,
                'cluster': spec['cluster'],
                'name': name,
                'hypervisor': host.name,
                'node_type': entry['type'],
                'spec_index': index,
                'vcpus': node_type['vcpus'],
                'memory_mb': node_type['memory_mb'],
                'volumes': [
                    {'name': volume, 'capacity': vol['capacity'],
                     'format': vol['format']}
                    for volume, vol in zip(volumes, node_type['volumes'],
                                           strict=True)],
                'nics': [
                    {'physnet': physnet, 'mac': new_mac(taken_macs),
                     'bridge': names.bridge(spec, physnet, host.prefix),
                     'tap': names.tap(name, i)}
                    for i, physnet in enumerate(
                        node_type['physical_networks'])],
                'bmc_type': kind,
                'bmc_address': address,
                'bmc_port': port,
                # Redfish: the domain's UUID, which the emulator serves.
                'bmc_system_id': node_uuid if kind == 'redfish' else None,
                'state': states.NODE_SCHEDULED,
            })
    return nodes


def _no_valid_host(spec, entry, hosts, refusals, recorded):
    what = 'a node of type %s (specs[%d])' % (
        entry['type'], spec['specs'].index(entry))
    if len(hosts) == 1 and refusals[hosts[0].name].startswith(
            'its network driver'):
        raise exceptions.NetworkDriverMismatch(
            host=hosts[0].name, driver=hosts[0].network_driver,
            bridge_type=spec['bridge_type'])
    if len(hosts) == 1 and refusals[hosts[0].name].startswith(
            'its Redfish endpoint'):
        host = hosts[0]
        address, port = host.redfish
        raise exceptions.EndpointInUse(
            address=address, port=port, host=host.name,
            user=', '.join(host.redfish_holders(spec)))
    if len(hosts) == 1 and refusals[hosts[0].name] == 'no free IPMI port':
        host = hosts[0]
        needed = sum(e['count'] for e in spec['specs']
                     if bmc_type(spec, e['type']) == 'ipmi')
        raise exceptions.PortRangeExhausted(
            start=spec['ipmi_port_range_start'],
            end=spec['ipmi_port_range_end'], host=host.name,
            needed=needed, free=host.initially_free_ports)
    if len(hosts) == 1 and refusals[hosts[0].name].startswith('its pool'):
        host = hosts[0]
        raise exceptions.PoolSpaceExhausted(
            host=host.name, pool_dir=host.facts['pool_dir'],
            needed=show_bytes(_new_volume_bytes(spec, recorded)),
            free=show_bytes(host.initially_free_bytes))
    raise exceptions.NoValidHost(what=what, reason='; '.join(
        '%s: %s' % item for item in sorted(refusals.items())))


def _new_volume_bytes(spec, recorded):
    """Bytes of the volumes of the nodes of ``spec`` not recorded yet."""
    total = 0
    for index, entry in enumerate(spec['specs']):
        have = sum(1 for n in recorded if n['cluster'] == spec['cluster']
                   and n['spec_index'] == index)
        total += max(entry['count'] - have, 0) * volume_bytes(
            spec['node_types'][entry['type']])
    return total


def planned_interfaces(hosts, nodes):
    """{host: {interface name: spec field it comes from}} of the
    interfaces a deploy creates: bridges and uplink veths of ``hosts``
    ({host: tenks.reconcile.host_setup}), taps of ``nodes`` (records)."""
    wanted = {}
    for host, setup in hosts.items():
        names_here = wanted.setdefault(host, {})
        for bridge in setup['bridges']:
            names_here[bridge['name']] = 'bridge_prefix'
            for veth in (bridge['uplink'] or {}).get('veth_names', ()):
                names_here[veth] = 'bridge_prefix'
    for node in nodes:
        field = 'specs[%d].node_name_prefix' % node['spec_index']
        for nic in node['nics']:
            wanted.setdefault(node['hypervisor'], {})[nic['tap']] = field
    return wanted


def interface_conflicts(spec, wanted, facts, recorded):
    """Problems with the interfaces ``wanted`` (planned_interfaces) a
    deploy of ``spec`` would create, each naming the spec field, the
    interface, the host and who holds it.

    ``facts``: {host: inspect result for those interfaces};
    ``recorded``: resources (dicts: cluster, hypervisor, kind, name) of
    every cluster of this state database. A name recorded for another
    cluster, or present on the host without this deployment's mark, is
    taken; a bridge's uplink is recorded under the bridge's name.
    """
    problems = []
    for resource in recorded:
        if resource['cluster'] == spec['cluster'] or resource['kind'] not in (
                'bridge', 'uplink', 'port'):
            continue
        field = wanted.get(resource['hypervisor'], {}).get(resource['name'])
        if field is not None:
            problems.append('%s: %s %s on %s is recorded for cluster %s' % (
                field, 'tap' if resource['kind'] == 'port' else 'bridge',
                resource['name'], resource['hypervisor'],
                resource['cluster']))
    for host, names_here in sorted(wanted.items()):
        for name, mark in facts[host]['foreign_interfaces']:
            problems.append('%s: interface %s exists on %s %s' % (
                names_here.get(name, '?'), name, host,
                'with owner mark %r' % mark if mark
                else 'without an owner mark'))
    return list(dict.fromkeys(problems))
