"""Place the nodes a spec asks for onto hypervisors.

Allocation is a pure function of the spec, what each hypervisor reported
(``inspect``) and the nodes already recorded, so it is easy to test and
to grow (aggregates, traits, weighers) without touching the flows.
"""

import collections
import heapq
import random
import types
import uuid as uuidlib

from tenks import conf as tenks_conf
from tenks import exceptions
from tenks import names
from tenks import resources
from tenks import states

DEFAULT_ZONE = 'nova'
# In the order they run; the report of a failed placement counts, per
# filter, the hosts it removed.
FILTERS = tenks_conf.SCHEDULER_FILTERS
DEFAULT_OPTIONS = types.SimpleNamespace(
    enabled_filters=FILTERS,
    weight_multipliers={resources.VCPU: 1.0, resources.MEMORY_MB: 1.0,
                        resources.DISK_GB: 1.0},
    default_availability_zone=DEFAULT_ZONE)


def options_from_conf(conf):
    """The scheduler's options from ``[scheduler]``."""
    group = conf.scheduler
    return types.SimpleNamespace(
        enabled_filters=tuple(group.enabled_filters),
        weight_multipliers={
            resources.VCPU: group.cpu_weight_multiplier,
            resources.MEMORY_MB: group.ram_weight_multiplier,
            resources.DISK_GB: group.disk_weight_multiplier},
        default_availability_zone=group.default_availability_zone)


