"""LibvirtDriver against the real qemu:///system and real taps."""

import errno
import os
import re
import signal
import socket
import stat
import struct
import subprocess
import sys
import uuid
from concurrent import futures
from xml.etree import ElementTree as ET

import libvirt
import pytest

from hostagent.drivers.network import linuxbridge
from hostagent.drivers.virt import libvirt as libvirt_driver
from tenks import exceptions
from tests.functional import drivers_fixtures as fx

pytestmark = pytest.mark.functional

GIB = 1024 ** 3


@pytest.fixture
def conf(tmp_path):
    return fx.make_conf(tmp_path)


@pytest.fixture
def driver(conf):
    return libvirt_driver.LibvirtDriver(conf)


@pytest.fixture
def conn():
    connection = libvirt.open(fx.URI)
    yield connection
    connection.close()


@pytest.fixture
def pool(driver, left):
    """An active pool; returns its name."""
    name = left.name('-pool')
    driver.ensure_pool(name, os.path.join(left.directory(), 'pool'),
                       fx.OWNER)
    return name


def domain_spec(left, pool, index=0, **changes):
    spec = {
        'name': left.name('-d%d' % index),
        'uuid': str(uuid.uuid4()),
        'vcpus': 1,
        'memory_mb': 128,
        'domain_type': 'qemu',
        'console_log_enabled': True,
        'disks': [{'pool': pool, 'volume': left.name('-d%d-v0' % index),
                   'format': 'qcow2'},
                  {'pool': pool, 'volume': left.name('-d%d-v1' % index),
                   'format': 'raw'}],
        'nics': [{'mac': '52:54:00:AB:00:%02x' % index,
                  'tap': left.name('t%da' % index)},
                 {'mac': '52:54:00:ab:01:%02x' % index,
                  'tap': left.name('t%db' % index)}],
    }
    spec.update(changes)
    return spec


def test_facts(driver):
    facts = driver.facts()
    assert re.fullmatch(r'\d+\.\d+\.\d+', facts['libvirt_version'])
    assert facts['cpus'] >= 1
    assert facts['memory_mb'] >= 128
    # The daemon, named alike through any URI that reaches it.
    assert facts['libvirt_daemon'].startswith('qemu:///system on ')
    assert libvirt_driver.LibvirtDriver(fx.make_conf(
        driver.conf.state_dir, libvirt_uri='qemu+unix:///system?socket='
        '/var/run/libvirt/libvirt-sock')).facts()['libvirt_daemon'] == (
        facts['libvirt_daemon'])


def mem_total_mib():
    with open('/proc/meminfo') as f:
        for line in f:
            if line.startswith('MemTotal:'):
                return int(line.split()[1]) // 1024
    raise AssertionError('no MemTotal in /proc/meminfo')


def test_memory_is_the_hosts_total_whatever_is_free(driver):
    """The MEMORY_MB inventory a hostagent registers is the host's
    MemTotal, the same at each registration while free memory moves."""
    first = driver.facts()['memory_mb']
    # Some 256 MiB less free memory, written so that it is taken.
    taken = b'\x01' * (256 * 1024 * 1024)
    second = driver.facts()['memory_mb']
    del taken
    assert first == second == mem_total_mib()


def test_unreachable_libvirt(tmp_path):
    uri = 'qemu+unix:///system?socket=/nonexistent/hx.sock'
    driver = libvirt_driver.LibvirtDriver(
        fx.make_conf(tmp_path, libvirt_uri=uri))
    with pytest.raises(exceptions.HypervisorUnavailable, match=re.escape(uri)):
        driver.facts()


def test_reconnects_after_connection_died(driver):
    driver.facts()
    driver._connection().close()
    assert driver.facts()['cpus'] >= 1


def _libvirt_daemon():
    """The pid of the daemon that serves qemu:///system here: the one
    listening on its socket (other libvirtds may run, a test's own)."""
    for path in ('/run/libvirt/virtqemud-sock', '/run/libvirt/libvirt-sock'):
        if os.path.exists(path):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(path)
                pid, _, _ = struct.unpack('3i', sock.getsockopt(
                    socket.SOL_SOCKET, socket.SO_PEERCRED,
                    struct.calcsize('3i')))
            return pid
    raise AssertionError('no libvirt daemon runs')


