"""Redfish virtual media: the domain's drive for it
(hostagent.drivers.virt.libvirt), the emulator putting media into it
(hostagent.drivers.bmc.emulator) and the driver removing them (sushy)."""

import json
import os
from xml.etree import ElementTree as ET

import libvirt
import pytest
from sushy_tools import error

from hostagent import nodes
from hostagent.drivers.bmc import daemon_dirs
from hostagent.drivers.bmc import emulator
from hostagent.drivers.bmc import media
from hostagent.drivers.bmc import sushy
from hostagent.drivers.virt import libvirt as libvirt_driver

A = 'aaaaaaaa-1111-4111-8111-111111111111'
B = 'bbbbbbbb-2222-4222-8222-222222222222'
OWNER = 'tenks:c1:3f1a3c1e'


def node(bmc_type):
    bmc = {'address': '127.0.0.1', 'port': 9100, 'username': 'admin',
           'password': 'pw'}
    if bmc_type == 'redfish':
        bmc.update(type='redfish', system_id=A)
    return {'name': 'n0', 'uuid': A, 'domain_type': 'qemu', 'vcpus': 1,
            'memory_mb': 128, 'console_log_enabled': False, 'pool': 'p',
            'volumes': [{'name': 'v0', 'format': 'qcow2'},
                        {'name': 'v1', 'format': 'raw', 'device': 'cdrom'}],
            'nics': [], 'bmc': bmc}


def disks(conf, bmc_type):
    xml = libvirt_driver.LibvirtDriver(conf)._domain_xml(
        nodes.domain(node(bmc_type)), OWNER)
    return xml, ET.fromstring(xml).findall('devices/disk')


def test_a_redfish_node_has_an_empty_virtual_media_drive_after_its_own(conf):
    xml, found = disks(conf, 'redfish')
    assert [(d.get('type'), d.get('device'), d.find('target').get('dev'),
             d.find('source') is not None, d.find('readonly') is not None,
             d.find('alias') is not None and d.find('alias').get('name'))
            for d in found] == [
        ('volume', 'disk', 'vda', True, False, False),
        ('volume', 'cdrom', 'sda', True, True, False),
        ('file', 'cdrom', 'sdb', False, True, media.DRIVE_ALIAS)]
    # A medium in the drive is not drift: ensure_domain keeps it.
    root = ET.fromstring(xml)
    drive = emulator._drive(xml)
    root.find('devices').remove(
        [d for d in root.findall('devices/disk')
         if d.find('alias') is not None][0])
    drive.insert(0, ET.Element('source', file='/m/%s-x.iso' % A))
    root.find('devices').append(drive)
    assert libvirt_driver._summary(ET.tostring(root, encoding='unicode')) \
        == libvirt_driver._summary(xml)


def test_an_ipmi_node_has_no_virtual_media_drive(conf):
    _, found = disks(conf, 'ipmi')
    assert [d.find('target').get('dev') for d in found] == ['vda', 'sda']


def test_a_node_turned_redfish_gets_the_drive_and_back_loses_it(conf):
    ipmi, redfish = (libvirt_driver._summary(disks(conf, kind)[0])
                     for kind in ('ipmi', 'redfish'))
    assert libvirt_driver._differences(ipmi, redfish) == [
        'disks added: virtual media drive']
    assert libvirt_driver._differences(redfish, ipmi) == [
        'disks removed: virtual media drive']


class FakeDomain:
    """A libvirt domain with the drive, its changes recorded."""

    def __init__(self):
        self.active = False
        self.fail = False
        self.updates = []
        self.source = None
        self.alias = '<alias name="%s"/>' % media.DRIVE_ALIAS

    def name(self):
        return 'n0'

    def isActive(self):
        return self.active

    def XMLDesc(self, flags=0):
        source = ('<source file="%s"/>' % self.source) if self.source else ''
        return ('<domain><devices><disk type="volume" device="cdrom">'
                '<source pool="p" volume="v1"/><target dev="sda"/></disk>'
                '<disk type="file" device="cdrom">%s<target dev="sdb" '
                'bus="sata"/><boot order="1"/><readonly/>%s</disk>'
                '</devices></domain>' % (source, self.alias))

    def updateDeviceFlags(self, xml, flags):
        if self.fail:
            raise libvirt.libvirtError('refused')
        disk = ET.fromstring(xml)
        self.updates.append((flags, disk.find('target').get('dev'),
                             disk.find('boot').get('order'),
                             disk.find('source') is not None
                             and disk.find('source').get('file')))
        if flags == libvirt.VIR_DOMAIN_AFFECT_CONFIG:
            self.source = disk.find('source') is not None and disk.find(
                'source').get('file')


class FakeConnection:
    def __init__(self, dom):
        self.dom = dom

    def lookupByUUIDString(self, uuid):
        assert uuid == A
        return self.dom

    def close(self):
        pass


class Systems:
    systems = [A, B]

    def uuid(self, identity):
        return identity


