"""Registrations are cast by anybody on the bus: a hypervisor takes nodes
only once a hostagent has answered as it (distributed mode)."""

import datetime
import types

import pytest
import sqlalchemy as sa

from conductor import hypervisors
from conductor import waiters
from tenks import exceptions
from tenks.db import api as db_api
from tests.unit.test_db import upgraded_engine


class Casts:
    """The hostagent client: keeps what it casts."""

    def __init__(self):
        self.sent = []

    def cast(self, host, method, request_id, reply_to, **kwargs):
        self.sent.append((host, method, request_id))


@pytest.fixture
def registry(conf, tmp_path):
    agents = types.SimpleNamespace(
        api=Casts(), waiters=waiters.Waiters(), conductor_host='c1',
        timeout=10)
    db = db_api.StateDB(upgraded_engine(tmp_path))
    return hypervisors.HypervisorRegistry(
        conf, types.SimpleNamespace(embedded=False), db, agents)


def states(registry):
    return {h['host']: h['state'] for h in registry.list_hypervisors()}


def answer(registry, host, **outcome):
    """The hostagent of ``host`` answers the check sent to it last."""
    request_id = [r for h, _, r in registry.agents.api.sent if h == host][-1]
    assert registry.agents.waiters.complete(request_id, host, **outcome)


def test_a_registration_nobody_answers_for_gets_no_node(registry):
    registry.register_agent('ghost', {'host': 'ghost', 'cpus': 64})
    assert states(registry) == {'ghost': 'unverified'}
    with pytest.raises(exceptions.NoValidHost) as refused:
        registry.hypervisors()
    assert str(refused.value) == (
        'No valid host for any node: no hostagent is up; ghost registered '
        'but never answered a request the conductor sent: a hypervisor '
        'takes nodes once its hostagent answers as it (is it running, on '
        'this bus?)')
    [(host, method, _)] = registry.agents.api.sent
    assert (host, method) == ('ghost', 'inspect')

    # Each heartbeat asks again; one answer is awaited at a time.
    registry.register_agent('ghost', {'host': 'ghost', 'cpus': 64})
    assert len(registry.agents.api.sent) == 2
    assert len(registry.agents.waiters._futures) == 1
    assert states(registry) == {'ghost': 'unverified'}


def test_a_hypervisor_is_used_once_its_hostagent_answers(registry):
    registry.register_agent('hv1', {'host': 'hv1'})
    registry.register_agent('ghost', {'host': 'ghost'})
    answer(registry, 'hv1', result={'host': 'hv1'})
    assert states(registry) == {'ghost': 'unverified', 'hv1': 'up'}
    assert registry.hypervisors() == ['hv1']
    # Heartbeats of a hypervisor that answered ask nothing more.
    registry.register_agent('hv1', {'host': 'hv1'})
    assert len(registry.agents.api.sent) == 2
    # An error is an answer too: a hostagent received the check.
    registry.register_agent('ghost', {'host': 'ghost'})
    answer(registry, 'ghost', error={'type': 'HypervisorUnavailable',
                                     'message': 'no libvirt'})
    assert states(registry)['ghost'] == 'up'


def test_a_hypervisor_back_from_down_answers_again(registry):
    """Its name may be taken by somebody else's cast meanwhile."""
    registry.register_agent('hv1', {'host': 'hv1'})
    answer(registry, 'hv1', result={})
    long_ago = datetime.datetime.now(datetime.timezone.utc) - (
        datetime.timedelta(days=1))
    registry.db._write(sa.update(db_api.HYPERVISORS).values(
        last_seen=long_ago))
    assert states(registry) == {'hv1': 'down'}
    registry.register_agent('hv1', {'host': 'hv1'})
    assert states(registry) == {'hv1': 'unverified'}
    assert len(registry.agents.api.sent) == 2
    answer(registry, 'hv1', result={})
    assert states(registry) == {'hv1': 'up'}
