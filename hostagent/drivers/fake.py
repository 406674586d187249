"""Simulated drivers of every kind, for scale tests: a hostagent with
``virt_driver``, ``network_drivers``, ``bmc_driver`` and ``redfish_driver``
set to ``fake`` ([hostagent]) is a hypervisor that makes nothing real.

Each driver keeps the things it made, with their owner marks, in a small
SQLite file of its own, ``<state_dir>/fake/<kind>.sqlite`` (mode 0600),
read whole at start and written through on every change: a restarted
hostagent finds what it made and still refuses to adopt, change or
remove what is another owner's. Marks are honoured as the real drivers
honour them (see hostagent.drivers.base).

The Redfish driver is the real one (hostagent.drivers.bmc.sushy: one
emulator process per owner, the same files and authentication) with
sushy-tools' fake systems driver instead of libvirt, so that Ironic
manages the simulated nodes over real Redfish.

[fake] latency and failure_rate make every change slower or fail: a
failed call raises DriverError before it changes anything.
"""

import hashlib
import json
import os
import random
import sqlite3
import threading
import time

from oslo_log import log as logging

from hostagent.drivers import base
from hostagent.drivers.bmc import sushy
from tenks import exceptions
from tenks import names as tenks_names
from tenks import states

LOG = logging.getLogger(__name__)

DRIVER = 'fake'
RUNNING = states.DOMAIN_RUNNING
SHUT_OFF = states.DOMAIN_SHUT_OFF
# The machine types a fake hypervisor offers, as libvirt lists them:
# aliases first.
FAKE_MACHINES = ['pc', 'q35', 'pc-i440fx-7.2', 'pc-q35-7.2']


def simulate(conf, action):
    """Simulate the cost of ``action`` and, at [fake] failure_rate, its
    failure (before anything changed)."""
    if conf.fake.latency:
        LOG.debug('Simulating %s: %s s', action, conf.fake.latency)
        time.sleep(conf.fake.latency)
    if conf.fake.failure_rate and random.random() < conf.fake.failure_rate:
        raise exceptions.DriverError(
            driver=DRIVER, action=action,
            reason='simulated failure ([fake] failure_rate = %s)'
                   % conf.fake.failure_rate)


class Store:
    """{(kind, name): (mark, data)} of one driver, in memory and in the
    SQLite file ``path``."""

    def __init__(self, path):
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        self._db = sqlite3.connect(path, check_same_thread=False,
                                   isolation_level=None)
        # A hostagent that exits keeps what it wrote; a machine crash
        # may lose its last changes, as it would the simulated things.
        self._db.execute('PRAGMA journal_mode=WAL')
        self._db.execute('PRAGMA synchronous=OFF')
        self._db.execute('CREATE TABLE IF NOT EXISTS things (kind TEXT, '
                         'name TEXT, mark TEXT, data TEXT, '
                         'PRIMARY KEY (kind, name))')
        self._things = {
            (kind, name): (mark, json.loads(data))
            for kind, name, mark, data in self._db.execute(
                'SELECT kind, name, mark, data FROM things')}
        self.lock = threading.RLock()

    def get(self, kind, name):
        """(mark, data) or None."""
        return self._things.get((kind, name))

    def put(self, kind, name, mark, data):
        self._db.execute('INSERT OR REPLACE INTO things VALUES (?, ?, ?, ?)',
                         (kind, name, mark, json.dumps(data)))
        self._things[(kind, name)] = (mark, data)

    def delete(self, kind, name):
        self._db.execute('DELETE FROM things WHERE kind = ? AND name = ?',
                         (kind, name))
        del self._things[(kind, name)]

    def items(self, kind):
        """[(name, mark, data)] of ``kind``, sorted by name."""
        return sorted((name, mark, data)
                      for (k, name), (mark, data) in self._things.items()
                      if k == kind)


