"""oslo.messaging plumbing shared by the conductor and the hostagent.

A :class:`Bus` owns one RPC transport. Clients and servers made from it
use the same JSON-only convention: the request context is a plain dict
and every argument is JSON-serialisable, so nothing but data crosses the
bus. With no ``transport_url`` configured, Tenks runs embedded on the
in-memory transport: the same code path, in one process.
"""

import contextlib
import functools
import logging

from tenks import runtime

runtime.use_threads()

import oslo_messaging as messaging  # noqa: E402
from kombu import exceptions as kombu_exceptions  # noqa: E402
from oslo_config import cfg  # noqa: E402
from oslo_messaging import opts as messaging_opts  # noqa: E402
from oslo_messaging._metrics import client as metrics_client  # noqa: E402
from oslo_messaging._tracing import client as tracing_client  # noqa: E402
from oslo_messaging.notify import notifier as msg_notifier  # noqa: E402

from tenks import conf as tenks_conf  # noqa: E402
from tenks import exceptions  # noqa: E402
from tenks import memory_transport  # noqa: E402

CONDUCTOR_TOPIC = 'tenks-conductor'
HOSTAGENT_TOPIC = 'tenks-hostagent'
# The service of each topic: its [upgrade_levels] option caps the
# versions its clients send.
SERVICES = {CONDUCTOR_TOPIC: 'conductor', HOSTAGENT_TOPIC: 'hostagent'}
EMBEDDED_TRANSPORT_URL = 'kombu+memory:////'

# Errors that keep their type when a call crosses the bus.
ALLOWED_EXMODS = ['tenks.exceptions']

CONTROL_EXCHANGE = 'tenks'
NOTIFICATION_TOPIC = 'tenks_notifications'
NOTIFICATION_DRIVER = 'messagingv2'
# Reconnection attempts of a notification (Tenks' default of
# [oslo_messaging_notifications] retry; oslo.messaging's, -1, retries
# until the broker is back): an operation that sends one while the broker
# is down goes on after a few seconds, the event recorded but not sent.
NOTIFICATION_RETRY = 1

# Casts whose loss matters (hostagent requests and their results) are
# mandatory: a broker with no queue for their server (its consumer, or
# the broker itself, restarted and the queue is not declared again yet)
# refuses them, MessageUndeliverable, instead of dropping them. And they
# make one reconnection attempt: one the broker cannot take fails within
# seconds, MessageDeliveryFailure (or kombu's OperationalError, when the
# pool has to make a connection), instead of blocking until it is back
# (or failing anyway: kombu gives up on some connection errors whatever
# the retry). They go on a transport of their own (Bus.get_client
# delivered=True). Their senders send them again, every RESEND_INTERVAL
# s, for as long as they are awaited.
CAST_RETRY = 1
RESEND_INTERVAL = 1.0
UNDELIVERED = (messaging.MessageDeliveryFailure,
               messaging.MessageUndeliverable,
               kombu_exceptions.OperationalError)


def set_defaults():
    """Tenks' own defaults of oslo.messaging's options; also the hook
    oslo-config-generator calls, so the sample shows them."""
    messaging.set_transport_defaults(control_exchange=CONTROL_EXCHANGE)
    # oslo.messaging has no setter for these; its list_opts() hands out
    # copies of this list, so the defaults must be set here.
    cfg.set_defaults(msg_notifier._notifier_opts,
                     driver=[NOTIFICATION_DRIVER],
                     topics=[NOTIFICATION_TOPIC], retry=NOTIFICATION_RETRY)


set_defaults()


# oslo.messaging reads its tracing and metrics groups from whatever
# ConfigOpts it is given, but registers them only on the global one and
# leaves them out of its list for the sample config.
UNLISTED_OPTS = [
    ('oslo_messaging_tracing', tracing_client.oslo_messaging_tracing),
    ('oslo_messaging_metrics', metrics_client.oslo_messaging_metrics),
]


def register_opts(conf):
    """Register oslo.messaging's options on a private ConfigOpts, and
    [upgrade_levels], which the clients read."""
    for group, opts in messaging_opts.list_opts() + UNLISTED_OPTS:
        conf.register_opts(opts, group=group)
    tenks_conf.register_upgrade_levels(conf)


def configured_transport_url(conf):
    """``transport_url`` if set in a file or on the command line (the
    option's own default, ``rabbit://``, does not count)."""
    location = conf.get_location('transport_url').location
    if location == cfg.Locations.opt_default:
        return None
    return conf.transport_url


