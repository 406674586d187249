"""SNMP BMCs: the spec, outlets in scheduling and the plan, Ironic's
driver_info, whole-node requests on fake drivers, and the VirtualPDU
driver's own files and process (a fake PDU process)."""

import json
import logging
import os
import stat
import sys

import pytest

from conductor import audit
from hostagent.drivers.bmc import fault_files
from hostagent.drivers.bmc import processes
from hostagent.drivers.bmc import virtualpdu
from tenks import constants
from tenks import exceptions
from tenks import reconcile
from tenks import scheduler
from tenks.cloud import ironic
from tenks.db import models
from tests.unit import test_nodes
from tests.unit.conftest import make_spec
from tests.unit.test_ipmi_host import free_udp_port
from tests.unit.test_reconcile import deployed
from tests.unit.test_reconcile import plan
from tests.unit.test_scheduler import facts

agent = test_nodes.agent
OWNER = test_nodes.OWNER
UUID = test_nodes.node()['uuid']


def snmp_spec(ipmi=1, snmp=2, **top):
    return make_spec(
        node_types={
            'ipmi': {'memory_mb': 64, 'vcpus': 1},
            'pdu': {'memory_mb': 64, 'vcpus': 1, 'ironic_driver': 'snmp'}},
        specs=[{'type': 'ipmi', 'count': ipmi, 'node_name_prefix': 'ip'},
               {'type': 'pdu', 'count': snmp, 'node_name_prefix': 'pd'}],
        **top)


def test_snmp_nodes_get_outlets_of_the_cluster_pdu():
    spec = snmp_spec(snmp_port=1170)
    nodes = scheduler.schedule(spec, {'hv1': facts()}, [])
    assert [(n['name'], n['bmc_type'], n['bmc_port'], n['bmc_system_id'])
            for n in nodes] == [('ip0', 'ipmi', 6230, None),
                                ('pd0', 'snmp', 1170, '1'),
                                ('pd1', 'snmp', 1170, '2')]
    # More nodes: the next free outlets, the recorded ones kept.
    more = scheduler.schedule(snmp_spec(snmp=4, snmp_port=1170),
                              {'hv1': facts()}, nodes)
    assert [n['bmc_system_id'] for n in more] == ['3', '4']


def test_a_full_pdu_is_no_valid_host():
    spec = snmp_spec(ipmi=0, snmp=constants.PDU_OUTLETS + 1)
    with pytest.raises(exceptions.OutletsExhausted) as refused:
        scheduler.schedule(spec, {'hv1': facts()}, [])
    assert 'has no free outlet: it has 24' in str(refused.value)


def test_the_spec_accepts_snmp_and_keeps_its_port_off_the_ipmi_range():
    with pytest.raises(exceptions.SpecError) as refused:
        snmp_spec(snmp_port=6231)
    assert ('snmp_port: 6231 is in the IPMI port range 6230-6240'
            in str(refused.value))
    # A bad community is refused without being shown.
    with pytest.raises(exceptions.SpecError) as refused:
        snmp_spec(snmp_community='not secret')
    assert 'snmp_community' in str(refused.value)
    assert 'not secret' not in str(refused.value)
    spec = snmp_spec()
    assert (spec['snmp_port'], spec['snmp_community']) == (1161, 'public')


def test_driver_info_and_the_bmc_a_node_request_gets():
    spec = snmp_spec(ipmi=0, snmp=1, snmp_community='c0mm')
    [node] = scheduler.schedule(spec, {'hv1': facts()}, [])
    view = reconcile.view(spec, 'd', node, facts())
    assert view['bmc'] == {'type': 'snmp', 'address': '127.0.0.1',
                           'port': 1161, 'username': '', 'outlet': 1}
    assert reconcile.endpoint(view['bmc']) == '127.0.0.1:1161 outlet 1'
    assert ironic.bmc_driver_info(view['bmc'], spec) == {
        'snmp_driver': 'apc_rackpdu', 'snmp_address': '127.0.0.1',
        'snmp_port': 1161, 'snmp_outlet': 1, 'snmp_community': 'c0mm'}
    assert reconcile.bmc_passwords(spec)['snmp'] == 'c0mm'
    assert models.mask_spec(spec)['snmp_community'] == '***'


