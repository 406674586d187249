"""In-memory hypervisor drivers for unit tests of flows and services.

They keep what they "create" in dicts, can be told to fail, and count
calls, so tests can check that reverts undo exactly what was made.
"""

import collections
import threading

from hostagent.drivers import base
from tenks import exceptions
from tenks import names
from tenks import states


class Hypervisor:
    """State shared by the fake drivers of one hostagent."""

    def __init__(self):
        self.things = {}
        self.fail = {}
        self.calls = collections.Counter()
        self.removed = []
        self.busy_ports = set()
        # TCP ports something that is not Tenks listens on.
        self.busy_tcp_ports = set()
        # Interfaces on the host that the drivers did not make: {name:
        # alias}.
        self.interfaces = {}
        self.running = set()
        # BMCs whose process does not run.
        self.stopped_bmcs = set()
        # Interfaces the host's default routes leave by.
        self.uplinks = []
        # Block devices a logical pool may not take: {path: why}.
        self.unfit_devices = {}
        # {domain: the owner its BMC was made for}
        self.bmc_owners = {}
        # {domain: the fault its BMC shows}
        self.bmc_faults = {}
        # The libvirt daemon its hostagent reaches: its own.
        self.libvirt_daemon = 'fake:///system on %x' % id(self)
        # {(kind, name): the owner mark it was made with}
        self.marks = {}
        # {volume: its pool}, {tap: its bridge}, {bridge: uplink veths}
        self.pools = {}
        self.bridges = {}
        self.veths = {}
        # Processes serving BMCs, as BmcDriver.daemons reports them.
        self.daemons = []

    def foreign(self, kind, name):
        """Whether the test made (kind, name) somebody else's."""
        return isinstance(self.fail.get((kind, name)),
                          exceptions.ResourceConflict)

    def ensure(self, kind, name, value=True):
        self.calls['ensure_' + kind] += 1
        error = self.fail.get((kind, name))
        if error is not None:
            raise error
        created = (kind, name) not in self.things
        changed = self.things.get((kind, name)) != value
        self.things[(kind, name)] = value
        return base.ensured(created, changed)

    def ensure_marked(self, kind, name, mark, value=True):
        """ensure(), the thing then carrying ``mark``."""
        result = self.ensure(kind, name, value)
        self.marks[(kind, name)] = mark
        return result

    def remove(self, kind, name):
        self.calls['remove_' + kind] += 1
        self.removed.append(kind)
        self.marks.pop((kind, name), None)
        return self.things.pop((kind, name), None) is not None

    def remove_marked(self, kind, name, owner):
        """remove(); ResourceConflict when the thing carries a mark
        ``owner`` may not take (what a test made unmarked has none)."""
        mark = self.marks.get((kind, name))
        if mark is not None and not names.owns(owner, mark):
            raise conflict(kind, name)
        return self.remove(kind, name)

    def marked(self, *kinds):
        """[{'kind', 'name', 'mark'}] of the things of ``kinds`` that
        carry a mark."""
        return [{'kind': kind, 'name': name, 'mark': mark}
                for (kind, name), mark in sorted(self.marks.items())
                if kind in kinds and (kind, name) in self.things]

    def names(self, kind):
        return sorted(n for k, n in self.things if k == kind)


