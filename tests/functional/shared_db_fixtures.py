"""Server databases for the shared state: a database of its own per test
on the PostgreSQL and MariaDB that tools/setup.sh starts on 127.0.0.1,
as its account tenks (which may create databases named tenks_*)."""

import contextlib
import os
import secrets
import subprocess
import time

import sqlalchemy as sa

from tests.functional import cluster_fixtures as cf

# Where each server is (no database: the fixture adds one); the
# environment may name others.
SERVERS = {
    'postgresql': os.environ.get(
        'TENKS_TEST_POSTGRESQL_URL',
        'postgresql+psycopg://tenks:tenks@127.0.0.1:5432/'),
    'mariadb': os.environ.get(
        'TENKS_TEST_MYSQL_URL', 'mysql+pymysql://tenks:tenks@127.0.0.1:3306/'),
}
# The database an account connects to when it makes or drops others.
MAINTENANCE_DATABASE = {'postgresql': 'postgres', 'mariadb': None}


def masked(url):
    """``url`` as Tenks shows it: its password masked."""
    return sa.engine.make_url(url).render_as_string()


@contextlib.contextmanager
def database(server, **settings):
    """The URL of a new, empty database on ``server``, dropped after
    (with whatever still holds a connection to it, on PostgreSQL).
    ``settings``: PostgreSQL parameters its sessions start with
    (ALTER DATABASE ... SET)."""
    base = sa.engine.make_url(SERVERS[server])
    name = 'tenks_test_%s' % secrets.token_hex(4)
    admin = sa.create_engine(
        base.set(database=MAINTENANCE_DATABASE[server]),
        isolation_level='AUTOCOMMIT', poolclass=sa.pool.NullPool)
    with admin.connect() as connection:
        connection.exec_driver_sql('CREATE DATABASE %s' % name)
        for key, value in settings.items():
            connection.exec_driver_sql("ALTER DATABASE %s SET %s TO '%s'"
                                       % (name, key, value))
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        _drop(admin, server, name)
        admin.dispose()


def _drop(admin, server, name, timeout=30):
    """Drop database ``name``. On PostgreSQL, FORCE ends the sessions
    still on it, but fails while an autovacuum worker (no role of ours)
    is on it: the worker ends soon, so try again."""
    force = ' WITH (FORCE)' if server == 'postgresql' else ''
    deadline = time.monotonic() + timeout
    while True:
        try:
            with admin.connect() as connection:
                connection.exec_driver_sql('DROP DATABASE %s%s'
                                           % (name, force))
            return
        except sa.exc.ProgrammingError as e:
            # 42501: insufficient_privilege.
            if (getattr(e.orig, 'sqlstate', None) != '42501'
                    or time.monotonic() > deadline):
                raise
        time.sleep(0.2)


def count(url, query, **params):
    """The one value ``query`` selects from the database at ``url``."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            return connection.execute(sa.text(query), params).scalar()
    finally:
        engine.dispose()


def manage(config, *args):
    """``tenks-manage --config-file CONFIG ARGS``."""
    return subprocess.run(
        [os.path.join(cf.BIN, 'tenks-manage'), '--config-file', str(config),
         *args], capture_output=True, text=True, timeout=120)


def restart_postgresql():
    """Restart the PostgreSQL server of tools/setup.sh (pg_ctl restart,
    fast mode: every connection dropped), and wait until it answers."""
    version, name, _, _, _, datadir, logfile = subprocess.run(
        ['pg_lsclusters', '-h'], capture_output=True, text=True,
        check=True).stdout.split()[:7]
    # The server keeps the streams pg_ctl gives it: none of ours.
    subprocess.run(
        ['runuser', '-u', 'postgres', '--',
         '/usr/lib/postgresql/%s/bin/pg_ctl' % version, '-D', datadir,
         '-l', logfile,
         '-o', '-c config_file=/etc/postgresql/%s/%s/postgresql.conf'
         % (version, name), '-w', '-s', '-m', 'fast', 'restart'],
        check=True, timeout=120, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
