import types
import uuid

import pytest
from taskflow import task
from taskflow.types import failure

from conductor import planner
from flows import base
from flows import context
from flows import deploy
from flows import nodes
from flows import post_deploy
from flows import stages
from tenks import exceptions
from tenks import reconcile
from tenks import states
from tenks.cloud import nova
from tests.unit import fakes
from tests.unit.conftest import make_spec
from tests.unit.test_scheduler import facts


def all_tasks(flow):
    found = []
    for item, _ in flow.iter_nodes():
        found += [item] if isinstance(item, task.Task) else all_tasks(item)
    return found


def planned(conductor, spec, **host_facts):
    """A deploy of ``spec`` planned and recorded as the conductor does
    it (cluster, scheduled nodes, operation with its plan) on a host
    with ``host_facts``; returns the operation id and the plan."""
    db = conductor.db
    name = spec['cluster']
    if db.get_cluster(name) is None:
        db.save_cluster(name, spec, states.CLUSTER_SCHEDULED)
    host = {'hv1': facts(mappings=spec['physnet_mappings'], **host_facts)}
    plan, new = planner.plan_deploy(
        spec, db.get_cluster(name), host,
        [n.as_dict() for n in db.list_nodes()],
        [r.as_dict() for r in db.list_resources(name)], False)
    db.add_nodes(new)
    operation_id = str(uuid.uuid4())
    db.create_operation(operation_id, name, 'deploy', conductor.host, spec)
    db.set_operation_plan(operation_id, plan)
    return operation_id, plan


def deployable(conductor, spec):
    """The deploy flow's tasks of ``spec``, in the order a linear run
    executes them, and the store they run with."""
    operation_id, _ = planned(conductor, spec)
    store = {base.OPERATION_ID: operation_id, base.CLUSTER: spec['cluster']}
    return all_tasks(deploy.get_deploy_flow(operation_id)), store


def test_deploy_flow_has_a_task_per_batch_with_stable_names(conductor):
    operation_id, plan = planned(conductor, make_spec(
        count=nodes.BATCH + 1, ipmi_port_range_end=9000))
    tasks = all_tasks(deploy.get_deploy_flow(operation_id))
    names = [t.name for t in tasks]
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(
        ['cluster:deploying', 'pool:hv1:tenks-unit', 'bridge:hv1:brtenks0',
         'cluster:commit', 'node:hv1:0', 'node:hv1:1'])
    # Each node in one batch, in the plan's order.
    batches = [t for t in tasks if isinstance(t, nodes.ConvergeNodes)]
    assert [e['uuid'] for t in sorted(batches, key=lambda t: t.name)
            for e in t.entries] == [e['uuid'] for e in plan['nodes']]
    assert sorted(t.steps for t in batches) == [1, nodes.BATCH]
    # Rebuilding from the stored plan gives the same names (resume).
    again = [t.name for t in all_tasks(deploy.get_deploy_flow(
        operation_id))]
    assert again == names


def state(conductor, hv):
    """Everything a task may change: the hypervisor and the records."""
    db = conductor.db
    return (dict(hv.things),
            sorted((r.kind, r.name, r.state)
                   for r in db.list_resources('unit')),
            sorted((n.name, n.state, n.memory_mb, n.vcpus)
                   for n in db.list_nodes()),
            getattr(db.get_cluster('unit'), 'state', None))


def run(t, store):
    """Execute ``t`` with its arguments from ``store``; return result."""
    args = {name: store[key] for name, key in t.rebind.items()}
    result = t.execute(**args)
    for name in t.provides:
        store[name] = result
    return result, args


def node_things(name):
    return {('volume', name + 'vol0'), ('port', 'p-%s-0' % name),
            ('domain', name), ('bmc', name)}


