"""``tenks audit`` on real libvirt, IPMI hosts, Redfish emulators and
Linux bridges (and a real Ironic and Nova for the cloud's drift): a
clean cluster audits clean, drift made by hand is reported, and after
the state directory is deleted ``--clean`` from a fresh one removes
every leftover and nothing else."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time

import libvirt
import pytest
from pyroute2 import IPRoute

from hostagent import deployments
from hostagent.drivers.bmc import processes
from hostagent.drivers.bmc import sushy
from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of
from tests.functional import test_enrolment
from tests.functional import test_openvswitch

pytestmark = pytest.mark.functional

PORT_BASE = 7800


@pytest.fixture
def env(tmp_path):
    with cf.checked(cf.ClusterEnv(tmp_path, port_base=PORT_BASE)) as cluster:
        yield cluster


@pytest.fixture
def conn():
    connection = libvirt.open(cf.URI)
    yield connection
    connection.close()


def mixed_spec(env, **top):
    """Two IPMI nodes, and a Redfish node booting UEFI (its emulator and
    its NVRAM file)."""
    small = {'memory_mb': 128, 'vcpus': 1,
             'volumes': [{'capacity': '64MiB'}],
             'physical_networks': ['physnet1']}
    return env.spec(
        node_types={'small': small,
                    'rf': dict(small, ironic_driver='redfish',
                               boot_mode='uefi')},
        specs=[{'type': 'small', 'count': 2,
                'node_name_prefix': env.node_prefix},
               {'type': 'rf', 'count': 1,
                'node_name_prefix': env.node_prefix + 'r'}],
        redfish_port=cf.free_tcp_port(), **top)


def deployment(env):
    """The UUID of the cluster's deployment."""
    with cf.embedded.embedded(env.conf) as conductor:
        return conductor.db.get_cluster(env.cluster).uuid


def drift(report):
    return sorted((e['kind'], e['name'], e['status'])
                  for e in report['drift'])


def emulator_pids(state_dir):
    return {pid for directory, pids in processes.marked_by(
        sushy.MARKER_ENV).items() if directory.startswith(state_dir + '/')
        for pid in pids}


def test_a_clean_cluster_audits_clean_and_drift_by_hand_is_reported(
        env, conn):
    spec = mixed_spec(env)
    with cf.torn_down(env):
        env.deploy(spec)
        started = time.monotonic()
        assert env.audit(env.cluster) == {'drift': [], 'other': [],
                                          'removed': []}
        print('audit of a clean 3-node cluster: %.3f s'
              % (time.monotonic() - started))
        node0, node1, rf = (env.node_name(0), env.node_name(1),
                            env.node_prefix + 'r0')
        conn.lookupByName(node0).undefineFlags(
            libvirt.VIR_DOMAIN_UNDEFINE_KEEP_NVRAM)
        conn.storagePoolLookupByName('tenks-' + env.cluster) \
            .storageVolLookupByName(node1 + 'vol0').delete()
        with IPRoute() as ipr:
            ipr.link('del', ifname='p-%s-0' % node1)
        # BMCs stopped: the IPMI host, and the Redfish emulator.
        for pid in cf.ipmi_host_pids(env.state_dir) | emulator_pids(
                env.state_dir):
            os.kill(pid, signal.SIGKILL)
        assert processes.poll(lambda: not (cf.ipmi_host_pids(
            env.state_dir) | emulator_pids(env.state_dir)), 5)
        report = env.audit(env.cluster)
        assert drift(report) == [
            ('bmc', node0, 'missing'), ('bmc', node1, 'missing'),
            ('bmc', rf, 'stopped'), ('domain', node0, 'missing'),
            ('port', 'p-%s-0' % node1, 'missing'),
            ('volume', node1 + 'vol0', 'missing')]
        assert {(e['cluster'], e['hypervisor']) for e in report[
            'drift']} == {(env.cluster, env.conf.hostagent.host)}
        assert all(e['mark'].startswith('tenks:%s:' % env.cluster)
                   for e in report['drift'])
        # A deploy repairs it all.
        env.deploy(spec)
        assert env.audit(env.cluster)['drift'] == []


@pytest.fixture
def cloud_env(tmp_path, openstack_services, cloud):
    cluster = cf.ClusterEnv(tmp_path, port_base=PORT_BASE + 10)
    of.use_services(cluster, openstack_services)
    yield cluster
    flavors = [f for f in cloud.compute.flavors()
               if f.name.startswith(cluster.cluster)]
    for flavor in flavors:
        cloud.compute.delete_flavor(flavor)
    left = of.cleaned_up(cluster, cloud,
                         ['flavor %s' % f.name for f in flavors])
    assert left == [], 'the test left %s behind' % left


