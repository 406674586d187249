"""Storage through real deploys: LVM pools on a loop device, volumes from
images (copied, from a file or over http, or on a backing file), a
CD-ROM, and somebody else's volume attached as it is; embedded conductor
and hostagent, real libvirt, qemu-img and virtualbmc."""

import contextlib
import functools
import hashlib
import http.server
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from xml.etree import ElementTree as ET

import libvirt
import pytest

from hostagent.drivers.virt import libvirt as libvirt_driver
from tenks import conf as tenks_conf
from tenks import exceptions
from tenks import spec as tenks_spec
from tenks.cli import embedded
from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional

# IPMI ports 9300-9349: each test takes ten of its own.
PORTS = itertools.count(9300, 10)
MIB = 1024 ** 2
LVM_ENV = dict(os.environ, LVM_SUPPRESS_FD_WARNINGS='1')


def run(*argv, env=None):
    return subprocess.run(argv, capture_output=True, text=True, env=env,
                          check=False)


def image_info(path):
    return json.loads(run('qemu-img', 'info', '-U', '--output=json',
                          path).stdout)


def sha256(path):
    with open(path, 'rb') as f:
        return hashlib.file_digest(f, 'sha256').hexdigest()


@pytest.fixture
def images():
    """A directory the qemu user can traverse, with a qcow2 image of
    8 MiB whose first 64 KiB are 0x5a and a raw 'ISO' of 1 MiB."""
    path = tempfile.mkdtemp(prefix='stg', dir='/var/tmp')
    os.chmod(path, 0o711)
    try:
        base = os.path.join(path, 'base.qcow2')
        assert run('qemu-img', 'create', '-q', '-f', 'qcow2', base,
                   '8M').returncode == 0
        assert run('qemu-io', '-f', 'qcow2', '-c', 'write -P 0x5a 0 64k',
                   base).returncode == 0
        with open(os.path.join(path, 'cd.iso'), 'wb') as f:
            f.write(b'CD001' * (MIB // 5) + b'\0' * (MIB % 5))
        yield path
    finally:
        shutil.rmtree(path)


@pytest.fixture
def http_url(images):
    """The images served by a local http.server: its base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=images)
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield 'http://127.0.0.1:%d' % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def foreign_volume(images):
    """Somebody else's pool and volume (not Tenks'), with data on it:
    (pool name, volume name, its path)."""
    name = 'stg-user-%s' % os.path.basename(images)[3:].lower()
    directory = os.path.join(images, 'user')
    os.mkdir(directory)
    conn = libvirt.open(cf.URI)
    pool = conn.storagePoolDefineXML(
        "<pool type='dir'><name>%s</name><target><path>%s</path></target>"
        "</pool>" % (name, directory))
    try:
        pool.create()
        vol = pool.createXML(
            "<volume><name>keep.qcow2</name><capacity unit='bytes'>%d"
            "</capacity><target><format type='qcow2'/></target></volume>"
            % (16 * MIB))
        assert run('qemu-io', '-f', 'qcow2', '-c', 'write -P 0x33 0 64k',
                   vol.path()).returncode == 0
        yield name, 'keep.qcow2', vol.path()
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            for vol in pool.listAllVolumes():
                vol.delete()
            pool.destroy()
        pool.undefine()
        conn.close()


@pytest.fixture
def env(tmp_path):
    with cf.checked(cf.ClusterEnv(tmp_path,
                                  port_base=next(PORTS))) as cluster:
        yield cluster


def domain_disks(name):
    conn = libvirt.open(cf.URI)
    try:
        root = ET.fromstring(conn.lookupByName(name).XMLDesc())
    finally:
        conn.close()
    return [{'device': d.get('device'), 'pool': d.find('source').get('pool'),
             'volume': d.find('source').get('volume'),
             'format': d.find('driver').get('type'),
             'target': d.find('target').get('dev'),
             'bus': d.find('target').get('bus'),
             'readonly': d.find('readonly') is not None}
            for d in root.findall('devices/disk')]


def wait_for_state(name, state, timeout=30):
    conn = libvirt.open(cf.URI)
    try:
        dom = conn.lookupByName(name)
        deadline = time.monotonic() + timeout
        while dom.state()[0] != state:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True
    finally:
        conn.close()


def volume_path(pool, name):
    conn = libvirt.open(cf.URI)
    try:
        return conn.storagePoolLookupByName(pool).storageVolLookupByName(
            name).path()
    finally:
        conn.close()


def test_volumes_from_images_a_cdrom_and_an_existing_volume(
        env, images, http_url, foreign_volume):
    user_pool, user_vol, user_path = foreign_volume
    user_digest = sha256(user_path)
    base = os.path.join(images, 'base.qcow2')
    base_digest = sha256(base)
    spec = env.spec(count=1)
    spec['node_types']['small']['volumes'] = [
        {'capacity': '64MiB', 'image': http_url + '/base.qcow2'},
        {'capacity': '48MiB', 'backing_image': base},
        {'capacity': '4MiB', 'format': 'raw', 'device': 'cdrom',
         'image': os.path.join(images, 'cd.iso')},
        {'existing': {'pool': user_pool, 'volume': user_vol}},
    ]
    spec = tenks_spec.validate(spec)
    env.deploy(spec)
    node = env.node_name(0)
    pool = 'tenks-' + env.cluster
    copied, backed, cdrom = ['%svol%d' % (node, i) for i in range(3)]

    # A copy of the image downloaded over http, of exactly the capacity.
    path = volume_path(pool, copied)
    info = image_info(path)
    assert (info['format'], info['virtual-size']) == ('qcow2', 64 * MIB)
    assert 'backing-filename' not in info
    read = run('qemu-io', '-f', 'qcow2', '-r', '-c', 'read -P 0x5a 0 64k',
               path)
    assert 'read 65536/65536 bytes' in read.stdout, read.stdout + read.stderr
    # Copy-on-write: the image is its backing file.
    info = image_info(volume_path(pool, backed))
    assert info['virtual-size'] == 48 * MIB
    assert info['backing-filename'] == base
    assert info['backing-filename-format'] == 'qcow2'
    # The CD-ROM: the ISO's bytes, then zeros up to its capacity.
    with open(volume_path(pool, cdrom), 'rb') as f:
        assert f.read(5) == b'CD001'
    assert os.path.getsize(volume_path(pool, cdrom)) == 4 * MIB

    disks = domain_disks(node)
    assert sorted((d['target'], d['device'], d['pool'], d['volume'],
                   d['format'], d['bus'], d['readonly']) for d in disks) == [
        ('sda', 'cdrom', pool, cdrom, 'raw', 'sata', True),
        ('vda', 'disk', pool, copied, 'qcow2', 'virtio', False),
        ('vdb', 'disk', pool, backed, 'qcow2', 'virtio', False),
        ('vdc', 'disk', user_pool, user_vol, 'qcow2', 'virtio', False),
    ]
    # Recorded; the existing volume is not Tenks' to remove.
    [record] = env.nodes()
    assert record['volumes'][3] == {'name': user_vol, 'pool': user_pool,
                                    'existing': True}
    assert os.listxattr(user_path) == []

    # Powered on and off through its BMC: libvirt gives the qemu user the
    # files while the VM runs, and gives them back as they were.
    before = [(os.stat(p).st_uid, os.stat(p).st_mode) for p in (user_path,
                                                                 base)]
    port = record['bmc_port']
    assert cf.ipmitool(port, 'power', 'on').returncode == 0
    assert wait_for_state(node, libvirt.VIR_DOMAIN_RUNNING)
    assert cf.ipmitool(port, 'power', 'off').returncode == 0
    assert wait_for_state(node, libvirt.VIR_DOMAIN_SHUTOFF)
    assert [(os.stat(p).st_uid, os.stat(p).st_mode) for p in (
        user_path, base)] == before
    assert os.listxattr(user_path) == []

    # A re-run finds every kind as it was asked: nothing to repair.
    with embedded.embedded(env.conf) as conductor:
        assert conductor.deployments.plan(spec)['changes'] == []

    # Drift: the backing-file volume gone is made again, on its image.
    conn = libvirt.open(cf.URI)
    try:
        conn.storagePoolLookupByName(pool).storageVolLookupByName(
            backed).delete()
    finally:
        conn.close()
    with embedded.embedded(env.conf) as conductor:
        repairs = [(c['resource'], c['action'])
                   for c in conductor.deployments.plan(spec)['changes']]
    assert repairs == [('volume %s' % backed, 'repair')]
    env.deploy(spec)
    assert image_info(volume_path(pool, backed))[
        'backing-filename'] == base

    # A changed image source is refused: the volume is never remade.
    changed = tenks_spec.validate(dict(spec, node_types={'small': dict(
        spec['node_types']['small'], volumes=[
            dict(spec['node_types']['small']['volumes'][0],
                 image=os.path.join(images, 'cd.iso'))]
        + spec['node_types']['small']['volumes'][1:])}))
    with pytest.raises((exceptions.ChangeRefused,
                        exceptions.OperationFailed)) as refused:
        env.deploy(changed)
    assert 'the image it is made from changed' in str(refused.value)

    env.teardown()
    # Somebody else's volume and the image files: there, unchanged.
    assert sha256(user_path) == user_digest
    assert os.listxattr(user_path) == []
    assert sha256(base) == base_digest
    assert sorted(os.listdir(images)) == ['base.qcow2', 'cd.iso', 'user']
    # Nothing downloaded is left in the state directory.
    assert os.listdir(os.path.join(env.state_dir, 'images')) == []


def test_a_volume_file_deleted_by_hand_is_repaired_by_a_re_run(env):
    spec = env.spec(count=1)
    env.deploy(spec)
    pool = 'tenks-' + env.cluster
    name = '%svol0' % env.node_name(0)
    path = volume_path(pool, name)
    # libvirt still lists the volume, until it scans the pool again.
    os.remove(path)
    with embedded.embedded(env.conf) as conductor:
        repairs = [(c['resource'], c['action'])
                   for c in conductor.deployments.plan(spec)['changes']]
    assert repairs == [('volume %s' % name, 'repair')]
    env.deploy(spec)
    assert image_info(path)['virtual-size'] == 64 * MIB
    with embedded.embedded(env.conf) as conductor:
        assert conductor.deployments.plan(spec)['changes'] == []
    env.teardown()


@pytest.mark.parametrize('image,problem', [
    ('base.qcow2', "the image is %d bytes, more than the %d bytes of the "
                   "volume's capacity" % (8 * MIB, 4 * MIB)),
    ('missing.qcow2', 'failed to download image http://127.0.0.1:'),
])
def test_an_image_that_does_not_fit_or_is_not_there_is_refused(
        env, images, http_url, image, problem):
    spec = env.spec(count=1)
    spec['node_types']['small']['volumes'] = [
        {'capacity': '4MiB', 'image': http_url + '/' + image}]
    with pytest.raises(exceptions.OperationFailed) as failed:
        env.deploy(tenks_spec.validate(spec))
    message = str(failed.value)
    assert problem in message
    assert 'rolled back' in message
    assert env.nodes() == []
    assert os.listdir(os.path.join(env.state_dir, 'images')) == []


@contextlib.contextmanager
def loop_device(size):
    """A loop device on a sparse file; on the way out, any volume group
    and physical volume on it removed, the device detached, the file
    deleted."""
    fd, backing = tempfile.mkstemp(prefix='stg', suffix='.img',
                                   dir='/var/tmp')
    os.close(fd)
    os.truncate(backing, size)
    device = run('losetup', '--find', '--show', backing).stdout.strip()
    assert device.startswith('/dev/loop'), device
    try:
        yield device
    finally:
        found = run('pvs', '--noheadings', '-o', 'vg_name', device,
                    env=LVM_ENV)
        vg = found.stdout.strip()
        if found.returncode == 0 and vg:
            run('vgremove', '-f', vg, env=LVM_ENV)
        if found.returncode == 0:
            run('pvremove', '-f', device, env=LVM_ENV)
        run('losetup', '-d', device)
        os.remove(backing)
        assert backing not in run('losetup', '-a').stdout


def vg_tags(vg):
    done = run('vgs', '--noheadings', '-o', 'vg_tags,pv_name', vg,
               env=LVM_ENV)
    return done.returncode, done.stdout.split()


def test_lvm_pool_on_a_loop_device(env):
    with loop_device(64 * MIB) as device:
        spec = env.spec(count=1, libvirt_pool_type='logical',
                        libvirt_pool_devices=[device])
        spec['node_types']['small']['volumes'] = []
        env.deploy(spec)
        pool = 'tenks-' + env.cluster
        with embedded.embedded(env.conf) as conductor:
            owner = 'tenks:%s:%s/%s' % (
                env.cluster, conductor.db.get_cluster(env.cluster).uuid,
                env.conf.hostagent.host)
        # A volume group of the pool's name on the device, tagged with
        # its owner (the deployment and the hostagent); the pool is
        # libvirt's logical pool on it.
        assert vg_tags(pool) == (0, [owner, device])
        conn = libvirt.open(cf.URI)
        try:
            root = ET.fromstring(conn.storagePoolLookupByName(
                pool).XMLDesc())
        finally:
            conn.close()
        assert root.get('type') == 'logical'
        assert root.find('source/device').get('path') == device
        env.teardown()
        # Group and physical volume gone, not only the pool.
        assert vg_tags(pool)[0] != 0
        assert run('pvs', device, env=LVM_ENV).returncode != 0


def device_mapper():
    with open('/proc/misc') as f:
        return 'device-mapper' in f.read()


def test_lvm_volumes_are_created_grown_and_removed(tmp_path):
    """Driver level: the logical volumes of a logical pool.

    LVM activates a logical volume through the kernel's device-mapper;
    a kernel without it (as on these test machines) refuses every
    lvcreate: then the test checks that the refusal is clear and leaves
    nothing, and skips the rest.
    """
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    conf.set_override('state_dir', str(tmp_path))
    driver = libvirt_driver.LibvirtDriver(conf)
    owner = 'tenks:stg:%s' % os.path.basename(tmp_path)
    name = 'tenks-stg%s' % os.urandom(2).hex()
    with loop_device(64 * MIB) as device:
        try:
            created = driver.ensure_pool(name, '/dev/' + name, owner,
                                         'logical', [device])
            assert created['created']
            assert driver.ensure_pool(name, '/dev/' + name, owner,
                                      'logical', [device]) == {
                'created': False, 'changed': False}
            if not device_mapper():
                with pytest.raises(exceptions.DriverError) as failed:
                    driver.ensure_volume(name, 'v0', 8 * MIB, 'raw', owner)
                assert 'device-mapper' in str(failed.value)
                assert driver.volume_info(name, 'v0', owner) is None
                pytest.skip('this kernel has no device-mapper: LVM can '
                            'make no logical volume')
            assert driver.ensure_volume(name, 'v0', 8 * MIB, 'raw',
                                        owner)['created']
            assert driver.volume_info(name, 'v0', owner) == {
                'capacity': 8 * MIB, 'format': 'raw'}
            assert driver.resize_volume(name, 'v0', 16 * MIB, owner)
            assert driver.volume_info(name, 'v0', owner)['capacity'] == (
                16 * MIB)
            assert driver.remove_volume(name, 'v0', owner)
            assert driver.volume_info(name, 'v0', owner) is None
        finally:
            driver.remove_pool(name, '/dev/' + name, owner, 'logical',
                               [device])
        assert vg_tags(name)[0] != 0


def test_lvm_groups_and_devices_of_somebody_else_are_left_alone(tmp_path):
    """A volume group of the pool's name without our tag, and a device
    that holds another group, are refused and kept as they were."""
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    conf.set_override('state_dir', str(tmp_path))
    driver = libvirt_driver.LibvirtDriver(conf)
    owner = 'tenks:stg:%s' % os.path.basename(tmp_path)
    name = 'tenks-stg%s' % os.urandom(2).hex()
    with loop_device(16 * MIB) as device:
        assert run('vgcreate', '-q', name, device, env=LVM_ENV).returncode == 0
        with pytest.raises(exceptions.ResourceConflict) as refused:
            driver.ensure_pool(name, '/dev/' + name, owner, 'logical',
                               [device])
        assert 'no Tenks owner tag' in str(refused.value)
        with pytest.raises(exceptions.ResourceConflict):
            driver.remove_pool(name, '/dev/' + name, owner, 'logical',
                               [device])
        assert vg_tags(name) == (0, [device])
        # Another pool name on that device: refused, even to be wiped.
        other = name + 'b'
        with pytest.raises(exceptions.DeviceRefused) as refused:
            driver.ensure_pool(other, '/dev/' + other, owner, 'logical',
                               [device], wipe=[device])
        assert '%s is a physical volume of volume group %s' % (
            device, name) in str(refused.value)
        assert vg_tags(name) == (0, [device])
        conn = libvirt.open(cf.URI)
        try:
            assert other not in [p.name() for p in
                                 conn.listAllStoragePools()]
        finally:
            conn.close()


def head_digest(path):
    """The digest of the first 2 MiB of ``path``."""
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read(2 * MIB)).hexdigest()


def write_records(device):
    """Raw records from the device's first KiB on, in no format that
    wipefs knows."""
    with open(device, 'r+b') as f:
        f.seek(1024)
        f.write(b''.join(b'record %06d\n' % i for i in range(4096)))
        os.fsync(f.fileno())


def logical_pool(env, devices):
    spec = env.spec(count=1, libvirt_pool_type='logical',
                    libvirt_pool_devices=devices)
    # This kernel may have no device-mapper: no logical volume then.
    spec['node_types']['small']['volumes'] = []
    return spec


def test_a_logical_pool_takes_no_device_that_holds_data_unless_told(env):
    """Raw records and a file system are refused by plan and deploy,
    naming each device and what it holds, before anything is written;
    with wipe: true, the pool takes them."""
    with loop_device(32 * MIB) as records, loop_device(32 * MIB) as ext4:
        write_records(records)
        assert run('mkfs.ext4', '-q', ext4).returncode == 0
        before = [head_digest(records), head_digest(ext4)]
        spec = logical_pool(env, [records, ext4])
        errors = []
        for attempt in (env.plan, env.deploy):
            with pytest.raises(exceptions.DeviceRefused) as refused:
                attempt(spec)
            errors.append(str(refused.value))
        assert errors[0] == errors[1]
        pool = 'tenks-' + env.cluster
        assert errors[0].startswith(
            'Storage pool %s cannot take its devices: %s holds data in its '
            'first MiB (no signature that wipefs knows); %s holds ext4 (at '
            'offset 0x438).' % (pool, records, ext4))
        assert [head_digest(records), head_digest(ext4)] == before
        assert vg_tags(pool)[0] != 0
        assert env.nodes() == [] and env.leftovers() == []

        env.deploy(logical_pool(env, [{'path': records, 'wipe': True},
                                      {'path': ext4, 'wipe': True}]))
        assert sorted(run('pvs', '--noheadings', '-o', 'pv_name',
                          '--select', 'vg_name=' + pool,
                          env=LVM_ENV).stdout.split()) == sorted(
            [records, ext4])
        env.teardown()
        assert vg_tags(pool)[0] != 0


def test_the_hostagent_refuses_devices_in_use_or_not_blocks(tmp_path):
    """Driver level, as the deploy's check and ensure_pool see them:
    even devices the spec lets Tenks wipe. A path that leaves /dev is
    resolved: a file is no block device, and stays as it was. (A
    partitioned device: tests/unit/test_storage.py, this kernel reads no
    partition table.)"""
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    conf.set_override('state_dir', str(tmp_path))
    driver = libvirt_driver.LibvirtDriver(conf)
    owner = 'tenks:stg:%s' % os.path.basename(tmp_path)
    name = 'tenks-stg%s' % os.urandom(2).hex()
    data = tmp_path / 'file.img'
    data.write_bytes(b'record\n' * MIB)
    mnt = tmp_path / 'mnt'
    mnt.mkdir()
    with loop_device(32 * MIB) as mounted:
        assert run('mkfs.ext4', '-q', mounted).returncode == 0
        assert run('mount', mounted, str(mnt)).returncode == 0
        try:
            devices = [mounted, '/dev/..%s' % data]
            for attempt in (driver.check_pool_devices, functools.partial(
                    driver.ensure_pool, path='/dev/' + name,
                    pool_type='logical')):
                with pytest.raises(exceptions.DeviceRefused) as refused:
                    attempt(name, devices=devices, owner=owner,
                            wipe=devices)
                assert ('%s is mounted on %s; /dev/..%s (%s) is not a '
                        'block device.' % (mounted, mnt, data, data)
                        ) in str(refused.value)
        finally:
            assert run('umount', str(mnt)).returncode == 0
    assert data.read_bytes() == b'record\n' * MIB
    assert vg_tags(name)[0] != 0
    conn = libvirt.open(cf.URI)
    try:
        assert name not in [p.name() for p in conn.listAllStoragePools()]
    finally:
        conn.close()


def test_an_existing_volume_tenks_made_is_refused(env, foreign_volume):
    """One that carries another deployment's owner mark: plan and deploy
    refuse it, naming it, its pool and its owner, and make nothing."""
    user_pool, user_vol, user_path = foreign_volume
    mark = 'tenks:other:8e2b1f0e-5b1c-4c59-a1a4-0d6f3e1d2c3b/hv9'
    os.setxattr(user_path, 'user.tenks.owner', mark.encode())
    spec = env.spec(count=1)
    spec['node_types']['small']['volumes'].append(
        {'existing': {'pool': user_pool, 'volume': user_vol}})
    errors = []
    for attempt in (env.plan, env.deploy):
        with pytest.raises(exceptions.ResourceConflict) as refused:
            attempt(spec)
        errors.append(str(refused.value))
    assert errors[0] == errors[1]
    assert ('volume %s of storage pool %s (of node %s) belongs to %s' % (
        user_vol, user_pool, env.node_name(0), mark)) in errors[0]
    assert env.nodes() == [] and env.leftovers() == []


@pytest.mark.parametrize('how', ['through libvirt', 'by hand'])
def test_an_existing_volume_gone_is_reported_by_plan_and_a_re_run(
        env, foreign_volume, how):
    """Not a traceback: an error that names it, its pool and its node,
    and says that Tenks does not make it."""
    user_pool, user_vol, user_path = foreign_volume
    spec = env.spec(count=1)
    spec['node_types']['small']['volumes'].append(
        {'existing': {'pool': user_pool, 'volume': user_vol}})
    env.deploy(spec)
    conn = libvirt.open(cf.URI)
    try:
        pool = conn.storagePoolLookupByName(user_pool)
        if how == 'by hand':
            # libvirt lists it until it scans the pool again.
            os.remove(user_path)
        else:
            pool.storageVolLookupByName(user_vol).delete()
        errors = []
        for attempt in (env.plan, env.deploy):
            with pytest.raises(exceptions.ExistingVolumesGone) as refused:
                attempt(spec)
            errors.append(str(refused.value))
        assert errors[0] == errors[1] == (
            'Existing volumes are gone: volume %s of storage pool %s (of '
            'node %s on %s). Tenks attaches an existing volume as it is and '
            'never makes one: put it back, or take it out of the spec' % (
                user_vol, user_pool, env.node_name(0),
                env.conf.hostagent.host))
        # The node is as it was, and goes with its cluster.
        assert [d['volume'] for d in domain_disks(env.node_name(0))][-1] == (
            user_vol)
        env.teardown()
        pool.refresh()
    finally:
        conn.close()
