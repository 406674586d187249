"""Redfish BMCs from real sushy-tools emulators in front of real libvirt
domains, enrolled in the real standalone Ironic through its redfish
driver, beside IPMI nodes of virtualbmc.

Names carry the test's random token; IPMI ports 9000-9049 and Redfish
ports 9050-9099 only. Every test checks that it leaves no emulator
process and no emulator file (htpasswd, configuration, certificate).
"""

import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import libvirt
import pytest
import requests

from hostagent.drivers.bmc import processes
from hostagent.drivers.bmc import sushy
from tenks import exceptions
from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of
from tests.unit.test_redfish_emulator import Images

pytestmark = pytest.mark.functional

AUTH = ('admin', 'password')


class RedfishEnv(cf.ClusterEnv):
    """A test cluster whose leftovers include its Redfish emulators."""

    def _mine(self, path):
        # An emulator's directory is named <cluster>-<hash of owner>.
        return os.path.basename(path).startswith(self.cluster + '-')

    def sushy_dirs(self):
        root = os.path.join(self.state_dir, 'sushy')
        if not os.path.isdir(root):
            return []
        return sorted(os.path.join(root, name) for name in os.listdir(root)
                      if os.path.isdir(os.path.join(root, name))
                      and self._mine(name))

    def emulator_pids(self):
        """Every process of this cluster's emulators."""
        root = os.path.join(self.state_dir, 'sushy')
        pids = set()
        for pid in os.listdir('/proc'):
            if not pid.isdigit():
                continue
            with contextlib.suppress(OSError):
                with open('/proc/%s/environ' % pid, 'rb') as f:
                    for item in f.read().split(b'\0'):
                        name, _, value = item.partition(b'=')
                        if (name == sushy.MARKER_ENV.encode()
                                and value.decode().startswith(root)
                                and self._mine(value.decode())
                                and processes.alive(int(pid))):
                            pids.add(int(pid))
        return sorted(pids)

    def leftovers(self):
        found = super().leftovers()
        found += ['emulator process %d' % pid
                  for pid in self.emulator_pids()]
        found += ['emulator file %s' % os.path.join(path, name)
                  for path in self.sushy_dirs()
                  for name in sorted(os.listdir(path))]
        return found

    def force_clean(self):
        for pid in self.emulator_pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        # Its emulators' virtual media directories (and what is in them).
        pool_dir = self.conf.hostagent.pool_dir
        for name in os.listdir(pool_dir):
            if name.startswith(sushy.MEDIA_PREFIX + self.cluster + '-'):
                shutil.rmtree(os.path.join(pool_dir, name),
                              ignore_errors=True)
        super().force_clean()

    def ipmi_ok(self, port):
        return cf.ipmitool(port, 'power', 'status').returncode == 0

    def redfish_spec(self, port, count=1, **top):
        """``count`` Redfish nodes, their emulator on ``port``."""
        return self.spec(count=count, redfish_port=port, node_types={
            'small': {'memory_mb': 128, 'vcpus': 1,
                      'volumes': [{'capacity': '64MiB'}],
                      'physical_networks': ['physnet1'],
                      'ironic_driver': 'redfish'}}, **top)


@pytest.fixture
def env(tmp_path):
    with cf.checked(RedfishEnv(tmp_path, port_base=9000)) as cluster:
        yield cluster


@pytest.fixture
def images():
    """A web server of images (see Images)."""
    server = Images()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def cloud_env(tmp_path, openstack_services, cloud):
    cluster = RedfishEnv(tmp_path, port_base=9010)
    of.use_services(cluster, openstack_services)
    yield cluster
    left = of.cleaned_up(cluster, cloud)
    assert left == [], 'the test left %s behind' % left


def url(node, path=''):
    return 'http://%s:%d/redfish/v1/Systems/%s%s' % (
        node['bmc_address'], node['bmc_port'], node['bmc_system_id'], path)


def domain_state(name):
    conn = libvirt.open(cf.URI)
    try:
        return conn.lookupByName(name).state()[0]
    finally:
        conn.close()


