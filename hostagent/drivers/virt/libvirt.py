"""Virtualisation driver for libvirt: dir and logical (LVM) pools,
volumes and domains."""

import collections
import contextlib
import errno
import functools
import glob
import os
import re
import shutil
import tempfile
import threading
import urllib.parse
import uuid
from concurrent import futures
from xml.etree import ElementTree as ET

import libvirt
from oslo_log import log as logging

from hostagent.drivers import base
from hostagent.drivers.bmc import media
from hostagent.drivers.virt import firmware
from hostagent.drivers.virt import storage
from tenks import conf as tenks_conf
from tenks import exceptions
from tenks import fileutils
from tenks import names as tenks_names
from tenks import states

LOG = logging.getLogger(__name__)

OWNER_NS = 'https://opendev.org/openstack/tenks'
OWNER_TAG = '{%s}owner' % OWNER_NS
ET.register_namespace('tenks', OWNER_NS)
# Extended attribute with the owner of a pool's directory or a volume.
OWNER_XATTR = 'user.tenks.owner'
POOL_UUID_NS = uuid.UUID('5f0b3c52-8f59-4a8e-9a41-6c1d2b7e0a10')
# What a domain's NVRAM file in nvram_dir is called after: <domain>_VARS.fd.
NVRAM_SUFFIX = '_VARS.fd'
# libvirt calls in flight at once when reading many domains or volumes.
READERS = 4
# volume_infos: a volume made since the pool was listed.
UNLISTED = object()
# The socket libvirtd listens on unless told otherwise.
DEFAULT_SOCKET = '/run/libvirt/libvirt-sock'

# The words virsh uses for each state.
STATES = {
    libvirt.VIR_DOMAIN_NOSTATE: 'no state',
    libvirt.VIR_DOMAIN_RUNNING: 'running',
    libvirt.VIR_DOMAIN_BLOCKED: 'idle',
    libvirt.VIR_DOMAIN_PAUSED: 'paused',
    libvirt.VIR_DOMAIN_SHUTDOWN: 'in shutdown',
    libvirt.VIR_DOMAIN_SHUTOFF: 'shut off',
    libvirt.VIR_DOMAIN_CRASHED: 'crashed',
    libvirt.VIR_DOMAIN_PMSUSPENDED: 'pmsuspended',
}

# The NVRAM file is removed by Tenks, which checks its owner mark first.
UNDEFINE_FLAGS = (libvirt.VIR_DOMAIN_UNDEFINE_KEEP_NVRAM
                  | libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
                  | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
                  | libvirt.VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA)


def _ignore_error(ctx, err):
    """Keep libvirt from printing every error on stderr; we raise them."""


libvirt.registerErrorHandler(_ignore_error, None)

_EVENT_LOOP_LOCK = threading.Lock()
_event_loop_running = False


def _events():
    while True:
        libvirt.virEventRunDefaultImpl()


def _run_event_loop():
    """libvirt's default event loop, in a thread of its own, once per
    process: a connection's keepalive messages need one, registered
    before the connection opens."""
    global _event_loop_running
    with _EVENT_LOOP_LOCK:
        if not _event_loop_running:
            libvirt.virEventRegisterDefaultImpl()
            threading.Thread(target=_events, name='libvirt-events',
                             daemon=True).start()
            _event_loop_running = True


def _lookup(func, name, missing_code):
    """``func(name)``, or None when libvirt says ``missing_code``."""
    try:
        return func(name)
    except libvirt.libvirtError as e:
        if e.get_error_code() == missing_code:
            return None
        raise


def _daemon(uri, hostname, host_uuid):
    """The libvirt daemon ``uri`` reaches, named alike by every hostagent
    that reaches it: its driver and socket (as ``uri`` says, the default
    one left out) on its host (hostname and host UUID, as libvirt gives
    them)."""
    parts = urllib.parse.urlsplit(uri)
    socket = urllib.parse.parse_qs(parts.query).get('socket', [''])[0]
    if socket:
        socket = re.sub('^/var/run/', '/run/', os.path.normpath(socket))
    where = '%s://%s' % (parts.scheme.split('+')[0], parts.path)
    if socket and socket != DEFAULT_SOCKET:
        where += '?socket=%s' % socket
    return '%s on %s (host UUID %s)' % (where, hostname, host_uuid)


def _pool_uuid(name, owner):
    """The UUID of ``owner``'s pool ``name``: the pool's owner mark."""
    return str(uuid.uuid5(POOL_UUID_NS, '%s\n%s' % (owner, name)))


def _mark(path):
    """The owner in the extended attributes of ``path``, or None."""
    try:
        return os.getxattr(path, OWNER_XATTR,
                           follow_symlinks=False).decode()
    except OSError as e:
        if e.errno in (errno.ENODATA, errno.ENOTSUP, errno.EPERM):
            return None
        raise


def _marked_files(directory, directories=False):
    """[(name, mark)] of the files (``directories``: the directories) in
    ``directory`` that carry a Tenks owner mark."""
    found = []
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return found
    for entry in entries:
        if not (entry.is_dir(follow_symlinks=False) if directories
                else entry.is_file(follow_symlinks=False)):
            continue
        try:
            mark = _tenks_mark([_mark(entry.path)])
        except FileNotFoundError:
            continue  # removed since the listing
        if mark:
            found.append((entry.name, mark))
    return found


def _deployment_volumes(pool, path, owner, logical):
    """The names of the volumes of ``owner``'s deployment (whichever of
    its hostagents marked them) in a pool: the files of its directory
    ``path``, or the logical volumes of its group ``pool``."""
    if logical:
        found = [(name, _tenks_mark(tags))
                 for name, tags in storage.lv_tags(pool).items()]
    else:
        found = _marked_files(path)
    deployment = tenks_names.deployment_mark(owner)
    return [name for name, mark in found
            if mark and tenks_names.deployment_mark(mark) == deployment]


def _remove_marked_file(path, owner):
    """Remove the file at ``path``, found carrying the mark of
    ``owner``'s deployment, unless it has gone since."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
        LOG.info('Removed volume file %s of %s, in a storage pool libvirt '
                 'no longer defines', path, owner)


def _set_mark(path, owner):
    os.setxattr(path, OWNER_XATTR, owner.encode(), follow_symlinks=False)


def _check_mark(path, kind, name, owner):
    """Raise ResourceConflict unless ``path`` carries ``owner``."""
    mark = _mark(path)
    if not tenks_names.owns(owner, mark):
        raise exceptions.ResourceConflict(
            kind=kind, name=name, owner=owner,
            reason='%s %s' % (path, 'has no Tenks owner mark' if mark is None
                              else 'belongs to %s' % mark))


def _tenks_mark(marks):
    """The first Tenks owner mark of ``marks`` (LVM tags, or an
    extended attribute's value or None), or None."""
    return next((mark for mark in marks if mark and mark.startswith(
        tenks_names.OWNER_PREFIX)), None)


def _tagged(tags, owner):
    """Whether the LVM ``tags`` of a group or volume carry ``owner``."""
    return any(tenks_names.owns(owner, tag) for tag in tags)


def _each(func, items):
    """[func(item) for item in items], READERS calls at once: a thousand
    libvirt calls one after the other each wait for libvirtd's answer."""
    if len(items) < 2:
        return [func(item) for item in items]
    with futures.ThreadPoolExecutor(READERS) as pool:
        return list(pool.map(func, items))


def _inactive_xml(dom):
    """The domain's defined XML, or None if it was undefined since it
    was listed."""
    try:
        return dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    except libvirt.libvirtError as e:
        if e.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
            raise
        return None


@functools.lru_cache(maxsize=8)
def _real_dir(path):
    """``path`` with its links resolved, once per directory: a domain
    inspected or defined checks its console log's directory against the
    configured one, and a thousand realpath calls took half a second."""
    return os.path.realpath(path)


def _real_file(path):
    """os.path.realpath(path), its directory resolved once (_real_dir):
    realpath looks at each part of the path, six lstat calls for each
    node's console log, a tenth of a second of a thousand-node
    inspection."""
    head, base = os.path.split(path)
    if base in ('', '.', '..') or os.path.islink(path):
        return os.path.realpath(path)
    return os.path.join(_real_dir(head), base)


def _disk_dev(index, prefix='vd'):
    """Target name of the disk at ``index``: vda, ..., vdz, vdaa, ..."""
    letters = ''
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord('a') + rest) + letters
    return prefix + letters