class FakeVirt(base.VirtDriver):

    def __init__(self, conf, hv):
        super().__init__(conf)
        self.hv = hv

    def facts(self):
        return {'libvirt_version': '9.0.0', 'cpus': 2, 'memory_mb': 4096,
                'libvirt_daemon': self.hv.libvirt_daemon}

    def check_pool_devices(self, name, devices, owner, wipe=()):
        problems = ['%s %s' % (device, self.hv.unfit_devices[device])
                    for device in devices if device in self.hv.unfit_devices
                    and device not in wipe]
        if problems:
            raise exceptions.DeviceRefused(pool=name,
                                           problems='; '.join(problems))

    def ensure_pool(self, name, path, owner, pool_type='dir', devices=(),
                    wipe=()):
        self.check_pool_devices(name, devices, owner, wipe)
        return self.hv.ensure_marked('pool', name, owner)

    def remove_pool(self, name, path, owner, pool_type='dir', devices=()):
        return self.hv.remove_marked('pool', name, owner)

    def ensure_volume(self, pool, name, capacity, fmt, owner, source=None):
        self.hv.pools[name] = pool
        return self.hv.ensure_marked('volume', name, owner, capacity)

    def existing_volumes(self, pool, names):
        # Somebody else's volumes: {('existing', pool, name): info}.
        return {name: self.hv.things.get(('existing', pool, name))
                for name in names}

    def remove_volume(self, pool, name, owner):
        return self.hv.remove_marked('volume', name, owner)

    def volume_path(self, pool, name, owner):
        if ('volume', name) not in self.hv.things:
            raise exceptions.DriverError(driver='fake', action='read volume '
                                         '%s' % name, reason='no such volume')
        return '/fake/%s/%s' % (pool, name)

    def volume_info(self, pool, name, owner):
        capacity = self.hv.things.get(('volume', name))
        return None if capacity is None else {'capacity': capacity,
                                              'format': 'qcow2'}

    def volume_infos(self, pool, names, owner):
        self.hv.calls['volume_infos'] += 1
        return {name: states.PART_FOREIGN if self.hv.foreign('volume', name)
                else self.volume_info(pool, name, owner) for name in names}

    def resize_volume(self, pool, name, capacity, owner):
        grown = self.hv.things[('volume', name)] < capacity
        self.hv.things[('volume', name)] = capacity
        return grown

    def ensure_domain(self, domain, owner):
        return self.hv.ensure_marked('domain', domain['name'], owner,
                                      domain)

    def remove_domain(self, name, owner):
        removed = self.hv.remove_marked('domain', name, owner)
        self.hv.running.discard(name)
        return removed

    def remove_nvram(self, name, owner):
        return self.hv.remove_marked('nvram', name, owner)

    def marked(self):
        found = self.hv.marked('domain', 'pool', 'volume', 'nvram')
        for thing in found:
            if thing['kind'] == 'pool':
                thing.update(path='/fake/' + thing['name'], pool_type='dir',
                             devices=[], active=True, defined=True)
            elif thing['kind'] == 'volume':
                thing['pool'] = self.hv.pools.get(thing['name'])
        return found

    def domain_changes(self, domain, owner):
        current = self.hv.things.get(('domain', domain['name']))
        if current is None:
            return None
        return ['%s changed' % key for key in sorted(domain)
                if current.get(key) != domain[key]]

    def domains_changes(self, domains, owner):
        self.hv.calls['domains_changes'] += 1
        return {d['name']: states.PART_FOREIGN if self.hv.foreign('domain',
                                                           d['name'])
                else self.domain_changes(d, owner) for d in domains}

    def check_domain(self, name, owner):
        if self.hv.foreign('domain', name):
            raise self.hv.fail[('domain', name)]
        if ('domain', name) not in self.hv.things:
            raise exceptions.DriverError(driver='fake', action='read domain '
                                         '%s' % name, reason='undefined')

    def start_domain(self, name, owner):
        error = self.hv.fail.get(('start', name))
        if error is not None:
            raise error
        started = name not in self.hv.running
        self.hv.running.add(name)
        return started

    def stop_domain(self, name, owner):
        stopped = name in self.hv.running
        self.hv.running.discard(name)
        return stopped

    def domain_state(self, name):
        if name in self.hv.running:
            return 'running'
        return 'shut off' if ('domain', name) in self.hv.things else None


