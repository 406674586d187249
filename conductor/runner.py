"""Run flows with persistence, so an interrupted operation can resume.

Each operation gets a logbook (its uuid is the operation id) in the
TaskFlow tables of the state database; the flow detail records the
factory and every atom's state and result.
"""

import threading
from concurrent import futures

from oslo_log import log as logging
from taskflow import engines
from taskflow import exceptions as tf_exceptions
from taskflow import states
from taskflow.persistence import models

from conductor import faults
from conductor import flow_store
from flows import context
from tenks import exceptions

LOG = logging.getLogger(__name__)


def stage(atom_name):
    """The stage an atom belongs to, e.g. 'domain' for 'domain:h:tk0'."""
    return atom_name.split(':', 1)[0]


class RunReport:
    """What the atoms of one run did, gathered from engine events.

    ``steps``: {atom name: its steps}, a task's ``steps`` (the nodes a
    task removing several removes) or 1. ``on_progress`` gets {stage:
    [steps done, steps in all]} as tasks end, and with ``failure`` ('atom:
    error') when one fails (the run then rolls back); ``plan``: the
    changes the run applied, when it applied a plan.

    ``changed`` names the tasks that changed something; a task that does
    several things names those that changed in ``changed_names`` of its
    result.
    """

    def __init__(self, steps, on_progress=None, plan=None):
        self.plan = plan
        self.changed = []
        self.failures = []
        self.warnings = []
        self.steps = steps
        self.progress = {}
        for name, count in steps.items():
            self.progress.setdefault(stage(name), [0, 0])[1] += count
        self.on_progress = on_progress
        # Steps of running tasks told before they ended (see step): the
        # engine's thread and the tasks' threads both count.
        self._told = {}
        self._lock = threading.Lock()

    def step(self, name, count=1):
        """Task ``name`` did ``count`` more of its steps; what it ends
        with counts what it did not tell (flows.context.step)."""
        with self._lock:
            told = self._told.get(name, 0)
            count = min(count, self.steps.get(name, 0) - told)
            if count <= 0:
                return
            self._told[name] = told + count
            self.progress[stage(name)][0] += count
        try:
            self._report()
        except Exception as e:
            # A progress not written costs the task nothing (as a
            # failing listener of the engine's does).
            LOG.warning('Could not record the progress of %s: %s', name, e)

    def _report(self, failure=None):
        # Outside the lock: the progress is written to the database
        # (conductor.progress), which may wait for other writers.
        if self.on_progress is None:
            return
        if failure is None:
            self.on_progress(self.progress)
        else:
            self.on_progress(self.progress, failure=failure)

    def on_atom(self, state, details):
        name = details['task_name']
        if state == states.SUCCESS:
            result = details.get('result')
            if isinstance(result, dict):
                if 'changed_names' in result:
                    self.changed += result['changed_names']
                elif result.get('changed'):
                    self.changed.append(name)
                self.warnings += result.get('warnings', [])
            with self._lock:
                self.progress[stage(name)][0] += (
                    self.steps[name] - self._told.pop(name, 0))
            self._report()
        elif state == states.FAILURE:
            self.failures.append((name, details['result']))
            self._report(failure='%s: %s' % (
                name, details['result'].exception_str))


class FlowRunner:

    def __init__(self, engine, workers):
        # TaskFlow's tables come with the state database's schema
        # (tenks.db.migration.upgrade).
        self.backend = flow_store.Backend(engine)
        # Kept across runs: an engine shuts down only executors it made,
        # and futurist's take a second to stop.
        self.executor = futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix='flow')

    def run(self, operation_id, name, factory, factory_kwargs, store,
            on_progress=None):
        """Run a new flow from ``factory``; return its RunReport."""
        book = models.LogBook(name, uuid=operation_id)
        engine = engines.load_from_factory(
            factory, factory_kwargs=factory_kwargs, store=store, book=book,
            backend=self.backend, **self._options())
        return self._run(operation_id, engine, on_progress, resumed=False)

    def _flow_detail(self, operation_id):
        try:
            book = self.backend.get_connection().get_logbook(operation_id)
        except tf_exceptions.NotFound:
            return None
        return next(iter(book), None)

    def has_flow(self, operation_id):
        """Whether the operation's flow was saved: it has begun."""
        return self._flow_detail(operation_id) is not None

    def resume(self, operation_id, on_progress=None):
        """Resume an interrupted operation where it stopped."""
        flow_detail = self._flow_detail(operation_id)
        if flow_detail is None:
            raise exceptions.NothingToResume(id=operation_id)
        if flow_detail.state in (states.REVERTED, states.FAILURE):
            # Run again, it would start over.
            raise exceptions.OperationFailed(
                'it had failed and been rolled back when the process running '
                'it stopped, before recording why')
        engine = engines.load_from_detail(flow_detail, backend=self.backend,
                                          **self._options())
        return self._run(operation_id, engine, on_progress, resumed=True)

    def _options(self):
        # TaskFlow's parallel engine, quicker to compile (conductor.engine).
        return {'engine': 'tenks-parallel', 'executor': self.executor}

    def _run(self, operation_id, engine, on_progress, resumed):
        try:
            return self._run_engine(operation_id, engine, on_progress,
                                    resumed)
        finally:
            # Its records stay in the database; the store's memory of
            # them goes.
            self.backend.get_connection().forget(engine.storage.flow_uuid)

    def _run_engine(self, operation_id, engine, on_progress, resumed):
        engine.compile()
        engine.prepare()
        graph = engine.compilation.execution_graph
        steps = {node.name: getattr(node, 'steps', 1)
                 for node, data in graph.nodes(data=True)
                 if data['kind'] == 'task'}
        names = list(steps)
        outcome = RunReport(steps, on_progress)
        # A resumed flow: what its atoms did before counts too.
        done = engine.storage.get_atoms_states(names)
        for name in names:
            if done[name][0] == states.SUCCESS:
                outcome.on_atom(states.SUCCESS, {
                    'task_name': name,
                    'result': engine.storage.get_execute_result(name)})
        engine.atom_notifier.register(engine.atom_notifier.ANY,
                                      outcome.on_atom)
        fault = faults.active()
        if fault is not None:
            fault.arm(engine, resumed)
        try:
            with context.reporting(operation_id, outcome):
                engine.run()
        except tf_exceptions.WrappedFailure as e:
            raise self._failed(outcome, e) from None
        except Exception as e:
            raise self._failed(outcome, e) from e
        return outcome

    @staticmethod
    def _failed(outcome, exc):
        reasons = ['%s: %s' % (atom, failure.exception_str)
                   for atom, failure in outcome.failures]
        return exceptions.OperationFailed(
            '; '.join(reasons) or str(exc), failed_tasks=[
                atom for atom, _ in outcome.failures])
