"""Access to the state database.

Every function opens its own short transaction, so flow tasks running in
parallel threads can record what they create as they create it.
"""

import contextlib
import datetime
import logging
import os
import threading
import time
import uuid as uuidlib

import sqlalchemy as sa

from tenks import exceptions
from tenks import fileutils
from tenks import states
from tenks.db import flow_tables
from tenks.db import migrations
from tenks.db import models

# The standard library's logging: the CLI reads specs and the state
# database without oslo.log, which would bring oslo.config into its
# start-up (~0.15 s); the services' oslo.log set-up takes it in.
LOG = logging.getLogger(__name__)

# What the answer of an unanswered request does to a thing's record.
ENSURE = 'ensure'
REMOVE = 'remove'
# An argument not given (None being a value).
UNKNOWN = object()


CHECKPOINT_TRIES = 20
CHECKPOINT_PAUSE = 0.05  # s between tries while a reader holds the WAL


def default_url(state_dir):
    return 'sqlite:///' + os.path.join(state_dir, 'state.sqlite')


def url(conf, state_dir=None):
    """The state database's URL: [database] connection, else the SQLite
    file in ``state_dir`` (default: [DEFAULT] state_dir)."""
    return conf.database.connection or default_url(
        state_dir or conf.state_dir)


def schema_version(engine):
    """The migration the database's schema is at, or None while it has
    none (a database being created by another process's first use).
    StateDatabaseError when the database cannot be reached."""
    try:
        with engine.connect() as connection:
            if not sa.inspect(connection).has_table(
                    migrations.VERSION_TABLE):
                return None
            return connection.exec_driver_sql(
                'SELECT version_num FROM %s' % migrations.VERSION_TABLE
            ).scalar()
    except sa.exc.DBAPIError as e:
        raise unreachable(engine, e) from e


def unreachable(engine, error):
    """StateDatabaseError for a database ``error`` (SQLAlchemy's) raised
    while connecting: the driver's words, with no password (the drivers
    put none in their messages; the URL is masked)."""
    reason = str(error.orig if error.orig is not None else error)
    return exceptions.StateDatabaseError(
        url=engine.url.render_as_string(),
        reason='cannot be reached: %s' % ' '.join(reason.split()))


# Options of the engines on a server database: a pooled connection the
# server closed (restarted, idle too long) is replaced, not used.
# PostgreSQL turns the aware UTC times Tenks writes into its session's
# zone before it drops the zone: that zone is UTC. MySQL reads, as
# PostgreSQL does, what other transactions committed (its REPEATABLE
# READ would show a transaction the rows as they were at its first read).
# Seconds a read or write waits for a server database that cannot be
# reached (restarting, say) before its error counts.
RECONNECT_TIMEOUT = 60

SERVER_OPTIONS = {
    'postgresql': {'pool_pre_ping': True,
                   'connect_args': {'options': '-c timezone=UTC'}},
    'mysql': {'pool_pre_ping': True, 'isolation_level': 'READ COMMITTED'},
}

# A SQLite file's connections are kept for as many threads as use them at
# once (a conductor's flow workers and RPC threads): SQLAlchemy's default
# keeps five and closes the others after each use, and each new one
# costs its PRAGMAs (4 % of a big teardown's conductor time), or makes
# the sixteenth thread wait for one.
SQLITE_FILE_OPTIONS = {'pool_size': 32, 'max_overflow': -1}


def create_engine(url):
    """An engine on the state database at ``url``.

    A SQLite file is created mode 0600 (it holds BMC passwords), which
    its WAL and shared-memory files inherit. Its schema is made by
    tenks.db.migration.upgrade.
    """
    try:
        url = sa.engine.make_url(url)
        options = SERVER_OPTIONS.get(url.get_backend_name(), {})
        if url.get_backend_name() == 'sqlite' and url.database not in (
                None, '', ':memory:'):
            options = SQLITE_FILE_OPTIONS
        engine = sa.create_engine(url, **options)
    except (sa.exc.ArgumentError, ImportError) as e:
        # An unparsable URL is not shown: it may hold a password.
        raise exceptions.StateDatabaseError(
            url=url.render_as_string() if isinstance(url, sa.URL)
            else '([database] connection)',
            reason='cannot be used: %s (the drivers: pip extras '
                   'tenks[postgresql], tenks[mysql])' % e) from e
    if engine.url.get_backend_name() == 'sqlite':
        if engine.url.database not in (None, '', ':memory:'):
            fileutils.private_file(engine.url.database)

        @sa.event.listens_for(engine, 'connect')
        def _pragmas(dbapi_connection, record):
            cursor = dbapi_connection.cursor()
            # First: switching to WAL waits for other processes too.
            cursor.execute('PRAGMA busy_timeout=30000')
            # WAL lets readers and one writer work at once; NORMAL skips
            # an fsync per commit, which WAL keeps crash-safe.
            cursor.execute('PRAGMA journal_mode=WAL')
            cursor.execute('PRAGMA synchronous=NORMAL')
            # Deleted rows are overwritten with zeros, not left in free
            # space: a deleted cluster's password leaves no trace.
            cursor.execute('PRAGMA secure_delete=ON')
            cursor.close()
    return engine


