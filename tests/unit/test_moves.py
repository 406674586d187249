"""Host maintenance: which nodes move where (pure), and the move
operations of a conductor with two hostagents on the in-memory bus in
front of fake drivers."""

import time

import pytest

from conductor import moves
from hostagent import rpcapi as hostagent_rpcapi
from hostagent import server as hostagent_server
from tenks import conf as tenks_conf
from tenks import exceptions
from tenks import scheduler
from tests.unit import conftest
from tests.unit import fakes
from tests.unit.conftest import make_spec


def view(aggregates=(), enabled=True, maintenance=False):
    return {'enabled': enabled, 'maintenance': maintenance,
            'availability_zone': 'nova',
            'aggregates': [{'name': a, 'uuid': 'uuid-' + a, 'metadata': {}}
                           for a in aggregates]}


def node(name, host, created='2026-12-01 00:00:00'):
    return {'name': name, 'uuid': 'u-' + name, 'hypervisor': host,
            'created_at': created}


def test_peers_are_the_hosts_of_its_aggregates():
    placement = {'h1': view(['a']), 'h2': view(['a', 'b']), 'h3': view(['b']),
                 'h4': view()}
    assert moves.peers('h1', placement) == {'h1', 'h2'}
    assert moves.peers('h2', placement) == {'h1', 'h2', 'h3'}
    # In no aggregate: every host.
    assert moves.peers('h4', placement) == {'h1', 'h2', 'h3', 'h4'}


def test_rebalance_takes_from_the_fullest_newest_first():
    placement = {'h1': view(['a']), 'h2': view(['a']), 'h3': view(['a']),
                 'off': view(['a'], enabled=False),
                 'other': view(['b'])}
    nodes = ([node('x%d' % i, 'h2') for i in range(4)]
             + [node('y%d' % i, 'h3') for i in range(2)]
             + [node('z%d' % i, 'off') for i in range(5)]
             + [node('w%d' % i, 'other') for i in range(5)])
    chosen = moves.rebalance('h1', placement, nodes)
    # 0/4/2 -> 2/2/2: the disabled host and another aggregate's are left.
    assert [n['name'] for n in chosen] == ['x3', 'x2']
    assert moves.rebalance('h1', placement, [node('x0', 'h2')]) == []


def facts(host, prefix, memory_mb=4096):
    return {'host': host, 'resource_prefix': prefix, 'ipmi_address':
            '10.0.0.%d' % (1 + ord(prefix) - ord('a')),
            'busy_ports': [], 'pool_free_bytes': 10 ** 12,
            'pool_dir': '/var/lib/pool', 'cpus': 8, 'memory_mb': memory_mb,
            'network_driver': 'linuxbridge', 'missing_interfaces': [],
            'physnet_mappings': {}}


def test_hosts_for_moves_never_picks_the_nodes_host_and_spreads():
    spec = make_spec(count=2)
    hosts = {'h1': facts('h1', 'a'), 'h2': facts('h2', 'b'),
             'h3': facts('h3', 'c')}
    recorded = scheduler.schedule(spec, {'h1': hosts['h1']}, [])
    placed = moves.scheduler.hosts_for_moves(
        spec, hosts, recorded, recorded, {'h1', 'h2', 'h3'})
    assert sorted(host for host, _ in placed.values()) == ['h2', 'h3']
    assert {endpoint for _, endpoint in placed.values()} == {
        ('10.0.0.2', 6230), ('10.0.0.3', 6230)}
    with pytest.raises(exceptions.NoValidHost,
                       match='no other hypervisor shares an aggregate'):
        scheduler.hosts_for_moves(spec, hosts, recorded, recorded[:1], {'h1'})
    small = dict(hosts, h2=facts('h2', 'b', memory_mb=64))
    with pytest.raises(exceptions.NoValidHost,
                       match='node tk0 .*MEMORY_MB removed 1'):
        scheduler.hosts_for_moves(spec, small, recorded, recorded[:1],
                                  {'h1', 'h2'})


