"""What the CLI talks to: a running conductor, or an embedded one.

With a transport URL (``transport_url`` in a ``--config-file``, or the
TENKS_TRANSPORT_URL environment variable) the CLI is a client of the
conductor's RPC API; without one it runs a conductor and a local
hostagent in its own process for the length of the command.
"""

import os
import time

from oslo_config import cfg

from conductor import rpcapi
from tenks import embedded
from tenks import exceptions
from tenks import notifier
from tenks import rpc

TRANSPORT_URL_ENV = 'TENKS_TRANSPORT_URL'
POLL_INTERVAL = 0.2


def transport_url(conf):
    """The URL the user configured; oslo.messaging's default is none."""
    if os.environ.get(TRANSPORT_URL_ENV):
        return os.environ[TRANSPORT_URL_ENV]
    location = conf.get_location('transport_url').location
    return None if location == cfg.Locations.opt_default else (
        conf.transport_url)


def connect(conf):
    url = transport_url(conf)
    return RemoteClient(conf, url) if url else EmbeddedClient(conf)


class RemoteClient:

    remote = True

    def __init__(self, conf, url):
        self.bus = rpc.Bus(conf, url=url)
        self.api = rpcapi.ConductorAPI(self.bus)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bus.cleanup()

    def deploy(self, spec):
        return self.api.deploy_cluster(spec)

    def teardown(self, name):
        return self.api.teardown_cluster(name)

    def wait(self, operation_id):
        """The operation once it has ended."""
        while True:
            operation = self.api.get_operation(operation_id)
            if operation['state'] != 'running':
                return operation
            time.sleep(POLL_INTERVAL)

    def __getattr__(self, name):
        # get_operation, list_nodes, list_hypervisors, ...: the RPC API.
        return getattr(self.api, name)

    def follow_events(self, callback):
        """Call ``callback(event)`` for each event until interrupted."""
        listener = notifier.listener(self.bus, _Printer(callback),
                                     pool='tenks-cli-%d' % os.getpid())
        listener.start()
        try:
            while True:
                time.sleep(3600)
        finally:
            listener.stop()
            listener.wait()


class _Printer:
    """Notification endpoint handing each event to a callback."""

    def __init__(self, callback):
        self.callback = callback

    def _event(self, priority, event_type, payload, metadata):
        self.callback({'timestamp': metadata['timestamp'],
                       'event_type': event_type, 'priority': priority,
                       'payload': payload})

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self._event('info', event_type, payload, metadata)

    def error(self, ctxt, publisher_id, event_type, payload, metadata):
        self._event('error', event_type, payload, metadata)


class EmbeddedClient:

    remote = False

    def __init__(self, conf):
        self._context = embedded.embedded(conf)
        self.conductor = None

    def __enter__(self):
        self.conductor = self._context.__enter__()
        return self

    def __exit__(self, *exc):
        return self._context.__exit__(*exc)

    def deploy(self, spec):
        return self.conductor.submit_deploy(spec)

    def teardown(self, name):
        return self.conductor.submit_teardown(name)

    def wait(self, operation_id):
        try:
            self.conductor.wait(operation_id)
        except exceptions.TenksError:
            pass  # recorded in the operation
        return self.conductor.get_operation(operation_id)

    def __getattr__(self, name):
        # get_operation, list_nodes, list_hypervisors, ...: the conductor.
        return getattr(self.conductor, name)

    def follow_events(self, callback):
        raise exceptions.ConfigError(
            reason='following events needs a running conductor: set '
                   'transport_url (--config-file) or %s' % TRANSPORT_URL_ENV)
