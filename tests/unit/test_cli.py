"""The ``tenks`` CLI in-process: embedded conductor and hostagent on the
in-memory bus, fake drivers (see conftest)."""

import logging
import socket

import oslo_messaging as messaging
import pytest
import yaml

from conductor import teardowns
from tenks import exceptions
from tenks import policy
from tenks.cli import client
from tenks.cli import main
from tenks.cli import nodes as node_commands

SPEC = {
    'cluster': 'unit',
    'node_types': {'small': {
        'memory_mb': 128, 'vcpus': 1,
        'volumes': [{'capacity': '1GiB'}, {'capacity': '2GiB'}],
        'physical_networks': ['physnet1'],
    }},
    'specs': [{'type': 'small', 'count': 2}],
    'physical_networks': ['physnet1'],
    'ipmi_password': 'secret-bmc',
}


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


@pytest.fixture
def deployed(tenks, tmp_path, hypervisor):
    done = tenks('deploy', write(tmp_path, 'unit.yaml', SPEC))
    assert done.code == 0, done.err
    return tenks


def test_json_and_yaml_print_lists_and_mappings(deployed):
    nodes = deployed('node', 'list', '-f', 'json').json()
    assert [n['name'] for n in nodes] == ['tk0', 'tk1']
    for node in nodes:
        assert isinstance(node['macs'], list) and len(node['macs']) == 1
        assert node['macs'][0].startswith('52:54:00:')

    node = deployed('node', 'show', 'tk1', '-f', 'json').json()
    assert node['macs'] == [nodes[1]['macs'][0]]
    assert [nic['mac'] for nic in node['nics']] == node['macs']
    assert [v['capacity'] for v in node['volumes']] == [
        1024 ** 3, 2 * 1024 ** 3]
    assert node['bmc_port'] == 6231 and node['state'] == 'deployed'
    by_uuid = yaml.safe_load(
        deployed('node', 'show', node['uuid'], '-f', 'yaml').out)
    assert by_uuid == node

    cluster = deployed('cluster', 'show', 'unit', '-f', 'json').json()
    assert cluster['state'] == 'deployed'
    assert cluster['nodes'] == ['tk0', 'tk1']
    assert cluster['spec']['node_types']['small']['vcpus'] == 1
    assert cluster['spec']['ipmi_password'] == '***'

    [operation] = deployed('operation', 'list', '-f', 'json').json()
    assert operation['state'] == 'succeeded'
    assert operation['progress'] and all(
        isinstance(done_total, list) and done_total[0] == done_total[1]
        for done_total in operation['progress'].values())
    shown = yaml.safe_load(
        deployed('operation', 'show', operation['id'], '-f', 'yaml').out)
    assert shown['progress'] == operation['progress']

    events = deployed('events', '--cluster', 'unit', '-f', 'json').json()
    created = [e for e in events if e['event_type'] == 'tenks.node.create.end']
    assert sorted(e['payload']['name'] for e in created) == ['tk0', 'tk1']

    # The embedded hostagent registers as it starts, which a command
    # run at once may not see yet.
    for _ in range(50):
        hypervisors = deployed('hypervisor', 'list', '-f', 'json').json()
        if hypervisors:
            break
    [hypervisor] = hypervisors
    assert isinstance(hypervisor['physnet_mappings'], dict)


def test_a_failed_deploy_names_its_spec_file(deployed, tmp_path,
                                             hypervisor):
    """The error of a deploy refused before anything is made names the
    file, then the field of it to change."""
    path = write(tmp_path, 'other.yaml', dict(SPEC, cluster='other'))
    result = deployed('deploy', path)
    assert result.code == 1
    assert result.err.startswith('%s: Deploy of cluster other failed: '
                                 % path), result.err
    assert 'bridge_prefix: bridge brtenks0 on ' in result.err
    assert 'is recorded for cluster unit' in result.err


def test_tables_stay_readable(deployed):
    nodes = deployed('node', 'list', '-f', 'json').json()
    table = deployed('node', 'list').out
    assert nodes[0]['macs'][0] in table
    assert '[' not in table and '{' not in table

    operations = deployed('operation', 'list', '-c', 'progress').out
    assert '[' not in operations and 'node 2/2' in operations

    shown = deployed('cluster', 'show', 'unit').out
    assert "ipmi_password: '***'" in shown
    assert 'secret-bmc' not in shown
    assert 'tk0, tk1' in shown

    nics = deployed('node', 'show', 'tk0', '-c', 'nics').out
    assert ('| nics  | bridge=brtenks0, bridge_type=linuxbridge, '
            'mac=52:54:00:') in nics
    assert ', physnet=physnet1, tap=p-tk0-0 |' in nics


