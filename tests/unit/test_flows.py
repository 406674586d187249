import types

import pytest
from taskflow import task
from taskflow.types import failure

from conductor import plans
from flows import base
from flows import deploy
from flows import post_deploy
from flows import records
from tenks import exceptions
from tenks import reconcile
from tenks import scheduler
from tests.unit import fakes
from tests.unit.conftest import make_spec
from tests.unit.test_scheduler import facts


def all_tasks(flow):
    found = []
    for item, _ in flow.iter_nodes():
        found += [item] if isinstance(item, task.Task) else all_tasks(item)
    return found


def plan(count=2, **top):
    spec = make_spec(count=count, **top)
    host = {'hv1': facts(mappings=spec['physnet_mappings'])}
    nodes = scheduler.schedule(spec, host, [])
    return plans.deploy_plan(spec, 'deployment-1', nodes, host)


def test_deploy_flow_has_a_task_per_resource_with_stable_names():
    tasks = all_tasks(deploy.get_deploy_flow(plan(count=2)))
    names = [t.name for t in tasks]
    assert len(names) == len(set(names))
    resources = sorted(n for n in names if not n.startswith(
        ('cluster:', 'node:')))
    assert resources == sorted([
        'pool:hv1:tenks-unit', 'bridge:hv1:brtenks0',
        'volume:hv1:tk0vol0', 'volume:hv1:tk1vol0',
        'port:hv1:p-tk0-0', 'port:hv1:p-tk1-0',
        'domain:hv1:tk0', 'domain:hv1:tk1', 'bmc:hv1:tk0', 'bmc:hv1:tk1'])
    # Rebuilding from the same plan gives the same names (resume).
    again = [t.name for t in all_tasks(deploy.get_deploy_flow(plan(2)))]
    assert sorted(n for n in again if n.startswith(('pool', 'bridge'))) == (
        sorted(n for n in names if n.startswith(('pool', 'bridge'))))


def deployable(conductor, count=2, **top):
    """A scheduled cluster, recorded as submit_deploy records it, and its
    deploy flow's tasks in the order a linear run executes them."""
    spec = make_spec(count=count, physnet_mappings={'physnet1': 'eth1'},
                     **top)
    host = {'hv1': facts(mappings=spec['physnet_mappings'])}
    conductor.db.save_cluster(spec['cluster'], spec,
                              records.CLUSTER_SCHEDULED)
    conductor.db.add_nodes(scheduler.schedule(spec, host, []))
    nodes = [n.as_dict() for n in conductor.db.list_nodes()]
    deployment = conductor.db.get_cluster(spec['cluster']).uuid
    return all_tasks(deploy.get_deploy_flow(
        plans.deploy_plan(spec, deployment, nodes, host)))


def state(conductor, hv):
    """Everything a task may change: the hypervisor and the records."""
    db = conductor.db
    return (dict(hv.things),
            sorted((r.kind, r.name, r.state)
                   for r in db.list_resources('unit')),
            sorted((n.name, n.state) for n in db.list_nodes()),
            getattr(db.get_cluster('unit'), 'state', None))


def run(t, store):
    """Execute ``t`` with its arguments from ``store``; return result."""
    args = {name: store[key] for name, key in t.rebind.items()}
    result = t.execute(**args)
    for name in t.provides:
        store[name] = result
    return result, args


STORE = {base.OPERATION_ID: 'op-1', base.CLUSTER: 'unit'}


def test_each_hypervisor_task_makes_one_thing_and_its_revert_undoes_it(
        conductor, hypervisor):
    store = dict(STORE)
    for t in deployable(conductor):
        before = state(conductor, hypervisor)
        result, args = run(t, store)
        if isinstance(t, base.EnsureResource):
            made = set(hypervisor.things) - set(before[0])
            assert made == {(t.kind, t.resource if t.kind != 'bmc'
                             else t.ensure_args['domain'])}, t.name
            assert result['new'] and result['changed']
            assert conductor.db.get_resource('hv1', t.kind,
                                             t.resource).state == 'present'
            t.revert(result=result, **args)
            assert state(conductor, hypervisor) == before, t.name
            # Again, to go on with what the next tasks need (as a new
            # operation: the agent answers a request id it has seen
            # from its memory).
            run(t, dict(store, operation_id='op-again'))
    assert hypervisor.names('domain') == ['tk0', 'tk1']


def test_reverting_a_rerun_keeps_what_was_there(conductor, hypervisor):
    store = dict(STORE)
    tasks = deployable(conductor, count=1)
    for t in tasks:
        run(t, store)
    deployed = state(conductor, hypervisor)
    store[base.OPERATION_ID] = 'op-2'
    for t in tasks:
        if isinstance(t, base.EnsureResource):
            result, args = run(t, store)
            assert not (result['changed'] or result['new']
                        or result.get('created')), t.name
            t.revert(result=result, **args)
    assert state(conductor, hypervisor) == deployed