def test_each_hypervisor_task_makes_its_things_and_its_revert_undoes_them(
        conductor, hypervisor):
    tasks, store = deployable(conductor, make_spec(count=2))
    for t in tasks:
        if not isinstance(t, (base.EnsureResource, nodes.ConvergeNodes)):
            run(t, store)
            continue
        before = state(conductor, hypervisor)
        result, args = run(t, store)
        made = set(hypervisor.things) - set(before[0])
        if isinstance(t, nodes.ConvergeNodes):
            assert made == set().union(*(node_things(e['name'])
                                         for e in t.entries))
            assert result['changed'] and sorted(result['changed_names']) == (
                sorted('node:%s' % e['uuid'] for e in t.entries))
            for e in t.entries:
                assert len(result['nodes'][e['uuid']]['created']) == 4
                assert conductor.db.get_node(e['uuid']).state == 'deployed'
        else:
            assert made == {(t.kind, t.resource)}, t.name
            assert result['new'] and result['changed']
        assert {r.state for r in conductor.db.list_resources('unit')} == {
            'present'}
        t.revert(result=result, **args)
        after = state(conductor, hypervisor)
        assert after[:2] == before[:2], t.name
        if isinstance(t, nodes.ConvergeNodes):
            # A node its operation created, wholly removed, is forgotten.
            for e in t.entries:
                assert conductor.db.get_node(e['uuid']) is None
            conductor.db.add_nodes([e['new']['record'] for e in t.entries])
        # Again, to go on with what the next tasks need (as a new
        # operation: the agent answers a request id it has seen from its
        # memory).
        run(t, dict(store, operation_id='op-again'))
    assert hypervisor.names('domain') == ['tk0', 'tk1']


def bigger(count=1, memory_mb=256):
    return make_spec(count=count, node_types={'small': {
        'memory_mb': memory_mb, 'vcpus': 2,
        'volumes': [{'capacity': '1GiB'}, {'capacity': '1GiB'}],
        'physical_networks': ['physnet1']}})


def test_reverting_a_node_update_gives_it_back_what_it_had(conductor,
                                                            hypervisor):
    conductor.deployments.deploy(make_spec(count=1))
    deployed = state(conductor, hypervisor)
    tasks, store = deployable(conductor, bigger())
    [converge] = [t for t in tasks if isinstance(t, nodes.ConvergeNodes)]
    [entry] = converge.entries
    assert entry['action'] == 'update'
    result, args = run(converge, store)
    assert result['nodes'][entry['uuid']]['created'] == [
        ('volume', 'tk0vol1')]
    assert hypervisor.things[('domain', 'tk0')]['memory_mb'] == 256
    assert conductor.db.get_node(entry['uuid']).memory_mb == 256
    converge.revert(result=result, **args)
    assert state(conductor, hypervisor) == deployed


def test_a_failed_task_removes_only_what_it_began(conductor, hypervisor):
    tasks, store = deployable(conductor, make_spec(count=1))
    converge = next(t for t in tasks if isinstance(t, nodes.ConvergeNodes))
    for t in tasks[:tasks.index(converge)]:
        run(t, store)
    before = state(conductor, hypervisor)
    # Somebody else's domain of that name: not adopted, not removed.
    hypervisor.fail[('domain', 'tk0')] = fakes.conflict('domain', 'tk0')
    with pytest.raises(exceptions.NodesNotDeployed, match='tk0'):
        run(converge, store)
    converge.revert(result=failure.Failure.from_exception(
        exceptions.ResourceConflict(kind='d', name='tk0', owner='o',
                                    reason='r')), **store)
    assert state(conductor, hypervisor)[:2] == before[:2]
    assert hypervisor.calls['remove_domain'] == 0
    # An agent that fails half way undoes its own partial work, but that
    # undo may fail too (libvirt gone): the records stay, and the revert
    # removes what they name, by owner mark.
    [entry] = converge.entries
    conductor.db.add_nodes([entry['new']['record']])
    hypervisor.fail[('domain', 'tk0')] = exceptions.DriverError(
        driver='fake', action='define', reason='boom')
    store[base.OPERATION_ID] = 'op-2'
    with pytest.raises(exceptions.NodesNotDeployed, match='boom'):
        run(converge, store)
    assert conductor.db.list_resources(node=entry['uuid']) != []
    converge.revert(result=None, **store)
    assert conductor.db.list_resources(node=entry['uuid']) == []
    assert state(conductor, hypervisor)[:2] == before[:2]


