"""The state database: its schema comes from the migrations, and its
files keep secrets to their owner and forget them with the cluster."""

import contextlib
import os
import secrets
import stat
import threading

import pytest
import sqlalchemy as sa
from alembic import autogenerate
from alembic import script
from alembic.runtime import migration as alembic_migration

from tenks import exceptions
from tenks import fileutils
from tenks.cli import embedded
from tenks.db import api as db_api
from tenks.db import migration
from tenks.db import migrations
from tenks.db import models
from tests.unit.conftest import make_spec


@contextlib.contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def files_holding(root, data):
    found = []
    for parent, _, names in os.walk(root):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, 'rb') as f:
                if data in f.read():
                    found.append(os.path.relpath(path, root))
    return found


def upgraded_engine(tmp_path):
    engine = db_api.create_engine(
        'sqlite:///%s' % (tmp_path / 'state.sqlite'))
    with migration.schema_lock(str(tmp_path)):
        migration.upgrade(engine)
    return engine


def env_include_name(name, type_, parent_names):
    """What the migrations' env.py compares: Tenks' own tables."""
    return type_ != 'table' or name.startswith(migration.TABLE_PREFIX)


def test_upgraded_empty_database_equals_the_models(tmp_path):
    engine = upgraded_engine(tmp_path)
    with engine.connect() as connection:
        context = alembic_migration.MigrationContext.configure(
            connection, opts={'version_table': migration.VERSION_TABLE,
                              'include_name': env_include_name})
        assert autogenerate.compare_metadata(
            context, models.metadata) == []
        # TaskFlow's tables come with the schema, for the flows.
        assert sorted(sa.inspect(connection).get_table_names()) == sorted(
            [*models.metadata.tables, migration.VERSION_TABLE,
             'atomdetails', 'flowdetails', 'logbooks'])
        # One line of history: a merge is needed when two branches meet.
        head = script.ScriptDirectory(migration.MIGRATIONS).get_heads()
        assert [context.get_current_revision()] == head


def test_upgrade_again_changes_nothing(tmp_path):
    engine = upgraded_engine(tmp_path)
    db_api.StateDB(engine).save_cluster('c', {'k': 'v'}, 'deployed')
    with migration.schema_lock(str(tmp_path)):
        migration.upgrade(engine)
    assert db_api.StateDB(engine).get_cluster('c').spec == {'k': 'v'}


def test_the_version_reaches_head_only_once_the_schema_is_whole(
        tmp_path, monkeypatch):
    """A process that finds the version at head uses the schema without
    waiting for the lock: TaskFlow's tables are there by then."""
    engine = db_api.create_engine(
        'sqlite:///%s' % (tmp_path / 'state.sqlite'))
    seen = []
    upgrade_taskflow = migration.upgrade_taskflow

    def watched(engine):
        seen.append(db_api.schema_version(engine))
        upgrade_taskflow(engine)
    monkeypatch.setattr(migration, 'upgrade_taskflow', watched)
    with migration.schema_lock(str(tmp_path)):
        migration.upgrade(engine)
    assert seen == [None]
    assert db_api.schema_version(engine) == migrations.HEAD


def test_database_older_than_the_migrations_is_refused(tmp_path):
    engine = db_api.create_engine(
        'sqlite:///%s' % (tmp_path / 'state.sqlite'))
    models.metadata.create_all(engine)
    with pytest.raises(exceptions.ConfigError, match='older than its '
                       'migrations: tear its clusters down'):
        migration.upgrade(engine)


def test_state_files_are_private_whatever_the_umask(conf, hypervisor):
    state_dir = conf.state_dir
    with umask(0o022), embedded.embedded(conf) as conductor:
        conductor.deployments.deploy(make_spec(count=1))
        db = os.path.join(state_dir, 'state.sqlite')
        # WAL and shared memory exist while a connection is open.
        assert [mode(db + suffix) for suffix in ('', '-wal', '-shm')] == [
            0o600] * 3
        assert mode(state_dir) == mode(os.path.join(state_dir, 'locks')) == (
            0o700)


def test_existing_modes_are_corrected(tmp_path):
    state_dir = tmp_path / 'state'
    state_dir.mkdir(mode=0o755)
    db = state_dir / 'state.sqlite'
    db.touch(mode=0o644)
    fileutils.private_dir(str(state_dir))
    fileutils.private_file(str(db))
    assert (mode(state_dir), mode(db)) == (0o700, 0o600)


