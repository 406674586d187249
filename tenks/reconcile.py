"""A cluster's spec against its records: what a deploy must change.

Pure functions. A node's identity is its record (UUID, name, MACs, BMC
port), never its place in ``specs``: entries are matched by content, so
reordering the YAML changes nothing. :func:`plan` returns the JSON plan
the deploy flow applies and ``tenks plan`` prints: each node with its
state before (``old``) and after (``new``), the host resources to make or
remove, the flavors, and ``changes``, one line per resource and field.
"""

import collections
import os
import re

from tenks import constants
from tenks import exceptions
from tenks import names
from tenks import node_records
from tenks import spec as tenks_spec
from tenks import states


def match_entries(old_specs, new_specs):
    """{old index: new index} of the ``specs`` entries that stay.

    An entry keeps its nodes wherever it moves: first an identical entry
    takes it, then one that differs only in count, then one of the same
    node type and name prefix, in list order.
    """
    def key(entry):
        return entry['type'], entry.get('node_name_prefix')

    def but_count(entry):
        return {k: v for k, v in entry.items() if k != 'count'}

    passes = (lambda a, b: a == b,
              lambda a, b: but_count(a) == but_count(b),
              lambda a, b: key(a) == key(b))
    matched = {}
    free = list(range(len(new_specs)))
    for same in passes:
        for old_index, old in enumerate(old_specs):
            if old_index in matched:
                continue
            for new_index in free:
                if same(old, new_specs[new_index]):
                    matched[old_index] = new_index
                    free.remove(new_index)
                    break
    return matched


def reassign(old_spec, spec, nodes):
    """Recorded nodes (dicts) with ``spec_index`` in ``spec`` (None:
    their entry is gone)."""
    if old_spec is None:
        return [dict(n) for n in nodes]
    mapping = match_entries(old_spec['specs'], spec['specs'])
    return [dict(n, spec_index=mapping.get(n['spec_index'])) for n in nodes]


def age(node):
    """Sort key, oldest first: creation time, then the name's number."""
    number = re.search(r'(\d+)$', node['name'])
    return (node.get('created_at') or '',
            int(number.group(1)) if number else -1, node['name'])


def surplus(spec, nodes):
    """Nodes (reassigned) to remove: those beyond their entry's count,
    newest first, and those whose entry is gone."""
    gone = [n for n in nodes if n['spec_index'] is None]
    for index, entry in enumerate(spec['specs']):
        mine = sorted((n for n in nodes if n['spec_index'] == index),
                      key=age)
        gone += reversed(mine[entry['count']:])
    return gone


class InUse:
    """Values in use in some scope (an IPMI address's ports, a host's
    outlets), counted by the nodes that use them, for plan_deploy: a
    value is taken for a node if a node other than it uses it."""

    def __init__(self, uses=()):
        """``uses``: (scope, value, node UUID) of each node's use."""
        self._counts = collections.defaultdict(collections.Counter)
        self._by_node = collections.defaultdict(list)
        for scope, value, uuid in uses:
            self._counts[scope][value] += 1
            self._by_node[uuid].append((scope, value))

    def others(self, scope, uuid):
        """The values in ``scope`` that nodes other than ``uuid`` use:
        a set-like view (``in``, ``add``) whose added values count as
        used by another node."""
        return _OthersInUse(self._counts[scope], collections.Counter(
            value for where, value in self._by_node[uuid] if where == scope))


class _OthersInUse:

    def __init__(self, counts, own):
        self._counts = counts
        self._own = own

    def __contains__(self, value):
        return self._counts[value] > self._own[value]

    def add(self, value):
        self._counts[value] += 1


