"""Client and server sides of each RPC API stay in step: every client
method reaches a manager method that takes exactly what it sends, at a
version the server serves."""

import functools
import inspect

import oslo_messaging as messaging
import pytest
from oslo_utils import versionutils

from conductor import manager as conductor_manager
from conductor import rpcapi as conductor_rpcapi
from hostagent import manager as hostagent_manager
from hostagent import rpcapi as hostagent_rpcapi
from tenks import conf as tenks_conf
from tenks import exceptions
from tenks import policy
from tenks import rpc
from tenks.cli import embedded
from tests.unit.conftest import make_spec


class Bus(rpc.Bus):
    """The real clients, on a transport that records each message
    instead of sending it. ``caps``: {service: its [upgrade_levels]
    cap}."""

    def __init__(self, **caps):
        conf = tenks_conf.new_conf()
        conf([], default_config_files=[])
        for service, cap in caps.items():
            conf.set_override(service, cap, group='upgrade_levels')
        super().__init__(conf, url=rpc.EMBEDDED_TRANSPORT_URL)
        self.sent = []
        self.transport._send = self._record

    def _record(self, target, context, message, wait_for_reply=False,
                retry=None, transport_options=None, **options):
        options = {'topic': target.topic, 'server': target.server,
                   'fanout': target.fanout, 'version': message['version'],
                   'context': context, 'retry': retry,
                   'mandatory': bool(transport_options
                                     and transport_options.at_least_once)}
        self.sent.append(('call' if wait_for_reply else 'cast',
                          message['method'], message['args'], options))


def public_methods(cls):
    return {name: member for name, member in vars(cls).items()
            if inspect.isfunction(member) and not name.startswith('_')}


def fill(function, skip=0):
    """Distinct values for every parameter of ``function``."""
    params = list(inspect.signature(function).parameters)[1 + skip:]
    # A request context crosses the bus as a dict.
    return {name: {'roles': ['admin']} if name == 'context'
            else 'value-of-%s' % name for name in params}


def undecorated(handler):
    """The function under messaging.expected_exceptions, which keeps it
    in its closure (it does not set __wrapped__)."""
    for cell in handler.__closure__ or ():
        if inspect.isfunction(cell.cell_contents):
            return undecorated(cell.cell_contents)
    return handler


def assert_accepts_exactly(handler, kwargs):
    """``handler(self, context, **kwargs)`` binds, and every parameter
    it has is sent: nothing missing, nothing extra, nothing defaulted
    by accident."""
    signature = inspect.signature(undecorated(handler))
    signature.bind(None, {}, **kwargs)  # raises TypeError on a mismatch
    assert set(signature.parameters) - {'self', 'context'} == set(kwargs), (
        handler.__name__)


def sent_by(api_class, method, args, bus):
    bus.sent.clear()
    getattr(api_class(bus), method)(**args)
    [message] = bus.sent
    return message


def test_every_conductor_client_method_reaches_its_handler():
    bus = Bus()
    reached = set()
    for name, method in public_methods(conductor_rpcapi.ConductorAPI).items():
        kind, target, kwargs, options = sent_by(
            conductor_rpcapi.ConductorAPI, name, fill(method), bus)
        handler = getattr(conductor_manager.ConductorManager, target)
        assert_accepts_exactly(handler, kwargs)
        assert options['topic'] == rpc.CONDUCTOR_TOPIC
        # Served by this server's version.
        assert versionutils.is_compatible(
            options['version'], conductor_manager.RPC_API_VERSION)
        reached.add(target)
    # No handler that no client method reaches.
    assert reached == set(public_methods(conductor_manager.ConductorManager))


def test_results_from_hostagents_go_back_to_the_conductor_waiting():
    bus = Bus()
    kind, _, kwargs, options = sent_by(
        conductor_rpcapi.ConductorAPI, 'report_result', dict(
            context=policy.service_context(), conductor='c1',
            request_id='r', host='hv1', result={}),
        bus)
    assert (kind, options['server']) == ('cast', 'c1')
    assert options['context']['roles'] == ['service']
    assert 'conductor' not in kwargs