def wait_state(name, state, timeout=20):
    deadline = time.monotonic() + timeout
    while domain_state(name) != state:
        assert time.monotonic() < deadline, 'domain %s not in state %d' % (
            name, state)
        time.sleep(0.1)


def test_redfish_power_and_boot_override_need_the_credentials(env):
    spec = env.redfish_spec(9050, redfish_password='s3cret-pw')
    env.deploy(spec)
    [node] = env.nodes()
    assert (node['bmc_type'], node['bmc_address'], node['bmc_port'],
            node['bmc_system_id']) == ('redfish', '127.0.0.1', 9050,
                                       node['uuid'])
    auth = ('admin', 's3cret-pw')
    reset = url(node, '/Actions/ComputerSystem.Reset')

    # Without credentials, or with wrong ones: 401, and nothing happens.
    assert requests.get(url(node)).status_code == 401
    assert requests.post(reset, json={'ResetType': 'On'},
                         auth=AUTH).status_code == 401
    assert requests.patch(url(node), json={'Boot': {
        'BootSourceOverrideTarget': 'Pxe'}}).status_code == 401
    assert domain_state(node['name']) == libvirt.VIR_DOMAIN_SHUTOFF

    system = requests.get(url(node), auth=auth)
    assert system.status_code == 200
    assert system.json()['Name'] == node['name']
    assert system.json()['PowerState'] == 'Off'

    override = requests.patch(url(node), auth=auth, json={'Boot': {
        'BootSourceOverrideTarget': 'Pxe',
        'BootSourceOverrideEnabled': 'Once'}})
    assert override.status_code == 204
    boot = requests.get(url(node), auth=auth).json()['Boot']
    assert boot['BootSourceOverrideTarget'] == 'Pxe'

    assert requests.post(reset, json={'ResetType': 'On'},
                         auth=auth).status_code == 204
    wait_state(node['name'], libvirt.VIR_DOMAIN_RUNNING)
    assert requests.post(reset, json={'ResetType': 'ForceOff'},
                         auth=auth).status_code == 204
    wait_state(node['name'], libvirt.VIR_DOMAIN_SHUTOFF)

    # The emulator's files are root's only, and hold no password.
    [emulator] = env.sushy_dirs()
    for root, _, files in os.walk(emulator):
        assert os.stat(root).st_mode & 0o777 == 0o700, root
        for name in files:
            path = os.path.join(root, name)
            assert os.stat(path).st_mode & 0o777 == 0o600, path
            with open(path, 'rb') as f:
                assert b's3cret-pw' not in f.read(), path

    # tenks node show prints the endpoint.
    shown = subprocess.run(
        [cf.TENKS, '--state-dir', env.state_dir, 'node', 'show',
         node['name'], '-f', 'json'], capture_output=True, text=True,
        check=True)
    fields = json.loads(shown.stdout)
    assert {k: fields[k] for k in ('bmc_type', 'bmc_address', 'bmc_port',
                                   'bmc_system_id')} == {
        'bmc_type': 'redfish', 'bmc_address': '127.0.0.1',
        'bmc_port': 9050, 'bmc_system_id': node['uuid']}

    env.teardown()
    assert env.emulator_pids() == []
    assert env.sushy_dirs() == []
    with pytest.raises(requests.ConnectionError):
        requests.get(url(node), auth=auth, timeout=5)
    # No file of the state directory holds the password any more.
    for root, _, files in os.walk(env.state_dir):
        for name in files:
            with open(os.path.join(root, name), 'rb') as f:
                assert b's3cret-pw' not in f.read(), name


