"""Policy on every call of the conductor RPC API: each call has a rule
with the README's defaults (readers read, members deploy, plan and tear
down, admins manage hypervisors and aggregates, hostagents report), and
what is for admins only reaches nobody else."""

import functools
import inspect
import json
import os
import re
import time
import uuid

import pytest

from conductor import manager as conductor_manager
from conductor import rpcapi as conductor_rpcapi
from tenks import exceptions
from tenks import names
from tenks import policy
from tenks.cli import embedded
from tests.unit import fakes
from tests.unit.conftest import make_spec

README = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    __file__))), 'README.md')

ANONYMOUS = {}  # what a client older than API 1.5 sends
READER = {'roles': ['reader'], 'project_id': 'p1'}
MEMBER = {'roles': ['member'], 'project_id': 'p1'}
ADMIN = {'roles': ['admin'], 'project_id': 'p1'}
SERVICE = {'roles': ['service']}
# Lowest first: each may do what those before it may.
RANKS = [ANONYMOUS, READER, MEMBER, ADMIN]

# Each call of the API: arguments, the least role that may make it, and
# what it raises then with these arguments (None: it answers).
CALLS = {
    'deploy_cluster': (({'cluster': 'c'},), MEMBER, exceptions.SpecError),
    'plan_cluster': (({'cluster': 'c'},), MEMBER, exceptions.SpecError),
    'teardown_cluster': (('nope',), MEMBER, exceptions.ClusterNotFound),
    'get_operation': (('nope',), READER, exceptions.OperationNotFound),
    'get_operation_graph': (('nope',), READER,
                            exceptions.OperationNotFound),
    'list_operations': ((), READER, None),
    'get_cluster': (('nope',), READER, exceptions.ClusterNotFound),
    'list_clusters': ((), READER, None),
    'list_nodes': ((), READER, None),
    'list_events': ((), READER, None),
    'list_hypervisors': ((), READER, None),
    'list_conductors': ((), READER, None),
    'get_hypervisor': (('nope',), READER, exceptions.HypervisorNotFound),
    'delete_hypervisor': (('nope',), ADMIN, exceptions.HypervisorNotFound),
    'update_hypervisor': (('nope', False), ADMIN,
                          exceptions.HypervisorNotFound),
    'start_host_maintenance': (('nope',), ADMIN,
                               exceptions.HypervisorNotFound),
    'stop_host_maintenance': (('nope',), ADMIN,
                              exceptions.HypervisorNotFound),
    'audit': ((), ADMIN, None),
    'set_bmc_fault': (('nope', 'error'), ADMIN, exceptions.NodeNotFound),
    'clear_bmc_fault': (('nope',), ADMIN, exceptions.NodeNotFound),
    'list_aggregates': ((), ADMIN, None),
    'get_aggregate': (('nope',), ADMIN, exceptions.AggregateNotFound),
    'create_aggregate': (('',), ADMIN, exceptions.AggregateInvalid),
    'update_aggregate': (('nope', {}), ADMIN, exceptions.AggregateNotFound),
    'set_aggregate_metadata': (('nope', {}), ADMIN,
                               exceptions.AggregateNotFound),
    'delete_aggregate': (('nope',), ADMIN, exceptions.AggregateNotFound),
    'add_aggregate_host': (('nope', 'hv1'), ADMIN,
                           exceptions.AggregateNotFound),
    'remove_aggregate_host': (('nope', 'hv1'), ADMIN,
                              exceptions.AggregateNotFound),
}
# Casts from hostagents.
AGENT_CALLS = {'report_result', 'register_agent'}


@pytest.fixture
def conductor(checked_conductor):
    return checked_conductor


def public_methods(cls):
    return {name: member for name, member in vars(cls).items()
            if inspect.isfunction(member) and not name.startswith('_')}


def readme():
    with open(README) as f:
        return f.read()


def admin_only(rule, call):
    """The fields the README's table of what is for admins only gives
    for ``call`` under ``rule``."""
    [row] = [line for line in readme().splitlines()
             if line.startswith('| `%s` | `%s`' % (rule, call))]
    return set(re.findall(r'`(\w+)`', row.split('|')[3]))


def test_every_call_has_a_rule():
    """A handler added without a rule fails here."""
    for name, handler in public_methods(
            conductor_manager.ConductorManager).items():
        assert getattr(handler, 'rule', None) in policy.RULES, name


