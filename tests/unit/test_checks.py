"""Everything a deploy could collide on is refused before anything is
made; advisory checks only warn; options do what their help says."""

import itertools
import os
import random
import threading
import time

import pytest
from keystoneauth1 import exceptions as ksa_exceptions
from openstack import exceptions as sdk_exceptions

from conductor import preflight
from hostagent import manager
from tenks import exceptions
from tenks import names
from tenks import reconcile
from tenks import scheduler
from tenks import spec as tenks_spec
from tenks.cloud import coexistence
from tests.unit.conftest import make_spec
from tests.unit.test_scheduler import facts


def prefixed(entries, volumes=1, **top):
    """A spec whose specs are (count, node prefix, vol prefix)."""
    return dict({
        'cluster': 'unit',
        'node_types': {'t': {'memory_mb': 64, 'vcpus': 1, 'volumes': [
            {'capacity': '1MiB'}] * volumes}},
        'specs': [{'type': 't', 'count': count, 'node_name_prefix': node,
                   'vol_name_prefix': vol}
                  for count, node, vol in entries],
    }, **top)


# Volume names


def test_prefixes_giving_one_volume_name_are_refused_naming_the_fields():
    # x1 + a0v + 0 == x1a0 + v + 0
    with pytest.raises(exceptions.SpecError) as raised:
        tenks_spec.validate(prefixed([(2, 'x', 'a0v'), (1, 'x1a', 'v')]),
                            source='c.yaml')
    assert raised.value.source == 'c.yaml'
    assert raised.value.problems == [
        "specs[1].vol_name_prefix: volume x1a0v0 of node x1a0 "
        "(node_name_prefix 'x1a', vol_name_prefix 'v') has the name of a "
        "volume of node x1 of specs[0] (node_name_prefix 'x', "
        "vol_name_prefix 'a0v'): change one of the prefixes"]


def test_the_rpc_api_refuses_them_too(conductor):
    from conductor import rpcapi
    with pytest.raises(exceptions.SpecError) as raised:
        rpcapi.ConductorAPI(conductor.bus).deploy_cluster(
            {'roles': ['member']},
            prefixed([(2, 'x', 'a0v'), (1, 'x1a', 'v')]))
    assert raised.value.problems[0].startswith(
        'specs[1].vol_name_prefix: volume x1a0v0 of node x1a0')
    assert conductor.db.list_clusters() == []


@pytest.mark.parametrize('entry', [
    {'type': ['t'], 'count': 2},
    {'type': {'t': 1}, 'count': 2},
    {'type': 't', 'count': '2', 'node_name_prefix': 5},
    {'type': 't', 'count': 2, 'vol_name_prefix': None},
])
def test_malformed_specs_get_schema_problems_not_a_crash(entry):
    data = prefixed([])
    data['specs'] = [entry, {'type': 't', 'count': 1}]
    with pytest.raises(exceptions.SpecError) as raised:
        tenks_spec.validate(data)
    assert raised.value.problems[0].startswith('specs[0].')


def test_prefixes_that_cannot_meet_are_accepted():
    # Too few nodes for x to reach x1: nothing can clash.
    tenks_spec.validate(prefixed([(1, 'x', 'a0v'), (0, 'x1a', 'v')]))
    tenks_spec.validate(prefixed([(5, 'tk', 'vol'), (5, 'tk', 'disk'),
                                  (5, 'tk1', 'vol')], volumes=3,
                                 ipmi_port_range_end=6250))


def test_the_volume_name_check_is_sound():
    # Whatever validate accepts, the scheduler names without a clash;
    # prefixes from a small alphabet make clashes likely.
    rng = random.Random(7)
    accepted = refused = 0
    for _ in range(1000):
        entries = [
            (rng.randrange(5), rng.choice(['x', 'x1', 'x1a', 'x2a', 'x1a1a']),
             rng.choice(['v', 'a0v', 'a1v', 'a1v1', 'a1a0v', 'a']))
            for _ in range(rng.randrange(2, 4))]
        volumes = rng.randrange(1, 3)
        try:
            spec = tenks_spec.validate(prefixed(entries, volumes=volumes,
                                                ipmi_port_range_end=6300))
        except exceptions.SpecError:
            refused += 1
            continue
        accepted += 1
        nodes = scheduler.schedule(spec, {'hv1': facts()}, [])
        vols = [v['name'] for n in nodes for v in n['volumes']]
        assert len(vols) == len(set(vols)), entries
    assert accepted > 100 and refused > 20, (accepted, refused)


