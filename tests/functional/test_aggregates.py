"""Host aggregates and availability zones on the real bus: a conductor
and two hostagents as processes on RabbitMQ, the aggregate API called
by an outside oslo.messaging client with admin and non-admin request
contexts, and a deploy the filter scheduler puts into the zone asked
for, on real libvirt and virtualbmc."""

import json
import secrets

import libvirt
import pytest
from oslo_context import context as oslo_context

from tenks import exceptions
from tenks import policy
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df

pytestmark = pytest.mark.functional

# IPMI ports of this file: 9400-9449.
PORT_BASE = 9400
ADMIN = policy.admin_context()
MEMBER = oslo_context.RequestContext(roles=['member', 'reader'],
                                     project_id='p1', overwrite=False)


@pytest.fixture(scope='module')
def deployment(tmp_path_factory):
    d = df.Deployment(tmp_path_factory.mktemp('aggregates'))
    # hva registers disabled, as an operator would want a new host.
    with open(d.agent(d.hosts[0]).config, 'a') as f:
        f.write('enable_on_register = false\n')
    d.ready_states = {'up', 'disabled'}
    with d:
        yield d


@pytest.fixture
def names():
    token = secrets.token_hex(3)
    return 'ag-%s' % token, 'az-%s' % token


def hypervisor(deployment, host):
    return {h['host']: h for h in deployment.api.list_hypervisors(ADMIN)}[host]


def cleanup(deployment, *aggregates):
    api = deployment.api
    for name in aggregates:
        try:
            aggregate = api.get_aggregate(ADMIN, name)
        except exceptions.AggregateNotFound:
            continue
        for host in aggregate['hosts']:
            enabled = hypervisor(deployment, host)['enabled']
            api.update_hypervisor(ADMIN, host, False)
            api.remove_aggregate_host(ADMIN, name, host)
            if enabled:
                api.update_hypervisor(ADMIN, host, True)
        api.delete_aggregate(ADMIN, name)


def test_a_new_host_registers_disabled_until_enabled(deployment):
    hva, hvb = deployment.hosts
    first = hypervisor(deployment, hva)
    assert (first['state'], first['enabled'], first['disabled_reason']) == (
        'disabled', False, 'registered disabled (enable_on_register)')
    assert hypervisor(deployment, hvb)['state'] == 'up'
    # The CLI, over the bus, acts as admin.
    done = deployment.cli('hypervisor', 'set', '--enable', hva)
    assert done.returncode == 0, done.stderr
    assert hypervisor(deployment, hva)['state'] == 'up'
    done = deployment.cli('hypervisor', 'set', '--disable', '--reason',
                          'fan', hva)
    assert done.returncode == 0, done.stderr
    shown = json.loads(deployment.cli('hypervisor', 'show', hva,
                                      '-f', 'json').stdout)
    assert (shown['state'], shown['disabled_reason']) == ('disabled', 'fan')
    assert {i['resource_class'] for i in shown['inventory']} == {
        'VCPU', 'MEMORY_MB', 'DISK_GB'}
    deployment.api.update_hypervisor(ADMIN, hva, True)


def test_aggregate_rules_over_the_bus(deployment, names):
    api = deployment.api
    hva, hvb = deployment.hosts
    name, zone = names
    try:
        created = api.create_aggregate(ADMIN, name, zone)
        assert (created['name'], created['availability_zone'],
                created['hosts']) == (name, zone, [])
        with pytest.raises(exceptions.AggregateConflict, match='taken'):
            api.create_aggregate(ADMIN, name)
        with pytest.raises(exceptions.AggregateInvalid, match='without ":"'):
            api.create_aggregate(ADMIN, name + '-2', 'a:b')
        with pytest.raises(exceptions.HypervisorNotFound):
            api.add_aggregate_host(ADMIN, name, 'nope-' + zone)
        assert api.add_aggregate_host(ADMIN, name, hva)['hosts'] == [hva]
        with pytest.raises(exceptions.AggregateConflict,
                           match='in it already'):
            api.add_aggregate_host(ADMIN, name, hva)
        with pytest.raises(exceptions.AggregateConflict,
                           match='still has hosts'):
            api.delete_aggregate(ADMIN, name)
        # Remove-host of an enabled host is refused.
        assert hypervisor(deployment, hva)['enabled']
        with pytest.raises(exceptions.AggregateConflict,
                           match='is enabled: disable it first'):
            api.remove_aggregate_host(ADMIN, name, hva)
        assert api.get_aggregate(ADMIN, name)['hosts'] == [hva]
        api.set_aggregate_metadata(ADMIN, name, {'ssd': 'true'})
        shown = json.loads(deployment.cli('aggregate', 'show', name,
                                          '-f', 'json').stdout)
        assert (shown['hosts'], shown['properties'],
                shown['availability_zone']) == ([hva], {'ssd': 'true'},
                                                zone)
        assert json.loads(deployment.cli('hypervisor', 'show', hva, '-f',
                                         'json').stdout)[
            'availability_zone'] == zone
        api.update_hypervisor(ADMIN, hva, False, 'maintenance')
        assert api.remove_aggregate_host(ADMIN, name, hva)['hosts'] == []
        api.update_hypervisor(ADMIN, hva, True)
        api.delete_aggregate(ADMIN, name)
        assert name not in {a['name'] for a in api.list_aggregates(ADMIN)}
    finally:
        cleanup(deployment, name)