def test_the_readme_gives_every_rule():
    text = readme()
    for name in policy.RULES:
        assert '`%s`' % name in text, name


def test_the_table_holds_every_call():
    assert set(CALLS) | AGENT_CALLS == set(public_methods(
        conductor_rpcapi.ConductorAPI))


@pytest.mark.parametrize('method', sorted(CALLS))
def test_each_call_needs_its_role(conductor, method):
    """Roles below the call's are refused, naming its rule (an older
    client's call, with no context, too); from its role up the call
    runs. A hostagent's context makes none of these calls."""
    args, least, allowed = CALLS[method]
    rule = getattr(conductor_manager.ConductorManager, method).rule
    api = conductor_rpcapi.ConductorAPI(conductor.bus)
    for context in RANKS + [SERVICE]:
        call = functools.partial(getattr(api, method), context, *args)
        if context is not SERVICE and RANKS.index(context) >= RANKS.index(
                least):
            if allowed is None:
                assert isinstance(call(), (list, dict))
            else:
                with pytest.raises(allowed):
                    call()
        else:
            with pytest.raises(exceptions.PolicyNotAuthorized) as refused:
                call()
            assert str(refused.value).splitlines()[0] == (
                'Policy does not allow %s to be performed by a caller with '
                'roles %s' % (rule, ', '.join(context.get('roles', []))
                              or 'none'))


def test_the_embedded_bus_needs_no_role(conf, hypervisor):
    """Embedded, only this process reaches the bus: calls with no role
    run (its hostagent's reports too), and oslo.policy is not made."""
    with embedded.embedded(conf) as conductor:
        api = conductor_rpcapi.ConductorAPI(conductor.bus)
        api.register_agent(ANONYMOUS, 'hv9', {'cpus': 1})
        deadline = time.monotonic() + 10
        while conductor.db.get_hypervisor('hv9') is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert 'hv9' in [h['host'] for h in api.list_hypervisors(ANONYMOUS)]
        real = conductor.waiters.register('real')
        api.report_result(ANONYMOUS, conductor.host, 'real', 'hv1',
                          result={'changed': True})
        assert real.result(timeout=10) == {'changed': True}
        [endpoint] = conductor.server.dispatcher.endpoints
        assert isinstance(endpoint.policy, policy.InProcess)


def test_only_hostagents_report_results_and_register(conductor):
    """A result or a registration in another context changes nothing:
    a forged one neither completes a request nor registers a host."""
    api = conductor_rpcapi.ConductorAPI(conductor.bus)
    forged = conductor.waiters.register('forged')
    real = conductor.waiters.register('real')
    for context in (ANONYMOUS, READER, MEMBER):
        api.report_result(context, conductor.host, 'forged', 'hv1',
                          result={'changed': True})
        api.register_agent(context, 'forged-host', {'cpus': 1})
    api.report_result(policy.service_context(), conductor.host, 'real',
                      'hv1', result={'changed': True})
    api.register_agent(policy.service_context(), 'hv9', {'cpus': 1})
    assert real.result(timeout=10) == {'changed': True}
    deadline = time.monotonic() + 10
    while conductor.db.get_hypervisor('hv9') is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.2)
    assert not forged.done()
    assert conductor.db.get_hypervisor('forged-host') is None


def test_only_admins_see_what_is_admin_only_of_hypervisors(conductor):
    """Facts and what comes from them (inventories, usages, traits,
    allocations), why a host is disabled, its aggregates and zone."""
    facts = {'host': 'hv2', 'cpus': 4, 'memory_mb': 4096,
             'physnet_mappings': {'physnet1': 'eth1'},
             'ipmi_address': '192.0.2.2'}
    conductor.registry.register_agent('hv2', facts)
    conductor.aggregates.create('rack1', 'az1')
    conductor.aggregates.add_host('rack1', 'hv2')
    conductor.registry.update_hypervisor('hv2', False, 'fan broken')
    api = conductor_rpcapi.ConductorAPI(conductor.bus)
    public = {'host', 'enabled', 'maintenance', 'last_seen', 'answered_at',
              'state', 'nodes'}
    for context in (READER, MEMBER):
        shown = api.get_hypervisor(context, 'hv2')
        assert set(shown) == public
        assert (shown['state'], shown['enabled']) == ('disabled', False)
        listed = api.list_hypervisors(context)
        assert [set(h) for h in listed] == [public] * len(listed)
        assert '192.0.2.2' not in json.dumps(listed + [shown])
    shown = api.get_hypervisor(ADMIN, 'hv2')
    assert (shown['facts']['ipmi_address'], shown['disabled_reason'],
            shown['aggregates'], shown['availability_zone']) == (
        '192.0.2.2', 'fan broken', ['rack1'], 'az1')
    assert set(shown) - public == admin_only(
        policy.HYPERVISOR_ADMIN_FIELDS, 'list_hypervisors')
    [listed] = [h for h in api.list_hypervisors(ADMIN)
                if h['host'] == 'hv2']
    assert (listed['facts']['cpus'], listed['disabled_reason']) == (
        4, 'fan broken')


