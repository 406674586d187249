"""Whole-node requests (hostagent API 1.2) on real libvirt, virtualbmc and
netlink: ensure_node converges a node, remove_node removes it.

Names start with the test's ``hx<hex>`` prefix; BMCs use UDP ports
8500-8599. Each test removes its BMCs (and so its IPMI host), and ``left``
removes and checks the rest.
"""

import contextlib
import itertools
import os
import secrets
import socket
import subprocess
import threading
import types
import uuid
from xml.etree import ElementTree as ET

import libvirt
import oslo_messaging as messaging
import pytest

from hostagent import manager as hostagent_manager
from hostagent import rpcapi as hostagent_rpcapi
from hostagent.drivers.bmc import ipmi_store
from hostagent.drivers.virt import libvirt as libvirt_driver
from tenks import exceptions
from tenks import rpc
from tests.functional import drivers_fixtures as fx
from tests.functional.cluster_fixtures import ipmi_host_pid
from tests.functional.cluster_fixtures import ipmitool

pytestmark = pytest.mark.functional

PORTS = itertools.cycle(range(8500, 8600))
MIB = 1024 ** 2
ADDRESS = '127.0.0.1'


class Hypervisor:
    """The real drivers of one hostagent, a pool and a bridge."""

    def __init__(self, tmp_path, left):
        self.left = left
        conf = fx.make_conf(tmp_path)
        # The in-memory transport: one process plays every service.
        self.bus = rpc.Bus(conf)
        self.agent = hostagent_manager.HostAgentManager(conf, self.bus)
        self.nodes = self.agent.nodes
        self.pool = left.name('-pool')
        self.pool_dir = os.path.join(left.directory(), 'pool')
        self.bridge = left.name('-br')
        self.agent.virt.ensure_pool(self.pool, self.pool_dir, fx.OWNER)
        self.agent.networks['linuxbridge'].ensure_bridge(self.bridge,
                                                         fx.OWNER)
        self.conn = libvirt.open(fx.URI)

    def node(self, index=0, memory_mb=128, volumes=(16,), nics=1,
             port=None, **fields):
        """The request for node ``index``; volume sizes in MiB."""
        name = self.left.name('-n%d' % index)
        return dict({
            'uuid': str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
            'name': name, 'domain_type': 'qemu', 'vcpus': 1,
            'memory_mb': memory_mb, 'console_log_enabled': False,
            'pool': self.pool,
            'volumes': [{'name': '%s-v%d' % (name, i), 'capacity': size * MIB,
                         'format': 'qcow2'} for i, size in enumerate(volumes)],
            'nics': [{'mac': '52:54:00:%02x:%02x:%02x' % (
                          secrets.randbits(8), index, i),
                      'tap': '%s-t%d' % (name, i), 'bridge': self.bridge}
                     for i in range(nics)],
            'bmc': {'address': ADDRESS, 'port': port or next(PORTS),
                    'username': 'admin', 'password': 'password'},
        }, **fields)

    def domain(self, name, flags=libvirt.VIR_DOMAIN_XML_INACTIVE):
        """The domain's XML, or None when undefined."""
        try:
            return ET.fromstring(
                self.conn.lookupByName(name).XMLDesc(flags))
        except libvirt.libvirtError:
            return None

    def volume_files(self):
        return sorted(os.listdir(self.pool_dir))

    def close(self):
        bmc = self.agent.bmc
        for entry in bmc.list_bmcs():
            bmc.remove_bmc(entry['domain'], ipmi_store.owner(
                bmc._dir, entry['domain']))
        self.conn.close()
        self.bus.cleanup()


@pytest.fixture
def hv(tmp_path, left):
    hypervisor = Hypervisor(tmp_path, left)
    try:
        yield hypervisor
    finally:
        hypervisor.close()


def memory_mib(xml):
    return int(xml.findtext('memory')) // 1024


def disks(xml):
    return [d.get('volume') for d in xml.findall('devices/disk/source')]


def taps(xml):
    return [t.get('dev') for t in xml.findall('devices/interface/target')]


def link_exists(name):
    return os.path.exists('/sys/class/net/%s' % name)


def master(name):
    return os.path.basename(os.readlink('/sys/class/net/%s/master' % name))


def udp_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.bind((ADDRESS, port))
        except OSError:
            return False
    return True


