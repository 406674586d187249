"""Host filters: each removes the hypervisors that cannot take a node.

A filter is a class registered under the ``tenks.scheduler.filters``
entry points and enabled by name in ``[scheduler] enabled_filters``.
"""

from tenks import constants
from tenks import exceptions
from tenks import node_records
from tenks import resources

# Ports a Linux bridge holds (the kernel's BR_MAX_PORTS, port 0 unused),
# and so the nodes of one NIC each it takes beside an uplink.
LINUX_BRIDGE_PORTS = 1023
LINUX_BRIDGE_NODES = LINUX_BRIDGE_PORTS - 1
FIRMWARE_NAMES = {'bios': 'BIOS', 'uefi': 'UEFI',
                  'secure_boot': 'UEFI secure boot'}


class BaseHostFilter:
    """A filter of hosts (tenks.scheduler.host_state.HostState) for a
    node of a spec entry (tenks.scheduler.host_state.Request)."""

    #: The name ``[scheduler] enabled_filters`` knows it by (its entry
    #: point's).
    name = None
    #: True when the answer changes as nodes are given hosts (room,
    #: ports): such a filter runs again for each node, the others once
    #: per spec entry.
    dynamic = False

    def host_passes(self, host, request):
        """Whether ``host`` may take a node of ``request``."""
        raise NotImplementedError

    def reason(self, host, request):
        """(what, why) of a host this filter refuses: the "No valid
        host" error counts the hosts removed under ``what`` and shows
        ``why`` for the first of them."""
        return self.name, 'refused by filter %s' % self.name

    def error(self, host, request):
        """The error to raise instead of NoValidHost when this filter
        removed the only host, when there is one more precise."""
        return None


class EnabledFilter(BaseHostFilter):
    name = 'enabled'

    def host_passes(self, host, request):
        return host.enabled and not host.maintenance

    def reason(self, host, request):
        what = 'in maintenance' if host.maintenance else 'disabled'
        return what, what


class NetworkDriverFilter(BaseHostFilter):
    name = 'network_driver'

    def host_passes(self, host, request):
        return request.bridge_type in host.network_drivers

    def reason(self, host, request):
        return 'network driver', (
            'its network drivers are %s, not the spec\'s bridge_type %s'
            % (', '.join(host.network_drivers), request.bridge_type))

    def error(self, host, request):
        return exceptions.NetworkDriverMismatch(
            host=host.name, driver=', '.join(host.network_drivers),
            bridge_type=request.bridge_type)


class FirmwareFilter(BaseHostFilter):
    name = 'firmware'

    def host_passes(self, host, request):
        return request.firmware in host.firmware

    def reason(self, host, request):
        name = FIRMWARE_NAMES[request.firmware]
        return 'firmware %s' % name, (
            'no %s firmware (OVMF: install the package ovmf there)' % name)


class MachineFilter(BaseHostFilter):
    """The node type's machine type and CPU mode are among those the
    host's libvirt has for the spec's domain type (qemu: TCG has no
    host-passthrough)."""

    name = 'machine'

    def _refusal(self, host, request):
        """(what, why) the host cannot run the node, or None."""
        machines = host.facts.get('machines')
        if machines is None:
            return 'machine types', (
                'its hostagent does not report machine types and CPU '
                'modes (it is older than node types with them)')
        kind = request.domain_type
        have = machines.get(kind, [])
        if request.machine and request.machine not in have:
            return 'machine type %s' % request.machine, (
                'libvirt has no machine type %s for %s domains (it has: '
                '%s)' % (request.machine, kind, _some(have)))
        modes = host.facts['cpu_modes'].get(kind, [])
        if request.cpu_mode and request.cpu_mode not in modes:
            return 'CPU mode %s' % request.cpu_mode, (
                'libvirt does not support CPU mode %s for %s domains (it '
                'supports: %s)' % (request.cpu_mode, kind, _some(modes)))
        return None

    def host_passes(self, host, request):
        return not (request.machine or request.cpu_mode) or (
            self._refusal(host, request) is None)

    def reason(self, host, request):
        return self._refusal(host, request)

    def error(self, host, request):
        return exceptions.MachineUnsupported(
            host=host.name, what=request.what,
            reason=self._refusal(host, request)[1])