class FakeNetwork(base.NetworkDriver):

    def __init__(self, conf, hv):
        super().__init__(conf)
        self.hv = hv

    def ensure_bridge(self, name, owner):
        return dict(self.hv.ensure_marked('bridge', name, owner),
                    mac='02:00:00:00:00:01')

    def remove_bridge(self, name, owner):
        return self.hv.remove_marked('bridge', name, owner)

    def ensure_uplink(self, bridge, source, veth_names, owner):
        self.hv.veths[bridge] = list(veth_names)
        return self.hv.ensure_marked('uplink', bridge, owner)

    def remove_uplink(self, bridge, source, veth_names, owner):
        return self.hv.remove_marked('uplink', bridge, owner)

    def ensure_port(self, bridge, name, owner):
        self.hv.bridges[name] = bridge
        return self.hv.ensure_marked('port', name, owner)

    def remove_port(self, name, owner):
        return self.hv.remove_marked('port', name, owner)

    def remove_veth(self, name, owner):
        return any(self.hv.remove_marked('uplink', bridge, owner)
                   for bridge, veths in self.hv.veths.items()
                   if name in veths and ('uplink', bridge) in self.hv.things)

    def marked(self):
        """Bridges (their taps and uplinks' first veth as ports), taps
        and the uplinks' veths."""
        found = self.hv.marked('bridge', 'port')
        uplinks = self.hv.marked('uplink')
        for thing in found:
            if thing['kind'] == 'bridge':
                thing.update(master=None, ports=sorted(
                    [tap for tap, bridge in self.hv.bridges.items()
                     if bridge == thing['name']
                     and ('port', tap) in self.hv.things]
                    + [self.hv.veths[u['name']][0] for u in uplinks
                       if u['name'] == thing['name']]))
            else:
                thing['master'] = self.hv.bridges.get(thing['name'])
        return found + [{'kind': 'veth', 'name': veth, 'mark': u['mark'],
                         'master': u['name'], 'peer': None}
                        for u in uplinks for veth in self.hv.veths[u['name']]]

    def port_changes(self, ports, owner):
        self.hv.calls['port_changes'] += 1
        return {p['tap']: states.PART_FOREIGN
                if self.hv.foreign('port', p['tap'])
                else [] if ('port', p['tap']) in self.hv.things else None
                for p in ports}


def _set_fault(hv, kind, domain, fault):
    """As the BMC drivers' set_fault, for ``kind`` ``domain`` of ``hv``."""
    if (kind, domain) not in hv.things and fault is not None:
        raise exceptions.DriverError(driver='fake', action='fault the BMC '
                                     'of %s' % domain, reason='no BMC here')
    if hv.bmc_faults.get(domain) == fault:
        return False
    if fault is None:
        del hv.bmc_faults[domain]
    else:
        hv.bmc_faults[domain] = fault
    return True


class FakeBmc(base.BmcDriver):

    def __init__(self, conf, hv):
        super().__init__(conf)
        self.hv = hv

    def _check_owner(self, domain, owner):
        found = self.hv.bmc_owners.get(domain, owner)
        if found != owner:
            raise conflict('BMC of domain', domain)

    def ensure_bmc(self, domain, address, port, username, password,
                   owner):
        self._check_owner(domain, owner)
        result = self.hv.ensure('bmc', domain, (address, port))
        self.hv.bmc_owners[domain] = owner
        return result

    def remove_bmc(self, domain, owner):
        self._check_owner(domain, owner)
        self.hv.bmc_owners.pop(domain, None)
        if ('bmc', domain) in self.hv.things:
            self.hv.bmc_faults.pop(domain, None)
        return self.hv.remove('bmc', domain)

    def set_fault(self, domain, owner, fault):
        self._check_owner(domain, owner)
        return _set_fault(self.hv, 'bmc', domain, fault)

    def marked(self):
        return [{'kind': 'bmc', 'name': name, 'mark': self.hv.bmc_owners[name],
                 'address': value[0], 'port': value[1]}
                for (kind, name), value in sorted(self.hv.things.items())
                if kind == 'bmc' and name in self.hv.bmc_owners]

    def daemons(self):
        return [dict(d) for d in self.hv.daemons]

    def stop_orphans(self, directory):
        stopped = [d for d in self.hv.daemons
                   if d['directory'] == directory and d['orphan']]
        for daemon in stopped:
            self.hv.daemons.remove(daemon)
        return [pid for d in stopped for pid in d['pids']]

    def bmc_changes(self, bmcs, owner):
        self.hv.calls['bmc_changes'] += 1
        changes = {}
        for name, bmc in bmcs.items():
            made = self.hv.things.get(('bmc', name))
            if made is None:
                changes[name] = None
                continue
            if self.hv.bmc_owners.get(name, owner) != owner:
                changes[name] = states.PART_FOREIGN
                continue
            changes[name] = ([] if made == (bmc['address'], bmc['port'])
                             else ['port'])
            if name in self.hv.stopped_bmcs:
                changes[name].append('stopped')
        return changes

    def list_bmcs(self):
        return [{'domain': name, 'address': a, 'port': p,
                 'status': 'running'}
                for (kind, name), (a, p) in self.hv.things.items()
                if kind == 'bmc']