def reshaped(spec, node, host_facts, taken_macs, taken_ports,
             taken_outlets):
    """The record of kept ``node`` (reassigned) as ``spec`` wants it.

    Kept: UUID, name, hypervisor, the MAC and tap of each physical
    network it stays on, and an IPMI BMC's port while it is in the
    range; a Redfish BMC is the host's Redfish endpoint; an SNMP BMC
    keeps its outlet of the cluster's PDU there. ``taken_macs``:
    MACs in use anywhere; ``taken_ports``: IPMI ports in use at this
    host's IPMI address, ``taken_outlets`` the outlets of the cluster's
    other nodes there (this node's own excluded); each tells whether it
    holds a value (``in``) and takes one more (``add``), see InUse.
    """
    entry = spec['specs'][node['spec_index']]
    node_type = spec['node_types'][entry['type']]
    name = node['name']
    volumes = []
    for index, vol in enumerate(node_type['volumes']):
        volumes.append(node_records.volume_record(
            names.volume(name, entry['vol_name_prefix'], index), vol))
    by_physnet = {nic['physnet']: nic for nic in node['nics']}
    wanted = node_type['physical_networks']
    # A new NIC never takes the tap name of one that goes: both are in
    # the same request.
    old_taps = {nic['tap'] for nic in node['nics']}
    free_taps = (names.tap(name, i) for i in range(len(wanted) + len(
        node['nics'])) if names.tap(name, i) not in old_taps)
    nics = []
    for physnet in wanted:
        bridge = names.bridge(spec, physnet, host_facts['resource_prefix'])
        nic = by_physnet.get(physnet)
        if nic is None:
            nic = {'physnet': physnet, 'mac': node_records.new_mac(taken_macs),
                   'tap': next(free_taps)}
        nics.append(dict(nic, bridge=bridge,
                         bridge_type=spec['bridge_type']))
    kind = node_records.bmc_type(spec, entry['type'])
    system_id = None
    if kind == 'redfish':
        # The cluster's emulator on the node's host serves it.
        address = host_facts['redfish_address']
        port = host_facts['redfish_port']
        system_id = node['uuid']
    elif kind == 'snmp':
        address = host_facts['ipmi_address']
        port = spec['snmp_port']
        system_id = node['bmc_system_id']
        if node['bmc_type'] != 'snmp':
            system_id = next((str(n) for n in range(
                1, constants.PDU_OUTLETS + 1) if n not in taken_outlets),
                None)
            if system_id is None:
                raise exceptions.OutletsExhausted(
                    host=node['hypervisor'], count=constants.PDU_OUTLETS)
            taken_outlets.add(int(system_id))
    else:
        address = host_facts['ipmi_address']
        port = node['bmc_port']
        ports = range(spec['ipmi_port_range_start'],
                      spec['ipmi_port_range_end'] + 1)
        if port not in ports or address != node['bmc_address'] or (
                node['bmc_type'] != 'ipmi'):
            busy = set(host_facts['busy_ports'])
            free = [p for p in ports
                    if p not in busy and p not in taken_ports]
            if not free:
                raise exceptions.PortRangeExhausted(
                    start=ports.start, end=ports.stop - 1,
                    host=node['hypervisor'], needed=1, free=0)
            port = free[0]
            taken_ports.add(port)
    return dict(node, node_type=entry['type'], vcpus=node_type['vcpus'],
                memory_mb=node_type['memory_mb'], volumes=volumes,
                nics=nics, bmc_type=kind, bmc_address=address,
                bmc_port=port, bmc_system_id=system_id,
                boot_mode=node_type['boot_mode'],
                secure_boot=node_type['secure_boot'],
                console_log=names.console_log(host_facts, node_type, name))


def firmware(node):
    """(boot mode, secure boot) of a node record; records made before
    boot modes are BIOS nodes."""
    return node.get('boot_mode') or 'bios', bool(node.get('secure_boot'))