def test_a_node_never_moves_to_a_hostagent_of_its_libvirt():
    spec = make_spec(count=1)
    daemon = 'qemu:///system on hv (host UUID 1)'
    hosts = {'h1': dict(facts('h1', 'a'), libvirt_daemon=daemon),
             'h2': dict(facts('h2', 'b'), libvirt_daemon=daemon),
             'h3': dict(facts('h3', 'c'), libvirt_daemon='qemu:///system '
                        'on hv3 (host UUID 3)')}
    recorded = scheduler.schedule(spec, {'h1': hosts['h1']}, [])
    placed = scheduler.hosts_for_moves(spec, hosts, recorded, recorded,
                                       {'h1', 'h2', 'h3'})
    assert [host for host, _ in placed.values()] == ['h3']
    # Only h2 left: refused, naming the libvirt they share.
    with pytest.raises(exceptions.NoValidHost) as refused:
        scheduler.hosts_for_moves(spec, hosts, recorded, recorded,
                                  {'h1', 'h2'})
    assert str(refused.value) == (
        'No valid host for node tk0 (node type small (specs[0])): 1 '
        'hypervisor; shared libvirt removed 1 (h2: it shares the libvirt '
        'qemu:///system on hv (host UUID 1) with h1, the node\'s host: a '
        'node moves only to another libvirt)')
    # Hostagents that do not say which libvirt they reach are not refused.
    del hosts['h1']['libvirt_daemon']
    placed = scheduler.hosts_for_moves(spec, hosts, recorded, recorded,
                                       {'h1', 'h2'})
    assert [host for host, _ in placed.values()] == ['h2']


def test_a_node_on_an_existing_volume_cannot_move():
    spec = make_spec(count=1)
    with pytest.raises(exceptions.ChangeRefused, match='existing volume'):
        moves.movable(spec, {'name': 'tk0', 'volumes': [
            {'name': 'v', 'pool': 'p', 'existing': True}]})


@pytest.fixture
def hv2(conf, conductor, monkeypatch, tmp_path):
    """A second hypervisor, 'hv2' (resource prefix b), on the same bus;
    the conductor inspects both."""
    hv = fakes.Hypervisor()
    conftest.use_fake_drivers(monkeypatch, hv)
    conf2 = tenks_conf.new_conf()
    conf2([], default_config_files=[])
    conf2.set_override('state_dir', str(tmp_path / 'hv2'))
    conf2.set_override('host', 'hv2', group='hostagent')
    conf2.set_override('resource_prefix', 'b', group='hostagent')
    agent = hostagent_server.HostAgent(conf2, conductor.bus)
    agent.start()
    monkeypatch.setattr(conductor.registry, 'hypervisors',
                        lambda: ['hv1', 'hv2'])
    conductor.registry.register_agent('hv2', agent.manager.facts())
    # hv1's first heartbeat may have come before the conductor listened.
    hostagent_rpcapi.HostAgentAPI(conductor.bus).ask_to_register()
    deadline = time.monotonic() + 10
    while not any(h['host'] == 'hv1'
                  for h in conductor.registry.list_hypervisors()):
        assert time.monotonic() < deadline, 'hv1 never registered'
        time.sleep(0.01)
    yield hv
    agent.stop()


def wait_all(conductor, answer):
    """The move operations of ``answer``, once ended."""
    ended = []
    for operation_id in answer['operations']:
        try:
            conductor.operations.wait(operation_id)
        except exceptions.TenksError:
            pass  # recorded in the operation
        ended.append(conductor.records.get_operation(operation_id))
    return ended


def deploy_on_hv1(conductor, hypervisor, count, running=True):
    """Deploy ``count`` nodes, all on hv1 (hv2 disabled meanwhile); tk0
    runs if ``running``."""
    conductor.registry.update_hypervisor('hv2', False, 'later')
    conductor.deployments.deploy(make_spec(count=count))
    if running:
        hypervisor.running.add('tk0')
    conductor.registry.update_hypervisor('hv2', True)