def parts(node):
    """The [kind, name] of every part of ``node``."""
    return ([['volume', v['name']] for v in node['volumes']]
            + [['port', n['tap']] for n in node['nics']]
            + [['domain', node['name']], ['bmc', node['name']]])


def test_node_made_answers_ipmi_and_resending_changes_nothing(hv):
    node = hv.node()
    name = node['name']
    result = hv.nodes.ensure(node, fx.OWNER, False)
    assert result == {'changed': True, 'created': parts(node),
                      'updated': [], 'removed': [],
                      'power_state': 'shut off'}
    xml = hv.domain(name)
    assert memory_mib(xml) == 128
    assert disks(xml) == [node['volumes'][0]['name']]
    assert taps(xml) == [node['nics'][0]['tap']]
    assert master(node['nics'][0]['tap']) == hv.bridge

    port = node['bmc']['port']
    assert ipmitool(port, 'power', 'on').returncode == 0
    assert hv.agent.virt.domain_state(name) == 'running'

    again = hv.nodes.ensure(node, fx.OWNER, False)
    assert again == {'changed': False, 'created': [], 'updated': [],
                     'removed': [], 'power_state': 'running'}

    removed = hv.nodes.remove(node, fx.OWNER)
    assert removed == {'changed': True, 'removed': [
        ['bmc', name], ['domain', name], ['port', node['nics'][0]['tap']],
        ['volume', node['volumes'][0]['name']]]}
    assert hv.domain(name) is None
    assert not link_exists(node['nics'][0]['tap'])
    assert hv.volume_files() == []
    assert udp_free(port)
    assert hv.nodes.remove(node, fx.OWNER) == {'changed': False,
                                               'removed': []}


def test_memory_grows_in_place_off_and_only_forced_when_running(hv):
    node = hv.node()
    name = node['name']
    hv.nodes.ensure(node, fx.OWNER, False)

    bigger = dict(node, memory_mb=192)
    result = hv.nodes.ensure(bigger, fx.OWNER, False)
    assert (result['updated'], result['created']) == ([['domain', name]],
                                                       [])
    assert memory_mib(hv.domain(name)) == 192

    assert ipmitool(node['bmc']['port'], 'power', 'on').returncode == 0
    biggest = dict(node, memory_mb=256)
    with pytest.raises(exceptions.NodeRunning) as refused:
        hv.nodes.ensure(biggest, fx.OWNER, False)
    assert name in str(refused.value)
    assert 'memory 192 -> 256 MiB' in str(refused.value)
    assert memory_mib(hv.domain(name)) == 192
    assert hv.agent.virt.domain_state(name) == 'running'

    forced = hv.nodes.ensure(biggest, fx.OWNER, True)
    assert forced['updated'] == [['domain', name]]
    assert forced['power_state'] == 'running'
    # The running guest has the new size, not just its next boot.
    assert memory_mib(hv.domain(name, 0)) == 256
    assert hv.nodes.ensure(biggest, fx.OWNER, False)['changed'] is False


def test_volume_and_nic_added_grown_and_removed(hv):
    node = hv.node()
    name = node['name']
    hv.nodes.ensure(node, fx.OWNER, False)

    grown = hv.node(volumes=(32, 16), nics=2, bmc=node['bmc'])
    grown['nics'][0] = node['nics'][0]
    result = hv.nodes.ensure(grown, fx.OWNER, False)
    new_volume, new_tap = grown['volumes'][1]['name'], grown['nics'][1]['tap']
    assert result['created'] == [['volume', new_volume], ['port', new_tap]]
    assert result['updated'] == [['volume', node['volumes'][0]['name']],
                                 ['domain', name]]
    xml = hv.domain(name)
    assert disks(xml) == [v['name'] for v in grown['volumes']]
    assert taps(xml) == [n['tap'] for n in grown['nics']]
    assert hv.agent.virt.volume_info(
        hv.pool, node['volumes'][0]['name'],
        hv.nodes.mark(fx.OWNER))['capacity'] == 32 * MIB

    shrunk = dict(grown, volumes=[dict(grown['volumes'][0],
                                       capacity=8 * MIB)])
    with pytest.raises(exceptions.ResourceConflict) as refused:
        hv.nodes.ensure(shrunk, fx.OWNER, False)
    assert node['volumes'][0]['name'] in str(refused.value)
    assert '%d bytes' % (32 * MIB) in str(refused.value)

    fewer = dict(grown, nics=grown['nics'][:1],
                 volumes=grown['volumes'][:1],
                 remove={'ports': [new_tap], 'volumes': [new_volume]})
    result = hv.nodes.ensure(fewer, fx.OWNER, False)
    assert result['removed'] == [['port', new_tap], ['volume', new_volume]]
    assert result['updated'] == [['domain', name]]
    assert not link_exists(new_tap)
    xml = hv.domain(name)
    assert (disks(xml), taps(xml)) == ([node['volumes'][0]['name']],
                                       [node['nics'][0]['tap']])
    assert hv.volume_files() == [node['volumes'][0]['name']]
    hv.nodes.remove(fewer, fx.OWNER)


