"""The conductor's operations end to end on the in-memory bus, with the
real hostagent manager in front of fake drivers."""

import datetime
import os
import subprocess
import sys
import threading
import time
import types

import pytest
import sqlalchemy as sa

from flows import nodes
from tenks import exceptions
from tenks import reconcile
from tenks.cli import embedded
from tenks.db import models
from tests.unit import fakes
from tests.unit import test_flows
from tests.unit.conftest import make_spec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
EVERYTHING = {'pool', 'bridge', 'volume', 'port', 'domain', 'bmc'}


def kinds(hv):
    return {kind for kind, _ in hv.things}


def resources(conductor):
    return sorted((r.hypervisor, r.kind, r.name, r.state, r.operation)
                  for r in conductor.db.list_resources())


def test_deploy_creates_every_part_and_records_it(conductor, hypervisor):
    result = conductor.deployments.deploy(make_spec(count=2))
    nodes = conductor.db.list_nodes(cluster='unit')
    # One task per node, besides the host's pool and bridge.
    assert sorted(result['changed']) == sorted(
        ['pool:hv1:tenks-unit', 'bridge:hv1:brtenks0']
        + ['node:%s' % n.uuid for n in nodes])
    assert hypervisor.names('domain') == ['tk0', 'tk1']
    assert hypervisor.names('volume') == ['tk0vol0', 'tk1vol0']
    assert hypervisor.names('port') == ['p-tk0-0', 'p-tk1-0']
    assert hypervisor.names('bridge') == ['brtenks0']
    assert hypervisor.names('pool') == ['tenks-unit']
    assert hypervisor.things[('bmc', 'tk0')] == ('127.0.0.1', 6230)
    assert [(n.name, n.state) for n in nodes] == [
        ('tk0', 'deployed'), ('tk1', 'deployed')]
    assert conductor.db.get_cluster('unit').state == 'deployed'
    assert {r.state for r in conductor.db.list_resources('unit')} == {
        'present'}


def test_redeploy_changes_nothing(conductor, hypervisor):
    spec = make_spec(count=2)
    conductor.deployments.deploy(spec)
    things = dict(hypervisor.things)
    assert conductor.deployments.deploy(spec)['changed'] == []
    assert hypervisor.things == things


def test_redeploy_repairs_drift_only(conductor, hypervisor):
    spec = make_spec(count=2)
    conductor.deployments.deploy(spec)
    tk1 = next(n.uuid for n in conductor.db.list_nodes() if n.name == 'tk1')
    del hypervisor.things[('domain', 'tk1')]
    assert conductor.deployments.deploy(spec)['changed'] == ['node:%s' % tk1]
    assert hypervisor.names('domain') == ['tk0', 'tk1']


def test_failure_reverts_exactly_what_the_deploy_created(conductor,
                                                         hypervisor):
    hypervisor.fail[('domain', 'tk1')] = exceptions.DriverError(
        driver='fake', action='define tk1', reason='disk full')
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.deployments.deploy(make_spec(count=2))
    message = str(raised.value)
    assert 'define tk1: disk full' in message
    assert 'Everything this deploy created was rolled back' in message
    [failed] = raised.value.kwargs['failed_tasks']
    assert failed.startswith('node:') and failed in message
    assert hypervisor.things == {}
    assert conductor.db.get_cluster('unit') is None
    assert conductor.db.list_nodes() == []
    assert conductor.db.list_resources('unit') == []


@pytest.mark.parametrize('fails', [False, True])
def test_whoever_sees_an_operation_end_sees_its_event(conductor, hypervisor,
                                                      monkeypatch, fails):
    """The end (or error) event is recorded with the operation's end,
    not after it: a client that polls the operation and then lists the
    events finds it."""
    if fails:
        hypervisor.fail[('domain', 'tk1')] = exceptions.DriverError(
            driver='fake', action='define tk1', reason='disk full')
    seen = []
    finish = conductor.db.finish_operation

    def finish_and_look(operation_id, *args, **kwargs):
        finish(operation_id, *args, **kwargs)
        seen.append((conductor.db.get_operation(operation_id).state, [
            e.event_type for e in conductor.db.list_events('unit')]))

    monkeypatch.setattr(conductor.db, 'finish_operation', finish_and_look)
    try:
        conductor.deployments.deploy(make_spec(count=2))
    except exceptions.OperationFailed:
        assert fails
    last = 'tenks.cluster.deploy.%s' % ('error' if fails else 'end')
    [(state, events)] = seen
    assert state == ('failed' if fails else 'succeeded')
    assert events[0] == 'tenks.cluster.deploy.start' and events[-1] == last


