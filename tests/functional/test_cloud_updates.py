"""Reconfiguration on the OpenStack side, against the real standalone
Ironic and Nova: an enrolled node's fields, traits and ports updated in
place, what Ironic refuses on an active (adopted) node, provision
states, and a flavor re-created with new sizes.

The nodes here use Ironic's fake-hardware driver: they need no BMC, and
Ironic applies the same state rules to every driver. The ipmi case,
with a real VM behind virtualbmc, is test_adopting_an_ipmi_node.
"""

import secrets
import types
import uuid

import pytest

from tenks import exceptions
from tenks.cloud import ironic as tenks_ironic
from tenks.cloud import nova
from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of

pytestmark = pytest.mark.functional

CONF = types.SimpleNamespace(provision_timeout=60, poll_interval=0.2,
                             ironic_concurrency=4)



@pytest.fixture
def prefix(cloud):
    """A name prefix of this test's nodes and flavors; they must all be
    gone at the end."""
    prefix = 'tkc%s' % secrets.token_hex(2)
    yield prefix
    left = of.remove_ironic_nodes(cloud, prefix)
    for flavor in cloud.compute.flavors():
        if flavor.name.startswith(prefix):
            left.append('flavor %s' % flavor.name)
            cloud.compute.delete_flavor(flavor)
    assert left == [], 'the test left %s behind' % left


def fake_node(prefix, **fields):
    node = {'id': str(uuid.uuid4()), 'name': prefix + '-0',
            'driver': 'fake-hardware', 'resource_class': 'tenks-a',
            'properties': {'cpus': 1, 'memory_mb': 128},
            'driver_info': {'ipmi_address': '127.0.0.1', 'ipmi_port': 8600,
                            'ipmi_username': 'admin',
                            'ipmi_password': 'password'}}
    node.update(fields)
    return node


def port(mac, physnet='physnet1', tap='tap0'):
    return {'address': mac, 'physical_network': physnet,
            'local_link_connection': {'switch_id': '52:54:00:00:00:01',
                                      'switch_info': 'br0',
                                      'port_id': tap}}


MAC1, MAC2 = '52:54:00:c1:00:01', '52:54:00:c1:00:02'


def ports_of(cloud, node_id):
    return {p.address: (p.physical_network, p.local_link_connection['port_id'])
            for p in cloud.baremetal.ports(node_id=node_id, details=True)}


def test_fields_traits_and_ports_change_in_place(cloud, prefix):
    node = fake_node(prefix, deploy_interface='direct')
    assert tenks_ironic.ensure_node(
        cloud, CONF, node, ['CUSTOM_A'], [port(MAC1), port(MAC2, tap='t2')],
        adopt=False)

    # A new resource class, properties, traits, an interface back to
    # the driver's default, one NIC gone and the other moved.
    changed = dict(node, resource_class='tenks-b',
                   properties={'cpus': 2, 'memory_mb': 256})
    del changed['deploy_interface']
    wanted_ports = [port(MAC1, physnet='physnet2', tap='t9')]
    assert tenks_ironic.ensure_node(
        cloud, CONF, changed, ['CUSTOM_B', 'CUSTOM_C'], wanted_ports,
        adopt=True)
    ironic = cloud.baremetal.get_node(node['id'])
    assert ironic.provision_state == 'available'
    assert not ironic.is_maintenance
    assert ironic.resource_class == 'tenks-b'
    assert ironic.properties == {'cpus': 2, 'memory_mb': 256}
    assert sorted(ironic.traits) == ['CUSTOM_B', 'CUSTOM_C']
    assert ironic.deploy_interface == cloud.baremetal.get_driver(
        'fake-hardware').default_deploy_interface == 'fake'
    assert ports_of(cloud, node['id']) == {MAC1: ('physnet2', 't9')}

    # Converged: nothing more to do.
    assert not tenks_ironic.ensure_node(
        cloud, CONF, changed, ['CUSTOM_C', 'CUSTOM_B'], wanted_ports,
        adopt=True)

    # The BMC credentials (password masked on read) and a new NIC.
    info = dict(node['driver_info'], ipmi_port=8601, ipmi_password='other')
    assert tenks_ironic.ensure_node(
        cloud, CONF, dict(changed, driver_info=info), ['CUSTOM_B'],
        wanted_ports + [port(MAC2)], adopt=True)
    ironic = cloud.baremetal.get_node(node['id'])
    assert int(ironic.driver_info['ipmi_port']) == 8601
    assert ironic.traits == ['CUSTOM_B']
    assert sorted(ports_of(cloud, node['id'])) == [MAC1, MAC2]

    # Another hardware type: its default interfaces, but those named.
    assert tenks_ironic.ensure_node(
        cloud, CONF, dict(changed, driver_info=info, driver='ipmi',
                          deploy_interface='ramdisk'),
        ['CUSTOM_B'], wanted_ports + [port(MAC2)], adopt=True)
    ironic = cloud.baremetal.get_node(node['id'])
    assert (ironic.driver, ironic.power_interface, ironic.boot_interface,
            ironic.deploy_interface) == ('ipmi', 'ipmitool', 'pxe', 'ramdisk')
    assert tenks_ironic.delete_node(cloud, CONF, node['id'])


