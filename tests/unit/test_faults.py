"""The fault hook of the flow runner (conductor.faults): off unless asked,
a task's answer replaced by an error, an action at a task boundary."""

import re

import pytest

from conductor import faults
from tenks import exceptions
from tests.unit.conftest import make_spec


@pytest.fixture
def fault():
    """Install a Fault for the test; none afterwards."""
    def install(*args, **kwargs):
        installed = faults.Fault(*args, **kwargs)
        faults.install(installed)
        return installed
    yield install
    faults.install(None)


def test_off_unless_asked(conductor, hypervisor, monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    assert faults.active() is None
    assert conductor.deployments.deploy(make_spec(count=2))['changed']
    assert hypervisor.things


def test_a_failed_answer_rolls_the_deploy_back(conductor, hypervisor,
                                               fault):
    """The agent makes the node, its answer is replaced: the failure
    names the task, and the rollback removes what the request made."""
    fault(fail='node:*')
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.deployments.deploy(make_spec(count=1))
    [failed] = raised.value.kwargs['failed_tasks']
    assert failed.startswith('node:')
    # The node named, and its request among the task's.
    assert re.search(
        r'tk0 \([0-9a-f-]+\): Injected fault: the answer of hv1 to '
        r'ensure_node \(request [^)]+/node:[0-9a-f-]+/execute\) of task '
        + re.escape(failed) + ' replaced', str(raised.value))
    assert hypervisor.calls['ensure_domain'] == 1
    assert hypervisor.things == {}
    assert conductor.records.list_clusters() == []


def test_a_task_without_an_agent_has_its_result_replaced(conductor,
                                                         hypervisor, fault):
    fault(fail='cluster:commit')
    with pytest.raises(exceptions.OperationFailed,
                       match='the result of task cluster:commit replaced'):
        conductor.deployments.deploy(make_spec(count=1))
    assert hypervisor.things == {}


def test_one_task_fails_once(conductor, hypervisor, fault):
    """Two tasks match: only the first to ask fails, and a fault fires
    once, so that the same operation then runs through."""
    installed = fault(fail='node:*')
    spec = make_spec(count=2)
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.deployments.deploy(spec)
    assert raised.value.kwargs['failed_tasks'] == [installed.failed]
    assert conductor.deployments.deploy(spec)['changed']
    assert [n['state'] for n in conductor.records.list_nodes('unit')] == [
        'deployed', 'deployed']


def test_an_action_at_a_task_boundary(conductor, hypervisor, fault):
    """``at``: the action runs once that many tasks have ended, before
    the next begins; ``tasks`` lists the flow's tasks in order."""
    spec = make_spec(count=1)
    seen = []

    def action():
        seen.append(sorted(k for k in hypervisor.things))

    installed = fault(at=2, action=action)
    conductor.deployments.deploy(spec)
    assert installed.tasks[0] == 'cluster:deploying'
    assert installed.tasks[-1] == 'cluster:commit'
    assert len(installed.tasks) == 5
    # The cluster marked, and its pool or bridge made (the other may be
    # under way): no node yet.
    [things] = seen
    assert {kind for kind, _ in things} in ({'pool'}, {'bridge'},
                                             {'pool', 'bridge'})


def test_boundary_zero_comes_before_any_task(conductor, hypervisor, fault):
    seen = []
    fault(at=0, action=lambda: seen.append(dict(hypervisor.things)))
    conductor.deployments.deploy(make_spec(count=1))
    assert seen == [{}]


def test_the_environment_names_the_fault(conductor, hypervisor,
                                         monkeypatch):
    monkeypatch.setenv(faults.ENV, 'fail:pool:*')
    spec = make_spec(count=1)
    with pytest.raises(exceptions.OperationFailed, match='ensure_pool'):
        conductor.deployments.deploy(spec)
    # Once per process.
    assert conductor.deployments.deploy(spec)['changed']


@pytest.mark.parametrize('value,expected', [
    ('fail:node:*', ('node:*', None, None)),
    ('kill:3', (None, 3, None)),
    ('fail:remove:*, kill:0', ('remove:*', 0, None)),
    ('kill:ironic_node:*', (None, None, 'ironic_node:*')),
])
def test_parse(value, expected):
    parsed = faults.parse(value)
    assert (parsed.fail, parsed.at, parsed.after) == expected
    assert parsed.action is faults.kill


@pytest.mark.parametrize('value', ['kill:', 'fail:', 'stop:1', 'kill'])
def test_parse_refuses_what_it_does_not_know(value):
    with pytest.raises(ValueError, match=faults.ENV):
        faults.parse(value)


@pytest.mark.parametrize('task', ['pool:*', 'bridge:*', 'uplink:*'])
def test_a_host_thing_answered_with_an_error_is_rolled_back(
        conductor, hypervisor, fault, task):
    """An agent that made the thing, then answered with an error (it may
    have failed to undo it): the rollback removes it by owner mark, and
    its record goes (found by the fault suite: they were left behind,
    unrecorded)."""
    fault(fail=task)
    with pytest.raises(exceptions.OperationFailed, match='Injected'):
        # (lo: an interface every host has, not the fake's uplink)
        conductor.deployments.deploy(make_spec(count=1, physnet_mappings={
            'physnet1': 'lo'}))
    assert hypervisor.things == {}
    assert conductor.db.list_resources() == []


@pytest.mark.parametrize('operation,before', [
    ('deploy', None), ('grow', 1), ('teardown', 1)])
def test_a_cluster_whose_first_task_failed_has_its_old_state(
        conductor, hypervisor, fault, operation, before):
    """The task that marks the cluster busy fails (its answer replaced):
    no other task ran, and the cluster is as it was, not 'failed' (found
    by the fault suite)."""
    if before:
        conductor.deployments.deploy(make_spec(count=before))
    things = dict(hypervisor.things)
    fault(fail='cluster:*')
    with pytest.raises(exceptions.OperationFailed, match='Injected'):
        if operation == 'teardown':
            conductor.teardowns.teardown('unit')
        else:
            conductor.deployments.deploy(make_spec(count=2))
    assert hypervisor.things == things
    if before is None:
        assert conductor.records.list_clusters() == []
    else:
        assert conductor.records.get_cluster('unit')['state'] == 'deployed'
        assert [n['state'] for n in conductor.records.list_nodes('unit')] == [
            'deployed']


def test_a_node_whose_removal_failed_is_marked_failed(conductor, hypervisor,
                                                      fault):
    """A shrink whose node removal was answered with an error (the agent
    may have removed part of the node): the node is recorded failed, not
    deployed, and the error says so rather than that the cluster is
    kept (found by the fault suite); a re-run finishes."""
    conductor.deployments.deploy(make_spec(count=2))
    fault(fail='remove:*')
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.deployments.deploy(make_spec(count=1))
    message = str(raised.value)
    assert 'deployed before is kept' not in message
    assert 'tk1 (failed)' in message
    assert 'run the deploy again to finish' in message
    assert [(n['name'], n['state']) for n in conductor.records.list_nodes(
        'unit')] == [('tk0', 'deployed'), ('tk1', 'failed')]
    assert conductor.records.get_cluster('unit')['state'] == 'failed'
    faults.install(None)
    conductor.deployments.deploy(make_spec(count=1))
    assert [n['name'] for n in conductor.records.list_nodes('unit')] == ['tk0']
    assert conductor.records.get_cluster('unit')['state'] == 'deployed'
    assert ('domain', 'tk1') not in hypervisor.things


def test_the_progress_sees_the_error_that_replaces_an_answer():
    """The first good answer to come is the one replaced, and whoever
    follows the answers as they come (the operation's progress) gets
    the error the task gets."""
    class Agents:
        def request_all(self, host, method, calls, answered=None, **kw):
            answers = [RuntimeError('down'), {'changed': True},
                       {'changed': False}]
            for i in (0, 2, 1):
                answered(i, answers[i])
            return answers

    fault = faults.Fault(fail='node:*')
    seen = {}
    answers = faults._FailingAgents(fault, 'node:a', Agents()).request_all(
        'hv1', 'ensure_node', [('r0',), ('r1',), ('r2',)],
        answered=seen.__setitem__)
    assert isinstance(answers[2], faults.InjectedFault)
    assert seen[2] is answers[2]
    assert 'request r2' in str(answers[2])
    assert seen[1] == answers[1] == {'changed': True}
    assert isinstance(seen[0], RuntimeError)
    assert fault.failed == 'node:a'
