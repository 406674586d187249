"""The records of nodes: what a spec's node type makes of a node (its
volumes, MACs, NICs, BMC type, firmware), once the scheduler has chosen
its host.

The scheduler, the spec's checks and the reconfiguration diff build node
records with these, so that all three agree.
"""

import collections
import random
import uuid as uuidlib

from tenks import names
from tenks import states

# The emulator of each Ironic driver's BMCs when the spec's bmc_emulators
# names none, and the type of BMC each emulator serves.
DEFAULT_EMULATORS = {'ipmi': 'virtualbmc', 'redfish': 'sushy-tools',
                     'snmp': 'virtualpdu'}
EMULATOR_BMC_TYPES = {'virtualbmc': 'ipmi', 'sushy-tools': 'redfish',
                      'virtualpdu': 'snmp'}


def bmc_type(spec, type_name):
    """'ipmi', 'redfish' or 'snmp': the BMC of the nodes of node type
    ``type_name``, as its ironic_driver (or the spec's
    default_ironic_driver) and bmc_emulators choose."""
    driver = spec['node_types'][type_name].get(
        'ironic_driver', spec['default_ironic_driver'])
    emulator = spec.get('bmc_emulators', {}).get(
        driver, DEFAULT_EMULATORS[driver])
    return EMULATOR_BMC_TYPES[emulator]


def redfish_endpoint(spec):
    """The spec's (redfish_address, redfish_port) for the hostagents to
    check, or (None, None) when no node type of it is Redfish."""
    if any(bmc_type(spec, name) == 'redfish' for name in spec['node_types']):
        return spec['redfish_address'], spec['redfish_port']
    return None, None


def firmware_kind(node_type):
    """The firmware a node of ``node_type`` needs, as hostagents name
    it in their facts: bios, uefi or secure_boot."""
    if node_type['boot_mode'] == 'uefi' and node_type['secure_boot']:
        return 'secure_boot'
    return node_type['boot_mode']


# What a new qcow2 volume made empty or over a backing file takes on
# disk: its metadata (about 200 KiB from 1 GiB to 2 TiB of capacity),
# rounded up. It grows as its node writes.
THIN_VOLUME_BYTES = 1024 * 1024


def counts_thin(vol, thin):
    """Whether volume ``vol`` (a spec's or a record's) counts at its
    size at creation rather than its capacity: with ``thin``, a qcow2
    volume that copies no image."""
    copies = 'image' in vol or not (vol.get('source') or {}).get(
        'backing', True)
    return thin and vol.get('format') == 'qcow2' and not copies


def volume_size(vol, thin=False):
    """Bytes volume ``vol`` counts for when it is made: its capacity,
    which a qcow2 volume may grow to, or THIN_VOLUME_BYTES (see
    counts_thin). An existing volume counts for none."""
    if counts_thin(vol, thin):
        return THIN_VOLUME_BYTES
    return vol.get('capacity', 0)


def volume_bytes(node_type, thin=False):
    """Bytes a node's volumes count for (see volume_size)."""
    return sum(volume_size(vol, thin) for vol in node_type['volumes'])


def recorded_counts(spec, recorded):
    """{index in spec['specs']: how many of its nodes are recorded}."""
    return collections.Counter(n['spec_index'] for n in recorded
                               if n['cluster'] == spec['cluster'])


def new_volume_bytes(spec, recorded, thin=False):
    """Bytes of the volumes of the nodes of ``spec`` not recorded yet."""
    mine = recorded_counts(spec, recorded)
    return sum(
        max(entry['count'] - mine[index], 0)
        * volume_bytes(spec['node_types'][entry['type']], thin)
        for index, entry in enumerate(spec['specs']))


def new_bmc_count(spec, recorded, kind):
    """How many nodes of ``spec`` not recorded yet have a BMC of
    ``kind`` ('ipmi' or 'redfish')."""
    mine = recorded_counts(spec, recorded)
    return sum(max(entry['count'] - mine[index], 0)
               for index, entry in enumerate(spec['specs'])
               if bmc_type(spec, entry['type']) == kind)


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


def new_mac(taken):
    """A random MAC of QEMU's range not in ``taken`` (added to it)."""
    while True:
        mac = '52:54:00:%02x:%02x:%02x' % tuple(
            random.randrange(256) for _ in range(3))
        if mac not in taken:
            taken.add(mac)
            return mac


def _free_names(prefix, taken):
    index = 0
    while True:
        name = names.node(prefix, index)
        if name not in taken:
            taken.add(name)
            yield name
        index += 1


class NewNodes:
    """Records of the new nodes of ``spec``, with names, MACs and volume
    names that no node of ``recorded`` (every cluster's) has."""

    def __init__(self, spec, recorded):
        self.spec = spec
        self.taken_names = {n['name'] for n in recorded}
        self.taken_macs = {nic['mac'] for n in recorded for nic in n['nics']}
        # Volume names are unique per cluster (its pool). spec.validate
        # proves the cluster's own names distinct, but only for node
        # indices below its count: names taken by other clusters push
        # indices higher, so a name whose volumes clash is passed over.
        self.taken_volumes = {vol['name'] for n in recorded
                              if n['cluster'] == spec['cluster']
                              for vol in n['volumes']}
        self.name_pools = {}

    def _name(self, entry, node_type):
        """The next free name of ``entry`` and its volumes' names."""
        prefix = entry['node_name_prefix']
        pool = self.name_pools.setdefault(
            prefix, _free_names(prefix, self.taken_names))
        while True:
            name = next(pool)
            volumes = [names.volume(name, entry['vol_name_prefix'], i)
                       for i in range(len(node_type['volumes']))]
            if self.taken_volumes.isdisjoint(volumes):
                self.taken_volumes.update(volumes)
                return name, volumes

    def record(self, index, host_facts, endpoint):
        """The record of a new node of ``spec['specs'][index]`` on the
        host of ``host_facts`` (its inspect result), its BMC at
        ``endpoint`` (address, port, and an SNMP BMC's outlet)."""
        spec = self.spec
        entry = spec['specs'][index]
        node_type = spec['node_types'][entry['type']]
        name, volumes = self._name(entry, node_type)
        kind = bmc_type(spec, entry['type'])
        node_uuid = str(uuidlib.uuid4())
        return {
            'uuid': node_uuid,
            'cluster': spec['cluster'],
            'name': name,
            'hypervisor': host_facts['host'],
            'node_type': entry['type'],
            'spec_index': index,
            'vcpus': node_type['vcpus'],
            'memory_mb': node_type['memory_mb'],
            'volumes': [
                volume_record(volume, vol)
                for volume, vol in zip(volumes, node_type['volumes'],
                                       strict=True)],
            'nics': [
                {'physnet': physnet, 'mac': new_mac(self.taken_macs),
                 'bridge': names.bridge(spec, physnet,
                                        host_facts['resource_prefix']),
                 'bridge_type': spec['bridge_type'],
                 'tap': names.tap(name, i)}
                for i, physnet in enumerate(node_type['physical_networks'])],
            'bmc_type': kind,
            'bmc_address': endpoint[0],
            'bmc_port': endpoint[1],
            # Redfish: the domain's UUID, which the emulator serves;
            # SNMP: the outlet of the cluster's PDU.
            'bmc_system_id': {'redfish': node_uuid,
                              'snmp': str(endpoint[-1])}.get(kind),
            'boot_mode': node_type['boot_mode'],
            'secure_boot': node_type['secure_boot'],
            'console_log': names.console_log(host_facts, node_type, name),
            'state': states.NODE_SCHEDULED,
        }