def test_node_show_unknown_node(deployed):
    missing = deployed('node', 'show', 'tk9')
    assert missing.code == 1
    assert 'No node named tk9 or with that UUID' in missing.err
    other = deployed('node', 'show', 'tk0', '--cluster', 'other')
    assert other.code == 1
    assert 'No node named tk0 or with that UUID in cluster other' in (
        other.err)


def test_find_node_by_uuid_or_unique_name():
    nodes = [{'name': 'tk0', 'uuid': 'u1', 'cluster': 'a',
              'hypervisor': 'hv1'},
             {'name': 'tk0', 'uuid': 'u2', 'cluster': 'b',
              'hypervisor': 'hv2'},
             {'name': 'u1', 'uuid': 'u3', 'cluster': 'b',
              'hypervisor': 'hv2'}]
    assert node_commands.find_node(nodes, 'u2')['uuid'] == 'u2'
    # A UUID wins over a node that happens to be named like it.
    assert node_commands.find_node(nodes, 'u1')['uuid'] == 'u1'
    with pytest.raises(exceptions.NodeAmbiguous) as info:
        node_commands.find_node(nodes, 'tk0')
    assert str(info.value) == (
        "2 nodes are named tk0 (cluster a on hv1, cluster b on hv2): name "
        "the cluster with --cluster, or use the node's UUID")


def test_cluster_show_unknown_cluster(deployed):
    result = deployed('cluster', 'show', 'nope')
    assert result.code == 1
    assert 'No cluster named nope is deployed' in result.err


def test_read_only_commands_create_nothing(tenks, state_dir):
    for args in (['node', 'list'], ['cluster', 'list'],
                 ['operation', 'list'], ['events']):
        result = tenks(*args, '-f', 'json')
        assert (result.code, result.json()) == (0, []), result.err
    assert tenks('cluster', 'show', 'x').code == 1
    assert tenks('node', 'show', 'x').code == 1
    assert not state_dir.exists()


def test_read_only_commands_read_only_a_finished_schema(tenks, state_dir):
    """A database another command is still creating reads as empty; one
    at another schema revision is refused with a message, never a raw
    SQL error."""
    import sqlalchemy as sa
    state_dir.mkdir()
    engine = sa.create_engine('sqlite:///%s' % (state_dir / 'state.sqlite'))
    with engine.begin() as connection:
        # What alembic has made first: its version table, still empty.
        connection.exec_driver_sql(
            'CREATE TABLE tenks_alembic_version (version_num VARCHAR(32))')
    result = tenks('cluster', 'list', '-f', 'json')
    assert (result.code, result.json()) == (0, []), result.err
    with engine.begin() as connection:
        connection.exec_driver_sql(
            "INSERT INTO tenks_alembic_version VALUES ('0123abcd')")
    result = tenks('node', 'list')
    assert result.code == 1
    assert 'schema revision 0123abcd' in result.err
    assert 'Traceback' not in result.err and 'sqlite3' not in result.err


def test_validate_prints_every_problem_of_every_file(tenks, tmp_path,
                                                      state_dir):
    good = write(tmp_path, 'good.yaml', SPEC)
    bad = write(tmp_path, 'bad.yaml', dict(
        SPEC, specs=[{'type': 'huge', 'count': -1}], bridge_type='ovs'))
    broken = write(tmp_path, 'broken.yaml', 'node_types: [\n')
    result = tenks('validate', good, bad, broken)
    assert result.code == 1
    assert result.out == '%s: valid: cluster unit, 2 node(s)\n' % good
    for problem in ("%s: invalid cluster spec" % bad,
                    'specs[0].type: unknown node type',
                    'specs[0].count:', 'bridge_type:',
                    '%s: invalid cluster spec' % broken, 'invalid YAML'):
        assert problem in result.err
    assert not state_dir.exists()


