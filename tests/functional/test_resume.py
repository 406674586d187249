"""A deploy whose process is killed mid-flow resumes where it stopped."""

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
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


def half_made(pool_dir, making):
    """Volumes of the pool being made: their file is there, without its
    owner mark yet, and the agent's note says whom it makes it for."""
    try:
        noted = os.listdir(making)
    except FileNotFoundError:
        return []
    found = []
    for name in noted:
        try:
            os.getxattr(os.path.join(pool_dir, name), 'user.tenks.owner')
        except FileNotFoundError:
            continue
        except OSError:
            found.append(name)
    return found


@pytest.fixture
def image():
    """A qcow2 image of 32 MiB of 0x5a that the qemu user can read."""
    directory = tempfile.mkdtemp(prefix='rsm', dir='/var/tmp')
    os.chmod(directory, 0o711)
    path = os.path.join(directory, 'data.qcow2')
    try:
        subprocess.run(['qemu-img', 'create', '-q', '-f', 'qcow2', path,
                        '32M'], check=True)
        subprocess.run(['qemu-io', '-f', 'qcow2', '-c',
                        'write -P 0x5a 0 32M', path], check=True,
                       capture_output=True)
        os.chmod(path, 0o644)
        yield path
    finally:
        shutil.rmtree(directory)


def test_deploy_killed_while_volumes_are_made_resumes(env, tmp_path, image):
    """Killed while its volumes are copied from an image, a deploy leaves
    volumes half made; resumed, the agent deletes and makes those again
    while it makes the others (libvirt refuses to scan a pool while it
    creates a volume in it: the two never overlap)."""
    base = [cf.TENKS, '--state-dir', env.state_dir]
    count = 6
    spec = env.spec(count=count)
    spec['node_types']['small']['volumes'] = [
        {'capacity': '64MiB', 'image': image}, {'capacity': '64MiB'},
        {'capacity': '64MiB', 'image': image}]
    path = tmp_path / 'cluster.yaml'
    path.write_text(yaml.safe_dump(spec))
    pool = 'tenks-' + env.cluster
    pool_dir = os.path.join(env.conf.hostagent.pool_dir, env.cluster)
    making = os.path.join(env.state_dir, 'making', pool)

    deploy = subprocess.Popen([*base, 'deploy', str(path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(half_made(pool_dir, making)) < 3:
        assert time.monotonic() < deadline, 'no volume was ever being made'
        assert deploy.poll() is None, deploy.communicate()
        time.sleep(0.005)
    deploy.kill()
    deploy.wait()

    resumed = subprocess.run([*base, 'deploy', str(path)],
                             capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    assert 'Resumed deploy' in resumed.stdout
    listed = subprocess.run([*base, 'node', 'list', '-f', 'json',
                             '--cluster', env.cluster],
                            capture_output=True, text=True, check=True)
    nodes = json.loads(listed.stdout)
    assert [n['state'] for n in nodes] == ['deployed'] * count
    assert sorted(os.listdir(pool_dir)) == sorted(
        '%svol%d' % (n['name'], i) for n in nodes for i in range(3))
    for node in nodes:
        for i in (0, 2):
            volume = os.path.join(pool_dir, '%svol%d' % (node['name'], i))
            assert os.getxattr(volume, 'user.tenks.owner').decode(
                ).startswith('tenks:%s:' % env.cluster)
            read = subprocess.run(['qemu-io', '-f', 'qcow2', '-r', '-c',
                                   'read -P 0x5a 0 32M', volume],
                                  capture_output=True, text=True)
            assert 'read 33554432/33554432 bytes' in read.stdout, read.stdout
    assert os.listdir(making) == []

    subprocess.run([*base, 'teardown', env.cluster], check=True,
                   capture_output=True, timeout=120)
