"""TaskFlow persistence in the state database, writing only what a
resume needs.

The tables are TaskFlow's own (logbooks, flowdetails, atomdetails),
created by ``tenks.db.migration.upgrade_taskflow``. The connection is
ours rather than TaskFlow's SQLAlchemy backend: that one imports its
alembic migrations and the PostgreSQL dialect when loaded (a third of
a second of a teardown's run), and writes far more than a resume reads.

TaskFlow saves an atom for each state and each progress change, each
save reading the row first, and rewrites every atom of a flow when the
flow changes state. Resuming needs each atom's intention and result,
and the flow's state: an atom is written with one UPDATE when one of
those changed, and a flow's change writes the flow row and inserts, in
one statement, only atoms not written yet.

An atom that starts running is not written: a resume runs an atom it
finds pending again, as it would one found running, and the tasks' own
records (resources 'creating' before each request) are what a revert
after a crash goes by.
"""

import collections
import functools
import threading

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from taskflow import exceptions as tf_exceptions
from taskflow import states
from taskflow.persistence import base
from taskflow.persistence import models

from tenks.db import api as db_api
from tenks.db.flow_tables import ATOMS
from tenks.db.flow_tables import FLOWS
from tenks.db.flow_tables import LOGBOOKS

# Atom metadata a resume does without.
PROGRESS_KEYS = ('progress', 'progress_details')
# Atoms and flows whose written state a connection remembers, at most;
# a flow's are forgotten when its run ends (Connection.forget).
REMEMBERED = 4096


@functools.cache
def _updating_atom(columns):
    """An UPDATE of an atom's ``columns`` (those of its kind's dict), its
    values and uuid (``atom_uuid``) as parameters: compiled once, where
    one with the values in it was built for each atom saved."""
    return ATOMS.update().where(
        ATOMS.c.uuid == sa.bindparam('atom_uuid')).values(
            {column: sa.bindparam(column) for column in columns})


def _atom(row):
    row = dict(row._mapping)
    row.pop('parent_uuid')
    return models.atom_detail_class(row.pop('atom_type')).from_dict(row)


def _flow(row):
    row = dict(row._mapping)
    row.pop('parent_uuid')
    return models.FlowDetail.from_dict(row)


