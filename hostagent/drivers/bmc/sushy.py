"""Redfish BMCs served by sushy-tools emulators that Tenks runs.

One emulator per owner (a cluster's deployment) on each hypervisor: its
own address and port, credentials and allow-list, so a node of another
cluster is never listed or reachable through it, not even with that
cluster's credentials (hostagent.drivers.bmc.emulator, the emulator's
process, scopes every resource). Each lives in its daemon directory
(hostagent.drivers.bmc.daemon_dirs) ``<state_dir>/sushy/<cluster>-<hash
of the owner>`` (mode 0700, every file 0600):

``owner``            the owner mark; a directory without it is not ours
``allowed/``         its allow-list: a file named after each system id it
                     serves, holding its domain's name
``domains/``         a file named after each domain it serves, holding its
                     system id. A node added or removed changes two small
                     files, whatever the cluster's size (before issue 23:
                     one ``systems`` file of all, upgraded when next used)
``htpasswd``         the user and a bcrypt hash of the password
``emulator.conf``    sushy-tools' configuration, ``settings`` what it
                     was started with (address, port, libvirt URI, TLS)
``tls.crt``/``.key`` copies of ``[hostagent] redfish_tls_certificate`` and
                     ``redfish_tls_key``, when set
``state/``           sushy-tools' own records (virtual media, indicators)
``downloads/``       its virtual media downloads, emptied when it stops
``faults/``          the faults its systems show (fault_files), by domain
``emulator.pid``, ``emulator.log``

The media inserted into the nodes' virtual media drives are files
``<system id>-*.iso`` (0600) of ``<[hostagent] pool_dir>/virtual-media.
<its directory's name>`` (0711: QEMU, whom libvirt gives each file it
attaches, can reach them, nothing else); an eject removes the file,
remove_system a system's, and the directory goes with the emulator.

The emulator follows the allow-list (hostagent.drivers.bmc.allowlist)
and the htpasswd file as they change: nodes come and go and credentials
change without a restart; a new address, port, libvirt URI or
certificate restarts the emulator. Its
processes carry ``TENKS_SUSHY_EMULATOR=<its directory>`` in their
environment: nothing without that mark is ever stopped. The emulator
outlives the hostagent process; it is stopped and its directory removed
with its last system.
"""

import contextlib
import errno
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import sys

from oslo_log import log as logging

from hostagent.drivers import base
from hostagent.drivers.bmc import daemon_dirs
from hostagent.drivers.bmc import fault_files
from hostagent.drivers.bmc import htpasswd
from hostagent.drivers.bmc import media
from hostagent.drivers.bmc import processes
from tenks import exceptions
from tenks import fileutils
from tenks import states

LOG = logging.getLogger(__name__)

DRIVER = 'sushy-tools'
ALLOWED = 'allowed'
DOMAINS = 'domains'
MARKER_ENV = 'TENKS_SUSHY_EMULATOR'
START_TIMEOUT = 20  # s for an emulator to listen (it starts in ~1 s)
TERM_TIMEOUT = 3  # s an emulator gets to exit on SIGTERM
KILL_TIMEOUT = 5  # s for killed processes to disappear
POLL = 0.02  # s between checks while waiting
DOWNLOADS = 'downloads'  # the emulator's temporary directory
MEDIA_PREFIX = 'virtual-media.'  # + the emulator's name, in pool_dir
# bcrypt's cost, at least OWASP's minimum: the hostagent and the emulator
# pay it once per password and version of the htpasswd file
# (hostagent.drivers.bmc.htpasswd), and an ensure rehashes a cheaper hash.
BCRYPT_ROUNDS = 12


