"""The state database named by [database] connection: tenks-manage
creates and upgrades its schema, and a conductor refuses a schema that
is not its code's, saying what to run (SQLite files stand for the
server databases here; tests/functional/test_shared_db.py runs
PostgreSQL and MariaDB)."""

import pytest
import sqlalchemy as sa
from alembic import command
from alembic import script

from conductor import conductor as tenks_conductor
from tenks import conf as tenks_conf
from tenks import daemon
from tenks import exceptions
from tenks import manage
from tenks import rpc
from tenks.cli import embedded
from tenks.db import api as db_api
from tenks.db import migration
from tenks.db import migrations


def write_conf(tmp_path, text, default=''):
    """A configuration file: state in tmp_path/state, ``default`` more of
    [DEFAULT], then ``text``."""
    path = tmp_path / 'tenks.conf'
    path.write_text('[DEFAULT]\nstate_dir = %s\n%s%s' % (
        tmp_path / 'state', default, text))
    return path


def read_conf(path):
    conf = tenks_conf.new_conf()
    conf(['--config-file', str(path)], default_config_files=[])
    return conf


def run(capsys, *args):
    """``tenks-manage ARGS``: (exit status, stdout, stderr), a message
    it exits with on stderr (as Python prints it)."""
    status = 0
    try:
        manage.main(list(args))
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    if isinstance(status, str):
        status, err = 1, err + status + '\n'
    return status, out, err


DATABASE = '[database]\nconnection = sqlite:///%s/shared.sqlite\n'


@pytest.fixture
def configured(tmp_path):
    """A configuration file naming a database of its own (not made)."""
    return write_conf(tmp_path, DATABASE % tmp_path)


def test_connection_is_read_from_database_section(configured, tmp_path):
    assert read_conf(configured).database.connection == (
        'sqlite:///%s' % (tmp_path / 'shared.sqlite'))


def test_the_deprecated_conductor_option_is_still_read(tmp_path):
    path = write_conf(tmp_path, '[conductor]\ndatabase_connection = '
                                'postgresql://tenks:pw@db/tenks\n')
    assert read_conf(path).database.connection == (
        'postgresql://tenks:pw@db/tenks')


def test_sync_creates_then_has_nothing_to_do(configured, tmp_path, capsys):
    url = 'sqlite:///%s' % (tmp_path / 'shared.sqlite')
    assert run(capsys, '--config-file', str(configured), 'db', 'version') == (
        0, 'database: none (no schema)\ncode: %s\n' % migrations.HEAD, '')
    assert run(capsys, '--config-file', str(configured), 'db', 'sync') == (
        0, 'Created the schema of state database %s at revision %s\n'
        % (url, migrations.HEAD), '')
    assert run(capsys, '--config-file', str(configured), 'db', 'sync') == (
        0, 'State database %s is at revision %s, the newest: nothing to '
        'do\n' % (url, migrations.HEAD), '')
    assert run(capsys, '--config-file', str(configured), 'db', 'version') == (
        0, 'database: %s\ncode: %s\n' % (migrations.HEAD, migrations.HEAD),
        '')


def at_previous_revision(url):
    """Make the database at ``url`` one revision older than the code;
    return that revision."""
    previous = script.ScriptDirectory(migration.MIGRATIONS).get_revision(
        migrations.HEAD).down_revision
    engine = db_api.create_engine(url)
    with engine.begin() as connection:
        command.upgrade(migration.alembic_config(connection), previous)
    migration.upgrade_taskflow(engine)
    engine.dispose()
    return previous


def test_sync_upgrades_an_older_schema(configured, tmp_path, capsys):
    url = 'sqlite:///%s' % (tmp_path / 'shared.sqlite')
    previous = at_previous_revision(url)
    assert run(capsys, '--config-file', str(configured), 'db', 'sync') == (
        0, 'Upgraded state database %s from revision %s to %s\n'
        % (url, previous, migrations.HEAD), '')


def test_without_a_subcommand_usage_is_printed(capsys):
    status, out, err = run(capsys, 'db')
    assert status == 2
    assert 'usage: tenks-manage db' in err and '{sync,version}' in err


def test_an_unreachable_database_is_named_with_its_password_masked(
        tmp_path, capsys):
    # Nothing listens on port 1.
    path = write_conf(tmp_path, '[database]\nconnection = postgresql+psycopg'
                                '://tenks:s3cret@127.0.0.1:1/tenks\n')
    for action in ('sync', 'version'):
        status, out, err = run(capsys, '--config-file', str(path), 'db',
                               action)
        assert (status, out) == (1, '')
        assert err.startswith(
            'tenks-manage: State database postgresql+psycopg://tenks:***@'
            '127.0.0.1:1/tenks cannot be reached: ')
        assert 'refused' in err and 's3cret' not in err


