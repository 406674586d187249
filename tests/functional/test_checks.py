"""Pre-flight checks and advisory steps on the real components: what a
spec or a host would collide on is refused before anything is made, and
a check that only reads never undoes a deploy."""

import re
import subprocess

import pytest
import yaml
from pyroute2 import IPRoute

from tenks import exceptions
from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of
from tests.functional import test_enrolment

pytestmark = pytest.mark.functional

# IPMI ports of this module: 8100-8199.
PORTS = iter(range(8100, 8200, 10))



@pytest.fixture
def env(tmp_path, openstack_services, cloud):
    cluster = cf.ClusterEnv(tmp_path, port_base=next(PORTS))
    cluster.conf.set_override('ironic_url', openstack_services['baremetal'],
                              group='openstack')
    yield cluster
    left = of.cleaned_up(cluster, cloud)
    assert left == [], 'the test left %s behind' % left


def test_placement_refusing_the_coexistence_check_only_warns(
        env, cloud, tmp_path, monkeypatch, openstack_services):
    # Placement answers 401. The deploy keeps its Ironic nodes and says
    # what it could not check.
    of.use_tokenless_cloud(env, tmp_path, monkeypatch, openstack_services)
    spec = dict(test_enrolment.enrolled_spec(env, count=1), nova_flavors=[])
    result = env.deploy(spec)
    [node] = env.nodes()
    # Placement's noauth2 answers 403 to a request with no token at all
    # (401 to a bad one): either is a warning.
    [warning] = result['warnings']
    assert re.fullmatch(
        'Placement answered HTTP 40[13] to GET /resource_providers/%s/'
        'inventories; did not check whether the nodes\' resource providers '
        'still offer VCPU, MEMORY_MB or DISK_GB' % node['uuid'], warning)
    assert cloud.baremetal.get_node(node['uuid']).provision_state == (
        'available')
    env.teardown()
    assert env.leftovers() == []


def other_cluster(env, **top):
    """A second cluster next to ``env``'s: own names, same bridges."""
    return env.spec(
        count=1, cluster=env.cluster + '-b',
        specs=[{'type': 'small', 'count': 1,
                'node_name_prefix': env.node_prefix + 'b'}],
        ipmi_port_range_start=env.port_base + 5, **top)


def hypervisor_state(env):
    """Domains, links and pools of the test's names on the machine."""
    return sorted(env.leftovers())


def test_bridges_recorded_for_another_cluster_are_refused(env):
    env.deploy(env.spec(count=1, ipmi_port_range_end=env.port_base + 4))
    before = hypervisor_state(env)
    with pytest.raises(exceptions.InterfaceConflict) as raised:
        env.deploy(other_cluster(env))
    assert ('bridge_prefix: bridge %s0 on %s is recorded for cluster %s'
            % (env.bridge_prefix, env.conf.hostagent.host, env.cluster)
            in str(raised.value))
    # Nothing was made, nothing recorded for the refused cluster.
    assert hypervisor_state(env) == before
    with cf.embedded.embedded(env.conf) as conductor:
        assert conductor.db.get_cluster(env.cluster + '-b') is None
        assert {n.cluster for n in conductor.db.list_nodes()} == {
            env.cluster}
    env.teardown()
    assert env.leftovers() == []


def test_interfaces_of_another_state_dir_or_unmarked_are_refused(
        env, tmp_path):
    # The same spec deployed from a second state directory: its bridge,
    # tap and names exist on the host with the first deployment's mark.
    spec = env.spec(count=1)
    env.deploy(spec)
    before = hypervisor_state(env)
    second = cf.ClusterEnv(tmp_path / 'second', port_base=env.port_base)
    with pytest.raises(exceptions.InterfaceConflict) as raised:
        second.deploy(spec)
    message = str(raised.value)
    host = env.conf.hostagent.host
    # The first deployment's mark: its cluster name and its uuid.
    assert ("bridge_prefix: interface %s0 exists on %s with owner mark "
            "'tenks:%s:" % (env.bridge_prefix, host, env.cluster)
            in message)
    assert ("specs[0].node_name_prefix: interface p-%s-0 exists on %s "
            "with owner mark 'tenks:%s:" % (env.node_name(0), host,
                                            env.cluster) in message)
    assert hypervisor_state(env) == before
    env.teardown()

    # A bridge made by hand, unmarked, is not taken over either.
    with IPRoute() as ipr:
        ipr.link('add', ifname=env.bridge_prefix + '0', kind='bridge')
        try:
            with pytest.raises(exceptions.InterfaceConflict) as raised:
                env.deploy(spec)
            assert ('bridge_prefix: interface %s0 exists on %s without an '
                    'owner mark' % (env.bridge_prefix, host)
                    in str(raised.value))
            assert env.leftovers() == ['link %s0' % env.bridge_prefix]
            assert env.nodes() == []
        finally:
            ipr.link('del', ifname=env.bridge_prefix + '0')


def test_volumes_larger_than_the_pool_are_refused(env):
    spec = env.spec(count=2, node_types={'small': {
        'memory_mb': 128, 'vcpus': 1, 'volumes': [{'capacity': '64TiB'}],
        'physical_networks': ['physnet1']}})
    with pytest.raises(exceptions.PoolSpaceExhausted) as raised:
        env.deploy(spec)
    message = str(raised.value)
    assert message.startswith(
        'Hypervisor %s has too little space for the new volumes: they '
        'need 131072.0 GiB (140737488355328 bytes), its pool directory '
        '%s has ' % (env.conf.hostagent.host, env.conf.hostagent.pool_dir))
    assert message.endswith(' free')
    assert env.leftovers() == []
    assert env.nodes() == []


def test_prefixes_that_share_a_volume_name_are_refused(env, tmp_path):
    # Node <p>1 with vol_name_prefix a0v has volume <p>1a0v0, the name
    # of the volume of node <p>1a0 with vol_name_prefix v. Today's
    # "tenks deploy" refuses it before anything is made.
    prefix = env.node_prefix
    spec = dict(env.spec(count=2), specs=[
        {'type': 'small', 'count': 2, 'node_name_prefix': prefix,
         'vol_name_prefix': 'a0v'},
        {'type': 'small', 'count': 1, 'node_name_prefix': prefix + '1a',
         'vol_name_prefix': 'v'}])
    path = tmp_path / 'clash.yaml'
    path.write_text(yaml.safe_dump(spec))
    done = subprocess.run(
        [cf.TENKS, '--state-dir', env.state_dir, 'deploy', str(path)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert ('%s: invalid cluster spec:\n  specs[1].vol_name_prefix: volume '
            '%s1a0v0 of node %s1a0 (node_name_prefix \'%s1a\', '
            'vol_name_prefix \'v\') has the name of a volume of node %s1 of '
            'specs[0] (node_name_prefix \'%s\', vol_name_prefix \'a0v\'): '
            'change one of the prefixes'
            % (path, prefix, prefix, prefix, prefix, prefix)) in done.stderr
    assert env.leftovers() == []
    assert env.nodes() == []