class SushyDriver(base.RedfishDriver):
    """Emulators under ``<state_dir>/sushy``, one per owner."""

    def __init__(self, conf):
        super().__init__(conf)
        self._dirs = daemon_dirs.DaemonDirs(
            os.path.join(conf.state_dir, 'sushy'),
            'Redfish emulator directory')
        # Emulators this process started, reaped when they stop.
        self._procs = {}
        # htpasswd.Verifier of each emulator's file.
        self._verifiers = {}

    # The interface.

    def ensure_system(self, owner, domain, system_id, address, port,
                      username, password):
        with self._dirs.locked():
            path = self._dirs.path(owner)
            made_dir = not os.path.isdir(path)
            if not made_dir:
                self._dirs.check_owner(path, owner)
                self._upgrade(path)
            served = _served(path, domain)
            created = served is None
            settings = self._settings(path, address, port)
            pid = self._pid(path)
            restart = pid is None or daemon_dirs.read_json(
                os.path.join(path, 'settings')) != settings
            if restart:
                self._stop(path)
                _check_port_free(address, port)
            try:
                if made_dir:
                    self._dirs.make(path, owner)
                changed = served != system_id
                if changed:
                    _serve(path, domain, system_id, served)
                changed |= self._ensure_htpasswd(path, username, password)
                if restart:
                    self._start(path, settings)
            except Exception:
                self._undo(path, domain, served, made_dir)
                raise
        if restart:
            LOG.info('Started the Redfish emulator of %s on %s:%d',
                     owner, address, port)
        if created:
            LOG.info('Redfish emulator of %s serves %s (%s)', owner,
                     domain, system_id)
        return base.ensured(created, changed or restart)

    def remove_system(self, domain, owner):
        """See base. The system's own files go under its node's lock
        alone (the hostagent's, which every request on the node takes):
        under the emulator's, which every system shares, a thousand
        nodes' BMCs were removed one after the other. That lock is taken
        for what all its systems share: a directory of an older Tenks to
        upgrade, and the emulator, stopped with its last system."""
        path = self._dirs.path(owner)
        # Asked of every IPMI node too: nothing to read where nothing is.
        if not os.path.isdir(path):
            return False
        try:
            self._dirs.check_owner(path, owner)
        except exceptions.ResourceConflict:
            # Maybe being removed with its last system (its owner file
            # gone first): once that is done, gone; else truly not ours.
            with self._dirs.locked():
                if not os.path.isdir(path):
                    return False
                self._dirs.check_owner(path, owner)
        if os.path.exists(os.path.join(path, 'systems')):
            with self._dirs.locked():
                self._upgrade(path)
        served = _served(path, domain)
        if served is None:
            return False
        _unserve(path, domain, served)
        media_dir = self._media_dir(path)
        if os.path.isdir(media_dir):
            for name in media.files(media_dir, served):
                # Gone if the emulator went with its last other system.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)
        fault_files.write(path, domain, None)
        if _empty(os.path.join(path, DOMAINS)):
            with self._dirs.locked():
                # Still the last? An ensure may have served another.
                if os.path.isdir(path) and _empty(os.path.join(path,
                                                               DOMAINS)):
                    self._remove(path)
        LOG.info('Redfish emulator %s no longer serves %s',
                 os.path.basename(path), domain)
        return True

    def set_fault(self, domain, owner, fault):
        """Store ``fault`` where ``owner``'s emulator reads it
        (fault_files)."""
        def check(path):
            self._upgrade(path)
            if _served(path, domain) is None and fault is not None:
                raise self._error(
                    'fault the Redfish system of %s' % domain,
                    'the emulator of %s does not serve it' % owner)

        changed = self._dirs.set_fault(owner, domain, fault, check)
        if changed:
            LOG.info('Redfish system of %s: fault %s', domain,
                     fault['kind'] if fault else 'cleared')
        return changed

    def system_changes(self, owner, systems):
        path = self._dirs.path(owner)
        if not os.path.isdir(path):
            return dict.fromkeys(systems)
        with self._dirs.locked():
            self._upgrade(path)
            started = daemon_dirs.read_json(os.path.join(path, 'settings'))
            running = self._pid(path) is not None
            credentials = {}
            changes = {}
            for domain, bmc in systems.items():
                served = _served(path, domain)
                if served is None:
                    changes[domain] = None
                    continue
                found = ['system_id'] if served != bmc['system_id'] else []
                wanted = self._settings(path, bmc['address'], bmc['port'])
                found += [key for key in sorted(wanted)
                          if (started or {}).get(key) != wanted[key]]
                key = (bmc['username'], bmc['password'])
                if key not in credentials:
                    credentials[key] = self._htpasswd_holds(path, *key)
                if not credentials[key]:
                    found.append('credentials')
                if not running:
                    found.append(states.PART_STOPPED)
                changes[domain] = found
        return changes

    def endpoint_user(self, address, port):
        with (self._dirs.locked() if os.path.isdir(self._dirs.root)
              else contextlib.nullcontext()):
            for path in self._dirs.marked():
                started = daemon_dirs.read_json(
                    os.path.join(path, 'settings')) or {}
                if (started.get('port') == port
                        and _overlap(started.get('address'), address)
                        and self._pid(path) is not None):
                    return daemon_dirs.owner_of(path)
        try:
            _check_port_free(address, port)
        except exceptions.PortInUse:
            return ''
        return None

    def marked(self):
        """See base: this state directory's emulators."""
        return [{'kind': 'emulator', 'name': os.path.basename(path),
                 'mark': daemon_dirs.owner_of(path),
                 'systems': _all_served(path),
                 'running': self._pid(path) is not None}
                for path in self._dirs.marked()]

    def daemons(self):
        """See base: the emulators of every state directory."""
        return processes.daemons('redfish emulator', MARKER_ENV,
                                 'emulator.pid')

    def stop_orphans(self, directory):
        """See base; under the lock of the emulators of ``directory``'s
        state directory while it exists."""
        with contextlib.ExitStack() as stack:
            parent = os.path.dirname(directory)
            if parent == self._dirs.root:
                stack.enter_context(self._dirs.locked())
            elif os.path.isdir(parent):
                stack.enter_context(
                    fileutils.flocked(os.path.join(parent, 'lock')))
            pids = processes.marked_pids(self._marker(directory))
            orphans, why = processes.orphans(directory, 'emulator.pid', pids)
            if orphans and not processes.kill(
                    orphans, TERM_TIMEOUT, (signal.SIGTERM, signal.SIGKILL)):
                raise self._error('stop the Redfish emulator of %s'
                                  % directory, 'processes %s did not exit'
                                  % sorted(orphans))
        if orphans:
            LOG.info('Stopped Redfish emulator %s (pids %s): %s', directory,
                     sorted(orphans), why)
            if not os.path.isdir(directory):
                # Its directory went (a state directory deleted), and
                # with it what said which media are its own: they are
                # all of its media directory, named after it.
                self._remove_media(directory)
        return sorted(orphans)

    def _remove_media(self, path):
        """Remove the media directory of the emulator of ``path`` and
        the media in it (their names are those an emulator gives)."""
        media_dir = self._media_dir(path)
        if not os.path.isdir(media_dir):
            return
        for name in os.listdir(media_dir):
            if not name.endswith('.iso'):
                LOG.warning('Keeping %s: %s is no medium Tenks made',
                            media_dir, name)
                return
        shutil.rmtree(media_dir)
        LOG.info('Removed the media directory %s of the Redfish emulator '
                 '%s', media_dir, path)

    # Emulators and their files.

    def _settings(self, path, address, port):
        """What an emulator is started with, besides its systems and
        credentials: a change restarts it."""
        settings = {'address': address, 'port': port,
                    'libvirt_uri': self.conf.hostagent.libvirt_uri,
                    'media_dir': self._media_dir(path), 'tls': None}
        tls = self._tls_files()
        if tls:
            digest = hashlib.sha256()
            for name in tls:
                with open(name, 'rb') as f:
                    digest.update(f.read())
            settings['tls'] = digest.hexdigest()
        return settings

    def _media_dir(self, path):
        """Where the emulator of ``path`` keeps the media it inserted."""
        return os.path.join(self.conf.hostagent.pool_dir,
                            MEDIA_PREFIX + os.path.basename(path))

    def _tls_files(self):
        """(certificate, key) to serve HTTPS with, or None."""
        certificate = self.conf.hostagent.redfish_tls_certificate
        key = self.conf.hostagent.redfish_tls_key
        if bool(certificate) != bool(key):
            raise self._error(
                'serve HTTPS', '[hostagent] redfish_tls_certificate and '
                'redfish_tls_key go together')
        if not certificate:
            return None
        for name in (certificate, key):
            if not os.access(name, os.R_OK):
                raise self._error('serve HTTPS', 'cannot read %s' % name)
        return certificate, key

    def _htpasswd_holds(self, path, username, password):
        """Whether the htpasswd file of ``path`` lets exactly this user
        in, its hash of the cost we make."""
        name = os.path.join(path, 'htpasswd')
        found = htpasswd.digests(name)
        if list(found) != [username] or htpasswd.cost(
                found[username]) < BCRYPT_ROUNDS:
            return False
        verifier = self._verifiers.setdefault(path,
                                              htpasswd.Verifier(name))
        return verifier.check(username, password.encode())

    def _ensure_htpasswd(self, path, username, password):
        """Write the htpasswd file unless it holds these credentials
        (hashed at our cost); whether it wrote it."""
        if self._htpasswd_holds(path, username, password):
            return False
        import bcrypt
        digest = bcrypt.hashpw(password.encode(),
                               bcrypt.gensalt(rounds=BCRYPT_ROUNDS))
        daemon_dirs.write(os.path.join(path, 'htpasswd'),
                          '%s:%s\n' % (username, digest.decode()))
        return True

    def _config(self, path, settings):
        """sushy-tools' configuration file (Python) for ``settings``."""
        lines = [
            '# sushy-tools configuration, written by Tenks: do not edit.',
            'from hostagent.drivers.bmc import allowlist as _allowlist',
            'SUSHY_EMULATOR_LISTEN_IP = %r' % settings['address'],
            'SUSHY_EMULATOR_LISTEN_PORT = %d' % settings['port'],
            'SUSHY_EMULATOR_LIBVIRT_URI = %r' % settings['libvirt_uri'],
            'SUSHY_EMULATOR_AUTH_FILE = %r' % os.path.join(path, 'htpasswd'),
            'SUSHY_EMULATOR_ALLOWED_INSTANCES = _allowlist.AllowList(%r)'
            % os.path.join(path, ALLOWED),
            'SUSHY_EMULATOR_STATE_DIR = %r' % os.path.join(path, 'state'),
            'TENKS_DOWNLOAD_DIR = %r' % os.path.join(path, DOWNLOADS),
            'TENKS_MEDIA_DIR = %r' % settings['media_dir'],
            'SUSHY_EMULATOR_VMEDIA_DEVICES = %r' % media.DEVICES,
        ]
        if settings['tls']:
            lines += ['SUSHY_EMULATOR_SSL_CERT = %r'
                      % os.path.join(path, 'tls.crt'),
                      'SUSHY_EMULATOR_SSL_KEY = %r'
                      % os.path.join(path, 'tls.key')]
        return '\n'.join(lines) + '\n'

    def _start(self, path, settings):
        """Start the emulator of ``path``; return once it listens."""
        tls = self._tls_files()
        for source, copy in zip(tls or (None, None), ('tls.crt', 'tls.key'),
                                strict=True):
            if source is None:
                # No longer HTTPS: no key copy stays behind.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(path, copy))
                continue
            with open(source, 'rb') as f:
                daemon_dirs.write(os.path.join(path, copy), f.read())
        for name in ('state', DOWNLOADS):
            os.makedirs(os.path.join(path, name), mode=0o700, exist_ok=True)
        os.makedirs(settings['media_dir'], exist_ok=True)
        os.chmod(settings['media_dir'], 0o711)
        config = os.path.join(path, 'emulator.conf')
        daemon_dirs.write(config, self._config(path, settings))
        log_file = os.path.join(path, 'emulator.log')
        proc = processes.spawn(
            [sys.executable, '-m', 'hostagent.drivers.bmc.emulator',
             '--config', config], log_file, MARKER_ENV, path)
        self._procs[path] = proc
        daemon_dirs.write(os.path.join(path, 'emulator.pid'), str(proc.pid))

        def listening():
            if proc.poll() is not None:
                raise self._error('start the Redfish emulator',
                                  'it exited with status %d; see %s'
                                  % (proc.returncode, log_file))
            return _tcp_open(settings['address'], settings['port'])

        try:
            if not processes.poll(listening, START_TIMEOUT, POLL):
                raise self._error(
                    'start the Redfish emulator', '%s:%d was not open '
                    'within %d s; see %s' % (settings['address'],
                                             settings['port'],
                                             START_TIMEOUT, log_file))
        except exceptions.DriverError:
            self._stop(path)
            raise
        daemon_dirs.write(os.path.join(path, 'settings'),
                          json.dumps(settings))

    def _pid(self, path):
        """The pid of the running emulator of ``path``, or None."""
        return processes.running(os.path.join(path, 'emulator.pid'),
                                 self._marker(path))

    @staticmethod
    def _marker(path):
        return processes.mark(MARKER_ENV, path)

    def _stop(self, path):
        """Stop every process of the emulator of ``path`` (ours only)."""
        pids = processes.marked_pids(self._marker(path))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if not processes.poll(lambda: not any(map(processes.alive, pids)),
                              TERM_TIMEOUT, POLL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not processes.poll(
                    lambda: not any(map(processes.alive, pids)),
                    KILL_TIMEOUT, POLL):
                raise self._error('stop the Redfish emulator', 'processes '
                                  '%s did not exit' % sorted(pids))
        proc = self._procs.pop(path, None)
        if proc is not None:
            proc.poll()  # reap our child
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(path, 'settings'))
        # Downloads are kept only by the process that made them.
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(os.path.join(path, DOWNLOADS))
        if pids:
            LOG.info('Stopped Redfish emulator %s (pids %s)',
                     os.path.basename(path), sorted(pids))

    def _remove(self, path):
        """Stop the emulator and remove its directory."""
        self._stop(path)
        self._remove_media(path)
        shutil.rmtree(path)
        self._verifiers.pop(path, None)

    def _upgrade(self, path):
        """Give an emulator of a Tenks before issue 23 (one ``systems``
        file of all its systems) its ``allowed`` directory, restarted on
        it if it runs: what it runs reads only the file."""
        old = os.path.join(path, 'systems')
        systems = daemon_dirs.read_json(old)
        if systems is None:
            return
        for domain, system_id in systems.items():
            _serve(path, domain, system_id, None)
        settings = daemon_dirs.read_json(os.path.join(path, 'settings'))
        if self._pid(path) is not None and settings is not None:
            self._stop(path)
            self._start(path, settings)
        os.unlink(old)

    def _undo(self, path, domain, served, made_dir):
        """Leave nothing a failed ensure_system made."""
        try:
            others = [name for name in daemon_dirs.listdir(
                os.path.join(path, DOMAINS)) if name != domain]
            if made_dir or (served is None and not others):
                self._remove(path)
            elif served is None:
                new = _served(path, domain)
                if new is not None:
                    _unserve(path, domain, new)
            else:
                _serve(path, domain, served, _served(path, domain))
        except Exception as e:
            LOG.error('Could not undo the Redfish system of %s: %s',
                      domain, e)

    def _error(self, action, reason):
        return exceptions.DriverError(driver=DRIVER, action=action,
                                      reason=reason)