class Request:
    """What a node of one spec entry needs of a host."""

    def __init__(self, spec, index, entry):
        self.node_type = spec['node_types'][entry['type']]
        self.what = 'node type %s (specs[%d])' % (entry['type'], index)
        self.amounts = resources.allocations(self.node_type)
        # The pool's directory's file system; an LVM volume group's
        # space is libvirt's to check.
        self.bytes = (volume_bytes(self.node_type)
                      if spec['libvirt_pool_type'] == 'dir' else 0)
        self.required = set(entry.get('required_traits', ()))
        self.forbidden = set(entry.get('forbidden_traits', ()))
        self.zone = entry.get('availability_zone')
        self.metadata = entry.get('aggregate_metadata') or {}
        self.bridge_type = spec['bridge_type']
        self.physnets = self.node_type['physical_networks']
        self.firmware = firmware_kind(self.node_type)
        self.bmc_type = bmc_type(spec, entry['type'])
        self.spec = spec


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

    ``mine``: the node records on this host. ``taken_ports`` ({address:
    ports}, those of the recorded nodes to begin with) is shared by all
    hosts: a port is unique per address, as Ironic dials address and
    port, whichever host serves it. ``taken_endpoints`` ({(address,
    port): host}), shared too, holds the Redfish endpoints this schedule
    gives nodes, so that two hosts never serve the cluster at one
    endpoint. ``endpoint_users``: {(address, port): {(cluster, host)}} of
    the recorded Redfish nodes. ``placement``: the conductor's
    view of the host (enabled, maintenance, availability_zone,
    aggregates [{name, metadata}]). ``mapped``: {physnet: the hosts that
    map it}, of every host inspected.
    """

    def __init__(self, facts, mine, spec, taken_ports, taken_endpoints,
                 endpoint_users=None, placement=None, mapped=None):
        placement = placement or {}
        self.name = facts['host']
        self.facts = facts
        self.mapped = mapped or {}
        self.bmc_address = facts['ipmi_address']
        self.prefix = facts['resource_prefix']
        self.enabled = placement.get('enabled', True)
        self.maintenance = placement.get('maintenance', False)
        self.zone = placement.get('availability_zone')
        self.aggregates = placement.get('aggregates', ())
        self.traits = set(resources.traits(facts))
        self.inventories = resources.inventories(facts)
        self.used = resources.usages(mine)
        self.ports = range(spec['ipmi_port_range_start'],
                           spec['ipmi_port_range_end'] + 1)
        self.busy = set(facts['busy_ports']) | {
            n['bmc_port'] for n in mine if n['bmc_type'] == 'ipmi'}
        self.taken = taken_ports.setdefault(self.bmc_address, set())
        self.initially_free_ports = len(self.ports) - sum(
            1 for port in self.busy | self.taken if port in self.ports)
        # Ports are only taken while placing: the first free one never
        # moves back.
        self._port_cursor = 0
        self.free_bytes = facts['pool_free_bytes']
        self.initially_free_bytes = self.free_bytes
        self.network_drivers = network_drivers(facts)
        # Hostagents older than API 1.4 boot BIOS only.
        self.firmware = facts.get('firmware', ['bios'])
        # The cluster's Redfish endpoint here, and who else has it: a
        # Redfish node of another cluster, or of this one on another
        # host (Ironic would reach one emulator for both).
        self.redfish = (facts.get('redfish_address'),
                        facts.get('redfish_port'))
        self.redfish_users = {
            'cluster %s on %s' % (cluster, host)
            for cluster, host in (endpoint_users or {}).get(self.redfish, ())
            if cluster != spec['cluster'] or host != self.name}
        self.taken_endpoints = taken_endpoints

    def next_port(self):
        """The first free BMC port, or None."""
        while self._port_cursor < len(self.ports):
            port = self.ports[self._port_cursor]
            if port not in self.busy and port not in self.taken:
                return port
            self._port_cursor += 1
        return None

    def redfish_holders(self, spec):
        """Who else has this host's Redfish endpoint: recorded nodes,
        and nodes of this schedule on another host."""
        holders = set(self.redfish_users)
        host = self.taken_endpoints.get(self.redfish)
        if host not in (None, self.name):
            holders.add('cluster %s on %s' % (spec['cluster'], host))
        return sorted(holders)

    def free(self, rc):
        return resources.capacity(self.inventories[rc]) - self.used[rc]

    def weight(self, multipliers, scales):
        """The host's rank (lower first): by the weighed sum of the
        share of each class's capacity it has free (so spreading evens
        out the hosts' use), then of what it has free, divided by the
        largest capacity of the class among the hosts (the bigger of two
        equally used hosts first), then by name. Both are fixed scales:
        a host's weight changes only when it takes a node."""
        share = free = 0.0
        for rc, multiplier in multipliers.items():
            if multiplier and rc in self.inventories:
                left = self.free(rc)
                share += multiplier * left / max(
                    resources.capacity(self.inventories[rc]), 1)
                free += multiplier * left / scales[rc]
        return (-share, -free, self.name)

    def take(self, request):
        """Take room for a node; return its BMC's (address, port)."""
        for rc, amount in request.amounts.items():
            self.used[rc] += amount
        self.free_bytes -= request.bytes
        if request.bmc_type == 'redfish':
            self.taken_endpoints[self.redfish] = self.name
            return self.redfish
        port = self.next_port()
        self.taken.add(port)
        return self.bmc_address, port


FIRMWARE_NAMES = {'bios': 'BIOS', 'uefi': 'UEFI',
                  'secure_boot': 'UEFI secure boot'}


def firmware_kind(node_type):
    """The firmware a node of ``node_type`` needs, as hostagents name
    it in their facts: bios, uefi or secure_boot."""
    if node_type['boot_mode'] == 'uefi' and node_type['secure_boot']:
        return 'secure_boot'
    return node_type['boot_mode']


def network_drivers(facts):
    """The network drivers a host's inspect result says it offers (an
    agent before API 1.4 names one)."""
    return facts.get('network_drivers') or [facts['network_driver']]


# Filters: each returns None when the host passes, else (what removed
# it, why), "what" being the key the report counts hosts under.

def _enabled(host, request, options):
    if host.maintenance:
        return 'in maintenance', 'in maintenance'
    if not host.enabled:
        return 'disabled', 'disabled'
    return None


