"""Operations as jobs on a jobboard (conductor.jobs), with the board and
tooz in memory (tests.unit.fake_jobboard): what a conductor posts, claims,
runs, takes over, consumes and refuses."""

import time

import pytest

from conductor import jobboard
from tenks import exceptions
from tenks import states
from tenks.cli import embedded
from tenks.db import api as db_api
from tenks.db import migration
from tests.unit import fake_jobboard
from tests.unit.conftest import make_spec


@pytest.fixture
def server(monkeypatch):
    server = fake_jobboard.Server()
    monkeypatch.setattr(jobboard, 'Board', server.board)
    monkeypatch.setattr(jobboard, 'Coordination', server.coordination)
    return server


@pytest.fixture
def shared(conf, tmp_path, server):
    """The options of a conductor that shares a jobboard and a database."""
    url = 'sqlite:///%s' % (tmp_path / 'shared.sqlite')
    engine = db_api.create_engine(url)
    migration.upgrade(engine)
    engine.dispose()
    conf.set_override('connection', url, group='database')
    conf.set_override('jobboard_url', 'redis://127.0.0.1:6379',
                      group='conductor')
    conf.set_override('host', 'c1', group='conductor')
    return conf


@pytest.fixture
def conductor(shared, hypervisor):
    with embedded.embedded(shared) as conductor:
        yield conductor


