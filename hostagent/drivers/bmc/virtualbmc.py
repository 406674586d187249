"""IPMI BMCs emulated by a virtualbmc daemon (vbmcd) that Tenks runs.

The driver starts its own vbmcd on demand, with its configuration and
state under ``<state_dir>/vbmc`` (mode 0700: vbmcd stores the BMC
passwords in plain text there), and talks to it over its ZeroMQ control
channel on a loopback port: ``[hostagent] vbmcd_control_port`` when set,
else a port chosen free when the daemon starts and remembered in its
configuration file, so that every state directory has a vbmcd of its
own. vbmcd runs one child process per BMC. It outlives the hostagent
process and is stopped when its last BMC is removed.
"""

import configparser
import contextlib
import errno
import fcntl
import ipaddress
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import zmq

from hostagent.drivers import base
from hostagent.drivers.bmc.processes import alive as _alive
from hostagent.drivers.bmc.processes import poll as _poll
from tenks import exceptions

LOG = logging.getLogger(__name__)

DRIVER = 'virtualbmc'
CONFIG_ENV = 'VIRTUALBMC_CONFIG'
REQUEST_TIMEOUT = 10  # s; vbmcd answers within milliseconds when well
START_TIMEOUT = 15  # s for vbmcd to open its control port
BIND_TIMEOUT = 10  # s for a BMC child to bind its UDP port
KILL_TIMEOUT = 5  # s for killed processes to disappear