def request_batches(conductor, monkeypatch):
    """[(host, method, requests)] of each request_all the tasks make."""
    batches = []
    real = conductor.agents.request_all

    def spy(host, method, calls, **kwargs):
        batches.append((host, method, len(calls)))
        return real(host, method, calls, **kwargs)

    monkeypatch.setattr(conductor.agents, 'request_all', spy)
    return batches


def test_a_batch_keeps_its_good_nodes_and_names_the_failed_one(
        conductor, hypervisor, monkeypatch):
    """A batch's requests go at once; one that fails makes the task fail
    naming its node alone, once the others are recorded; the revert
    removes what the operation made of each, in one batch too."""
    tasks, store = deployable(conductor, make_spec(count=3))
    converge = next(t for t in tasks if isinstance(t, nodes.ConvergeNodes))
    for t in tasks[:tasks.index(converge)]:
        run(t, store)
    before = state(conductor, hypervisor)
    batches = request_batches(conductor, monkeypatch)
    hypervisor.fail[('domain', 'tk1')] = exceptions.DriverError(
        driver='fake', action='define tk1', reason='disk full')
    told = types.SimpleNamespace(steps=[])
    told.step = lambda name, count=1: told.steps.append((name, count))
    with context.reporting(store[base.OPERATION_ID], told):
        with pytest.raises(exceptions.NodesNotDeployed) as raised:
            run(converge, store)
    # The operation's progress heard of each good node as it was made.
    assert told.steps == [(converge.name, 1)] * 2
    message = str(raised.value)
    assert 'tk1 (' in message and 'disk full' in message
    assert 'tk0' not in message and 'tk2' not in message
    assert batches == [('hv1', 'ensure_node', 3)]
    db = conductor.db
    uuids = {e['name']: e['uuid'] for e in converge.entries}
    assert [db.get_node(uuids[name]).state for name in ('tk0', 'tk2')] == [
        'deployed', 'deployed']
    assert {('domain', 'tk0'), ('domain', 'tk2')} <= set(hypervisor.things)
    converge.revert(result=failure.Failure.from_exception(raised.value),
                    **store)
    assert batches[1:] == [('hv1', 'remove_node', 3)]
    assert state(conductor, hypervisor)[:2] == before[:2]
    assert [db.get_node(u) for u in uuids.values()] == [None] * 3


def test_a_batch_of_changed_and_new_nodes_is_reverted_node_by_node(
        conductor, hypervisor, monkeypatch):
    """tk0 grows, tk1 is new, in one task: the revert gives tk0 its old
    view back and removes tk1."""
    conductor.deployments.deploy(make_spec(count=1))
    deployed = state(conductor, hypervisor)
    tasks, store = deployable(conductor, bigger(count=2, memory_mb=512))
    [converge] = [t for t in tasks if isinstance(t, nodes.ConvergeNodes)]
    assert sorted(e['action'] for e in converge.entries) == [
        'create', 'update']
    batches = request_batches(conductor, monkeypatch)
    result, args = run(converge, store)
    assert hypervisor.things[('domain', 'tk0')]['memory_mb'] == 512
    assert ('domain', 'tk1') in hypervisor.things
    converge.revert(result=result, **args)
    assert sorted(batches) == [('hv1', 'ensure_node', 1),
                               ('hv1', 'ensure_node', 2),
                               ('hv1', 'remove_node', 1)]
    assert state(conductor, hypervisor) == deployed


def test_a_node_twice_in_a_plan_makes_no_flow(conductor):
    """Its two requests would share an id: one answer, two waiters."""
    _, plan = planned(conductor, make_spec(count=1))
    with pytest.raises(ValueError, match='is in the plan twice'):
        nodes.converge_tasks(plan['nodes'] * 2, {}, False)


def test_node_and_cluster_records_are_restored(conductor, hypervisor):
    conductor.deployments.deploy(make_spec(count=1))
    deployed = state(conductor, hypervisor)
    # On a deployed cluster, a node's update that finishes it, then
    # reverted, leaves the node deployed with its old sizes.
    tasks, store = deployable(conductor, bigger(memory_mb=512))
    [converge] = [t for t in tasks if isinstance(t, nodes.ConvergeNodes)]
    [entry] = converge.entries
    assert not entry['enrol']
    result, args = run(converge, store)
    assert conductor.db.get_node(entry['uuid']).memory_mb == 512
    converge.revert(result=result, **args)
    assert state(conductor, hypervisor) == deployed