class _Fake:
    """What the fake drivers share: their store, owner checks and the
    simulated latency and failures."""

    KIND = None

    def _open(self, conf):
        self._store = Store(os.path.join(conf.state_dir, 'fake',
                                         '%s.sqlite' % self.KIND))

    def _act(self, action):
        simulate(self.conf, action)

    def _ours(self, kind, name, owner):
        """(mark, data) of our ``kind`` ``name``, None when absent;
        ResourceConflict when it is somebody else's."""
        found = self._store.get(kind, name)
        if found is not None and not tenks_names.owns(owner, found[0]):
            raise exceptions.ResourceConflict(
                kind='simulated %s' % kind, name=name, owner=owner,
                reason='it belongs to %s' % found[0])
        return found

    def _foreign(self, kind, name, owner):
        """Whether ``kind`` ``name`` exists and is not ``owner``'s."""
        found = self._store.get(kind, name)
        return found is not None and not tenks_names.owns(owner, found[0])

    def _remove(self, kind, name, owner, action):
        """Remove our ``kind`` ``name``; whether there was one."""
        with self._store.lock:
            if self._ours(kind, name, owner) is None:
                return False
            self._act(action)
            self._store.delete(kind, name)
            return True

    def _marked(self, kind, **facts):
        return [dict({key: data.get(key) for key in facts.get(kind, ())},
                     kind=kind, name=name, mark=mark)
                for name, mark, data in self._store.items(kind)]