def test_a_hung_libvirtd_fails_a_call_once_the_keepalive_gives_up(
        tmp_path):
    """libvirtd stopped (SIGSTOP): a call fails within seconds, naming
    the keepalive, rather than waiting for as long as the daemon hangs;
    once it answers again, the next call reconnects."""
    driver = libvirt_driver.LibvirtDriver(fx.make_conf(
        tmp_path, libvirt_keepalive_interval=1, libvirt_keepalive_count=2))
    assert driver.facts()['cpus'] >= 1
    pid = _libvirt_daemon()
    with futures.ThreadPoolExecutor(1) as pool:
        os.kill(pid, signal.SIGSTOP)
        try:
            call = pool.submit(driver.facts)
            with pytest.raises(exceptions.HypervisorUnavailable,
                               match='keepalive timeout'):
                call.result(timeout=20)
        finally:
            os.kill(pid, signal.SIGCONT)
    assert driver.facts()['cpus'] >= 1


def test_pool_lifecycle(driver, conn, left):
    name = left.name('-pool')
    path = os.path.join(left.directory(), 'pool')
    assert driver.ensure_pool(name, path, fx.OWNER) == fx.CREATED
    assert driver.ensure_pool(name, path, fx.OWNER) == fx.UNCHANGED
    assert conn.storagePoolLookupByName(name).isActive()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o711
    with pytest.raises(exceptions.ResourceConflict):
        driver.ensure_pool(name, path + '-other', fx.OWNER)
    with pytest.raises(exceptions.ResourceConflict):
        driver.remove_pool(name, path + '-other', fx.OWNER)

    # Inactive and without its directory: ensure repairs both.
    conn.storagePoolLookupByName(name).destroy()
    os.rmdir(path)
    assert driver.ensure_pool(name, path, fx.OWNER) == fx.FIXED
    assert conn.storagePoolLookupByName(name).isActive()

    assert driver.remove_pool(name, path, fx.OWNER) is True
    assert not os.path.exists(path)
    assert name not in conn.listStoragePools() + conn.listDefinedStoragePools()
    assert driver.remove_pool(name, path, fx.OWNER) is False


def test_remove_pool_keeps_foreign_files(driver, left):
    name = left.name('-pool')
    path = os.path.join(left.directory(), 'pool')
    driver.ensure_pool(name, path, fx.OWNER)
    with open(os.path.join(path, 'not-ours'), 'w') as f:
        f.write('x')
    assert driver.remove_pool(name, path, fx.OWNER) is True
    assert os.listdir(path) == ['not-ours']


def test_a_pool_holding_volumes_of_its_deployment_is_not_removed(
        driver, conn, left):
    """A node whose removal failed keeps its volumes, and their records:
    its pool stays with them, so that the next teardown reaches them."""
    name = left.name('-pool')
    path = os.path.join(left.directory(), 'pool')
    driver.ensure_pool(name, path, fx.OWNER)
    # Marked by one hostagent of the deployment: any of them holds it.
    driver.ensure_volume(name, 'hx-held', GIB, 'qcow2', fx.OWNER + '/hv')
    with pytest.raises(exceptions.DriverError,
                       match='still holds volume.s. hx-held of this '
                             'deployment'):
        driver.remove_pool(name, path, fx.OWNER)
    assert conn.storagePoolLookupByName(name).isActive()
    assert os.listdir(path) == ['hx-held']
    assert driver.remove_volume(name, 'hx-held', fx.OWNER + '/hv') is True
    assert driver.remove_pool(name, path, fx.OWNER) is True
    assert not os.path.exists(path)


