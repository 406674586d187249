"""Host aggregates and availability zones: every rule and refusal, the
admin policy on the RPC API, and hypervisors that register disabled."""

import pytest
import sqlalchemy as sa

from conductor import aggregates
from conductor import rpcapi as conductor_rpcapi
from tenks import exceptions
from tenks import policy
from tests.unit.conftest import make_spec

ADMIN = {'roles': ['admin'], 'project_id': 'p1'}
MEMBER = {'roles': ['member', 'reader'], 'project_id': 'p1'}


def register_hosts(conductor):
    for host in ('hv1', 'hv2', 'hv3'):
        conductor.registry.register_agent(host, {'host': host, 'cpus': 4,
                                                 'memory_mb': 4096})
    return conductor


@pytest.fixture
def hosts(conductor):
    return register_hosts(conductor)


def test_create_show_list(hosts):
    created = hosts.aggregates.create('a1', 'az1')
    assert {k: created[k] for k in ('id', 'name', 'availability_zone',
                                    'hosts', 'metadata')} == {
        'id': 1, 'name': 'a1', 'availability_zone': 'az1', 'hosts': [],
        'metadata': {}}
    assert len(created['uuid']) == 36
    for ident in (1, '1', 'a1', created['uuid']):
        assert hosts.aggregates.get(ident)['name'] == 'a1'
    hosts.aggregates.create('a2')
    assert [(a['name'], a['availability_zone'])
            for a in hosts.aggregates.list()] == [('a1', 'az1'),
                                                  ('a2', None)]
    with pytest.raises(exceptions.AggregateNotFound):
        hosts.aggregates.get('nope')


def test_names_are_unique(hosts):
    hosts.aggregates.create('a1')
    hosts.aggregates.create('a2')
    with pytest.raises(exceptions.AggregateConflict, match='name is taken'):
        hosts.aggregates.create('a1')
    with pytest.raises(exceptions.AggregateConflict,
                       match='the name a2 is taken'):
        hosts.aggregates.update('a1', {'name': 'a2'})
    assert hosts.aggregates.update('a1', {'name': 'b1'})['name'] == 'b1'


@pytest.mark.parametrize('zone', ['', '  ', 'az:1', 'x' * 256, 5])
def test_zone_names_are_checked(hosts, zone):
    with pytest.raises(exceptions.AggregateInvalid,
                       match='availability zone name'):
        hosts.aggregates.create('a1', zone)
    hosts.aggregates.create('a2')
    with pytest.raises(exceptions.AggregateInvalid):
        hosts.aggregates.update('a2', {'availability_zone': zone})


@pytest.mark.parametrize('name', ['', ' ', 'x' * 256, None])
def test_aggregate_names_are_checked(hosts, name):
    with pytest.raises(exceptions.AggregateInvalid, match='a name must'):
        hosts.aggregates.create(name)


def test_metadata_set_and_unset(hosts):
    hosts.aggregates.create('a1')
    assert hosts.aggregates.set_metadata('a1', {'ssd': 'true', 'rack': '1'})[
        'metadata'] == {'ssd': 'true', 'rack': '1'}
    assert hosts.aggregates.set_metadata('a1', {'ssd': None})[
        'metadata'] == {'rack': '1'}
    with pytest.raises(exceptions.AggregateInvalid,
                       match='it has no metadata ssd'):
        hosts.aggregates.set_metadata('a1', {'ssd': None})
    with pytest.raises(exceptions.AggregateInvalid, match='with the zone'):
        hosts.aggregates.set_metadata('a1', {'availability_zone': 'az'})
    with pytest.raises(exceptions.AggregateInvalid, match='a value'):
        hosts.aggregates.set_metadata('a1', {'n': 5})
    with pytest.raises(exceptions.AggregateInvalid, match='a mapping'):
        hosts.aggregates.set_metadata('a1', ['ssd'])


def test_delete_is_refused_while_it_has_hosts(hosts):
    hosts.aggregates.create('a1')
    hosts.aggregates.add_host('a1', 'hv1')
    with pytest.raises(exceptions.AggregateConflict,
                       match=r'still has hosts \(hv1\)'):
        hosts.aggregates.delete('a1')
    hosts.registry.update_hypervisor('hv1', False, 'moving')
    hosts.aggregates.remove_host('a1', 'hv1')
    hosts.aggregates.delete('a1')
    assert hosts.aggregates.list() == []