def view(spec, deployment, node, host_facts):
    """What the flows apply for ``node`` (a record) under ``spec``."""
    entry = spec['specs'][node['spec_index']]
    node_type = spec['node_types'][entry['type']]
    return {
        'uuid': node['uuid'],
        'name': node['name'],
        'cluster': spec['cluster'],
        'hypervisor': node['hypervisor'],
        'owner': names.owner(spec['cluster'], deployment),
        'domain_type': spec['libvirt_domain_type'],
        'vcpus': node['vcpus'],
        'memory_mb': node['memory_mb'],
        'console_log_enabled': node_type['console_log_enabled'],
        'console_log': node.get('console_log'),
        'boot_mode': firmware(node)[0],
        'secure_boot': firmware(node)[1],
        'cpu_mode': node_type.get('cpu_mode'),
        'machine': node_type.get('machine'),
        'pool': names.pool(spec['cluster'], host_facts['resource_prefix']),
        'volumes': node['volumes'],
        'nics': node['nics'],
        'bmc': bmc(spec, node, host_facts),
        'ironic': ironic_node(spec, node),
        'record': node,
    }


def bmc(spec, node, host_facts):
    """The node's BMC as the flows apply it (no password: it is read
    when used). A Redfish BMC's ``tls``: whether its host's emulator
    serves HTTPS (the hostagent's configuration decides)."""
    if node['bmc_type'] == 'redfish':
        return {'type': 'redfish', 'address': node['bmc_address'],
                'port': node['bmc_port'],
                'username': spec['redfish_username'],
                'system_id': node['bmc_system_id'],
                'tls': bool(host_facts.get('redfish_tls'))}
    if node['bmc_type'] == 'snmp':
        # Its community is its password.
        return {'type': 'snmp', 'address': node['bmc_address'],
                'port': node['bmc_port'], 'username': '',
                'outlet': int(node['bmc_system_id'])}
    return {'type': 'ipmi', 'address': node['bmc_address'],
            'port': node['bmc_port'], 'username': spec['ipmi_username']}


def password_key(bmc_type):
    """The spec key of the password of BMCs of ``bmc_type``."""
    return 'snmp_community' if bmc_type == 'snmp' else (
        '%s_password' % bmc_type)


def bmc_passwords(spec):
    """{BMC type: password} of ``spec``'s BMCs, for node requests."""
    return {kind: spec.get(password_key(kind))
            for kind in constants.BMC_TYPES}


def ironic_node(spec, node):
    """What registration sets on the node's Ironic node, or None when
    its spec has no ironic_config (no password: it is read when used)."""
    config = spec['specs'][node['spec_index']].get('ironic_config')
    if config is None:
        return None
    node_type = spec['node_types'][node['node_type']]
    boot_mode, secure_boot = firmware(node)
    capabilities = 'boot_mode:%s' % boot_mode
    if secure_boot:
        capabilities += ',secure_boot:true'
    properties = {
        'cpus': node['vcpus'],
        'memory_mb': node['memory_mb'],
        # GiB, rounded down: a root disk never bigger than the volume.
        'local_gb': root_disk_bytes(node_type) // constants.GIB,
        'cpu_arch': 'x86_64',
        'capabilities': capabilities,
    }
    properties.update(config['properties'])
    fields = {
        'name': node['name'],
        'driver': node_type.get('ironic_driver',
                                spec['default_ironic_driver']),
        'properties': properties,
        'resource_class': config['resource_class'],
    }
    fields.update({k: v for k, v in config.items()
                   if k.endswith('_interface')
                   or k in ('conductor_group', 'shard')})
    return {'fields': fields, 'traits': config['traits'],
            'rc': config['resource_class']}


def root_disk_bytes(node_type):
    """The capacity of the node type's first disk (not a CD-ROM); 0
    when it has none or it is an existing volume (of unknown size)."""
    disks = [v for v in node_type['volumes']
             if v.get('device', 'disk') == 'disk']
    return disks[0].get('capacity', 0) if disks else 0


def normalise_resource_class(name):
    """Placement's class for an Ironic resource class: CUSTOM_<NAME>."""
    normal = ''.join(c if c.isalnum() else '_' for c in name.upper())
    return normal if normal.startswith('CUSTOM_') else 'CUSTOM_' + normal


def flavor_extra_specs(flavor):
    """Nova extra specs that schedule onto nodes of ``flavor``'s class,
    and only by that class."""
    specs = {'resources:%s' % normalise_resource_class(
        flavor['resource_class']): '1'}
    specs.update({'resources:%s' % rc: '0'
                  for rc in constants.RESOURCE_CLASSES})
    specs.update({'trait:%s' % t: 'required'
                  for t in flavor['required_traits']})
    specs.update({'trait:%s' % t: 'forbidden'
                  for t in flavor['forbidden_traits']})
    specs.update({k: str(v) for k, v in flavor['custom_specs'].items()})
    return specs


