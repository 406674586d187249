"""Reconfiguring a deployed cluster through the embedded conductor, on
the fake hypervisor: what changes there and in the records, what a
failure rolls back, and what a deploy costs in SQL statements."""

import collections
import datetime
import time

import pytest
import sqlalchemy as sa
from taskflow import exceptions as tf_exceptions

from tenks import exceptions
from tests.unit import fakes
from tests.unit.conftest import make_spec

NODE_KINDS = ('volume', 'port', 'domain', 'bmc')


def sized(count=1, memory_mb=128, vcpus=1, volumes=('1GiB',),
          physnets=('physnet1',), **top):
    """The unit spec with its one node type shaped as asked."""
    top.setdefault('physical_networks', ['physnet1', 'physnet2'])
    return make_spec(count=count, node_types={'small': {
        'memory_mb': memory_mb, 'vcpus': vcpus,
        'volumes': [{'capacity': c} for c in volumes],
        'physical_networks': list(physnets)}}, **top)


def snapshot(conductor, hv):
    """What a user can see: the fake hypervisor, and the records."""
    db = conductor.db
    cluster = db.get_cluster('unit')
    return {
        'things': dict(hv.things),
        'resources': sorted(
            (r.hypervisor, r.kind, r.name, r.state, r.operation)
            for r in db.list_resources()),
        'nodes': sorted(
            (n.uuid, n.name, n.state, n.vcpus, n.memory_mb, n.bmc_port,
             str(n.volumes), str(n.nics)) for n in db.list_nodes()),
        'spec': cluster and cluster.spec,
    }


def assert_agree(conductor, hv):
    """The node records, the resource records and the fake hypervisor
    tell the same story."""
    db = conductor.db
    nodes = db.list_nodes(cluster='unit')
    assert {n.state for n in nodes} <= {'deployed'}
    assert hv.names('domain') == sorted(n.name for n in nodes)
    expected = set()
    for n in nodes:
        expected |= {('volume', v['name']) for v in n.volumes}
        expected |= {('port', nic['tap']) for nic in n.nics}
        expected |= {('domain', n.name), ('bmc', n.name)}
        assert hv.things[('bmc', n.name)] == (n.bmc_address, n.bmc_port)
        domain = hv.things[('domain', n.name)]
        assert (domain['memory_mb'], domain['vcpus']) == (n.memory_mb,
                                                          n.vcpus)
        assert [nic['mac'] for nic in domain['nics']] == [
            nic['mac'] for nic in n.nics]
        for volume in n.volumes:
            assert hv.things[('volume', volume['name'])] == (
                volume['capacity'])
    on_host = {key for key in hv.things if key[0] in NODE_KINDS}
    assert on_host == expected
    recorded = {(r.kind, r.name) for r in db.list_resources('unit')
                if r.kind in NODE_KINDS}
    assert recorded == expected
    assert {r.state for r in db.list_resources('unit')} == {'present'}


def names(conductor):
    return sorted(n.name for n in conductor.db.list_nodes(cluster='unit'))


def test_count_up_adds_nodes_and_keeps_the_others(conductor, hypervisor):
    conductor.deployments.deploy(make_spec(count=2))
    before = {key: value for key, value in hypervisor.things.items()}
    macs = {nic['mac'] for n in conductor.db.list_nodes() for nic in n.nics}
    result = conductor.deployments.deploy(make_spec(count=4))
    assert names(conductor) == ['tk0', 'tk1', 'tk2', 'tk3']
    assert_agree(conductor, hypervisor)
    # What was there is untouched; the new ones take fresh MACs and
    # BMC ports.
    assert {k: hypervisor.things[k] for k in before} == before
    new = [n for n in conductor.db.list_nodes() if n.name in ('tk2', 'tk3')]
    assert not macs & {nic['mac'] for n in new for nic in n.nics}
    assert sorted(n.bmc_port for n in new) == [6232, 6233]
    assert sorted(result['changed']) == sorted(
        'node:%s' % n.uuid for n in new)
    assert conductor.db.get_cluster('unit').spec['specs'][0]['count'] == 4