def brute_force_clash(first, second, total):
    """The first volume name of ``first``'s nodes (index, then volume)
    that is a volume name of another node of ``second``, by walking
    every name: the oracle of the spec's check."""
    (prefix, vol, volumes), (prefix2, vol2, volumes2) = first, second
    names = {'%s%d%s%d' % (prefix2, j, vol2, b): '%s%d' % (prefix2, j)
             for j in range(total) for b in range(volumes2)}
    for i in range(total):
        for a in range(volumes):
            node = '%s%d' % (prefix, i)
            name = '%s%s%d' % (node, vol, a)
            if names.get(name, node) != node:
                return node, name, names[name]
    return None


def test_the_volume_name_check_finds_what_walking_every_name_finds():
    node_prefixes = ['x', 'x1', 'x1a', 'x12b', 'x10', 'x0a', 'x1a1a', 'y']
    vol_prefixes = ['v', 'a0v', 'a1v', 'a1v1', 'a1a0v', 'a', 'b2v', 'a11v']
    found = 0
    for first in itertools.product(node_prefixes, vol_prefixes, (1, 3)):
        for second in itertools.product(node_prefixes, vol_prefixes,
                                        (1, 12)):
            for total in (1, 3, 15):
                expected = brute_force_clash(first, second, total)
                assert tenks_spec._first_clash(first, second, total) == (
                    expected), (first, second, total)
                found += expected is not None
    assert found > 200


def test_scheduler_passes_over_names_whose_volumes_are_taken():
    # Validation sees indices 0 and 1: x0a2v0, x1a2v0, x2a0v0, x2a1v0 do
    # not clash. But another cluster holds x0, x1, x2a0 and x2a1, so
    # this one gets x2a2 and then x2, whose volume x2a2v0 is taken.
    spec = tenks_spec.validate(prefixed([(1, 'x2a', 'v'), (1, 'x', 'a2v')]))
    other = tenks_spec.validate(prefixed(
        [(2, 'x', 'vol'), (2, 'x2a', 'vol')], cluster='other'))
    recorded = scheduler.schedule(other, {'hv1': facts()}, [])
    nodes = scheduler.schedule(spec, {'hv1': facts()}, recorded)
    assert [n['name'] for n in nodes] == ['x2a2', 'x3']
    assert [n['volumes'][0]['name'] for n in nodes] == ['x2a2v0', 'x3a2v0']


# Hosts: pool space, network driver, interfaces


def test_pool_space_is_a_host_resource():
    spec = make_spec(count=3)  # 1 GiB volumes
    hosts = {'hv1': facts('hv1', free=2 * 1024 ** 3 + 5),
             'hv2': facts('hv2', free=1024 ** 3, memory_mb=8192)}
    nodes = scheduler.schedule(spec, hosts, [])
    assert sorted(n['hypervisor'] for n in nodes) == ['hv1', 'hv1', 'hv2']
    with pytest.raises(exceptions.PoolSpaceExhausted) as raised:
        scheduler.schedule(spec, {'hv1': facts(free=2 * 1024 ** 3)}, [])
    assert str(raised.value) == (
        'Hypervisor hv1 has too little space for the new volumes: they '
        'need 3.0 GiB (3221225472 bytes), its pool directory /p has 2.0 '
        'GiB (2147483648 bytes) free')
    # Recorded nodes need no new space.
    recorded = nodes[:2]
    for node in recorded:
        node['hypervisor'] = 'hv1'
    missing = scheduler.schedule(spec, {'hv1': facts(free=1024 ** 3)},
                                 recorded)
    assert len(missing) == 1


