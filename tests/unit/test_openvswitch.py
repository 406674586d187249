"""bridge_type openvswitch: the choice of driver per bridge and NIC
through the conductor and the hostagent, and what the Open vSwitch
driver reads (its writes meet the real Open vSwitch in
tests/functional/test_openvswitch.py)."""

import contextlib
import json
import logging
import os
import socket
import threading
import time
import types
import uuid

import pytest

from flows import nodes as flow_nodes
from hostagent import manager
from hostagent import nodes as hostagent_nodes
from hostagent import rpcapi as hostagent_rpcapi
from hostagent.drivers.network import openvswitch
from tenks import exceptions
from tenks import reconcile
from tenks import scheduler
from tenks import states
from tenks.cli import embedded
from tenks.scheduler import host_state
from tests.unit import fakes
from tests.unit.conftest import make_spec

OWNER = 'tenks:unit:1'


class TypedNetwork(fakes.FakeNetwork):
    """A fake network driver whose things are kept under its name, so a
    test sees which driver made what."""

    def __init__(self, conf, hv, name):
        super().__init__(conf, hv)
        self.name = name

    def kind(self, kind):
        return '%s:%s' % (self.name, kind)

    def ensure_bridge(self, name, owner):
        return dict(self.hv.ensure(self.kind('bridge'), name), mac='m')

    def remove_bridge(self, name, owner):
        return self.hv.remove(self.kind('bridge'), name)

    def ensure_uplink(self, bridge, source, veth_names, owner):
        return self.hv.ensure(self.kind('uplink'), bridge)

    def remove_uplink(self, bridge, source, veth_names, owner):
        return self.hv.remove(self.kind('uplink'), bridge)

    def ensure_port(self, bridge, name, owner):
        return self.hv.ensure(self.kind('port'), name)

    def remove_port(self, name, owner):
        return self.hv.remove(self.kind('port'), name)

    def port_changes(self, ports, owner):
        return {p['tap']: [] if (self.kind('port'), p['tap'])
                in self.hv.things else None for p in ports}

    def bridge_changes(self, names, owner):
        return {n: [] if (self.kind('bridge'), n) in self.hv.things
                else None for n in names}


@pytest.fixture
def typed_conductor(conf, hypervisor, monkeypatch):
    drivers = {'tenks.virt_drivers': fakes.FakeVirt,
               'tenks.bmc_drivers': fakes.FakeBmc,
               'tenks.redfish_drivers': fakes.FakeRedfish,
               'tenks.snmp_drivers': fakes.FakeSnmp}

    def load(namespace, name, conf):
        if namespace == 'tenks.network_drivers':
            return TypedNetwork(conf, hypervisor, name)
        return drivers[namespace](conf, hypervisor)

    monkeypatch.setattr(manager, 'load_driver', load)
    with embedded.embedded(conf) as conductor:
        yield conductor


def ovs_spec(count=1):
    # Mapped to an interface every machine has.
    return make_spec(count=count, bridge_type='openvswitch',
                     physnet_mappings={'physnet1': 'lo'})


def test_an_ovs_cluster_is_made_and_removed_by_the_ovs_driver(
        typed_conductor, hypervisor):
    spec = ovs_spec()
    typed_conductor.deployments.deploy(spec)
    made = sorted(hypervisor.things)
    assert ('openvswitch:bridge', 'brtenks0') in made
    assert ('openvswitch:uplink', 'brtenks0') in made
    assert ('openvswitch:port', 'p-tk0-0') in made
    assert not [k for k, _ in made if k.startswith('linuxbridge:')]
    [node] = [n.as_dict() for n in typed_conductor.db.list_nodes()]
    assert node['nics'][0]['bridge_type'] == 'openvswitch'

    # Drift: the bridge is gone; the plan and the deploy make it again,
    # with its uplink, before the node's port.
    del hypervisor.things[('openvswitch:bridge', 'brtenks0')]
    del hypervisor.things[('openvswitch:port', 'p-tk0-0')]
    changes = typed_conductor.deployments.plan(spec)['changes']
    assert {(c['resource'], c['action'], c['old']) for c in changes} == {
        ('bridge brtenks0', 'repair', 'missing'),
        ('port p-tk0-0', 'repair', 'missing')}
    typed_conductor.deployments.deploy(spec)
    assert sorted(hypervisor.things) == made

    typed_conductor.teardowns.teardown('unit')
    assert not [k for k, _ in hypervisor.things if ':' in k]


