"""The filter scheduler: each filter, the weighers, the report of a
placement that fails, and the resource provider model under them."""

import pytest

from tenks import conf as tenks_conf
from tenks import exceptions
from tenks import resources
from tenks import scheduler
from tests.unit.conftest import make_spec

GIB = 1024 ** 3


def facts(host, cpus=8, memory_mb=4096, disk_gb=100, traits=(),
          inventory=None, missing=(), address=None, busy=(),
          driver='linuxbridge', free=1024 ** 4, **extra):
    return dict({
        'host': host, 'cpus': cpus, 'memory_mb': memory_mb,
        'disk_gb': disk_gb, 'traits': list(traits),
        'inventory': inventory or {}, 'busy_ports': list(busy),
        'missing_interfaces': [(p, 'eth-' + p) for p in missing],
        'pool_dir': '/p', 'ipmi_address': address or '10.0.0.%d' % (
            hash(host) % 200 + 1),
        'resource_prefix': '', 'physnet_mappings': {'physnet1': 'eth1'},
        'pool_free_bytes': free, 'network_driver': driver,
        'foreign_interfaces': [], 'cpu_arch': 'x86_64'}, **extra)


def spec(count=1, memory_mb=128, vcpus=1, capacity='1GiB', top=None,
         **entry):
    return make_spec(**(top or {}), node_types={'t': {
        'memory_mb': memory_mb, 'vcpus': vcpus,
        'volumes': [{'capacity': capacity}] if capacity else [],
        'physical_networks': ['physnet1']}},
        specs=[dict({'type': 't', 'count': count}, **entry)])


def hosts_of(nodes):
    return [n['hypervisor'] for n in nodes]


def refused(spec_, all_facts, views=None, options=None):
    with pytest.raises(exceptions.NoValidHost) as raised:
        scheduler.schedule(spec_, all_facts, [], views, options)
    return str(raised.value)


def test_built_in_filters_and_weighers_are_registered_by_name():
    # Each is known by its entry point's name.
    options = scheduler.default_options()
    assert [f.name for f in options.filters] == list(
        tenks_conf.SCHEDULER_FILTERS)
    assert [w.name for w in options.weighers] == list(
        tenks_conf.SCHEDULER_WEIGHERS)


# Filters, one by one

def test_enabled_filter_skips_disabled_and_maintenance_hosts():
    all_facts = {h: facts(h) for h in ('hv1', 'hv2', 'hv3')}
    placement = {'hv1': {'enabled': False}, 'hv2': {'maintenance': True}}
    assert set(hosts_of(scheduler.schedule(
        spec(count=3), all_facts, [], placement))) == {'hv3'}
    placement['hv3'] = {'enabled': False}
    message = refused(spec(), all_facts, placement)
    assert message.startswith(
        'No valid host for node type t (specs[0]): 3 hypervisors; '
        'disabled removed 2, in maintenance removed 1 (')


@pytest.mark.parametrize('rc,host_facts,node', [
    ('VCPU', {'cpus': 1, 'inventory': {'VCPU': {'allocation_ratio': 2.0}}},
     {'vcpus': 3}),
    ('MEMORY_MB', {'memory_mb': 1000}, {'memory_mb': 1024}),
    ('DISK_GB', {'disk_gb': 4}, {'capacity': '5GiB'}),
])
def test_capacity_filter_per_resource_class(rc, host_facts, node):
    message = refused(spec(**node), {'hv1': facts('hv1', **host_facts),
                                     'hv2': facts('hv2', **host_facts)})
    assert '2 hypervisors; %s removed 2' % rc in message


def test_capacity_counts_allocation_ratio_reserved_and_recorded_nodes():
    inventory = {'MEMORY_MB': {'reserved': 1024, 'allocation_ratio': 1.5}}
    host = facts('hv1', memory_mb=2048, inventory=inventory)
    # (2048 - 1024) * 1.5 = 1536 MiB: three nodes of 512, not four.
    assert len(scheduler.schedule(spec(count=3, memory_mb=512),
                                  {'hv1': host}, [])) == 3
    message = refused(spec(count=4, memory_mb=512), {'hv1': host})
    assert 'MEMORY_MB: 512 asked, 0 of 1536 left' in message
    recorded = scheduler.schedule(spec(count=2, memory_mb=512),
                                  {'hv1': host}, [])
    for node in recorded:
        node['cluster'] = 'other'
    assert len(scheduler.schedule(spec(count=1, memory_mb=512),
                                  {'hv1': host}, recorded)) == 1
    with pytest.raises(exceptions.NoValidHost):
        scheduler.schedule(spec(count=2, memory_mb=512), {'hv1': host},
                           recorded)


