"""What the scheduler knows of each hypervisor, and of what a node asks
of one."""

from tenks import constants
from tenks import node_records
from tenks import resources


class Request:
    """What a node of one spec entry needs of a host.

    ``recorded``: the node records of every cluster, for the errors that
    count what the spec still needs.
    """

    def __init__(self, spec, index, entry, recorded=()):
        self.node_type = spec['node_types'][entry['type']]
        self.what = 'node type %s (specs[%d])' % (entry['type'], index)
        # Each for a host that counts volumes at their capacity and for
        # one with thin_volumes (see HostState.amounts, volume_bytes).
        self.amounts = resources.allocations(self.node_type)
        self.thin_amounts = resources.allocations(self.node_type, thin=True)
        # The pool's directory's file system; an LVM volume group's
        # space is libvirt's to check.
        dir_pool = spec['libvirt_pool_type'] == 'dir'
        self.bytes = (node_records.volume_bytes(self.node_type)
                      if dir_pool else 0)
        self.thin_bytes = (node_records.volume_bytes(self.node_type, True)
                           if dir_pool else 0)
        self.required = set(entry.get('required_traits', ()))
        self.forbidden = set(entry.get('forbidden_traits', ()))
        self.zone = entry.get('availability_zone')
        self.metadata = entry.get('aggregate_metadata') or {}
        self.bridge_type = spec['bridge_type']
        self.physnets = self.node_type['physical_networks']
        self.firmware = node_records.firmware_kind(self.node_type)
        self.domain_type = spec['libvirt_domain_type']
        self.machine = self.node_type.get('machine')
        self.cpu_mode = self.node_type.get('cpu_mode')
        self.bmc_type = node_records.bmc_type(spec, entry['type'])
        self.spec = spec
        self.recorded = recorded


class HostState:
    """What is left on one hypervisor while nodes are given hosts.

    ``mine``: the node records on this host. ``taken_ports`` ({address:
    ports}, those of the recorded nodes to begin with) is shared by all
    hosts: a port is unique per address, as Ironic dials address and
    port, whichever host serves it. ``taken_endpoints`` ({(address,
    port): host}), shared too, holds the Redfish endpoints this schedule
    gives nodes, so that two hosts never serve the cluster at one
    endpoint. ``endpoint_users``: {(address, port): {(cluster, host)}} of
    the recorded Redfish nodes. ``view``: the conductor's view of the
    host (enabled, maintenance, availability_zone, aggregates [{name,
    metadata}]); a host in no zone is in ``default_zone``. ``mapped``:
    {physnet: the hosts that map it}, of every host inspected.
    ``largest``: {resource class: the largest capacity of it among the
    hosts of this schedule}, shared.
    """

    def __init__(self, facts, mine, spec, taken_ports, taken_endpoints,
                 endpoint_users=None, view=None, mapped=None,
                 default_zone='nova'):
        view = view or {}
        self.name = facts['host']
        self.facts = facts
        self.mapped = mapped or {}
        self.bmc_address = facts['ipmi_address']
        self.prefix = facts['resource_prefix']
        self.enabled = view.get('enabled', True)
        self.maintenance = view.get('maintenance', False)
        self.zone = view.get('availability_zone') or default_zone
        self.aggregates = view.get('aggregates', ())
        self.traits = set(resources.traits(facts))
        self.inventories = resources.inventories(facts)
        # Its [hostagent] thin_volumes.
        self.thin = bool(facts.get('thin_volumes'))
        self.used = resources.usages(mine, self.thin)
        # Set by host_states, for the weighers.
        self.largest = {}
        self.ports = range(spec['ipmi_port_range_start'],
                           spec['ipmi_port_range_end'] + 1)
        self.busy = set(facts['busy_ports']) | {
            n['bmc_port'] for n in mine if n['bmc_type'] == 'ipmi'}
        self.taken = taken_ports.setdefault(self.bmc_address, set())
        self.initially_free_ports = len(self.ports) - sum(
            1 for port in self.busy | self.taken if port in self.ports)
        # Ports are only taken while scheduling: the first free one never
        # moves back.
        self._port_cursor = 0
        self.free_bytes = facts['pool_free_bytes']
        self.initially_free_bytes = self.free_bytes
        # Hostagents before issue 23 do not report these.
        self.ipmi_bmc_bytes = facts.get('ipmi_bmc_bytes', 0)
        self.ipmi_free_bytes = facts.get('ipmi_free_bytes')
        self.initially_ipmi_free_bytes = self.ipmi_free_bytes
        self.network_drivers = network_drivers(facts)
        # {physnet: NICs of this cluster's nodes here on its bridge}.
        self.bridge_ports = {}
        for node in mine:
            if node['cluster'] == spec['cluster']:
                for nic in node['nics']:
                    self.bridge_ports[nic['physnet']] = (
                        self.bridge_ports.get(nic['physnet'], 0) + 1)
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
        # The cluster's VirtualPDU here (at the BMC address) and the
        # outlets its nodes have.
        self.snmp_port = spec['snmp_port']
        self.outlets = {int(n['bmc_system_id']) for n in mine
                        if n['bmc_type'] == 'snmp'
                        and n['cluster'] == spec['cluster']}

    def next_port(self):
        """The first free BMC port, or None."""
        while self._port_cursor < len(self.ports):
            port = self.ports[self._port_cursor]
            if port not in self.busy and port not in self.taken:
                return port
            self._port_cursor += 1
        return None

    def next_outlet(self):
        """The first free outlet of the cluster's PDU here, or None."""
        return next((n for n in range(1, constants.PDU_OUTLETS + 1)
                     if n not in self.outlets), None)

    def redfish_holders(self, spec):
        """Who else has this host's Redfish endpoint: recorded nodes,
        and nodes of this schedule on another host."""
        holders = set(self.redfish_users)
        host = self.taken_endpoints.get(self.redfish)
        if host not in (None, self.name):
            holders.add('cluster %s on %s' % (spec['cluster'], host))
        return sorted(holders)

    def amounts(self, request):
        """{resource class: amount} a node of ``request`` takes here."""
        return request.thin_amounts if self.thin else request.amounts

    def volume_bytes(self, request):
        """Pool bytes a node of ``request`` takes here."""
        return request.thin_bytes if self.thin else request.bytes

    def free(self, rc):
        return resources.capacity(self.inventories[rc]) - self.used[rc]

    def take(self, request):
        """Take room for a node; return its BMC's (address, port), and
        an SNMP BMC's outlet."""
        for rc, amount in self.amounts(request).items():
            self.used[rc] += amount
        self.free_bytes -= self.volume_bytes(request)
        for physnet in request.physnets:
            self.bridge_ports[physnet] = self.bridge_ports.get(physnet, 0) + 1
        if request.bmc_type == 'redfish':
            self.taken_endpoints[self.redfish] = self.name
            return self.redfish
        if request.bmc_type == 'snmp':
            outlet = self.next_outlet()
            self.outlets.add(outlet)
            return self.bmc_address, self.snmp_port, outlet
        if self.ipmi_free_bytes is not None:
            self.ipmi_free_bytes -= self.ipmi_bmc_bytes
        port = self.next_port()
        self.taken.add(port)
        return self.bmc_address, port