def test_requests_and_results_go_mandatory_and_fail_fast():
    """A hostagent request and its result are refused by a broker with no
    queue for them, and fail within one reconnection attempt while it
    cannot be reached (see rpc.UNDELIVERED): their senders send them
    again. A call is neither."""
    bus = Bus()
    hostagent_rpcapi.HostAgentAPI(bus).cast('hv1', 'audit', 'req', 'c1')
    api = conductor_rpcapi.ConductorAPI(bus)
    api.report_result(policy.service_context(), 'c1', 'req', 'hv1',
                      result={})
    api.list_clusters(policy.admin_context())
    assert [(target, options['retry'], options['mandatory'])
            for _, target, _, options in bus.sent] == [
        ('audit', rpc.CAST_RETRY, True), ('report_result', rpc.CAST_RETRY,
                                          True),
        ('list_clusters', None, False)]


@pytest.mark.parametrize('method', sorted(hostagent_rpcapi.METHODS))
def test_every_hostagent_request_reaches_its_handler(method):
    bus = Bus()
    args = {name: 'value-of-%s' % name
            for name in hostagent_rpcapi.METHODS[method]
            + hostagent_rpcapi.OPTIONAL.get(method, ())}
    hostagent_rpcapi.HostAgentAPI(bus).cast('hv1', method, 'req', 'c1',
                                            **args)
    [(kind, target, kwargs, options)] = bus.sent
    assert (kind, target, options['server']) == ('cast', method, 'hv1')
    assert options['topic'] == rpc.HOSTAGENT_TOPIC
    assert versionutils.is_compatible(options['version'],
                                      hostagent_manager.RPC_API_VERSION)
    assert kwargs == dict(args, request_id='req', reply_to='c1')
    handler = getattr(hostagent_manager.HostAgentManager, method)
    assert_accepts_exactly(handler, kwargs)


def test_ask_to_register_reaches_every_hostagent():
    bus = Bus()
    hostagent_rpcapi.HostAgentAPI(bus).ask_to_register()
    [(kind, target, kwargs, options)] = bus.sent
    assert (kind, target, kwargs) == ('cast', 'register_now', {})
    assert options['fanout'] and options['server'] is None
    assert options['topic'] == rpc.HOSTAGENT_TOPIC
    assert versionutils.is_compatible(options['version'],
                                      hostagent_manager.RPC_API_VERSION)
    assert_accepts_exactly(hostagent_manager.HostAgentManager.register_now,
                           kwargs)


def test_hostagent_client_refuses_what_the_agent_would_not_take():
    bus = Bus()
    api = hostagent_rpcapi.HostAgentAPI(bus)
    with pytest.raises(TypeError) as raised:
        api.cast('hv1', 'remove_bridge', 'req', 'c1', name='br0')
    assert "remove_bridge takes ['name', 'owner']" in str(raised.value)
    with pytest.raises(KeyError):
        api.cast('hv1', 'reboot', 'req', 'c1')
    assert bus.sent == []


def test_every_hostagent_handler_is_in_the_api():
    handlers = {name for name in public_methods(
        hostagent_manager.HostAgentManager)
        if 'request_id' in inspect.signature(getattr(
            hostagent_manager.HostAgentManager, name)).parameters}
    assert handlers == set(hostagent_rpcapi.METHODS)


@pytest.mark.parametrize('api', [conductor_rpcapi, hostagent_rpcapi],
                         ids=['conductor', 'hostagent'])
def test_versions_agree_with_the_history(api):
    """The docstring's history has one entry per version, 1.0 on, and
    its newest is the current."""
    history = [line.split(' - ')[0].lstrip('* ')
               for line in api.__doc__.splitlines()
               if line.startswith('* ') and ' - ' in line]
    assert history == ['1.%d' % minor for minor in range(len(history))]
    assert history[-1] == api.RPC_API_VERSION


class ContextBound:
    """A client whose methods take their context from here."""

    def __init__(self, api, context):
        self.api = api
        self.context = context

    def __getattr__(self, name):
        return functools.partial(getattr(self.api, name), self.context)