def test_bmc_moves_to_its_new_port(hv):
    node = hv.node()
    old = node['bmc']['port']
    hv.nodes.ensure(node, fx.OWNER, False)
    assert ipmitool(old, 'power', 'status').returncode == 0

    moved = dict(node, bmc=dict(node['bmc'], port=next(PORTS)))
    result = hv.nodes.ensure(moved, fx.OWNER, False)
    assert (result['updated'], result['created']) == (
        [['bmc', node['name']]], [])
    assert udp_free(old)
    status = ipmitool(moved['bmc']['port'], 'power', 'status')
    assert 'Chassis Power is off' in status.stdout
    hv.nodes.remove(moved, fx.OWNER)


def test_failure_midway_leaves_nothing_the_request_made(hv):
    node = hv.node(volumes=(16, 16), nics=2)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as busy:
        busy.bind((ADDRESS, node['bmc']['port']))
        with pytest.raises(exceptions.PortInUse):
            hv.nodes.ensure(node, fx.OWNER, False)
    assert hv.domain(node['name']) is None
    assert not any(link_exists(n['tap']) for n in node['nics'])
    assert hv.volume_files() == []
    # No IPMI host left serving nothing (it was started for this BMC).
    assert ipmi_host_pid(hv.agent.conf.state_dir) is None
    assert hv.agent.bmc.list_bmcs() == []


def test_foreign_domain_of_the_same_name_is_never_touched(hv):
    node = hv.node()
    foreign = ('<domain type="qemu"><name>%s</name><memory unit="MiB">64'
               '</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>'
               % node['name'])
    hv.conn.defineXML(foreign)
    before = ET.tostring(hv.domain(node['name']))
    with pytest.raises(exceptions.ResourceConflict) as refused:
        hv.nodes.ensure(node, fx.OWNER, False)
    assert node['name'] in str(refused.value)
    with pytest.raises(exceptions.ResourceConflict):
        hv.nodes.remove(node, fx.OWNER)
    assert ET.tostring(hv.domain(node['name'])) == before
    assert hv.volume_files() == []
    assert not link_exists(node['nics'][0]['tap'])


def test_hand_made_volume_is_never_used_nor_removed(hv):
    """A qcow2 file made by hand with the name of a node's volume: the
    node is refused naming it, and neither ensure nor remove touches it
    (nor leaves anything else)."""
    # A port of this helper's range (9450-9479).
    node = hv.node(volumes=(16, 16), port=9450)
    name = node['volumes'][1]['name']
    path = os.path.join(hv.pool_dir, name)
    subprocess.run(['qemu-img', 'create', '-q', '-f', 'qcow2', path, '1M'],
                   check=True)
    subprocess.run(['qemu-io', '-f', 'qcow2', '-c', 'write -P 0x5a 0 64k',
                    path], check=True, capture_output=True)
    with open(path, 'rb') as f:
        data = f.read()
    try:
        with pytest.raises(exceptions.ResourceConflict) as refused:
            hv.nodes.ensure(node, fx.OWNER, False)
        assert name in str(refused.value)
        with pytest.raises(exceptions.ResourceConflict) as refused:
            hv.nodes.remove(node, fx.OWNER)
        assert name in str(refused.value)
        assert hv.volume_files() == [name]
        with open(path, 'rb') as f:
            assert f.read() == data
        assert hv.domain(node['name']) is None
        assert not link_exists(node['nics'][0]['tap'])
        assert hv.agent.bmc.list_bmcs() == []
    finally:
        os.remove(path)


