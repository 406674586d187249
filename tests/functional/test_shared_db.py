"""The state database on PostgreSQL and on MariaDB ([database]
connection): tenks-manage makes and upgrades its schema, a conductor
refuses one it was not synced to, and a tenks-conductor with a
tenks-hostagent on RabbitMQ keeps a cluster's records and its flows
there, not in a SQLite file."""

import datetime
import os
import subprocess

import pytest
import sqlalchemy as sa
from alembic import autogenerate
from alembic import command
from alembic import script
from alembic.runtime import migration as alembic_migration

from tenks import policy
from tenks.db import api as db_api
from tenks.db import migration
from tenks.db import migrations
from tenks.db import models
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df
from tests.functional import shared_db_fixtures as sdb

pytestmark = pytest.mark.functional

ADMIN = policy.admin_context()
PORT_BASES = {'postgresql': 9860, 'mariadb': 9870}


@pytest.fixture(params=sorted(sdb.SERVERS))
def server(request):
    return request.param


def write_conf(tmp_path, url, default=''):
    path = tmp_path / 'tenks.conf'
    path.write_text('[DEFAULT]\nstate_dir = %s\n%s[database]\nconnection = '
                    '%s\n' % (tmp_path / 'state', default, url))
    return path


def include_name(name, type_, parent_names):
    """What the migrations manage: Tenks' own tables."""
    return type_ != 'table' or name.startswith(migration.TABLE_PREFIX)


def schema_differences(url):
    """How the database's schema differs from the models (types too)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            context = alembic_migration.MigrationContext.configure(
                connection, opts={'version_table': migration.VERSION_TABLE,
                                  'include_name': include_name,
                                  'compare_type': True})
            return autogenerate.compare_metadata(context, models.metadata)
    finally:
        engine.dispose()


def precisions(server, url):
    """{digits of a second: how many} of the times in Tenks' tables."""
    schema = 'current_schema()' if server == 'postgresql' else 'DATABASE()'
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            return dict(connection.execute(sa.text(
                "SELECT datetime_precision, count(*) FROM "
                "information_schema.columns WHERE table_schema = %s AND "
                "table_name LIKE 'tenks%%' AND table_name != :version AND "
                "datetime_precision IS NOT NULL GROUP BY datetime_precision"
                % schema), {'version': migration.VERSION_TABLE}).all())
    finally:
        engine.dispose()


# Every time of the schema, to the microsecond.
MICROSECONDS = {6: 13}


def test_sync_makes_the_schema_and_version_says_so(server, tmp_path):
    with sdb.database(server) as url:
        path = write_conf(tmp_path, url)
        version = sdb.manage(path, 'db', 'version')
        assert (version.returncode, version.stdout) == (
            0, 'database: none (no schema)\ncode: %s\n' % migrations.HEAD)
        synced = sdb.manage(path, 'db', 'sync')
        assert (synced.returncode, synced.stdout) == (
            0, 'Created the schema of state database %s at revision %s\n'
            % (sdb.masked(url), migrations.HEAD)), synced.stderr
        assert ':***@' in synced.stdout
        version = sdb.manage(path, 'db', 'version')
        assert version.stdout == 'database: %s\ncode: %s\n' % (
            migrations.HEAD, migrations.HEAD)
        again = sdb.manage(path, 'db', 'sync')
        assert again.stdout.endswith('the newest: nothing to do\n')
        assert schema_differences(url) == []
        assert precisions(server, url) == MICROSECONDS
        # TaskFlow's tables, for the flows.
        assert sdb.count(url, 'SELECT count(*) FROM logbooks') == 0


def test_sync_upgrades_an_older_schema(server, tmp_path):
    previous = script.ScriptDirectory(migration.MIGRATIONS).get_revision(
        migrations.HEAD).down_revision
    with sdb.database(server) as url:
        engine = db_api.create_engine(url)
        with engine.begin() as connection:
            command.upgrade(migration.alembic_config(connection), previous)
        engine.dispose()
        synced = sdb.manage(write_conf(tmp_path, url), 'db', 'sync')
        assert synced.stdout == (
            'Upgraded state database %s from revision %s to %s\n'
            % (sdb.masked(url), previous, migrations.HEAD)), synced.stderr
        assert schema_differences(url) == []
        assert precisions(server, url) == MICROSECONDS