def test_a_pool_libvirt_lost_goes_with_the_volumes_of_its_deployment(
        driver, conn, left):
    """Undefined by hand with volumes in it: what lists the marked
    things shows them, and the pool's removal takes its deployment's
    files, and only those."""
    name = left.name('-pool')
    path = os.path.join(left.directory(), 'pool')
    driver.ensure_pool(name, path, fx.OWNER)
    driver.ensure_volume(name, 'hx-ours', GIB, 'qcow2', fx.OWNER)
    driver.ensure_volume(name, 'hx-theirs', GIB, 'qcow2', fx.OTHER)
    with open(os.path.join(path, 'not-marked'), 'w') as f:
        f.write('x')
    lvpool = conn.storagePoolLookupByName(name)
    lvpool.destroy()
    lvpool.undefine()
    # The pool's directory: named for what its name adds to the prefix.
    pool_conf = fx.make_conf(
        left.directory(), pool_dir=os.path.dirname(path))
    lost = 'tenks-pool'
    listed = [(t['kind'], t['name'], t.get('pool'))
              for t in libvirt_driver.LibvirtDriver(pool_conf).marked()
              if lost in (t['name'], t.get('pool'))]
    assert listed == [('pool', lost, None), ('volume', 'hx-ours', lost),
                      ('volume', 'hx-theirs', lost)]
    assert driver.remove_pool(name, path, fx.OWNER) is True
    assert sorted(os.listdir(path)) == ['hx-theirs', 'not-marked']


def test_volume_lifecycle(driver, conn, pool):
    assert driver.ensure_volume(pool, 'hx-v.qcow2', GIB, 'qcow2',
                                fx.OWNER) == fx.CREATED
    assert driver.ensure_volume(pool, 'hx-v.qcow2', GIB, 'qcow2',
                                fx.OWNER) == fx.UNCHANGED
    vol = conn.storagePoolLookupByName(pool).storageVolLookupByName(
        'hx-v.qcow2')
    assert vol.info()[1] == GIB
    assert 'qcow2' in vol.XMLDesc()
    with pytest.raises(exceptions.ResourceConflict):
        driver.ensure_volume(pool, 'hx-v.qcow2', 2 * GIB, 'qcow2', fx.OWNER)
    with pytest.raises(exceptions.ResourceConflict):
        driver.ensure_volume(pool, 'hx-v.qcow2', GIB, 'raw', fx.OWNER)

    # An odd size is rounded to whole sectors, the same way every time.
    assert driver.ensure_volume(pool, 'hx-v.raw', 1000, 'raw',
                                fx.OWNER) == fx.CREATED
    assert driver.ensure_volume(pool, 'hx-v.raw', 1000, 'raw',
                                fx.OWNER) == fx.UNCHANGED

    assert driver.remove_volume(pool, 'hx-v.qcow2', fx.OWNER) is True
    assert driver.remove_volume(pool, 'hx-v.qcow2', fx.OWNER) is False
    assert driver.remove_volume(pool, 'hx-v.raw', fx.OWNER) is True
    assert driver.remove_volume(pool + '-missing', 'hx-v.raw',
                                fx.OWNER) is False


def test_volume_in_missing_pool(driver, left):
    with pytest.raises(exceptions.DriverError, match='hx-v'):
        driver.ensure_volume(left.name('-nopool'), 'hx-v', GIB, 'qcow2',
                             fx.OWNER)


def test_parallel_volumes(driver, conn, pool):
    with futures.ThreadPoolExecutor(8) as executor:
        created = list(executor.map(
            lambda i: driver.ensure_volume(pool, 'hx-p%d' % i, GIB, 'qcow2',
                                           fx.OWNER)['created'],
            range(8)))
        assert created == [True] * 8
        # The same volume from 8 threads: one creates it, all succeed.
        same = list(executor.map(
            lambda i: driver.ensure_volume(pool, 'hx-same', GIB, 'qcow2',
                                           fx.OWNER)['created'],
            range(8)))
        assert sorted(same) == [False] * 7 + [True]
        removed = list(executor.map(
            lambda i: driver.remove_volume(pool, 'hx-p%d' % i, fx.OWNER),
            range(8)))
        assert removed == [True] * 8
    assert conn.storagePoolLookupByName(pool).listVolumes() == ['hx-same']


