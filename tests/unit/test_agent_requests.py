"""AgentClient.request_all: a batch of requests cast at once and awaited
by one thread, each answered, failed or timed out on its own."""

import pytest

from conductor import agents
from conductor import waiters as conductor_waiters
from tenks import exceptions


class Bus:
    """Hostagent casts: each recorded; once ``answer_after`` are cast,
    those ``answers`` (request id: result or error report) names are
    answered."""

    def __init__(self, waiters, answers, answer_after):
        self.waiters = waiters
        self.answers = answers
        self.answer_after = answer_after
        self.cast = []

    def __call__(self, host, method, request_id, conductor_host, **kwargs):
        self.cast.append(request_id)
        if len(self.cast) == self.answer_after:
            for answered, answer in self.answers.items():
                if 'type' in answer:
                    self.waiters.complete(answered, host, error=answer)
                else:
                    self.waiters.complete(answered, host, result=answer)


class Late:

    def __init__(self):
        self.kept = {}

    def remember(self, request_id, host, operation, late):
        self.kept[request_id] = late

    def forget(self, request_id):
        self.kept.pop(request_id)


class NoBus:
    """A bus that is never used: each test sets the cast."""

    @staticmethod
    def get_client(*args, **kwargs):
        return None


def client(answers, answer_after, retries=1):
    waiters = conductor_waiters.Waiters()
    late = Late()
    agent_client = agents.AgentClient(NoBus, waiters, 'c1', timeout=0.2,
                                      retries=retries, late_results=late)
    bus = Bus(waiters, answers, answer_after)
    agent_client.api.cast = bus
    return agent_client, bus, late


def test_all_are_cast_before_any_is_awaited():
    answers = {'r%d' % i: {'changed': True, 'i': i} for i in range(3)}
    agent_client, bus, late = client(answers, answer_after=3)
    assert agent_client.request_all(
        'hv1', 'remove_node', [('r%d' % i, None, {'node': i})
                               for i in range(3)]) == [
        {'changed': True, 'i': i} for i in range(3)]
    assert bus.cast == ['r0', 'r1', 'r2']
    assert late.kept == {}


def test_each_request_ends_on_its_own():
    answers = {'ok': {'changed': False},
               'bad': {'type': 'DriverError', 'message': 'no disk'}}
    agent_client, bus, late = client(answers, answer_after=3)
    ok, bad, lost = agent_client.request_all('hv1', 'remove_node', [
        ('ok', None, {}), ('bad', None, {}), ('lost', {'effects': []}, {})],
        operation='op')
    assert ok == {'changed': False}
    assert isinstance(bad, exceptions.DriverError)
    assert 'no disk (on hv1)' in str(bad)
    assert isinstance(lost, exceptions.AgentTimeout)
    # Only the unanswered one was sent again; its late effects are kept.
    assert bus.cast == ['ok', 'bad', 'lost', 'lost']
    assert late.kept == {'lost': {'effects': []}}


def test_each_answer_is_told_as_it_comes():
    answers = {'ok': {'changed': True},
               'bad': {'type': 'DriverError', 'message': 'no disk'}}
    agent_client, bus, _ = client(answers, answer_after=3, retries=0)
    told = []
    agent_client.request_all('hv1', 'remove_node', [
        ('lost', {'effects': []}, {}), ('bad', None, {}), ('ok', None, {})],
        operation='op', answered=lambda i, answer: told.append((i, answer)))
    # Each answered one once, its error or result; the lost one never.
    assert sorted(i for i, _ in told) == [1, 2]
    answered = dict(told)
    assert isinstance(answered[1], exceptions.DriverError)
    assert answered[2] == {'changed': True}


def test_one_request_raises_what_its_agent_reported():
    answers = {'bad': {'type': 'ResourceConflict', 'message': 'not ours'}}
    agent_client, _, _ = client(answers, answer_after=1, retries=0)
    with pytest.raises(exceptions.ResourceConflict, match='not ours'):
        agent_client.request('hv1', 'remove_bmc', 'bad', domain='x')
