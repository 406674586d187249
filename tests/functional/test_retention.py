"""Retention of the state database, as a user of the CLI meets it: failed
deploys (a missing image; real libvirt) must not leave rows behind for
ever. Each command that changes something prunes as it starts: the flows
of ended operations go; the operations, their events and unanswered
requests go after [conductor] operation_retention_days."""

import json
import sqlite3
import subprocess
import time

import pytest
import yaml

from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional

# About 1.7 s: what ended before the previous deploy is old by the next.
SHORT_DAYS = 2e-5


@pytest.fixture
def env(tmp_path):
    env = cf.ClusterEnv(tmp_path, port_base=9740)
    with cf.checked(env):
        yield env


def failing_spec(env, tmp_path):
    spec = env.spec(count=1)
    spec['node_types']['small']['volumes'] = [{
        'capacity': '64MiB', 'format': 'qcow2',
        'image': str(tmp_path / 'missing.qcow2')}]
    path = tmp_path / 'cluster.yaml'
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def tenks(env, config, *args):
    return subprocess.run(
        [cf.TENKS, '--state-dir', env.state_dir, '--config-file', config,
         *args], capture_output=True, text=True, timeout=120)


def write_config(tmp_path, days=None):
    path = tmp_path / 'tenks.conf'
    path.write_text('[conductor]\noperation_retention_days = %s\n' % days
                    if days is not None else '')
    return str(path)


def failed_deploy(env, config, spec):
    result = tenks(env, config, 'deploy', spec)
    assert result.returncode != 0, result.stdout
    assert 'missing.qcow2' in result.stderr, result.stderr


def operations(env, config):
    result = tenks(env, config, 'operation', 'list', '-f', 'json')
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def row_counts(env):
    """Rows in each table of the state database."""
    db = sqlite3.connect('file:%s/state.sqlite?mode=ro' % env.state_dir,
                         uri=True)
    try:
        tables = [name for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: db.execute('SELECT count(*) FROM "%s"' % t).fetchone()[0]
                for t in tables}
    finally:
        db.close()


def test_failed_deploys_leave_nothing_past_the_retention(env, tmp_path):
    config = write_config(tmp_path, SHORT_DAYS)
    spec = failing_spec(env, tmp_path)

    failed_deploy(env, config, spec)
    first = operations(env, config)
    assert [o['state'] for o in first] == ['failed'], first
    assert row_counts(env)['logbooks'] == 1

    time.sleep(2)
    failed_deploy(env, config, spec)
    second = operations(env, config)
    assert [o['id'] for o in second] != [o['id'] for o in first]
    assert len(second) == 1, second
    # The first operation's flow went with it; the second's stays until
    # the next command prunes.
    steady = row_counts(env)
    assert steady['logbooks'] == 1, steady

    for _ in range(3):
        time.sleep(2)
        failed_deploy(env, config, spec)
    assert row_counts(env) == steady


def test_operations_within_the_retention_are_kept(env, tmp_path):
    config = write_config(tmp_path)
    spec = failing_spec(env, tmp_path)
    for _ in range(3):
        failed_deploy(env, config, spec)
    kept = operations(env, config)
    assert [o['state'] for o in kept] == ['failed'] * 3, kept
    result = tenks(env, config, 'events', '--cluster', env.cluster, '-f',
                   'json')
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)) >= 3, result.stdout
