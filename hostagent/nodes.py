"""One request per node: converge its volumes, ports, domain and BMC.

:class:`Nodes` drives the hypervisor's drivers for hostagent API 1.2
(``ensure_node``, ``remove_node``) and 1.3 (``inspect_nodes``: what
ensure would do, read for many nodes at once and changing nothing; the
requests and results are described in hostagent.rpcapi). An ensure
first reads what is there and refuses before changing anything when it
cannot succeed: a volume that would shrink or change format, a domain
or volume of somebody else, a running domain that would change (unless
forced). Then it makes or updates each
part in turn, and removes what the node no longer has last, once the
domain no longer uses it. A request that fails undoes what it created
(an update stays: the conductor sends the old state to revert it).

An ``existing`` volume is somebody else's: it is read (it must exist,
its format is the disk's, and neither it nor its pool may carry a Tenks
owner mark) and attached, never made, grown or removed.
"""

import contextlib
import functools
from concurrent import futures

import fastjsonschema
import jsonschema
from oslo_log import log as logging

from hostagent.drivers import base
from tenks import bmc_faults
from tenks import constants
from tenks import exceptions
from tenks import names as tenks_names
from tenks import states

LOG = logging.getLogger(__name__)

# The kinds of a node's parts that inspect reads.
PARTS = ('volume', 'bridge', 'port', 'domain', 'bmc')
# The network driver of a NIC (or port) whose request names none.
_BRIDGE_TYPE = {'type': 'string', 'minLength': 1}

_NAMES = {'type': 'array', 'items': {'type': 'string', 'minLength': 1}}
NODE_SCHEMA = {
    'type': 'object',
    'required': ['uuid', 'name', 'domain_type', 'vcpus', 'memory_mb',
                 'console_log_enabled', 'pool', 'volumes', 'nics', 'bmc'],
    'properties': {
        'uuid': {'type': 'string'},
        'name': {'type': 'string', 'minLength': 1},
        'domain_type': {'enum': ['qemu', 'kvm']},
        'vcpus': {'type': 'integer', 'minimum': 1},
        'memory_mb': {'type': 'integer', 'minimum': 1},
        'console_log_enabled': {'type': 'boolean'},
        # Since API 1.4, optional: the console log's path (in the
        # hypervisor's console_log_dir) or null; without it the path
        # follows console_log_enabled.
        'console_log': {'type': ['string', 'null'], 'minLength': 1},
        'boot_mode': {'enum': ['bios', 'uefi'], 'default': 'bios'},
        'secure_boot': {'type': 'boolean', 'default': False},
        # Optional: libvirt's defaults without them.
        'cpu_mode': {'type': 'string', 'minLength': 1},
        'machine': {'type': 'string', 'minLength': 1},
        'pool': {'type': 'string', 'minLength': 1},
        'volumes': {'type': 'array', 'items': {
            'type': 'object', 'required': ['name'],
            'properties': {
                'name': {'type': 'string', 'minLength': 1},
                'capacity': {'type': 'integer', 'minimum': 1},
                'format': {'type': 'string'},
                'device': {'enum': ['disk', 'cdrom']},
                # An existing volume: attached, never changed or removed.
                'existing': {'type': 'boolean'},
                'pool': {'type': 'string', 'minLength': 1},
                'source': {
                    'type': 'object', 'minProperties': 1,
                    'additionalProperties': False,
                    'properties': {'path': {'type': 'string',
                                            'pattern': '^/'},
                                   'url': {'type': 'string',
                                           'pattern': '^https?://'},
                                   # Sent in a header: a volume moving
                                   # from another hypervisor.
                                   'token': {'type': 'string'},
                                   'backing': {'type': 'boolean'}},
                    'oneOf': [{'required': ['path']},
                              {'required': ['url']}],
                    # A backing file is a local file.
                    'if': {'properties': {'backing': {'const': True}},
                           'required': ['backing']},
                    'then': {'required': ['path']}},
            },
            'if': {'properties': {'existing': {'const': True}},
                   'required': ['existing']},
            'then': {'required': ['pool'],
                     'not': {'anyOf': [{'required': [key]} for key in (
                         'capacity', 'format', 'source')]}},
            'else': {'required': ['capacity', 'format']}}},
        'nics': {'type': 'array', 'items': {
            'type': 'object', 'required': ['mac', 'tap', 'bridge'],
            'properties': {'mac': {'type': 'string'},
                           'tap': {'type': 'string', 'minLength': 1},
                           'bridge': {'type': 'string', 'minLength': 1},
                           'bridge_type': _BRIDGE_TYPE}}},
        # type: 'ipmi' when absent; a Redfish BMC needs its system_id,
        # an SNMP one its outlet (its password is the community).
        'bmc': {'type': 'object',
                'required': ['address', 'port', 'username', 'password'],
                'properties': {'type': {'enum': ['ipmi', 'redfish',
                                                 'snmp']},
                               'address': {'type': 'string'},
                               'port': {'type': 'integer', 'minimum': 1,
                                        'maximum': 65535},
                               'username': {'type': 'string'},
                               'password': {'type': 'string'},
                               'system_id': {'type': 'string',
                                             'minLength': 1},
                               'outlet': {'type': 'integer', 'minimum': 1}},
                'allOf': [
                    {'if': {'properties': {'type': {'const': 'redfish'}},
                            'required': ['type']},
                     'then': {'required': ['system_id']}},
                    {'if': {'properties': {'type': {'const': 'snmp'}},
                            'required': ['type']},
                     'then': {'required': ['outlet']}}]},
        'remove': {'type': 'object', 'additionalProperties': False,
                   'properties': {
                       'volumes': _NAMES, 'ports': _NAMES,
                       # {tap: bridge_type} of removed ports not of the
                       # default type.
                       'port_types': {'type': 'object',
                                      'additionalProperties':
                                      _BRIDGE_TYPE}}},
    },
}


