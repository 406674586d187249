"""bridge_type openvswitch on the real Open vSwitch (userspace datapath:
these machines have no openvswitch kernel module), libvirt, virtualbmc
and a standalone Ironic."""

import contextlib
import logging
import subprocess
import threading

import pytest
from pyroute2 import IPRoute

from hostagent.drivers.network import openvswitch
from tenks import exceptions
from tenks import states
from tenks.cli import embedded
from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of

pytestmark = pytest.mark.functional

# IPMI ports of this module: 9250-9299, five for each test.
PORTS = iter(range(9250, 9300, 5))


def vsctl(*args):
    return subprocess.run(['ovs-vsctl', '--timeout=10', *args],
                          capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()


def ovs_get(table, record, column):
    return vsctl('--if-exists', 'get', table, record, column).strip('"')


def bridge_ports():
    """{bridge: [port, ...]} of every Open vSwitch bridge."""
    return {br: vsctl('list-ports', br).split()
            for br in vsctl('list-br').split()}


class OvsEnv(cf.ClusterEnv):
    """A cluster whose leftovers include Open vSwitch bridges and ports
    named after it."""

    def _prefixes(self):
        return (self.bridge_prefix, 'p-' + self.node_prefix,
                'p-' + self.bridge_prefix)

    def _ovs(self):
        bridges, ports = [], []
        for bridge, members in bridge_ports().items():
            if bridge.startswith(self._prefixes()):
                bridges.append(bridge)
            ports += [p for p in members if p.startswith(self._prefixes())]
        return bridges, ports

    def leftovers(self):
        bridges, ports = self._ovs()
        return (['ovs bridge %s' % b for b in bridges]
                + ['ovs port %s' % p for p in ports] + super().leftovers())

    def force_clean(self):
        bridges, ports = self._ovs()
        for port in ports:
            vsctl('--if-exists', 'del-port', port)
        for bridge in bridges:
            vsctl('--if-exists', 'del-br', bridge)
        super().force_clean()

    def spec(self, count=1, **top):
        return super().spec(count=count, bridge_type='openvswitch', **top)


@pytest.fixture
def env(tmp_path, openstack_services, cloud):
    cluster = OvsEnv(tmp_path, port_base=next(PORTS))
    of.use_services(cluster, openstack_services)
    yield cluster
    left = of.cleaned_up(cluster, cloud)
    assert left == [], 'the test left %s behind' % left


@pytest.fixture
def sources(env):
    """An Open vSwitch bridge and a Linux bridge of the user's (no mark),
    for physnets to map to; removed after the test."""
    ovs, linux = env.bridge_prefix + 'o', env.bridge_prefix + 'l'
    vsctl('add-br', ovs, '--', 'set', 'bridge', ovs,
          'datapath_type=netdev')
    with IPRoute() as ipr:
        ipr.link('add', ifname=linux, kind='bridge')
    yield ovs, linux
    vsctl('--if-exists', 'del-br', ovs)
    with IPRoute() as ipr, contextlib.suppress(Exception):
        ipr.link('del', index=ipr.link_lookup(ifname=linux)[0])


def test_ovs_physnets_wire_nodes_uplinks_and_ironic_ports(env, sources,
                                                          cloud):
    ovs_source, linux_source = sources
    spec = env.spec(
        specs=[{'type': 'small', 'count': 1,
                'node_name_prefix': env.node_prefix,
                'ironic_config': {'resource_class': 'tenks-ovs',
                                  'deploy_interface': 'ramdisk'}}],
        physical_networks=['physnet1', 'physnet2', 'physnet3'],
        physnet_mappings={'physnet1': ovs_source,
                          'physnet2': linux_source},
        node_types={'small': {
            'memory_mb': 128, 'vcpus': 1,
            'volumes': [{'capacity': '64MiB'}],
            'physical_networks': ['physnet1', 'physnet2', 'physnet3']}})
    env.deploy(spec)
    [node] = env.nodes()
    bridges = [env.bridge_prefix + str(i) for i in range(3)]
    ports = bridge_ports()
    for bridge, nic in zip(bridges, node['nics'], strict=True):
        # Our bridges, userspace datapath, marked with the deployment.
        assert ovs_get('Bridge', bridge, 'datapath_type') == 'netdev'
        assert ovs_get('Bridge', bridge,
                       'external_ids:tenks-owner').startswith(
            'tenks:%s:' % env.cluster)
        # The VM's NIC is a port of its physnet's bridge (while the VM
        # is off: Ironic owns the power).
        assert nic['tap'] in ports[bridge]
        assert nic['bridge_type'] == 'openvswitch'
    # physnet1: patch ports to the user's Open vSwitch bridge.
    ours, peer = 'p-%s-br' % bridges[0], 'p-%s-phy' % bridges[0]
    assert ours in ports[bridges[0]] and peer in ports[ovs_source]
    assert ovs_get('Interface', ours, 'type') == 'patch'
    assert ovs_get('Interface', ours, 'options:peer') == peer
    assert ovs_get('Interface', peer, 'options:peer') == ours
    # physnet2: a veth pair to the Linux bridge.
    veth_ovs, veth_linux = 'p-%s-br' % bridges[1], 'p-%s-phy' % bridges[1]
    assert veth_ovs in ports[bridges[1]]
    with IPRoute() as ipr:
        [link] = ipr.link('get', ifname=veth_linux)
        [master] = ipr.link('get', index=link.get('master'))
    assert master.get('ifname') == linux_source
    # physnet3: isolated, only the node's port.
    assert ports[bridges[2]] == [node['nics'][2]['tap']]

    # Ironic's ports: what networking-generic-switch needs to find the
    # switch port (switch_id: the bridge's MAC, pinned).
    ironic = cloud.baremetal.get_node(node['uuid'])
    assert ironic.provision_state == 'available'
    found = {p.address: p for p in cloud.baremetal.ports(
        node_id=node['uuid'], details=True)}
    for bridge, nic in zip(bridges, node['nics'], strict=True):
        with open('/sys/class/net/%s/address' % bridge) as f:
            mac = f.read().strip()
        assert ovs_get('Bridge', bridge, 'other_config:hwaddr') == mac
        assert found[nic['mac']].local_link_connection == {
            'switch_id': mac, 'switch_info': bridge, 'port_id': nic['tap']}

    # The port outlives power cycles, and what a switch driver set on it.
    tap = node['nics'][2]['tap']
    vsctl('set', 'port', tap, 'tag=42')
    for action in ('on', 'off'):
        assert cf.ipmitool(node['bmc_port'], 'power', action).returncode == 0
    assert tap in bridge_ports()[bridges[2]]
    assert ovs_get('Port', tap, 'tag') == '42'

    # Drift: a port deleted by hand is found and made again; so is a
    # bridge, with its uplink and ports, and its MAC (Ironic's switch_id).
    vsctl('del-port', tap)
    assert env.deploy(spec)['changed']
    assert tap in bridge_ports()[bridges[2]]
    vsctl('del-br', bridges[0])
    with embedded.embedded(env.conf) as conductor:
        changes = conductor.deployments.plan(spec)['changes']
    assert {(c['resource'], c['action'], c['old']) for c in changes} == {
        ('bridge %s' % bridges[0], 'repair', 'missing'),
        ('port %s' % node['nics'][0]['tap'], 'repair', 'differs')}
    env.deploy(spec)
    ports = bridge_ports()
    assert sorted(ports[bridges[0]]) == sorted([node['nics'][0]['tap'], ours])
    assert peer in ports[ovs_source]
    with open('/sys/class/net/%s/address' % bridges[0]) as f:
        assert f.read().strip() == found[node['nics'][0]['mac']
                                         ].local_link_connection['switch_id']

    env.teardown()
    ports = bridge_ports()
    assert not [b for b in ports if b.startswith(env.bridge_prefix)
                and b != ovs_source]
    # The user's bridges stay, without our ends.
    assert ports[ovs_source] == []
    with IPRoute() as ipr:
        assert ipr.link_lookup(ifname=linux_source)
        assert not ipr.link_lookup(ifname=veth_linux)


def test_an_unmarked_ovs_bridge_is_refused_and_kept(env):
    bridge = env.bridge_prefix + '0'
    vsctl('add-br', bridge, '--', 'set', 'bridge', bridge,
          'datapath_type=netdev')
    try:
        with pytest.raises(exceptions.InterfaceConflict) as raised:
            env.deploy(env.spec(count=1))
        assert ('bridge_prefix: interface %s exists on' % bridge
                in str(raised.value))
        assert 'without an owner mark' in str(raised.value)
        assert env.nodes() == []
        # The driver itself neither adopts nor removes it.
        driver = openvswitch.OpenvSwitchDriver(env.conf)
        owner = 'tenks:%s:x' % env.cluster
        for call in (driver.ensure_bridge, driver.remove_bridge):
            with pytest.raises(exceptions.ResourceConflict) as raised:
                call(bridge, owner)
            assert 'no owner mark in Open vSwitch' in str(raised.value)
        assert bridge in bridge_ports()
        assert ovs_get('Bridge', bridge, 'external_ids') == '{}'
    finally:
        vsctl('--if-exists', 'del-br', bridge)


def test_driver_uplinks_to_an_interface_and_keeps_foreign_ports(env):
    driver = openvswitch.OpenvSwitchDriver(env.conf)
    owner = 'tenks:%s:x' % env.cluster
    bridge, dummy = env.bridge_prefix + '0', env.bridge_prefix + 'd'
    veths = ('p-%s-br' % bridge, 'p-%s-phy' % bridge)
    with IPRoute() as ipr:
        # A plain interface (no dummy module here): one end of a veth.
        ipr.link('add', ifname=dummy, kind='veth',
                 peer=env.bridge_prefix + 'e')
    try:
        made = driver.ensure_bridge(bridge, owner)
        assert made['created'] and made['mac'] == openvswitch.bridge_mac(
            bridge, owner)
        assert driver.ensure_bridge(bridge, owner) == dict(
            made, created=False, changed=False)
        # A plain interface becomes a port of the bridge, then leaves it.
        assert driver.ensure_uplink(bridge, dummy, veths, owner)['created']
        assert not driver.ensure_uplink(bridge, dummy, veths,
                                        owner)['changed']
        assert bridge_ports()[bridge] == [dummy]
        assert driver.remove_uplink(bridge, dummy, veths, owner)
        assert bridge_ports()[bridge] == []
        # A port somebody else added keeps our bridge (and their port).
        vsctl('add-port', bridge, dummy)
        with pytest.raises(exceptions.ResourceConflict) as raised:
            driver.remove_bridge(bridge, owner)
        assert 'holds ports that are not ours: %s' % dummy in str(
            raised.value)
        assert bridge_ports()[bridge] == [dummy]
        vsctl('del-port', dummy)
        assert driver.remove_bridge(bridge, owner)
        assert not driver.remove_bridge(bridge, owner)
    finally:
        vsctl('--if-exists', 'del-br', bridge)
        with IPRoute() as ipr, contextlib.suppress(Exception):
            ipr.link('del', index=ipr.link_lookup(ifname=dummy)[0])


def test_ports_made_at_once_share_transactions_and_keep_their_marks(env):
    """Twelve nodes' ports made and removed on twelve threads, as a
    hostagent does: each is a marked port of the bridge, with its tap,
    in use by ovs-vswitchd when its request returns; Open vSwitch
    commits fewer transactions than ports (group_commit);
    a port another owner holds fails its own request only."""
    driver = openvswitch.OpenvSwitchDriver(env.conf)
    owner = 'tenks:%s:x' % env.cluster
    bridge = env.bridge_prefix + '0'
    taps = ['p-%s%d-0' % (env.node_prefix, i) for i in range(12)]
    commits = []
    real_commit = driver._commit

    def counted(commands):
        commits.append(len(commands))
        return real_commit(commands)
    driver._commits._commit = counted

    def on_threads(call):
        outcome = {}

        def run(tap):
            try:
                outcome[tap] = call(tap)
            except Exception as e:
                outcome[tap] = e
        threads = [threading.Thread(target=run, args=(tap,)) for tap in taps]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return outcome

    driver.ensure_bridge(bridge, owner)
    try:
        commits.clear()
        # One port is another's already: its request alone fails.
        vsctl('add-port', bridge, taps[3], '--', 'set', 'port', taps[3],
              'external_ids:%s=tenks:other:y' % openvswitch.MARK,
              '--', 'set', 'interface', taps[3], 'type=internal')
        made = on_threads(lambda tap: driver.ensure_port(bridge, tap, owner))
        assert isinstance(made.pop(taps[3]), exceptions.ResourceConflict)
        assert all(m['created'] for m in made.values()), made
        assert len(commits) < len(made)
        assert sorted(bridge_ports()[bridge]) == sorted(taps)
        for tap in made:
            assert ovs_get('port', tap, 'external_ids:%s'
                           % openvswitch.MARK) == owner
            # Returned once ovs-vswitchd had applied it (OpenFlow port
            # number given), as ovs-vsctl returns.
            assert int(ovs_get('interface', tap, 'ofport')) > 0
        commits.clear()
        removed = on_threads(lambda tap: driver.remove_port(tap, owner))
        assert isinstance(removed.pop(taps[3]), exceptions.ResourceConflict)
        assert set(removed.values()) == {True}
        assert len(commits) < len(removed)
        assert bridge_ports()[bridge] == [taps[3]]
    finally:
        vsctl('--if-exists', 'del-port', taps[3])
        for tap in taps[:3] + taps[4:]:
            driver.remove_port(tap, owner)
        driver.remove_bridge(bridge, owner)


def test_an_interface_ovs_vswitchd_cannot_open_is_logged(env, caplog):
    """A port's request waits for ovs-vswitchd to apply it and logs the
    interfaces it could not add, as ovs-vsctl does (here: no such
    device)."""
    driver = openvswitch.OpenvSwitchDriver(env.conf)
    owner = 'tenks:%s:x' % env.cluster
    bridge = env.bridge_prefix + '0'
    missing = 'p-%s0-9' % env.node_prefix
    driver.ensure_bridge(bridge, owner)
    try:
        with caplog.at_level(logging.ERROR, logger=openvswitch.__name__):
            driver._transaction(*driver._add_port(bridge, missing, owner))
        assert int(ovs_get('interface', missing, 'ofport')) == -1
        assert ('ovs-vswitchd failed to add the interfaces %s' % missing
                in caplog.text)
    finally:
        vsctl('--if-exists', 'del-port', missing)
        driver.remove_bridge(bridge, owner)


def test_what_a_reading_command_sees_is_what_the_idl_sees(env, monkeypatch):
    """A process with no IDL yet (a re-run's inspection) reads ports and
    bridges in one transaction and builds none; it finds what a driver
    with an IDL finds: a bridge of one port (which OVSDB sends as a
    bare UUID), of two, another owner's port, a port that is missing."""
    driver = openvswitch.OpenvSwitchDriver(env.conf)
    owner = 'tenks:%s:x' % env.cluster
    one, two = env.bridge_prefix + '0', env.bridge_prefix + '1'
    taps = ['p-%s%d-0' % (env.node_prefix, i) for i in range(4)]
    wanted = [{'tap': taps[0], 'bridge': one}, {'tap': taps[1], 'bridge': two},
              {'tap': taps[2], 'bridge': two}, {'tap': taps[3], 'bridge': one}]
    driver.ensure_bridge(one, owner)
    driver.ensure_bridge(two, owner)
    try:
        driver.ensure_port(one, taps[0], owner)
        driver.ensure_port(two, taps[1], owner)
        vsctl('add-port', two, taps[2], '--', 'set', 'interface', taps[2],
              'type=internal')
        seen = (driver.port_changes(wanted, owner),
                driver.bridge_changes([one, two, env.bridge_prefix + '9'],
                                      owner))
        assert seen == ({taps[0]: [], taps[1]: [],
                         taps[2]: states.PART_FOREIGN, taps[3]: None},
                        {one: [], two: [], env.bridge_prefix + '9': None})
        with monkeypatch.context() as m:
            m.setattr(openvswitch, '_APIS', {})
            m.setattr(openvswitch, '_connect', lambda *a: pytest.fail(
                'a read built an IDL'))
            fresh = openvswitch.OpenvSwitchDriver(env.conf)
            assert (fresh.port_changes(wanted, owner), fresh.bridge_changes(
                [one, two, env.bridge_prefix + '9'], owner)) == seen
            assert openvswitch._APIS == {}
    finally:
        vsctl('--if-exists', 'del-port', taps[2])
        for tap in taps[:2]:
            driver.remove_port(tap, owner)
        driver.remove_bridge(one, owner)
        driver.remove_bridge(two, owner)


def test_a_process_without_an_idl_removes_ports_on_the_socket(env,
                                                              monkeypatch):
    """A process with no IDL yet (a teardown's) builds none to remove
    ports: it deletes them in transactions on the server's socket,
    several in one when they come together, and the taps with them.
    Each holds only while the port has the mark read: a port marked for
    another between the read and the deletion is kept, with its tap
    (ResourceConflict)."""
    driver = openvswitch.OpenvSwitchDriver(env.conf)
    owner = 'tenks:%s:x' % env.cluster
    bridge = env.bridge_prefix + '0'
    taps = ['p-%s%d-0' % (env.node_prefix, i) for i in range(12)]
    other = 'tenks:other:y'
    driver.ensure_bridge(bridge, owner)
    try:
        for tap in taps:
            driver.ensure_port(bridge, tap, owner)
        with monkeypatch.context() as m:
            m.setattr(openvswitch, '_APIS', {})
            m.setattr(openvswitch, '_connect', lambda *a: pytest.fail(
                'a removal built an IDL'))
            fresh = openvswitch.OpenvSwitchDriver(env.conf)
            commits = []
            commit = fresh._direct_commits._commit

            def counted(operations):
                commits.append(len(operations))
                return commit(operations)
            m.setattr(fresh._direct_commits, '_commit', counted)
            read = fresh._owned

            def taken_after_read(table, name, *args):
                row = read(table, name, *args)
                if name == taps[0] and row['external_ids'][
                        openvswitch.MARK] == owner:
                    vsctl('set', 'port', name,
                          'external_ids:%s=%s' % (openvswitch.MARK, other))
                return row
            m.setattr(fresh, '_owned', taken_after_read)

            removed = {}

            def remove(tap):
                try:
                    removed[tap] = fresh.remove_port(tap, owner)
                except Exception as e:
                    removed[tap] = e
            threads = [threading.Thread(target=remove, args=(tap,))
                       for tap in taps]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            kept = removed.pop(taps[0])
            assert isinstance(kept, exceptions.ResourceConflict), kept
            assert other in str(kept)
            assert set(removed.values()) == {True}, removed
            assert len(commits) < len(removed), commits
            assert openvswitch._APIS == {}
        assert bridge_ports()[bridge] == [taps[0]]
        assert ovs_get('port', taps[0], 'external_ids:%s'
                       % openvswitch.MARK) == other
        with IPRoute() as ipr:
            assert [tap for tap in taps if ipr.link_lookup(ifname=tap)] == [
                taps[0]]
    finally:
        vsctl('--if-exists', 'del-port', taps[0])
        for tap in taps:
            driver.remove_port(tap, owner)
        driver.remove_bridge(bridge, owner)
