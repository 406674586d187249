"""Ironic at scale: N real Redfish nodes enrolled until every one is
``available``, then torn down, with the Ironic calls counted.

The nodes are libvirt domains (defined, never started) behind the
sushy-tools emulator of the embedded hostagent, enrolled in the
standalone Ironic of tools/openstack_services.py (started if it is not
running; TENKS_OPENSTACK_STATE/TENKS_OPENSTACK_VENV as for the tests).
For the deploy and the teardown it prints the wall time, the Ironic
calls per node (the bulk state polls apart), Ironic's throughput, and
where the time goes: inside Ironic HTTP calls (the time at least one
was in flight) or in Tenks (the rest).

    .venv/bin/python tools/scale_ironic.py [--nodes 100] [--workers 64]
        [--concurrency 8] [--poll-interval 0.5] [--port 9170]

Needs root and libvirt. Names start with ``irb`` (cluster irb-<random>,
bridge irbb<random>); whatever the run leaves is removed at the end.
"""

import argparse
import collections
import os
import pathlib
import secrets
import sys
import tempfile
import threading
import time
import urllib.parse

from keystoneauth1 import session as ksa_session

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tenks import spec as tenks_spec  # noqa: E402
from tenks.cli import embedded  # noqa: E402
from tenks.cloud import ironic as tenks_ironic  # noqa: E402
from tests.functional import cluster_fixtures as cf  # noqa: E402
from tests.functional import openstack_fixtures as of  # noqa: E402

services = of.services


class IronicCalls:
    """Every HTTP request keystoneauth sends to ``endpoint``: (method,
    path, start, end), from a wrapper of Session.request."""

    def __init__(self, endpoint):
        self.endpoint = endpoint.rstrip('/')
        self.calls = []
        self.waits = []  # (start, end) of each StatePoller.wait
        self.lock = threading.Lock()
        self.real = ksa_session.Session.request
        self.real_wait = tenks_ironic.StatePoller.wait

    def __enter__(self):
        real, calls = self.real, self

        def request(session, url, method, *args, **kwargs):
            start = time.monotonic()
            try:
                return real(session, url, method, *args, **kwargs)
            finally:
                full = url if '://' in url else kwargs.get(
                    'endpoint_override') or ''
                if calls.endpoint in full or '/v1/nodes' in url or (
                        '/v1/ports' in url):
                    # openstacksdk passes a list's query apart.
                    query = urllib.parse.urlencode(kwargs.get('params')
                                                   or {})
                    with calls.lock:
                        calls.calls.append((method, url + (
                            '?' + query if query else ''), start,
                            time.monotonic()))
        ksa_session.Session.request = request

        def wait(poller, *args, **kwargs):
            start = time.monotonic()
            try:
                return real_wait(poller, *args, **kwargs)
            finally:
                with calls.lock:
                    calls.waits.append((start, time.monotonic()))
        real_wait = self.real_wait
        tenks_ironic.StatePoller.wait = wait
        return self

    def __exit__(self, *exc):
        ksa_session.Session.request = self.real
        tenks_ironic.StatePoller.wait = self.real_wait

    def take(self):
        """(calls, waits for Ironic's conductor) since the last take."""
        with self.lock:
            taken = self.calls, self.waits
            self.calls, self.waits = [], []
        return taken


def busy_seconds(spans):
    """Seconds with at least one of ``spans`` ((start, end)) running."""
    total, end = 0.0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def is_poll(method, url):
    """A list of the StatePoller (tenks.cloud.ironic)."""
    return method == 'GET' and 'nodes?' in url and 'last_error' in url


def report(what, nodes, wall, taken):
    calls, waits = taken
    polls = [c for c in calls if is_poll(c[0], c[1])]
    others = [c for c in calls if not is_poll(c[0], c[1])]
    kinds = collections.Counter(
        '%s %s' % (m, kind(u)) for m, u, _, _ in others)
    spans = [(start, stop) for _, _, start, stop in calls]
    busy = busy_seconds(spans)
    ironic = busy_seconds(spans + waits)
    spent = sum(stop - start for _, _, start, stop in calls)
    window = (max(c[3] for c in calls) - min(c[2] for c in calls)
              if calls else 0.0)
    print('%s of %d nodes: %.1f s' % (what, nodes, wall))
    print('  Ironic calls per node: %.2f (%d calls), plus %d bulk polls'
          % (len(others) / nodes, len(others), len(polls)))
    for name, count in kinds.most_common():
        print('    %-32s %6d  (%.2f a node)' % (name, count, count / nodes))
    print('  Ironic throughput: %.1f calls/s over %.1f s of Ironic '
          'traffic' % (len(calls) / window if window else 0, window))
    print('  where the time goes, of %.1f s:' % wall)
    print('    in Ironic API calls (at least one in flight): %.1f s '
          '(%.1f s summed over concurrent calls, %.0f ms a call)'
          % (busy, spent, 1000 * spent / len(calls) if calls else 0))
    print('    waiting for Ironic\'s conductor only (verify, provide, '
          'no call in flight): %.1f s' % (ironic - busy))
    print('    Tenks alone (nothing in Ironic\'s hands): %.1f s'
          % (wall - ironic))


