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


def set_defaults():
    """Tenks' own defaults of oslo.messaging's options; also the hook
    oslo-config-generator calls, so the sample shows them."""
    messaging.set_transport_defaults(control_exchange=CONTROL_EXCHANGE)
    # oslo.messaging has no setter for these; its list_opts() hands out
    # copies of this list, so the defaults must be set here.
    cfg.set_defaults(msg_notifier._notifier_opts,
                     driver=[NOTIFICATION_DRIVER],
                     topics=[NOTIFICATION_TOPIC])


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

    def get_client(self, topic, version):
        """A client of the API of ``topic`` at ``version``, which sends
        no message newer than [upgrade_levels] <its service>."""
        target = messaging.Target(topic=topic, version=version)
        return messaging.get_rpc_client(
            self.transport, target,
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

    def cleanup(self):
        self.transport.cleanup()
        if 'notification_transport' in self.__dict__:
            self.notification_transport.cleanup()
