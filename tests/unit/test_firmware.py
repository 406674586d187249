"""Boot modes, secure boot and console logs: the spec, the scheduler,
the plan, the node request, the firmware lookup and the domain XML."""

import copy
import json
import os
from xml.etree import ElementTree as ET

import pytest

from hostagent import nodes
from hostagent import rpcapi
from hostagent.drivers.virt import firmware
from hostagent.drivers.virt import libvirt as libvirt_driver
from tenks import exceptions
from tenks import reconcile
from tenks import scheduler
from tenks import spec as tenks_spec
from tests.unit.conftest import make_spec
from tests.unit.test_reconcile import deployed
from tests.unit.test_reconcile import plan
from tests.unit.test_scheduler import facts

OWNER = 'tenks:c:a'


def small(**extra):
    return {'small': dict({'memory_mb': 128, 'vcpus': 1,
                           'volumes': [{'capacity': '1GiB'}],
                           'physical_networks': ['physnet1']}, **extra)}


def problems(**top):
    with pytest.raises(exceptions.SpecError) as error:
        make_spec(**top)
    return error.value.problems


# The spec


def test_boot_mode_defaults_to_default_boot_mode():
    spec = make_spec(default_boot_mode='uefi')
    assert spec['node_types']['small']['boot_mode'] == 'uefi'
    assert spec['node_types']['small']['secure_boot'] is False
    spec = make_spec(node_types=small(boot_mode='bios'),
                     default_boot_mode='uefi')
    assert spec['node_types']['small']['boot_mode'] == 'bios'
    assert make_spec()['node_types']['small']['boot_mode'] == 'bios'


def test_secure_boot_needs_uefi():
    assert problems(node_types=small(secure_boot=True)) == [
        'node_types.small.secure_boot: secure boot needs boot_mode uefi '
        "(the node type's boot mode is bios)"]
    assert problems(node_types=small(boot_mode='legacy')) == [
        "node_types.small.boot_mode: 'legacy' is not one of: bios, uefi"]
    make_spec(node_types=small(secure_boot=True), default_boot_mode='uefi')


def test_a_redfish_node_needs_a_disk_and_a_nic(monkeypatch):
    # Once Redfish is built (its helper lifts it): sushy-tools sets the
    # boot device on a disk or an interface of the domain.
    monkeypatch.setitem(tenks_spec._IRONIC_DRIVER, 'enum',
                        ['ipmi', 'redfish'])
    found = problems(node_types=small(ironic_driver='redfish', volumes=[],
                                      physical_networks=[]))
    assert found == [
        'node_types.small.volumes: a Redfish node needs a volume: its BMC '
        'sets the boot device on a disk or NIC of the domain',
        'node_types.small.physical_networks: a Redfish node needs a '
        'physical network: its BMC sets the boot device on a disk or NIC '
        'of the domain']
    make_spec(node_types=small(ironic_driver='redfish'))
    # IPMI nodes need neither: virtualbmc sets <os><boot>.
    make_spec(node_types=small(volumes=[], physical_networks=[]))


# Scheduler and plan


def test_a_host_without_the_firmware_gets_no_node():
    spec = make_spec(count=1, node_types=small(boot_mode='uefi',
                                               secure_boot=True))
    hosts = {'hv1': dict(facts('hv1'), firmware=['bios', 'uefi']),
             'hv2': dict(facts('hv2', memory_mb=1024),
                         firmware=['bios', 'secure_boot', 'uefi'])}
    [node] = scheduler.schedule(spec, hosts, [])
    assert node['hypervisor'] == 'hv2'
    assert (node['boot_mode'], node['secure_boot']) == ('uefi', True)
    del hosts['hv2']
    hosts['hv3'] = facts('hv3')  # an agent older than the firmware fact
    with pytest.raises(exceptions.NoValidHost) as error:
        scheduler.schedule(spec, hosts, [])
    assert ('hv1: no UEFI secure boot firmware (OVMF: install the package '
            'ovmf there)') in str(error.value)
    assert 'hv3: no UEFI secure boot firmware' in str(error.value)


