"""``tenks deploy|teardown -f json``: the ended operation's record on
stdout, for programs (the Ansible module) to read; the progress stays
on stderr."""

from tests.unit.test_cli import SPEC
from tests.unit.test_cli import write


def test_deploy_prints_its_record_changed_then_not(tenks, tmp_path,
                                                   hypervisor):
    path = write(tmp_path, 'unit.yaml', SPEC)
    first = tenks('deploy', path, '-f', 'json')
    assert first.code == 0, first.err
    record = first.json()
    assert (record['kind'], record['cluster'], record['state'],
            record['error']) == ('deploy', 'unit', 'succeeded', None)
    assert sorted(t for t in record['result']['changed']
                  if t.startswith('node:')) == sorted(
        'node:%s' % uuid for uuid in hypervisor_uuids(tenks))
    assert {(c['node'], c['resource'], c['action'])
            for c in record['result']['plan']} >= {
        ('tk0', 'domain', 'create'), ('tk1', 'bmc', 'create')}
    assert record['result']['warnings'] == []
    assert record['spec']['ipmi_password'] == '***'
    assert 'secret-bmc' not in first.out + first.err

    again = tenks('deploy', path, '-f', 'json')
    assert again.code == 0, again.err
    record = again.json()
    assert record['state'] == 'succeeded'
    assert (record['result']['changed'], record['result']['plan']) == (
        [], [])


def hypervisor_uuids(tenks):
    return [n['uuid'] for n in tenks('node', 'list', '-f', 'json').json()]


def test_a_failed_deploy_prints_its_record_and_exits_1(tenks, tmp_path,
                                                       hypervisor):
    assert tenks('deploy', write(tmp_path, 'unit.yaml', SPEC)).code == 0
    path = write(tmp_path, 'other.yaml', dict(SPEC, cluster='other'))
    failed = tenks('deploy', path, '-f', 'json')
    assert failed.code == 1
    record = failed.json()
    assert (record['cluster'], record['state']) == ('other', 'failed')
    assert 'bridge_prefix: bridge brtenks0 on ' in record['error']
    # The error for people, as without -f json, ends stderr.
    assert failed.err.splitlines()[-1].startswith(
        '%s: Deploy of cluster other failed: ' % path), failed.err


def test_teardown_prints_its_record(tenks, tmp_path, hypervisor):
    assert tenks('deploy', write(tmp_path, 'unit.yaml', SPEC)).code == 0
    uuids = hypervisor_uuids(tenks)
    gone = tenks('teardown', 'unit', '-f', 'json')
    assert gone.code == 0, gone.err
    record = gone.json()
    assert (record['kind'], record['state']) == ('teardown', 'succeeded')
    assert sorted(t for t in record['result']['changed']
                  if t.startswith('remove:')) == sorted(
        'remove:%s' % uuid for uuid in uuids)


def test_no_wait_prints_the_operation_id_as_json(tenks, tmp_path,
                                                 hypervisor):
    started = tenks('deploy', write(tmp_path, 'unit.yaml', SPEC),
                    '--no-wait', '-f', 'json')
    assert started.code == 0, started.err
    operation_id = started.json()['id']
    shown = tenks('operation', 'show', '--follow', operation_id, '-f',
                  'json').json()
    assert (shown['id'], shown['state']) == (operation_id, 'succeeded')