def marks(hv, node):
    """The owner marks of the node's domain, first volume and first tap."""
    metadata = hv.conn.lookupByName(node['name']).metadata(
        libvirt.VIR_DOMAIN_METADATA_ELEMENT, libvirt_driver.OWNER_NS)
    path = os.path.join(hv.pool_dir, node['volumes'][0]['name'])
    with open('/sys/class/net/%s/ifalias' % node['nics'][0]['tap']) as f:
        alias = f.read().strip()
    return (ET.fromstring(metadata).text,
            os.getxattr(path, libvirt_driver.OWNER_XATTR).decode(), alias)


def test_another_hostagent_of_the_libvirt_never_takes_a_node(hv, tmp_path):
    """Two hostagents of one deployment on one libvirt and machine (as
    hostagents sharing a machine do): what one made carries its name in
    its mark, and the other never adopts, changes or removes it."""
    other = hostagent_manager.HostAgentManager(fx.make_conf(
        tmp_path / 'other', host=hv.left.name('-other')), hv.bus)
    node = hv.node()
    hv.nodes.ensure(node, fx.OWNER, False)
    mark = '%s/%s' % (fx.OWNER, hv.agent.host)
    assert marks(hv, node) == (mark, mark, mark)
    before = ET.tostring(hv.domain(node['name']))

    with pytest.raises(exceptions.ResourceConflict) as refused:
        other.nodes.ensure(node, fx.OWNER, False)
    assert mark in str(refused.value)
    assert other.nodes.inspect([node], fx.OWNER)['nodes'] == {node['uuid']: [
        ['volume', node['volumes'][0]['name'], 'foreign'],
        ['port', node['nics'][0]['tap'], 'foreign'],
        ['domain', node['name'], 'foreign'],
        ['bmc', node['name'], 'missing']]}
    with pytest.raises(exceptions.ResourceConflict) as refused:
        other.nodes.remove(node, fx.OWNER)
    assert 'removed nothing' in str(refused.value)
    with pytest.raises(exceptions.ResourceConflict):
        other.virt.remove_domain(node['name'], other.nodes.mark(fx.OWNER))
    assert ET.tostring(hv.domain(node['name'])) == before
    assert hv.volume_files() == [node['volumes'][0]['name']]
    assert link_exists(node['nics'][0]['tap'])
    assert hv.nodes.ensure(node, fx.OWNER, False)['changed'] is False
    assert hv.nodes.remove(node, fx.OWNER)['changed'] is True
    assert hv.domain(node['name']) is None


