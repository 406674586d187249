"""The state database's schema, managed by alembic migrations.

The default database (SQLite in the state directory) is upgraded to the
newest revision by every process that opens it, under an inter-process
lock in the state directory, so that two commands started at once on a
fresh directory create the schema once. A database named by [database]
connection is created and upgraded only by ``tenks-manage db sync``:
conductors of several versions may share it during an upgrade, and the
operator says when its schema changes. No Tenks uses a schema newer than
its code. The migrations live in ``tenks/db/migrations`` (shipped in the
package). To add one after changing ``tenks/db/models.py``::

    python -m tenks.db.migration "what changed"

writes ``migrations/versions/<rev>_<what_changed>.py`` from the models'
difference with the newest revision: read it, then commit it.
"""

import os
import sys
import tempfile

import fasteners
import sqlalchemy as sa

from tenks import exceptions
from tenks.db import api as db_api
from tenks.db import migrations

MIGRATIONS = os.path.dirname(migrations.__file__)
# Not alembic_version: TaskFlow's own migrations use that table.
VERSION_TABLE = migrations.VERSION_TABLE
TABLE_PREFIX = 'tenks_'


def schema_lock(lock_dir):
    """The lock under which schemas are created or upgraded."""
    return fasteners.InterProcessLock(os.path.join(lock_dir, 'schema.lock'))


def alembic_config(connection):
    from alembic import config
    cfg = config.Config()
    cfg.set_main_option('script_location', MIGRATIONS)
    cfg.attributes['connection'] = connection
    return cfg


def known_revisions():
    from alembic import script
    return {revision.revision for revision in
            script.ScriptDirectory(MIGRATIONS).walk_revisions()}


def schema_error(engine, version, upgrade_with):
    """StateDatabaseError for a database at revision ``version`` (None:
    no schema) that is not this code's: older (``upgrade_with`` says how
    to create or upgrade it) or newer."""
    if version is None:
        reason = 'has no schema: %s' % upgrade_with
    elif version in known_revisions():
        reason = ('is at schema revision %s, older than this Tenks\' %s: %s'
                  % (version, migrations.HEAD, upgrade_with))
    else:
        reason = ('is at schema revision %s, which this Tenks does not know '
                  '(its newest is %s): a newer Tenks upgraded it; use that '
                  'Tenks or a newer one' % (version, migrations.HEAD))
    return exceptions.StateDatabaseError(url=engine.url.render_as_string(),
                                         reason=reason)


def upgrade(engine):
    """Upgrade the database to the newest revision (call under the lock).

    StateDatabaseError when its schema is newer than this code's."""
    version = db_api.schema_version(engine)
    if version is not None and version not in known_revisions():
        raise schema_error(engine, version, None)
    with engine.connect() as connection:
        tables = sa.inspect(connection).get_table_names()
    if VERSION_TABLE not in tables and any(
            t.startswith(TABLE_PREFIX) for t in tables):
        raise exceptions.ConfigError(
            reason='the state database %s was made by a Tenks older '
                   'than its migrations: tear its clusters down with '
                   'that Tenks, then remove the database'
                   % engine.url.render_as_string())
    # TaskFlow's tables first: a process that finds the version at head
    # takes the schema as whole without the lock (a conductor starting
    # beside this process's first use prunes the flows at once).
    upgrade_taskflow(engine)
    from alembic import command
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), 'head')


def upgrade_taskflow(engine):
    """Create or upgrade TaskFlow's persistence tables, which hold the
    flows of running operations. Done with Tenks' own upgrade, so that
    no process checks them at every start: a Tenks that needs a newer
    TaskFlow schema brings a revision of its own, which runs this."""
    from taskflow.persistence.backends import impl_sqlalchemy
    backend = impl_sqlalchemy.SQLAlchemyBackend(
        {'connection': str(engine.url)}, engine=engine)
    backend.get_connection().upgrade()


def new_revision(message):
    """Write a migration from the difference between models and head."""
    from alembic import command
    with tempfile.TemporaryDirectory() as tmp:
        engine = sa.create_engine(
            'sqlite:///' + os.path.join(tmp, 'state.sqlite'))
        with engine.begin() as connection:
            cfg = alembic_config(connection)
            # Formatted by ruff to the project's style, as written.
            cfg.set_section_option('post_write_hooks', 'hooks', 'ruff')
            for key, value in (
                    ('type', 'exec'), ('executable', sys.executable),
                    ('options', '-m ruff format --config '
                                '"format.quote-style=\'single\'" '
                                'REVISION_SCRIPT_FILENAME')):
                cfg.set_section_option('post_write_hooks', 'ruff.' + key,
                                       value)
            command.upgrade(cfg, 'head')
            command.revision(cfg, message=message, autogenerate=True)
        engine.dispose()


if __name__ == '__main__':
    new_revision(' '.join(sys.argv[1:]) or 'update')
