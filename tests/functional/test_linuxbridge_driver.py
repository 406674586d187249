"""LinuxBridgeDriver against real netlink."""

import subprocess

import pytest
from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from hostagent.drivers.network import linuxbridge
from tenks import exceptions
from tests.functional import drivers_fixtures as fx

pytestmark = pytest.mark.functional


@pytest.fixture
def driver(tmp_path):
    return linuxbridge.LinuxBridgeDriver(fx.make_conf(tmp_path))


@pytest.fixture
def ipr():
    with IPRoute() as handle:
        yield handle


def link(ipr, name):
    """Name, kind, alias, up or not, and master's name of link ``name``."""
    found = ipr.link_lookup(ifname=name)
    if not found:
        return None
    msg = ipr.link('get', index=found[0])[0]
    master = msg.get('master')
    return {
        'kind': msg.get(('linkinfo', 'kind')),
        'alias': msg.get('ifalias'),
        'up': msg.get('state') == 'up',
        'master': (ipr.link('get', index=master)[0].get('ifname')
                   if master else None),
        'mac': msg.get('address'),
    }


@pytest.fixture
def bridge(driver, left):
    name = left.name('br')
    driver.ensure_bridge(name, fx.OWNER)
    return name


def test_bridge_lifecycle(driver, ipr, left):
    name = left.name('br')
    result = driver.ensure_bridge(name, fx.OWNER)
    mac = result['mac']
    assert result == dict(fx.CREATED, mac=mac)
    assert link(ipr, name) == {'kind': 'bridge', 'alias': fx.OWNER,
                               'up': True, 'master': None, 'mac': mac}
    assert driver.ensure_bridge(name, fx.OWNER) == dict(fx.UNCHANGED,
                                                        mac=mac)

    # Down again: ensure brings it up.
    ipr.link('set', index=ipr.link_lookup(ifname=name)[0], state='down')
    assert driver.ensure_bridge(name, fx.OWNER) == dict(fx.FIXED, mac=mac)
    assert link(ipr, name)['up']

    assert driver.remove_bridge(name, fx.OWNER) is True
    assert link(ipr, name) is None
    assert driver.remove_bridge(name, fx.OWNER) is False


def test_bridge_mac_stays_when_ports_join(driver, ipr, left, bridge):
    mac = link(ipr, bridge)['mac']
    for index in range(3):
        driver.ensure_port(bridge, left.name('t%d' % index), fx.OWNER)
    assert link(ipr, bridge)['mac'] == mac
    assert driver.ensure_bridge(bridge, fx.OWNER) == dict(fx.UNCHANGED,
                                                          mac=mac)


def test_foreign_interfaces_are_left_alone(driver, ipr, left, bridge):
    unmarked = left.name('brx')
    ipr.link('add', ifname=unmarked, kind='bridge')
    other = left.name('tx')
    driver.ensure_bridge(left.name('bro'), 'tenks:hxother')
    driver.ensure_port(left.name('bro'), other, 'tenks:hxother')
    for name in (unmarked, other):
        before = link(ipr, name)
        with pytest.raises(exceptions.ResourceConflict, match=name):
            driver.ensure_bridge(name, fx.OWNER)
        with pytest.raises(exceptions.ResourceConflict, match=name):
            driver.remove_bridge(name, fx.OWNER)
        with pytest.raises(exceptions.ResourceConflict, match=name):
            driver.ensure_port(bridge, name, fx.OWNER)
        with pytest.raises(exceptions.ResourceConflict, match=name):
            driver.remove_port(name, fx.OWNER)
        assert link(ipr, name) == before
    # Not our bridge: no port goes into it.
    with pytest.raises(exceptions.ResourceConflict, match=unmarked):
        driver.ensure_port(unmarked, left.name('t0'), fx.OWNER)
    assert link(ipr, left.name('t0')) is None