def test_count_down_removes_the_newest_first(conductor, hypervisor):
    conductor.deployments.deploy(make_spec(count=4))
    result = conductor.deployments.deploy(make_spec(count=2))
    assert names(conductor) == ['tk0', 'tk1']
    assert_agree(conductor, hypervisor)
    assert {c['node'] for c in result['plan'] if c['action'] == 'delete'
            } == {'tk2', 'tk3'}
    # Newest by creation, not by name: tk0 made last goes first.
    db = conductor.db
    tk0 = next(n for n in db.list_nodes() if n.name == 'tk0')
    db.update_node(tk0.uuid, created_at=datetime.datetime.now(
        datetime.timezone.utc) + datetime.timedelta(hours=1))
    conductor.deployments.deploy(make_spec(count=1))
    assert names(conductor) == ['tk1']
    assert_agree(conductor, hypervisor)
    assert hypervisor.names('bmc') == ['tk1']


def test_resize_redefines_the_domains_in_place(conductor, hypervisor):
    conductor.deployments.deploy(sized(count=2))
    uuids = sorted(n.uuid for n in conductor.db.list_nodes())
    conductor.deployments.deploy(sized(count=2, memory_mb=256, vcpus=2))
    assert sorted(n.uuid for n in conductor.db.list_nodes()) == uuids
    for name in ('tk0', 'tk1'):
        domain = hypervisor.things[('domain', name)]
        assert (domain['memory_mb'], domain['vcpus']) == (256, 2)
    assert_agree(conductor, hypervisor)


def test_a_running_node_is_resized_only_when_forced(conductor, hypervisor):
    conductor.deployments.deploy(sized(count=1))
    hypervisor.running.add('tk0')
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.deployments.deploy(sized(count=1, memory_mb=256))
    assert 'tk0' in str(raised.value) and 'memory_mb' in str(raised.value)
    assert hypervisor.things[('domain', 'tk0')]['memory_mb'] == 128
    assert_agree(conductor, hypervisor)
    conductor.deployments.deploy(sized(count=1, memory_mb=256), force=True)
    assert hypervisor.things[('domain', 'tk0')]['memory_mb'] == 256
    assert 'tk0' in hypervisor.running
    assert_agree(conductor, hypervisor)


def test_volume_added_and_grown(conductor, hypervisor):
    conductor.deployments.deploy(sized(count=1))
    conductor.deployments.deploy(sized(count=1, volumes=('2GiB', '1GiB')))
    assert hypervisor.things[('volume', 'tk0vol0')] == 2 * 1024 ** 3
    assert hypervisor.things[('volume', 'tk0vol1')] == 1024 ** 3
    domain = hypervisor.things[('domain', 'tk0')]
    assert [d['volume'] for d in domain['disks']] == ['tk0vol0', 'tk0vol1']
    assert_agree(conductor, hypervisor)


def test_nic_added_then_removed(conductor, hypervisor):
    conductor.deployments.deploy(sized(count=1))
    [mac] = [nic['mac'] for nic in conductor.db.list_nodes()[0].nics]
    conductor.deployments.deploy(sized(count=1,
                                       physnets=('physnet1', 'physnet2')))
    assert hypervisor.names('port') == ['p-tk0-0', 'p-tk0-1']
    assert hypervisor.names('bridge') == ['brtenks0', 'brtenks1']
    [node] = conductor.db.list_nodes()
    assert [nic['physnet'] for nic in node.nics] == ['physnet1', 'physnet2']
    assert node.nics[0]['mac'] == mac
    assert_agree(conductor, hypervisor)
    # Back to one network: the NIC goes, and the bridge no node uses.
    conductor.deployments.deploy(sized(count=1,
                                       physical_networks=['physnet1']))
    assert hypervisor.names('port') == ['p-tk0-0']
    assert hypervisor.names('bridge') == ['brtenks0']
    assert [r.name for r in conductor.db.list_resources('unit')
            if r.kind == 'bridge'] == ['brtenks0']
    assert_agree(conductor, hypervisor)