def test_add_host_rules(hosts):
    hosts.aggregates.create('a1', 'az1')
    hosts.aggregates.create('a2', 'az2')
    hosts.aggregates.create('a3', 'az1')
    hosts.aggregates.create('a4')
    with pytest.raises(exceptions.HypervisorNotFound):
        hosts.aggregates.add_host('a1', 'nope')
    assert hosts.aggregates.add_host('a1', 'hv1')['hosts'] == ['hv1']
    with pytest.raises(exceptions.AggregateConflict,
                       match='host hv1 is in it already'):
        hosts.aggregates.add_host('a1', 'hv1')
    # At most one zone per host: a2 is in another zone.
    with pytest.raises(exceptions.AggregateConflict,
                       match='host hv1 is in availability zone az1 '
                             r'\(aggregate a1\)'):
        hosts.aggregates.add_host('a2', 'hv1')
    # The same zone, or no zone, is fine.
    hosts.aggregates.add_host('a3', 'hv1')
    hosts.aggregates.add_host('a4', 'hv1')
    where = hosts.aggregates.host_views()
    assert where['hv1']['availability_zone'] == 'az1'
    assert [a['name'] for a in where['hv1']['aggregates']] == [
        'a1', 'a3', 'a4']
    # Giving a4 another zone would put hv1 in two.
    with pytest.raises(exceptions.AggregateConflict,
                       match='a host is in at most one zone'):
        hosts.aggregates.update('a4', {'availability_zone': 'az2'})
    hosts.aggregates.update('a4', {'availability_zone': 'az1'})


def test_host_views_read_memberships_in_one_query(hosts):
    """The scheduler's view, from one query, is the one the aggregate
    records give: hosts in several aggregates, in none, an empty one."""
    for name, zone in (('a1', 'az1'), ('a2', None), ('a3', 'az2'),
                       ('empty', None)):
        hosts.aggregates.create(name, zone)
    hosts.aggregates.set_metadata('a2', {'rack': 'r1'})
    for aggregate, host in (('a1', 'hv1'), ('a2', 'hv1'), ('a2', 'hv2'),
                            ('a3', 'hv3')):
        hosts.aggregates.add_host(aggregate, host)
    hosts.registry.update_hypervisor('hv2', False, 'broken')
    db = hosts.db
    statements = []
    sa.event.listen(db.engine, 'before_cursor_execute',
                    lambda *args: statements.append(args[2]))
    view = hosts.aggregates.host_views()
    assert len(statements) == 1
    assert view == aggregates.host_views(
        db.list_aggregates(),
        [{'host': h.host, 'enabled': h.enabled,
          'maintenance': h.maintenance}
         for h in db.list_hypervisors()], 'nova')
    assert view['hv2'] == {'enabled': False, 'maintenance': False,
                           'availability_zone': 'nova',
                           'aggregates': [{'name': 'a2',
                                           'uuid': hosts.aggregates.get(
                                               'a2')['uuid'],
                                           'metadata': {'rack': 'r1'}}]}


def test_remove_host_only_when_disabled(hosts):
    hosts.aggregates.create('a1')
    hosts.aggregates.add_host('a1', 'hv1')
    with pytest.raises(exceptions.AggregateConflict,
                       match='host hv1 is enabled: disable it first'):
        hosts.aggregates.remove_host('a1', 'hv1')
    with pytest.raises(exceptions.AggregateInvalid,
                       match='host hv2 is not in it'):
        hosts.aggregates.remove_host('a1', 'hv2')
    hosts.registry.update_hypervisor('hv1', False)
    assert hosts.aggregates.remove_host('a1', 'hv1')['hosts'] == []


def test_default_zone(conf, hypervisor):
    from tenks.cli import embedded
    conf.set_override('default_availability_zone', 'home',
                      group='scheduler')
    with embedded.embedded(conf) as conductor:
        conductor.registry.register_agent('hv1', {'host': 'hv1'})
        assert conductor.aggregates.host_views()['hv1'][
            'availability_zone'] == 'home'
        assert conductor.registry.describe('hv1')['availability_zone'] == (
            'home')