def kind(url):
    """A call's resource, without ids or query: /v1/nodes/{id}/states/..."""
    path = url.split('://', 1)[-1].split('?', 1)[0]
    path = path[path.find('/v1/'):] if '/v1/' in path else path
    parts = path.split('/')
    return '/'.join('{id}' if len(p) == 36 and p.count('-') == 4 else p
                    for p in parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--nodes', type=int, default=100)
    parser.add_argument('--workers', type=int, default=64,
                        help='[conductor] workers')
    parser.add_argument('--concurrency', type=int, default=8,
                        help='[openstack] ironic_concurrency')
    parser.add_argument('--poll-interval', type=float, default=0.5,
                        help='[openstack] poll_interval')
    parser.add_argument('--port', type=int, default=9170,
                        help='the Redfish emulator\'s port')
    args = parser.parse_args()

    services.start()
    endpoints = services.endpoints()
    cloud = of.connection()
    token = secrets.token_hex(2)
    tmp = tempfile.mkdtemp(prefix='scale-ironic-')
    env = cf.ClusterEnv(pathlib.Path(tmp), port_base=0)
    env.cluster, env.node_prefix, env.bridge_prefix = (
        'irb-' + token, 'irb%s-' % token, 'irbb' + token)
    conf = env.conf
    for service, option in (('baremetal', 'ironic_url'),
                            ('placement', 'placement_url'),
                            ('compute', 'nova_url')):
        conf.set_override(option, endpoints[service], group='openstack')
    conf.set_override('workers', args.workers, group='conductor')
    conf.set_override('ironic_concurrency', args.concurrency,
                      group='openstack')
    conf.set_override('poll_interval', args.poll_interval,
                      group='openstack')
    conf.set_override('provision_timeout', 900, group='openstack')
    # Domains never started: let them share the CPUs and memory, and
    # count their volumes at what they hold (nothing yet).
    conf.set_override('thin_volumes', True, group='hostagent')
    conf.set_override('vcpu_inventory', {'allocation_ratio': '1000'},
                      group='hostagent')
    conf.set_override('memory_mb_inventory', {'allocation_ratio': '100'},
                      group='hostagent')
    spec = tenks_spec.validate({
        'cluster': env.cluster,
        'node_types': {'small': {
            'memory_mb': 64, 'vcpus': 1,
            'volumes': [{'capacity': '64MiB'}],
            'physical_networks': ['physnet1'],
            'ironic_driver': 'redfish'}},
        'specs': [{'type': 'small', 'count': args.nodes,
                   'node_name_prefix': env.node_prefix,
                   'ironic_config': {'resource_class': 'tenks-bench',
                                     'deploy_interface': 'ramdisk'}}],
        'physical_networks': ['physnet1'],
        'bridge_prefix': env.bridge_prefix,
        'redfish_port': args.port,
        'deploy_kernel': 'http://127.0.0.1:8080/ipa.kernel',
        'deploy_ramdisk': 'http://127.0.0.1:8080/ipa.initramfs',
    }, source='scale_ironic')
    print('%d Redfish nodes, [conductor] workers %d, [openstack] '
          'ironic_concurrency %d, poll_interval %.2f s'
          % (args.nodes, args.workers, args.concurrency,
             args.poll_interval))
    try:
        with IronicCalls(endpoints['baremetal']) as ironic:
            with embedded.embedded(conf) as conductor:
                started = time.monotonic()
                conductor.deployments.deploy(spec)
                deploy = time.monotonic() - started
                calls = ironic.take()
                uuids = [n.uuid for n in conductor.db.list_nodes(
                    cluster=env.cluster)]
            report('deploy (to available)', args.nodes, deploy, calls)
            states = tenks_ironic.provision_states(cloud, uuids)
            ironic.take()
            print('  provision states: %s'
                  % dict(collections.Counter(states.values())))
            with embedded.embedded(conf) as conductor:
                started = time.monotonic()
                conductor.teardowns.teardown(env.cluster)
                teardown = time.monotonic() - started
                report('teardown', args.nodes, teardown, ironic.take())
    finally:
        left = env.leftovers() + of.remove_ironic_nodes(
            cloud, env.node_prefix)
        env.force_clean()
        if left:
            print('left behind (removed): %s' % left)


if __name__ == '__main__':
    main()
