"""The operations registry on its own (conductor.operations): every way
an operation ends is recorded with its event, its cluster's lock goes
when it ends, and a stopping conductor starts nothing new."""

import threading
import time
import types

import pytest

from conductor import locks as cluster_locks
from conductor import operations as ops
from conductor import progress
from tenks import exceptions
from tenks import notifier
from tenks.db import api as db_api
from tenks.db import migration
from tests.unit.conftest import make_conf


class RecordedEvents:
    """Records events as the conductor's notifier does; sends none."""

    event = staticmethod(notifier.Notifier.event)

    def __init__(self, db):
        self.db = db
        self.sent = []

    def emit(self, event_type, cluster, payload, error=False):
        event = self.event(event_type, cluster, payload, error)
        self.db.add_event(**event)
        self.send(event)

    def send(self, event):
        self.sent.append(event['event_type'])


def outcome(changed=(), warnings=()):
    return types.SimpleNamespace(changed=list(changed),
                                 warnings=list(warnings), plan=None)


@pytest.fixture
def registry(tmp_path):
    conf = make_conf(tmp_path / 'state')
    conf.set_override('max_operations', 1, group='conductor')
    engine = db_api.create_engine('sqlite:///%s' % (tmp_path / 'state.db'))
    migration.upgrade(engine)
    db = db_api.StateDB(engine)
    locks = cluster_locks.ClusterLocks(cluster_locks.lock_files(str(tmp_path)))
    registry = ops.Operations(conf, db, RecordedEvents(db), locks)
    yield registry
    registry.shutdown(wait=True)
    engine.dispose()


def start(registry, name, run, kind='teardown'):
    """Take the cluster's lock and submit ``run``, as the conductor
    does."""
    registry.locks.acquire(name)
    operation_id = registry.create(kind, name)
    return registry.submit(operation_id, kind, name, None, False, run)


def test_a_succeeded_operation_is_recorded_with_its_events(registry):
    def run(operation_id, on_progress):
        on_progress({'domain': [1, 1]})
        return outcome(changed=['domain:tk0'], warnings=['slow'])

    operation_id = start(registry, 'c1', run)
    result = registry.wait(operation_id)
    assert result == {'operation': operation_id, 'changed': ['domain:tk0'],
                      'resumed': False, 'warnings': ['slow']}
    record = registry.db.get_operation(operation_id)
    assert (record.state, record.result['changed']) == (
        'succeeded', ['domain:tk0'])
    assert registry.notifier.sent == ['tenks.cluster.teardown.start',
                                      'tenks.cluster.teardown.end']
    # Ended: whoever asks later gets the same, and the lock is free.
    assert registry.wait(operation_id) == dict(result, resumed=False)
    registry.locks.acquire('c1')


def test_a_failed_operation_names_what_and_where(registry):
    def run(operation_id, on_progress):
        raise exceptions.OperationFailed('domain:tk0: disk full',
                                         failed_tasks=['domain:tk0'])

    operation_id = start(registry, 'c1', run)
    with pytest.raises(exceptions.OperationFailed) as failed:
        registry.wait(operation_id)
    assert 'c1' in str(failed.value)
    assert 'disk full' in str(failed.value)
    assert failed.value.kwargs['failed_tasks'] == ['domain:tk0']
    record = registry.db.get_operation(operation_id)
    assert record.state == 'failed'
    assert 'disk full' in record.error
    assert registry.notifier.sent[-1] == 'tenks.cluster.teardown.error'
    registry.locks.acquire('c1')


def test_an_ended_operation_fails_its_wait_with_its_failed_tasks(registry):
    def run(operation_id, on_progress):
        raise exceptions.OperationFailed('domain:tk0: disk full',
                                         failed_tasks=['domain:tk0'])

    operation_id = start(registry, 'c1', run)
    deadline = time.monotonic() + 10
    while registry.db.get_operation(operation_id).state != 'failed':
        assert time.monotonic() < deadline
        time.sleep(0.01)
    while operation_id in registry._running:  # its future forgotten
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(exceptions.OperationFailed) as failed:
        registry.wait(operation_id)
    assert 'disk full' in str(failed.value)
    assert failed.value.kwargs['failed_tasks'] == ['domain:tk0']


def test_an_error_before_the_flow_ends_the_operation_failed(registry):
    def run(operation_id, on_progress):
        raise ValueError('no such hypervisor')

    operation_id = start(registry, 'c1', run)
    # Raised as it was while it runs; once it has ended, from its record.
    with pytest.raises((ValueError, exceptions.OperationFailed),
                       match='no such hypervisor'):
        registry.wait(operation_id)
    record = registry.db.get_operation(operation_id)
    assert (record.state, 'no such hypervisor' in record.error) == (
        'failed', True)
    registry.locks.acquire('c1')