def test_every_client_call_reaches_its_handler(conductor, hypervisor):
    """Each call of the client, through the bus, reaches a handler of
    the same arguments; expected errors keep their types."""
    api = ContextBound(conductor_rpcapi.ConductorAPI(conductor.bus),
                       policy.admin_context())
    operation_id = api.deploy_cluster(make_spec(count=1))
    conductor.operations.wait(operation_id)
    assert api.get_operation(operation_id)['state'] == 'succeeded'
    assert [o['id'] for o in api.list_operations('unit')] == [operation_id]
    assert api.get_cluster('unit')['state'] == 'deployed'
    assert [c['name'] for c in api.list_clusters()] == ['unit']
    assert len(api.list_nodes('unit')) == 1
    assert api.get_hypervisor('hv1')['nodes'] == 1
    assert [h['host'] for h in api.list_hypervisors()] == ['hv1']
    assert api.list_events('unit', limit=1)
    # What a deploy would change, over the bus (API 1.2), changing nothing.
    plan = api.plan_cluster(make_spec(count=2))
    assert {(c['node'], c['resource'], c['action']) for c in plan[
        'changes']} >= {('tk1', 'domain', 'create')}
    assert plan['destructive'] is False
    assert len(api.list_nodes('unit')) == 1
    with pytest.raises(exceptions.SpecError):
        api.plan_cluster({'cluster': 'unit'})
    with pytest.raises(exceptions.ChangeRefused):
        api.plan_cluster(make_spec(count=1, node_types={'small': {
            'memory_mb': 128, 'vcpus': 1,
            'volumes': [{'capacity': '512MiB'}],
            'physical_networks': ['physnet1']}}))
    forced = api.deploy_cluster(make_spec(count=2), force=True)
    conductor.operations.wait(forced)
    assert len(api.list_nodes('unit')) == 2
    with pytest.raises(exceptions.HypervisorInUse):
        api.delete_hypervisor('hv1')
    with pytest.raises(exceptions.HypervisorNotFound):
        api.delete_hypervisor('nope')
    # A deploy of another spec that a dead process left running.
    conductor.operations.create('deploy', 'unit', make_spec(count=1))
    with pytest.raises(exceptions.SpecChanged):
        api.deploy_cluster(make_spec(count=2))
    conductor.operations.wait(api.teardown_cluster('unit'))
    with pytest.raises(exceptions.ClusterNotFound):
        api.teardown_cluster('unit')


@pytest.mark.parametrize('method', sorted(hostagent_rpcapi.METHODS))
def test_hostagent_casts_ask_for_the_version_that_brought_them(method):
    """An agent of 1.3 refuses ensure_node rather than building a node
    without the fields it does not know, one of 1.7 a BMC request whose
    owner it would not check; 1.0 methods stay servable by 1.0 agents."""
    bus = Bus()
    args = dict.fromkeys(hostagent_rpcapi.METHODS[method])
    hostagent_rpcapi.HostAgentAPI(bus).cast('hv1', method, 'req', 'c1',
                                            **args)
    [(_, _, _, options)] = bus.sent
    since = {'ensure_node': '1.4', 'remove_node': '1.4',
             'inspect_nodes': '1.4', 'export_node': '1.5',
             'close_export': '1.5', 'power_node': '1.5',
             'check_pool_devices': '1.8',
             'ensure_bmc': '1.9', 'remove_bmc': '1.9', 'audit': '1.10',
             'clean': '1.10', 'set_bmc_fault': '1.12'}
    assert options['version'] == since.get(method, '1.0')
    assert hostagent_rpcapi.SINCE == since


@pytest.mark.parametrize('method', sorted(hostagent_rpcapi.METHODS))
def test_hostagent_casts_carry_their_operation_and_deadline(method):
    """In the request context, asking for 1.6 (or the method's own
    newer version): an older agent would run a request after its
    conductor gave up on it."""
    bus = Bus()
    args = dict.fromkeys(hostagent_rpcapi.METHODS[method])
    hostagent_rpcapi.HostAgentAPI(bus).cast(
        'hv1', method, 'req', 'c1', operation='op-1', deadline=1234.5,
        **args)
    [(_, _, kwargs, options)] = bus.sent
    assert options['version'] == max(
        ['1.6', hostagent_rpcapi.SINCE.get(method, '1.0')],
        key=lambda v: tuple(map(int, v.split('.'))))
    assert options['context'] == {'operation': 'op-1', 'deadline': 1234.5}
    assert kwargs == dict(args, request_id='req', reply_to='c1')