@pytest.mark.parametrize('field,value,amount,why', [
    ('min_unit', 2, 1, 'below min_unit 2'),
    ('max_unit', 2, 4, 'above max_unit 2'),
    ('step_size', 2, 3, 'not a multiple of step_size 2'),
])
def test_capacity_filter_units(field, value, amount, why):
    host = facts('hv1', inventory={'VCPU': {field: value}})
    message = refused(spec(vcpus=amount), {'hv1': host})
    assert 'VCPU: %d asked, %s' % (amount, why) in message


def test_physnet_filter():
    all_facts = {'hv1': facts('hv1', missing=['physnet1']),
                 'hv2': facts('hv2')}
    assert hosts_of(scheduler.schedule(spec(count=2), all_facts, [])) == [
        'hv2', 'hv2']
    all_facts['hv2'] = facts('hv2', missing=['physnet1'])
    assert 'physnet physnet1 removed 2' in refused(spec(), all_facts)


def test_required_and_forbidden_traits():
    all_facts = {'hv1': facts('hv1', traits=['CUSTOM_SSD']),
                 'hv2': facts('hv2', traits=['CUSTOM_SSD', 'CUSTOM_SLOW']),
                 'hv3': facts('hv3')}
    nodes = scheduler.schedule(
        spec(count=2, required_traits=['CUSTOM_SSD'],
             forbidden_traits=['CUSTOM_SLOW']), all_facts, [])
    assert hosts_of(nodes) == ['hv1', 'hv1']
    # Traits the hostagent derives: architecture, physnets, BMC kinds.
    assert hosts_of(scheduler.schedule(spec(
        required_traits=['HW_ARCH_X86_64', 'CUSTOM_PHYSNET_PHYSNET1',
                         'CUSTOM_BMC_IPMI']), {'hv3': facts('hv3')},
        [])) == ['hv3']
    message = refused(spec(required_traits=['CUSTOM_SSD'],
                           forbidden_traits=['CUSTOM_SSD']), all_facts)
    assert 'trait !CUSTOM_SSD removed 2, trait CUSTOM_SSD removed 1' in (
        message)
    assert 'hv3: lacks required trait CUSTOM_SSD' in message


def test_availability_zone_filter_and_default_zone():
    all_facts = {h: facts(h) for h in ('hv1', 'hv2', 'hv3')}
    placement = {'hv1': {'availability_zone': 'az1'},
                 'hv2': {'availability_zone': 'az2'}}
    assert hosts_of(scheduler.schedule(
        spec(count=2, availability_zone='az2'), all_facts, [],
        placement)) == ['hv2', 'hv2']
    # hv3 is in no zone: the default one.
    assert hosts_of(scheduler.schedule(
        spec(availability_zone='nova'), all_facts, [], placement)) == [
            'hv3']
    options = scheduler.load_options(default_availability_zone='home')
    assert hosts_of(scheduler.schedule(
        spec(availability_zone='home'), all_facts, [], placement,
        options)) == ['hv3']
    assert 'availability zone az9 removed 3' in refused(
        spec(availability_zone='az9'), all_facts, placement)


def test_aggregate_metadata_filter():
    all_facts = {h: facts(h) for h in ('hv1', 'hv2')}
    placement = {
        'hv1': {'aggregates': [{'name': 'a', 'metadata': {'ssd': 'true'}},
                               {'name': 'b', 'metadata': {'rack': '1'}}]},
        'hv2': {'aggregates': [{'name': 'c', 'metadata': {'ssd': 'false'}}]}}
    assert hosts_of(scheduler.schedule(
        spec(aggregate_metadata={'ssd': 'true', 'rack': '1'}), all_facts,
        [], placement)) == ['hv1']
    message = refused(spec(aggregate_metadata={'rack': '2'}), all_facts,
                      placement)
    assert 'aggregate metadata rack=2 removed 2' in message


def test_bmc_port_filter_shares_ports_of_an_address():
    all_facts = {'hv1': facts('hv1', address='10.0.0.1'),
                 'hv2': facts('hv2', address='10.0.0.1', busy=[6230])}
    nodes = scheduler.schedule(
        spec(count=2, top={'ipmi_port_range_end': 6231}), all_facts, [])
    assert sorted((n['hypervisor'], n['bmc_port']) for n in nodes) == [
        ('hv1', 6230), ('hv2', 6231)]
    all_facts = {'hv1': facts('hv1', address='10.0.0.1', busy=[6232]),
                 'hv2': facts('hv2', address='10.0.0.1', busy=[6230, 6232])}
    message = refused(spec(count=3, top={'ipmi_port_range_end': 6232}),
                      all_facts)
    assert 'BMC port removed 2' in message