def _volume_words(facts):
    words = '%d bytes in format %s' % (facts['capacity'], facts['format'])
    if 'backing' in facts:
        words += ' on backing file %s' % facts['backing']
    return words


def _attr(element, path, name):
    found = element.find(path)
    return None if found is None else found.get(name)


def _machine(machine):
    """The family of a machine type: libvirt stores the versioned name
    (pc-q35-7.2) of the one asked for (q35), or of its default (pc)."""
    return 'q35' if machine and 'q35' in machine else 'pc'


def _guest_machines(caps_xml):
    """{domain type: {machine type: its canonical name}} of the x86_64
    guests of libvirt's capabilities ``caps_xml`` (an alias such as q35
    stands for a versioned type, pc-q35-7.2)."""
    machines = {}
    for arch in ET.fromstring(caps_xml).findall("guest/arch[@name='x86_64']"):
        common = arch.findall('machine')
        for dom in arch.findall('domain'):
            for m in dom.findall('machine') or common:
                machines.setdefault(dom.get('type'), {})[m.text] = (
                    m.get('canonical') or m.text)
    return machines


def _listed(machines):
    """Machine type names, aliases first, then the versioned ones."""
    return sorted(machines, key=lambda m: (machines[m] == m, m))


def _cpu_modes(conn, domain_type, machine=None):
    """The CPU modes libvirt supports for x86_64 domains of
    ``domain_type`` (on ``machine``, default its default): under TCG
    (qemu) host-passthrough is not one."""
    try:
        caps = conn.getDomainCapabilities(None, 'x86_64', machine,
                                          domain_type, 0)
    except libvirt.libvirtError:
        return []  # no such domain type here (kvm without /dev/kvm)
    return [mode.get('name') for mode in ET.fromstring(caps).findall(
        'cpu/mode') if mode.get('supported') == 'yes']


def _summary(xml, exact_machine=False):
    """The parts of a domain XML (a string, or its root element) that
    ensure_domain manages; the machine type's family, unless
    ``exact_machine`` (the node names one).

    Not the boot order: the BMC changes it when Ironic sets the boot
    device, and a re-run must not undo that. Not <bios useserial>
    either, which only domains defined since carry: adding it is not
    worth redefining (and powering off) a running node.
    """
    root = ET.fromstring(xml) if isinstance(xml, str) else xml
    devices = root.find('devices')
    cpu_mode = _attr(root, 'cpu', 'mode')
    loader = root.find('os/loader')
    nvram = root.find('os/nvram')
    return {
        'type': root.get('type'),
        'machine': (_attr(root, 'os/type', 'machine') if exact_machine
                    else _machine(_attr(root, 'os/type', 'machine'))),
        # libvirt spells out its default CPU (no <cpu>) as a custom one,
        # which Tenks never asks for.
        'cpu_mode': None if cpu_mode == 'custom' else cpu_mode,
        'loader': None if loader is None else (
            loader.text, loader.get('type'), loader.get('secure', 'no')),
        'nvram': None if nvram is None else (nvram.text,
                                             nvram.get('template')),
        'smm': _attr(root, 'features/smm', 'state'),
        'uuid': root.findtext('uuid'),
        'memory': (_attr(root, 'memory', 'unit'), root.findtext('memory')),
        'vcpus': root.findtext('vcpu'),
        # libvirt lists a domain's disks in its own order (CD-ROMs on
        # SATA after virtio disks, ...): by target.
        'disks': sorted(((d.get('type'), _attr(d, 'driver', 'type'),
                          _attr(d, 'source', 'pool'),
                          # The one disk without a volume: named for the
                          # phrases of _differences.
                          _attr(d, 'source', 'volume')
                          or 'virtual media drive',
                          _attr(d, 'target', 'dev'), d.get('device'))
                         for d in devices.findall('disk')),
                        key=lambda disk: disk[4] or ''),
        'nics': [(n.get('type'), _attr(n, 'mac', 'address'),
                  _attr(n, 'target', 'dev'), _attr(n, 'target', 'managed'),
                  _attr(n, 'model', 'type'))
                 for n in devices.findall('interface')],
        'serials': [(s.get('type'), _attr(s, 'log', 'file'))
                    for s in devices.findall('serial')],
        'on_poweroff': root.findtext('on_poweroff'),
    }


def _check_uuid(name, current, wanted):
    if current['uuid'] != wanted['uuid']:
        raise exceptions.DriverError(
            driver='libvirt', action='redefine domain %s' % name,
            reason='it exists with UUID %s, not %s; remove it first' % (
                current['uuid'], wanted['uuid']))


def _added_removed(what, current, wanted, key):
    """Phrases for the ``what`` (disks, NICs) added and removed, keyed by
    the field at ``key`` of each; one phrase if only settings differ."""
    old = [item[key] for item in current]
    new = [item[key] for item in wanted]
    phrases = ['%s added: %s' % (what, ', '.join(added))
               for added in [[k for k in new if k not in old]] if added]
    phrases += ['%s removed: %s' % (what, ', '.join(gone))
                for gone in [[k for k in old if k not in new]] if gone]
    return phrases or ['%s changed' % what]


def _differences(current, wanted):
    """What differs between two domain summaries, in words."""
    changes = []
    for key, new in wanted.items():
        old = current[key]
        if old == new:
            continue
        if key == 'memory':
            changes.append('memory %s -> %s MiB' % tuple(
                int(value) // 1024 for _, value in (old, new)))
        elif key == 'vcpus':
            changes.append('vcpus %s -> %s' % (old, new))
        elif key == 'disks':
            changes += _added_removed('disks', old, new, 3)
        elif key == 'nics':
            changes += _added_removed('NICs', old, new, 1)
        elif key == 'serials':
            changes.append('console log')
        elif key in ('loader', 'nvram'):
            changes.append('%s %s -> %s' % (key, old and old[0],
                                            new and new[0]))
        else:
            changes.append('%s %s -> %s' % (key, old, new))
    return changes


def _backing_store(disk, path, fmt):
    """Spell out the backing file of ``disk``, one the qemu user reads
    as it is: libvirt would otherwise give it to the qemu user when the
    domain starts, and (a read-only image, maybe shared) never give it
    back. The image is not Tenks' to change."""
    store = ET.SubElement(disk, 'backingStore', type='file')
    ET.SubElement(store, 'format', type=fmt)
    source = ET.SubElement(store, 'source', file=path)
    ET.SubElement(source, 'seclabel', model='dac', relabel='no')
    # The image has no backing file of its own (qemu-img reads it so).
    ET.SubElement(store, 'backingStore')


def _owner_mark(dom):
    """The owner in the domain's metadata, or None."""
    try:
        return ET.fromstring(dom.metadata(
            libvirt.VIR_DOMAIN_METADATA_ELEMENT, OWNER_NS)).text
    except libvirt.libvirtError as e:
        if e.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN_METADATA:
            raise
        return None


def _xml_owner_mark(root):
    """The owner in the metadata of a domain XML's root element, or
    None."""
    found = root.find('metadata/' + OWNER_TAG)
    return None if found is None else found.text


def _destroy(dom):
    """Power ``dom`` off at once; True if it was running."""
    if not dom.isActive():
        return False
    try:
        dom.destroy()
    except libvirt.libvirtError as e:
        # It stopped by itself in between.
        if e.get_error_code() != libvirt.VIR_ERR_OPERATION_INVALID:
            raise
        return False
    return True


class _Jobs:
    """Jobs that may run side by side (``shared``) and one that must run
    ``alone``, which waits for those running and goes before those
    that come after it."""

    def __init__(self):
        self._cond = threading.Condition()
        self._shared = 0
        self._alone = False
        self._waiting = 0

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            self._cond.wait_for(lambda: not (self._alone or self._waiting))
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self):
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not (self._alone or self._shared))
            self._waiting -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._alone = False
                self._cond.notify_all()