def test_bridges_keep_their_names_while_their_physnets_exist(
        conductor, hypervisor):
    three = ['physnet1', 'physnet2', 'physnet3']
    conductor.deployments.deploy(sized(
        count=1, physnets=('physnet2', 'physnet3'),
        physical_networks=three,
        physnet_mappings={'physnet2': 'lo'}))
    assert hypervisor.names('bridge') == ['brtenks0', 'brtenks1',
                                          'brtenks2']
    uplinks = sorted(name for kind, name in hypervisor.things
                     if kind == 'uplink')
    # physnet1 goes: physnet2 and physnet3 keep their bridges, and the
    # uplink stays where it is.
    conductor.deployments.deploy(sized(
        count=1, physnets=('physnet2', 'physnet3'),
        physical_networks=three[1:],
        physnet_mappings={'physnet2': 'lo'}))
    assert hypervisor.names('bridge') == ['brtenks1', 'brtenks2']
    assert sorted(name for kind, name in hypervisor.things
                  if kind == 'uplink') == uplinks
    [node] = conductor.db.list_nodes()
    assert [nic['bridge'] for nic in node.nics] == ['brtenks1', 'brtenks2']
    # A new physnet takes the lowest index no bridge of the cluster has.
    conductor.deployments.deploy(sized(
        count=1, physnets=('physnet2', 'physnet3'),
        physical_networks=three[1:] + ['physnet4'],
        physnet_mappings={'physnet2': 'lo'}))
    assert hypervisor.names('bridge') == ['brtenks0', 'brtenks1',
                                          'brtenks2']
    # One that comes as another goes never takes the index of the one
    # going: its bridge is removed at the end of that same deploy.
    conductor.deployments.deploy(sized(
        count=1, physnets=('physnet2',),
        physical_networks=['physnet2', 'physnet4',
        'physnet5'],
        physnet_mappings={'physnet2': 'lo'}))
    assert hypervisor.names('bridge') == ['brtenks0', 'brtenks1',
                                          'brtenks3']
    assert conductor.db.get_cluster('unit').spec['physnet_indices'] == {
        'physnet2': 1, 'physnet4': 0, 'physnet5': 3}
    assert_agree(conductor, hypervisor)
    conductor.teardowns.teardown('unit')
    assert hypervisor.things == {}


def test_a_physnet_only_the_hostagent_maps(conductor, hypervisor, conf):
    """As with the Ansible-based Tenks' per-host variables: the spec does
    not declare it, the hostagent maps it."""
    spec = sized(count=1, physnets=('physnet1', 'pn9'),
                 physical_networks=['physnet1'])
    with pytest.raises(exceptions.NoValidHost) as raised:
        conductor.deployments.deploy(spec)
    assert ('node type small: its physical network pn9 is neither declared '
            '(physical_networks) nor mapped by a hypervisor (mapped: none)'
            in str(raised.value))
    assert hypervisor.things == {}
    conf.set_override('physnet_mappings', {'pn9': 'lo'}, group='hostagent')
    plan = conductor.deployments.plan(spec)
    assert plan['notes'] == [
        'physical network physnet1 is mapped on no hypervisor: its bridges '
        'are isolated, with no uplink']
    conductor.deployments.deploy(spec)
    [node] = conductor.db.list_nodes()
    assert [(nic['physnet'], nic['bridge']) for nic in node.nics] == [
        ('physnet1', 'brtenks0'), ('pn9', 'brtenks1')]
    assert ('uplink', 'brtenks1') in hypervisor.things
    assert_agree(conductor, hypervisor)


