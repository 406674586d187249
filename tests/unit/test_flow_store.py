"""The flow store on its own (conductor.flow_store): what it writes is
what a resume reads back, from another connection as from another
process, and it writes only what changed."""

import collections
import threading

import pytest
import sqlalchemy as sa
from taskflow import exceptions as tf_exceptions
from taskflow import states
from taskflow.persistence import models

from conductor import flow_store
from tenks.db import api as db_api
from tenks.db import flow_tables
from tenks.db import migration


@pytest.fixture
def engine(tmp_path):
    engine = db_api.create_engine('sqlite:///%s' % (tmp_path / 'state.db'))
    migration.upgrade_taskflow(engine)
    yield engine
    engine.dispose()


def store(engine):
    """A connection of its own, as another conductor process has."""
    return flow_store.Backend(engine).get_connection()


def book_of(name, atoms=('a', 'b')):
    book = models.LogBook(name)
    flow = models.FlowDetail(name, uuid=models.uuidutils.generate_uuid())
    for atom in atoms:
        flow.add(models.TaskDetail(atom, uuid=models.uuidutils
                                   .generate_uuid()))
    book.add(flow)
    return book, flow


def named(flow, name):
    return next(atom for atom in flow if atom.name == name)


@pytest.fixture
def statements(engine):
    """The SQL statements the engine runs from now on, by verb."""
    seen = collections.Counter()

    def count(conn, cursor, statement, parameters, context, many):
        seen[statement.split()[0].upper()] += 1

    sa.event.listen(engine, 'before_cursor_execute', count)
    yield seen
    sa.event.remove(engine, 'before_cursor_execute', count)


def test_what_is_saved_is_read_back_by_another_connection(engine):
    writer = store(engine)
    book, flow = book_of('deploy:c1')
    writer.save_logbook(book)
    atom = named(flow, 'a')
    atom.state = states.SUCCESS
    atom.results = {'changed': True, 'name': 'tk0'}
    writer.update_atom_details(atom)
    flow.state = states.RUNNING
    writer.update_flow_details(flow)

    read = store(engine).get_logbook(book.uuid)
    [read_flow] = list(read)
    assert (read_flow.uuid, read_flow.state) == (flow.uuid, states.RUNNING)
    by_name = {a.name: a for a in read_flow}
    assert by_name['a'].state == states.SUCCESS
    assert by_name['a'].results == {'changed': True, 'name': 'tk0'}
    assert by_name['b'].state is None
    lazy = store(engine).get_logbook(book.uuid, lazy=True)
    assert [len(f) for f in lazy] == [0]


def test_it_writes_only_what_a_resume_needs(engine, statements):
    connection = store(engine)
    book, flow = book_of('deploy:c1')
    connection.save_logbook(book)
    atom = named(flow, 'a')
    atom.state = states.PENDING
    connection.update_atom_details(atom)
    statements.clear()

    # A pending atom that starts running is not written: a resume runs
    # it again either way.
    atom.state = states.RUNNING
    connection.update_atom_details(atom)
    assert statements == {}
    assert store(engine).get_atom_details(atom.uuid).state == states.PENDING
    statements.clear()
    # Its result is, once; progress alone never is.
    atom.state = states.SUCCESS
    atom.results = {'changed': False}
    connection.update_atom_details(atom)
    connection.update_atom_details(atom)
    atom.meta['progress'] = 1.0
    connection.update_atom_details(atom)
    assert statements == {'UPDATE': 1}
    # A flow whose state did not change, with no new atom, is not
    # written again.
    statements.clear()
    flow.state = states.RUNNING
    connection.update_flow_details(flow)
    connection.update_flow_details(flow)
    assert statements == {'UPDATE': 1}


def test_a_new_atom_of_a_saved_flow_is_inserted_with_the_flow(engine):
    connection = store(engine)
    book, flow = book_of('deploy:c1', atoms=('a',))
    connection.save_logbook(book)
    flow.add(models.TaskDetail('late', uuid=models.uuidutils
                               .generate_uuid()))
    connection.update_flow_details(flow)
    # Also by a connection that did not save the flow (a resuming
    # process): it reads which atoms are there.
    other = store(engine)
    resumed = other.get_flow_details(flow.uuid)
    resumed.add(models.TaskDetail('later', uuid=models.uuidutils
                                  .generate_uuid()))
    resumed.state = states.RUNNING
    other.update_flow_details(resumed)
    assert sorted(a.name for a in store(engine).get_atoms_for_flow(
        flow.uuid)) == ['a', 'late', 'later']