def test_validate_accepts_tenks_override_files(tenks):
    data = __import__('pathlib').Path(__file__).parent.parent / 'data'
    result = tenks('validate', data / 'ansible-override.yml',
                   data / 'ansible-ci-overrides.yml')
    assert result.code == 0, result.err
    assert 'valid: cluster default, 2 node(s)' in result.out
    assert 'valid: cluster default, 3 node(s)' in result.out
    assert result.err == (
        '%s: ignored: ansible_python_interpreter, '
        'python_upper_constraints_url (they only steer the Ansible-based '
        'Tenks)\n' % (data / 'ansible-ci-overrides.yml'))


def test_transport_url_from_config_files_or_environment(tmp_path,
                                                         monkeypatch):
    monkeypatch.delenv('TENKS_TRANSPORT_URL', raising=False)
    config = write(tmp_path, 'tenks.conf',
                   '[DEFAULT]\ntransport_url = rabbit://u:p@192.0.2.1:5672/\n')
    app = main.TenksApp()
    app.options = app.parser.parse_args(['--config-file', str(config)])
    assert client.transport_url(app.conf) == 'rabbit://u:p@192.0.2.1:5672/'
    monkeypatch.setenv('TENKS_TRANSPORT_URL', 'rabbit://other/')
    assert client.transport_url(app.conf) == 'rabbit://other/'

    monkeypatch.delenv('TENKS_TRANSPORT_URL')
    app = main.TenksApp()
    app.options = app.parser.parse_args([])
    assert client.transport_url(app.conf) is None
    assert isinstance(client.connect(app.conf, read_only=True),
                      client.StateReader)


def test_aggregate_and_hypervisor_commands_act_as_admin(deployed):
    # The embedded hostagent registers as it starts.
    for _ in range(50):
        hypervisors = deployed('hypervisor', 'list', '-f', 'json').json()
        if hypervisors:
            break
    [host] = [h['host'] for h in hypervisors]
    created = deployed('aggregate', 'create', '--zone', 'az1', '--property',
                       'ssd=true', 'a1', '-f', 'json').json()
    assert (created['name'], created['availability_zone'],
            created['properties'], created['hosts']) == (
        'a1', 'az1', {'ssd': 'true'}, [])
    assert deployed('aggregate', 'add', 'host', 'a1', host, '-f',
                    'json').json()['hosts'] == [host]
    refused = deployed('aggregate', 'remove', 'host', 'a1', host)
    assert refused.code == 1
    assert 'host %s is enabled: disable it first' % host in refused.err
    assert deployed('hypervisor', 'set', '--disable', '--reason', 'fan',
                    host).code == 0
    shown = deployed('hypervisor', 'show', host, '-f', 'json').json()
    assert (shown['state'], shown['disabled_reason'], shown['aggregates'],
            shown['availability_zone']) == ('disabled', 'fan', ['a1'], 'az1')
    assert shown['usage']['MEMORY_MB'] == 256
    assert sorted(a['name'] for a in shown['allocations']) == ['tk0', 'tk1']
    table = deployed('hypervisor', 'show', host).out
    assert 'MEMORY_MB: total=' in table and 'used=256' in table
    assert deployed('aggregate', 'set', '--name', 'b1', '--property',
                    'rack=2', 'a1').code == 0
    assert deployed('aggregate', 'unset', '--property', 'ssd',
                    'b1').code == 0
    listed = deployed('aggregate', 'list', '--long', '-f', 'json').json()
    assert [(a['name'], a['properties']) for a in listed] == [
        ('b1', {'rack': '2'})]
    assert deployed('aggregate', 'remove', 'host', 'b1', host, '-f',
                    'json').json()['hosts'] == []
    assert deployed('aggregate', 'delete', 'b1').code == 0
    assert deployed('aggregate', 'list', '-f', 'json').json() == []
    assert deployed('hypervisor', 'set', '--enable', host).code == 0


