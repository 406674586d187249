"""The Ansible role ansible/roles/tenks as a playbook uses it: real
``ansible-playbook`` on localhost (connection local) running the real
``tenks`` on real libvirt, IPMI BMCs and bridges."""

import json
import os
import subprocess
import sys

import libvirt
import pytest

from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional

# This module's IPMI ports: 7360-7369.
PORT_BASE = 7360
ROLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'ansible', 'roles')
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  roles:
    - tenks
  tasks:
    - name: Ask each BMC the role returned for its power status
      ansible.builtin.command: >-
        ipmitool -I lanplus -H {{ item.bmc_address }} -p {{ item.bmc_port }}
        -U admin -P password -R 3 -N 10 power status
      loop: "{{ tenks_nodes }}"
      register: power
      changed_when: false
      when: ask_bmcs | default(false) | bool
    - name: Record what the role did
      ansible.builtin.copy:
        content: "{{ {'changed': tenks_result.changed,
                      'nodes': tenks_nodes, 'changes': tenks_changes,
                      'power': power.results | default([])
                               | map(attribute='stdout', default='')
                               | list} | to_json }}"
        dest: "{{ outcome }}"
      check_mode: false
"""


@pytest.fixture
def env(tmp_path):
    with cf.checked(cf.ClusterEnv(tmp_path, port_base=PORT_BASE)) as cluster:
        yield cluster


def play(env, tmp_path, *options, **variables):
    """Run the playbook with ``variables`` (and the role's options for
    this cluster's state directory); (process, what the role did)."""
    playbook = tmp_path / 'playbook.yml'
    playbook.write_text(PLAYBOOK)
    outcome = tmp_path / 'outcome.json'
    if outcome.exists():
        outcome.unlink()
    extra = tmp_path / 'vars.json'
    extra.write_text(json.dumps(dict(
        variables, outcome=str(outcome), tenks_executable=cf.TENKS,
        tenks_state_dir=env.state_dir,
        ansible_python_interpreter=sys.executable)))
    done = subprocess.run(
        [os.path.join(cf.BIN, 'ansible-playbook'), '-i', 'localhost,', '-c',
         'local', '-e', '@%s' % extra, *options, str(playbook)],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, ANSIBLE_ROLES_PATH=ROLES,
                 ANSIBLE_HOME=str(tmp_path / 'ansible'),
                 ANSIBLE_NOCOLOR='1'))
    return done, (json.loads(outcome.read_text()) if outcome.exists()
                  else None)


def domains(env):
    conn = libvirt.open(cf.URI)
    try:
        return sorted(d.name() for d in conn.listAllDomains()
                      if env.ours(d.name()))
    finally:
        conn.close()


def test_deploy_again_check_grow_use_facts_teardown(env, tmp_path):
    names = [env.node_name(i) for i in range(3)]

    done, outcome = play(env, tmp_path, tenks_spec=env.spec(count=2))
    assert done.returncode == 0, done.stdout + done.stderr
    assert outcome['changed'] is True
    nodes = outcome['nodes']
    assert [n['name'] for n in nodes] == names[:2]
    assert [n['bmc_port'] for n in nodes] == [PORT_BASE, PORT_BASE + 1]
    for node in nodes:
        assert (node['bmc_type'], node['bmc_address']) == ('ipmi',
                                                           '127.0.0.1')
        assert len(node['uuid']) == 36 and len(node['macs']) == 1
    assert {c['action'] for c in outcome['changes']} == {'create'}
    assert domains(env) == names[:2]

    again, outcome = play(env, tmp_path, tenks_spec=env.spec(count=2))
    assert again.returncode == 0, again.stdout + again.stderr
    assert (outcome['changed'], outcome['changes']) == (False, [])
    assert outcome['nodes'] == nodes

    # Check mode: what growing would make, and nothing made.
    checked, outcome = play(env, tmp_path, '--check',
                            tenks_spec=env.spec(count=3))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert outcome['changed'] is True
    assert {(c['node'], c['resource'], c['action'])
            for c in outcome['changes']} >= {
        (names[2], 'domain', 'create'), (names[2], 'bmc', 'create')}
    assert {c['node'] for c in outcome['changes']} == {names[2]}
    assert outcome['nodes'] == nodes
    assert domains(env) == names[:2]

    # Grow, then a task that uses the returned nodes: each BMC answers.
    grown, outcome = play(env, tmp_path, tenks_spec=env.spec(count=3),
                          ask_bmcs=True)
    assert grown.returncode == 0, grown.stdout + grown.stderr
    assert outcome['changed'] is True
    assert [n['name'] for n in outcome['nodes']] == names
    assert outcome['nodes'][:2] == nodes
    assert outcome['power'] == ['Chassis Power is off'] * 3
    assert domains(env) == names

    gone, outcome = play(env, tmp_path, tenks_state='absent',
                         tenks_cluster_name=env.cluster)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert (outcome['changed'], outcome['nodes']) == (True, [])
    gone, outcome = play(env, tmp_path, tenks_state='absent',
                         tenks_cluster_name=env.cluster)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert outcome['changed'] is False

    assert env.leftovers() == []
    audit = subprocess.run([cf.TENKS, '--state-dir', env.state_dir, 'audit',
                            env.cluster, '-f', 'json'],
                           capture_output=True, text=True, timeout=120)
    assert (audit.returncode, json.loads(audit.stdout)) == (0, []), (
        audit.stderr)


def test_a_spec_file_and_a_failure_carrying_tenks_error(env, tmp_path):
    bad = env.spec(count=1)
    bad['specs'][0]['count'] = -1
    path = tmp_path / 'bad.yaml'
    path.write_text(json.dumps(bad))
    failed, outcome = play(env, tmp_path, tenks_spec_file=str(path))
    assert failed.returncode != 0 and outcome is None
    assert 'specs[0].count' in failed.stdout, failed.stdout
    assert '%s: invalid cluster spec' % path in failed.stdout
    assert domains(env) == []

    path.write_text(json.dumps(env.spec(count=1)))
    done, outcome = play(env, tmp_path, tenks_spec_file=str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert [n['name'] for n in outcome['nodes']] == [env.node_name(0)]
    gone, outcome = play(env, tmp_path, tenks_spec_file=str(path),
                         tenks_state='absent')
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert (outcome['changed'], outcome['nodes']) == (True, [])
    assert env.leftovers() == []
