"""Serve a node's volumes to the hypervisor it moves to.

A move copies each volume over HTTP: the hostagent of the node's old
host serves the volume files of one export at
``http://<transfer_address>:<port>/volumes/<name>``, to a request that
carries the export's token in the X-Tenks-Transfer-Token header; the
new host's agent downloads them as it would an image URL. The server
listens only while exports are open, on an ephemeral port of the
configured address; an export ends when the move closes it, or after
``transfer_timeout`` seconds.
"""

import hmac
import http.server
import os
import secrets
import shutil
import socket
import threading
import time

from oslo_log import log as logging

from hostagent.drivers import base

LOG = logging.getLogger(__name__)

CHUNK = 1024 * 1024


class Exports:
    """The open exports of this hostagent: {key: (token, {volume name:
    path}, deadline)}, and the server that serves them."""

    def __init__(self, address, timeout):
        self.address = address
        self.timeout = timeout
        self._exports = {}
        self._lock = threading.Lock()
        self._server = None

    def open(self, key, volumes):
        """Serve ``volumes`` ({name: path}) under ``key`` (a node's
        name); {name: {'url', 'token'}}. Opening a key again serves the
        new volumes under the token it had."""
        with self._lock:
            self._expire()
            token = self._exports.get(key, (secrets.token_urlsafe(32),))[0]
            self._exports[key] = (token, dict(volumes),
                                  time.monotonic() + self.timeout)
            server = self._start()
        host, port = server.server_address[:2]
        return {name: {'url': 'http://%s:%d/volumes/%s' % (
                    '[%s]' % host if ':' in host else host, port, name),
                    'token': token}
                for name in volumes}

    def close(self, key):
        """End the export ``key``; whether it was open."""
        with self._lock:
            found = self._exports.pop(key, None) is not None
            self._expire()
            if not self._exports:
                self._stop()
        return found

    def find(self, token, name):
        """The path of volume ``name`` of the export with ``token``, or
        None."""
        with self._lock:
            self._expire()
            for known, volumes, _ in self._exports.values():
                if hmac.compare_digest(known, token) and name in volumes:
                    return volumes[name]
        return None

    def _expire(self):
        now = time.monotonic()
        for key in [k for k, (_, _, deadline) in self._exports.items()
                    if deadline < now]:
            LOG.warning('Transfer of the volumes of %s expired unfinished',
                        key)
            del self._exports[key]

    def _start(self):
        if self._server is None:
            server = _Server((self.address, 0), _Handler)
            server.exports = self
            threading.Thread(target=server.serve_forever,
                             name='volume-transfer', daemon=True).start()
            self._server = server
        return self._server

    def _stop(self):
        if self._server is not None:
            server, self._server = self._server, None
            threading.Thread(target=_close, args=(server,), daemon=True,
                             name='volume-transfer-stop').start()

    def stop(self):
        with self._lock:
            self._exports.clear()
            self._stop()


def _close(server):
    server.shutdown()
    server.server_close()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, handler):
        if ':' in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)


class _Handler(http.server.BaseHTTPRequestHandler):

    def do_GET(self):
        prefix = '/volumes/'
        token = self.headers.get(base.TOKEN_HEADER, '')
        path = None
        if self.path.startswith(prefix) and token:
            path = self.server.exports.find(token, self.path[len(prefix):])
        if path is None:
            self.send_error(404)
            return
        with open(path, 'rb') as f:
            self.send_response(200)
            self.send_header('Content-Type', 'application/octet-stream')
            self.send_header('Content-Length',
                             str(os.fstat(f.fileno()).st_size
                                 if os.path.isfile(path)
                                 else _device_size(f)))
            self.end_headers()
            shutil.copyfileobj(f, self.wfile, CHUNK)

    def log_message(self, fmt, *args):
        # The path names a volume, never the token; keep it at debug.
        LOG.debug('Volume transfer from %s: %s', self.client_address[0],
                  fmt % args)


def _device_size(f):
    """The size of a block device (a logical volume) open as ``f``."""
    size = f.seek(0, os.SEEK_END)
    f.seek(0)
    return size