def test_the_console_log_path_comes_from_the_hypervisor():
    spec = make_spec(count=1)
    host = dict(facts(), console_log_dir='/var/log/tenks/')
    [node] = scheduler.schedule(spec, {'hv1': host}, [])
    assert node['console_log'] == '/var/log/tenks/tk0-console.log'
    quiet = make_spec(count=1, node_types=small(console_log_enabled=False))
    [node] = scheduler.schedule(quiet, {'hv1': host}, [])
    assert node['console_log'] is None


def uefi_hosts():
    return {'hv1': dict(facts(), firmware=['bios', 'secure_boot', 'uefi'],
                        console_log_dir='/logs')}


def test_ironic_capabilities_follow_the_boot_mode():
    for node_type, capabilities in (
            ({}, 'boot_mode:bios'),
            ({'boot_mode': 'uefi'}, 'boot_mode:uefi'),
            ({'boot_mode': 'uefi', 'secure_boot': True},
             'boot_mode:uefi,secure_boot:true')):
        spec = make_spec(count=1, node_types=small(**node_type), specs=[
            {'type': 'small', 'count': 1,
             'ironic_config': {'resource_class': 'rc'}}])
        [node] = scheduler.schedule(spec, uefi_hosts(), [])
        ironic = reconcile.ironic_node(spec, node)
        assert ironic['fields']['properties']['capabilities'] == (
            capabilities)


def test_a_boot_mode_change_updates_the_node_in_place():
    spec = make_spec(count=1)
    nodes_, resources = deployed(spec, uefi_hosts())
    uefi = make_spec(count=1, node_types=small(boot_mode='uefi',
                                               secure_boot=True))
    result = plan(uefi, spec, nodes_, resources, uefi_hosts())
    [entry] = result['nodes']
    assert entry['action'] == 'update' and entry['agent']
    assert entry['new']['record']['uuid'] == nodes_[0]['uuid']
    assert [(c['resource'], c['action'], c['field'], c['old'], c['new'])
            for c in result['changes']] == [
        ('domain', 'update', 'boot_mode', 'bios', 'uefi'),
        ('domain', 'update', 'secure_boot', False, True)]
    assert not reconcile.destructive(result)
    request = rpcapi.node_request(entry['new'], {'ipmi': 'pw'})
    assert (request['boot_mode'], request['secure_boot'],
            request['console_log']) == ('uefi', True, '/logs/tk0-console.log')
    # The same spec again: nothing to do.
    records = [dict(entry['new']['record'])]
    again = plan(uefi, uefi, records, resources, uefi_hosts())
    assert again['changes'] == []


def test_a_record_from_before_boot_modes_is_a_bios_node():
    spec = make_spec(count=1)
    nodes_, resources = deployed(spec, uefi_hosts())
    old = copy.deepcopy(nodes_)
    for node in old:
        for key in ('boot_mode', 'secure_boot', 'console_log'):
            del node[key]
    # Its unknown log path is no change; the request leaves it to the
    # hostagent, which knows.
    assert plan(spec, spec, old, resources, uefi_hosts())['changes'] == []
    view = reconcile.view(spec, 'd', old[0], uefi_hosts()['hv1'])
    assert (view['boot_mode'], view['secure_boot']) == ('bios', False)
    assert 'console_log' not in rpcapi.node_request(view, {'ipmi': 'pw'})


# The node request


def test_node_request_checks_secure_boot():
    node = {'uuid': 'u', 'name': 'n0', 'domain_type': 'qemu', 'vcpus': 1,
            'memory_mb': 128, 'console_log_enabled': True, 'pool': 'p',
            'volumes': [], 'nics': [],
            'bmc': {'address': 'a', 'port': 1, 'username': 'u',
                    'password': 'p'}}
    nodes.check(node)
    nodes.check(dict(node, boot_mode='uefi', secure_boot=True,
                     console_log=None))
    with pytest.raises(exceptions.InvalidNodeRequest) as error:
        nodes.check(dict(node, secure_boot=True))
    assert 'secure_boot: needs boot_mode uefi' in str(error.value)
    with pytest.raises(exceptions.InvalidNodeRequest):
        nodes.check(dict(node, boot_mode='legacy'))
    described = nodes.domain(dict(node, boot_mode='uefi',
                                  console_log='/l/n0-console.log'))
    assert (described['boot_mode'], described['secure_boot'],
            described['console_log']) == ('uefi', False,
                                          '/l/n0-console.log')
    assert 'console_log' not in nodes.domain(node)