def test_a_host_of_another_network_driver_is_refused():
    spec = make_spec(count=1)
    with pytest.raises(exceptions.NetworkDriverMismatch) as raised:
        scheduler.schedule(spec, {'hv1': facts(driver='openvswitch')}, [])
    assert str(raised.value) == (
        'Hypervisor hv1 offers the network driver(s) openvswitch, but the '
        'spec asks for bridge_type linuxbridge')
    nodes = scheduler.schedule(spec, {'hv1': facts(driver='openvswitch'),
                                      'hv2': facts('hv2')}, [])
    assert [n['hypervisor'] for n in nodes] == ['hv2']


def test_a_deployed_host_whose_driver_changed_is_refused(
        conductor, hypervisor, monkeypatch):
    conductor.deployments.deploy(make_spec(count=1))
    # Nothing new to place, a node to resize: the check is on the plan's
    # hosts. The hostagent now offers openvswitch only (as after a
    # restart with network_drivers = openvswitch).
    inspect = manager.HostAgentManager._inspect
    monkeypatch.setattr(
        manager.HostAgentManager, '_inspect', lambda self, *args: dict(
            inspect(self, *args), network_drivers=['openvswitch']))
    resized = make_spec(count=1, node_types={'small': {
        'memory_mb': 256, 'vcpus': 1, 'volumes': [{'capacity': '1GiB'}],
        'physical_networks': ['physnet1']}})
    with pytest.raises(exceptions.NetworkDriverMismatch) as raised:
        conductor.deployments.deploy(resized)
    assert str(raised.value) == (
        'Hypervisor hv1 offers the network driver(s) openvswitch, but the '
        'spec asks for bridge_type linuxbridge')


def test_bridge_type_cannot_change_on_a_deployed_cluster(conductor,
                                                         hypervisor):
    conductor.deployments.deploy(make_spec(count=1))
    with pytest.raises(exceptions.ChangeRefused) as raised:
        conductor.deployments.deploy(make_spec(count=1,
                                               bridge_type='openvswitch'))
    assert 'bridge_type cannot change from linuxbridge to openvswitch' in (
        str(raised.value))


def planned_interfaces(spec, host_facts):
    """The interfaces a first deploy of ``spec`` creates."""
    nodes = scheduler.schedule(spec, host_facts, [])
    return preflight.planned_interfaces(
        {host: reconcile.host_setup(spec, host_facts[host])
         for host in host_facts}, nodes)


def test_planned_interfaces_name_their_fields():
    spec = make_spec(count=1, physnet_mappings={'physnet1': 'eth1'})
    assert planned_interfaces(
        spec, {'hv1': facts(mappings={'physnet1': 'eth1'})}) == {'hv1': {
        'brtenks0': 'bridge_prefix', 'p-brtenks0-br': 'bridge_prefix',
        'p-brtenks0-phy': 'bridge_prefix',
        'p-tk0-0': 'specs[0].node_name_prefix'}}


def test_interface_conflicts_name_field_host_and_holder():
    spec = make_spec(count=1)
    plan = planned_interfaces(spec, {'hv1': facts()})
    recorded = [
        {'cluster': 'other', 'hypervisor': 'hv1', 'kind': 'bridge',
         'name': 'brtenks0'},
        # Elsewhere, of another kind, or this cluster's: no conflict.
        {'cluster': 'other', 'hypervisor': 'hv2', 'kind': 'bridge',
         'name': 'brtenks0'},
        {'cluster': 'other', 'hypervisor': 'hv1', 'kind': 'domain',
         'name': 'p-tk0-0'},
        {'cluster': 'unit', 'hypervisor': 'hv1', 'kind': 'port',
         'name': 'p-tk0-0'}]
    found = {'hv1': facts(foreign=[('p-tk0-0', 'tenks:x'),
                                   ('brtenks0', '')])}
    assert preflight.interface_conflicts(spec, plan, found, recorded) == [
        'bridge_prefix: bridge brtenks0 on hv1 is recorded for cluster '
        'other',
        "specs[0].node_name_prefix: interface p-tk0-0 exists on hv1 with "
        "owner mark 'tenks:x'",
        'bridge_prefix: interface brtenks0 exists on hv1 without an owner '
        'mark']
    assert preflight.interface_conflicts(
        spec, plan, {'hv1': facts()}, recorded[1:]) == []


