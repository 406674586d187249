"""The embedded bus's transport: a consumer sleeps until a message for it
arrives, and wakes at once when the bus's servers stop."""

import socket
import threading
import time
import uuid

import kombu
import pytest

from tenks import memory_transport

memory_transport.install()


@pytest.fixture
def consumer():
    """A connection consuming a queue of its own: (connection, queue
    name, messages received)."""
    name = 'test-%s' % uuid.uuid4().hex
    received = []
    with kombu.Connection('memory://') as connection:
        queue = kombu.Queue(name, kombu.Exchange(name), routing_key=name)
        with connection.Consumer(
                queue, callbacks=[lambda body, message: (
                    received.append(body), message.ack())]):
            yield connection, name, received


def _publish_later(name, body, delay=0.2):
    def publish():
        time.sleep(delay)
        with kombu.Connection('memory://') as connection:
            connection.Producer().publish(
                body, exchange=kombu.Exchange(name), routing_key=name,
                declare=[kombu.Queue(name, kombu.Exchange(name),
                                     routing_key=name)])
    thread = threading.Thread(target=publish)
    thread.start()
    return thread


def _drain(connection, timeout):
    """Seconds ``connection.drain_events(timeout)`` took, and whether it
    timed out."""
    started = time.monotonic()
    try:
        connection.drain_events(timeout=timeout)
    except socket.timeout:
        return time.monotonic() - started, True
    return time.monotonic() - started, False


def test_a_message_wakes_its_consumer_at_once(consumer):
    connection, name, received = consumer
    publisher = _publish_later(name, {'n': 1})
    took, timed_out = _drain(connection, 30)
    publisher.join()
    assert not timed_out and took < 10
    assert received == [{'n': 1}]


def test_a_message_for_another_queue_is_not_delivered(consumer):
    connection, name, received = consumer
    other = 'test-%s' % uuid.uuid4().hex
    publisher = _publish_later(other, {'n': 2}, delay=0)
    took, timed_out = _drain(connection, 0.5)
    publisher.join()
    assert timed_out and took >= 0.5
    assert received == []


def test_a_stop_ends_every_drain_at_once(consumer):
    connection, name, received = consumer
    outcome = []
    drainer = threading.Thread(
        target=lambda: outcome.append(_drain(connection, 30)))
    drainer.start()
    time.sleep(0.2)
    with memory_transport.stopping():
        drainer.join(10)
        assert not drainer.is_alive()
        # And drains during the stop are short.
        assert _drain(connection, 30)[1]
    took, timed_out = outcome[0]
    assert timed_out and took < 10


def test_messages_still_arrive_while_stopping(consumer):
    connection, name, received = consumer
    with memory_transport.stopping():
        publisher = _publish_later(name, {'n': 3}, delay=0.05)
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            _drain(connection, 1)
        publisher.join()
    assert received == [{'n': 3}]


def test_a_fanout_message_wakes_the_consumers_of_every_bound_queue():
    exchange = kombu.Exchange('test-%s' % uuid.uuid4().hex, type='fanout')
    received = {}
    with kombu.Connection('memory://') as first, \
            kombu.Connection('memory://') as second:
        consumers = []
        for n, connection in enumerate((first, second)):
            queue = kombu.Queue('test-%s' % uuid.uuid4().hex, exchange)
            consumers.append(connection.Consumer(
                queue, callbacks=[lambda body, message, n=n: (
                    received.setdefault(n, body), message.ack())]))
            consumers[-1].consume()

        def publish():
            time.sleep(0.2)
            with kombu.Connection('memory://') as connection:
                connection.Producer().publish({'n': 4}, exchange=exchange)
        publisher = threading.Thread(target=publish)
        publisher.start()
        outcome = {}
        drainers = [threading.Thread(target=lambda n=n, c=c: outcome.update(
            {n: _drain(c, 30)})) for n, c in enumerate((first, second))]
        for drainer in drainers:
            drainer.start()
        for drainer in drainers + [publisher]:
            drainer.join(30)
        for consumer in consumers:
            consumer.cancel()
    assert received == {0: {'n': 4}, 1: {'n': 4}}
    assert all(not timed_out and took < 10
               for took, timed_out in outcome.values())
