"""Agent requests never outlive their operation, and answers that come
after their waiter gave up still update the record: a conductor and two
hostagents as processes on RabbitMQ, real libvirt and vbmcd."""

import contextlib
import http.server
import os
import signal
import sqlite3
import threading
import time

import libvirt
import pytest

from tenks import policy
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df

pytestmark = pytest.mark.functional

AGENT_TIMEOUT = 4
ADMIN = policy.admin_context()


@contextlib.contextmanager
def cleaned(env):
    """Yield ``env``; then remove whatever of it the test left, and fail
    the test if there was anything. A failed test's leftovers (the
    behaviour under test may be what left them) are removed too."""
    try:
        yield env
    except BaseException:
        env.force_clean()
        raise
    left = env.leftovers()
    env.force_clean()
    assert left == [], 'the test left %s behind' % left


def eventually(check, timeout=60, what='it'):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, '%s never happened' % what
        time.sleep(0.2)


def domains():
    conn = libvirt.open(cf.URI)
    try:
        return {d.name() for d in conn.listAllDomains()}
    finally:
        conn.close()


def log_of(service):
    with open(service.log, errors='replace') as f:
        return f.read()


def test_failed_teardown_leaves_what_a_stopped_agent_finds_expired(
        tmp_path):
    """The teardown's remove_node waits in the queue of a stopped
    hostagent until the teardown has failed; the agent, continued,
    drops it unrun: its node stays, as recorded. A teardown with the
    agent up then removes everything."""
    with df.Deployment(tmp_path / 'deployment',
                       agent_timeout=AGENT_TIMEOUT) as d:
        env = cf.ClusterEnv(tmp_path, port_base=7580,
                            state_dirs=d.state_dirs.values())
        with cleaned(env):
            operation = d.wait(d.api.deploy_cluster(ADMIN, env.spec(count=2)))
            assert operation['state'] == 'succeeded', operation['error']
            nodes = d.api.list_nodes(ADMIN, env.cluster)
            victim = nodes[0]['hypervisor']
            kept = {n['name'] for n in nodes if n['hypervisor'] == victim}
            agent = d.agent(victim)
            agent.process.send_signal(signal.SIGSTOP)
            try:
                teardown_id = d.api.teardown_cluster(ADMIN, env.cluster)
                operation = d.wait(teardown_id)
                assert operation['state'] == 'failed'
                assert ('Hostagent on %s did not answer remove_node'
                        % victim in operation['error'])
            finally:
                agent.process.send_signal(signal.SIGCONT)
            dropped = 'of operation %s unrun' % teardown_id
            eventually(lambda: dropped in log_of(agent)
                       or not kept <= domains(),
                       what='the queued remove_node being handled')
            assert kept <= domains()
            assert {n['name'] for n in d.api.list_nodes(
                ADMIN, env.cluster)} == kept
            assert d.api.get_cluster(ADMIN, env.cluster)['state'] == 'failed'

            operation = d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
            assert operation['state'] == 'succeeded', operation['error']
            assert not kept & domains()


class SlowImage(http.server.ThreadingHTTPServer):
    """Serves a small raw image at /image.raw: half of it at once, the
    rest once ``release`` is set."""

    daemon_threads = True

    def __init__(self):
        self.image = bytes(1024 * 1024)
        self.release = threading.Event()
        self.requested = threading.Event()
        super().__init__(('127.0.0.1', 0), SlowImageHandler)

    @property
    def url(self):
        return 'http://127.0.0.1:%d/image.raw' % self.server_address[1]


class SlowImageHandler(http.server.BaseHTTPRequestHandler):

    def do_GET(self):
        image = self.server.image
        self.send_response(200)
        self.send_header('Content-Length', str(len(image)))
        self.end_headers()
        half = len(image) // 2
        self.wfile.write(image[:half])
        self.wfile.flush()
        self.server.requested.set()
        self.server.release.wait(50)
        self.wfile.write(image[half:])

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def slow_image():
    server = SlowImage()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


def test_answer_after_the_waiter_gave_up_is_recorded(tmp_path):
    """ensure_node of a new node downloads its image slowly, past the
    conductor's wait: the deploy fails, and its revert's remove_node,
    waiting for the node's locks, expires and is dropped. The node made
    late is recorded present (not 'creating': the answer came), so the
    record says what exists, and a teardown removes it."""
    with slow_image() as image, df.Deployment(
            tmp_path / 'deployment', agent_timeout=AGENT_TIMEOUT) as d:
        env = cf.ClusterEnv(tmp_path, port_base=7590,
                            state_dirs=d.state_dirs.values())
        with cleaned(env):
            node_types = {'small': {
                'memory_mb': 128, 'vcpus': 1,
                'volumes': [{'capacity': '64MiB', 'image': image.url}],
                'physical_networks': ['physnet1']}}
            image.release.set()
            operation = d.wait(d.api.deploy_cluster(
                ADMIN, env.spec(count=2, node_types=node_types)))
            assert operation['state'] == 'succeeded', operation['error']
            before = {n['name'] for n in d.api.list_nodes(ADMIN, env.cluster)}
            # Every host has its pool and bridge: the new node's deploy
            # makes none, so its revert removes none under it.
            assert {n['hypervisor'] for n in d.api.list_nodes(
                ADMIN, env.cluster)} == set(d.hosts)

            image.release.clear()
            image.requested.clear()
            deploy_id = d.api.deploy_cluster(
                ADMIN, env.spec(count=3, node_types=node_types))
            assert image.requested.wait(60)
            operation = d.wait(deploy_id)
            assert operation['state'] == 'failed'
            assert 'did not answer ensure_node' in operation['error']
            [new] = [n for n in d.api.list_nodes(ADMIN, env.cluster)
                     if n['name'] not in before]
            assert new['state'] == 'failed'
            agent = d.agent(new['hypervisor'])
            image.release.set()

            state_db = os.path.join(str(tmp_path / 'deployment'),
                                    d.conductor_host, 'state.sqlite')

            def recorded():
                with contextlib.closing(sqlite3.connect(state_db)) as db:
                    return db.execute(
                        'SELECT kind, state, operation FROM '
                        'tenks_resources WHERE node = ?',
                        (new['uuid'],)).fetchall()

            eventually(lambda: {state for _, state, _ in recorded()} == {
                'present'}, what='the late answer being recorded')
            assert sorted(kind for kind, _, _ in recorded()) == [
                'bmc', 'domain', 'port', 'volume']
            assert {op for _, _, op in recorded()} == {deploy_id}
            assert new['name'] in domains()
            eventually(lambda: 'of operation %s unrun' % deploy_id
                       in log_of(agent), what="the revert's remove_node "
                       'being dropped')
            assert new['name'] in domains()

            operation = d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
            assert operation['state'] == 'succeeded', operation['error']
