"""tenks-manage: the state database's schema, as ironic-dbsync and
nova-manage do it for theirs::

    tenks-manage --config-file /etc/tenks/tenks.conf db sync
    tenks-manage --config-file /etc/tenks/tenks.conf db version

``db sync`` creates the schema of the database [database] connection
names (default: the SQLite file of the state directory), or upgrades it
to this Tenks' newest revision, TaskFlow's tables included; ``db
version`` prints the revision it is at and this Tenks' newest.
"""

import os
import shlex
import sys

from tenks import runtime

runtime.hide_eventlet()

from oslo_config import cfg  # noqa: E402

from tenks import conf as tenks_conf  # noqa: E402
from tenks import exceptions  # noqa: E402


def add_commands(subparsers):
    db = subparsers.add_parser('db', help='the state database')
    actions = db.add_subparsers(dest='action')
    actions.required = True
    actions.add_parser('sync', help="create the schema, or upgrade it to "
                                    "this Tenks' newest revision")
    actions.add_parser('version', help="print the schema's revision and "
                                       "this Tenks' newest")


def sync_command(conf):
    """The command that upgrades the state database of ``conf``, with
    the configuration files it was read from."""
    args = ['tenks-manage']
    for path in conf.config_file:
        args += ['--config-file', path]
    if conf.config_dir:
        args += ['--config-dir', conf.config_dir]
    return shlex.join(args + ['db', 'sync'])


def db_sync(conf):
    """Create or upgrade the schema; say what was done."""
    import sqlalchemy as sa

    from tenks import fileutils
    from tenks.db import api as db_api
    from tenks.db import migration
    from tenks.db import migrations
    state_dir = fileutils.private_dir(conf.state_dir)
    engine = db_api.create_engine(db_api.url(conf, state_dir))
    url = engine.url.render_as_string()
    try:
        before = db_api.schema_version(engine)
        if before == migrations.HEAD:
            return ('State database %s is at revision %s, the newest: '
                    'nothing to do' % (url, before))
        # The lock the conductors of this state directory upgrade under.
        with migration.schema_lock(fileutils.private_dir(
                os.path.join(state_dir, 'locks'))):
            migration.upgrade(engine)
    except sa.exc.DBAPIError as e:
        raise exceptions.StateDatabaseError(
            url=url, reason='could not be upgraded: %s' % e.orig) from e
    finally:
        engine.dispose()
    if before is None:
        return 'Created the schema of state database %s at revision %s' % (
            url, migrations.HEAD)
    return 'Upgraded state database %s from revision %s to %s' % (
        url, before, migrations.HEAD)


def db_version(conf):
    import sqlalchemy as sa

    from tenks.db import api as db_api
    from tenks.db import migrations
    url = sa.engine.make_url(db_api.url(conf))
    version = None
    # A default database not made yet has no schema; nothing is made here.
    if url.get_backend_name() != 'sqlite' or os.path.exists(
            url.database or ''):
        engine = db_api.create_engine(url)
        try:
            version = db_api.schema_version(engine)
        finally:
            engine.dispose()
    return 'database: %s\ncode: %s' % (version or 'none (no schema)',
                                       migrations.HEAD)


COMMANDS = {('db', 'sync'): db_sync, ('db', 'version'): db_version}


def main(argv=None):
    conf = tenks_conf.new_conf()
    conf.register_cli_opt(cfg.SubCommandOpt(
        'command', title='commands', handler=add_commands))
    conf(sys.argv[1:] if argv is None else argv, project='tenks',
         prog='tenks-manage')
    command = COMMANDS[conf.command.name, conf.command.action]
    try:
        print(command(conf))
    except exceptions.TenksError as e:
        sys.exit('tenks-manage: %s' % e)