def test_failed_shrink_says_what_it_removed_and_what_remains(
        conductor, hypervisor, monkeypatch):
    conductor.deployments.deploy(make_spec(count=3))
    real_remove = hypervisor.remove

    def remove(kind, name):
        if (kind, name) == ('domain', 'tk2'):
            raise exceptions.DriverError(driver='fake', action='undefine '
                                         'tk2', reason='busy')
        return real_remove(kind, name)

    monkeypatch.setattr(hypervisor, 'remove', remove)
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.deployments.deploy(make_spec(count=1))
    message = str(raised.value)
    assert 'deployed before is kept' not in message
    assert message.endswith(
        'What this deploy created was rolled back, not what it removed '
        '(node tk1); cluster unit now has 2 node(s) (hv1: tk0, tk2 '
        '(failed)): run the deploy again to finish')
    assert sorted(n.name for n in conductor.db.list_nodes()) == ['tk0',
                                                                 'tk2']
    monkeypatch.undo()
    assert conductor.deployments.deploy(make_spec(count=1))['changed']
    assert [n.name for n in conductor.db.list_nodes()] == ['tk0']


def test_a_rolled_back_node_is_announced_gone(conductor, hypervisor,
                                              monkeypatch):
    """A node a failed deploy created, announced, then rolled back gets
    its tenks.node.delete.end."""
    small = make_spec()['node_types']['small']
    types = {'small': small, 'other': dict(small, vcpus=2)}
    conductor.deployments.deploy(make_spec(node_types=types, specs=[
        {'type': 'small', 'count': 1}, {'type': 'other', 'count': 1}]))
    real_remove = hypervisor.remove

    def remove(kind, name):
        if (kind, name) == ('domain', 'tk1'):
            raise exceptions.DriverError(driver='fake', action='undefine '
                                         'tk1', reason='busy')
        return real_remove(kind, name)

    monkeypatch.setattr(hypervisor, 'remove', remove)
    # tk2 is made and announced; removing tk1 (last) fails.
    with pytest.raises(exceptions.OperationFailed):
        conductor.deployments.deploy(make_spec(node_types=types, specs=[
            {'type': 'small', 'count': 2}, {'type': 'other', 'count': 0}]))
    assert 'tk2' not in [n.name for n in conductor.db.list_nodes()]
    events = conductor.records.list_events('unit')
    last = events[events.index(next(
        e for e in reversed(events)
        if e['event_type'] == 'tenks.cluster.deploy.start')):]
    assert [(e['event_type'], e['payload'].get('name')) for e in last] == [
        ('tenks.cluster.deploy.start', None),
        ('tenks.node.create.end', 'tk2'),
        ('tenks.node.delete.end', 'tk2'),
        ('tenks.cluster.deploy.error', None)]


def test_failed_redeploy_keeps_what_was_deployed_before(conductor,
                                                        hypervisor):
    spec = make_spec(count=2)
    conductor.deployments.deploy(spec)
    deployed = dict(hypervisor.things)
    recorded = resources(conductor)
    hypervisor.fail[('bmc', 'tk0')] = exceptions.DriverError(
        driver='fake', action='start a BMC', reason='boom')
    # A re-run that grows the cluster and resizes its nodes, and fails
    # on a node it had.
    bigger = make_spec(count=3, node_types={'small': dict(
        spec['node_types']['small'], memory_mb=256)})
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.deployments.deploy(bigger)
    assert 'deployed before is kept' in str(raised.value)
    # Nothing deployed before is removed; the new node is gone.
    assert hypervisor.things == deployed
    assert resources(conductor) == recorded
    assert [n.name for n in conductor.db.list_nodes()] == ['tk0', 'tk1']
    # Rolled back whole: still deployed, with the spec it had.
    assert conductor.db.get_cluster('unit').state == 'deployed'
    assert conductor.db.get_cluster('unit').spec['specs'][0]['count'] == 2
    del hypervisor.fail[('bmc', 'tk0')]
    assert conductor.deployments.deploy(spec)['changed'] == []
    assert conductor.db.get_cluster('unit').state == 'deployed'


def test_conflict_is_not_adopted_nor_removed(conductor, hypervisor):
    hypervisor.fail[('bridge', 'brtenks0')] = fakes.conflict('bridge',
                                                             'brtenks0')
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.deployments.deploy(make_spec(count=1))
    assert 'not owned' in str(raised.value)
    assert hypervisor.calls['remove_bridge'] == 0
    assert hypervisor.things == {}
    assert conductor.db.get_cluster('unit') is None