def test_domain_definition(driver, conn, conf, left, pool):
    spec = domain_spec(left, pool)
    assert driver.ensure_domain(spec, fx.OWNER) == fx.CREATED
    assert driver.ensure_domain(spec, fx.OWNER) == fx.UNCHANGED
    assert driver.domain_state(spec['name']) == 'shut off'

    dom = conn.lookupByName(spec['name'])
    assert dom.UUIDString() == spec['uuid']
    root = ET.fromstring(dom.XMLDesc())
    assert root.get('type') == 'qemu'
    assert root.findtext('vcpu') == '1'
    assert int(root.findtext('memory')) == 128 * 1024
    assert root.find('memory').get('unit') == 'KiB'
    assert [b.get('dev') for b in root.findall('os/boot')] == [
        'network', 'hd']
    assert root.findtext('os/type') == 'hvm'
    assert root.find('features/acpi') is not None
    assert root.find('features/apic') is not None
    assert root.findtext('on_poweroff') == 'destroy'

    devices = root.find('devices')
    disks = devices.findall('disk')
    assert [(d.get('type'), d.find('source').get('pool'),
             d.find('source').get('volume'), d.find('driver').get('type'),
             d.find('target').get('dev'), d.find('target').get('bus'))
            for d in disks] == [
        ('volume', pool, spec['disks'][0]['volume'], 'qcow2', 'vda',
         'virtio'),
        ('volume', pool, spec['disks'][1]['volume'], 'raw', 'vdb', 'virtio'),
    ]
    nics = devices.findall('interface')
    assert [(n.get('type'), n.find('mac').get('address'),
             n.find('target').get('dev'), n.find('target').get('managed'),
             n.find('model').get('type')) for n in nics] == [
        ('ethernet', nic['mac'].lower(), nic['tap'], 'no', 'virtio')
        for nic in spec['nics']]

    log = os.path.join(conf.state_dir, 'logs', 'console',
                       spec['name'] + '-console.log')
    serial = devices.find('serial')
    assert serial.get('type') == 'pty'
    assert serial.find('log').attrib == {'file': log, 'append': 'on'}
    assert devices.find('console').get('type') == 'pty'
    assert os.path.isdir(os.path.dirname(log))
    assert devices.find('graphics') is None

    owner = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT,
                         libvirt_driver.OWNER_NS)
    assert ET.fromstring(owner).text == fx.OWNER


def test_domain_redefined_when_changed(driver, conn, left, pool):
    spec = domain_spec(left, pool)
    driver.ensure_domain(spec, fx.OWNER)
    bigger = dict(spec, vcpus=2, memory_mb=256, nics=spec['nics'][:1])
    assert driver.ensure_domain(bigger, fx.OWNER) == fx.FIXED
    assert driver.ensure_domain(bigger, fx.OWNER) == fx.UNCHANGED
    root = ET.fromstring(conn.lookupByName(spec['name']).XMLDesc())
    assert root.findtext('vcpu') == '2'
    assert int(root.findtext('memory')) == 256 * 1024
    assert len(root.findall('devices/interface')) == 1

    with pytest.raises(exceptions.DriverError, match='UUID'):
        driver.ensure_domain(dict(bigger, uuid=str(uuid.uuid4())), fx.OWNER)

    # Console logging turned off, then on again: redefined each time.
    quiet = dict(bigger, console_log_enabled=False)
    assert driver.ensure_domain(quiet, fx.OWNER) == fx.FIXED
    assert driver.ensure_domain(quiet, fx.OWNER) == fx.UNCHANGED
    root = ET.fromstring(conn.lookupByName(spec['name']).XMLDesc())
    assert root.find('devices/serial/log') is None
    assert driver.ensure_domain(bigger, fx.OWNER) == fx.FIXED
    root = ET.fromstring(conn.lookupByName(spec['name']).XMLDesc())
    assert root.find('devices/serial/log') is not None


