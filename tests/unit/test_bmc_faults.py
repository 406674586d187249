"""BMC faults (tenks.bmc_faults): what a fault may be, how the IPMI
host's BMCs (libvirt's test driver, in this process, no IPMI client) and
the Redfish emulator's layer (on a fake application) and a VirtualPDU
outlet's decisions (pdu_faults, without pysnmp) show each kind, and the
conductor's calls and CLI on fake drivers."""

import io
import json
import os
import socket
import time
import types

import pytest

from conductor import rpcapi as conductor_rpcapi
from hostagent.drivers.bmc import allowlist
from hostagent.drivers.bmc import daemon_dirs
from hostagent.drivers.bmc import emulator
from hostagent.drivers.bmc import emulator_faults
from hostagent.drivers.bmc import fault_files
from hostagent.drivers.bmc import ipmi_host
from hostagent.drivers.bmc import ipmi_store
from hostagent.drivers.bmc import pdu_faults
from hostagent.drivers.bmc import sushy
from tenks import bmc_faults
from tenks import exceptions
from tenks import policy
from tenks.cli import client
from tests.unit import test_ipmi_host
from tests.unit import test_nodes
from tests.unit.conftest import make_spec
from tests.unit.test_rpcapi import Bus

agent = test_nodes.agent
OWNER = test_nodes.OWNER
SYSTEM = 'aaaaaaaa-1111-4111-8111-111111111111'


@pytest.mark.parametrize('args,fault', [
    (('slow',), {'kind': 'slow', 'delay': 5.0}),
    (('slow', 0.5), {'kind': 'slow', 'delay': 0.5}),
    (('flaky',), {'kind': 'flaky', 'probability': 0.5}),
    (('flaky', None, 1), {'kind': 'flaky', 'probability': 1}),
    (('power-stuck',), {'kind': 'power-stuck'}),
])
def test_a_fault_is_made_with_its_defaults(args, fault):
    assert bmc_faults.make(*args) == fault


@pytest.mark.parametrize('args,message', [
    (('broken',), "'broken' is no fault kind: one of unreachable, slow"),
    (('error', 3), 'duration is the delay of a slow BMC; a error fault '
                   'takes none'),
    (('slow', None, 0.5), 'probability is the failure rate of a flaky BMC'),
    (('slow', 0), 'the delay of a slow BMC is above 0 and at most 600 s'),
    (('slow', 601), 'the delay of a slow BMC is above 0'),
    (('flaky', None, 1.5), 'the probability of a flaky BMC is above 0'),
    (('flaky', None, 0), 'the probability of a flaky BMC is above 0'),
])
def test_a_bad_fault_is_refused_saying_why(args, message):
    with pytest.raises(ValueError) as raised:
        bmc_faults.make(*args)
    assert str(raised.value).startswith(message)


def test_a_fault_file_is_read_again_only_when_it_changes(tmp_path):
    reader = fault_files.Reader(str(tmp_path))
    assert reader.get('n0') is None
    assert fault_files.write(str(tmp_path), 'n0', {'kind': 'error'})
    assert not fault_files.write(str(tmp_path), 'n0', {'kind': 'error'})
    assert reader.get('n0') == {'kind': 'error'}
    path = fault_files.path(str(tmp_path), 'n0')
    assert oct(os.stat(path).st_mode & 0o777) == '0o600'
    fault_files.write(str(tmp_path), 'n0', {'kind': 'slow', 'delay': 1})
    assert reader.get('n0') == {'kind': 'slow', 'delay': 1}
    with open(path, 'w') as f:
        f.write('{"kind": "melt"}')
    assert reader.get('n0') is None  # not a fault: none shown
    assert fault_files.write(str(tmp_path), 'n0', None)
    assert reader.get('n0') is None


# The IPMI host

class FakeSession:
    def __init__(self):
        self.sent = []

    def send_ipmi_response(self, data=(), code=0):
        self.sent.append((code, list(data)))


RMCP_PING = bytes([6, 0, 0xff, 7, 0, 0, 0, 0, 0, 0])