def test_zone_of_an_aggregate_whose_hosts_hold_nodes_stays(conductor):
    conductor.registry.register_agent('hv1', {'host': 'hv1'})
    conductor.aggregates.create('a1', 'az1')
    conductor.aggregates.add_host('a1', 'hv1')
    conductor.deployments.deploy(make_spec(count=1))
    for zone in ('az2', None):
        with pytest.raises(exceptions.AggregateConflict,
                           match=r'hold nodes \(hv1\)'):
            conductor.aggregates.update('a1', {'availability_zone': zone})
    # Its name may change.
    conductor.aggregates.update('a1', {'name': 'b1'})
    conductor.teardowns.teardown('unit')
    assert conductor.aggregates.update('b1', {'availability_zone': 'az2'})[
        'availability_zone'] == 'az2'


def test_deploy_goes_to_the_zone_asked(conductor):
    conductor.registry.register_agent('hv1', {'host': 'hv1'})
    conductor.aggregates.create('a1', 'az1')
    spec = make_spec(count=1, specs=[{'type': 'small', 'count': 1,
                                      'availability_zone': 'az1'}])
    with pytest.raises(exceptions.NoValidHost,
                       match='availability zone az1 removed 1'):
        conductor.deployments.deploy(spec)
    conductor.aggregates.add_host('a1', 'hv1')
    conductor.deployments.deploy(spec)
    assert [n['hypervisor']
            for n in conductor.records.list_nodes('unit')] == ['hv1']
    conductor.teardowns.teardown('unit')


def test_a_disabled_host_takes_no_new_node(conductor):
    conductor.registry.register_agent('hv1', {'host': 'hv1'})
    disabled = conductor.registry.update_hypervisor('hv1', False, 'broken fan')
    assert (disabled['enabled'], disabled['disabled_reason'],
            disabled['state']) == (False, 'broken fan', 'disabled')
    with pytest.raises(exceptions.NoValidHost, match='disabled removed 1'):
        conductor.deployments.deploy(make_spec(count=1))
    with pytest.raises(exceptions.HypervisorInvalid):
        conductor.registry.update_hypervisor('hv1', True, 'why')
    with pytest.raises(exceptions.HypervisorInvalid, match='true or false'):
        conductor.registry.update_hypervisor('hv1', 'yes')
    with pytest.raises(exceptions.HypervisorNotFound):
        conductor.registry.update_hypervisor('nope', False)
    enabled = conductor.registry.update_hypervisor('hv1', True)
    assert (enabled['enabled'], enabled['disabled_reason']) == (True, None)
    conductor.deployments.deploy(make_spec(count=1))
    conductor.teardowns.teardown('unit')


def test_enable_on_register(conductor):
    conductor.registry.register_agent('hv7', {'host': 'hv7',
                                              'enable_on_register': False})
    row = conductor.db.get_hypervisor('hv7')
    assert (row.enabled, row.disabled_reason) == (
        False, 'registered disabled (enable_on_register)')
    conductor.registry.update_hypervisor('hv7', True)
    # A heartbeat with the same facts keeps it enabled.
    conductor.registry.register_agent('hv7', {'host': 'hv7',
                                              'enable_on_register': False})
    assert conductor.db.get_hypervisor('hv7').enabled


def test_hypervisor_show_has_its_resource_provider(conductor):
    conductor.registry.register_agent('hv1', dict(
        conductor.agents.request('hv1', 'inspect', 'r1',
                                 physnet_mappings={}, ipmi_address='::1',
                                 ipmi_ports=[], interfaces=[], owner=None)))
    conductor.deployments.deploy(make_spec(count=2))
    shown = conductor.registry.describe('hv1')
    assert shown['usages']['MEMORY_MB'] == 256
    assert shown['inventories']['MEMORY_MB']['used'] == 256
    assert sorted(a['name'] for a in shown['allocations'].values()) == [
        'tk0', 'tk1']
    assert all(a['resources'] == {'VCPU': 1, 'MEMORY_MB': 128,
                                  'DISK_GB': 1}
               for a in shown['allocations'].values())
    conductor.teardowns.teardown('unit')