def test_missing_parents_are_made_private(tmp_path):
    leaf = tmp_path / 'state' / 'logs' / 'console'
    with umask(0o022):
        fileutils.private_dir(str(leaf), fix_existing=False)
    assert [mode(tmp_path / 'state'), mode(leaf.parent), mode(leaf)] == [
        0o700] * 3


def test_a_directory_the_operator_chose_keeps_its_mode(tmp_path):
    chosen = tmp_path / 'console'
    chosen.mkdir(mode=0o755)
    fileutils.private_dir(str(chosen), fix_existing=False)
    assert mode(chosen) == 0o755


def test_teardown_forgets_the_bmc_password(conf, hypervisor):
    password = secrets.token_hex(10)
    with embedded.embedded(conf) as conductor:
        conductor.deployments.deploy(make_spec(count=2,
                                               ipmi_password=password))
        # Only the cluster's record holds it, not the flows' details.
        holders = []
        with conductor.db.engine.connect() as connection:
            for table in sa.inspect(connection).get_table_names():
                rows = connection.exec_driver_sql(
                    'SELECT * FROM %s' % table).all()
                if any(password in str(value)
                       for row in rows for value in row):
                    holders.append(table)
        assert holders == ['tenks_clusters']
        conductor.teardowns.teardown('unit')
        assert files_holding(conf.state_dir, password.encode()) == []
    assert files_holding(conf.state_dir, password.encode()) == []



def test_head_constant_is_alembics_head():
    # The read-only CLI compares a database's revision with it without
    # importing alembic.
    assert script.ScriptDirectory(migration.MIGRATIONS).get_heads() == [
        migrations.HEAD]


def delete_end(node):
    return {'event_type': 'tenks.node.delete.end', 'priority': 'info',
            'cluster': node.cluster, 'payload': {'name': node.name}}


def test_nodes_are_forgotten_with_their_events_in_one_transaction(
        tmp_path):
    """A teardown's nodes: their records go and their events are
    recorded in one commit, made from the records as they were; a node
    already gone records nothing."""
    from tests.unit.test_node_listing import node
    engine = upgraded_engine(tmp_path)
    db = db_api.StateDB(engine)
    records = [node('c', 1), node('c', 2), node('c', 3)]
    db.add_nodes(records)
    commits = []
    sa.event.listen(engine, 'commit', lambda conn: commits.append(1))
    first, second = db.forget_nodes(
        [(r['uuid'], None, ()) for r in records[:2]], delete_end)
    assert (first['payload'], second['payload']) == (
        {'name': 'c1'}, {'name': 'c2'})
    assert len(commits) == 1
    assert [db.get_node(r['uuid']) is None for r in records] == [
        True, True, False]
    assert sorted((e.event_type, e.payload['name'])
                  for e in db.list_events('c')) == [
        ('tenks.node.delete.end', 'c1'), ('tenks.node.delete.end', 'c2')]
    assert db.forget_nodes([(records[0]['uuid'], None, ()),
                            (records[2]['uuid'], None, ()),
                            (records[2]['uuid'], None, ())],
                           delete_end)[::2] == [None, None]
    assert len(db.list_events('c')) == 3
    assert db.forget_nodes([], lambda n: 1 / 0) == []
    engine.dispose()


def test_forgetting_more_nodes_runs_no_more_statements(tmp_path):
    """A batch of nodes is forgotten in the same few statements as one
    node: each statement holds the writers' lock (a thousand nodes'
    teardown held it for ten seconds, statement by statement)."""
    from tests.unit.test_node_listing import node
    engine = upgraded_engine(tmp_path)
    db = db_api.StateDB(engine)
    statements = []
    sa.event.listen(engine, 'before_cursor_execute',
                    lambda *args: statements.append(1))

    def forget(indexes):
        records = [node('c', i) for i in indexes]
        db.add_nodes(records)
        for record in records:
            db.begin_resources('c', 'hv1', 'op', [
                (kind, record['name'], {}) for kind in ('domain', 'bmc')],
                node=record['uuid'], new=True)
        statements.clear()
        events = db.forget_nodes([
            (record['uuid'], 'hv1', [(kind, record['name'])
                                     for kind in ('domain', 'bmc')])
            for record in records], delete_end)
        assert [e['payload'] for e in events] == [
            {'name': r['name']} for r in records]
        return len(statements)

    assert forget(range(1, 17)) == forget([20])
    assert db.list_resources('c') == [] and db.list_nodes() == []
    assert len(db.list_events('c')) == 17
    engine.dispose()


