"""A deployed cluster changed by deploying a changed spec, on real
libvirt, virtualbmc, Linux bridges (and the real Ironic for enrolled
nodes): only the difference is applied, a failure puts everything back
as it was, and a killed reconfigure resumes."""

import os
import re
import subprocess
import time
import xml.etree.ElementTree as ET

import libvirt
import pytest
import yaml

from flows import records
from hostagent import nodes as agent_nodes
from tenks import exceptions
from tenks import names
from tenks import spec as tenks_spec
from tenks.cli import embedded
from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of

pytestmark = pytest.mark.functional

# This module's IPMI ports: 8700-8899, ten per test.
PORT_BASE = 8700


@pytest.fixture
def env(tmp_path, request):
    port_base = PORT_BASE + 10 * TESTS.index(request.node.originalname)
    with cf.checked(cf.ClusterEnv(tmp_path, port_base=port_base)) as cluster:
        yield cluster


def resized(env, memory_mb=128, vcpus=1, volumes=None, physnets=None,
            **kwargs):
    """env's spec with its node type changed."""
    physnets = physnets or ['physnet1']
    return env.spec(
        node_types={'small': {
            'memory_mb': memory_mb, 'vcpus': vcpus,
            'volumes': volumes or [{'capacity': '64MiB'},
                                   {'capacity': '32MiB'}],
            'physical_networks': physnets}},
        physical_networks=physnets, **kwargs)


def answers(port):
    """Whether a BMC answers IPMI on ``port`` (quickly: few retries)."""
    result = subprocess.run(
        ['ipmitool', '-I', 'lanplus', '-H', '127.0.0.1', '-p', str(port),
         '-U', 'admin', '-P', 'password', '-R', '1', '-N', '1', 'power',
         'status'], capture_output=True, text=True, timeout=30)
    return result.returncode == 0


def dominfo(name):
    """(memory MiB, vCPUs, running) of domain ``name``, as virsh says."""
    out = subprocess.run(['virsh', '-c', cf.URI, 'dominfo', name],
                         capture_output=True, text=True, check=True).stdout
    info = dict(line.split(':', 1) for line in out.splitlines()
                if ':' in line)
    memory = int(re.match(r'\s*(\d+) KiB', info['Max memory']).group(1))
    return (memory // 1024, int(info['CPU(s)']),
            info['State'].strip() == 'running')


def domains():
    conn = libvirt.open(cf.URI)
    try:
        return {d.name() for d in conn.listAllDomains()}
    finally:
        conn.close()


def domain_xml(name):
    conn = libvirt.open(cf.URI)
    try:
        return ET.fromstring(conn.lookupByName(name).XMLDesc())
    finally:
        conn.close()


def volumes(env):
    conn = libvirt.open(cf.URI)
    try:
        pool = conn.storagePoolLookupByName(
            names.pool(env.cluster))
        return {v.name() for v in pool.listAllVolumes()}
    finally:
        conn.close()


def links():
    return set(os.listdir('/sys/class/net'))


def bmc_entries(env):
    """The domains whose IPMI BMC definitions are stored."""
    path = os.path.join(env.state_dir, 'ipmi', 'bmcs')
    return {name[:-len('.json')] for name in os.listdir(path)
            if name.endswith('.json')} if os.path.isdir(path) else set()


def traces(env, node):
    """What remains of ``node`` (a record) on the machine."""
    found = []
    if node['name'] in domains():
        found.append('domain')
    found += ['volume %s' % v for v in volumes(env)
              if v.startswith(node['name'])]
    found += ['tap %s' % nic['tap'] for nic in node['nics']
              if nic['tap'] in links()]
    if node['name'] in bmc_entries(env):
        found.append('BMC definition')
    if answers(node['bmc_port']):
        found.append('IPMI answers')
    return found


def identity(node):
    return (node['uuid'], node['name'], node['bmc_port'],
            [nic['mac'] for nic in node['nics']])


def by_name(env):
    return {n['name']: n for n in env.nodes()}