def test_host_views():
    view = aggregates.host_views(
        [{'id': 1, 'uuid': 'u1', 'name': 'a', 'availability_zone': 'z',
          'hosts': ['h1'], 'metadata': {'k': 'v'}}],
        [{'host': 'h1', 'enabled': True},
         {'host': 'h2', 'enabled': False, 'maintenance': True}],
        'nova')
    assert view == {
        'h1': {'enabled': True, 'maintenance': False,
               'availability_zone': 'z',
               'aggregates': [{'name': 'a', 'uuid': 'u1',
                               'metadata': {'k': 'v'}}]},
        'h2': {'enabled': False, 'maintenance': True,
               'availability_zone': 'nova', 'aggregates': []}}


# Over the bus: admin only

ADMIN_CALLS = [
    ('list_aggregates', ()),
    ('get_aggregate', ('a1',)),
    ('create_aggregate', ('a9', 'az9')),
    ('update_aggregate', ('a1', {'name': 'a8'})),
    ('set_aggregate_metadata', ('a1', {'k': 'v'})),
    ('delete_aggregate', ('a1',)),
    ('add_aggregate_host', ('a1', 'hv2')),
    ('remove_aggregate_host', ('a1', 'hv1')),
    ('update_hypervisor', ('hv1', False, 'no')),
]


@pytest.mark.parametrize('method,args', ADMIN_CALLS)
@pytest.mark.parametrize('context', [MEMBER, {}, None])
def test_non_admin_contexts_are_refused(checked_conductor, method, args,
                                        context):
    hosts = register_hosts(checked_conductor)
    hosts.aggregates.create('a1')
    api = conductor_rpcapi.ConductorAPI(hosts.bus)
    with pytest.raises(exceptions.PolicyNotAuthorized,
                       match='tenks:(aggregate|hypervisor):'):
        getattr(api, method)(context, *args)
    # Nothing changed.
    assert [(a['name'], a['hosts'], a['metadata'])
            for a in hosts.aggregates.list()] == [('a1', [], {})]
    assert hosts.db.get_hypervisor('hv1').enabled


def test_admin_calls_over_the_bus(hosts):
    api = conductor_rpcapi.ConductorAPI(hosts.bus)
    context = policy.admin_context()
    assert api.create_aggregate(context, 'a1', 'az1')['name'] == 'a1'
    assert api.add_aggregate_host(ADMIN, 'a1', 'hv1')['hosts'] == ['hv1']
    assert api.set_aggregate_metadata(ADMIN, 'a1', {'k': 'v'})[
        'metadata'] == {'k': 'v'}
    assert api.update_aggregate(ADMIN, 'a1', {'name': 'b1'})['name'] == 'b1'
    assert [a['name'] for a in api.list_aggregates(ADMIN)] == ['b1']
    with pytest.raises(exceptions.AggregateConflict):
        api.remove_aggregate_host(ADMIN, 'b1', 'hv1')
    with pytest.raises(exceptions.AggregateInvalid, match='cannot change'):
        api.update_aggregate(ADMIN, 'b1', {'hosts': []})
    with pytest.raises(exceptions.AggregateInvalid, match='a mapping'):
        api.update_aggregate(ADMIN, 'b1', 'b2')
    assert api.update_hypervisor(ADMIN, 'hv1', False, 'x')['enabled'] is (
        False)
    assert api.remove_aggregate_host(ADMIN, 'b1', 'hv1')['hosts'] == []
    api.delete_aggregate(ADMIN, 'b1')
    with pytest.raises(exceptions.AggregateNotFound):
        api.get_aggregate(ADMIN, 'b1')


def test_a_policy_file_can_open_a_call(checked_conductor, tmp_path):
    hosts = register_hosts(checked_conductor)
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text('"tenks:aggregate:list": "role:reader"\n')
    hosts.conf.set_override('policy_file', str(policy_file),
                            group='oslo_policy')
    enforcer = policy.Enforcer(hosts.conf)
    enforcer.authorize('tenks:aggregate:list', MEMBER)
    with pytest.raises(exceptions.PolicyNotAuthorized):
        enforcer.authorize('tenks:aggregate:create', MEMBER)