@contextlib.contextmanager
def capped(topic, method, arguments=()):
    """Raise VersionCapped, naming ``method`` (sent with the optional
    ``arguments``), for the RPCVersionCapError of a message that the
    client's [upgrade_levels] cap does not let it send."""
    try:
        yield
    except messaging.RPCVersionCapError as e:
        call = method
        if arguments:
            call += ' with %s' % ', '.join(sorted(arguments))
        raise exceptions.VersionCapped(
            call=call, method=method, version=e.version, cap=e.version_cap,
            service=SERVICES[topic]) from None


def delivered(client, **options):
    """``client.prepare(**options)``, sending mandatory casts with
    CAST_RETRY (see UNDELIVERED). ``client``: as get_client makes it
    with ``delivered`` (a prepared one does not take transport
    options)."""
    return client.prepare(
        retry=CAST_RETRY,
        transport_options=messaging.TransportOptions(at_least_once=True),
        **options)


def undelivered(error, server):
    """Why a cast to ``server`` raised ``error`` (one of UNDELIVERED)."""
    if isinstance(error, messaging.MessageUndeliverable):
        return ('the broker has no queue for %s: it has not connected '
                'since the broker started' % server)
    return 'the broker cannot be reached: %s' % error


class Bus:
    """One RPC transport and the clients and servers that use it."""

    def __init__(self, conf, url=None):
        register_opts(conf)
        self.conf = conf
        self.url = url or conf.transport_url or EMBEDDED_TRANSPORT_URL
        if self.embedded:
            memory_transport.install()
            # The in-memory broker has no host and no heartbeats: say so
            # once here instead of warning about it on every connection.
            conf.set_override('heartbeat_timeout_threshold', 0,
                              group='oslo_messaging_rabbit')
            logging.getLogger('kombu.connection').setLevel(logging.ERROR)
        self.transport = messaging.get_rpc_transport(
            conf, url=self.url, allowed_remote_exmods=ALLOWED_EXMODS)

    @functools.cached_property
    def notification_transport(self):
        """[oslo_messaging_notifications] transport_url, else the RPC
        transport's URL (always the latter when embedded)."""
        url = self.url
        if not self.embedded:
            url = self.conf.oslo_messaging_notifications.transport_url or url
        return messaging.get_notification_transport(
            self.conf, url=url, allowed_remote_exmods=ALLOWED_EXMODS)

    @property
    def embedded(self):
        return self.url == EMBEDDED_TRANSPORT_URL

    @functools.cached_property
    def delivery_transport(self):
        """The transport of the casts whose loss matters (see
        UNDELIVERED), every send on it bounded. A connection of a
        transport's pool reconnects, in its heartbeat thread and holding
        the connection, as many times as the send that made it asked:
        forever for a call's reply, and every cast that then takes the
        connection waits until the broker is back. (Embedded: the RPC
        transport; its broker never goes away.)"""
        if self.embedded:
            return self.transport
        return messaging.get_rpc_transport(
            self.conf, url=self.url, allowed_remote_exmods=ALLOWED_EXMODS)

    def get_client(self, topic, version, delivered=False):
        """A client of the API of ``topic`` at ``version``, which sends
        no message newer than [upgrade_levels] <its service>.
        ``delivered``: on the delivery transport, for casts that
        rpc.delivered prepares and nothing else."""
        target = messaging.Target(topic=topic, version=version)
        return messaging.get_rpc_client(
            self.delivery_transport if delivered else self.transport, target,
            version_cap=self.version_cap(topic, version))

    def version_cap(self, topic, version):
        service = SERVICES[topic]
        cap = self.conf.upgrade_levels[service]
        if cap is not None and cap.split('.')[0] != version.split('.')[0]:
            raise exceptions.ConfigError(
                reason='[upgrade_levels] %s = %s: the %s RPC API of this '
                       'Tenks is %s, and a cap must have its major version '
                       '(%s.x)' % (service, cap, service, version,
                                   version.split('.')[0]))
        return cap

    def get_server(self, topic, server, endpoints):
        target = messaging.Target(topic=topic, server=server)
        return messaging.get_rpc_server(
            self.transport, target, endpoints,
            access_policy=messaging.DefaultRPCAccessPolicy)

    def stopping(self):
        """A context in which this bus's servers stop at once (see
        memory_transport.stopping; nothing over a broker)."""
        if self.embedded:
            return memory_transport.stopping()
        return contextlib.nullcontext()

    def cleanup(self):
        self.transport.cleanup()
        for name in ('notification_transport', 'delivery_transport'):
            transport = self.__dict__.get(name)
            if transport not in (None, self.transport):
                transport.cleanup()
