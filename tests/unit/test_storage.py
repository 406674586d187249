"""Storage kinds through the pipeline: spec, records, plans, node
requests and the hostagent's whole-node requests (fake drivers), the
libvirt domain's disks, and the LVM tag reading."""

import os
import stat
import subprocess
from xml.etree import ElementTree as ET

import libvirt
import pytest

from flows import host_setup
from flows import nodes as node_flows
from hostagent import nodes
from hostagent import rpcapi
from hostagent.drivers.virt import libvirt as libvirt_driver
from hostagent.drivers.virt import storage
from tenks import conf as tenks_conf
from tenks import exceptions
from tenks import reconcile
from tenks import scheduler
from tests.unit.conftest import make_spec
from tests.unit.test_nodes import OWNER
from tests.unit.test_nodes import agent  # noqa: F401 (a fixture)
from tests.unit.test_nodes import node
from tests.unit.test_reconcile import deployed
from tests.unit.test_reconcile import plan
from tests.unit.test_scheduler import facts

MIB = 1024 ** 2
USER = {'pool': 'default', 'volume': 'keep.qcow2'}


def typed(*volumes, count=1, **top):
    return make_spec(count=count, node_types={'small': {
        'memory_mb': 128, 'vcpus': 1, 'volumes': list(volumes),
        'physical_networks': ['physnet1']}}, **top)


def problems(*volumes, count=1, **top):
    with pytest.raises(exceptions.SpecError) as raised:
        typed(*volumes, count=count, **top)
    return raised.value.problems


# The spec

def test_volume_kinds_become_records():
    spec = typed({'capacity': '1GiB', 'image': 'https://x/a.qcow2'},
                 {'capacity': '1GiB', 'backing_image': '/images/a.qcow2'},
                 {'capacity': '8MiB', 'image': '/images/cd.iso',
                  'device': 'cdrom', 'format': 'raw'},
                 {'existing': USER, 'device': 'cdrom'},
                 {'capacity': '1GiB'})
    [record] = scheduler.schedule(spec, {'hv1': facts()}, [])
    assert record['volumes'] == [
        {'name': 'tk0vol0', 'capacity': 1024 ** 3, 'format': 'qcow2',
         'source': {'url': 'https://x/a.qcow2', 'backing': False}},
        {'name': 'tk0vol1', 'capacity': 1024 ** 3, 'format': 'qcow2',
         'source': {'path': '/images/a.qcow2', 'backing': True}},
        {'name': 'tk0vol2', 'capacity': 8 * MIB, 'format': 'raw',
         'source': {'path': '/images/cd.iso', 'backing': False},
         'device': 'cdrom'},
        {'name': 'keep.qcow2', 'pool': 'default', 'existing': True,
         'device': 'cdrom'},
        # A blank disk is recorded as before: old records stay equal.
        {'name': 'tk0vol4', 'capacity': 1024 ** 3, 'format': 'qcow2'},
    ]


def test_what_volume_kinds_refuse():
    assert problems(
        {'existing': USER, 'capacity': '1GiB', 'format': 'raw'},
        {'capacity': '1GiB', 'image': '/a', 'backing_image': '/b'},
        {'capacity': '1GiB', 'backing_image': '/b', 'format': 'raw'},
        {'format': 'raw'},
        {'capacity': '1GiB', 'backing_image': 'http://x/b.qcow2'},
        {'capacity': '1GiB', 'image': 'ftp://x/b.qcow2'},
        {'capacity': '1GiB', 'device': 'floppy'},
    ) == [
        "node_types.small.volumes[4].backing_image: 'http://x/b.qcow2' is "
        'invalid: expected an absolute path of a file on the hypervisor (a '
        'backing file must stay readable for the life of the volume, so no '
        'URL)',
        "node_types.small.volumes[5].image: 'ftp://x/b.qcow2' is invalid: "
        'expected an absolute path or an http(s):// URL',
        "node_types.small.volumes[6].device: 'floppy' is not one of: disk, "
        'cdrom',
        'node_types.small.volumes[0]: capacity, format cannot go with '
        'existing: an existing volume is attached as it is',
        'node_types.small.volumes[1]: give image (a copy) or backing_image '
        '(copy-on-write), not both',
        'node_types.small.volumes[2].format: a volume with a backing_image '
        'is qcow2, not raw',
        "node_types.small.volumes[3]: missing required key 'capacity'",
    ]