def test_only_admins_see_deployment_uuids(conductor, hypervisor,
                                          monkeypatch):
    """Whoever knows a deployment's UUID knows its owner mark, with which
    a hostagent request for its things can be worded: callers that are
    not admins get clusters without it, and *** in its place wherever a
    mark is in an answer (a warning of a teardown) or an error (a plan
    refused for another deployment's Redfish emulator)."""
    api = conductor_rpcapi.ConductorAPI(conductor.bus)
    conductor.deployments.deploy(make_spec(count=1))
    deployment = conductor.db.get_cluster('unit').uuid
    for context in (READER, MEMBER):
        assert 'uuid' not in api.get_cluster(context, 'unit')
        assert ['uuid' in c for c in api.list_clusters(context)] == [False]
    assert api.get_cluster(ADMIN, 'unit')['uuid'] == deployment
    assert set(api.get_cluster(ADMIN, 'unit')) - set(api.get_cluster(
        MEMBER, 'unit')) == admin_only(policy.DEPLOYMENTS, 'list_clusters')
    assert [c['uuid'] for c in api.list_clusters(ADMIN)] == [deployment]

    # Another state directory's same-named cluster holds the Redfish
    # endpoint of a second cluster's spec.
    other = names.agent_owner(names.owner('unit', uuid.uuid4()), 'hv1')
    hypervisor.things[('system', 'x0')] = (other, '127.0.0.1', 8000, 'x')
    redfish = make_spec(cluster='rf', default_ironic_driver='redfish')
    with pytest.raises(exceptions.EndpointInUse) as refused:
        api.plan_cluster(MEMBER, redfish)
    assert 'the Redfish emulator of tenks:unit:***/hv1' in str(
        refused.value)
    assert other.split(':')[2].split('/')[0] not in str(refused.value)
    with pytest.raises(exceptions.EndpointInUse) as refused:
        api.plan_cluster(ADMIN, redfish)
    assert other in str(refused.value)

    # The teardown finds the domain made somebody else's.
    def not_ours(driver, name, owner):
        raise exceptions.ResourceConflict(
            kind='domain', name=name, owner=owner,
            reason='it belongs to %s' % other)

    monkeypatch.setattr(fakes.FakeVirt, 'remove_domain', not_ours)
    operation_id = api.teardown_cluster(MEMBER, 'unit')
    conductor.operations.wait(operation_id)
    mark = names.agent_owner(names.owner('unit', deployment), 'hv1')
    assert mark in json.dumps(api.get_operation(ADMIN, operation_id))
    for context in (READER, MEMBER):
        answers = json.dumps([
            api.get_operation(context, operation_id),
            api.list_operations(context), api.list_events(context)])
        assert 'not owned by tenks:unit:***/hv1' in answers
        assert deployment not in answers
        assert other.split(':')[2] not in answers


def test_a_policy_file_is_looked_for_once_a_second(tmp_path, monkeypatch):
    """Many checks do not each search for the policy file; one written
    later is read at the first check a second after the last look."""
    from tenks import conf as tenks_conf
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    enforcer = policy.Enforcer(conf)
    policy_file = tmp_path / 'policy.yaml'
    conf.set_override('policy_file', str(policy_file), group='oslo_policy')
    looks = []
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, 'exists', lambda path: looks.append(
        path) or real_exists(path))
    for _ in range(100):
        assert not enforcer.allows('tenks:aggregate:list', MEMBER)
    assert 0 < len(looks) < 10, looks
    policy_file.write_text('"tenks:aggregate:list": "role:member"\n')
    assert not enforcer.allows('tenks:aggregate:list', MEMBER)
    monkeypatch.setattr(policy, 'RELOAD_INTERVAL', 0)
    assert enforcer.allows('tenks:aggregate:list', MEMBER)