def test_maintenance_moves_every_node_and_rebalance_brings_one_back(
        conductor, hypervisor, hv2):
    deploy_on_hv1(conductor, hypervisor, count=2)

    answer = conductor.maintenance.start('hv1', 'fans')
    [operation] = wait_all(conductor, answer)
    assert operation['state'] == 'succeeded', operation['error']
    assert {n.name: n.hypervisor for n in conductor.db.list_nodes()} == {
        'tk0': 'hv2', 'tk1': 'hv2'}
    # Everything of the cluster left hv1, pool and bridge included.
    assert hypervisor.things == {}
    assert hv2.names('domain') == ['tk0', 'tk1']
    assert hv2.names('port') == ['p-btk0-0', 'p-btk1-0']
    assert hv2.names('bridge') == ['bbrtenks0']
    assert hv2.running == {'tk0'}
    assert {r.hypervisor for r in conductor.db.list_resources('unit')} == {
        'hv2'}
    assert conductor.registry.describe('hv1')['state'] == 'maintenance'
    # The deploy sees the nodes where they are now: nothing to change.
    assert conductor.deployments.deploy(make_spec(count=2))['changed'] == []

    answer = conductor.maintenance.stop('hv1', rebalance=True)
    [operation] = wait_all(conductor, answer)
    assert operation['state'] == 'succeeded', operation['error']
    assert {n.name: n.hypervisor for n in conductor.db.list_nodes()} == {
        'tk0': 'hv2', 'tk1': 'hv1'}
    assert hypervisor.names('port') == ['p-tk1-0']
    assert conductor.registry.describe('hv1')['state'] == 'up'


def test_a_move_operation_records_how_many_nodes_it_moved(
        conductor, hypervisor, hv2):
    deploy_on_hv1(conductor, hypervisor, count=2)
    [started] = wait_all(conductor, conductor.maintenance.start('hv1'))
    [stopped] = wait_all(conductor, conductor.maintenance.stop(
        'hv1', rebalance=True))
    assert [(o['state'], o['result']['moved']) for o in (
        started, stopped)] == [('succeeded', 2), ('succeeded', 1)]


def test_a_failed_move_leaves_the_node_whole_where_it_was(
        conductor, hypervisor, hv2):
    deploy_on_hv1(conductor, hypervisor, count=1)
    before = dict(hypervisor.things)
    hv2.fail[('bmc', 'tk0')] = exceptions.DriverError(
        driver='fake', action='start a BMC', reason='port taken')
    [operation] = wait_all(conductor, conductor.maintenance.start('hv1'))
    assert operation['state'] == 'failed'
    assert 'port taken' in operation['error']
    assert 'rolled back to their old hypervisor' in operation['error']
    [tk0] = conductor.db.list_nodes()
    assert tk0.hypervisor == 'hv1'
    # Whole at hv1 and running again; nothing of it at hv2 but the
    # cluster's bridge and pool, which the revert removed too.
    assert hypervisor.things == before
    assert hypervisor.running == {'tk0'}
    assert hv2.things == {}
    assert {r.hypervisor for r in conductor.db.list_resources('unit')} == {
        'hv1'}
    teardown = conductor.teardowns.teardown('unit')
    assert teardown['changed']
    assert hypervisor.things == {}


def test_a_failed_move_says_where_each_node_is(conductor, hypervisor,
                                              hv2):
    deploy_on_hv1(conductor, hypervisor, count=2)
    [tk0] = [n.uuid for n in conductor.db.list_nodes() if n.name == 'tk0']
    ensure = hv2.ensure

    def ensure_but_tk1s_bmc(kind, name, value=True):
        if (kind, name) == ('bmc', 'tk1'):
            # Once tk0 has moved (its record names hv2).
            deadline = time.monotonic() + 10
            while conductor.db.get_node(tk0).hypervisor != 'hv2':
                assert time.monotonic() < deadline
                time.sleep(0.01)
            raise exceptions.DriverError(driver='fake', action='start a '
                                         'BMC', reason='port taken')
        return ensure(kind, name, value)

    hv2.ensure = ensure_but_tk1s_bmc
    [operation] = wait_all(conductor, conductor.maintenance.start('hv1'))
    assert operation['state'] == 'failed'
    assert operation['error'].endswith(
        'those moved stay at their new one: tk0 moved to hv2; tk1 stays '
        'on hv1')
    assert {n.name: n.hypervisor for n in conductor.db.list_nodes()} == {
        'tk0': 'hv2', 'tk1': 'hv1'}


