"""What a hypervisor holds that carries a Tenks owner mark, and the
removal of what dead deployments left there (hostagent API 1.10).

``survey`` reads everything here that carries a Tenks mark, whoever's
(domains, pools, volumes, NVRAM files, links, Open vSwitch rows, BMCs,
emulators), the processes that serve BMCs for any state directory, and
what the notes of hostagent.deployments say of each deployment it
found: a conductor compares that with its records. ``clean`` removes
what carries the marks of deployments its conductor found dead,
whichever hostagent made it, through the drivers' own removal paths,
each of which checks the thing's mark again; and stops the processes
that serve a state directory that no longer has them.
"""

import operator
from concurrent import futures

from oslo_log import log as logging

from tenks import constants
from tenks import exceptions
from tenks import names
from tenks import states

LOG = logging.getLogger(__name__)

# The order a teardown removes things in: BMCs before their domains,
# domains before their disks and taps, taps before their bridges,
# volumes before their pool.
ORDER = ('bmc', 'emulator', 'pdu', 'domain', 'nvram', 'volume', 'port', 'veth',
         'bridge', 'ovs port', 'pool')
MARKED = operator.methodcaller('marked')
DAEMONS = operator.methodcaller('daemons')


def owner_of(thing):
    """The deployment's mark of what ``thing``'s mark says."""
    return names.deployment_mark(thing['mark'] or '')


def lock_keys(thing):
    """The hostagent's lock keys of a thing a clean removes: those of
    the requests on it."""
    kind, name = thing['kind'], thing['name']
    if kind == 'volume':
        return [('volume', thing['pool'], name)]
    if kind in ('emulator', 'pdu'):
        return [('bmc', domain) for domain in thing['systems']]
    return [({'nvram': 'domain', 'ovs port': 'port'}.get(kind, kind), name)]