@pytest.fixture
def ipmi(tmp_path):
    """The IPMI host serving a BMC of libvirt's test domain ``test``."""
    directory = tmp_path / 'ipmi'
    (directory / ipmi_store.BMCS).mkdir(parents=True, mode=0o700)
    host = ipmi_host.Host(str(directory))
    port = test_ipmi_host.free_udp_port()
    assert 'result' in host.handle(test_ipmi_host.line(
        {'op': 'add', 'bmc': test_ipmi_host.definition(port)}))
    served = host._bmcs['test']
    served.bmc.power_on()
    yield host, served, str(directory)
    served.sock.close()
    host._workers.shutdown()


def shown(served, directory, fault):
    """Store ``fault`` as the driver does; a packet makes the BMC read
    it."""
    fault_files.write(directory, 'test', fault)
    served.answer(RMCP_PING, ('127.0.0.1', 1))


def command(served, netfn, number, data=()):
    session = FakeSession()
    served.bmc.handle_raw_request({'netfn': netfn, 'command': number,
                                   'data': list(data)}, session)
    return session.sent


def test_an_unreachable_ipmi_bmc_answers_nothing_until_cleared(
        ipmi, monkeypatch):
    host, served, directory = ipmi
    seen = []
    monkeypatch.setattr(served.bmc, 'sessionless_data',
                        lambda data, address: seen.append(address))
    shown(served, directory, {'kind': 'unreachable'})
    served.answer(RMCP_PING, ('127.0.0.1', 2))
    assert seen == []
    shown(served, directory, None)
    assert seen == [('127.0.0.1', 1)]


def test_a_slow_ipmi_bmc_answers_each_packet_late(ipmi, monkeypatch):
    host, served, directory = ipmi
    slept = []
    monkeypatch.setattr(ipmi_host, 'time', types.SimpleNamespace(
        sleep=slept.append, monotonic=time.monotonic))
    shown(served, directory, {'kind': 'slow', 'delay': 2.5})
    served.answer(RMCP_PING, ('127.0.0.1', 2))
    assert slept == [2.5, 2.5]


@pytest.mark.parametrize('fault', [{'kind': 'error'},
                                   {'kind': 'flaky', 'probability': 1}])
def test_an_ipmi_bmc_in_error_answers_every_command_with_ff(ipmi, fault):
    host, served, directory = ipmi
    shown(served, directory, fault)
    assert command(served, 0, 1) == [(0xff, [])]  # chassis status
    assert command(served, 0, 2, [0]) == [(0xff, [])]  # power off
    shown(served, directory, None)
    assert command(served, 0, 1)[0][0] == 0


@pytest.fixture
def made(monkeypatch):
    """The power and boot device changes virtualbmc's BMC makes."""
    changes = []
    for name in ('power_on', 'power_off', 'power_reset', 'power_shutdown',
                 'set_boot_device'):
        monkeypatch.setattr(
            ipmi_host.vbmc.VirtualBMC, name,
            lambda self, *args, name=name: changes.append((name, *args)))
    return changes


def test_a_power_stuck_ipmi_bmc_acknowledges_power_changes_it_never_makes(
        ipmi, made):
    host, served, directory = ipmi
    shown(served, directory, {'kind': 'power-stuck'})
    for directive in (0, 1, 3, 5):  # off, on, reset, soft off
        assert command(served, 0, 2, [directive]) == [(0, [])]
    assert made == []
    shown(served, directory, None)
    assert command(served, 0, 2, [0]) == [(0, [])]
    assert made == [('power_off',)]


def test_a_boot_device_ignoring_ipmi_bmc_acknowledges_and_keeps_its_own(
        ipmi, made):
    host, served, directory = ipmi
    network = [5, 0x80, 1 << 2, 0, 0]  # boot flags: PXE
    shown(served, directory, {'kind': 'boot-device-ignored'})
    assert command(served, 0, 8, network) == [(0, [])]
    assert command(served, 0, 2, [1]) == [(0, [])]  # power on: made
    assert made == [('power_on',)]
    shown(served, directory, None)
    assert command(served, 0, 8, network) == [(0, [])]
    assert made == [('power_on',), ('set_boot_device', 'network')]