# export_node: the node's name, and the pool and names of its volumes.
EXPORT_SCHEMA = {
    'type': 'object',
    'required': ['name', 'pool', 'volumes'],
    'properties': {
        'name': {'type': 'string', 'minLength': 1},
        'pool': {'type': 'string', 'minLength': 1},
        'volumes': {'type': 'array', 'items': {
            'type': 'object', 'required': ['name'],
            'properties': {'name': {'type': 'string', 'minLength': 1}}}},
    },
}


# remove_node needs less: the names of what to remove (the conductor
# knows them from its records, not the sizes or MACs).
REMOVE_SCHEMA = {
    'type': 'object',
    'required': ['name', 'pool', 'volumes', 'nics'],
    'properties': {
        'name': {'type': 'string', 'minLength': 1},
        'pool': {'type': ['string', 'null']},
        'volumes': {'type': 'array', 'items': {
            'type': 'object', 'required': ['name'],
            'properties': {'name': {'type': 'string', 'minLength': 1}}}},
        'nics': {'type': 'array', 'items': {
            'type': 'object', 'required': ['tap'],
            'properties': {'tap': {'type': 'string', 'minLength': 1},
                           'bridge_type': _BRIDGE_TYPE}}},
    },
}


class Validator:
    """A request schema's check, made once (making it costs more than
    checking a small node).

    fastjsonschema, the schema compiled to Python, passes a good request
    in a third of jsonschema's time: a thousand-node re-run spent 0.2 s
    checking its nodes before reading any of them. jsonschema then names
    every field of a bad one.
    """

    def __init__(self, schema):
        self.schema = schema
        self.full = jsonschema.Draft202012Validator(schema)

    @functools.cached_property
    def fast(self):
        # Compiled at first use: only the hostagent checks requests.
        return fastjsonschema.compile(self.schema)

    def problems(self, node):
        """[(path, message)] of what is wrong with ``node``."""
        try:
            self.fast(node)
            return []
        except fastjsonschema.JsonSchemaValueException as e:
            found = [(error.absolute_path, error.message) for error in
                     sorted(self.full.iter_errors(node), key=str)]
            # Were the two ever to differ, the request is still refused.
            return found or [(e.path[1:], e.message)]