class PhysnetsFilter(BaseHostFilter):
    """Every mapped interface exists, and the host maps each physnet of
    the node that some host maps: a physnet no host maps is an isolated
    bridge on every host."""

    name = 'physnets'

    def _unmapped(self, host, request):
        for physnet in request.physnets:
            if (host.mapped.get(physnet)
                    and physnet not in host.facts['physnet_mappings']):
                return physnet
        return None

    def host_passes(self, host, request):
        return (not host.facts['missing_interfaces']
                and self._unmapped(host, request) is None)

    def reason(self, host, request):
        for physnet, source in host.facts['missing_interfaces']:
            return 'physnet %s' % physnet, (
                'interface %s of physnet %s missing' % (source, physnet))
        physnet = self._unmapped(host, request)
        mapping = host.mapped[physnet]
        more = len(mapping) - 3
        return 'physnet %s' % physnet, (
            'does not map physnet %s, which %s%s map%s' % (
                physnet, ', '.join(mapping[:3]),
                ' and %d more' % more if more > 0 else '',
                's' if len(mapping) == 1 else ''))


class TraitsFilter(BaseHostFilter):
    name = 'traits'

    def host_passes(self, host, request):
        return (request.required <= host.traits
                and request.forbidden.isdisjoint(host.traits))

    def reason(self, host, request):
        for trait in sorted(request.required - host.traits):
            return 'trait %s' % trait, 'lacks required trait %s' % trait
        trait = min(request.forbidden & host.traits)
        return 'trait !%s' % trait, 'has forbidden trait %s' % trait


class AvailabilityZoneFilter(BaseHostFilter):
    name = 'availability_zone'

    def host_passes(self, host, request):
        return request.zone is None or host.zone == request.zone

    def reason(self, host, request):
        return 'availability zone %s' % request.zone, (
            'in availability zone %s' % host.zone)


class AggregateMetadataFilter(BaseHostFilter):
    """Each ``key: value`` of the entry's aggregate_metadata is on one of
    the host's aggregates."""

    name = 'aggregate_metadata'

    def _missing(self, host, request):
        for key, value in sorted(request.metadata.items()):
            if not any(str(a['metadata'].get(key)) == str(value)
                       for a in host.aggregates if key in a['metadata']):
                return key, value
        return None

    def host_passes(self, host, request):
        return self._missing(host, request) is None

    def reason(self, host, request):
        pair = '%s=%s' % self._missing(host, request)
        return 'aggregate metadata %s' % pair, 'in no aggregate with %s' % (
            pair)


class PoolSpaceFilter(BaseHostFilter):
    name = 'pool_space'
    dynamic = True

    def host_passes(self, host, request):
        return host.free_bytes >= host.volume_bytes(request)

    def reason(self, host, request):
        return 'pool space', (
            'its pool has %s free, a node of this type needs %s' % (
                show_bytes(host.free_bytes),
                show_bytes(host.volume_bytes(request))))

    def error(self, host, request):
        return exceptions.PoolSpaceExhausted(
            host=host.name, pool_dir=host.facts['pool_dir'],
            needed=show_bytes(node_records.new_volume_bytes(
                request.spec, request.recorded, host.thin)),
            free=show_bytes(host.initially_free_bytes))


class CapacityFilter(BaseHostFilter):
    """Room for the node's VCPU, MEMORY_MB and DISK_GB, with Placement's
    rules (allocation_ratio, reserved, min_unit, max_unit, step_size)."""

    name = 'capacity'
    dynamic = True

    def _refusal(self, host, request):
        for rc, amount in host.amounts(request).items():
            if rc in host.inventories:
                why = resources.refusal(host.inventories[rc], host.used[rc],
                                        amount)
                if why is not None:
                    return rc, '%s: %d asked, %s' % (rc, amount, why)
        return None

    def host_passes(self, host, request):
        return self._refusal(host, request) is None

    def reason(self, host, request):
        return self._refusal(host, request)


