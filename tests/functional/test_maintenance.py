"""Host maintenance on the real bus: a conductor and two hostagents on
RabbitMQ in one aggregate, each with a libvirt daemon of its own (so a
node can exist on both at once, as on two machines), real virtualbmc
and the standalone Ironic. Maintenance start moves the nodes with their
disks' data to the other host, where IPMI answers and Ironic has the
new driver_info and ports while the nodes stay available; a move that
fails half way is rolled back; maintenance stop --rebalance moves nodes
back. Two hostagents that share this machine's libvirt daemon refuse to
move a node between them before anything is done."""

import json
import subprocess
import time
from xml.etree import ElementTree as ET

import libvirt
import pytest

from tenks import policy
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df
from tests.functional import libvirt_fixtures as lf
from tests.functional import openstack_fixtures as of

pytestmark = pytest.mark.functional

# IPMI ports of this file: 9520-9559.
PORT_BASE = 9520
ADMIN = policy.admin_context()
PATTERN = '0x5a'


@pytest.fixture
def two_hosts(tmp_path, openstack_services):
    """The deployment, hvb's libvirt URI and the test's cluster, whose
    things are all the private libvirtd's clean-up removes."""
    env = cf.ClusterEnv(tmp_path, port_base=PORT_BASE)
    with lf.private_libvirtd(tmp_path / 'libvirt-b', env.ours) as uri_b:
        d = df.Deployment(tmp_path / 'deployment')
        env.state_dirs += d.state_dirs.values()
        env.uris.append(uri_b)
        hva, hvb = d.hosts
        with open(d.agent(hvb).config, 'a') as f:
            f.write('libvirt_uri = %s\npool_dir = %s\n' % (
                uri_b, tmp_path / 'pool-b'))
        with open(d.conductor.config, 'a') as f:
            f.write('[openstack]\nironic_url = %s\nplacement_url = %s\n'
                    'nova_url = %s\n' % (openstack_services['baremetal'],
                                         openstack_services['placement'],
                                         openstack_services['compute']))
        with d:
            yield d, uri_b, env


def node_map(api, cluster):
    return {n['name']: n for n in api.list_nodes(ADMIN, cluster)}


def domain(uri, name):
    """(UUID, whether it runs) of domain ``name``, None if undefined."""
    conn = libvirt.open(uri)
    try:
        dom = conn.lookupByName(name)
        return dom.UUIDString(), dom.isActive()
    except libvirt.libvirtError:
        return None
    finally:
        conn.close()


def volume_path(uri, pool, name):
    conn = libvirt.open(uri)
    try:
        return conn.storagePoolLookupByName(pool).storageVolLookupByName(
            name).path()
    finally:
        conn.close()


def qemu_io(path, command, *options):
    return subprocess.run(['qemu-io', '-f', 'qcow2', *options, '-c',
                           command, path],
                          capture_output=True, text=True, timeout=60)


def first_volume(uri, dom_name):
    conn = libvirt.open(uri)
    try:
        xml = ET.fromstring(conn.lookupByName(dom_name).XMLDesc())
        source = xml.find('devices/disk/source')
        if source.get('file'):
            return source.get('file')
        return volume_path(uri, source.get('pool'), source.get('volume'))
    finally:
        conn.close()


def ironic_view(cloud, node_uuid):
    node = cloud.baremetal.get_node(node_uuid)
    ports = list(cloud.baremetal.ports(node_id=node_uuid, details=True))
    return node, ports


