"""Boot modes, secure boot and console logs through real deploys:
libvirt and QEMU (TCG), OVMF, virtualbmc and ipmitool, embedded
conductor and hostagent, and the standalone Ironic.

BMCs use UDP ports 9200-9249, ten per test.
"""

import os
import time
from xml.etree import ElementTree as ET

import libvirt
import pytest

from hostagent.drivers.virt import libvirt as libvirt_driver
from tenks import exceptions
from tenks import names
from tenks import spec as tenks_spec
from tenks.cli import embedded
from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of

pytestmark = pytest.mark.functional

OVMF = '/usr/share/OVMF/'


def env_at(tmp_path, port_base):
    return cf.checked(cf.ClusterEnv(tmp_path, port_base=port_base))


def with_types(env, count=1, **node_types):
    """A spec of ``env`` with one entry per node type, each ``count``
    nodes, named <prefix><type initial><n>."""
    spec = env.spec(count=count)
    small = spec['node_types'].pop('small')
    spec['specs'] = []
    for name, extra in node_types.items():
        spec['node_types'][name] = dict(small, **extra)
        spec['specs'].append({'type': name, 'count': count,
                              'node_name_prefix': env.node_prefix + name[0],
                              'vol_name_prefix': 'vol'})
    return tenks_spec.validate(spec)


def deployment(env):
    with embedded.embedded(env.conf) as conductor:
        return conductor.db.get_cluster(env.cluster).uuid


def domain_xml(name):
    conn = libvirt.open(cf.URI)
    try:
        return ET.fromstring(conn.lookupByName(name).XMLDesc(
            libvirt.VIR_DOMAIN_XML_INACTIVE))
    finally:
        conn.close()


def wait_for(predicate, timeout=60):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def read(path):
    try:
        with open(path, 'rb') as f:
            return f.read().decode(errors='replace')
    except FileNotFoundError:
        return ''


def test_uefi_and_secure_boot_domains_have_their_firmware(tmp_path):
    with env_at(tmp_path, 9200) as env:
        spec = with_types(env, count=2, uefi={'boot_mode': 'uefi'},
                          secure={'boot_mode': 'uefi',
                                  'secure_boot': True})
        env.deploy(spec)
        # The embedded hostagent's mark.
        owner = names.agent_owner(names.owner(env.cluster, deployment(env)),
                                  env.conf.hostagent.host)
        nvram_dir = env.conf.hostagent.nvram_dir
        nvrams = []
        for index in range(2):
            name = env.node_prefix + 'u%d' % index
            root = domain_xml(name)
            loader = root.find('os/loader')
            assert loader.text == OVMF + 'OVMF_CODE_4M.fd'
            assert (loader.get('type'), loader.get('secure')) == (
                'pflash', 'no')
            nvram = root.find('os/nvram')
            assert nvram.text == os.path.join(nvram_dir,
                                              '%s_VARS.fd' % name)
            assert nvram.get('template') == OVMF + 'OVMF_VARS_4M.fd'
            # Its own file, made by Tenks from the template, marked.
            assert os.path.isfile(nvram.text)
            assert libvirt_driver._mark(nvram.text) == owner
            nvrams.append(nvram.text)

            name = env.node_prefix + 's%d' % index
            root = domain_xml(name)
            loader = root.find('os/loader')
            assert os.path.realpath(loader.text) == (
                OVMF + 'OVMF_CODE_4M.secboot.fd')
            assert loader.get('secure') == 'yes'
            assert root.find('os/type').get('machine').startswith('pc-q35')
            assert root.find('features/smm').get('state') == 'on'
            nvram = root.find('os/nvram')
            assert nvram.get('template') == OVMF + 'OVMF_VARS_4M.ms.fd'
            with open(nvram.text, 'rb') as f, open(
                    OVMF + 'OVMF_VARS_4M.ms.fd', 'rb') as template:
                assert f.read() == template.read()
            nvrams.append(nvram.text)
        assert len(set(nvrams)) == 4

        # Drift: an NVRAM file deleted by hand is found and made again.
        os.remove(nvrams[0])
        with embedded.embedded(env.conf) as conductor:
            plan = conductor.deployments.plan(spec)
        assert [(c['node'], c['resource'], c['action'])
                for c in plan['changes']] == [
            (env.node_prefix + 'u0', 'domain', 'repair')]
        env.deploy(spec)
        assert libvirt_driver._mark(nvrams[0]) == owner

        env.teardown()
        assert [p for p in nvrams if os.path.lexists(p)] == []


def test_boot_mode_changes_in_place(tmp_path):
    with env_at(tmp_path, 9210) as env:
        spec = with_types(env, bios={})
        env.deploy(spec)
        name = env.node_prefix + 'b0'
        [record] = env.nodes()
        assert domain_xml(name).find('os/loader') is None
        nvram = os.path.join(env.conf.hostagent.nvram_dir,
                             '%s_VARS.fd' % name)

        spec['node_types']['bios']['boot_mode'] = 'uefi'
        with embedded.embedded(env.conf) as conductor:
            plan = conductor.deployments.plan(spec)
        assert [(c['resource'], c['action'], c['field'], c['old'],
                 c['new']) for c in plan['changes']] == [
            ('domain', 'update', 'boot_mode', 'bios', 'uefi')]
        env.deploy(spec)
        [after] = env.nodes()
        # The same node: UUID, MACs, BMC port kept.
        assert {k: after[k] for k in ('uuid', 'nics', 'bmc_port')} == {
            k: record[k] for k in ('uuid', 'nics', 'bmc_port')}
        assert after['boot_mode'] == 'uefi'
        assert domain_xml(name).find('os/loader') is not None
        assert os.path.isfile(nvram)

        spec['node_types']['bios']['boot_mode'] = 'bios'
        env.deploy(spec)
        assert domain_xml(name).find('os/loader') is None
        assert not os.path.lexists(nvram)
        env.teardown()


