"""IPMI BMCs: virtualbmc's, served by a process of Tenks' own.

One process per state directory, the IPMI host
(hostagent.drivers.bmc.ipmi_host), serves every IPMI BMC of the
directory, with their definitions under ``<state_dir>/ipmi`` (see
ipmi_store). The driver starts it on demand and controls it over the
Unix socket there, which only this user reaches: the host opens no port
but its BMCs' own. It outlives the hostagent process and is stopped when
its last BMC goes.
"""

import contextlib
import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time

from oslo_log import log as logging

from hostagent.drivers import base
from hostagent.drivers.bmc import fault_files
from hostagent.drivers.bmc import ipmi_store
from hostagent.drivers.bmc import processes
from tenks import exceptions
from tenks import fileutils
from tenks import states

LOG = logging.getLogger(__name__)

DRIVER = 'virtualbmc'
REQUEST_TIMEOUT = 10  # s; the host answers within milliseconds when well
START_TIMEOUT = 15  # s for the host to open its control socket
KILL_TIMEOUT = 5  # s for a killed host to disappear
POLL = 0.01  # s between checks while the host starts


@contextlib.contextmanager
def _flocked(path):
    """Hold the lock file ``path`` (a driver's, among processes) while
    it exists; nothing to hold when it does not."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class VirtualBmcDriver(base.BmcDriver):
    """BMCs served by the IPMI host of the state directory."""

    def __init__(self, conf):
        super().__init__(conf)
        self._dir = os.path.join(conf.state_dir, 'ipmi')
        self._control = os.path.join(self._dir, ipmi_store.CONTROL)
        self._pid_file = os.path.join(self._dir, ipmi_store.PID_FILE)
        self._log_file = os.path.join(self._dir, ipmi_store.LOG_FILE)
        self._marker = ipmi_store.marker(self._dir)
        self._lock = threading.Lock()
        self._proc = None

    def ensure_bmc(self, domain, address, port, username, password,
                   owner):
        """A running BMC for ``domain`` listening on ``address:port``,
        recorded as ``owner``'s.

        Returns once the BMC's UDP port is bound. Raises PortInUse when
        something else holds the port, ResourceConflict when the
        domain's BMC is recorded for another owner; a failure leaves the
        BMC as it was.
        """
        bmc = {'domain': domain, 'address': address, 'port': port,
               'username': username, 'password': password,
               'libvirt_uri': self.conf.hostagent.libvirt_uri,
               'owner': owner}
        with self._locked():
            self._check_owner(domain, owner)
            # A host started again serves the BMCs it stored: a repair,
            # even when this one was as asked.
            started = self._ensure_host()
            result = self._request('add', 'add the BMC of %s' % domain,
                                   bmc=bmc)
        if result['changed']:
            LOG.info('BMC for %s on %s:%d', domain, address, port)
        return base.ensured(result['created'], result['changed'] or started)

    def remove_bmc(self, domain, owner):
        """Stop and delete ``owner``'s BMC of ``domain``; stop the host
        once it serves none.

        Returns once the BMC's port is free. ResourceConflict when the
        BMC is recorded for another owner.
        """
        if not os.path.isdir(self._dir) or ipmi_store.name_problem(domain):
            return False
        with self._locked():
            self._check_owner(domain, owner)
            if self._host_pid() is None:
                # Nothing serves it: forget it, without starting the host.
                removed = ipmi_store.delete(self._dir, domain)
            else:
                removed = self._request(
                    'remove', 'remove the BMC of %s' % domain,
                    domain=domain)['removed']
            fault_files.write(self._dir, domain, None)
        if removed:
            LOG.info('Removed BMC for %s', domain)
        return removed

    def set_fault(self, domain, owner, fault):
        """Store ``fault`` where the IPMI host reads it (fault_files)."""
        if ipmi_store.name_problem(domain):
            raise self._error('fault the BMC of %r' % domain,
                              ipmi_store.name_problem(domain))
        with self._locked():
            if ipmi_store.owner(self._dir, domain) is None and (
                    fault is not None):
                raise self._error('fault the BMC of %s' % domain,
                                  'the domain has no IPMI BMC here')
            self._check_owner(domain, owner)
            changed = fault_files.write(self._dir, domain, fault)
        if changed:
            LOG.info('BMC of %s: fault %s', domain,
                     fault['kind'] if fault else 'cleared')
        return changed

    def list_bmcs(self):
        """Return [{'domain', 'address', 'port', 'status'}]."""
        if not os.path.isdir(self._dir):
            return []
        with self._locked():
            if self._host_pid() is not None:
                return self._request('list', 'list the BMCs')['bmcs']
            # The host is down: so are the BMCs it would serve.
            return [{'domain': domain, 'address': bmc['address'],
                     'port': bmc['port'], 'status': 'down'}
                    for domain, bmc in sorted(
                        ipmi_store.read_all(self._dir).items())]

    def bmc_changes(self, bmcs, owner):
        """See base; one request to the host, and none when it is down.

        Passwords are compared by the host, never returned. It only
        reads, so it waits for no change under way (the lock): a host
        starting or stopping meanwhile serves none of them.
        """
        named = {domain: dict(bmc, domain=domain,
                              libvirt_uri=self.conf.hostagent.libvirt_uri,
                              owner=owner)
                 for domain, bmc in bmcs.items()
                 if not ipmi_store.name_problem(domain)}
        changes = dict.fromkeys(bmcs)
        # Down, ensure_bmc would start it and serve every BMC anew.
        if not named or self._host_pid() is None:
            return changes
        action = 'compare the BMCs'
        try:
            answer = self._send('compare', bmcs=list(named.values()))
        except (FileNotFoundError, ConnectionRefusedError):
            return changes
        except (OSError, ValueError) as e:
            raise self._no_answer(action, e) from None
        changes.update({
            domain: (states.PART_FOREIGN if found and 'owner' in found
                     else found)
            for domain, found in self._result(answer,
                                              action)['changes'].items()})
        return changes

    def marked(self):
        """See base: the definitions of this state directory's BMCs."""
        return [{'kind': 'bmc', 'name': domain, 'mark': bmc['owner'],
                 'address': bmc['address'], 'port': bmc['port']}
                for domain, bmc in sorted(
                    ipmi_store.read_all(self._dir).items())]

    def daemons(self):
        """See base: the IPMI hosts of every state directory."""
        return processes.daemons('ipmi host', ipmi_store.MARKER_ENV,
                                 ipmi_store.PID_FILE)

    def stop_orphans(self, directory):
        """See base; under the lock of ``directory`` while it exists, so
        that a host it is starting is not taken for an orphan."""
        with contextlib.ExitStack() as stack:
            if directory == self._dir:
                stack.enter_context(self._locked())
            else:
                stack.enter_context(_flocked(os.path.join(directory,
                                                          'lock')))
            pids = processes.marked_pids(ipmi_store.marker(directory))
            orphans, why = processes.orphans(directory, ipmi_store.PID_FILE,
                                             pids)
            if orphans and not processes.kill(orphans, KILL_TIMEOUT):
                raise self._error('stop the IPMI host of %s' % directory,
                                  'processes %s did not exit within %d s'
                                  % (sorted(orphans), KILL_TIMEOUT))
        if orphans:
            LOG.info('Stopped the IPMI host of %s (pid %s): %s', directory,
                     ', '.join(map(str, sorted(orphans))), why)
        return sorted(orphans)

    def _check_owner(self, domain, owner):
        """ResourceConflict when the BMC of ``domain`` is recorded for
        somebody else than ``owner`` (lock held: only requests under it
        change the definitions)."""
        found = ipmi_store.owner(self._dir, domain)
        if found is not None and found != owner:
            raise exceptions.ResourceConflict(
                kind='BMC of domain', name=domain, owner=owner,
                reason='it was made for %s' % found if found
                else 'its definition records no owner')

    @contextlib.contextmanager
    def _locked(self):
        """Serialise control operations among threads and processes.

        Another hostagent process (embedded mode) may share state_dir.
        """
        with self._lock:
            fileutils.private_dir(self._dir)
            fileutils.private_dir(os.path.join(self._dir, ipmi_store.BMCS))
            with fileutils.flocked(os.path.join(self._dir, 'lock')):
                yield

    def _error(self, action, reason):
        return exceptions.DriverError(driver=DRIVER, action=action,
                                      reason=reason)

    def _send(self, op, **args):
        """Send one request to the host; its answer. OSError or
        ValueError when there is none."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(REQUEST_TIMEOUT)
            sock.connect(self._control)
            sock.sendall(json.dumps(dict(args, op=op)).encode() + b'\n')
            return json.loads(sock.makefile('rb').readline())

    def _request(self, op, action, **args):
        """Send one request to the host and return its result; stop the
        host when it answers that it serves no BMC (lock held)."""
        try:
            answer = self._send(op, **args)
        except (OSError, ValueError) as e:
            raise self._no_answer(action, e) from None
        if answer['bmcs'] == 0:
            self._stop_host()
        return self._result(answer, action, args.get('bmc'))

    def _no_answer(self, action, error):
        return self._error(action, 'no answer from the IPMI host on %s: '
                           '%s; see %s' % (self._control, error,
                                           self._log_file))

    def _result(self, answer, action, bmc=None):
        """The result of the host's ``answer``, or its error raised."""
        if 'error' not in answer:
            return answer['result']
        if answer['kind'] == 'port_in_use':
            raise exceptions.PortInUse(port=bmc['port'],
                                       address=bmc['address'])
        raise self._error(action, answer['error'])

    def _host_pid(self):
        """The pid of our running host, or None."""
        return processes.running(self._pid_file, self._marker)

    def _ensure_host(self):
        """Start the host unless it runs; return once it answers, saying
        whether it had to start it."""
        if self._host_pid() is not None:
            return False
        # One whose starter died before writing its pid goes.
        self._stop_host()
        start = time.monotonic()
        # virtualbmc reads its settings from VIRTUALBMC_CONFIG: the empty
        # ones log to stderr (our log), without debug (no requests).
        self._proc = processes.spawn(
            [sys.executable, '-m', 'hostagent.drivers.bmc.ipmi_host',
             self._dir], self._log_file, ipmi_store.MARKER_ENV, self._dir,
            env={'VIRTUALBMC_CONFIG': os.devnull})
        fd = os.open(self._pid_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                     0o600)
        with open(fd, 'w') as f:
            f.write(str(self._proc.pid))
        try:
            if not processes.poll(self._answering, START_TIMEOUT, POLL):
                raise self._error(
                    'start the IPMI host', '%s did not open within %d s; '
                    'see %s' % (self._control, START_TIMEOUT,
                                self._log_file))
        except exceptions.DriverError:
            self._stop_host()
            raise
        LOG.info('Started the IPMI host of %s (pid %d) in %.2f s',
                 self._dir, self._proc.pid, time.monotonic() - start)
        return True

    def _answering(self):
        """Whether the host we started listens; raise if it exited."""
        if self._proc.poll() is not None:
            raise self._error('start the IPMI host', 'it exited with status '
                              '%d; see %s' % (self._proc.returncode,
                                              self._log_file))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            return sock.connect_ex(self._control) == 0

    def _stop_host(self):
        """Stop our host (lock held).

        Only when it serves no BMC, or never answered: it has nothing to
        save (what it serves is in its files), so it is killed.
        """
        pids = processes.marked_pids(self._marker)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not processes.poll(lambda: not any(map(processes.alive, pids)),
                              KILL_TIMEOUT):
            raise self._error('stop the IPMI host', 'processes %s did not '
                              'exit within %d s' % (sorted(pids),
                                                    KILL_TIMEOUT))
        for path in (self._pid_file, self._control):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if self._proc is not None:
            self._proc.poll()  # reap our child
            self._proc = None
        if pids:
            LOG.info('Stopped the IPMI host of %s (pid %s)', self._dir,
                     ', '.join(map(str, sorted(pids))))