def test_a_non_admin_context_is_refused_and_sees_none(deployment, names):
    api = deployment.api
    hva, _ = deployment.hosts
    name, zone = names
    try:
        api.create_aggregate(ADMIN, name, zone)
        for context in (MEMBER, None):
            for call, args in (('list_aggregates', ()),
                               ('get_aggregate', (name,)),
                               ('create_aggregate', (name + 'x',)),
                               ('add_aggregate_host', (name, hva)),
                               ('delete_aggregate', (name,)),
                               ('update_hypervisor', (hva, False))):
                with pytest.raises(exceptions.PolicyNotAuthorized,
                                   match='Policy does not allow'):
                    getattr(api, call)(context, *args)
        # Nothing changed.
        assert [(a['name'], a['hosts']) for a in api.list_aggregates(ADMIN)
                if a['name'].startswith(name)] == [(name, [])]
        assert hypervisor(deployment, hva)['enabled']
    finally:
        cleanup(deployment, name)


def test_a_deploy_goes_into_the_zone_asked_for(deployment, names, tmp_path):
    api = deployment.api
    hva, hvb = deployment.hosts
    name, zone = names
    env = cf.ClusterEnv(tmp_path, port_base=PORT_BASE,
                        state_dirs=deployment.state_dirs.values())
    with cf.checked(env):
        try:
            api.create_aggregate(ADMIN, name, zone)
            api.create_aggregate(ADMIN, name + '-b', zone + '-b')
            api.add_aggregate_host(ADMIN, name, hvb)
            api.add_aggregate_host(ADMIN, name + '-b', hva)
            entry = {'type': 'small', 'count': 3,
                     'node_name_prefix': env.node_prefix,
                     'availability_zone': zone}
            # No host in that zone: the error counts the hosts removed.
            operation = deployment.wait(api.deploy_cluster(ADMIN, env.spec(
                specs=[dict(entry, availability_zone=zone + '-none')])))
            assert operation['state'] == 'failed'
            assert ('No valid host for node type small (specs[0]): 2 '
                    'hypervisors; availability zone %s-none removed 2'
                    % zone) in operation['error']
            operation = deployment.wait(api.deploy_cluster(ADMIN, env.spec(
                specs=[entry])))
            assert operation['state'] == 'succeeded', operation['error']
            nodes = api.list_nodes(ADMIN, env.cluster)
            assert [n['hypervisor'] for n in nodes] == [hvb] * 3
            shown = api.get_hypervisor(ADMIN, hvb)
            assert shown['usages']['MEMORY_MB'] == 3 * 128
            assert {a['name'] for a in shown['allocations'].values()} == {
                n['name'] for n in nodes}
            # The nodes are real, behind their BMCs.
            conn = libvirt.open(cf.URI)
            try:
                port = nodes[0]['bmc_port']
                assert cf.ipmitool(port, 'power', 'on').returncode == 0
                assert conn.lookupByName(nodes[0]['name']).isActive()
                assert cf.ipmitool(port, 'power', 'off').returncode == 0
            finally:
                conn.close()
            # Its zone cannot change while its host holds nodes.
            with pytest.raises(exceptions.AggregateConflict,
                               match='hold nodes'):
                api.update_aggregate(ADMIN, name,
                                     {'availability_zone': zone + '-c'})
            operation = deployment.wait(
                api.teardown_cluster(ADMIN, env.cluster))
            assert operation['state'] == 'succeeded', operation['error']
        finally:
            cleanup(deployment, name, name + '-b')