def _named(path, kind, name):
    """The file of ``name`` in directory ``kind`` (ALLOWED or DOMAINS)
    of emulator ``path``."""
    if '/' in name or name.startswith('.') or not name:
        raise exceptions.DriverError(
            driver=DRIVER, action='serve %r' % name,
            reason='a name that is empty, has / or a leading . cannot '
                   'name a file')
    return os.path.join(path, kind, name)


def _empty(directory):
    """Whether ``directory`` has no file (but those daemon_dirs.write is
    writing), read only as far as the first; gone counts as empty."""
    try:
        with os.scandir(directory) as entries:
            return not any(not e.name.endswith('.tmp') for e in entries)
    except FileNotFoundError:
        return True


def _served(path, domain):
    """The system id emulator ``path`` serves ``domain`` as, or None."""
    return daemon_dirs.read(_named(path, DOMAINS, domain))


def _all_served(path):
    """{domain: system id} of every system emulator ``path`` serves."""
    if os.path.isfile(os.path.join(path, 'systems')):
        return daemon_dirs.read_json(os.path.join(path, 'systems')) or {}
    return {name: _served(path, name)
            for name in daemon_dirs.listdir(os.path.join(path, DOMAINS))}


def _serve(path, domain, system_id, old):
    """Let emulator ``path`` serve ``domain`` as ``system_id`` instead
    of as ``old`` (None: it did not serve it)."""
    for kind in (ALLOWED, DOMAINS):
        os.makedirs(os.path.join(path, kind), mode=0o700, exist_ok=True)
    daemon_dirs.write(_named(path, ALLOWED, system_id), domain)
    daemon_dirs.write(_named(path, DOMAINS, domain), system_id)
    if old is not None and old != system_id:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_named(path, ALLOWED, old))