def test_a_fault_holds_when_the_ipmi_host_starts_again(ipmi):
    host, served, directory = ipmi
    fault_files.write(directory, 'test', {'kind': 'power-stuck'})
    served.sock.close()
    again = ipmi_host.Host(directory)
    again.load()
    try:
        restarted = again._bmcs['test']
        restarted.answer(RMCP_PING, ('127.0.0.1', 1))
        assert restarted.bmc.fault == {'kind': 'power-stuck'}
    finally:
        restarted.sock.close()
        again._workers.shutdown()
    served.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


# The Redfish emulator's layer

@pytest.fixture
def redfish(tmp_path):
    """The fault layer on an application that records what reaches it,
    the system SYSTEM of domain n0 allowed."""
    (tmp_path / 'allowed').mkdir()
    (tmp_path / 'allowed' / SYSTEM).write_text('n0')
    calls = []

    def app(env, start_response):
        calls.append((env['REQUEST_METHOD'], env['PATH_INFO'],
                      env['wsgi.input'].read()))
        start_response('200 OK', [('Content-Length', '2')])
        return [b'{}']
    layer = emulator_faults.Faults(
        app, allowlist.AllowList(str(tmp_path / 'allowed')),
        fault_files.Reader(str(tmp_path)), emulator.named_system)
    return layer, calls, str(tmp_path)


def request(layer, method, path, body=None, **env):
    data = b'' if body is None else json.dumps(body).encode()
    env.update({'REQUEST_METHOD': method, 'PATH_INFO': path,
                'CONTENT_LENGTH': str(len(data)),
                'wsgi.input': io.BytesIO(data)})
    statuses = []
    body = b''.join(layer(env, lambda s, h: statuses.append(s)))
    return statuses[0], body


SYSTEM_PATH = '/redfish/v1/Systems/%s' % SYSTEM
RESET = SYSTEM_PATH + '/Actions/ComputerSystem.Reset'


def test_a_redfish_bmc_without_a_fault_is_served(redfish):
    layer, calls, directory = redfish
    fault_files.write(directory, 'other', {'kind': 'error'})
    assert request(layer, 'GET', SYSTEM_PATH)[0] == '200 OK'
    assert request(layer, 'GET', '/redfish/v1')[0] == '200 OK'
    assert len(calls) == 2


def test_a_redfish_bmc_in_error_answers_500_to_its_system_and_manager(
        redfish):
    layer, calls, directory = redfish
    fault_files.write(directory, 'n0', {'kind': 'error'})
    for path in (SYSTEM_PATH, RESET, '/redfish/v1/Managers/%s' % SYSTEM):
        status, body = request(layer, 'POST', path, {})
        assert status == '500 INTERNAL SERVER ERROR'
        assert json.loads(body)['error']['message'] == (
            'Injected fault: error')
    assert request(layer, 'GET', '/redfish/v1')[0] == '200 OK'
    assert [c[1] for c in calls] == ['/redfish/v1']


def test_an_unreachable_redfish_bmc_closes_the_connection_unanswered(
        redfish):
    layer, calls, directory = redfish
    fault_files.write(directory, 'n0', {'kind': 'unreachable'})
    server, client = socket.socketpair()
    with server, client:
        with pytest.raises(ConnectionAbortedError):
            request(layer, 'GET', SYSTEM_PATH,
                    **{'werkzeug.socket': server})
        assert client.recv(10) == b''
    assert calls == []


def test_a_slow_redfish_bmc_answers_late(redfish, monkeypatch):
    layer, calls, directory = redfish
    slept = []
    monkeypatch.setattr(emulator_faults, 'time',
                        types.SimpleNamespace(sleep=slept.append))
    fault_files.write(directory, 'n0', {'kind': 'slow', 'delay': 3})
    assert request(layer, 'GET', SYSTEM_PATH)[0] == '200 OK'
    assert slept == [3]


def test_a_power_stuck_redfish_bmc_acknowledges_resets_it_never_makes(
        redfish):
    layer, calls, directory = redfish
    fault_files.write(directory, 'n0', {'kind': 'power-stuck'})
    assert request(layer, 'POST', RESET, {'ResetType': 'On'})[0] == (
        '204 NO CONTENT')
    assert request(layer, 'GET', SYSTEM_PATH)[0] == '200 OK'
    assert [c[1] for c in calls] == [SYSTEM_PATH]


