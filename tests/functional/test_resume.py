"""A deploy whose process is killed mid-flow resumes where it stopped."""

import json
import os
import sqlite3
import subprocess
import time

import libvirt
import pytest
import yaml

from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional


@pytest.fixture
def env(tmp_path):
    with cf.checked(cf.ClusterEnv(tmp_path, port_base=7250)) as cluster:
        yield cluster


def recorded(state_dir, kind, state='present'):
    db = sqlite3.connect(os.path.join(state_dir, 'state.sqlite'))
    try:
        return db.execute(
            'SELECT count(*) FROM tenks_resources WHERE kind = ? AND '
            'state = ?', (kind, state)).fetchone()[0]
    finally:
        db.close()


def defined(*names):
    conn = libvirt.open(cf.URI)
    try:
        return len({d.name() for d in conn.listAllDomains()} & set(names))
    finally:
        conn.close()


def test_killed_deploy_resumes(env, tmp_path):
    base = [cf.TENKS, '--state-dir', env.state_dir]
    path = tmp_path / 'cluster.yaml'
    path.write_text(yaml.safe_dump(env.spec(count=2)))

    # A first, one-node cluster makes this state dir's IPMI BMC lock...
    first = tmp_path / 'first.yaml'
    first.write_text(yaml.safe_dump(env.spec(
        count=1, cluster=env.cluster + '-a',
        bridge_prefix=env.bridge_prefix + 'a',
        ipmi_port_range_start=env.port_base + 5)))
    subprocess.run([*base, 'deploy', str(first)], check=True,
                   capture_output=True, timeout=120)
    # ...which we hold, so the next deploy blocks in its BMC tasks.
    with cf.bmc_changes_held(env.state_dir):
        deploy = subprocess.Popen([*base, 'deploy', str(path)],
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        # Each node is one agent request (volumes, ports, domain, then
        # BMC): its domain defined, it waits for the lock. (The
        # first cluster's node holds the first name.)
        names = (env.node_name(1), env.node_name(2))
        while defined(*names) < 2:
            assert time.monotonic() < deadline, 'domains never defined'
            assert deploy.poll() is None, deploy.communicate()
            time.sleep(0.05)
        deploy.kill()
        deploy.wait()
    # Killed half way: the nodes' BMCs are not there yet.
    assert recorded(env.state_dir, 'bmc') == 1

    resumed = subprocess.run([*base, 'deploy', str(path)],
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert 'Resumed deploy' in resumed.stdout
    assert recorded(env.state_dir, 'bmc') == 3
    listed = subprocess.run([*base, 'node', 'list', '-f', 'json',
                             '--cluster', env.cluster],
                            capture_output=True, text=True, check=True)
    nodes = json.loads(listed.stdout)
    assert [n['name'] for n in nodes] == list(names)
    assert [n['state'] for n in nodes] == ['deployed', 'deployed']
    for node in nodes:
        status = cf.ipmitool(node['bmc_port'], 'power', 'status')
        assert 'Chassis Power is off' in status.stdout

    for cluster in (env.cluster, env.cluster + '-a'):
        subprocess.run([*base, 'teardown', cluster], check=True,
                       capture_output=True, timeout=120)