def test_foreign_domains_are_left_alone(driver, conn, left, pool):
    spec = domain_spec(left, pool)
    # No owner mark at all.
    xml = ('<domain type="qemu"><name>%s</name><memory>65536</memory>'
           '<os><type>hvm</type></os></domain>' % spec['name'])
    conn.defineXML(xml)
    before = conn.lookupByName(spec['name']).XMLDesc()
    with pytest.raises(exceptions.ResourceConflict, match='no Tenks owner'):
        driver.ensure_domain(spec, fx.OWNER)
    with pytest.raises(exceptions.ResourceConflict):
        driver.remove_domain(spec['name'], fx.OWNER)
    assert conn.lookupByName(spec['name']).XMLDesc() == before

    # Another cluster's.
    other = domain_spec(left, pool, index=1)
    driver.ensure_domain(other, 'tenks:hxother')
    with pytest.raises(exceptions.ResourceConflict, match='tenks:hxother'):
        driver.ensure_domain(other, fx.OWNER)
    with pytest.raises(exceptions.ResourceConflict):
        driver.remove_domain(other['name'], fx.OWNER)
    assert driver.domain_state(other['name']) == 'shut off'


def test_remove_domain(driver, conf, left, pool):
    spec = domain_spec(left, pool)
    driver.ensure_domain(spec, fx.OWNER)
    log = os.path.join(conf.state_dir, 'logs', 'console',
                       spec['name'] + '-console.log')
    for path in (log, log + '.0'):
        with open(path, 'w') as f:
            f.write('boot\n')
    assert driver.remove_domain(spec['name'], fx.OWNER) is True
    assert driver.domain_state(spec['name']) is None
    assert os.listdir(os.path.dirname(log)) == []
    assert driver.remove_domain(spec['name'], fx.OWNER) is False


def test_domain_starts_on_bridged_tap(driver, conn, conf, left, pool):
    """A defined domain boots with its NIC on a tap in a bridge."""
    network = linuxbridge.LinuxBridgeDriver(conf)
    bridge = left.name('br')
    network.ensure_bridge(bridge, fx.OWNER)
    spec = domain_spec(left, pool, disks=[], nics=[])
    disk = {'pool': pool, 'volume': left.name('-root'), 'format': 'qcow2'}
    driver.ensure_volume(pool, disk['volume'], GIB, 'qcow2', fx.OWNER)
    spec['disks'] = [disk]
    tap = left.name('t0')
    network.ensure_port(bridge, tap, fx.OWNER)
    spec['nics'] = [{'mac': '52:54:00:ab:02:00', 'tap': tap}]
    driver.ensure_domain(spec, fx.OWNER)
    brif = '/sys/class/net/%s/brif/%s' % (bridge, tap)

    dom = conn.lookupByName(spec['name'])
    for _ in range(2):  # a second boot re-opens the same tap
        dom.create()
        assert driver.domain_state(spec['name']) == 'running'
        assert os.path.exists(brif)
        with open('/sys/class/net/%s/carrier' % tap) as f:
            assert f.read().strip() == '1'  # QEMU holds the tap
        dom.destroy()
        assert driver.domain_state(spec['name']) == 'shut off'
        assert os.path.exists(brif)  # the port outlives the VM

    dom.create()
    log = os.path.join(conf.state_dir, 'logs', 'console',
                       spec['name'] + '-console.log')
    assert os.path.exists(log)
    assert driver.remove_domain(spec['name'], fx.OWNER) is True
    assert not os.path.exists(log)
    assert os.path.exists(brif)
    assert network.remove_port(tap, fx.OWNER) is True
    assert network.remove_bridge(bridge, fx.OWNER) is True


# Owner marks of pools and volumes (issue 7, items 1 and 2)

def mark(path):
    try:
        return os.getxattr(path, 'user.tenks.owner').decode()
    except OSError:
        return None


def pool_state(conn, name):
    """Everything a user sees of pool ``name``: XML, active, autostart."""
    pool = conn.storagePoolLookupByName(name)
    return pool.XMLDesc(), pool.isActive(), pool.autostart()


def hand_made_qcow2(path):
    subprocess.run(['qemu-img', 'create', '-q', '-f', 'qcow2', path, '1M'],
                   check=True)
    subprocess.run(['qemu-io', '-f', 'qcow2', '-c', 'write -P 0x5a 0 64k',
                    path], check=True, capture_output=True)
    with open(path, 'rb') as f:
        return f.read()


