import pytest

from tenks import exceptions
from tenks import scheduler
from tests.unit.conftest import make_spec


def facts(host='hv1', memory_mb=4096, busy=(), missing=(), prefix='',
          address='127.0.0.1', mappings=None, free=1024 ** 4,
          driver='linuxbridge', foreign=(), redfish_port=8000,
          redfish_tls=False, redfish_user=None):
    return {'host': host, 'memory_mb': memory_mb, 'busy_ports': list(busy),
            'redfish_address': address, 'redfish_port': redfish_port,
            'redfish_tls': redfish_tls, 'redfish_port_user': redfish_user,
            'missing_interfaces': [('physnet1', m) for m in missing],
            'pool_dir': '/p', 'ipmi_address': address,
            'resource_prefix': prefix, 'physnet_mappings': mappings or {},
            'pool_free_bytes': free, 'network_driver': driver,
            'foreign_interfaces': [list(f) for f in foreign]}


def test_names_ports_and_macs():
    nodes = scheduler.schedule(make_spec(count=3), {'hv1': facts()}, [])
    assert [n['name'] for n in nodes] == ['tk0', 'tk1', 'tk2']
    assert [n['bmc_port'] for n in nodes] == [6230, 6231, 6232]
    macs = [nic['mac'] for n in nodes for nic in n['nics']]
    assert len(set(macs)) == 3
    assert all(mac.startswith('52:54:00:') for mac in macs)
    assert nodes[0]['volumes'] == [
        {'name': 'tk0vol0', 'capacity': 1024 ** 3, 'format': 'qcow2'}]
    assert nodes[0]['nics'][0]['bridge'] == 'brtenks0'
    assert nodes[0]['nics'][0]['tap'] == 'p-tk0-0'


def test_recorded_nodes_keep_their_names_and_ports():
    first = scheduler.schedule(make_spec(count=2, cluster='a'),
                               {'hv1': facts()}, [])
    del first[0]  # tk0 and port 6230 are free again
    second = scheduler.schedule(make_spec(count=2, cluster='b'),
                                {'hv1': facts(busy=[6230])}, first)
    assert [(n['name'], n['bmc_port']) for n in second] == [
        ('tk0', 6232), ('tk2', 6233)]


def test_only_missing_nodes_are_scheduled():
    spec = make_spec(count=3)
    recorded = scheduler.schedule(spec, {'hv1': facts()}, [])[:1]
    missing = scheduler.schedule(spec, {'hv1': facts()}, recorded)
    assert [n['name'] for n in missing] == ['tk1', 'tk2']


def test_exhausted_port_range():
    spec = make_spec(count=2, ipmi_port_range_end=6231)
    with pytest.raises(exceptions.PortRangeExhausted) as raised:
        scheduler.schedule(spec, {'hv1': facts(busy=[6231])}, [])
    assert str(raised.value) == (
        'IPMI port range 6230-6231 on hv1 is exhausted: 2 port(s) needed, '
        '1 free')


def test_memory_and_interfaces_are_respected_across_hosts():
    hosts = {'hv1': facts('hv1', memory_mb=200),
             'hv2': facts('hv2', memory_mb=300),
             'hv3': facts('hv3', missing=['eth9'])}
    nodes = scheduler.schedule(make_spec(count=3), hosts, [])
    # The host with the most free memory first; never hv3.
    assert [n['hypervisor'] for n in nodes] == ['hv2', 'hv1', 'hv2']
    with pytest.raises(exceptions.NoValidHost) as raised:
        scheduler.schedule(make_spec(count=4), hosts, [])
    assert str(raised.value) == (
        'No valid host for node type small (specs[0]): 3 hypervisors; '
        'physnet physnet1 removed 1, MEMORY_MB removed 2 (hv3: interface '
        'eth9 of physnet physnet1 missing; hv1: MEMORY_MB: 128 asked, 72 of '
        '200 left; hv2: MEMORY_MB: 128 asked, 44 of 300 left)')


def test_port_range_applies_to_each_bmc_address():
    """Three hypervisors, three BMC addresses: a range of 11 ports holds
    33 nodes; a 34th finds every host's range full."""
    hosts = {'hv%d' % i: facts('hv%d' % i, memory_mb=8192,
                               address='192.0.2.%d' % i)
             for i in (1, 2, 3)}
    spec = make_spec(count=33)
    assert (spec['ipmi_port_range_start'], spec['ipmi_port_range_end']) == (
        6230, 6240)
    nodes = scheduler.schedule(spec, hosts, [])
    for host in hosts:
        assert sorted(n['bmc_port'] for n in nodes
                      if n['hypervisor'] == host) == list(range(6230, 6241))
    with pytest.raises(exceptions.NoValidHost) as raised:
        scheduler.schedule(make_spec(count=34), hosts, [])
    assert 'BMC port removed 3' in str(raised.value)


def test_hosts_sharing_an_address_share_its_ports():
    hosts = {'hv1': facts('hv1', prefix='a'), 'hv2': facts('hv2',
                                                          prefix='b')}
    nodes = scheduler.schedule(make_spec(count=4), hosts, [])
    assert sorted(n['bmc_port'] for n in nodes) == [6230, 6231, 6232, 6233]
    assert {n['hypervisor'] for n in nodes} == {'hv1', 'hv2'}
    assert {n['nics'][0]['bridge'] for n in nodes} == {'abrtenks0',
                                                      'bbrtenks0'}
    # Distinct addresses may reuse ports.
    hosts['hv2']['ipmi_address'] = '192.0.2.2'
    nodes = scheduler.schedule(make_spec(count=4), hosts, [])
    assert sorted(n['bmc_port'] for n in nodes) == [6230, 6230, 6231, 6231]


def two_networks(count, **top):
    return make_spec(count=count, node_types={'small': {
        'memory_mb': 128, 'vcpus': 1,
        'physical_networks': ['physnet1', 'physnet2']}}, **top)


def test_nodes_go_where_every_network_they_need_is_mapped():
    both = {'physnet1': 'eth1', 'physnet2': 'eth2'}
    hosts = {'hv1': facts('hv1', memory_mb=400, mappings=both),
             'hv2': facts('hv2', memory_mb=4096,
                          mappings={'physnet1': 'eth1'}),
             'hv3': facts('hv3', memory_mb=4096)}
    spec = two_networks(3, physical_networks=['physnet1', 'physnet2'])
    nodes = scheduler.schedule(spec, hosts, [])
    # hv2 and hv3 have more room, but lack physnet2 (hv3 both).
    assert [n['hypervisor'] for n in nodes] == ['hv1'] * 3
    with pytest.raises(exceptions.NoValidHost) as raised:
        scheduler.schedule(two_networks(4, physical_networks=[
            'physnet1', 'physnet2']), hosts, [])
    message = str(raised.value)
    assert ('hv2: does not map physnet physnet2, which hv1 maps' in message)
    assert ('hv3: does not map physnet physnet1, which hv1, hv2 map'
            in message)
    assert 'MEMORY_MB removed 1' in message


def test_a_network_no_host_maps_is_isolated_everywhere():
    hosts = {'hv1': facts('hv1', memory_mb=256),
             'hv2': facts('hv2', memory_mb=256)}
    nodes = scheduler.schedule(two_networks(2, physical_networks=[
        'physnet1', 'physnet2']), hosts, [])
    assert sorted(n['hypervisor'] for n in nodes) == ['hv1', 'hv2']