class Connection(base.Connection):
    """Stateless apart from what it remembers having written."""

    def __init__(self, backend):
        self._backend = backend
        self._engine = backend.engine
        self._lock = threading.Lock()
        # atom or flow uuid -> what was last written, progress and update
        # time left out
        self._written = collections.OrderedDict()
        # flow uuid -> uuids of its atoms in the database
        self._atoms = collections.OrderedDict()

    @property
    def backend(self):
        return self._backend

    def close(self):
        pass

    def upgrade(self):
        # The tables come with the state database's schema.
        pass

    def validate(self):
        pass

    def _write(self, what, uuid, statements):
        """``statements(conn)`` in a transaction; StorageFailure on a
        database error."""
        return self._run(lambda: db_api.writing(self._engine), 'writing',
                         what, uuid, statements)

    def _read(self, what, uuid, statements):
        return self._run(self._engine.connect, 'reading', what, uuid,
                         statements)

    def _run(self, connect, doing, what, uuid, statements):
        def run():
            with connect() as conn:
                return statements(conn)
        try:
            return db_api.reconnecting(self._engine, run)
        except sa_exc.SQLAlchemyError:
            tf_exceptions.raise_with_cause(
                tf_exceptions.StorageFailure,
                'Failed %s %s %r' % (doing, what, uuid))

    def _remember(self, table, key, value):
        with self._lock:
            table[key] = value
            table.move_to_end(key)
            while len(table) > REMEMBERED:
                table.popitem(last=False)

    def forget(self, flow_uuid):
        """Forget what was written of a flow and its atoms: its run has
        ended, and nothing writes them again (a resume reads them from
        the database), so the memory of a conductor does not grow with
        every flow it ran."""
        with self._lock:
            self._written.pop(flow_uuid, None)
            for atom_uuid in self._atoms.pop(flow_uuid, ()):
                self._written.pop(atom_uuid, None)

    def clear_all(self):
        def clear(conn):
            for table in (ATOMS, FLOWS, LOGBOOKS):
                conn.execute(table.delete())
        self._write('all entries', None, clear)
        with self._lock:
            self._written.clear()
            self._atoms.clear()

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
        updated = self._write(
            'atom details', atom_detail.uuid, lambda conn: conn.execute(
                _updating_atom(tuple(value)),
                dict(value, atom_uuid=atom_detail.uuid)).rowcount)
        if not updated:
            raise tf_exceptions.NotFound(
                'No atom details found with uuid %r' % atom_detail.uuid)
        self._remember(self._written, atom_detail.uuid, lasting)
        return atom_detail

    def update_flow_details(self, flow_detail):
        value = flow_detail.to_dict()
        lasting = dict(value, updated_at=None)
        with self._lock:
            known = self._atoms.get(flow_detail.uuid)
            unchanged = self._written.get(flow_detail.uuid) == lasting
        if unchanged and known is not None and all(
                atom_detail.uuid in known for atom_detail in flow_detail):
            return flow_detail

        def write(conn):
            updated = conn.execute(
                FLOWS.update().where(FLOWS.c.uuid == flow_detail.uuid)
                .values(value)).rowcount
            if not updated:
                raise tf_exceptions.NotFound(
                    'No flow details found with uuid %r' % flow_detail.uuid)
            atoms = known
            if atoms is None:
                atoms = set(conn.execute(
                    sa.select(ATOMS.c.uuid)
                    .where(ATOMS.c.parent_uuid == flow_detail.uuid))
                    .scalars())
            new = [a for a in flow_detail if a.uuid not in atoms]
            self._insert_atoms(conn, flow_detail.uuid, new)
            return atoms | {a.uuid for a in new}

        known = self._write('flow details', flow_detail.uuid, write)
        self._remember(self._atoms, flow_detail.uuid, known)
        self._remember(self._written, flow_detail.uuid, lasting)
        return flow_detail

    @staticmethod
    def _insert_atoms(conn, flow_uuid, atom_details):
        if atom_details:
            conn.execute(ATOMS.insert(), [
                dict(a.to_dict(), parent_uuid=flow_uuid,
                     atom_type=models.atom_detail_type(a))
                for a in atom_details])

    def save_logbook(self, book):
        """Write a new book with its flows and atoms; a book written
        before gets its new flows (a flow is updated on its own)."""
        def write(conn):
            exists = conn.execute(sa.select(LOGBOOKS.c.uuid).where(
                LOGBOOKS.c.uuid == book.uuid)).first()
            if exists:
                conn.execute(LOGBOOKS.update().where(
                    LOGBOOKS.c.uuid == book.uuid).values(book.to_dict()))
                flows = set(conn.execute(
                    sa.select(FLOWS.c.uuid)
                    .where(FLOWS.c.parent_uuid == book.uuid)).scalars())
            else:
                conn.execute(LOGBOOKS.insert().values(book.to_dict()))
                flows = set()
            for flow_detail in book:
                if flow_detail.uuid in flows:
                    continue
                conn.execute(FLOWS.insert().values(
                    dict(flow_detail.to_dict(), parent_uuid=book.uuid)))
                self._insert_atoms(conn, flow_detail.uuid, list(flow_detail))

        self._write('logbook', book.uuid, write)
        # What it wrote: the flows' atoms need no reading back.
        for flow_detail in book:
            self._remember(self._atoms, flow_detail.uuid,
                           {atom_detail.uuid for atom_detail in flow_detail})
        return book

    def destroy_logbook(self, book_uuid):
        def destroy(conn):
            flows = sa.select(FLOWS.c.uuid).where(
                FLOWS.c.parent_uuid == book_uuid)
            conn.execute(ATOMS.delete().where(
                ATOMS.c.parent_uuid.in_(flows)))
            conn.execute(FLOWS.delete().where(
                FLOWS.c.parent_uuid == book_uuid))
            return conn.execute(LOGBOOKS.delete().where(
                LOGBOOKS.c.uuid == book_uuid)).rowcount
        if not self._write('logbook', book_uuid, destroy):
            raise tf_exceptions.NotFound(
                'No logbook found with uuid %r' % book_uuid)

    def _flows(self, conn, book_uuid, lazy):
        flows = [_flow(row) for row in conn.execute(
            sa.select(FLOWS).where(FLOWS.c.parent_uuid == book_uuid))]
        if not lazy:
            for flow_detail in flows:
                self._populate(conn, flow_detail)
        return flows

    @staticmethod
    def _populate(conn, flow_detail):
        for row in conn.execute(sa.select(ATOMS).where(
                ATOMS.c.parent_uuid == flow_detail.uuid)):
            flow_detail.add(_atom(row))

    def _book(self, conn, row, lazy):
        book = models.LogBook.from_dict(dict(row._mapping))
        for flow_detail in self._flows(conn, book.uuid, lazy):
            book.add(flow_detail)
        return book

    def get_logbook(self, book_uuid, lazy=False):
        def read(conn):
            row = conn.execute(sa.select(LOGBOOKS).where(
                LOGBOOKS.c.uuid == book_uuid)).first()
            if row is None:
                raise tf_exceptions.NotFound(
                    'No logbook found with uuid %r' % book_uuid)
            return self._book(conn, row, lazy)
        return self._read('logbook', book_uuid, read)

    def get_logbooks(self, lazy=False):
        yield from self._read('logbooks', None, lambda conn: [
            self._book(conn, row, lazy)
            for row in conn.execute(sa.select(LOGBOOKS)).all()])

    def get_flows_for_book(self, book_uuid, lazy=False):
        yield from self._read('flows of logbook', book_uuid,
                              lambda conn: self._flows(conn, book_uuid, lazy))

    def get_flow_details(self, fd_uuid, lazy=False):
        def read(conn):
            row = conn.execute(sa.select(FLOWS).where(
                FLOWS.c.uuid == fd_uuid)).first()
            if row is None:
                raise tf_exceptions.NotFound(
                    'No flow details found with uuid %r' % fd_uuid)
            flow_detail = _flow(row)
            if not lazy:
                self._populate(conn, flow_detail)
            return flow_detail
        return self._read('flow details', fd_uuid, read)

    def get_atom_details(self, ad_uuid):
        def read(conn):
            row = conn.execute(sa.select(ATOMS).where(
                ATOMS.c.uuid == ad_uuid)).first()
            if row is None:
                raise tf_exceptions.NotFound(
                    'No atom details found with uuid %r' % ad_uuid)
            return _atom(row)
        return self._read('atom details', ad_uuid, read)

    def get_atoms_for_flow(self, fd_uuid):
        yield from self._read('atoms of flow', fd_uuid, lambda conn: [
            _atom(row) for row in conn.execute(
                sa.select(ATOMS).where(ATOMS.c.parent_uuid == fd_uuid))])


class Backend(base.Backend):
    """One shared Connection on the state database's engine."""

    def __init__(self, engine):
        super().__init__({})
        self.engine = engine
        self._connection = Connection(self)

    def get_connection(self):
        return self._connection

    def close(self):
        pass
