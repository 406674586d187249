"""The ``tenks`` command as a user runs it, in a subprocess."""

import contextlib
import html
import json
import os
import subprocess
import time

import pytest
import yaml
from pyroute2 import IPRoute

from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional


@pytest.fixture
def env(tmp_path):
    with cf.checked(cf.ClusterEnv(tmp_path, port_base=7200)) as cluster:
        yield cluster


def tenks(env, *args):
    return subprocess.run(
        [cf.TENKS, '--state-dir', env.state_dir, *args],
        capture_output=True, text=True, timeout=120)


def write_spec(tmp_path, data, name='cluster.yaml'):
    path = tmp_path / name
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
    [mac] = node['macs']
    assert cf.ipmitool(env.port_base, 'power', 'status').returncode == 0

    shown = tenks(env, 'cluster', 'show', env.cluster, '-f', 'json')
    assert shown.returncode == 0, shown.stderr
    shown = json.loads(shown.stdout)
    assert shown['state'] == 'deployed'
    assert shown['nodes'] == [env.node_name(0)]
    assert shown['spec']['ipmi_password'] == '***'
    by_uuid = json.loads(tenks(env, 'node', 'show', node['uuid'],
                               '-f', 'json').stdout)
    assert by_uuid['name'] == node['name'] and by_uuid['macs'] == [mac]

    # Its flow drawn by the real Graphviz: the task of its hypervisor's
    # nodes, done.
    [deploy] = json.loads(tenks(env, 'operation', 'list', '-f',
                                'json').stdout)
    svg = tmp_path / 'deploy.svg'
    drawn = tenks(env, 'operation', 'graph', deploy['id'], '--format', 'svg',
                  '-o', str(svg))
    assert drawn.returncode == 0, drawn.stderr
    text = html.unescape(svg.read_text())
    assert '<svg' in text
    assert '>node:%s:0</text>' % node['hypervisor'] in text
    assert '>done</text>' in text

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


# An override file in the shape the Ansible-based Tenks reads (its CI
# job's, rendered): no cluster name, Ansible-only keys, a physnet mapped
# to an existing bridge.
OVERRIDE = """---
ansible_python_interpreter: /usr/bin/python3

node_types:
  tiny:
    memory_mb: 128
    vcpus: 1
    volumes:
      - capacity: 64MiB
    physical_networks:
      - physnet-ci
    console_log_enabled: true

specs:
  - type: tiny
    count: 1
    node_name_prefix: {prefix}

nova_flavors: []

physnet_mappings:
  physnet-ci: {source}

bridge_prefix: {bridge_prefix}
ipmi_port_range_start: {port}
ipmi_port_range_end: {port_end}

python_upper_constraints_url: file:///opt/requirements/upper-constraints.txt
"""


@contextlib.contextmanager
def source_bridge(name):
    """A Linux bridge of the test's own, as Tenks' CI job's breth1."""
    with IPRoute() as ipr:
        ipr.link('add', ifname=name, kind='bridge')
        index = ipr.link_lookup(ifname=name)[0]
        ipr.link('set', index=index, state='up')
    try:
        yield index
    finally:
        with IPRoute() as ipr:
            ipr.link('del', index=index)


def ports_of(bridge_index):
    with IPRoute() as ipr:
        return sorted(link.get('ifname') for link in ipr.get_links()
                      if link.get('master') == bridge_index)