def test_aggregate_changes_print_what_placement_refused(deployed,
                                                        monkeypatch):
    from conductor import aggregates
    monkeypatch.setattr(aggregates.Aggregates, '_mirror',
                        lambda self, host=None, gone=None: [
                            'Placement answered HTTP 403 (%s)'
                            % (host or 'gone')])
    for _ in range(50):
        hypervisors = deployed('hypervisor', 'list', '-f', 'json').json()
        if hypervisors:
            break
    [host] = [h['host'] for h in hypervisors]
    deployed('aggregate', 'create', 'a1')
    added = deployed('aggregate', 'add', 'host', 'a1', host, '-f', 'json')
    # The change stands, and the refusal is on stderr.
    assert added.json()['hosts'] == [host]
    assert added.err == 'Warning: Placement answered HTTP 403 (%s)\n' % host
    deployed('hypervisor', 'set', '--disable', host)
    removed = deployed('aggregate', 'remove', 'host', 'a1', host)
    assert removed.code == 0
    assert removed.err == ('Warning: Placement answered HTTP 403 (%s)\n'
                           % host)
    deleted = deployed('aggregate', 'delete', 'a1')
    assert (deleted.code, deleted.err) == (
        0, 'Warning: Placement answered HTTP 403 (gone)\n')
    deployed('hypervisor', 'set', '--enable', host)


def test_teardown_force_reaches_the_conductor(deployed, monkeypatch):
    asked = []
    submit = teardowns.Teardowns.submit

    def recorded(self, name, force=False):
        asked.append((name, force))
        return submit(self, name, force)

    monkeypatch.setattr(teardowns.Teardowns, 'submit', recorded)
    done = deployed('teardown', '--force', 'unit')
    assert done.code == 0, done.err
    assert asked == [('unit', True)]


def test_hypervisor_maintenance_commands(deployed):
    """Embedded, the one hypervisor has nowhere to move its nodes: the
    start says so and fails, the host stays in maintenance until the
    stop."""
    for _ in range(50):
        hypervisors = deployed('hypervisor', 'list', '-f', 'json').json()
        if hypervisors:
            break
    [host] = [h['host'] for h in hypervisors]
    started = deployed('hypervisor', 'maintenance', 'start', '--reason',
                       'fans', host)
    assert started.code == 1
    assert ('No valid host for node tk0: no other hypervisor shares an '
            'aggregate with %s' % host) in started.err
    shown = deployed('hypervisor', 'show', host, '-f', 'json').json()
    assert (shown['state'], shown['disabled_reason']) == ('maintenance',
                                                          'fans')
    assert {n['hypervisor'] for n in deployed(
        'node', 'list', '-f', 'json').json()} == {host}
    stopped = deployed('hypervisor', 'maintenance', 'stop', '--rebalance',
                       host)
    assert stopped.code == 0, stopped.err
    assert 'out of maintenance: 0 node(s) moved' in stopped.out
    shown = deployed('hypervisor', 'show', host, '-f', 'json').json()
    assert (shown['state'], shown['enabled']) == ('up', True)


class Moving:
    """A client whose maintenance start submits move operations that
    succeed with ``results`` ({operation id: result})."""

    def __init__(self, results):
        self.results = results

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def start_host_maintenance(self, host, reason):
        return {'host': host, 'operations': sorted(self.results),
                'refused': {}}

    def wait(self, operation_id, reconnect_timeout, notice, on_update=None):
        return {'id': operation_id, 'cluster': 'unit',
                'state': 'succeeded', 'error': None,
                'result': self.results[operation_id]}


@pytest.mark.parametrize('results,moved', [
    # The count each move operation's result gives, whatever its tasks
    # are named.
    ({'op1': {'changed': ['move:tk0'], 'moved': 2, 'warnings': []},
      'op2': {'changed': [], 'moved': 0, 'warnings': []}}, 2),
    # A result of a conductor that did not count: its ':retire' tasks.
    ({'op1': {'changed': ['tk0:stop', 'tk0:retire', 'tk1:retire'],
              'warnings': []}}, 2),
])
def test_maintenance_says_how_many_nodes_its_operations_moved(
        tenks, monkeypatch, results, moved):
    monkeypatch.setattr(client, 'connect', lambda *a, **kw: Moving(results))
    started = tenks('hypervisor', 'maintenance', 'start', 'hv1')
    assert started.code == 0, started.err
    assert started.out.startswith(
        'Hypervisor hv1 in maintenance: %d node(s) moved in ' % moved)


# Following an operation over the bus (RemoteClient.wait), with a fake
# clock and a fake conductor.


class Clock:

    def __init__(self):
        self.now = 0.0
        self.slept = []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