def nova_flavor(spec, flavor):
    node_type = spec['node_types'][flavor['node_type']]
    flavor = dict(flavor, name=flavor.get('name', flavor['resource_class']))
    return {
        'name': flavor['name'],
        'vcpus': node_type['vcpus'],
        'ram': node_type['memory_mb'],
        'disk': root_disk_bytes(node_type) // constants.GIB,
        'extra_specs': flavor_extra_specs(flavor),
    }


def placement_wait(spec, planned):
    """[(resource class, traits, {node uuid: name})] to wait for, or
    None: the enrolled nodes whose own resource providers (nova-compute
    names a node's provider after the node) must offer their class with
    their traits. Providers of other nodes of the same class, such as those
    nova-compute has not yet deleted after their nodes left Ironic,
    count for nothing."""
    if not spec['wait_for_placement']:
        return None
    wanted = {}
    for entry in planned:
        ironic = entry['new'] and entry['new']['ironic']
        if ironic:
            key = (normalise_resource_class(ironic['rc']),
                   tuple(sorted(ironic['traits'])))
            wanted.setdefault(key, {})[entry['uuid']] = entry['name']
    return [[rc, list(traits), nodes]
            for (rc, traits), nodes in sorted(wanted.items())]


def host_setup(spec, host_facts):
    """The pool and bridges (with uplinks) of the cluster on one host."""
    prefix = host_facts['resource_prefix']
    mappings = host_facts['physnet_mappings']
    bridges = []
    for physnet in names.physnets(spec):
        bridge = names.bridge(spec, physnet, prefix)
        uplink = None
        if physnet in mappings:
            uplink = {'source': mappings[physnet],
                      'veth_names': list(names.uplink_veths(bridge))}
        bridges.append({'name': bridge, 'physnet': physnet,
                        'uplink': uplink})
    name = names.pool(spec['cluster'], prefix)
    if spec.get('libvirt_pool_type', 'dir') == 'logical':
        # A volume group of that name; libvirt's target is its /dev path.
        devices = tenks_spec.pool_devices(spec)
        pool = {'name': name, 'path': '/dev/' + name,
                'pool_type': 'logical',
                'devices': [path for path, _ in devices]}
        wipe = [path for path, wiped in devices if wiped]
        if wipe:
            pool['wipe'] = wipe
    else:
        pool = {'name': name, 'path': os.path.join(
            host_facts['pool_dir'], prefix + spec['cluster'])}
    return {'pool': pool, 'bridges': bridges}


def host_resources(spec, deployment, host, host_facts):
    """[(kind, name, ensure args)] of the host's pool, bridges, uplinks;
    an ensure's args are also its remove's (see recorded_args)."""
    owner = names.owner(spec['cluster'], deployment)
    setup = host_setup(spec, host_facts)
    wanted = [('pool', setup['pool']['name'],
               dict(setup['pool'], owner=owner))]
    # The default bridge_type is left out: the records of bridges made
    # before there was a choice stay equal to what is wanted.
    typed = ({} if spec['bridge_type'] == constants.DEFAULT_BRIDGE_TYPE
             else {'bridge_type': spec['bridge_type']})
    for bridge in setup['bridges']:
        wanted.append(('bridge', bridge['name'],
                       dict(typed, name=bridge['name'], owner=owner)))
        if bridge['uplink']:
            wanted.append(('uplink', bridge['name'],
                           dict(bridge['uplink'], bridge=bridge['name'],
                                owner=owner, **typed)))
    return wanted


def recorded_args(args):
    """The ensure args of a host resource as its record keeps them, its
    remove args: not a pool's ``wipe``, which only its making uses."""
    return {key: value for key, value in args.items() if key != 'wipe'}