def test_a_url_without_its_driver_is_refused(tmp_path, capsys):
    path = write_conf(tmp_path, '[database]\nconnection = mysql+nosuch'
                                '://tenks:s3cret@127.0.0.1/tenks\n')
    status, out, err = run(capsys, '--config-file', str(path), 'db', 'sync')
    assert status == 1
    assert err.startswith('tenks-manage: State database mysql+nosuch://'
                          'tenks:***@127.0.0.1/tenks cannot be used: ')
    assert 'tenks[mysql]' in err and 's3cret' not in err


def test_sync_refuses_a_schema_newer_than_the_code(configured, tmp_path,
                                                   capsys):
    url = 'sqlite:///%s' % (tmp_path / 'shared.sqlite')
    manage.db_sync(read_conf(configured))
    set_revision(url, 'ffffffffffff')
    status, out, err = run(capsys, '--config-file', str(configured), 'db',
                           'sync')
    assert (status, out) == (1, '')
    assert err == (
        'tenks-manage: State database %s is at schema revision ffffffffffff, '
        'which this Tenks does not know (its newest is %s): a newer Tenks '
        'upgraded it; use that Tenks or a newer one\n' % (url,
                                                           migrations.HEAD))


def set_revision(url, revision):
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text(
            'UPDATE %s SET version_num = :r' % migrations.VERSION_TABLE),
            {'r': revision})
    engine.dispose()


def conductor_refusal(conf):
    with pytest.raises(exceptions.StateDatabaseError) as raised:
        tenks_conductor.Conductor(conf, rpc.Bus(conf))
    return str(raised.value)


def test_a_conductor_refuses_a_database_without_schema(configured, tmp_path):
    assert conductor_refusal(read_conf(configured)) == (
        'State database sqlite:///%s has no schema: run "tenks-manage '
        '--config-file %s db sync"' % (tmp_path / 'shared.sqlite',
                                       configured))


def test_a_conductor_refuses_an_older_schema(configured, tmp_path):
    previous = at_previous_revision('sqlite:///%s' % (tmp_path /
                                                      'shared.sqlite'))
    assert conductor_refusal(read_conf(configured)) == (
        'State database sqlite:///%s is at schema revision %s, older than '
        'this Tenks\' %s: run "tenks-manage --config-file %s db sync"'
        % (tmp_path / 'shared.sqlite', previous, migrations.HEAD,
           configured))


def test_a_synced_database_serves_the_embedded_commands(configured,
                                                        hypervisor):
    conf = read_conf(configured)
    manage.db_sync(conf)
    with embedded.embedded(conf) as conductor:
        assert conductor.records.list_operations() == []


def test_the_default_database_upgrades_itself(tmp_path, hypervisor):
    conf = read_conf(write_conf(tmp_path, ''))
    url = db_api.default_url(str(tmp_path / 'state'))
    (tmp_path / 'state').mkdir()
    at_previous_revision(url)
    with embedded.embedded(conf):
        pass
    assert db_api.schema_version(db_api.create_engine(url)) == (
        migrations.HEAD)


@pytest.mark.parametrize('section', ['', DATABASE])
def test_a_schema_newer_than_the_code_is_refused(tmp_path, section):
    """The default database as one an operator names."""
    conf = read_conf(write_conf(tmp_path, section.replace('%s',
                                                          str(tmp_path))))
    manage.db_sync(conf)
    url = db_api.url(conf)
    set_revision(url, 'ffffffffffff')
    assert conductor_refusal(conf) == (
        'State database %s is at schema revision ffffffffffff, which this '
        'Tenks does not know (its newest is %s): a newer Tenks upgraded it; '
        'use that Tenks or a newer one' % (url, migrations.HEAD))


def test_the_service_says_why_it_does_not_start(tmp_path):
    path = write_conf(tmp_path, DATABASE % tmp_path,
                      default='transport_url = rabbit://127.0.0.1:1/\n')
    with pytest.raises(SystemExit) as raised:
        daemon.run('conductor', tenks_conductor.Conductor,
                   ['--config-file', str(path)])
    assert raised.value.code == (
        'tenks-conductor: not starting: State database sqlite:///%s has no '
        'schema: run "tenks-manage --config-file %s db sync"'
        % (tmp_path / 'shared.sqlite', path))