def test_a_bridge_type_the_agent_does_not_offer_changes_nothing(
        hypervisor, conf):
    agent = hostagent_nodes.Nodes(fakes.FakeVirt(conf, hypervisor),
                                  {'linuxbridge': fakes.FakeNetwork(
                                      conf, hypervisor)},
                                  fakes.FakeBmc(conf, hypervisor),
                                  fakes.FakeRedfish(conf, hypervisor), 'hv1',
                                  fakes.FakeSnmp(conf, hypervisor))
    node = hostagent_rpcapi.node_request(
        reconcile.view(ovs_spec(), 'd', dict(
            scheduler.schedule(ovs_spec(), {'hv1': facts()}, [])[0]),
            facts()), {'ipmi': 'password'})
    with pytest.raises(exceptions.NetworkDriverMismatch) as raised:
        agent.ensure(node, OWNER, False)
    assert str(raised.value) == (
        'Hypervisor hv1 offers the network driver(s) linuxbridge, but the '
        'spec asks for bridge_type openvswitch')
    assert hypervisor.things == {}


def facts():
    return {'host': 'hv1', 'cpus': 2, 'memory_mb': 4096, 'busy_ports': [],
            'missing_interfaces': [], 'ipmi_address': '127.0.0.1',
            'physnet_mappings': {'physnet1': 'lo'}, 'resource_prefix': '',
            'pool_dir': '/p', 'pool_free_bytes': 1 << 40,
            'network_drivers': ['linuxbridge', 'openvswitch'],
            'foreign_interfaces': []}


def test_requests_and_records_carry_the_bridge_type():
    spec = ovs_spec()
    resources = reconcile.host_resources(spec, 'd', 'hv1', facts())
    assert [(kind, args.get('bridge_type')) for kind, _, args in resources
            ] == [('pool', None), ('bridge', 'openvswitch'),
                  ('uplink', 'openvswitch')]
    # Linux bridges' records stay as before there was a choice.
    linux = reconcile.host_resources(dict(spec, bridge_type='linuxbridge'),
                                     'd', 'hv1', facts())
    assert not [args for _, _, args in linux if 'bridge_type' in args]

    nic = {'mac': 'm', 'tap': 't0', 'bridge': 'b', 'physnet': 'p',
           'bridge_type': 'openvswitch'}
    view = {'uuid': 'u', 'name': 'n', 'domain_type': 'qemu', 'vcpus': 1,
            'memory_mb': 64, 'console_log_enabled': False,
            'console_log': None, 'boot_mode': 'bios', 'secure_boot': False,
            'pool': 'p', 'volumes': [], 'nics': [nic], 'owner': OWNER,
            'bmc': {'type': 'ipmi', 'address': 'a', 'port': 1,
                    'username': 'u'}}
    gone = dict(view, nics=[nic, dict(nic, tap='t1')])
    request = hostagent_rpcapi.node_request(view, {'ipmi': 'pw'}, gone)
    assert request['nics'] == [{'mac': 'm', 'tap': 't0', 'bridge': 'b',
                                'bridge_type': 'openvswitch'}]
    assert request['remove'] == {'volumes': [], 'ports': ['t1'],
                                 'port_types': {'t1': 'openvswitch'}}
    hostagent_nodes.check(request)

    [(kind, name, args)] = [t for t in flow_nodes.node_resources(view)
                            if t[0] == 'port']
    assert args == {'name': 't0', 'owner': OWNER,
                    'bridge_type': 'openvswitch'}
    rows = [{'kind': kind, 'remove_args': args}]
    assert flow_nodes.parts_of(rows)['nics'] == [
        {'tap': 't0', 'bridge_type': 'openvswitch'}]
    # A port recorded before there was a choice is a Linux bridge's.
    rows = [{'kind': 'port', 'remove_args': {'name': 't0', 'owner': OWNER}}]
    assert flow_nodes.parts_of(rows)['nics'] == [
        {'tap': 't0', 'bridge_type': 'linuxbridge'}]


def test_an_agent_before_the_choice_offers_its_one_driver():
    assert host_state.network_drivers({'network_driver': 'linuxbridge'}) == [
        'linuxbridge']
    assert host_state.network_drivers(facts()) == ['linuxbridge',
                                                  'openvswitch']