def test_reverting_a_new_cluster_forgets_its_records(conductor, hypervisor):
    tasks, store = deployable(conductor, make_spec(count=1))
    mark = tasks[0]
    converge = next(t for t in tasks if isinstance(t, nodes.ConvergeNodes))
    marked, mark_args = run(mark, store)
    converged, converge_args = run(converge, store)
    converge.revert(result=converged, **converge_args)
    mark.revert(result=marked, **mark_args)
    assert conductor.db.get_cluster('unit') is None
    assert conductor.db.list_nodes() == []
    assert conductor.db.list_resources() == []
    assert hypervisor.things == {}


def test_mapped_physnet_gets_an_uplink(conductor):
    _, plan = planned(conductor, make_spec(
        count=1, physnet_mappings={'physnet1': 'eth1'}))
    [uplink] = [e for e in plan['host_ensure'] if e['kind'] == 'uplink']
    assert (uplink['name'], uplink['args']['source'],
            uplink['args']['veth_names']) == (
        'brtenks0', 'eth1', ['p-brtenks0-br', 'p-brtenks0-phy'])


def test_resource_class_normalisation_is_one_rule():
    assert reconcile.normalise_resource_class('tenks-gold') == (
        'CUSTOM_TENKS_GOLD')
    assert reconcile.normalise_resource_class('baremetal.x86 big') == (
        'CUSTOM_BAREMETAL_X86_BIG')
    assert reconcile.normalise_resource_class('CUSTOM_GOLD') == (
        'CUSTOM_GOLD')


def test_flavor_extra_specs():
    assert reconcile.flavor_extra_specs({
        'resource_class': 'gold', 'required_traits': ['CUSTOM_A'],
        'forbidden_traits': ['CUSTOM_B'], 'custom_specs': {'x:y': 1},
    }) == {'resources:CUSTOM_GOLD': '1', 'resources:VCPU': '0',
           'resources:MEMORY_MB': '0', 'resources:DISK_GB': '0',
           'trait:CUSTOM_A': 'required', 'trait:CUSTOM_B': 'forbidden',
           'x:y': '1'}


def test_enrolled_nodes_get_registration_and_post_deploy_tasks(conductor):
    ironic = {'resource_class': 'gold', 'traits': ['CUSTOM_A'],
              'boot_interface': 'pxe'}
    operation_id, p = planned(conductor, make_spec(
        count=2, specs=[{'type': 'small', 'count': 2,
                         'ironic_config': ironic}],
        nova_flavors=[{'resource_class': 'gold', 'node_type': 'small'}],
        wait_for_placement=True))
    names = [t.name for t in all_tasks(deploy.get_deploy_flow(
        operation_id))]
    node = p['nodes'][0]
    # Each node: its hypervisor request, then its enrolment.
    assert names.index('ironic_node:openstack:%s' % node['uuid']) > (
        names.index('node:hv1:0'))
    assert 'nova_flavor:openstack:gold' in names
    assert names[-4:] == ['placement:wait', 'placement:aggregates',
                          'placement:check', 'cluster:commit']
    assert node['new']['ironic']['fields'] == {
        'name': 'tk0', 'driver': 'ipmi', 'resource_class': 'gold',
        'boot_interface': 'pxe',
        'properties': {'cpus': 1, 'memory_mb': 128, 'local_gb': 1,
                       'cpu_arch': 'x86_64',
                       'capabilities': 'boot_mode:bios'}}
    # The wait is for these nodes' own providers, by node uuid.
    assert p['placement_wait'] == [['CUSTOM_GOLD', ['CUSTOM_A'], {
        n['uuid']: n['name'] for n in p['nodes']}]]
    assert p['flavors']['ensure'][0]['disk'] == 1


