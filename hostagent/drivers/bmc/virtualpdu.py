"""SNMP power outlets on VirtualPDUs that Tenks runs.

One VirtualPDU per owner (a cluster's deployment) on each hypervisor,
like the Redfish emulators (hostagent.drivers.bmc.sushy): its own
address, UDP port and community; each of the owner's SNMP nodes has an
outlet. Each lives in its daemon directory (daemon_dirs)
``<state_dir>/virtualpdu/<cluster>-<hash of the owner>`` (mode 0700,
every file 0600):

``owner``         the owner mark; a directory without it is not ours
``outlets/<n>``   the domain outlet ``n`` powers
``domains/<d>``   the outlet of domain ``d``
``pdu.json``      what the process runs with (address, port, community,
                  libvirt URI): a change restarts it
``faults/``       the faults its outlets show (fault_files), by domain
``pdu.pid``, ``pdu.log``

The process (hostagent.drivers.bmc.pdu, Tenks' entry to VirtualPDU)
runs on ``[hostagent] virtualpdu_python``, VirtualPDU's own venv, and
reads the outlets at each request: nodes come and go without a restart.
It carries ``TENKS_VIRTUALPDU=<its directory>`` in its environment:
nothing without that mark is ever stopped. It outlives the hostagent
process; it is stopped and its directory removed with its last outlet.
"""

import contextlib
import json
import os
import shutil
import signal

from oslo_log import log as logging

from hostagent.drivers import base
from hostagent.drivers.bmc import daemon_dirs
from hostagent.drivers.bmc import fault_files
from hostagent.drivers.bmc import processes
from hostagent.drivers.bmc import sushy
from tenks import constants
from tenks import exceptions
from tenks import netutils
from tenks import states

LOG = logging.getLogger(__name__)

DRIVER = 'virtualpdu'
OUTLETS = 'outlets'
CONFIG = 'pdu.json'
MARKER_ENV = 'TENKS_VIRTUALPDU'
START_TIMEOUT = 20  # s for the PDU to bind its port (it takes ~1 s)
TERM_TIMEOUT = 3  # s it gets to exit on SIGTERM
ENTRY = os.path.join(os.path.dirname(__file__), 'pdu.py')