def wait_until(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_deploy_is_posted_claimed_run_and_consumed(conductor, server):
    result = conductor.deployments.deploy(make_spec(count=2))
    assert result['changed']
    operation = conductor.db.get_operation(result['operation'])
    assert (operation.state, operation.conductor) == (
        states.OPERATION_SUCCEEDED, 'c1')
    assert server.jobs == {} and server.owners == {}


def test_a_dead_conductors_job_is_taken_over(conductor, server):
    """A job whose operation another conductor recorded (and died before
    it began) is claimed, its owner recorded, and run from its checks."""
    db = conductor.db
    spec = make_spec(count=1)
    db.save_cluster('unit', spec, states.CLUSTER_SCHEDULED)
    db.create_operation('op1', 'unit', 'deploy', 'dead', spec)
    conductor.jobs.board.post('op1', 'deploy', 'unit', None, [False])
    wait_until(lambda: db.get_operation('op1').state !=
               states.OPERATION_RUNNING)
    operation = db.get_operation('op1')
    assert operation.state == states.OPERATION_SUCCEEDED, operation.error
    assert operation.conductor == 'c1'
    assert operation.result['resumed'] is False
    assert [n.state for n in db.list_nodes(cluster='unit')] == [
        states.NODE_DEPLOYED]
    assert server.jobs == {}


def test_the_job_of_an_operation_ended_is_only_consumed(conductor, server):
    db = conductor.db
    db.create_operation('op1', 'unit', 'deploy', 'dead', make_spec())
    db.finish_operation('op1', states.OPERATION_SUCCEEDED)
    conductor.jobs.board.post('op1', 'deploy', 'unit', None, [False])
    wait_until(lambda: server.jobs == {})
    assert db.get_cluster('unit') is None
    assert db.get_operation('op1').conductor == 'dead'


def test_a_cluster_whose_operation_has_a_job_is_busy(conductor, server):
    """Another conductor's running operation, its job on the board, keeps
    its cluster busy here, named with its conductor."""
    db = conductor.db
    spec = make_spec(count=1)
    db.save_cluster('unit', spec, states.CLUSTER_SCHEDULED)
    db.create_operation('op1', 'unit', 'deploy', 'c2', spec)
    board = fake_jobboard.Board(server, 'c2', 30)
    board.post('op1', 'deploy', 'unit', None, [False])
    assert board.claim(board.find('op1'))
    with pytest.raises(exceptions.ClusterBusy) as busy:
        conductor.teardowns.submit('unit')
    assert str(busy.value) == (
        'Cluster unit is busy: deploy op1 runs on conductor c2; try again '
        'when it has finished')


def test_an_operation_without_a_job_was_interrupted(conductor, server):
    """A running operation with no job (its conductor died before it
    posted it) is no one's: a deploy of its cluster resumes it."""
    db = conductor.db
    spec = make_spec(count=1)
    db.save_cluster('unit', spec, states.CLUSTER_SCHEDULED)
    db.create_operation('op1', 'unit', 'deploy', 'c2', spec)
    result = conductor.deployments.deploy(spec)
    assert result['operation'] == 'op1'
    assert db.get_operation('op1').state == states.OPERATION_SUCCEEDED


def test_the_conductors_list_themselves(conductor, server):
    server.members['c2'] = dict(server.members['c1'], host='c2')
    listed = conductor.api.list_conductors({})
    assert [c['host'] for c in listed] == ['c1', 'c2']
    assert set(listed[0]) == {'host', 'started_at', 'heartbeat_at', 'jobs'}


def test_a_jobboard_needs_a_shared_database(conf, server):
    conf.set_override('jobboard_url', 'redis://127.0.0.1:6379',
                      group='conductor')
    with pytest.raises(exceptions.ConfigError, match=r'\[database\] conn'):
        with embedded.embedded(conf):
            pass


@pytest.mark.parametrize('url,kind,board,tooz', [
    ('redis://127.0.0.1:6390/2?namespace=ci', 'redis',
     {'host': '127.0.0.1', 'port': 6390, 'db': 2, 'namespace': 'ci.jobs'},
     'redis://127.0.0.1:6390?db=2&namespace=ci.tooz&timeout=30'),
    ('redis://:s%40cret@db1', 'redis',
     {'host': 'db1', 'port': 6379, 'password': 's@cret',
      'namespace': 'tenks.jobs'},
     'redis://:s%40cret@db1:6379?db=0&namespace=tenks.tooz&timeout=30'),
    ('zookeeper://z1:2181,z2:2181/ci', 'zookeeper',
     {'hosts': 'z1:2181,z2:2181', 'path': '/ci/jobs', 'timeout': 30},
     'zookeeper://z1:2181,z2:2181?namespace=ci%2Ftooz&timeout=30'),
])
def test_a_jobboard_url_gives_the_board_and_tooz(url, kind, board, tooz):
    backend = jobboard.backend(url, 30)
    assert backend.kind == kind
    assert board.items() <= backend.board.items()
    assert backend.tooz.split('&socket_timeout')[0] == tooz


@pytest.mark.parametrize('url,reason', [
    ('etcd://127.0.0.1:2379', 'use redis://HOST:PORT or zookeeper://'),
    ('redis://:secret@h:x/0', 'the port and the database must be numbers'),
    ('zookeeper:///tenks', 'it names no server'),
])
def test_a_bad_jobboard_url_is_named_without_its_password(url, reason):
    with pytest.raises(exceptions.ConfigError) as raised:
        jobboard.backend(url, 30)
    assert reason in str(raised.value)
    assert 'secret' not in str(raised.value)
    assert '[conductor] jobboard_url' in str(raised.value)


def test_an_expired_claim_is_claimed_again_unless_another_has(conductor,
                                                              server):
    runner = conductor.jobs
    runner.stop()
    runner.board.post('op1', 'deploy', 'unit', None, [])
    job = runner.board.find('op1')
    assert runner.board.claim(job)
    runner._held['op1'] = job
    del server.owners[job.uuid]
    runner._renew()
    assert server.owners[job.uuid] == 'c1'
    server.owners[job.uuid] = 'c2'
    runner._renew()
    assert server.owners[job.uuid] == 'c2'
    runner._held.clear()


def test_jobs_posted_at_once_are_shared_with_the_other_conductors(
        conductor, server, monkeypatch):
    """A look at the board claims no more than this conductor's share of
    the unclaimed jobs; the other live conductors take the rest at their
    next look (here this one does, at its next)."""
    from conductor import jobs
    monkeypatch.setattr(jobs, 'POLL_INTERVAL', 60)
    time.sleep(0.6)  # the loop's last short wait is over: it looks no more
    for host in ('c2', 'c3'):
        server.members[host] = dict(server.members['c1'], host=host)
    taken = []
    monkeypatch.setattr(conductor.jobs, '_take_or_abandon',
                        lambda job: taken.append(job) or True)
    board = fake_jobboard.Board(server, 'c9', 30)
    for n in range(6):
        board.post('op%d' % n, 'deploy', 'cluster%d' % n, None, [False])
    conductor.jobs._claim()
    assert len(taken) == 2  # 6 jobs, 3 conductors
    conductor.jobs._claim()
    assert len(taken) == 4  # 4 left: 2 at most
    del server.members['c2'], server.members['c3']
    conductor.jobs._claim()
    assert len(taken) == 6  # alone: all that are left