# The writers of a SQLite file in this process take turns at a lock of
# their own, by the file's path: SQLite lets one in and the others wait
# in its busy handler, which sleeps (1 ms, then longer, up to 100 ms)
# instead of waking as the writer ends. Other processes still wait there.
_SQLITE_WRITERS = {}


def _writers(engine):
    """The lock of ``engine``'s SQLite file, or none to take."""
    path = engine.url.database
    if engine.dialect.name != 'sqlite' or path in (None, '', ':memory:'):
        return contextlib.nullcontext()
    lock = _SQLITE_WRITERS.get(path)
    # setdefault: two threads making the first one keep the same.
    return lock or _SQLITE_WRITERS.setdefault(path, threading.RLock())


@contextlib.contextmanager
def writing(engine):
    """``engine.begin()``, a write transaction: on a SQLite file, one of
    this process's at a time (see _SQLITE_WRITERS)."""
    with _writers(engine), engine.begin() as conn:
        yield conn


CLUSTERS = models.Cluster.table
NODES = models.Node.table
RESOURCES = models.Resource.table
OPERATIONS = models.Operation.table
HYPERVISORS = models.Hypervisor.table
EVENTS = models.Event.table
AGGREGATES = models.Aggregate.table
AGGREGATE_HOSTS = models.AggregateHost.table
UNANSWERED = models.UnansweredRequest.table


def _disconnected(error):
    """Whether ``error`` says the database server could not be reached
    or dropped the connection (which a retry on a new one may cure)."""
    return isinstance(error, sa.exc.DBAPIError) and (
        error.connection_invalidated
        or isinstance(error, sa.exc.OperationalError))


def reconnecting(engine, call):
    """``call()``; on a server database, again on a new connection while
    the server cannot be reached, for RECONNECT_TIMEOUT seconds at most:
    a database restarted under a running operation costs it nothing."""
    if engine.dialect.name == 'sqlite':
        return call()
    import tenacity
    for attempt in tenacity.Retrying(
            retry=tenacity.retry_if_exception(_disconnected),
            stop=tenacity.stop_after_delay(RECONNECT_TIMEOUT),
            wait=tenacity.wait_exponential(multiplier=0.2, max=5),
            before_sleep=lambda state: LOG.warning(
                'State database unreachable (%s); trying again',
                state.outcome.exception()),
            reraise=True):
        with attempt:
            return call()


def _without_plan():
    """A select of the operations' columns, the plan read as None."""
    return sa.select(*[sa.null().label('plan') if column.name == 'plan'
                       else column for column in OPERATIONS.c])