def test_pool_and_volumes_carry_the_owner(driver, conn, left):
    name = left.name('-pool')
    path = os.path.join(left.directory(), 'pool')
    driver.ensure_pool(name, path, fx.OWNER)
    assert mark(path) == fx.OWNER
    driver.ensure_volume(name, 'hx-v', GIB, 'qcow2', fx.OWNER)
    assert mark(os.path.join(path, 'hx-v')) == fx.OWNER
    # A new driver (another hostagent process) recognises both.
    again = libvirt_driver.LibvirtDriver(driver.conf)
    assert again.ensure_pool(name, path, fx.OWNER) == fx.UNCHANGED
    assert again.ensure_volume(name, 'hx-v', GIB, 'qcow2',
                               fx.OWNER) == fx.UNCHANGED
    assert again.remove_volume(name, 'hx-v', fx.OWNER) is True
    assert again.remove_pool(name, path, fx.OWNER) is True
    assert not os.path.exists(path)


@pytest.mark.parametrize('refreshed', [False, True])
def test_hand_made_volume_is_never_adopted(driver, conn, left, pool,
                                           refreshed):
    """A file with the volume's name, known to libvirt or not yet."""
    lvpool = conn.storagePoolLookupByName(pool)
    path = os.path.join(
        ET.fromstring(lvpool.XMLDesc()).findtext('target/path'), 'hx-v')
    data = hand_made_qcow2(path)
    if refreshed:
        lvpool.refresh()
    with pytest.raises(exceptions.ResourceConflict,
                       match='%s has no Tenks owner mark' % path):
        driver.ensure_volume(pool, 'hx-v', 1024 * 1024, 'qcow2', fx.OWNER)
    with pytest.raises(exceptions.ResourceConflict, match='hx-v'):
        driver.remove_volume(pool, 'hx-v', fx.OWNER)
    with open(path, 'rb') as f:
        assert f.read() == data
    assert mark(path) is None
    os.remove(path)


