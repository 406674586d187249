"""The jobboard's servers as tools/setup.sh starts them: Redis and
ZooKeeper keep what a test wrote over a restart, and the fixtures give
each test a namespace of its own and remove it, and only it, after."""

import contextlib
import socket
from urllib import parse

import pytest

from tests.functional import jobboard_fixtures as jf

pytestmark = pytest.mark.functional


def redis_namespace_of(url):
    return parse.parse_qs(parse.urlsplit(url).query)['namespace'][0]


def zookeeper_path_of(url):
    return parse.urlsplit(url).path


def test_redis_keeps_keys_over_a_restart(redis_url):
    key = redis_namespace_of(redis_url) + '.listings'
    with contextlib.closing(jf.redis_client()) as client:
        client.hset(key, 'job-1', 'posted')
    pid = jf.redis_pid()

    jf.restart_redis()

    assert jf.redis_pid() != pid
    with contextlib.closing(jf.redis_client()) as client:
        assert client.hgetall(key) == {b'job-1': b'posted'}


def test_zookeeper_keeps_znodes_over_a_restart(zookeeper_url):
    path = zookeeper_path_of(zookeeper_url) + '/jobs/job-1'
    with jf.zookeeper_client() as client:
        client.create(path, b'posted', makepath=True)
    pid = jf.zookeeper_pid()

    jf.restart_zookeeper()

    assert jf.zookeeper_pid() != pid
    with jf.zookeeper_client() as client:
        assert client.get(path)[0] == b'posted'


def test_redis_namespace_removed_after_its_test():
    other = jf.new_namespace() + '.listings'  # another test's
    with contextlib.closing(jf.redis_client()) as client:
        client.set(other, 'kept')
        try:
            with jf.redis_namespace() as url:
                namespace = redis_namespace_of(url)
                for n in range(25):
                    client.set('%s.job-%d' % (namespace, n), 'posted')
                client.hset(namespace + '_group:conductors', 'c1', 'alive')

            assert list(client.scan_iter(match=namespace + '*')) == []
            assert client.get(other) == b'kept'
        finally:
            client.delete(other)


def test_zookeeper_namespace_removed_after_its_test():
    other = '/' + jf.new_namespace()  # another test's
    with jf.zookeeper_client() as client:
        client.create(other, b'kept')
        try:
            with jf.zookeeper_namespace() as url:
                path = zookeeper_path_of(url)
                client.create(path + '/jobs/job-1', b'posted', makepath=True)
                client.create(path + '/locks/cluster-a', b'', makepath=True)

            assert client.exists(path) is None
            assert client.get(other)[0] == b'kept'
        finally:
            client.delete(other)


@pytest.mark.parametrize('namespace, name', [
    (jf.redis_namespace, 'Redis'), (jf.zookeeper_namespace, 'ZooKeeper')])
def test_a_server_not_answering_fails_saying_what_to_run(
        monkeypatch, namespace, name):
    with socket.socket() as unused:
        unused.bind(('127.0.0.1', 0))
        port = unused.getsockname()[1]
    monkeypatch.setattr(jf, 'REDIS_PORT', port)
    monkeypatch.setattr(jf, 'ZOOKEEPER_PORT', port)

    with pytest.raises(pytest.fail.Exception) as failure:
        with namespace():
            pass

    assert str(failure.value) == (
        '%s does not answer on 127.0.0.1:%d: run `tools/setup.sh redis '
        'zookeeper` (as root)' % (name, port))