def test_a_boot_device_ignoring_redfish_bmc_acknowledges_boot_patches(
        redfish):
    layer, calls, directory = redfish
    fault_files.write(directory, 'n0', {'kind': 'boot-device-ignored'})
    boot = {'Boot': {'BootSourceOverrideTarget': 'Pxe'}}
    assert request(layer, 'PATCH', SYSTEM_PATH, boot)[0] == '204 NO CONTENT'
    assert calls == []
    # Another change goes through, its body whole.
    assert request(layer, 'PATCH', SYSTEM_PATH, {'AssetTag': 'x'})[0] == (
        '200 OK')
    assert calls == [('PATCH', SYSTEM_PATH, b'{"AssetTag": "x"}')]
    fault_files.write(directory, 'n0', None)
    assert request(layer, 'PATCH', SYSTEM_PATH, boot)[0] == '200 OK'


# The drivers: where the fault goes, and that it goes with the BMC

def test_the_redfish_driver_stores_a_fault_for_a_system_it_serves_only(
        conf):
    driver = sushy.SushyDriver(conf)
    owner = 'tenks:unit:d'
    path = driver._dirs.path(owner)
    with pytest.raises(exceptions.DriverError) as raised:
        driver.set_fault('n0', owner, {'kind': 'error'})
    assert 'the emulator of tenks:unit:d does not serve it' in str(
        raised.value)
    assert not driver.set_fault('n0', owner, None)
    with driver._dirs.locked():
        os.makedirs(path, mode=0o700)
        daemon_dirs.write(os.path.join(path, 'owner'), owner)
        sushy._serve(path, 'n0', SYSTEM, None)
        sushy._serve(path, 'n1', SYSTEM.replace('a', 'b'), None)
    assert driver.set_fault('n0', owner, {'kind': 'error'})
    assert fault_files.read(path, 'n0') == {'kind': 'error'}
    with pytest.raises(exceptions.DriverError):
        driver.set_fault('n0', 'tenks:other:d', {'kind': 'error'})
    assert driver.remove_system('n0', owner)
    assert fault_files.read(path, 'n0') is None


# A VirtualPDU outlet (the real PDU process: tests/functional)

@pytest.mark.parametrize('faults,verdict', [
    ([], (None, 0)),
    ([(0, {'kind': 'unreachable'})], (pdu_faults.DROP, 0)),
    ([(0, {'kind': 'slow', 'delay': 2}), (1, {'kind': 'unreachable'})],
     (pdu_faults.DROP, 0)),
    ([(0, {'kind': 'slow', 'delay': 2}), (1, {'kind': 'slow', 'delay': 3})],
     (None, 3)),
    ([(1, {'kind': 'error'})], (('error', 2), 0)),
    ([(0, {'kind': 'slow', 'delay': 2}), (1, {'kind': 'error'})],
     (('error', 2), 2)),
    ([(0, {'kind': 'flaky', 'probability': 1})], (('error', 1), 0)),
    ([(0, {'kind': 'power-stuck'})], (None, 0)),
])
def test_a_pdu_request_meets_the_faults_of_its_outlets(faults, verdict):
    assert pdu_faults.verdict(faults) == verdict


def test_a_flaky_outlet_fails_at_its_rate():
    fault = {'kind': 'flaky', 'probability': 0.3}
    failed = sum(pdu_faults.verdict([(0, fault)])[0] is not None
                 for _ in range(2000))
    assert 450 < failed < 750


def test_only_power_stuck_keeps_an_outlet_from_switching():
    assert pdu_faults.stuck({'kind': 'power-stuck'})
    assert not pdu_faults.stuck({'kind': 'error'})
    assert not pdu_faults.stuck(None)