def test_times_are_kept_in_utc_to_the_microsecond(server, tmp_path):
    """A hypervisor's last registration reads back as it was written,
    whatever the server's time zone (PostgreSQL's set to Tokyo here)."""
    settings = {'timezone': 'Asia/Tokyo'} if server == 'postgresql' else {}
    with sdb.database(server, **settings) as url:
        assert sdb.manage(write_conf(tmp_path, url), 'db',
                          'sync').returncode == 0
        engine = db_api.create_engine(url)
        try:
            db = db_api.StateDB(engine)
            before = datetime.datetime.now(datetime.timezone.utc)
            db.register_hypervisor('hv1', {})
            after = datetime.datetime.now(datetime.timezone.utc)
            seen = db.get_hypervisor('hv1').last_seen.replace(
                tzinfo=datetime.timezone.utc)
        finally:
            engine.dispose()
        assert before <= seen <= after


def test_a_conductor_refuses_a_database_not_synced(server, tmp_path):
    with sdb.database(server) as url:
        path = write_conf(tmp_path, url, default=(
            'transport_url = rabbit://guest:guest@127.0.0.1:5672/\n'))
        started = subprocess.run(
            [os.path.join(cf.BIN, 'tenks-conductor'), '--config-file',
             str(path)], capture_output=True, text=True, timeout=120)
        assert started.returncode == 1
        assert started.stderr.endswith(
            'tenks-conductor: not starting: State database %s has no '
            'schema: run "tenks-manage --config-file %s db sync"\n'
            % (sdb.masked(url), path))


def test_a_distributed_deploy_keeps_its_state_there(server, tmp_path):
    with sdb.database(server) as url:
        deployment = df.Deployment(tmp_path / 'services', agents=1,
                                   database=url)
        synced = sdb.manage(deployment.conductor.config, 'db', 'sync')
        assert synced.returncode == 0, synced.stderr
        with deployment as d:
            env = cf.ClusterEnv(tmp_path / 'cluster',
                                port_base=PORT_BASES[server],
                                state_dirs=d.state_dirs.values())
            with cf.checked(env):
                deploy_rerun_teardown(d, env, url)
        # Nothing of it in a SQLite file of the conductor.
        assert not os.path.exists(os.path.join(
            tmp_path, 'services', deployment.conductor_host, 'state.sqlite'))


def deploy_rerun_teardown(d, env, url):
    spec = env.spec(count=1)
    operation = d.wait(d.api.deploy_cluster(ADMIN, spec))
    assert operation['state'] == 'succeeded', operation['error']
    assert operation['result']['changed']
    [node] = d.api.list_nodes(ADMIN, env.cluster)
    assert node['hypervisor'] == d.hosts[0]
    assert cf.ipmitool(node['bmc_port'], 'power', 'status').returncode == 0
    # The cluster's rows, and its flow's, in the server database.
    assert sdb.count(url, 'SELECT state FROM tenks_clusters WHERE name = :c',
                     c=env.cluster) == 'deployed'
    assert sdb.count(url, 'SELECT name FROM tenks_nodes WHERE cluster = :c',
                     c=env.cluster) == node['name']
    assert sdb.count(
        url, 'SELECT count(*) FROM atomdetails a JOIN flowdetails f ON '
             'a.parent_uuid = f.uuid WHERE f.parent_uuid = :o',
        o=operation['id']) > 0

    again = d.wait(d.api.deploy_cluster(ADMIN, spec))
    assert again['state'] == 'succeeded', again['error']
    assert again['result']['changed'] == []
    assert [n['uuid'] for n in d.api.list_nodes(ADMIN, env.cluster)] == [
        node['uuid']]

    gone = d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
    assert gone['state'] == 'succeeded', gone['error']
    assert env.leftovers() == []
    for table in ('tenks_clusters', 'tenks_nodes', 'tenks_resources'):
        assert sdb.count(url, 'SELECT count(*) FROM %s WHERE %s = :c' % (
            table, 'name' if table == 'tenks_clusters' else 'cluster'),
            c=env.cluster) == 0