def test_bridge_macs_are_stable_local_unicast_and_per_owner():
    mac = openvswitch.bridge_mac('brtenks0', OWNER)
    assert mac == openvswitch.bridge_mac('brtenks0', OWNER)
    first = int(mac.split(':')[0], 16)
    assert first & 0x02 and not first & 0x01
    assert mac != openvswitch.bridge_mac('brtenks0', 'tenks:unit:2')
    assert mac != openvswitch.bridge_mac('brtenks1', OWNER)


class Tables:
    """Open vSwitch rows for a driver that never connects."""

    def __init__(self, bridges, ports):
        self.tables = {
            'Bridge': [{'name': name, 'external_ids': marks(owner),
                        'ports': ['uuid-%s' % p for p in members]}
                       for name, (owner, members) in bridges.items()],
            'Port': [{'name': name, 'external_ids': marks(owner),
                      '_uuid': 'uuid-%s' % name}
                     for name, owner in ports.items()]}

    def rows(self, table, names=None, columns=()):
        return [row for row in self.tables[table]
                if names is None or row['name'] in names]


def marks(owner):
    return {} if owner is None else {openvswitch.MARK: owner}


@pytest.fixture
def sysfs(tmp_path, monkeypatch):
    monkeypatch.setattr(openvswitch.lb, 'SYSFS_NET', str(tmp_path))

    def link(name, alias, up=True, tun=True):
        os.makedirs(tmp_path / name)
        (tmp_path / name / 'ifalias').write_text(alias + '\n')
        (tmp_path / name / 'flags').write_text('0x1003' if up else '0x1002')
        if tun:
            (tmp_path / name / 'tun_flags').write_text('0x1002')
    return link


def driver(conf, monkeypatch, tables):
    ovs = openvswitch.OpenvSwitchDriver(conf)
    monkeypatch.setattr(ovs, '_rows', tables.rows)
    # What it reads before it has an IDL (none here).
    monkeypatch.setattr(openvswitch, '_select', lambda path, timeout, t: {
        table: tables.rows(table) for table in t})
    monkeypatch.setattr(ovs, '_running', lambda: True)
    monkeypatch.setattr(ovs, '_api', lambda: None)
    return ovs


def test_port_changes_read_ports_bridges_and_taps(conf, monkeypatch,
                                                   sysfs):
    tables = Tables(
        bridges={'br0': (OWNER, ['ok', 'down', 'theirs', 'gone']),
                 'br1': (OWNER, ['moved']), 'other': (None, [])},
        ports={'ok': OWNER, 'down': OWNER, 'theirs': 'tenks:x:2',
               'moved': OWNER, 'gone': OWNER})
    for tap in ('ok', 'moved', 'unported', 'orphan'):
        sysfs(tap, OWNER)
    sysfs('down', OWNER, up=False)
    sysfs('theirs', OWNER)
    sysfs('unmarked', '')
    sysfs('notatap', OWNER, tun=False)
    ovs = driver(conf, monkeypatch, tables)
    wanted = [{'tap': tap, 'bridge': 'br0'} for tap in (
        'ok', 'down', 'theirs', 'moved', 'unported', 'gone', 'absent',
        'unmarked', 'notatap')] + [{'tap': 'orphan', 'bridge': 'other'}]
    assert ovs.port_changes(wanted, OWNER) == {
        'ok': [],
        'down': ['state down'],
        'theirs': states.PART_FOREIGN,
        'moved': ['port in br1'],
        'unported': ['no Open vSwitch port'],
        'gone': ['tap missing'],
        'absent': None,
        'unmarked': states.PART_FOREIGN,
        'notatap': states.PART_FOREIGN,
        'orphan': ['bridge other missing or not ours'],
    }
    assert ovs.bridge_changes(['br0', 'other', 'nothing'], OWNER) == {
        'br0': [], 'other': states.PART_FOREIGN, 'nothing': None}
    # A bridge's own port has its name (and no mark): the bridge's wins.
    tables.tables['Port'].append({'name': 'br0', 'external_ids': {},
                                  '_uuid': 'uuid-br0'})
    assert ovs.marks(['br0', 'other', 'theirs', 'nothing']) == {
        'br0': OWNER, 'other': '', 'theirs': 'tenks:x:2'}


def test_a_linux_bridge_deploy_reads_no_open_vswitch_marks(
        typed_conductor, monkeypatch):
    """Only the driver of the spec's bridge_type is asked for the marks
    of the interfaces a deploy would make: a Linux bridge cluster never
    connects to Open vSwitch."""
    asked = []
    monkeypatch.setattr(TypedNetwork, 'marks', lambda self, names: (
        asked.append((self.name, sorted(names))) or {}))
    typed_conductor.deployments.deploy(ovs_spec())
    typed_conductor.deployments.deploy(dict(ovs_spec(), cluster='lb',
                                            bridge_prefix='brlb',
                                            bridge_type='linuxbridge'))
    assert [name for name, names in asked if names] == [
        'openvswitch', 'linuxbridge']