def test_held_back_answers_run_in_their_order_when_due():
    now = [100.0]
    later = pdu_faults.Later(clock=lambda: now[0])
    ran = []
    assert later.run_due() is None
    later.add(3, lambda: ran.append('b'))
    later.add(1, lambda: ran.append('a'))
    later.add(1, lambda: 1 / 0)  # logged; the others still run
    later.add(1, lambda: ran.append('a2'))
    assert later.run_due() == 1 and ran == []
    now[0] = 101.5
    assert later.run_due() == 1.5 and ran == ['a', 'a2']
    now[0] = 103
    assert later.run_due() is None and ran == ['a', 'a2', 'b']


# The conductor and the CLI

def test_a_fault_is_set_recorded_shown_and_cleared(conductor, hypervisor):
    api = conductor.api
    context = policy.admin_context()
    conductor.operations.wait(api.deploy_cluster(
        context, make_spec(count=2)))
    node = api.set_bmc_fault(context, 'tk0', 'slow', 1.5)
    assert node['bmc_fault'] == {'kind': 'slow', 'delay': 1.5}
    assert hypervisor.bmc_faults == {'tk0': {'kind': 'slow', 'delay': 1.5}}
    api.set_bmc_fault(context, 'tk1', 'flaky', probability=0.25)
    assert [n['bmc_fault'] for n in api.list_nodes(context)] == [
        {'kind': 'slow', 'delay': 1.5},
        {'kind': 'flaky', 'probability': 0.25}]
    assert api.clear_bmc_fault(context, 'tk0') == {'cleared': ['tk0'],
                                                   'failed': {}}
    assert hypervisor.bmc_faults == {
        'tk1': {'kind': 'flaky', 'probability': 0.25}}
    api.set_bmc_fault(context, 'tk0', 'error')
    assert api.clear_bmc_fault(context, all_nodes=True) == {
        'cleared': ['tk0', 'tk1'], 'failed': {}}
    assert hypervisor.bmc_faults == {}
    assert [n['bmc_fault'] for n in api.list_nodes(context)] == [None, None]


def test_a_bad_fault_changes_nothing_and_says_why(conductor, hypervisor):
    # As the CLI calls it: the errors the API raises to its callers.
    api = client.EmbeddedClient.__new__(client.EmbeddedClient)
    api.conductor, api.context = conductor, policy.admin_context()
    conductor.operations.wait(api.deploy_cluster(make_spec(count=1)))
    for args, message in [
            (('tk0', 'melt'), "'melt' is no fault kind"),
            (('tk0', 'error', 2), 'duration is the delay of a slow BMC'),
            (('tk0', 'flaky', None, 7), 'the probability of a flaky BMC')]:
        with pytest.raises(exceptions.BmcFaultInvalid) as raised:
            api.set_bmc_fault(*args)
        assert str(raised.value).startswith(
            'Cannot fault the BMC of node tk0: ' + message)
    with pytest.raises(exceptions.NodeNotFound):
        api.set_bmc_fault('tk9', 'error')
    assert hypervisor.bmc_faults == {}
    assert api.list_nodes()[0]['bmc_fault'] is None


def snmp_spec(**top):
    return make_spec(count=2, default_ironic_driver='snmp', **top)


def test_an_snmp_bmc_shows_each_fault_but_boot_device_ignored(
        conductor, hypervisor):
    api = client.EmbeddedClient.__new__(client.EmbeddedClient)
    api.conductor, api.context = conductor, policy.admin_context()
    conductor.operations.wait(api.deploy_cluster(snmp_spec()))
    for kind in ('unreachable', 'slow', 'error', 'power-stuck', 'flaky'):
        node = api.set_bmc_fault('tk0', kind)
        assert (node['bmc_type'], node['bmc_fault']['kind']) == ('snmp',
                                                                 kind)
        assert hypervisor.bmc_faults['tk0']['kind'] == kind
    with pytest.raises(exceptions.BmcFaultInvalid) as refused:
        api.set_bmc_fault('tk1', 'boot-device-ignored')
    assert str(refused.value) == (
        'Cannot fault the BMC of node tk1: its BMC is of type snmp, which '
        'shows no boot-device-ignored fault: a PDU outlet has no boot '
        'device')
    assert 'tk1' not in hypervisor.bmc_faults
    [shown] = [n for n in api.list_nodes() if n['name'] == 'tk0']
    assert shown['bmc_fault'] == {'kind': 'flaky', 'probability': 0.5}
    assert api.clear_bmc_fault('tk0') == {'cleared': ['tk0'], 'failed': {}}
    assert hypervisor.bmc_faults == {}
    api.set_bmc_fault('tk1', 'error')
    conductor.operations.wait(api.teardown_cluster('unit'))
    assert hypervisor.bmc_faults == {}


