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
import select
import signal
import sys
import threading
import time
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
    signals = Signals()
    signals.install()
    try:
        service.start()
    except exceptions.JobboardError as e:
        bus.cleanup()
        sys.exit('tenks-%s: not starting: %s' % (name, e))
    logging.getLogger(__name__).info(
        'tenks-%s started as %s on %s', name, conf[name].host,
        bus.url.split('@')[-1])
    signals.wait()
    log = logging.getLogger(__name__)
    limit = conf[name].graceful_shutdown_timeout + STOP_MARGIN
    outcome = stop(service, bus, limit, signals)
    if outcome == SIGNALLED:
        os.write(2, b'tenks-%s: signalled again, exiting now\n'
                 % name.encode())
        os._exit(1)
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


class Signals:
    """SIGTERM and SIGINT, for the main thread to wait for.

    Python runs a signal's handler in the main thread only, but the
    kernel may hand a signal to any thread that does not block it (one
    that just unblocked signals, as a thread creating another does). A
    main thread blocked on a lock is then not interrupted: the kernel
    restarts its wait, and the handler never runs. The interpreter's
    own handler, though, writes the signal's number to the wakeup fd
    from whichever thread took it; the main thread waits on that pipe
    (as cotyledon's service manager does, for CPython issue 5315).
    """

    NUMBERS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)

    def install(self):
        """Take SIGTERM and SIGINT (in the main thread, before the
        service starts threads)."""
        signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for signum in self.NUMBERS:
            # The pipe says it: the handler has nothing left to do.
            signal.signal(signum, lambda *_: None)

    def wake(self):
        """End a wait() with no signal: it returns 0."""
        os.write(self._write, b'\0')

    def wait(self, timeout=None):
        """The number of the next SIGTERM or SIGINT (0 after a wake());
        None if ``timeout`` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(
                0, deadline - time.monotonic())
            ready, _, _ = select.select([self._read], [], [], left)
            if not ready:
                return None
            number = os.read(self._read, 1)[0]
            if number == 0 or number in self.NUMBERS:
                return number


STOPPED, LEFT_RUNNING, FAILED, SIGNALLED = (
    'stopped', 'left running', 'failed', 'signalled again')


def stop(service, bus, limit, signals):
    """Stop ``service``, then close ``bus``, within ``limit`` seconds.

    Returns STOPPED; LEFT_RUNNING if the service's stop says work still
    runs in its threads; FAILED if its stop raised (logged); None if
    the stop still runs after ``limit``; SIGNALLED if ``signals`` (a
    Signals) gets another signal first.
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
        finally:
            signals.wake()

    stopper = threading.Thread(target=stopping, name='stop', daemon=True)
    stopper.start()
    deadline = time.monotonic() + limit
    while not outcome:
        woken = signals.wait(max(0, deadline - time.monotonic()))
        if woken is None:
            return None
        if woken:
            return SIGNALLED
    return outcome[0]


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