def test_without_open_vswitch_nothing_connects(conf, tmp_path):
    conf.set_override('ovsdb_connection', 'unix:%s' % (tmp_path / 'db'),
                      group='hostagent')
    ovs = openvswitch.OpenvSwitchDriver(conf)
    # Reads for a Linux bridge cluster's checks find no OVS names.
    assert ovs.marks(['br0']) == {}
    with pytest.raises(exceptions.DriverError) as raised:
        ovs.ensure_bridge('br0', OWNER)
    assert 'no OVSDB server listens there' in str(raised.value)
    assert str(tmp_path / 'db') in str(raised.value)


@pytest.fixture
def ovsdb(tmp_path):
    """An OVSDB server's socket that answers a transaction with what
    ``server.answer(request)`` returns, or not at all if it is None;
    ``server.requests`` holds what it was asked."""
    path = str(tmp_path / 'db.sock')
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    server = types.SimpleNamespace(path=path, target='unix:' + path,
                                   requests=[], answer=None)

    def answer(conn):
        received = b''
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                return
            received += chunk
            try:
                request = json.loads(received)
                break
            except ValueError:
                continue
        server.requests.append(request)
        if server.answer is None:
            conn.recv(1)
            return
        # An echo first (a server may ask one any time), then the reply
        # in two parts, cut inside a character.
        reply = (json.dumps({'id': 'echo', 'method': 'echo', 'params': []})
                 + json.dumps({'id': request['id'], 'error': None,
                               'result': server.answer(request)},
                              ensure_ascii=False)).encode()
        cut = reply.find('é'.encode()) + 1
        conn.sendall(reply[:cut])
        time.sleep(0.05)
        conn.sendall(reply[cut:])
        conn.recv(1)

    def serve():
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    answer(conn)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server
    # Wakes the accept.
    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    thread.join(5)
    assert not thread.is_alive()


def test_a_read_before_any_idl_is_one_transaction(conf, ovsdb):
    """Rows read without an IDL look as ovsdbapp's db_list gives them:
    maps as dicts, UUIDs as UUIDs, a set of one (which OVSDB sends bare)
    as a list; the reply is found after another message, and whole
    when it comes in parts."""
    ports = [str(uuid.uuid4()) for _ in range(2)]
    ovsdb.answer = lambda request: [
        {'rows': [{'name': 'p0', '_uuid': ['uuid', ports[0]],
                   'external_ids': ['map', [[openvswitch.MARK, OWNER]]]},
                  {'name': 'p1', '_uuid': ['uuid', ports[1]],
                   'external_ids': ['map', [['note', 'café']]]}]},
        {'rows': [{'name': 'one', 'external_ids': ['map', []],
                   'ports': ['uuid', ports[0]]},
                  {'name': 'two', 'external_ids': ['map', []],
                   'ports': ['set', [['uuid', p] for p in ports]]},
                  {'name': 'none', 'external_ids': ['map', []],
                   'ports': ['set', []]}]}]
    read = openvswitch._select(ovsdb.path, 5, {
        'Port': ('name', 'external_ids', '_uuid'),
        'Bridge': ('name', 'external_ids', 'ports')})
    assert read == {
        'Port': [{'name': 'p0', 'external_ids': {openvswitch.MARK: OWNER},
                  '_uuid': uuid.UUID(ports[0])},
                 {'name': 'p1', 'external_ids': {'note': 'café'},
                  '_uuid': uuid.UUID(ports[1])}],
        'Bridge': [{'name': 'one', 'external_ids': {},
                    'ports': [uuid.UUID(ports[0])]},
                   {'name': 'two', 'external_ids': {},
                    'ports': [uuid.UUID(p) for p in ports]},
                   {'name': 'none', 'external_ids': {}, 'ports': []}]}
    [request] = ovsdb.requests
    assert request['method'] == 'transact'
    assert request['params'] == ['Open_vSwitch', {
        'op': 'select', 'table': 'Port', 'where': [],
        'columns': ['name', 'external_ids', '_uuid']}, {
        'op': 'select', 'table': 'Bridge', 'where': [],
        'columns': ['name', 'external_ids', 'ports']}]