def _network_driver(host, request, options):
    if request.bridge_type not in host.network_drivers:
        return 'network driver', (
            'its network drivers are %s, not the spec\'s bridge_type %s'
            % (', '.join(host.network_drivers), request.bridge_type))
    return None


def _firmware(host, request, options):
    if request.firmware not in host.firmware:
        name = FIRMWARE_NAMES[request.firmware]
        return 'firmware %s' % name, (
            'no %s firmware (OVMF: install the package ovmf there)' % name)
    return None


def _physnets(host, request, options):
    for physnet, source in host.facts['missing_interfaces']:
        return 'physnet %s' % physnet, 'interface %s of physnet %s ' \
            'missing' % (source, physnet)
    # A physnet some host maps is a network the node must reach; one no
    # host maps is an isolated bridge on every host.
    for physnet in request.physnets:
        mapping = host.mapped.get(physnet)
        if mapping and physnet not in host.facts['physnet_mappings']:
            more = len(mapping) - 3
            return 'physnet %s' % physnet, (
                'does not map physnet %s, which %s%s map%s' % (
                    physnet, ', '.join(mapping[:3]),
                    ' and %d more' % more if more > 0 else '',
                    's' if len(mapping) == 1 else ''))
    return None


def _traits(host, request, options):
    for trait in sorted(request.required - host.traits):
        return 'trait %s' % trait, 'lacks required trait %s' % trait
    for trait in sorted(request.forbidden & host.traits):
        return 'trait !%s' % trait, 'has forbidden trait %s' % trait
    return None


def _availability_zone(host, request, options):
    zone = host.zone or options.default_availability_zone
    if request.zone is not None and zone != request.zone:
        return 'availability zone %s' % request.zone, (
            'in availability zone %s' % zone)
    return None


def _aggregate_metadata(host, request, options):
    for key, value in sorted(request.metadata.items()):
        if not any(str(a['metadata'].get(key)) == str(value)
                   for a in host.aggregates if key in a['metadata']):
            return 'aggregate metadata %s=%s' % (key, value), (
                'in no aggregate with %s=%s' % (key, value))
    return None


def _capacity(host, request, options):
    for rc, amount in request.amounts.items():
        if rc not in host.inventories:
            continue
        why = resources.refusal(host.inventories[rc], host.used[rc], amount)
        if why is not None:
            return rc, '%s: %d asked, %s' % (rc, amount, why)
    return None


def _pool_space(host, request, options):
    if host.free_bytes < request.bytes:
        return 'pool space', (
            'its pool has %s free, a node of this type needs %s' % (
                show_bytes(host.free_bytes), show_bytes(request.bytes)))
    return None


def _bmc_port(host, request, options):
    if request.bmc_type == 'redfish':
        holders = host.redfish_holders(request.spec)
        if holders:
            return 'Redfish endpoint', (
                'its Redfish endpoint %s:%d is used by %s' % (
                    host.redfish + (', '.join(holders),)))
    elif host.next_port() is None:
        return 'BMC port', 'no free IPMI port'
    return None


FILTER_FUNCTIONS = {
    'enabled': _enabled, 'network_driver': _network_driver,
    'firmware': _firmware,
    'physnets': _physnets, 'traits': _traits,
    'availability_zone': _availability_zone,
    'aggregate_metadata': _aggregate_metadata, 'capacity': _capacity,
    'pool_space': _pool_space, 'bmc_port': _bmc_port}
# Filters whose answer changes as nodes are placed.
DYNAMIC = ('capacity', 'pool_space', 'bmc_port')


def refusal(host, request, options, names_=None):
    """(what, why, filter) of the first of the filters ``names_``
    (default: the enabled ones) that removes ``host``, or None."""
    for name in names_ or options.enabled_filters:
        found = FILTER_FUNCTIONS[name](host, request, options)
        if found is not None:
            return found + (name,)
    return None


def show_bytes(size):
    return '%.1f GiB (%d bytes)' % (size / 1024 ** 3, size)