def test_changing_the_driver_gives_an_outlet_and_back_a_port():
    old = snmp_spec(ipmi=2, snmp=1)
    nodes, resources = deployed(old)
    new = snmp_spec(ipmi=2, snmp=1)
    new['node_types']['ipmi']['ironic_driver'] = 'snmp'
    result = plan(new, old, nodes, resources)
    records = sorted((e['new']['record']['name'],
                      e['new']['record']['bmc_system_id'])
                     for e in result['nodes'])
    # pd0 keeps outlet 1; the others take the next free ones.
    assert records == [('ip0', '2'), ('ip1', '3'), ('pd0', '1')]
    community = plan(dict(old, snmp_community='other'), old, nodes,
                     resources)
    assert {(c['node'], c['field']) for c in community['changes']} == {
        ('pd0', 'snmp_community')}


def snmp_node(**bmc):
    return test_nodes.node(bmc=dict(
        {'type': 'snmp', 'address': '127.0.0.1', 'port': 1161,
         'username': '', 'password': 'c0mm', 'outlet': 3}, **bmc))


def test_an_snmp_node_has_an_outlet_of_its_owner_pdu(agent, hypervisor):
    result = agent.nodes.ensure(snmp_node(), OWNER, False)
    assert ['bmc', 'n0'] in result['created']
    assert hypervisor.things[('outlet', 'n0')] == (OWNER, '127.0.0.1',
                                                   1161, 3, 'c0mm')
    assert agent.nodes.inspect([snmp_node()], OWNER)['nodes'] == {
        UUID: []}
    # An IPMI BMC again: the outlet goes.
    agent.nodes.ensure(test_nodes.node(), OWNER, False)
    assert ('outlet', 'n0') not in hypervisor.things
    agent.nodes.ensure(snmp_node(), OWNER, False)
    assert ('bmc', 'n0') not in hypervisor.things
    result = agent.nodes.remove(
        {'name': 'n0', 'pool': 'p', 'volumes': [{'name': 'n0v0'}],
         'nics': [{'tap': 'n0t0'}]}, OWNER)
    assert ['bmc', 'n0'] in result['removed']
    assert hypervisor.names('outlet') == []


def test_an_snmp_bmc_needs_its_outlet(agent):
    bad = snmp_node()
    del bad['bmc']['outlet']
    with pytest.raises(exceptions.InvalidNodeRequest) as refused:
        agent.nodes.ensure(bad, OWNER, False)
    assert "'outlet' is a required property" in str(refused.value)


def test_an_snmp_cluster_deploys_and_tears_down(conductor, hypervisor):
    spec = snmp_spec(ipmi=1, snmp=2, snmp_community='c0mm')
    conductor.deployments.deploy(spec)
    owner = 'tenks:unit:%s' % conductor.db.get_cluster('unit').uuid
    assert hypervisor.names('bmc') == ['ip0']
    assert {k[1]: v for k, v in hypervisor.things.items()
            if k[0] == 'outlet'} == {
        'pd0': (owner, '127.0.0.1', 1161, 1, 'c0mm'),
        'pd1': (owner, '127.0.0.1', 1161, 2, 'c0mm')}
    nodes = {n.name: n for n in conductor.db.list_nodes(cluster='unit')}
    assert (nodes['pd1'].bmc_type, nodes['pd1'].bmc_system_id) == ('snmp',
                                                                    '2')
    assert conductor.deployments.deploy(spec)['changed'] == []
    # The PDU's outlets are the recorded SNMP nodes': nothing to report.
    assert audit.audit(conductor) == {'drift': [], 'other': [],
                                      'removed': []}
    conductor.teardowns.teardown('unit')
    assert hypervisor.names('outlet') == [] == hypervisor.names('bmc')


# The VirtualPDU driver, on a fake PDU process: it binds the UDP port of
# its pdu.json and waits.
FAKE_PDU = '''
import json, socket, sys, time
config = json.load(open(sys.argv[1]))
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind((config['address'], config['port']))
time.sleep(600)
'''


