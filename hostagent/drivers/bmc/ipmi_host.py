"""The IPMI host: one process serving every IPMI BMC of a state directory.

Each BMC is virtualbmc's VirtualBMC (pyghmi's IPMI server, whose power
and boot device commands act on a libvirt domain) on a UDP socket of its
own. One thread receives the packets of all of them and a pool of
workers answers, one packet of a BMC at a time (a BMC's sessions are not
thread-safe), so that one domain's slow power-off delays no other BMC.

It is controlled only over the Unix socket ``control.sock`` of its
directory (see ipmi_store), and answers processes of its own user only
(SO_PEERCRED): one request per connection, a line of JSON each way.

    {"op": "add", "bmc": BMC}        -> {"created": bool, "changed": bool}
    {"op": "remove", "domain": NAME} -> {"removed": bool}
    {"op": "list"}                   -> {"bmcs": [{"domain", "address",
                                         "port", "status"}]}
    {"op": "compare", "bmcs": [BMC]} -> {"changes": {NAME: null (none) or
                                         [keys that differ, "stopped"]}}

BMC: {"domain", "address", "port", "username", "password",
"libvirt_uri", "owner"}; the owner is the mark of whom it was made for,
which the driver checks before it changes or removes a BMC (a compare
lists "owner" when another's). The answer is ``{"result": ..., "bmcs":
N}`` or ``{"error": MESSAGE, "kind": "invalid" | "denied" |
"port_in_use" | "failed", "bmcs": N}``, N the number of BMCs it then
holds. No request stops it.

A BMC's status is "running", or "error" when a stored one's port could
not be bound as the host started. A BMC shows the fault (tenks.bmc_faults)
the driver stored for it in ``faults/`` (see fault_files), read again
whenever that file changes. Run as ``python -m
hostagent.drivers.bmc.ipmi_host DIRECTORY``.
"""

import collections
import concurrent.futures
import errno
import json
import os
import selectors
import socket
import struct
import sys
import threading
import time
import uuid

from oslo_config import cfg
from oslo_log import log as logging
from pyghmi.ipmi.private import serversession
from pyghmi.ipmi.private import session as ipmisession
from virtualbmc import exception as vbmc_exception
from virtualbmc import utils as vbmc_utils
from virtualbmc import vbmc

from hostagent.drivers.bmc import fault_files
from hostagent.drivers.bmc import ipmi_store
from tenks import bmc_faults
from tenks import states

LOG = logging.getLogger(__name__)

RUNNING = 'running'
ERROR = 'error'
OPS = {'add': {'bmc'}, 'remove': {'domain'}, 'list': set(),
       'compare': {'bmcs'}}
MAX_REQUEST = 8 << 20  # bytes: a compare of some 40,000 BMCs
CONTROL_TIMEOUT = 10  # s a client has to send its request
WORKERS = 32  # threads answering IPMI packets
MAX_PACKET = 3000  # bytes, as pyghmi reads
MAX_PENDING = 64  # packets of a BMC waiting for a worker; more are dropped
MAX_SESSIONS = 64  # per BMC; the least recently used goes first
UNSPECIFIED_ERROR = 0xff  # the completion code of an injected error
# pyghmi means a server session to expire after 60 s idle but never
# expires it; a client that keeps it longer sends keepalives.
SESSION_TIMEOUT = 60

# pyghmi keeps the sessions it opens in a process-wide table, which the
# host empties at once (each BMC keeps its own) under this lock.
_SESSIONLESS = threading.Lock()