class Conductor:
    """Answers get_operation with each of ``answers`` in turn (raising
    those that are errors); each question takes a second."""

    def __init__(self, clock, answers):
        self.clock = clock
        self.answers = list(answers)

    def get_operation(self, context, operation_id):
        assert context.roles == ['admin']
        self.clock.now += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return {'id': operation_id, 'state': answer}


def remote(monkeypatch, answers):
    clock = Clock()
    monkeypatch.setattr(client, 'time', clock)
    tenks = client.RemoteClient.__new__(client.RemoteClient)
    tenks.context = policy.admin_context()
    tenks.poll = Conductor(clock, answers)
    return tenks, clock


TIMEOUT = messaging.MessagingTimeout('Timed out waiting for a reply')
UNREACHABLE = messaging.MessageDeliveryFailure(
    'Unable to connect to AMQP server')


def test_waiting_over_the_bus_follows_the_operation_through_lost_answers(
        monkeypatch):
    """A reply timeout, a broker that cannot be reached, a conductor
    restarting: the same operation is asked about again until it ends."""
    tenks, clock = remote(monkeypatch, ['running', TIMEOUT, UNREACHABLE,
                                        TIMEOUT, 'running', 'failed'])
    notices = []
    operation = tenks.wait('op1', 600, notices.append)
    assert operation == {'id': 'op1', 'state': 'failed'}
    assert notices == [
        'No answer from the conductor about operation op1 (MessagingTimeout: '
        'Timed out waiting for a reply); still following it '
        '(--reconnect-timeout 600 s)',
        'The conductor answers again: following operation op1']
    # Pauses growing while nothing answers, short again after.
    assert clock.slept == [0.2, 0.2, 0.4, 0.8, 0.2]


def test_waiting_over_the_bus_gives_up_after_the_reconnect_timeout(
        monkeypatch):
    tenks, clock = remote(monkeypatch, [TIMEOUT] * 20)
    with pytest.raises(exceptions.ConductorLost) as raised:
        tenks.wait('op1', 30)
    assert str(raised.value) == (
        'Stopped following operation op1: no answer from the conductor for '
        '30 s (--reconnect-timeout; last: MessagingTimeout: Timed out '
        'waiting for a reply). It may still run: "tenks operation show op1" '
        'shows how it is doing')
    assert 30 <= clock.now < 30 + 1 + client.BACKOFF_MAX
    assert max(clock.slept) == client.BACKOFF_MAX


def test_audit_exits_1_on_drift(deployed, hypervisor):
    clean = deployed('audit')
    assert clean.code == 0, clean.err
    assert clean.err.startswith('Audit: 0 removed, 0 drifted, 0 of others '
                                'left alone, in ')
    assert deployed('audit', '-f', 'json').json() == []
    del hypervisor.things[('domain', 'tk1')]
    drifted = deployed('audit', 'unit', '-f', 'json')
    assert drifted.code == 1
    [row] = drifted.json()
    assert (row['hypervisor'], row['kind'], row['name'], row['status'],
            row['cluster']) == (socket.gethostname(), 'domain', 'tk1',
                                'missing', 'unit')
    assert row['mark'].startswith('tenks:unit:') and row['detail'] is None
    table = deployed('audit', '--clean')
    assert table.code == 1
    assert 'tk1' in table.out and 'missing' in table.out


@pytest.mark.parametrize('args, level', [
    ([], logging.WARNING),
    (['-v'], logging.INFO),
    (['-vv'], logging.DEBUG),
    (['--log-file', 'LOG'], logging.DEBUG),
])
def test_the_root_logger_builds_only_records_a_handler_shows(
        tmp_path, args, level):
    """cliff leaves the root logger at DEBUG and filters in its
    handlers: then every library's debug call builds a record."""
    app = main.TenksApp()
    root = logging.getLogger()
    handlers, was = root.handlers[:], root.level
    try:
        app.options = app.parser.parse_args(
            [str(tmp_path / 'tenks.log') if a == 'LOG' else a
             for a in args])
        root.handlers[:] = []  # pytest's own, which take everything
        app.configure_logging()
        assert root.level == level
        assert logging.getLogger('pyroute2').isEnabledFor(
            logging.DEBUG) == (level == logging.DEBUG)
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:] = handlers
        root.setLevel(was)