def test_a_move_that_fails_at_its_last_step_leaves_the_node_whole_there(
        conductor, hypervisor, hv2):
    deploy_on_hv1(conductor, hypervisor, count=1)
    hv2.fail[('start', 'tk0')] = exceptions.DriverError(
        driver='fake', action='start domain tk0', reason='no memory')
    [operation] = wait_all(conductor, conductor.maintenance.start('hv1'))
    assert operation['state'] == 'failed'
    assert 'no memory' in operation['error']
    assert operation['error'].endswith('tk0 moved to hv2')
    [tk0] = conductor.db.list_nodes()
    assert tk0.hypervisor == 'hv2'
    # Whole at hv2, with the cluster's pool and bridge there; nothing of
    # the cluster is left at hv1.
    assert sorted(hv2.things) == [
        ('bmc', 'tk0'), ('bridge', 'bbrtenks0'), ('domain', 'tk0'),
        ('pool', 'tenks-bunit'), ('port', 'p-btk0-0'), ('volume', 'tk0vol0')]
    assert hypervisor.things == {}
    assert {(r.hypervisor, r.kind, r.name)
            for r in conductor.db.list_resources('unit')} == {
        ('hv2', kind, name) for kind, name in hv2.things}
    # A teardown finds everything where the record says.
    assert conductor.teardowns.teardown('unit')['changed']
    assert hv2.things == {}


def test_a_move_between_hostagents_of_one_libvirt_is_refused_first(
        conductor, hypervisor, hv2):
    deploy_on_hv1(conductor, hypervisor, count=1)
    before = dict(hypervisor.things)
    hv2.libvirt_daemon = hypervisor.libvirt_daemon
    [operation] = wait_all(conductor, conductor.maintenance.start('hv1'))
    assert operation['state'] == 'failed'
    assert 'hv2: it shares the libvirt %s with hv1' % (
        hypervisor.libvirt_daemon) in operation['error']
    # Nothing was done: not even a power-off.
    assert hypervisor.things == before
    assert hypervisor.running == {'tk0'}
    assert hv2.things == {}
    assert [n.hypervisor for n in conductor.db.list_nodes()] == ['hv1']


def test_a_busy_cluster_is_left_for_later_and_said_so(conductor, hypervisor,
                                                      hv2):
    deploy_on_hv1(conductor, hypervisor, count=1, running=False)
    conductor.locks.acquire('unit')
    try:
        answer = conductor.maintenance.start('hv1')
    finally:
        conductor.locks.release('unit')
    assert answer['operations'] == []
    assert 'locked by another operation' in answer['refused']['unit']
    # In maintenance all the same: a second start moves what is left.
    assert conductor.registry.describe('hv1')['state'] == 'maintenance'
    [operation] = wait_all(conductor, conductor.maintenance.start('hv1'))
    assert operation['state'] == 'succeeded', operation['error']
    assert [n.hypervisor for n in conductor.db.list_nodes()] == ['hv2']


def test_a_moved_node_leaves_its_bmc_fault_behind(conductor, hypervisor,
                                                  hv2):
    """Its BMC is made again on the new host, well; the record says so."""
    deploy_on_hv1(conductor, hypervisor, count=1, running=False)
    conductor.bmc_faults.set('tk0', 'error')
    assert hypervisor.bmc_faults == {'tk0': {'kind': 'error'}}
    [operation] = wait_all(conductor, conductor.maintenance.start('hv1'))
    assert operation['state'] == 'succeeded', operation['error']
    [node] = conductor.db.list_nodes()
    assert (node.hypervisor, node.bmc_fault) == ('hv2', None)
    assert (hypervisor.bmc_faults, hv2.bmc_faults) == ({}, {})