def test_grow_then_shrink(env):
    """2 -> 4: the two nodes stay as they are, two new ones answer IPMI;
    4 -> 1: the three newest go, with everything they had."""
    env.deploy(env.spec(count=2))
    first = by_name(env)

    result = env.deploy(env.spec(count=4))
    assert result['changed']
    grown = by_name(env)
    assert sorted(grown) == [env.node_name(i) for i in range(4)]
    for name, node in first.items():
        assert identity(grown[name]) == identity(node)
    ports = {n['bmc_port'] for n in grown.values()}
    macs = {nic['mac'] for n in grown.values() for nic in n['nics']}
    assert len(ports) == 4 and len(macs) == 4
    for node in grown.values():
        assert node['state'] == 'deployed'
        status = cf.ipmitool(node['bmc_port'], 'power', 'status')
        assert 'Chassis Power is off' in status.stdout, status.stderr

    result = env.deploy(env.spec(count=1))
    assert result['changed']
    [kept] = env.nodes()
    assert identity(kept) == identity(first[env.node_name(0)])
    assert answers(kept['bmc_port'])
    for name in map(env.node_name, (1, 2, 3)):
        assert traces(env, grown[name]) == [], name
    assert env.deploy(env.spec(count=1))['changed'] == []

    env.teardown()
    assert env.leftovers() == []


def test_resize_powered_off_nodes(env):
    env.deploy(env.spec(count=2))
    before = by_name(env)
    assert {dominfo(name) for name in before} == {(128, 1, False)}

    result = env.deploy(resized(env, memory_mb=192, vcpus=2, count=2))
    assert result['changed']
    after = by_name(env)
    for name, node in before.items():
        assert dominfo(name) == (192, 2, False)
        assert identity(after[name]) == identity(node)
        assert (after[name]['memory_mb'], after[name]['vcpus']) == (192, 2)
        assert answers(node['bmc_port'])

    env.teardown()
    assert env.leftovers() == []


def test_running_node_is_resized_only_with_force(env):
    env.deploy(env.spec(count=1))
    [node] = env.nodes()
    name = node['name']
    assert cf.ipmitool(node['bmc_port'], 'power', 'on').returncode == 0
    assert dominfo(name) == (128, 1, True)
    bigger = resized(env, memory_mb=192, count=1)

    with pytest.raises(exceptions.TenksError) as raised:
        env.deploy(bigger)
    message = str(raised.value)
    assert 'Node %s is running and would change' % name in message
    assert 'memory' in message
    # Nothing changed: the domain, its record, the spec.
    assert dominfo(name) == (128, 1, True)
    [again] = env.nodes()
    assert again['memory_mb'] == 128
    with embedded.embedded(env.conf) as conductor:
        cluster = conductor.records.get_cluster(env.cluster)
        assert cluster['spec']['node_types']['small']['memory_mb'] == 128
        # Forced: powered off, redefined, started again.
        assert conductor.deployments.deploy(bigger, force=True)['changed']
    assert dominfo(name) == (192, 1, True)
    assert env.nodes()[0]['memory_mb'] == 192

    env.teardown()
    assert env.leftovers() == []


def test_volume_and_nic_added(env):
    env.deploy(env.spec(count=1))
    [node] = env.nodes()
    name = node['name']
    old_mac = node['nics'][0]['mac']

    env.deploy(resized(
        env, count=1, physnets=['physnet1', 'physnet2'],
        volumes=[{'capacity': '64MiB'}, {'capacity': '32MiB'},
                 {'capacity': '16MiB'}]))
    [node] = env.nodes()
    assert [nic['physnet'] for nic in node['nics']] == ['physnet1',
                                                        'physnet2']
    assert node['nics'][0]['mac'] == old_mac
    xml = domain_xml(name)
    disks = [d.find('source').get('volume')
             for d in xml.findall('devices/disk')]
    assert disks == ['%svol%d' % (name, i) for i in range(3)]
    assert volumes(env) == set(disks)
    interfaces = {i.find('mac').get('address'): i.find('target').get('dev')
                  for i in xml.findall('devices/interface')}
    assert interfaces == {nic['mac']: nic['tap'] for nic in node['nics']}
    # Each tap on its physical network's bridge.
    for index, nic in enumerate(node['nics']):
        master = os.path.realpath('/sys/class/net/%s/master' % nic['tap'])
        assert os.path.basename(master) == env.bridge_prefix + str(index)
    assert answers(node['bmc_port'])

    env.teardown()
    assert env.leftovers() == []