class VirtualPduDriver(base.SnmpDriver):
    """VirtualPDUs under ``<state_dir>/virtualpdu``, one per owner."""

    def __init__(self, conf):
        super().__init__(conf)
        self._dirs = daemon_dirs.DaemonDirs(
            os.path.join(conf.state_dir, 'virtualpdu'), 'VirtualPDU directory')
        # The processes this process started, reaped when they stop.
        self._procs = {}

    def ensure_outlet(self, owner, domain, outlet, address, port,
                      community):
        if not 1 <= outlet <= constants.PDU_OUTLETS:
            raise self._error('give %s outlet %d' % (domain, outlet),
                              'a VirtualPDU has outlets 1 to %d'
                              % constants.PDU_OUTLETS)
        with self._dirs.locked():
            path = self._dirs.path(owner)
            made_dir = not os.path.isdir(path)
            if not made_dir:
                self._dirs.check_owner(path, owner)
            had = _outlet(path, domain)
            holder = daemon_dirs.read(os.path.join(path, OUTLETS, str(outlet)))
            if holder not in (None, domain):
                raise self._error('give %s outlet %d' % (domain, outlet),
                                  'the outlet powers %s' % holder)
            config = self._config(path, address, port, community)
            restart = (self._pid(path) is None
                       or daemon_dirs.read_json(os.path.join(path, CONFIG))
                       != config)
            try:
                if made_dir:
                    self._dirs.make(path, owner)
                if had != outlet:
                    _plug(path, domain, outlet, had)
                if restart:
                    self._stop(path)
                    _check_udp_free(address, port)
                    self._start(path, config)
            except Exception:
                self._undo_outlet(path, domain, had, made_dir)
                raise
        if restart:
            LOG.info('Started the VirtualPDU of %s on %s:%d (UDP)', owner,
                     address, port)
        if had is None:
            LOG.info('VirtualPDU of %s powers %s on outlet %d', owner,
                     domain, outlet)
        return base.ensured(had is None, had != outlet or restart)

    def remove_outlet(self, domain, owner):
        path = self._dirs.path(owner)
        if not os.path.isdir(path):
            return False
        with self._dirs.locked():
            # A failed ensure of another node may have removed it since.
            if not os.path.isdir(path):
                return False
            self._dirs.check_owner(path, owner)
            outlet = _outlet(path, domain)
            if outlet is None:
                return False
            _unplug(path, domain, outlet)
            fault_files.write(path, domain, None)
            if not daemon_dirs.listdir(os.path.join(path, sushy.DOMAINS)):
                self._stop(path)
                shutil.rmtree(path)
        LOG.info('VirtualPDU %s no longer powers %s',
                 os.path.basename(path), domain)
        return True

    def set_fault(self, domain, owner, fault):
        """Store ``fault`` where ``owner``'s PDU reads it (fault_files)."""
        def check(path):
            if fault is not None and _outlet(path, domain) is None:
                raise self._error('fault the outlet of %s' % domain,
                                  'the VirtualPDU of %s has no outlet for it'
                                  % owner)

        changed = self._dirs.set_fault(owner, domain, fault, check)
        if changed:
            LOG.info('VirtualPDU outlet of %s: fault %s', domain,
                     fault['kind'] if fault else 'cleared')
        return changed

    def outlet_changes(self, owner, outlets):
        path = self._dirs.path(owner)
        if not os.path.isdir(path):
            return dict.fromkeys(outlets)
        with self._dirs.locked():
            running = self._pid(path) is not None
            started = daemon_dirs.read_json(os.path.join(path, CONFIG)) or {}
            changes = {}
            for domain, bmc in outlets.items():
                outlet = _outlet(path, domain)
                if outlet is None:
                    changes[domain] = None
                    continue
                found = ['outlet'] if outlet != bmc['outlet'] else []
                wanted = self._config(path, bmc['address'], bmc['port'],
                                      bmc['community'])
                found += [key for key in sorted(wanted)
                          if started.get(key) != wanted[key]]
                if not running:
                    found.append(states.PART_STOPPED)
                changes[domain] = found
        return changes

    def marked(self):
        return [{'kind': 'pdu', 'name': os.path.basename(path),
                 'mark': daemon_dirs.owner_of(path),
                 'systems': {domain: _outlet(path, domain)
                             for domain in daemon_dirs.listdir(
                                 os.path.join(path, sushy.DOMAINS))},
                 'running': self._pid(path) is not None}
                for path in self._dirs.marked()]

    def daemons(self):
        return processes.daemons('virtualpdu', MARKER_ENV, 'pdu.pid')

    def stop_orphans(self, directory):
        with self._dirs.locked():
            pids = processes.marked_pids(self._marker(directory))
            orphans, why = processes.orphans(directory, 'pdu.pid', pids)
            if orphans and not processes.kill(
                    orphans, TERM_TIMEOUT, (signal.SIGTERM, signal.SIGKILL)):
                raise self._error('stop the VirtualPDU of %s' % directory,
                                  'processes %s did not exit'
                                  % sorted(orphans))
        if orphans:
            LOG.info('Stopped VirtualPDU %s (pids %s): %s', directory,
                     sorted(orphans), why)
        return sorted(orphans)

    # The PDUs' directories and processes.

    def _config(self, path, address, port, community):
        return {'address': address, 'port': port, 'community': community,
                'libvirt_uri': self.conf.hostagent.libvirt_uri,
                'outlets': os.path.join(path, OUTLETS)}

    def _python(self):
        python = self.conf.hostagent.virtualpdu_python
        if not (python and os.access(python, os.X_OK)):
            raise self._error(
                'start a VirtualPDU', '[hostagent] virtualpdu_python (%s) '
                'is not an interpreter; make VirtualPDU\'s venv with '
                'tools/setup.sh or point the option at one' % python)
        return python

    def _start(self, path, config):
        python = self._python()
        name = os.path.join(path, CONFIG)
        daemon_dirs.write(name, json.dumps(config))
        log_file = os.path.join(path, 'pdu.log')
        # -I: no directory of the script's on its path (this module's
        # name is VirtualPDU's package's) nor PYTHON*.
        proc = processes.spawn([python, '-I', ENTRY, name], log_file,
                               MARKER_ENV, path)
        self._procs[path] = proc
        daemon_dirs.write(os.path.join(path, 'pdu.pid'), str(proc.pid))

        def bound():
            if proc.poll() is not None:
                # Its directory goes with the failed request: its log too.
                with open(log_file, encoding='utf-8',
                          errors='replace') as f:
                    last = f.read().strip().splitlines()[-1:]
                raise self._error('start the VirtualPDU',
                                  'it exited with status %d: %s'
                                  % (proc.returncode,
                                     ''.join(last) or 'no output'))
            return not _udp_free(config['address'], config['port'])

        try:
            if not processes.poll(bound, START_TIMEOUT, sushy.POLL):
                raise self._error('start the VirtualPDU',
                                  '%s:%d (UDP) was not bound within %d s; '
                                  'see %s' % (config['address'],
                                              config['port'],
                                              START_TIMEOUT, log_file))
        except exceptions.DriverError:
            self._stop(path)
            raise

    def _pid(self, path):
        return processes.running(os.path.join(path, 'pdu.pid'),
                                 self._marker(path))

    @staticmethod
    def _marker(path):
        return processes.mark(MARKER_ENV, path)

    def _stop(self, path):
        pids = processes.marked_pids(self._marker(path))
        if pids and not processes.kill(pids, TERM_TIMEOUT,
                                       (signal.SIGTERM, signal.SIGKILL)):
            raise self._error('stop the VirtualPDU',
                              'processes %s did not exit' % sorted(pids))
        proc = self._procs.pop(path, None)
        if proc is not None:
            proc.poll()  # reap our child
        if pids:
            LOG.info('Stopped VirtualPDU %s (pids %s)',
                     os.path.basename(path), sorted(pids))

    def _undo_outlet(self, path, domain, had, made_dir):
        """Leave nothing a failed ensure_outlet made."""
        try:
            others = [d for d in daemon_dirs.listdir(
                os.path.join(path, sushy.DOMAINS)) if d != domain]
            if made_dir or (had is None and not others):
                self._stop(path)
                shutil.rmtree(path, ignore_errors=True)
            elif had is None:
                now = _outlet(path, domain)
                if now is not None:
                    _unplug(path, domain, now)
            else:
                _plug(path, domain, had, _outlet(path, domain))
        except Exception as e:
            LOG.error('Could not undo the outlet of %s: %s', domain, e)

    def _error(self, action, reason):
        return exceptions.DriverError(driver=DRIVER, action=action,
                                      reason=reason)