def test_pool_space_and_network_driver_filters():
    all_facts = {'hv1': facts('hv1', free=GIB // 2),
                 'hv2': facts('hv2', driver='openvswitch')}
    message = refused(spec(), all_facts)
    assert 'network driver removed 1, pool space removed 1' in message


def test_disabled_filters_do_not_run():
    all_facts = {'hv1': facts('hv1')}
    options = scheduler.load_options(enabled_filters=('capacity',
                                                      'bmc_port'))
    assert hosts_of(scheduler.schedule(
        spec(), all_facts, [], {'hv1': {'enabled': False}}, options)) == [
            'hv1']


def test_the_report_names_every_filter_that_removed_hosts():
    all_facts = {'hv1': facts('hv1', memory_mb=100),
                 'hv2': facts('hv2', memory_mb=100),
                 'hv3': facts('hv3', missing=['physnet1'])}
    message = refused(spec(), all_facts)
    assert message.startswith(
        'No valid host for node type t (specs[0]): 3 hypervisors; '
        'physnet physnet1 removed 1, MEMORY_MB removed 2 (hv3: interface '
        'eth-physnet1 of physnet physnet1 missing; hv1: MEMORY_MB: 128 '
        'asked, above max_unit 100; hv2:')


# Weighers

def test_spread_evens_out_the_share_used():
    all_facts = {'hv1': facts('hv1', memory_mb=4096),
                 'hv2': facts('hv2', memory_mb=8192)}
    nodes = scheduler.schedule(spec(count=6, memory_mb=1024, capacity=None),
                               all_facts, [])
    # Both free: the bigger first; then the one with the larger share
    # free (VCPU counts too), until both use half of their memory.
    assert hosts_of(nodes) == ['hv2', 'hv1', 'hv2', 'hv1', 'hv2', 'hv2']


def test_pack_fills_one_host_first():
    all_facts = {h: facts(h) for h in ('hv1', 'hv2', 'hv3')}
    options = scheduler.load_options(weight_multipliers={
        'cpu': -1.0, 'ram': -1.0, 'disk': -1.0})
    nodes = scheduler.schedule(spec(count=4), all_facts, [], None, options)
    assert hosts_of(nodes) == ['hv1'] * 4


def test_per_resource_multipliers():
    # hv1 has more memory, hv2 more CPUs: the multipliers choose.
    all_facts = {'hv1': facts('hv1', cpus=2, memory_mb=8192),
                 'hv2': facts('hv2', cpus=8, memory_mb=4096)}

    def first(vcpu, memory):
        options = scheduler.load_options(weight_multipliers={
            'cpu': vcpu, 'ram': memory, 'disk': 0.0})
        return hosts_of(scheduler.schedule(spec(), all_facts, [], None,
                                           options))[0]
    assert first(0.0, 1.0) == 'hv1'
    assert first(1.0, 0.0) == 'hv2'


def test_same_input_same_placement():
    all_facts = {'hv%d' % i: facts('hv%d' % i, memory_mb=4096 + i % 3)
                 for i in range(20)}
    wide = {'ipmi_port_range_end': 6300}
    first = scheduler.schedule(spec(count=30, top=wide), all_facts, [])
    again = scheduler.schedule(spec(count=30, top=wide), all_facts, [])
    assert [(n['hypervisor'], n['bmc_port']) for n in first] == [
        (n['hypervisor'], n['bmc_port']) for n in again]


def test_options_from_the_configuration(conf):
    conf.set_override('ram_weight_multiplier', -2.0, group='scheduler')
    conf.set_override('enabled_filters', ['capacity'], group='scheduler')
    options = scheduler.options_from_conf(conf)
    assert {w.name: w.multiplier for w in options.weighers} == {
        'cpu': 1.0, 'ram': -2.0, 'disk': 1.0}
    assert [f.name for f in options.filters] == ['capacity']
    conf.set_override('enabled_filters', ['nope'], group='scheduler')
    with pytest.raises(exceptions.ConfigError, match='nope'):
        scheduler.options_from_conf(conf)


# The resource model

def test_inventories_usage_and_allocations():
    host = facts('hv1', cpus=4, memory_mb=2048, disk_gb=50,
                 inventory={'VCPU': {'allocation_ratio': 2.0,
                                     'reserved': 1}})
    nodes = scheduler.schedule(spec(count=2, vcpus=2, capacity='3GiB'),
                               {'hv1': host}, [])
    view = resources.provider(host, nodes)
    assert view['inventories']['VCPU'] == {
        'total': 4, 'reserved': 1, 'min_unit': 1, 'max_unit': 4,
        'step_size': 1, 'allocation_ratio': 2.0, 'used': 4}
    assert view['usages'] == {'VCPU': 4, 'MEMORY_MB': 256, 'DISK_GB': 6}
    assert view['allocations'][nodes[0]['uuid']]['resources'] == {
        'VCPU': 2, 'MEMORY_MB': 128, 'DISK_GB': 3}
    assert 'CUSTOM_PHYSNET_PHYSNET1' in view['traits']


def test_hostagent_inventory_options_are_checked(conf):
    conf.set_override('vcpu_inventory', {'allocation_ratio': '4'},
                      group='hostagent')
    conf.set_override('traits', ['CUSTOM_FAST'], group='hostagent')
    reported = resources.hostagent_facts(conf.hostagent)
    assert reported['inventory']['VCPU'] == {'allocation_ratio': 4.0}
    assert reported['traits'] == ['CUSTOM_FAST']
    assert reported['enable_on_register'] is True
    for option, value, why in (
            ('vcpu_inventory', {'ratio': '4'}, "unknown field 'ratio'"),
            ('memory_mb_inventory', {'reserved': 'x'}, 'not a number'),
            ('disk_gb_inventory', {'step_size': '0'}, 'must be positive'),
            ('traits', ['FAST'], 'FAST not CUSTOM_')):
        conf.clear_override('vcpu_inventory', group='hostagent')
        conf.clear_override('traits', group='hostagent')
        conf.set_override(option, value, group='hostagent')
        with pytest.raises(exceptions.ConfigError, match=why):
            resources.hostagent_facts(conf.hostagent)
        conf.clear_override(option, group='hostagent')


# Thin volumes ([hostagent] thin_volumes)

# Room for 100 nodes of 128 MiB, 1 vCPU.
ROOMY = {'cpus': 16, 'memory_mb': 100 * 128}

def test_thin_volumes_count_at_their_size_when_made():
    # 100 nodes of a 10 GiB qcow2 volume on a pool of 20 GiB free and a
    # DISK_GB of 50: only with thin_volumes.
    big = spec(count=100, capacity='10GiB', top={'ipmi_port_range_end': 6400})
    full = facts('hv1', **ROOMY, disk_gb=50, free=20 * GIB)
    with pytest.raises(exceptions.PoolSpaceExhausted) as raised:
        scheduler.schedule(big, {'hv1': full}, [])
    assert 'they need 1000.0 GiB' in str(raised.value)
    thin = facts('hv1', **ROOMY, disk_gb=50, free=20 * GIB, thin_volumes=True)
    nodes = scheduler.schedule(big, {'hv1': thin}, [])
    assert len(nodes) == 100
    view = resources.provider(thin, nodes)
    assert view['usages']['DISK_GB'] == 0
    assert 'DISK_GB' not in view['allocations'][nodes[0]['uuid']][
        'resources']
    # Without thin_volumes, the same records count at full size.
    assert resources.provider(full, nodes)['usages']['DISK_GB'] == 1000


def test_thin_volumes_still_need_their_metadata_in_the_pool():
    big = spec(count=100, capacity='10GiB', top={'ipmi_port_range_end': 6400})
    # 100 new volumes take 100 MiB at first; 50 MiB is too little.
    thin = facts('hv1', **ROOMY, free=50 * 1024 ** 2, thin_volumes=True)
    with pytest.raises(exceptions.PoolSpaceExhausted) as raised:
        scheduler.schedule(big, {'hv1': thin}, [])
    assert 'they need 100.0 MiB' in str(raised.value)
    assert 'has 50.0 MiB (52428800 bytes) free' in str(raised.value)


@pytest.mark.parametrize('volume', [
    {'capacity': '10GiB', 'format': 'raw'},
    {'capacity': '10GiB', 'image': '/images/cirros.img'},
])
def test_thin_volumes_count_raw_ones_and_image_copies_at_full_size(volume):
    one = make_spec(node_types={'t': {
        'memory_mb': 128, 'vcpus': 1, 'volumes': [volume],
        'physical_networks': ['physnet1']}},
        specs=[{'type': 't', 'count': 2}])
    thin = facts('hv1', free=15 * GIB, thin_volumes=True)
    with pytest.raises(exceptions.PoolSpaceExhausted):
        scheduler.schedule(one, {'hv1': thin}, [])


def test_backing_file_volumes_count_thin():
    one = make_spec(node_types={'t': {
        'memory_mb': 128, 'vcpus': 1, 'volumes': [
            {'capacity': '10GiB', 'backing_image': '/images/base.qcow2'}],
        'physical_networks': ['physnet1']}},
        specs=[{'type': 't', 'count': 2}])
    thin = facts('hv1', free=15 * GIB, disk_gb=15, thin_volumes=True)
    assert len(scheduler.schedule(one, {'hv1': thin}, [])) == 2


def test_hostagent_reports_thin_volumes(conf):
    assert resources.hostagent_facts(conf.hostagent)['thin_volumes'] is False
    conf.set_override('thin_volumes', True, group='hostagent')
    assert resources.hostagent_facts(conf.hostagent)['thin_volumes'] is True


# IPMI BMCs' memory

def test_ipmi_bmcs_must_fit_in_the_free_memory():
    per_bmc = 16 * 1024
    host = facts('hv1', **ROOMY, ipmi_free_bytes=1024 ** 2,
                 ipmi_bmc_bytes=per_bmc)
    sixty = spec(count=60, top={'ipmi_port_range_end': 6400})
    assert len(scheduler.schedule(sixty, {'hv1': host}, [])) == 60
    hundred = spec(count=100, top={'ipmi_port_range_end': 6400})
    with pytest.raises(exceptions.BmcMemoryExhausted) as raised:
        scheduler.schedule(hundred, {'hv1': host}, [])
    assert str(raised.value) == (
        'Hypervisor hv1 has too little memory for the new IPMI BMCs: 100 '
        'of them need 1.6 MiB (1638400 bytes) at 16.0 KiB (16384 bytes) '
        'each, it has 1.0 MiB (1048576 bytes) free')


def test_bmc_memory_spreads_over_hosts_and_ignores_redfish():
    per_bmc = 16 * 1024
    small = {**ROOMY, 'ipmi_free_bytes': 40 * per_bmc,
             'ipmi_bmc_bytes': per_bmc}
    all_facts = {'hv1': facts('hv1', **small), 'hv2': facts('hv2', **small)}
    hosts = hosts_of(scheduler.schedule(
        spec(count=80, top={'ipmi_port_range_end': 6400}), all_facts, []))
    assert hosts.count('hv1') == hosts.count('hv2') == 40
    message = refused(spec(count=81, top={'ipmi_port_range_end': 6400}),
                      all_facts)
    assert 'BMC memory removed 2' in message
    assert 'it has 0.0 KiB (0 bytes) free for IPMI BMCs, one needs' in message
    redfish = spec(count=100, top={'default_ironic_driver': 'redfish'})
    assert len(scheduler.schedule(redfish, {'hv1': facts('hv1', **small)},
                                  [])) == 100


# The kernel's limit on a Linux bridge's ports

def big_host(host, **extra):
    return facts(host, cpus=2048, memory_mb=2048 * 128, disk_gb=4096,
                 **extra)


def redfish(count, **top):
    return spec(count=count, top=dict(top, default_ironic_driver='redfish'))


def test_a_linux_bridge_takes_1022_nodes_and_an_uplink():
    """The 1,024th port of a Linux bridge fails with 'Exchange full' in
    the middle of a deploy: the scheduler refuses before, naming it."""
    assert len(scheduler.schedule(redfish(1022), {'hv1': big_host('hv1')},
                                  [])) == 1022
    with pytest.raises(exceptions.BridgeFull) as raised:
        scheduler.schedule(redfish(1023), {'hv1': big_host('hv1')}, [])
    assert str(raised.value) == (
        'Hypervisor hv1 cannot take more nodes on the Linux bridge of '
        'physnet1: a Linux bridge holds 1023 ports (the kernel\'s limit), '
        'so 1022 nodes and an uplink; use bridge_type openvswitch, or more '
        'hypervisors')
    # Two hypervisors share them (IPMI: a cluster's Redfish endpoint is
    # on one); Open vSwitch has no such limit.
    two = {'hv1': big_host('hv1'), 'hv2': big_host('hv2')}
    ipmi = spec(count=1023, top={'ipmi_port_range_end': 7300})
    assert len(scheduler.schedule(ipmi, two, [])) == 1023
    ovs = {'hv1': big_host('hv1', driver='openvswitch', free=2 * 1024 ** 4)}
    assert len(scheduler.schedule(redfish(1100, bridge_type='openvswitch'),
                                  ovs, [])) == 1100


def test_the_bridge_counts_the_nodes_already_there():
    recorded = scheduler.schedule(redfish(1000), {'hv1': big_host('hv1')},
                                  [])
    with pytest.raises(exceptions.BridgeFull):
        scheduler.schedule(redfish(1100), {'hv1': big_host('hv1')}, recorded)
