"""What the bus does not take is sent again while it is awaited: a
hostagent request, a hostagent's result; and an event never waits for
the broker. Fakes stand for the bus that refuses; see
tests/functional/test_bus_faults.py for RabbitMQ itself."""

import threading
import time

import oslo_messaging as messaging
import pytest

from conductor import agents
from conductor import waiters
from tenks import exceptions
from tenks import notifier
from tenks import rpc
from tests.unit import fakes
from tests.unit import test_hostagent
from tests.unit import test_notifier

DOWN = messaging.MessageDeliveryFailure(
    'Unable to connect to AMQP server on 127.0.0.1:5672 after 1 tries')
NO_QUEUE = messaging.MessageUndeliverable(None, 'tenks', 'x', {})


@pytest.fixture(autouse=True)
def quick_resend(monkeypatch):
    monkeypatch.setattr(rpc, 'RESEND_INTERVAL', 0.01, raising=False)


class RefusingAgents:
    """A hostagent API whose bus refuses the casts with the errors of
    ``refusals``, one per cast, then takes them; the agent answers
    each cast taken, unless ``answer`` is False."""

    def __init__(self, waiters, refusals, answer=True):
        self.waiters = waiters
        self.refusals = list(refusals)
        self.answer = answer
        self.casts = 0

    def cast(self, host, method, request_id, reply_to, **kwargs):
        self.casts += 1
        if self.refusals:
            raise self.refusals.pop(0)
        if self.answer:
            self.waiters.complete(request_id, host, result={'done': True})


def agent_client(conf, refusals, timeout, retries=0, answer=True):
    client = agents.AgentClient(
        rpc.Bus(conf, url=rpc.EMBEDDED_TRANSPORT_URL), waiters.Waiters(),
        'c1', timeout, retries)
    client.api = RefusingAgents(client.waiters, refusals, answer)
    return client


def test_request_the_bus_does_not_take_is_sent_again(conf):
    """The broker down, then no queue for the agent (both restarting):
    the request goes once the bus takes it, without waiting for the
    agent_timeout."""
    client = agent_client(conf, [DOWN, NO_QUEUE], timeout=10)
    started = time.monotonic()
    assert client.request('hv1', 'audit', 'r1') == {'done': True}
    assert time.monotonic() - started < 5
    assert client.api.casts == 3


def test_request_no_copy_of_which_goes_gives_up_at_its_deadline(conf):
    client = agent_client(conf, [NO_QUEUE] * 1000, timeout=0.2, retries=1)
    started = time.monotonic()
    with pytest.raises(exceptions.AgentTimeout) as raised:
        client.request('hv1', 'audit', 'r1')
    assert time.monotonic() - started < 1
    assert str(raised.value) == (
        'Hostagent on hv1 did not answer audit within 0.4 s; its last copy '
        'could not be sent: the broker has no queue for hv1: it has not '
        'connected since the broker started')
    assert client.waiters._futures == {}


def test_answer_to_an_earlier_copy_ends_the_resending(conf):
    """The first copy went, unanswered within its timeout; the second is
    refused, and while it is sent again the answer to the first comes."""
    client = agent_client(conf, [], timeout=0.5, retries=1, answer=False)
    refusals = client.api.refusals

    def answer_later():
        refusals.extend([DOWN] * 1000)
        time.sleep(0.6)  # the second copy is refused meanwhile
        client.waiters.complete('r1', 'hv1', result={'done': 'first'})

    timer = threading.Timer(0.1, answer_later)
    timer.start()
    try:
        assert client.request('hv1', 'audit', 'r1') == {'done': 'first'}
    finally:
        timer.join()
    assert client.api.casts > 2


class RefusingReports(test_hostagent.Reports):
    """Reports the bus refuses for the conductors of ``refused`` (each:
    how many times; None: always)."""

    def __init__(self, refused):
        super().__init__()
        self.refused = refused
        self.tries = []

    def report_result(self, context, conductor, request_id, host,
                      **outcome):
        self.tries.append(conductor)
        left = self.refused.get(conductor, 0)
        if left is None or left > 0:
            if left:
                self.refused[conductor] = left - 1
            raise NO_QUEUE
        super().report_result(context, conductor, request_id, host,
                              **outcome)


VOLUME = test_hostagent.VOLUME
OUTCOME = {'result': {'created': True, 'changed': True}}


def test_result_the_bus_does_not_take_is_reported_again(conf, hypervisor):
    agent = test_hostagent.make_agent(conf)
    agent.conductor = RefusingReports({'cond-a': 2})
    agent.ensure_volume(test_hostagent.within(10), 'r1', 'cond-a', *VOLUME)
    assert agent.conductor.sent == [('cond-a', 'r1', OUTCOME)]
    assert agent.conductor.tries == ['cond-a'] * 3


def test_conductor_out_of_reach_gets_tries_until_the_deadline(
        conf, hypervisor, caplog):
    """The other conductor hears at once; the one out of reach is tried
    again until the request's deadline, then the agent gives up."""
    agent = test_hostagent.make_agent(conf)
    agent.conductor = RefusingReports({'cond-a': None})
    entered, release = fakes.block(agent.virt, 'ensure_volume')
    first = threading.Thread(target=agent.ensure_volume, args=(
        test_hostagent.within(0.5), 'r1', 'cond-a', *VOLUME))
    first.start()
    assert entered.wait(10)
    agent.ensure_volume(test_hostagent.within(0.5), 'r1', 'cond-b', *VOLUME)
    release.set()
    first.join(10)
    assert agent.conductor.sent == [('cond-b', 'r1', OUTCOME)]
    assert agent.conductor.tries.count('cond-a') > 2
    assert ('Could not report request r1 to cond-a before its deadline: '
            'the broker has no queue for cond-a') in caplog.text


def test_kept_outcome_the_bus_does_not_take_is_reported_again(
        conf, hypervisor):
    """A copy of a request that has ended gets its kept outcome, once
    the bus takes it."""
    agent = test_hostagent.make_agent(conf)
    agent.ensure_volume(test_hostagent.within(10), 'r1', 'cond-a', *VOLUME)
    agent.conductor = RefusingReports({'cond-a': 1})
    agent.ensure_volume(test_hostagent.within(10), 'r1', 'cond-a', *VOLUME)
    assert agent.conductor.sent == [('cond-a', 'r1', OUTCOME)]
    assert hypervisor.calls['ensure_volume'] == 1


def test_events_are_sent_with_a_bounded_retry():
    """An event the broker cannot take costs an operation a few
    reconnection attempts, not the broker's whole outage."""
    bus = test_notifier.make_bus('fake:///')
    sent = []
    bus.notification_transport._send_notification = (
        lambda target, ctxt, message, version, retry=None: sent.append(
            retry))
    notifier.Notifier(bus, test_notifier.Events(), 'test').emit(
        'tenks.cluster.deploy.start', 'c', {})
    [retry] = sent
    assert 0 <= retry <= 2
