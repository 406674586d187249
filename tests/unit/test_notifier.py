"""Events go where [oslo_messaging_notifications] says, as in other
OpenStack services; embedded, they are only recorded."""

import time

import oslo_messaging as messaging
import pytest
from oslo_messaging.notify import _impl_test

from tenks import conf as tenks_conf
from tenks import notifier
from tenks import rpc


class Events:
    """What the state database would record."""

    def __init__(self):
        self.added = []

    def add_event(self, event_type, priority, cluster, payload):
        self.added.append((event_type, priority, cluster))


def make_bus(url, **notifications):
    conf = tenks_conf.new_conf()
    rpc.register_opts(conf)
    conf([], default_config_files=[])
    for option, value in notifications.items():
        conf.set_override(option, value,
                          group='oslo_messaging_notifications')
    return rpc.Bus(conf, url=url)


class Endpoint:

    def __init__(self, topic, received):
        self.topic = topic
        self.received = received

    def _got(self, priority, event_type):
        self.received.append((self.topic, priority, event_type))

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self._got('info', event_type)

    def error(self, ctxt, publisher_id, event_type, payload, metadata):
        self._got('error', event_type)


def test_tenks_defaults():
    bus = make_bus('fake:///')
    conf = bus.conf.oslo_messaging_notifications
    assert (conf.driver, conf.topics) == (['messagingv2'],
                                          ['tenks_notifications'])


def test_events_go_to_the_configured_topics():
    bus = make_bus('fake:///', topics=['ops', 'audit'])
    received = []
    listeners = [messaging.get_notification_listener(
        bus.notification_transport, [messaging.Target(topic=topic)],
        [Endpoint(topic, received)]) for topic in ('ops', 'audit')]
    for listener in listeners:
        listener.start()
    try:
        events = Events()
        sender = notifier.Notifier(bus, events, 'tenks.conductor.c1')
        sender.emit('tenks.cluster.deploy.start', 'c', {})
        sender.emit('tenks.cluster.deploy.error', 'c', {}, error=True)
        expected = {(topic, priority, 'tenks.cluster.deploy.%s' % kind)
                    for topic in ('ops', 'audit')
                    for priority, kind in (('info', 'start'),
                                           ('error', 'error'))}
        for _ in range(100):
            if len(received) == len(expected):
                break
            time.sleep(0.05)
        assert sorted(received) == sorted(expected)
        assert events.added == [
            ('tenks.cluster.deploy.start', 'info', 'c'),
            ('tenks.cluster.deploy.error', 'error', 'c')]
    finally:
        for listener in listeners:
            listener.stop()
            listener.wait()
        bus.cleanup()


def test_events_go_through_the_configured_driver():
    bus = make_bus('fake:///', driver=['test'])
    _impl_test.reset()
    notifier.Notifier(bus, Events(), 'tenks.conductor.c1').emit(
        'tenks.cluster.teardown.error', 'c', {'reason': 'x'}, error=True)
    [(_, message, priority, _)] = _impl_test.NOTIFICATIONS
    assert (message['event_type'], priority) == (
        'tenks.cluster.teardown.error', 'ERROR')
    assert message['payload'] == {'reason': 'x', 'cluster': 'c'}


def test_embedded_only_records():
    bus = make_bus(rpc.EMBEDDED_TRANSPORT_URL, driver=['test'])
    _impl_test.reset()
    events = Events()
    notifier.Notifier(bus, events, 'tenks.conductor.c1').emit(
        'tenks.cluster.deploy.end', 'c', {})
    assert _impl_test.NOTIFICATIONS == []
    assert events.added == [('tenks.cluster.deploy.end', 'info', 'c')]
    bus.cleanup()


@pytest.mark.parametrize('configured, expected', [
    (None, 'fake://rpc/'), ('fake://events/', 'fake://events/')])
def test_notification_transport_url(monkeypatch, configured, expected):
    urls = []
    monkeypatch.setattr(messaging, 'get_notification_transport',
                        lambda conf, url, **kwargs: urls.append(url) or url)
    bus = make_bus('fake://rpc/', transport_url=configured)
    assert bus.notification_transport == expected
    assert urls == [expected]
