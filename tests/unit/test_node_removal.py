"""RemoveNode's records: what each hostagent removed is forgotten, the
last host's with the node's record in one transaction, and only once the
hostagent answered."""

import pytest
import sqlalchemy as sa

from flows import context
from flows import nodes
from tenks import notifier
from tenks.db import api as db_api
from tests.unit.test_db import upgraded_engine
from tests.unit.test_node_listing import node


class Agents:
    """Hostagents that answer remove_node, but ``failing``'s raise."""

    def __init__(self, failing=None):
        self.failing = failing
        self.asked = []

    def request(self, host, method, request_id, **kwargs):
        self.asked.append(host)
        if host == self.failing:
            raise RuntimeError('no answer from %s' % host)
        return {'changed': True}


class Sent:

    def __init__(self):
        self.events = []

    event = staticmethod(notifier.Notifier.event)

    def send(self, event):
        self.events.append(event)


@pytest.fixture
def moved_node(tmp_path):
    """A node moved from hv1 to hv2 whose old host kept its BMC: its
    records, the database and clients to remove it."""
    engine = upgraded_engine(tmp_path)
    db = db_api.StateDB(engine)
    record = node('c', 1)
    db.add_nodes([record])
    domain = ('domain', 'c1', {'name': 'c1', 'owner': 'o'})
    bmc = ('bmc', 'c1', {'domain': 'c1', 'owner': 'o'})
    for host, things in (('hv1', [bmc]), ('hv2', [domain, bmc])):
        db.begin_resources('c', host, 'op', things, node=record['uuid'],
                           new=True)
    rows = [r.as_dict() for r in db.list_resources('c')]
    yield db, record, rows
    context.install(None)
    engine.dispose()


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
    task = nodes.RemoveNode(record['uuid'], 'c1', 'hv2', rows)
    assert task.execute('op2', 'c') == {'changed': True, 'warnings': []}
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
    task = nodes.RemoveNode(record['uuid'], 'c1', 'hv2', rows)
    with pytest.raises(RuntimeError):
        task.execute('op2', 'c')
    assert sorted(r.hypervisor for r in db.list_resources('c')) == left
    assert db.get_node(record['uuid']).state == 'failed'
    assert sent.events == []