class LibvirtDriver(base.VirtDriver):
    """Pools, volumes and domains through one shared libvirt connection."""

    def __init__(self, conf):
        super().__init__(conf)
        self._conn = None
        self._conn_lock = threading.Lock()
        # The daemon the connection reaches (see _daemon), once read.
        self._daemon = None
        # Pool define/create/undefine of one name must not interleave.
        self._pool_lock = threading.Lock()
        # Per (pool, volume): libvirt fails to read a volume that another
        # thread is still building.
        self._volume_locks = collections.defaultdict(threading.Lock)
        # Per pool: its volume creations, and its refreshes.
        self._jobs = collections.defaultdict(_Jobs)
        self._volume_locks_lock = threading.Lock()

    @property
    def _uri(self):
        return self.conf.hostagent.libvirt_uri

    def _connection(self):
        """The shared connection, (re)opened when missing or dead.

        A dead one is dropped, never closed here: another thread may be
        inside a call on it still, and libvirt frees a closed connection
        under that call. libvirt-python closes it when its last user lets
        it go."""
        with self._conn_lock:
            if self._conn is not None and not self._alive(self._conn):
                self._conn = None
            if self._conn is None:
                self._daemon = None
                interval = self.conf.hostagent.libvirt_keepalive_interval
                if interval:
                    _run_event_loop()
                try:
                    self._conn = libvirt.open(self._uri)
                except libvirt.libvirtError as e:
                    raise exceptions.HypervisorUnavailable(
                        uri=self._uri, reason=e.get_error_message()) from e
                if interval:
                    self._keep_alive(interval)
            return self._conn

    def _keep_alive(self, interval):
        """A libvirtd that stops answering closes the connection after
        interval * libvirt_keepalive_count seconds, failing the calls
        that wait on it (libvirt's calls have no timeout of their own)."""
        try:
            self._conn.setKeepAlive(
                interval, self.conf.hostagent.libvirt_keepalive_count)
        except libvirt.libvirtError as e:
            # A driver libvirt runs in this process (test:///) has no
            # daemon to hang.
            LOG.debug('No keepalive on %s: %s', self._uri,
                      e.get_error_message())

    @staticmethod
    def _alive(conn):
        try:
            return conn.isAlive() == 1
        except libvirt.libvirtError:
            return False

    @contextlib.contextmanager
    def _libvirt(self, action):
        """Yield the connection; turn failures into Tenks errors."""
        conn = self._connection()
        try:
            yield conn
        except libvirt.libvirtError as e:
            reason = e.get_error_message()
            if not self._alive(conn):
                raise exceptions.HypervisorUnavailable(
                    uri=self._uri, reason=reason) from e
            raise exceptions.DriverError(
                driver='libvirt', action=action, reason=reason) from e
        except OSError as e:
            raise exceptions.DriverError(
                driver='libvirt', action=action, reason=str(e)) from e

    def facts(self):
        with self._libvirt('read hypervisor facts') as conn:
            version = conn.getLibVersion()
            info = conn.getInfo()
            # The host's MemTotal (/proc/meminfo): the node info's figure
            # is what its NUMA cells report, which can be a fraction of it
            # and vary between readings.
            memory_kib = conn.getMemoryStats(
                libvirt.VIR_NODE_MEMORY_STATS_ALL_CELLS)['total']
            caps = conn.getCapabilities()
            daemon = self._daemon
            if daemon is None:
                daemon = self._daemon = _daemon(
                    self._uri, conn.getHostname(),
                    ET.fromstring(caps).findtext('host/uuid'))
            machines = _guest_machines(caps)
            cpu_modes = {kind: _cpu_modes(conn, kind) for kind in machines}
        return {
            'libvirt_version': '%d.%d.%d' % (
                version // 1000000, version // 1000 % 1000, version % 1000),
            'libvirt_daemon': daemon,
            'cpus': info[2],
            'memory_mb': memory_kib // 1024,
            'firmware': ['bios'] + sorted(self._firmware()),
            'machines': {kind: _listed(names)
                         for kind, names in machines.items()},
            'cpu_modes': cpu_modes,
        }

    @staticmethod
    def _resolved(conn, domain, guests=None):
        """``domain`` with its machine type's canonical name; DriverError
        when this hypervisor's libvirt lacks its machine type or CPU
        mode. ``guests``: _guest_machines of ``conn``, if read already."""
        machine = domain.get('machine')
        cpu_mode = domain.get('cpu_mode')
        if not machine and not cpu_mode:
            return domain
        kind = domain['domain_type']
        if guests is None:
            guests = _guest_machines(conn.getCapabilities())
        machines = guests.get(kind, {})
        action = 'define domain %s' % domain['name']
        if machine and machine not in machines:
            raise exceptions.DriverError(
                driver='libvirt', action=action,
                reason='libvirt has no machine type %s for %s domains '
                       '(it has: %s)' % (machine, kind, ', '.join(
                           _listed(machines)) or 'none'))
        machine = machines.get(machine)
        if cpu_mode:
            modes = _cpu_modes(conn, kind, machine)
            if cpu_mode not in modes:
                raise exceptions.DriverError(
                    driver='libvirt', action=action,
                    reason='libvirt does not support CPU mode %s for %s '
                           'domains (it supports: %s)' % (
                               cpu_mode, kind, ', '.join(modes) or 'none'))
        return dict(domain, machine=machine)

    def _firmware(self):
        return firmware.find(self.conf.hostagent.firmware_dirs)

    # Pools and volumes

    def _pool_conflict(self, conn, name, path, owner, logical=False):
        """Raise ResourceConflict unless every pool called ``name`` or at
        ``path``, and the directory at ``path`` (the volume group
        ``name`` of a logical pool), is ``owner``'s.

        Returns our pool ``name``, or None when it is not defined.
        """
        ours = None
        for pool in conn.listAllStoragePools():
            # Another hostagent of this libvirt may remove a pool of its
            # own between the listing and this look at it.
            xml = _lookup(lambda p: p.XMLDesc(), pool,
                          libvirt.VIR_ERR_NO_STORAGE_POOL)
            if xml is None:
                continue
            at = ET.fromstring(xml).findtext('target/path')
            at = os.path.normpath(at) if at else None
            if pool.name() != name and at != path:
                continue
            if pool.name() != name:
                raise exceptions.ResourceConflict(
                    kind='Storage pool', name=pool.name(), owner=owner,
                    reason='it uses %s, which pool %s needs' % (path, name))
            if at != path:
                raise exceptions.ResourceConflict(
                    kind='Storage pool', name=name, owner=owner,
                    reason='its target is %s, not %s' % (at, path))
            if pool.UUIDString() not in {
                    _pool_uuid(name, owner),
                    _pool_uuid(name, tenks_names.deployment_mark(owner))}:
                mark = (_mark(path) if not logical and os.path.isdir(path)
                        else None)
                raise exceptions.ResourceConflict(
                    kind='Storage pool', name=name, owner=owner,
                    reason=('it belongs to %s' % mark if mark
                            else 'it was not made by Tenks for this owner'))
            ours = pool
        if logical:
            tags = storage.vg_tags(name)
            if tags is not None and not _tagged(tags, owner):
                raise exceptions.ResourceConflict(
                    kind='Volume group', name=name, owner=owner,
                    reason='it has %s' % (
                        'tags %s' % ', '.join(tags) if tags
                        else 'no Tenks owner tag'))
        elif os.path.lexists(path):
            _check_mark(path, 'Directory of storage pool', name, owner)
        return ours

    def _fit_devices(self, name, devices, owner, wipe=()):
        """The resolved paths (os.path.realpath) of ``devices`` for the
        volume group of pool ``name``, and of those of them in ``wipe``;
        DeviceRefused naming each device it may not take and why
        (storage.device_problem): only those in ``wipe`` may hold data,
        and a physical volume of the group, if it is ``owner``'s, is
        already the pool's."""
        tags = storage.vg_tags(name)
        group = name if tags is not None and _tagged(tags, owner) else None
        wiped = {os.path.realpath(device) for device in wipe}
        resolved, problems = [], []
        for device in devices:
            real = os.path.realpath(device)
            problem = ('is listed twice' if real in resolved else
                       storage.device_problem(real, real in wiped, group))
            if problem:
                problems.append('%s %s' % (
                    device if real == device else '%s (%s)' % (device, real),
                    problem))
            resolved.append(real)
        if problems:
            raise exceptions.DeviceRefused(pool=name,
                                           problems='; '.join(problems))
        return resolved, [device for device in resolved if device in wiped]

    def check_pool_devices(self, name, devices, owner, wipe=()):
        """See base."""
        with self._pool_lock:
            self._fit_devices(name, devices, owner, wipe)

    @staticmethod
    def _pool_xml(name, path, owner, pool_type, devices):
        root = ET.Element('pool', type=pool_type)
        ET.SubElement(root, 'name').text = name
        ET.SubElement(root, 'uuid').text = _pool_uuid(name, owner)
        if pool_type == 'logical':
            source = ET.SubElement(root, 'source')
            for device in devices:
                ET.SubElement(source, 'device', path=device)
            ET.SubElement(source, 'name').text = name
            ET.SubElement(source, 'format', type='lvm2')
        target = ET.SubElement(root, 'target')
        ET.SubElement(target, 'path').text = path
        if pool_type != 'logical':
            perms = ET.SubElement(target, 'permissions')
            ET.SubElement(perms, 'mode').text = '0711'
        return ET.tostring(root, encoding='unicode')

    def ensure_pool(self, name, path, owner, pool_type='dir', devices=(),
                    wipe=()):
        """A pool, active and autostarted.

        libvirt pools have no metadata: the UUID of ours is derived from
        the owner and the name. A dir pool's directory (mode 0711, which
        lets the qemu user reach the volumes) carries the owner in its
        extended attribute user.tenks.owner. A logical pool is an LVM
        volume group ``name`` that libvirt builds on ``devices``, tagged
        with the owner. They are checked first (see check_pool_devices):
        those of ``wipe`` that hold data are wiped, none other is.
        """
        logical = pool_type == 'logical'
        path = os.path.normpath(os.path.abspath(path))
        with self._pool_lock, \
                self._libvirt('set up storage pool %s' % name) as conn:
            pool = self._pool_conflict(conn, name, path, owner, logical)
            build = logical and storage.vg_tags(name) is None
            if build:
                # Checked again, as they are now: the deploy's check was
                # made before its flow began.
                devices, wiped = self._fit_devices(name, devices, owner,
                                                   wipe)
            made_dir = defined = built = changed = False
            try:
                if not logical and not os.path.isdir(path):
                    os.makedirs(path)
                    made_dir = True
                    os.chmod(path, 0o711)
                    _set_mark(path, owner)
                if pool is None:
                    pool = conn.storagePoolDefineXML(self._pool_xml(
                        name, path, owner, pool_type, devices))
                    defined = True
                    pool.setAutostart(1)
                if build:
                    for device in wiped:
                        LOG.warning('Wiping %s for storage pool %s, as its '
                                    'spec allows', device, name)
                        storage.wipe_device(device)
                    pool.build(libvirt.VIR_STORAGE_POOL_BUILD_NO_OVERWRITE)
                    built = True
                    storage.tag_vg(name, owner)
                if not pool.isActive():
                    pool.create()
                    changed = True
            except Exception:
                # Undo what this call made, and only that.
                if defined:
                    with contextlib.suppress(libvirt.libvirtError):
                        if pool.isActive():
                            pool.destroy()
                        if built:
                            pool.delete(0)
                        pool.undefine()
                if made_dir:
                    with contextlib.suppress(OSError):
                        os.rmdir(path)
                raise
        return base.ensured(defined, changed or made_dir or built)

    def remove_pool(self, name, path, owner, pool_type='dir', devices=()):
        """Remove the pool; a dir pool's directory too, but only when
        empty; a logical pool's volume group and physical volumes.

        Refused while libvirt's pool holds volumes of ``owner``'s
        deployment (a node whose removal failed): they would be left
        where no request reaches them, or go with the group, while their
        records stay. Once libvirt defines no such pool (undefined by
        hand, or by a Tenks before this check), nothing else can reach
        the files of the deployment in its directory: they go with it.
        """
        logical = pool_type == 'logical'
        path = os.path.normpath(os.path.abspath(path))
        with self._pool_lock, \
                self._libvirt('remove storage pool %s' % name) as conn:
            changed = False
            pool = self._pool_conflict(conn, name, path, owner, logical)
            held = _deployment_volumes(name, path, owner, logical)
            if pool is not None and held:
                raise exceptions.DriverError(
                    driver='libvirt', action='remove storage pool %s' % name,
                    reason='it still holds volume(s) %s of this deployment: '
                           'remove them (their nodes) first'
                           % ', '.join(held))
            if not logical:
                for volume in held:
                    _remove_marked_file(os.path.join(path, volume), owner)
                    changed = True
            # What this agent noted of the pool's volumes (_intent): none
            # is being made once the pool goes.
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(self._intent(name, '-')))
            if pool is not None:
                if pool.isActive():
                    pool.destroy()
                if logical and storage.vg_tags(name) is not None:
                    # vgremove and pvremove of its devices.
                    pool.delete(0)
                pool.undefine()
                changed = True
            if logical:
                # A group left by a request that failed half-way.
                if storage.vg_tags(name) is not None:
                    storage.remove_vg(name, list(devices))
                    changed = True
                return changed
            try:
                os.rmdir(path)
                changed = True
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno != errno.ENOTEMPTY:
                    raise
                LOG.warning('Left directory %s of storage pool %s in place: '
                            'it is not empty', path, name)
        return changed

    def _volume_lock(self, pool, name):
        with self._volume_locks_lock:
            return self._volume_locks[(pool, name)]

    def _pool_jobs(self, pool):
        with self._volume_locks_lock:
            return self._jobs[pool]

    def _refresh(self, lvpool, pool):
        """Have libvirt scan ``lvpool`` again, while it creates no volume
        in it: it refuses ("pool has asynchronous jobs running")."""
        with self._pool_jobs(pool).alone():
            lvpool.refresh(0)

    def _owned_volume(self, lvpool, pool, name, owner):
        """Our volume ``name`` in ``lvpool``, or None when there is none.

        A file of that name in a dir pool's directory that libvirt has
        not listed yet counts too, and so does such a logical volume of
        a logical pool's group; one libvirt lists that is gone (deleted
        by hand) does not, and the pool is scanned again so that it can
        be made again. Raises ResourceConflict when it is not
        ``owner``'s.
        """
        root = ET.fromstring(lvpool.XMLDesc())
        vol = _lookup(lvpool.storageVolLookupByName, name,
                      libvirt.VIR_ERR_NO_STORAGE_VOL)
        kind = 'Volume %s in storage pool' % name
        if root.get('type') == 'logical':
            vg = root.findtext('source/name')
            tags = storage.lv_tags(vg).get(name)
            if tags is None:
                if vol is not None:
                    self._refresh(lvpool, pool)
                return None
            if not _tagged(tags, owner):
                raise exceptions.ResourceConflict(
                    kind=kind, name=pool, owner=owner,
                    reason='logical volume %s/%s has %s' % (
                        vg, name, 'tags %s' % ', '.join(tags) if tags
                        else 'no Tenks owner tag'))
        else:
            path = os.path.join(root.findtext('target/path'), name)
            if not os.path.lexists(path):
                if vol is not None:
                    self._refresh(lvpool, pool)
                return None
            _check_mark(vol.path() if vol else path, kind, pool, owner)
        if vol is None:
            # Ours, made since the pool's last scan.
            self._refresh(lvpool, pool)
            vol = lvpool.storageVolLookupByName(name)
        return vol

    @staticmethod
    def _set_volume_mark(lvpool, vol, owner):
        root = ET.fromstring(lvpool.XMLDesc())
        if root.get('type') == 'logical':
            storage.tag_lv(root.findtext('source/name'), vol.name(), owner)
        else:
            _set_mark(vol.path(), owner)

    @staticmethod
    def _volume_facts(vol):
        """{'capacity', 'format'}, and 'backing' (the path of its
        backing file) when it has one."""
        root = ET.fromstring(vol.XMLDesc())
        # A logical volume is raw; libvirt gives it no format. The
        # capacity is in bytes (libvirt's unit for it in a volume's XML).
        facts = {'capacity': int(root.findtext('capacity')),
                 'format': _attr(root, 'target/format', 'type') or 'raw'}
        backing = root.findtext('backingStore/path')
        if backing:
            facts['backing'] = backing
        return facts

    def _image_dir(self):
        """Where images fetched over http(s) wait to be copied."""
        return os.path.join(self.conf.state_dir, 'images')

    def _intent(self, pool, name):
        """The file naming the owner volume ``name`` of ``pool`` is being
        made for: written before the volume exists, removed once it
        carries its mark.

        Making a volume takes long (qemu-img, an image copy) and its mark
        comes last, so that a volume with a mark is whole: an agent killed
        in between leaves an unmarked volume, which no request would
        touch without this file (see _settle).
        """
        return os.path.join(self.conf.state_dir, 'making', pool, name)

    def _unmarked_volume(self, lvpool, name):
        """Whether volume ``name`` of ``lvpool`` exists with no owner mark
        at all."""
        root = ET.fromstring(lvpool.XMLDesc())
        if root.get('type') == 'logical':
            tags = storage.lv_tags(root.findtext('source/name')).get(name)
            return tags is not None and not any(
                tag.startswith(tenks_names.OWNER_PREFIX) for tag in tags)
        path = os.path.join(root.findtext('target/path'), name)
        return os.path.lexists(path) and _mark(path) is None

    def _making_for(self, pool, name):
        """The owner volume ``name`` of ``pool`` was being made for, or
        None."""
        try:
            with open(self._intent(pool, name)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _interrupted(self, lvpool, pool, name, owner):
        """Whether volume ``name`` is one this agent began to make for
        ``owner`` and never finished."""
        return (tenks_names.owns(owner, self._making_for(pool, name))
                and self._unmarked_volume(lvpool, name))

    def _settle(self, lvpool, pool, name, owner):
        """Delete a volume whose making for ``owner`` was interrupted (it
        is half made: it is made again), and forget that making. Another
        owner's making is left to that owner."""
        if not tenks_names.owns(owner, self._making_for(pool, name)):
            return
        if self._unmarked_volume(lvpool, name):
            self._refresh(lvpool, pool)
            vol = _lookup(lvpool.storageVolLookupByName, name,
                          libvirt.VIR_ERR_NO_STORAGE_VOL)
            if vol is not None:
                vol.delete()
            LOG.warning('Deleted volume %s of storage pool %s: its making '
                        'was interrupted before it got its mark', name, pool)
        os.unlink(self._intent(pool, name))

    def _begin_making(self, pool, name, owner):
        path = self._intent(pool, name)
        fileutils.private_dir(os.path.dirname(path))
        with open(path, 'w') as f:
            f.write(owner)

    def ensure_volume(self, pool, name, capacity, fmt, owner, source=None):
        """See base; ``capacity`` is rounded up to whole 512-byte sectors.

        The volume carries the owner: in a dir pool its file's extended
        attribute user.tenks.owner, in a logical pool an LVM tag of the
        logical volume. An existing volume of another size, format or
        backing file: ResourceConflict. ``source``: the image the volume
        is made from, {'path' or 'url', 'backing'}: a copy of it, or
        (``backing``, a local path) a qcow2 volume whose backing file it
        is; an image larger than ``capacity``: DriverError.
        """
        # qemu-img rounds sizes up to whole sectors; so do we, for raw too,
        # so that a second call finds the size it asked for.
        capacity = base.whole_sectors(capacity)
        root = ET.Element('volume')
        ET.SubElement(root, 'name').text = name
        ET.SubElement(root, 'capacity', unit='bytes').text = str(capacity)
        ET.SubElement(root, 'allocation').text = '0'
        target = ET.SubElement(root, 'target')
        backing = source is not None and source.get('backing')
        if backing:
            info = storage.image_info(source['path'])
            storage.check_fits(source['path'], info, name, capacity)
            if info['backing']:
                # The domain spells out a chain of one (_backing_store).
                raise exceptions.DriverError(
                    driver='libvirt', action='make volume %s on backing '
                    'file %s' % (name, source['path']),
                    reason='that image has a backing file of its own (%s): '
                           'use an image without one' % info['backing'])
            store = ET.SubElement(root, 'backingStore')
            ET.SubElement(store, 'path').text = source['path']
            ET.SubElement(store, 'format', type=info['format'])
        action = 'create volume %s in storage pool %s' % (name, pool)
        with self._volume_lock(pool, name), self._libvirt(action) as conn:
            lvpool = conn.storagePoolLookupByName(pool)
            if ET.fromstring(lvpool.XMLDesc()).get('type') != 'logical':
                ET.SubElement(target, 'format', type=fmt)
                ET.SubElement(ET.SubElement(target, 'permissions'),
                              'mode').text = '0600'
            self._settle(lvpool, pool, name, owner)
            vol = self._owned_volume(lvpool, pool, name, owner)
            if vol is None:
                self._begin_making(pool, name, owner)
                with contextlib.ExitStack() as stack:
                    image = None
                    if source is not None and not backing:
                        image = stack.enter_context(storage.local_image(
                            source, self._image_dir()))
                        info = storage.image_info(image)
                        storage.check_fits(image, info, name, capacity)
                    with self._pool_jobs(pool).shared():
                        vol = lvpool.createXML(
                            ET.tostring(root, encoding='unicode'))
                    try:
                        if image is not None:
                            storage.copy_image(image, info['format'],
                                               vol.path(), fmt)
                        self._set_volume_mark(lvpool, vol, owner)
                    except Exception:
                        with contextlib.suppress(libvirt.libvirtError):
                            vol.delete()
                        raise
                    finally:
                        os.unlink(self._intent(pool, name))
                return base.ensured(True)
            current = self._volume_facts(vol)
        wanted = {'capacity': capacity, 'format': fmt}
        if backing:
            wanted['backing'] = source['path']
        if current != wanted:
            raise exceptions.ResourceConflict(
                'Volume %s in storage pool %s already exists with %s, not '
                '%s' % (name, pool, _volume_words(current),
                        _volume_words(wanted)))
        return base.ensured(False)

    def volume_path(self, pool, name, owner):
        action = 'read volume %s in storage pool %s' % (name, pool)
        with self._volume_lock(pool, name), self._libvirt(action) as conn:
            lvpool = conn.storagePoolLookupByName(pool)
            vol = self._owned_volume(lvpool, pool, name, owner)
            if vol is None:
                raise exceptions.DriverError(driver='libvirt', action=action,
                                             reason='there is no such volume')
            return vol.path()

    def volume_info(self, pool, name, owner):
        action = 'read volume %s in storage pool %s' % (name, pool)
        with self._volume_lock(pool, name), self._libvirt(action) as conn:
            lvpool = conn.storagePoolLookupByName(pool)
            if self._interrupted(lvpool, pool, name, owner):
                return None
            vol = self._owned_volume(lvpool, pool, name, owner)
            if vol is None:
                return None
            return self._volume_facts(vol)

    def volume_infos(self, pool, names, owner):
        """See base; one listing of the pool, each volume read under its
        lock (libvirt fails to read a volume still being built)."""
        action = 'read volumes of storage pool %s' % pool
        with self._libvirt(action) as conn:
            lvpool = _lookup(conn.storagePoolLookupByName, pool,
                             libvirt.VIR_ERR_NO_STORAGE_POOL)
            if lvpool is None or not lvpool.isActive():
                return dict.fromkeys(names)
            root = ET.fromstring(lvpool.XMLDesc())
            if root.get('type') == 'logical':
                tags = storage.lv_tags(root.findtext('source/name'))
                marks = {name: None if name not in tags
                         else _tagged(tags[name], owner) for name in names}
            else:
                directory = root.findtext('target/path')
                paths = {name: os.path.join(directory, name)
                         for name in names}
                marks = {name: None if not os.path.lexists(path)
                         else tenks_names.owns(owner, _mark(path))
                         for name, path in paths.items()}
            listed = {vol.name(): vol for vol in lvpool.listAllVolumes()}

            def info(name):
                with self._volume_lock(pool, name):
                    vol = listed.get(name)
                    if marks[name] is None or (
                            not marks[name] and self._interrupted(
                                lvpool, pool, name, owner)):
                        # Missing, or half made (made again by ensure).
                        return None
                    if not marks[name]:
                        return states.PART_FOREIGN
                    if vol is None:
                        return UNLISTED
                    return self._volume_facts(vol)

            infos = dict(zip(names, _each(info, names), strict=True))
        # Ours, made since the listing: read alone.
        for name, found in infos.items():
            if found is UNLISTED:
                infos[name] = self.volume_info(pool, name, owner)
        return infos

    def existing_volumes(self, pool, names):
        """See base. Tenks makes dir and logical pools: there the marks
        are read as for its own volumes (extended attributes, LVM tags),
        and a volume whose file or logical volume is gone is absent,
        though libvirt lists it until it scans the pool again."""
        with self._libvirt('read volumes of storage pool %s' % pool) as conn:
            lvpool = _lookup(conn.storagePoolLookupByName, pool,
                             libvirt.VIR_ERR_NO_STORAGE_POOL)
            if lvpool is None or not lvpool.isActive():
                return dict.fromkeys(names)
            root = ET.fromstring(lvpool.XMLDesc())
            kind = root.get('type')
            marks, pool_marks = {}, []
            if kind == 'logical':
                vg = root.findtext('source/name')
                marks = storage.lv_tags(vg)
                pool_marks = storage.vg_tags(vg) or []
            elif kind == 'dir':
                pool_marks = [_mark(root.findtext('target/path'))]
            infos = {}
            for name in names:
                vol = _lookup(lvpool.storageVolLookupByName, name,
                              libvirt.VIR_ERR_NO_STORAGE_VOL)
                if vol is not None and kind == 'dir' and os.path.lexists(
                        vol.path()):
                    marks[name] = [_mark(vol.path())]
                if vol is None or (kind in ('dir', 'logical')
                                   and name not in marks):
                    infos[name] = None
                    continue
                info = infos[name] = self._volume_facts(vol)
                for key, found in (('owner', marks.get(name, [])),
                                   ('pool_owner', pool_marks)):
                    mark = _tenks_mark(found)
                    if mark:
                        info[key] = mark
        return infos

    def resize_volume(self, pool, name, capacity, owner):
        """See base; qemu-img grows the image (its data is kept)."""
        capacity = base.whole_sectors(capacity)
        action = 'grow volume %s in storage pool %s' % (name, pool)
        with self._volume_lock(pool, name), self._libvirt(action) as conn:
            lvpool = conn.storagePoolLookupByName(pool)
            vol = self._owned_volume(lvpool, pool, name, owner)
            if vol is None:
                raise exceptions.DriverError(driver='libvirt', action=action,
                                             reason='it does not exist')
            current = vol.info()[1]
            if current > capacity:
                raise exceptions.ResourceConflict(
                    'Volume %s in storage pool %s has %d bytes, more than '
                    'the %d asked: Tenks never shrinks a volume' % (
                        name, pool, current, capacity))
            if current == capacity:
                return False
            vol.resize(capacity, 0)
        LOG.info('Grew volume %s in storage pool %s from %d to %d bytes',
                 name, pool, current, capacity)
        return True

    def remove_volume(self, pool, name, owner):
        action = 'delete volume %s in storage pool %s' % (name, pool)
        with self._volume_lock(pool, name), self._libvirt(action) as conn:
            lvpool = _lookup(conn.storagePoolLookupByName, pool,
                             libvirt.VIR_ERR_NO_STORAGE_POOL)
            if lvpool is None:
                return False
            interrupted = self._interrupted(lvpool, pool, name, owner)
            self._settle(lvpool, pool, name, owner)
            vol = self._owned_volume(lvpool, pool, name, owner)
            if vol is None:
                return interrupted
            vol.delete()
        return True

    # Domains

    def _console_log(self, name):
        return os.path.join(tenks_conf.console_log_dir(self.conf),
                            '%s-console.log' % name)

    def _console_log_of(self, domain):
        """The log file of the domain's serial console, or None.

        ``console_log`` when the request gives it (it must lie in
        console_log_dir: Tenks removes what is there), else the default
        path when ``console_log_enabled``.
        """
        if 'console_log' not in domain:
            return (self._console_log(domain['name'])
                    if domain['console_log_enabled'] else None)
        path = domain['console_log']
        top = _real_dir(tenks_conf.console_log_dir(self.conf))
        if path is not None and os.path.dirname(_real_file(path)) != top:
            raise exceptions.DriverError(
                driver='libvirt', action='define domain %s' % domain['name'],
                reason='its console log %s is not a file of this '
                       "hypervisor's console_log_dir %s" % (path, top))
        return path

    def _nvram_path(self, name):
        return os.path.join(self.conf.hostagent.nvram_dir,
                            name + NVRAM_SUFFIX)

    def _loader(self, domain):
        """{'loader', 'template'} of the domain's UEFI firmware, or None
        for a BIOS domain; DriverError when this hypervisor has none."""
        if domain.get('boot_mode', 'bios') == 'bios':
            return None
        kind = (firmware.SECURE_BOOT if domain.get('secure_boot')
                else firmware.UEFI)
        found = self._firmware().get(kind)
        if found is None:
            raise exceptions.DriverError(
                driver='libvirt', action='define domain %s' % domain['name'],
                reason='no UEFI firmware%s found in the firmware '
                       'descriptors of %s: install OVMF (Debian and '
                       'Ubuntu package ovmf)' % (
                           ' with secure boot and enrolled keys'
                           if kind == firmware.SECURE_BOOT else '',
                           ', '.join(self.conf.hostagent.firmware_dirs)))
        return found

    def _domain_xml(self, domain, owner, backing_formats=None):
        """The domain's XML; ``backing_formats``: {path: format} of the
        backing files of its disks, which then get their chain spelled
        out (see ensure_domain)."""
        return ET.tostring(self._domain_element(domain, owner,
                                                backing_formats),
                           encoding='unicode')

    def _domain_element(self, domain, owner, backing_formats=None):
        """The root element of _domain_xml."""
        backing_formats = backing_formats or {}
        root = ET.Element('domain', type=domain['domain_type'])
        ET.SubElement(root, 'name').text = domain['name']
        ET.SubElement(root, 'uuid').text = str(uuid.UUID(domain['uuid']))
        ET.SubElement(ET.SubElement(root, 'metadata'), OWNER_TAG).text = owner
        kib = str(domain['memory_mb'] * 1024)
        ET.SubElement(root, 'memory', unit='KiB').text = kib
        ET.SubElement(root, 'currentMemory', unit='KiB').text = kib
        ET.SubElement(root, 'vcpu').text = str(domain['vcpus'])
        loader = self._loader(domain)
        secure = loader is not None and domain.get('secure_boot', False)
        os_el = ET.SubElement(root, 'os')
        # Secure boot needs SMM, which libvirt allows on q35 only.
        machine = domain.get('machine') or ('q35' if secure else None)
        ET.SubElement(os_el, 'type', arch='x86_64',
                      **({'machine': machine} if machine else {})
                      ).text = 'hvm'
        if loader is not None:
            ET.SubElement(os_el, 'loader', readonly='yes', type='pflash',
                          secure='yes' if secure else 'no'
                          ).text = loader['loader']
            ET.SubElement(os_el, 'nvram', template=loader['template']
                          ).text = self._nvram_path(domain['name'])
        ET.SubElement(os_el, 'boot', dev='network')
        ET.SubElement(os_el, 'boot', dev='hd')
        if loader is None:
            # SeaBIOS prints to the serial console too (OVMF does).
            ET.SubElement(os_el, 'bios', useserial='yes')
        if domain.get('cpu_mode'):
            ET.SubElement(root, 'cpu', mode=domain['cpu_mode'])
        features = ET.SubElement(root, 'features')
        ET.SubElement(features, 'acpi')
        ET.SubElement(features, 'apic')
        if secure:
            ET.SubElement(features, 'smm', state='on')
        ET.SubElement(root, 'on_poweroff').text = 'destroy'
        devices = ET.SubElement(root, 'devices')
        counts = collections.Counter()
        for disk in domain['disks']:
            device = disk.get('device', 'disk')
            el = ET.SubElement(devices, 'disk', type='volume', device=device)
            ET.SubElement(el, 'driver', name='qemu', type=disk['format'])
            ET.SubElement(el, 'source', pool=disk['pool'],
                          volume=disk['volume'])
            backing = disk.get('backing')
            if backing in backing_formats:
                _backing_store(el, backing, backing_formats[backing])
            # A CD-ROM on SATA, which both the pc and q35 machines have.
            prefix, bus = ('sd', 'sata') if device == 'cdrom' else (
                'vd', 'virtio')
            ET.SubElement(el, 'target', dev=_disk_dev(counts[device], prefix),
                          bus=bus)
            counts[device] += 1
            if device == 'cdrom':
                ET.SubElement(el, 'readonly')
        if domain.get('virtual_media'):
            # The empty drive a Redfish BMC's virtual media goes into
            # (hostagent.drivers.bmc.emulator), after the node's own
            # CD-ROMs; no <source> here, so a medium in it is no drift.
            el = ET.SubElement(devices, 'disk', type='file', device='cdrom')
            ET.SubElement(el, 'driver', name='qemu', type='raw')
            ET.SubElement(el, 'target', dev=_disk_dev(counts['cdrom'], 'sd'),
                          bus='sata')
            ET.SubElement(el, 'readonly')
            ET.SubElement(el, 'alias', name=media.DRIVE_ALIAS)
        for nic in domain['nics']:
            el = ET.SubElement(devices, 'interface', type='ethernet')
            ET.SubElement(el, 'mac', address=nic['mac'].lower())
            ET.SubElement(el, 'target', dev=nic['tap'], managed='no')
            ET.SubElement(el, 'model', type='virtio')
        serial = ET.SubElement(devices, 'serial', type='pty')
        log = self._console_log_of(domain)
        if log is not None:
            # append: the log survives power cycles (virtlogd rotates it).
            ET.SubElement(serial, 'log', file=log, append='on')
        ET.SubElement(serial, 'target', port='0')
        console = ET.SubElement(devices, 'console', type='pty')
        ET.SubElement(console, 'target', type='serial', port='0')
        return root

    @staticmethod
    def _check_owner(dom, name, owner):
        mark = _owner_mark(dom)
        if not tenks_names.owns(owner, mark):
            raise exceptions.ResourceConflict(
                kind='Domain', name=name, owner=owner,
                reason=('it has no Tenks owner mark' if mark is None
                        else 'it belongs to %s' % mark))

    def _owned_domain(self, conn, name, owner):
        """Our domain ``name``, or None; ResourceConflict if not ours."""
        dom = _lookup(conn.lookupByName, name, libvirt.VIR_ERR_NO_DOMAIN)
        if dom is not None:
            self._check_owner(dom, name, owner)
        return dom

    def domain_changes(self, domain, owner):
        """See base; the UUID cannot change: DriverError. An NVRAM file
        that is not ``owner``'s: ResourceConflict. A missing NVRAM file
        is no change here: ensure_domain makes it without a power-off.
        """
        name = domain['name']
        exact = bool(domain.get('machine'))
        with self._libvirt('read domain %s' % name) as conn:
            domain = self._resolved(conn, domain)
            wanted = _summary(self._domain_element(domain, owner), exact)
            if wanted['nvram'] and os.path.lexists(wanted['nvram'][0]):
                _check_mark(wanted['nvram'][0], 'NVRAM file of domain',
                            name, owner)
            dom = self._owned_domain(conn, name, owner)
            if dom is None:
                return None
            current = _summary(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE),
                               exact)
        _check_uuid(name, current, wanted)
        return _differences(current, wanted)

    def _nvram_changes(self, wanted, owner):
        """What is wrong with the NVRAM file of a wanted summary."""
        if wanted['nvram'] is None:
            return []
        path = wanted['nvram'][0]
        if not os.path.lexists(path):
            return ['NVRAM file %s missing' % path]
        if not tenks_names.owns(owner, _mark(path)):
            return ['NVRAM file %s is not ours' % path]
        return []

    def domains_changes(self, domains, owner):
        """See base; one listing of the domains."""
        with self._libvirt('read domains') as conn:
            defined = {dom.name(): dom for dom in conn.listAllDomains(0)}
            guests = _guest_machines(conn.getCapabilities())
            listed = [defined[d['name']] for d in domains
                      if d['name'] in defined]
            texts = dict(zip(listed, _each(_inactive_xml, listed),
                             strict=True))
            changes = {}
            for domain in domains:
                name = domain['name']
                text = texts.get(defined.get(name))
                if text is None:
                    # Not defined, or undefined since the listing.
                    changes[name] = None
                    continue
                # The mark is in the defined XML: one call per domain.
                xml = ET.fromstring(text)
                mark = _xml_owner_mark(xml)
                if not tenks_names.owns(owner, mark):
                    changes[name] = states.PART_FOREIGN
                    continue
                exact = bool(domain.get('machine'))
                try:
                    wanted = _summary(self._domain_element(
                        self._resolved(conn, domain, guests), owner), exact)
                except exceptions.DriverError as e:
                    # No firmware, machine type or CPU mode for it (any
                    # more): ensure says why.
                    changes[name] = [str(e)]
                    continue
                # Another UUID shows as a change (ensure refuses it).
                changes[name] = _differences(_summary(xml, exact),
                                             wanted) + (
                    self._nvram_changes(wanted, owner))
        return changes

    def check_domain(self, name, owner):
        with self._libvirt('read domain %s' % name) as conn:
            if self._owned_domain(conn, name, owner) is None:
                raise exceptions.DriverError(
                    driver='libvirt', action='read domain %s' % name,
                    reason='it is not defined')

    def start_domain(self, name, owner):
        with self._libvirt('start domain %s' % name) as conn:
            dom = self._owned_domain(conn, name, owner)
            if dom is None:
                raise exceptions.DriverError(
                    driver='libvirt', action='start domain %s' % name,
                    reason='it is not defined')
            if dom.isActive():
                return False
            dom.create()
        return True

    def stop_domain(self, name, owner):
        with self._libvirt('power off domain %s' % name) as conn:
            dom = self._owned_domain(conn, name, owner)
            return dom is not None and _destroy(dom)

    def ensure_domain(self, domain, owner):
        """See base; ``owner`` is kept in the domain's metadata.

        A domain of ``owner`` that differs is redefined (if it runs, the
        change applies from its next start); one without the mark or with
        another owner's raises ResourceConflict. A UEFI domain gets its
        NVRAM file, a copy of the firmware's template marked as
        ``owner``'s, made again from the new template when the firmware
        changes (secure boot on or off) and removed when the domain
        becomes a BIOS one.
        """
        name = domain['name']
        backing = {disk['backing'] for disk in domain['disks']
                   if disk.get('backing')}
        exact = bool(domain.get('machine'))
        with self._libvirt('define domain %s' % name) as conn:
            xml = self._domain_xml(self._resolved(conn, domain), owner, {
                path: storage.image_info(path)['format']
                for path in backing})
            wanted = _summary(xml, exact)
            fileutils.private_dir(tenks_conf.console_log_dir(self.conf),
                                  fix_existing=False)
            dom = _lookup(conn.lookupByName, name, libvirt.VIR_ERR_NO_DOMAIN)
            current = None
            if dom is not None:
                self._check_owner(dom, name, owner)
                current = _summary(
                    dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), exact)
                _check_uuid(name, current, wanted)
            made_nvram = self._ensure_nvram(name, current, wanted, owner)
            if current == wanted:
                return base.ensured(False, made_nvram)
            try:
                # One define: a domain appears with its owner mark or not
                # at all.
                conn.defineXML(xml)
            except Exception:
                if made_nvram and dom is None:
                    self._remove_nvram(wanted['nvram'][0], owner)
                raise
            old_nvram = current and current['nvram'] and current['nvram'][0]
            if old_nvram and old_nvram != (wanted['nvram'] or [None])[0]:
                self._remove_nvram(old_nvram, owner)
        return base.ensured(dom is None, True)

    def _ensure_nvram(self, name, current, wanted, owner):
        """Make the NVRAM file of summary ``wanted`` from its template,
        unless it exists (ours) and the template stays; True if made."""
        if wanted['nvram'] is None:
            return False
        path, template = wanted['nvram']
        if os.path.lexists(path):
            _check_mark(path, 'NVRAM file of domain', name, owner)
            if current is None or current['nvram'] is None or (
                    current['nvram'][1] == template):
                return False
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix='.%s.' % name)
        try:
            with open(template, 'rb') as src, os.fdopen(fd, 'wb') as dst:
                shutil.copyfileobj(src, dst)
            _set_mark(tmp, owner)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
        LOG.info('Made NVRAM file %s of domain %s from %s', path, name,
                 template)
        return True

    @staticmethod
    def _remove_nvram(path, owner):
        """Remove the NVRAM file at ``path`` if it is ``owner``'s; True
        if removed."""
        if not os.path.lexists(path):
            return False
        if not tenks_names.owns(owner, _mark(path)):
            LOG.warning('Left NVRAM file %s in place: it is not owned by '
                        '%s', path, owner)
            return False
        os.remove(path)
        return True

    def remove_domain(self, name, owner):
        """See base; ResourceConflict unless the domain is ``owner``'s.

        Its NVRAM file goes too (if ours), and its console log unless
        [hostagent] keep_console_logs.
        """
        with self._libvirt('remove domain %s' % name) as conn:
            dom = _lookup(conn.lookupByName, name, libvirt.VIR_ERR_NO_DOMAIN)
            if dom is None:
                return self._remove_domain_files(name, None, owner)
            self._check_owner(dom, name, owner)
            current = _summary(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
            _destroy(dom)
            if dom.isPersistent():
                dom.undefineFlags(UNDEFINE_FLAGS)
            self._remove_domain_files(name, current, owner)
        return True

    def _remove_domain_files(self, name, current, owner):
        """Remove the NVRAM file and console log of domain ``name``
        (``current``: its summary, None when it is not defined): those
        its definition names and those at the default paths. True if
        something was removed."""
        removed = False
        nvrams = {self._nvram_path(name)}
        logs = {self._console_log(name)}
        if current is not None:
            if current['nvram']:
                nvrams.add(current['nvram'][0])
            logs.update(log for _, log in current['serials'] if log)
        for path in sorted(nvrams):
            removed |= self._remove_nvram(path, owner)
        if self.conf.hostagent.keep_console_logs:
            return removed
        for log in sorted(logs):
            # virtlogd rotates the log to <log>.0, <log>.1, ...
            for path in [log] + glob.glob(glob.escape(log) + '.[0-9]*'):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
                    removed = True
        return removed

    def remove_nvram(self, name, owner):
        """See base."""
        return self._remove_nvram(self._nvram_path(name), owner)

    def marked(self):
        """See base: domains by their metadata; pools by the extended
        attribute of their directory or the tags of their volume group,
        and the volumes of those (their files' attributes, their logical
        volumes' tags); the NVRAM files of nvram_dir."""
        with self._libvirt('list what carries a Tenks mark') as conn:
            found = self._marked_domains(conn)
            pools = self._marked_pools(conn)
        targets = {pool['path'] for pool in pools}
        pool_dir = self.conf.hostagent.pool_dir
        for name, mark in _marked_files(pool_dir, directories=True):
            path = os.path.join(pool_dir, name)
            if path not in targets:
                pools.append({'kind': 'pool', 'name': tenks_names.pool(name),
                              'mark': mark, 'path': path,
                              'pool_type': 'dir', 'devices': [],
                              'active': False, 'defined': False,
                              'volumes': _marked_files(path)})
        for pool in pools:
            found.append(pool)
            found += [{'kind': 'volume', 'name': name, 'mark': mark,
                       'pool': pool['name']}
                      for name, mark in pool.pop('volumes', ())]
        found += [{'kind': 'nvram', 'name': name[:-len(NVRAM_SUFFIX)],
                   'mark': mark,
                   'path': os.path.join(self.conf.hostagent.nvram_dir, name)}
                  for name, mark in _marked_files(
                      self.conf.hostagent.nvram_dir)
                  if name.endswith(NVRAM_SUFFIX)]
        return found

    @staticmethod
    def _marked_domains(conn):
        found = []
        for dom in conn.listAllDomains(0):
            try:
                mark = _owner_mark(dom)
                state = STATES.get(dom.state()[0], 'unknown')
            except libvirt.libvirtError as e:
                # Undefined since the listing.
                if e.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise
                continue
            if _tenks_mark([mark]):
                found.append({'kind': 'domain', 'name': dom.name(),
                              'mark': mark, 'state': state})
        return found

    @staticmethod
    def _marked_pools(conn):
        """Our kinds of pool that carry a mark, each with its marked
        'volumes' ([(name, mark)])."""
        found = []
        for pool in conn.listAllStoragePools():
            xml = _lookup(lambda p: p.XMLDesc(), pool,
                          libvirt.VIR_ERR_NO_STORAGE_POOL)
            if xml is None:
                continue
            root = ET.fromstring(xml)
            kind = root.get('type')
            path = os.path.normpath(root.findtext('target/path') or '/')
            if kind == 'logical':
                group = root.findtext('source/name')
                mark = _tenks_mark(storage.vg_tags(group) or [])
                volumes = sorted(
                    (name, found) for name, found in (
                        (name, _tenks_mark(tags)) for name, tags in
                        storage.lv_tags(group).items()) if found) if (
                    mark) else []
            elif kind == 'dir':
                try:
                    mark = _tenks_mark([_mark(path)]) if os.path.isdir(
                        path) else None
                except FileNotFoundError:
                    mark = None  # removed since the listing
                volumes = _marked_files(path) if mark else []
            else:
                continue
            if not mark:
                continue
            active = _lookup(lambda p: p.isActive(), pool,
                             libvirt.VIR_ERR_NO_STORAGE_POOL)
            if active is None:
                # Undefined since the listing (its teardown ran).
                continue
            found.append({
                'kind': 'pool', 'name': pool.name(), 'mark': mark,
                'path': path, 'pool_type': kind,
                'devices': [d.get('path')
                            for d in root.findall('source/device')],
                'active': bool(active), 'defined': True,
                'volumes': volumes})
        return found

    def domain_state(self, name):
        with self._libvirt('read the state of domain %s' % name) as conn:
            dom = _lookup(conn.lookupByName, name, libvirt.VIR_ERR_NO_DOMAIN)
            if dom is None:
                return None
            state = dom.state()[0]
        return STATES.get(state, 'unknown')