NODE_VALIDATOR, EXPORT_VALIDATOR, REMOVE_VALIDATOR = (
    Validator(schema) for schema in (NODE_SCHEMA, EXPORT_SCHEMA,
                                     REMOVE_SCHEMA))


def check(node, validator=NODE_VALIDATOR):
    """Raise InvalidNodeRequest naming every field of ``node`` at fault.

    The BMC password is never quoted back.
    """
    problems = ['%s: %s' % (
        '.'.join(str(p) for p in path) or 'node',
        'is not valid' if 'password' in path else message)
        for path, message in validator.problems(node)]
    if not problems and node.get('secure_boot') and (
            node.get('boot_mode', 'bios') != 'uefi'):
        problems.append('secure_boot: needs boot_mode uefi')
    if not problems:
        remove = node.get('remove') or {}
        for kind, wanted in (('volumes', [v['name'] for v in node['volumes']]),
                             ('ports', [n['tap'] for n in node.get('nics',
                                                                   ())])):
            problems += ['remove.%s: %s is also wanted' % (kind, name)
                         for name in sorted(set(remove.get(kind, ()))
                                            & set(wanted))]
    if problems:
        name = node.get('name') if isinstance(node, dict) else None
        raise exceptions.InvalidNodeRequest(node=name or '?',
                                            problems='; '.join(problems))


def bmc_type(node):
    """'ipmi', 'redfish' or 'snmp': the type of the node's BMC."""
    return node['bmc'].get('type', 'ipmi')


def things(node):
    """What a request on ``node`` acts on, as hostagent lock keys.

    The same keys as the single-thing requests of API 1.0 use, so that
    an ensure_volume of one of its volumes waits for it, and vice versa.
    None for a malformed node: its request fails its check.
    """
    try:
        name = node['name']
        remove = node.get('remove') or {}
        volumes = [(v.get('pool', node['pool']), v['name'])
                   for v in node['volumes']]
        volumes += [(node['pool'], v) for v in remove.get('volumes', [])]
        ports = [n['tap'] for n in node['nics']]
        return sorted(
            {('node', name), ('domain', name), ('bmc', name)}
            | {('volume', pool, v) for pool, v in volumes}
            | {('port', p) for p in ports + list(remove.get('ports', []))})
    except (KeyError, TypeError, AttributeError):
        return None


def ours(node):
    """The node's volumes that Tenks makes (not existing ones)."""
    return [v for v in node['volumes'] if not v.get('existing')]


def existing(node):
    """{(pool, name): volume} of the node's existing volumes."""
    return {(v['pool'], v['name']): v for v in node['volumes']
            if v.get('existing')}


def domain(node, found=None):
    """The virt driver's description of the node's domain.

    ``found``: {(pool, name): existing_volumes info} of its existing
    volumes, whose format is theirs (None for one that is missing).
    """
    found = found or {}
    disks = []
    for v in node['volumes']:
        pool = v.get('pool', node['pool'])
        fmt = v.get('format') or (found.get((pool, v['name'])) or {}).get(
            'format')
        disk = {'pool': pool, 'volume': v['name'], 'format': fmt,
                'device': v.get('device', 'disk')}
        source = v.get('source') or {}
        if source.get('backing'):
            disk['backing'] = source['path']
        disks.append(disk)
    described = {
        'name': node['name'], 'uuid': node['uuid'],
        'domain_type': node['domain_type'], 'vcpus': node['vcpus'],
        'memory_mb': node['memory_mb'],
        'console_log_enabled': node['console_log_enabled'],
        'boot_mode': node.get('boot_mode', 'bios'),
        'secure_boot': node.get('secure_boot', False),
        'disks': disks,
        'nics': [{'mac': n['mac'], 'tap': n['tap']} for n in node['nics']],
        'virtual_media': node['bmc'].get('type') == 'redfish',
    }
    for key in ('console_log', 'cpu_mode', 'machine'):
        if key in node:
            described[key] = node[key]
    return described