def test_node_of_someone_else_is_left_alone(cloud, prefix):
    node = fake_node(prefix)
    cloud.baremetal.create_node(**node)
    with pytest.raises(exceptions.ResourceConflict):
        tenks_ironic.ensure_node(cloud, CONF, dict(
            node, resource_class='tenks-b'), [], [port(MAC1)], adopt=False)
    ironic = cloud.baremetal.get_node(node['id'])
    assert ironic.resource_class == 'tenks-a'
    assert ironic.provision_state == 'enroll'
    assert ports_of(cloud, node['id']) == {}
    cloud.baremetal.delete_node(node['id'])


def test_active_node_refuses_what_ironic_refuses(cloud, prefix):
    node = fake_node(prefix)
    tenks_ironic.ensure_node(cloud, CONF, node, ['CUSTOM_A'], [port(MAC1)],
                             adopt=False)
    of.adopt(cloud, node['id'])
    missing = str(uuid.uuid4())
    assert tenks_ironic.provision_states(cloud, [node['id'], missing]) == {
        node['id']: 'active', missing: None}
    assert tenks_ironic.deployed('active')

    # Refused before anything changes: the traits stay as they were.
    for fields, ports, what in (
            ({'resource_class': 'tenks-b'}, [port(MAC1)], 'resource_class'),
            ({'deploy_interface': 'direct'}, [port(MAC1)],
             'deploy_interface'),
            ({}, [port(MAC1, physnet='physnet2')], 'ports %s' % MAC1)):
        with pytest.raises(exceptions.CloudError) as raised:
            tenks_ironic.ensure_node(cloud, CONF, dict(node, **fields),
                                     ['CUSTOM_B'], ports, adopt=True)
        message = str(raised.value)
        assert node['name'] in message and node['id'] in message
        assert what in message
        assert message.endswith('cannot change in provision state active')
        ironic = cloud.baremetal.get_node(node['id'])
        assert ironic.traits == ['CUSTOM_A']
        assert ironic.resource_class == 'tenks-a'

    # What Ironic allows on an active node is done, and it stays active.
    assert tenks_ironic.ensure_node(
        cloud, CONF, dict(node, properties={'cpus': 4}), ['CUSTOM_B'],
        [port(MAC1), port(MAC2)], adopt=True)
    ironic = cloud.baremetal.get_node(node['id'])
    assert ironic.provision_state == 'active'
    assert ironic.properties == {'cpus': 4}
    assert ironic.traits == ['CUSTOM_B']
    assert sorted(ports_of(cloud, node['id'])) == [MAC1, MAC2]

    # Torn down as Ironic does it, the node is free again.
    cloud.baremetal.set_node_provision_state(node['id'], 'deleted')
    assert of.wait_for_node(cloud, node['id']).provision_state == (
        'available')
    assert tenks_ironic.provision_states(cloud, [node['id']]) == {
        node['id']: 'available'}
    assert tenks_ironic.delete_node(cloud, CONF, node['id'])


def test_provision_states_of_no_nodes_ask_nothing():
    assert tenks_ironic.provision_states(None, []) == {}