@pytest.fixture
def pdu_driver(conf, tmp_path, monkeypatch):
    entry = tmp_path / 'fake_pdu.py'
    entry.write_text(FAKE_PDU)
    monkeypatch.setattr(virtualpdu, 'ENTRY', str(entry))
    conf.set_override('virtualpdu_python', sys.executable, 'hostagent')
    driver = virtualpdu.VirtualPduDriver(conf)
    yield driver
    for path in list(driver._procs):
        driver._stop(path)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_pdu_per_owner_with_an_outlet_per_domain(pdu_driver, caplog):
    caplog.set_level(logging.DEBUG)
    port = free_udp_port()
    first = pdu_driver.ensure_outlet(OWNER, 'n0', 1, '127.0.0.1', port,
                                     's3cret')
    assert first == {'created': True, 'changed': True}
    [path] = [os.path.join(pdu_driver._dirs.root, d)
              for d in os.listdir(pdu_driver._dirs.root) if d != 'lock']
    pid = pdu_driver._pid(path)
    assert pid and not virtualpdu._udp_free('127.0.0.1', port)
    # A second domain: an outlet file, no restart.
    assert pdu_driver.ensure_outlet(OWNER, 'n1', 2, '127.0.0.1', port,
                                    's3cret')['created']
    assert pdu_driver._pid(path) == pid
    assert pdu_driver.ensure_outlet(OWNER, 'n1', 2, '127.0.0.1', port,
                                    's3cret') == {'created': False,
                                                  'changed': False}
    with open(os.path.join(path, 'outlets', '2')) as f:
        assert f.read() == 'n1'
    with open(os.path.join(path, virtualpdu.CONFIG)) as f:
        assert json.load(f)['community'] == 's3cret'
    assert mode(path) == 0o700
    for name in ('owner', virtualpdu.CONFIG, 'pdu.pid', 'outlets/1',
                 'domains/n0'):
        assert mode(os.path.join(path, name)) == 0o600, name
    assert 's3cret' not in caplog.text
    assert pdu_driver.outlet_changes(OWNER, {
        'n0': {'outlet': 1, 'address': '127.0.0.1', 'port': port,
               'community': 'other'},
        'n1': {'outlet': 2, 'address': '127.0.0.1', 'port': port,
               'community': 's3cret'},
        'n2': {'outlet': 3, 'address': '127.0.0.1', 'port': port,
               'community': 's3cret'}}) == {
        'n0': ['community'], 'n1': [], 'n2': None}
    # Another domain on a taken outlet is refused, nothing changed.
    with pytest.raises(exceptions.DriverError) as refused:
        pdu_driver.ensure_outlet(OWNER, 'n2', 2, '127.0.0.1', port,
                                 's3cret')
    assert 'the outlet powers n1' in str(refused.value)
    # A new community restarts it.
    assert pdu_driver.ensure_outlet(OWNER, 'n0', 1, '127.0.0.1', port,
                                    'new')['changed']
    assert pdu_driver._pid(path) not in (None, pid)
    # The last outlet takes the process and the directory along.
    assert pdu_driver.remove_outlet('n0', OWNER)
    assert pdu_driver.remove_outlet('n1', OWNER)
    assert not pdu_driver.remove_outlet('n1', OWNER)
    assert not os.path.exists(path)
    assert not processes.marked_pids(pdu_driver._marker(path))
    assert virtualpdu._udp_free('127.0.0.1', port)


def test_an_outlet_fault_is_stored_for_the_pdu_and_goes_with_the_outlet(
        pdu_driver):
    port = free_udp_port()
    # No PDU: nothing to clear, nothing to fault.
    assert not pdu_driver.set_fault('n0', OWNER, None)
    with pytest.raises(exceptions.DriverError):
        pdu_driver.set_fault('n0', OWNER, {'kind': 'error'})
    pdu_driver.ensure_outlet(OWNER, 'n0', 1, '127.0.0.1', port, 'c')
    pdu_driver.ensure_outlet(OWNER, 'n1', 2, '127.0.0.1', port, 'c')
    path = pdu_driver._dirs.path(OWNER)
    pid = pdu_driver._pid(path)
    assert pdu_driver.set_fault('n0', OWNER, {'kind': 'slow', 'delay': 2})
    assert not pdu_driver.set_fault('n0', OWNER,
                                    {'kind': 'slow', 'delay': 2})
    # Where the PDU process reads it, without a restart.
    assert fault_files.read(path, 'n0') == {'kind': 'slow', 'delay': 2}
    assert mode(fault_files.path(path, 'n0')) == 0o600
    assert pdu_driver._pid(path) == pid
    with pytest.raises(exceptions.DriverError) as refused:
        pdu_driver.set_fault('n2', OWNER, {'kind': 'error'})
    assert 'has no outlet for it' in str(refused.value)
    # Another owner's PDU is another: this one's fault stays.
    assert not pdu_driver.set_fault('n0', 'tenks:other:d', None)
    with pytest.raises(exceptions.DriverError):
        pdu_driver.set_fault('n0', 'tenks:other:d', {'kind': 'error'})
    assert fault_files.read(path, 'n0') == {'kind': 'slow', 'delay': 2}
    assert pdu_driver.set_fault('n0', OWNER, None)
    assert fault_files.read(path, 'n0') is None
    pdu_driver.set_fault('n1', OWNER, {'kind': 'error'})
    assert pdu_driver.remove_outlet('n1', OWNER)
    assert fault_files.read(path, 'n1') is None
    assert pdu_driver.remove_outlet('n0', OWNER)
    assert not os.path.exists(path)


