"""Whole-node requests (hostagent API 1.2) on the fake drivers: the
order of parts, refusals before any change, undo of what a failed
request made, and the locks they share with single-thing requests."""

import threading

import pytest

from hostagent import manager
from hostagent import nodes
from tenks import exceptions
from tenks import rpc
from tests.unit import fakes

OWNER = 'tenks:c:a'


class Reports:

    def __init__(self):
        self.sent = []

    def report_result(self, context, conductor, request_id, host,
                      **outcome):
        self.sent.append((request_id, outcome))


@pytest.fixture
def agent(conf, hypervisor):
    agent = manager.HostAgentManager(conf, rpc.Bus(conf))
    agent.conductor = Reports()
    return agent


def node(**fields):
    return dict({
        'uuid': '3f1a3c1e-1a52-4c55-9d0e-1f8d7c6b5a40', 'name': 'n0',
        'domain_type': 'qemu', 'vcpus': 1, 'memory_mb': 128,
        'console_log_enabled': True, 'pool': 'p',
        'volumes': [{'name': 'n0v0', 'capacity': 1024, 'format': 'qcow2'}],
        'nics': [{'mac': '52:54:00:00:00:01', 'tap': 'n0t0',
                  'bridge': 'br'}],
        'bmc': {'address': '127.0.0.1', 'port': 6230, 'username': 'admin',
                'password': 'hush'},
    }, **fields)


def test_result_lists_each_part_by_kind(agent, hypervisor):
    result = agent.nodes.ensure(node(), OWNER, False)
    assert result == {
        'changed': True, 'power_state': 'shut off', 'updated': [],
        'removed': [],
        'created': [['volume', 'n0v0'], ['port', 'n0t0'], ['domain', 'n0'],
                    ['bmc', 'n0']]}
    assert agent.nodes.ensure(node(), OWNER, False)['changed'] is False


def test_running_node_that_would_change_is_refused_unless_forced(
        agent, hypervisor):
    agent.nodes.ensure(node(), OWNER, False)
    hypervisor.running.add('n0')
    calls = dict(hypervisor.calls)
    with pytest.raises(exceptions.NodeRunning) as refused:
        agent.nodes.ensure(node(memory_mb=256), OWNER, False)
    assert 'n0' in str(refused.value) and 'memory_mb' in str(refused.value)
    assert dict(hypervisor.calls) == calls  # nothing was even tried
    result = agent.nodes.ensure(node(memory_mb=256), OWNER, True)
    assert result['updated'] == [['domain', 'n0']]
    assert result['power_state'] == 'running'
    assert hypervisor.things[('domain', 'n0')]['memory_mb'] == 256


def test_failed_request_removes_what_it_made_only(agent, hypervisor):
    agent.nodes.ensure(node(), OWNER, False)
    hypervisor.fail[('bmc', 'n0')] = exceptions.PortInUse(
        port=6230, address='127.0.0.1')
    more = node(volumes=node()['volumes'] + [
        {'name': 'n0v1', 'capacity': 1024, 'format': 'qcow2'}])
    with pytest.raises(exceptions.PortInUse):
        agent.nodes.ensure(more, OWNER, False)
    # The new volume went; what was there before stays.
    assert hypervisor.names('volume') == ['n0v0']
    assert hypervisor.names('domain') == ['n0']


def test_shrinking_a_volume_is_refused_before_any_change(agent,
                                                         hypervisor):
    agent.nodes.ensure(node(), OWNER, False)
    calls = dict(hypervisor.calls)
    small = node(volumes=[{'name': 'n0v0', 'capacity': 512,
                           'format': 'qcow2'}])
    with pytest.raises(exceptions.ResourceConflict) as refused:
        agent.nodes.ensure(small, OWNER, False)
    assert 'n0v0' in str(refused.value) and '1024 bytes' in str(
        refused.value)
    assert dict(hypervisor.calls) == calls


def test_bad_request_names_each_field_and_hides_the_password(agent):
    bad = node(memory_mb='lots', remove={'ports': ['n0t0']})
    bad['bmc']['password'] = 5
    with pytest.raises(exceptions.InvalidNodeRequest) as refused:
        agent.nodes.ensure(bad, OWNER, False)
    message = str(refused.value)
    assert "memory_mb: 'lots' is not of type 'integer'" in message
    assert 'bmc.password: is not valid' in message and '5' not in message
    with pytest.raises(exceptions.InvalidNodeRequest) as refused:
        agent.nodes.ensure(node(remove={'ports': ['n0t0']}), OWNER, False)
    assert 'remove.ports: n0t0 is also wanted' in str(refused.value)


def _variants(value):
    """``value`` with each field in turn replaced by values of other
    types (and dropped), recursively."""
    others = [None, True, 0, -1, 1.5, '', 'x', '/x', [], {}, ['x'], {'a': 1}]
    if isinstance(value, dict):
        for key, field in value.items():
            yield {k: v for k, v in value.items() if k != key}
            for changed in _variants(field):
                yield dict(value, **{key: changed})
    elif isinstance(value, list):
        for i, item in enumerate(value):
            for changed in _variants(item):
                yield value[:i] + [changed] + value[i + 1:]
    for other in others:
        if other != value or type(other) is not type(value):
            yield other