class VirtualBmcDriver(base.BmcDriver):
    """BMCs served by a private vbmcd, driven over its control channel."""

    def __init__(self, conf):
        super().__init__(conf)
        self._dir = os.path.join(conf.state_dir, 'vbmc')
        self._domains_dir = os.path.join(self._dir, 'domains')
        self._config_file = os.path.join(self._dir, 'virtualbmc.conf')
        self._pid_file = os.path.join(self._dir, 'vbmcd.pid')
        self._log_file = os.path.join(self._dir, 'vbmcd.log')
        self._configured_port = conf.hostagent.vbmcd_control_port
        # Read again under the lock: another process may have chosen it.
        self._port = None
        # Every process of our vbmcd, its BMC children included, carries
        # this in its environment; that tells them from anybody else's.
        self._marker = ('%s=%s' % (CONFIG_ENV, self._config_file)).encode()
        self._zmq = zmq.Context()
        self._lock = threading.Lock()
        self._proc = None

    def ensure_bmc(self, domain, address, port, username, password):
        """A running BMC for ``domain`` listening on ``address:port``.

        Returns only once the BMC's UDP port is bound, so that the first
        IPMI request is answered at once. Raises PortInUse when something
        else holds the port.
        """
        with self._locked():
            # vbmcd started again (it had died) starts the BMCs it knows:
            # a repair, even when this one's entry was as asked.
            restarted = self._ensure_daemon()
            entry = self._read_entry(domain)
            created = entry is None
            wanted = {'address': address, 'port': str(port),
                      'username': username, 'password': password,
                      'libvirt_uri': self.conf.hostagent.libvirt_uri}
            changed = not (
                entry is not None
                and all(entry.get(k) == v for k, v in wanted.items())
                and self._status(domain) == 'running')
            if changed:
                try:
                    self._add(domain, address, port, username, password)
                except Exception:
                    # A vbmcd serving nothing goes, as after a removal.
                    self._stop_if_idle()
                    raise
        # Also when unchanged: another thread may have just started it.
        if not _poll(lambda: _udp_bound(address, port), BIND_TIMEOUT):
            # vbmcd respawns a dead BMC every few seconds: leave none of
            # ours. One this request found is not its to delete; the
            # hostagent runs no other request for this BMC meanwhile.
            with self._locked():
                if changed and self._exists(domain):
                    self._wait_gone(self._delete(domain),
                                    'delete the BMC of %s' % domain)
                self._stop_if_idle()
            raise self._error('start the BMC of %s' % domain,
                              '%s:%d was not bound within %d s; see %s'
                              % (address, port, BIND_TIMEOUT,
                                 self._log_file))
        if changed:
            LOG.info('Added BMC for %s on %s:%d', domain, address, port)
        return base.ensured(created, changed or restarted)

    def remove_bmc(self, domain):
        """Stop and delete the BMC; stop vbmcd once it serves none.

        Returns once the BMC's process is gone and its port free, also
        when vbmcd is down: a BMC child of a vbmcd that died keeps
        answering on its port until killed.
        """
        pids = set()
        with self._locked():
            removed = self._exists(domain)
            if self._running():
                if removed:
                    pids = self._delete(domain)
            elif removed:
                entry = self._read_entry(domain)
                if entry is not None:
                    pids = self._holders(entry['address'],
                                         int(entry['port']))
                shutil.rmtree(os.path.join(self._domains_dir, domain))
                self._kill(pids)
            else:
                return False
        if removed:
            self._wait_gone(pids, 'stop the BMC of %s' % domain)
            LOG.info('Removed BMC for %s', domain)
        with self._locked():
            self._stop_if_idle()
        return removed

    def _add(self, domain, address, port, username, password):
        """(Re)make the BMC of ``domain`` in vbmcd and start it; none is
        left when that fails (vbmcd would respawn it)."""
        if self._exists(domain):
            self._wait_gone(self._delete(domain),
                            'release the old BMC of %s' % domain)
        _check_port_free(address, port)
        try:
            self._request(
                'add', domain_name=domain, username=username,
                password=password, port=port, address=address,
                libvirt_uri=self.conf.hostagent.libvirt_uri,
                libvirt_sasl_username=None, libvirt_sasl_password=None)
            self._request('start', domain_names=[domain])
        except exceptions.DriverError:
            if self._exists(domain):
                self._wait_gone(self._delete(domain),
                                'delete the BMC of %s' % domain)
            raise

    def _stop_if_idle(self):
        """Stop vbmcd when it serves no BMC (lock held)."""
        if not self._entries():
            self._stop_daemon()

    def list_bmcs(self):
        """Return [{'domain', 'address', 'port', 'status'}]."""
        with self._locked():
            if self._running():
                rows = self._request('list')['rows']
                return [{'domain': name, 'address': address,
                         'port': int(port), 'status': status}
                        for name, status, address, port in rows]
            # vbmcd is down: so are the BMCs it would serve.
            bmcs = []
            for name in self._entries():
                entry = self._read_entry(name)
                if entry is not None:
                    bmcs.append({'domain': name,
                                 'address': entry['address'],
                                 'port': int(entry['port']),
                                 'status': 'down'})
            return bmcs

    def bmc_changes(self, bmcs):
        """See base; one vbmcd listing, and none when vbmcd is down.

        Passwords are compared, never returned.
        """
        if not os.path.isdir(self._domains_dir):
            return dict.fromkeys(bmcs)
        with self._locked():
            if self._daemon_pid() is None:
                # ensure_bmc would start vbmcd and make every BMC anew.
                return dict.fromkeys(bmcs)
            status = {name: status for name, status, _, _
                      in self._request('list')['rows']}
            entries = {domain: self._read_entry(domain) for domain in bmcs}
        changes = {}
        for domain, bmc in bmcs.items():
            entry = entries[domain]
            if entry is None or domain not in status:
                changes[domain] = None
                continue
            wanted = dict(bmc, port=str(bmc['port']),
                          libvirt_uri=self.conf.hostagent.libvirt_uri)
            changes[domain] = [
                key for key in sorted(wanted) if entry.get(key) != wanted[key]]
            if status[domain] != 'running':
                changes[domain].append('stopped')
        return changes

    @contextlib.contextmanager
    def _locked(self):
        """Serialise control operations among threads and processes.

        Another hostagent process (embedded mode) may share state_dir.
        """
        with self._lock:
            for path in (self._dir, self._domains_dir):
                os.makedirs(path, mode=0o700, exist_ok=True)
                os.chmod(path, 0o700)
            fd = os.open(os.path.join(self._dir, 'lock'),
                         os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._port = self._current_port()
                yield
            finally:
                os.close(fd)

    def _current_port(self):
        """The control port: that of the vbmcd that runs, else the
        configured one, else the one our vbmcd had last (or None)."""
        config = configparser.ConfigParser(interpolation=None)
        config.read(self._config_file)
        remembered = config.getint('default', 'server_port', fallback=None)
        if remembered and self._daemon_pid() is not None:
            return remembered
        return self._configured_port or remembered

    def _error(self, action, reason):
        return exceptions.DriverError(driver=DRIVER, action=action,
                                      reason=reason)

    def _request(self, command, **args):
        """Send one request to vbmcd and return its reply.

        A REQ socket that timed out cannot send again, so every request
        gets a fresh one (about 0.6 ms in all).
        """
        sock = self._socket()
        try:
            sock.send_json(dict(args, command=command))
            reply = sock.recv_json()
        except zmq.Again:
            raise self._error(
                'run vbmcd %r' % command, 'no answer on 127.0.0.1:%d '
                'within %d s' % (self._port, REQUEST_TIMEOUT)) from None
        finally:
            sock.close()
        if reply.get('rc'):
            raise self._error('run vbmcd %r' % command,
                              '; '.join(reply.get('msg') or
                                        ['rc %s' % reply['rc']]))
        return reply

    def _socket(self):
        """A REQ socket to vbmcd; closing it drops what is unsent."""
        sock = self._zmq.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDTIMEO, REQUEST_TIMEOUT * 1000)
        sock.setsockopt(zmq.RCVTIMEO, REQUEST_TIMEOUT * 1000)
        sock.connect('tcp://127.0.0.1:%d' % self._port)
        return sock

    def _status(self, domain):
        return dict(self._request('show', domain_name=domain)['rows'])[
            'status']

    def _exists(self, domain):
        return os.path.isdir(os.path.join(self._domains_dir, domain))

    def _entries(self):
        return sorted(filter(self._exists, os.listdir(self._domains_dir)))

    def _read_entry(self, domain):
        """The stored settings of the domain's BMC, or None."""
        config = configparser.ConfigParser(interpolation=None)
        if not config.read(os.path.join(self._domains_dir, domain,
                                        'config')):
            return None
        return dict(config['VirtualBMC'])

    def _delete(self, domain):
        """Delete the BMC; return the pids of our processes serving it."""
        entry = self._read_entry(domain)
        pids = (self._holders(entry['address'], int(entry['port']))
                if entry else set())
        self._request('delete', domain_names=[domain])
        return pids

    def _holders(self, address, port):
        """Pids of our processes holding a socket on address:port."""
        inodes = {'socket:[%s]' % inode
                  for inode in _udp_inodes(address, port)}
        pids = set()
        for pid in self._our_pids():
            fd_dir = '/proc/%d/fd' % pid
            with contextlib.suppress(OSError):
                if inodes & {os.readlink(os.path.join(fd_dir, fd))
                             for fd in os.listdir(fd_dir)}:
                    pids.add(pid)
        return pids

    def _wait_gone(self, pids, action):
        if not _poll(lambda: not any(map(_alive, pids)), KILL_TIMEOUT):
            raise self._error(action, 'processes %s did not exit within '
                              '%d s' % (sorted(pids), KILL_TIMEOUT))

    def _is_ours(self, pid):
        try:
            with open('/proc/%d/environ' % pid, 'rb') as f:
                return self._marker in f.read().split(b'\0')
        except OSError:
            return False

    def _our_pids(self):
        """Live processes of our vbmcd, orphaned BMC children included.

        Never this process, even should it have inherited the marker.
        """
        return {int(pid) for pid in os.listdir('/proc')
                if pid.isdigit() and int(pid) != os.getpid()
                and self._is_ours(int(pid)) and _alive(int(pid))}

    def _daemon_pid(self):
        """The pid of our running vbmcd, or None."""
        try:
            with open(self._pid_file) as f:
                pid = int(f.read())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) and self._is_ours(pid) else None

    def _running(self):
        """Whether our vbmcd runs.

        Raises ResourceConflict when a process that is not ours holds
        its control port.
        """
        if self._daemon_pid() is not None:
            return True
        # A port of our own choosing that got taken is chosen anew.
        if (self._configured_port and _tcp_open(self._port)
                and not self._our_pids()):
            raise exceptions.ResourceConflict(
                kind='vbmcd control port', name='127.0.0.1:%d' % self._port,
                owner='the vbmcd of %s' % self._dir,
                reason='another process listens on it; set [hostagent] '
                       'vbmcd_control_port to a free port')
        return False

    def _ensure_daemon(self):
        """Start vbmcd unless it runs; return once it answers, saying
        whether it had to start it."""
        if self._running():
            return False
        # Children of a vbmcd that died hard may still hold ports.
        self._kill(self._our_pids())
        if not self._configured_port and (self._port is None
                                          or _tcp_open(self._port)):
            self._port = _free_tcp_port()
        config = configparser.ConfigParser(interpolation=None)
        config['default'] = {'config_dir': self._domains_dir,
                             'pid_file': self._pid_file,
                             'server_port': str(self._port)}
        # debug would log every request, passwords included.
        config['log'] = {'logfile': self._log_file, 'debug': 'false'}
        with open(os.open(self._config_file,
                          os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                  'w') as f:
            config.write(f)
        vbmcd = os.path.join(os.path.dirname(sys.executable), 'vbmcd')
        start = time.monotonic()
        log = os.open(self._log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                      0o600)
        try:
            # A session of its own: vbmcd must outlive the hostagent
            # process and miss the signals sent to its process group.
            self._proc = subprocess.Popen(
                [vbmcd, '--foreground'], stdin=subprocess.DEVNULL,
                stdout=log, stderr=log, start_new_session=True,
                umask=0o077, env=dict(os.environ, **{
                    CONFIG_ENV: self._config_file}))
        finally:
            os.close(log)
        try:
            if not _poll(self._answering, START_TIMEOUT):
                raise self._error('start vbmcd', 'it did not open '
                                  '127.0.0.1:%d within %d s; see %s'
                                  % (self._port, START_TIMEOUT,
                                     self._log_file))
            self._request('list')
        except exceptions.DriverError:
            self._kill(self._our_pids())
            raise
        LOG.info('Started vbmcd (pid %d, control port %d) in %.2f s',
                 self._proc.pid, self._port, time.monotonic() - start)
        return True

    def _answering(self):
        """Whether the vbmcd we started listens; raise if it exited."""
        if self._proc.poll() is not None:
            raise self._error('start vbmcd', 'it exited with status %d; '
                              'see %s' % (self._proc.returncode,
                                          self._log_file))
        return _tcp_open(self._port)

    def _stop_daemon(self):
        """Stop vbmcd and make sure none of its BMC processes survive.

        Only ever called, under the lock, once vbmcd serves no BMC: it
        has nothing left to save (what it knows is in its files), so it
        is killed rather than asked. Asked, it took 60-80 ms to exit, and
        a SIGTERM that landed just before its zmq poll waited up to 3 s.
        """
        pid = self._daemon_pid()
        if pid is not None:
            LOG.info('Stopping vbmcd (pid %d): it serves no BMC', pid)
        self._kill(self._our_pids())
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._pid_file)
        if self._proc is not None:
            self._proc.poll()  # reap our child
            self._proc = None

    def _kill(self, pids):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._wait_gone(pids, 'kill vbmcd processes')


