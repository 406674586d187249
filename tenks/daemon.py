"""Run a Tenks service in the foreground until SIGTERM or SIGINT.

A stopping service has its graceful_shutdown_timeout ([conductor] or
[hostagent]) to finish its work, and STOP_MARGIN seconds more to close
its connections; then it exits with status 1 whatever still runs (a
message bus connection that never closes must not keep it alive). A
second signal makes it exit at once.

A service checks its configuration before it starts anything: every
option must parse, the state directory must be usable, the drivers must
exist and a message bus must be configured. Otherwise it prints every
problem and exits with status 1, instead of failing later over and over.
"""

import os
import re
import signal
import sys
import threading
from importlib import metadata

from tenks import runtime

runtime.use_threads()

from oslo_config import cfg  # noqa: E402
from oslo_log import log as logging  # noqa: E402

from tenks import conf as tenks_conf  # noqa: E402
from tenks import exceptions  # noqa: E402
from tenks import rpc  # noqa: E402

STOP_MARGIN = 30

# [hostagent] option -> entry point group of its drivers.
DRIVER_OPTIONS = {'virt_driver': 'tenks.virt_drivers',
                  'network_drivers': 'tenks.network_drivers',
                  'bmc_driver': 'tenks.bmc_drivers',
                  'redfish_driver': 'tenks.redfish_drivers',
                  'snmp_driver': 'tenks.snmp_drivers'}


def run(name, factory, argv=None):
    conf = tenks_conf.new_conf()
    logging.register_options(conf)
    rpc.register_opts(conf)
    conf(sys.argv[1:] if argv is None else argv, project='tenks',
         prog='tenks-%s' % name)
    problems = validate(conf, name)
    if problems:
        sys.exit('tenks-%s: invalid configuration, not starting:\n  %s'
                 % (name, '\n  '.join(problems)))
    logging.setup(conf, 'tenks')
    bus = rpc.Bus(conf)
    try:
        service = factory(conf, bus)
    except exceptions.ConfigError as e:
        # What only the service knows: its clients' [upgrade_levels].
        bus.cleanup()
        sys.exit('tenks-%s: %s, not starting' % (name, e))
    except exceptions.StateDatabaseError as e:
        bus.cleanup()
        sys.exit('tenks-%s: not starting: %s' % (name, e))
    stopping = threading.Event()

    def on_signal(*_):
        if stopping.is_set():
            os.write(2, b'tenks-%s: signalled again, exiting now\n'
                     % name.encode())
            os._exit(1)
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    try:
        service.start()
    except exceptions.JobboardError as e:
        bus.cleanup()
        sys.exit('tenks-%s: not starting: %s' % (name, e))
    logging.getLogger(__name__).info(
        'tenks-%s started as %s on %s', name, conf[name].host,
        bus.url.split('@')[-1])
    stopping.wait()
    log = logging.getLogger(__name__)
    limit = conf[name].graceful_shutdown_timeout + STOP_MARGIN
    outcome = stop(service, bus, limit)
    if outcome == STOPPED:
        log.info('tenks-%s stopped', name)
        return
    if outcome == LEFT_RUNNING:
        # Work handed back (a conductor's operations, persisted) or cut
        # off (a hostagent's requests) still runs in threads that would
        # keep the process alive: just go.
        log.info('tenks-%s stopped', name)
        os._exit(0)
    if outcome is None:
        log.error('tenks-%s did not stop within %d s; exiting', name, limit)
    os._exit(1)


STOPPED, LEFT_RUNNING, FAILED = 'stopped', 'left running', 'failed'


def stop(service, bus, limit):
    """Stop ``service``, then close ``bus``, within ``limit`` seconds.

    Returns STOPPED; LEFT_RUNNING if the service's stop says work still
    runs in its threads; FAILED if its stop raised (logged); None if
    the stop still runs after ``limit``.
    """
    outcome = []

    def stopping():
        try:
            if service.stop():
                outcome.append(LEFT_RUNNING)
                return
            bus.cleanup()
            outcome.append(STOPPED)
        except Exception:
            logging.getLogger(__name__).exception('Could not stop cleanly')
            outcome.append(FAILED)

    stopper = threading.Thread(target=stopping, name='stop', daemon=True)
    stopper.start()
    stopper.join(limit)
    return outcome[0] if outcome else None


def validate(conf, name):
    """Every problem of ``conf`` for service ``name``, as messages."""
    problems = option_problems(conf)
    if problems:
        return problems
    if not conf[name].host:
        problems.append('[%s] host (or [DEFAULT] host) is empty' % name)
    if not rpc.configured_transport_url(conf):
        problems.append('transport_url is not set: tenks-%s needs a '
                        'message bus (rabbit://USER:PASSWORD@HOST:5672/)'
                        % name)
    problems += state_dir_problems(conf.state_dir)
    if name == 'hostagent':
        problems += driver_problems(conf)
        problems += tls_problems(conf)
    return problems


def tls_problems(conf):
    """The Redfish emulators' certificate and key: both or neither, and
    readable."""
    files = {option: conf.hostagent[option] for option in (
        'redfish_tls_certificate', 'redfish_tls_key')}
    if bool(files['redfish_tls_certificate']) != bool(
            files['redfish_tls_key']):
        return ['[hostagent] redfish_tls_certificate and redfish_tls_key '
                'go together: set both or neither']
    return ['[hostagent] %s: cannot read %s' % (option, path)
            for option, path in files.items()
            if path and not os.access(path, os.R_OK)]


def option_problems(conf):
    """Options whose value does not parse (oslo.config checks types,
    ranges and patterns only when a value is read)."""
    problems = []
    for key in conf:
        try:
            value = conf[key]
        except cfg.Error as e:
            problems.append(_describe(None, key, e))
            continue
        if isinstance(value, cfg.ConfigOpts.GroupAttr):
            for option in value:
                try:
                    value[option]
                except cfg.Error as e:
                    problems.append(_describe(key, option, e))
    return problems


def _describe(group, option, error):
    # oslo.config says "Value for option X from LocationInfo(...,
    # detail='FILE') is not valid: REASON"; keep the file and the reason.
    message = str(error)
    where = re.search(r"detail='([^']+)'", message)
    source = ' (in %s)' % where.group(1) if where else ''
    reason = message.split(' is not valid: ', 1)[-1]
    return '[%s] %s%s: %s' % (group or 'DEFAULT', option, source, reason)


def state_dir_problems(path):
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        return ['[DEFAULT] state_dir %s cannot be created: %s'
                % (path, e.strerror or e)]
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        return ['[DEFAULT] state_dir %s is not readable and writable by '
                'this user' % path]
    return []


def driver_problems(conf):
    problems = []
    for option, group in DRIVER_OPTIONS.items():
        known = sorted(ep.name for ep in metadata.entry_points(group=group))
        chosen = conf.hostagent[option]
        for name in chosen if isinstance(chosen, list) else [chosen]:
            if name not in known:
                problems.append('[hostagent] %s: no driver %r (known: %s)'
                                % (option, name,
                                   ', '.join(known) or 'none'))
    return problems