# Firmware descriptors


def descriptor(directory, name, code, vars_, features=(),
               machines=('pc-i440fx-*', 'pc-q35-*'), make=True):
    for path in (code, vars_):
        if make:
            open(os.path.join(directory, path), 'w').close()
    with open(os.path.join(directory, name), 'w') as f:
        json.dump({
            'interface-types': ['uefi'],
            'mapping': {'device': 'flash',
                        'executable': {'filename': os.path.join(
                            directory, code), 'format': 'raw'},
                        'nvram-template': {'filename': os.path.join(
                            directory, vars_), 'format': 'raw'}},
            'targets': [{'architecture': 'x86_64',
                         'machines': list(machines)}],
            'features': list(features)}, f)


SECURE = ('acpi-s3', 'enrolled-keys', 'requires-smm', 'secure-boot')


def firmware_dirs(tmp_path):
    etc, share = tmp_path / 'etc', tmp_path / 'share'
    etc.mkdir()
    share.mkdir()
    # QEMU's order: by file name across the directories.
    descriptor(share, '40-secure-enrolled.json', 'SB_CODE', 'SB_VARS_MS',
               SECURE, machines=['pc-q35-*'])
    descriptor(share, '50-secure.json', 'SB_CODE', 'SB_VARS',
               ['requires-smm', 'secure-boot'], machines=['pc-q35-*'])
    descriptor(share, '60-plain.json', 'CODE', 'VARS')
    return [str(etc), str(share)]


def test_firmware_is_found_in_qemu_descriptors(tmp_path):
    dirs = firmware_dirs(tmp_path)
    share = dirs[1]
    assert firmware.find(dirs) == {
        'uefi': {'loader': share + '/CODE', 'template': share + '/VARS'},
        'secure_boot': {'loader': share + '/SB_CODE',
                        'template': share + '/SB_VARS_MS'}}
    # One in /etc hides the one of that name; files must exist.
    descriptor(dirs[0], '60-plain.json', 'MINE', 'MINE_VARS')
    descriptor(dirs[0], '40-secure-enrolled.json', 'GONE', 'GONE_VARS',
               SECURE, make=False)
    assert firmware.find(dirs) == {
        'uefi': {'loader': dirs[0] + '/MINE',
                 'template': dirs[0] + '/MINE_VARS'}}
    assert firmware.find([str(tmp_path / 'nowhere')]) == {}


# The domain XML


@pytest.fixture
def driver(conf, tmp_path):
    conf.set_override('firmware_dirs', firmware_dirs(tmp_path),
                      group='hostagent')
    conf.set_override('nvram_dir', str(tmp_path / 'nvram'),
                      group='hostagent')
    return libvirt_driver.LibvirtDriver(conf)


def domain(**extra):
    return dict({'name': 'n0', 'uuid': '3f1a3c1e-1a52-4c55-9d0e-1f8d7c6b5a40',
                 'domain_type': 'qemu', 'vcpus': 1, 'memory_mb': 128,
                 'console_log_enabled': True, 'disks': [], 'nics': []},
                **extra)


def xml(driver, **extra):
    return ET.fromstring(driver._domain_xml(domain(**extra), OWNER))


def test_a_bios_domain_prints_seabios_on_its_serial_console(driver):
    root = xml(driver)
    assert root.find('os/loader') is None
    assert root.find('os/bios').get('useserial') == 'yes'
    assert root.find('features/smm') is None
    assert root.find('os/type').get('machine') is None


