"""Lifecycle events: recorded in the state database, sent on the bus.

Other services listen with an oslo.messaging notification listener on
the topics of ``[oslo_messaging_notifications] topics`` (default
``tenks_notifications``; event types ``tenks.cluster.deploy.
start|end|error``, ``tenks.cluster.teardown.*``, ``tenks.node.create.end``,
``tenks.node.delete.end``), sent by ``[oslo_messaging_notifications]
driver`` (default ``messagingv2``); ``tenks events`` shows the recorded
ones.
"""

import oslo_messaging as messaging


class Notifier:

    def __init__(self, bus, db, publisher_id):
        # Embedded, nobody can listen: the events are only recorded.
        # Otherwise driver and topics are [oslo_messaging_notifications]'s.
        driver = 'noop' if bus.embedded else None
        self._notifier = messaging.Notifier(
            bus.notification_transport, publisher_id=publisher_id,
            driver=driver)
        self.db = db

    def emit(self, event_type, cluster, payload, error=False):
        event = self.event(event_type, cluster, payload, error)
        self.db.add_event(**event)
        self.send(event)

    @staticmethod
    def event(event_type, cluster, payload, error=False):
        """An event as recorded, for a caller that records it in a
        transaction of its own and then sends it (:meth:`send`)."""
        return {'event_type': event_type,
                'priority': 'error' if error else 'info',
                'cluster': cluster, 'payload': dict(payload, cluster=cluster)}

    def send(self, event):
        """Send a recorded ``event`` on the bus."""
        getattr(self._notifier, event['priority'])(
            {}, event['event_type'], event['payload'])


def listener(bus, endpoint, pool=None):
    """A notification listener calling ``endpoint.info``/``error``, on
    the first topic the notifier sends to (each event goes to every
    topic: listening to all would show it several times)."""
    topic = bus.conf.oslo_messaging_notifications.topics[0]
    return messaging.get_notification_listener(
        bus.notification_transport, [messaging.Target(topic=topic)],
        [endpoint], pool=pool)


def node_payload(node):
    """What other services get to know of a node (a record, or its dict)
    in its events."""
    if not isinstance(node, dict):
        node = node.as_dict()
    return {'name': node['name'], 'uuid': node['uuid'],
            'hypervisor': node['hypervisor'], 'bmc_type': node['bmc_type'],
            'bmc_address': node['bmc_address'],
            'bmc_port': node['bmc_port'],
            'bmc_system_id': node.get('bmc_system_id'),
            'macs': [nic['mac'] for nic in node['nics']]}
