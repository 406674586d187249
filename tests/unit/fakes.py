"""In-memory hypervisor drivers for unit tests of flows and services.

They keep what they "create" in dicts, can be told to fail, and count
calls, so tests can check that reverts undo exactly what was made.
"""

import collections
import threading

from hostagent.drivers import base
from tenks import exceptions


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
        # The libvirt daemon its hostagent reaches: its own.
        self.libvirt_daemon = 'fake:///system on %x' % id(self)

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

    def remove(self, kind, name):
        self.calls['remove_' + kind] += 1
        self.removed.append(kind)
        return self.things.pop((kind, name), None) is not None

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
        return self.hv.ensure('pool', name)

    def remove_pool(self, name, path, owner, pool_type='dir', devices=()):
        return self.hv.remove('pool', name)

    def ensure_volume(self, pool, name, capacity, fmt, owner, source=None):
        return self.hv.ensure('volume', name, capacity)

    def existing_volumes(self, pool, names):
        # Somebody else's volumes: {('existing', pool, name): info}.
        return {name: self.hv.things.get(('existing', pool, name))
                for name in names}

    def remove_volume(self, pool, name, owner):
        return self.hv.remove('volume', name)

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
        return {name: base.FOREIGN if self.hv.foreign('volume', name)
                else self.volume_info(pool, name, owner) for name in names}

    def resize_volume(self, pool, name, capacity, owner):
        grown = self.hv.things[('volume', name)] < capacity
        self.hv.things[('volume', name)] = capacity
        return grown

    def ensure_domain(self, domain, owner):
        return self.hv.ensure('domain', domain['name'], domain)

    def remove_domain(self, name, owner):
        self.hv.running.discard(name)
        return self.hv.remove('domain', name)

    def domain_changes(self, domain, owner):
        current = self.hv.things.get(('domain', domain['name']))
        if current is None:
            return None
        return ['%s changed' % key for key in sorted(domain)
                if current.get(key) != domain[key]]

    def domains_changes(self, domains, owner):
        self.hv.calls['domains_changes'] += 1
        return {d['name']: base.FOREIGN if self.hv.foreign('domain',
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
        return dict(self.hv.ensure('bridge', name), mac='02:00:00:00:00:01')

    def remove_bridge(self, name, owner):
        return self.hv.remove('bridge', name)

    def ensure_uplink(self, bridge, source, veth_names, owner):
        return self.hv.ensure('uplink', bridge)

    def remove_uplink(self, bridge, source, veth_names, owner):
        return self.hv.remove('uplink', bridge)

    def ensure_port(self, bridge, name, owner):
        return self.hv.ensure('port', name)

    def remove_port(self, name, owner):
        return self.hv.remove('port', name)

    def port_changes(self, ports, owner):
        self.hv.calls['port_changes'] += 1
        return {p['tap']: base.FOREIGN if self.hv.foreign('port', p['tap'])
                else [] if ('port', p['tap']) in self.hv.things else None
                for p in ports}


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
        return self.hv.remove('bmc', domain)

    def bmc_changes(self, bmcs, owner):
        self.hv.calls['bmc_changes'] += 1
        changes = {}
        for name, bmc in bmcs.items():
            made = self.hv.things.get(('bmc', name))
            if made is None:
                changes[name] = None
                continue
            if self.hv.bmc_owners.get(name, owner) != owner:
                changes[name] = base.FOREIGN
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
        return (made is not None and made[0] == owner
                and self.hv.remove('system', domain))

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
