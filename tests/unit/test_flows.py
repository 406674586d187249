from taskflow import task

from conductor import plans
from flows import deploy
from flows import post_deploy
from flows import registration
from flows import teardown
from tenks import scheduler
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


def test_every_task_reverts_or_says_why_not():
    flows = [deploy.get_deploy_flow(plan(count=1,
                                         physnet_mappings={'physnet1': 'e'})),
             teardown.get_teardown_flow('unit', [
                 {'hypervisor': 'hv1', 'kind': 'bmc', 'name': 'tk0',
                  'remove_args': {'domain': 'tk0'}}])]
    for flow in flows:
        for t in all_tasks(flow):
            revert = type(t).revert
            assert revert is not task.Task.revert, t.name
            assert any('Reversion strategy' in (cls.__doc__ or '')
                       for cls in type(t).__mro__), t.name


def test_mapped_physnet_gets_an_uplink():
    p = plan(count=1, physnet_mappings={'physnet1': 'eth1'})
    assert p['hosts']['hv1']['bridges'] == [{
        'name': 'brtenks0', 'physnet': 'physnet1',
        'uplink': {'source': 'eth1',
                   'veth_names': ['p-brtenks0-br', 'p-brtenks0-phy']}}]


def test_resource_class_normalisation_is_one_rule():
    assert registration.normalise_resource_class('tenks-gold') == (
        'CUSTOM_TENKS_GOLD')
    assert registration.normalise_resource_class('baremetal.x86 big') == (
        'CUSTOM_BAREMETAL_X86_BIG')
    assert registration.normalise_resource_class('CUSTOM_GOLD') == (
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
