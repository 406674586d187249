"""The Redfish emulator's layer that makes a system's BMC show its fault
(tenks.bmc_faults), for hostagent.drivers.bmc.emulator.

It acts on requests whose path names a system of the allow-list (or its
manager), authenticated; the fault is that of the system's domain, read
from the emulator's ``faults/`` directory (fault_files):

unreachable          the connection is closed without a response
slow                 the request is handled ``delay`` seconds late
error, flaky         500, the request not handled
power-stuck          a ComputerSystem.Reset is answered 204, not made
boot-device-ignored  a PATCH of the system that sets Boot is answered
                     204, not made (the rest of it neither)
"""

import io
import json
import socket
import time

from tenks import bmc_faults

_RESET = 'ComputerSystem.Reset'


class Faults:
    """Shows the faults ``faults`` (a fault_files.Reader) holds for the
    domains of ``allowed`` (an allowlist.AllowList); ``system_of``: the
    system id a request's WSGI environment names, or None."""

    def __init__(self, app, allowed, faults, system_of):
        self.app = app
        self.allowed = allowed
        self.faults = faults
        self.system_of = system_of

    def __call__(self, env, start_response):
        system = self.system_of(env)
        domain = None if system is None else self.allowed.domain(system)
        fault = None if domain is None else self.faults.get(domain)
        if fault is None:
            return self.app(env, start_response)
        kind = fault['kind']
        if kind == bmc_faults.UNREACHABLE:
            connection = env.get('werkzeug.socket')
            if connection is not None:
                connection.shutdown(socket.SHUT_RDWR)
            # The server takes it for a client gone, and sends nothing.
            raise ConnectionAbortedError('the BMC of %s is unreachable'
                                         % domain)
        if kind == bmc_faults.SLOW:
            time.sleep(fault['delay'])
        if bmc_faults.fails(fault):
            return _answer(start_response, '500 INTERNAL SERVER ERROR', {
                'error': {'code': 'Base.1.0.InternalError',
                          'message': 'Injected fault: %s' % kind}})
        if (kind == bmc_faults.POWER_STUCK and _resets(env)) or (
                kind == bmc_faults.BOOT_DEVICE_IGNORED
                and _sets_boot(env)):
            return _answer(start_response, '204 NO CONTENT')
        return self.app(env, start_response)


def _answer(start_response, status, body=None):
    data = b'' if body is None else json.dumps(body).encode()
    headers = [('Content-Length', str(len(data)))]
    if body is not None:
        headers.append(('Content-Type', 'application/json'))
    start_response(status, headers)
    return [data]


def _parts(env):
    return [p for p in env.get('PATH_INFO', '').split('/') if p]


def _resets(env):
    parts = _parts(env)
    return (env.get('REQUEST_METHOD') == 'POST' and len(parts) >= 2
            and parts[-2] == 'Actions' and parts[-1] == _RESET)


def _sets_boot(env):
    """Whether the request is a PATCH of a system whose body sets Boot
    (the body is read, and put back for the application)."""
    parts = _parts(env)
    if env.get('REQUEST_METHOD') != 'PATCH' or len(parts) != 4:
        return False
    try:
        length = int(env.get('CONTENT_LENGTH') or 0)
    except ValueError:
        return False
    body = env['wsgi.input'].read(length)
    env['wsgi.input'] = io.BytesIO(body)
    try:
        return 'Boot' in json.loads(body)
    except (ValueError, TypeError):
        return False
