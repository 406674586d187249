"""Enrolment in a real standalone Ironic, flavors in a real Nova API,
Placement checks against a real Placement."""

import threading
import time
import uuid

import pytest
from openstack import exceptions as sdk_exceptions

from tenks import exceptions
from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of

pytestmark = pytest.mark.functional

GOLD = 'CUSTOM_TENKS_GOLD'



@pytest.fixture
def env(tmp_path, openstack_services, cloud):
    cluster = cf.ClusterEnv(tmp_path, port_base=7650)
    of.use_services(cluster, openstack_services)
    yield cluster
    flavors = [f for f in cloud.compute.flavors()
               if f.name.startswith(cluster.cluster)]
    for flavor in flavors:
        cloud.compute.delete_flavor(flavor)
    left = of.cleaned_up(cluster, cloud,
                         ['flavor %s' % f.name for f in flavors])
    assert left == [], 'the test left %s behind' % left


def enrolled_spec(env, count=2, **top):
    return env.spec(
        count=count,
        specs=[{'type': 'small', 'count': count,
                'node_name_prefix': env.node_prefix,
                'ironic_config': {
                    'resource_class': 'tenks-gold',
                    'traits': ['CUSTOM_FAST'],
                    'properties': {'vendor': 'tenks'},
                    'deploy_interface': 'ramdisk',
                }}],
        nova_flavors=[{'name': env.cluster + '-gold',
                       'resource_class': 'tenks-gold', 'node_type': 'small',
                       'required_traits': ['CUSTOM_FAST'],
                       'forbidden_traits': ['CUSTOM_SLOW'],
                       'custom_specs': {'capabilities:boot_mode': 'bios'}}],
        deploy_kernel='http://127.0.0.1:8080/ipa.kernel',
        deploy_ramdisk='http://127.0.0.1:8080/ipa.initramfs',
        **top)


def test_nodes_reach_available_with_ports_and_flavor(env, cloud):
    spec = enrolled_spec(env)
    env.deploy(spec)
    nodes = env.nodes()
    assert len(nodes) == 2
    bridge = env.bridge_prefix + '0'
    with open('/sys/class/net/%s/address' % bridge) as f:
        bridge_mac = f.read().strip()
    for node in nodes:
        ironic = cloud.baremetal.get_node(node['uuid'])
        # Available: Ironic reached the node's BMC over IPMI.
        assert ironic.provision_state == 'available'
        assert ironic.name == node['name']
        assert ironic.driver == 'ipmi'
        assert ironic.resource_class == 'tenks-gold'
        assert ironic.traits == ['CUSTOM_FAST']
        assert ironic.deploy_interface == 'ramdisk'
        info = ironic.driver_info
        assert (info['ipmi_address'], int(info['ipmi_port'])) == (
            node['bmc_address'], node['bmc_port'])
        assert info['ipmi_username'] == 'admin'
        assert info['ipmi_password'] == '******'
        assert info['deploy_kernel'] == 'http://127.0.0.1:8080/ipa.kernel'
        assert ironic.properties == {
            'cpus': 1, 'memory_mb': 128, 'local_gb': 0, 'cpu_arch': 'x86_64',
            'capabilities': 'boot_mode:bios', 'vendor': 'tenks'}
        [port] = list(cloud.baremetal.ports(node_id=node['uuid'],
                                            details=True))
        nic = node['nics'][0]
        assert port.address == nic['mac']
        assert port.physical_network == 'physnet1'
        assert port.local_link_connection == {
            'switch_id': bridge_mac, 'switch_info': bridge,
            'port_id': nic['tap']}

    flavor = cloud.compute.find_flavor(env.cluster + '-gold')
    assert (flavor.vcpus, flavor.ram, flavor.disk) == (1, 128, 0)
    assert cloud.compute.fetch_flavor_extra_specs(flavor).extra_specs == {
        'resources:%s' % GOLD: '1', 'resources:VCPU': '0',
        'resources:MEMORY_MB': '0', 'resources:DISK_GB': '0',
        'trait:CUSTOM_FAST': 'required', 'trait:CUSTOM_SLOW': 'forbidden',
        'capabilities:boot_mode': 'bios'}

    # A re-run changes nothing in Ironic or Nova.
    assert env.deploy(spec)['changed'] == []

    env.teardown()
    for node in nodes:
        with pytest.raises(sdk_exceptions.NotFoundException):
            cloud.baremetal.get_node(node['uuid'])
    assert cloud.compute.find_flavor(env.cluster + '-gold') is None
    assert env.leftovers() == []