class FakeSnmp(base.SnmpDriver):
    """Outlets as things of kind 'outlet' ({domain: (owner, address,
    port, outlet, community)})."""

    def __init__(self, conf, hv):
        super().__init__(conf)
        self.hv = hv

    def ensure_outlet(self, owner, domain, outlet, address, port,
                      community):
        return self.hv.ensure('outlet', domain,
                              (owner, address, port, outlet, community))

    def remove_outlet(self, domain, owner):
        made = self.hv.things.get(('outlet', domain))
        if made is None or made[0] != owner:
            return False
        self.hv.bmc_faults.pop(domain, None)
        return self.hv.remove('outlet', domain)

    def set_fault(self, domain, owner, fault):
        made = self.hv.things.get(('outlet', domain))
        if made is not None and made[0] != owner:
            raise conflict('outlet of domain', domain)
        return _set_fault(self.hv, 'outlet', domain, fault)

    def outlet_changes(self, owner, outlets):
        changes = {}
        for name, bmc in outlets.items():
            made = self.hv.things.get(('outlet', name))
            wanted = (owner, bmc['address'], bmc['port'], bmc['outlet'],
                      bmc['community'])
            changes[name] = None if made is None else (
                [] if made == wanted else ['outlet'])
        return changes

    def marked(self):
        """A PDU per owner with outlets."""
        pdus = {}
        for (kind, name), value in sorted(self.hv.things.items()):
            if kind == 'outlet':
                pdus.setdefault(value[0], {})[name] = value[3]
        return [{'kind': 'pdu', 'name': 'pdu-%s' % owner, 'mark': owner,
                 'systems': outlets, 'running': True}
                for owner, outlets in sorted(pdus.items())]

    def daemons(self):
        return []

    def stop_orphans(self, directory):
        return []


class FakeRedfish(base.RedfishDriver):
    """Systems as things of kind 'system' ({domain: (owner, address,
    port, system_id)}); an owner's emulator runs while it serves one."""

    def __init__(self, conf, hv):
        super().__init__(conf)
        self.hv = hv

    def ensure_system(self, owner, domain, system_id, address, port,
                      username, password):
        return self.hv.ensure('system', domain,
                              (owner, address, port, system_id))

    def remove_system(self, domain, owner):
        # Called for every node's removal: counted only when its owner's
        # emulator serves the domain.
        made = self.hv.things.get(('system', domain))
        if made is None or made[0] != owner:
            return False
        self.hv.bmc_faults.pop(domain, None)
        return self.hv.remove('system', domain)

    def set_fault(self, domain, owner, fault):
        made = self.hv.things.get(('system', domain))
        if made is not None and made[0] != owner:
            raise conflict('Redfish system of', domain)
        return _set_fault(self.hv, 'system', domain, fault)

    def system_changes(self, owner, systems):
        changes = {}
        for name, bmc in systems.items():
            made = self.hv.things.get(('system', name))
            wanted = (owner, bmc['address'], bmc['port'], bmc['system_id'])
            changes[name] = None if made is None else (
                [] if made == wanted else ['port'])
            if made is not None and name in self.hv.stopped_bmcs:
                changes[name].append('stopped')
        return changes

    def marked(self):
        """An emulator per owner serving systems."""
        emulators = {}
        for (kind, name), value in sorted(self.hv.things.items()):
            if kind == 'system':
                emulators.setdefault(value[0], {})[name] = value[3]
        return [{'kind': 'emulator', 'name': 'emulator-%s' % owner,
                 'mark': owner, 'systems': systems, 'running': True}
                for owner, systems in sorted(emulators.items())]

    def daemons(self):
        return []

    def stop_orphans(self, directory):
        return []

    def endpoint_user(self, address, port):
        for (kind, _), value in self.hv.things.items():
            if kind == 'system' and value[1:3] == (address, port):
                return value[0]
        return '' if port in self.hv.busy_tcp_ports else None


def block(driver, method):
    """Make ``driver.method`` wait until released; returns the events
    (entered, release): set when a call enters it, and to set to let it
    go on."""
    entered, release = threading.Event(), threading.Event()
    real = getattr(driver, method)

    def blocking(*args, **kwargs):
        entered.set()
        release.wait(10)
        return real(*args, **kwargs)

    setattr(driver, method, blocking)
    return entered, release


def conflict(kind, name):
    return exceptions.ResourceConflict(kind=kind, name=name, owner='test',
                                       reason='somebody else made it')