def test_a_physnet_removed_renames_no_other_bridge(env):
    env.deploy(resized(env, count=1, physnets=['physnet1', 'physnet2']))
    [node] = env.nodes()
    kept = node['nics'][1]
    assert kept['bridge'] == env.bridge_prefix + '1'

    # physnet1 goes: physnet2's bridge keeps its name and its tap.
    env.deploy(resized(env, count=1, physnets=['physnet2']))
    [node] = env.nodes()
    assert node['nics'] == [kept]
    assert os.path.basename(os.path.realpath(
        '/sys/class/net/%s/master' % kept['tap'])) == kept['bridge']
    assert not os.path.exists('/sys/class/net/%s0' % env.bridge_prefix)
    assert answers(node['bmc_port'])

    env.teardown()
    assert env.leftovers() == []


def test_reordered_specs_change_nothing(env):
    entries = [{'type': 'small', 'count': 1,
                'node_name_prefix': env.node_prefix + 'a'},
               {'type': 'small', 'count': 2,
                'node_name_prefix': env.node_prefix + 'b'}]
    env.deploy(env.spec(specs=entries))
    before = sorted(map(identity, env.nodes()))
    assert len(before) == 3

    result = env.deploy(env.spec(specs=entries[::-1]))
    assert result['changed'] == []
    assert sorted(map(identity, env.nodes())) == before

    env.teardown()
    assert env.leftovers() == []


def test_failure_mid_reconfigure_is_rolled_back(env, monkeypatch):
    """Two nodes grow and two are added; the agent fails the second
    node's request after redefining it: both old nodes get their old
    size back, the new ones go."""
    env.deploy(env.spec(count=2))
    before = by_name(env)
    failing = env.node_name(1)
    real_ensure = agent_nodes.Nodes.ensure

    def ensure(self, node, owner, force):
        result = real_ensure(self, node, owner, force)
        if node['name'] == failing and node['memory_mb'] == 192:
            raise RuntimeError('injected failure after changing %s'
                               % failing)
        return result

    monkeypatch.setattr(agent_nodes.Nodes, 'ensure', ensure)
    with pytest.raises(exceptions.OperationFailed) as raised:
        env.deploy(resized(env, memory_mb=192, count=4))
    assert 'injected failure' in str(raised.value)
    assert 'rolled back' in str(raised.value)

    after = by_name(env)
    assert sorted(after) == sorted(before)
    for name, node in before.items():
        assert dominfo(name) == (128, 1, False)
        assert identity(after[name]) == identity(node)
        assert after[name]['memory_mb'] == 128
        assert answers(node['bmc_port'])
    assert not {env.node_name(2), env.node_name(3)} & domains()
    assert {v for v in volumes(env) if not v.startswith(
        (env.node_name(0), env.node_name(1)))} == set()
    assert bmc_entries(env) == set(before)
    for port in range(env.port_base, env.port_base + 10):
        if port not in {n['bmc_port'] for n in before.values()}:
            assert not answers(port), port
            break

    # Once the agent works, the same change applies.
    monkeypatch.setattr(agent_nodes.Nodes, 'ensure', real_ensure)
    env.deploy(resized(env, memory_mb=192, count=4))
    assert {dominfo(n) for n in by_name(env)} == {(192, 1, False)}
    env.teardown()
    assert env.leftovers() == []