class Refused(Exception):
    """A request the host does not carry out, and why."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


class _HostSocket(serversession.IpmiServer):
    """pyghmi's IPMI server on the socket the host bound.

    IpmiServer.__init__ binds a socket of its own that pyghmi's
    process-wide IO thread serves; this sets the rest as it does.
    """

    def __init__(self, authdata, port=623, bmcuuid=None, address='::'):
        self.revision = 0
        self.deviceid = 0
        self.firmwaremajor = 1
        self.firmwareminor = 0
        self.ipmiversion = 2
        self.additionaldevices = 0
        self.mfgid = 0
        self.prodid = 0
        self.pktqueue = collections.deque()
        self.uuid = bmcuuid or uuid.uuid4()
        self.authdata = authdata
        # Channel 1, IPMI 2.0 authentication only.
        self.authcap = struct.pack('9B', 0, 1, 0b10000000, 0b00000100,
                                   0b00000010, 0, 0, 0, 0)
        self.kg = None
        self.timeout = 60
        self.port = port


class _Bmc(vbmc.VirtualBMC, _HostSocket):
    """virtualbmc's BMC of a domain, on ``sock``, showing ``fault`` (set
    before each packet is handled)."""

    def __init__(self, sock, definition):
        self.serversocket = sock
        self.fault = None
        super().__init__(
            definition['username'], definition['password'],
            definition['port'], definition['address'],
            definition['domain'], definition['libvirt_uri'])

    def handle_raw_request(self, request, session):
        if bmc_faults.fails(self.fault):
            return session.send_ipmi_response(code=UNSPECIFIED_ERROR)
        return super().handle_raw_request(request, session)

    def _ignores(self, kind):
        return self.fault is not None and self.fault['kind'] == kind

    def set_boot_device(self, bootdevice):
        if self._ignores(bmc_faults.BOOT_DEVICE_IGNORED):
            return None
        return super().set_boot_device(bootdevice)

    def power_on(self):
        return None if self._ignores(bmc_faults.POWER_STUCK) else (
            super().power_on())

    def power_off(self):
        return None if self._ignores(bmc_faults.POWER_STUCK) else (
            super().power_off())

    def power_shutdown(self):
        return None if self._ignores(bmc_faults.POWER_STUCK) else (
            super().power_shutdown())

    def power_reset(self):
        return None if self._ignores(bmc_faults.POWER_STUCK) else (
            super().power_reset())


class _Served:
    """A BMC the host holds: its definition and, while it runs, its
    socket, sessions and the packets waiting for a worker."""

    def __init__(self, definition, faults, sock=None, error=None):
        self.definition = definition
        self.faults = faults
        self.sock = sock
        self.error = error
        self.bmc = _Bmc(sock, definition) if sock is not None else None
        self.sessions = {}  # client address: [session, last seen]
        self.swept = time.monotonic()
        self.packets = collections.deque()
        self.busy = False  # a worker has its packets
        self.lock = threading.Lock()

    @property
    def status(self):
        return RUNNING if self.sock is not None else ERROR

    def answer(self, data, address):
        """Handle one packet from ``address``, as pyghmi's IO thread
        would route it."""
        data = bytearray(data)
        if len(data) < 5 or data[0] != 6 or data[2:4] != b'\xff\x07':
            return  # not IPMI over RMCP
        fault = self.bmc.fault = self.faults.get(self.definition['domain'])
        if fault is not None and fault['kind'] == bmc_faults.UNREACHABLE:
            return
        if fault is not None and fault['kind'] == bmc_faults.SLOW:
            time.sleep(fault['delay'])
        now = time.monotonic()
        self._expire(now)
        entry = self.sessions.get(address)
        if entry is not None and data[4] == 6:  # IPMI 2.0, in its session
            entry[1] = now
            entry[0]._handle_ipmi_packet(data, sockaddr=address)
            return
        with _SESSIONLESS:
            self.bmc.sessionless_data(data, address)
            opened = ipmisession.Session.bmc_handlers.get(address, {})
            session = opened.pop(self.bmc.port, None)
            if not opened:
                ipmisession.Session.bmc_handlers.pop(address, None)
        if session is not None:
            self.sessions[address] = [session, now]
            if len(self.sessions) > MAX_SESSIONS:
                oldest = min(self.sessions,
                             key=lambda a: self.sessions[a][1])
                del self.sessions[oldest]

    def _expire(self, now):
        if now - self.swept < SESSION_TIMEOUT / 2:
            return
        self.swept = now
        for address, (_, seen) in list(self.sessions.items()):
            if now - seen > SESSION_TIMEOUT:
                del self.sessions[address]


class Host:
    """The BMCs of ``directory``, served and controlled."""

    def __init__(self, directory):
        self.directory = directory
        # Only the control thread changes them (after load).
        self._bmcs = {}
        self._faults = fault_files.Reader(directory)
        self._selector = selectors.DefaultSelector()
        self._workers = concurrent.futures.ThreadPoolExecutor(
            WORKERS, thread_name_prefix='ipmi')

    def load(self):
        """Serve every stored BMC."""
        for definition in ipmi_store.read_all(self.directory).values():
            try:
                served = _Served(definition, self._faults,
                                 self._bind(definition))
            except Refused as e:
                LOG.error('Cannot serve the BMC of %s: %s',
                          definition['domain'], e)
                served = _Served(definition, self._faults, error=str(e))
            else:
                self._selector.register(served.sock, selectors.EVENT_READ,
                                        served)
            self._bmcs[definition['domain']] = served
        LOG.info('Serving %d BMCs of %s', len(self._bmcs), self.directory)

    # IPMI.

    def serve_ipmi(self):
        """Receive for every BMC, for ever (a thread of its own)."""
        while True:
            for key, _ in self._selector.select():
                try:
                    self._receive(key.data)
                except Exception:
                    LOG.exception('Receiving for the BMC of %s failed',
                                  key.data.definition['domain'])

    def _receive(self, served):
        # A few packets at a time, so that one BMC starves no other.
        for _ in range(MAX_PENDING):
            try:
                packet = served.sock.recvfrom(MAX_PACKET,
                                              socket.MSG_DONTWAIT)
            except OSError:
                return  # none left, or the BMC was just removed
            with served.lock:
                if len(served.packets) >= MAX_PENDING:
                    continue  # the client sends it again
                served.packets.append(packet)
                if served.busy:
                    continue
                served.busy = True
            self._workers.submit(self._drain, served)

    @staticmethod
    def _drain(served):
        while True:
            with served.lock:
                if not served.packets:
                    served.busy = False
                    return
                data, address = served.packets.popleft()
            try:
                served.answer(data, address)
            except Exception as e:
                # Packets come from the network: no traceback per packet.
                LOG.debug('BMC of %s: dropped a packet from %s: %r',
                          served.definition['domain'], address, e)

    def _bind(self, definition):
        """A UDP socket bound as pyghmi binds a BMC's."""
        address, port = definition['address'], definition['port']
        family, _, _, _, sockaddr = socket.getaddrinfo(
            address, port, 0, socket.SOCK_DGRAM)[0]
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(sockaddr)
        except OSError as e:
            sock.close()
            if e.errno == errno.EADDRINUSE:
                raise Refused('port_in_use', '%s:%d is in use' % (
                    address, port)) from e
            raise Refused('failed', 'cannot bind %s:%d: %s' % (
                address, port, e.strerror)) from e
        return sock

    def _close(self, served):
        self._selector.unregister(served.sock)
        served.sock.close()

    # Control.

    def serve_control(self):
        """Answer control requests on control.sock, for ever."""
        path = os.path.join(self.directory, ipmi_store.CONTROL)
        if os.path.lexists(path):
            os.unlink(path)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        os.chmod(path, 0o600)
        server.listen(16)
        while True:
            try:
                conn, _ = server.accept()
            except OSError as e:  # out of file descriptors, say
                LOG.error('Cannot accept a control connection: %s', e)
                time.sleep(0.1)
                continue
            with conn:
                try:
                    self._answer(conn)
                except Exception:
                    LOG.exception('Answering a control request failed')

    def _answer(self, conn):
        conn.settimeout(CONTROL_TIMEOUT)
        uid = struct.unpack('3i', conn.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED,
            struct.calcsize('3i')))[1]
        try:
            # Read (not looked at when refused) so that the client gets
            # its answer rather than a reset.
            line = conn.makefile('rb').readline(MAX_REQUEST + 1)
        except OSError as e:
            line, reply = None, self._error('invalid',
                                            'no request read: %s' % e)
        if uid != os.geteuid():
            LOG.warning('Refused a control connection of uid %d', uid)
            reply = self._error('denied', 'only uid %d may control the '
                                'BMCs' % os.geteuid())
        elif line is not None:
            reply = self.handle(line)
        try:
            conn.sendall(json.dumps(reply).encode() + b'\n')
        except OSError as e:
            LOG.debug('A control client left before its answer: %s', e)

    def handle(self, line):
        """The answer to the request ``line`` (bytes)."""
        try:
            op, args = _parse(line)
            result = getattr(self, '_' + op)(**args)
        except Refused as e:
            return self._error(e.kind, str(e))
        except Exception as e:
            LOG.exception('Request failed')
            return self._error('failed', str(e) or repr(e))
        return {'result': result, 'bmcs': len(self._bmcs)}

    def _error(self, kind, message):
        return {'error': message, 'kind': kind, 'bmcs': len(self._bmcs)}

    def _add(self, bmc):
        domain = bmc['domain']
        old = self._bmcs.get(domain)
        if (old is not None and old.definition == bmc
                and old.status == RUNNING):
            return {'created': False, 'changed': False}
        try:
            vbmc_utils.check_libvirt_connection_and_domain(
                bmc['libvirt_uri'], domain)
        except vbmc_exception.VirtualBMCError as e:
            raise Refused('failed', str(e)) from e
        # New credentials keep the socket; a new port is bound before
        # the old one goes, so that a failure leaves the old BMC.
        keep = old is not None and old.status == RUNNING and all(
            old.definition[k] == bmc[k] for k in ('address', 'port'))
        sock = old.sock if keep else self._bind(bmc)
        try:
            ipmi_store.write(self.directory, bmc)
        except OSError as e:
            if not keep:
                sock.close()
            raise Refused('failed', 'cannot store the BMC of %s: %s' % (
                domain, e.strerror)) from e
        served = _Served(bmc, self._faults, sock)
        if keep:
            self._selector.modify(sock, selectors.EVENT_READ, served)
        else:
            if old is not None and old.status == RUNNING:
                self._close(old)
            self._selector.register(sock, selectors.EVENT_READ, served)
        self._bmcs[domain] = served
        LOG.info('BMC of %s on %s:%d', domain, bmc['address'], bmc['port'])
        return {'created': old is None, 'changed': True}

    def _remove(self, domain):
        served = self._bmcs.pop(domain, None)
        removed = ipmi_store.delete(self.directory, domain)
        if served is not None and served.status == RUNNING:
            self._close(served)
        if served is not None or removed:
            LOG.info('Removed the BMC of %s', domain)
        return {'removed': served is not None or removed}

    def _list(self):
        return {'bmcs': [
            {'domain': domain, 'address': served.definition['address'],
             'port': served.definition['port'], 'status': served.status}
            for domain, served in sorted(self._bmcs.items())]}

    def _compare(self, bmcs):
        changes = {}
        for wanted in bmcs:
            served = self._bmcs.get(wanted['domain'])
            if served is None:
                changes[wanted['domain']] = None
                continue
            found = [key for key in sorted(wanted)
                     if served.definition[key] != wanted[key]]
            if served.status != RUNNING:
                found.append(states.PART_STOPPED)
            changes[wanted['domain']] = found
        return {'changes': changes}