def test_a_node_is_forgotten_with_its_last_records(tmp_path):
    """A teardown's node: the records of what its hostagent removed go
    in the commit that forgets it, also when its record has gone; other
    records stay."""
    from tests.unit.test_node_listing import node
    engine = upgraded_engine(tmp_path)
    db = db_api.StateDB(engine)
    record = node('c', 1)
    db.add_nodes([record])
    db.begin_resources('c', 'hv1', 'op', [
        (kind, name, {}) for kind in ('domain', 'bmc')
        for name in ('c1', 'c2')], node=record['uuid'], new=True)
    commits = []
    sa.event.listen(engine, 'commit', lambda conn: commits.append(1))
    assert db.forget_nodes([(record['uuid'], 'hv1',
                             [('domain', 'c1'), ('bmc', 'c1')])],
                           delete_end) != [None]
    assert len(commits) == 1
    assert db.get_node(record['uuid']) is None
    assert sorted((r.kind, r.name) for r in db.list_resources('c')) == [
        ('bmc', 'c2'), ('domain', 'c2')]
    assert db.forget_nodes([(record['uuid'], 'hv1', [('domain', 'c2')])],
                           lambda n: 1 / 0) == [None]
    assert [(r.kind, r.name) for r in db.list_resources('c')] == [
        ('bmc', 'c2')]
    engine.dispose()


def test_a_sqlite_file_has_one_writer_of_this_process_at_a_time(tmp_path):
    """Writers of the same file, on any engine, wait for each other at
    the file's lock, not in SQLite's sleeping busy handler; a thread
    may nest them; readers and an in-memory database take no lock."""
    engine = upgraded_engine(tmp_path)
    other = db_api.create_engine(engine.url)
    inside, release = threading.Event(), threading.Event()
    order = []

    def first():
        with db_api.writing(engine):
            with db_api.writing(engine):
                inside.set()
                release.wait(10)
                order.append('first')

    def second():
        with db_api.writing(other) as conn:
            order.append('second')
            conn.execute(sa.delete(db_api.EVENTS))

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert inside.wait(10)
    threads.append(threading.Thread(target=second))
    threads[1].start()
    threads[1].join(0.2)
    assert threads[1].is_alive()
    with engine.connect() as conn:
        conn.execute(sa.select(db_api.EVENTS)).all()
    release.set()
    for thread in threads:
        thread.join(10)
    assert order == ['first', 'second']
    memory = db_api.create_engine('sqlite://')
    with db_api.writing(memory):
        pass
    assert memory.url.database not in db_api._SQLITE_WRITERS
    engine.dispose()
    other.dispose()
    memory.dispose()


def test_resources_are_found_by_their_index(tmp_path):
    """Removing a node's records looks each up in the (hypervisor, kind,
    name) index, not through every record of its hypervisor; no keys
    match nothing."""
    engine = upgraded_engine(tmp_path)
    db = db_api.StateDB(engine)
    db.begin_resources('c', 'hv1', 'op', [
        ('domain', 'n%d' % i, {}) for i in range(3)], new=True)
    keys = [('domain', 'n0'), ('bmc', 'n0')]
    deleting, _ = db._deleting('hv1', keys)
    # Looking up what a request's answer does to them (begin_resources).
    finding = sa.select(db_api.RESOURCES).where(
        db_api._things(db_api.RESOURCES, 'hv1', keys))
    for sql, parameters in (
            (str(deleting.compile(engine)), ('hv1', 'domain', 'n0')),
            (str(finding.compile(engine, compile_kwargs={
                'literal_binds': True})), ())):
        with engine.connect() as conn:
            plan = ' '.join(row[-1] for row in conn.exec_driver_sql(
                'EXPLAIN QUERY PLAN ' + sql, parameters))
        assert 'hypervisor=? AND kind=? AND name=?' in plan, plan
    db.delete_resources('hv1', keys)
    with engine.connect() as conn:
        assert conn.execute(sa.select(db_api.RESOURCES).where(
            db_api._things(db_api.RESOURCES, 'hv1', []))).all() == []
    assert [r.name for r in db.list_resources('c')] == ['n1', 'n2']
    engine.dispose()
