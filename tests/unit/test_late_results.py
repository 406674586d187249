"""Agent requests never outlive their operation, and answers that come
after their waiter gave up still update the record: a conductor and a
hostagent on the in-memory bus, fake drivers."""

import logging
import threading
import time

import pytest

from conductor import conductor as tenks_conductor
from flows import base
from flows import nodes
from hostagent import server as hostagent_server
from tenks import exceptions
from tenks import rpc
from tests.unit import test_conductor
from tests.unit.conftest import make_spec

TIMEOUT = 0.3
# Long enough for the agent to begin a request under a loaded CI
# machine; the tests that need it begun check that it was.
BEGUN_TIMEOUT = 2


class Services:
    """A conductor and the hostagent of hv1, which can be stopped (its
    queue keeps what is cast to it) and started again."""

    def __init__(self, conf):
        self.conf = conf
        self.bus = rpc.Bus(conf, url=rpc.EMBEDDED_TRANSPORT_URL)
        self.agent = hostagent_server.HostAgent(conf, self.bus)
        self.conductor = tenks_conductor.Conductor(conf, self.bus)
        self.agent.start()
        self.conductor.start()

    def stop_agent(self):
        self.agent.stop()

    def start_agent(self):
        self.agent = hostagent_server.HostAgent(self.conf, self.bus)
        self.agent.start()

    def close(self):
        self.conductor.stop()
        self.agent.stop()
        self.bus.cleanup()


@pytest.fixture
def services(conf, hypervisor):
    services = Services(conf)
    try:
        yield services
    finally:
        services.close()


def eventually(check, timeout=10):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, 'never happened'
        time.sleep(0.02)


def node(db, name):
    return next((n for n in db.list_nodes() if n.name == name), None)


def test_requests_of_a_failed_teardown_never_run_later(services, hypervisor,
                                                       caplog):
    """The issue's case: a teardown fails because the hostagent is
    stopped; when it comes back, the requests it finds queued have
    expired: it drops them, and the node stays as recorded."""
    conductor = services.conductor
    conductor.deployments.deploy(make_spec(count=1))
    deployed = dict(hypervisor.things)
    services.stop_agent()
    conductor.agents.timeout = TIMEOUT
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.teardowns.teardown('unit')
    assert 'Hostagent on hv1 did not answer remove_node' in str(
        raised.value)
    [teardown] = [o for o in conductor.db.list_operations('unit')
                  if o.kind == 'teardown']

    caplog.set_level(logging.INFO, logger='hostagent.manager')
    services.start_agent()
    eventually(lambda: 'of operation %s unrun' % teardown.id in caplog.text
               or hypervisor.things != deployed)
    time.sleep(0.1)
    assert hypervisor.things == deployed
    assert hypervisor.calls['remove_node'] == 0
    db = conductor.db
    assert node(db, 'tk0').state == 'deployed'
    assert {r.kind for r in db.list_resources('unit')} == {
        'pool', 'bridge', 'volume', 'port', 'domain', 'bmc'}
    # Failed: a teardown that fails may have removed part of it.
    assert db.get_cluster('unit').state == 'failed'

    conductor.teardowns.teardown('unit')
    assert hypervisor.things == {}
    assert db.list_clusters() == []