@pytest.fixture
def drive(tmp_path, monkeypatch):
    """(MediaDrive, domain, media directory, a function downloading)."""
    dom = FakeDomain()
    monkeypatch.setattr(libvirt, 'open', lambda uri: FakeConnection(dom))
    media_dir = tmp_path / 'media'
    media_dir.mkdir()
    downloads = tmp_path / 'downloads'
    downloads.mkdir()

    def download(content):
        path = downloads / 'image.iso'
        path.write_bytes(content)
        return str(path)

    return (emulator.MediaDrive(Systems(), {A}, 'qemu:///system',
                                str(media_dir)), dom, media_dir, download)


def test_insert_eject_and_insert_again_change_the_drive_alone(drive):
    systems, dom, media_dir, download = drive
    config = libvirt.VIR_DOMAIN_AFFECT_CONFIG
    systems.set_boot_image(A, 'Cd', download(b'first'))
    [first] = os.listdir(media_dir)
    assert first.startswith(A + '-') and first.endswith('.iso')
    assert (media_dir / first).read_bytes() == b'first'
    assert os.stat(media_dir / first).st_mode & 0o777 == 0o600
    path = str(media_dir / first)
    # The drive's own definition (its boot order kept), not the node's
    # CD-ROM.
    assert dom.updates == [(config, 'sdb', '1', path)]

    systems.set_boot_image(A, 'Cd')
    assert os.listdir(media_dir) == []
    assert dom.updates[-1] == (config, 'sdb', '1', False)

    dom.active = True
    systems.set_boot_image(A, 'Cd', download(b'second'))
    [second] = os.listdir(media_dir)
    assert (media_dir / second).read_bytes() == b'second'
    path = str(media_dir / second)
    assert dom.updates[-2:] == [(config, 'sdb', '1', path),
                                (libvirt.VIR_DOMAIN_AFFECT_LIVE, 'sdb', '1',
                                 path)]
    # A new medium replaces the old one, whose file goes.
    systems.set_boot_image(A, 'Cd', download(b'third'))
    [third] = os.listdir(media_dir)
    assert (media_dir / third).read_bytes() == b'third'


def test_a_refused_insert_keeps_the_medium_in_place(drive):
    systems, dom, media_dir, download = drive
    systems.set_boot_image(A, 'Cd', download(b'first'))
    before = os.listdir(media_dir)
    dom.fail = True
    with pytest.raises(libvirt.libvirtError):
        systems.set_boot_image(A, 'Cd', download(b'second'))
    assert os.listdir(media_dir) == before
    assert (media_dir / before[0]).read_bytes() == b'first'


def test_no_drive_no_other_device_and_no_other_system(drive):
    systems, dom, media_dir, download = drive
    dom.alias = ''
    with pytest.raises(error.Conflict, match='n0 has no virtual media '
                       'drive'):
        systems.set_boot_image(A, 'Cd', download(b'x'))
    with pytest.raises(error.BadRequest):
        systems.set_boot_image(A, 'Floppy', download(b'x'))
    with pytest.raises(error.NotFound):
        systems.set_boot_image(B, 'Cd', download(b'x'))
    assert os.listdir(media_dir) == [] and dom.updates == []


def test_removing_a_system_removes_its_media_and_the_last_the_directory(
        conf, monkeypatch):
    driver = sushy.SushyDriver(conf)
    monkeypatch.setattr(driver, '_stop', lambda path: None)
    path = driver._dirs.path(OWNER)
    os.makedirs(path)
    daemon_dirs.write(os.path.join(path, 'owner'), OWNER)
    sushy._serve(path, 'n0', A, None)
    sushy._serve(path, 'n1', B, None)
    media_dir = driver._media_dir(path)
    os.makedirs(media_dir)
    for name in (A + '-1.iso', B + '-1.iso'):
        open(os.path.join(media_dir, name), 'w').close()
    assert os.path.dirname(media_dir) == conf.hostagent.pool_dir
    assert driver.remove_system('n0', OWNER) is True
    assert os.listdir(media_dir) == [B + '-1.iso']
    assert driver.remove_system('n1', OWNER) is True
    assert not os.path.exists(media_dir) and not os.path.exists(path)


def test_an_emulator_started_before_virtual_media_is_drift(conf):
    # Its settings have no media directory: the next deploy restarts it
    # on the configuration that has one.
    driver = sushy.SushyDriver(conf)
    path = driver._dirs.path(OWNER)
    os.makedirs(path)
    daemon_dirs.write(os.path.join(path, 'owner'), OWNER)
    sushy._serve(path, 'n0', A, None)
    settings = driver._settings(path, '127.0.0.1', 9100)
    bmc = {'system_id': A, 'address': '127.0.0.1', 'port': 9100,
           'username': 'admin', 'password': 'pw'}
    for started, drift in [(settings, False),
                           (dict(settings, media_dir=None), True)]:
        daemon_dirs.write(os.path.join(path, 'settings'),
                          json.dumps(started))
        changes = driver.system_changes(OWNER, {'n0': bmc})['n0']
        assert ('media_dir' in changes) is drift
