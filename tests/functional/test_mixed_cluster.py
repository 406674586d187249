"""One cluster of everything a node can be: an IPMI node with BIOS and a
Redfish node with UEFI and secure boot, wired to an Open vSwitch physnet,
both enrolled in the real standalone Ironic.

IPMI ports 9350-9359 and Redfish port 9360 only. The leftovers checked
after the test include Open vSwitch bridges and ports, emulator
processes and files, and NVRAM files.
"""

import os
from xml.etree import ElementTree as ET

import libvirt
import pytest
import requests

from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of
from tests.functional import test_openvswitch as ovs
from tests.functional import test_redfish as redfish

pytestmark = pytest.mark.functional

REDFISH_PORT = 9360
PASSWORD = 'mixed-pw'


class MixedEnv(redfish.RedfishEnv, ovs.OvsEnv):
    """Redfish emulators and Open vSwitch bridges among the leftovers."""


@pytest.fixture
def env(tmp_path, openstack_services, cloud):
    cluster = MixedEnv(tmp_path, port_base=9350)
    of.use_services(cluster, openstack_services)
    yield cluster
    left = of.cleaned_up(cluster, cloud)
    assert left == [], 'the test left %s behind' % left


def domain(name):
    conn = libvirt.open(cf.URI)
    try:
        return ET.fromstring(conn.lookupByName(name).XMLDesc())
    finally:
        conn.close()


def test_ipmi_and_secure_boot_redfish_nodes_on_open_vswitch(env, cloud):
    node_type = {'memory_mb': 128, 'vcpus': 1,
                 'volumes': [{'capacity': '64MiB'}],
                 'physical_networks': ['physnet1']}
    spec = env.spec(
        node_types={
            'bios': node_type,
            'uefi': dict(node_type, ironic_driver='redfish',
                         boot_mode='uefi', secure_boot=True)},
        specs=[{'type': kind, 'count': 1,
                'node_name_prefix': env.node_prefix + kind[0],
                'ironic_config': {'resource_class': 'tenks-mixed'}}
               for kind in ('bios', 'uefi')],
        redfish_port=REDFISH_PORT, redfish_password=PASSWORD)
    env.deploy(spec)
    nodes = {n['bmc_type']: n for n in env.nodes()}
    assert sorted(nodes) == ['ipmi', 'redfish']
    ipmi, rf = nodes['ipmi'], nodes['redfish']

    # The secure boot node: its loader, its own marked NVRAM, SMM, q35.
    xml = domain(rf['name'])
    loader = xml.find('os/loader')
    assert loader.get('secure') == 'yes' and loader.get('type') == 'pflash'
    nvram = xml.findtext('os/nvram')
    assert os.path.basename(nvram) == '%s_VARS.fd' % rf['name']
    assert os.getxattr(nvram, 'user.tenks.owner').decode().startswith(
        'tenks:%s:' % env.cluster)
    assert xml.find('features/smm').get('state') == 'on'
    assert xml.find('os/type').get('machine').startswith('pc-q35')
    assert domain(ipmi['name']).find('os/loader') is None

    # Every NIC is a port of the cluster's Open vSwitch bridge.
    ports = ovs.bridge_ports()
    for node in (ipmi, rf):
        [nic] = node['nics']
        assert nic['bridge_type'] == 'openvswitch'
        assert nic['tap'] in ports[nic['bridge']]
        assert ovs.ovs_get('Bridge', nic['bridge'],
                           'datapath_type') == 'netdev'

    # IPMI drives the BIOS node.
    assert cf.ipmitool(ipmi['bmc_port'], 'power', 'on').returncode == 0
    redfish.wait_state(ipmi['name'], libvirt.VIR_DOMAIN_RUNNING)
    assert cf.ipmitool(ipmi['bmc_port'], 'power', 'off').returncode == 0
    redfish.wait_state(ipmi['name'], libvirt.VIR_DOMAIN_SHUTOFF)

    # Redfish drives the UEFI node, with the cluster's credentials only.
    system = redfish.url(rf)
    reset = redfish.url(rf, '/Actions/ComputerSystem.Reset')
    auth = ('admin', PASSWORD)
    assert requests.get(system).status_code == 401
    assert requests.post(reset, json={'ResetType': 'On'},
                         auth=('admin', 'wrong')).status_code == 401
    assert requests.patch(system, auth=auth, json={'Boot': {
        'BootSourceOverrideTarget': 'Pxe',
        'BootSourceOverrideEnabled': 'Once'}}).status_code == 204
    assert requests.get(system, auth=auth).json()['Boot'][
        'BootSourceOverrideMode'] == 'UEFI'
    assert requests.post(reset, json={'ResetType': 'On'},
                         auth=auth).status_code == 204
    redfish.wait_state(rf['name'], libvirt.VIR_DOMAIN_RUNNING)
    assert requests.post(reset, json={'ResetType': 'ForceOff'},
                         auth=auth).status_code == 204
    redfish.wait_state(rf['name'], libvirt.VIR_DOMAIN_SHUTOFF)

    # Both reach available in Ironic, each through its own driver, with
    # its firmware in its capabilities.
    for node, driver, capabilities in (
            (ipmi, 'ipmi', 'boot_mode:bios'),
            (rf, 'redfish', 'boot_mode:uefi,secure_boot:true')):
        enrolled = cloud.baremetal.get_node(node['uuid'])
        assert (enrolled.driver, enrolled.provision_state) == (
            driver, 'available')
        assert enrolled.properties['capabilities'] == capabilities

    env.teardown()
    assert env.leftovers() == []
    assert not os.path.exists(nvram)
    with pytest.raises(requests.ConnectionError):
        requests.get(system, auth=auth, timeout=5)
