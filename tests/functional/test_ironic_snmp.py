"""Ironic's snmp power interface powers a Tenks node on and off through
the cluster's VirtualPDU: a one-node cluster with ``ironic_driver: snmp``
enrolled in Ironic 29 (ironic_snmp_fixtures; the test services' Ironic
has no snmp hardware type), its power set through Ironic's API.

IPMI ports 7850-7859 (unused), the VirtualPDU's UDP port 7860, Ironic's
API 6398.
"""

import libvirt
import pytest

from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of
from tests.functional import test_snmp
from tests.functional.ironic_snmp_fixtures import connection

pytestmark = pytest.mark.functional

PORT = 7860
COMMUNITY = 'c0mmunity'
OFF, ON = 'power off', 'power on'


@pytest.fixture
def snmp_cloud(ironic_snmp):
    return connection(ironic_snmp)


@pytest.fixture
def env(request, tmp_path, ironic_snmp, snmp_cloud):
    cluster = test_snmp.SnmpEnv(tmp_path, port_base=7850)
    cluster.conf.set_override('ironic_url', ironic_snmp, group='openstack')
    yield cluster
    cf.assert_nothing_left(request, of.cleaned_up(cluster, snmp_cloud))


def test_ironic_powers_a_node_on_and_off_through_virtualpdu(env,
                                                          snmp_cloud):
    cloud = snmp_cloud
    env.deploy(env.spec(
        count=1, snmp_port=PORT, snmp_community=COMMUNITY,
        default_ironic_driver='snmp',
        specs=[{'type': 'small', 'count': 1,
                'node_name_prefix': env.node_prefix,
                'ironic_config': {'resource_class': 'tenks-snmp'}}]))
    [node] = env.nodes()
    name, uuid = node['name'], node['uuid']
    ironic = cloud.baremetal.get_node(uuid)
    assert (ironic.driver, ironic.power_interface, ironic.provision_state,
            ironic.power_state) == ('snmp', 'snmp', 'available', OFF)
    assert {key: str(ironic.driver_info[key]) for key in (
        'snmp_driver', 'snmp_address', 'snmp_port', 'snmp_outlet')} == {
        'snmp_driver': 'apc_rackpdu', 'snmp_address': node['bmc_address'],
        'snmp_port': str(PORT), 'snmp_outlet': '1'}

    for state, domain, outlet in ((ON, libvirt.VIR_DOMAIN_RUNNING, '1'),
                                  (OFF, libvirt.VIR_DOMAIN_SHUTOFF, '2')):
        cloud.baremetal.set_node_power_state(uuid, state)
        ironic = of.wait_for_node(cloud, uuid, timeout=120)
        assert (ironic.power_state, ironic.last_error) == (state, None)
        # The outlet reads the new state (Ironic waits for that); the
        # domain may still be starting up (paused).
        test_snmp.wait_state(name, domain)
        assert test_snmp.snmp('snmpget', COMMUNITY, 1, port=PORT
                              ).stdout.strip() == outlet

    env.teardown()
    assert env.pdu_dirs() == []