def volume_bytes(node_type):
    """Bytes a node's volumes may take (qcow2 ones grow to it); an
    existing volume takes none."""
    return sum(vol.get('capacity', 0) for vol in node_type['volumes'])


def volume_record(name, vol):
    """The record of volume ``name`` of a node, from the spec's ``vol``.

    Keys: name, capacity, format; source ({'path' or 'url', 'backing'})
    for one made from an image, device when not a disk. An existing
    volume is {'name', 'pool', 'existing': True} (and device): Tenks
    only attaches it.
    """
    if 'existing' in vol:
        record = {'name': vol['existing']['volume'],
                  'pool': vol['existing']['pool'], 'existing': True}
    else:
        record = {'name': name, 'capacity': vol['capacity'],
                  'format': vol['format']}
    image = vol.get('image')
    if image is not None:
        record['source'] = {'url' if image.startswith(('http://',
                                                       'https://'))
                            else 'path': image, 'backing': False}
    if vol.get('backing_image') is not None:
        record['source'] = {'path': vol['backing_image'], 'backing': True}
    if vol.get('device', 'disk') != 'disk':
        record['device'] = vol['device']
    return record


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


class Placer:
    """Filters, then weighs: a heap of the hosts that pass the filters
    that do not change while placing, best weight first, so that placing
    N nodes on H hosts costs N log H."""

    def __init__(self, hosts, options):
        self.hosts = hosts
        self.options = options
        self.scales = {}
        for rc in resources.RESOURCE_CLASSES:
            caps = [resources.capacity(h.inventories[rc]) for h in hosts
                    if rc in h.inventories]
            self.scales[rc] = max(max(caps, default=1), 1)
        self.static = [f for f in options.enabled_filters
                       if f not in DYNAMIC]
        self.dynamic = [f for f in options.enabled_filters if f in DYNAMIC]

    def candidates(self, request):
        heap = [(h.weight(self.options.weight_multipliers, self.scales), h)
                for h in self.hosts
                if refusal(h, request, self.options, self.static) is None]
        heapq.heapify(heap)
        return heap

    def place(self, heap, request):
        """The best host of ``heap`` for one node, taken; None when none
        fits (a host that does not fit now never will for this entry:
        placing only takes)."""
        while heap:
            _, host = heap[0]
            if self.dynamic and refusal(host, request, self.options,
                                        self.dynamic) is not None:
                heapq.heappop(heap)
                continue
            port = host.take(request)
            heapq.heapreplace(heap, (
                host.weight(self.options.weight_multipliers, self.scales),
                host))
            return host, port
        return None


def schedule(spec, facts, recorded, placement=None, options=None):
    """Allocate the nodes of ``spec`` not recorded yet; return them.

    ``facts``: {host: inspect result}; ``recorded``: node records (dicts)
    of every cluster, which keep their names, MACs and ports;
    ``placement``: {host: the conductor's view of it} (see HostState),
    or a function returning it, called only when a node is to be
    placed; ``options``: see DEFAULT_OPTIONS and options_from_conf.
    """
    mine = _recorded_counts(spec, recorded)
    if all(entry['count'] <= mine[index]
           for index, entry in enumerate(spec['specs'])):
        return []
    options = options or DEFAULT_OPTIONS
    if callable(placement):
        placement = placement()
    placement = placement or {}
    hosts = host_states(spec, facts, recorded, placement)
    placer = Placer(hosts, options)
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
        request = Request(spec, index, entry)
        prefix = entry['node_name_prefix']
        pool = name_pools.setdefault(prefix, _free_names(prefix, taken_names))
        have = mine[index]
        heap = None
        for _ in range(entry['count'] - have):
            if heap is None:
                heap = placer.candidates(request)
            placed = placer.place(heap, request)
            if placed is None:
                _no_valid_host(spec, request, hosts, options, recorded)
            host, (address, port) = placed
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
                    volume_record(volume, vol)
                    for volume, vol in zip(volumes, node_type['volumes'],
                                           strict=True)],
                'nics': [
                    {'physnet': physnet, 'mac': new_mac(taken_macs),
                     'bridge': names.bridge(spec, physnet, host.prefix),
                     'bridge_type': spec['bridge_type'],
                     'tap': names.tap(name, i)}
                    for i, physnet in enumerate(
                        node_type['physical_networks'])],
                'bmc_type': request.bmc_type,
                'bmc_address': address,
                'bmc_port': port,
                # Redfish: the domain's UUID, which the emulator serves.
                'bmc_system_id': (node_uuid if request.bmc_type == 'redfish'
                                  else None),
                'boot_mode': node_type['boot_mode'],
                'secure_boot': node_type['secure_boot'],
                'console_log': names.console_log(host.facts, node_type,
                                                 name),
                'state': states.NODE_SCHEDULED,
            })
    return nodes