def test_late_removal_forgets_the_node_and_announces_it(conductor,
                                                        hypervisor,
                                                        monkeypatch):
    """remove_node began before its deadline and ends after its waiter
    gave up: the node's records go, its delete.end is sent, and the
    cluster, short of a node, is failed."""
    conductor.deployments.deploy(make_spec(count=2))
    begun, release = threading.Event(), threading.Event()
    real_remove = hypervisor.remove

    def slow_remove(kind, name):
        if (kind, name) == ('domain', 'tk1'):
            begun.set()
            release.wait(30)
        return real_remove(kind, name)

    monkeypatch.setattr(hypervisor, 'remove', slow_remove)
    conductor.agents.timeout = BEGUN_TIMEOUT
    conductor.agents.retries = 0
    with pytest.raises(exceptions.OperationFailed):
        conductor.teardowns.teardown('unit')
    assert begun.is_set(), 'the agent never began removing tk1'
    db = conductor.db
    tk1 = node(db, 'tk1')
    assert node(db, 'tk0') is None
    assert db.list_resources(node=tk1.uuid)

    release.set()
    eventually(lambda: node(db, 'tk1') is None)
    assert db.list_resources(node=tk1.uuid) == []
    assert db.list_unanswered('unit') == []
    deleted = [e.payload['name'] for e in db.list_events('unit')
               if e.event_type == 'tenks.node.delete.end']
    assert deleted == ['tk0', 'tk1']
    assert db.get_cluster('unit').state == 'failed'
    assert hypervisor.names('domain') == []

    conductor.teardowns.teardown('unit')
    assert hypervisor.things == {}
    assert db.list_clusters() == []


def test_late_creation_is_recorded_present(conductor, hypervisor,
                                           monkeypatch):
    """ensure_node began before its deadline and ends after its waiter
    gave up; the revert's remove_node, waiting for the node's locks
    meanwhile, expires and is dropped. What the late answer says was
    made is recorded present, credited to the deploy that made it, so a
    teardown removes it."""
    conductor.deployments.deploy(make_spec(count=1))
    begun, release = threading.Event(), threading.Event()
    real_ensure = hypervisor.ensure

    def slow_ensure(kind, name, value=True):
        if (kind, name) == ('domain', 'tk1'):
            begun.set()
            release.wait(30)
        return real_ensure(kind, name, value)

    monkeypatch.setattr(hypervisor, 'ensure', slow_ensure)
    conductor.agents.timeout = BEGUN_TIMEOUT
    conductor.agents.retries = 0
    with pytest.raises(exceptions.OperationFailed):
        conductor.deployments.deploy(make_spec(count=2))
    assert begun.is_set(), 'the agent never began making tk1'
    db = conductor.db
    [deploy] = [o for o in db.list_operations('unit')
                if o.state == 'failed']
    tk1 = node(db, 'tk1')
    assert tk1.state == 'failed'
    assert {r.state for r in db.list_resources(node=tk1.uuid)} == {
        'creating'}

    release.set()
    eventually(lambda: {r.state for r in db.list_resources(
        node=tk1.uuid)} == {'present'})
    assert {(r.kind, r.operation) for r in db.list_resources(
        node=tk1.uuid)} == {(kind, deploy.id) for kind in (
            'volume', 'port', 'domain', 'bmc')}
    assert hypervisor.names('domain') == ['tk0', 'tk1']
    assert hypervisor.calls['remove_node'] == 0

    conductor.teardowns.teardown('unit')
    assert hypervisor.things == {}


def late_request(conductor, effect, things, operation='op-1'):
    """Record an unanswered request on hv1, as AgentClient does when it
    gives up; returns its id."""
    request_id = '%s/task/execute' % operation
    make = base.late_ensure if effect == 'ensure' else base.late_remove
    conductor.late_results.remember(request_id, 'hv1', operation,
                                    make('unit', things))
    return request_id


def test_an_answer_is_applied_once(conductor, hypervisor):
    """A second copy of the answer (a retry's, or one sent to two
    conductors) finds nothing to do; so does an error."""
    conductor.deployments.deploy(make_spec(count=1))
    db = conductor.db
    tk0 = node(db, 'tk0')
    things = [(r.kind, r.name) for r in db.list_resources(node=tk0.uuid)]
    request_id = late_request(conductor, 'remove', things)
    assert db.settle_unanswered(request_id, False) == []
    assert db.settle_unanswered(request_id, True) is None
    assert node(db, 'tk0') is not None

    request_id = late_request(conductor, 'remove', things)
    [forgotten] = db.settle_unanswered(request_id, True)
    assert forgotten.name == 'tk0'
    assert db.settle_unanswered(request_id, True) is None


