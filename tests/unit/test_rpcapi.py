"""Client and server sides of each RPC API stay in step: every client
method reaches a manager method that takes exactly what it sends, at a
version the server serves."""

import functools
import inspect

import pytest
from oslo_utils import versionutils

from conductor import manager as conductor_manager
from conductor import rpcapi as conductor_rpcapi
from hostagent import manager as hostagent_manager
from hostagent import rpcapi as hostagent_rpcapi
from tenks import exceptions
from tenks import policy
from tenks import rpc
from tests.unit.conftest import make_spec


class RecordingClient:
    """Stands in for an oslo.messaging RPCClient; records each message."""

    def __init__(self, sent, **options):
        self.sent = sent
        self.options = options

    def prepare(self, **options):
        return RecordingClient(self.sent, **dict(self.options, **options))

    def call(self, context, method, **kwargs):
        self.sent.append(('call', method, kwargs, self.options))

    def cast(self, context, method, **kwargs):
        self.sent.append(('cast', method, kwargs,
                          dict(self.options, context=context)))


class Bus:

    def __init__(self):
        self.sent = []

    def get_client(self, topic, version):
        return RecordingClient(self.sent, topic=topic, version=version)


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
    assert options['fanout'] and 'server' not in options
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
             'clean': '1.10'}
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