def test_the_agent_sends_an_snmp_fault_to_the_outlet(agent, hypervisor):
    agent.nodes.ensure(snmp_node(), OWNER, False)
    assert agent.nodes.set_bmc_fault('n0', 'snmp', {'kind': 'error'},
                                     OWNER) == {'changed': True}
    assert hypervisor.bmc_faults == {'n0': {'kind': 'error'}}
    agent.nodes.remove_bmc('n0', OWNER)
    assert hypervisor.bmc_faults == {}


def test_without_its_interpreter_nothing_is_left(pdu_driver, conf):
    conf.set_override('virtualpdu_python', '/nowhere/python', 'hostagent')
    with pytest.raises(exceptions.DriverError) as refused:
        pdu_driver.ensure_outlet(OWNER, 'n0', 1, '127.0.0.1',
                                 free_udp_port(), 's3cret')
    assert '[hostagent] virtualpdu_python (/nowhere/python)' in str(
        refused.value)
    assert os.listdir(pdu_driver._dirs.root) == ['lock']


def test_a_taken_port_is_port_in_use(pdu_driver):
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
        with pytest.raises(exceptions.PortInUse):
            pdu_driver.ensure_outlet(OWNER, 'n0', 1, '127.0.0.1', port,
                                     's3cret')
    assert os.listdir(pdu_driver._dirs.root) == ['lock']


def test_the_audit_sees_a_pdu_and_stops_an_orphan(pdu_driver):
    import shutil
    pdu_driver.ensure_outlet(OWNER, 'n0', 1, '127.0.0.1', free_udp_port(),
                             's3cret')
    [pdu] = pdu_driver.marked()
    assert (pdu['kind'], pdu['mark'], pdu['systems'], pdu['running']) == (
        'pdu', OWNER, {'n0': 1}, True)
    path = os.path.join(pdu_driver._dirs.root, pdu['name'])
    [daemon] = [d for d in pdu_driver.daemons() if d['directory'] == path]
    assert daemon['orphan'] is None
    assert pdu_driver.stop_orphans(path) == []
    # Its directory gone (a state directory lost): an orphan, stopped.
    shutil.rmtree(path)
    [daemon] = [d for d in pdu_driver.daemons() if d['directory'] == path]
    assert daemon['orphan']
    assert pdu_driver.stop_orphans(path) == daemon['pids']
    assert not processes.marked_pids(pdu_driver._marker(path))


def test_an_audit_clean_removes_a_dead_deployments_outlets(agent,
                                                           hypervisor):
    agent.nodes.ensure(snmp_node(), OWNER, False)
    [pdu] = [t for t in agent.auditor.things() if t['kind'] == 'pdu']
    assert (pdu['mark'], pdu['systems']) == (OWNER, {'n0': 3})
    assert agent.auditor._remove(pdu)
    assert hypervisor.names('outlet') == []


def test_an_snmp_node_request_needs_hostagent_api_1_11():
    from hostagent import rpcapi as hostagent_rpcapi
    from tests.unit.test_rpcapi import Bus
    capped = hostagent_rpcapi.HostAgentAPI(Bus(hostagent='1.10'))
    with pytest.raises(exceptions.VersionCapped) as raised:
        capped.cast('hv1', 'ensure_node', 'req', 'c1', node=snmp_node(),
                    owner='o', force=False)
    assert str(raised.value).startswith(
        'ensure_node with an SNMP BMC needs version 1.11 of the hostagent '
        'RPC API, above its cap 1.10')
    # An IPMI node goes at the version it needs.
    bus = Bus(hostagent='1.10')
    hostagent_rpcapi.HostAgentAPI(bus).cast(
        'hv1', 'ensure_node', 'req', 'c1', node=test_nodes.node(),
        owner='o', force=False)
    assert bus.sent[0][3]['version'] == '1.4'
