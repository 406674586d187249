"""The state directory on real components: first use by several
``tenks`` processes at once, and the BMC password at rest."""

import os
import secrets
import stat
import subprocess

import pytest
import yaml

from tenks.cli import embedded
from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional

# IPMI ports of this module: 8200-8299.
PORT_BASE = 8200


@pytest.fixture
def env(tmp_path):
    with cf.checked(cf.ClusterEnv(tmp_path, port_base=PORT_BASE)) as cluster:
        yield cluster


def start_tenks(env, state_dir, *args):
    environ = {k: v for k, v in os.environ.items()
               if k not in ('TENKS_TRANSPORT_URL', 'TENKS_STATE_DIR')}
    return subprocess.Popen(
        [cf.TENKS, '--state-dir', state_dir, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=environ)


def failures(processes):
    """The exit codes and error output of the processes that failed or
    printed a traceback or a raw SQL error, once all have ended."""
    failed = []
    for process in processes:
        _, err = process.communicate(timeout=300)
        if process.returncode or any(
                word in err for word in ('Traceback', 'sqlalchemy',
                                         'sqlite3')):
            failed.append((process.returncode, err))
    return failed


LISTS = [('cluster', 'list'), ('node', 'list'), ('hypervisor', 'list'),
         ('operation', 'list'), ('cluster', 'list')]


def test_commands_started_at_once_on_a_fresh_state_dir(env, tmp_path):
    for attempt in range(3):
        state_dir = str(tmp_path / ('fresh%d' % attempt))
        assert failures([start_tenks(env, state_dir, *command)
                         for command in LISTS]) == []


def test_deploy_and_lists_at_once_on_a_fresh_state_dir(env, tmp_path):
    path = tmp_path / 'cluster.yaml'
    path.write_text(yaml.safe_dump(env.spec(count=1)))
    deploy = start_tenks(env, env.state_dir, 'deploy', str(path))
    lists = [start_tenks(env, env.state_dir, *command)
             for command in LISTS]
    assert failures([deploy, *lists]) == []
    env.teardown()


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def tree(root):
    """{path relative to root: (is a directory, mode)} of all below it."""
    found = {'.': (True, mode(root))}
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(parent, name)
            found[os.path.relpath(path, root)] = (name in dirs, mode(path))
    return found


def files_holding(root, data):
    found = []
    for parent, _, files in os.walk(root):
        for name in files:
            path = os.path.join(parent, name)
            with open(path, 'rb') as f:
                if data in f.read():
                    found.append(os.path.relpath(path, root))
    return sorted(found)


def test_bmc_password_at_rest(env):
    # IPMI 2.0 passwords have at most 20 bytes.
    password = secrets.token_hex(8)
    spec = env.spec(count=2, ipmi_password=password)
    old_umask = os.umask(0o022)
    try:
        with embedded.embedded(env.conf) as conductor:
            conductor.deployments.deploy(spec)
            port = env.port_base
            # The password searched for below is the one the BMC uses.
            assert cf.ipmitool(port, 'power', 'status',
                               password=password).returncode == 0
            assert cf.ipmitool(port, 'power', 'on',
                               password=password).returncode == 0
            state = tree(env.state_dir)
            conductor.teardowns.teardown(env.cluster)
            # Before the database closes: its WAL is still there.
            held = files_holding(env.state_dir, password.encode())
    finally:
        os.umask(old_umask)

    dirs = {path: m for path, (is_dir, m) in state.items() if is_dir}
    files = {path: m for path, (is_dir, m) in state.items() if not is_dir}
    for path in ('.', 'locks', 'logs', 'logs/console', 'ipmi', 'ipmi/bmcs'):
        assert dirs.pop(path) == 0o700, path
    assert {m for m in dirs.values()} == {0o700}, dirs
    db_files = ['state.sqlite', 'state.sqlite-wal', 'state.sqlite-shm']
    assert [files[path] for path in db_files] == [0o600] * 3
    # Everything else that may hold the password: the IPMI host's BMC
    # definitions and log, the console logs.
    exposed = {path: oct(m) for path, m in files.items()
               if m & 0o077 and not path.startswith('locks/')}
    assert exposed == {}

    assert held == []
    assert files_holding(env.state_dir, password.encode()) == []