def test_optional_arguments_ask_for_the_version_that_brought_them():
    """inspect_nodes' parts came with 1.7 and ensure_pool's wipe with
    1.8: an older agent refuses the request instead of reading every
    part or ignoring the devices it may wipe; 1.4's optional arguments
    still ask for 1.4 (1.6 with a deadline)."""
    bus = Bus()
    api = hostagent_rpcapi.HostAgentAPI(bus)
    api.cast('hv1', 'inspect_nodes', 'req', 'c1', nodes=[], owner='o',
             parts=['domain'])
    api.cast('hv1', 'inspect_nodes', 'req', 'c1', deadline=1.0, nodes=[],
             owner='o', parts=['domain'])
    api.cast('hv1', 'ensure_bridge', 'req', 'c1', name='b', owner='o',
             bridge_type='openvswitch')
    api.cast('hv1', 'ensure_bridge', 'req', 'c1', deadline=1.0, name='b',
             owner='o', bridge_type='openvswitch')
    api.cast('hv1', 'ensure_pool', 'req', 'c1', name='p', path='/dev/p',
             owner='o', pool_type='logical', devices=['/dev/sdb'],
             wipe=['/dev/sdb'])
    assert [options['version'] for _, _, _, options in bus.sent] == [
        '1.7', '1.7', '1.4', '1.6', '1.8']


# Version caps ([upgrade_levels]): rolling upgrades


def test_a_call_newer_than_the_conductor_cap_fails_naming_it():
    """Nothing is sent: an older conductor would refuse it."""
    bus = Bus(conductor='1.1')
    api = conductor_rpcapi.ConductorAPI(bus)
    context = policy.admin_context()
    with pytest.raises(exceptions.VersionCapped) as raised:
        api.plan_cluster(context, make_spec(count=1))
    assert str(raised.value) == (
        'plan_cluster needs version 1.2 of the conductor RPC API, above '
        'its cap 1.1 ([upgrade_levels] conductor, set while older '
        'conductors run): it can run once every conductor is upgraded and '
        'the cap is raised or removed')
    with pytest.raises(exceptions.VersionCapped) as raised:
        api.deploy_cluster(context, make_spec(count=1), force=True)
    assert str(raised.value).startswith(
        'deploy_cluster with force needs version 1.2 of the conductor RPC '
        'API, above its cap 1.1')
    assert bus.sent == []
    # What the cap allows is sent as before.
    api.deploy_cluster(context, make_spec(count=1))
    api.delete_hypervisor(context, 'hv1')
    assert [(m, o['version']) for _, m, _, o in bus.sent] == [
        ('deploy_cluster', '1.0'), ('delete_hypervisor', '1.1')]


def test_a_hostagent_capped_at_1_0_still_registers_and_reports():
    bus = Bus(conductor='1.0')
    api = conductor_rpcapi.ConductorAPI(bus)
    api.register_agent(policy.service_context(), 'hv1', {'cpus': 1})
    api.report_result(policy.service_context(), 'c1', 'r', 'hv1', {})
    assert [(m, o['version']) for _, m, _, o in bus.sent] == [
        ('register_agent', '1.0'), ('report_result', '1.0')]


def test_a_request_newer_than_the_hostagent_cap_fails_naming_it():
    bus = Bus(hostagent='1.8')
    api = hostagent_rpcapi.HostAgentAPI(bus)
    with pytest.raises(exceptions.VersionCapped) as raised:
        api.cast('hv1', 'ensure_bmc', 'req', 'c1', deadline=1.0,
                 domain='d', address='a', port=1, username='u',
                 password='p', owner='o')
    assert str(raised.value).startswith(
        'ensure_bmc needs version 1.9 of the hostagent RPC API, above its '
        'cap 1.8 ([upgrade_levels] hostagent')
    # An argument an older agent cannot do without.
    capped = hostagent_rpcapi.HostAgentAPI(Bus(hostagent='1.7'))
    with pytest.raises(exceptions.VersionCapped) as raised:
        capped.cast('hv1', 'ensure_pool', 'req', 'c1', name='p', path='/p',
                    owner='o', pool_type='logical', devices=['/dev/sdb'],
                    wipe=['/dev/sdb'])
    assert str(raised.value).startswith(
        'ensure_pool with wipe needs version 1.8 of the hostagent RPC API, '
        'above its cap 1.7')
    assert raised.value.kwargs['method'] == 'ensure_pool'
    assert bus.sent == []