@pytest.mark.parametrize('validator, good', [
    (nodes.NODE_VALIDATOR, node(
        boot_mode='uefi', secure_boot=True, remove={
            'volumes': ['old'], 'port_types': {'t': 'linuxbridge'}},
        volumes=[{'name': 'a', 'capacity': 1, 'format': 'qcow2',
                  'source': {'path': '/i', 'backing': True}},
                 {'name': 'b', 'existing': True, 'pool': 'q'},
                 {'name': 'c', 'capacity': 1, 'format': 'raw',
                  'source': {'url': 'http://h/i', 'token': 't'}}],
        bmc={'type': 'redfish', 'address': '127.0.0.1', 'port': 1,
             'username': 'u', 'password': 'p', 'system_id': 's'})),
    (nodes.EXPORT_VALIDATOR, {'name': 'n', 'pool': 'p',
                              'volumes': [{'name': 'v'}]}),
    (nodes.REMOVE_VALIDATOR, {'name': 'n', 'pool': None,
                              'volumes': [{'name': 'v'}],
                              'nics': [{'tap': 't'}]}),
])
def test_fast_and_full_checks_agree(validator, good):
    """A good request passes the fast check alone; on every variant the
    fast check and jsonschema give the same verdict."""
    assert validator.problems(good) == []
    count = 0
    for variant in _variants(good):
        full = not any(True for _ in validator.full.iter_errors(variant))
        try:
            validator.fast(variant)
            fast = True
        except nodes.fastjsonschema.JsonSchemaValueException:
            fast = False
        assert fast == full, variant
        assert (validator.problems(variant) == []) == full
        count += 1
    assert count > 50


def test_bad_request_is_reported_not_lost(agent):
    agent.ensure_node({}, 'r1', 'c1', {'name': ['x']}, OWNER, False)
    [(request_id, outcome)] = agent.conductor.sent
    assert outcome['error']['type'] == 'InvalidNodeRequest'


def test_remove_keeps_what_is_not_ours_and_says_so(agent, hypervisor):
    agent.nodes.ensure(node(), OWNER, False)
    hypervisor.fail[('domain', 'n0')] = fakes.conflict('Domain', 'n0')
    real = agent.virt.remove_domain

    def remove_domain(name, owner):
        raise hypervisor.fail[('domain', name)]

    agent.virt.remove_domain = remove_domain
    with pytest.raises(exceptions.ResourceConflict) as refused:
        agent.nodes.remove(node(), OWNER)
    assert 'Domain n0' in str(refused.value)
    assert hypervisor.names('domain') == ['n0']
    assert hypervisor.names('volume') == hypervisor.names('port') == []
    agent.virt.remove_domain = real


def test_node_request_waits_for_a_request_on_one_of_its_volumes(agent):
    """An old-style ensure_volume of a node's volume and the node's
    request do not run at once."""
    ensure = agent.virt.ensure_volume
    entered, release = fakes.block(agent.virt, 'ensure_volume')
    single = threading.Thread(target=agent.ensure_volume, args=(
        {}, 'r1', 'c1', 'p', 'n0v0', 1024, 'qcow2', OWNER))
    single.start()
    assert entered.wait(10)
    agent.virt.ensure_volume = ensure
    whole = threading.Thread(target=agent.ensure_node, args=(
        {}, 'r2', 'c1', node(), OWNER, False))
    whole.start()
    whole.join(0.2)
    assert whole.is_alive()  # waits for the volume's lock
    release.set()
    single.join(10)
    whole.join(10)
    assert [r for r, _ in agent.conductor.sent] == ['r1', 'r2']
    # It found the volume the first request made.
    assert agent.conductor.sent[1][1]['result']['created'] == [
        ['port', 'n0t0'], ['domain', 'n0'], ['bmc', 'n0']]


def test_lock_keys_are_those_of_single_thing_requests():
    keys = nodes.things(node(remove={'volumes': ['old'], 'ports': ['t']}))
    assert keys == sorted([
        ('bmc', 'n0'), ('domain', 'n0'), ('node', 'n0'), ('port', 'n0t0'),
        ('port', 't'), ('volume', 'p', 'n0v0'), ('volume', 'p', 'old')])
    assert nodes.things({'name': 'n0'}) is None


def test_node_running_keeps_its_type_over_the_bus():
    error = exceptions.NodeRunning(node='n0', changes='vcpus 1 -> 2')
    back = exceptions.from_report(exceptions.to_report(error), 'hv1')
    assert type(back) is exceptions.NodeRunning
    assert str(back) == ('Node n0 is running and would change (vcpus 1 -> '
                         '2): power it off first, or force the change, '
                         'which powers it off and on again (on hv1)')


def second():
    return node(uuid='9d2b0c6e-5f41-4d6a-8b7e-2c3d4e5f6a70', name='n1',
                volumes=[{'name': 'n1v0', 'capacity': 1024,
                          'format': 'qcow2'}],
                nics=[{'mac': '52:54:00:00:00:02', 'tap': 'n1t0',
                       'bridge': 'br'}],
                bmc=dict(node()['bmc'], port=6231))


