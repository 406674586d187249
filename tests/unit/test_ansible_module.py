"""The Ansible module tenks_cluster (ansible/roles/tenks/library) against
a fake ``tenks`` command that answers as the real one does and notes how
it was run."""

import json
import os
import stat
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
LIBRARY = os.path.join(ROOT, 'ansible', 'roles', 'tenks', 'library')

# The fake: its answers by command (deploy, plan, teardown, cluster,
# node) in answers.json beside it, [exit code, stdout, stderr]; each run
# appends its arguments (and the spec file's mode and text) to runs.json.
FAKE = '''#!%s
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
command = [a for a in args if a in (
    'deploy', 'plan', 'teardown', 'cluster', 'node')][0]
run = {'args': args}
if command in ('deploy', 'plan'):
    path = args[args.index(command) + 1]
    run['spec_mode'] = oct(os.stat(path).st_mode & 0o777)
    run['spec'] = open(path).read()
with open(os.path.join(here, 'runs.json'), 'a') as f:
    f.write(json.dumps(run) + '\\n')
code, out, err = json.load(open(os.path.join(here, 'answers.json')))[command]
sys.stdout.write(out)
sys.stderr.write(err)
sys.exit(code)
''' % sys.executable

NODE = {'name': 'tk0', 'uuid': '0d4c0f8e-0d0a-4a8b-9d5e-6d1e2b3c4d5e',
        'macs': ['52:54:00:00:00:01'], 'bmc_type': 'ipmi',
        'bmc_address': '127.0.0.1', 'bmc_port': 6230}
SPEC = {'cluster': 'ci', 'ipmi_password': 'secret',
        'node_types': {'small': {'memory_mb': 128, 'vcpus': 1}},
        'specs': [{'type': 'small', 'count': 1}]}


def record(state='succeeded', changed=(), plan=(), warnings=(), error=None):
    return json.dumps({'id': 'op1', 'cluster': 'ci', 'kind': 'deploy',
                       'state': state, 'error': error,
                       'result': {'changed': list(changed),
                                  'plan': list(plan),
                                  'warnings': list(warnings)}})


@pytest.fixture
def fake(tmp_path):
    path = tmp_path / 'tenks'
    path.write_text(FAKE)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)

    def answer(**answers):
        defaults = {'cluster': [0, json.dumps([{'name': 'ci'}]), ''],
                    'node': [0, json.dumps([NODE]), '']}
        (tmp_path / 'answers.json').write_text(
            json.dumps(dict(defaults, **answers)))
    answer()
    return answer


def module(tmp_path, check=False, **args):
    """The module's result and the fake's runs. The module runs as
    Ansible runs it on a host, its arguments in a file (ansible-playbook
    itself: tests/functional/test_ansible_role.py)."""
    runs = tmp_path / 'runs.json'
    if runs.exists():
        runs.unlink()
    (tmp_path / 'remote').mkdir(mode=0o700, exist_ok=True)
    arguments = tmp_path / 'args.json'
    arguments.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': dict(
        args, executable=str(tmp_path / 'tenks'), _ansible_check_mode=check,
        _ansible_remote_tmp=str(tmp_path / 'remote'))}))
    done = subprocess.run(
        [sys.executable, os.path.join(LIBRARY, 'tenks_cluster.py'),
         str(arguments)], capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout), [json.loads(line) for line in (
        runs.read_text().splitlines() if runs.exists() else [])]


def test_deploy_with_the_options_and_the_inline_spec(tmp_path, fake):
    fake(deploy=[0, record(changed=['node:x'], plan=[{'node': 'tk0'}],
                           warnings=['Placement answered HTTP 403']),
                 'deploy op1: node 1/1 (1 s)\n'])
    result, runs = module(tmp_path, spec=SPEC, state_dir='/srv/tenks',
                          config_files=['/etc/a.conf', '/etc/b.conf'],
                          os_cloud='mycloud', force=True)
    assert result['changed'] is True, result
    assert (result['cluster'], result['operation'], result['nodes'],
            result['changes']) == ('ci', 'op1', [NODE], [{'node': 'tk0'}])
    # ansible-core 2.19 reports each warning as an event.
    assert [w['event']['msg'] for w in result['warnings']] == [
        'Placement answered HTTP 403']
    deploy, nodes = runs
    options = ['-q', '--state-dir', '/srv/tenks', '--config-file',
               '/etc/a.conf', '--config-file', '/etc/b.conf', '--os-cloud',
               'mycloud']
    assert deploy['args'][:9] == options
    assert deploy['args'][9] == 'deploy'
    assert deploy['args'][11:] == ['--yes', '-f', 'json', '--force']
    # The inline spec, in a file only its user reads, gone afterwards.
    assert (json.loads(deploy['spec']), deploy['spec_mode']) == (SPEC,
                                                                 '0o600')
    assert not os.path.exists(deploy['args'][10])
    assert nodes['args'] == options + ['node', 'list', '--cluster', 'ci',
                                       '-f', 'json']


def test_a_deploy_that_changed_nothing_is_not_changed(tmp_path, fake):
    fake(deploy=[0, record(), ''])
    result, _ = module(tmp_path, spec=SPEC)
    assert (result['changed'], result['changes']) == (False, [])


def test_a_failed_operation_fails_with_its_error(tmp_path, fake):
    error = ('Deploy of cluster ci failed: domain:hv1:tk0: no space. '
             'Everything this deploy created was rolled back')
    fake(deploy=[1, record(state='failed', error=error),
                 'deploy op1: failed: %s\n/tmp/x/tenks-spec.yaml: %s\n'
                 % (error, error)])
    result, _ = module(tmp_path, spec=SPEC)
    assert result['failed'] is True
    assert result['msg'] == error
    assert result['operation']['state'] == 'failed'


def test_a_refused_spec_fails_with_what_tenks_said(tmp_path, fake):
    path = tmp_path / 'ci.yaml'
    path.write_text('cluster: ci\n')
    said = ('%s: invalid cluster spec:\n'
            '  specs[0].count: -1 is less than the minimum of 0' % path)
    fake(deploy=[1, '', said + '\n'])
    result, _ = module(tmp_path, spec_file=str(path))
    assert result['failed'] is True
    assert result['msg'] == said


def test_check_mode_plans_and_deploys_nothing(tmp_path, fake):
    change = {'node': 'tk1', 'resource': 'domain', 'action': 'create'}
    fake(plan=[0, json.dumps([change]), ''])
    result, runs = module(tmp_path, check=True, spec=SPEC)
    assert (result['changed'], result['changes'], result['nodes']) == (
        True, [change], [NODE])
    assert [r['args'][1] for r in runs] == ['plan', 'node']
    fake(plan=[0, '[]', ''])
    result, _ = module(tmp_path, check=True, spec=SPEC)
    assert result['changed'] is False


def test_absent(tmp_path, fake):
    fake(teardown=[0, record(changed=['remove:x']), ''])
    result, runs = module(tmp_path, check=True, cluster='ci', state='absent')
    assert (result['changed'], result['nodes']) == (True, [NODE])
    assert 'teardown' not in [r['args'][1] for r in runs]

    result, runs = module(tmp_path, cluster='ci', state='absent')
    assert (result['changed'], result['nodes']) == (True, [])
    assert runs[-1]['args'] == ['-q', 'teardown', 'ci', '-f', 'json']

    fake(cluster=[0, '[]', ''])
    result, runs = module(tmp_path, spec=SPEC, state='absent')
    assert (result['changed'], result['cluster']) == (False, 'ci')
    assert [r['args'][1] for r in runs] == ['cluster']