def _outlet(path, domain):
    """The outlet of ``domain`` on the PDU of ``path``, or None."""
    found = daemon_dirs.read(sushy._named(path, sushy.DOMAINS, domain))
    return None if found is None else int(found)


def _plug(path, domain, outlet, old):
    """Power ``domain`` from ``outlet`` instead of ``old`` (or None)."""
    for kind in (OUTLETS, sushy.DOMAINS):
        os.makedirs(os.path.join(path, kind), mode=0o700, exist_ok=True)
    daemon_dirs.write(os.path.join(path, OUTLETS, str(outlet)), domain)
    daemon_dirs.write(sushy._named(path, sushy.DOMAINS, domain), str(outlet))
    if old is not None and old != outlet:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(path, OUTLETS, str(old)))


def _unplug(path, domain, outlet):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(path, OUTLETS, str(outlet)))
    os.unlink(sushy._named(path, sushy.DOMAINS, domain))


def _udp_free(address, port):
    """Whether a UDP socket can bind address:port."""
    try:
        return netutils.udp_port_free(address, port)
    except OSError as e:
        raise exceptions.DriverError(
            driver=DRIVER, action='bind %s:%d' % (address, port),
            reason=e.strerror) from e


def _check_udp_free(address, port):
    if not _udp_free(address, port):
        raise exceptions.PortInUse(port=port, address=address)