def _unserve(path, domain, system_id):
    """Stop emulator ``path`` serving ``domain`` (as ``system_id``)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_named(path, ALLOWED, system_id))
    os.unlink(_named(path, DOMAINS, domain))


def _overlap(bound, address):
    """Whether a socket bound to ``bound`` takes ``address`` too."""
    if bound is None:
        return False
    if bound == address:
        return True
    return any(ipaddress.ip_address(a).is_unspecified
               for a in (bound, address))


def _connect_address(address):
    """Where to reach a socket bound to ``address``."""
    ip = ipaddress.ip_address(address)
    if ip.is_unspecified:
        return '::1' if ip.version == 6 else '127.0.0.1'
    return address


def _tcp_open(address, port):
    target = _connect_address(address)
    family = socket.AF_INET6 if ':' in target else socket.AF_INET
    with socket.socket(family) as sock:
        sock.settimeout(1)
        return sock.connect_ex((target, port)) == 0


def _check_port_free(address, port):
    """Raise PortInUse unless a TCP socket can listen on address:port,
    as the emulator's server would (with SO_REUSEADDR)."""
    family = socket.AF_INET6 if ':' in address else socket.AF_INET
    with socket.socket(family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
            sock.listen(1)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise exceptions.PortInUse(port=port,
                                           address=address) from e
            raise exceptions.DriverError(
                driver=DRIVER, action='bind %s:%d' % (address, port),
                reason=e.strerror) from e