def test_a_physnet_mapped_to_the_host_s_uplink_needs_an_opt_in(
        conductor, hypervisor):
    """A bridge that took over the interface of the host's default
    route, or lo, would cut the host's own traffic: refused by plan and
    deploy alike, unless the spec lists it in allow_host_uplinks."""
    hypervisor.uplinks = ['eth0', 'lo']
    for source, why in (('eth0', 'what its default route leaves by'),
                        ('lo', 'the loopback interface')):
        spec = sized(count=1, physnet_mappings={'physnet1': source})
        for attempt in (conductor.deployments.plan,
                        conductor.deployments.deploy):
            with pytest.raises(exceptions.UplinkRefused) as raised:
                attempt(spec)
            assert str(raised.value) == (
                "physnet_mappings.physnet1: %s is %s on hypervisor hv1: a "
                "bridge would take over the host's own traffic; list it in "
                "allow_host_uplinks to map it all the same" % (source, why))
        assert hypervisor.things == {}
    conductor.deployments.deploy(sized(
        count=1, physnet_mappings={'physnet1': 'lo'},
        allow_host_uplinks=['lo']))
    assert ('uplink', 'brtenks0') in hypervisor.things


def two_entries(order=(0, 1)):
    entries = [{'type': 'small', 'count': 2, 'node_name_prefix': 'a'},
               {'type': 'big', 'count': 1, 'node_name_prefix': 'b'}]
    return make_spec(node_types={
        'small': {'memory_mb': 128, 'vcpus': 1},
        'big': {'memory_mb': 256, 'vcpus': 2}},
        specs=[entries[i] for i in order])


def test_reordering_specs_runs_no_flow(conductor, hypervisor):
    conductor.deployments.deploy(two_entries())
    before = snapshot(conductor, hypervisor)
    result = conductor.deployments.deploy(two_entries(order=(1, 0)))
    assert result['changed'] == [] and result['plan'] == []
    # No flow ran, none was saved.
    with pytest.raises(tf_exceptions.NotFound):
        conductor.runner.backend.get_connection().get_logbook(
            result['operation'])
    after = snapshot(conductor, hypervisor)
    assert after['things'] == before['things']
    assert after['resources'] == before['resources']
    # Each node follows its entry to its new place.
    index = {n.name: n.spec_index for n in conductor.db.list_nodes()}
    assert index == {'a0': 1, 'a1': 1, 'b0': 0}
    assert after['spec']['specs'][0]['node_name_prefix'] == 'b'
    # And a count changed afterwards goes to the right entry.
    grown = two_entries(order=(1, 0))
    grown['specs'][0]['count'] = 2
    conductor.deployments.deploy(grown)
    assert names(conductor) == ['a0', 'a1', 'b0', 'b1']
    assert hypervisor.things[('domain', 'b1')]['memory_mb'] == 256


def fail_new_definition(hypervisor, monkeypatch, name, memory_mb,
                        after=lambda: True):
    """Make the fake refuse to define domain ``name`` with
    ``memory_mb`` (its old definition still goes through, as a revert
    needs), once ``after()`` holds (waiting up to 10 s for the other
    nodes' requests, which run at the same time); returns [whether
    ``after()`` held when it failed]."""
    real_ensure = hypervisor.ensure
    held = []

    def ensure(kind, thing, value=True):
        if (kind, thing) == ('domain', name) and (
                value['memory_mb'] == memory_mb):
            deadline = time.monotonic() + 10
            while not after() and time.monotonic() < deadline:
                time.sleep(0.01)
            held.append(after())
            raise exceptions.DriverError(driver='fake', action='define '
                                         + name, reason='no memory')
        return real_ensure(kind, thing, value)

    monkeypatch.setattr(hypervisor, 'ensure', ensure)
    return held