def test_a_capped_conductor_sends_the_older_form_of_a_request():
    """Under 1.7 inspect_nodes goes without ``parts`` (an agent of 1.6
    would refuse it); under 1.6 a request keeps its deadline in its
    context but asks for no more than the request itself needs."""
    sent = {}
    for cap in (None, '1.6', '1.5'):
        bus = Bus(**({'hostagent': cap} if cap else {}))
        api = hostagent_rpcapi.HostAgentAPI(bus)
        api.cast('hv1', 'inspect_nodes', 'req', 'c1', operation='op',
                 deadline=1.0, nodes=[], owner='o', parts=['domain'])
        api.cast('hv1', 'ensure_bridge', 'req', 'c1', operation='op',
                 deadline=1.0, name='b', owner='o',
                 bridge_type='openvswitch')
        sent[cap] = [(kwargs, options['version'], options['context'])
                     for _, _, kwargs, options in bus.sent]
    deadline = {'operation': 'op', 'deadline': 1.0}
    inspect = dict(request_id='req', reply_to='c1', nodes=[], owner='o')
    bridge = dict(request_id='req', reply_to='c1', name='b', owner='o',
                  bridge_type='openvswitch')
    # No cap: as before.
    assert sent[None] == [(dict(inspect, parts=['domain']), '1.7', deadline),
                          (bridge, '1.6', deadline)]
    assert sent['1.6'] == [(inspect, '1.6', deadline),
                           (bridge, '1.6', deadline)]
    assert sent['1.5'] == [(inspect, '1.4', deadline),
                           (bridge, '1.4', deadline)]


def test_register_now_is_not_sent_below_its_version():
    bus = Bus(hostagent='1.0')
    hostagent_rpcapi.HostAgentAPI(bus).ask_to_register()
    assert bus.sent == []


def test_a_cap_of_another_major_version_is_refused_naming_it():
    with pytest.raises(exceptions.ConfigError) as raised:
        conductor_rpcapi.ConductorAPI(Bus(conductor='2.0'))
    assert str(raised.value) == (
        'Invalid configuration: [upgrade_levels] conductor = 2.0: the '
        'conductor RPC API of this Tenks is %s, and a cap must have its '
        'major version (1.x)' % conductor_rpcapi.RPC_API_VERSION)


class AgentOf16(hostagent_manager.HostAgentManager):
    """A hostagent of API 1.6: inspect_nodes takes no ``parts``."""

    target = messaging.Target(version='1.6')

    def inspect_nodes(self, context, request_id, reply_to, nodes, owner):
        super().inspect_nodes(context, request_id, reply_to, nodes, owner)


def test_a_capped_conductor_works_with_older_hostagents(conf, hypervisor,
                                                         monkeypatch):
    """A rolling upgrade: the conductor is newer than its hostagents of
    1.6 and [upgrade_levels] hostagent = 1.6. It plans, deploys and
    tears down; its check of new nodes reads the domains and volumes of
    the agent's whole answer only, as a newer agent gives them: a BMC
    of another owner is no name conflict of the plan."""
    monkeypatch.setattr(hostagent_manager, 'HostAgentManager', AgentOf16)
    conf.set_override('hostagent', '1.6', group='upgrade_levels')
    # Without the cap the agent would never answer: fail fast.
    conf.set_override('agent_timeout', 2, group='conductor')
    conf.set_override('agent_retries', 0, group='conductor')
    hypervisor.things[('bmc', 'tk0')] = ('127.0.0.1', 6230)
    hypervisor.bmc_owners['tk0'] = 'somebody else'
    with embedded.embedded(conf) as conductor:
        plan = conductor.deployments.plan(make_spec(count=1))
        assert {(c['node'], c['resource'], c['action'])
                for c in plan['changes']} >= {('tk0', 'domain', 'create')}
        del hypervisor.things[('bmc', 'tk0')], hypervisor.bmc_owners['tk0']
        conductor.deployments.deploy(make_spec(count=1))
        assert ('domain', 'tk0') in hypervisor.things
        conductor.teardowns.teardown('unit')
    assert hypervisor.things == {}
