"""Run flows with persistence, so an interrupted operation can resume.

Each operation gets a logbook (its uuid is the operation id) in the
TaskFlow tables of the state database; the flow detail records the
factory and every atom's state and result.
"""

import collections
import importlib.util
import sys
import threading
from concurrent import futures


def _lazy_module(name):
    """Import ``name`` so that its body runs on first use (the recipe of
    importlib.util.LazyLoader's documentation)."""
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


# TaskFlow's SQLAlchemy backend imports its alembic migrations (a fifth of
# a second) at once; it uses them only to upgrade a database other than
# SQLite.
if 'taskflow.persistence.backends.sqlalchemy.migration' not in sys.modules:
    _lazy_module('taskflow.persistence.backends.sqlalchemy.migration')

from oslo_log import log as logging  # noqa: E402
from sqlalchemy import exc as sa_exc  # noqa: E402
from sqlalchemy import sql  # noqa: E402
from taskflow import engines  # noqa: E402
from taskflow import exceptions as tf_exceptions  # noqa: E402
from taskflow import states  # noqa: E402
from taskflow.persistence import models  # noqa: E402
from taskflow.persistence.backends import impl_sqlalchemy  # noqa: E402

from tenks import exceptions  # noqa: E402

LOG = logging.getLogger(__name__)

# Atom metadata a resume does without.
PROGRESS_KEYS = ('progress', 'progress_details')
# Atoms and flows whose written state a connection remembers.
REMEMBERED = 4096


def stage(atom_name):
    """The stage an atom belongs to, e.g. 'domain' for 'domain:h:tk0'."""
    return atom_name.split(':', 1)[0]


class Outcome:
    """What the atoms of one run did, gathered from engine events.

    ``on_progress`` gets {stage: [tasks done, tasks in all]} as they end;
    ``plan``: the changes the run applied, when it applied a plan.
    """

    def __init__(self, atom_names, on_progress=None, plan=None):
        self.plan = plan
        self.changed = []
        self.failures = []
        self.warnings = []
        self.progress = {}
        for name in atom_names:
            self.progress.setdefault(stage(name), [0, 0])[1] += 1
        self.on_progress = on_progress

    def on_atom(self, state, details):
        name = details['task_name']
        if state == states.SUCCESS:
            result = details.get('result')
            if isinstance(result, dict):
                if result.get('changed'):
                    self.changed.append(name)
                self.warnings += result.get('warnings', [])
            self.progress[stage(name)][0] += 1
            if self.on_progress is not None:
                self.on_progress(self.progress)
        elif state == states.FAILURE:
            self.failures.append((name, details['result']))