def test_an_ironic_node_deleted_and_a_flavor_changed_are_reported(
        cloud_env, cloud):
    env = cloud_env
    with cf.torn_down(env):
        env.deploy(test_enrolment.enrolled_spec(env))
        assert env.audit(env.cluster)['drift'] == []
        node = [n for n in env.nodes() if n['name'] == env.node_name(1)][0]
        cloud.baremetal.delete_node(node['uuid'])
        flavor = cloud.compute.find_flavor(env.cluster + '-gold')
        cloud.compute.create_flavor_extra_specs(flavor, {
            'trait:CUSTOM_FAST': 'forbidden'})
        report = env.audit(env.cluster)
        assert drift(report) == [
            ('ironic node', env.node_name(1), 'missing'),
            ('nova flavor', env.cluster + '-gold', 'differs')]
        details = {e['kind']: e['detail'] for e in report['drift']}
        assert details['nova flavor'] == 'extra spec trait:CUSTOM_FAST'
        assert details['ironic node'] == 'Ironic has no node %s' % (
            node['uuid'])
        assert {e['hypervisor'] for e in report['drift']} == {'openstack'}


@contextlib.contextmanager
def foreign_things(env, conn, tmp_path):
    """A domain, a bridge and a dir pool with a volume, made without
    Tenks and named as the cluster's would be (the bridge is the uplink
    of its physnet1); removed when the block ends."""
    names = {'domain': env.node_name(9), 'bridge': env.bridge_prefix + 's',
             'pool': 'tenks-%s-foreign' % env.cluster,
             'volume': env.node_name(0) + 'vol9'}
    directory = tmp_path / 'foreign-pool'
    directory.mkdir()
    conn.defineXML(
        "<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory>"
        "<os><type arch='x86_64'>hvm</type></os></domain>" % names['domain'])
    pool = conn.storagePoolCreateXML(
        "<pool type='dir'><name>%s</name><target><path>%s</path></target>"
        "</pool>" % (names['pool'], directory))
    pool.createXML("<volume><name>%s</name><capacity>1048576</capacity>"
                   "</volume>" % names['volume'])
    with IPRoute() as ipr:
        ipr.link('add', ifname=names['bridge'], kind='bridge')
    try:
        yield names
    finally:
        cf.remove_libvirt_things(cf.URI, lambda name: name in (
            names['domain'], names['pool']))
        with IPRoute() as ipr, contextlib.suppress(Exception):
            ipr.link('del', ifname=names['bridge'])


def still_there(conn, names):
    """What of the foreign things is still there, as it was made."""
    found = []
    with contextlib.suppress(libvirt.libvirtError):
        found.append(conn.lookupByName(names['domain']).name())
    with contextlib.suppress(libvirt.libvirtError):
        found.append(conn.storagePoolLookupByName(names['pool'])
                     .storageVolLookupByName(names['volume']).name())
    if os.path.isdir('/sys/class/net/%s/bridge' % names['bridge']):
        found.append(names['bridge'])
    return found