def test_an_existing_volume_serves_one_node():
    assert problems({'existing': USER}, count=2) == [
        'node_types.small.volumes[0].existing: volume keep.qcow2 of pool '
        'default would be attached to 2 nodes; an existing volume serves '
        'one node (count 1)']


def test_a_logical_pool_needs_devices_raw_volumes_and_whole_extents():
    assert problems({'capacity': '1GB'}, {'capacity': '8MiB',
                                          'format': 'qcow2'},
                    {'capacity': '8MiB', 'backing_image': '/b'},
                    libvirt_pool_type='logical') == [
        'libvirt_pool_devices: libvirt_pool_type logical needs the block '
        'devices of its volume group',
        'node_types.small.volumes[0].capacity: 1000000000 bytes is not a '
        'multiple of the 4 MiB extents of a logical (LVM) pool, and a '
        'volume gets exactly its capacity: use e.g. 1002438656 bytes',
        'node_types.small.volumes[1].format: a logical (LVM) pool holds raw '
        'volumes only',
        'node_types.small.volumes[2].backing_image: a logical (LVM) pool has '
        'no copy-on-write volumes: use image (a copy)',
    ]
    assert problems(libvirt_pool_devices=['/dev/sdb']) == [
        'libvirt_pool_devices: only for libvirt_pool_type logical (the pool '
        'type is dir)']
    spec = typed({'capacity': '8MiB'}, libvirt_pool_type='logical',
                 libvirt_pool_devices=['/dev/loop7'])
    # Raw by default in a logical pool.
    assert spec['node_types']['small']['volumes'] == [
        {'capacity': 8 * MIB, 'format': 'raw'}]


# Plans

def test_a_logical_pool_is_a_volume_group_on_its_devices():
    spec = typed({'capacity': '8MiB'}, libvirt_pool_type='logical',
                 libvirt_pool_devices=['/dev/loop7'])
    [(kind, name, args)] = [r for r in reconcile.host_resources(
        spec, 'd1', 'hv1', facts()) if r[0] == 'pool']
    assert (kind, name) == ('pool', 'tenks-unit')
    assert args == {'name': 'tenks-unit', 'path': '/dev/tenks-unit',
                    'pool_type': 'logical', 'devices': ['/dev/loop7'],
                    'owner': 'tenks:unit:d1'}
    # A dir pool's arguments are what they were: no change on a re-run.
    [(_, _, args)] = [r for r in reconcile.host_resources(
        make_spec(), 'd1', 'hv1', facts()) if r[0] == 'pool']
    assert set(args) == {'name', 'path', 'owner'}


def test_a_pool_never_changes_type():
    spec = typed({'capacity': '8MiB', 'format': 'raw'})
    nodes_, resources = deployed(spec)
    logical = typed({'capacity': '8MiB'}, libvirt_pool_type='logical',
                    libvirt_pool_devices=['/dev/loop7'])
    with pytest.raises(exceptions.ChangeRefused,
                       match='type or devices changed'):
        plan(logical, spec, nodes_, resources)


@pytest.mark.parametrize('before,after,what', [
    ({'capacity': '1GiB', 'image': '/a'},
     {'capacity': '1GiB', 'image': '/b'}, 'the image it is made from'),
    ({'capacity': '1GiB'}, {'capacity': '1GiB', 'backing_image': '/b'},
     'the image it is made from'),
    ({'capacity': '1GiB'}, {'capacity': '1GiB', 'device': 'cdrom'},
     'its device'),
])
def test_a_volume_is_never_remade_in_place(before, after, what):
    spec = typed(before)
    nodes_, resources = deployed(spec)
    with pytest.raises(exceptions.ChangeRefused) as refused:
        plan(typed(after), spec, nodes_, resources)
    assert '%s changed' % what in str(refused.value)
    assert 'change vol_name_prefix' in str(refused.value)


def test_same_kinds_plan_nothing_and_existing_volumes_are_not_recorded():
    spec = typed({'capacity': '1GiB', 'image': '/a'}, {'existing': USER})
    nodes_, resources = deployed(spec)
    assert plan(spec, spec, nodes_, resources)['changes'] == []
    [entry] = plan(spec, None, [], [])['nodes']
    assert [name for kind, name, _ in node_flows.node_resources(
        entry['new']) if kind == 'volume'] == ['tk0vol0']