def _parse(line):
    """(op, arguments) of a request line, checked; Refused if bad."""
    if len(line) > MAX_REQUEST:
        raise Refused('invalid', 'a request is at most %d bytes'
                      % MAX_REQUEST)
    if not line.endswith(b'\n'):
        raise Refused('invalid', 'a request is a line of JSON, ended by a '
                      'newline')
    try:
        request = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise Refused('invalid', 'not JSON: %s' % e) from None
    if not isinstance(request, dict) or not isinstance(
            request.get('op'), str) or request['op'] not in OPS:
        raise Refused('invalid', 'a request is an object with "op" one of '
                      '%s' % ', '.join(sorted(OPS)))
    op = request.pop('op')
    if set(request) != OPS[op]:
        raise Refused('invalid', '%r takes %s' % (
            op, ', '.join(sorted(OPS[op])) or 'nothing else'))
    if op == 'add':
        _check(request['bmc'])
    elif op == 'remove':
        problem = ipmi_store.name_problem(request['domain'])
        if problem:
            raise Refused('invalid', problem)
    elif op == 'compare':
        if not isinstance(request['bmcs'], list):
            raise Refused('invalid', 'bmcs must be a list')
        for bmc in request['bmcs']:
            _check(bmc)
    return op, request


def _check(bmc):
    problem = ipmi_store.definition_problem(bmc)
    if problem:
        raise Refused('invalid', problem)


def main():
    directory = sys.argv[1]
    os.umask(0o077)
    # Its own log, on stderr (the driver points that at host.log).
    conf = cfg.ConfigOpts()
    logging.register_options(conf)
    conf([], default_config_files=[])
    conf.set_override('use_stderr', True)
    logging.setup(conf, 'tenks-ipmi-host')
    host = Host(directory)
    host.load()

    def receive():
        try:
            host.serve_ipmi()
        finally:
            # Without it no BMC answers: let the driver start another.
            LOG.critical('The IPMI receiver stopped; exiting')
            os._exit(1)

    threading.Thread(target=receive, name='ipmi-receive',
                     daemon=True).start()
    host.serve_control()


if __name__ == '__main__':
    main()