class Audit:
    """The audit of one hostagent's hypervisor, on its drivers."""

    def __init__(self, virt, networks, bmc, redfish, registry, snmp):
        """``networks``: {bridge_type: network driver}; ``registry``: the
        hostagent's hostagent.deployments.Registry."""
        self.virt = virt
        self.networks = networks
        self.bmc = bmc
        self.redfish = redfish
        self.snmp = snmp
        self.registry = registry

    def _drivers(self):
        return [self.virt, *self.networks.values(), self.bmc, self.redfish,
                self.snmp]

    def things(self):
        """Everything here that carries a Tenks mark, read at once:
        [{'kind', 'name', 'mark', ...}] (see the drivers' marked()).
        A tap that is an Open vSwitch port is one 'port' of bridge_type
        openvswitch; bridges and taps say their bridge_type."""
        drivers = self._drivers()
        with futures.ThreadPoolExecutor(max_workers=len(drivers)) as pool:
            return self._things(list(pool.map(MARKED, drivers)))

    def _things(self, marked):
        """things() of the drivers' ``marked()``, in _drivers' order."""
        found = {}
        for things in marked:
            for thing in things:
                found.setdefault((thing['kind'], thing['name'],
                                  thing.get('pool')), thing)
        for key, row in list(found.items()):
            tap = found.get(('port', row['name'], None))
            if key[0] == 'ovs port' and tap is not None:
                tap.update(bridge_type='openvswitch', master=row['bridge'])
                del found[key]
        for thing in found.values():
            if thing['kind'] in ('bridge', 'port'):
                thing.setdefault('bridge_type', constants.DEFAULT_BRIDGE_TYPE)
        return sorted(found.values(),
                      key=lambda t: (t['kind'], t['name'], t.get('pool')))

    def survey(self):
        """What this hypervisor holds: see hostagent.rpcapi (audit)."""
        # Each driver reads libvirt, the kernel, OVSDB or its processes,
        # mostly waiting: all at once.
        drivers = self._drivers()
        serving = (self.bmc, self.redfish, self.snmp)
        with futures.ThreadPoolExecutor(
                max_workers=len(drivers) + len(serving)) as pool:
            marked = pool.map(MARKED, drivers)
            daemons = pool.map(DAEMONS, serving)
            things = self._things(list(marked))
            daemons = [daemon for found in daemons for daemon in found]
        read = {}
        owners = sorted({owner_of(thing) for thing in things
                         if thing['mark']})
        return {'changed': False, 'things': things, 'daemons': daemons,
                'deployments': {owner: list(self.registry.verdict(owner,
                                                                  read))
                                for owner in owners},
                'state_dir': self.registry.state_dir}

    def clean(self, owners, daemons, serialised):
        """Remove what carries the marks of the deployments ``owners``,
        in ORDER, and stop the orphan processes of ``daemons`` ([kind,
        directory] from survey). ``serialised(keys)``: a context holding
        the hostagent's locks of those keys. A removal that fails (a
        thing that is not what its mark said any more, a driver error)
        is reported, and the others go on; so is a deployment that the
        notes of hostagent.deployments do not prove dead (nor leave to
        the conductor: 'here'), which is kept. The notes of a
        deployment nothing is left of here are forgotten. See
        hostagent.rpcapi."""
        removed, failed = [], []
        # What the notes prove alive (or nothing proves dead) is kept,
        # whatever the request says.
        read = {}
        wanted = set()
        for owner in owners:
            verdict, why = self.registry.verdict(owner, read)
            if verdict in (states.DEPLOYMENT_DEAD, states.DEPLOYMENT_HERE):
                wanted.add(owner)
            else:
                failed.append(['deployment', owner, 'not proven dead: %s'
                               % why])
        doomed = [t for t in self.things() if owner_of(t) in wanted]
        for thing in sorted(doomed, key=lambda t: ORDER.index(t['kind'])):
            what = [thing['kind'], thing['name']]
            try:
                with serialised(lock_keys(thing)):
                    if self._remove(thing):
                        removed.append(what)
            except exceptions.TenksError as e:
                LOG.warning('Could not remove %s %s, left by deployment '
                            '%s: %s', thing['kind'], thing['name'],
                            owner_of(thing), e)
                failed.append(what + [str(e)])
        stopped = []
        for kind, directory in daemons:
            driver = {'ipmi host': self.bmc, 'virtualpdu': self.snmp}.get(
                kind, self.redfish)
            try:
                if driver.stop_orphans(directory):
                    stopped.append([kind, directory])
            except exceptions.TenksError as e:
                failed.append([kind, directory, str(e)])
        self._forget(wanted)
        return {'changed': bool(removed or stopped), 'removed': removed,
                'stopped': stopped, 'failed': failed}

    def _forget(self, dead):
        """Forget the notes of the deployments nothing is left of here
        that are ``dead`` or that the notes prove dead (a teardown leaves
        its deployment's notes)."""
        left = {owner_of(t) for t in self.things()}
        read = {}
        for owner in self.registry.owners() - left:
            if owner in dead or self.registry.verdict(
                    owner, read)[0] == states.DEPLOYMENT_DEAD:
                self.registry.forget(owner)

    def _network(self, bridge_type):
        """The driver of ``bridge_type``, or another one offered here:
        each removes the links the other makes too."""
        return (self.networks.get(bridge_type)
                or next(iter(self.networks.values())))

    def _remove(self, thing):
        kind, name, mark = thing['kind'], thing['name'], thing['mark']
        if kind == 'bmc':
            return self.bmc.remove_bmc(name, mark)
        if kind == 'emulator':
            # Its last system takes the emulator and its directory along.
            return any([self.redfish.remove_system(domain, mark)
                        for domain in sorted(thing['systems'])])
        if kind == 'pdu':
            return any([self.snmp.remove_outlet(domain, mark)
                        for domain in sorted(thing['systems'])])
        if kind == 'domain':
            return self.virt.remove_domain(name, mark)
        if kind == 'nvram':
            return self.virt.remove_nvram(name, mark)
        if kind == 'volume':
            return self.virt.remove_volume(thing['pool'], name, mark)
        if kind == 'pool':
            return self.virt.remove_pool(name, thing['path'], mark,
                                         thing['pool_type'],
                                         thing['devices'])
        if kind == 'veth':
            return self._network(
                constants.DEFAULT_BRIDGE_TYPE).remove_veth(name, mark)
        if kind == 'ovs port':
            return self._network('openvswitch').remove_port(name, mark)
        network = self._network(thing['bridge_type'])
        if kind == 'port':
            return network.remove_port(name, mark)
        return network.remove_bridge(name, mark)