# What a volume is made from or attached as, in words.
_KINDS = (('existing', 'an existing volume'), ('device', 'its device'),
          ('source', 'the image it is made from'))


def _check_volumes(old, new):
    """Refuse what cannot change in place: a volume's format, a shrink,
    its image, device or being an existing volume."""
    before = {v['name']: v for v in old['volumes']}
    for vol in new['volumes']:
        was = before.get(vol['name'])
        if was is None:
            continue
        for key, what in _KINDS:
            if was.get(key) != vol.get(key):
                # Its data came from the old image (or is somebody
                # else's): replacing it would lose what is on it.
                raise exceptions.ChangeRefused(
                    name=old['cluster'],
                    reason='volume %s of node %s: %s changed (%s -> %s); '
                           'a volume is never remade in place, which would '
                           'lose its data (change vol_name_prefix to make '
                           'new volumes)' % (vol['name'], new['name'], what,
                                             was.get(key), vol.get(key)))
        if vol.get('existing'):
            continue
        if was['format'] != vol['format']:
            raise exceptions.ChangeRefused(
                name=old['cluster'],
                reason='volume %s of node %s is %s: its format cannot '
                       'change in place (change vol_name_prefix to make new '
                       'volumes)' % (vol['name'], new['name'],
                                     was['format']))
        if vol['capacity'] < was['capacity']:
            raise exceptions.ChangeRefused(
                name=old['cluster'],
                reason='volume %s of node %s has %d bytes: a volume cannot '
                       'shrink (asked for %d)' % (
                           vol['name'], new['name'], was['capacity'],
                           vol['capacity']))


def node_changes(old, new):
    """Lines of what changes on a node from view ``old`` to ``new``
    (either None: the node is created or removed)."""
    if old is None or new is None:
        action, state = ((constants.CREATE, new) if old is None
                         else (constants.DELETE, old))
        lines = [('domain', None, _size(state))]
        lines += [('volume %s' % v['name'], 'existing', v['pool'])
                  if v.get('existing') else
                  ('volume %s' % v['name'], 'capacity', v['capacity'])
                  for v in state['volumes']]
        lines += [('port %s' % n['tap'], 'bridge', n['bridge'])
                  for n in state['nics']]
        lines.append(('bmc', None, endpoint(state['bmc'])))
        if state['ironic']:
            lines.append(('ironic node', 'resource_class',
                          state['ironic']['rc']))
        return [_line(state, what, action, field,
                      None if old is None else value,
                      value if old is None else None)
                for what, field, value in lines]
    _check_volumes(old, new)
    changes = []
    # A boot mode changes in place, as a firmware setting would: the
    # domain is redefined (powered off, or refused while it runs unless
    # forced) and its NVRAM made or removed; see the README.
    for field in ('memory_mb', 'vcpus', 'domain_type',
                  'console_log_enabled', 'console_log', 'boot_mode',
                  'secure_boot', 'cpu_mode', 'machine'):
        if old.get(field) != new.get(field) and not (
                # Recorded before Tenks recorded the path: unknown.
                field == 'console_log' and old.get(field) is None
                and old['console_log_enabled']):
            changes.append(_line(new, 'domain', constants.UPDATE, field,
                                 old[field], new[field]))
    before = {v['name']: v for v in old['volumes']}
    after = {v['name']: v for v in new['volumes']}
    for name in after.keys() - before.keys():
        changes.append(_line(new, 'volume %s' % name, constants.CREATE,
                             'capacity', None, after[name].get('capacity')))
    for name in before.keys() - after.keys():
        changes.append(_line(new, 'volume %s' % name, constants.DELETE,
                             'capacity', before[name].get('capacity'), None))
    for name in before.keys() & after.keys():
        if before[name].get('capacity') != after[name].get('capacity'):
            changes.append(_line(new, 'volume %s' % name, constants.UPDATE,
                                 'capacity', before[name]['capacity'],
                                 after[name]['capacity']))
    before = {n['tap']: n for n in old['nics']}
    after = {n['tap']: n for n in new['nics']}
    for tap in after.keys() - before.keys():
        changes.append(_line(new, 'port %s' % tap, constants.CREATE, 'physnet',
                             None, after[tap]['physnet']))
    for tap in before.keys() - after.keys():
        changes.append(_line(new, 'port %s' % tap, constants.DELETE, 'physnet',
                             before[tap]['physnet'], None))
    for tap in before.keys() & after.keys():
        if before[tap]['bridge'] != after[tap]['bridge']:
            changes.append(_line(new, 'port %s' % tap, constants.UPDATE,
                                 'bridge', before[tap]['bridge'],
                                 after[tap]['bridge']))
    for field in ('type', 'address', 'port', 'username', 'system_id',
                  'tls'):
        if old['bmc'].get(field) != new['bmc'].get(field):
            changes.append(_line(new, 'bmc', constants.UPDATE, field,
                                 old['bmc'].get(field),
                                 new['bmc'].get(field)))
    changes += _ironic_changes(old, new)
    return sorted(changes, key=lambda c: (c['resource'], c['field'] or ''))


