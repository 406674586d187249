"""Access to the state database.

Every function opens its own short transaction, so flow tasks running in
parallel threads can record what they create as they create it.
"""

import datetime
import logging
import os
import time
import uuid as uuidlib

import sqlalchemy as sa
from sqlalchemy import orm

from tenks import exceptions
from tenks import fileutils
from tenks.db import migrations
from tenks.db import models

LOG = logging.getLogger(__name__)

RESOURCE_CREATING = 'creating'
RESOURCE_PRESENT = 'present'
OPERATION_RUNNING = 'running'
# An argument not given (None being a value).
UNKNOWN = object()


CHECKPOINT_TRIES = 20
CHECKPOINT_PAUSE = 0.05  # s between tries while a reader holds the WAL


def default_url(state_dir):
    return 'sqlite:///' + os.path.join(state_dir, 'state.sqlite')


def schema_version(engine):
    """The migration the database's schema is at, or None while it has
    none (a database being created by another process's first use)."""
    with engine.connect() as connection:
        if not sa.inspect(connection).has_table(migrations.VERSION_TABLE):
            return None
        return connection.exec_driver_sql(
            'SELECT version_num FROM %s' % migrations.VERSION_TABLE
        ).scalar()


def create_engine(url):
    """An engine on the state database at ``url``.

    A SQLite file is created mode 0600 (it holds BMC passwords), which
    its WAL and shared-memory files inherit. Its schema is made by
    tenks.db.migration.upgrade.
    """
    engine = sa.create_engine(url)
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