def host_states(spec, facts, recorded, views, mapped=None,
                default_zone='nova'):
    """A HostState for each host of ``facts``, with the ``recorded``
    nodes (dicts of every cluster) taken; ``views``: {host: the
    conductor's view of it}; ``mapped``: physnet_hosts of every host
    inspected (default: those of ``facts``)."""
    by_host = {}
    taken_ports = {}
    endpoint_users = {}
    for node in recorded:
        by_host.setdefault(node['hypervisor'], []).append(node)
        endpoint = node['bmc_address'], node['bmc_port']
        if node['bmc_type'] == 'redfish':
            endpoint_users.setdefault(endpoint, set()).add(
                (node['cluster'], node['hypervisor']))
        elif node['bmc_type'] == 'ipmi':
            taken_ports.setdefault(endpoint[0], set()).add(endpoint[1])
    taken_endpoints = {}
    mapped = mapped or physnet_hosts(facts)
    hosts = [HostState(f, by_host.get(name, []), spec, taken_ports,
                       taken_endpoints, endpoint_users, views.get(name),
                       mapped, default_zone)
             for name, f in sorted(facts.items())]
    largest = {}
    for rc in constants.RESOURCE_CLASSES:
        caps = [resources.capacity(h.inventories[rc]) for h in hosts
                if rc in h.inventories]
        largest[rc] = max(max(caps, default=1), 1)
    for host in hosts:
        host.largest = largest
    return hosts


def physnet_hosts(facts):
    """{physnet: [hosts that map it]} of the hosts of ``facts``."""
    mapped = {}
    for name, host_facts in sorted(facts.items()):
        for physnet in host_facts['physnet_mappings']:
            mapped.setdefault(physnet, []).append(name)
    return mapped


def network_drivers(facts):
    """The network drivers a host's inspect result says it offers (an
    agent before API 1.4 names one)."""
    return facts.get('network_drivers') or [facts['network_driver']]