def test_two_writers_at_once_keep_every_flow_whole(engine):
    """Two conductors on one state database, each saving and updating
    flows of its own at the same time."""
    books = {}

    def write(connection, prefix):
        for i in range(15):
            book, flow = book_of('%s:%d' % (prefix, i), atoms=('a', 'b', 'c'))
            connection.save_logbook(book)
            for atom in flow:
                atom.state = states.SUCCESS
                atom.results = {'by': prefix, 'i': i}
                connection.update_atom_details(atom)
            flow.state = states.SUCCESS
            connection.update_flow_details(flow)
            books[book.uuid] = (prefix, i)

    writers = [threading.Thread(target=write, args=(store(engine), p))
               for p in ('one', 'two')]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()

    reader = store(engine)
    read = {book.uuid: book for book in reader.get_logbooks()}
    assert set(read) == set(books)
    for uuid, (prefix, i) in books.items():
        [flow] = list(read[uuid])
        assert flow.state == states.SUCCESS
        assert [(a.state, a.results) for a in flow] == [
            (states.SUCCESS, {'by': prefix, 'i': i})] * 3


def test_a_flow_forgotten_is_written_again_after_another_writer(engine):
    """What a connection remembers having written must not hide a change
    another process made since: once a run ends, the flow is forgotten,
    and the next run of it (a resume) writes what it sets."""
    first, second = store(engine), store(engine)
    book, flow = book_of('deploy:c1', atoms=('a',))
    first.save_logbook(book)
    atom = named(flow, 'a')
    atom.state, atom.results = states.SUCCESS, {'v': 1}
    first.update_atom_details(atom)
    first.forget(flow.uuid)

    theirs = second.get_atom_details(atom.uuid)
    theirs.results = {'v': 2}
    second.update_atom_details(theirs)
    first.update_atom_details(atom)
    assert store(engine).get_atom_details(atom.uuid).results == {'v': 1}


def test_what_a_connection_remembers_is_bounded(engine, monkeypatch):
    monkeypatch.setattr(flow_store, 'REMEMBERED', 5)
    connection = store(engine)
    book, flow = book_of('deploy:c1', atoms=[str(i) for i in range(12)])
    connection.save_logbook(book)
    for atom in flow:
        atom.state = states.SUCCESS
        connection.update_atom_details(atom)
    assert len(connection._written) == 5
    connection.forget(flow.uuid)
    assert connection._atoms == {}


def test_a_destroyed_book_leaves_no_flow_or_atom(engine):
    connection = store(engine)
    kept, _ = book_of('deploy:kept')
    gone, _ = book_of('deploy:gone')
    connection.save_logbook(kept)
    connection.save_logbook(gone)
    connection.destroy_logbook(gone.uuid)
    with engine.connect() as conn:
        counts = [conn.scalar(sa.select(sa.func.count()).select_from(t))
                  for t in (flow_tables.LOGBOOKS, flow_tables.FLOWS,
                            flow_tables.ATOMS)]
    assert counts == [1, 1, 2]
    with pytest.raises(tf_exceptions.NotFound):
        connection.get_logbook(gone.uuid)
    with pytest.raises(tf_exceptions.NotFound):
        connection.destroy_logbook(gone.uuid)


def test_a_database_error_is_a_storage_failure(engine):
    connection = store(engine)
    with engine.begin() as conn:
        conn.execute(sa.text('DROP TABLE atomdetails'))
    with pytest.raises(tf_exceptions.StorageFailure):
        list(connection.get_atoms_for_flow('any'))


def test_enum_columns_are_taskflows():
    """TaskFlow's migrations make atom_type and intention enum types
    (PostgreSQL refuses a plain string for them): the same types, values
    and names here."""
    from taskflow.persistence.backends.sqlalchemy import tables
    theirs = tables.fetch(sa.MetaData()).atomdetails.c
    for column, name in (('atom_type', 'atom_types'),
                         ('intention', 'intention_type')):
        ours = flow_tables.ATOMS.c[column].type
        assert isinstance(ours, sa.Enum), column
        assert (ours.name, ours.enums) == (name, theirs[column].type.enums)
