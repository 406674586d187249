"""What the CLI talks to: a running conductor, an embedded one, or the
state database alone.

With a transport URL (``transport_url`` in a ``--config-file``, or the
TENKS_TRANSPORT_URL environment variable) the CLI is a client of the
conductor's RPC API. Without one, a command that changes something runs
a conductor and a local hostagent in its own process for its length,
and a command that only reads opens the state database and nothing
else. Each path imports its heavy modules (oslo.messaging, TaskFlow,
SQLAlchemy) only when it is taken, so that the CLI starts fast.
"""

import functools
import os
import time

from tenks import exceptions
from tenks import states

TRANSPORT_URL_ENV = 'TENKS_TRANSPORT_URL'
POLL_INTERVAL = 0.2
# Following an operation over the bus: how long each question about it
# may wait for an answer at most (the conductor answers at once; a lower
# rpc_response_timeout wins), the longest pause between questions while
# none comes, and how long to go on asking without one
# (--reconnect-timeout).
POLL_TIMEOUT = 10
BACKOFF_MAX = 10
RECONNECT_TIMEOUT = 600
# Following an operation in the state database: its progress is written
# every half second.
EMBEDDED_POLL_INTERVAL = 0.5


def poll(get_operation, operation_id, on_update, pause=None):
    """The operation once its record says it ended, read after each
    ``pause()`` (default: EMBEDDED_POLL_INTERVAL s) and handed to
    ``on_update`` meanwhile."""
    while True:
        operation = get_operation(operation_id)
        on_update(operation)
        if operation['state'] != states.OPERATION_RUNNING:
            return operation
        if pause is None:
            time.sleep(EMBEDDED_POLL_INTERVAL)
        else:
            pause()


def transport_url(conf):
    """The URL the user configured, or None.

    Read from the same configuration files through a ConfigOpts of its
    own, so that oslo.messaging (which registers the real option) is
    imported only when there is a bus to talk to.
    """
    from oslo_config import cfg
    if os.environ.get(TRANSPORT_URL_ENV):
        return os.environ[TRANSPORT_URL_ENV]
    probe = cfg.ConfigOpts()
    probe.register_opt(cfg.StrOpt('transport_url', secret=True))
    args = []
    for path in conf.config_file:
        args += ['--config-file', path]
    if conf.config_dir:
        args += ['--config-dir', conf.config_dir]
    probe(args, project='tenks', default_config_files=[],
          default_config_dirs=[])
    return probe.transport_url or None


def connect(conf, read_only=False, exits=False):
    """A client for one command; ``read_only`` commands in embedded
    mode read the state database without starting a conductor; ``exits``:
    the process exits after the command (see embedded.embedded)."""
    url = transport_url(conf)
    if url:
        return RemoteClient(conf, url)
    return StateReader(conf) if read_only else EmbeddedClient(conf, exits)


