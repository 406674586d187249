"""Redis and ZooKeeper for several conductors (their jobboard, tooz's
locks and membership), as ``tools/setup.sh redis zookeeper`` starts them
on 127.0.0.1: a namespace of its own per test, removed after it, and
helpers that restart a server in the middle of a test.

A namespace is in the URL: Redis' ``namespace`` query parameter (every
key starts with it), ZooKeeper's path (every znode is under it)."""

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid

import pytest
import redis
from kazoo import client as kazoo_client

REDIS_PORT = 6379
ZOOKEEPER_PORT = 2181
# Where tools/setup.sh keeps the pid of the ZooKeeper it started.
ZOOKEEPER_PIDFILE = '/run/tenks-zookeeper.pid'
SETUP = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'tools', 'setup.sh')


def new_namespace():
    return 'tenks-test-%s' % uuid.uuid4().hex


def redis_client():
    return redis.Redis(host='127.0.0.1', port=REDIS_PORT, socket_timeout=10)


@contextlib.contextmanager
def zookeeper_client():
    """A connected kazoo client, stopped after."""
    client = kazoo_client.KazooClient(hosts='127.0.0.1:%d' % ZOOKEEPER_PORT)
    try:
        client.start(timeout=10)
        yield client
    finally:
        client.stop()
        client.close()


def redis_answers():
    try:
        with contextlib.closing(redis_client()) as client:
            return client.ping()
    except redis.RedisError:
        return False


def zookeeper_answers():
    try:
        with socket.create_connection(('127.0.0.1', ZOOKEEPER_PORT),
                                      timeout=5) as connection:
            connection.sendall(b'ruok')
            return connection.recv(16) == b'imok'
    except OSError:
        return False


def require(answers, name, port):
    if not answers():
        pytest.fail('%s does not answer on 127.0.0.1:%d: run '
                    '`tools/setup.sh redis zookeeper` (as root)'
                    % (name, port), pytrace=False)


@contextlib.contextmanager
def redis_namespace():
    """The URL of a new namespace on Redis; its keys are deleted after."""
    require(redis_answers, 'Redis', REDIS_PORT)
    namespace = new_namespace()
    try:
        yield 'redis://127.0.0.1:%d/0?namespace=%s' % (REDIS_PORT, namespace)
    finally:
        with contextlib.closing(redis_client()) as client:
            for key in client.scan_iter(match=namespace + '*'):
                client.delete(key)


@contextlib.contextmanager
def zookeeper_namespace():
    """The URL of a new namespace on ZooKeeper; its znodes are deleted
    after."""
    require(zookeeper_answers, 'ZooKeeper', ZOOKEEPER_PORT)
    namespace = new_namespace()
    try:
        yield 'zookeeper://127.0.0.1:%d/%s' % (ZOOKEEPER_PORT, namespace)
    finally:
        with zookeeper_client() as client:
            client.delete('/' + namespace, recursive=True)


@pytest.fixture
def redis_url():
    with redis_namespace() as url:
        yield url


@pytest.fixture
def zookeeper_url():
    with zookeeper_namespace() as url:
        yield url


def redis_pid():
    with contextlib.closing(redis_client()) as client:
        return client.info('server')['process_id']


def zookeeper_pid():
    with open(ZOOKEEPER_PIDFILE) as f:
        return int(f.read())


def restart_redis():
    """Stop Redis (SIGTERM) and start it again, as tools/setup.sh does."""
    _restart('redis', redis_pid(), redis_answers)


def restart_zookeeper():
    """Stop ZooKeeper (SIGTERM) and start it again, as tools/setup.sh
    does."""
    _restart('zookeeper', zookeeper_pid(), zookeeper_answers)


def _restart(step, pid, answers):
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while _running(pid):
        assert time.monotonic() < deadline, (
            '%s (pid %d) still runs 60 s after SIGTERM' % (step, pid))
        time.sleep(0.1)
    # setup.sh's step is how the server starts; it waits until it answers.
    result = subprocess.run([SETUP, step], capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert answers(), '%s does not answer after %s' % (step, result.stdout)


def _running(pid):
    """Whether process ``pid`` runs (a zombie no longer does)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rpartition(')')[2].split()[0] != 'Z'
    except FileNotFoundError:
        return False