def test_our_mark_on_another_kind_of_link_is_not_removed(driver, ipr,
                                                         left, bridge):
    """Removal reads the link from sysfs: our alias on a link of another
    kind (a veth, or our bridge named as a port) is not enough."""
    veth = left.name('va')
    ipr.link('add', ifname=veth, kind='veth', peer=left.name('vb'))
    ipr.link('set', index=ipr.link_lookup(ifname=veth)[0],
             ifalias=fx.OWNER)
    before = link(ipr, veth)
    for remove in (driver.remove_port, driver.remove_bridge):
        with pytest.raises(exceptions.ResourceConflict,
                           match='another kind of link'):
            remove(veth, fx.OWNER)
    with pytest.raises(exceptions.ResourceConflict,
                       match='it is a bridge, not a tun'):
        driver.remove_port(bridge, fx.OWNER)
    assert link(ipr, veth) == before
    assert link(ipr, bridge)['kind'] == 'bridge'


def test_port_lifecycle(driver, ipr, left, bridge):
    tap = left.name('t0')
    assert driver.ensure_port(bridge, tap, fx.OWNER) == fx.CREATED
    assert driver.ensure_port(bridge, tap, fx.OWNER) == fx.UNCHANGED
    state = link(ipr, tap)
    assert state == {'kind': 'tun', 'alias': fx.OWNER, 'up': True,
                     'master': bridge, 'mac': state['mac']}
    with open('/sys/class/net/%s/tun_flags' % tap) as f:
        flags = int(f.read(), 16)
    assert flags & 0x0002  # IFF_TAP
    assert not flags & 0x0100  # IFF_MULTI_QUEUE

    # Released from the bridge: ensure puts it back.
    ipr.link('set', index=ipr.link_lookup(ifname=tap)[0], master=0)
    assert driver.ensure_port(bridge, tap, fx.OWNER) == fx.FIXED
    assert link(ipr, tap)['master'] == bridge

    assert driver.remove_port(tap, fx.OWNER) is True
    assert link(ipr, tap) is None
    assert driver.remove_port(tap, fx.OWNER) is False


def test_port_in_missing_bridge(driver, left):
    with pytest.raises(exceptions.DriverError, match='does not exist'):
        driver.ensure_port(left.name('brnone'), left.name('t0'), fx.OWNER)


def test_name_too_long(driver, left):
    with pytest.raises(exceptions.DriverError, match='15 characters'):
        driver.ensure_bridge(left.name('-much-too-long'), fx.OWNER)


def test_uplink_to_bridge(driver, ipr, left, bridge):
    physical = left.name('phys')
    ipr.link('add', ifname=physical, kind='bridge')
    veths = [left.name('v0a'), left.name('v0b')]
    assert driver.ensure_uplink(bridge, physical, veths,
                                fx.OWNER) == fx.CREATED
    assert driver.ensure_uplink(bridge, physical, veths,
                                fx.OWNER) == fx.UNCHANGED
    for name, master in zip(veths, (bridge, physical), strict=True):
        assert link(ipr, name) == {'kind': 'veth', 'alias': fx.OWNER,
                                   'up': True, 'master': master,
                                   'mac': link(ipr, name)['mac']}

    assert driver.remove_uplink(bridge, physical, veths, fx.OWNER) is True
    assert [link(ipr, name) for name in veths] == [None, None]
    assert link(ipr, physical)['alias'] is None  # untouched
    assert driver.remove_uplink(bridge, physical, veths, fx.OWNER) is False


def plain_interface(ipr, name):
    """A stand-in for a NIC: one end of a veth pair (this kernel has no
    dummy interfaces)."""
    ipr.link('add', ifname=name, kind='veth', peer=name + 'p')
    return name


def test_uplink_to_interface(driver, ipr, left, bridge):
    physical = plain_interface(ipr, left.name('nic'))
    veths = [left.name('v0a'), left.name('v0b')]
    assert driver.ensure_uplink(bridge, physical, veths,
                                fx.OWNER) == fx.CREATED
    assert driver.ensure_uplink(bridge, physical, veths,
                                fx.OWNER) == fx.UNCHANGED
    state = link(ipr, physical)
    assert (state['master'], state['up'], state['alias']) == (
        bridge, True, None)
    assert [link(ipr, name) for name in veths] == [None, None]

    assert driver.remove_uplink(bridge, physical, veths, fx.OWNER) is True
    assert link(ipr, physical)['master'] is None
    assert driver.remove_uplink(bridge, physical, veths, fx.OWNER) is False


