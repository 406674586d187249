#!/usr/bin/env python3
"""A stand-in for Neutron that answers every list empty, for tests.

    tools/neutron_standin.py HOST PORT

Not a Neutron: Nova asks Neutron for a server's ports, networks and
security groups even when the server is booted without networks
(``networks: none``), and fails without an answer. Empty lists are all
such a server needs, so ``GET /v2.0/<collection>`` answers
``{"<collection>": []}`` and anything else 404. tools/openstack_services.py
runs it beside the full Nova. Stdlib only.
"""

import http.server
import json
import sys


class Handler(http.server.BaseHTTPRequestHandler):

    def do_GET(self):
        path = self.path.split('?')[0].strip('/')
        if path in ('', 'v2.0'):
            # Version discovery (keystoneauth's, before the first call).
            href = 'http://%s:%d/v2.0/' % self.server.server_address
            self.answer(200, {'versions': [{
                'id': 'v2.0', 'status': 'CURRENT',
                'links': [{'rel': 'self', 'href': href}]}]})
            return
        parts = path.split('/')
        if len(parts) == 2 and parts[0] == 'v2.0':
            collection = parts[1].removesuffix('.json').replace('-', '_')
            self.answer(200, {collection: []})
            return
        self.answer(404, {'NeutronError': {
            'type': 'HTTPNotFound', 'detail': '',
            'message': 'the Tenks Neutron stand-in has only empty lists'}})

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt, *args):
        sys.stdout.write('%s %s\n' % (self.command, self.path))
        sys.stdout.flush()


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    http.server.ThreadingHTTPServer((host, port), Handler).serve_forever()


if __name__ == '__main__':
    main()
