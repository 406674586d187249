"""RemoveNodes' records: what each hostagent removed is forgotten, the
last host's with the node's record in one transaction, and only once the
hostagent answered; the nodes of a task are asked for at once, and one
that fails costs the others nothing."""

import pytest
import sqlalchemy as sa

from flows import context
from flows import nodes
from tenks import exceptions
from tenks import notifier
from tenks.db import api as db_api
from tests.unit.test_db import upgraded_engine
from tests.unit.test_node_listing import node


class Agents:
    """Hostagents that answer remove_node, but ``failing``'s with an
    error (for every node, or for node ``failing_node``), and
    ``conflicting``'s with a ResourceConflict."""

    def __init__(self, failing=None, failing_node=None, conflicting=None):
        self.failing = failing
        self.failing_node = failing_node
        self.conflicting = conflicting
        self.asked = []

    def request_all(self, host, method, calls, operation=None,
                    answered=None):
        assert method == 'remove_node'
        self.asked.append((host, [kwargs['node']['name']
                                  for _, _, kwargs in calls]))
        answers = [self._answer(host, kwargs['node']['name'])
                   for _, _, kwargs in calls]
        for i, answer in enumerate(answers):
            if answered is not None:
                answered(i, answer)
        return answers

    def _answer(self, host, name):
        if host == self.failing and self.failing_node in (None, name):
            return exceptions.DriverError(
                'no volume could be removed on %s' % host)
        if host == self.conflicting:
            return exceptions.ResourceConflict(
                kind='domain', name=name, owner='o', reason='marked x')
        return {'changed': True}


class Sent:

    def __init__(self):
        self.events = []

    event = staticmethod(notifier.Notifier.event)

    def send(self, event):
        self.events.append(event)


def entry(record, rows):
    return {'uuid': record['uuid'], 'name': record['name'],
            'hypervisor': record['hypervisor'],
            'rows': [r for r in rows if r['node'] == record['uuid']]}


@pytest.fixture
def database(tmp_path):
    engine = upgraded_engine(tmp_path)
    yield db_api.StateDB(engine)
    context.install(None)
    engine.dispose()


def add_node(db, index, hosts):
    """A node of cluster c on hv2 whose domain and BMC are recorded on
    its host, and whose BMC is still recorded on the others of
    ``hosts`` (a move could not remove it)."""
    record = dict(node('c', index), hypervisor='hv2')
    db.add_nodes([record])
    name = record['name']
    domain = ('domain', name, {'name': name, 'owner': 'o'})
    bmc = ('bmc', name, {'domain': name, 'owner': 'o'})
    for host in hosts:
        db.begin_resources('c', host, 'op', [domain, bmc] if host == 'hv2'
                           else [bmc], node=record['uuid'], new=True)
    return record


@pytest.fixture
def moved_node(database):
    """A node moved from hv1 to hv2 whose old host kept its BMC: its
    records, the database and clients to remove it."""
    record = add_node(database, 1, ['hv1', 'hv2'])
    rows = [r.as_dict() for r in database.list_resources('c')]
    return database, record, rows


def install(db, agents):
    sent = Sent()
    context.install(context.Clients(db=db, agents=agents, notifier=sent,
                                    cloud=None))
    return sent


def test_the_last_hosts_records_go_with_the_node(moved_node):
    db, record, rows = moved_node
    sent = install(db, Agents())
    commits = []
    sa.event.listen(db.engine, 'commit', lambda conn: commits.append(1))
    [task] = nodes.removal_tasks([entry(record, rows)])
    assert task.execute('op2', 'c') == {
        'changed': True, 'warnings': [],
        'changed_names': ['remove:%s' % record['uuid']]}
    # hv1's records, then hv2's with the node's and its event.
    assert len(commits) == 2
    assert db.list_resources('c') == []
    assert db.get_node(record['uuid']) is None
    assert [e['event_type'] for e in sent.events] == [
        'tenks.node.delete.end']


@pytest.mark.parametrize('failing, left', [
    ('hv1', ['hv1', 'hv2', 'hv2']), ('hv2', ['hv2', 'hv2'])])
def test_records_stay_until_their_hostagent_answers(moved_node, failing,
                                                    left):
    db, record, rows = moved_node
    sent = install(db, Agents(failing))
    [task] = nodes.removal_tasks([entry(record, rows)])
    with pytest.raises(exceptions.NodesNotRemoved, match=record['name']):
        task.execute('op2', 'c')
    assert sorted(r.hypervisor for r in db.list_resources('c')) == left
    assert db.get_node(record['uuid']).state == 'failed'
    assert sent.events == []