class FakeVirtDriver(_Fake, base.VirtDriver):
    """Pools, volumes and domains that exist in the store only."""

    KIND = 'virt'

    def __init__(self, conf):
        super().__init__(conf)
        self._open(conf)

    def facts(self):
        return {'libvirt_version': 'fake', 'cpus': self.conf.fake.cpus,
                'memory_mb': self.conf.fake.memory_mb,
                'firmware': ['bios', 'uefi', 'secure_boot'],
                'machines': {'qemu': FAKE_MACHINES, 'kvm': FAKE_MACHINES},
                'cpu_modes': {'qemu': ['maximum', 'host-model'],
                              'kvm': ['host-passthrough', 'maximum',
                                      'host-model']}}

    def check_pool_devices(self, name, devices, owner, wipe=()):
        """Simulated pools have no devices to check."""

    def ensure_pool(self, name, path, owner, pool_type='dir', devices=(),
                    wipe=()):
        with self._store.lock:
            if self._ours('pool', name, owner) is not None:
                return base.ensured(False)
            self._act('create storage pool %s' % name)
            self._store.put('pool', name, owner, {
                'path': path, 'pool_type': pool_type,
                'devices': list(devices)})
            return base.ensured(True)

    def remove_pool(self, name, path, owner, pool_type='dir', devices=()):
        with self._store.lock:
            if any(data['pool'] == name
                   for _, _, data in self._store.items('volume')):
                raise exceptions.DriverError(
                    driver=DRIVER, action='remove storage pool %s' % name,
                    reason='it still holds volumes')
            return self._remove('pool', name, owner,
                                'remove storage pool %s' % name)

    @staticmethod
    def _key(pool, name):
        return '%s/%s' % (pool, name)

    def ensure_volume(self, pool, name, capacity, fmt, owner, source=None):
        key = self._key(pool, name)
        with self._store.lock:
            if self._ours('volume', key, owner) is not None:
                return base.ensured(False)
            if self._store.get('pool', pool) is None:
                raise exceptions.DriverError(
                    driver=DRIVER, action='create volume %s' % key,
                    reason='storage pool %s does not exist' % pool)
            self._act('create volume %s' % key)
            data = {'pool': pool, 'capacity': base.whole_sectors(capacity),
                    'format': fmt}
            if source and source.get('backing'):
                data['backing'] = source.get('path')
            self._store.put('volume', key, owner, data)
            return base.ensured(True)

    def volume_path(self, pool, name, owner):
        raise exceptions.DriverError(
            driver=DRIVER, action='serve volume %s' % self._key(pool, name),
            reason='a simulated volume holds no data to copy')

    def existing_volumes(self, pool, names):
        found = {}
        for name in names:
            thing = self._store.get('volume', self._key(pool, name))
            found[name] = None if thing is None else dict(
                self._info(thing[1]), owner=thing[0])
        return found

    def remove_volume(self, pool, name, owner):
        key = self._key(pool, name)
        return self._remove('volume', key, owner, 'remove volume %s' % key)

    @staticmethod
    def _info(data):
        return {key: data[key] for key in ('capacity', 'format', 'backing')
                if key in data}

    def volume_info(self, pool, name, owner):
        found = self._ours('volume', self._key(pool, name), owner)
        return None if found is None else self._info(found[1])

    def volume_infos(self, pool, names, owner):
        infos = {}
        for name in names:
            try:
                infos[name] = self.volume_info(pool, name, owner)
            except exceptions.ResourceConflict:
                infos[name] = states.PART_FOREIGN
        return infos

    def resize_volume(self, pool, name, capacity, owner):
        key = self._key(pool, name)
        with self._store.lock:
            found = self._ours('volume', key, owner)
            if found is None:
                raise exceptions.DriverError(
                    driver=DRIVER, action='resize volume %s' % key,
                    reason='it does not exist')
            mark, data = found
            capacity = base.whole_sectors(capacity)
            if data['capacity'] > capacity:
                raise exceptions.ResourceConflict(
                    kind='simulated volume', name=key, owner=owner,
                    reason='it is larger than %d bytes' % capacity)
            if data['capacity'] == capacity:
                return False
            self._act('resize volume %s' % key)
            self._store.put('volume', key, mark,
                            dict(data, capacity=capacity))
            return True

    def ensure_domain(self, domain, owner):
        name = domain['name']
        with self._store.lock:
            found = self._ours('domain', name, owner)
            if found is not None and found[1]['domain'] == domain:
                return base.ensured(False)
            self._act('define domain %s' % name)
            state = found[1]['state'] if found else SHUT_OFF
            self._store.put('domain', name, owner,
                            {'domain': domain, 'state': state})
            return base.ensured(found is None, changed=True)

    def remove_domain(self, name, owner):
        return self._remove('domain', name, owner,
                            'undefine domain %s' % name)

    def domain_changes(self, domain, owner):
        found = self._ours('domain', domain['name'], owner)
        if found is None:
            return None
        defined = found[1]['domain']
        return ['%s differs' % key
                for key in sorted(set(domain) | set(defined))
                if domain.get(key) != defined.get(key)]

    def domains_changes(self, domains, owner):
        changes = {}
        for domain in domains:
            try:
                changes[domain['name']] = self.domain_changes(domain, owner)
            except exceptions.ResourceConflict:
                changes[domain['name']] = states.PART_FOREIGN
        return changes

    def check_domain(self, name, owner):
        if self._ours('domain', name, owner) is None:
            raise exceptions.DriverError(
                driver=DRIVER, action='check domain %s' % name,
                reason='it is not defined')

    def _power(self, name, owner, state):
        with self._store.lock:
            found = self._ours('domain', name, owner)
            if found is None:
                raise exceptions.DriverError(
                    driver=DRIVER, action='power domain %s' % name,
                    reason='it is not defined')
            mark, data = found
            if data['state'] == state:
                return False
            self._act('power domain %s' % name)
            self._store.put('domain', name, mark, dict(data, state=state))
            return True

    def start_domain(self, name, owner):
        return self._power(name, owner, RUNNING)

    def stop_domain(self, name, owner):
        return self._power(name, owner, SHUT_OFF)

    def domain_state(self, name):
        found = self._store.get('domain', name)
        return None if found is None else found[1]['state']

    def marked(self):
        return (self._marked('domain', domain=('state',))
                + self._marked('pool', pool=('path', 'pool_type',
                                             'devices'))
                + self._marked('volume', volume=('pool',)))

    def remove_nvram(self, name, owner):
        """Simulated domains have no NVRAM file."""
        return False