def test_killed_reconfigure_resumes(env, tmp_path):
    base = [cf.TENKS, '--state-dir', env.state_dir]

    def deploy(spec, check=True):
        path = tmp_path / 'cluster.yaml'
        path.write_text(yaml.safe_dump(spec))
        return subprocess.run([*base, 'deploy', str(path)],
                              capture_output=True, text=True, timeout=120,
                              check=check)

    deploy(env.spec(count=1))
    [first] = env.nodes()
    wanted = resized(env, memory_mb=192, count=3)
    path = tmp_path / 'cluster.yaml'
    path.write_text(yaml.safe_dump(wanted))
    # Held, the BMC lock holds every node request at its BMC step.
    with cf.bmc_changes_held(env.state_dir):
        running = subprocess.Popen([*base, 'deploy', str(path)],
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        new = {env.node_name(1), env.node_name(2)}
        while not (new <= domains() and dominfo(first['name'])[0] == 192):
            assert time.monotonic() < deadline, 'nodes never changed'
            assert running.poll() is None, running.communicate()
            time.sleep(0.05)
        running.kill()
        running.wait()

    # Interrupted: another spec is refused until this one finishes.
    other = deploy(env.spec(count=2), check=False)
    assert other.returncode != 0
    assert 'was interrupted with another spec' in other.stderr

    resumed = deploy(wanted)
    assert 'Resumed deploy' in resumed.stdout
    nodes = by_name(env)
    assert sorted(nodes) == [env.node_name(i) for i in range(3)]
    assert identity(nodes[first['name']]) == identity(first)
    for name, node in nodes.items():
        assert node['state'] == 'deployed'
        assert node['memory_mb'] == 192
        assert dominfo(name) == (192, 1, False)
        assert answers(node['bmc_port'])

    subprocess.run([*base, 'teardown', env.cluster], check=True,
                   capture_output=True, timeout=120)
    assert env.leftovers() == []


# Enrolled nodes, on the real Ironic.


@pytest.fixture
def enrolled(tmp_path, request, openstack_services, cloud):
    port_base = PORT_BASE + 10 * TESTS.index(request.node.originalname)
    cluster = cf.ClusterEnv(tmp_path, port_base=port_base)
    of.use_services(cluster, openstack_services)
    yield cluster
    left = of.cleaned_up(cluster, cloud)
    assert left == [], 'the test left %s behind' % left


def ironic_spec(env, count, rc='tenks-gold', traits=('CUSTOM_FAST',),
                physnets=None):
    return resized(
        env, physnets=physnets,
        specs=[{'type': 'small', 'count': count,
                'node_name_prefix': env.node_prefix,
                'ironic_config': {'resource_class': rc,
                                  'traits': list(traits),
                                  'deploy_interface': 'ramdisk'}}],
        deploy_kernel='http://127.0.0.1:8080/ipa.kernel',
        deploy_ramdisk='http://127.0.0.1:8080/ipa.initramfs')


def ironic_ports(cloud, node):
    return sorted(p.address for p in cloud.baremetal.ports(
        node_id=node['uuid']))


def test_enrolled_traits_class_and_nic_change_in_ironic(enrolled, cloud):
    env = enrolled
    env.deploy(ironic_spec(env, 1))
    [node] = env.nodes()
    ironic = cloud.baremetal.get_node(node['uuid'])
    assert (ironic.resource_class, ironic.traits) == ('tenks-gold',
                                                      ['CUSTOM_FAST'])
    assert ironic_ports(cloud, node) == [node['nics'][0]['mac']]

    result = env.deploy(ironic_spec(
        env, 1, rc='tenks-silver', traits=['CUSTOM_SLOW', 'CUSTOM_X'],
        physnets=['physnet1', 'physnet2']))
    assert result['changed']
    [after] = env.nodes()
    assert identity(after)[:3] == identity(node)[:3]
    ironic = cloud.baremetal.get_node(node['uuid'])
    assert ironic.provision_state == 'available'
    assert ironic.resource_class == 'tenks-silver'
    assert sorted(ironic.traits) == ['CUSTOM_SLOW', 'CUSTOM_X']
    assert ironic_ports(cloud, after) == sorted(
        nic['mac'] for nic in after['nics'])
    assert len(after['nics']) == 2

    # The NIC goes again: its Ironic port too.
    env.deploy(ironic_spec(env, 1, rc='tenks-silver',
                           traits=['CUSTOM_SLOW', 'CUSTOM_X']))
    [last] = env.nodes()
    assert ironic_ports(cloud, last) == [node['nics'][0]['mac']]

    env.teardown()
    assert env.leftovers() == []


def adopt(cloud, uuid):
    """Put an available node in ``active`` with Ironic's adopt."""
    cloud.baremetal.set_node_provision_state(uuid, 'manage')
    of.wait_for_node(cloud, uuid)
    cloud.baremetal.patch_node(uuid, [{
        'op': 'add', 'path': '/instance_info', 'value': {
            'kernel': 'http://127.0.0.1:8080/tenks.kernel',
            'ramdisk': 'http://127.0.0.1:8080/tenks.initramfs'}}])
    cloud.baremetal.set_node_provision_state(uuid, 'adopt')
    node = of.wait_for_node(cloud, uuid)
    assert node.provision_state == 'active', node.last_error


def test_active_ironic_node_is_not_removed(enrolled, cloud):
    env = enrolled
    env.deploy(ironic_spec(env, 2))
    nodes = by_name(env)
    newest = nodes[env.node_name(1)]
    adopt(cloud, newest['uuid'])

    with pytest.raises(exceptions.TenksError) as raised:
        env.deploy(ironic_spec(env, 1))
    message = str(raised.value)
    assert '%s (active)' % newest['name'] in message
    assert 'without --force' in message
    # Nothing removed, here or in Ironic.
    assert by_name(env) == nodes
    assert newest['name'] in domains()
    assert answers(newest['bmc_port'])
    assert cloud.baremetal.get_node(newest['uuid']).provision_state == (
        'active')

    # Undeployed, it may go.
    cloud.baremetal.set_node_provision_state(newest['uuid'], 'deleted')
    assert of.wait_for_node(cloud, newest['uuid']).provision_state == (
        'available')
    env.deploy(ironic_spec(env, 1))
    assert list(by_name(env)) == [env.node_name(0)]
    assert traces(env, newest) == []

    # Forced, an active one goes too (through maintenance, as Ironic
    # deletes an active node no other way).
    oldest = by_name(env)[env.node_name(0)]
    adopt(cloud, oldest['uuid'])
    with embedded.embedded(env.conf) as conductor:
        conductor.deployments.deploy(ironic_spec(env, 0), force=True)
    assert by_name(env) == {}
    # With no node left, the cluster's pool and bridges went too.
    assert oldest['name'] not in domains()
    assert not answers(oldest['bmc_port'])
    assert env.leftovers() == []
    assert cloud.baremetal.find_node(oldest['uuid'],
                                     ignore_missing=True) is None
    env.teardown()
    assert env.leftovers() == []


def test_failed_reconfigure_gives_flavors_and_nodes_their_old_values(
        enrolled, cloud, monkeypatch):
    """A failure after the flavor changed (the last task, injected):
    the flavor, the Ironic node and the domain are as before."""
    env = enrolled
    flavor = env.cluster + '-gold'

    def spec(memory_mb, rc):
        data = ironic_spec(env, 1, rc=rc)
        data['node_types']['small']['memory_mb'] = memory_mb
        data['nova_flavors'] = [{'name': flavor, 'resource_class': rc,
                                 'node_type': 'small'}]
        return tenks_spec.validate(data)

    env.deploy(spec(128, 'tenks-gold'))
    [node] = env.nodes()

    def fail(self, *args, **kwargs):
        raise RuntimeError('injected failure at the end')

    monkeypatch.setattr(records.CommitSpec, 'execute', fail)
    with pytest.raises(exceptions.OperationFailed, match='injected'):
        env.deploy(spec(192, 'tenks-silver'))
    monkeypatch.undo()

    found = cloud.compute.find_flavor(flavor, ignore_missing=False)
    assert found.ram == 128
    assert cloud.compute.fetch_flavor_extra_specs(found).extra_specs[
        'resources:CUSTOM_TENKS_GOLD'] == '1'
    assert cloud.baremetal.get_node(node['uuid']).resource_class == (
        'tenks-gold')
    assert dominfo(node['name']) == (128, 1, False)
    [after] = env.nodes()
    assert after['memory_mb'] == 128 and after['state'] == 'deployed'

    env.teardown()
    assert cloud.compute.find_flavor(flavor, ignore_missing=True) is None
    assert env.leftovers() == []


TESTS = [name for name in dir() if name.startswith('test_')]
