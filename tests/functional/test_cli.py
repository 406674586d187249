"""The ``tenks`` command as a user runs it, in a subprocess."""

import json
import os
import subprocess

import pytest
import yaml

from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional



@pytest.fixture
def env(tmp_path):
    with cf.checked(cf.ClusterEnv(tmp_path, port_base=7200)) as cluster:
        yield cluster


def tenks(env, *args):
    config = os.path.join(env.state_dir + '.conf')
    with open(config, 'w') as f:
        f.write('[hostagent]\nvbmcd_control_port = %d\n'
                % env.conf.hostagent.vbmcd_control_port)
    return subprocess.run(
        [cf.TENKS, '--state-dir', env.state_dir, '--config-file', config,
         *args], capture_output=True, text=True, timeout=120)


def write_spec(tmp_path, data):
    path = tmp_path / 'cluster.yaml'
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_deploy_list_redeploy_teardown(env, tmp_path):
    spec = env.spec(count=1)
    path = write_spec(tmp_path, spec)

    done = tenks(env, 'deploy', path)
    assert done.returncode == 0, done.stderr
    assert 'Cluster %s deployed: 1 node(s)' % env.cluster in done.stdout

    listed = tenks(env, 'node', 'list', '-f', 'json')
    assert listed.returncode == 0, listed.stderr
    [node] = json.loads(listed.stdout)
    assert node['name'] == env.node_name(0)
    assert node['bmc_port'] == env.port_base
    assert node['state'] == 'deployed'
    assert node['memory_mb'] == 128 and node['vcpus'] == 1
    assert cf.ipmitool(env.port_base, 'power', 'status').returncode == 0

    again = tenks(env, 'deploy', path)
    assert again.returncode == 0, again.stderr
    assert 'nothing changed' in again.stdout

    gone = tenks(env, 'teardown', env.cluster)
    assert gone.returncode == 0, gone.stderr
    assert 'torn down' in gone.stdout
    assert env.leftovers() == []
    assert json.loads(tenks(env, 'node', 'list', '-f', 'json').stdout) == []


def test_bad_spec_exits_non_zero_naming_file_and_field(env, tmp_path):
    spec = env.spec(count=1)
    spec['specs'][0]['count'] = -1
    spec['specs'][0]['type'] = 'huge'
    path = write_spec(tmp_path, spec)
    result = tenks(env, 'deploy', path)
    assert result.returncode != 0
    assert path in result.stderr
    assert 'specs[0].count' in result.stderr
    assert "unknown node type 'huge'" in result.stderr
    assert 'Traceback' not in result.stderr
    assert env.leftovers() == []


def test_teardown_of_unknown_cluster_fails_clearly(env):
    result = tenks(env, 'teardown', 'no-such-cluster')
    assert result.returncode != 0
    assert 'No cluster named no-such-cluster' in result.stderr