def test_allow_list_follows_the_nodes_and_hides_other_clusters(env,
                                                               tmp_path):
    env.deploy(env.redfish_spec(9051, count=1))
    [first] = env.nodes()
    pid = env.emulator_pids()

    # Another cluster of the same state directory, other credentials:
    # a port of its own, and nothing of it through the first's.
    other = RedfishEnv(tmp_path, port_base=9020)
    other.conf = env.conf
    other.state_dir = env.state_dir
    with pytest.raises(exceptions.EndpointInUse) as refused:
        other.deploy(other.redfish_spec(9051))
    assert '127.0.0.1:9051' in str(refused.value)
    assert [n['name'] for n in env.nodes()] == [first['name']]
    try:
        other.deploy(other.redfish_spec(9052, redfish_password='other-pw'))
        [theirs] = other.nodes()
        mine = requests.get(url(first)[:-len(first['uuid']) - 1],
                            auth=AUTH).json()
        assert [m['@odata.id'] for m in mine['Members']] == [
            '/redfish/v1/Systems/%s' % first['uuid']]
        # Their system through my endpoint: refused, by UUID or name,
        # and their domain stays off.
        through_mine = dict(theirs, bmc_port=9051)
        for system in (theirs['uuid'], theirs['name']):
            assert requests.get(url(dict(through_mine,
                                         bmc_system_id=system)),
                                auth=AUTH).status_code == 404
        assert requests.post(
            url(through_mine, '/Actions/ComputerSystem.Reset'),
            json={'ResetType': 'On'}, auth=AUTH).status_code == 404
        assert domain_state(theirs['name']) == libvirt.VIR_DOMAIN_SHUTOFF
        # My credentials do not open theirs.
        assert requests.get(url(theirs), auth=AUTH).status_code == 401
        assert requests.get(url(theirs), auth=('admin', 'other-pw')
                            ).status_code == 200
    finally:
        other.teardown()
        left = other.leftovers()
        other.force_clean()
        assert left == []

    # A second node joins the allow-list without a restart.
    env.deploy(env.redfish_spec(9051, count=2))
    second = next(n for n in env.nodes() if n['uuid'] != first['uuid'])
    assert env.emulator_pids() == pid
    assert requests.get(url(second), auth=AUTH).status_code == 200
    # And leaves it with its node.
    env.deploy(env.redfish_spec(9051, count=1))
    assert requests.get(url(second), auth=AUTH).status_code == 404
    assert requests.get(url(first), auth=AUTH).status_code == 200
    env.teardown()
    assert env.emulator_pids() == []


def domain_xml(name):
    conn = libvirt.open(cf.URI)
    try:
        return conn.lookupByName(name).XMLDesc(
            libvirt.VIR_DOMAIN_XML_INACTIVE)
    finally:
        conn.close()


