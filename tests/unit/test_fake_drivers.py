"""The fake drivers of simulated hypervisors: chosen by configuration,
owner marks honoured (also after a restart), latency and failures."""

import time

import pytest

from hostagent import manager
from hostagent import nodes as agent_nodes
from hostagent.drivers import fake
from hostagent.drivers.bmc import allowlist
from hostagent.drivers.bmc import emulator
from hostagent.drivers.bmc import virtualpdu
from tenks import exceptions
from tenks import states
from tests.unit.conftest import make_conf
from tests.unit.test_nodes import node

OWNER = 'tenks:c:a/hv1'
OTHER = 'tenks:c:b/hv1'


@pytest.fixture
def conf(tmp_path):
    return make_conf(tmp_path / 'state')


def drivers(conf):
    return agent_nodes.Nodes(
        fake.FakeVirtDriver(conf), {'fake': fake.FakeNetworkDriver(conf)},
        fake.FakeBmcDriver(conf), fake.FakeRedfishDriver(conf), 'hv1',
        virtualpdu.VirtualPduDriver(conf))


def fake_node(**fields):
    request = node(**fields)
    for nic in request['nics']:
        nic['bridge_type'] = 'fake'
    return request


def prepared(conf):
    """Nodes on fake drivers with the pool and bridge of node()."""
    nodes = drivers(conf)
    nodes.virt.ensure_pool('p', '/nowhere/p', 'tenks:c:a/hv1')
    nodes.networks['fake'].ensure_bridge('br', 'tenks:c:a/hv1')
    return nodes


def test_each_kind_loads_by_its_name(conf):
    for namespace, cls in (
            ('tenks.virt_drivers', fake.FakeVirtDriver),
            ('tenks.network_drivers', fake.FakeNetworkDriver),
            ('tenks.bmc_drivers', fake.FakeBmcDriver),
            ('tenks.redfish_drivers', fake.FakeRedfishDriver)):
        assert isinstance(manager.load_driver(namespace, 'fake', conf), cls)


def test_a_node_is_made_once_and_removed_whole(conf):
    nodes = prepared(conf)
    result = nodes.ensure(fake_node(), 'tenks:c:a', False)
    assert result['created'] == [['volume', 'n0v0'], ['port', 'n0t0'],
                                 ['domain', 'n0'], ['bmc', 'n0']]
    assert result['power_state'] == 'shut off'
    assert nodes.ensure(fake_node(), 'tenks:c:a', False)['changed'] is False
    assert nodes.inspect([fake_node()], 'tenks:c:a')['nodes'] == {
        node()['uuid']: []}
    removed = nodes.remove(fake_node(), 'tenks:c:a')
    assert removed['removed'] == [['bmc', 'n0'], ['domain', 'n0'],
                                  ['port', 'n0t0'], ['volume', 'n0v0']]
    assert [t['kind'] for t in nodes.virt.marked()] == ['pool']


def test_another_owners_things_are_never_adopted_changed_or_removed(conf):
    nodes = prepared(conf)
    nodes.ensure(fake_node(), 'tenks:c:a', False)
    virt, net, bmc = nodes.virt, nodes.networks['fake'], nodes.bmc
    for refused in (
            lambda: virt.ensure_volume('p', 'n0v0', 1024, 'qcow2', OTHER),
            lambda: virt.remove_volume('p', 'n0v0', OTHER),
            lambda: virt.resize_volume('p', 'n0v0', 4096, OTHER),
            lambda: virt.ensure_domain({'name': 'n0'}, OTHER),
            lambda: virt.remove_domain('n0', OTHER),
            lambda: virt.start_domain('n0', OTHER),
            lambda: net.ensure_port('br', 'n0t0', OTHER),
            lambda: net.remove_port('n0t0', OTHER),
            lambda: net.remove_bridge('br', OTHER),
            lambda: bmc.ensure_bmc('n0', '127.0.0.1', 6230, 'a', 'b',
                                   OTHER),
            lambda: bmc.remove_bmc('n0', OTHER),
            lambda: nodes.remove(fake_node(), 'tenks:c:b')):
        with pytest.raises(exceptions.ResourceConflict):
            refused()
    assert nodes.inspect([fake_node()], 'tenks:c:b')['nodes'][
        node()['uuid']] == [['volume', 'n0v0', states.PART_FOREIGN],
                            ['bridge', 'br', states.PART_FOREIGN],
                            ['port', 'n0t0', states.PART_FOREIGN],
                            ['domain', 'n0', states.PART_FOREIGN],
                            ['bmc', 'n0', states.PART_FOREIGN]]
    # Nothing of it changed: its owner finds it as it made it.
    assert nodes.inspect([fake_node()], 'tenks:c:a')['nodes'] == {
        node()['uuid']: []}