class LeanConnection(impl_sqlalchemy.Connection):
    """TaskFlow's SQLAlchemy connection, writing only what a resume needs.

    TaskFlow saves an atom for each state and each progress change, each
    save reading the row first, and rewrites every atom of a flow when
    the flow changes state. Resuming needs each atom's intention and
    result, and the flow's state: an atom is written with one UPDATE
    when one of those changed, and a flow's change writes the flow row
    and inserts, in one statement, only atoms not written yet.

    An atom that starts running is not written: a resume runs an atom
    it finds pending again, as it would one found running, and the
    tasks' own records (resources 'creating' before each request) are
    what a revert after a crash goes by.
    """

    def __init__(self, backend, upgrade_lock):
        super().__init__(backend, upgrade_lock)
        self._lock = threading.Lock()
        # atom or flow uuid -> what was last written, progress and update
        # time left out
        self._written = collections.OrderedDict()
        # flow uuid -> uuids of its atoms in the database
        self._atoms = collections.OrderedDict()

    def _remember(self, table, key, value):
        with self._lock:
            table[key] = value
            table.move_to_end(key)
            while len(table) > REMEMBERED:
                table.popitem(last=False)

    def update_atom_details(self, atom_detail):
        value = atom_detail.to_dict()
        lasting = dict(value, meta={k: v for k, v in value['meta'].items()
                                    if k not in PROGRESS_KEYS})
        with self._lock:
            written = self._written.get(atom_detail.uuid)
        if written == lasting or (
                value['state'] == states.RUNNING
                and value['intention'] == states.EXECUTE
                and (written is None or written['state'] == states.PENDING)):
            return atom_detail
        atoms = self._tables.atomdetails
        try:
            with self._engine.begin() as conn:
                updated = conn.execute(
                    sql.update(atoms).where(atoms.c.uuid == atom_detail.uuid)
                    .values(value)).rowcount
        except sa_exc.SQLAlchemyError:
            tf_exceptions.raise_with_cause(
                tf_exceptions.StorageFailure,
                'Failed updating atom details with uuid %r'
                % atom_detail.uuid)
        if not updated:
            raise tf_exceptions.NotFound(
                'No atom details found with uuid %r' % atom_detail.uuid)
        self._remember(self._written, atom_detail.uuid, lasting)
        return atom_detail

    def update_flow_details(self, flow_detail):
        flows = self._tables.flowdetails
        atoms = self._tables.atomdetails
        value = flow_detail.to_dict()
        lasting = dict(value, updated_at=None)
        with self._lock:
            known = self._atoms.get(flow_detail.uuid)
            unchanged = self._written.get(flow_detail.uuid) == lasting
        if unchanged and known is not None and all(
                atom_detail.uuid in known for atom_detail in flow_detail):
            return flow_detail
        try:
            with self._engine.begin() as conn:
                updated = conn.execute(
                    sql.update(flows).where(flows.c.uuid == flow_detail.uuid)
                    .values(value)).rowcount
                if not updated:
                    raise tf_exceptions.NotFound(
                        'No flow details found with uuid %r'
                        % flow_detail.uuid)
                if known is None:
                    known = set(conn.execute(
                        sql.select(atoms.c.uuid).where(
                            atoms.c.parent_uuid == flow_detail.uuid))
                        .scalars())
                new = [atom_detail for atom_detail in flow_detail
                       if atom_detail.uuid not in known]
                if new:
                    conn.execute(sql.insert(atoms), [
                        dict(atom_detail.to_dict(),
                             parent_uuid=flow_detail.uuid,
                             atom_type=models.atom_detail_type(atom_detail))
                        for atom_detail in new])
                    known.update(atom_detail.uuid for atom_detail in new)
        except sa_exc.SQLAlchemyError:
            tf_exceptions.raise_with_cause(
                tf_exceptions.StorageFailure,
                'Failed updating flow details with uuid %r'
                % flow_detail.uuid)
        self._remember(self._atoms, flow_detail.uuid, known)
        self._remember(self._written, flow_detail.uuid, lasting)
        return flow_detail

    def save_logbook(self, book):
        book = super().save_logbook(book)
        # What it wrote: the flows' atoms need no reading back.
        for flow_detail in book:
            self._remember(self._atoms, flow_detail.uuid,
                           {atom_detail.uuid for atom_detail in flow_detail})
        return book


class PersistenceBackend(impl_sqlalchemy.SQLAlchemyBackend):
    """TaskFlow's SQLAlchemy backend with one shared LeanConnection.

    Its connections are stateless (each operation takes a connection of
    the engine), but building one rebuilds the table schema, and TaskFlow
    builds one for every atom state it saves.
    """

    def __init__(self, engine):
        super().__init__({'connection': str(engine.url)}, engine=engine)
        self._connection = LeanConnection(self, self._upgrade_lock)
        self._connection.validate()

    def get_connection(self):
        return self._connection


class FlowRunner:

    def __init__(self, engine, workers):
        # TaskFlow's tables come with the state database's schema
        # (tenks.db.migration.upgrade).
        self.backend = PersistenceBackend(engine)
        # Kept across runs: an engine shuts down only executors it made,
        # and futurist's take a second to stop.
        self.executor = futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix='flow')

    def run(self, operation_id, name, factory, factory_kwargs, store,
            on_progress=None):
        """Run a new flow from ``factory``; return its Outcome."""
        book = models.LogBook(name, uuid=operation_id)
        engine = engines.load_from_factory(
            factory, factory_kwargs=factory_kwargs, store=store, book=book,
            backend=self.backend, **self._options())
        return self._run(engine, on_progress)

    def resume(self, operation_id, on_progress=None):
        """Resume an interrupted operation where it stopped."""
        try:
            book = self.backend.get_connection().get_logbook(operation_id)
        except tf_exceptions.NotFound:
            book = ()
        flow_detail = next(iter(book), None)
        if flow_detail is None:
            raise exceptions.NothingToResume(id=operation_id)
        engine = engines.load_from_detail(flow_detail, backend=self.backend,
                                          **self._options())
        return self._run(engine, on_progress)

    def _options(self):
        return {'engine': 'parallel', 'executor': self.executor}

    def _run(self, engine, on_progress):
        engine.compile()
        graph = engine.compilation.execution_graph
        outcome = Outcome([node.name for node, data in graph.nodes(data=True)
                           if data['kind'] == 'task'], on_progress)
        engine.atom_notifier.register(engine.atom_notifier.ANY,
                                      outcome.on_atom)
        try:
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