def test_teardown_removes_in_dependency_order(conductor, hypervisor,
                                              monkeypatch):
    conductor.deployments.deploy(make_spec(count=2))
    uuids = [n.uuid for n in conductor.db.list_nodes()]
    order = []
    real_remove = hypervisor.remove

    def remove(kind, name):
        order.append((kind, name))
        return real_remove(kind, name)

    monkeypatch.setattr(hypervisor, 'remove', remove)
    result = conductor.teardowns.teardown('unit')
    assert sorted(result['changed']) == sorted(
        ['remove-pool:hv1:tenks-unit', 'remove-bridge:hv1:brtenks0']
        + ['remove:%s' % uuid for uuid in uuids])
    assert hypervisor.things == {}
    # Each node's BMC before its domain, its domain before its disks and
    # ports; every port before the bridge; the pool last.
    for name in ('tk0', 'tk1'):
        assert order.index(('bmc', name)) < order.index(('domain', name))
        assert order.index(('domain', name)) < min(
            order.index(('port', 'p-%s-0' % name)),
            order.index(('volume', name + 'vol0')))
    assert order.index(('bridge', 'brtenks0')) > max(
        i for i, (kind, _) in enumerate(order) if kind == 'port')
    assert order[-1] == ('pool', 'tenks-unit')
    assert len(order) == 10
    assert conductor.db.get_cluster('unit') is None
    assert conductor.db.list_nodes() == []


def test_failed_teardown_keeps_the_record_of_what_remains(conductor,
                                                          hypervisor):
    conductor.deployments.deploy(make_spec(count=1))
    real_remove = hypervisor.remove

    def remove(kind, name):
        if kind == 'pool':
            raise exceptions.DriverError(driver='fake', action='remove pool',
                                         reason='busy')
        return real_remove(kind, name)

    hypervisor.remove = remove
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.teardowns.teardown('unit')
    assert '1 resource(s) remain recorded' in str(raised.value)
    assert [r.kind for r in conductor.db.list_resources('unit')] == ['pool']
    hypervisor.remove = real_remove
    conductor.teardowns.teardown('unit')
    assert hypervisor.things == {}
    assert conductor.db.get_cluster('unit') is None


def test_teardown_of_unknown_cluster(conductor):
    with pytest.raises(exceptions.ClusterNotFound):
        conductor.teardowns.teardown('nope')


def test_changed_spec_is_applied(conductor, hypervisor):
    conductor.deployments.deploy(make_spec(count=1))
    result = conductor.deployments.deploy(make_spec(count=2))
    assert [(c['node'], c['resource'], c['action'])
            for c in result['plan'] if c['resource'] == 'domain'] == [
        ('tk1', 'domain', 'create')]
    assert hypervisor.names('domain') == ['tk0', 'tk1']
    assert conductor.db.get_cluster('unit').spec['specs'][0]['count'] == 2


def test_interrupted_deploy_is_finished_with_its_own_spec(conductor,
                                                          hypervisor):
    conductor.deployments.deploy(make_spec(count=1))
    # A deploy of two nodes that a dead process left running.
    conductor.operations.create('deploy', 'unit', make_spec(count=2))
    with pytest.raises(exceptions.SpecChanged) as raised:
        conductor.deployments.deploy(make_spec(count=3))
    assert 'specs' in str(raised.value)
    assert hypervisor.names('domain') == ['tk0']
    result = conductor.deployments.deploy(make_spec(count=2))
    assert result['resumed']
    assert hypervisor.names('domain') == ['tk0', 'tk1']


# An embedded conductor with a fake hypervisor in a process of its own,
# which runs the code after it and exits with status 9 where that code
# calls os._exit(9) (argv[1]: the state directory).
KILLED = """
import os
import sys

import pytest

from conductor import operations
from flows import records
from tenks import exceptions
from tenks.cli import embedded
from tests.unit import conftest

monkeypatch = pytest.MonkeyPatch()
hypervisor = conftest.fake_hypervisor(monkeypatch)
with embedded.embedded(conftest.make_conf(sys.argv[1])) as conductor:
%s
"""