def _ironic_changes(old, new):
    before, after = old['ironic'], new['ironic']
    if before == after:
        return []
    if before is None or after is None:
        action = constants.CREATE if before is None else constants.DELETE
        return [_line(new, 'ironic node', action, 'resource_class',
                      before and before['rc'], after and after['rc'])]
    changes = []
    if sorted(before['traits']) != sorted(after['traits']):
        changes.append(_line(new, 'ironic node', constants.UPDATE, 'traits',
                             sorted(before['traits']),
                             sorted(after['traits'])))
    fields = before['fields'].keys() | after['fields'].keys()
    for field in sorted(fields):
        was = before['fields'].get(field)
        now = after['fields'].get(field)
        if was != now:
            changes.append(_line(new, 'ironic node', constants.UPDATE,
                                 field, was, now))
    return changes


def endpoint(bmc):
    """A BMC as an operator reads it: IPMI address:port, a Redfish
    system's URL, or a PDU's address:port and outlet."""
    if bmc['type'] == 'redfish':
        return '%s/redfish/v1/Systems/%s' % (redfish_url(bmc),
                                             bmc['system_id'])
    if bmc['type'] == 'snmp':
        return '%s outlet %d' % (host_port(bmc['address'], bmc['port']),
                                 bmc['outlet'])
    return host_port(bmc['address'], bmc['port'])


def host_port(address, port):
    """``address:port``, an IPv6 address in brackets (as in a URL)."""
    if ':' in address:
        address = '[%s]' % address
    return '%s:%d' % (address, port)


def redfish_url(bmc):
    """Ironic's redfish_address of a Redfish BMC (a view's)."""
    return '%s://%s' % ('https' if bmc['tls'] else 'http',
                        host_port(bmc['address'], bmc['port']))


def _size(state):
    return '%d MiB, %d vCPU' % (state['memory_mb'], state['vcpus'])


def _line(state, resource, action, field, old, new):
    return {'node': state['name'], 'hypervisor': state['hypervisor'],
            'resource': resource, 'action': action, 'field': field,
            'old': old, 'new': new}


def _host_line(host, kind, name, action, field=None, old=None, new=None):
    return {'node': None, 'hypervisor': host,
            'resource': '%s %s' % (kind, name), 'action': action,
            'field': field, 'old': old, 'new': new}


def moved(plan):
    """{node uuid: new index in spec['specs']} of the nodes whose record
    has another index (their entry moved in the spec); new nodes are
    recorded with theirs."""
    return {e['uuid']: e['new']['record']['spec_index']
            for e in plan['nodes']
            if e['new'] is not None and e['action'] != constants.CREATE
            and (e['old'] is None
                 or e['old']['record']['spec_index']
                 != e['new']['record']['spec_index'])}