def killed_while_making(conf, pool, name):
    """Make volume ``name`` in a process killed (SIGKILL) just before the
    volume gets its mark, as an agent killed mid-request is."""
    code = (
        'import os, signal, sys\n'
        'from hostagent.drivers.virt import libvirt as lv\n'
        'from tests.functional import drivers_fixtures as fx\n'
        'lv.LibvirtDriver._set_volume_mark = staticmethod(\n'
        '    lambda *args: os.kill(os.getpid(), signal.SIGKILL))\n'
        'driver = lv.LibvirtDriver(fx.make_conf(sys.argv[1]))\n'
        'driver.ensure_volume(sys.argv[2], sys.argv[3], 1024 ** 2,\n'
        '                     "qcow2", fx.OWNER)\n')
    done = subprocess.run(
        [sys.executable, '-c', code, conf.state_dir, pool, name],
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == -signal.SIGKILL


def test_volume_made_by_a_killed_agent_is_made_again(driver, conn, conf,
                                                     pool):
    """Killed between making a volume and marking it, an agent leaves an
    unmarked volume: its owner's next request makes it again (it may be
    half made), everybody else's still refuses it, reads change nothing,
    and a removal removes it."""
    lvpool = conn.storagePoolLookupByName(pool)
    directory = ET.fromstring(lvpool.XMLDesc()).findtext('target/path')
    path = os.path.join(directory, 'hx-v')
    killed_while_making(conf, pool, 'hx-v')
    assert os.path.exists(path) and mark(path) is None
    # As an image copy cut short would leave it.
    with open(path, 'r+b') as f:
        f.write(b'half made')

    other = 'tenks:other:%s' % uuid.uuid4()
    with pytest.raises(exceptions.ResourceConflict,
                       match='no Tenks owner mark'):
        driver.ensure_volume(pool, 'hx-v', 1024 ** 2, 'qcow2', other)
    assert driver.volume_infos(pool, ['hx-v'], fx.OWNER) == {'hx-v': None}
    assert driver.volume_info(pool, 'hx-v', fx.OWNER) is None
    assert mark(path) is None
    with open(path, 'rb') as f:
        assert f.read(9) == b'half made'

    assert driver.ensure_volume(pool, 'hx-v', 1024 ** 2, 'qcow2',
                                fx.OWNER) == fx.CREATED
    assert mark(path) == fx.OWNER
    with open(path, 'rb') as f:
        assert f.read(4) == b'QFI\xfb'
    assert os.listdir(os.path.join(conf.state_dir, 'making', pool)) == []

    killed_while_making(conf, pool, 'hx-w')
    assert driver.remove_volume(pool, 'hx-w', fx.OWNER) is True
    assert not os.path.exists(os.path.join(directory, 'hx-w'))
    # With its pool go the agent's notes on it.
    assert driver.remove_volume(pool, 'hx-v', fx.OWNER) is True
    assert driver.remove_pool(pool, directory, fx.OWNER) is True
    assert not os.path.exists(os.path.join(conf.state_dir, 'making', pool))


def test_half_made_volumes_made_again_while_others_are_made(driver, conf,
                                                           conn, pool):
    """An agent resuming a killed deploy deletes each volume it left half
    made (after a scan of the pool) and makes it again, while it makes
    other volumes of the pool: libvirt refuses to scan a pool while it
    creates a volume there ("pool has asynchronous jobs running"), so
    the two never overlap."""
    directory = ET.fromstring(conn.storagePoolLookupByName(
        pool).XMLDesc()).findtext('target/path')
    making = os.path.join(conf.state_dir, 'making', pool)
    os.makedirs(making)
    half = ['hx-h%d' % i for i in range(16)]
    for name in half:
        # What an agent killed before marking them leaves: an unmarked
        # volume, and its note of whom it made it for.
        subprocess.run(['qemu-img', 'create', '-q', '-f', 'qcow2',
                        os.path.join(directory, name), '1M'], check=True)
        with open(os.path.join(making, name), 'w') as f:
            f.write(fx.OWNER)
    names = [n for pair in zip(half, ['hx-n%d' % i for i in range(16)],
                               strict=True) for n in pair]
    with futures.ThreadPoolExecutor(8) as executor:
        results = list(executor.map(
            lambda name: driver.ensure_volume(pool, name, GIB, 'qcow2',
                                              fx.OWNER), names))
    assert results == [fx.CREATED] * len(names)
    assert sorted(os.listdir(directory)) == sorted(names)
    assert {mark(os.path.join(directory, n)) for n in names} == {fx.OWNER}
    assert os.listdir(making) == []
    for name in names:
        assert driver.remove_volume(pool, name, fx.OWNER) is True


def test_volume_file_deleted_by_hand_is_missing_and_made_again(driver,
                                                               conn, pool):
    """libvirt lists a volume whose file was deleted by hand until it
    scans the pool again: the volume reads as missing, is made again,
    and a removal finds nothing to remove."""
    assert driver.ensure_volume(pool, 'hx-v', GIB, 'qcow2',
                                fx.OWNER) == fx.CREATED
    path = conn.storagePoolLookupByName(pool).storageVolLookupByName(
        'hx-v').path()
    os.remove(path)
    assert driver.volume_infos(pool, ['hx-v'], fx.OWNER) == {'hx-v': None}
    assert driver.volume_info(pool, 'hx-v', fx.OWNER) is None
    assert driver.ensure_volume(pool, 'hx-v', GIB, 'qcow2',
                                fx.OWNER) == fx.CREATED
    assert mark(path) == fx.OWNER
    os.remove(path)
    assert driver.remove_volume(pool, 'hx-v', fx.OWNER) is False
    assert conn.storagePoolLookupByName(pool).listVolumes() == []


def test_hand_defined_pool_is_never_adopted(driver, conn, left):
    name = left.name('-pool')
    path = os.path.join(left.directory(), 'pool')
    os.mkdir(path)
    # Same name and path as ours would have, made by hand.
    hand = conn.storagePoolDefineXML(
        "<pool type='dir'><name>%s</name><target><path>%s</path></target>"
        "</pool>" % (name, path))
    hand.create()
    before = pool_state(conn, name)
    for call in (driver.ensure_pool, driver.remove_pool):
        with pytest.raises(exceptions.ResourceConflict, match=name):
            call(name, path, fx.OWNER)
    assert pool_state(conn, name) == before
    assert os.path.isdir(path) and mark(path) is None

    # Another name at our path.
    hand.destroy()
    hand.undefine()
    other = left.name('-hand')
    conn.storagePoolDefineXML(
        "<pool type='dir'><name>%s</name><target><path>%s</path></target>"
        "</pool>" % (other, path)).create()
    before = pool_state(conn, other)
    for call in (driver.ensure_pool, driver.remove_pool):
        with pytest.raises(exceptions.ResourceConflict, match=other):
            call(name, path, fx.OWNER)
    assert pool_state(conn, other) == before
    assert name not in [p.name() for p in conn.listAllStoragePools()]
    assert mark(path) is None


def test_hand_made_pool_directory_is_never_adopted(driver, conn, left):
    name = left.name('-pool')
    path = os.path.join(left.directory(), 'pool')
    os.mkdir(path)
    hand_made_qcow2(os.path.join(path, 'hx-v'))
    for call in (driver.ensure_pool, driver.remove_pool):
        with pytest.raises(exceptions.ResourceConflict,
                           match='%s has no Tenks owner mark' % path):
            call(name, path, fx.OWNER)
    assert os.listdir(path) == ['hx-v']
    assert name not in [p.name() for p in conn.listAllStoragePools()]


def test_another_deployment_is_foreign(driver, conn, left):
    """Same cluster name, another deployment (state directory): its pool,
    volumes and domains are neither used, changed nor removed."""
    name = left.name('-pool')
    path = os.path.join(left.directory(), 'pool')
    driver.ensure_pool(name, path, fx.OWNER)
    driver.ensure_volume(name, 'hx-v', GIB, 'qcow2', fx.OWNER)
    spec = domain_spec(left, name, disks=[], nics=[])
    driver.ensure_domain(spec, fx.OWNER)
    vol_path = os.path.join(path, 'hx-v')
    before = (pool_state(conn, name), os.stat(vol_path).st_mtime_ns,
              conn.lookupByName(spec['name']).XMLDesc())

    for call, args in [
            (driver.ensure_pool, (name, path)),
            (driver.remove_pool, (name, path)),
            (driver.ensure_volume, (name, 'hx-v', GIB, 'qcow2')),
            (driver.remove_volume, (name, 'hx-v')),
            (driver.ensure_domain, (spec,)),
            (driver.remove_domain, (spec['name'],))]:
        with pytest.raises(exceptions.ResourceConflict,
                           match=re.escape(fx.OWNER)):
            call(*args, fx.OTHER)
    assert before == (pool_state(conn, name), os.stat(vol_path).st_mtime_ns,
                      conn.lookupByName(spec['name']).XMLDesc())
    assert mark(path) == mark(vol_path) == fx.OWNER

    assert driver.remove_domain(spec['name'], fx.OWNER) is True
    assert driver.remove_volume(name, 'hx-v', fx.OWNER) is True
    assert driver.remove_pool(name, path, fx.OWNER) is True


def test_failed_ensure_leaves_nothing_it_made(driver, conn, left,
                                              monkeypatch):
    """A volume made but not marked, a pool defined but not started:
    the failing request removes them before it raises."""
    name = left.name('-pool')
    path = os.path.join(left.directory(), 'pool')

    def fail(*args, **kwargs):
        raise libvirt.libvirtError('injected failure')

    with monkeypatch.context() as patch:
        patch.setattr(libvirt.virStoragePool, 'create', fail)
        with pytest.raises(exceptions.DriverError, match=name):
            driver.ensure_pool(name, path, fx.OWNER)
    assert name not in [p.name() for p in conn.listAllStoragePools()]
    assert not os.path.exists(path)

    driver.ensure_pool(name, path, fx.OWNER)
    real_set_mark = libvirt_driver._set_mark

    def set_mark(target, owner):
        if target.endswith('hx-v'):
            raise OSError(errno.ENOSPC, 'injected failure')
        real_set_mark(target, owner)

    with monkeypatch.context() as patch:
        patch.setattr(libvirt_driver, '_set_mark', set_mark)
        with pytest.raises(exceptions.DriverError, match='injected'):
            driver.ensure_volume(name, 'hx-v', GIB, 'qcow2', fx.OWNER)
    assert conn.storagePoolLookupByName(name).listVolumes() == []
    assert os.listdir(path) == []
    assert driver.remove_pool(name, path, fx.OWNER) is True