def test_a_failed_reconfigure_rolls_everything_back(conductor, hypervisor,
                                                    monkeypatch):
    conductor.deployments.deploy(sized(count=2))
    before = snapshot(conductor, hypervisor)

    def others_done():
        things = dict(hypervisor.things)
        return (('bmc', 'tk2') in things
                and things[('domain', 'tk0')]['memory_mb'] == 256
                and ('volume', 'tk0vol1') in things)

    held = fail_new_definition(hypervisor, monkeypatch, 'tk1', 256,
                               others_done)
    # Grow and resize at once; tk1's resize fails once tk2 is made and
    # tk0 resized, with a new volume.
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.deployments.deploy(sized(count=3, memory_mb=256,
                                           volumes=('1GiB', '1GiB')))
    message = str(raised.value)
    assert 'define tk1: no memory' in message
    assert held == [True]
    assert 'the cluster deployed before is kept' in message
    after = snapshot(conductor, hypervisor)
    # Created nodes and volumes gone, updated nodes back to their old
    # sizes, records as before.
    assert after['things'] == before['things']
    assert after['resources'] == before['resources']
    assert after['nodes'] == before['nodes']
    assert after['spec'] == before['spec']
    assert conductor.db.get_cluster('unit').state == 'deployed'
    # The same deploy without the fault applies it all.
    monkeypatch.setattr(hypervisor, 'ensure', type(hypervisor).ensure.__get__(
        hypervisor))
    conductor.deployments.deploy(sized(count=3, memory_mb=256,
                                       volumes=('1GiB', '1GiB')))
    assert names(conductor) == ['tk0', 'tk1', 'tk2']
    assert_agree(conductor, hypervisor)
    assert conductor.db.get_cluster('unit').state == 'deployed'


def test_a_failed_reconfigure_removes_no_node(conductor, hypervisor,
                                              monkeypatch):
    conductor.deployments.deploy(sized(count=3))
    before = snapshot(conductor, hypervisor)
    fail_new_definition(hypervisor, monkeypatch, 'tk0', 256)
    with pytest.raises(exceptions.OperationFailed):
        conductor.deployments.deploy(sized(count=1, memory_mb=256))
    assert names(conductor) == ['tk0', 'tk1', 'tk2']
    after = snapshot(conductor, hypervisor)
    assert after['things'] == before['things']
    assert after['resources'] == before['resources']
    assert after['nodes'] == before['nodes']


def verb_and_table(statement):
    """'VERB table' of a SQL statement, e.g. 'UPDATE tenks_nodes'."""
    words = statement.replace('(', ' ').split()
    verb = words[0].upper()
    for keyword in ('FROM', 'INTO', 'UPDATE'):
        if keyword in (w.upper() for w in words[:-1]):
            index = [w.upper() for w in words].index(keyword)
            return '%s %s' % (verb, words[index + 1].strip('"'))
    return verb


def test_sql_statements_per_node_of_a_deploy(conductor, hypervisor):
    count = 8
    statements = []

    def counted(conn, cursor, statement, parameters, context, many):
        # Neither a hostagent's registration nor the making of the
        # schema on a new database is part of the deploy.
        if 'tenks_hypervisors' not in statement:
            statements.append(verb_and_table(statement))

    engine = conductor.db.engine
    sa.event.listen(engine, 'before_cursor_execute', counted)
    try:
        conductor.deployments.deploy(make_spec(count=count))
    finally:
        sa.event.remove(engine, 'before_cursor_execute', counted)
    assert names(conductor) == ['tk%d' % i for i in range(count)]
    data = [s for s in statements
            if s.split()[0] in ('SELECT', 'INSERT', 'UPDATE', 'DELETE')]
    per_node = len(data) / count
    figure = ('%d SQL statements for a deploy of %d nodes: %.1f per node '
              '(and %d on the schema)' % (len(data), count, per_node,
                                          len(statements) - len(data)))
    print(figure)
    assert per_node <= 10, '%s (%s)' % (figure, ', '.join(
        '%s: %d' % pair for pair in collections.Counter(data).most_common()))


def test_a_rerun_that_changes_nothing_writes_only_its_operation(
        conductor, hypervisor):
    spec = make_spec(count=8)
    conductor.deployments.deploy(spec)
    statements = []

    def counted(conn, cursor, statement, parameters, context, many):
        if 'tenks_hypervisors' not in statement:  # the agent's heartbeat
            statements.append(verb_and_table(statement))

    engine = conductor.db.engine
    sa.event.listen(engine, 'before_cursor_execute', counted)
    try:
        assert conductor.deployments.deploy(spec)['changed'] == []
    finally:
        sa.event.remove(engine, 'before_cursor_execute', counted)
    writes = collections.Counter(s for s in statements
                                 if not s.startswith('SELECT'))
    # No flow, no record of the cluster, its nodes or resources: the
    # operation's own row (made, then ended) and its two events.
    assert writes == {'INSERT tenks_operations': 1,
                      'UPDATE tenks_operations': 1,
                      'INSERT tenks_events': 2}, statements
    assert len(statements) <= 12, statements


