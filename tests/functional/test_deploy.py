"""Deploy and tear down real clusters: libvirt, virtualbmc, ipmitool,
Linux bridges, through the conductor, the bus and the hostagent."""

import contextlib
import os
import socket
import time
from xml.etree import ElementTree as ET

import libvirt
import pytest
from pyroute2 import IPRoute

from conductor import preflight
from tenks import exceptions
from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional


@pytest.fixture
def env(tmp_path, request):
    # Distinct IPMI ports per test module keep parallel sessions apart.
    with cf.checked(cf.ClusterEnv(tmp_path, port_base=7100)) as cluster:
        yield cluster


@pytest.fixture
def conn():
    connection = libvirt.open(cf.URI)
    yield connection
    connection.close()


def wait_state(conn, name, state, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if conn.lookupByName(name).state()[0] == state:
            return True
        time.sleep(0.1)
    return False


def bridge_ports(bridge):
    return sorted(os.listdir('/sys/class/net/%s/brif' % bridge))


def test_deploy_power_and_teardown(env, conn):
    spec = env.spec(count=2)
    result = env.deploy(spec)
    assert result['changed']

    nodes = {n['name']: n for n in env.nodes()}
    assert sorted(nodes) == [env.node_name(0), env.node_name(1)]
    assert sorted(n['bmc_port'] for n in nodes.values()) == [
        env.port_base, env.port_base + 1]
    bridge = env.bridge_prefix + '0'

    for name, node in nodes.items():
        assert node['state'] == 'deployed'
        dom = conn.lookupByName(name)
        assert dom.UUIDString() == node['uuid']
        # Defined, not started: Ironic owns the power.
        assert dom.state()[0] == libvirt.VIR_DOMAIN_SHUTOFF
        xml = ET.fromstring(dom.XMLDesc())
        assert xml.get('type') == 'qemu'
        assert xml.findtext('vcpu') == '1'
        assert int(xml.findtext('memory')) == 128 * 1024
        disks = xml.findall('devices/disk/source')
        assert [d.get('volume') for d in disks] == [
            '%svol0' % name, '%svol1' % name]
        pool = conn.storagePoolLookupByName('tenks-%s' % env.cluster)
        capacities = [pool.storageVolLookupByName(d.get('volume')).info()[1]
                      for d in disks]
        assert capacities == [64 * 1024 ** 2, 32 * 1024 ** 2]
        nics = xml.findall('devices/interface')
        assert [n.find('mac').get('address') for n in nics] == [
            nic['mac'] for nic in node['nics']]
        tap = nics[0].find('target').get('dev')
        assert tap == node['nics'][0]['tap']
        assert tap in bridge_ports(bridge)

    # The BMC really drives the domain.
    port = nodes[env.node_name(0)]['bmc_port']
    assert cf.ipmitool(port, 'power', 'on').returncode == 0
    assert wait_state(conn, env.node_name(0), libvirt.VIR_DOMAIN_RUNNING)
    status = cf.ipmitool(port, 'power', 'status')
    assert 'Chassis Power is on' in status.stdout
    assert cf.ipmitool(port, 'power', 'off').returncode == 0
    assert wait_state(conn, env.node_name(0), libvirt.VIR_DOMAIN_SHUTOFF)
    # The other node was not touched, and a wrong password is refused.
    assert conn.lookupByName(env.node_name(1)).state()[0] == (
        libvirt.VIR_DOMAIN_SHUTOFF)
    assert cf.ipmitool(port, 'power', 'status',
                       password='wrong').returncode != 0

    # Ironic sets the boot device through the BMC; a re-run keeps it,
    # changes nothing and keeps every allocation.
    assert cf.ipmitool(port, 'chassis', 'bootdev', 'disk').returncode == 0
    assert env.deploy(spec)['changed'] == []
    boot = ET.fromstring(conn.lookupByName(env.node_name(0)).XMLDesc())
    assert [b.get('dev') for b in boot.findall('os/boot')] == ['hd']
    assert {n['name']: n for n in env.nodes()} == nodes

    env.teardown()
    assert env.leftovers() == []
    assert env.nodes() == []


def test_teardown_repairs_nothing_it_does_not_own(env, conn):
    """A mapped bridge that existed before is linked, then left intact."""
    external = env.bridge_prefix + 'x'
    with IPRoute() as ipr:
        ipr.link('add', ifname=external, kind='bridge')
    try:
        spec = env.spec(count=1, physnet_mappings={'physnet1': external})
        env.deploy(spec)
        veth_peer = 'p-%s0-phy' % env.bridge_prefix
        assert bridge_ports(external) == [veth_peer]
        env.teardown()
        assert os.path.exists('/sys/class/net/%s' % external)
        assert bridge_ports(external) == []
    finally:
        with IPRoute() as ipr:
            ipr.link('del', ifname=external)


def test_failure_mid_deploy_rolls_back_everything(env, conn, monkeypatch):
    """A domain Tenks does not own takes the second node's name: found
    before anything is made, the deploy is refused; appearing after the
    checks (made meanwhile by someone else), it fails the node's task,
    and everything created so far is reverted."""
    foreign = env.node_name(1)
    xml = ("<domain type='qemu'><name>%s</name><memory unit='MiB'>64"
           "</memory><os><type arch='x86_64'>hvm</type></os></domain>"
           % foreign)
    conn.defineXML(xml)
    try:
        with pytest.raises(exceptions.NameConflict) as raised:
            env.deploy(env.spec(count=2))
        assert ('specs[0].node_name_prefix: domain %s on %s exists and is '
                "not this deployment's" % (foreign, socket.gethostname())
                in str(raised.value))
        assert env.leftovers() == ['domain %s' % foreign]
    finally:
        conn.lookupByName(foreign).undefine()

    check = preflight.check_new_nodes

    def check_then_define(*args, **kwargs):
        check(*args, **kwargs)
        conn.defineXML(xml)

    monkeypatch.setattr(preflight, 'check_new_nodes', check_then_define)
    try:
        with pytest.raises(exceptions.OperationFailed) as raised:
            env.deploy(env.spec(count=2))
        message = str(raised.value)
        # The node's task failed, on its domain.
        assert 'node:' in message and 'Domain %s' % foreign in message
        assert 'not owned' in message
        assert 'rolled back' in message
        # The foreign domain is untouched, nothing of the cluster remains.
        assert conn.lookupByName(foreign).state()[0] == (
            libvirt.VIR_DOMAIN_SHUTOFF)
        assert env.leftovers() == ['domain %s' % foreign]
        assert env.nodes() == []
        with pytest.raises(exceptions.ClusterNotFound):
            env.teardown()
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            conn.lookupByName(foreign).undefine()


def test_taken_ipmi_port_is_skipped_and_exhaustion_is_refused(env, conn):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind(('127.0.0.1', env.port_base))
        env.deploy(env.spec(count=1))
        assert [n['bmc_port'] for n in env.nodes()] == [env.port_base + 1]
        env.teardown()

        # A one-port range whose only port is taken: refused up front.
        spec = env.spec(count=1, ipmi_port_range_end=env.port_base)
        with pytest.raises(exceptions.PortRangeExhausted) as raised:
            env.deploy(spec)
    assert '%d-%d' % (env.port_base, env.port_base) in str(raised.value)
    assert env.leftovers() == []
    assert env.nodes() == []


def test_missing_mapped_interface_is_refused_before_creating(env):
    spec = env.spec(count=1, physnet_mappings={'physnet1': 'nosuchif0'})
    with pytest.raises(exceptions.InterfaceNotFound) as raised:
        env.deploy(spec)
    assert 'nosuchif0' in str(raised.value)
    assert 'physnet1' in str(raised.value)
    assert env.leftovers() == []


def test_unreachable_libvirt_is_a_clear_error(env):
    uri = 'qemu:///system?socket=/nonexistent/libvirt-sock'
    env.conf.set_override('libvirt_uri', uri, group='hostagent')
    with pytest.raises(exceptions.HypervisorUnavailable) as raised:
        env.deploy(env.spec(count=1))
    assert uri in str(raised.value)
    assert env.leftovers() == []


def test_plan_and_deploy_refuse_a_same_named_cluster_of_another_state_dir(
        env, tmp_path):
    """Another state directory deploys a cluster of this one's names
    (another bridge prefix and IPMI ports; no NICs, whose taps would
    clash first): plan and deploy both refuse it before anything is
    made, naming the domain and volume found, and this cluster keeps
    everything."""
    env.deploy(env.spec(count=1))
    before = env.leftovers()
    other = cf.ClusterEnv(tmp_path / 'other', port_base=7110)
    other.cluster, other.node_prefix = env.cluster, env.node_prefix
    spec = other.spec(count=1, physical_networks=[], node_types={'small': {
        'memory_mb': 128, 'vcpus': 1, 'volumes': [{'capacity': '64MiB'}],
        'physical_networks': []}})
    name = env.node_name(0)
    for attempt in (other.plan, other.deploy):
        with pytest.raises(exceptions.NameConflict) as raised:
            attempt(spec)
        message = str(raised.value)
        assert ("specs[0].node_name_prefix: domain %s on %s exists and is "
                "not this deployment's" % (name, socket.gethostname())
                in message), message
        assert 'volume %svol0' % name in message
    assert env.leftovers() == before
    assert other.nodes() == []
    env.teardown()