def test_ironic_failure_reverts_the_nodes_already_enrolled(env, cloud):
    # Ironic refuses the second node: its name is taken.
    taken = cloud.baremetal.create_node(name=env.node_name(1),
                                        driver='fake-hardware')
    try:
        with pytest.raises(exceptions.OperationFailed) as raised:
            env.deploy(enrolled_spec(env))
        assert 'ironic_node:openstack:' in str(raised.value)
        assert 'rolled back' in str(raised.value)
        assert [n.name for n in cloud.baremetal.nodes()
                if n.name.startswith(env.node_prefix)] == [env.node_name(1)]
        assert cloud.compute.find_flavor(env.cluster + '-gold') is None
        assert env.leftovers() == []
    finally:
        cloud.baremetal.delete_node(taken.id)


def test_unreachable_ironic_is_named_before_anything_is_made(env):
    env.conf.set_override('ironic_url', 'http://127.0.0.1:9/',
                          group='openstack')
    with pytest.raises(exceptions.CloudUnavailable) as raised:
        env.deploy(enrolled_spec(env))
    assert 'Ironic at http://127.0.0.1:9/' in str(raised.value)
    assert env.leftovers() == []
    assert env.nodes() == []


def make_provider(conn, name, provider_id, inventories):
    """A resource provider offering ``inventories`` ({class: total}),
    with the trait CUSTOM_FAST, as nova-compute would report a node."""
    provider = conn.placement.create_resource_provider(name=name,
                                                       id=provider_id)
    put = conn.placement.put(
        '/resource_providers/%s/inventories' % provider.id, json={
            'resource_provider_generation': provider.generation,
            'inventories': {rc: {'total': total}
                            for rc, total in inventories.items()}},
        microversion='1.18')
    assert put.status_code == 200, put.text
    put = conn.placement.put(
        '/resource_providers/%s/traits' % provider.id, json={
            'resource_provider_generation': put.json()[
                'resource_provider_generation'],
            'traits': ['CUSTOM_FAST']}, microversion='1.18')
    assert put.status_code == 200, put.text
    return provider


class NovaCompute(threading.Thread):
    """Plays nova-compute's part for one node: once Ironic has the node
    called ``name``, reports a provider named after the node, with
    ``inventories``."""

    def __init__(self, name, inventories, timeout=30):
        super().__init__(daemon=True)
        self.node_name, self.inventories = name, inventories
        self.deadline = time.monotonic() + timeout
        self.provider = self.error = None

    def run(self):
        conn = of.connection()  # its own: a Connection is not shared
        try:
            while (node := conn.baremetal.find_node(self.node_name)) is None:
                if time.monotonic() > self.deadline:
                    raise TimeoutError('Ironic has no node %s'
                                       % self.node_name)
                time.sleep(of.POLL / 2)
            self.provider = make_provider(conn, 'rp-' + self.node_name,
                                          node.id, self.inventories)
        except Exception as e:
            self.error = e


def test_placement_wait_and_coexistence_checks(env, cloud):
    for path in ('/resource_classes/%s' % GOLD, '/traits/CUSTOM_FAST'):
        assert cloud.placement.put(path, microversion='1.18').ok
    # A provider of the class and trait that is no node of this
    # cluster's (as one nova-compute has not yet deleted after its node
    # left Ironic): the wait does not count it, and names the node.
    providers = [make_provider(cloud, env.cluster + '-stale',
                               str(uuid.uuid4()), {GOLD: 1})]
    foreign = None
    try:
        spec = enrolled_spec(env, count=1, wait_for_placement=True,
                             placement_timeout=2)
        with pytest.raises(exceptions.OperationFailed) as raised:
            env.deploy(spec)
        assert ('%s with CUSTOM_FAST: 0 of 1 nodes offer it (not yet %s)'
                % (GOLD, env.node_name(0)) in str(raised.value))
        assert env.leftovers() == []

        # Playing nova-compute's part: the node's own provider, with its
        # class but also VCPU...
        reporter = NovaCompute(env.node_name(0), {GOLD: 1, 'VCPU': 4})
        # ...and a flavor for that class that does not zero VCPU.
        foreign = cloud.compute.create_flavor(
            name=env.cluster + '-vmish', ram=64, vcpus=1, disk=0)
        cloud.compute.create_flavor_extra_specs(
            foreign, {'resources:%s' % GOLD: '1'})
        reporter.start()
        try:
            result = env.deploy(dict(spec, placement_timeout=30))
        finally:
            reporter.join()
            if reporter.provider is not None:
                providers.append(reporter.provider)
        assert reporter.error is None, reporter.error
        [node] = env.nodes()
        assert reporter.provider.id == node['uuid']
        assert result['warnings'] == [
            'Placement provider of node %s still offers VCPU: VM flavors '
            'can land on it' % node['uuid'],
            'Bare-metal flavor %s-vmish does not zero DISK_GB, MEMORY_MB, '
            'VCPU: it also asks for standard resources' % env.cluster]
        env.teardown()
    finally:
        for provider in providers:
            cloud.placement.delete_resource_provider(provider)
        for path in ('/resource_classes/%s' % GOLD, '/traits/CUSTOM_FAST'):
            cloud.placement.delete(path, microversion='1.18')
        if foreign is not None:
            cloud.compute.delete_flavor(foreign)