def test_plan_shows_the_changes_and_makes_none(conductor, hypervisor):
    conductor.deployments.deploy(make_spec(count=2))
    before = snapshot(conductor, hypervisor)
    operations = conductor.records.list_operations()
    plan = conductor.deployments.plan(make_spec(count=3))
    assert {(c['node'], c['resource'], c['action'])
            for c in plan['changes']} == {
        ('tk2', 'domain', 'create'), ('tk2', 'volume tk2vol0', 'create'),
        ('tk2', 'port p-tk2-0', 'create'), ('tk2', 'bmc', 'create')}
    assert not plan['destructive']
    assert conductor.deployments.plan(make_spec(count=1))['destructive']
    assert snapshot(conductor, hypervisor) == before
    assert conductor.records.list_operations() == operations


def test_plan_refuses_what_deploy_refuses(conductor, hypervisor):
    """Another cluster with this one's bridge prefix: the plan fails as
    the deploy does, naming the clash, and neither changes anything."""
    conductor.deployments.deploy(make_spec(count=1))
    before = snapshot(conductor, hypervisor)
    other = make_spec(cluster='other', specs=[
        {'type': 'small', 'count': 1, 'node_name_prefix': 'o'}])
    errors = []
    for attempt in (conductor.deployments.plan, conductor.deployments.deploy):
        with pytest.raises(exceptions.InterfaceConflict) as raised:
            attempt(other)
        errors.append(str(raised.value))
    assert errors[0] == errors[1]
    assert ('bridge_prefix: bridge brtenks0 on hv1 is recorded for cluster '
            'unit' in errors[0])
    assert snapshot(conductor, hypervisor) == before


def test_plan_and_deploy_refuse_a_domain_or_volume_not_theirs(
        conductor, hypervisor):
    """A domain and a volume of the new nodes' names exist without this
    deployment's mark (another state directory's same-named cluster):
    refused before anything is made, naming the spec fields."""
    hypervisor.fail[('domain', 'tk1')] = fakes.conflict('domain', 'tk1')
    hypervisor.fail[('volume', 'tk0vol0')] = fakes.conflict('volume',
                                                            'tk0vol0')
    errors = []
    for attempt in (conductor.deployments.plan, conductor.deployments.deploy):
        with pytest.raises(exceptions.NameConflict) as raised:
            attempt(make_spec(count=2))
        errors.append(str(raised.value))
    assert errors[0] == errors[1] == (
        "Names of this deploy are taken: specs[0].vol_name_prefix: volume "
        "tk0vol0 on hv1 exists and is not this deployment's; "
        "specs[0].node_name_prefix: domain tk1 on hv1 exists and is not "
        "this deployment's")
    assert hypervisor.things == {}
    assert conductor.db.get_cluster('unit') is None


def test_an_unexpected_plan_error_is_one_clean_error(conductor, hypervisor,
                                                     monkeypatch):
    from conductor import planner

    def broken(*args, **kwargs):
        raise KeyError('physnet9')

    monkeypatch.setattr(planner, 'plan_deploy', broken)
    with pytest.raises(exceptions.OperationFailed) as raised:
        conductor.deployments.plan(make_spec(count=1))
    assert str(raised.value) == (
        "Plan of cluster unit failed: KeyError: 'physnet9'")


def test_ipmi_port_range_change_moves_the_bmcs(conductor, hypervisor):
    conductor.deployments.deploy(make_spec(count=2))
    conductor.deployments.deploy(make_spec(count=2, ipmi_port_range_start=6240,
                                           ipmi_port_range_end=6250))
    assert sorted(value[1] for (kind, _), value in hypervisor.things.items()
                  if kind == 'bmc') == [6240, 6241]
    assert_agree(conductor, hypervisor)