def _mac(name):
    """A stable, locally administered MAC for bridge ``name``."""
    digest = hashlib.sha256(name.encode()).digest()[:5]
    return ':'.join('%02x' % b for b in b'\x02' + digest)


class FakeNetworkDriver(_Fake, base.NetworkDriver):
    """Bridges, uplinks and ports that exist in the store only."""

    KIND = 'network'

    def __init__(self, conf):
        super().__init__(conf)
        self._open(conf)

    def ensure_bridge(self, name, owner):
        with self._store.lock:
            if self._ours('bridge', name, owner) is not None:
                return base.ensured(False, mac=_mac(name))
            self._act('create bridge %s' % name)
            self._store.put('bridge', name, owner, {})
            return base.ensured(True, mac=_mac(name))

    def remove_bridge(self, name, owner):
        with self._store.lock:
            if self._ours('bridge', name, owner) is None:
                return False
            ports = [port for port, _, data in self._store.items('port')
                     if data['master'] == name]
            if ports:
                raise exceptions.DriverError(
                    driver=DRIVER, action='remove bridge %s' % name,
                    reason='ports %s are still in it' % ', '.join(ports))
            if self._store.get('uplink', name) is not None:
                self._remove('uplink', name, owner,
                             'remove the uplink of %s' % name)
            return self._remove('bridge', name, owner,
                                'remove bridge %s' % name)

    def ensure_uplink(self, bridge, source, veth_names, owner):
        with self._store.lock:
            if self._ours('bridge', bridge, owner) is None:
                raise exceptions.DriverError(
                    driver=DRIVER, action='connect bridge %s' % bridge,
                    reason='it does not exist')
            found = self._ours('uplink', bridge, owner)
            if found is not None and found[1]['source'] == source:
                return base.ensured(False)
            if (self._store.get('bridge', source) is None
                    and not os.path.exists('/sys/class/net/%s' % source)):
                raise exceptions.InterfaceNotFound(name=source,
                                                   physnet=bridge)
            self._act('connect bridge %s to %s' % (bridge, source))
            self._store.put('uplink', bridge, owner, {'source': source})
            return base.ensured(True)

    def remove_uplink(self, bridge, source, veth_names, owner):
        return self._remove('uplink', bridge, owner,
                            'disconnect bridge %s' % bridge)

    def ensure_port(self, bridge, name, owner):
        with self._store.lock:
            found = self._ours('port', name, owner)
            if found is not None and found[1]['master'] == bridge:
                return base.ensured(False)
            if self._ours('bridge', bridge, owner) is None:
                raise exceptions.DriverError(
                    driver=DRIVER, action='add port %s' % name,
                    reason='bridge %s does not exist' % bridge)
            self._act('add port %s to %s' % (name, bridge))
            self._store.put('port', name, owner, {'master': bridge})
            return base.ensured(found is None, changed=True)

    def remove_port(self, name, owner):
        return self._remove('port', name, owner, 'remove port %s' % name)

    def port_changes(self, ports, owner):
        changes = {}
        for port in ports:
            found = self._store.get('port', port['tap'])
            if found is None:
                changes[port['tap']] = None
            elif not tenks_names.owns(owner, found[0]):
                changes[port['tap']] = states.PART_FOREIGN
            else:
                changes[port['tap']] = (
                    [] if found[1]['master'] == port['bridge']
                    else ['in bridge %s' % found[1]['master']])
        return changes

    def bridge_changes(self, names, owner):
        changes = {}
        for name in names:
            found = self._store.get('bridge', name)
            changes[name] = (None if found is None
                             else [] if tenks_names.owns(owner, found[0])
                             else states.PART_FOREIGN)
        return changes

    def remove_veth(self, name, owner):
        """Simulated uplinks leave no veth behind."""
        return False

    def marks(self, names):
        return {name: found[0] for name in names
                for found in [self._store.get('bridge', name)
                              or self._store.get('port', name)]
                if found is not None}

    def marked(self):
        ports = {}
        for name, _, data in self._store.items('port'):
            ports.setdefault(data['master'], []).append(name)
        return ([dict(bridge, ports=ports.get(bridge['name'], []),
                      master=None)
                 for bridge in self._marked('bridge')]
                + self._marked('port', port=('master',)))