@pytest.mark.parametrize('fresh', ['same', 'new'])
def test_after_the_state_directory_is_deleted_clean_removes_every_leftover(
        env, conn, tmp_path, fresh):
    """From a fresh state directory (at the same path, or another):
    every domain, volume, pool, NVRAM file, bridge, tap and veth of the
    cluster goes, and its IPMI host and Redfish emulator stop; the
    foreign domain, bridge and volume stay."""
    with foreign_things(env, conn, tmp_path) as foreign:
        spec = mixed_spec(env, physnet_mappings={
            'physnet1': foreign['bridge']})
        env.deploy(spec)
        assert env.audit(env.cluster)['drift'] == []
        owner = 'tenks:%s:%s' % (env.cluster, deployment(env))
        made = [thing for thing in env.leftovers()
                if not thing.endswith(tuple(foreign.values()))]
        assert any(t.startswith('IPMI host') for t in made)
        assert emulator_pids(env.state_dir)

        shutil.rmtree(env.state_dir)
        state_dir = (env.state_dir if fresh == 'same'
                     else str(tmp_path / 'fresh'))
        started = time.monotonic()
        done = subprocess.run(
            [cf.TENKS, '--state-dir', state_dir, 'audit', '--clean', '-f',
             'json'], capture_output=True, text=True, timeout=120,
            env=dict(os.environ, TENKS_TRANSPORT_URL=''))
        print('tenks audit --clean: %.2f s' % (time.monotonic() - started))
        rows = json.loads(done.stdout)
        mine = [r for r in rows if r['cluster'] == env.cluster
                or r['name'].startswith(env.state_dir + '/')]
        print('\n'.join('%(status)s %(kind)s %(name)s: %(detail)s' % r
                        for r in mine))
        assert {r['status'] for r in mine} == {'removed'}, done.stderr
        assert {r['kind'] for r in mine} == {
            'domain', 'volume', 'pool', 'nvram', 'bridge', 'port', 'veth',
            'ipmi host', 'redfish emulator'}
        assert all(r['mark'] is None or r['mark'].startswith(owner)
                   for r in mine)
        assert [thing for thing in env.leftovers()
                if not thing.endswith(tuple(foreign.values()))] == []
        assert emulator_pids(env.state_dir) == set()
        assert still_there(conn, foreign) == [
            foreign['domain'], foreign['volume'], foreign['bridge']]
        assert deployments.Registry(
            env.conf.hostagent.deployments_dir, '/', 'x').state_dirs(
                owner) == []
        # Nothing of it is left for a second audit.
        again = subprocess.run(
            [cf.TENKS, '--state-dir', state_dir, 'audit', '-f', 'json'],
            capture_output=True, text=True, timeout=120,
            env=dict(os.environ, TENKS_TRANSPORT_URL=''))
        assert [r for r in json.loads(again.stdout)
                if r['cluster'] == env.cluster] == []


@pytest.fixture
def ovs_env(tmp_path):
    with cf.checked(test_openvswitch.OvsEnv(tmp_path,
                                            port_base=PORT_BASE + 20)) as env:
        yield env


def test_open_vswitch_leftovers_are_cleaned_and_their_sources_stay(
        ovs_env, tmp_path):
    """Bridges, taps, patch ports (one in the user's Open vSwitch bridge)
    and a veth to the user's Linux bridge: audited clean while recorded,
    removed once the state directory is gone; the user's bridges stay."""
    env = ovs_env
    ovs, linux = env.bridge_prefix + 'o', env.bridge_prefix + 'l'
    test_openvswitch.vsctl('add-br', ovs, '--', 'set', 'bridge', ovs,
                           'datapath_type=netdev')
    with IPRoute() as ipr:
        ipr.link('add', ifname=linux, kind='bridge')
    try:
        env.deploy(env.spec(
            physical_networks=['physnet1', 'physnet2'],
            physnet_mappings={'physnet1': ovs, 'physnet2': linux},
            node_types={'small': {
                'memory_mb': 128, 'vcpus': 1, 'volumes': [],
                'physical_networks': ['physnet1', 'physnet2']}}))
        assert env.audit(env.cluster)['drift'] == []
        shutil.rmtree(env.state_dir)
        report = cf.ClusterEnv(tmp_path / 'fresh', PORT_BASE + 20).audit(
            clean=True)
        mine = [e for e in report['removed'] if e['cluster'] == env.cluster]
        assert sorted((e['kind'], e['name']) for e in mine if e['kind'] in (
            'bridge', 'port', 'veth', 'ovs port')) == sorted(
            [('bridge', env.bridge_prefix + '0'),
             ('bridge', env.bridge_prefix + '1'),
             ('port', 'p-%s-0' % env.node_name(0)),
             ('port', 'p-%s-1' % env.node_name(0)),
             ('ovs port', 'p-%s0-br' % env.bridge_prefix),
             ('ovs port', 'p-%s0-phy' % env.bridge_prefix),
             ('ovs port', 'p-%s1-br' % env.bridge_prefix),
             ('veth', 'p-%s1-br' % env.bridge_prefix),
             ('veth', 'p-%s1-phy' % env.bridge_prefix)])
        assert [e for e in report['drift']
                if e['cluster'] == env.cluster] == []
        assert test_openvswitch.bridge_ports()[ovs] == []
        assert os.listdir('/sys/class/net/%s/brif' % linux) == []
        assert [thing for thing in env.leftovers()
                if not thing.endswith((ovs, linux))] == []
    finally:
        test_openvswitch.vsctl('--if-exists', 'del-br', ovs)
        with IPRoute() as ipr, contextlib.suppress(Exception):
            ipr.link('del', ifname=linux)