def test_ironic_root_disk_is_the_first_disk():
    spec = typed({'capacity': '8MiB', 'device': 'cdrom'},
                 {'existing': USER}, {'capacity': '3GiB'})
    assert reconcile.root_disk_bytes(spec['node_types']['small']) == 0
    spec = typed({'capacity': '8MiB', 'device': 'cdrom'},
                 {'capacity': '3GiB'})
    assert reconcile.root_disk_bytes(spec['node_types']['small']) == (
        3 * 1024 ** 3)


# Node requests and the hostagent

EXISTING = {'name': 'keep.qcow2', 'pool': 'default', 'existing': True}


def test_node_requests_of_volume_kinds_are_checked():
    nodes.check(node(volumes=[EXISTING, {
        'name': 'v1', 'capacity': 512, 'format': 'qcow2', 'device': 'cdrom',
        'source': {'path': '/a', 'backing': True}}]))
    for bad in (dict(EXISTING, capacity=512),
                {'name': 'v1', 'capacity': 512, 'format': 'qcow2',
                 'source': {'url': 'http://x/a', 'backing': True}},
                {'name': 'v1', 'capacity': 512, 'format': 'qcow2',
                 'source': {'backing': False}},
                {'name': 'v1', 'existing': True}):
        with pytest.raises(exceptions.InvalidNodeRequest):
            nodes.check(node(volumes=[bad]))


def test_an_existing_volume_is_locked_in_its_own_pool():
    assert ('volume', 'default', 'keep.qcow2') in nodes.things(
        node(volumes=[EXISTING]))


def test_an_existing_volume_is_attached_never_made_or_removed(
        agent, hypervisor):  # noqa: F811
    hypervisor.things[('existing', 'default', 'keep.qcow2')] = {
        'capacity': 4096, 'format': 'raw'}
    wanted = node(volumes=node()['volumes'] + [EXISTING])
    result = agent.nodes.ensure(wanted, OWNER, False)
    assert ['volume', 'keep.qcow2'] not in result['created']
    assert ('volume', 'keep.qcow2') not in hypervisor.things
    disks = hypervisor.things[('domain', 'n0')]['disks']
    assert disks[1] == {'pool': 'default', 'volume': 'keep.qcow2',
                        'format': 'raw', 'device': 'disk'}
    assert agent.nodes.inspect([wanted], OWNER)['nodes'] == {
        wanted['uuid']: []}
    # A node that loses it asks for no removal of it.
    view = dict(wanted, boot_mode='bios', secure_boot=False,
                console_log=None, bmc={'type': 'ipmi', 'address': 'a',
                                       'port': 1, 'username': 'u'})
    request = rpcapi.node_request(dict(view, volumes=node()['volumes']),
                                  {'ipmi': 'pw'}, gone=view)
    assert request['remove']['volumes'] == []


def test_a_missing_existing_volume_is_drift_and_refused(
        agent, hypervisor):  # noqa: F811
    wanted = node(volumes=[EXISTING])
    # Not its domain, whose disk has no format to compare while the
    # volume is gone.
    assert agent.nodes.inspect([wanted], OWNER)['nodes'] == {
        wanted['uuid']: [['volume', 'keep.qcow2', 'missing'],
                         ['port', 'n0t0', 'missing'],
                         ['bmc', 'n0', 'missing']]}
    with pytest.raises(exceptions.DriverError) as refused:
        agent.nodes.ensure(wanted, OWNER, False)
    assert 'never made' in str(refused.value)
    assert hypervisor.things == {}


@pytest.mark.parametrize('marks,found', [
    ({'owner': 'tenks:other:d2/hv2'}, 'belongs to tenks:other:d2/hv2'),
    ({'owner': OWNER + '/hv1'}, 'belongs to %s/hv1' % OWNER),
    ({'pool_owner': 'tenks:other:d2'},
     'is in a pool that belongs to tenks:other:d2'),
])
def test_an_existing_volume_tenks_made_is_refused(
        agent, hypervisor, marks, found):  # noqa: F811
    hypervisor.things[('existing', 'default', 'keep.qcow2')] = dict(
        {'capacity': 4096, 'format': 'raw'}, **marks)
    wanted = node(volumes=node()['volumes'] + [EXISTING])
    for attempt in (lambda: agent.nodes.inspect([wanted], OWNER),
                    lambda: agent.nodes.ensure(wanted, OWNER, False)):
        with pytest.raises(exceptions.ResourceConflict) as refused:
            attempt()
        assert str(refused.value) == (
            'Existing volumes that Tenks made are refused: volume '
            'keep.qcow2 of storage pool default (of node n0) %s; an '
            'existing volume is one that Tenks did not make, attached as '
            'it is' % found)
    assert set(hypervisor.things) == {('existing', 'default', 'keep.qcow2')}


