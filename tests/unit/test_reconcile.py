"""The spec against the records: what a deploy changes (tenks.reconcile)."""

import copy

import pytest

from conductor import planner
from tenks import constants
from tenks import exceptions
from tenks import reconcile
from tenks import scheduler
from tests.unit.conftest import make_spec
from tests.unit.test_scheduler import facts

DEPLOYMENT = 'deployment-1'


class Record:
    """A cluster's record as the conductor reads it."""

    def __init__(self, spec, state='deployed'):
        self.spec = spec
        self.state = state
        self.uuid = DEPLOYMENT


def deployed(spec, hosts=None):
    """Records of ``spec`` deployed: its nodes (dicts) and resources."""
    hosts = hosts or {'hv1': facts()}
    nodes = scheduler.schedule(spec, hosts, [])
    for index, node in enumerate(nodes):
        node['state'] = 'deployed'
        node['created_at'] = '2026-11-30T00:00:%02d' % index
    resources = []
    for host in hosts:
        for kind, name, args in reconcile.host_resources(
                spec, DEPLOYMENT, host, hosts[host]):
            resources.append({'hypervisor': host, 'kind': kind,
                              'name': name, 'remove_args': args,
                              'state': 'present', 'node': None})
    return nodes, resources


def plan(new_spec, old_spec, nodes, resources, hosts=None, force=False):
    result, _ = planner.plan_deploy(
        new_spec, Record(old_spec), hosts or {'hv1': facts()},
        copy.deepcopy(nodes), resources, force)
    return result


def actions(result):
    return {entry['name']: entry['action'] for entry in result['nodes']}


def test_nothing_changes_for_the_same_spec():
    spec = make_spec(count=3)
    nodes, resources = deployed(spec)
    result = plan(spec, spec, nodes, resources)
    assert result['changes'] == []
    assert set(actions(result).values()) == {constants.KEEP}


def test_reordering_specs_changes_nothing():
    spec = make_spec(count=2, node_types={
        'a': {'memory_mb': 128, 'vcpus': 1},
        'b': {'memory_mb': 256, 'vcpus': 2}},
        specs=[{'type': 'a', 'count': 2, 'node_name_prefix': 'a'},
               {'type': 'b', 'count': 1, 'node_name_prefix': 'b'}])
    nodes, resources = deployed(spec)
    swapped = dict(spec, specs=list(reversed(spec['specs'])))
    result = plan(swapped, spec, nodes, resources)
    assert result['changes'] == []
    # Each node now points at its entry's new place.
    index = {e['name']: e['new']['record']['spec_index']
             for e in result['nodes']}
    assert index == {'a0': 1, 'a1': 1, 'b0': 0}


def test_count_up_adds_nodes_with_fresh_names_macs_and_ports():
    spec = make_spec(count=2)
    nodes, resources = deployed(spec)
    result = plan(make_spec(count=4), spec, nodes, resources)
    assert actions(result) == {'tk0': 'keep', 'tk1': 'keep',
                               'tk2': 'create', 'tk3': 'create'}
    created = [e['new'] for e in result['nodes'] if e['action'] == 'create']
    old_macs = {nic['mac'] for n in nodes for nic in n['nics']}
    assert not old_macs & {nic['mac'] for n in created for nic in n['nics']}
    assert sorted(n['bmc']['port'] for n in created) == [6232, 6233]


def test_count_down_removes_the_newest_first():
    spec = make_spec(count=4)
    nodes, resources = deployed(spec)
    result = plan(make_spec(count=1), spec, nodes, resources)
    assert actions(result) == {'tk0': 'keep', 'tk1': 'delete',
                               'tk2': 'delete', 'tk3': 'delete'}
    assert reconcile.destructive(result)


def test_names_of_live_nodes_are_never_reused():
    spec = make_spec(count=3)
    nodes, resources = deployed(spec)
    # tk1 is gone by hand from the records' point of view: its name is
    # free, but tk2 lives; a new node takes tk1, never tk2.
    del nodes[1]
    result = plan(make_spec(count=3), spec, nodes, resources)
    assert actions(result) == {'tk0': 'keep', 'tk1': 'create',
                               'tk2': 'keep'}


def test_memory_and_vcpus_update_the_domain_in_place():
    spec = make_spec(count=1)
    nodes, resources = deployed(spec)
    bigger = make_spec(count=1, node_types={'small': {
        'memory_mb': 256, 'vcpus': 2, 'volumes': [{'capacity': '1GiB'}],
        'physical_networks': ['physnet1']}})
    result = plan(bigger, spec, nodes, resources)
    [entry] = result['nodes']
    assert entry['action'] == 'update' and entry['agent']
    assert entry['new']['record']['uuid'] == nodes[0]['uuid']
    assert [(c['resource'], c['field'], c['old'], c['new'])
            for c in result['changes']] == [
        ('domain', 'memory_mb', 128, 256), ('domain', 'vcpus', 1, 2)]
    assert not reconcile.destructive(result)