class StateDB:

    def __init__(self, engine):
        self.engine = engine
        self._session = orm.sessionmaker(engine, expire_on_commit=False)

    # Clusters

    def get_cluster(self, name):
        with self._session() as session:
            return session.get(models.Cluster, name)

    def list_clusters(self):
        with self._session() as session:
            return session.scalars(
                sa.select(models.Cluster).order_by(models.Cluster.name)
            ).all()

    def save_cluster(self, name, spec, state):
        """Record the cluster; a new record is a new deployment (uuid).
        Returns the record."""
        try:
            with self._session.begin() as session:
                cluster = models.Cluster(
                    name=name, uuid=str(uuidlib.uuid4()), spec=spec,
                    state=state)
                session.add(cluster)
            return cluster
        except sa.exc.IntegrityError:
            pass
        with self._session.begin() as session:
            cluster = session.get(models.Cluster, name)
            cluster.spec = spec
            cluster.state = state
        return cluster

    def commit_cluster(self, name, spec, state, spec_indexes):
        """Record the spec a deploy applied, and each node's entry in it
        ({node uuid: index in spec['specs']})."""
        nodes = models.Node.__table__
        with self._session.begin() as session:
            session.execute(sa.update(models.Cluster).where(
                models.Cluster.name == name).values(spec=spec, state=state))
            if spec_indexes:
                session.execute(
                    sa.update(nodes).where(
                        nodes.c.uuid == sa.bindparam('u')).values(
                            spec_index=sa.bindparam('i')),
                    [{'u': uuid, 'i': index}
                     for uuid, index in spec_indexes.items()])

    def set_cluster_state(self, name, state):
        with self._session.begin() as session:
            session.execute(sa.update(models.Cluster).where(
                models.Cluster.name == name).values(state=state))

    def delete_cluster(self, name):
        """Delete the cluster's record, its spec and password with it."""
        with self._session.begin() as session:
            session.execute(sa.delete(models.Cluster).where(
                models.Cluster.name == name))
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

    def list_nodes(self, cluster=None, hypervisor=None):
        query = sa.select(models.Node).order_by(models.Node.cluster,
                                                models.Node.name)
        if cluster is not None:
            query = query.where(models.Node.cluster == cluster)
        if hypervisor is not None:
            query = query.where(models.Node.hypervisor == hypervisor)
        with self._session() as session:
            return session.scalars(query).all()

    def add_nodes(self, nodes):
        with self._session.begin() as session:
            session.add_all(models.Node(**node) for node in nodes)

    def set_node_state(self, uuid, state):
        self.update_node(uuid, state=state)

    def update_node(self, uuid, **fields):
        """Set ``fields`` of the node's record, in one statement."""
        with self._session.begin() as session:
            session.execute(sa.update(models.Node).where(
                models.Node.uuid == uuid).values(**fields))

    def get_node(self, uuid):
        with self._session() as session:
            return session.get(models.Node, uuid)

    def delete_nodes(self, uuids):
        with self._session.begin() as session:
            session.execute(sa.delete(models.Node).where(
                models.Node.uuid.in_(uuids)))

    def delete_node(self, uuid):
        with self._session.begin() as session:
            session.execute(sa.delete(models.Node).where(
                models.Node.uuid == uuid))

    # Resources

    def get_resource(self, hypervisor, kind, name):
        with self._session() as session:
            return session.scalars(sa.select(models.Resource).filter_by(
                hypervisor=hypervisor, kind=kind, name=name)).one_or_none()

    def finish_resource(self, hypervisor, kind, name, data, operation):
        """The agent confirmed the resource; ``operation`` created it
        (None: it was there before)."""
        with self._session.begin() as session:
            session.execute(sa.update(models.Resource).filter_by(
                hypervisor=hypervisor, kind=kind, name=name).values(
                    state=RESOURCE_PRESENT, data=data, operation=operation))

    def begin_resources(self, cluster, hypervisor, operation, wanted,
                        node=None, new=False):
        """Record the things ``wanted`` ([(kind, name, remove_args)]) not
        recorded yet as 'creating', credited to ``operation``.

        Returns {(kind, name): row dict} of those recorded before. A
        name recorded for another cluster raises ResourceConflict and
        records nothing. ``new``: most likely none is recorded (a node
        being created), so try recording them all at once first.
        """
        if new:
            try:
                with self._session.begin() as session:
                    session.execute(sa.insert(models.Resource), [
                        self._creating(cluster, hypervisor, operation, kind,
                                       name, args, node)
                        for kind, name, args in wanted])
                return {}
            except sa.exc.IntegrityError:
                pass
        table = models.Resource
        match = sa.or_(*[sa.and_(table.kind == kind, table.name == name)
                         for kind, name, _ in wanted])
        with self._session.begin() as session:
            rows = session.scalars(sa.select(table).where(
                table.hypervisor == hypervisor, match)).all()
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
            if missing:
                session.execute(sa.insert(table), missing)
        return before

    @staticmethod
    def _creating(cluster, hypervisor, operation, kind, name, args, node):
        return {'cluster': cluster, 'hypervisor': hypervisor, 'kind': kind,
                'name': name, 'remove_args': args,
                'state': RESOURCE_CREATING, 'operation': operation,
                'node': node, 'data': {}}

    def finish_resources(self, hypervisor, credits, removed=()):
        """Mark the things of ``credits`` ({(kind, name): operation that
        created it, or None}) present and forget those ``removed``."""
        table = models.Resource.__table__
        with self._session.begin() as session:
            if credits:
                session.execute(
                    sa.update(table).where(
                        table.c.hypervisor == hypervisor,
                        table.c.kind == sa.bindparam('k'),
                        table.c.name == sa.bindparam('n')).values(
                            state=RESOURCE_PRESENT,
                            operation=sa.bindparam('o')),
                    [{'k': kind, 'n': name, 'o': operation}
                     for (kind, name), operation in credits.items()])
            if removed:
                self._delete_resources(session, hypervisor, removed)

    def delete_resources(self, hypervisor, keys):
        """Forget the things ``keys`` ([(kind, name)]) on ``hypervisor``."""
        with self._session.begin() as session:
            self._delete_resources(session, hypervisor, keys)

    @staticmethod
    def _delete_resources(session, hypervisor, keys):
        if not keys:
            # An empty or_() matches every row of the hypervisor.
            return
        table = models.Resource
        session.execute(sa.delete(table).where(
            table.hypervisor == hypervisor,
            sa.or_(*[sa.and_(table.kind == kind, table.name == name)
                     for kind, name in keys])))

    def delete_resource(self, hypervisor, kind, name):
        with self._session.begin() as session:
            session.execute(sa.delete(models.Resource).filter_by(
                hypervisor=hypervisor, kind=kind, name=name))

    def list_resources(self, cluster=None, **filters):
        """Resources of ``cluster`` (or all), filtered by column values
        (node=, operation=, hypervisor=)."""
        query = sa.select(models.Resource).filter_by(**filters)
        if cluster is not None:
            query = query.filter_by(cluster=cluster)
        with self._session() as session:
            return session.scalars(query.order_by(models.Resource.id)).all()

    # Operations

    def create_operation(self, operation_id, cluster, kind, conductor,
                         spec=None):
        with self._session.begin() as session:
            session.add(models.Operation(
                id=operation_id, cluster=cluster, kind=kind,
                state=OPERATION_RUNNING, conductor=conductor, spec=spec))

    def set_operation_plan(self, operation_id, plan):
        self._update_operation(operation_id, plan=plan)

    def set_operation_progress(self, operation_id, progress):
        self._update_operation(operation_id, progress=progress)

    def finish_operation(self, operation_id, state, error=None,
                         result=None, spec=UNKNOWN):
        """End the operation. A deploy's record keeps its spec with the
        BMC password masked: only a running one needs the password, and
        a finished one keeps no copy of it past a teardown. ``spec``: that
        masked spec (None for an operation without one), when the caller
        knows it."""
        values = {'state': state, 'error': error, 'result': result or {},
                  'finished_at': datetime.datetime.now(
                      datetime.timezone.utc)}
        with self._session.begin() as session:
            if spec is UNKNOWN:
                spec = session.scalar(sa.select(models.Operation.spec).where(
                    models.Operation.id == operation_id))
                spec = models.mask_spec(spec)
            if spec:
                values['spec'] = spec
            session.execute(sa.update(models.Operation).where(
                models.Operation.id == operation_id).values(**values))

    def _update_operation(self, operation_id, **values):
        with self._session.begin() as session:
            session.execute(sa.update(models.Operation).where(
                models.Operation.id == operation_id).values(**values))

    def get_operation(self, operation_id):
        with self._session() as session:
            return session.get(models.Operation, operation_id)

    def list_operations(self, cluster=None, state=None, conductor=None):
        query = sa.select(models.Operation).order_by(
            models.Operation.created_at)
        for column, value in (('cluster', cluster), ('state', state),
                              ('conductor', conductor)):
            if value is not None:
                query = query.where(
                    getattr(models.Operation, column) == value)
        with self._session() as session:
            return session.scalars(query).all()

    # Hypervisors

    def register_hypervisor(self, host, facts):
        values = {'facts': facts,
                  'last_seen': datetime.datetime.now(datetime.timezone.utc)}
        update = sa.update(models.Hypervisor).where(
            models.Hypervisor.host == host).values(**values)
        try:
            with self._session.begin() as session:
                if not session.execute(update).rowcount:
                    session.add(models.Hypervisor(host=host, **values))
        except sa.exc.IntegrityError:
            # Another process registered it between the two statements.
            with self._session.begin() as session:
                session.execute(update)

    def list_hypervisors(self):
        with self._session() as session:
            return session.scalars(sa.select(models.Hypervisor).order_by(
                models.Hypervisor.host)).all()

    def get_hypervisor(self, host):
        with self._session() as session:
            return session.get(models.Hypervisor, host)

    def delete_hypervisor(self, host):
        with self._session.begin() as session:
            session.execute(sa.delete(models.Hypervisor).where(
                models.Hypervisor.host == host))

    # Events

    def add_event(self, event_type, priority, cluster, payload):
        with self._session.begin() as session:
            session.add(models.Event(event_type=event_type,
                                     priority=priority, cluster=cluster,
                                     payload=payload))

    def list_events(self, cluster=None, limit=100):
        query = sa.select(models.Event).order_by(models.Event.id.desc())
        if cluster is not None:
            query = query.where(models.Event.cluster == cluster)
        with self._session() as session:
            return list(reversed(session.scalars(query.limit(limit)).all()))