def wait_state(deployment, host, state, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {h['host']: h for h in
                 deployment.api.list_hypervisors(ADMIN)}[host]
        if found['state'] == state:
            return found
        time.sleep(0.2)
    raise AssertionError('%s never became %s' % (host, state))


def test_maintenance_moves_nodes_and_rebalance_moves_them_back(
        two_hosts, cloud):
    d, uri_b, env = two_hosts
    api = d.api
    hva, hvb = d.hosts
    aggregate = 'mt-%s' % d.token
    left = []
    try:
        api.create_aggregate(ADMIN, aggregate)
        api.add_aggregate_host(ADMIN, aggregate, hva)
        api.add_aggregate_host(ADMIN, aggregate, hvb)
        # Both nodes on hva: hvb takes none for now.
        api.update_hypervisor(ADMIN, hvb, False, 'later')
        spec = env.spec(count=2, specs=[{
            'type': 'small', 'count': 2, 'node_name_prefix': env.node_prefix,
            'ironic_config': {'resource_class': 'tenks-move'}}])
        operation = d.wait(api.deploy_cluster(ADMIN, spec))
        assert operation['state'] == 'succeeded', operation['error']
        api.update_hypervisor(ADMIN, hvb, True)
        before = node_map(api, env.cluster)
        assert {n['hypervisor'] for n in before.values()} == {hva}
        tk0, tk1 = env.node_name(0), env.node_name(1)
        uuid0 = domain(cf.URI, tk0)[0]
        # Data on tk0's first disk, and tk0 running.
        written = qemu_io(first_volume(cf.URI, tk0),
                          'write -P %s 0 64k' % PATTERN)
        assert written.returncode == 0, written.stderr
        assert cf.ipmitool(before[tk0]['bmc_port'], 'power',
                           'on').returncode == 0
        assert domain(cf.URI, tk0)[1]

        done = d.cli('hypervisor', 'maintenance', 'start', '--reason',
                     'new fans', hva)
        assert done.returncode == 0, done.stdout + done.stderr
        assert 'Hypervisor %s in maintenance: 2 node(s) moved' % hva in (
            done.stdout)
        shown = wait_state(d, hva, 'maintenance')
        assert (shown['enabled'], shown['disabled_reason']) == (
            False, 'new fans')
        after = node_map(api, env.cluster)
        assert {n['hypervisor'] for n in after.values()} == {hvb}
        for name in (tk0, tk1):
            # Gone from hva; on hvb with its UUID and MACs.
            assert domain(cf.URI, name) is None
            assert domain(uri_b, name) is not None
            assert after[name]['uuid'] == before[name]['uuid']
            assert [n['mac'] for n in after[name]['nics']] == [
                n['mac'] for n in before[name]['nics']]
            assert after[name]['bmc_port'] != before[name]['bmc_port']
        assert domain(uri_b, tk0)[0] == uuid0
        # Running again at its new place, with its data.
        assert domain(uri_b, tk0)[1]
        assert not domain(uri_b, tk1)[1]
        # (Read-only, shared: the domain has it open.)
        read = qemu_io(first_volume(uri_b, tk0), 'read -P %s 0 64k'
                       % PATTERN, '-r', '-U')
        assert read.returncode == 0 and 'Pattern verification failed' \
            not in read.stdout, read.stdout + read.stderr
        # Its BMC answers at the new port and drives the new domain.
        status = cf.ipmitool(after[tk1]['bmc_port'], 'power', 'status')
        assert 'off' in status.stdout, status.stdout + status.stderr
        assert cf.ipmitool(after[tk1]['bmc_port'], 'power',
                           'on').returncode == 0
        assert domain(uri_b, tk1)[1]
        # Ironic dials the new BMC and ports; the nodes stay available.
        for name in (tk0, tk1):
            ironic, ports = ironic_view(cloud, after[name]['uuid'])
            assert ironic.provision_state == 'available'
            assert int(ironic.driver_info['ipmi_port']) == \
                after[name]['bmc_port']
            [port] = ports
            nic = after[name]['nics'][0]
            assert port.local_link_connection['switch_info'] == nic['bridge']
            assert port.local_link_connection['port_id'] == nic['tap']
            assert nic['bridge'].startswith('b')
        moves = [o for o in api.list_operations(ADMIN, env.cluster)
                 if o['kind'] == 'move']
        assert moves[-1]['progress'][tk0] == [5, 5]

        # Back out of maintenance: a move that fails half way (the tap
        # it would make at hva is somebody else's) leaves the node whole
        # at hvb.
        tap = 'p-a%s-0' % tk1
        subprocess.run(['ip', 'tuntap', 'add', 'dev', tap, 'mode', 'tap'],
                       check=True)
        try:
            done = d.cli('hypervisor', 'maintenance', 'stop', '--rebalance',
                         hva)
            assert done.returncode != 0
            assert 'rolled back to their old hypervisor' in done.stderr, \
                done.stderr
        finally:
            subprocess.run(['ip', 'link', 'del', tap], check=True)
        failed = node_map(api, env.cluster)
        assert failed == after
        assert domain(uri_b, tk1)[1] and domain(cf.URI, tk1) is None
        assert wait_state(d, hva, 'up')['enabled']

        # Rebalance: one node back to hva, running as it ran at hvb.
        api.update_hypervisor(ADMIN, hva, False, 'again')
        done = d.cli('hypervisor', 'maintenance', 'stop', '--rebalance',
                     hva)
        assert done.returncode == 0, done.stdout + done.stderr
        back = node_map(api, env.cluster)
        assert sorted(n['hypervisor'] for n in back.values()) == [hva, hvb]
        [name] = [n for n, node in back.items() if node['hypervisor'] == hva]
        assert domain(cf.URI, name)[1] and domain(uri_b, name) is None
        ironic, _ = ironic_view(cloud, back[name]['uuid'])
        assert ironic.provision_state == 'available'
        assert int(ironic.driver_info['ipmi_port']) == back[name]['bmc_port']
        shown = json.loads(d.cli('hypervisor', 'show', hva, '-f',
                                 'json').stdout)
        assert shown['state'] == 'up'

        operation = d.wait(api.teardown_cluster(ADMIN, env.cluster))
        assert operation['state'] == 'succeeded', operation['error']
    finally:
        for host in (hva, hvb):
            api.update_hypervisor(ADMIN, host, False)
            api.remove_aggregate_host(ADMIN, aggregate, host)
            api.update_hypervisor(ADMIN, host, True)
        api.delete_aggregate(ADMIN, aggregate)
        left = env.leftovers()
        left += of.remove_ironic_nodes(cloud, env.node_prefix)
        env.force_clean()
    assert left == [], 'the test left %s behind' % left


@pytest.fixture
def shared_libvirt(tmp_path):
    """A conductor and two hostagents (resource prefixes a and b) that
    both reach this machine's libvirt daemon, as hostagents sharing a
    machine do."""
    with df.Deployment(tmp_path / 'deployment') as d:
        yield d


def test_a_move_between_hostagents_of_one_libvirt_is_refused_first(
        shared_libvirt, tmp_path):
    d = shared_libvirt
    api = d.api
    hva, hvb = d.hosts
    env = cf.ClusterEnv(tmp_path, port_base=PORT_BASE + 20,
                        state_dirs=d.state_dirs.values())
    left = []
    try:
        api.update_hypervisor(ADMIN, hvb, False, 'later')
        operation = d.wait(api.deploy_cluster(ADMIN, env.spec(count=1)))
        assert operation['state'] == 'succeeded', operation['error']
        api.update_hypervisor(ADMIN, hvb, True)
        [before] = api.list_nodes(ADMIN, env.cluster)
        name = before['name']
        assert cf.ipmitool(before['bmc_port'], 'power', 'on').returncode == 0
        running = domain(cf.URI, name)
        assert running[1]

        done = d.cli('hypervisor', 'maintenance', 'start', hva)
        # Nothing was done: the node runs where it ran, recorded there,
        # and its BMC drives it.
        assert domain(cf.URI, name) == running
        assert api.list_nodes(ADMIN, env.cluster) == [before]
        status = cf.ipmitool(before['bmc_port'], 'power', 'status')
        assert 'Chassis Power is on' in status.stdout, status.stderr
        # The error names the libvirt daemon both hostagents reach.
        assert done.returncode != 0
        daemon = api.get_hypervisor(ADMIN, hva)['facts']['libvirt_daemon']
        assert daemon == api.get_hypervisor(ADMIN, hvb)['facts'][
            'libvirt_daemon']
        assert daemon.startswith('qemu:///system on ')
        assert '%s: it shares the libvirt %s with %s' % (
            hvb, daemon, hva) in done.stderr, done.stderr

        done = d.cli('hypervisor', 'maintenance', 'stop', hva)
        assert done.returncode == 0, done.stderr
        operation = d.wait(api.teardown_cluster(ADMIN, env.cluster))
        assert operation['state'] == 'succeeded', operation['error']
    finally:
        left = env.leftovers()
        env.force_clean()
    assert left == [], 'the test left %s behind' % left