def test_deploy_onto_a_foreign_interface_makes_nothing(conductor,
                                                       hypervisor):
    hypervisor.interfaces['brtenks0'] = 'tenks:elsewhere'
    with pytest.raises(exceptions.InterfaceConflict) as raised:
        conductor.deployments.deploy(make_spec(count=1))
    assert str(raised.value) == (
        "Interface names of this deploy are taken: bridge_prefix: "
        "interface brtenks0 exists on hv1 with owner mark "
        "'tenks:elsewhere'")
    assert hypervisor.things == {}
    assert conductor.db.get_cluster('unit') is None
    assert conductor.db.list_nodes() == []
    # Our own mark is no conflict: a re-run finds its interfaces.
    del hypervisor.interfaces['brtenks0']
    conductor.deployments.deploy(make_spec(count=1))
    owner = names.owner('unit', conductor.db.get_cluster('unit').uuid)
    hypervisor.interfaces.update({'brtenks0': owner, 'p-tk0-0': owner})
    assert conductor.deployments.deploy(make_spec(count=1))['changed'] == []


def test_a_conflict_of_many_interfaces_names_ten(conductor, hypervisor):
    """A thousand taken names make an error one can read."""
    for i in range(25):
        hypervisor.interfaces['p-tk%d-0' % i] = 'tenks:elsewhere'
    with pytest.raises(exceptions.InterfaceConflict) as raised:
        conductor.deployments.deploy(make_spec(
            count=25, default_ironic_driver='redfish'))
    message = str(raised.value)
    assert message.count('p-tk') == 10
    assert message.endswith(" with owner mark 'tenks:elsewhere' and 15 "
                            "more")
    assert hypervisor.things == {}


def test_second_cluster_on_the_same_bridges_is_refused(conductor,
                                                       hypervisor):
    conductor.deployments.deploy(make_spec(count=1))
    with pytest.raises(exceptions.InterfaceConflict) as raised:
        conductor.deployments.deploy(make_spec(count=1, cluster='other'))
    assert ('bridge_prefix: bridge brtenks0 on hv1 is recorded for cluster '
            'unit' in str(raised.value))
    assert conductor.db.get_cluster('other') is None
    assert hypervisor.names('domain') == ['tk0']


def test_inspect_reports_driver_space_and_foreign_interfaces(conductor,
                                                             hypervisor):
    hypervisor.interfaces.update({'a': 'tenks:me', 'b': 'tenks:you',
                                  'c': ''})
    result = conductor.agents.request(
        'hv1', 'inspect', 'inspect/test', physnet_mappings={},
        ipmi_address='127.0.0.1', ipmi_ports=[], interfaces=['a', 'b', 'c',
                                                             'd'],
        owner='tenks:me', redfish_address='127.0.0.1', redfish_port=8000)
    assert result['foreign_interfaces'] == [['b', 'tenks:you'], ['c', '']]
    assert result['network_drivers'] == ['linuxbridge', 'openvswitch']
    assert result['pool_free_bytes'] > 0
    result = conductor.agents.request(
        'hv1', 'inspect', 'inspect/test2', physnet_mappings={},
        ipmi_address='127.0.0.1', ipmi_ports=[], interfaces=['a'],
        owner=None, redfish_address='127.0.0.1', redfish_port=8000)
    assert result['foreign_interfaces'] == [['a', 'tenks:me']]


# max_operations


def test_operations_beyond_max_operations_wait_their_turn(conf, hypervisor):
    from tenks.cli import embedded
    conf.set_override('max_operations', 1, group='conductor')
    release = threading.Event()
    started = []

    real_ensure = hypervisor.ensure

    def slow_ensure(kind, name, value=True):
        started.append((kind, name))
        if kind == 'pool' and name == 'tenks-first':
            assert release.wait(10)
        return real_ensure(kind, name, value)

    hypervisor.ensure = slow_ensure
    with embedded.embedded(conf) as conductor:
        first = conductor.deployments.submit(make_spec(count=1,
                                                       cluster='first'))
        second = conductor.deployments.submit(make_spec(
            count=1, cluster='second', bridge_prefix='brs'))
        # Accepted at once, and waiting: nothing of it has started.
        assert conductor.records.get_operation(second)['state'] == 'running'
        assert all(name != 'tenks-second' for _, name in started)
        release.set()
        assert conductor.operations.wait(first)['changed']
        assert conductor.operations.wait(second)['changed']
    assert started.index(('pool', 'tenks-second')) > started.index(
        ('pool', 'tenks-first'))