def host_states(spec, facts, recorded, placement, mapped=None):
    """A HostState for each host of ``facts``, with the ``recorded``
    nodes (dicts of every cluster) taken; ``mapped``: physnet_hosts of
    every host inspected (default: those of ``facts``)."""
    by_host = {}
    taken_ports = {}
    endpoint_users = {}
    for node in recorded:
        by_host.setdefault(node['hypervisor'], []).append(node)
        endpoint = node['bmc_address'], node['bmc_port']
        if node['bmc_type'] == 'redfish':
            endpoint_users.setdefault(endpoint, set()).add(
                (node['cluster'], node['hypervisor']))
        else:
            taken_ports.setdefault(endpoint[0], set()).add(endpoint[1])
    taken_endpoints = {}
    mapped = mapped or physnet_hosts(facts)
    return [HostState(f, by_host.get(name, []), spec, taken_ports,
                      taken_endpoints, endpoint_users, placement.get(name),
                      mapped)
            for name, f in sorted(facts.items())]


def physnet_hosts(facts):
    """{physnet: [hosts that map it]} of the hosts of ``facts``."""
    mapped = {}
    for name, host_facts in sorted(facts.items()):
        for physnet in host_facts['physnet_mappings']:
            mapped.setdefault(physnet, []).append(name)
    return mapped


def place_moves(spec, facts, recorded, moving, allowed, placement=None,
                options=None):
    """A new host for each of ``moving`` (node records of ``spec``'s
    cluster, in the order given), chosen by the filters and weighers
    among ``allowed`` (host names), never the node's own host; each
    node placed counts for the next. ``recorded``: node records of every
    cluster, the moving ones where they are now. Returns {uuid: (host,
    (BMC address, port))}; NoValidHost names a node that fits nowhere.

    A host whose hostagent reaches the libvirt daemon of the node's host
    is no choice: the node's domain is there already, another
    hostagent's (see shared_libvirt).
    """
    options = options or DEFAULT_OPTIONS
    if callable(placement):
        placement = placement()
    hosts = host_states(spec, {h: f for h, f in facts.items()
                               if h in allowed}, recorded, placement or {},
                        physnet_hosts(facts))
    placer = Placer(hosts, options)
    placed = {}
    for node in moving:
        index = node['spec_index']
        request = Request(spec, index, spec['specs'][index])
        shared = {h.name: shared_libvirt(node['hypervisor'],
                                         facts[node['hypervisor']], h.facts)
                  for h in hosts if h.name != node['hypervisor']}
        shared = {name: why for name, why in shared.items() if why}
        others = [h for h in hosts if h.name != node['hypervisor']
                  and h.name not in shared]
        heap = [(w, h) for w, h in placer.candidates(request)
                if h in others]
        heapq.heapify(heap)
        found = placer.place(heap, request)
        if found is None:
            if not others and not shared:
                raise exceptions.NoValidHost(
                    what='node %s' % node['name'],
                    reason='no other hypervisor shares an aggregate with '
                           '%s' % node['hypervisor'])
            request.what = 'node %s (%s)' % (node['name'], request.what)
            _no_valid_host(spec, request, others, options, recorded,
                           {name: ('shared libvirt', why)
                            for name, why in shared.items()})
        host, endpoint = found
        placed[node['uuid']] = (host.name, endpoint)
    return placed