def test_an_emulator_lists_and_acts_on_its_own_cluster_only(env, tmp_path,
                                                            images):
    env.deploy(env.redfish_spec(9058))
    [mine] = env.nodes()
    other = RedfishEnv(tmp_path, port_base=9030)
    other.conf = env.conf
    other.state_dir = env.state_dir
    try:
        other.deploy(other.redfish_spec(9059, redfish_password='other-pw'))
        [theirs] = other.nodes()
        before = domain_xml(theirs['name'])
        base = 'http://127.0.0.1:9058/redfish/v1'

        def call(method, path, body=None):
            return requests.request(method, base + path, json=body,
                                    auth=AUTH, timeout=60)

        def links(path):
            answer = call('GET', path)
            assert answer.status_code == 200, (path, answer.text)
            return [m['@odata.id'] for m in answer.json()['Members']]

        # Every list holds my system and my manager only.
        assert links('/Systems') == ['/redfish/v1/Systems/' + mine['uuid']]
        assert links('/Managers') == ['/redfish/v1/Managers/'
                                      + mine['uuid']]
        [chassis] = [c[len('/redfish/v1'):] for c in links('/Chassis')]
        found = {key: [m['@odata.id'] for m in value] for key, value in
                 call('GET', chassis).json()['Links'].items()}
        assert found['ComputerSystems'] == ['/redfish/v1/Systems/'
                                            + mine['uuid']]
        assert found['ManagedBy'] == ['/redfish/v1/Managers/'
                                      + mine['uuid']]
        thermal = call('GET', chassis + '/Thermal').text
        assert mine['uuid'] in thermal and theirs['uuid'] not in thermal
        assert call('GET', '/Managers/' + mine['uuid']).status_code == 200

        # Their system and manager, by UUID or name, and all under them:
        # 404, nothing done, nothing downloaded.
        image = images.url + '/image.iso'
        refused = [('GET', '/Managers/' + theirs['name'], None)]
        for system in (theirs['uuid'], theirs['name']):
            refused += [(method, '/%s/%s%s' % (kind, system, sub), body)
                        for kind in ('Systems', 'Managers')
                        for method, sub, body in [
                            ('GET', '', None),
                            ('GET', '/VirtualMedia/Cd', None)]]
        system = '/Systems/' + theirs['uuid']
        refused += [
            ('GET', system + '/BIOS', None),
            ('GET', system + '/SecureBoot', None),
            ('GET', system + '/EthernetInterfaces', None),
            ('GET', system + '/SimpleStorage', None),
            ('POST', system + '/Actions/ComputerSystem.Reset',
             {'ResetType': 'On'}),
            ('PATCH', system, {'Boot': {'BootSourceOverrideTarget': 'Pxe',
                                        'BootSourceOverrideMode': 'UEFI'}}),
            ('PATCH', system, {'Boot': {'BootSourceOverrideTarget':
                                        'UefiHttp', 'HttpBootUri': image}}),
            ('PATCH', system + '/SecureBoot', {'SecureBootEnable': True}),
            ('PATCH', system + '/BIOS/Settings',
             {'Attributes': {'ProcTurboMode': 'Disabled'}}),
            ('POST', system + '/VirtualMedia/Cd/Actions/'
             'VirtualMedia.InsertMedia', {'Image': image}),
            ('POST', system + '/VirtualMedia/Cd/Actions/'
             'VirtualMedia.EjectMedia', {}),
            ('POST', '/UpdateService/Actions/UpdateService.SimpleUpdate',
             {'ImageURI': image, 'Targets': ['/redfish/v1' + system]}),
            ('POST', '/CertificateService/Actions/'
             'CertificateService.ReplaceCertificate',
             {'CertificateString': 'x', 'CertificateType': 'PEM',
              'CertificateUri': '/redfish/v1/Managers/%s/VirtualMedia/Cd/'
              'Certificates/Default' % theirs['uuid']})]
        for method, path, body in refused:
            answer = call(method, path, body)
            assert answer.status_code == 404, (method, path, answer.text)
        assert images.asked == []
        assert domain_state(theirs['name']) == libvirt.VIR_DOMAIN_SHUTOFF
        assert domain_xml(theirs['name']) == before
        # Their own emulator still serves it, with their credentials.
        assert requests.get(url(theirs), auth=('admin', 'other-pw')
                            ).status_code == 200

        # My own medium, its download cut short: refused, and nothing
        # of it stays in my emulator's directory.
        [emulator] = env.sushy_dirs()
        answer = call('POST', '/Systems/%s/VirtualMedia/Cd/Actions/'
                      'VirtualMedia.InsertMedia' % mine['uuid'],
                      {'Image': images.url + '/broken.iso'})
        assert answer.status_code >= 400
        assert images.asked == ['/broken.iso']
        assert os.listdir(os.path.join(emulator, 'downloads')) == []
    finally:
        other.teardown()
        left = other.leftovers()
        other.force_clean()
        assert left == []
    env.teardown()


def test_credentials_are_hashed_at_cost_12_and_a_new_password_counts_at_once(
        env):
    spec = env.redfish_spec(9060, redfish_password='first-pw')
    env.deploy(spec)
    [node] = env.nodes()
    [emulator] = env.sushy_dirs()
    with open(os.path.join(emulator, 'htpasswd')) as f:
        assert f.read().startswith('admin:$2b$12$')
    for _ in range(5):
        assert requests.get(url(node), auth=('admin', 'first-pw')
                            ).status_code == 200
    env.deploy(dict(spec, redfish_password='second-pw'))
    assert requests.get(url(node), auth=('admin', 'first-pw')
                        ).status_code == 401
    assert requests.get(url(node), auth=('admin', 'second-pw')
                        ).status_code == 200
    env.teardown()