def test_a_hypervisor_without_the_firmware_is_refused(tmp_path):
    with env_at(tmp_path, 9220) as env:
        empty = tmp_path / 'no-firmware'
        empty.mkdir()
        env.conf.set_override('firmware_dirs', [str(empty)],
                              group='hostagent')
        spec = with_types(env, secure={'boot_mode': 'uefi',
                                       'secure_boot': True})
        with pytest.raises(exceptions.TenksError) as error:
            env.deploy(spec)
        assert 'no UEFI secure boot firmware' in str(error.value)
        assert 'ovmf' in str(error.value)
        assert env.nodes() == []


def test_console_log_has_the_firmware_output_across_power_cycles(
        tmp_path):
    with env_at(tmp_path, 9230) as env:
        spec = with_types(env, bios={}, uefi={'boot_mode': 'uefi'},
                          secure={'boot_mode': 'uefi', 'secure_boot': True})
        env.deploy(spec)
        nodes = {n['name']: n for n in env.nodes()}
        bios, uefi, secure = (env.node_prefix + 'b0', env.node_prefix + 'u0',
                              env.node_prefix + 's0')
        log_dir = os.path.join(env.state_dir, 'logs', 'console')
        logs = {name: os.path.join(log_dir, '%s-console.log' % name)
                for name in (bios, uefi, secure)}
        # tenks node show prints the record's path.
        assert {name: nodes[name]['console_log'] for name in logs} == logs
        # What each firmware prints on the serial console under TCG:
        # SeaBIOS (with <bios useserial>) its banner at once, OVMF its
        # boot manager's lines after ~25 s (the NIC's iPXE first); the
        # secure boot one runs too (SMM on q35 under TCG).
        banners = {bios: 'SeaBIOS (version', uefi: 'BdsDxe:',
                   secure: 'BdsDxe:'}
        for cycle in (1, 2):
            if cycle == 2:
                # The second cycle only needs the quick one.
                del logs[uefi], logs[secure]
            for name in logs:
                result = cf.ipmitool(nodes[name]['bmc_port'], 'power', 'on')
                assert result.returncode == 0, result.stderr
            for name, log in logs.items():
                assert wait_for(lambda n=name, p=log, c=cycle: read(
                    p).count(banners[n]) >= c, timeout=90), (
                    name, read(log))
            for name in logs:
                result = cf.ipmitool(nodes[name]['bmc_port'], 'power',
                                     'off')
                assert result.returncode == 0, result.stderr
        env.teardown()
        assert os.listdir(log_dir) == []


def test_keep_console_logs_keeps_them_after_teardown(tmp_path):
    with env_at(tmp_path, 9240) as env:
        env.deploy(with_types(env, bios={}))
        [node] = env.nodes()
        assert cf.ipmitool(node['bmc_port'], 'power', 'on').returncode == 0
        assert wait_for(lambda: 'SeaBIOS' in read(node['console_log']))
        env.conf.set_override('keep_console_logs', True, group='hostagent')
        env.teardown()
        assert 'SeaBIOS' in read(node['console_log'])
        os.remove(node['console_log'])


def test_ipmi_boot_device_on_a_node_without_disk_or_nic(tmp_path):
    # virtualbmc sets <os><boot dev>: no disk or NIC needed (Redfish
    # nodes need both; the spec refuses them without).
    with env_at(tmp_path, 9220) as env:
        spec = with_types(env, bare={'volumes': [],
                                     'physical_networks': []})
        env.deploy(spec)
        [node] = env.nodes()
        for device, dev in (('pxe', 'network'), ('disk', 'hd')):
            result = cf.ipmitool(node['bmc_port'], 'chassis', 'bootdev',
                                 device)
            assert result.returncode == 0, result.stderr
            assert [b.get('dev') for b in domain_xml(
                node['name']).findall('os/boot')] == [dev]
        env.teardown()


def test_ironic_gets_the_boot_capabilities(tmp_path, openstack_services,
                                           cloud):
    env = cf.ClusterEnv(tmp_path, port_base=9200)
    of.use_services(env, openstack_services)
    try:
        ironic = {'resource_class': 'tenks-fw'}
        spec = with_types(env, uefi={'boot_mode': 'uefi'},
                          secure={'boot_mode': 'uefi', 'secure_boot': True})
        for entry in spec['specs']:
            entry['ironic_config'] = dict(ironic, traits=[], properties={})
        env.deploy(spec)
        capabilities = {}
        for node in env.nodes():
            found = cloud.baremetal.get_node(node['uuid'])
            assert found.provision_state == 'available'
            capabilities[node['name']] = found.properties['capabilities']
        assert capabilities == {
            env.node_prefix + 'u0': 'boot_mode:uefi',
            env.node_prefix + 's0': 'boot_mode:uefi,secure_boot:true'}
        env.teardown()
    finally:
        left = of.cleaned_up(env, cloud)
    assert left == [], 'the test left %s behind' % left
