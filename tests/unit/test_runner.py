"""The flow runner on its own (conductor.runner): a run's outcome, a
failure rolled back and named, and a resume that runs only what an
interrupted run left undone."""

import pytest
from taskflow import engines
from taskflow import states
from taskflow import task
from taskflow.patterns import linear_flow
from taskflow.persistence import models
from taskflow.utils import iter_utils

from conductor import runner as flow_runner
from flows import context
from flows import stages
from tenks import exceptions
from tenks.db import api as db_api
from tenks.db import migration

# What the tasks of the flows below did, in order: (verb, task name).
DONE = []


class Step(task.Task):

    def __init__(self, name, changed=False, warning=None, fails=False):
        super().__init__(name=name)
        self.changed = changed
        self.warning = warning
        self.fails = fails

    def execute(self):
        DONE.append(('execute', self.name))
        if self.fails:
            raise RuntimeError('%s broke' % self.name)
        return {'changed': self.changed,
                'warnings': [self.warning] if self.warning else []}

    def revert(self, **kwargs):
        DONE.append(('revert', self.name))


def three_steps(fail=None):
    """domain:tk0 (changes), domain:tk1 (warns), bmc:tk0."""
    return linear_flow.Flow('deploy').add(
        Step('domain:tk0', changed=True),
        Step('domain:tk1', warning='slow disk', fails=fail == 'domain:tk1'),
        Step('bmc:tk0', fails=fail == 'bmc:tk0'))


@pytest.fixture
def runner(tmp_path):
    DONE.clear()
    engine = db_api.create_engine('sqlite:///%s' % (tmp_path / 'state.db'))
    migration.upgrade_taskflow(engine)
    runner = flow_runner.FlowRunner(engine, workers=2)
    yield runner
    runner.executor.shutdown()
    engine.dispose()


def test_a_run_reports_changes_warnings_and_progress(runner):
    progress = []
    outcome = runner.run('op-1', 'deploy:c1', three_steps, {}, {},
                         on_progress=lambda p: progress.append(
                             {k: list(v) for k, v in p.items()}))
    assert DONE == [('execute', 'domain:tk0'), ('execute', 'domain:tk1'),
                    ('execute', 'bmc:tk0')]
    assert outcome.changed == ['domain:tk0']
    assert outcome.warnings == ['slow disk']
    assert progress[-1] == {'domain': [2, 2], 'bmc': [1, 1]}
    assert len(progress) == 3


class Batch(task.Task):
    """A task of ``steps`` steps that tells the progress of operation
    ``operation`` of the first ``told`` of them as it does them."""

    def __init__(self, name, operation, steps, told):
        super().__init__(name=name)
        self.operation = operation
        self.steps = steps
        self.told = told

    def execute(self):
        for _ in range(self.told):
            context.step(self.operation, self.name)
        return {'changed': True}


def two_batches(operation):
    """remove:h:0 (3 nodes, told one by one) then remove:h:1 (3 nodes,
    one told): a batch tells more than it has, the second."""
    return linear_flow.Flow('teardown').add(
        Batch('remove:h:0', operation, 3, 3),
        Batch('remove:h:1', operation, 3, 1))


def test_a_task_tells_its_steps_as_it_does_them(runner):
    progress = []
    outcome = runner.run('op-2', 'teardown:c1', two_batches,
                         {'operation': 'op-2'}, {},
                         on_progress=lambda p: progress.append(
                             p['remove'][0]))
    # Each step as it was told; an end adds what its task did not tell.
    assert progress == [1, 2, 3, 3, 4, 6]
    assert outcome.progress == {'remove': [6, 6]}
    # Another operation's steps, or a step more than a task has, count
    # for nothing.
    report = flow_runner.RunReport({'remove:h:0': 2})
    with context.reporting('op-3', report):
        context.step('op-4', 'remove:h:0')
        context.step('op-3', 'remove:h:0', 5)
    assert report.progress == {'remove': [2, 2]}
    context.step('op-3', 'remove:h:0')
    assert report.progress == {'remove': [2, 2]}
    # A progress that cannot be written costs the task nothing.
    report = flow_runner.RunReport({'remove:h:0': 2},
                                   on_progress=lambda p: 1 / 0)
    with context.reporting('op-5', report):
        context.step('op-5', 'remove:h:0')
    assert report.progress == {'remove': [1, 2]}