class RemoteClient:
    """The conductor's RPC API, called as admin: the CLI holds the bus's
    credentials, and whoever can reach the bus with them is trusted."""

    remote = True

    def __init__(self, conf, url):
        from conductor import rpcapi
        from tenks import policy
        from tenks import rpc
        self.context = policy.admin_context()
        self.bus = rpc.Bus(conf, url=url)
        self.api = rpcapi.ConductorAPI(self.bus)
        # Questions that fail fast when nobody answers (or the broker
        # cannot be reached), so that wait() asks again.
        self.poll = rpcapi.ConductorAPI(
            self.bus, timeout=min(POLL_TIMEOUT, conf.rpc_response_timeout),
            retry=0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bus.cleanup()

    def deploy(self, spec, force=False):
        return self.api.deploy_cluster(self.context, spec, force)

    def plan(self, spec, force=False):
        return self.api.plan_cluster(self.context, spec, force)

    def teardown(self, name, force=False):
        return self.api.teardown_cluster(self.context, name, force)

    def wait(self, operation_id, patience=RECONNECT_TIMEOUT, notice=None,
             on_update=None):
        """The operation once it has ended, followed through a reply
        timeout, a broker reconnecting, a conductor restarting: while no
        answer comes, its state is asked again, the pauses growing to
        BACKOFF_MAX s; after ``patience`` s without one, ConductorLost.
        ``notice(text)`` hears when answers stop and come back;
        ``on_update(operation)`` gets each answer."""
        import oslo_messaging as messaging
        notice = notice or (lambda text: None)
        on_update = on_update or (lambda operation: None)
        lost = None
        pause = POLL_INTERVAL
        while True:
            asked = time.monotonic()
            try:
                operation = self.poll.get_operation(self.context,
                                                    operation_id)
            except (messaging.MessagingTimeout,
                    messaging.MessageDeliveryFailure) as e:
                reason = '%s: %s' % (type(e).__name__, e)
                now = time.monotonic()
                if lost is None:
                    lost = asked
                    notice(
                        'No answer from the conductor about operation %s '
                        '(%s); still following it (--reconnect-timeout %d '
                        's)' % (operation_id, reason, patience))
                if now - lost >= patience:
                    raise exceptions.ConductorLost(
                        id=operation_id, waited=now - lost,
                        reason=reason) from None
                time.sleep(min(pause, max(0, lost + patience - now)))
                pause = min(pause * 2, BACKOFF_MAX)
                continue
            if lost is not None:
                lost, pause = None, POLL_INTERVAL
                notice('The conductor answers again: following operation %s'
                       % operation_id)
            on_update(operation)
            if operation['state'] != states.OPERATION_RUNNING:
                return operation
            time.sleep(POLL_INTERVAL)

    def __getattr__(self, name):
        # get_operation, list_nodes, update_hypervisor, ...: the RPC API.
        return functools.partial(getattr(self.api, name), self.context)

    def follow_events(self, callback):
        """Call ``callback(event)`` for each event until interrupted."""
        from tenks import notifier
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


def _no_follow():
    raise exceptions.ConfigError(
        reason='following events needs a running conductor: set '
               'transport_url (--config-file) or %s' % TRANSPORT_URL_ENV)


class EmbeddedClient:
    """The conductor's API in this process, called as admin, as an RPC
    caller calls it (the same checks, the same errors)."""

    remote = False

    def __init__(self, conf, exits=False):
        from tenks import policy
        from tenks.cli import embedded
        self._context = embedded.embedded(conf, exits)
        self.context = policy.admin_context()
        self.conductor = None

    def __enter__(self):
        self.conductor = self._context.__enter__()
        return self

    def __exit__(self, *exc):
        return self._context.__exit__(*exc)

    def _call(self, method, *args, **kwargs):
        import oslo_messaging as messaging
        try:
            return getattr(self.conductor.api, method)(self.context, *args,
                                                       **kwargs)
        except messaging.ExpectedException as e:
            # What the API raises to its callers, marked for the RPC
            # server not to log it.
            raise e.exc_info[1] from None

    def deploy(self, spec, force=False):
        return self._call('deploy_cluster', spec, force)

    def plan(self, spec, force=False):
        return self._call('plan_cluster', spec, force)

    def teardown(self, name, force=False):
        return self._call('teardown_cluster', name, force)

    def wait(self, operation_id, patience=None, notice=None,
             on_update=None):
        """The operation once it has ended (it runs in this process:
        nothing to lose on the way); ``on_update(operation)`` gets its
        record every EMBEDDED_POLL_INTERVAL s while it runs, and once
        it ends (at once, not at the next reading)."""
        if on_update is not None:
            poll(functools.partial(self._call, 'get_operation'),
                 operation_id, on_update,
                 pause=self.conductor.operations.pauser(
                     operation_id, EMBEDDED_POLL_INTERVAL))
        try:
            self.conductor.operations.wait(operation_id)
        except exceptions.TenksError:
            pass  # recorded in the operation
        return self._call('get_operation', operation_id)

    def __getattr__(self, name):
        # get_operation, list_nodes, update_hypervisor, ...: the API.
        if name.startswith('_') or not hasattr(self.conductor.api, name):
            raise AttributeError(name)
        return functools.partial(self._call, name)

    def follow_events(self, callback):
        _no_follow()


class StateReader:
    """The state database of embedded mode, answering as the conductor
    does, for commands that only read.

    Nothing is started and nothing is created: without a database yet,
    there is simply nothing deployed.
    """

    remote = False

    def __init__(self, conf):
        self.conf = conf
        self.db = None

    def __enter__(self):
        import sqlalchemy as sa

        from tenks.db import api as db_api
        from tenks.db import migrations
        url = sa.engine.make_url(db_api.url(self.conf))
        if url.get_backend_name() == 'sqlite' and not os.path.exists(
                url.database or ''):
            return self
        engine = db_api.create_engine(url)
        version = db_api.schema_version(engine)
        if version is None and not self.conf.database.connection:
            # Being created by the first command of a fresh state
            # directory: nothing is deployed yet.
            engine.dispose()
        elif version != migrations.HEAD:
            engine.dispose()
            from tenks import manage
            from tenks.db import migration
            raise migration.schema_error(
                engine, version,
                'run "%s"' % manage.sync_command(self.conf)
                if self.conf.database.connection else
                'a command that changes something upgrades it')
        else:
            self.db = db_api.StateDB(engine)
        return self

    def __exit__(self, *exc):
        if self.db is not None:
            self.db.engine.dispose()

    def __getattr__(self, name):
        # get_operation, list_nodes, ...: what the conductor answers.
        from tenks.db import views
        return getattr(views.Records(self.db), name)

    def get_operation_graph(self, operation_id):
        """As the conductor answers it, from the records alone."""
        from tenks import runtime
        # The flows import oslo.messaging, whose oslo.service must not
        # pick eventlet, which the CLI hides.
        runtime.use_threads()
        from conductor import graphs
        return graphs.operation_graph(self.db, operation_id)

    def wait(self, operation_id, patience=None, notice=None,
             on_update=None):
        """The operation once another process running it has recorded
        its end."""
        return poll(self.get_operation, operation_id,
                    on_update or (lambda operation: None))

    def follow_events(self, callback):
        _no_follow()