def volume_change(node, vol, info):
    """What ensure would change of an existing volume of ``node``: None,
    or a phrase when it grows it.

    ``info`` is its volume_info. Raises ResourceConflict when ensure
    would refuse the node: the volume would shrink or change format.
    """
    wanted = base.whole_sectors(vol['capacity'])
    source = vol.get('source') or {}
    backing = source.get('path') if source.get('backing') else None
    if info.get('backing') != backing:
        raise exceptions.ResourceConflict(
            'Volume %s of node %s has backing file %s, not %s: a volume is '
            'never remade' % (vol['name'], node['name'],
                              info.get('backing'), backing))
    if info['format'] != vol['format'] or info['capacity'] > wanted:
        raise exceptions.ResourceConflict(
            'Volume %s of node %s has %d bytes in format %s and '
            'cannot become %d bytes in format %s: volumes are '
            'grown, never shrunk or converted' % (
                vol['name'], node['name'], info['capacity'],
                info['format'], wanted, vol['format']))
    if info['capacity'] < wanted:
        return 'volume %s %d -> %d bytes' % (vol['name'], info['capacity'],
                                             wanted)
    return None


def _what(changes):
    """One word for a batch read's answer on one thing; None: as asked."""
    if changes is None:
        return states.PART_MISSING
    if changes == states.PART_FOREIGN:
        return states.PART_FOREIGN
    if changes == [states.PART_STOPPED]:
        return states.PART_STOPPED
    return states.PART_DIFFERS if changes else None


class _RequestChanges:
    """What a request did, and how to undo what it created."""

    def __init__(self):
        self.created = []
        self.updated = []
        self.removed = []
        self._undo = []

    def ensured(self, kind, name, result, undo):
        if result['created']:
            self.created.append([kind, name])
            self._undo.append((kind, name, undo))
        elif result['changed']:
            self.updated.append([kind, name])

    def undo(self):
        """Remove what was created, newest first; report, not raise."""
        for kind, name, undo in reversed(self._undo):
            try:
                undo()
            except Exception as e:
                LOG.error('Could not remove %s %s made by a failed request: '
                          '%s', kind, name, e)

    def result(self, **facts):
        return dict(facts, changed=bool(self.created or self.updated
                                        or self.removed),
                    created=self.created, updated=self.updated,
                    removed=self.removed)


def bridge_type(nic):
    return nic.get('bridge_type', constants.DEFAULT_BRIDGE_TYPE)


