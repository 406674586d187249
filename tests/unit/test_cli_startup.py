"""What ``tenks`` imports to start: its start-up time is mostly imports
(tools/benchmark.py prints the figures)."""

import os
import subprocess
import sys

import pytest

# The console script installed beside this venv's python.
TENKS = os.path.join(os.path.dirname(sys.executable), 'tenks')

HEAVY = ('taskflow', 'sqlalchemy', 'alembic', 'oslo_messaging', 'eventlet',
         'conductor', 'flows', 'hostagent', 'openstack', 'libvirt')


def imported(tmp_path, *args):
    """The top-level packages ``tenks ARGS`` imports, and its output."""
    result = subprocess.run(
        [sys.executable, '-X', 'importtime', TENKS,
         '--state-dir', str(tmp_path / 'state'), *args],
        capture_output=True, text=True, timeout=60,
        env={'PATH': '/usr/bin:/bin'})
    modules = set()
    other = []
    for line in result.stderr.splitlines():
        if line.startswith('import time:'):
            name = line.rsplit('|', 1)[1].strip()
            modules.add(name.split('.')[0])
        else:
            other.append(line)
    return modules, result.returncode, result.stdout, '\n'.join(other)


@pytest.mark.parametrize('args', [['--version'], ['--help']])
def test_version_and_help_import_nothing_heavy(tmp_path, args):
    modules, code, out, err = imported(tmp_path, *args)
    assert code == 0, err
    assert out.startswith('tenks ') or out.startswith('usage: tenks ')
    # Not even the configuration or the spec's validator.
    assert modules.isdisjoint(HEAVY + ('oslo_config', 'jsonschema')), (
        sorted(modules.intersection(HEAVY + ('oslo_config', 'jsonschema'))))


def test_read_only_command_reads_the_database_alone(tmp_path):
    modules, code, out, err = imported(tmp_path, 'node', 'list', '-f',
                                       'json')
    assert (code, out, err) == (0, '[]\n', '')
    # SQLAlchemy, for the state database, but nothing of the conductor.
    heavy = set(HEAVY) - {'sqlalchemy'}
    assert modules.isdisjoint(heavy), sorted(modules.intersection(heavy))
    assert not (tmp_path / 'state').exists()


@pytest.fixture(scope='module')
def existing_database(tmp_path_factory):
    """A state directory whose database a first command made (with the
    embedded conductor and hostagent)."""
    path = tmp_path_factory.mktemp('existing')
    _, code, out, err = imported(path, 'hypervisor', 'list', '-f', 'json')
    assert code == 0, err
    assert (path / 'state' / 'state.sqlite').exists()
    return path


@pytest.mark.parametrize('command', [
    ['node', 'list'], ['cluster', 'list'], ['operation', 'list'],
    ['events']])
def test_read_only_command_on_an_existing_database(existing_database,
                                                   command):
    # Reading an existing database still needs SQLAlchemy alone.
    modules, code, out, err = imported(existing_database, *command,
                                       '-f', 'json')
    assert (code, out, err) == (0, '[]\n', '')
    assert 'sqlalchemy' in modules
    heavy = set(HEAVY) - {'sqlalchemy'}
    assert modules.isdisjoint(heavy), sorted(modules.intersection(heavy))


def test_deploy_imports_what_it_needs(tmp_path):
    # The import list is real: deploy loads its spec with jsonschema
    # (and fails here, before starting anything).
    modules, code, out, err = imported(tmp_path, 'deploy',
                                       str(tmp_path / 'missing.yaml'))
    assert code == 1 and 'cannot read the file' in err
    assert 'jsonschema' in modules