def test_flavor_resized_is_created_again(cloud, prefix):
    flavor = {'name': prefix + '-gold', 'vcpus': 1, 'ram': 128, 'disk': 0,
              'extra_specs': {'resources:CUSTOM_GOLD': '1',
                              'trait:CUSTOM_A': 'required'}}
    assert nova.ensure_flavor(cloud, flavor, adopt=False)
    first = cloud.compute.find_flavor(flavor['name'])

    # Extra specs change in place.
    flavor['extra_specs'] = {'resources:CUSTOM_GOLD': '1',
                             'trait:CUSTOM_B': 'required'}
    assert nova.ensure_flavor(cloud, flavor, adopt=True)
    assert cloud.compute.find_flavor(flavor['name']).id == first.id
    assert not nova.ensure_flavor(cloud, flavor, adopt=True)

    # Sizes cannot: a flavor of the same name is made again.
    with pytest.raises(exceptions.ResourceConflict):
        nova.ensure_flavor(cloud, dict(flavor, ram=256), adopt=False)
    assert nova.ensure_flavor(cloud, dict(flavor, ram=256), adopt=True)
    resized = cloud.compute.find_flavor(flavor['name'])
    assert (resized.vcpus, resized.ram, resized.disk) == (1, 256, 0)
    assert resized.id != first.id
    assert cloud.compute.fetch_flavor_extra_specs(
        resized).extra_specs == flavor['extra_specs']
    assert [f.name for f in cloud.compute.flavors()].count(
        flavor['name']) == 1
    assert nova.delete_flavor(cloud, flavor['name'])
    assert cloud.compute.find_flavor(flavor['name']) is None


@pytest.fixture
def env(tmp_path, openstack_services, cloud):
    cluster = cf.ClusterEnv(tmp_path, port_base=8600)
    of.use_services(cluster, openstack_services)
    yield cluster
    left = of.cleaned_up(cluster, cloud)
    assert left == [], 'the test left %s behind' % left


def test_adopting_an_ipmi_node(env, cloud):
    env.deploy(env.spec(
        count=1,
        specs=[{'type': 'small', 'count': 1,
                'node_name_prefix': env.node_prefix,
                'ironic_config': {'resource_class': 'tenks-gold',
                                  'deploy_interface': 'ramdisk'}}],
        deploy_kernel='http://127.0.0.1:8080/ipa.kernel',
        deploy_ramdisk='http://127.0.0.1:8080/ipa.initramfs'))
    [node] = env.nodes()
    ironic = cloud.baremetal.get_node(node['uuid'])
    wanted = {
        'id': node['uuid'], 'name': node['name'], 'driver': 'ipmi',
        'resource_class': 'tenks-silver', 'deploy_interface': 'ramdisk',
        'properties': dict(ironic.properties, vendor='tenks'),
        'driver_info': dict(ironic.driver_info, ipmi_password='password')}
    ports = [{'address': p.address, 'physical_network': p.physical_network,
              'local_link_connection': p.local_link_connection}
             for p in cloud.baremetal.ports(node_id=node['uuid'],
                                            details=True)]
    assert tenks_ironic.ensure_node(cloud, CONF, wanted, ['CUSTOM_NEW'],
                                    ports, adopt=True)
    ironic = cloud.baremetal.get_node(node['uuid'])
    assert ironic.provision_state == 'available'
    assert (ironic.resource_class, ironic.traits) == (
        'tenks-silver', ['CUSTOM_NEW'])
    assert ironic.properties['vendor'] == 'tenks'
    assert not tenks_ironic.ensure_node(cloud, CONF, wanted, ['CUSTOM_NEW'],
                                        ports, adopt=True)

    of.adopt(cloud, node['uuid'],
             kernel='http://127.0.0.1:8080/tenks.kernel',
             ramdisk='http://127.0.0.1:8080/tenks.initramfs')
    assert tenks_ironic.provision_states(cloud, [node['uuid']]) == {
        node['uuid']: 'active'}
    with pytest.raises(exceptions.CloudError, match='resource_class cannot '
                       'change in provision state active'):
        tenks_ironic.ensure_node(cloud, CONF, dict(
            wanted, resource_class='tenks-gold'), [], ports, adopt=True)
    assert cloud.baremetal.get_node(node['uuid']).traits == ['CUSTOM_NEW']
    # Back to available the way Ironic tears an instance down (cleaning
    # is off here), so the teardown can delete it.
    cloud.baremetal.set_node_provision_state(node['uuid'], 'deleted')
    assert of.wait_for_node(cloud, node['uuid']).provision_state == (
        'available')
    env.teardown()
    assert env.leftovers() == []