def test_a_restarted_hostagent_finds_what_it_made_and_whose(conf):
    prepared(conf).ensure(fake_node(), 'tenks:c:a', False)
    again = drivers(conf)
    assert {(t['kind'], t['name'], t['mark']) for t in again.virt.marked()
            } == {('pool', 'p', OWNER), ('volume', 'p/n0v0', OWNER),
                  ('domain', 'n0', OWNER)}
    assert [(t['kind'], t['name']) for t in again.networks['fake'].marked()
            ] == [('bridge', 'br'), ('port', 'n0t0')]
    assert [t['name'] for t in again.bmc.marked()] == ['n0']
    with pytest.raises(exceptions.ResourceConflict):
        again.remove(fake_node(), 'tenks:c:b')
    assert again.ensure(fake_node(), 'tenks:c:a', False)['changed'] is False


def test_bmc_credentials_are_compared_not_stored(conf, tmp_path):
    bmc = fake.FakeBmcDriver(conf)
    bmc.ensure_bmc('n0', '127.0.0.1', 6230, 'admin', 'hush', OWNER)
    assert bmc.bmc_changes({'n0': {'address': '127.0.0.1', 'port': 6230,
                                   'username': 'admin', 'password': 'new'}},
                           OWNER) == {'n0': ['secret']}
    with pytest.raises(exceptions.PortInUse):
        bmc.ensure_bmc('n1', '127.0.0.1', 6230, 'admin', 'hush', OWNER)
    for path in (tmp_path / 'state' / 'fake').iterdir():
        assert b'hush' not in path.read_bytes()
        assert path.stat().st_mode & 0o077 == 0


def test_latency_slows_every_change(conf):
    conf.set_override('latency', 0.2, group='fake')
    virt = fake.FakeVirtDriver(conf)
    started = time.monotonic()
    virt.ensure_pool('p', '/nowhere/p', OWNER)
    assert time.monotonic() - started >= 0.2
    # What changes nothing is not slowed.
    started = time.monotonic()
    virt.ensure_pool('p', '/nowhere/p', OWNER)
    assert time.monotonic() - started < 0.2


def test_a_simulated_failure_changes_nothing(conf):
    nodes = prepared(conf)
    conf.set_override('failure_rate', 1, group='fake')
    with pytest.raises(exceptions.DriverError) as failed:
        nodes.ensure(fake_node(), 'tenks:c:a', False)
    assert 'simulated failure ([fake] failure_rate = 1' in str(failed.value)
    assert [t['kind'] for t in nodes.virt.marked()] == ['pool']
    assert nodes.networks['fake'].marked()[0]['ports'] == []
    assert nodes.bmc.marked() == []


def test_half_failing_changes_fail_about_half_the_time(conf):
    conf.set_override('failure_rate', 0.5, group='fake')
    net = fake.FakeNetworkDriver(conf)
    failed = 0
    for n in range(400):
        try:
            net.ensure_bridge('br%d' % n, OWNER)
        except exceptions.DriverError:
            failed += 1
    assert 120 < failed < 280
    assert len(net.marked()) == 400 - failed


def test_the_fake_redfish_emulator_serves_simulated_systems(conf, tmp_path):
    driver = fake.FakeRedfishDriver(conf)
    config = {}
    exec(driver._config(str(tmp_path), driver._settings(
        str(tmp_path), '127.0.0.1', 9100)),
         config)
    assert config['SUSHY_EMULATOR_FAKE_DRIVER'] is True
    path = tmp_path / 'allowed'
    path.mkdir()
    allowed = allowlist.AllowList(str(path))
    emulator.fakedriver.FakeDriver.initialize(
        {'SUSHY_EMULATOR_FAKE_SYSTEMS': [], 'SUSHY_EMULATOR_STATE_DIR': None},
        None)
    systems = emulator.AllowedFakeSystems(allowed)
    assert systems.systems == []
    (path / 'u0').write_text('n0')
    assert systems.systems == ['u0']
    assert systems.name('u0') == 'n0'
    assert systems.get_power_state('u0') == 'Off'
    with pytest.raises(emulator.error.NotFound):
        systems.get_power_state('u1')