class FakeBmcDriver(_Fake, base.BmcDriver):
    """IPMI BMCs that exist in the store only: nothing listens."""

    KIND = 'bmc'

    def __init__(self, conf):
        super().__init__(conf)
        self._open(conf)

    @staticmethod
    def _secret(domain, username, password):
        """What the store keeps of the credentials: never the password."""
        return hashlib.sha256(('%s\0%s\0%s' % (domain, username, password))
                              .encode()).hexdigest()

    def _wanted(self, domain, address, port, username, password):
        return {'address': address, 'port': port, 'username': username,
                'secret': self._secret(domain, username, password),
                'status': RUNNING}

    def ensure_bmc(self, domain, address, port, username, password,
                   owner):
        wanted = self._wanted(domain, address, port, username, password)
        with self._store.lock:
            found = self._ours('bmc', domain, owner)
            if found is not None and found[1] == wanted:
                return base.ensured(False)
            for name, _, data in self._store.items('bmc'):
                if name != domain and (data['address'], data['port']) == (
                        address, port):
                    raise exceptions.PortInUse(port=port, address=address)
            self._act('create the BMC of %s' % domain)
            self._store.put('bmc', domain, owner, wanted)
            return base.ensured(found is None, changed=True)

    def remove_bmc(self, domain, owner):
        with self._store.lock:
            if self._store.get('bmc-fault', domain) is not None and (
                    self._ours('bmc', domain, owner) is not None):
                self._store.delete('bmc-fault', domain)
            return self._remove('bmc', domain, owner,
                                'remove the BMC of %s' % domain)

    def set_fault(self, domain, owner, fault):
        with self._store.lock:
            found = self._ours('bmc', domain, owner)
            if found is None and fault is not None:
                raise exceptions.DriverError(
                    driver=DRIVER, action='fault the BMC of %s' % domain,
                    reason='the domain has no IPMI BMC here')
            had = self._store.get('bmc-fault', domain)
            if (had and had[1]) == fault:
                return False
            if fault is None:
                self._store.delete('bmc-fault', domain)
            else:
                self._store.put('bmc-fault', domain, owner, fault)
            return True

    def list_bmcs(self):
        return [{'domain': name, 'address': data['address'],
                 'port': data['port'], 'status': data['status']}
                for name, _, data in self._store.items('bmc')]

    def marked(self):
        return self._marked('bmc', bmc=('address', 'port'))

    def daemons(self):
        """No process serves simulated BMCs."""
        return []

    def stop_orphans(self, directory):
        return []

    def bmc_changes(self, bmcs, owner):
        changes = {}
        for domain, bmc in bmcs.items():
            found = self._store.get('bmc', domain)
            if found is None:
                changes[domain] = None
            elif not tenks_names.owns(owner, found[0]):
                changes[domain] = states.PART_FOREIGN
            else:
                wanted = self._wanted(domain, **bmc)
                changes[domain] = [key for key in sorted(wanted)
                                   if found[1][key] != wanted[key]]
        return changes


class FakeRedfishDriver(sushy.SushyDriver):
    """The sushy-tools driver's emulators, serving simulated systems
    (sushy-tools' fake systems driver) instead of libvirt domains."""

    def _settings(self, path, address, port):
        return dict(super()._settings(path, address, port), libvirt_uri=None,
                    systems_driver=DRIVER)

    def _config(self, path, settings):
        return super()._config(path, settings) + (
            'SUSHY_EMULATOR_FAKE_DRIVER = True\n'
            'SUSHY_EMULATOR_FAKE_SYSTEMS = []\n')

    def ensure_system(self, owner, domain, system_id, address, port,
                      username, password):
        simulate(self.conf, 'serve the Redfish system of %s' % domain)
        return super().ensure_system(owner, domain, system_id, address,
                                     port, username, password)