def test_a_stopping_registry_ends_what_waits_and_takes_nothing_new(
        registry):
    running, release = threading.Event(), threading.Event()

    def slow(operation_id, on_progress):
        running.set()
        release.wait(10)
        return outcome()

    first = start(registry, 'c1', slow)
    running.wait(10)
    # One worker: the second waits for it.
    queued = start(registry, 'c2', lambda *a, **k: outcome())
    threading.Timer(0.3, release.set).start()
    assert registry.drain(grace=10) == 0
    assert registry.db.get_operation(first).state == 'succeeded'
    record = registry.db.get_operation(queued)
    assert record.state == 'failed'
    assert 'stopped before it began; nothing was changed' in record.error
    registry.locks.acquire('c2')
    with pytest.raises(exceptions.ConductorBusy):
        registry.check_accepting()
    registry.locks.release('c2')
    with pytest.raises(exceptions.ConductorBusy):
        start(registry, 'c3', lambda *a, **k: outcome())
    assert registry.db.list_operations(cluster='c3')[0].state == 'failed'


def test_what_a_dead_process_left_running(registry):
    """Only its last deploy is resumed; anything else ends interrupted."""
    db = registry.db
    older = registry.create('deploy', 'c1')
    last = registry.create('deploy', 'c1')
    assert registry.interrupted('c1').id == last
    assert db.get_operation(older).state == 'interrupted'
    teardown = registry.create('teardown', 'c2')
    assert registry.interrupted('c2') is None
    assert db.get_operation(teardown).state == 'interrupted'


def test_a_resume_skips_a_cluster_whose_lock_is_held(registry):
    held = registry.create('deploy', 'c1')
    free = registry.create('deploy', 'c2')
    registry.locks.acquire('c1')
    resumed = []

    def resume(operation_id, on_progress):
        resumed.append(operation_id)
        return outcome()

    assert registry.resume_interrupted(resume) == [free]
    registry.wait(free)
    assert resumed == [free]
    assert registry.db.get_operation(held).state == 'running'
    assert registry.db.get_operation(free).result['resumed'] is True


def test_the_first_failure_is_recorded_at_once_as_the_error():
    """Whoever follows a failing operation sees why while it rolls
    back; a later failure of the rollback does not replace it."""
    written = []
    db = types.SimpleNamespace(set_operation_progress=lambda *a: written
                               .append(a))
    recorder = progress.ProgressRecorder(db, 'op-1')
    recorder({'node': [1, 2]}, failure='node:tk1: boom')
    recorder({'node': [1, 2]}, failure='node:tk0: revert failed')
    recorder.flush()
    assert written == [('op-1', {'node': [1, 2]}, 'node:tk1: boom')] * 2


def test_a_progress_write_under_way_holds_no_other_thread_up(
        monkeypatch):
    """A task telling its steps does not wait while another thread's
    write of the progress waits for the database; the next write has
    the progress as it is then."""
    written, writing, release = [], threading.Event(), threading.Event()

    def write(operation_id, progress, failure):
        writing.set()
        release.wait(10)
        written.append(progress)

    recorder = progress.ProgressRecorder(
        types.SimpleNamespace(set_operation_progress=write), 'op-1')
    monkeypatch.setattr(recorder, 'INTERVAL', 0)
    counts = {'remove': [1, 3]}
    writer = threading.Thread(target=recorder, args=(counts,))
    writer.start()
    assert writing.wait(10)
    counts['remove'][0] = 2
    began = time.monotonic()
    recorder(counts)
    assert time.monotonic() - began < 1
    release.set()
    writer.join()
    counts['remove'][0] = 3
    recorder.flush()
    assert written == [{'remove': [1, 3]}, {'remove': [3, 3]}]


def test_a_pause_ends_with_the_operation_it_follows(registry):
    """The embedded CLI reads an operation's record after each pause: the
    pause ends as the operation does, not a whole interval later."""
    release = threading.Event()

    def run(operation_id, on_progress):
        release.wait(10)
        return outcome()

    operation_id = start(registry, 'c1', run)
    pause = registry.pauser(operation_id, 5)
    threading.Timer(0.2, release.set).start()
    began = time.monotonic()
    pause()
    assert time.monotonic() - began < 2
    assert registry.db.get_operation(operation_id).state == 'succeeded'
    # Ended, or not run here: the whole pause, not a busy loop.
    for pause in (registry.pauser(operation_id, 0.3),
                  registry.pauser('another', 0.3)):
        began = time.monotonic()
        pause()
        assert time.monotonic() - began >= 0.3