def test_inspect_reports_what_ensure_would_make_per_node(agent, hypervisor):
    agent.nodes.ensure(node(), OWNER, False)
    result = agent.nodes.inspect([node(), second()], OWNER)
    assert result == {'changed': False, 'nodes': {
        node()['uuid']: [],
        second()['uuid']: [['volume', 'n1v0', 'missing'],
                           ['port', 'n1t0', 'missing'],
                           ['domain', 'n1', 'missing'],
                           ['bmc', 'n1', 'missing']]}}


def test_inspect_reads_each_kind_once_and_changes_nothing(agent,
                                                          hypervisor):
    agent.nodes.ensure(node(), OWNER, False)
    things, calls = dict(hypervisor.things), dict(hypervisor.calls)
    agent.nodes.inspect([node(), second()], OWNER)
    assert hypervisor.things == things
    new = {k: v - calls.get(k, 0) for k, v in hypervisor.calls.items()
           if v != calls.get(k, 0)}
    assert new == {'volume_infos': 1, 'domains_changes': 1,
                   'port_changes': 1, 'bmc_changes': 1}


def test_inspect_reads_only_the_parts_asked_for(agent, hypervisor):
    """A deploy's check of new nodes asks for domains and volumes: no
    BMC daemon, port or bridge is read."""
    agent.nodes.ensure(node(), OWNER, False)
    hypervisor.fail[('domain', 'n1')] = fakes.conflict('domain', 'n1')
    calls = dict(hypervisor.calls)
    result = agent.nodes.inspect([node(), second()], OWNER,
                                 ['domain', 'volume'])
    assert result['nodes'] == {
        node()['uuid']: [],
        second()['uuid']: [['volume', 'n1v0', 'missing'],
                           ['domain', 'n1', 'foreign']]}
    assert {k: v - calls.get(k, 0) for k, v in hypervisor.calls.items()
            if v != calls.get(k, 0)} == {'volume_infos': 1,
                                         'domains_changes': 1}
    with pytest.raises(exceptions.InvalidNodeRequest):
        agent.nodes.inspect([node()], OWNER, ['domain', 'nvram'])


def test_inspect_words_for_drift(agent, hypervisor):
    agent.nodes.ensure(node(), OWNER, False)
    hypervisor.stopped_bmcs.add('n0')
    bigger = node(memory_mb=256, volumes=[
        {'name': 'n0v0', 'capacity': 2048, 'format': 'qcow2'}])
    assert agent.nodes.inspect([bigger], OWNER)['nodes'][bigger['uuid']] == [
        ['volume', 'n0v0', 'smaller'], ['domain', 'n0', 'differs'],
        ['bmc', 'n0', 'stopped']]
    moved = node(bmc=dict(node()['bmc'], port=6239), volumes=[
        {'name': 'n0v0', 'capacity': 512, 'format': 'qcow2'}])
    assert agent.nodes.inspect([moved], OWNER)['nodes'][moved['uuid']] == [
        ['volume', 'n0v0', 'differs'], ['bmc', 'n0', 'differs']]


def test_inspect_reports_foreign_things_and_does_not_raise(agent,
                                                           hypervisor):
    agent.nodes.ensure(node(), OWNER, False)
    for kind, name in (('volume', 'n0v0'), ('port', 'n0t0'),
                       ('domain', 'n0')):
        hypervisor.fail[(kind, name)] = fakes.conflict(kind, name)
    assert agent.nodes.inspect([node()], OWNER)['nodes'] == {
        node()['uuid']: [['volume', 'n0v0', 'foreign'],
                         ['port', 'n0t0', 'foreign'],
                         ['domain', 'n0', 'foreign']]}


def test_inspect_over_the_endpoint_hides_the_password(agent):
    agent.inspect_nodes({}, 'r1', 'c1', [node()], OWNER)
    [(request_id, outcome)] = agent.conductor.sent
    assert outcome['result']['nodes'][node()['uuid']][0] == [
        'volume', 'n0v0', 'missing']
    bad = node()
    bad['bmc']['password'] = 5
    agent.inspect_nodes({}, 'r2', 'c1', [bad], OWNER)
    error = agent.conductor.sent[1][1]['error']
    assert error['type'] == 'InvalidNodeRequest'
    assert 'hush' not in str(agent.conductor.sent)


def test_inspect_takes_no_lock_of_the_parts(agent):
    """A node request that holds its parts does not hold up an
    inspection of the same node."""
    entered, release = fakes.block(agent.virt, 'ensure_volume')
    whole = threading.Thread(target=agent.ensure_node, args=(
        {}, 'r1', 'c1', node(), OWNER, False))
    whole.start()
    try:
        assert entered.wait(10)
        agent.inspect_nodes({}, 'r2', 'c1', [node()], OWNER)
        assert [r for r, _ in agent.conductor.sent] == ['r2']
    finally:
        release.set()
        whole.join(10)