def test_a_killed_emulator_is_drift_and_a_rerun_repairs_it(env):
    # Three nodes made at once start one emulator.
    spec = env.redfish_spec(9053, count=3)
    env.deploy(spec)
    nodes = env.nodes()
    [pid] = env.emulator_pids()
    for node in nodes:
        assert requests.get(url(node), auth=AUTH).status_code == 200
    os.kill(pid, signal.SIGKILL)
    assert processes.poll(lambda: not env.emulator_pids(), 5)
    with pytest.raises(requests.ConnectionError):
        requests.get(url(nodes[0]), auth=AUTH, timeout=5)
    result = env.deploy(spec)
    assert sorted((c['node'], c['resource'], c['action'], c['old'])
                  for c in result['plan']) == sorted(
        (n['name'], 'bmc', 'repair', 'stopped') for n in nodes)
    assert len(env.emulator_pids()) == 1
    for node in nodes:
        assert requests.get(url(node), auth=AUTH).status_code == 200
    assert env.deploy(spec)['changed'] == []
    env.teardown()


def test_a_port_held_by_another_process_is_refused_before_anything(env):
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 9054))
        sock.listen(1)
        with pytest.raises(exceptions.EndpointInUse) as refused:
            env.deploy(env.redfish_spec(9054))
    assert str(refused.value).startswith(
        'redfish_port: the Redfish endpoint 127.0.0.1:9054 on ')
    assert 'another process' in str(refused.value)
    assert env.nodes() == []
    assert env.leftovers() == []


def mixed_spec(env, port, **top):
    """One IPMI node and one Redfish node, both enrolled."""
    return env.spec(
        node_types={
            'ipmi': {'memory_mb': 128, 'vcpus': 1,
                     'volumes': [{'capacity': '64MiB'}],
                     'physical_networks': ['physnet1']},
            'rf': {'memory_mb': 128, 'vcpus': 1,
                   'volumes': [{'capacity': '64MiB'}],
                   'physical_networks': ['physnet1'],
                   'ironic_driver': 'redfish'}},
        specs=[{'type': t, 'count': 1, 'node_name_prefix': env.node_prefix
                + t[0], 'ironic_config': {'resource_class': 'tenks-mixed'}}
               for t in ('ipmi', 'rf')],
        redfish_port=port, **top)


def test_mixed_cluster_reaches_available_through_ipmi_and_redfish(
        cloud_env, cloud):
    spec = mixed_spec(cloud_env, 9055, redfish_password='rf-pw')
    cloud_env.deploy(spec)
    nodes = {n['bmc_type']: n for n in cloud_env.nodes()}
    assert sorted(nodes) == ['ipmi', 'redfish']
    assert 9010 <= nodes['ipmi']['bmc_port'] <= 9019
    assert nodes['ipmi']['bmc_system_id'] is None

    ipmi = cloud.baremetal.get_node(nodes['ipmi']['uuid'])
    assert (ipmi.driver, ipmi.provision_state) == ('ipmi', 'available')
    # The IPMI node answers IPMI, and only the IPMI node does.
    port = nodes['ipmi']['bmc_port']
    assert cf.ipmitool(port, 'power', 'on').returncode == 0
    wait_state(nodes['ipmi']['name'], libvirt.VIR_DOMAIN_RUNNING)
    assert cf.ipmitool(port, 'power', 'off').returncode == 0
    wait_state(nodes['ipmi']['name'], libvirt.VIR_DOMAIN_SHUTOFF)
    assert domain_state(nodes['redfish']['name']) == (
        libvirt.VIR_DOMAIN_SHUTOFF)
    redfish = cloud.baremetal.get_node(nodes['redfish']['uuid'])
    # Available: Ironic's redfish driver reached the emulator with the
    # credentials (manage checks them).
    assert (redfish.driver, redfish.provision_state) == ('redfish',
                                                          'available')
    assert redfish.power_state == 'power off'
    assert redfish.driver_info == {
        'redfish_address': 'http://127.0.0.1:9055',
        'redfish_system_id': '/redfish/v1/Systems/%s'
        % nodes['redfish']['uuid'],
        'redfish_username': 'admin', 'redfish_password': '******',
        'redfish_verify_ca': True}
    # Ironic powers it on through Redfish.
    cloud.baremetal.set_node_power_state(redfish, 'power on')
    of.wait_for_node(cloud, redfish.id)
    wait_state(nodes['redfish']['name'], libvirt.VIR_DOMAIN_RUNNING)
    cloud.baremetal.set_node_power_state(redfish, 'power off')
    of.wait_for_node(cloud, redfish.id)
    wait_state(nodes['redfish']['name'], libvirt.VIR_DOMAIN_SHUTOFF)

    assert cloud_env.deploy(spec)['changed'] == []
    cloud_env.teardown()
    assert cloud_env.leftovers() == []


