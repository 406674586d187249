"""TaskFlow's persistence tables (logbooks, flowdetails, atomdetails) as
the state database holds them, without TaskFlow: what a conductor that
only prunes them needs (importing TaskFlow costs a command that runs no
flow a tenth of a second)."""

import sqlalchemy as sa
from oslo_serialization import jsonutils
from oslo_utils import timeutils


class _Json(sa.types.TypeDecorator):
    """JSON as TaskFlow stores it: text, native JSON on PostgreSQL."""

    impl = sa.UnicodeText
    cache_ok = True

    def load_dialect_impl(self, dialect):
        if dialect.name == 'postgresql':
            from sqlalchemy.dialects import postgresql
            return dialect.type_descriptor(postgresql.JSON())
        return dialect.type_descriptor(self.impl)

    def process_bind_param(self, value, dialect):
        if dialect.name == 'postgresql' or value is None:
            return value
        return jsonutils.dumps(value)

    def process_result_value(self, value, dialect):
        if dialect.name == 'postgresql' or value is None:
            return value
        return jsonutils.loads(value)


def _enum(name, *values):
    """An enum column type as TaskFlow's migrations make it: a type of
    that name on PostgreSQL (a plain string there would be refused), an
    ENUM on MySQL."""
    return sa.Enum(*values, name=name, create_constraint=False)


def _tables():
    metadata = sa.MetaData()

    def table(name, *columns):
        return sa.Table(
            name, metadata,
            sa.Column('uuid', sa.String(64), primary_key=True),
            sa.Column('created_at', sa.DateTime, default=timeutils.utcnow),
            sa.Column('updated_at', sa.DateTime, onupdate=timeutils.utcnow),
            sa.Column('name', sa.String(255)),
            sa.Column('meta', _Json),
            *columns)

    return (
        table('logbooks'),
        table('flowdetails',
              sa.Column('parent_uuid', sa.String(64)),
              sa.Column('state', sa.String(255))),
        table('atomdetails',
              sa.Column('parent_uuid', sa.String(64)),
              sa.Column('version', sa.String(64)),
              sa.Column('state', sa.String(255)),
              sa.Column('failure', _Json),
              sa.Column('results', _Json),
              sa.Column('revert_results', _Json),
              sa.Column('revert_failure', _Json),
              sa.Column('atom_type',
                        _enum('atom_types', 'RETRY_DETAIL', 'TASK_DETAIL')),
              sa.Column('intention',
                        _enum('intention_type', 'EXECUTE', 'IGNORE',
                              'REVERT', 'RETRY'))))


LOGBOOKS, FLOWS, ATOMS = _tables()


def prune(conn, running):
    """Delete, in the transaction of ``conn``, the flows of every
    operation but those ``running`` selects (their ids: a logbook's uuid
    is its operation's id). Returns how many went."""
    books = sa.select(LOGBOOKS.c.uuid).where(LOGBOOKS.c.uuid.not_in(running))
    flows = sa.select(FLOWS.c.uuid).where(FLOWS.c.parent_uuid.in_(books))
    conn.execute(ATOMS.delete().where(ATOMS.c.parent_uuid.in_(flows)))
    conn.execute(FLOWS.delete().where(FLOWS.c.parent_uuid.in_(books)))
    return conn.execute(LOGBOOKS.delete().where(
        LOGBOOKS.c.uuid.not_in(running))).rowcount