class StateDB:

    def __init__(self, engine):
        self.engine = engine

    def _read(self, record, query):
        """The records of the rows ``query`` selects."""
        def read():
            with self.engine.connect() as conn:
                return [record.from_row(row) for row in conn.execute(query)]
        return reconnecting(self.engine, read)

    def _get(self, record, key):
        """The record whose primary key is ``key``, or None."""
        [column] = record.table.primary_key

        def get():
            with self.engine.connect() as conn:
                return record.from_row(conn.execute(
                    sa.select(record.table).where(column == key)).first())
        return reconnecting(self.engine, get)

    def _write(self, *statements):
        """Run ``statements`` ((statement, parameters) or statement) in
        one transaction."""
        def write():
            with writing(self.engine) as conn:
                for statement in statements:
                    if isinstance(statement, tuple):
                        conn.execute(*statement)
                    else:
                        conn.execute(statement)
        reconnecting(self.engine, write)

    # Clusters

    def get_cluster(self, name):
        return self._get(models.Cluster, name)

    def list_clusters(self):
        return self._read(models.Cluster,
                          sa.select(CLUSTERS).order_by(CLUSTERS.c.name))

    def save_cluster(self, name, spec, state):
        """Record the cluster; a new record is a new deployment (uuid).
        Returns the record."""
        now = models.now()
        try:
            values = {'name': name, 'uuid': str(uuidlib.uuid4()),
                      'spec': spec, 'state': state, 'created_at': now,
                      'updated_at': now}
            self._write(sa.insert(CLUSTERS).values(values))
            return models.Cluster(**values)
        except sa.exc.IntegrityError:
            pass
        self._write(sa.update(CLUSTERS).where(CLUSTERS.c.name == name)
                    .values(spec=spec, state=state))
        return self.get_cluster(name)

    def commit_cluster(self, name, spec, state, spec_indexes):
        """Record the spec a deploy applied, and each node's entry in it
        ({node uuid: index in spec['specs']})."""
        statements = [sa.update(CLUSTERS).where(CLUSTERS.c.name == name)
                      .values(spec=spec, state=state)]
        if spec_indexes:
            statements.append((
                sa.update(NODES).where(NODES.c.uuid == sa.bindparam('u'))
                .values(spec_index=sa.bindparam('i')),
                [{'u': uuid, 'i': index}
                 for uuid, index in spec_indexes.items()]))
        self._write(*statements)

    def set_cluster_state(self, name, state):
        self._write(sa.update(CLUSTERS).where(CLUSTERS.c.name == name)
                    .values(state=state))

    def delete_cluster(self, name):
        """Delete the cluster's record, its spec and password with it, and
        what answers to its requests would still have done."""
        self._write(sa.delete(CLUSTERS).where(CLUSTERS.c.name == name),
                    sa.delete(UNANSWERED).where(UNANSWERED.c.cluster == name))
        if self.engine.url.get_backend_name() == 'sqlite':
            # Copy the WAL, where earlier versions of the record stay,
            # into the database (secure_delete zeroes the freed space),
            # then truncate it.
            self._truncate_wal()

    def _truncate_wal(self):
        """Checkpoint the WAL into the database and empty it; a reader
        of another process may hold it for a moment: try again."""
        with self.engine.connect().execution_options(
                isolation_level='AUTOCOMMIT') as connection:
            for _ in range(CHECKPOINT_TRIES):
                busy = connection.exec_driver_sql(
                    'PRAGMA wal_checkpoint(TRUNCATE)').first()[0]
                if not busy:
                    return
                time.sleep(CHECKPOINT_PAUSE)
        LOG.warning('Could not empty the write-ahead log of %s: a reader '
                    'kept it busy; the deleted cluster\'s record stays in '
                    'it until the next checkpoint',
                    self.engine.url.database)

    # Nodes

    def list_nodes(self, cluster=None, hypervisor=None, limit=None,
                   marker=None, sort_key=None, sort_dir='asc'):
        """Nodes by cluster and name, or by ``sort_key`` (one of
        tenks.constants.NODE_SORT_KEYS) in ``sort_dir`` ('asc' or
        'desc'), the UUID breaking ties; ``limit`` at most, those after
        the node with UUID ``marker`` (NodeNotFound if there is none). A
        page costs what its own rows cost, wherever it starts."""
        keys = [NODES.c[sort_key]] if sort_key else [NODES.c.cluster,
                                                     NODES.c.name]
        keys += [NODES.c.uuid] if sort_key != 'uuid' else []
        descending = sort_dir == 'desc'
        query = sa.select(NODES).order_by(
            *[k.desc() if descending else k.asc() for k in keys])
        if cluster is not None:
            query = query.where(NODES.c.cluster == cluster)
        if hypervisor is not None:
            query = query.where(NODES.c.hypervisor == hypervisor)
        if marker is not None:
            last = self.get_node(marker)
            if last is None:
                raise exceptions.NodeNotFound(node=marker,
                                              where=' (the marker)')
            after = sa.tuple_(*keys), sa.tuple_(
                *[getattr(last, k.name) for k in keys])
            query = query.where(after[0] < after[1] if descending
                                else after[0] > after[1])
        if limit is not None:
            query = query.limit(limit)
        return self._read(models.Node, query)

    def add_nodes(self, nodes):
        nodes = list(nodes)
        if nodes:
            self._write((sa.insert(NODES), nodes))

    def set_node_state(self, uuid, state):
        self.update_node(uuid, state=state)

    def update_node(self, uuid, **fields):
        """Set ``fields`` of the node's record, in one statement."""
        self._write(sa.update(NODES).where(NODES.c.uuid == uuid)
                    .values(**fields))

    def record_node(self, uuid, **fields):
        """update_node with what a flow made of the node, its
        ``bmc_type`` among them: a new BMC (of another type, or on
        another ``hypervisor``) shows no fault, the old one's gone with
        it. One statement."""
        moved = NODES.c.bmc_type != fields['bmc_type']
        if 'hypervisor' in fields:
            moved = sa.or_(moved, NODES.c.hypervisor != fields['hypervisor'])
        self.update_node(uuid, bmc_fault=sa.case(
            (moved, sa.null()), else_=NODES.c.bmc_fault), **fields)

    def get_node(self, uuid):
        return self._get(models.Node, uuid)

    def delete_nodes(self, uuids):
        self._write(sa.delete(NODES).where(NODES.c.uuid.in_(uuids)))

    def delete_node(self, uuid):
        self._write(sa.delete(NODES).where(NODES.c.uuid == uuid))

    def forget_nodes(self, nodes, event):
        """Delete the records of ``nodes`` ([(uuid, hypervisor,
        resources)]) and record each one's event ``event(node)`` (the
        keyword arguments of :meth:`add_event`, made from its record) in
        one transaction, with the records of its things ``resources``
        ([(kind, name)]) on ``hypervisor``, which go even if the node's
        has gone. Returns each one's event, or None if it had no
        record."""
        if not nodes:
            return []
        things = {}
        for _, hypervisor, resources in nodes:
            things.setdefault(hypervisor, []).extend(resources)
        uuids = [uuid for uuid, _, _ in nodes]

        def forget():
            # A few statements for all the nodes, not a few for each: the
            # writer's lock is held while each one runs, and a thousand
            # nodes' teardown held it for ten seconds statement by
            # statement, each waiting for its thread's turn to run.
            with writing(self.engine) as conn:
                for hypervisor, keys in things.items():
                    if keys:
                        conn.execute(*self._deleting(hypervisor, keys))
                # Locked until the commit on a database server: a node
                # another transaction forgets meanwhile is either found
                # and deleted here, or not found (no second event).
                found = {row.uuid: models.Node.from_row(row)
                         for row in conn.execute(sa.select(NODES).where(
                             NODES.c.uuid.in_(uuids)).with_for_update())}
                if found:
                    conn.execute(sa.delete(NODES).where(
                        NODES.c.uuid.in_(list(found))))
                events = []
                for uuid in uuids:
                    # Popped: a node named twice has one event.
                    node = found.pop(uuid, None)
                    events.append(None if node is None else event(node))
                recorded = [e for e in events if e is not None]
                if recorded:
                    conn.execute(sa.insert(EVENTS), recorded)
            return events
        return reconnecting(self.engine, forget)

    # Resources

    @staticmethod
    def _resource(hypervisor, kind, name):
        return sa.and_(RESOURCES.c.hypervisor == hypervisor,
                       RESOURCES.c.kind == kind, RESOURCES.c.name == name)

    def get_resource(self, hypervisor, kind, name):
        with self.engine.connect() as conn:
            return models.Resource.from_row(conn.execute(
                sa.select(RESOURCES).where(
                    self._resource(hypervisor, kind, name))).one_or_none())

    def finish_resource(self, hypervisor, kind, name, data, operation):
        """The agent confirmed the resource; ``operation`` created it
        (None: it was there before)."""
        self._write(sa.update(RESOURCES).where(
            self._resource(hypervisor, kind, name)).values(
                state=states.RESOURCE_PRESENT, data=data, operation=operation))

    def begin_resources(self, cluster, hypervisor, operation, wanted,
                        node=None, new=False):
        """Record the things ``wanted`` ([(kind, name, remove_args)]) not
        recorded yet as 'creating', credited to ``operation``.

        Returns {(kind, name): row dict} of those recorded before. A
        name recorded for another cluster raises ResourceConflict and
        records nothing. ``new``: most likely none is recorded (a node
        being created), so try recording them all at once first.

        The request this precedes decides what the things recorded
        before are: an answer to an earlier request on them that comes
        late no longer changes their records (a removal's would undo
        what this one records). Things not recorded have no such answer
        to come: it came when their records went, or never will.
        """
        if new:
            try:
                self._write((sa.insert(RESOURCES), [
                    self._creating(cluster, hypervisor, operation, kind,
                                   name, args, node)
                    for kind, name, args in wanted]))
                return {}
            except sa.exc.IntegrityError:
                pass
        match = _things(RESOURCES, hypervisor,
                        [(kind, name) for kind, name, _ in wanted])
        with writing(self.engine) as conn:
            rows = [models.Resource.from_row(row) for row in conn.execute(
                sa.select(RESOURCES).where(match))]
            for row in rows:
                if row.cluster != cluster:
                    raise exceptions.ResourceConflict(
                        kind=row.kind, name=row.name,
                        owner='cluster %s' % cluster,
                        reason='cluster %s created it on %s' % (
                            row.cluster, hypervisor))
            before = {(row.kind, row.name): row.as_dict() for row in rows}
            missing = [self._creating(cluster, hypervisor, operation, kind,
                                      name, args, node)
                       for kind, name, args in wanted
                       if (kind, name) not in before]
            if before:
                conn.execute(self._superseding(hypervisor, list(before)))
            if missing:
                conn.execute(sa.insert(RESOURCES), missing)
        return before

    @staticmethod
    def _creating(cluster, hypervisor, operation, kind, name, args, node):
        return {'cluster': cluster, 'hypervisor': hypervisor, 'kind': kind,
                'name': name, 'remove_args': args,
                'state': states.RESOURCE_CREATING, 'operation': operation,
                'node': node, 'data': {}}

    def finish_resources(self, hypervisor, credits, removed=()):
        """Mark the things of ``credits`` ({(kind, name): operation that
        created it, or None}) present and forget those ``removed``."""
        statements = []
        if credits:
            statements.append((
                sa.update(RESOURCES).where(
                    RESOURCES.c.hypervisor == hypervisor,
                    RESOURCES.c.kind == sa.bindparam('k'),
                    RESOURCES.c.name == sa.bindparam('n')).values(
                        state=states.RESOURCE_PRESENT,
                        operation=sa.bindparam('o')),
                [{'k': kind, 'n': name, 'o': operation}
                 for (kind, name), operation in credits.items()]))
        if removed:
            statements.append(self._deleting(hypervisor, removed))
        if statements:
            self._write(*statements)

    def delete_resources(self, hypervisor, keys):
        """Forget the things ``keys`` ([(kind, name)]) on ``hypervisor``."""
        if keys:
            self._write(self._deleting(hypervisor, keys))

    @staticmethod
    def _deleting(hypervisor, keys):
        """(statement, parameters) forgetting the things ``keys`` ([(kind,
        name)], not empty) on ``hypervisor``: one statement run for each,
        compiled once, where an OR of them was compiled for every node
        (a third of a teardown's cost of the records)."""
        return (sa.delete(RESOURCES).where(
            RESOURCES.c.hypervisor == hypervisor,
            RESOURCES.c.kind == sa.bindparam('k'),
            RESOURCES.c.name == sa.bindparam('n')),
            [{'k': kind, 'n': name} for kind, name in keys])

    @staticmethod
    def _superseding(hypervisor, keys):
        """Forget what unanswered requests would do to ``keys`` ([(kind,
        name)], not empty) on ``hypervisor``."""
        return sa.delete(UNANSWERED).where(
            _things(UNANSWERED, hypervisor, keys))

    def delete_resource(self, hypervisor, kind, name):
        self._write(sa.delete(RESOURCES).where(
            self._resource(hypervisor, kind, name)))

    def list_resources(self, cluster=None, **filters):
        """Resources of ``cluster`` (or all), filtered by column values
        (node=, operation=, hypervisor=)."""
        query = sa.select(RESOURCES).filter_by(**filters)
        if cluster is not None:
            query = query.filter_by(cluster=cluster)
        return self._read(models.Resource, query.order_by(RESOURCES.c.id))

    # Requests given up on (conductor.late)

    def add_unanswered(self, request_id, hypervisor, operation, cluster,
                       effects):
        """Keep what the answer to ``request_id``, should it still come,
        does to the records of ``effects`` ([(kind, name, ENSURE or
        REMOVE)]) of ``cluster`` on ``hypervisor``."""
        self._write(
            sa.delete(UNANSWERED).where(
                UNANSWERED.c.request_id == request_id),
            (sa.insert(UNANSWERED), [
                {'request_id': request_id, 'operation': operation,
                 'cluster': cluster, 'hypervisor': hypervisor,
                 'kind': kind, 'name': name, 'effect': effect,
                 'created_at': models.now()}
                for kind, name, effect in effects]))

    def forget_unanswered(self, request_id):
        self._write(sa.delete(UNANSWERED).where(
            UNANSWERED.c.request_id == request_id))

    def list_unanswered(self, cluster=None):
        query = sa.select(UNANSWERED).order_by(UNANSWERED.c.id)
        if cluster is not None:
            query = query.where(UNANSWERED.c.cluster == cluster)
        return self._read(models.UnansweredRequest, query)

    def settle_unanswered(self, request_id, succeeded, conflict=False,
                          created=(), removed=()):
        """Apply the answer to ``request_id``, once, in one transaction.

        ``succeeded``: the agent did as asked: the things it ensures
        exist ('creating' becomes 'present', credited to its operation
        if ``created``, [(kind, name)] or True for all, has them; one it
        did not create is no longer credited to it), those it removes
        and those ``removed`` are gone. ``conflict``: it found something
        not ours, so it left it: the things it removes lose their
        records, as a teardown's do. Any other answer (an error) changes
        nothing: what may exist stays recorded.

        A node left with nothing recorded is forgotten, and its cluster,
        if deployed, is marked failed when the node was deployed.
        Returns the nodes forgotten, or None if nothing awaited the
        answer (it came before, twice, or a later request superseded it).
        """
        with writing(self.engine) as conn:
            rows = [models.UnansweredRequest.from_row(row)
                    for row in conn.execute(sa.select(UNANSWERED).where(
                        UNANSWERED.c.request_id == request_id))]
            if not rows:
                return None
            claimed = conn.execute(sa.delete(UNANSWERED).where(
                UNANSWERED.c.request_id == request_id)).rowcount
            if claimed != len(rows):
                # Another process settled it meanwhile.
                return None
            first = rows[0]
            ours = sa.and_(RESOURCES.c.hypervisor == first.hypervisor,
                           RESOURCES.c.cluster == first.cluster)
            ensured = [(r.kind, r.name) for r in rows if r.effect == ENSURE]
            gone = [(r.kind, r.name) for r in rows if r.effect == REMOVE]
            if succeeded:
                gone += [tuple(key) for key in removed]
            elif conflict:
                ensured = []
            else:
                return []
            made = set(ensured) if created is True else {
                tuple(key) for key in created}
            for kind, name in ensured:
                credit = first.operation if (kind, name) in made else sa.case(
                    (RESOURCES.c.operation == first.operation, sa.null()),
                    else_=RESOURCES.c.operation)
                conn.execute(sa.update(RESOURCES).where(
                    ours, RESOURCES.c.kind == kind, RESOURCES.c.name == name,
                    RESOURCES.c.state == states.RESOURCE_CREATING).values(
                        state=states.RESOURCE_PRESENT, operation=credit))
            if not gone:
                return []
            match = sa.and_(ours, _things(RESOURCES, first.hypervisor,
                                          gone))
            uuids = sorted({row.node for row in conn.execute(
                sa.select(RESOURCES.c.node).where(match)) if row.node})
            conn.execute(sa.delete(RESOURCES).where(match))
            forgotten = []
            for uuid in uuids:
                if conn.execute(sa.select(RESOURCES.c.id).where(
                        RESOURCES.c.node == uuid).limit(1)).first():
                    continue
                node = models.Node.from_row(conn.execute(
                    sa.select(NODES).where(NODES.c.uuid == uuid)).first())
                if node is not None:
                    conn.execute(sa.delete(NODES).where(NODES.c.uuid == uuid))
                    forgotten.append(node)
            if any(n.state == states.NODE_DEPLOYED for n in forgotten):
                conn.execute(sa.update(CLUSTERS).where(
                    CLUSTERS.c.name == first.cluster,
                    CLUSTERS.c.state == states.CLUSTER_DEPLOYED).values(
                        state=states.CLUSTER_FAILED))
        return forgotten

    # Operations

    def create_operation(self, operation_id, cluster, kind, conductor,
                         spec=None):
        self._write(sa.insert(OPERATIONS).values(
            id=operation_id, cluster=cluster, kind=kind,
            state=states.OPERATION_RUNNING, conductor=conductor, spec=spec))

    def set_operation_plan(self, operation_id, plan):
        self._update_operation(operation_id, plan=plan)

    def set_operation_conductor(self, operation_id, conductor):
        """Record that ``conductor`` now runs the operation (it took
        the operation's job over)."""
        self._update_operation(operation_id, conductor=conductor)

    def set_operation_progress(self, operation_id, progress, error=None):
        """``error``: the failure a running operation rolls back."""
        self._update_operation(operation_id, progress=progress,
                               **({'error': error} if error else {}))

    def finish_operation(self, operation_id, state, error=None,
                         result=None, spec=UNKNOWN, event=None):
        """End the operation. A deploy's record keeps its spec with the
        BMC password masked: only a running one needs the password, and
        a finished one keeps no copy of it past a teardown. ``spec``: that
        masked spec (None for an operation without one), when the caller
        knows it. ``event``: the keyword arguments of :meth:`add_event`
        for the event that announces the end, recorded in the same
        transaction, so whoever sees the operation ended sees it too."""
        values = {'state': state, 'error': error, 'result': result or {},
                  'finished_at': datetime.datetime.now(
                      datetime.timezone.utc)}
        with writing(self.engine) as conn:
            if spec is UNKNOWN:
                spec = models.mask_spec(conn.scalar(
                    sa.select(OPERATIONS.c.spec).where(
                        OPERATIONS.c.id == operation_id)))
            if spec:
                values['spec'] = spec
            conn.execute(sa.update(OPERATIONS).where(
                OPERATIONS.c.id == operation_id).values(**values))
            if event is not None:
                conn.execute(sa.insert(EVENTS).values(**event))

    def _update_operation(self, operation_id, **values):
        self._write(sa.update(OPERATIONS).where(
            OPERATIONS.c.id == operation_id).values(**values))

    def get_operation(self, operation_id, plan=True):
        """The operation; ``plan`` False: without its plan (None), which
        is what callers see and is large for a large cluster."""
        if plan:
            return self._get(models.Operation, operation_id)
        found = self._read(models.Operation, _without_plan().where(
            OPERATIONS.c.id == operation_id))
        return found[0] if found else None

    def list_operations(self, cluster=None, state=None, conductor=None,
                        plan=True):
        query = (sa.select(OPERATIONS) if plan else _without_plan()
                 ).order_by(OPERATIONS.c.created_at)
        for column, value in (('cluster', cluster), ('state', state),
                              ('conductor', conductor)):
            if value is not None:
                query = query.where(OPERATIONS.c[column] == value)
        return self._read(models.Operation, query)

    # Hypervisors

    def register_hypervisor(self, host, facts, came_up=False):
        """Record the facts of ``host``; a new one is enabled unless its
        facts say ``enable_on_register: false``. ``came_up``: it was new
        or down, and has answered nothing since."""
        values = {'facts': facts,
                  'last_seen': datetime.datetime.now(datetime.timezone.utc)}
        if came_up:
            values['answered_at'] = None
        update = sa.update(HYPERVISORS).where(
            HYPERVISORS.c.host == host).values(**values)
        try:
            with writing(self.engine) as conn:
                if not conn.execute(update).rowcount:
                    enabled = facts.get('enable_on_register', True)
                    conn.execute(sa.insert(HYPERVISORS).values(
                        host=host, enabled=enabled,
                        disabled_reason=None if enabled else
                        'registered disabled (enable_on_register)',
                        **values))
        except sa.exc.IntegrityError:
            # Another process registered it between the two statements.
            self._write(update)

    def hypervisor_answered(self, host):
        """Record that the hostagent of ``host`` answered just now."""
        self._write(sa.update(HYPERVISORS).where(
            HYPERVISORS.c.host == host).values(
                answered_at=datetime.datetime.now(datetime.timezone.utc)))

    def list_hypervisors(self):
        return self._read(models.Hypervisor, sa.select(HYPERVISORS)
                          .order_by(HYPERVISORS.c.host))

    def get_hypervisor(self, host):
        return self._get(models.Hypervisor, host)

    def delete_hypervisor(self, host):
        """Forget ``host`` and its aggregate memberships."""
        self._write(
            sa.delete(AGGREGATE_HOSTS).where(AGGREGATE_HOSTS.c.host == host),
            sa.delete(HYPERVISORS).where(HYPERVISORS.c.host == host))

    def set_hypervisor_enabled(self, host, enabled, reason=None):
        self._write(sa.update(HYPERVISORS).where(
            HYPERVISORS.c.host == host).values(
                enabled=enabled, disabled_reason=None if enabled else reason))

    def set_hypervisor_maintenance(self, host, maintenance, reason=None):
        """Put ``host`` into maintenance (disabled, with ``reason``) or
        take it out (enabled)."""
        self._write(sa.update(HYPERVISORS).where(
            HYPERVISORS.c.host == host).values(
                maintenance=maintenance, enabled=not maintenance,
                disabled_reason=reason if maintenance else None))

    # Aggregates

    def list_aggregates(self):
        """Aggregates as dicts, each with its sorted ``hosts``."""
        with self.engine.connect() as conn:
            rows = [models.Aggregate.from_row(r) for r in conn.execute(
                sa.select(AGGREGATES).order_by(AGGREGATES.c.id))]
            members = conn.execute(sa.select(AGGREGATE_HOSTS).order_by(
                AGGREGATE_HOSTS.c.host)).all()
        hosts = {}
        for member in members:
            hosts.setdefault(member.aggregate_id, []).append(member.host)
        return [dict(row.as_dict(), hosts=hosts.get(row.id, []))
                for row in rows]

    def list_memberships(self):
        """(aggregates as list_aggregates gives them, but only those
        with hosts; hypervisors as {host, enabled, maintenance}), in one
        query."""
        query = sa.select(
            HYPERVISORS.c.host, HYPERVISORS.c.enabled,
            HYPERVISORS.c.maintenance, AGGREGATES,
        ).select_from(HYPERVISORS.outerjoin(
            AGGREGATE_HOSTS, AGGREGATE_HOSTS.c.host == HYPERVISORS.c.host,
        ).outerjoin(
            AGGREGATES, AGGREGATES.c.id == AGGREGATE_HOSTS.c.aggregate_id,
        )).order_by(HYPERVISORS.c.host, AGGREGATES.c.id)
        hypervisors, aggregates = {}, {}
        with self.engine.connect() as conn:
            for row in conn.execute(query):
                hypervisors[row.host] = {'host': row.host,
                                         'enabled': row.enabled,
                                         'maintenance': row.maintenance}
                if row.id is None:
                    continue
                if row.id not in aggregates:
                    aggregate = models.Aggregate(**{
                        c.name: row._mapping[c] for c in AGGREGATES.c})
                    aggregates[row.id] = dict(aggregate.as_dict(),
                                              hosts=[])
                aggregates[row.id]['hosts'].append(row.host)
        return (sorted(aggregates.values(), key=lambda a: a['id']),
                list(hypervisors.values()))

    def create_aggregate(self, name, availability_zone=None):
        """Record a new aggregate; IntegrityError if the name is taken."""
        now = models.now()
        with writing(self.engine) as conn:
            conn.execute(sa.insert(AGGREGATES).values(
                uuid=str(uuidlib.uuid4()), name=name,
                availability_zone=availability_zone, metadata={},
                created_at=now, updated_at=now))

    def update_aggregate(self, aggregate_id, **values):
        self._write(sa.update(AGGREGATES).where(
            AGGREGATES.c.id == aggregate_id).values(**values))

    def delete_aggregate(self, aggregate_id):
        self._write(sa.delete(AGGREGATES).where(
            AGGREGATES.c.id == aggregate_id))

    def add_aggregate_host(self, aggregate_id, host):
        self._write(sa.insert(AGGREGATE_HOSTS).values(
            aggregate_id=aggregate_id, host=host, created_at=models.now()))

    def remove_aggregate_host(self, aggregate_id, host):
        self._write(sa.delete(AGGREGATE_HOSTS).where(
            AGGREGATE_HOSTS.c.aggregate_id == aggregate_id,
            AGGREGATE_HOSTS.c.host == host))

    # Retention

    def prune(self, before=None):
        """Forget the flows of the operations that have ended (never
        resumed, they are only weight), and, with ``before`` (an aware
        UTC time), the operations that ended before it, the events older
        than it and the unanswered requests made before it (no answer
        comes that late). Returns how many of each went: {'flows',
        'operations', 'events', 'requests'}."""
        running = sa.select(OPERATIONS.c.id).where(
            OPERATIONS.c.state == states.OPERATION_RUNNING)
        with writing(self.engine) as conn:
            pruned = {'flows': flow_tables.prune(conn, running)}
            if before is None:
                return pruned
            before = before.astimezone(datetime.timezone.utc).replace(
                tzinfo=None)
            pruned.update({
                'operations': conn.execute(sa.delete(OPERATIONS).where(
                    OPERATIONS.c.state != states.OPERATION_RUNNING,
                    OPERATIONS.c.finished_at < before)).rowcount,
                'events': conn.execute(sa.delete(EVENTS).where(
                    EVENTS.c.timestamp < before)).rowcount,
                'requests': conn.execute(sa.delete(UNANSWERED).where(
                    UNANSWERED.c.created_at < before)).rowcount})
            return pruned

    # Events

    def add_event(self, event_type, priority, cluster, payload):
        self._write(sa.insert(EVENTS).values(
            event_type=event_type, priority=priority, cluster=cluster,
            payload=payload))

    def list_events(self, cluster=None, limit=100):
        query = sa.select(EVENTS).order_by(EVENTS.c.id.desc())
        if cluster is not None:
            query = query.where(EVENTS.c.cluster == cluster)
        return list(reversed(self._read(models.Event, query.limit(limit))))


def _things(table, hypervisor, keys):
    """Rows of ``table`` on ``hypervisor`` whose (kind, name) is one of
    ``keys``. The hypervisor is in each term, so that SQLite looks each
    up in the (hypervisor, kind, name) index: with it outside the OR, it
    read every row of the hypervisor for each statement. No keys match
    no row."""
    if not keys:
        return sa.false()
    return sa.or_(*[sa.and_(table.c.hypervisor == hypervisor,
                            table.c.kind == kind, table.c.name == name)
                    for kind, name in keys])