def killed(conf, code):
    """Run ``code`` in a process of its own (see KILLED), which must die
    in it."""
    done = subprocess.run(
        [sys.executable, '-c', KILLED % code, conf.state_dir], cwd=ROOT,
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 9, done.stderr


def test_a_resumed_deploy_reports_the_whole_operation(conf, hypervisor):
    """Its changed tasks, progress and plan count what ran before the
    resume too."""
    # Dead once every node is made, before the spec is recorded.
    killed(conf, """
    monkeypatch.setattr(records.CommitSpec, 'execute',
                        lambda self, operation_id, cluster: os._exit(9))
    conductor.deployments.deploy(conftest.make_spec(count=2))
""")
    with embedded.embedded(conf) as conductor:
        result = conductor.deployments.deploy(make_spec(count=2))
        operation = conductor.records.get_operation(result['operation'])
        uuids = [n.uuid for n in conductor.db.list_nodes(cluster='unit')]
    assert result['resumed']
    assert sorted(result['changed']) == sorted(
        ['pool:hv1:tenks-unit', 'bridge:hv1:brtenks0']
        + ['node:%s' % uuid for uuid in uuids])
    assert [(c['node'], c['action']) for c in result['plan']
            if c['resource'] == 'domain'] == [('tk0', 'create'),
                                              ('tk1', 'create')]
    assert operation['progress']['node'] == [2, 2]
    assert operation['result'] == {
        key: result[key] for key in ('changed', 'resumed', 'warnings',
                                     'plan')}


def test_a_teardown_killed_after_its_last_removal_ends(conf, hypervisor):
    """Its cluster's record gone, no operation of that cluster would end
    it: the next embedded conductor does, with its real outcome."""
    killed(conf, """
    conductor.deployments.deploy(conftest.make_spec(count=2))
    forget = records.ForgetCluster.execute

    def forget_and_die(self, cluster):
        forget(self, cluster)
        os._exit(9)

    monkeypatch.setattr(records.ForgetCluster, 'execute', forget_and_die)
    conductor.teardowns.teardown('unit')
""")
    with embedded.embedded(conf) as conductor:
        [deploy, teardown] = conductor.records.list_operations('unit')
        assert teardown['state'] == 'succeeded', teardown['error']
        # Every removal of the killed process counts.
        assert len([t for t in teardown['result']['changed']
                    if t.startswith('remove:')]) == 2
        assert conductor.records.list_events('unit')[-1]['event_type'] == (
            'tenks.cluster.teardown.end')
        # Its cluster is free for a new deploy at once.
        assert conductor.deployments.deploy(make_spec(count=1))['changed']


def test_a_deploy_killed_once_rolled_back_ends_failed(conf, hypervisor):
    """A resume does not run a rolled-back flow again: it ends failed."""
    killed(conf, """
    hypervisor.fail[('domain', 'tk1')] = exceptions.DriverError(
        driver='fake', action='define tk1', reason='disk full')
    monkeypatch.setattr(operations.Operations, '_fail',
                        lambda *args: os._exit(9))
    conductor.deployments.deploy(conftest.make_spec(count=2))
""")
    with embedded.embedded(conf) as conductor:
        [operation] = conductor.records.list_operations('unit')
        assert operation['state'] == 'failed'
        assert operation['error'] == (
            'Deploy of cluster unit failed: it had failed and been rolled '
            'back when the process running it stopped, before recording '
            'why. Everything this deploy created was rolled back')
        assert conductor.records.list_nodes() == []
    assert hypervisor.things == {}


def test_busy_cluster_is_refused(conductor, hypervisor, conf):
    # Another process holds the cluster's lock (a lock is per process).
    path = os.path.join(conf.state_dir, 'locks', 'unit.lock')
    holder = subprocess.Popen(
        [sys.executable, '-c',
         'import sys, fasteners; lock = fasteners.InterProcessLock(%r); '
         'lock.acquire(); print("locked", flush=True); sys.stdin.read()'
         % path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == 'locked\n'
        with pytest.raises(exceptions.ClusterBusy):
            conductor.deployments.deploy(make_spec(count=1))
    finally:
        holder.communicate('')
    assert hypervisor.things == {}


def test_an_operation_holds_its_cluster_until_its_end_is_recorded(
        conductor, hypervisor, monkeypatch):
    """A deploy submitted as the last one ends finds the cluster busy:
    had it been let in, it would have closed the other as interrupted,
    and a wait for the other would have found it still running."""
    spec = make_spec(count=1)
    refused = []
    finish = conductor.db.finish_operation

    def submit_then_finish(operation_id, *args, **kwargs):
        try:
            conductor.deployments.submit(spec)
        except exceptions.ClusterBusy as e:
            refused.append(e)
        finish(operation_id, *args, **kwargs)

    monkeypatch.setattr(conductor.db, 'finish_operation', submit_then_finish)
    result = conductor.deployments.deploy(spec)
    assert len(refused) == 1
    operation = conductor.db.get_operation(result['operation'])
    assert operation.state == 'succeeded'


def test_names_and_ports_are_unique_across_clusters(conductor, hypervisor):
    conductor.deployments.deploy(make_spec(count=2))
    hypervisor.busy_ports.add(6232)
    conductor.deployments.deploy(make_spec(count=1, cluster='other',
                                           bridge_prefix='bro'))
    other = conductor.db.list_nodes(cluster='other')
    assert [(n.name, n.bmc_port) for n in other] == [('tk2', 6233)]


def test_typed_errors_cross_the_bus(conductor, hypervisor):
    hypervisor.fail[('pool', 'tenks-unit')] = exceptions.HypervisorUnavailable(
        uri='qemu:///system', reason='no socket')
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.deployments.deploy(make_spec(count=1))
    assert 'Cannot reach libvirt at qemu:///system' in str(raised.value)
    assert '(on hv1)' in str(raised.value)


def test_request_to_absent_agent_times_out_naming_the_host(conductor, conf):
    conductor.agents.timeout = 0.2
    with pytest.raises(exceptions.AgentTimeout) as raised:
        conductor.agents.request('nohost', 'remove_bmc', 'r1', domain='x',
                                 owner='o')
    assert 'nohost' in str(raised.value)


def two_volumes(count=1):
    return make_spec(count=count, node_types={'small': {
        'memory_mb': 128, 'vcpus': 1,
        'volumes': [{'capacity': '1GiB'}, {'capacity': '1GiB'}],
        'physical_networks': ['physnet1']}})


def node_task(conductor, spec, name):
    """A ConvergeNodes of node ``name`` alone in a deploy of ``spec``,
    planned and recorded (not run), and its operation id."""
    operation_id, plan = test_flows.planned(conductor, spec)
    [entry] = [e for e in plan['nodes'] if e['name'] == name]
    return nodes.ConvergeNodes('node:hv1:0', [entry],
                               reconcile.bmc_passwords(spec),
                               False), operation_id


def test_revert_without_a_result_follows_the_record(conductor, hypervisor):
    """A task that never finished is reverted with no result: what it had
    recorded as being created is removed, nothing else."""
    conductor.deployments.deploy(make_spec(count=1))
    deployed = dict(hypervisor.things)
    recorded = resources(conductor)
    task, operation_id = node_task(conductor, two_volumes(), 'tk0')
    # It recorded what it asks for; the agent made the new volume, then
    # the conductor died.
    conductor.db.begin_resources('unit', 'hv1', operation_id,
                                 nodes.node_resources(task.entries[0]['new']),
                                 node=task.entries[0]['uuid'])
    hypervisor.things[('volume', 'tk0vol1')] = 1
    task.revert(None, operation_id=operation_id, cluster='unit')
    assert ('volume', 'tk0vol1') not in hypervisor.things
    assert conductor.db.get_resource('hv1', 'volume', 'tk0vol1') is None
    # Recorded as present before: kept.
    assert hypervisor.things == deployed
    assert resources(conductor) == recorded


def test_request_is_sent_again_until_the_agent_answers(conductor, conf,
                                                       hypervisor):
    """An agent that comes back within the retry window just answers."""
    from hostagent import server as hostagent_server
    conductor.agents.timeout = 0.3
    conductor.agents.retries = 3
    conf.set_override('host', 'late', group='hostagent')
    late = hostagent_server.HostAgent(conf, conductor.bus)
    timer = threading.Timer(0.4, late.start)
    timer.start()
    try:
        assert conductor.agents.request(
            'late', 'remove_bmc', 'late-1', domain='x',
            owner='o') == {'changed': False}
    finally:
        timer.join()
        late.stop()


def test_hypervisor_delete_refuses_one_up_or_hosting_nodes(conductor,
                                                           hypervisor,
                                                           monkeypatch):
    conductor.deployments.deploy(make_spec(count=1))
    with pytest.raises(exceptions.HypervisorInUse) as raised:
        conductor.registry.delete_hypervisor('hv1')
    message = str(raised.value)
    assert 'its hostagent is up' in message
    assert 'cluster(s) unit' in message
    monkeypatch.setattr(conductor.registry, 'hypervisor_state',
                        lambda row: 'down')
    with pytest.raises(exceptions.HypervisorInUse) as raised:
        conductor.registry.delete_hypervisor('hv1')
    assert 'is up' not in str(raised.value)
    conductor.teardowns.teardown('unit')
    conductor.registry.delete_hypervisor('hv1')
    assert conductor.registry.list_hypervisors() == []
    with pytest.raises(exceptions.HypervisorNotFound):
        conductor.registry.delete_hypervisor('hv1')


def test_agent_answer_decides_what_a_revert_removes(conductor, hypervisor):
    """A volume the agent reports as already there (not created by this
    request) is kept by the revert; what it created is removed."""
    conductor.deployments.deploy(make_spec(count=1))
    db = conductor.db
    db.delete_resource('hv1', 'volume', 'tk0vol0')
    task, operation_id = node_task(conductor, two_volumes(), 'tk0')
    result = task.execute(operation_id=operation_id, cluster='unit')
    assert result['nodes'][task.entries[0]['uuid']]['created'] == [
        ('volume', 'tk0vol1')]
    assert db.get_resource('hv1', 'volume', 'tk0vol0').operation is None
    assert db.get_resource('hv1', 'volume', 'tk0vol1').operation == (
        operation_id)
    task.revert(result, operation_id=operation_id, cluster='unit')
    assert ('volume', 'tk0vol0') in hypervisor.things
    assert db.get_resource('hv1', 'volume', 'tk0vol0').operation is None
    assert ('volume', 'tk0vol1') not in hypervisor.things
    assert db.get_resource('hv1', 'volume', 'tk0vol1') is None
    assert db.get_node(task.entries[0]['uuid']).volumes == [
        {'name': 'tk0vol0', 'capacity': 1024 ** 3, 'format': 'qcow2'}]


def test_unanswered_request_keeps_its_record_for_the_revert(conductor,
                                                            hypervisor,
                                                            monkeypatch):
    """No answer (the agent made the node, the reply was lost): the
    records stay, and the revert asks for removal by owner mark; a
    thing the agent then finds not ours is left, its record dropped."""
    conductor.deployments.deploy(make_spec(count=1))
    db = conductor.db
    real_request_all = conductor.agents.request_all

    def lost_replies(host, method, calls, **kwargs):
        real_request_all(host, method, calls, **kwargs)
        return [exceptions.AgentTimeout(host=host, method=method, timeout=0)
                for _ in calls]

    def make_tk1():
        task, operation_id = node_task(conductor, make_spec(count=2), 'tk1')
        monkeypatch.setattr(conductor.agents, 'request_all', lost_replies)
        with pytest.raises(exceptions.NodesNotDeployed, match='tk1') as e:
            task.execute(operation_id=operation_id, cluster='unit')
        assert isinstance(e.value.__cause__, exceptions.AgentTimeout)
        monkeypatch.setattr(conductor.agents, 'request_all',
                            real_request_all)
        return task, operation_id

    task, operation_id = make_tk1()
    assert {(r.kind, r.state, r.operation)
            for r in db.list_resources(node=task.entries[0]['uuid'])} == {
        (kind, 'creating', operation_id)
        for kind in ('volume', 'port', 'domain', 'bmc')}
    task.revert(None, operation_id=operation_id, cluster='unit')
    assert hypervisor.names('domain') == ['tk0']
    assert db.list_resources(node=task.entries[0]['uuid']) == []
    assert [n.name for n in db.list_nodes()] == ['tk0']

    # The same, but somebody else's domain now stands there.
    task, operation_id = make_tk1()
    real_remove = hypervisor.remove

    def refuse(kind, name):
        if (kind, name) == ('domain', 'tk1'):
            raise fakes.conflict(kind, name)
        return real_remove(kind, name)

    monkeypatch.setattr(hypervisor, 'remove', refuse)
    task.revert(None, operation_id=operation_id, cluster='unit')
    assert hypervisor.names('domain') == ['tk0', 'tk1']
    assert hypervisor.names('volume') == ['tk0vol0']
    assert db.list_resources(node=task.entries[0]['uuid']) == []
    assert [n.name for n in db.list_nodes()] == ['tk0']


# A submit that cannot start its operation


def test_unannounced_deploy_ends_failed_and_forgets_the_cluster(
        conductor, hypervisor, monkeypatch):
    def broken(event_type, cluster, payload, error=False):
        if event_type.endswith('.start'):
            raise OSError('bus down')

    emit = conductor.notifier.emit
    monkeypatch.setattr(conductor.notifier, 'emit', broken)
    with pytest.raises(exceptions.ConductorBusy) as raised:
        conductor.deployments.submit(make_spec(count=1))
    assert 'bus down' in str(raised.value)
    [operation] = conductor.records.list_operations()
    assert operation['state'] == 'failed'
    assert 'did not start it' in operation['error']
    assert 'bus down' in operation['error']
    assert conductor.db.get_cluster('unit') is None
    assert hypervisor.things == {}
    # The cluster is not left locked. (Only this test's patch goes:
    # undo() would also undo the fake hypervisor's.)
    monkeypatch.setattr(conductor.notifier, 'emit', emit)
    assert conductor.deployments.deploy(make_spec(count=1))['changed']


def test_submit_racing_a_stop_ends_failed_and_keeps_the_cluster(
        conductor, hypervisor, monkeypatch):
    conductor.deployments.deploy(make_spec(count=1))

    def shut(*args, **kwargs):
        # stop() shut the pool down after the accepting check.
        raise RuntimeError('cannot schedule new futures after shutdown')

    monkeypatch.setattr(conductor.operations._pool, 'submit', shut)
    with pytest.raises(exceptions.ConductorBusy) as raised:
        conductor.teardowns.submit('unit')
    assert 'shutting down' in str(raised.value)
    operation = conductor.records.list_operations()[-1]
    assert (operation['kind'], operation['state']) == ('teardown', 'failed')
    assert 'shutting down' in operation['error']
    # Deployed before: the record stays, as do its things.
    assert conductor.db.get_cluster('unit').state == 'deployed'
    assert hypervisor.names('domain') == ['tk0']
    monkeypatch.undo()
    conductor.teardowns.teardown('unit')


def test_waiting_on_a_resume_cancelled_by_stop_gives_the_reason(
        conf, hypervisor):
    from tenks.cli import embedded
    conf.set_override('max_operations', 1, group='conductor')
    release = threading.Event()
    real_ensure = hypervisor.ensure

    def slow_ensure(kind, name, value=True):
        if kind == 'pool' and name == 'tenks-first':
            assert release.wait(10)
        return real_ensure(kind, name, value)

    hypervisor.ensure = slow_ensure
    with embedded.embedded(conf) as conductor:
        first = conductor.deployments.submit(make_spec(count=1,
                                                       cluster='first'))
        # An operation a dead process left running, resumed behind it.
        conductor.db.save_cluster('second', make_spec(
            count=1, cluster='second', bridge_prefix='brs'), 'scheduled')
        second = conductor.operations.create('deploy', 'second')
        conductor.resume_interrupted()
        outcome = []
        waiter = threading.Thread(target=lambda: outcome.append(
            pytest.raises(exceptions.OperationFailed,
                          conductor.operations.wait, second)))
        waiter.start()
        time.sleep(0.2)  # the waiter waits before the stop cancels
        stopper = threading.Thread(target=conductor.stop, args=(10,))
        stopper.start()
        waiter.join(10)
        release.set()
        stopper.join(10)
        assert conductor.records.get_operation(first)['state'] == 'succeeded'
    message = str(outcome[0].value)
    assert 'Deploy of cluster second failed' in message
    assert 'stopped before it could resume it' in message
    # Handed back as it was, for the next start to resume.
    assert conductor.records.get_operation(second)['state'] == 'running'


def test_teardown_leaves_a_replaced_thing_and_warns(conductor, hypervisor,
                                                   monkeypatch):
    conductor.deployments.deploy(make_spec(count=2))
    real_remove = hypervisor.remove

    def remove(kind, name):
        if (kind, name) == ('domain', 'tk1'):
            raise fakes.conflict(kind, name)
        return real_remove(kind, name)

    monkeypatch.setattr(hypervisor, 'remove', remove)
    result = conductor.teardowns.teardown('unit')
    [warning] = result['warnings']
    assert warning.startswith('Left parts of node tk1 on hv1: they are no '
                              'longer ours')
    assert 'domain tk1' in warning and 'somebody else made it' in warning
    assert list(hypervisor.things) == [('domain', 'tk1')]
    assert conductor.db.get_cluster('unit') is None
    assert conductor.db.list_resources() == []
    assert conductor.db.list_nodes() == []
    operation = conductor.records.list_operations()[-1]
    assert operation['result']['warnings'] == [warning]


def test_waiting_on_an_operation_that_has_ended_gives_its_outcome(
        conductor, hypervisor):
    """wait() of an operation that ended before the call (a caller
    waiting on several in turn) reads it from its record."""
    operation_id = conductor.deployments.submit(make_spec(count=1))
    first = conductor.operations.wait(operation_id)
    again = conductor.operations.wait(operation_id)
    assert again['operation'] == operation_id
    assert again['changed'] == first['changed']
    hypervisor.fail[('domain', 'tk1')] = exceptions.DriverError(
        driver='fake', action='define tk1', reason='disk full')
    failed = conductor.deployments.submit(make_spec(count=2))
    with pytest.raises(exceptions.OperationFailed):
        conductor.operations.wait(failed)
    with pytest.raises(exceptions.OperationFailed, match='disk full'):
        conductor.operations.wait(failed)
    with pytest.raises(exceptions.OperationNotFound):
        conductor.operations.wait('no-such-operation')


def test_a_restarted_conductor_waits_for_the_hostagents_it_knew(
        conductor, monkeypatch):
    """Before resuming, a conductor that starts waits until the agents
    that were up re-register (it asked them to) and answer, not for one
    long down, and for at most the time given."""
    from conductor import hypervisors
    db = conductor.db
    for host in ('hva', 'hvb', 'gone'):
        db.register_hypervisor(host, {})
    long_ago = datetime.datetime.now(datetime.timezone.utc) - (
        datetime.timedelta(days=1))
    with db.engine.begin() as connection:
        connection.execute(sa.update(models.Hypervisor.table).where(
            models.Hypervisor.table.c.host == 'gone').values(
                last_seen=long_ago))
    started = datetime.datetime.now(datetime.timezone.utc)
    registry = hypervisors.HypervisorRegistry(
        conductor.conf, types.SimpleNamespace(embedded=False), db, None)
    for host in ('hva', 'hvb', 'hv1'):
        db.register_hypervisor(host, {})  # not answered yet

    def registered_and_answered():
        # hv1 is the embedded conductor's own hostagent.
        for host in ('hva', 'hvb', 'hv1'):
            db.register_hypervisor(host, {})
            db.hypervisor_answered(host)

    timer = threading.Timer(0.5, registered_and_answered)
    timer.start()
    begun = time.monotonic()
    registry.wait_for_registrations(started, timeout=10, poll=0.05)
    assert 0.4 < time.monotonic() - begun < 5
    # Nobody registers again: the wait ends at its timeout.
    begun = time.monotonic()
    registry.wait_for_registrations(
        datetime.datetime.now(datetime.timezone.utc), timeout=0.5,
        poll=0.05)
    assert 0.4 < time.monotonic() - begun < 5


def test_prune_forgets_ended_flows_then_what_the_retention_lets_go(
        conductor, hypervisor, conf):
    from tenks.db import flow_tables
    db = conductor.db
    hypervisor.fail[('domain', 'tk1')] = exceptions.DriverError(
        driver='fake', action='define tk1', reason='disk full')
    with pytest.raises(exceptions.OperationFailed):
        conductor.deployments.deploy(make_spec(count=2))
    del hypervisor.fail[('domain', 'tk1')]
    conductor.deployments.deploy(make_spec(count=2))
    # A flow of an operation still running (a dead process's) stays.
    running = conductor.operations.create('deploy', 'unit')
    with db.engine.begin() as connection:
        connection.execute(flow_tables.LOGBOOKS.insert().values(
            uuid=running, name='deploy:unit'))

    def count(table):
        with db.engine.connect() as connection:
            return connection.scalar(sa.select(sa.func.count()).select_from(
                table))

    assert count(flow_tables.LOGBOOKS) == 3
    assert conductor.prune() == {'flows': 2, 'operations': 0, 'events': 0,
                                 'requests': 0}
    assert count(flow_tables.LOGBOOKS) == 1
    assert count(flow_tables.ATOMS) == count(flow_tables.FLOWS) == 0
    # Ended more than operation_retention_days ago: forgotten.
    old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(
        days=8)
    ended = [o.id for o in db.list_operations() if o.id != running]
    with db.engine.begin() as connection:
        connection.execute(sa.update(models.Operation.table).where(
            models.Operation.table.c.id == ended[0]).values(
                finished_at=old))
        connection.execute(sa.update(models.Event.table).values(
            timestamp=old))
    pruned = conductor.prune()
    assert (pruned['operations'], pruned['events'] > 0) == (1, True)
    assert sorted(o.id for o in db.list_operations()) == sorted(
        ended[1:] + [running])
    assert db.list_events() == []
    # 0: kept for ever.
    conf.set_override('operation_retention_days', 0, group='conductor')
    with db.engine.begin() as connection:
        connection.execute(sa.update(models.Operation.table).values(
            finished_at=old))
    assert conductor.prune() == {'flows': 0}
    assert len(db.list_operations()) == 2


def test_flow_store_forgets_a_flow_once_it_has_run(conductor, hypervisor):
    """What the flow store remembers having written of a flow goes when
    its run ends, failed or not: a conductor's memory does not grow with
    every operation it ran."""
    memory = conductor.runner.backend.get_connection()
    conductor.deployments.deploy(make_spec(count=1))
    assert memory._written == {} and memory._atoms == {}
    hypervisor.fail[('domain', 'tk1')] = exceptions.DriverError(
        driver='fake', action='define tk1', reason='disk full')
    with pytest.raises(exceptions.OperationFailed):
        conductor.deployments.deploy(make_spec(count=2))
    assert memory._written == {} and memory._atoms == {}


def test_showing_operations_never_reads_their_plans(conductor, hypervisor):
    """Callers poll operations while they run: what they read must not
    grow with the cluster, as a deploy's plan (every node) does."""
    operation_id = conductor.deployments.submit(make_spec(count=2))
    conductor.operations.wait(operation_id)
    assert conductor.db.get_operation(operation_id).plan
    statements = []

    def seen(conn, cursor, statement, *args):
        statements.append(statement)

    sa.event.listen(conductor.db.engine, 'before_cursor_execute', seen)
    try:
        shown = conductor.records.get_operation(operation_id)
        [listed] = conductor.records.list_operations()
    finally:
        sa.event.remove(conductor.db.engine, 'before_cursor_execute', seen)
    assert shown['state'] == listed['state'] == 'succeeded'
    assert 'plan' not in shown and shown['progress']
    assert statements and not any(
        'tenks_operations."plan"' in s for s in statements), statements