class Nova:
    """A compute proxy that creates flavors but refuses extra specs."""

    def __init__(self):
        self.flavors = {}

    def find_flavor(self, name, ignore_missing=True):
        return self.flavors.get(name)

    def create_flavor(self, name, **sizes):
        self.flavors[name] = name
        return name

    def create_flavor_extra_specs(self, flavor, specs):
        raise RuntimeError('extra specs refused')

    def delete_flavor(self, flavor):
        del self.flavors[flavor]


def test_a_flavor_whose_extra_specs_fail_is_not_left_behind():
    conn = types.SimpleNamespace(compute=Nova())
    flavor = {'name': 'gold', 'vcpus': 1, 'ram': 128, 'disk': 0,
              'extra_specs': {'resources:CUSTOM_GOLD': '1'}}
    with pytest.raises(RuntimeError, match='extra specs refused'):
        nova.ensure_flavor(conn, flavor, adopt=False)
    assert conn.compute.flavors == {}


@pytest.mark.parametrize('made', [True, False])
def test_a_flavor_whose_connection_dropped_is_made_once(made):
    """A POST is not sent again under a dropped connection: Nova may or
    may not have made the flavor; the next attempt takes it as ours."""
    from keystoneauth1 import exceptions as ksa_exceptions
    from openstack import exceptions as sdk
    made_flavors = {}
    dropped = [ksa_exceptions.ConnectFailure('Connection aborted.')]

    def find_flavor(name, ignore_missing=True):
        if name not in made_flavors:
            raise sdk.NotFoundException('no flavor %s' % name)
        return made_flavors[name]

    def create_flavor(name, **sizes):
        if dropped and not made:
            raise dropped.pop()
        made_flavors[name] = types.SimpleNamespace(name=name, specs={},
                                                   **sizes)
        if dropped:
            raise dropped.pop()
        return made_flavors[name]

    def create_flavor_extra_specs(flavor, specs):
        flavor.specs.update(specs)

    conn = types.SimpleNamespace(compute=types.SimpleNamespace(
        find_flavor=find_flavor, create_flavor=create_flavor,
        create_flavor_extra_specs=create_flavor_extra_specs,
        fetch_flavor_extra_specs=lambda f: types.SimpleNamespace(
            extra_specs=dict(f.specs))))
    flavor = {'name': 'gold', 'vcpus': 1, 'ram': 128, 'disk': 0,
              'extra_specs': {'resources:CUSTOM_GOLD': '1'}}
    assert nova.make_flavor(conn, flavor, adopt=False) is True
    assert list(made_flavors) == ['gold']
    assert made_flavors['gold'].specs == {'resources:CUSTOM_GOLD': '1'}


def test_a_nova_that_stays_unreachable_is_named_as_such():
    """Not "refused": Nova never answered, the second try neither."""
    from keystoneauth1 import exceptions as ksa_exceptions
    tries = []

    def find_flavor(name, ignore_missing=True):
        tries.append(name)
        raise ksa_exceptions.ConnectFailure(
            'Unable to establish connection to http://127.0.0.1:8774')

    conn = types.SimpleNamespace(compute=types.SimpleNamespace(
        find_flavor=find_flavor))
    flavor = {'name': 'gold', 'vcpus': 1, 'ram': 128, 'disk': 0,
              'extra_specs': {}}
    with pytest.raises(exceptions.CloudUnreachable) as raised:
        nova.make_flavor(conn, flavor, adopt=False)
    assert str(raised.value) == (
        'Could not reach Nova to create flavor gold: Unable to establish '
        'connection to http://127.0.0.1:8774')
    assert tries == ['gold', 'gold']


class Placement:
    """Providers that offer one unit of a class with some traits,
    answering the wait's class, trait and provider queries."""

    def __init__(self, providers):
        self.providers = providers  # {uuid: (class, traits)}

    def get(self, path, microversion=None, raise_exc=True):
        parts = path.split('?')
        if len(parts) == 1:
            kind, name = path.strip('/').split('/')
            known = {rc for rc, _ in self.providers.values()} | {
                t for _, traits in self.providers.values() for t in traits}
            return types.SimpleNamespace(
                status_code=200 if name in known else 404)
        query = dict(q.split('=') for q in parts[1].split('&'))
        rc = query['resources'].split(':')[0]
        required = set(query.get('required', '').split(',')) - {''}
        body = {'resource_providers': [
            {'uuid': u} for u, (c, traits) in self.providers.items()
            if c == rc and required <= set(traits)]}
        return types.SimpleNamespace(status_code=200, json=lambda: body,
                                     raise_for_status=lambda: None)