class BmcMemoryFilter(BaseHostFilter):
    """Room in the host's free memory for one more IPMI BMC (each takes
    memory in the process that serves them; a Redfish emulator serves
    all of a cluster's nodes). A hostagent that does not report the
    figures is not checked."""

    name = 'bmc_memory'
    dynamic = True

    def host_passes(self, host, request):
        return (request.bmc_type != 'ipmi' or host.ipmi_free_bytes is None
                or host.ipmi_free_bytes >= host.ipmi_bmc_bytes)

    def reason(self, host, request):
        return 'BMC memory', (
            'it has %s free for IPMI BMCs, one needs %s' % (
                show_bytes(host.ipmi_free_bytes),
                show_bytes(host.ipmi_bmc_bytes)))

    def error(self, host, request):
        count = node_records.new_bmc_count(request.spec, request.recorded,
                                           'ipmi')
        return exceptions.BmcMemoryExhausted(
            host=host.name, count=count,
            needed=show_bytes(count * host.ipmi_bmc_bytes),
            per_bmc=show_bytes(host.ipmi_bmc_bytes),
            free=show_bytes(host.initially_ipmi_free_bytes))


class BridgePortsFilter(BaseHostFilter):
    """Room on the host's Linux bridges for one more node's NICs: the
    kernel's bridge holds LINUX_BRIDGE_PORTS ports, one of them kept
    for the physnet's uplink. Open vSwitch has no such limit."""

    name = 'bridge_ports'
    dynamic = True

    def host_passes(self, host, request):
        return not self._full(host, request)

    def _full(self, host, request):
        if request.bridge_type != 'linuxbridge':
            return []
        return [p for p in request.physnets
                if host.bridge_ports.get(p, 0) >= LINUX_BRIDGE_NODES]

    def reason(self, host, request):
        return 'bridge ports', 'its Linux bridge of %s holds %d nodes' % (
            ', '.join(self._full(host, request)), LINUX_BRIDGE_NODES)

    def error(self, host, request):
        return exceptions.BridgeFull(
            host=host.name, physnets=', '.join(self._full(host, request)),
            nodes=LINUX_BRIDGE_NODES, ports=LINUX_BRIDGE_PORTS)


class BmcPortFilter(BaseHostFilter):
    """A free IPMI port in the spec's range at the host's address, a
    Redfish endpoint no one else uses, or a free outlet of the cluster's
    VirtualPDU."""

    name = 'bmc_port'
    dynamic = True

    def host_passes(self, host, request):
        if request.bmc_type == 'redfish':
            return not host.redfish_holders(request.spec)
        if request.bmc_type == 'snmp':
            return host.next_outlet() is not None
        return host.next_port() is not None

    def reason(self, host, request):
        if request.bmc_type == 'redfish':
            return 'Redfish endpoint', (
                'its Redfish endpoint %s:%d is used by %s' % (
                    host.redfish + (', '.join(
                        host.redfish_holders(request.spec)),)))
        if request.bmc_type == 'snmp':
            return 'BMC port', 'no free outlet on the cluster\'s VirtualPDU'
        return 'BMC port', 'no free IPMI port'

    def error(self, host, request):
        spec = request.spec
        if request.bmc_type == 'redfish':
            address, port = host.redfish
            return exceptions.EndpointInUse(
                address=address, port=port, host=host.name,
                user=', '.join(host.redfish_holders(spec)))
        if request.bmc_type == 'snmp':
            return exceptions.OutletsExhausted(host=host.name,
                                               count=constants.PDU_OUTLETS)
        needed = sum(e['count'] for e in spec['specs']
                     if node_records.bmc_type(spec, e['type']) == 'ipmi')
        return exceptions.PortRangeExhausted(
            start=spec['ipmi_port_range_start'],
            end=spec['ipmi_port_range_end'], host=host.name,
            needed=needed, free=host.initially_free_ports)


def _some(names, shown=8):
    """The first ``shown`` of ``names``, and how many more."""
    more = len(names) - shown
    return ', '.join(names[:shown]) + (
        ' and %d more' % more if more > 0 else '') if names else 'none'


def show_bytes(size):
    for power, unit in ((3, 'GiB'), (2, 'MiB')):
        if size >= 1024 ** power:
            return '%.1f %s (%d bytes)' % (size / 1024 ** power, unit, size)
    return '%.1f KiB (%d bytes)' % (size / 1024, size)