class Nodes:
    """Whole-node requests on the drivers of one hypervisor."""

    def __init__(self, virt, networks, bmc, redfish, host, snmp):
        """``networks``: {bridge_type: network driver} offered here;
        ``host``: this hostagent's name ([hostagent] host)."""
        self.virt = virt
        self.networks = networks
        self.bmc = bmc
        self.redfish = redfish
        self.snmp = snmp
        self.host = host

    def mark(self, owner):
        """What this hostagent marks its volumes, domains, interfaces and
        IPMI BMCs with for deployment ``owner``, and takes as its own
        (see tenks.names.owns). Redfish emulators, one per deployment in
        its state directory, carry the deployment's mark alone."""
        return tenks_names.agent_owner(owner, self.host)

    def network(self, bridge_type):
        """The network driver of ``bridge_type``; NetworkDriverMismatch
        when this hypervisor does not offer it."""
        driver = self.networks.get(bridge_type)
        if driver is None:
            raise exceptions.NetworkDriverMismatch(
                host=self.host, driver=', '.join(sorted(self.networks)),
                bridge_type=bridge_type)
        return driver

    def _plan(self, node, mark):
        """What would change, in words, and the volumes to grow.

        Reads only; raises when the request cannot succeed. ``mark``:
        this hostagent's (see mark).
        """
        found = self._existing(node)
        changes, grow = [], []
        for vol in ours(node):
            info = self.virt.volume_info(node['pool'], vol['name'], mark)
            change = info and volume_change(node, vol, info)
            if change:
                grow.append(vol['name'])
                changes.append(change)
        changes += self.virt.domain_changes(domain(node, found),
                                            mark) or []
        return changes, grow, found

    def _read_existing(self, nodes):
        """{(pool, name): info or None} of the existing volumes of
        ``nodes``, one read per pool.

        ResourceConflict for one that carries a Tenks owner mark, or
        whose pool does (this deployment's or another's): Tenks made
        it, and an existing volume is somebody else's.
        """
        pools, users = {}, {}
        for node in nodes:
            for pool, name in existing(node):
                pools.setdefault(pool, []).append(name)
                users[(pool, name)] = node['name']
        found = {(pool, name): info
                 for pool, names in pools.items()
                 for name, info in self.virt.existing_volumes(
                     pool, names).items()}
        marked = [
            'volume %s of storage pool %s (of node %s) %s' % (
                name, pool, users[(pool, name)],
                'belongs to %s' % info['owner'] if 'owner' in info
                else 'is in a pool that belongs to %s' % info['pool_owner'])
            for (pool, name), info in sorted(found.items())
            if info and ('owner' in info or 'pool_owner' in info)]
        if marked:
            raise exceptions.ResourceConflict(
                'Existing volumes that Tenks made are refused: %s; an '
                'existing volume is one that Tenks did not make, attached '
                'as it is' % '; '.join(marked))
        return found

    def _existing(self, node):
        """The node's existing volumes read; DriverError if one is
        missing: Tenks attaches it, it never makes it."""
        found = self._read_existing([node])
        for (pool, name), info in sorted(found.items()):
            if info is None:
                raise exceptions.DriverError(
                    driver='libvirt',
                    action='attach volume %s of storage pool %s to node %s'
                           % (name, pool, node['name']),
                    reason='it does not exist (an existing volume is '
                           'attached as it is, never made)')
        return found

    def inspect(self, nodes, owner, parts=None):
        """What ensure of each of ``nodes`` would make or change; reads
        only. See hostagent.rpcapi for the result. ``parts``: the kinds
        of part to read (default: every kind of PARTS).

        Each kind of part is read for all nodes at once. The parts a
        node's ``remove`` names are not looked at.
        """
        mark = self.mark(owner)
        for node in nodes:
            check(node)
        parts = set(PARTS if parts is None else parts)
        unknown = parts - set(PARTS)
        if unknown:
            raise exceptions.InvalidNodeRequest(
                node='(inspect_nodes)', problems='unknown parts %s' % (
                    ', '.join(sorted(unknown))))
        attached = {}
        if parts & {'volume', 'domain'}:
            attached = self._read_existing(nodes)
        # The kinds are read at once: libvirt, ovsdb-server and the
        # password hash each take their time outside this thread. An
        # error is raised in the order of PARTS.
        with futures.ThreadPoolExecutor(4, 'inspect') as pool:
            volumes = pool.submit(self._inspect_volumes, nodes, parts, mark)
            domains = pool.submit(self._inspect_domains, nodes, parts,
                                  attached, mark)
            networks = pool.submit(self._inspect_networks, nodes, parts,
                                   mark)
            bmcs = pool.submit(self._inspect_bmcs, nodes, parts, owner, mark)
        volumes = volumes.result()
        domains = domains.result()
        ports, bridges = networks.result()
        bmcs = bmcs.result()
        drift = {}
        for node in nodes:
            found = []
            if 'volume' in parts:
                found += self._volume_drift(node, volumes, attached)
            # A bridge gone (or replaced) is the node's drift too: a
            # deploy makes it again before the node's ports.
            if 'bridge' in parts:
                found += [['bridge', bridge, _what(bridges[bridge])]
                          for bridge in sorted({n['bridge']
                                                for n in node['nics']})
                          if bridges.get(bridge, []) != []]
            if 'port' in parts:
                found += [['port', nic['tap'], _what(ports[nic['tap']])]
                          for nic in node['nics']
                          if ports[nic['tap']] != []]
            name = node['name']
            for kind, read in (('domain', domains), ('bmc', bmcs)):
                what = kind in parts and name in read and _what(read[name])
                if what:
                    found.append([kind, name, what])
            drift[node['uuid']] = found
        return {'changed': False, 'nodes': drift}

    def _inspect_volumes(self, nodes, parts, mark):
        """{pool: volume_infos} of ``nodes``, for inspect."""
        if 'volume' not in parts:
            return {}
        pools = {}
        for node in nodes:
            pools.setdefault(node['pool'], []).extend(
                v['name'] for v in ours(node))
        return {pool: self.virt.volume_infos(pool, names, mark)
                for pool, names in pools.items()}

    def _inspect_domains(self, nodes, parts, attached, mark):
        """The domains_changes of ``nodes``, for inspect; ``attached``:
        their existing volumes read (_read_existing)."""
        if 'domain' not in parts:
            return {}
        # Not a node whose existing volume is gone: its disk has no
        # format to compare, and ensure refuses it until the volume is
        # back (its volume says so).
        return self.virt.domains_changes(
            [domain(n, attached) for n in nodes
             if None not in (attached[key] for key in existing(n))], mark)

    def _inspect_networks(self, nodes, parts, mark):
        """({tap: port changes}, {bridge: bridge changes}) of ``nodes``,
        for inspect."""
        ports, bridges = {}, {}
        if parts & {'port', 'bridge'}:
            nics = {}
            for node in nodes:
                for nic in node['nics']:
                    nics.setdefault(bridge_type(nic), []).append(nic)
            for kind, of_kind in sorted(nics.items()):
                network = self.network(kind)
                ports.update(network.port_changes(of_kind, mark))
                bridges.update(network.bridge_changes(
                    sorted({nic['bridge'] for nic in of_kind}), mark))
        return ports, bridges

    def _inspect_bmcs(self, nodes, parts, owner, mark):
        """{node name: BMC changes} of ``nodes``, for inspect."""
        if 'bmc' not in parts:
            return {}
        bmcs = self.bmc.bmc_changes({
            n['name']: {k: v for k, v in n['bmc'].items()
                        if k in ('address', 'port', 'username', 'password')}
            for n in nodes if bmc_type(n) == 'ipmi'}, mark)
        bmcs.update(self.redfish.system_changes(owner, {
            n['name']: n['bmc'] for n in nodes if bmc_type(n) == 'redfish'}))
        bmcs.update(self.snmp.outlet_changes(owner, {
            n['name']: dict(n['bmc'], community=n['bmc']['password'])
            for n in nodes if bmc_type(n) == 'snmp'}))
        return bmcs

    @staticmethod
    def _volume_drift(node, volumes, attached):
        """[['volume', name, what]] of ``node``'s volumes, from the
        volume_infos of its pool and its existing volumes read."""
        # An existing volume missing: not ours to make.
        found = [['volume', name, states.PART_MISSING]
                 for key, name in sorted(existing(node))
                 if attached[(key, name)] is None]
        for vol in ours(node):
            info = volumes[node['pool']][vol['name']]
            if info is None or info == states.PART_FOREIGN:
                found.append(['volume', vol['name'],
                              info or states.PART_MISSING])
                continue
            try:
                if volume_change(node, vol, info):
                    found.append(['volume', vol['name'], states.PART_SMALLER])
            except exceptions.ResourceConflict:
                found.append(['volume', vol['name'], states.PART_DIFFERS])
        return found

    def ensure(self, node, owner, force):
        """Converge ``node``; see the module and hostagent.rpcapi."""
        check(node)
        mark = self.mark(owner)
        for nic in node['nics']:
            self.network(bridge_type(nic))
        name, pool = node['name'], node['pool']
        changes, grow, found = self._plan(node, mark)
        running = self.virt.domain_state(name) not in states.DOMAIN_STOPPED
        if running and changes and not force:
            raise exceptions.NodeRunning(node=name,
                                         changes='; '.join(changes))
        outcome = _RequestChanges()
        stopped = False
        try:
            if running and changes:
                LOG.info('Powering node %s off to change it: %s', name,
                         '; '.join(changes))
                stopped = self.virt.stop_domain(name, mark)
            for vol in ours(node):
                vname = vol['name']
                if vname in grow:
                    self.virt.resize_volume(pool, vname, vol['capacity'],
                                            mark)
                    outcome.updated.append(['volume', vname])
                    continue
                outcome.ensured(
                    'volume', vname, self.virt.ensure_volume(
                        pool, vname, vol['capacity'], vol['format'], mark,
                        source=vol.get('source')),
                    lambda v=vname: self.virt.remove_volume(pool, v, mark))
            for nic in node['nics']:
                tap, network = nic['tap'], self.network(bridge_type(nic))
                outcome.ensured(
                    'port', tap, network.ensure_port(nic['bridge'], tap,
                                                     mark),
                    lambda t=tap, n=network: n.remove_port(t, mark))
            outcome.ensured(
                'domain', name, self.virt.ensure_domain(domain(node, found),
                                                        mark),
                lambda: self.virt.remove_domain(name, mark))
            if stopped:
                self.virt.start_domain(name, mark)
                stopped = False
            # The domain is ours: ensure_domain checked it.
            outcome.ensured('bmc', name, *self._ensure_bmc(node, owner))
            remove = node.get('remove') or {}
            types = remove.get('port_types', {})
            for tap in remove.get('ports', []):
                network = self.network(
                    types.get(tap, constants.DEFAULT_BRIDGE_TYPE))
                if network.remove_port(tap, mark):
                    outcome.removed.append(['port', tap])
            for vname in remove.get('volumes', []):
                if self.virt.remove_volume(pool, vname, mark):
                    outcome.removed.append(['volume', vname])
        except Exception:
            outcome.undo()
            if stopped:
                # Powered off by this request and not changed: as it was.
                with contextlib.suppress(Exception):
                    self.virt.start_domain(name, mark)
            raise
        return outcome.result(power_state=self.virt.domain_state(name))

    def _ensure_bmc(self, node, owner):
        """Make the node's BMC as asked and remove one of the other types
        it had; (result, undo)."""
        name, bmc, mark = node['name'], node['bmc'], self.mark(owner)
        kind = bmc_type(node)
        if kind == 'redfish':
            result = self.redfish.ensure_system(
                owner, name, bmc['system_id'], bmc['address'], bmc['port'],
                bmc['username'], bmc['password'])
            undo = functools.partial(self.redfish.remove_system, name,
                                     owner)
        elif kind == 'snmp':
            result = self.snmp.ensure_outlet(
                owner, name, bmc['outlet'], bmc['address'], bmc['port'],
                bmc['password'])
            undo = functools.partial(self.snmp.remove_outlet, name, owner)
        else:
            result = self.bmc.ensure_bmc(
                name, bmc['address'], bmc['port'], bmc['username'],
                bmc['password'], mark)
            undo = functools.partial(self.bmc.remove_bmc, name, mark)
        # A node has one BMC: the one it changed type from went.
        replaced = [
            kind != 'ipmi' and self.bmc.remove_bmc(name, mark),
            kind != 'redfish' and self.redfish.remove_system(name, owner),
            kind != 'snmp' and self.snmp.remove_outlet(name, owner)]
        return dict(result, changed=result['changed'] or any(replaced)), undo

    def export(self, node, owner, exports):
        """Power the node's domain off and serve its volumes to the
        hypervisor it moves to (``exports``: hostagent.transfer.Exports).

        ``node``: {'name', 'pool', 'volumes': [{'name'}]}, our volumes
        only. Reports {'changed', 'power_state' (before), 'volumes':
        {name: {'url', 'token'}}}.
        """
        check(node, EXPORT_VALIDATOR)
        name, mark = node['name'], self.mark(owner)
        state = self.virt.domain_state(name)
        if state is None:
            raise exceptions.DriverError(
                driver='libvirt', action='move node %s' % name,
                reason='its domain is not defined here')
        # Its disks are copied: nothing may write to them meanwhile.
        stopped = self.virt.stop_domain(name, mark)
        paths = {vol['name']: self.virt.volume_path(node['pool'],
                                                    vol['name'], mark)
                 for vol in node['volumes']}
        return {'changed': stopped, 'power_state': state,
                'volumes': exports.open(name, paths)}

    def power(self, name, owner, on):
        """Start (``on``) or power off the node's domain; whether that
        changed it."""
        mark = self.mark(owner)
        if on:
            return {'changed': self.virt.start_domain(name, mark)}
        return {'changed': self.virt.stop_domain(name, mark)}

    def ensure_bmc(self, name, address, port, username, password, owner):
        """An IPMI BMC for domain ``name``, which must be ``owner``'s."""
        mark = self._bmc_mark(name, owner)
        self.virt.check_domain(name, mark)
        return self.bmc.ensure_bmc(name, address, port, username, password,
                                   mark)

    def remove_bmc(self, name, owner):
        """Remove ``owner``'s BMC of the node, whichever its type; whether
        there was one. One made for another owner: ResourceConflict."""
        removed = [self.bmc.remove_bmc(name, self._bmc_mark(name, owner)),
                   self.redfish.remove_system(name, owner),
                   self.snmp.remove_outlet(name, owner)]
        return any(removed)

    def set_bmc_fault(self, name, bmc, fault, owner):
        """Make ``owner``'s BMC of the node (of type ``bmc``) show
        ``fault`` (tenks.bmc_faults; None: none)."""
        if bmc not in constants.BMC_TYPES:
            raise exceptions.InvalidNodeRequest(
                node=name, problems='bmc: faults are shown by BMCs of '
                'type %s' % ', '.join(constants.BMC_TYPES))
        problem = fault is not None and (
            bmc_faults.problem(fault)
            or bmc_faults.refusal(bmc, fault['kind']))
        if problem:
            raise exceptions.InvalidNodeRequest(node=name,
                                                problems='fault: ' + problem)
        if bmc == 'redfish':
            changed = self.redfish.set_fault(name, owner, fault)
        elif bmc == 'snmp':
            changed = self.snmp.set_fault(name, owner, fault)
        else:
            changed = self.bmc.set_fault(name, self._bmc_mark(name, owner),
                                         fault)
        return {'changed': changed}

    def _bmc_mark(self, name, owner):
        """This hostagent's mark for ``owner``; a BMC request from a
        conductor older than API 1.9 names no owner, and is refused."""
        if owner is None:
            raise exceptions.InvalidNodeRequest(
                node=name, problems='owner: a BMC request names the '
                'deployment that owns the BMC (hostagent API 1.9)')
        return self.mark(owner)

    def remove(self, node, owner):
        """Remove the node's BMC, domain, ports and volumes (ours only).

        Something of the node that is not ours is kept, and named in the
        ResourceConflict raised once the rest is gone.
        """
        check(node, REMOVE_VALIDATOR)
        name, pool, mark = node['name'], node['pool'], self.mark(owner)
        outcome = _RequestChanges()
        kept = []
        steps = [('bmc', name, lambda: self.remove_bmc(name, owner)),
                 ('domain', name, lambda: self.virt.remove_domain(name,
                                                                  mark))]
        steps += [('port', n['tap'],
                   lambda n=n: self.network(bridge_type(n)).remove_port(
                       n['tap'], mark))
                  for n in node['nics']]
        steps += [('volume', v['name'],
                   lambda v=v['name']: self.virt.remove_volume(pool, v,
                                                               mark))
                  for v in node['volumes']]
        for kind, thing, remove in steps:
            try:
                if remove():
                    outcome.removed.append([kind, thing])
            except exceptions.ResourceConflict as e:
                kept.append(str(e))
        if kept:
            raise exceptions.ResourceConflict(
                'Node %s: kept what is not ours (%s); removed %s' % (
                    name, '; '.join(kept),
                    ', '.join(' '.join(r) for r in outcome.removed)
                    or 'nothing'))
        return {'changed': bool(outcome.removed),
                'removed': outcome.removed}