def wait_for_placement(monkeypatch, providers, nodes, timeout=0):
    conn = types.SimpleNamespace(placement=Placement(providers))
    monkeypatch.setattr(post_deploy.context, 'get', lambda: types.
                        SimpleNamespace(cloud=types.SimpleNamespace(
                            connection=conn)))
    monkeypatch.setattr(post_deploy, 'PLACEMENT_POLL', 0)
    post_deploy.WaitForPlacement(
        [['CUSTOM_GOLD', ['CUSTOM_A'], nodes]], timeout).execute()


def test_placement_wait_counts_only_the_nodes_own_providers(monkeypatch):
    ours, stale = str(uuid.uuid4()), str(uuid.uuid4())
    # A provider of the class that is no node of this deploy (one
    # nova-compute has not deleted yet) does not end the wait.
    with pytest.raises(exceptions.PlacementTimeout) as raised:
        wait_for_placement(monkeypatch,
                           {stale: ('CUSTOM_GOLD', ['CUSTOM_A'])},
                           {ours: 'tk0'})
    assert ('CUSTOM_GOLD with CUSTOM_A: 0 of 1 nodes offer it (not yet '
            'tk0)' in str(raised.value))
    # The node's own provider, without the trait, does not either.
    with pytest.raises(exceptions.PlacementTimeout):
        wait_for_placement(monkeypatch, {ours: ('CUSTOM_GOLD', [])},
                           {ours: 'tk0'})
    wait_for_placement(monkeypatch, {ours: ('CUSTOM_GOLD', ['CUSTOM_A']),
                                     stale: ('CUSTOM_GOLD', ['CUSTOM_A'])},
                       {ours: 'tk0'})


def test_placement_timeout_names_a_few_of_many_nodes(monkeypatch):
    nodes = {str(uuid.uuid4()): 'tk%02d' % i for i in range(12)}
    with pytest.raises(exceptions.PlacementTimeout) as raised:
        wait_for_placement(monkeypatch, {}, nodes)
    assert ('0 of 12 nodes offer it (not yet tk00, tk01, tk02, tk03, tk04 '
            'and 7 more)' in str(raised.value))


def _compile_work(flow, monkeypatch):
    """Graph nodes TaskFlow's compiler copies to compile ``flow``."""
    from taskflow.engines.action_engine import compiler
    from taskflow.types import graph
    copied = []
    compose = graph.nx.algorithms.compose
    monkeypatch.setattr(graph.nx.algorithms, 'compose', lambda g, h: (
        copied.append(len(g) + len(h)) or compose(g, h)))
    compiler.PatternCompiler(flow).compile()
    monkeypatch.undo()
    return sum(copied)


def test_compiling_a_deploy_flow_costs_in_proportion_to_its_nodes(
        conductor, monkeypatch):
    work = {}
    for count in (100, 400):
        operation_id, _ = planned(conductor, make_spec(
            cluster='c%d' % count, count=count, ipmi_port_range_end=9000),
            memory_mb=1024 ** 2, free=1024 ** 5)
        flow = deploy.get_deploy_flow(operation_id)
        assert sum(t.steps for t in all_tasks(flow)
                   if isinstance(t, nodes.ConvergeNodes)) == count
        work[count] = _compile_work(flow, monkeypatch)
    # A flat flow of n nodes: n² (16 times the work for 4 times the nodes).
    assert work[400] < 6 * work[100]


class Noop(task.Task):

    def execute(self):
        pass


def test_a_large_unordered_flow_keeps_every_atom_once():
    atoms = [Noop('t%d' % n) for n in range(1000)]
    flow = stages.unordered('stage', atoms)
    assert sorted(t.name for t in all_tasks(flow)) == sorted(
        t.name for t in atoms)
    assert len(flow) <= stages.FANOUT