def plan(spec, old_spec, deployment, kept, gone, old_views, new_nodes,
         facts, resources):
    """What a deploy of ``spec`` changes.

    ``old_spec``: the recorded spec (None for a new cluster); ``kept``:
    this cluster's node records (dicts) that stay, reassigned to
    ``spec`` and reshaped (:func:`reassign`, :func:`reshaped`);
    ``gone``: those to remove (:func:`surplus`); ``old_views``: {uuid:
    view under ``old_spec``} of its deployed nodes; ``new_nodes``: the
    records the scheduler allocated; ``facts``: {host: inspect result};
    ``resources``: this cluster's recorded resources (dicts).
    """
    if old_spec is not None and old_spec['bridge_type'] != spec[
            'bridge_type']:
        raise exceptions.ChangeRefused(
            name=spec['cluster'],
            reason='bridge_type cannot change from %s to %s on a deployed '
                   'cluster: tear it down first' % (old_spec['bridge_type'],
                                                    spec['bridge_type']))
    passwords = _passwords_changed(old_spec, spec)
    planned = _node_entries(spec, deployment, kept, gone, old_views,
                            new_nodes, facts, passwords)
    changes = []
    for node in planned:
        if node['action'] == constants.DELETE and 'uuid' not in node['old']:
            changes.append(_line(node['old'], 'node', constants.DELETE,
                                 None, None, None))
        elif node['action'] != constants.KEEP:
            changes += node_changes(node['old'], node['new'])
        if node['action'] == constants.UPDATE and node['password_changed']:
            changes.append(_line(node['new'], 'bmc', constants.UPDATE,
                                 password_key(node['new']['bmc']['type']),
                                 '***', '***'))
    hosts = sorted({n['hypervisor'] for n in planned
                    if n['action'] != constants.DELETE})
    host_ensure, host_remove = _host_entries(spec, deployment, hosts, facts,
                                             resources, changes)
    return {
        'cluster': spec['cluster'],
        'owner': names.owner(spec['cluster'], deployment),
        'nodes': planned,
        # Ironic nodes of nodes that stay but lose their ironic_config.
        'unenrol': [n['uuid'] for n in planned
                    if n['action'] == constants.UPDATE
                    and n['old']['ironic'] and not n['new']['ironic']],
        'host_ensure': host_ensure,
        'host_remove': host_remove,
        'flavors': _flavor_entries(spec, old_spec, changes),
        'placement_wait': placement_wait(spec, planned),
        'placement_timeout': spec['placement_timeout'],
        'changes': changes,
    }


def _node_entries(spec, deployment, kept, gone, old_views, new_nodes, facts,
                  passwords):
    """The plan's nodes: {'uuid', 'name', 'hypervisor', 'action', 'old',
    'new', 'agent' (a hostagent request to make), 'enrol' (Ironic to
    update), 'password_changed'}, by hypervisor and name."""
    planned = []
    for node in gone:
        planned.append({'uuid': node['uuid'], 'name': node['name'],
                        'hypervisor': node['hypervisor'],
                        'action': constants.DELETE,
                        'agent': False, 'enrol': False,
                        'old': old_views.get(node['uuid'])
                        or {'name': node['name'],
                            'hypervisor': node['hypervisor'],
                            'record': node},
                        'new': None})
    for node in kept + new_nodes:
        new = view(spec, deployment, node, facts[node['hypervisor']])
        old = old_views.get(node['uuid'])
        password = new['bmc']['type'] in passwords
        if old is None:
            # New, or its first deploy never finished: a revert removes
            # only what this operation makes.
            entry = {'action': constants.CREATE, 'agent': True,
                     'enrol': new['ironic'] is not None}
        else:
            changes = node_changes(old, new)
            agent = password or any(c['resource'] != 'ironic node'
                                    for c in changes)
            changed = agent or bool(changes)
            entry = {'action': (constants.UPDATE if changed
                                else constants.KEEP),
                     'agent': agent,
                     'enrol': changed and new['ironic'] is not None}
        planned.append(dict(entry, uuid=node['uuid'], name=node['name'],
                            hypervisor=node['hypervisor'], old=old,
                            new=new, password_changed=password))
    return sorted(planned, key=lambda n: (n['hypervisor'], n['name']))