@pytest.mark.parametrize('workers', [1, 3])
def test_workers_bound_the_tasks_running_at_once(conf, hypervisor, workers,
                                                 monkeypatch):
    """[conductor] workers: tasks running at the same time, across the
    flows of the conductor."""
    from flows import nodes
    from tenks.cli import embedded
    conf.set_override('workers', workers, group='conductor')
    lock = threading.Lock()
    running, most = [0], [0]
    real_execute = nodes.ConvergeNodes.execute

    def slow_execute(task, *args, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return real_execute(task, *args, **kwargs)

    monkeypatch.setattr(nodes.ConvergeNodes, 'execute', slow_execute)
    # A task a node: three a flow.
    monkeypatch.setattr(nodes, 'BATCH', 1)
    with embedded.embedded(conf) as conductor:
        first = conductor.deployments.submit(make_spec(count=3,
                                                       cluster='first'))
        second = conductor.deployments.submit(make_spec(
            count=3, cluster='second', bridge_prefix='brs'))
        for operation_id in (first, second):
            conductor.operations.wait(operation_id)
            assert conductor.records.get_operation(operation_id)['state'] == (
                'succeeded')
    assert most[0] == workers


# Advisory checks


class Response:

    def __init__(self, status, body):
        self.status_code = status
        self.body = body

    def json(self):
        if isinstance(self.body, Exception):
            raise self.body
        return self.body


class Placement:

    def __init__(self, answer):
        self.answer = answer

    def get(self, path, raise_exc=True):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Compute:

    def __init__(self, error=None, flavors=()):
        self.error = error
        self.listed = list(flavors)

    def flavors(self, details=True):
        if self.error is not None:
            raise self.error
        return iter(self.listed)


class Conn:

    def __init__(self, placement, compute):
        self.placement = placement
        self.compute = compute

    def endpoint_for(self, service):
        return 'http://%s' % service


PLACEMENT_UNCHECKED = ("; did not check whether the nodes' resource "
                       "providers still offer VCPU, MEMORY_MB or DISK_GB")
NOVA_UNCHECKED = ('; did not check whether bare-metal flavors ask for '
                  'VCPU, MEMORY_MB or DISK_GB')


@pytest.mark.parametrize('answer, warning', [
    (Response(401, {'errors': []}), 'Placement answered HTTP 401 to GET '
     '/resource_providers/n1/inventories'),
    (Response(403, {'errors': []}), 'Placement answered HTTP 403 to GET '
     '/resource_providers/n1/inventories'),
    (Response(503, ValueError('not JSON')), 'Placement answered HTTP 503 '
     'to GET /resource_providers/n1/inventories'),
    (Response(200, {'resource_providers': []}), "Placement answered HTTP "
     "200 to GET /resource_providers/n1/inventories without the expected "
     "inventories (KeyError: 'inventories')"),
    (Response(200, {'inventories': {'VCPU': {}}}), "Placement answered "
     "HTTP 200 to GET /resource_providers/n1/inventories without the "
     "expected inventories (KeyError: 'total')"),
    (ksa_exceptions.ConnectFailure('refused'), 'Placement could not be '
     'asked (ConnectFailure: refused)'),
])
def test_unexpected_placement_answers_become_warnings(answer, warning):
    conn = Conn(Placement(answer), Compute())
    assert coexistence.coexistence_warnings(conn, ['n1'], ['CUSTOM_X']) == [
        warning + PLACEMENT_UNCHECKED]


def test_unexpected_nova_answers_become_warnings():
    error = sdk_exceptions.HttpException(
        'Forbidden', http_status=403)
    conn = Conn(Placement(Response(404, {})), Compute(error=error))
    assert coexistence.coexistence_warnings(conn, ['n1'], ['CUSTOM_X']) == [
        'Nova answered HTTP 403 to a flavor list' + NOVA_UNCHECKED]


def test_coexistence_findings_are_still_reported():
    class Flavor:
        name = 'bm'
        extra_specs = {'resources:CUSTOM_X': '1', 'resources:VCPU': '0'}

    conn = Conn(Placement(Response(200, {'inventories': {
        'VCPU': {'total': 2}, 'CUSTOM_X': {'total': 1}}})),
        Compute(flavors=[Flavor]))
    assert coexistence.coexistence_warnings(conn, ['n1'], ['CUSTOM_X']) == [
        'Placement provider of node n1 still offers VCPU: VM flavors can '
        'land on it',
        'Bare-metal flavor bm does not zero DISK_GB, MEMORY_MB: it also '
        'asks for standard resources']


def test_a_failing_check_does_not_hide_the_other():
    conn = Conn(Placement(RuntimeError('boom')), Compute())
    assert coexistence.coexistence_warnings(conn, ['n1'], ['CUSTOM_X']) == [
        'Placement could not be asked (RuntimeError: boom)'
        + PLACEMENT_UNCHECKED]




def test_two_clusters_on_the_same_bridges_at_once_one_is_refused(
        conductor, hypervisor):
    # The first deploy holds in its flow before any interface of it is
    # recorded; the second is checked meanwhile.
    release = threading.Event()
    entered = threading.Event()
    real_ensure = hypervisor.ensure

    def slow_ensure(kind, name, value=True):
        if kind == 'pool' and name == 'tenks-unit':
            entered.set()
            assert release.wait(10)
        return real_ensure(kind, name, value)

    hypervisor.ensure = slow_ensure
    first = conductor.deployments.submit(make_spec(count=1))
    assert entered.wait(10)
    second = conductor.deployments.submit(make_spec(count=1, cluster='other'))
    try:
        with pytest.raises(exceptions.InterfaceConflict) as raised:
            conductor.operations.wait(second)
    finally:
        release.set()
    assert conductor.operations.wait(first)['changed']
    assert ('bridge_prefix: bridge brtenks0 on hv1 is recorded for cluster '
            'unit') in str(raised.value)
    assert conductor.db.get_cluster('other') is None
    assert [n.cluster for n in conductor.db.list_nodes()] == ['unit']
    assert hypervisor.names('pool') == ['tenks-unit']
    assert hypervisor.names('domain') == ['tk0']


# IPMI BMCs' memory


def test_inspect_reports_the_memory_free_for_ipmi_bmcs(conductor, conf):
    def inspect():
        return conductor.agents.request(
            'hv1', 'inspect', 'inspect/%f' % time.monotonic(),
            physnet_mappings={}, ipmi_address='127.0.0.1', ipmi_ports=[],
            interfaces=[], owner=None)
    # By default, what the host has available, and the measured figure.
    found = inspect()
    assert 0 < found['ipmi_free_bytes'] <= os.sysconf(
        'SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
    assert found['ipmi_bmc_bytes'] == 16 * 1024
    conf.set_override('ipmi_free_memory_mb', 3, group='hostagent')
    conf.set_override('ipmi_bmc_memory_kib', 100, group='hostagent')
    found = inspect()
    assert found['ipmi_free_bytes'] == 3 * 1024 ** 2
    assert found['ipmi_bmc_bytes'] == 100 * 1024


def test_a_deploy_whose_ipmi_bmcs_do_not_fit_makes_nothing(conductor, conf,
                                                          hypervisor):
    # 16 BMCs of 64 KiB fit in 1 MiB, 20 do not.
    conf.set_override('ipmi_free_memory_mb', 1, group='hostagent')
    conf.set_override('ipmi_bmc_memory_kib', 64, group='hostagent')
    with pytest.raises(exceptions.BmcMemoryExhausted) as raised:
        conductor.deployments.deploy(make_spec(count=20,
                                                ipmi_port_range_end=6260))
    assert str(raised.value) == (
        'Hypervisor hv1 has too little memory for the new IPMI BMCs: 20 '
        'of them need 1.2 MiB (1310720 bytes) at 64.0 KiB (65536 bytes) '
        'each, it has 1.0 MiB (1048576 bytes) free')
    assert conductor.db.get_cluster('unit') is None
    assert hypervisor.names('domain') == []
    assert hypervisor.names('bmc') == []