def test_uplink_leaves_interface_of_another_bridge(driver, ipr, left,
                                                  bridge):
    physical = plain_interface(ipr, left.name('nic'))
    other = left.name('brx')
    ipr.link('add', ifname=other, kind='bridge')
    ipr.link('set', index=ipr.link_lookup(ifname=physical)[0],
             master=ipr.link_lookup(ifname=other)[0])
    veths = [left.name('v0a'), left.name('v0b')]
    with pytest.raises(exceptions.ResourceConflict, match=physical):
        driver.ensure_uplink(bridge, physical, veths, fx.OWNER)
    assert driver.remove_uplink(bridge, physical, veths, fx.OWNER) is False
    assert link(ipr, physical)['master'] == other


def test_uplink_to_missing_interface(driver, left, bridge):
    veths = [left.name('v0a'), left.name('v0b')]
    with pytest.raises(exceptions.InterfaceNotFound, match='hx'):
        driver.ensure_uplink(bridge, left.name('nope'), veths, fx.OWNER)


def test_another_deployment_is_foreign(driver, ipr, left, bridge):
    """Bridge, uplink veths and tap of the same cluster name made by another
    deployment (state directory) are neither used, changed nor removed."""
    physical = left.name('phys')
    ipr.link('add', ifname=physical, kind='bridge')
    veths = [left.name('v0a'), left.name('v0b')]
    driver.ensure_uplink(bridge, physical, veths, fx.OWNER)
    tap = left.name('t0')
    driver.ensure_port(bridge, tap, fx.OWNER)
    names = [bridge, physical, tap, *veths]
    before = [link(ipr, name) for name in names]

    for call, args in [
            (driver.ensure_bridge, (bridge,)),
            (driver.remove_bridge, (bridge,)),
            (driver.ensure_uplink, (bridge, physical, veths)),
            (driver.remove_uplink, (bridge, physical, veths)),
            (driver.ensure_port, (bridge, tap)),
            (driver.remove_port, (tap,))]:
        with pytest.raises(exceptions.ResourceConflict,
                           match=fx.OWNER) as error:
            call(*args, fx.OTHER)
        assert fx.OTHER in str(error.value)
    assert [link(ipr, name) for name in names] == before
    # Its veths stay even when the bridge named is the caller's own.
    mine = left.name('brm')
    driver.ensure_bridge(mine, fx.OTHER)
    with pytest.raises(exceptions.ResourceConflict, match=veths[0]):
        driver.remove_uplink(mine, physical, veths, fx.OTHER)
    assert [link(ipr, name) for name in names] == before
    # Everything is checked before anything goes: a removal naming a
    # foreign bridge leaves even the caller's own veths.
    own = [left.name('v1a'), left.name('v1b')]
    driver.ensure_uplink(mine, physical, own, fx.OTHER)
    own_before = [link(ipr, name) for name in own]
    with pytest.raises(exceptions.ResourceConflict, match=bridge):
        driver.remove_uplink(bridge, physical, own, fx.OTHER)
    assert [link(ipr, name) for name in own] == own_before


def test_failed_ensure_leaves_nothing_it_made(driver, ipr, left, bridge,
                                              monkeypatch):
    """A bridge, tap or veth pair made but not aliased (or not up) is
    deleted by the request that failed."""
    physical = left.name('phys')
    ipr.link('add', ifname=physical, kind='bridge')
    veths = [left.name('v0a'), left.name('v0b')]
    new_bridge, tap = left.name('brn'), left.name('t0')

    def fail(*args, **kwargs):
        raise NetlinkError(1, 'injected failure')

    monkeypatch.setattr(linuxbridge, '_configure', fail)
    for call, args in [
            (driver.ensure_bridge, (new_bridge,)),
            (driver.ensure_port, (bridge, tap)),
            (driver.ensure_uplink, (bridge, physical, veths))]:
        with pytest.raises(exceptions.DriverError, match='injected'):
            call(*args, fx.OWNER)
    for name in (new_bridge, tap, *veths):
        assert link(ipr, name) is None
    # What existed before the failing request stays.
    assert link(ipr, bridge)['alias'] == fx.OWNER
    assert link(ipr, physical)['kind'] == 'bridge'