def test_plan_and_deploy_refuse_a_new_node_whose_existing_volume_is_gone(
        conductor, hypervisor):
    spec = typed({'capacity': '1GiB'}, {'existing': USER})
    errors = []
    for attempt in (conductor.deployments.plan, conductor.deployments.deploy):
        with pytest.raises(exceptions.ExistingVolumesGone) as refused:
            attempt(spec)
        errors.append(str(refused.value))
    assert errors == [
        'Existing volumes are gone: volume keep.qcow2 of storage pool '
        'default (of node tk0 on hv1). Tenks attaches an existing volume '
        'as it is and never makes one: put it back, or take it out of the '
        'spec'] * 2
    assert hypervisor.things == {}
    assert conductor.db.get_cluster('unit') is None


def test_an_existing_volume_gone_after_deploy_is_refused_by_plan_and_re_run(
        conductor, hypervisor):
    hypervisor.things[('existing', 'default', 'keep.qcow2')] = {
        'capacity': 4096, 'format': 'raw'}
    spec = typed({'capacity': '1GiB'}, {'existing': USER})
    conductor.deployments.deploy(spec)
    assert conductor.deployments.plan(spec)['changes'] == []
    del hypervisor.things[('existing', 'default', 'keep.qcow2')]
    before = dict(hypervisor.things)
    errors = []
    for attempt in (conductor.deployments.plan, conductor.deployments.deploy):
        with pytest.raises(exceptions.ExistingVolumesGone) as refused:
            attempt(spec)
        errors.append(str(refused.value))
    assert errors[0] == errors[1]
    assert errors[0].startswith(
        'Existing volumes are gone: volume keep.qcow2 of storage pool '
        'default (of node tk0 on hv1). Tenks attaches an existing volume '
        'as it is and never makes one')
    assert hypervisor.things == before
    # Put back, the node is as it was: nothing to do.
    hypervisor.things[('existing', 'default', 'keep.qcow2')] = {
        'capacity': 4096, 'format': 'raw'}
    assert conductor.deployments.plan(spec)['changes'] == []


def test_a_backing_file_of_another_image_is_a_conflict():
    vol = {'name': 'v', 'capacity': 512, 'format': 'qcow2',
           'source': {'path': '/a', 'backing': True}}
    assert nodes.volume_change(node(), vol, {
        'capacity': 512, 'format': 'qcow2', 'backing': '/a'}) is None
    with pytest.raises(exceptions.ResourceConflict, match='never remade'):
        nodes.volume_change(node(), vol, {
            'capacity': 512, 'format': 'qcow2', 'backing': '/b'})


# The libvirt driver

def test_a_cdrom_is_a_readonly_sata_disk(tmp_path):
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    conf.set_override('state_dir', str(tmp_path))
    driver = libvirt_driver.LibvirtDriver(conf)
    xml = driver._domain_xml({
        'name': 'n0', 'uuid': '3f1a3c1e-1a52-4c55-9d0e-1f8d7c6b5a40',
        'domain_type': 'qemu', 'vcpus': 1, 'memory_mb': 128,
        'console_log_enabled': False, 'nics': [],
        'disks': [{'pool': 'p', 'volume': 'v0', 'format': 'qcow2'},
                  {'pool': 'p', 'volume': 'v1', 'format': 'raw',
                   'device': 'cdrom'},
                  {'pool': 'q', 'volume': 'v2', 'format': 'qcow2',
                   'device': 'disk', 'backing': '/i/base.img'}]},
        OWNER, {'/i/base.img': 'raw'})
    disks = ET.fromstring(xml).findall('devices/disk')
    # The backing image, named with relabel=no: libvirt leaves it alone.
    store = disks[2].find('backingStore')
    assert store.find('format').get('type') == 'raw'
    assert store.find('source').get('file') == '/i/base.img'
    assert store.find('source/seclabel').attrib == {'model': 'dac',
                                                    'relabel': 'no'}
    assert store.find('backingStore') is not None  # the end of the chain
    assert disks[0].find('backingStore') is None
    assert [(d.get('device'), d.find('target').get('dev'),
             d.find('target').get('bus'), d.find('readonly') is not None)
            for d in disks] == [('disk', 'vda', 'virtio', False),
                                ('cdrom', 'sda', 'sata', True),
                                ('disk', 'vdb', 'virtio', False)]