def shared_libvirt(source, source_facts, facts):
    """Why a node cannot move from host ``source`` to the host of
    ``facts`` when their hostagents reach one libvirt daemon (its domain
    would be the other hostagent's already), else None. Hostagents older
    than this check do not say which daemon they reach."""
    daemon = source_facts.get('libvirt_daemon')
    if daemon is None or facts.get('libvirt_daemon') != daemon:
        return None
    return ('it shares the libvirt %s with %s, the node\'s host: a node '
            'moves only to another libvirt' % (daemon, source))


def _no_valid_host(spec, request, hosts, options, recorded, removed=None):
    """Raise the error saying why no host of ``hosts`` takes ``request``;
    ``removed``: {host: (what, why)} of other hosts, left out before the
    filters ran."""
    refusals = {h.name: refusal(h, request, options) for h in hosts}
    only = hosts[0] if len(hosts) == 1 and not removed else None
    what = only and refusals[only.name][0]
    if what == 'network driver':
        raise exceptions.NetworkDriverMismatch(
            host=only.name, driver=', '.join(only.network_drivers),
            bridge_type=spec['bridge_type'])
    if what == 'Redfish endpoint':
        address, port = only.redfish
        raise exceptions.EndpointInUse(
            address=address, port=port, host=only.name,
            user=', '.join(only.redfish_holders(spec)))
    if what == 'BMC port':
        needed = sum(e['count'] for e in spec['specs']
                     if bmc_type(spec, e['type']) == 'ipmi')
        raise exceptions.PortRangeExhausted(
            start=spec['ipmi_port_range_start'],
            end=spec['ipmi_port_range_end'], host=only.name,
            needed=needed, free=only.initially_free_ports)
    if what == 'pool space':
        raise exceptions.PoolSpaceExhausted(
            host=only.name, pool_dir=only.facts['pool_dir'],
            needed=show_bytes(_new_volume_bytes(spec, recorded)),
            free=show_bytes(only.initially_free_bytes))
    # In the order of the filters, then of what they removed hosts for.
    order = {name: i for i, name in enumerate(options.enabled_filters)}
    count = len(hosts) + len(removed or {})
    reasons = {}
    for name, (what, why) in sorted((removed or {}).items()):
        reasons.setdefault(what, []).append('%s: %s' % (name, why))
    for name, found in sorted(refusals.items(), key=lambda item: (
            order[item[1][2]], item[1][0], item[0])):
        reasons.setdefault(found[0], []).append('%s: %s' % (name, found[1]))
    raise exceptions.NoValidHost(what=request.what, reason='%d %s; %s (%s)' % (
        count, 'hypervisor' if count == 1 else 'hypervisors',
        ', '.join('%s removed %d' % (key, len(why))
                  for key, why in reasons.items()),
        '; '.join(_examples(why) for why in reasons.values())))


def _examples(reasons, shown=3):
    """The first ``shown`` of ``reasons``, and how many more."""
    more = len(reasons) - shown
    return '; '.join(reasons[:shown]) + (
        '; and %d more' % more if more > 0 else '')


def _recorded_counts(spec, recorded):
    """{index in spec['specs']: how many of its nodes are recorded}."""
    return collections.Counter(n['spec_index'] for n in recorded
                               if n['cluster'] == spec['cluster'])


def _new_volume_bytes(spec, recorded):
    """Bytes of the volumes of the nodes of ``spec`` not recorded yet."""
    mine = _recorded_counts(spec, recorded)
    total = 0
    for index, entry in enumerate(spec['specs']):
        have = mine[index]
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