def self_signed(tmp_path):
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'tenks')])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address('127.0.0.1'))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                           critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / 'tls.crt', tmp_path / 'tls.key'
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return str(cert_file), str(key_file)


def test_https_with_a_given_certificate_reaches_available(cloud_env, cloud,
                                                         tmp_path):
    certificate, key = self_signed(tmp_path)
    cloud_env.conf.set_override('redfish_tls_certificate', certificate,
                                group='hostagent')
    cloud_env.conf.set_override('redfish_tls_key', key, group='hostagent')
    spec = dict(mixed_spec(cloud_env, 9056, redfish_verify_ca=certificate))
    spec['specs'] = spec['specs'][1:]
    cloud_env.deploy(spec)
    [node] = cloud_env.nodes()
    https = url(node).replace('http://', 'https://')
    assert requests.get(https, auth=AUTH, verify=certificate
                        ).status_code == 200
    assert requests.get(https, verify=certificate).status_code == 401
    ironic = cloud.baremetal.get_node(node['uuid'])
    assert ironic.provision_state == 'available'
    assert ironic.driver_info['redfish_address'] == 'https://127.0.0.1:9056'
    assert ironic.driver_info['redfish_verify_ca'] == certificate
    [emulator] = cloud_env.sushy_dirs()
    assert os.stat(os.path.join(emulator, 'tls.key')).st_mode & 0o777 == (
        0o600)

    # The hostagent's configuration drops HTTPS: a re-run finds the
    # emulator serving otherwise and makes it again, and Ironic follows.
    for option in ('redfish_tls_certificate', 'redfish_tls_key'):
        cloud_env.conf.clear_override(option, group='hostagent')
    result = cloud_env.deploy(spec)
    assert [(c['resource'], c['action'], c['old'])
            for c in result['plan']] == [('bmc', 'repair', 'differs')]
    assert requests.get(url(node), auth=AUTH).status_code == 200
    assert not os.path.exists(os.path.join(emulator, 'tls.key'))
    ironic = cloud.baremetal.get_node(node['uuid'])
    assert ironic.driver_info['redfish_address'] == 'http://127.0.0.1:9056'
    assert ironic.provision_state == 'available'
    cloud_env.teardown()
    assert cloud_env.leftovers() == []


def test_a_node_changes_from_ipmi_to_redfish_in_place(cloud_env, cloud):
    spec = mixed_spec(cloud_env, 9057)
    spec['specs'] = spec['specs'][:1]
    cloud_env.deploy(spec)
    [before] = cloud_env.nodes()
    assert cloud_env.ipmi_ok(before['bmc_port'])

    spec['node_types']['ipmi']['ironic_driver'] = 'redfish'
    cloud_env.deploy(spec)
    [after] = cloud_env.nodes()
    assert (after['uuid'], after['name'], after['nics']) == (
        before['uuid'], before['name'], before['nics'])
    assert (after['bmc_type'], after['bmc_port'], after['bmc_system_id']) \
        == ('redfish', 9057, before['uuid'])
    # The IPMI BMC is gone with its IPMI host; the Redfish system answers.
    assert cf.ipmi_host_pid(cloud_env.state_dir) is None
    assert requests.get(url(after), auth=AUTH).status_code == 200
    ironic = cloud.baremetal.get_node(after['uuid'])
    assert (ironic.driver, ironic.provision_state) == ('redfish',
                                                        'available')
    assert 'ipmi_address' not in ironic.driver_info
    cloud.baremetal.set_node_power_state(ironic, 'power on')
    of.wait_for_node(cloud, ironic.id)
    wait_state(after['name'], libvirt.VIR_DOMAIN_RUNNING)
    cloud.baremetal.set_node_power_state(ironic, 'power off')
    of.wait_for_node(cloud, ironic.id)
    assert cloud_env.deploy(spec)['changed'] == []
    cloud_env.teardown()
    assert cloud_env.leftovers() == []