def test_lvm_tags_are_read_per_volume(monkeypatch):
    def run(argv, **kwargs):
        assert kwargs['env']['LVM_SUPPRESS_FD_WARNINGS'] == '1'
        if argv[-1] == 'none':
            return subprocess.CompletedProcess(argv, 5, '', 'not found')
        return subprocess.CompletedProcess(
            argv, 0, '  v0|tenks:c:a\n  v1|\n  v2|x,tenks:c:b\n', '')

    monkeypatch.setattr(subprocess, 'run', run)
    assert storage.lv_tags('vg') == {'v0': ['tenks:c:a'], 'v1': [],
                                     'v2': ['x', 'tenks:c:b']}
    assert storage.lv_tags('none') == {}
    assert storage.vg_tags('none') is None


def test_an_image_larger_than_the_capacity_is_an_error():
    storage.check_fits('/a', {'capacity': 512}, 'v', 512)
    with pytest.raises(exceptions.DriverError) as failed:
        storage.check_fits('/a', {'capacity': 1024}, 'v', 512)
    assert ("the image is 1024 bytes, more than the 512 bytes of the "
            "volume's capacity") in str(failed.value)


@pytest.mark.parametrize('path, why', [
    ('/dev/null', 'it is a device: an image is a regular file'),
    ('/tmp', 'it is a directory: an image is a regular file'),
    ('/nonexistent/image.qcow2', 'no such file'),
])
def test_an_image_that_is_no_file_is_named_so(path, why):
    with pytest.raises(exceptions.DriverError) as failed:
        storage.image_info(path)
    assert str(failed.value) == 'libvirt failed to read image %s: %s' % (
        path, why)


class FakeVol:

    def __init__(self, name, capacity):
        self._name, self.capacity = name, capacity
        self.deleted = False

    def name(self):
        return self._name

    def path(self):
        return '/dev/vg/' + self._name

    def info(self):
        return [0, self.capacity, self.capacity]

    def XMLDesc(self, flags=0):
        # libvirt gives a logical volume no format.
        return ("<volume><name>%s</name><capacity unit='bytes'>%d"
                "</capacity><target/></volume>" % (self._name, self.capacity))

    def delete(self, flags=0):
        self.deleted = True


class FakePool:

    def __init__(self, vols):
        self.vols = {vol.name(): vol for vol in vols}

    def XMLDesc(self, flags=0):
        return ("<pool type='logical'><name>p</name><source><name>vg</name>"
                "</source><target><path>/dev/vg</path></target></pool>")

    def isActive(self):
        return True

    def listAllVolumes(self):
        return list(self.vols.values())

    def storageVolLookupByName(self, name):
        return self.vols[name]


class FakeConn:

    def __init__(self, pool):
        self.pool = pool

    def isAlive(self):
        return 1

    def storagePoolLookupByName(self, name):
        return self.pool


def test_logical_volumes_are_ours_by_their_lvm_tag(monkeypatch, tmp_path):
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    conf.set_override('state_dir', str(tmp_path))
    driver = libvirt_driver.LibvirtDriver(conf)
    mine, theirs = FakeVol('v0', 8 * MIB), FakeVol('v1', 8 * MIB)
    driver._conn = FakeConn(FakePool([mine, theirs]))
    monkeypatch.setattr(storage, 'lv_tags', lambda vg: {
        'v0': [OWNER], 'v1': ['tenks:c:other']} if vg == 'vg' else {})
    assert driver.volume_infos('p', ['v0', 'v1', 'v2'], OWNER) == {
        'v0': {'capacity': 8 * MIB, 'format': 'raw'}, 'v1': 'foreign',
        'v2': None}
    assert driver.ensure_volume('p', 'v0', 8 * MIB, 'raw', OWNER) == {
        'created': False, 'changed': False}
    with pytest.raises(exceptions.ResourceConflict) as refused:
        driver.remove_volume('p', 'v1', OWNER)
    assert 'tags tenks:c:other' in str(refused.value)
    assert not theirs.deleted
    assert driver.remove_volume('p', 'v0', OWNER) and mine.deleted


class NamedPool(FakePool):

    def name(self):
        return 'p'