def test_a_uefi_domain_has_ovmf_and_its_own_nvram(driver, tmp_path):
    share = str(tmp_path / 'share')
    root = xml(driver, boot_mode='uefi')
    loader = root.find('os/loader')
    assert (loader.text, loader.get('readonly'), loader.get('type'),
            loader.get('secure')) == (share + '/CODE', 'yes', 'pflash', 'no')
    nvram = root.find('os/nvram')
    assert (nvram.text, nvram.get('template')) == (
        str(tmp_path / 'nvram' / 'n0_VARS.fd'), share + '/VARS')
    assert root.find('os/bios') is None
    assert root.find('features/smm') is None


def test_a_secure_boot_domain_has_smm_on_q35(driver, tmp_path):
    share = str(tmp_path / 'share')
    root = xml(driver, boot_mode='uefi', secure_boot=True)
    loader = root.find('os/loader')
    assert (loader.text, loader.get('secure')) == (share + '/SB_CODE',
                                                   'yes')
    assert root.find('os/nvram').get('template') == share + '/SB_VARS_MS'
    assert root.find('os/type').get('machine') == 'q35'
    assert root.find('features/smm').get('state') == 'on'


def test_missing_firmware_is_a_clear_error(driver, conf, tmp_path):
    conf.set_override('firmware_dirs', [str(tmp_path / 'nowhere')],
                      group='hostagent')
    with pytest.raises(exceptions.DriverError) as error:
        xml(driver, boot_mode='uefi', secure_boot=True)
    assert 'no UEFI firmware with secure boot' in str(error.value)
    assert 'package ovmf' in str(error.value)


def test_the_console_log_goes_where_the_request_says(driver, conf):
    log_dir = os.path.join(conf.state_dir, 'logs', 'console')
    root = xml(driver)
    log = root.find('devices/serial/log')
    assert (log.get('file'), log.get('append')) == (
        os.path.join(log_dir, 'n0-console.log'), 'on')
    assert xml(driver, console_log_enabled=False).find(
        'devices/serial/log') is None
    assert xml(driver, console_log=None).find('devices/serial/log') is None
    path = os.path.join(log_dir, 'other.log')
    assert xml(driver, console_log=path).find(
        'devices/serial/log').get('file') == path
    with pytest.raises(exceptions.DriverError) as error:
        xml(driver, console_log='/etc/passwd')
    assert 'is not a file of this hypervisor' in str(error.value)
    # Links are resolved as os.path.realpath does: one out of the
    # directory, a way up, a linked directory, the directory itself are
    # refused; a link that stays in it is fine.
    os.makedirs(log_dir, exist_ok=True)
    os.symlink('/etc/passwd', os.path.join(log_dir, 'escape.log'))
    os.symlink('/etc', os.path.join(log_dir, 'etc'))
    os.symlink(os.path.join(log_dir, 'n1.log'),
               os.path.join(log_dir, 'inside.log'))
    for path in (os.path.join(log_dir, 'escape.log'),
                 os.path.join(log_dir, '..', 'up.log'),
                 os.path.join(log_dir, 'etc', 'x.log'),
                 log_dir + '/', os.path.join(log_dir, '.'),
                 os.path.join(log_dir, 'etc', '..')):
        with pytest.raises(exceptions.DriverError) as error:
            xml(driver, console_log=path)
        assert 'is not a file of this hypervisor' in str(error.value)
    inside = os.path.join(log_dir, 'inside.log')
    assert xml(driver, console_log=inside).find(
        'devices/serial/log').get('file') == inside


def test_libvirt_versioned_machine_types_are_no_change(driver):
    wanted = driver._domain_xml(domain(boot_mode='uefi', secure_boot=True),
                                OWNER)
    stored = wanted.replace("machine=\"q35\"", "machine=\"pc-q35-7.2\"")
    assert stored != wanted
    assert libvirt_driver._summary(stored) == libvirt_driver._summary(
        wanted)
    bios = libvirt_driver._summary(driver._domain_xml(domain(), OWNER))
    changes = libvirt_driver._differences(
        bios, libvirt_driver._summary(wanted))
    assert 'machine pc -> q35' in changes and 'smm None -> on' in changes