def test_a_later_request_supersedes_a_late_answer(conductor, hypervisor):
    """A deploy that records the node again before a late removal's
    answer comes decides what the node is: that answer no longer
    removes its records."""
    conductor.deployments.deploy(make_spec(count=1))
    db = conductor.db
    tk0 = node(db, 'tk0')
    wanted = [(r.kind, r.name, r.remove_args)
              for r in db.list_resources(node=tk0.uuid)]
    request_id = late_request(conductor, 'remove',
                              [(k, n) for k, n, _ in wanted])
    db.begin_resources('unit', 'hv1', 'op-2', wanted, node=tk0.uuid)
    assert db.list_unanswered('unit') == []
    conductor.late_results.apply(request_id, 'hv1', {'changed': True})
    assert node(db, 'tk0') is not None
    assert len(db.list_resources(node=tk0.uuid)) == len(wanted)


def test_late_conflict_drops_the_records_of_a_removal(conductor,
                                                      hypervisor):
    """As a teardown does: what the agent found not ours is left, its
    record dropped; a late ensure that failed leaves the records as
    they were (what may exist stays recorded)."""
    conductor.deployments.deploy(make_spec(count=1))
    db = conductor.db
    request_id = late_request(conductor, 'ensure', [('bridge', 'brtenks0')])
    conductor.late_results.apply(request_id, 'hv1', error={
        'type': 'DriverError', 'message': 'boom'})
    assert db.get_resource('hv1', 'bridge', 'brtenks0') is not None
    request_id = late_request(conductor, 'remove', [('bridge', 'brtenks0')])
    conductor.late_results.apply(request_id, 'hv1', error={
        'type': 'ResourceConflict', 'message': 'not ours'})
    assert db.get_resource('hv1', 'bridge', 'brtenks0') is None


def test_late_ensure_credits_only_what_it_created(conductor, hypervisor):
    """A thing the agent says it did not create is not credited to the
    operation, so that operation's revert would not remove it."""
    conductor.deployments.deploy(make_spec(count=1))
    db = conductor.db
    tk0 = node(db, 'tk0')
    task, operation_id = test_conductor.node_task(
        conductor, test_conductor.two_volumes(), 'tk0')
    wanted = nodes.node_resources(task.entries[0]['new'])
    db.begin_resources('unit', 'hv1', operation_id, wanted, node=tk0.uuid)
    request_id = late_request(conductor, 'ensure',
                              [(k, n) for k, n, _ in wanted], operation_id)
    conductor.late_results.apply(request_id, 'hv1', {
        'changed': True, 'created': [], 'removed': []})
    row = db.get_resource('hv1', 'volume', 'tk0vol1')
    assert (row.state, row.operation) == ('present', None)
    request_id = late_request(conductor, 'ensure', [('volume', 'tk0vol1')],
                              operation_id)
    conductor.late_results.apply(request_id, 'hv1', {
        'changed': True, 'created': [['volume', 'tk0vol1']]})
    # Present already: a late answer changes no record that is.
    assert db.get_resource('hv1', 'volume', 'tk0vol1').operation is None


def test_answer_that_comes_as_the_request_gives_up_is_its_result(
        conductor, hypervisor, monkeypatch):
    """The waiter still stood when the answer came: the request returns
    it, and nothing is left to apply later."""
    conductor.agents.timeout = 0.05
    late_results = conductor.late_results
    real_remember = late_results.remember

    def answered_meanwhile(request_id, host, operation, late):
        real_remember(request_id, host, operation, late)
        conductor.waiters.complete(request_id, host,
                                   result={'changed': True})

    monkeypatch.setattr(late_results, 'remember', answered_meanwhile)
    assert conductor.agents.request(
        'nohost', 'remove_bmc', 'r1', late=base.late_remove(
            'unit', [('bmc', 'x')]), domain='x', owner='o') == {
        'changed': True}
    assert conductor.db.list_unanswered() == []