def _host_entries(spec, deployment, hosts, facts, resources, changes):
    """([things to make or replace], [recorded rows to remove]) among the
    pools, bridges and uplinks of ``hosts``; their lines go to
    ``changes``."""
    ensure, remove = [], []
    recorded = {(r['hypervisor'], r['kind'], r['name']): r
                for r in resources
                if r['kind'] in ('pool', 'bridge', 'uplink')}
    wanted = {}
    for host in hosts:
        for kind, name, args in host_resources(spec, deployment, host,
                                               facts[host]):
            wanted[(host, kind, name)] = args
    for (host, kind, name), args in wanted.items():
        row = recorded.get((host, kind, name))
        if kind == 'pool' and row is not None and _pool_kind(
                row['remove_args']) != _pool_kind(args):
            raise exceptions.ChangeRefused(
                name=spec['cluster'],
                reason='storage pool %s on %s: its type or devices changed '
                       '(%s -> %s); a pool holding the nodes\' volumes is '
                       'not remade: tear the cluster down first' % (
                           name, host, _pool_words(row['remove_args']),
                           _pool_words(args)))
        if row is None or row['state'] != states.RESOURCE_PRESENT:
            ensure.append({'hypervisor': host, 'kind': kind, 'name': name,
                           'args': args, 'old': None})
            changes.append(_host_line(host, kind, name, constants.CREATE, *(
                ('wipe', None, args['wipe']) if 'wipe' in args else ())))
        elif row['remove_args'] != recorded_args(args):
            ensure.append({'hypervisor': host, 'kind': kind, 'name': name,
                           'args': args, 'old': row['remove_args']})
            changes.append(_host_line(
                host, kind, name, constants.REPLACE, 'source',
                row['remove_args'].get('source'), args.get('source')))
    for key, row in recorded.items():
        if key not in wanted:
            remove.append(row)
            changes.append(_host_line(row['hypervisor'], row['kind'],
                                      row['name'], constants.DELETE))
    return ensure, remove


def _pool_kind(args):
    return args.get('pool_type', 'dir'), args.get('devices')


def _pool_words(args):
    if args.get('pool_type', 'dir') == 'dir':
        return 'dir %s' % args['path']
    return 'logical on %s' % ', '.join(args['devices'])


def _flavor_entries(spec, old_spec, changes):
    """{'ensure': [flavors to make or change], 'old': {name: what a
    changed one was}, 'remove': [names]}; their lines go to
    ``changes``."""
    old = {} if old_spec is None else {
        f['name']: f for f in (nova_flavor(old_spec, f)
                               for f in old_spec['nova_flavors'])}
    new = {f['name']: f for f in (nova_flavor(spec, f)
                                  for f in spec['nova_flavors'])}
    flavors = {'ensure': [], 'old': {}, 'remove': []}
    for name, flavor in new.items():
        if old.get(name) != flavor:
            flavors['ensure'].append(flavor)
            if name in old:
                flavors['old'][name] = old[name]
            changes.append({'node': None, 'hypervisor': None,
                            'resource': 'flavor %s' % name,
                            'action': (constants.UPDATE if name in old
                                       else constants.CREATE),
                            'field': None, 'old': old.get(name),
                            'new': flavor})
    for name in sorted(old.keys() - new.keys()):
        flavors['remove'].append(name)
        changes.append({'node': None, 'hypervisor': None,
                        'resource': 'flavor %s' % name,
                        'action': constants.DELETE,
                        'field': None, 'old': old[name], 'new': None})
    return flavors


def _passwords_changed(old_spec, spec):
    """The BMC types whose password changed (a spec recorded before
    Redfish was built has no redfish_password: its nodes are all
    IPMI)."""
    if old_spec is None:
        return set()
    return {kind for kind in constants.BMC_TYPES
            if old_spec.get(password_key(kind), spec[password_key(kind)])
            != spec[password_key(kind)]}


def destructive(plan):
    """The changes that lose something: removals, replacements, and
    pools made on devices they may wipe."""
    return [c for c in plan['changes']
            if c['action'] in (constants.DELETE, constants.REPLACE)
            or c['field'] == 'wipe']
