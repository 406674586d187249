"""inspect_nodes (hostagent API 1.3) on real libvirt, virtualbmc and
netlink: it finds what was changed by hand since the nodes were made,
and changes nothing itself.

Names start with the test's ``hx<hex>`` prefix; BMCs use UDP ports
8900-8949. The IPMI host killed is the test's own (its state directory
is the test's).
"""

import contextlib
import itertools
import os
import signal
import time
from xml.etree import ElementTree as ET

import pytest
from pyroute2 import IPRoute

from hostagent import rpcapi as hostagent_rpcapi
from tenks import rpc
from tests.functional import cluster_fixtures as cf
from tests.functional import drivers_fixtures as fx
from tests.functional.cluster_fixtures import ipmitool
from tests.functional.test_node_requests import Hypervisor
from tests.functional.test_node_requests import Reports

pytestmark = pytest.mark.functional

PORTS = itertools.cycle(range(8900, 8950))


@pytest.fixture
def hv(tmp_path, left):
    hypervisor = Hypervisor(tmp_path, left)
    try:
        yield hypervisor
    finally:
        hypervisor.close()


def make(hv, count):
    nodes = [hv.node(i, port=next(PORTS)) for i in range(count)]
    for node in nodes:
        hv.nodes.ensure(node, fx.OWNER, False)
    return nodes


def snapshot(hv, nodes):
    """What a change would show: domain XMLs, links, the IPMI host's
    pid."""
    with IPRoute() as ipr:
        links = {link.get('ifname'): (link['index'], link.get('state'),
                                      link.get('master'))
                 for link in ipr.get_links()}
    return ({n['name']: ET.tostring(hv.domain(n['name']))
             if hv.domain(n['name']) is not None else None for n in nodes},
            {n['nics'][0]['tap']: links.get(n['nics'][0]['tap'])
             for n in nodes},
            hv.agent.bmc._host_pid(), hv.volume_files())


def inspect(hv, nodes):
    """The drift of each node, by name, checking nothing changed."""
    before = snapshot(hv, nodes)
    result = hv.nodes.inspect(nodes, fx.OWNER)
    assert snapshot(hv, nodes) == before
    assert result['changed'] is False
    return {n['name']: result['nodes'][n['uuid']] for n in nodes}


def test_drift_made_by_hand_is_found_and_left_alone(hv):
    nodes = make(hv, 4)
    names = [n['name'] for n in nodes]
    assert inspect(hv, nodes) == dict.fromkeys(names, [])

    hv.conn.lookupByName(names[1]).undefine()
    with IPRoute() as ipr:
        ipr.link('del', ifname=nodes[2]['nics'][0]['tap'])
    xml = hv.domain(names[3])
    xml.find('memory').text = xml.find('currentMemory').text = str(
        256 * 1024)
    hv.conn.defineXML(ET.tostring(xml, encoding='unicode'))
    assert inspect(hv, nodes) == {
        names[0]: [],
        names[1]: [['domain', names[1], 'missing']],
        names[2]: [['port', nodes[2]['nics'][0]['tap'], 'missing']],
        names[3]: [['domain', names[3], 'differs']],
    }
    # The hand-made memory is still there: nothing was redefined.
    assert int(hv.domain(names[3]).findtext('memory')) == 256 * 1024


def test_killed_ipmi_host_shows_every_bmc_missing_and_is_not_restarted(
        hv):
    nodes = make(hv, 2)
    port = nodes[0]['bmc']['port']
    assert ipmitool(port, 'power', 'status').returncode == 0
    pid = hv.agent.bmc._host_pid()
    assert pid == cf.ipmi_host_pid(hv.agent.conf.state_dir)  # the test's
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while hv.agent.bmc._host_pid() is not None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert inspect(hv, nodes) == {
        n['name']: [['bmc', n['name'], 'missing']] for n in nodes}
    assert hv.agent.bmc._host_pid() is None
    # ensure_node repairs it: the host started again, serving the BMC.
    result = hv.nodes.ensure(nodes[0], fx.OWNER, False)
    assert result['updated'] == [['bmc', nodes[0]['name']]]
    assert ipmitool(port, 'power', 'status').returncode == 0
    assert inspect(hv, nodes[:1]) == {nodes[0]['name']: []}


def test_foreign_domain_is_reported_not_raised(hv):
    [node] = make(hv, 1)
    other = hv.node(1, port=next(PORTS))
    foreign = ('<domain type="qemu"><name>%s</name><memory unit="MiB">64'
               '</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>'
               % other['name'])
    hv.conn.defineXML(foreign)
    found = inspect(hv, [node, other])
    assert found[node['name']] == []
    assert ['domain', other['name'], 'foreign'] in found[other['name']]
    assert ['bmc', other['name'], 'missing'] in found[other['name']]


def test_eight_nodes_inspected_in_tens_of_milliseconds(hv):
    nodes = make(hv, 8)
    hv.nodes.inspect(nodes, fx.OWNER)  # warm the connections
    times = []
    for _ in range(5):
        start = time.monotonic()
        result = hv.nodes.inspect(nodes, fx.OWNER)
        times.append(time.monotonic() - start)
        assert result['nodes'] == {n['uuid']: [] for n in nodes}
    print('inspect_nodes of 8 nodes: %s ms' % ', '.join(
        '%.1f' % (t * 1000) for t in sorted(times)))
    assert min(times) < 0.1


def test_inspect_nodes_over_the_bus(hv):
    """A cast through the client reaches the agent, which reports the
    drift to the conductor named, without the BMC password."""
    nodes = make(hv, 1) + [hv.node(1, port=next(PORTS))]
    host = hv.left.name('-hv')
    reports = Reports()
    servers = [hv.bus.get_server(rpc.HOSTAGENT_TOPIC, host, [hv.agent]),
               hv.bus.get_server(rpc.CONDUCTOR_TOPIC, host + '-c',
                                 [reports])]
    with contextlib.ExitStack() as stack:
        for server in servers:
            server.start()
            stack.callback(server.wait)
            stack.callback(server.stop)
        hostagent_rpcapi.HostAgentAPI(hv.bus).cast(
            host, 'inspect_nodes', 'i1', host + '-c', nodes=nodes,
            owner=fx.OWNER)
        [result] = reports.wait_for(['i1'])
    name = nodes[1]['name']
    assert result == {'changed': False, 'nodes': {
        nodes[0]['uuid']: [],
        nodes[1]['uuid']: [['volume', nodes[1]['volumes'][0]['name'],
                            'missing'],
                           ['port', nodes[1]['nics'][0]['tap'], 'missing'],
                           ['domain', name, 'missing'],
                           ['bmc', name, 'missing']]}}
    assert 'password' not in str(result)