def test_link_made_by_another_process_meanwhile_is_left(driver, ipr, left,
                                                       bridge, monkeypatch):
    """Another process makes the bridge, tap or veth pair between the
    driver's look and its add: the request fails with a conflict and
    neither deletes, enslaves nor marks that process's link."""
    physical = left.name('phys')
    ipr.link('add', ifname=physical, kind='bridge')
    veths = [left.name('v0a'), left.name('v0b')]
    new_bridge, tap = left.name('brn'), left.name('t0')
    # The name looked at last, and how the other process makes its link.
    racers = {
        new_bridge: ['ip', 'link', 'add', new_bridge, 'type', 'bridge'],
        tap: ['ip', 'tuntap', 'add', tap, 'mode', 'tap'],
        veths[1]: ['ip', 'link', 'add', veths[0], 'type', 'veth', 'peer',
                   'name', veths[1]],
    }
    owned = linuxbridge._owned

    def racing(ipr, name, owner, kind):
        found = owned(ipr, name, owner, kind)
        if found is None and name in racers:
            subprocess.run(racers.pop(name), check=True)
        return found

    monkeypatch.setattr(linuxbridge, '_owned', racing)
    for call, args, name in [
            (driver.ensure_bridge, (new_bridge,), new_bridge),
            (driver.ensure_port, (bridge, tap), tap),
            (driver.ensure_uplink, (bridge, physical, veths), veths[0])]:
        with pytest.raises(exceptions.ResourceConflict,
                           match='%s.*created it meanwhile' % name):
            call(*args, fx.OWNER)
    assert racers == {}
    for name, kind in [(new_bridge, 'bridge'), (tap, 'tun'),
                       (veths[0], 'veth'), (veths[1], 'veth')]:
        found = link(ipr, name)
        assert found is not None, name
        assert (found['kind'], found['alias'], found['master']) == (
            kind, None, None), name


def test_port_changes_reads_what_ensure_port_would_change(driver, ipr, left,
                                                          bridge):
    """port_changes reads sysfs: each port's drift as ensure_port sees it
    through netlink, and it changes nothing."""
    taps = [left.name('t%d' % index) for index in range(6)]
    for tap in taps[:5]:
        driver.ensure_port(bridge, tap, fx.OWNER)
    index = {tap: ipr.link_lookup(ifname=tap)[0] for tap in taps[:5]}
    ipr.link('set', index=index[taps[1]], master=0)
    ipr.link('set', index=index[taps[2]], state='down')
    ipr.link('set', index=index[taps[3]], ifalias='somebody else')
    other = left.name('bro')
    ipr.link('add', ifname=other, kind='bridge')
    ports = [{'tap': tap, 'bridge': bridge} for tap in taps]
    ports[4]['bridge'] = other
    before = [link(ipr, tap) for tap in taps]

    assert driver.port_changes(ports, fx.OWNER) == {
        taps[0]: [],
        taps[1]: ['master %d' % ipr.link_lookup(ifname=bridge)[0]],
        taps[2]: ['state up'],
        taps[3]: 'foreign',
        taps[4]: ['bridge %s missing or not ours' % other],
        taps[5]: None,
    }
    assert [link(ipr, tap) for tap in taps] == before
    # What it reported is what ensure_port repairs.
    for tap in taps[1:3]:
        assert driver.ensure_port(bridge, tap, fx.OWNER) == fx.FIXED
    assert driver.port_changes(ports[:3], fx.OWNER) == dict.fromkeys(
        taps[:3], [])