def test_a_node_marked_by_an_older_hostagent_is_still_its_own(hv):
    """Marks made before they named the hostagent (the deployment's
    alone) are taken as this hostagent's: nothing to repair, nothing
    changed, everything removed."""
    node = hv.node()
    hv.nodes.ensure(node, fx.OWNER, False)
    hv.conn.lookupByName(node['name']).setMetadata(
        libvirt.VIR_DOMAIN_METADATA_ELEMENT, '<owner>%s</owner>' % fx.OWNER,
        'tenks', libvirt_driver.OWNER_NS, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    os.setxattr(os.path.join(hv.pool_dir, node['volumes'][0]['name']),
                libvirt_driver.OWNER_XATTR, fx.OWNER.encode())
    subprocess.run(['ip', 'link', 'set', node['nics'][0]['tap'], 'alias',
                    fx.OWNER], check=True)
    assert marks(hv, node) == (fx.OWNER,) * 3
    assert hv.nodes.inspect([node], fx.OWNER)['nodes'] == {node['uuid']: []}
    assert hv.nodes.ensure(node, fx.OWNER, False)['changed'] is False
    assert marks(hv, node) == (fx.OWNER,) * 3
    assert sorted(hv.nodes.remove(node, fx.OWNER)['removed']) == sorted(
        parts(node))
    assert hv.domain(node['name']) is None
    assert hv.volume_files() == []


def outcome(hv, method, *args):
    """Run the hostagent request ``method`` as a cast would; the outcome
    it reports ({'result': ...} or {'error': {'type', 'message'}})."""
    reported = []
    hv.agent.conductor = types.SimpleNamespace(
        report_result=lambda context, conductor, request_id, host,
        **outcome: reported.append(outcome))
    getattr(hv.agent, method)({}, 'req-' + secrets.token_hex(4), 'c1',
                              *args)
    [found] = reported
    return found


def refused(found):
    """The message of a ResourceConflict ``found`` reports."""
    assert found['error']['type'] == 'ResourceConflict', found
    return found['error']['message']


def test_a_bmc_is_made_only_for_a_domain_of_its_owner(hv):
    """ensure_bmc (API 1.9) on a domain made by hand, then on another
    deployment's: refused, no BMC made, and the other's BMC untouched."""
    # No NIC: the hypervisor's bridge is this deployment's.
    node = hv.node(nics=0)
    name, port = node['name'], node['bmc']['port']
    hv.conn.defineXML(
        '<domain type="qemu"><name>%s</name><memory unit="MiB">64</memory>'
        '<vcpu>1</vcpu><os><type>hvm</type></os></domain>' % name)
    assert 'it has no Tenks owner mark' in refused(outcome(
        hv, 'ensure_bmc', name, ADDRESS, port, 'admin', 'password',
        fx.OWNER))
    assert udp_free(port)
    assert hv.agent.bmc.list_bmcs() == []
    hv.conn.lookupByName(name).undefine()

    hv.nodes.ensure(node, fx.OTHER, False)
    other = hv.nodes.mark(fx.OTHER)
    assert other in refused(outcome(
        hv, 'ensure_bmc', name, ADDRESS, next(PORTS), 'admin', 'mine',
        fx.OWNER))
    assert ipmitool(port, 'power', 'status').returncode == 0
    assert hv.nodes.remove(node, fx.OTHER)['changed']


def test_a_bmc_of_another_deployment_is_never_removed(hv):
    """remove_bmc and remove_node of one deployment leave the BMC another
    made for its node of the same name: it still answers."""
    node = hv.node(nics=0)
    port = node['bmc']['port']
    hv.nodes.ensure(node, fx.OTHER, False)
    other = hv.nodes.mark(fx.OTHER)
    assert other in refused(outcome(hv, 'remove_bmc', node['name'],
                                    fx.OWNER))
    message = refused(outcome(hv, 'remove_node', node, fx.OWNER))
    assert 'BMC of domain %s' % node['name'] in message
    assert 'removed nothing' in message
    assert ipmitool(port, 'power', 'status').returncode == 0
    assert hv.nodes.inspect([node], fx.OWNER)['nodes'][node['uuid']] == [
        ['volume', node['volumes'][0]['name'], 'foreign'],
        ['domain', node['name'], 'foreign'],
        ['bmc', node['name'], 'foreign']]
    assert outcome(hv, 'remove_bmc', node['name'], fx.OTHER) == {
        'result': {'changed': True}}
    assert udp_free(port)
    assert hv.nodes.remove(node, fx.OTHER)['changed']


class Reports:
    """A stand-in conductor keeping each report_result."""

    target = messaging.Target(version='1.0')

    def __init__(self):
        self.received = {}
        self.cond = threading.Condition()

    def report_result(self, context, request_id, host, result=None,
                      error=None):
        with self.cond:
            self.received[request_id] = result or error
            self.cond.notify_all()

    def wait_for(self, request_ids, timeout=60):
        with self.cond:
            assert self.cond.wait_for(
                lambda: set(request_ids) <= set(self.received), timeout)
            return [self.received[r] for r in request_ids]


def test_node_requests_over_the_bus(hv):
    """Casts through the client reach the agent's handlers, requests of
    several nodes at once, and each reports its result."""
    bus = hv.bus
    host = hv.left.name('-hv')
    reports = Reports()
    servers = [bus.get_server(rpc.HOSTAGENT_TOPIC, host, [hv.agent]),
               bus.get_server(rpc.CONDUCTOR_TOPIC, host + '-c', [reports])]
    with contextlib.ExitStack() as stack:
        for server in servers:
            server.start()
            stack.callback(server.wait)
            stack.callback(server.stop)
        api = hostagent_rpcapi.HostAgentAPI(bus)
        nodes = [hv.node(i) for i in range(4)]
        for i, node in enumerate(nodes):
            api.cast(host, 'ensure_node', 'e%d' % i, host + '-c', node=node,
                     owner=fx.OWNER, force=False)
        results = reports.wait_for(['e%d' % i for i in range(4)])
        assert [r['created'] for r in results] == [parts(n) for n in nodes]
        for i, node in enumerate(nodes):
            api.cast(host, 'remove_node', 'r%d' % i, host + '-c', node=node,
                     owner=fx.OWNER)
        results = reports.wait_for(['r%d' % i for i in range(4)])
        assert all(r['changed'] for r in results), results
    assert hv.volume_files() == []