def test_the_hostagent_refuses_what_an_snmp_bmc_cannot_show(agent):
    with pytest.raises(exceptions.InvalidNodeRequest) as refused:
        agent.nodes.set_bmc_fault('n0', 'snmp',
                                  {'kind': 'boot-device-ignored'}, OWNER)
    assert 'fault: its BMC is of type snmp, which shows no ' \
        'boot-device-ignored fault' in str(refused.value)


def test_a_teardown_removes_the_fault_with_the_bmc(conductor, hypervisor):
    api = conductor.api
    context = policy.admin_context()
    conductor.operations.wait(api.deploy_cluster(
        context, make_spec(count=1)))
    api.set_bmc_fault(context, 'tk0', 'unreachable')
    conductor.operations.wait(api.teardown_cluster(context, 'unit'))
    assert hypervisor.bmc_faults == {}


def test_a_new_bmc_of_another_type_shows_no_fault(conductor, hypervisor):
    api = conductor.api
    context = policy.admin_context()
    conductor.operations.wait(api.deploy_cluster(
        context, make_spec(count=1)))
    api.set_bmc_fault(context, 'tk0', 'error')
    conductor.operations.wait(api.deploy_cluster(context, make_spec(
        count=1, default_ironic_driver='redfish')))
    [node] = api.list_nodes(context)
    assert (node['bmc_type'], node['bmc_fault']) == ('redfish', None)
    assert hypervisor.bmc_faults == {}


def test_a_client_capped_below_1_10_sends_no_fault_call():
    bus = Bus(conductor='1.9')
    api = conductor_rpcapi.ConductorAPI(bus)
    context = policy.admin_context()
    with pytest.raises(exceptions.VersionCapped) as raised:
        api.set_bmc_fault(context, 'tk0', 'error')
    assert str(raised.value).startswith(
        'set_bmc_fault needs version 1.10 of the conductor RPC API, above '
        'its cap 1.9')
    with pytest.raises(exceptions.VersionCapped):
        api.clear_bmc_fault(context, all_nodes=True)
    assert bus.sent == []


def test_the_cli_sets_shows_and_clears_faults(tenks, tmp_path, hypervisor):
    spec = tmp_path / 'unit.yaml'
    spec.write_text(json.dumps({
        'cluster': 'unit', 'node_types': {'small': {
            'memory_mb': 128, 'vcpus': 1, 'volumes': [{'capacity': '1GiB'}],
            'physical_networks': ['physnet1']}},
        'specs': [{'type': 'small', 'count': 2}],
        'physical_networks': ['physnet1']}))
    assert tenks('deploy', spec).code == 0
    done = tenks('node', 'fault', 'set', 'tk0', 'slow', '--duration', '2',
                 '-f', 'json')
    assert done.code == 0, done.err
    assert done.json()['bmc_fault'] == {'kind': 'slow', 'delay': 2.0}
    table = tenks('node', 'show', 'tk0').out
    assert 'delay=2.0, kind=slow' in table
    refused = tenks('node', 'fault', 'set', 'tk0', 'error', '--probability',
                    '0.5')
    assert refused.code == 1
    assert 'probability is the failure rate of a flaky BMC' in refused.err
    assert tenks('node', 'fault', 'set', 'tk1', 'power-stuck').code == 0
    cleared = tenks('node', 'fault', 'clear', '--all')
    assert cleared.code == 0, cleared.err
    assert cleared.out == ('BMC fault of node tk0 cleared.\n'
                           'BMC fault of node tk1 cleared.\n')
    assert hypervisor.bmc_faults == {}
    with pytest.raises(SystemExit):  # a node or --all
        tenks('node', 'fault', 'clear')
