"""Node type keys cpu_mode and machine on real libvirt (QEMU under TCG),
and BMCs at an IPv6 address reached by ipmitool and the standalone
Ironic.

Names carry the test's random token; IPMI ports 9920-9939 and Redfish
port 9945 only.
"""

import subprocess

import libvirt
import pytest

from hostagent.drivers.virt import libvirt as libvirt_driver
from tenks import exceptions
from tenks import spec as tenks_spec
from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of
from tests.functional.test_firmware import domain_xml
from tests.functional.test_firmware import read
from tests.functional.test_firmware import wait_for
from tests.functional.test_redfish import RedfishEnv
from tests.functional.test_redfish import mixed_spec
from tests.functional.test_redfish import wait_state

pytestmark = pytest.mark.functional


def ipmitool6(port, *command):
    """ipmitool to a BMC at ::1."""
    result = subprocess.run(
        ['ipmitool', '-I', 'lanplus', '-H', '::1', '-p', str(port), '-U',
         'admin', '-P', 'password', '-R', '3', '-N', '10', *command],
        capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_cpu_mode_and_machine_reach_the_domain_and_a_lacking_one_is_refused(
        tmp_path):
    with cf.checked(cf.ClusterEnv(tmp_path, port_base=9920)) as env:
        # What this hypervisor's libvirt says: TCG has no host-passthrough.
        facts = libvirt_driver.LibvirtDriver(env.conf).facts()
        assert 'host-passthrough' not in facts['cpu_modes']['qemu']
        assert {'q35', 'pc'} <= set(facts['machines']['qemu'])

        data = dict(env.spec(count=1))
        data['node_types']['small'] = dict(
            data['node_types']['small'], cpu_mode='maximum', machine='q35')
        spec = tenks_spec.validate(data)
        env.deploy(spec)
        [node] = env.nodes()
        root = domain_xml(node['name'])
        assert root.find('cpu').get('mode') == 'maximum'
        assert root.find('os/type').get('machine').startswith('pc-q35-')
        # It boots: SeaBIOS on its serial console.
        assert cf.ipmitool(node['bmc_port'], 'power', 'on').returncode == 0
        assert wait_for(lambda: 'SeaBIOS (version' in read(
            node['console_log']), timeout=60), read(node['console_log'])
        assert cf.ipmitool(node['bmc_port'], 'power', 'off').returncode == 0
        wait_state(node['name'], libvirt.VIR_DOMAIN_SHUTOFF)
        # A re-run changes nothing (libvirt keeps q35 as pc-q35-<version>).
        assert env.deploy(spec)['changed'] == []

        # Another machine type changes the domain in place.
        data['node_types']['small']['machine'] = 'pc'
        spec = tenks_spec.validate(data)
        assert [(c['resource'], c['action'], c['field'], c['old'], c['new'])
                for c in env.plan(spec)['changes']] == [
            ('domain', 'update', 'machine', 'q35', 'pc')]
        env.deploy(spec)
        assert domain_xml(node['name']).find('os/type').get(
            'machine').startswith('pc-i440fx-')

        # A machine type libvirt lacks: refused, nothing made.
        data['node_types']['odd'] = dict(data['node_types']['small'],
                                         machine='pc-q35-99.0')
        data['specs'].append({'type': 'odd', 'count': 1,
                              'node_name_prefix': env.node_prefix + 'o'})
        with pytest.raises(exceptions.MachineUnsupported) as refused:
            env.deploy(tenks_spec.validate(data))
        assert ('cannot run node type odd (specs[1]): libvirt has no '
                'machine type pc-q35-99.0 for qemu domains (it has: pc, '
                in str(refused.value))
        assert [n['name'] for n in env.nodes()] == [node['name']]
        conn = libvirt.open(cf.URI)
        try:
            assert [d.name() for d in conn.listAllDomains()
                    if d.name().startswith(env.node_prefix + 'o')] == []
        finally:
            conn.close()
        env.teardown()


@pytest.fixture
def cloud_env6(tmp_path, openstack_services, cloud):
    cluster = RedfishEnv(tmp_path, port_base=9930)
    of.use_services(cluster, openstack_services)
    yield cluster
    left = of.cleaned_up(cluster, cloud)
    assert left == [], 'the test left %s behind' % left


def test_bmcs_at_an_ipv6_address_work_with_ipmitool_and_ironic(
        cloud_env6, cloud):
    spec = mixed_spec(cloud_env6, 9945, ipmi_address='::1')
    cloud_env6.deploy(spec)
    nodes = {n['bmc_type']: n for n in cloud_env6.nodes()}
    assert {n['bmc_address'] for n in nodes.values()} == {'::1'}
    ipmi = nodes['ipmi']
    assert 'Chassis Power is off' in ipmitool6(ipmi['bmc_port'], 'power',
                                                'status')
    # Ironic reached both (manage checks the power interface) and has
    # them in the forms its drivers take.
    ironic = cloud.baremetal.get_node(ipmi['uuid'])
    assert (ironic.provision_state, ironic.power_state) == (
        'available', 'power off')
    assert (ironic.driver_info['ipmi_address'],
            ironic.driver_info['ipmi_port']) == ('::1', ipmi['bmc_port'])
    redfish = cloud.baremetal.get_node(nodes['redfish']['uuid'])
    assert (redfish.provision_state, redfish.power_state) == (
        'available', 'power off')
    assert redfish.driver_info['redfish_address'] == 'http://[::1]:9945'
    # Ironic powers both on and off over IPv6.
    for node in (ironic, redfish):
        cloud.baremetal.set_node_power_state(node, 'power on')
    for node in (ironic, redfish):
        assert of.wait_for_node(cloud, node.id).power_state == 'power on'
    for node in (ironic, redfish):
        cloud.baremetal.set_node_power_state(node, 'power off')
    for node in (ironic, redfish):
        assert of.wait_for_node(cloud, node.id).power_state == 'power off'
    cloud_env6.teardown()
    assert cloud_env6.leftovers() == []