def test_a_failure_is_rolled_back_and_named(runner):
    heard = []

    def on_progress(progress, failure=None):
        heard.append((failure, len(DONE)))

    with pytest.raises(exceptions.OperationFailed) as failed:
        runner.run('op-1', 'deploy:c1', three_steps, {'fail': 'bmc:tk0'},
                   {}, on_progress=on_progress)
    # Heard as it failed, before the rollback ran.
    [(failure, done)] = [h for h in heard if h[0]]
    assert failure.startswith('bmc:tk0: ') and 'bmc:tk0 broke' in failure
    assert ('revert', 'bmc:tk0') not in DONE[:done]
    assert failed.value.kwargs['failed_tasks'] == ['bmc:tk0']
    assert 'bmc:tk0' in str(failed.value)
    assert 'bmc:tk0 broke' in str(failed.value)
    assert DONE[-3:] == [('revert', 'bmc:tk0'), ('revert', 'domain:tk1'),
                         ('revert', 'domain:tk0')]


def interrupt_after(runner, operation_id, done):
    """Run the flow in this thread until ``done`` tasks succeeded, then
    stop, as a killed process does: what is persisted stays."""
    book = models.LogBook('deploy:c1', uuid=operation_id)
    engine = engines.load_from_factory(
        three_steps, book=book,
        backend=runner.backend, engine='serial')
    for _ in engine.run_iter():
        graph = engine.compilation.execution_graph
        names = [node.name for node, data in graph.nodes(data=True)
                 if data['kind'] == 'task']
        if [state for state, _ in engine.storage.get_atoms_states(
                names).values()].count(states.SUCCESS) == done:
            break
    runner.backend.get_connection().forget(engine.storage.flow_uuid)


def test_a_resume_runs_only_what_was_left_and_counts_the_rest(runner):
    interrupt_after(runner, 'op-1', done=1)
    assert DONE == [('execute', 'domain:tk0')]
    DONE.clear()
    outcome = runner.resume('op-1')
    assert DONE == [('execute', 'domain:tk1'), ('execute', 'bmc:tk0')]
    # What the first run did counts in the outcome.
    assert outcome.changed == ['domain:tk0']
    assert outcome.progress == {'domain': [2, 2], 'bmc': [1, 1]}


def test_nothing_to_resume(runner):
    with pytest.raises(exceptions.NothingToResume):
        runner.resume('never-ran')


def test_a_flow_rolled_back_before_its_end_was_recorded_is_not_rerun(
        runner):
    with pytest.raises(exceptions.OperationFailed):
        runner.run('op-1', 'deploy:c1', three_steps, {'fail': 'bmc:tk0'},
                   {})
    DONE.clear()
    with pytest.raises(exceptions.OperationFailed, match='rolled back'):
        runner.resume('op-1')
    assert DONE == []


def test_a_run_leaves_nothing_in_the_stores_memory(runner):
    runner.run('op-1', 'deploy:c1', three_steps, {}, {})
    connection = runner.backend.get_connection()
    assert (connection._written, connection._atoms) == ({}, {})


def many_steps(count):
    return stages.unordered('deploy', [Step('domain:tk%d' % n)
                                       for n in range(count)])


def test_running_a_flow_searches_its_hierarchy_in_proportion_to_it(
        runner, monkeypatch):
    """TaskFlow's engine looks each atom up in the flow's hierarchy by a
    walk of it all: n² for n atoms, unless the runner's engine indexes
    it."""
    visited = []
    find_first_match = iter_utils.find_first_match

    def counting(iterable, matcher):
        def walked():
            for item in iterable:
                visited.append(item)
                yield item
        return find_first_match(walked(), matcher)

    monkeypatch.setattr(iter_utils, 'find_first_match', counting)
    work = {}
    for count in (100, 400):
        visited.clear()
        outcome = runner.run('op-%d' % count, 'deploy:c%d' % count,
                             many_steps, {'count': count}, {})
        assert outcome.progress == {'domain': [count, count]}
        work[count] = len(visited)
    assert work[400] < 8 * max(work[100], 1)