def test_a_failed_task_removes_only_what_it_began(conductor, hypervisor):
    store = dict(STORE)
    tasks = deployable(conductor, count=1)
    domain = next(t for t in tasks if t.name == 'domain:hv1:tk0')
    for t in tasks[:tasks.index(domain)]:
        run(t, store)
    before = state(conductor, hypervisor)
    # Somebody else's domain of that name: not adopted, not removed.
    hypervisor.fail[('domain', 'tk0')] = fakes.conflict('domain', 'tk0')
    with pytest.raises(exceptions.ResourceConflict):
        run(domain, store)
    domain.revert(result=failure.Failure.from_exception(
        exceptions.ResourceConflict(kind='d', name='tk0', owner='o',
                                    reason='r')), **STORE)
    assert state(conductor, hypervisor) == before
    assert hypervisor.calls['remove_domain'] == 0
    # An agent that answers with an error has made nothing (it undoes
    # its own partial work): the record goes, and the revert has
    # nothing to remove.
    hypervisor.fail[('domain', 'tk0')] = exceptions.DriverError(
        driver='fake', action='define', reason='boom')
    store[base.OPERATION_ID] = 'op-2'
    with pytest.raises(exceptions.DriverError):
        run(domain, store)
    assert conductor.db.get_resource('hv1', 'domain', 'tk0') is None
    domain.revert(result=None, operation_id='op-2', cluster='unit')
    assert state(conductor, hypervisor) == before
    assert hypervisor.calls['remove_domain'] == 0


def test_node_and_cluster_records_are_restored(conductor, hypervisor):
    store = dict(STORE)
    tasks = deployable(conductor, count=1)
    for t in tasks:
        run(t, store)
    deployed = state(conductor, hypervisor)
    # On a deployed cluster, StartNode then FinishNode, reverted in the
    # reverse order, leave the node deployed.
    start, finish = [t for t in tasks if isinstance(
        t, (records.StartNode, records.FinishNode))]
    started, start_args = run(start, store)
    finished, finish_args = run(finish, store)
    finish.revert(result=finished, **finish_args)
    start.revert(result=started, **start_args)
    assert state(conductor, hypervisor) == deployed


def test_reverting_a_new_cluster_forgets_its_records(conductor, hypervisor):
    store = dict(STORE)
    tasks = deployable(conductor, count=1)
    mark, start = tasks[0], next(t for t in tasks
                                 if isinstance(t, records.StartNode))
    marked, mark_args = run(mark, store)
    started, start_args = run(start, store)
    start.revert(result=started, **start_args)
    mark.revert(result=marked, **mark_args)
    assert conductor.db.get_cluster('unit') is None
    assert conductor.db.list_nodes() == []


def test_mapped_physnet_gets_an_uplink():
    p = plan(count=1, physnet_mappings={'physnet1': 'eth1'})
    assert p['hosts']['hv1']['bridges'] == [{
        'name': 'brtenks0', 'physnet': 'physnet1',
        'uplink': {'source': 'eth1',
                   'veth_names': ['p-brtenks0-br', 'p-brtenks0-phy']}}]


def test_resource_class_normalisation_is_one_rule():
    assert reconcile.normalise_resource_class('tenks-gold') == (
        'CUSTOM_TENKS_GOLD')
    assert reconcile.normalise_resource_class('baremetal.x86 big') == (
        'CUSTOM_BAREMETAL_X86_BIG')
    assert reconcile.normalise_resource_class('CUSTOM_GOLD') == (
        'CUSTOM_GOLD')


def test_flavor_extra_specs():
    assert post_deploy.flavor_extra_specs({
        'resource_class': 'gold', 'required_traits': ['CUSTOM_A'],
        'forbidden_traits': ['CUSTOM_B'], 'custom_specs': {'x:y': 1},
    }) == {'resources:CUSTOM_GOLD': '1', 'resources:VCPU': '0',
           'resources:MEMORY_MB': '0', 'resources:DISK_GB': '0',
           'trait:CUSTOM_A': 'required', 'trait:CUSTOM_B': 'forbidden',
           'x:y': '1'}


def test_enrolled_nodes_get_registration_and_post_deploy_tasks():
    ironic = {'resource_class': 'gold', 'traits': ['CUSTOM_A'],
              'boot_interface': 'pxe'}
    p = plan(count=2, specs=[{'type': 'small', 'count': 2,
                              'ironic_config': ironic}],
             nova_flavors=[{'resource_class': 'gold', 'node_type': 'small'}],
             wait_for_placement=True)
    names = [t.name for t in all_tasks(deploy.get_deploy_flow(p))]
    node = p['nodes'][0]
    assert 'ironic_node:openstack:%s' % node['uuid'] in names
    assert 'nova_flavor:openstack:gold' in names
    assert names[-3:] == ['placement:wait', 'placement:check',
                          'cluster:deployed']
    assert node['ironic']['fields'] == {
        'name': 'tk0', 'driver': 'ipmi', 'resource_class': 'gold',
        'boot_interface': 'pxe',
        'properties': {'cpus': 1, 'memory_mb': 128, 'local_gb': 1,
                       'cpu_arch': 'x86_64',
                       'capabilities': 'boot_mode:bios'}}
    assert p['placement_wait'] == [['CUSTOM_GOLD', ['CUSTOM_A'], 2]]
    assert p['flavors'][0]['disk'] == 1


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
        post_deploy.ensure_flavor(conn, flavor, adopt=False)
    assert conn.compute.flavors == {}