def test_deploy_and_teardown_a_tenks_override_file(tmp_path):
    with cf.checked(cf.ClusterEnv(tmp_path, port_base=8300)) as env:
        # A Tenks override names no cluster: it is deployed as 'default'.
        env.cluster = 'default'
        source = 'fx' + env.node_prefix[1:]
        path = tmp_path / 'tenks-overrides.yml'
        path.write_text(OVERRIDE.format(
            prefix=env.node_prefix, source=source,
            bridge_prefix=env.bridge_prefix, port=env.port_base,
            port_end=env.port_base + 9))
        node = env.node_name(0)
        with source_bridge(source) as source_index:
            checked = tenks(env, 'validate', str(path))
            assert checked.returncode == 0, checked.stderr
            ignored = ('%s: ignored: ansible_python_interpreter, '
                       'python_upper_constraints_url (they only steer the '
                       'Ansible-based Tenks)' % path)
            assert checked.stderr.strip() == ignored

            done = tenks(env, 'deploy', str(path))
            assert done.returncode == 0, done.stderr
            assert ignored in done.stderr
            assert 'Cluster default deployed: 1 node(s)' in done.stdout

            shown = tenks(env, 'node', 'show', node, '-f', 'json')
            assert shown.returncode == 0, shown.stderr
            shown = json.loads(shown.stdout)
            assert shown['cluster'] == 'default'
            assert shown['bmc_port'] == env.port_base
            assert [nic['physnet'] for nic in shown['nics']] == [
                'physnet-ci']
            # physnet_mappings kept its Tenks meaning: the cluster's
            # bridge is linked to the existing one.
            bridge = shown['nics'][0]['bridge']
            assert ports_of(source_index) == ['p-%s-phy' % bridge]

            # console_log_enabled: the serial console goes to a file once
            # the node runs.
            power = cf.ipmitool(env.port_base, 'power', 'on')
            assert power.returncode == 0, power.stderr
            log = os.path.join(env.state_dir, 'logs', 'console',
                               '%s-console.log' % node)
            deadline = time.monotonic() + 20
            while not os.path.exists(log) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert os.path.exists(log)

            gone = tenks(env, 'teardown', str(path))
            assert gone.returncode == 0, gone.stderr
            assert 'Cluster default torn down' in gone.stdout
            assert env.leftovers() == []
            assert ports_of(source_index) == []


def tenks_in_terminal(env, answer, *args):
    """``tenks`` with a terminal as its stdin and stdout, as a user runs
    it; ``answer`` is typed when it asks. Returns (exit code, output)."""
    import pty
    main, side = pty.openpty()
    proc = subprocess.Popen(
        [cf.TENKS, '--state-dir', env.state_dir, *args], stdin=side,
        stdout=side, stderr=side)
    os.close(side)
    output = b''
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the terminal closed: the command ended
            break
        output += chunk
        if b'Apply? [y/N]' in output and answer is not None:
            os.write(main, answer.encode() + b'\n')
            answer = None
    os.close(main)
    return proc.wait(timeout=60), output.decode()


def test_plan_then_a_shrink_asked_in_a_terminal(env, tmp_path):
    spec = env.spec(count=2)
    path = write_spec(tmp_path, spec)
    assert tenks(env, 'deploy', path).returncode == 0

    # Growing: the plan lists the new node's parts; nothing is made.
    bigger = write_spec(tmp_path, env.spec(count=3), 'bigger.yaml')
    planned = tenks(env, 'plan', bigger, '-f', 'json')
    assert planned.returncode == 0, planned.stderr
    # physnet1 has no uplink anywhere: the plan says so.
    assert planned.stderr == (
        'Note: physical network physnet1 is mapped on no hypervisor: its '
        'bridges are isolated, with no uplink.\n')
    changes = json.loads(planned.stdout)
    new = env.node_name(2)
    assert {(c['node'], c['resource'], c['action']) for c in changes} >= {
        (new, 'domain', 'create'), (new, 'bmc', 'create')}
    assert not {c['node'] for c in changes} - {new}
    assert len(env.nodes()) == 2

    # Shrinking removes a node: in a terminal, deploy asks first.
    smaller = write_spec(tmp_path, env.spec(count=1), 'smaller.yaml')
    code, output = tenks_in_terminal(env, 'n', 'deploy', smaller)
    assert code != 0, output
    assert '%s domain: delete' % env.node_name(1) in output
    assert 'Nothing was changed' in output
    assert len(env.nodes()) == 2
    code, output = tenks_in_terminal(env, 'y', 'deploy', smaller)
    assert code == 0, output
    assert [n['name'] for n in env.nodes()] == [env.node_name(0)]
    # Growing loses nothing: no question.
    code, output = tenks_in_terminal(env, None, 'deploy', path)
    assert code == 0 and 'Apply?' not in output, output
    assert len(env.nodes()) == 2
    # --yes does not ask.
    code, output = tenks_in_terminal(env, None, 'deploy', '--yes', smaller)
    assert code == 0 and 'Apply?' not in output, output
    assert len(env.nodes()) == 1

    assert tenks(env, 'teardown', env.cluster).returncode == 0
    assert env.leftovers() == []