def test_a_hosts_nodes_are_asked_for_at_once(database):
    records = [add_node(database, i, ['hv1', 'hv2']) for i in range(3)]
    rows = [r.as_dict() for r in database.list_resources('c')]
    agents = Agents()
    install(database, agents)
    [task] = nodes.removal_tasks([entry(r, rows) for r in records])
    assert task.steps == 3
    task.execute('op2', 'c')
    # One request for each host, carrying every node: old hosts first.
    names = sorted(r['name'] for r in records)
    assert [(host, sorted(asked)) for host, asked in agents.asked] == [
        ('hv1', names), ('hv2', names)]
    assert database.list_resources('c') == []


def test_a_failed_node_costs_the_others_nothing(database):
    records = [add_node(database, i, ['hv2']) for i in range(3)]
    rows = [r.as_dict() for r in database.list_resources('c')]
    failed = records[1]
    sent = install(database, Agents('hv2', failing_node=failed['name']))
    [task] = nodes.removal_tasks([entry(r, rows) for r in records])
    with pytest.raises(exceptions.NodesNotRemoved) as raised:
        task.execute('op2', 'c')
    assert '%s (%s): no volume could be removed' % (
        failed['name'], failed['uuid']) in str(raised.value)
    # The failed node keeps its records, marked failed (part of it may
    # be gone); the others went, each announced.
    assert {r.node for r in database.list_resources('c')} == {
        failed['uuid']}
    assert database.get_node(failed['uuid']).state == 'failed'
    assert [database.get_node(r['uuid']) for r in records
            if r is not failed] == [None, None]
    assert len(sent.events) == 2


def test_a_node_no_longer_ours_is_forgotten_with_a_warning(database):
    record = add_node(database, 1, ['hv2'])
    rows = [r.as_dict() for r in database.list_resources('c')]
    install(database, Agents(conflicting='hv2'))
    [task] = nodes.removal_tasks([entry(record, rows)])
    result = task.execute('op2', 'c')
    assert not result['changed'] and result['changed_names'] == []
    [warning] = result['warnings']
    assert warning.startswith('Left parts of node c1 on hv2')
    assert database.list_resources('c') == []
    assert database.get_node(record['uuid']) is None


class Steps:
    """An operation's progress: the steps told, with the nodes still
    recorded at each."""

    def __init__(self, db):
        self.db = db
        self.told = []

    def step(self, name, count=1):
        self.told.append((name, count, len(self.db.list_nodes())))


def test_each_node_removed_is_a_step_as_its_last_host_answers(database):
    """Told before the batch ends (its records go then): a node moved
    once its last host answered; a node not ours too; a failed one
    not."""
    moved = add_node(database, 0, ['hv1', 'hv2'])
    records = [moved] + [add_node(database, i, ['hv2']) for i in (1, 2)]
    rows = [r.as_dict() for r in database.list_resources('c')]
    install(database, Agents('hv2', failing_node=records[2]['name']))
    [task] = nodes.removal_tasks([entry(r, rows) for r in records])
    steps = Steps(database)
    with context.reporting('op2', steps):
        with pytest.raises(exceptions.NodesNotRemoved):
            task.execute('op2', 'c')
    assert steps.told == [(task.name, 1, 3), (task.name, 1, 3)]
    steps.told.clear()
    install(database, Agents(conflicting='hv2'))
    with context.reporting('op3', steps):
        [task] = nodes.removal_tasks([entry(records[2], rows)])
        task.execute('op3', 'c')
    assert steps.told == [(task.name, 1, 1)]


def test_nodes_are_split_by_host_and_batch():
    entries = [{'uuid': 'u%d' % i, 'name': 'n%d' % i, 'rows': [],
                'hypervisor': 'hv%d' % (i % 2)}
               for i in range(nodes.BATCH * 2 + 2)]
    tasks = nodes.removal_tasks(entries)
    assert [(t.name, t.steps) for t in tasks] == [
        ('remove:hv0:0', nodes.BATCH), ('remove:hv0:1', 1),
        ('remove:hv1:0', nodes.BATCH), ('remove:hv1:1', 1)]
    assert sorted(e['uuid'] for t in tasks for e in t.entries) == sorted(
        e['uuid'] for e in entries)