class UndefinedPool(NamedPool):
    """A pool undefined by another process once listed."""

    def isActive(self):
        error = libvirt.libvirtError('Storage pool not found')
        error.err = (libvirt.VIR_ERR_NO_STORAGE_POOL, 0, 'not found')
        raise error


class RemovedDirPool(NamedPool):
    """A directory pool whose directory went once listed."""

    def __init__(self, path):
        super().__init__([])
        self.path = path

    def XMLDesc(self, flags=0):
        return ("<pool type='dir'><name>p</name><target><path>%s</path>"
                "</target></pool>" % self.path)


class Pools:

    def __init__(self, *pools):
        self.pools = pools

    def listAllStoragePools(self):
        return list(self.pools)


def test_a_pool_undefined_while_marks_are_listed_is_not_an_error(
        monkeypatch, tmp_path):
    """Found by the fault suite: another deployment's teardown removed a
    marked pool during an audit, which failed (the hypervisor
    'unchecked'). Gone, it is not listed."""
    monkeypatch.setattr(storage, 'vg_tags', lambda vg: [OWNER])
    monkeypatch.setattr(storage, 'lv_tags', lambda vg: {'v0': [OWNER]})
    found = libvirt_driver.LibvirtDriver._marked_pools(Pools(
        UndefinedPool([]), RemovedDirPool(tmp_path / 'gone'),
        NamedPool([])))
    assert [(pool['name'], pool['active'], pool['volumes'])
            for pool in found] == [('p', True, [('v0', OWNER)])]


# Devices of a logical pool

def logical(*devices):
    return typed({'capacity': '8MiB'}, libvirt_pool_type='logical',
                 libvirt_pool_devices=list(devices))


def pool_args(spec):
    [args] = [args for kind, _, args in reconcile.host_resources(
        spec, 'd1', 'hv1', facts()) if kind == 'pool']
    return args


def test_pool_devices_are_plain_paths_under_dev_each_listed_once():
    assert problems({'capacity': '8MiB'}, libvirt_pool_type='logical',
                    libvirt_pool_devices=[
                        '/dev/../tmp/file', '/dev/sdb',
                        {'path': '/dev/sdb', 'wipe': True},
                        {'path': '/dev/sdc', 'wipe': 'yes'},
                        {'path': '/srv/disk'}, {'wipe': True}]) == [
        "libvirt_pool_devices[3].wipe: expected true or false, got 'yes'",
        "libvirt_pool_devices[4].path: '/srv/disk' is invalid: expected a "
        'block device under /dev',
        "libvirt_pool_devices[5]: missing required key 'path'",
        "libvirt_pool_devices[0]: '/dev/../tmp/file' is not a plain path "
        'under /dev (no "..", "." or "//")',
        'libvirt_pool_devices[2]: /dev/sdb is listed more than once',
    ]


def test_a_device_the_spec_lets_tenks_wipe_is_destructive_not_recorded():
    spec = logical('/dev/sdb', {'path': '/dev/sdc', 'wipe': True})
    args = pool_args(spec)
    assert args == {'name': 'tenks-unit', 'path': '/dev/tenks-unit',
                    'pool_type': 'logical',
                    'devices': ['/dev/sdb', '/dev/sdc'],
                    'wipe': ['/dev/sdc'], 'owner': 'tenks:unit:d1'}
    assert 'wipe' not in pool_args(logical('/dev/sdb', {'path': '/dev/sdc'}))
    made = plan(spec, None, [], [])
    [line] = [c for c in made['changes'] if c['resource'].startswith('pool')]
    assert (line['action'], line['field'], line['new']) == (
        'create', 'wipe', ['/dev/sdc'])
    assert reconcile.destructive(made) == [line]
    # The pool is recorded without it: only its making wipes.
    [entry] = [e for e in made['host_ensure'] if e['kind'] == 'pool']
    [task] = host_setup.host_setup_flow([entry])
    assert task.ensure_args['wipe'] == ['/dev/sdc']
    assert task.remove_args == reconcile.recorded_args(task.ensure_args)
    assert 'wipe' not in task.remove_args
    # So a re-run, with the opt-in or without it, changes nothing.
    nodes_, resources = deployed(spec)
    for row in resources:
        row['remove_args'] = reconcile.recorded_args(row['remove_args'])
    assert plan(spec, spec, nodes_, resources)['changes'] == []
    assert plan(logical('/dev/sdb', '/dev/sdc'), spec, nodes_,
                resources)['changes'] == []