def test_a_read_the_server_refuses_says_why(conf, ovsdb):
    ovsdb.answer = lambda request: [
        {'error': 'unknown column', 'details': 'no column nom in Port é'}]
    with pytest.raises(RuntimeError) as raised:
        openvswitch._select(ovsdb.path, 5, {'Port': ('nom',)})
    assert str(raised.value) == 'unknown column (no column nom in Port é)'


def test_a_server_that_never_answers_fails_each_request_in_time(
        conf, ovsdb, sysfs, caplog):
    conf.set_override('ovsdb_connection', ovsdb.target, group='hostagent')
    conf.set_override('ovsdb_timeout', 1, group='hostagent')
    ovs = openvswitch.OpenvSwitchDriver(conf)
    started = time.monotonic()
    with pytest.raises(exceptions.DriverError) as raised:
        ovs.port_changes([{'tap': 'p0', 'bridge': 'br0'}], OWNER)
    assert time.monotonic() - started < 5
    assert 'read Open vSwitch ports' in str(raised.value)
    assert 'no answer from %s in 1 s' % ovsdb.target in str(raised.value)
    # A deploy's check of the names it would take goes on without them.
    with caplog.at_level(logging.WARNING, logger=openvswitch.__name__):
        assert ovs.marks(['br0']) == {}
    assert 'Not reading Open vSwitch marks' in caplog.text
    # Nor does a change wait for ever, for its first read or removal
    # (on the socket) or for the schema to connect an IDL with.
    for change, action in (
            (lambda: ovs.ensure_bridge('br0', OWNER),
             'create Open vSwitch bridge br0'),
            (lambda: ovs.remove_port('p0', OWNER), 'delete tap p0'),
            (ovs._api, 'connect to %s' % ovsdb.target)):
        started = time.monotonic()
        with pytest.raises(exceptions.DriverError) as raised:
            change()
        assert time.monotonic() - started < 5
        assert action in str(raised.value)
        assert 'no answer from %s in 1 s' % ovsdb.target in str(raised.value)
    assert ovsdb.target not in openvswitch._APIS


def test_a_removal_without_an_idl_holds_only_for_the_mark_read(
        conf, ovsdb, sysfs):
    """A process with no IDL deletes a port in one transaction that waits
    for the row as read (its mark); if the port changed meanwhile it is
    read again: gone, it is not reported removed; still changing after
    three reads, the request fails and says so."""
    conf.set_override('ovsdb_connection', ovsdb.target, group='hostagent')
    port = str(uuid.uuid4())
    mark = ['map', [[openvswitch.MARK, OWNER], ['note', 'é']]]
    reads = []

    def answer(request):
        [operation, *rest] = request['params'][1:]
        if operation['op'] == 'select':
            present = reads.pop(0)
            return [{'rows': [{'name': 'p0', '_uuid': ['uuid', port],
                               'external_ids': mark}] if present else []}]
        return [{'error': 'timed out',
                 'details': '"wait" timed out after 0 ms'}, None]
    ovsdb.answer = answer

    reads[:] = [True, False]
    assert openvswitch.OpenvSwitchDriver(conf).remove_port(
        'p0', OWNER) is False
    select, delete, again = [r['params'] for r in ovsdb.requests]
    assert select == again == ['Open_vSwitch', {
        'op': 'select', 'table': 'Port', 'where': [['name', '==', 'p0']],
        'columns': ['name', 'external_ids', '_uuid']}]
    assert delete == ['Open_vSwitch', {
        'op': 'wait', 'table': 'Port', 'timeout': 0,
        'where': [['_uuid', '==', ['uuid', port]]],
        'columns': ['external_ids'], 'until': '==',
        'rows': [{'external_ids': ['map', [['note', 'é'],
                                           [openvswitch.MARK, OWNER]]]}]}, {
        'op': 'mutate', 'table': 'Bridge',
        'where': [['ports', 'includes', ['uuid', port]]],
        'mutations': [['ports', 'delete', ['uuid', port]]]}]

    ovsdb.requests.clear()
    reads[:] = [True] * 4
    with pytest.raises(exceptions.DriverError) as raised:
        openvswitch.OpenvSwitchDriver(conf).remove_port('p0', OWNER)
    assert 'port p0 changed each time it was to be deleted' in str(
        raised.value)
    assert len(ovsdb.requests) == 7
    assert ovsdb.target not in openvswitch._APIS