def test_volumes_and_networks_added_and_removed():
    spec = make_spec(count=1)
    nodes, resources = deployed(spec)
    changed = make_spec(count=1, physical_networks=['physnet1', 'physnet2'],
                        node_types={'small': {
                            'memory_mb': 128, 'vcpus': 1,
                            'volumes': [{'capacity': '2GiB'},
                                        {'capacity': '1GiB'}],
                            'physical_networks': ['physnet2']}})
    result = plan(changed, spec, nodes, resources)
    lines = {(c['resource'], c['action']) for c in result['changes']}
    assert lines >= {('volume tk0vol0', 'update'),
                     ('volume tk0vol1', 'create'),
                     ('port p-tk0-0', 'delete'), ('port p-tk0-1', 'create'),
                     ('bridge brtenks1', 'create')}
    [entry] = result['nodes']
    [nic] = entry['new']['nics']
    assert nic['physnet'] == 'physnet2' and nic['tap'] == 'p-tk0-1'
    assert nic['mac'] != nodes[0]['nics'][0]['mac']


def test_a_volume_never_shrinks():
    spec = make_spec(count=1)
    nodes, resources = deployed(spec)
    smaller = make_spec(count=1, node_types={'small': {
        'memory_mb': 128, 'vcpus': 1, 'volumes': [{'capacity': '512MiB'}],
        'physical_networks': ['physnet1']}})
    with pytest.raises(exceptions.ChangeRefused, match='cannot shrink'):
        plan(smaller, spec, nodes, resources)


def test_port_range_change_moves_only_nodes_outside_it():
    spec = make_spec(count=2)
    nodes, resources = deployed(spec)
    moved = make_spec(count=2, ipmi_port_range_start=6231,
                      ipmi_port_range_end=6240)
    result = plan(moved, spec, nodes, resources)
    ports = {e['name']: e['new']['bmc']['port'] for e in result['nodes']}
    assert ports == {'tk0': 6232, 'tk1': 6231}


def test_nodes_moved_out_of_the_port_range_take_distinct_ports():
    spec = make_spec(count=3)
    nodes, resources = deployed(spec)
    moved = make_spec(count=3, ipmi_port_range_start=6240,
                      ipmi_port_range_end=6250)
    result = plan(moved, spec, nodes, resources)
    assert sorted(e['new']['bmc']['port'] for e in result['nodes']) == [
        6240, 6241, 6242]


def test_in_use_counts_the_values_of_other_nodes_only():
    in_use = reconcile.InUse([
        ('10.0.0.1', 6230, 'a'), ('10.0.0.1', 6231, 'b'),
        ('10.0.0.2', 6232, 'c'), ('10.0.0.1', 6231, 'c')])
    for_a = in_use.others('10.0.0.1', 'a')
    assert 6230 not in for_a and 6231 in for_a and 6232 not in for_a
    for_b = in_use.others('10.0.0.1', 'b')
    # c uses 6231 at this address too.
    assert 6231 in for_b and 6230 in for_b
    for_a.add(6233)
    assert 6233 in in_use.others('10.0.0.1', 'b')
    assert 6233 not in in_use.others('10.0.0.2', 'b')


def test_password_change_updates_every_bmc():
    spec = make_spec(count=2)
    nodes, resources = deployed(spec)
    result = plan(dict(spec, ipmi_password='other'), spec, nodes, resources)
    assert set(actions(result).values()) == {'update'}
    assert {(c['field'], c['old'], c['new'])
            for c in result['changes']} == {('ipmi_password', '***', '***')}


def test_ironic_changes_need_no_hypervisor_request():
    config = {'resource_class': 'baremetal', 'traits': []}
    spec = make_spec(count=1, specs=[{'type': 'small', 'count': 1,
                                      'ironic_config': config}])
    nodes, resources = deployed(spec)
    changed = make_spec(count=1, specs=[{'type': 'small', 'count': 1,
                                         'ironic_config': dict(
                                             config, resource_class='gold',
                                             traits=['CUSTOM_X'])}])
    result = plan(changed, spec, nodes, resources)
    [entry] = result['nodes']
    assert (entry['action'], entry['agent'], entry['enrol']) == (
        'update', False, True)
    fields = {c['field']: c['new'] for c in result['changes']}
    assert fields['resource_class'] == 'gold'
    assert fields['traits'] == ['CUSTOM_X']


def test_a_removed_entry_removes_its_nodes_and_flavors():
    spec = make_spec(count=1, node_types={
        'a': {'memory_mb': 128, 'vcpus': 1},
        'b': {'memory_mb': 128, 'vcpus': 1}},
        specs=[{'type': 'a', 'count': 1, 'node_name_prefix': 'a'},
               {'type': 'b', 'count': 1, 'node_name_prefix': 'b',
                'ironic_config': {'resource_class': 'rc'}}],
        nova_flavors=[{'resource_class': 'rc', 'node_type': 'b'}])
    nodes, resources = deployed(spec)
    fewer = dict(spec, specs=spec['specs'][:1], nova_flavors=[])
    result = plan(fewer, spec, nodes, resources)
    assert actions(result) == {'a0': 'keep', 'b0': 'delete'}
    assert result['flavors'] == {'ensure': [], 'old': {}, 'remove': ['rc']}


def test_physnet_mapping_change_replaces_the_uplink():
    spec = make_spec(count=1, physnet_mappings={'physnet1': 'eth0'})
    nodes, resources = deployed(spec, {'hv1': facts(
        mappings={'physnet1': 'eth0'})})
    result = plan(dict(spec, physnet_mappings={'physnet1': 'eth1'}), spec,
                  nodes, resources,
                  hosts={'hv1': facts(mappings={'physnet1': 'eth1'})})
    assert [(c['resource'], c['action'], c['old'], c['new'])
            for c in result['changes']] == [
        ('uplink brtenks0', 'replace', 'eth0', 'eth1')]