def test_plan_and_deploy_refuse_a_device_a_logical_pool_may_not_take(
        conductor, hypervisor):
    hypervisor.unfit_devices['/dev/loop7'] = 'holds ext4 (at offset 0x438)'
    spec = logical('/dev/sdb', '/dev/loop7')
    errors = []
    for attempt in (conductor.deployments.plan, conductor.deployments.deploy):
        with pytest.raises(exceptions.DeviceRefused) as refused:
            attempt(spec)
        errors.append(str(refused.value))
    assert errors[0] == errors[1]
    assert errors[0].startswith(
        'Storage pool tenks-unit cannot take its devices: /dev/loop7 holds '
        'ext4 (at offset 0x438). ')
    assert errors[0].endswith('(on hv1)')
    assert hypervisor.things == {}
    assert conductor.db.get_cluster('unit') is None
    # Opted in: the device is the pool's, and the plan asks first.
    spec = logical('/dev/sdb', {'path': '/dev/loop7', 'wipe': True})
    assert conductor.deployments.plan(spec)['destructive']
    conductor.deployments.deploy(spec)
    assert hypervisor.names('pool') == ['tenks-unit']


class NoPools:
    """A libvirt connection with no pool, that must make none."""

    def isAlive(self):
        return 1

    def listAllStoragePools(self):
        return []

    def storagePoolDefineXML(self, xml, flags=0):
        pytest.fail('libvirt was asked to define pool %s' % xml)


def test_a_device_that_is_a_file_is_refused_by_the_hostagent(
        monkeypatch, tmp_path):
    """Named by a path that resolves out of /dev: the libvirt driver
    refuses it before it writes anything."""
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    conf.set_override('state_dir', str(tmp_path))
    driver = libvirt_driver.LibvirtDriver(conf)
    monkeypatch.setattr(storage, 'vg_tags', lambda vg: None)
    data = tmp_path / 'disk.img'
    data.write_bytes(b'records' * 1000)
    device = '/dev/..%s' % data
    with pytest.raises(exceptions.DeviceRefused) as refused:
        driver.check_pool_devices('p', [device], OWNER)
    assert ('%s (%s) is not a block device' % (device, data)) in str(
        refused.value)
    driver._conn = NoPools()
    with pytest.raises(exceptions.DeviceRefused):
        driver.ensure_pool('p', '/dev/p', OWNER, 'logical', [device],
                           wipe=[device])
    assert data.read_bytes() == b'records' * 1000


def test_a_partition_a_partitioned_or_a_held_device_is_refused(
        monkeypatch, tmp_path):
    """What the kernel says of a block device (its sysfs directory),
    even when the spec lets Tenks wipe it."""
    device = str(tmp_path / 'disk')
    os.mknod(device, stat.S_IFBLK | 0o600, os.makedev(7, 250))
    sysfs = tmp_path / 'sys'
    monkeypatch.setattr(storage, 'SYS_BLOCK', str(sysfs))
    monkeypatch.setattr(storage, '_mounts', lambda rdev: [])
    monkeypatch.setattr(storage, '_signatures', lambda device: [])
    (sysfs / '7:250' / 'holders').mkdir(parents=True)
    (sysfs / '7:250' / 'holders' / 'dm-0').touch()
    assert storage.device_problem(device, True, None) == 'is held by dm-0'
    (sysfs / '7:250' / 'loop250p1').mkdir()
    (sysfs / '7:250' / 'loop250p1' / 'partition').write_text('1')
    assert storage.device_problem(device, True, None) == (
        'has partitions (loop250p1)')
    (sysfs / '7:250' / 'partition').write_text('2')
    assert storage.device_problem(device, True, None) == (
        'is a partition, not a whole disk')


def test_a_logical_pool_asks_for_an_agent_that_knows_it():
    from tests.unit.test_rpcapi import Bus
    bus = Bus()
    api = rpcapi.HostAgentAPI(bus)
    args = {'name': 'p', 'path': '/p', 'owner': OWNER}
    api.cast('hv1', 'ensure_pool', 'r1', 'c1', **args)
    api.cast('hv1', 'ensure_pool', 'r2', 'c1', pool_type='logical',
             devices=['/dev/sdb'], **args)
    assert [options['version'] for _, _, _, options in bus.sent] == [
        '1.0', '1.4']