def _free_tcp_port():
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _tcp_open(port):
    """Whether something listens on the loopback TCP port."""
    with socket.socket() as sock:
        return sock.connect_ex(('127.0.0.1', port)) == 0


def _udp_sockaddr(address, port):
    return socket.getaddrinfo(address, port, 0, socket.SOCK_DGRAM)[0]


def _check_port_free(address, port):
    """Raise PortInUse unless a UDP socket can bind address:port.

    The address is resolved as pyghmi resolves it for the BMC.
    """
    family, _, _, _, sockaddr = _udp_sockaddr(address, port)
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        try:
            sock.bind(sockaddr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise exceptions.PortInUse(port=port,
                                           address=address) from e
            raise exceptions.DriverError(
                driver=DRIVER, action='bind %s:%d' % (address, port),
                reason=e.strerror) from e


def _udp_inodes(address, port):
    """Inodes of the UDP sockets bound to address:port or a wildcard.

    Read from /proc rather than by trying to bind: a test bind could
    take the port from under a BMC that is binding it.
    """
    wanted = ipaddress.ip_address(_udp_sockaddr(address, port)[4][0])
    inodes = set()
    for table in ('/proc/net/udp', '/proc/net/udp6'):
        with contextlib.suppress(FileNotFoundError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                hex_ip, hex_port = fields[1].split(':')
                if int(hex_port, 16) != port:
                    continue
                # The kernel prints the address as host-order words.
                words = [int(hex_ip[i:i + 8], 16)
                         for i in range(0, len(hex_ip), 8)]
                ip = ipaddress.ip_address(
                    struct.pack('=%dI' % len(words), *words))
                if (wanted.is_unspecified or ip.is_unspecified
                        or wanted in (ip, getattr(ip, 'ipv4_mapped', None))):
                    inodes.add(fields[9])
    return inodes


def _udp_bound(address, port):
    return bool(_udp_inodes(address, port))
